//! NVRTC build of the kernels in `cuda/`: a module is one family of the manifest compiled
//! for one key width and index width under one tuning policy, its sources (carried in the
//! binary by `include_str!`) concatenated after a header of `#define`s. Loading a module
//! finds its entry points and sets each one's shared-memory limit from the manifest.
//!
//! A module is compiled to a cubin for the device's architecture (`sm_XY`), kept in the
//! disk cache of [`kernel_cache`](super::kernel_cache) so a later process only loads it.
//! Where the cubin path fails for a reason other than a compile error of the sources (an
//! NVRTC that does not know the architecture, a driver that refuses the cubin), the module
//! is compiled to PTX for `compute_XY` and the driver compiles that, as before.

use super::context::gpu_err;
use super::kernel_cache::{self, CompileFailure, CubinRequest, Origin};
use super::manifest::{Entry, Family};
use super::tuning::{module_policy, Arch, Policy};
use crate::{Error, Result};
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Which module: the kernel family, the key layout and the index width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ModuleSpec {
    pub family: Family,
    /// Bytes per key: 4 (one u32 word), 8, 16, 24 or 32 (1–4 u64 words).
    pub key_bytes: usize,
    /// 32 or 64.
    pub index_bits: u32,
}

impl ModuleSpec {
    /// Every module the engine can build (what CI compiles).
    pub fn all() -> Vec<ModuleSpec> {
        let mut v = Vec::new();
        for family in Family::ALL {
            if family == Family::Decode {
                // Reads neither width: one module.
                v.push(ModuleSpec { family, key_bytes: 8, index_bits: 32 });
                continue;
            }
            for key_bytes in [4, 8, 16, 24, 32] {
                for index_bits in [32, 64] {
                    v.push(ModuleSpec { family, key_bytes, index_bits });
                }
            }
        }
        v
    }

    pub fn index_bytes(&self) -> usize {
        self.index_bits as usize / 8
    }

    /// The full CUDA source of this module under `policy`.
    pub fn source(&self, policy: &Policy) -> String {
        let (words, word_bits) = if self.key_bytes == 4 { (1, 32) } else { (self.key_bytes / 8, 64) };
        let p = policy;
        let header = format!(
            "#define KEY_WORDS {words}\n#define KEY_WORD_BITS {word_bits}\n#define INDEX_BITS {}\n\
             #define THREADS {}\n#define IPT_BASIC {}\n#define IPT_TILED {}\n#define IPT_CIRC {}\n\
             #define CIRC_SLOTS {}\n#define CIRC_TILES {}\n#define IPT_KWAY {}\n#define KWAY_MIN_BLOCKS {}\n#define KWAY_COARSE {}\n\
             #define TILED_MIN_BLOCKS {}\n#define IPT_SORT {}\n#define TILED_NARROW {}\n#define NARROW_TIE_THREADS {}\n",
            self.index_bits,
            p.threads,
            p.ipt_basic,
            p.ipt_tiled,
            p.ipt_circ,
            p.threads * p.ipt_circ,
            p.circ_tiles,
            p.ipt_kway,
            p.kway_min_blocks,
            p.kway_coarse,
            p.tiled_min_blocks,
            p.ipt_sort,
            p.tiled_narrow,
            p.narrow_tie_threads
        );
        let sources = self
            .family
            .sources()
            .iter()
            .zip(self.family.source_files())
            .map(|(text, name)| super::tuning::replaced_source(name).map_or(Cow::Borrowed(*text), Cow::Owned));
        std::iter::once(Cow::Borrowed(header.as_str())).chain(sources).collect::<Vec<_>>().join("\n")
    }

    /// The program name NVRTC gets (without the `.cu`).
    fn program_name(&self) -> String {
        format!("corank_{}_k{}_i{}", self.family.name(), self.key_bytes, self.index_bits)
    }

    /// The request for this module's cubin for `arch` under `policy`.
    pub fn cubin_request(&self, arch: Arch, policy: &Policy) -> CubinRequest {
        let sm = format!("sm_{}{}", arch.major, arch.minor);
        CubinRequest {
            name: self.program_name(),
            source: self.source(policy),
            options: vec![format!("--gpu-architecture={sm}"), "--std=c++17".into()],
            arch: sm,
        }
    }

    /// This module's cubin for `arch` under `policy`: from the cache in `dir` when it holds
    /// a valid entry, else compiled by NVRTC (and written there).
    pub fn cubin(&self, arch: Arch, policy: &Policy, dir: Option<&Path>) -> std::result::Result<kernel_cache::Cubin, CompileFailure> {
        let req = self.cubin_request(arch, policy);
        let nvrtc = kernel_cache::nvrtc_version().map_err(CompileFailure::Other)?;
        kernel_cache::cubin_through_cache(dir, &req, nvrtc, || kernel_cache::compile_cubin(&req))
    }

    /// Compiles this module to PTX for `arch` under `policy`.
    pub fn compile(&self, arch: Arch, policy: &Policy) -> Result<Ptx> {
        let opts = CompileOptions {
            name: Some(format!("{}.cu", self.program_name())),
            options: vec![format!("--gpu-architecture={}", arch.compute()), "--std=c++17".into()],
            ..Default::default()
        };
        compile_ptx_with_opts(self.source(policy), opts)
            .map_err(|e| Error::Gpu(format!("NVRTC failed on the kernels for {self:?} ({}): {e:?}", arch.compute())))
    }
}

/// A loaded module: its entry points, the policy it was compiled with (which every plan
/// of a merge on it uses) and each entry point's dynamic shared memory.
pub(crate) struct Module {
    _module: Arc<CudaModule>,
    pub spec: ModuleSpec,
    pub policy: Policy,
    functions: HashMap<Entry, (CudaFunction, u32)>,
}

impl Module {
    /// Compiles `spec` for `arch` (or takes its cubin from the disk cache) and loads it
    /// into `ctx`.
    pub fn build(ctx: &Arc<CudaContext>, arch: Arch, spec: ModuleSpec) -> Result<Module> {
        let policy = module_policy(arch, spec.key_bytes, spec.index_bytes());
        let module = load(ctx, arch, spec, &policy, kernel_cache::default_dir().as_deref())?;
        Module::with_functions(module, spec, policy)
    }

    /// Loads `spec` into `ctx` only if the disk cache holds its cubin for `arch`: `None`
    /// where it does not (nothing is compiled) or the driver refuses it.
    pub fn from_cache(ctx: &Arc<CudaContext>, arch: Arch, spec: ModuleSpec) -> Result<Option<Module>> {
        let Some(dir) = kernel_cache::default_dir() else { return Ok(None) };
        let Ok(nvrtc) = kernel_cache::nvrtc_version() else { return Ok(None) };
        let policy = module_policy(arch, spec.key_bytes, spec.index_bytes());
        let Some(cubin) = kernel_cache::read_cached(&dir, &spec.cubin_request(arch, &policy), nvrtc) else { return Ok(None) };
        let t = Instant::now();
        match ctx.load_module(Ptx::from_binary(cubin)) {
            Ok(module) => {
                log::debug!("corank: {}: cubin from the cache loaded in {:.1?} (warm-up)", spec.program_name(), t.elapsed());
                Module::with_functions(module, spec, policy).map(Some)
            }
            Err(e) => {
                log::debug!("corank: {}: the driver refused the cached cubin ({e:?})", spec.program_name());
                Ok(None)
            }
        }
    }

    /// Finds `spec`'s entry points in `module` and allows each its dynamic shared memory.
    fn with_functions(module: Arc<CudaModule>, spec: ModuleSpec, policy: Policy) -> Result<Module> {
        let mut functions = HashMap::new();
        for e in spec.family.entries() {
            let f = module.load_function(e.name).map_err(gpu_err("finding a kernel"))?;
            let shared = e.dynamic_shared_bytes(&policy, spec.key_bytes, spec.index_bytes());
            if shared > 0 {
                f.set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared as i32)
                    .map_err(|err| Error::Gpu(format!("{}: allowing {shared} bytes of shared memory: {err:?}", e.name)))?;
            }
            functions.insert(e.entry, (f, shared));
        }
        Ok(Module { _module: module, spec, policy, functions })
    }

    fn get(&self, entry: Entry) -> Result<&(CudaFunction, u32)> {
        self.functions
            .get(&entry)
            .ok_or_else(|| Error::Gpu(format!("internal: {} is not in the {} module", entry.info().name, self.spec.family.name())))
    }

    /// The function handle of `entry`.
    pub fn function(&self, entry: Entry) -> Result<sys::CUfunction> {
        Ok(self.get(entry)?.0.cu_function())
    }

    /// The loaded function of `entry` (attributes, occupancy).
    pub fn cuda_function(&self, entry: Entry) -> Result<&CudaFunction> {
        Ok(&self.get(entry)?.0)
    }

    /// Dynamic shared bytes `entry`'s blocks get (0 for `entry`s not in this module).
    pub fn dynamic_shared_bytes(&self, entry: Entry) -> u32 {
        self.functions.get(&entry).map_or(0, |f| f.1)
    }
}

/// `spec`'s module loaded into `ctx`: its cubin for `arch` (from the cache in `dir`, else
/// compiled), or where that fails for a reason other than the sources, its PTX.
fn load(ctx: &Arc<CudaContext>, arch: Arch, spec: ModuleSpec, policy: &Policy, dir: Option<&Path>) -> Result<Arc<CudaModule>> {
    let name = spec.program_name();
    let t = Instant::now();
    match spec.cubin(arch, policy, dir) {
        Ok(cubin) => {
            let got = t.elapsed();
            let origin = if cubin.origin == Origin::Cache { "read from the cache" } else { "compiled" };
            let t = Instant::now();
            match ctx.load_module(Ptx::from_binary(cubin.bytes)) {
                Ok(module) => {
                    log::debug!("corank: {name}: cubin {origin} in {got:.1?}, loaded in {:.1?}", t.elapsed());
                    return Ok(module);
                }
                Err(e) => log::warn!("corank: {name}: the driver refused the {origin} cubin ({e:?}); using PTX instead"),
            }
        }
        Err(CompileFailure::Sources(msg)) => return Err(Error::Gpu(msg)),
        Err(CompileFailure::Other(msg)) => log::warn!("corank: {name}: no cubin ({msg}); using PTX instead"),
    }
    let t = Instant::now();
    let ptx = spec.compile(arch, policy)?;
    let compiled = t.elapsed();
    let t = Instant::now();
    let module = ctx.load_module(ptx).map_err(gpu_err("loading the kernels"))?;
    log::debug!("corank: {name}: PTX compiled in {compiled:.1?}, loaded (driver JIT) in {:.1?}", t.elapsed());
    Ok(module)
}

/// Compiles every module (every family, key width and index width) through NVRTC, with
/// no GPU needed: for sm_90 with its measured policy, and for two smaller devices (64 and
/// 99 KiB of shared memory a block) with the fallback policy, whose items per thread
/// differ.
pub(crate) fn compile_all() -> Result<()> {
    let small = Arch { major: 7, minor: 5, max_shared_per_block: 64 << 10 };
    let mid = Arch { major: 8, minor: 6, max_shared_per_block: 99 << 10 };
    for spec in ModuleSpec::all() {
        for arch in [Arch::SM90, mid, small] {
            let policy = super::tuning::policy(arch, spec.key_bytes, spec.index_bytes());
            if arch != Arch::SM90 && policy == super::tuning::policy(Arch::SM90, spec.key_bytes, spec.index_bytes()) {
                continue; // the same source as sm_90's for another architecture: nothing new
            }
            spec.compile(arch, &policy)?;
        }
    }
    Ok(())
}

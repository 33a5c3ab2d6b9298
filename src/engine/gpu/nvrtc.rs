//! NVRTC build of the kernels in `cuda/`: a module is one family of the manifest compiled
//! for one key width and index width under one tuning policy, its sources (carried in the
//! binary by `include_str!`) concatenated after a header of `#define`s. Loading a module
//! finds its entry points and sets each one's shared-memory limit from the manifest.

use super::context::gpu_err;
use super::manifest::{Entry, Family};
use super::tuning::{module_policy, Arch, Policy};
use crate::{Error, Result};
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::Arc;

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
             #define CIRC_SLOTS {}\n#define CIRC_TILES {}\n#define IPT_KWAY {}\n#define KWAY_COARSE {}\n\
             #define TILED_MIN_BLOCKS {}\n",
            self.index_bits,
            p.threads,
            p.ipt_basic,
            p.ipt_tiled,
            p.ipt_circ,
            p.threads * p.ipt_circ,
            p.circ_tiles,
            p.ipt_kway,
            p.kway_coarse,
            p.tiled_min_blocks
        );
        std::iter::once(header.as_str()).chain(self.family.sources().iter().copied()).collect::<Vec<_>>().join("\n")
    }

    /// Compiles this module to PTX for `arch` under `policy`.
    pub fn compile(&self, arch: Arch, policy: &Policy) -> Result<Ptx> {
        let opts = CompileOptions {
            name: Some(format!("corank_{}_k{}_i{}.cu", self.family.name(), self.key_bytes, self.index_bits)),
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
    /// Compiles `spec` for `arch` and loads it into `ctx`.
    pub fn build(ctx: &Arc<CudaContext>, arch: Arch, spec: ModuleSpec) -> Result<Module> {
        let policy = module_policy(arch, spec.key_bytes, spec.index_bytes());
        let ptx = spec.compile(arch, &policy)?;
        let module = ctx.load_module(ptx).map_err(gpu_err("loading the kernels"))?;
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

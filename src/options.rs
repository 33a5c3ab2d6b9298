//! The engine options every entry point shares: which engine, which GPU kernel, which
//! device, from what size the GPU pays, and what happens when the GPU is missing or fails.
//!
//! One struct, [`EngineOptions`], is embedded in [`crate::MergeOptions`] (the batch API),
//! [`crate::frontier::FrontierOptions`] (the streaming merge), the DataFusion settings
//! (`corank.engine`, `corank.kernel`, `corank.device`, `corank.gpu_min_rows`) and the
//! command line (`--engine`, `--kernel`, `--device`, `--gpu-min-rows`), with one default each.
//! The library reads no environment variable: the command line and the tests do.

use crate::error::{Error, Result};

/// Below this many rows `Engine::Auto` stays on the CPU: the transfer and launch overheads
/// are not repaid (measured on the H200 machine, docs/PERFORMANCE.md).
pub const GPU_MIN_ROWS: usize = 1 << 20;

/// Which engine merges the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Engine {
    /// The GPU where one is usable and the input is large enough, else the CPU.
    #[default]
    Auto,
    /// The merge path on rayon threads.
    Cpu,
    /// The co-rank kernels on the GPU; an error where no GPU is usable.
    Gpu,
}

/// Which GPU kernel merges (the CPU engine ignores it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Kernel {
    /// The fastest measured for the run count (docs/PERFORMANCE.md, H200).
    #[default]
    Auto,
    /// Tree of pairwise merges; per-thread co-rank and serial merge on global memory.
    Basic,
    /// Tree of pairwise merges; one co-rank pair per block, tile in shared memory.
    Tiled,
    /// Tree of pairwise merges; circular buffers that reload only what was consumed.
    Circular,
    /// Single pass for up to 64 runs: k-way co-rank per tile, merge in shared memory.
    KWay,
}

/// What `Engine::Auto` does when no GPU is usable or the GPU fails mid-merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnGpuFailure {
    /// Merge on the CPU instead, with one log line: no data is lost.
    #[default]
    UseCpu,
    /// Return the error, and send every `Auto` merge to the GPU whatever its size (the
    /// GPU tests: `CORANK_REQUIRE_GPU=1` on the command line and in the test suite).
    Error,
}

/// The engine choice and its knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineOptions {
    pub engine: Engine,
    pub kernel: Kernel,
    /// The CUDA device ordinal the GPU engine uses.
    pub device: usize,
    /// `Engine::Auto` uses the GPU for merges (or streaming rounds) of at least this many rows.
    pub gpu_min_rows: usize,
    pub on_gpu_failure: OnGpuFailure,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self { engine: Engine::Auto, kernel: Kernel::Auto, device: 0, gpu_min_rows: GPU_MIN_ROWS, on_gpu_failure: OnGpuFailure::UseCpu }
    }
}

impl EngineOptions {
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }
    pub fn with_kernel(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
        self
    }
    pub fn with_device(mut self, device: usize) -> Self {
        self.device = device;
        self
    }
    pub fn with_gpu_min_rows(mut self, rows: usize) -> Self {
        self.gpu_min_rows = rows;
        self
    }
    pub fn with_on_gpu_failure(mut self, on_failure: OnGpuFailure) -> Self {
        self.on_gpu_failure = on_failure;
        self
    }
}

/// Names as the settings and flags spell them.
macro_rules! named {
    ($ty:ident, $what:literal, $($variant:ident = $name:literal),+) => {
        impl $ty {
            /// Every value, in the order the help lists them.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];
            pub fn name(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
        impl std::str::FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                let s = s.to_ascii_lowercase();
                $(if s == $name { return Ok($ty::$variant); })+
                Err(Error::InvalidArgument(format!(concat!("unknown ", $what, " '{}' ({})"), s, [$($name),+].join(", "))))
            }
        }
    };
}

named!(Engine, "engine", Auto = "auto", Cpu = "cpu", Gpu = "gpu");
named!(Kernel, "kernel", Auto = "auto", Basic = "basic", Tiled = "tiled", Circular = "circular", KWay = "kway");

/// The engine's name, then the kernel and device where they are not the defaults
/// (`gpu`, `gpu kernel=kway device=1`), as EXPLAIN shows it.
impl std::fmt::Display for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.engine)?;
        if self.kernel != Kernel::Auto {
            write!(f, " kernel={}", self.kernel)?;
        }
        if self.device != 0 {
            write!(f, " device={}", self.device)?;
        }
        Ok(())
    }
}

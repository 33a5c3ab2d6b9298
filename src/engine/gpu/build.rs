//! NVRTC build of the kernels in `cuda/`: the sources are carried in the binary
//! (`include_str!`) and concatenated after a header of `#define`s that picks the key width,
//! the index width and the tuning (one module per key width and index width).

use super::tuning::{tuning, KWAY_COARSE, THREADS};
use crate::{Error, Result};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

const COMMON: &str = include_str!("../../../cuda/common.cuh");
const CO_RANK: &str = include_str!("../../../cuda/co_rank.cuh");
const MERGE_BASIC: &str = include_str!("../../../cuda/merge_basic.cu");
const MERGE_TILED: &str = include_str!("../../../cuda/merge_tiled.cu");
const MERGE_CIRCULAR: &str = include_str!("../../../cuda/merge_circular.cu");
const PARTITION_KWAY: &str = include_str!("../../../cuda/partition_kway.cu");
const MERGE_KWAY: &str = include_str!("../../../cuda/merge_kway.cu");

/// Kernel entry points every module holds.
pub const FUNCTIONS: [&str; 10] = [
    "merge_basic",
    "merge_tiled_only",
    "merge_tiled_first",
    "merge_tiled_inner",
    "merge_tiled_last",
    "merge_circular",
    "partition_kway_coarse",
    "partition_kway",
    "partition_2way",
    "merge_kway",
];

/// Which module: the key layout and the index width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModuleSpec {
    /// Bytes per key: 4 (one u32 word), 8, 16, 24 or 32 (1–4 u64 words).
    pub key_bytes: usize,
    /// 32 or 64.
    pub index_bits: u32,
}

impl ModuleSpec {
    /// Every module the engine can use (what CI compiles).
    pub fn all() -> Vec<ModuleSpec> {
        let mut v = Vec::new();
        for key_bytes in [4, 8, 16, 24, 32] {
            for index_bits in [32, 64] {
                v.push(ModuleSpec { key_bytes, index_bits });
            }
        }
        v
    }

    pub fn index_bytes(&self) -> usize {
        self.index_bits as usize / 8
    }

    /// The full CUDA source of this module.
    pub fn source(&self) -> String {
        let (words, word_bits) = if self.key_bytes == 4 { (1, 32) } else { (self.key_bytes / 8, 64) };
        let t = tuning(self.key_bytes);
        let header = format!(
            "#define KEY_WORDS {words}\n#define KEY_WORD_BITS {word_bits}\n#define INDEX_BITS {}\n\
             #define THREADS {THREADS}\n#define IPT_BASIC {}\n#define IPT_TILED {}\n#define IPT_CIRC {}\n\
             #define CIRC_SLOTS {}\n#define CIRC_TILES {}\n#define IPT_KWAY {}\n#define KWAY_COARSE {KWAY_COARSE}\n\
             #define TILED_MIN_BLOCKS {}\n",
            self.index_bits,
            t.ipt_basic,
            t.ipt_tiled,
            t.ipt_circ,
            THREADS * t.ipt_circ,
            t.circ_tiles,
            t.ipt_kway,
            t.tiled_min_blocks
        );
        [header.as_str(), COMMON, CO_RANK, MERGE_BASIC, MERGE_TILED, MERGE_CIRCULAR, PARTITION_KWAY, MERGE_KWAY]
            .join("\n")
    }

    /// Compiles this module to PTX for `arch` (e.g. "compute_90").
    pub fn compile(&self, arch: &'static str) -> Result<Ptx> {
        let opts = CompileOptions {
            arch: Some(arch),
            name: Some(format!("corank_k{}_i{}.cu", self.key_bytes, self.index_bits)),
            options: vec!["--std=c++17".into()],
            ..Default::default()
        };
        compile_ptx_with_opts(self.source(), opts)
            .map_err(|e| Error::Gpu(format!("NVRTC failed on the kernels for {self:?}: {e:?}")))
    }
}

/// The NVRTC architecture option for compute capability `major.minor`, leaked once per
/// distinct capability (cudarc wants a `&'static str`).
pub fn arch_for(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (9, 0) => "compute_90",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        _ => Box::leak(format!("compute_{major}{minor}").into_boxed_str()),
    }
}

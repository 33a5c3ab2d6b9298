//! corank: a stable k-way merge of sorted Arrow runs.
//!
//! Data flow: Arrow sort columns → `keys` (normalized fixed-width key words) → an engine
//! (`engine`: the CPU merge path on rayon threads, or the GPU co-rank kernels, chosen by
//! [`EngineOptions`]) → a [`Permutation`] → gathered RecordBatches ([`gather()`]); keys that
//! tie on their words are ordered exactly by `order`. Inputs that arrive batch by batch
//! merge in rounds ([`FrontierMerge`]); [`parquet`] and [`datafusion`] build on that.
//!
//! The merge is **stable, always**: equal keys keep run order, then row order within a run,
//! so the output is the stable sort of the concatenation of the runs in input order (what
//! DataFusion's `SortPreservingMergeExec` yields with its round-robin tie breaker off).
//!
//! ```
//! use std::sync::Arc;
//! use arrow::array::{Int64Array, RecordBatch, StringArray};
//! use corank::{merge, MergeOptions, SortKey};
//!
//! let run = |k: Vec<i64>, v: Vec<&str>| {
//!     RecordBatch::try_from_iter([
//!         ("k", Arc::new(Int64Array::from(k)) as _),
//!         ("v", Arc::new(StringArray::from(v)) as _),
//!     ]).unwrap()
//! };
//! let runs = [run(vec![1, 3, 5], vec!["a", "b", "c"]), run(vec![2, 3, 4], vec!["d", "e", "f"])];
//! let out = merge(&runs, &[SortKey::asc("k")], &MergeOptions::default()).unwrap();
//! let v = out[0].column(1).as_any().downcast_ref::<StringArray>().unwrap();
//! let v: Vec<_> = v.iter().map(Option::unwrap).collect();
//! assert_eq!(v, ["a", "d", "b", "e", "f", "c"]); // the 3 of run 0 before the 3 of run 1
//! ```

#![deny(missing_docs)]
// Some of the crate's own code serves only the CLI (feature `cli`) or the GPU engine: a build
// without them leaves it unused. The full build (every feature, CI's lints) still denies
// dead code.
#![cfg_attr(not(all(feature = "cli", feature = "gpu")), allow(dead_code, unused_imports))]

mod api;
mod cancel;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "datafusion")]
pub mod datafusion;
mod engine;
mod error;
mod frontier;
mod gather;
mod keys;
mod options;
mod order;
#[cfg(feature = "parquet")]
pub mod parquet;
mod permutation;
#[cfg(feature = "parquet")]
mod show_bytes;
mod sort;
mod sort_key;

// The sources shared with tests, benches and examples by `#[path]` (the CLI's data generator
// and units) and the unit tests moved in from `tests/` name the crate as its users do.
extern crate self as corank;
// The integration tests' helpers (the oracle, random data), shared with the unit tests.
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod common;

/// Rows per output batch wherever corank chooses the size: the default of
/// [`MergeOptions::batch_size`], [`SortBatchesOptions`]'s and
/// [`FrontierOptions`]'s, and the batches a Parquet merge or sort
/// hands its writer. Arrow's kernels and Parquet's readers work well at this size; the
/// DataFusion nodes follow the session's `batch_size` instead.
pub const DEFAULT_BATCH_SIZE: usize = 8192;

pub use api::{merge, merge_columns, merge_permutation, MergeOptions};
pub use cancel::Cancel;
pub use engine::{gpu_availability, gpu_device_name, merge_keys, warm_up_gpu};
pub use error::{Error, Result, Setting};
pub use frontier::{FrontierMerge, FrontierOptions, MergedChunk, MergedRound, RoundInput};
pub use gather::gather;
pub use keys::{is_supported, KeyColumn};
pub use options::{Devices, Engine, EngineOptions, Kernel, OnGpuFailure, GPU_MIN_ROWS};
pub use permutation::{Indices, Permutation};
pub use sort::{sort_batches, sort_columns, sort_permutation, SortBatchesOptions};
pub use sort_key::SortKey;

/// The GPU engine below the Arrow API (feature `gpu`): key words merged from and into host
/// memory registered with the driver, with no staging copy ([`gpu::Registered`],
/// [`gpu::merge_gpu_into`]; docs/gpu.md "Registered host memory",
/// `examples/registered_merge.rs`).
#[cfg(feature = "gpu")]
pub mod gpu {
    pub use crate::engine::gpu::{availability, devices_shown, merge_gpu, merge_gpu_into, GpuIndex, GpuOptions, HostMemory, Registered};
}

/// Not API: what the GPU and gather benchmarks (`benches/gpu.rs`, `benches/gather.rs`) time
/// below the public API. It may change in any release; nothing else may use it.
#[doc(hidden)]
pub mod __bench {
    pub use crate::engine::cpu::merge_cpu;
    #[cfg(feature = "gpu")]
    pub use crate::engine::gpu;
    pub use crate::engine::sort::sort_cpu;
    pub use crate::keys::{encode_runs, KeyColumn};
    /// Parquet pages decompressed on the device against the CPU (`benches/gpu.rs`, `nvcomp`).
    #[cfg(feature = "parquet")]
    pub use crate::parquet::device::bench as nvcomp;
    pub use crate::permutation::RunLocator;

    /// The optimization level this build of corank (and, the profile being one for every
    /// crate, of its dependencies) was compiled at: `"3"` for `release`. A table measured
    /// from a lower level compares unoptimized CPU code with the device; the benches say so.
    pub const OPT_LEVEL: &str = env!("CORANK_BUILD_OPT_LEVEL");

    /// A line for a bench table measured from this build: empty for an optimized one, else
    /// why its ratios to the CPU are not results.
    pub fn opt_level_warning() -> String {
        match OPT_LEVEL {
            "3" => String::new(),
            l => format!(
                "NOT A RESULT: built at opt-level {l}, not `release`'s 3: the CPU's side (parquet-rs, arrow, corank) ran \
                 unoptimized code, so its ratios to the device are not fair ones"
            ),
        }
    }
}

#[cfg(test)]
mod build_tests {
    /// The build script records the level cargo compiles at, and the benches' warning
    /// appears exactly when it is not `release`'s.
    #[test]
    fn the_opt_level_is_recorded() {
        let level = super::__bench::OPT_LEVEL;
        assert!(["0", "1", "2", "3", "s", "z"].contains(&level), "{level}");
        assert_eq!(super::__bench::opt_level_warning().is_empty(), level == "3");
    }
}

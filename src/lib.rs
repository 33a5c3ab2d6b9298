//! corank: a stable k-way merge of sorted Arrow runs.
//!
//! Data flow: Arrow sort columns → [`keys`] (normalized fixed-width key words) → an engine
//! ([`engine`]: the CPU merge path on rayon threads, or the GPU co-rank kernels, chosen by
//! [`EngineOptions`]) → a [`Permutation`] → gathered RecordBatches ([`gather()`]); keys that
//! tie on their words are ordered exactly by `order`. Inputs that arrive batch by batch
//! merge in rounds ([`frontier`]); [`parquet`] and [`datafusion`] build on that.
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

mod api;
#[cfg(feature = "datafusion")]
pub mod datafusion;
pub mod engine;
pub mod error;
pub mod frontier;
pub mod gather;
pub mod keys;
mod options;
pub(crate) mod order;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod permutation;
#[cfg(feature = "parquet")]
mod show_bytes;
mod sort;
mod sort_key;

/// Rows per output batch wherever corank chooses the size: the default of
/// [`MergeOptions::batch_size`], [`SortBatchesOptions`]'s and
/// [`FrontierOptions`](frontier::FrontierOptions)'s, and the batches a Parquet merge or sort
/// hands its writer. Arrow's kernels and Parquet's readers work well at this size; the
/// DataFusion nodes follow the session's `batch_size` instead.
pub const DEFAULT_BATCH_SIZE: usize = 8192;

pub use api::{merge, merge_columns, merge_permutation, MergeOptions};
pub use error::{Error, Result, Setting};
pub use gather::gather;
pub use options::{Devices, Engine, EngineOptions, Kernel, OnGpuFailure, GPU_MIN_ROWS};
pub use permutation::{Indices, Permutation};
pub use sort::{sort_batches, sort_columns, sort_permutation, SortBatchesOptions};
pub use sort_key::SortKey;

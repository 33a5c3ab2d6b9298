//! corank: a stable k-way merge of sorted Arrow runs.
//!
//! Data flow: Arrow sort columns → [`keys`] (normalized fixed-width key words) → an engine
//! ([`merge`]: the CPU merge path on rayon threads, or the GPU co-rank kernels) → a
//! [`Permutation`] → gathered RecordBatches ([`gather()`]).
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

pub mod api;
pub mod datafusion;
pub mod datagen;
pub mod error;
pub mod gather;
pub mod gpu;
pub mod keys;
pub mod merge;
pub mod parquet;
pub mod stream;

pub use api::{merge, merge_columns, merge_permutation, MergeOptions, SortKey};
pub use error::{Error, Result};
pub use gather::gather;
pub use keys::KeySpec;
pub use merge::{Engine, Indices, Permutation};

//! corank: a stable k-way merge of sorted Arrow runs.
//!
//! Data flow: Arrow sort columns → [`keys`] (normalized fixed-width key words) → an engine
//! ([`merge`]: the CPU merge path on rayon threads, or the GPU co-rank kernels) → a
//! [`Permutation`] → gathered RecordBatches.

pub mod error;
pub mod gpu;
pub mod keys;
pub mod merge;

pub use error::{Error, Result};
pub use merge::{Indices, Permutation};

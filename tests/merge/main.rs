//! The merge through the library's API, with no GPU and no DataFusion: the oracle property
//! suite, key encoding, the co-rank reference, bad and degenerate input, and Parquet
//! passthrough.
//!
//! Each directory under `tests/` is one test binary (`merge`, `cli`, `datafusion`, `gpu`),
//! its files modules of it: every release test binary links arrow, Parquet and DataFusion
//! anew, so 26 of them cost CI ~25 minutes of its 2 cores; four cost a fraction of that.
//! Modules of one binary run side by side, so none may rely on process-wide state another
//! changes (environment variables, the current directory, a global logger or thread pool).

#[path = "../common/mod.rs"]
mod common;

mod api;
mod co_rank;
mod keys;
mod oracle;
#[cfg(feature = "parquet")]
mod passthrough;

//! The merge through the library's public API: the oracle property suite, bad and
//! degenerate input, and the same on the GPU engine (`gpu_api`: skips without a GPU unless
//! `CORANK_REQUIRE_GPU=1`). Tests of the engine, the keys and the Parquet passthrough from
//! the inside are unit tests beside that code (`src/engine/tests/`, `src/keys/tests.rs`,
//! `src/parquet/merge/tests/`).
//!
//! Each directory under `tests/` is one test binary (`merge`, `cli`, `datafusion`),
//! its files modules of it: every release test binary links arrow, Parquet and DataFusion
//! anew, so 26 of them cost CI ~25 minutes of its 2 cores; three cost a fraction of that.
//! Modules of one binary run side by side, so none may rely on process-wide state another
//! changes (environment variables, the current directory, a global logger or thread pool).

#[path = "../common/mod.rs"]
mod common;

mod api;
#[cfg(feature = "gpu")]
mod gpu_api;
mod oracle;

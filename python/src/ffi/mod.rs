//! The Arrow C data interface (`ArrowSchema`, `ArrowArray`, `ArrowArrayStream`), taken from
//! arrow-rs 59.3.2 with only the crate paths changed.
//!
//! arrow-rs has these as `arrow::ffi` and `arrow::ffi_stream` behind its `ffi` feature,
//! which corank's shared build leaves off: turning it on in this member would change the
//! features of arrow-schema, arrow-data and arrow-array for every crate above them, so a
//! build of the Python package would compile arrow, parquet and DataFusion a second time
//! (docs/building.md). The code is arrow's own, so the conversions are exactly arrow's;
//! drop this module for `arrow::ffi` once the shared build turns the feature on.
#![allow(clippy::all, clippy::undocumented_unsafe_blocks, dead_code, unused_imports, missing_docs)]

pub mod array;
pub mod data;
pub mod schema;
pub mod stream;

//! The crate's error type: every bad input and every engine failure ends here, never in a panic.

use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong in a merge.
#[derive(Debug)]
pub enum Error {
    /// `merge` was called with sort keys but a run lacks a key column.
    MissingColumn { run: usize, column: String },
    /// A run's schema differs from the first run's.
    SchemaMismatch { run: usize, detail: String },
    /// A key column has a type corank cannot encode.
    UnsupportedType { column: String, data_type: DataType },
    /// A run is not sorted by the sort keys (found by the optional check).
    NotSorted { run: usize, row: usize, detail: String },
    /// Bad arguments (no sort keys, batch size 0, ...).
    InvalidArgument(String),
    /// The GPU engine was asked for and cannot run (no driver, no device, no NVRTC),
    /// or `CORANK_REQUIRE_GPU=1` forbids falling back to the CPU.
    GpuUnavailable(String),
    /// A GPU call failed (out of memory, launch failure, compile error).
    Gpu(String),
    /// An error from arrow (gathering the payload, converting rows).
    Arrow(ArrowError),
    /// A file could not be read or written (missing, not Parquet, truncated, I/O).
    File { path: PathBuf, detail: String },
    /// A Parquet input is not sorted by the merge key (found by the order check).
    /// `row` counts from 0 within the row group.
    FileNotSorted { path: PathBuf, row_group: usize, row: usize, detail: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::MissingColumn { run, column } => {
                write!(f, "sort column '{column}' is missing from run {run}")
            }
            Error::SchemaMismatch { run, detail } => {
                write!(f, "run {run} has a schema that differs from run 0: {detail}")
            }
            Error::UnsupportedType { column, data_type } => write!(
                f,
                "sort column '{column}' has type {data_type}, which corank cannot encode as a sort key"
            ),
            Error::NotSorted { run, row, detail } => {
                write!(f, "run {run} is not sorted: row {row} sorts before row {}: {detail}", row.saturating_sub(1))
            }
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::GpuUnavailable(m) => write!(f, "GPU engine not available: {m}"),
            Error::Gpu(m) => write!(f, "GPU error: {m}"),
            Error::Arrow(e) => write!(f, "arrow error: {e}"),
            Error::File { path, detail } => write!(f, "{}: {detail}", path.display()),
            Error::FileNotSorted { path, row_group, row, detail } => {
                write!(f, "{}: not sorted: row group {row_group}, row {row}: {detail}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Arrow(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ArrowError> for Error {
    fn from(e: ArrowError) -> Self {
        Error::Arrow(e)
    }
}

impl From<Error> for ArrowError {
    fn from(e: Error) -> Self {
        match e {
            Error::Arrow(e) => e,
            other => ArrowError::ExternalError(Box::new(other)),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

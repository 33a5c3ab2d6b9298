//! The crate's error type: every bad input and every engine failure ends here, never in a panic.
//!
//! A usage error that is about one option names it as data, a [`Setting`], not in its text:
//! [`Display`](std::fmt::Display) names it by the library's field in backticks
//! (`memory_limit`, `overwrite`), and a program that knows the option by another name builds
//! its own sentence from the variant's fields (the `corank` binary names its flags).

use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use std::fmt;
use std::path::PathBuf;

/// An option of the library that a usage error is about ([`Error::InvalidSetting`],
/// [`Error::SettingNeeded`], [`Error::OutputExists`], [`Error::SchemaDiffers`]).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Replace an existing output file.
    Overwrite,
    /// The bytes a Parquet merge or sort may hold.
    MemoryLimit,
    /// The rows of an output row group.
    RowGroupRows,
    /// The most buffered Arrow bytes of an output row group.
    RowGroupBytes,
    /// Match the inputs' columns by name.
    UnionByName,
    /// The sort key (`by`; parsed from an ORDER BY text).
    SortKey,
    /// The output's codec.
    Compression,
    /// The codec of a sort's spilled runs.
    SpillCompression,
}

impl Setting {
    /// The setting's name in the library: the field (or argument) that holds it.
    pub fn field(self) -> &'static str {
        match self {
            Setting::Overwrite => "overwrite",
            Setting::MemoryLimit => "memory_limit",
            Setting::RowGroupRows => "row_group_rows",
            Setting::RowGroupBytes => "row_group_bytes",
            Setting::UnionByName => "union_by_name",
            Setting::SortKey => "by",
            Setting::Compression => "compression",
            Setting::SpillCompression => "spill_compression",
        }
    }
}

/// Everything that can go wrong in a merge.
#[non_exhaustive]
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
    /// Bad arguments (no sort keys, batch size 0, ...) that no [`Setting`] names.
    InvalidArgument(String),
    /// `setting` has a value that cannot work; `detail` follows the setting's name: the
    /// value and why (`1.0 KiB is too small ...`, `"zip": unknown codec 'zip' ...`).
    InvalidSetting { setting: Setting, detail: String },
    /// `setting` must be given: `detail` says why corank cannot do without it (the inputs
    /// declare no common sort order, ...).
    SettingNeeded { setting: Setting, detail: String },
    /// The output file exists and [`Setting::Overwrite`] is off.
    OutputExists { path: PathBuf },
    /// A Parquet input's schema differs from the first input's, which
    /// [`Setting::UnionByName`] may reconcile; `detail` says how it differs.
    SchemaDiffers { path: PathBuf, detail: String },
    /// The GPU engine was asked for and cannot run (no driver, no device, no NVRTC),
    /// or [`OnGpuFailure::Error`](crate::OnGpuFailure::Error) forbids falling back to the CPU.
    GpuUnavailable(String),
    /// A GPU call failed (out of memory, launch failure, compile error).
    Gpu(String),
    /// An error from arrow (gathering the payload, converting rows).
    Arrow(ArrowError),
    /// An I/O error, on `path` where there is one; `context` says what corank was doing
    /// (may be empty). The error is the [`source`](std::error::Error::source).
    Io { path: Option<PathBuf>, context: String, source: std::io::Error },
    /// Parquet could not read or write a file (`path` where there is one; `context` as for
    /// [`Error::Io`]). The error is the [`source`](std::error::Error::source).
    #[cfg(feature = "parquet")]
    Parquet { path: Option<PathBuf>, context: String, source: parquet::errors::ParquetError },
    /// A file is not what it must be, with no lower-level error behind it: missing, a
    /// directory without Parquet files, a schema that differs, fewer rows than its footer
    /// counts.
    File { path: PathBuf, detail: String },
    /// A Parquet input is not sorted by the merge key (found by the order check).
    /// `row` counts from 0 within the row group.
    FileNotSorted { path: PathBuf, row_group: usize, row: usize, detail: String },
    /// A bug: an invariant of corank does not hold (a worker thread panicked, a stage ended
    /// early). Not caused by the input; worth a report.
    Internal(String),
}

/// `path: context: source`, leaving out what is absent.
fn with_place(f: &mut fmt::Formatter<'_>, path: &Option<PathBuf>, context: &str, source: &dyn fmt::Display) -> fmt::Result {
    if let Some(path) = path {
        write!(f, "{}: ", path.display())?;
    }
    if !context.is_empty() {
        write!(f, "{context}: ")?;
    }
    write!(f, "{source}")
}

/// What [`Error::SchemaDiffers`] suggests, with `name` the way the reader names
/// [`Setting::UnionByName`].
pub fn schema_hint(name: &str) -> String {
    format!("{name} merges files whose columns differ in order, numeric width or presence")
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
            Error::UnsupportedType { column, data_type } => {
                write!(f, "sort column '{column}' has type {data_type}, which corank cannot encode as a sort key")
            }
            Error::NotSorted { run, row, detail } => {
                write!(f, "run {run} is not sorted: row {row} sorts before row {}: {detail}", row.saturating_sub(1))
            }
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::InvalidSetting { setting, detail } => write!(f, "invalid argument: `{}` {detail}", setting.field()),
            Error::SettingNeeded { setting, detail } => write!(f, "invalid argument: {detail}; set `{}`", setting.field()),
            Error::OutputExists { path } => {
                write!(f, "invalid argument: output {} exists; set `{}` to replace it", path.display(), Setting::Overwrite.field())
            }
            Error::SchemaDiffers { path, detail } => {
                write!(f, "{}: {detail} ({})", path.display(), schema_hint(&format!("`{}`", Setting::UnionByName.field())))
            }
            Error::GpuUnavailable(m) => write!(f, "GPU engine not available: {m}"),
            Error::Gpu(m) => write!(f, "GPU error: {m}"),
            Error::Arrow(e) => write!(f, "arrow error: {e}"),
            Error::Io { path, context, source } => with_place(f, path, context, source),
            #[cfg(feature = "parquet")]
            Error::Parquet { path, context, source } => with_place(f, path, context, source),
            Error::File { path, detail } => write!(f, "{}: {detail}", path.display()),
            Error::FileNotSorted { path, row_group, row, detail } => {
                write!(f, "{}: not sorted: row group {row_group}, row {row}: {detail}", path.display())
            }
            Error::Internal(m) => write!(f, "internal error (a bug in corank): {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Arrow(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            #[cfg(feature = "parquet")]
            Error::Parquet { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ArrowError> for Error {
    fn from(e: ArrowError) -> Self {
        Error::Arrow(e)
    }
}

impl Error {
    /// An I/O error on `path`, while doing `context` (may be empty).
    pub fn io(path: impl Into<PathBuf>, context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { path: Some(path.into()), context: context.into(), source }
    }

    /// A Parquet error on `path`, while doing `context` (may be empty).
    #[cfg(feature = "parquet")]
    pub fn parquet(path: impl Into<PathBuf>, context: impl Into<String>, source: parquet::errors::ParquetError) -> Self {
        Error::Parquet { path: Some(path.into()), context: context.into(), source }
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

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
///
/// ```
/// use corank::{Error, Setting};
///
/// let e = Error::InvalidSetting { setting: Setting::MemoryLimit, detail: "1.0 KiB is too small".into() };
/// assert_eq!(e.to_string(), "invalid argument: `memory_limit` 1.0 KiB is too small");
/// // A program that names the option otherwise words its own message from the fields.
/// if let Error::InvalidSetting { setting: Setting::MemoryLimit, detail } = &e {
///     assert_eq!(format!("--memory-limit {detail}"), "--memory-limit 1.0 KiB is too small");
/// }
/// ```
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
///
/// Each variant's doc ends with the exit code of the `corank` binary for it (`corank::cli`:
/// 2 usage, 3 an input not sorted, 1 anything else).
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use corank::{merge, Error, MergeOptions, SortKey};
///
/// let run = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![1, 2])) as _)]).unwrap();
/// let err = merge(&[run], &[SortKey::asc("nope")], &MergeOptions::default()).unwrap_err();
/// assert!(matches!(err, Error::MissingColumn { run: 0, ref column } if column == "nope"));
/// ```
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// `merge` was called with sort keys but a run lacks a key column.
    /// CLI exit code 2.
    MissingColumn {
        /// The run (or input batch) lacking it, counted from 0.
        run: usize,
        /// The sort key's column name.
        column: String,
    },
    /// A run's schema differs from the first run's.
    /// CLI exit code 1.
    SchemaMismatch {
        /// The run whose schema differs from run 0's, counted from 0.
        run: usize,
        /// How it differs: the column count, or the first column whose name or type differs.
        detail: String,
    },
    /// A key column has a type corank cannot encode.
    /// CLI exit code 2.
    UnsupportedType {
        /// The sort key's column name.
        column: String,
        /// Its type ([`is_supported`](crate::is_supported) is `false` for it).
        data_type: DataType,
    },
    /// A run is not sorted by the sort keys (found by the optional check).
    /// CLI exit code 3.
    NotSorted {
        /// The run (or streaming input) out of order, counted from 0.
        run: usize,
        /// The first row out of order, counted from 0 within the run: it sorts before
        /// row `row - 1`.
        row: usize,
        /// What is out of order: the two keys as text, or a batch that starts below the
        /// previous batch's last key.
        detail: String,
    },
    /// Bad arguments (no sort keys, batch size 0, ...) that no [`Setting`] names.
    /// CLI exit code 2.
    InvalidArgument(String),
    /// `setting` has a value that cannot work; `detail` follows the setting's name: the
    /// value and why (`1.0 KiB is too small ...`, `"zip": unknown codec 'zip' ...`).
    /// CLI exit code 2.
    InvalidSetting {
        /// The option whose value cannot work.
        setting: Setting,
        /// The value and why it cannot work, without the setting's name.
        detail: String,
    },
    /// `setting` must be given: `detail` says why corank cannot do without it (the inputs
    /// declare no common sort order, ...).
    /// CLI exit code 2.
    SettingNeeded {
        /// The option that must be given.
        setting: Setting,
        /// Why corank cannot do without it, without the setting's name.
        detail: String,
    },
    /// The output file exists and [`Setting::Overwrite`] is off.
    /// CLI exit code 2.
    OutputExists {
        /// The output file.
        path: PathBuf,
    },
    /// A Parquet input's schema differs from the first input's, which
    /// [`Setting::UnionByName`] may reconcile; `detail` says how it differs.
    /// CLI exit code 1.
    SchemaDiffers {
        /// The input whose schema differs.
        path: PathBuf,
        /// How it differs from the first input's schema.
        detail: String,
    },
    /// The GPU engine was asked for and cannot run (no driver, no device, no NVRTC),
    /// or [`OnGpuFailure::Error`](crate::OnGpuFailure::Error) forbids falling back to the CPU.
    /// CLI exit code 1.
    GpuUnavailable(String),
    /// A GPU call failed (out of memory, launch failure, compile error).
    /// CLI exit code 1.
    Gpu(String),
    /// An error from arrow (gathering the payload, converting rows).
    /// CLI exit code 1.
    Arrow(ArrowError),
    /// An I/O error, on `path` where there is one; `context` says what corank was doing
    /// (may be empty). The error is the [`source`](std::error::Error::source).
    /// CLI exit code 1.
    Io {
        /// The file or directory, where the error is about one (`None`: stdout, ...).
        path: Option<PathBuf>,
        /// What corank was doing; may be empty.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Parquet could not read or write a file (`path` where there is one; `context` as for
    /// [`Error::Io`]). The error is the [`source`](std::error::Error::source).
    /// CLI exit code 1.
    #[cfg(feature = "parquet")]
    Parquet {
        /// The file, where the error is about one (`None`: no file named, e.g. a schema
        /// that Parquet cannot represent).
        path: Option<PathBuf>,
        /// What corank was doing; may be empty.
        context: String,
        /// The Parquet error.
        source: parquet::errors::ParquetError,
    },
    /// A file is not what it must be, with no lower-level error behind it: missing, a
    /// directory without Parquet files, a schema that differs, fewer rows than its footer
    /// counts.
    /// CLI exit code 1.
    File {
        /// The file (or input name) the error is about.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// A Parquet input is not sorted by the merge key (found by the order check).
    /// `row` counts from 0 within the row group.
    /// CLI exit code 3.
    FileNotSorted {
        /// The input file.
        path: PathBuf,
        /// The row group holding the row out of order, counted from 0.
        row_group: usize,
        /// The first row out of order, counted from 0 within the row group (0 also where
        /// the row group starts below the previous row group's last key).
        row: usize,
        /// What is out of order: the two keys as text, or a row group that starts below the
        /// previous row group's last key.
        detail: String,
    },
    /// The work was cancelled through its [`Cancel`](crate::Cancel) token (a Parquet merge's or
    /// sort's `cancel` option): it stopped and removed its temporary output and spill files;
    /// an existing output is untouched.
    /// CLI exit code 1 (the `corank` binary itself never cancels: Ctrl-C ends it by the
    /// signal, after `corank::parquet::remove_temp_file_on_signal`'s handler cleaned up).
    Cancelled,
    /// A bug: an invariant of corank does not hold (a worker thread panicked, a stage ended
    /// early). Not caused by the input; worth a report.
    /// CLI exit code 1.
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
            Error::Cancelled => write!(f, "cancelled: stopped before the end, nothing written"),
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

/// `std::result::Result` with corank's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! corank's errors as the Python exceptions of `corank._errors`: one class per kind of
//! failure under `corank.Error`, the message as the library (and so the command line) says
//! it, and the details (run, row, path, row group, setting) as attributes.

use arrow::error::ArrowError;
use corank::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;

/// The exception for `e`: its class in `corank._errors`, its message, its details.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| match build(py, &e) {
        Ok(err) => err,
        Err(fallback) => fallback,
    })
}

/// An arrow error met at the boundary (importing or exporting data).
pub fn arrow_error(e: ArrowError) -> PyErr {
    to_py(Error::Arrow(e))
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn build(py: Python<'_>, e: &Error) -> PyResult<PyErr> {
    let details = PyDict::new(py);
    let class = match e {
        Error::NotSorted { run, row, .. } => {
            details.set_item("run", run)?;
            details.set_item("row", row)?;
            "NotSortedError"
        }
        Error::FileNotSorted { path, row_group, row, .. } => {
            details.set_item("path", path_str(path))?;
            details.set_item("row_group", row_group)?;
            details.set_item("row", row)?;
            "NotSortedError"
        }
        Error::SchemaMismatch { run, .. } => {
            details.set_item("run", run)?;
            "SchemaError"
        }
        Error::SchemaDiffers { path, .. } => {
            details.set_item("path", path_str(path))?;
            details.set_item("setting", "union_by_name")?;
            "SchemaError"
        }
        Error::MissingColumn { run, column } => {
            details.set_item("run", run)?;
            details.set_item("column", column)?;
            "ColumnNotFoundError"
        }
        Error::UnsupportedType { column, data_type } => {
            details.set_item("column", column)?;
            details.set_item("data_type", data_type.to_string())?;
            "UnsupportedTypeError"
        }
        Error::InvalidArgument(_) => "InvalidOptionError",
        Error::InvalidSetting { setting, .. } | Error::SettingNeeded { setting, .. } => {
            details.set_item("setting", setting.field())?;
            "InvalidOptionError"
        }
        Error::OutputExists { path } => {
            details.set_item("path", path_str(path))?;
            details.set_item("setting", "overwrite")?;
            "OutputExistsError"
        }
        Error::GpuUnavailable(_) => "GpuUnavailableError",
        Error::Gpu(_) => "GpuError",
        Error::Arrow(_) => "ArrowError",
        Error::Io { path, source, .. } => {
            if let Some(p) = path {
                details.set_item("path", path_str(p))?;
            }
            if let Some(errno) = source.raw_os_error() {
                details.set_item("errno", errno)?;
            }
            "FileError"
        }
        Error::Parquet { path, .. } => {
            if let Some(p) = path {
                details.set_item("path", path_str(p))?;
            }
            "ParquetError"
        }
        Error::File { path, .. } => {
            details.set_item("path", path_str(path))?;
            "FileError"
        }
        Error::Internal(_) => "InternalError",
        // `corank::Error` is non-exhaustive: a kind added later is still a corank.Error.
        _ => "Error",
    };
    let module = py.import("corank._errors")?;
    let class = module.getattr(class)?;
    let instance = class.call((e.to_string(),), Some(&details))?;
    Ok(PyErr::from_value(instance))
}

/// A failure of the bindings themselves (a worker thread that died).
pub fn internal(message: impl Into<String>) -> PyErr {
    let message = message.into();
    let e = to_py(Error::Internal(message.clone()));
    if Python::attach(|py| e.is_instance_of::<pyo3::exceptions::PyException>(py)) { e } else { PyRuntimeError::new_err(message) }
}

//! `corank._corank`: the extension module behind the Python package `corank` (see
//! `corank/__init__.py` for the API and docs/python.md for the guide).
//!
//! Arrow data crosses by the Arrow PyCapsule interface ([`convert`]), every call runs on a
//! thread of its own with the GIL released while the caller handles signals ([`run`]), and
//! corank's errors become the exceptions of `corank._errors` ([`errors`]).

use pyo3::prelude::*;

mod convert;
mod errors;
mod files;
mod memory;
mod options;
mod run;
mod sql;
mod stream;

/// NVRTC's version `(major, minor)` as corank's GPU engine loads the library, or `None`
/// where it cannot be loaded.
#[pyfunction]
fn nvrtc_version() -> Option<(i32, i32)> {
    // SAFETY: only tries to load libnvrtc (dlopen), which reports absence as false.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: libnvrtc is loaded (above); nvrtcVersion writes two ints through valid pointers.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }.result().ok()?;
    Some((major, minor))
}

/// The `corank` command line (`corank::cli`) on `args` (the program name first), with the
/// GIL released; its exit code. The command installs its own signal handlers: Ctrl-C
/// removes a temporary output and ends the process, as the binary does.
#[pyfunction]
fn cli_main(py: Python<'_>, args: Vec<std::ffi::OsString>) -> u8 {
    let code = py.detach(|| corank::cli::main_with_args(args));
    // `ExitCode` shows no number: the one that equals it (the command uses 0 to 3).
    (0..=u8::MAX).find(|&c| std::process::ExitCode::from(c) == code).unwrap_or(1)
}

#[pymodule]
fn _corank(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<convert::ArrowStream>()?;
    m.add_class::<sql::Rule>()?;
    m.add_class::<sql::Settings>()?;
    m.add_class::<sql::SortedRowGroups>()?;
    m.add_function(wrap_pyfunction!(memory::merge, m)?)?;
    m.add_function(wrap_pyfunction!(memory::sort, m)?)?;
    m.add_function(wrap_pyfunction!(stream::merge_stream, m)?)?;
    m.add_function(wrap_pyfunction!(files::merge_files, m)?)?;
    m.add_function(wrap_pyfunction!(files::sort_files, m)?)?;
    m.add_function(wrap_pyfunction!(nvrtc_version, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add("DEFAULT_BATCH_SIZE", corank::DEFAULT_BATCH_SIZE)?;
    m.add("GPU_MIN_ROWS", corank::GPU_MIN_ROWS)?;
    Ok(())
}

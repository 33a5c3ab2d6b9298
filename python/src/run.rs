//! corank's work on a thread of its own, the GIL released, while the calling thread wakes
//! every [`POLL`] to run Python's signal handlers (Ctrl-C raises `KeyboardInterrupt` there)
//! and to report progress.
//!
//! Cancelling: the file functions hand the library [`Shared::cancel`], a `corank::Cancel`
//! token (their options' `cancel`). On Ctrl-C (or an exception from the progress callback)
//! the calling thread sets it and waits for the work to return: the library stops within
//! about 100 ms, its temporary output and spill directory removed, and the exception is
//! raised then. The in-memory functions have no token: on Ctrl-C they return at once, and
//! their thread finishes on its own and drops its result.

use pyo3::prelude::*;
use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// How often the calling thread looks for signals and progress.
pub const POLL: Duration = Duration::from_millis(50);

/// What the work shares with the calling thread.
#[derive(Default)]
pub struct Shared {
    /// Set when the caller gave up (Ctrl-C, or the progress callback raised); the file
    /// functions pass it to the library.
    pub cancel: corank::Cancel,
    /// Progress: units done so far, out of `total`.
    pub done: AtomicUsize,
    pub total: AtomicUsize,
}

/// How the caller stops waiting when it is interrupted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Wait for the work to stop (the library checks [`Shared::cancel`]): files are involved.
    WaitForCancel,
    /// Return at once; the work finishes on its own thread and its result is dropped.
    Abandon,
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_string()
    }
}

/// Runs `work` on a new thread with the GIL released, and waits for it while handling
/// signals and calling `progress(done, total)` (when given) on this thread. A Python
/// exception from either (KeyboardInterrupt included) cancels the work and is raised.
pub fn run<T: Send + 'static>(
    py: Python<'_>,
    on_interrupt: OnInterrupt,
    progress: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce(&Shared) -> corank::Result<T> + Send + 'static,
) -> PyResult<T> {
    let shared = Arc::new(Shared::default());
    let (tx, rx) = mpsc::channel();
    // Behind a mutex: the closures that wait with the GIL released must be `Send`.
    let rx = std::sync::Mutex::new(rx);
    let recv_timeout =
        |rx: &std::sync::Mutex<mpsc::Receiver<_>>| rx.lock().map_err(|_| mpsc::RecvTimeoutError::Disconnected)?.recv_timeout(POLL);
    let theirs = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("corank-python".into())
        .spawn(move || {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&theirs)));
            let _ = tx.send(result);
        })
        .map_err(|e| crate::errors::internal(format!("could not start a thread: {e}")))?;
    let mut reported = (usize::MAX, usize::MAX);
    let mut report = || -> PyResult<()> {
        let Some(progress) = progress else { return Ok(()) };
        let now = (shared.done.load(Ordering::Relaxed), shared.total.load(Ordering::Relaxed));
        if now == reported {
            return Ok(());
        }
        reported = now;
        progress.call1(now).map(|_| ())
    };
    loop {
        let result = match py.detach(|| recv_timeout(&rx)) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // A signal that arrives after the work is done is left to Python, which
                // raises it right after this call returns.
                if let Err(e) = py.check_signals().and_then(|_| report()) {
                    shared.cancel.cancel();
                    if on_interrupt == OnInterrupt::WaitForCancel {
                        // The library stops within about 100 ms and removes its temporary
                        // files first. Whatever it returns (`Cancelled`, or its result if it
                        // was done) gives way to the exception.
                        py.detach(|| {
                            if let Ok(rx) = rx.lock() {
                                let _ = rx.recv();
                            }
                        });
                    }
                    return Err(e);
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(crate::errors::internal("the worker thread ended without a result"));
            }
        };
        return match result {
            Ok(Ok(value)) => {
                report()?;
                Ok(value)
            }
            Ok(Err(e)) => Err(crate::errors::to_py(e)),
            Err(p) => Err(crate::errors::internal(format!("corank panicked: {}", panic_message(p.as_ref())))),
        };
    }
}

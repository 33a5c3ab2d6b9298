//! corank's work on a thread of its own, the GIL released, while the calling thread wakes
//! every [`POLL`] to run Python's signal handlers (Ctrl-C raises `KeyboardInterrupt` there)
//! and to report progress.
//!
//! Cancelling: the library has no cancellation hook. The file functions cancel through their
//! progress callback instead: once the flag is set, the next progress report unwinds out of
//! the library ([`check_cancel`], `resume_unwind`, so no panic message), which drops the
//! writer and with it the temporary output (and a sort's spill directory) on its way out,
//! as any error does. The calling thread waits for that before it raises. The in-memory
//! functions cannot be stopped: on Ctrl-C they return at once, and their thread finishes
//! on its own and drops its result.

use pyo3::prelude::*;
use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// How often the calling thread looks for signals and progress.
pub const POLL: Duration = Duration::from_millis(50);

/// The payload of the unwind that cancels a file merge or sort.
struct Cancelled;

/// What the work shares with the calling thread.
#[derive(Default)]
pub struct Shared {
    /// Set when the caller gave up (Ctrl-C, or the progress callback raised).
    pub cancel: AtomicBool,
    /// Progress: units done so far, out of `total`.
    pub done: AtomicUsize,
    pub total: AtomicUsize,
}

/// Unwinds out of the library if the work was cancelled. Call it only where the library
/// calls back (the file functions' progress), never on the caller's own stack.
pub fn check_cancel(shared: &Shared) {
    if shared.cancel.load(Ordering::Relaxed) {
        std::panic::resume_unwind(Box::new(Cancelled));
    }
}

/// How the caller stops waiting when it is interrupted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Wait for the work to stop (it checks [`Shared::cancel`]): files are involved.
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
                    shared.cancel.store(true, Ordering::Relaxed);
                    if on_interrupt == OnInterrupt::WaitForCancel {
                        // The work stops at its next progress report; its temporary files go
                        // with it.
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
            Err(p) if p.is::<Cancelled>() => Err(crate::errors::internal("cancelled")),
            Err(p) => Err(crate::errors::internal(format!("corank panicked: {}", panic_message(p.as_ref())))),
        };
    }
}

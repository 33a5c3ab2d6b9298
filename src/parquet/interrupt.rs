//! Removing the output's temporary file when a signal ends the process (SIGINT from Ctrl-C,
//! SIGTERM, SIGHUP). On every other path, dropping the writer removes the file. A signal,
//! though, ends the process without running destructors.
//!
//! The writer registers its temporary path here before it creates the file, and keeps it
//! registered for as long as the file may exist ([`TempGuard`]): a signal at any moment
//! finds the file registered (or unlinks a path not yet created, which does nothing).
//! A program that wants the cleanup calls [`remove_temp_file_on_signal`] once; the `corank`
//! binary does. A library does not take over a process's signals on its own.
//!
//! The handler does only async-signal-safe work. It unlinks the registered path, a C string
//! leaked for the life of the process, so the handler never reads freed memory. Then it
//! restores the default action and raises the signal again, so the exit status still says
//! which signal ended the process. One path is registered at a time: the newest writer's.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The registered path: a leaked, NUL-terminated C string, or 0.
static TEMP_PATH: AtomicUsize = AtomicUsize::new(0);

/// Keeps `path` registered until dropped.
#[derive(Debug)]
pub(crate) struct TempGuard(usize);

impl TempGuard {
    pub(crate) fn register(path: &Path) -> TempGuard {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) {
                // Leaked on purpose: a handler may still hold an older pointer (a few bytes
                // per output file).
                let p = c.into_raw() as usize;
                TEMP_PATH.store(p, Ordering::SeqCst);
                return TempGuard(p);
            }
        }
        let _ = path;
        TempGuard(0)
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        // Only if still ours: a newer writer's registration stays.
        let _ = TEMP_PATH.compare_exchange(self.0, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    let p = TEMP_PATH.load(Ordering::SeqCst);
    // SAFETY: async-signal-safe calls only; `p` is 0 or a NUL-terminated string leaked for
    // the life of the process (never freed, so never dangling).
    unsafe {
        if p != 0 {
            libc::unlink(p as *const libc::c_char);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the registered temporary
/// output file, then end the process as the signal would have. Call once, early, from a
/// program's `main` (no effect on non-Unix systems).
pub fn remove_temp_file_on_signal() {
    #[cfg(unix)]
    // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that does only async-signal-safe work.
    unsafe {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, handler);
        }
    }
}

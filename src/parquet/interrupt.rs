//! Removing the output's temporary file when a signal ends the process (SIGINT from Ctrl-C,
//! SIGTERM, SIGHUP). On every other path, dropping the writer removes the file. A signal,
//! though, ends the process without running destructors.
//!
//! The writer registers its temporary path here before it creates the file, and keeps it
//! registered for as long as the file may exist (`TempGuard`): a signal at any moment
//! finds the file registered (or unlinks a path not yet created, which does nothing).
//! A program that wants the cleanup calls [`remove_temp_file_on_signal`] once; the `corank`
//! binary does. A library does not take over a process's signals on its own.
//!
//! The handler does only async-signal-safe work. It unlinks the registered path, a C string
//! leaked for the life of the process, so the handler never reads freed memory. Then it
//! restores the default action and raises the signal again, so the exit status still says
//! which signal ended the process. One path is registered at a time: the newest writer's.
//!
//! An external sort's spill directory (`SpillDirGuard`) is registered the same way: the
//! handler unlinks its spill files, whose names it can build without allocating
//! (`spill_file_name`: `run-NNNNNN.parquet`, numbered from 0, as many as were announced
//! with `SpillDirGuard::announce`), then removes the (then empty) directory.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The registered path: a leaked, NUL-terminated C string, or 0.
static TEMP_PATH: AtomicUsize = AtomicUsize::new(0);

/// Keeps `path` registered until dropped, and the file's lock ([`super::leftovers`]) held.
#[derive(Debug)]
pub(crate) struct TempGuard(usize, Option<super::leftovers::Held>);

impl TempGuard {
    /// Holds the file's lock as long as the guard lives.
    pub(crate) fn hold(&mut self, held: super::leftovers::Held) {
        self.1 = Some(held);
    }

    pub(crate) fn register(path: &Path) -> TempGuard {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) {
                // Leaked on purpose: a handler may still hold an older pointer (a few bytes
                // per output file).
                let p = c.into_raw() as usize;
                TEMP_PATH.store(p, Ordering::SeqCst);
                return TempGuard(p, None);
            }
        }
        let _ = path;
        TempGuard(0, None)
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        // Only if still ours: a newer writer's registration stays.
        let _ = TEMP_PATH.compare_exchange(self.0, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The registered spill directory: a leaked, NUL-terminated C string, or 0.
static SPILL_DIR: AtomicUsize = AtomicUsize::new(0);
/// How many spill files (`run-000000.parquet` on) the directory may hold.
static SPILL_FILES: AtomicUsize = AtomicUsize::new(0);

/// The name of spill file `i` in a spill directory (the handler builds the same name).
pub(crate) fn spill_file_name(i: usize) -> String {
    format!("run-{i:06}.parquet")
}

/// Keeps a spill directory registered until dropped (one at a time, the newest), and its
/// lock ([`super::leftovers`]) held.
#[derive(Debug)]
pub(crate) struct SpillDirGuard(usize, Option<super::leftovers::Held>);

impl SpillDirGuard {
    /// Holds the directory's lock as long as the guard lives.
    pub(crate) fn hold(&mut self, held: super::leftovers::Held) {
        self.1 = Some(held);
    }

    /// Registers `dir` before it is created.
    pub(crate) fn register(dir: &Path) -> SpillDirGuard {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) {
                // Paths longer than the handler's buffer are not registered (nothing to
                // clean on a signal, as on other systems).
                if c.as_bytes().len() + 32 <= SIGNAL_PATH_BYTES {
                    SPILL_FILES.store(0, Ordering::SeqCst);
                    // Leaked on purpose, as TempGuard's.
                    let p = c.into_raw() as usize;
                    SPILL_DIR.store(p, Ordering::SeqCst);
                    return SpillDirGuard(p, None);
                }
            }
        }
        let _ = dir;
        SpillDirGuard(0, None)
    }

    /// Announces spill files `0..n` (call before creating the last of them).
    pub(crate) fn announce(&self, n: usize) {
        if self.0 != 0 && SPILL_DIR.load(Ordering::SeqCst) == self.0 {
            SPILL_FILES.fetch_max(n, Ordering::SeqCst);
        }
    }
}

impl Drop for SpillDirGuard {
    fn drop(&mut self) {
        let _ = SPILL_DIR.compare_exchange(self.0, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Bytes of the handler's buffer for a spill file's path.
const SIGNAL_PATH_BYTES: usize = 4096;

/// Unlinks the registered spill files and removes the directory (async-signal-safe: no
/// allocation, only unlink and rmdir).
#[cfg(unix)]
fn remove_spill_dir() {
    let dir = SPILL_DIR.load(Ordering::SeqCst);
    if dir == 0 {
        return;
    }
    // SAFETY: `dir` is a NUL-terminated string leaked for the life of the process.
    let dir_bytes = unsafe { std::ffi::CStr::from_ptr(dir as *const libc::c_char) }.to_bytes();
    let mut buf = [0u8; SIGNAL_PATH_BYTES];
    let n = dir_bytes.len();
    if n + 32 > SIGNAL_PATH_BYTES {
        return;
    }
    buf[..n].copy_from_slice(dir_bytes);
    let prefix = b"/run-";
    buf[n..n + prefix.len()].copy_from_slice(prefix);
    let at = n + prefix.len();
    for i in 0..SPILL_FILES.load(Ordering::SeqCst) {
        // The digits of i, at least 6 (as spill_file_name's {i:06}).
        let mut digits = [b'0'; 20];
        let mut len = 0;
        let mut v = i;
        while v > 0 || len < 6 {
            digits[len] = b'0' + (v % 10) as u8;
            v /= 10;
            len += 1;
        }
        let mut end = at;
        for d in digits[..len].iter().rev() {
            buf[end] = *d;
            end += 1;
        }
        let suffix = b".parquet\0";
        buf[end..end + suffix.len()].copy_from_slice(suffix);
        // SAFETY: `buf` holds a NUL-terminated path.
        unsafe { libc::unlink(buf.as_ptr() as *const libc::c_char) };
    }
    // SAFETY: `dir` is NUL-terminated (see above).
    unsafe { libc::rmdir(dir as *const libc::c_char) };
}

/// The write end of a pipe that a signal is handed to instead of ending the process (-1:
/// none), while an upload to an object store is open: aborting it takes requests, which a
/// handler cannot make (`crate::parquet::store`'s upload thread does, then calls
/// [`end_by_signal`]). Taken by the first signal: a second one ends the process at once.
static DEFER_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Whether [`remove_temp_file_on_signal`] installed the handlers.
static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn handlers_installed() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// Hands the next signal to the pipe `fd` (-1: no more).
pub(crate) fn defer_signals_to(fd: i32) {
    DEFER_TO.store(fd, Ordering::SeqCst);
}

/// What the handler does (temporary output and spill files removed), then the process ended
/// by `sig`: for a signal that was handed on ([`defer_signals_to`]).
#[cfg(unix)]
pub(crate) fn end_by_signal(sig: libc::c_int) {
    DEFER_TO.store(-1, Ordering::SeqCst);
    on_signal(sig);
}

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    let defer = DEFER_TO.swap(-1, Ordering::SeqCst);
    if defer >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; `byte` outlives the call.
        if unsafe { libc::write(defer, (&byte as *const u8).cast(), 1) } == 1 {
            return;
        }
    }
    let p = TEMP_PATH.load(Ordering::SeqCst);
    // SAFETY: async-signal-safe calls only; `p` is 0 or a NUL-terminated string leaked for
    // the life of the process (never freed, so never dangling).
    unsafe {
        if p != 0 {
            libc::unlink(p as *const libc::c_char);
        }
    }
    remove_spill_dir();
    // SAFETY: as above.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the registered temporary
/// output file, then end the process as the signal would have. Call once, early, from a
/// program's `main` (no effect on non-Unix systems).
///
/// ```no_run
/// // First thing in `main`:
/// corank::parquet::remove_temp_file_on_signal();
/// // ... merge_files or sort_files: Ctrl-C now leaves no temporary file behind
/// ```
pub fn remove_temp_file_on_signal() {
    #[cfg(unix)]
    // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that does only async-signal-safe work.
    unsafe {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, handler);
        }
        INSTALLED.store(true, Ordering::SeqCst);
    }
}

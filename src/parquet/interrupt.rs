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
//!
//! A split output's finished files wait under names the handler can build too
//! (`StagedSetGuard`, [`staged_name`]: `.corank-<16 hex digits>.tmp` from a base drawn at
//! random plus the file's index, as many as announced) while the next file is written; the
//! handler unlinks them, and the parts already put in place (`part-NNNNN.parquet`, as many
//! as `StagedSetGuard::placed` said), so that a signal leaves no file of the set.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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

/// The registered split output's directory (a leaked, NUL-terminated C string, or 0), the
/// base of its staged files' names, how many were announced, and how many parts are in place.
static STAGED_DIR: AtomicUsize = AtomicUsize::new(0);
static STAGED_BASE: AtomicU64 = AtomicU64::new(0);
static STAGED_FILES: AtomicUsize = AtomicUsize::new(0);
static STAGED_PLACED: AtomicUsize = AtomicUsize::new(0);

/// The name of a split output's staged file `i` (`base` is the set's): a temporary output's
/// name, so that one left by a killed run is cleared as any is ([`super::leftovers`]).
pub(crate) fn staged_name(base: u64, i: usize) -> String {
    format!(".corank-{:016x}.tmp", base.wrapping_add(i as u64))
}

/// Keeps a split output's staged files and placed parts registered until dropped (one set at
/// a time, the newest).
#[derive(Debug)]
pub(crate) struct StagedSetGuard(usize);

impl StagedSetGuard {
    /// Registers the set of `dir` whose staged names start at `base`.
    pub(crate) fn register(dir: &Path, base: u64) -> StagedSetGuard {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            if let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) {
                if c.as_bytes().len() + 32 <= SIGNAL_PATH_BYTES {
                    STAGED_FILES.store(0, Ordering::SeqCst);
                    STAGED_PLACED.store(0, Ordering::SeqCst);
                    STAGED_BASE.store(base, Ordering::SeqCst);
                    // Leaked on purpose, as TempGuard's.
                    let p = c.into_raw() as usize;
                    STAGED_DIR.store(p, Ordering::SeqCst);
                    return StagedSetGuard(p);
                }
            }
        }
        let _ = (dir, base);
        StagedSetGuard(0)
    }

    /// Announces staged files `0..n` (call before the last of them gets its name).
    pub(crate) fn announce(&self, n: usize) {
        if self.0 != 0 && STAGED_DIR.load(Ordering::SeqCst) == self.0 {
            STAGED_FILES.fetch_max(n, Ordering::SeqCst);
        }
    }

    /// Says that parts `0..n` are in place (call after the last of them is).
    pub(crate) fn placed(&self, n: usize) {
        if self.0 != 0 && STAGED_DIR.load(Ordering::SeqCst) == self.0 {
            STAGED_PLACED.fetch_max(n, Ordering::SeqCst);
        }
    }
}

impl Drop for StagedSetGuard {
    fn drop(&mut self) {
        let _ = STAGED_DIR.compare_exchange(self.0, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Writes `name` after `dir` and a `/` in `buf`, NUL-terminated; false where it does not fit.
#[cfg(unix)]
fn join_into(buf: &mut [u8; SIGNAL_PATH_BYTES], dir: &[u8], name: &[u8]) -> bool {
    let n = dir.len();
    if n + 1 + name.len() + 1 > SIGNAL_PATH_BYTES {
        return false;
    }
    buf[..n].copy_from_slice(dir);
    buf[n] = b'/';
    buf[n + 1..n + 1 + name.len()].copy_from_slice(name);
    buf[n + 1 + name.len()] = 0;
    true
}

/// Unlinks the registered split output's staged files and placed parts.
#[cfg(unix)]
fn remove_staged_set() {
    let dir = STAGED_DIR.load(Ordering::SeqCst);
    if dir == 0 {
        return;
    }
    // SAFETY: `dir` is a NUL-terminated string leaked for the life of the process.
    let dir = unsafe { std::ffi::CStr::from_ptr(dir as *const libc::c_char) }.to_bytes();
    remove_staged(dir, STAGED_BASE.load(Ordering::SeqCst), STAGED_FILES.load(Ordering::SeqCst), STAGED_PLACED.load(Ordering::SeqCst));
}

/// Unlinks staged files `0..files` of the set `base` and parts `0..placed` in `dir`
/// (async-signal-safe: names built in buffers on the stack, only unlink).
#[cfg(unix)]
fn remove_staged(dir: &[u8], base: u64, files: usize, placed: usize) {
    let hex = b"0123456789abcdef";
    let mut buf = [0u8; SIGNAL_PATH_BYTES];
    for i in 0..files {
        // `.corank-{:016x}.tmp`, as staged_name.
        let mut name = *b".corank-0000000000000000.tmp";
        let v = base.wrapping_add(i as u64);
        for (k, slot) in name[8..24].iter_mut().enumerate() {
            *slot = hex[((v >> (60 - 4 * k)) & 0xf) as usize];
        }
        if join_into(&mut buf, dir, &name) {
            // SAFETY: `buf` holds a NUL-terminated path.
            unsafe { libc::unlink(buf.as_ptr() as *const libc::c_char) };
        }
    }
    for i in 0..placed {
        // `part-{:05}.parquet`, as the split writer's part_path.
        let mut digits = [b'0'; 20];
        let mut len = 0;
        let mut v = i;
        while v > 0 || len < 5 {
            digits[len] = b'0' + (v % 10) as u8;
            v /= 10;
            len += 1;
        }
        let mut name = [0u8; 40];
        name[..5].copy_from_slice(b"part-");
        let mut end = 5;
        for d in digits[..len].iter().rev() {
            name[end] = *d;
            end += 1;
        }
        name[end..end + 8].copy_from_slice(b".parquet");
        end += 8;
        if join_into(&mut buf, dir, &name[..end]) {
            // SAFETY: as above.
            unsafe { libc::unlink(buf.as_ptr() as *const libc::c_char) };
        }
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
    remove_staged_set();
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

#[cfg(all(test, unix))]
mod staged_tests {
    use super::*;

    #[test]
    fn the_handler_removes_the_staged_files_and_placed_parts_it_can_name() {
        let dir = tempfile::tempdir().unwrap();
        let base = 0xfedc_ba98_7654_3210u64;
        for i in 0..3 {
            std::fs::write(dir.path().join(staged_name(base, i)), "x").unwrap();
        }
        std::fs::write(dir.path().join(staged_name(base, 3)), "not announced").unwrap();
        for name in ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet", "other.txt"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        use std::os::unix::ffi::OsStrExt;
        remove_staged(dir.path().as_os_str().as_bytes(), base, 3, 2);
        let mut left: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, [staged_name(base, 3), "other.txt".to_string(), "part-00002.parquet".to_string()]);
        assert_eq!(staged_name(base, 1), ".corank-fedcba9876543211.tmp");
    }
}

//! The output file's checks and its temporary file: only a regular file is ever replaced,
//! and the output is written under a short random name beside the target (registered for
//! the signal handler and locked while it exists) and renamed over it when complete.

use crate::error::{Error, Result};
use crate::parquet::interrupt::TempGuard;
use std::fs::{File, OpenOptions};
use std::path::Path;
use tempfile::TempPath;

/// Refuses an output that is not a regular file (a directory, device, FIFO, socket or
/// symbolic link: never replaced, even with `overwrite`), and an existing one unless
/// `overwrite`; the checks are repeated at the rename.
pub fn check_output(target: &Path, overwrite: bool) -> Result<()> {
    // An object in a store: a HEAD request (`crate::parquet::store`).
    if crate::parquet::store::is_url(target) {
        return crate::parquet::store::check_output(target, overwrite);
    }
    let target = &crate::parquet::store::local_path(target);
    match std::fs::symlink_metadata(target) {
        Ok(meta) if !meta.file_type().is_file() => Err(not_regular(target, &meta)),
        Ok(_) if !overwrite => Err(Error::OutputExists { path: target.to_path_buf() }),
        // Not there (or not visible: creating the file beside it reports why).
        _ => Ok(()),
    }
}

pub(super) fn not_regular(target: &Path, meta: &std::fs::Metadata) -> Error {
    let t = meta.file_type();
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                "a FIFO"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "something else"
            }
        }
        #[cfg(not(unix))]
        "something else"
    };
    Error::InvalidArgument(format!(
        "output {} is {what}, not a regular file; corank writes and replaces only regular files",
        target.display()
    ))
}

/// `.corank-<16 hex digits>.tmp`: short (a long output name still fits the file name limit)
/// and random (std's randomly keyed hasher over the time, the process and a counter).
fn temp_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!(".corank-{:016x}.tmp", h.finish())
}

/// Creates a new temporary file in `dir`, registered for the signal handler before it
/// exists (a signal at any moment leaves nothing behind), with `File::create`'s mode.
pub(super) fn create_temp(dir: &Path) -> std::io::Result<(File, TempPath, TempGuard)> {
    for _ in 0..64 {
        let path = dir.join(temp_name());
        let mut on_signal = TempGuard::register(&path);
        match OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
            Ok(file) => {
                // Locked while it exists, so a later run leaves it alone (it removes only
                // the temporary files of runs that were killed: crate::parquet::leftovers); one that
                // removed it before the lock was taken makes us draw another name.
                match file.try_clone().and_then(|dup| crate::parquet::leftovers::hold(dup, &path)) {
                    Ok(Some(held)) => on_signal.hold(held),
                    Ok(None) => continue,
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        return Err(e);
                    }
                }
                match TempPath::try_from_path(&path) {
                    Ok(temp) => return Ok((file, temp, on_signal)),
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        return Err(e);
                    }
                }
            }
            // Taken (unlikely): unregister and draw another name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => drop(on_signal),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free temporary file name"))
}

//! What a killed run leaves behind, and how the next run clears it.
//!
//! A merge or a sort writes its output under a temporary name beside it
//! (`.corank-<16 hex digits>.tmp`, [`super::writer`]) and a sort spills sorted runs into a
//! directory of its own (`.corank-sort-<16 hex digits>/`, `run-NNNNNN.parquet` inside, under
//! the temporary directory). Both go when the run ends, fails, or is interrupted by SIGINT,
//! SIGTERM or SIGHUP ([`super::interrupt`]); a run ended by SIGKILL (the OOM killer, `kill
//! -9`), a crash or a power cut leaves them.
//!
//! **Who holds what.** A run holds an exclusive `flock` on each of them from the moment it
//! creates it until it is gone (removed, or the temporary file renamed into place): on the
//! temporary file, and on the spill directory itself. The kernel drops a process's locks
//! when it ends, however it ends, so a leftover whose lock can be taken belongs to no
//! running process.
//!
//! **Clearing** ([`remove_stale`]): a merge or sort, before it writes, removes every
//! leftover in the directories it writes in (the output's, and a sort's temporary
//! directory) whose lock it can take without waiting; one held by a running process, this
//! one included, stays. A lock taken proves the owner gone only if the path still names
//! what was locked, so it is checked. The creator takes its lock right after creating
//! (a cleaner may come in between): it then checks that its path still names what it
//! locked, and draws another name if a cleaner removed it first ([`hold`]). Leftovers that
//! hold an input of the run are kept. On file systems without `flock` (and off Unix)
//! nothing is removed.
//!
//! **Never an input.** A file that a directory or a glob finds and that is a temporary
//! output or lies inside a spill directory is not read ([`is_leftover`],
//! [`super::inputs::expand_inputs_excluding`]), so a `**` glob does not take a spill run
//! (of a killed sort, or of one still running) for data.

use std::fs::File;
use std::path::{Path, PathBuf};

/// Whether `name` is a temporary output's name: `.corank-` ... `.tmp`.
pub fn is_temporary_output_name(name: &str) -> bool {
    name.starts_with(".corank-") && name.ends_with(".tmp")
}

/// Whether `name` is exactly a temporary output's name as the writer draws them:
/// `.corank-<16 hex digits>.tmp` (only those are ever removed).
fn is_drawn_temporary_output_name(name: &str) -> bool {
    name.strip_prefix(".corank-").and_then(|n| n.strip_suffix(".tmp")).is_some_and(is_16_hex)
}

fn is_16_hex(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `name` is a spill directory's name: `.corank-sort-<16 hex digits>`.
pub fn is_spill_dir_name(name: &str) -> bool {
    name.strip_prefix(".corank-sort-").is_some_and(is_16_hex)
}

/// Whether `path` is a temporary output or lies in a spill directory (any of its
/// directories is one).
pub fn is_leftover(path: &Path) -> bool {
    let name_is = |n: Option<&std::ffi::OsStr>, f: fn(&str) -> bool| n.and_then(|n| n.to_str()).is_some_and(f);
    name_is(path.file_name(), is_temporary_output_name)
        || path.parent().is_some_and(|p| p.components().any(|c| name_is(Some(c.as_os_str()), is_spill_dir_name)))
}

/// The directory a file is written in: its parent, `.` for a bare name.
pub fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A file's identity: device and inode.
#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// The leftovers this process holds (device and inode): a cleaner of this process never
/// removes them, whatever the file system's locks say (over NFS `flock` becomes a POSIX
/// lock, which a process's own second lock does not see).
#[cfg(unix)]
static HELD: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// The lock on a temporary file or spill directory this process created, held until
/// dropped (drop it after the file is removed or renamed).
#[derive(Debug)]
pub struct Held {
    /// Open on the locked file (a descriptor of its own, or a `dup` of the writer's: the
    /// lock lives as long as one of them is open).
    _file: File,
    #[cfg(unix)]
    id: (u64, u64),
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Ok(mut held) = HELD.lock() {
            if let Some(i) = held.iter().position(|&id| id == self.id) {
                held.swap_remove(i);
            }
        }
    }
}

/// Locks `file`, just created at `path` (a file, or a directory opened read-only), for as
/// long as the returned [`Held`] lives. `None` when `path` no longer names `file` (a
/// cleaner removed it before the lock was taken): draw another name. A file system without
/// `flock` leaves it unlocked (nothing is removed there either).
pub fn hold(file: File, path: &Path) -> std::io::Result<Option<Held>> {
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        let locked = loop {
            // SAFETY: flock on a descriptor `file` owns; blocking only while a cleaner holds
            // it (it removes the path, then lets go).
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                break true;
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break false;
            }
        };
        if !locked {
            log::debug!("{}: cannot lock it ({}); a later run will not remove it", path.display(), std::io::Error::last_os_error());
        }
        let id = identity(&file.metadata()?);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if identity(&meta) == id => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        }
        if let Ok(mut held) = HELD.lock() {
            held.push(id);
        }
        Ok(Some(Held { _file: file, id }))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(Some(Held { _file: file }))
    }
}

/// Removes the leftovers in `dirs` that no running process holds (see the module doc),
/// except those holding one of `keep` (the run's inputs). Returns how many it removed.
/// Failures are logged at debug level and otherwise ignored: clearing is a courtesy.
pub fn remove_stale(dirs: &[&Path], keep: &[&Path]) -> usize {
    #[cfg(unix)]
    {
        let mut removed = 0;
        let mut kept: Option<Vec<PathBuf>> = None;
        let mut done: Vec<PathBuf> = Vec::new();
        for dir in dirs {
            let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            if done.contains(&canonical) {
                continue;
            }
            done.push(canonical);
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                let Ok(kind) = entry.file_type() else { continue };
                let is_dir = match (is_spill_dir_name(name), is_drawn_temporary_output_name(name)) {
                    (true, _) if kind.is_dir() => true,
                    (_, true) if kind.is_file() => false,
                    _ => continue,
                };
                let path = entry.path();
                let kept = kept.get_or_insert_with(|| keep.iter().filter_map(|p| p.canonicalize().ok()).collect());
                if path.canonicalize().is_ok_and(|c| kept.iter().any(|k| k.starts_with(&c))) {
                    continue;
                }
                match remove_if_unheld(&path, is_dir) {
                    Ok(true) => {
                        removed += 1;
                        log::info!("removed {}, left by a corank run that was killed", path.display());
                    }
                    Ok(false) => {}
                    Err(e) => log::debug!("{}: not removed: {e}", path.display()),
                }
            }
        }
        removed
    }
    #[cfg(not(unix))]
    {
        let _ = (dirs, keep);
        0
    }
}

/// Removes `path` (a spill directory when `is_dir`, else a temporary file) if its lock can
/// be taken without waiting and it is what was locked; `false` when a process holds it.
#[cfg(unix)]
fn remove_if_unheld(path: &Path, is_dir: bool) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let meta = std::fs::symlink_metadata(path)?;
    if HELD.lock().is_ok_and(|held| held.contains(&identity(&meta))) {
        return Ok(false);
    }
    // Read-only, not following a symbolic link put in its place.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    // SAFETY: flock on a descriptor `file` owns; LOCK_NB never waits.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(false); // held by a running process (or no flock here: keep it)
    }
    if identity(&file.metadata()?) != identity(&std::fs::symlink_metadata(path)?) {
        return Ok(false);
    }
    if is_dir {
        std::fs::remove_dir_all(path)?;
    } else {
        std::fs::remove_file(path)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_leftovers() {
        assert!(is_temporary_output_name(".corank-0123456789abcdef.tmp"));
        assert!(!is_temporary_output_name("corank-0123456789abcdef.tmp"));
        assert!(is_drawn_temporary_output_name(".corank-0123456789abcdef.tmp"));
        assert!(!is_drawn_temporary_output_name(".corank-notes.tmp"), "removed only as the writer names them");
        assert!(is_spill_dir_name(".corank-sort-0123456789abcdef"));
        assert!(!is_spill_dir_name(".corank-sort-0123"));
        assert!(!is_spill_dir_name(".corank-sort-0123456789abcdeg"));
        assert!(is_leftover(Path::new("d/.corank-sort-0123456789abcdef/run-000000.parquet")));
        assert!(is_leftover(Path::new("d/.corank-sort-0123456789abcdef/x/y.parquet")));
        assert!(is_leftover(Path::new(".corank-0123456789abcdef.tmp")));
        assert!(!is_leftover(Path::new("d/run-000000.parquet")));
        assert!(!is_leftover(Path::new(".corank-sort-0123456789abcdef")), "the directory itself is no file to read");
        assert_eq!(dir_of(Path::new("out.parquet")), PathBuf::from("."));
        assert_eq!(dir_of(Path::new("a/out.parquet")), PathBuf::from("a"));
    }

    #[cfg(unix)]
    #[test]
    fn held_leftovers_stay_and_the_others_go() {
        let d = tempfile::tempdir().unwrap();
        let stale_file = d.path().join(".corank-00000000000000aa.tmp");
        let stale_dir = d.path().join(".corank-sort-00000000000000bb");
        std::fs::write(&stale_file, b"x").unwrap();
        std::fs::create_dir(&stale_dir).unwrap();
        std::fs::write(stale_dir.join("run-000000.parquet"), b"x").unwrap();
        // Held by this process: kept.
        let live_file = d.path().join(".corank-00000000000000cc.tmp");
        let live_dir = d.path().join(".corank-sort-00000000000000dd");
        let f = File::create(&live_file).unwrap();
        let _held_file = hold(f, &live_file).unwrap().expect("locked");
        std::fs::create_dir(&live_dir).unwrap();
        let _held_dir = hold(File::open(&live_dir).unwrap(), &live_dir).unwrap().expect("locked");
        // Not corank's: kept.
        std::fs::write(d.path().join(".corank-notes.tmp"), b"x").unwrap();
        std::fs::create_dir(d.path().join(".corank-sort-mine")).unwrap();
        assert_eq!(remove_stale(&[d.path(), d.path()], &[]), 2);
        assert!(!stale_file.exists() && !stale_dir.exists());
        assert!(live_file.exists() && live_dir.exists());
        assert!(d.path().join(".corank-notes.tmp").exists() && d.path().join(".corank-sort-mine").exists());
        // A stale spill directory holding an input stays.
        std::fs::create_dir(&stale_dir).unwrap();
        std::fs::write(stale_dir.join("run-000000.parquet"), b"x").unwrap();
        assert_eq!(remove_stale(&[d.path()], &[&stale_dir.join("run-000000.parquet")]), 0);
        assert!(stale_dir.exists());
        // Once let go, they are leftovers like the others.
        drop((_held_file, _held_dir));
        assert_eq!(remove_stale(&[d.path()], &[]), 3);
        // A path a cleaner removed before its creator locked it: the creator draws again.
        let gone = d.path().join(".corank-00000000000000ee.tmp");
        let f = File::create(&gone).unwrap();
        std::fs::remove_file(&gone).unwrap();
        assert!(hold(f, &gone).unwrap().is_none());
    }
}

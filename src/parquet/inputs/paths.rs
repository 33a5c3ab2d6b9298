//! Which files a merge reads: inputs expanded (files, directories, globs) in the merge's
//! tie order, the output and corank's temporary files left out; a file opened by its footer.

use super::{FileIdentity, InputFile};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub(super) fn file_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), detail: what.to_string() }
}

/// Expands a list of inputs: a file as given, a directory to its `*.parquet`
/// files and those of its `key=value` subdirectories at any depth (Hive partitions,
/// [`HivePartitioning`](crate::parquet::HivePartitioning); sorted by path), a glob pattern to its matches (sorted by name). The order of the
/// result is the merge's tie order. A name that is none of these is an error.
/// [`dry_run`](crate::parquet::dry_run) has an example.
pub fn expand_inputs(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for arg in args {
        // Object stores: prefixes and patterns listed from the store (`crate::parquet::store`).
        if crate::parquet::store::is_url(Path::new(arg)) {
            paths.extend(crate::parquet::store::expand_url(arg)?);
            continue;
        }
        let local = crate::parquet::store::local_path(Path::new(arg));
        let local_text = local.to_string_lossy();
        let (path, arg) = (local.as_ref(), local_text.as_ref());
        if path.is_dir() {
            let mut found = Vec::new();
            parquet_files_in(path, &mut found)?;
            found.sort();
            if found.is_empty() {
                return Err(file_error(path, "directory holds no .parquet files"));
            }
            paths.extend(found);
        } else if path.exists() {
            paths.push(path.to_path_buf());
        } else if arg.contains(['*', '?', '[']) {
            let pattern = glob::glob(arg).map_err(|e| Error::InvalidArgument(format!("bad glob pattern '{arg}': {e}")))?;
            let mut found: Vec<PathBuf> = pattern.filter_map(|p| p.ok()).filter(|p| p.is_file()).collect();
            found.sort();
            if found.is_empty() {
                return Err(file_error(path, "no file matches this pattern"));
            }
            paths.extend(found);
        } else {
            return Err(file_error(path, "no such file or directory"));
        }
    }
    if paths.is_empty() {
        return Err(Error::InvalidArgument("no input files".into()));
    }
    Ok(paths)
}

/// The `*.parquet` files of the directory `dir`, and those of its `key=value` subdirectories
/// (Hive partitions), at any depth.
fn parquet_files_in(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, "reading the directory", e))? {
        let Ok(path) = entry.map(|e| e.path()) else { continue };
        if path.is_file() && path.extension().is_some_and(|x| x.eq_ignore_ascii_case("parquet")) {
            found.push(path);
        } else if path.is_dir() && path.file_name().and_then(|n| n.to_str()).is_some_and(is_partition_name) {
            parquet_files_in(&path, found)?;
        }
    }
    Ok(())
}

/// Whether a directory's name is a Hive partition's, `key=value` (a key of one character or
/// more).
pub(crate) fn is_partition_name(name: &str) -> bool {
    name.split_once('=').is_some_and(|(key, _)| !key.is_empty())
}

/// A file's identity: device and inode where the platform has them, else its canonical path.
#[derive(Debug, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
    /// An object in a store: its store and key (`crate::parquet::store`).
    Url(String),
}

fn file_id(path: &Path) -> Option<FileId> {
    if let Some(id) = crate::parquet::store::url_identity(path) {
        return Some(FileId::Url(id));
    }
    let path = &crate::parquet::store::local_path(path);
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| FileId::Inode(m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        path.canonicalize().ok().map(FileId::Path)
    }
}

/// [`expand_inputs`], never yielding the output: a file that a directory or a glob pattern
/// found and that is `output` (same device and inode, so hard links and symbolic links
/// count), or a temporary file of a corank run (`.corank-….tmp`, or a file in a sort's
/// `.corank-sort-…` spill directory, of a run going on or killed), is left out with a log
/// line; an input named explicitly that is `output` is an error, and so is nothing left.
/// Without this a second merge over a directory that replaces its output (`overwrite`)
/// would read its own previous output. What `corank merge` and `corank sort` read.
///
/// ```no_run
/// use corank::parquet::{expand_inputs_excluding, plan_merge};
/// use std::path::Path;
///
/// // `out.parquet` in `runs/` from an earlier merge is not read again.
/// let paths = expand_inputs_excluding(&["runs/".to_string()], Path::new("runs/out.parquet"))?;
/// let plan = plan_merge(&paths, None)?;
/// # Ok::<(), corank::Error>(())
/// ```
pub fn expand_inputs_excluding(args: &[String], output: &Path) -> Result<Vec<PathBuf>> {
    let out_id = file_id(output);
    let mut paths = Vec::new();
    for arg in args {
        let explicit = crate::parquet::store::local_path(Path::new(arg)).is_file() || crate::parquet::store::names_one_object(arg);
        for path in expand_inputs(std::slice::from_ref(arg))? {
            let is_output = out_id.is_some() && file_id(&path) == out_id;
            if explicit && is_output {
                return Err(Error::InvalidArgument(format!("output {} is also an input ({arg})", output.display())));
            }
            if is_output {
                log::info!("skipping {}: it is the output", path.display());
                continue;
            }
            if !explicit && crate::parquet::leftovers::is_leftover(&path) {
                log::warn!("skipping {}: a temporary file of a corank merge or sort (running, or killed)", path.display());
                continue;
            }
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(Error::InvalidArgument(format!("no input files besides the output {}", output.display())));
    }
    Ok(paths)
}

/// Opens one file: reads and decodes its footer ([`crate::parquet::corrupt::load_metadata`]: an
/// embedded Arrow schema that cannot be decoded is left aside, row counts that disagree are
/// refused).
pub fn open_input(path: &Path) -> Result<InputFile> {
    // A local file, or an object in a store (its footer fetched by range).
    let opened = crate::parquet::store::open_for_footer(path)?;
    let size = opened.size;
    let metadata = crate::parquet::corrupt::load_metadata(path, &opened.source)?;
    let identity = match (&opened.source, &opened.object) {
        (_, Some(object)) => FileIdentity::of_object(object),
        (crate::parquet::store::Source::Local(file), None) => FileIdentity::of(file, true).map_err(|e| Error::io(path, "", e))?,
        #[allow(unreachable_patterns)]
        (_, None) => return Err(Error::Internal(format!("{}: opened without its identity", path.display()))),
    };
    let stored_schema = metadata.metadata().file_metadata().schema_descr_ptr();
    let metadata = super::types::read_exactly(path, metadata)?;
    Ok(InputFile { path: path.to_path_buf(), size, metadata, stored_schema, identity, partition: None })
}

//! Which files a merge reads: inputs expanded (files, directories, globs) in the merge's
//! tie order, the output and corank's temporary files left out; a file opened by its footer.

use super::{FileIdentity, InputFile};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub(super) fn file_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), detail: what.to_string() }
}

/// Expands a list of inputs: a file as given, a directory to its `*.parquet`
/// files (sorted by name), a glob pattern to its matches (sorted by name). The order of the
/// result is the merge's tie order. A name that is none of these is an error.
/// [`dry_run`](crate::parquet::dry_run) has an example.
pub fn expand_inputs(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for arg in args {
        let path = Path::new(arg);
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| Error::io(path, "reading the directory", e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x.eq_ignore_ascii_case("parquet")))
                .collect();
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

/// A file's identity: device and inode where the platform has them, else its canonical path.
#[derive(Debug, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

fn file_id(path: &Path) -> Option<FileId> {
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
        let explicit = Path::new(arg).is_file();
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
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, "", e))?;
    let size = file.metadata().map_err(|e| Error::io(path, "", e))?.len();
    let metadata = crate::parquet::corrupt::load_metadata(path, &file)?;
    let identity = FileIdentity::of(&file, true).map_err(|e| Error::io(path, "", e))?;
    let stored_schema = metadata.metadata().file_metadata().schema_descr_ptr();
    let metadata = super::types::read_exactly(path, metadata)?;
    Ok(InputFile { path: path.to_path_buf(), size, metadata, stored_schema, identity })
}

//! Where the files live: a local path, or a URL of an object store (`s3://`, `gs://`,
//! `az://`/`abfss://`, `http(s)://`), wherever the file functions take a path
//! (docs/object-stores.md).
//!
//! A URL is carried as the path's text (`PathBuf::from("s3://bucket/key")`), so the plan, the
//! errors and the summaries name it as the user wrote it; this module tells the two apart
//! ([`is_url`]; `file://` URLs become local paths, [`local_path`]) and opens either:
//!
//! - **Reading** ([`Source`], the `ChunkReader` every Parquet reader of corank is given): a
//!   local file, or a remote object read by range requests. An object's footer comes with
//!   its last 64 KiB, fetched when it is opened (`object`), and a reader's row group is
//!   fetched whole, its column chunks in pieces of at most 8 MiB, up to `max_concurrency`
//!   requests at once, when its first page is wanted; the decoders then read from memory.
//!   Every range request carries the ETag the footer was read with (`If-Match`), so an
//!   object replaced during a merge is an error, never rows of two versions.
//! - **Writing** (`Sink`, under the output writer): a local temporary file renamed into
//!   place, or a multipart upload (`upload`) streamed from the writer part by part and
//!   completed only when the file is whole: on any error, on a dropped writer and on
//!   Ctrl-C (where the program installed [`remove_temp_file_on_signal`]) it is aborted, so
//!   no object and no parts are left.
//! - **Listing** (`list`): a URL ending in `/` lists the `.parquet` objects under it, a
//!   glob pattern lists from its longest literal prefix and matches the rest.
//!
//! Stores are built once per bucket (or host) from the provider's environment variables
//! (object_store's `from_env` builders) and the options set with [`set_storage_options`]
//! (the command line's `--storage-option key=value`); [`register_object_store`] puts any
//! other `ObjectStore` under a URL. One tokio runtime of the process (`runtime`) runs their
//! requests; corank's readers and writer stay on their own threads and wait for them.
//!
//! [`remove_temp_file_on_signal`]: crate::parquet::remove_temp_file_on_signal

#[cfg(feature = "object-store")]
mod config;
#[cfg(feature = "object-store")]
mod list;
#[cfg(feature = "object-store")]
mod location;
#[cfg(feature = "object-store")]
mod object;
// Also DataFusion's: its optimizer rule reads footers of files in object stores.
#[cfg(all(test, feature = "object-store", feature = "datafusion"))]
mod read_ahead_tests;
#[cfg(any(feature = "object-store", feature = "datafusion"))]
pub(crate) mod runtime;
#[cfg(feature = "object-store")]
mod upload;

#[cfg(feature = "object-store")]
pub use config::{register_object_store, set_storage_options, STORAGE_OPTION_KEYS};

use crate::error::{Error, Result};
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use std::borrow::Cow;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// Words of every error of a failed range request (a decoder's error that holds them is
/// not a decoding error).
pub(crate) const READ_FAILED: &str = "object store read failed";

/// Whether `path` names an object in a store (`scheme://...`, any scheme but `file`).
pub fn is_url(path: &Path) -> bool {
    path.to_str().and_then(url_scheme).is_some_and(|scheme| !scheme.eq_ignore_ascii_case("file"))
}

/// The scheme of a URL's text (`s3` of `s3://bucket/key`), `None` where it is no URL.
fn url_scheme(text: &str) -> Option<&str> {
    let (scheme, _) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))).then_some(scheme)
}

/// `path`, with a `file://` URL turned into the local path it names (percent-decoded).
pub fn local_path(path: &Path) -> Cow<'_, Path> {
    let Some(text) = path.to_str() else { return Cow::Borrowed(path) };
    match url_scheme(text) {
        Some(scheme) if scheme.eq_ignore_ascii_case("file") => match file_url_path(text) {
            Some(local) => Cow::Owned(local),
            None => Cow::Borrowed(path),
        },
        _ => Cow::Borrowed(path),
    }
}

#[cfg(feature = "object-store")]
fn file_url_path(text: &str) -> Option<PathBuf> {
    url::Url::parse(text).ok()?.to_file_path().ok()
}

#[cfg(not(feature = "object-store"))]
fn file_url_path(text: &str) -> Option<PathBuf> {
    // Without the url crate: `file:///abs/path` as it is (no percent-decoding).
    text.get(7..).filter(|rest| rest.starts_with('/')).map(PathBuf::from)
}

/// The error for a URL where corank was built without the `object-store` feature.
#[cfg(not(feature = "object-store"))]
fn unsupported(path: &Path) -> Error {
    Error::File { path: path.to_path_buf(), detail: "object store URLs need corank's `object-store` feature".into() }
}

/// Expands an input that is a URL: a prefix ending in `/` to its `.parquet` objects, a glob
/// pattern to the objects it matches (both sorted by key), an object as it is.
pub(crate) fn expand_url(arg: &str) -> Result<Vec<PathBuf>> {
    #[cfg(feature = "object-store")]
    return list::expand(arg);
    #[cfg(not(feature = "object-store"))]
    Err(unsupported(Path::new(arg)))
}

/// The names of the objects directly under the prefix `dir` (a URL): a split output's
/// directory.
pub(crate) fn names_under(dir: &Path) -> Result<Vec<String>> {
    #[cfg(feature = "object-store")]
    return list::names_under(&dir.to_string_lossy());
    #[cfg(not(feature = "object-store"))]
    Err(unsupported(dir))
}

/// Deletes the object `url` (one that is not there is no error).
pub(crate) fn delete(url: &Path) -> Result<()> {
    #[cfg(feature = "object-store")]
    return list::delete(url);
    #[cfg(not(feature = "object-store"))]
    Err(unsupported(url))
}

/// The store corank reads `url` (an object's or a prefix's URL) through, as its file
/// functions do (registered, or built from the environment and the storage options), and
/// the store's own URL (`s3://bucket`, `http://host:port`).
#[cfg(feature = "object-store")]
pub(crate) fn store_of(url: &str) -> Result<(String, std::sync::Arc<dyn object_store::ObjectStore>)> {
    let parsed = location::ObjectUrl::parse_prefix(url)?;
    Ok((parsed.store_url.clone(), config::store_for(&parsed)?))
}

/// Whether the input `arg` (a URL) names one object, not a prefix or a pattern: an output
/// named so is an error, not a file skipped.
pub(crate) fn names_one_object(arg: &str) -> bool {
    is_url(Path::new(arg)) && !arg.ends_with('/') && !list::has_glob(arg)
}

/// What makes two URLs name the same object: the store (scheme, bucket or host) and the
/// key, as parsed; `None` where `path` is no URL (or not a valid one).
pub(crate) fn url_identity(path: &Path) -> Option<String> {
    if !is_url(path) {
        return None;
    }
    #[cfg(feature = "object-store")]
    return location::ObjectUrl::parse(path).ok().map(|u| u.identity());
    #[cfg(not(feature = "object-store"))]
    Some(path.to_string_lossy().into_owned())
}

/// An input as [`open_input`](crate::parquet::inputs::open_input) reads it: its size, its
/// reader (for the footer), and for an object what identifies the version read.
pub(crate) struct Opened {
    pub source: Source,
    pub size: u64,
    /// The object's ETag, last modification and last bytes (for its identity), `None`
    /// for a local file.
    pub object: Option<ObjectVersion>,
}

/// What identifies the version of an object that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag, where the store gives one.
    pub e_tag: Option<String>,
    /// When it was last modified.
    pub modified: Option<std::time::SystemTime>,
    /// The object's last bytes (at most 64 KiB: a footer's fingerprint).
    pub tail: Bytes,
}

/// Opens an input to read its footer: a local file, or an object (its last 64 KiB fetched,
/// with its size and ETag, in one request).
pub(crate) fn open_for_footer(path: &Path) -> Result<Opened> {
    if is_url(path) {
        #[cfg(feature = "object-store")]
        return object::open_object(path, true).map(|(object, version)| Opened {
            size: object.size(),
            source: Source::Remote(object::RemoteFile::new(object, None)),
            object: Some(version),
        });
        #[cfg(not(feature = "object-store"))]
        return Err(unsupported(path));
    }
    let local = local_path(path);
    let file = File::open(&local).map_err(|e| Error::io(path, "", e))?;
    let size = file.metadata().map_err(|e| Error::io(path, "", e))?.len();
    Ok(Opened { source: Source::Local(file), size, object: None })
}

/// The version of the object at `path` now (a request for its last bytes): what an input's
/// identity is checked against.
#[cfg(feature = "object-store")]
pub(crate) fn object_version(path: &Path) -> Result<ObjectVersion> {
    object::open_object(path, false).map(|(_, version)| version)
}

#[cfg(not(feature = "object-store"))]
pub(crate) fn object_version(path: &Path) -> Result<ObjectVersion> {
    Err(unsupported(path))
}

/// Opens the file at `path` (whose footer is `metadata`) to read rows: a local file, or the
/// object, reading the row groups' column chunks that `leaves` selects (all where `None`)
/// together, a row group at a time. The object was opened by `open_for_footer` before
/// (opened again if not).
pub(crate) fn open(path: &Path, metadata: &ParquetMetaData, leaves: Option<&ProjectionMask>) -> std::io::Result<Source> {
    if is_url(path) {
        #[cfg(feature = "object-store")]
        return object::open_rows(path, metadata, leaves).map(Source::Remote);
        #[cfg(not(feature = "object-store"))]
        return Err(std::io::Error::other(unsupported(path).to_string()));
    }
    let _ = (metadata, leaves);
    File::open(local_path(path)).map(Source::Local)
}

/// [`open`] for the row groups `groups` (every leaf), read in that order, up to `at_once`
/// of them at once (a batch spanning several): an object's reader starts fetching the
/// first at once, fetches the next ones ahead and keeps the `at_once` it reads (a run's
/// reader; `object`'s module doc).
pub(crate) fn open_groups(path: &Path, metadata: &ParquetMetaData, groups: &[usize], at_once: usize) -> std::io::Result<Source> {
    if is_url(path) {
        #[cfg(feature = "object-store")]
        return object::open_groups(path, metadata, groups, at_once).map(Source::Remote);
        #[cfg(not(feature = "object-store"))]
        return Err(std::io::Error::other(unsupported(path).to_string()));
    }
    let _ = (metadata, groups, at_once);
    File::open(local_path(path)).map(Source::Local)
}

/// The bound on bytes fetched ahead from object stores and not yet read, all objects
/// together, where no merge or sort set one (the DataFusion nodes, the library's readers).
pub(crate) const DEFAULT_READ_AHEAD_LIMIT: u64 = 64 << 20;

/// Reading ahead from object stores for one merge or sort whose inputs are in a store:
/// sets the bound on the bytes fetched ahead and not yet read (all objects together) while
/// it lives, and as it is dropped (the work done, failed or cancelled) aborts the row groups
/// fetched ahead that no reader took and waits for their requests to end. The bound set
/// before is set again as it is dropped (a sort's merge of its spilled runs inside the
/// sort).
///
/// The bound and the stop are the process's (the objects and their fetched row groups are
/// shared by every reader of the process), so a merge of local files takes no part in
/// them: it would move the bound of a remote merge running beside it and stop that merge's
/// read-aheads as it ends. Two merges from stores at once in one process share one bound,
/// the later's, and the first to end stops the other's read-aheads, which its readers then
/// fetch as they reach them: slower, never other rows. Nothing without the `object-store`
/// feature.
pub(crate) struct ReadAhead {
    #[cfg_attr(not(feature = "object-store"), allow(dead_code))]
    before: Option<u64>,
}

impl ReadAhead {
    /// For a merge or sort reading `inputs`: nothing unless one of them is in a store.
    pub(crate) fn new<'a>(limit_bytes: u64, mut inputs: impl Iterator<Item = &'a Path>) -> ReadAhead {
        #[cfg(feature = "object-store")]
        if inputs.any(is_url) {
            return ReadAhead { before: Some(object::set_read_ahead_limit(limit_bytes)) };
        }
        let _ = (limit_bytes, &mut inputs);
        ReadAhead { before: None }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        #[cfg(feature = "object-store")]
        if let Some(before) = self.before {
            object::stop_read_ahead();
            object::set_read_ahead_limit(before);
        }
    }
}

/// [`open`] for the chunks of row group `g` alone (every leaf): an object's plan holds that
/// row group only, not the whole file's, for a reader that reads one row group. Where
/// `kept` (a row group checked before it is copied unchanged), an object's row group stays
/// fetched for the next reader of it, within the read-ahead's bound (`object`'s module
/// doc), so the copy fetches nothing again.
pub(crate) fn open_row_group(path: &Path, metadata: &ParquetMetaData, g: usize, kept: bool) -> std::io::Result<Source> {
    if is_url(path) {
        #[cfg(feature = "object-store")]
        return object::open_row_group(path, metadata, g, kept).map(Source::Remote);
        #[cfg(not(feature = "object-store"))]
        return Err(std::io::Error::other(unsupported(path).to_string()));
    }
    let _ = (metadata, g, kept);
    File::open(local_path(path)).map(Source::Local)
}

/// Lets go of row group `g` of the object at `path` that a reader kept for its copy
/// ([`open_row_group`]'s `kept`) where the copy streams it instead. Nothing for a local file.
pub(crate) fn release_kept(path: &Path, g: usize) {
    #[cfg(feature = "object-store")]
    if is_url(path) {
        object::release_kept(path, g);
    }
    #[cfg(not(feature = "object-store"))]
    let _ = (path, g);
}

/// Opens the file at `path` to read bytes as asked: a local file, or the object (the
/// version opened before, if it was) read without a plan, a range request per read or a
/// block at a time when streamed (a large column chunk copied unchanged, bloom filters).
pub(crate) fn open_streamed(path: &Path) -> std::io::Result<Source> {
    if is_url(path) {
        #[cfg(feature = "object-store")]
        return object::open_streamed(path).map(Source::Remote);
        #[cfg(not(feature = "object-store"))]
        return Err(std::io::Error::other(unsupported(path).to_string()));
    }
    File::open(local_path(path)).map(Source::Local)
}

/// A file being read: a local file, or an object in a store read by range requests (the
/// module doc).
pub enum Source {
    /// A local file.
    Local(File),
    /// An object in a store.
    #[cfg(feature = "object-store")]
    Remote(object::RemoteFile),
}

impl Source {
    /// Another handle on the same file (the same object: its fetched row groups shared).
    pub fn try_clone(&self) -> std::io::Result<Source> {
        match self {
            Source::Local(f) => f.try_clone().map(Source::Local),
            #[cfg(feature = "object-store")]
            Source::Remote(r) => Ok(Source::Remote(r.clone())),
        }
    }
}

impl Length for Source {
    fn len(&self) -> u64 {
        match self {
            Source::Local(f) => f.len(),
            #[cfg(feature = "object-store")]
            Source::Remote(r) => r.len(),
        }
    }
}

/// A reader from an offset of a [`Source`].
pub enum SourceRead {
    /// From a local file.
    Local(BufReader<File>),
    /// From an object.
    #[cfg(feature = "object-store")]
    Remote(object::RemoteRead),
}

impl Read for SourceRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            SourceRead::Local(r) => r.read(buf),
            #[cfg(feature = "object-store")]
            SourceRead::Remote(r) => r.read(buf),
        }
    }
}

impl ChunkReader for Source {
    type T = SourceRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<SourceRead> {
        match self {
            Source::Local(f) => f.get_read(start).map(SourceRead::Local),
            #[cfg(feature = "object-store")]
            Source::Remote(r) => r.get_read(start).map(SourceRead::Remote),
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match self {
            Source::Local(f) => f.get_bytes(start, length),
            #[cfg(feature = "object-store")]
            Source::Remote(r) => r.get_bytes(start, length),
        }
    }
}

/// Where the output's bytes go: a local (temporary) file, or a multipart upload.
pub(crate) enum Sink {
    File(File),
    #[cfg(feature = "object-store")]
    Upload(Box<upload::Upload>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::File(f) => f.write(buf),
            #[cfg(feature = "object-store")]
            Sink::Upload(u) => u.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(buf),
            #[cfg(feature = "object-store")]
            Sink::Upload(u) => u.write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            #[cfg(feature = "object-store")]
            Sink::Upload(u) => u.flush(),
        }
    }
}

impl Sink {
    /// Starts the output at `target` (a URL): nothing is sent before the first part is full.
    pub(crate) fn upload(target: &Path) -> Result<Sink> {
        #[cfg(feature = "object-store")]
        return upload::Upload::new(target).map(|u| Sink::Upload(Box::new(u)));
        #[cfg(not(feature = "object-store"))]
        Err(unsupported(target))
    }

    /// Sends every part of an upload and waits for them (creating the multipart upload
    /// if none was yet), so that [`complete`](Sink::complete) only makes the object appear;
    /// returns its bytes. A local file is not touched here.
    pub(crate) fn stage(&mut self) -> Result<u64> {
        match self {
            Sink::File(_) => Err(Error::Internal("a local output is staged as a temporary file".into())),
            #[cfg(feature = "object-store")]
            Sink::Upload(u) => u.stage(),
        }
    }

    /// Completes an upload: the object appears, whole (checked first, unless `overwrite`,
    /// that none appeared meanwhile); returns its bytes. A local file is not touched here.
    #[cfg_attr(not(feature = "object-store"), allow(unused_variables))]
    pub(crate) fn complete(self, overwrite: bool) -> Result<u64> {
        match self {
            Sink::File(_) => Err(Error::Internal("a local output is renamed into place, not completed".into())),
            #[cfg(feature = "object-store")]
            Sink::Upload(u) => u.complete(overwrite),
        }
    }
}

/// Refuses an output at `target` (a URL) that exists unless `overwrite` (one HEAD request;
/// where there is none, a listing beside it checks that the bucket is there).
pub(crate) fn check_output(target: &Path, overwrite: bool) -> Result<()> {
    #[cfg(feature = "object-store")]
    return upload::check_output(target, overwrite);
    #[cfg(not(feature = "object-store"))]
    {
        let _ = overwrite;
        Err(unsupported(target))
    }
}

#[cfg(not(feature = "object-store"))]
mod list {
    pub(super) fn has_glob(arg: &str) -> bool {
        arg.contains(['*', '?', '['])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_are_told_apart() {
        for url in ["s3://b/k.parquet", "gs://b/k", "az://c/k", "abfss://c@a.dfs.core.windows.net/k", "https://h/k", "S3://b/k"] {
            assert!(is_url(Path::new(url)), "{url}");
        }
        for path in ["k.parquet", "/tmp/k", "./s3:/b", "file:///tmp/k.parquet", "c:\\x", "://x", "3s://b/k"] {
            assert!(!is_url(Path::new(path)), "{path}");
        }
        assert_eq!(local_path(Path::new("file:///tmp/a%20b.parquet")).as_ref(), Path::new("/tmp/a b.parquet"));
        assert_eq!(local_path(Path::new("rel/a.parquet")).as_ref(), Path::new("rel/a.parquet"));
    }
}

//! An object read by range requests: opened with its last bytes (the footer), its row
//! groups fetched a row group at a time for the decoders, which read them from memory.
//!
//! A reader ([`RemoteFile`]) knows which column chunks it will read (a plan: every chunk of
//! the file, or the leaves of a projection). The first time a decoder asks for a byte of a
//! planned chunk, every planned chunk of that row group is fetched: neighbouring chunks
//! (gaps up to [`COALESCE_GAP`]) as one span, every span in pieces of at most
//! [`PIECE_BYTES`], `max_concurrency` pieces at once. Fetched row groups are shared by the
//! readers of the object (a reader reopened where it stopped finds its row group still
//! there) and kept while readers may want them: two per open reader, the least recently
//! used dropped first. Bytes outside the plan (a bloom filter, a chunk not projected) are
//! fetched as asked; the object's last [`TAIL_BYTES`] come with it when it is opened.
//!
//! Every request carries the ETag the object was opened with (`If-Match`): an object
//! replaced since is an error ("changed since its footer was read"), not rows of another
//! version. Requests are retried by object_store on transient errors (5xx, throttling,
//! connection resets: [`object_store::RetryConfig`], set by the storage options).

use super::config::{settings, store_for};
use super::location::ObjectUrl;
use super::runtime::block_on;
use super::ObjectVersion;
use crate::error::{Error, Result};
use bytes::{Buf, Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::Length;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

/// Bytes at an object's end fetched when it is opened: the footer of most files, and the
/// bytes its identity's fingerprint hashes (as a local file's).
pub(crate) const TAIL_BYTES: u64 = 64 << 10;

/// The most bytes one request fetches: larger spans are fetched in pieces, at once.
pub(crate) const PIECE_BYTES: u64 = 8 << 20;

/// Chunks this close are fetched as one span (the gap's bytes are cheaper than a request).
pub(crate) const COALESCE_GAP: u64 = 64 << 10;

/// An object opened: its store, size, ETag, last bytes, and the row groups its readers
/// fetched.
pub(crate) struct RemoteObject {
    url: ObjectUrl,
    store: Arc<dyn ObjectStore>,
    size: u64,
    e_tag: Option<String>,
    tail: Bytes,
    max_concurrency: usize,
    cache: Mutex<Cache>,
    /// Readers open (their fetched row groups are kept, two per reader).
    readers: AtomicUsize,
}

/// The objects opened in this process, by URL: readers opened after the footer find them.
static OBJECTS: LazyLock<Mutex<HashMap<String, Arc<RemoteObject>>>> = LazyLock::new(Default::default);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An object_store error as corank's, about `url`: a missing object, denied access and a
/// changed object in words, anything else as object_store says it.
pub(crate) fn store_error(url: &str, doing: &str, e: object_store::Error) -> Error {
    let detail = match &e {
        object_store::Error::NotFound { .. } => {
            "no such object (or no such bucket); a prefix's objects are read with a URL that ends in /".to_string()
        }
        object_store::Error::Precondition { .. } => "changed since its footer was read; nothing written".to_string(),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            format!("access denied (check the credentials: the provider's environment variables or --storage-option): {e}")
        }
        _ => e.to_string(),
    };
    let detail = if doing.is_empty() { detail } else { format!("{doing}: {detail}") };
    Error::File { path: url.into(), detail }
}

/// Opens the object at `path`: its last [`TAIL_BYTES`] (and so its size and ETag) in one
/// request. Kept for the readers opened later where `keep`.
pub(crate) fn open_object(path: &Path, keep: bool) -> Result<(Arc<RemoteObject>, ObjectVersion)> {
    let url = ObjectUrl::parse(path)?;
    let store = store_for(&url)?;
    let (s, location) = (store.clone(), url.location.clone());
    let fetched = block_on(async move {
        let options = GetOptions { range: Some(GetRange::Suffix(TAIL_BYTES)), ..Default::default() };
        match s.get_opts(&location, options).await {
            Ok(result) => {
                let meta = result.meta.clone();
                let start = result.range.start;
                Ok((meta, start, result.bytes().await?))
            }
            // Azure answers no suffix range: its size first.
            Err(object_store::Error::NotSupported { .. }) => {
                let meta = s.head(&location).await?;
                let start = meta.size.saturating_sub(TAIL_BYTES);
                let options = GetOptions { range: Some((start..meta.size).into()), if_match: meta.e_tag.clone(), ..Default::default() };
                let bytes = s.get_opts(&location, options).await?.bytes().await?;
                Ok((meta, start, bytes))
            }
            Err(e) => Err(e),
        }
    });
    let (meta, start, tail) = fetched.map_err(|e| store_error(&url.text, "", e))?;
    if start + tail.len() as u64 != meta.size {
        return Err(Error::File {
            path: path.to_path_buf(),
            detail: format!("the store answered bytes {start}..{} of an object of {} bytes", start + tail.len() as u64, meta.size),
        });
    }
    let version =
        ObjectVersion { size: meta.size, e_tag: meta.e_tag.clone(), modified: Some(meta.last_modified.into()), tail: tail.clone() };
    let object = Arc::new(RemoteObject {
        url,
        store,
        size: meta.size,
        // A weak ETag (`W/"..."`) never matches an `If-Match`: such an object is read without.
        e_tag: meta.e_tag.filter(|t| !t.starts_with("W/")),
        tail,
        max_concurrency: settings().max_concurrency,
        cache: Mutex::new(Cache::default()),
        readers: AtomicUsize::new(0),
    });
    if keep {
        lock(&OBJECTS).insert(object.url.text.clone(), object.clone());
    }
    Ok((object, version))
}

/// A reader of the object at `path` for the row groups' chunks `leaves` selects (all where
/// `None`) of the footer `metadata`.
pub(crate) fn open_rows(path: &Path, metadata: &ParquetMetaData, leaves: Option<&ProjectionMask>) -> std::io::Result<RemoteFile> {
    Ok(RemoteFile::new(known_object(path)?, Some(Arc::new(Plan::new(metadata, leaves)))))
}

/// A reader of the object at `path` for row group `g`'s chunks (all leaves) of `metadata`.
pub(crate) fn open_row_group(path: &Path, metadata: &ParquetMetaData, g: usize) -> std::io::Result<RemoteFile> {
    Ok(RemoteFile::new(known_object(path)?, Some(Arc::new(Plan::of_row_group(metadata, g)))))
}

/// A reader of the object at `path` without a plan: every read fetched as asked.
pub(crate) fn open_streamed(path: &Path) -> std::io::Result<RemoteFile> {
    Ok(RemoteFile::new(known_object(path)?, None))
}

/// The object at `path` as opened before (its version kept), or opened now.
fn known_object(path: &Path) -> std::io::Result<Arc<RemoteObject>> {
    let text = path.to_string_lossy();
    let known = lock(&OBJECTS).get(text.as_ref()).cloned();
    match known {
        Some(object) => Ok(object),
        None => Ok(open_object(path, true).map_err(|e| std::io::Error::other(e.to_string()))?.0),
    }
}

impl RemoteObject {
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    fn tail_start(&self) -> u64 {
        self.size - self.tail.len() as u64
    }

    /// `start..end` from the bytes fetched with the object, where they hold it.
    fn tail_bytes(&self, start: u64, end: u64) -> Option<Bytes> {
        let at = self.tail_start();
        (start >= at && end <= self.size).then(|| self.tail.slice((start - at) as usize..(end - at) as usize))
    }

    /// Fetches `ranges` (each in pieces of at most [`PIECE_BYTES`], `max_concurrency` at
    /// once), waiting for them.
    fn fetch(&self, ranges: Vec<Range<u64>>) -> std::result::Result<Vec<Bytes>, ParquetError> {
        let (store, location, e_tag, concurrency) =
            (self.store.clone(), self.url.location.clone(), self.e_tag.clone(), self.max_concurrency);
        let fetched = block_on(fetch_ranges(store, location, e_tag, ranges.clone(), concurrency));
        fetched.map_err(|e| {
            let (first, last) = (ranges.first().map_or(0, |r| r.start), ranges.last().map_or(0, |r| r.end));
            let doing = format!("{} (bytes {first}..{last})", super::READ_FAILED);
            ParquetError::External(Box::new(store_error(&self.url.text, &doing, e)))
        })
    }

    fn fetch_one(&self, range: Range<u64>) -> std::result::Result<Bytes, ParquetError> {
        Ok(self.fetch(vec![range])?.pop().unwrap_or_default())
    }
}

/// Fetches `ranges` of `location`, each in pieces of at most [`PIECE_BYTES`], `concurrency`
/// requests at once, every one under `If-Match: e_tag`.
async fn fetch_ranges(
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    e_tag: Option<String>,
    ranges: Vec<Range<u64>>,
    concurrency: usize,
) -> object_store::Result<Vec<Bytes>> {
    let mut pieces = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        let mut at = r.start;
        while at < r.end {
            let end = (at + PIECE_BYTES).min(r.end);
            pieces.push((i, at..end));
            at = end;
        }
    }
    let got: Vec<(usize, Bytes)> = futures::stream::iter(pieces)
        .map(|(i, piece)| {
            let (store, location) = (store.clone(), location.clone());
            let options = GetOptions { range: Some(piece.into()), if_match: e_tag.clone(), ..Default::default() };
            async move { Ok::<_, object_store::Error>((i, store.get_opts(&location, options).await?.bytes().await?)) }
        })
        .buffered(concurrency.max(1))
        .try_collect()
        .await?;
    // Pieces came in order: join each range's.
    let mut out: Vec<Vec<Bytes>> = vec![Vec::new(); ranges.len()];
    for (i, bytes) in got {
        out[i].push(bytes);
    }
    Ok(out
        .into_iter()
        .map(|parts| match parts.len() {
            1 => parts.into_iter().next().expect("one piece"),
            _ => {
                let mut joined = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
                parts.iter().for_each(|p| joined.extend_from_slice(p));
                joined.freeze()
            }
        })
        .collect())
}

/// The column chunks a reader will read: `(start, end, row group)`, by start.
pub(crate) struct Plan {
    chunks: Vec<(u64, u64, usize)>,
    /// Which leaves (all where `None`): part of a fetched row group's key.
    leaves: Option<Vec<usize>>,
}

impl Plan {
    fn new(metadata: &ParquetMetaData, leaves: Option<&ProjectionMask>) -> Plan {
        let columns = metadata.file_metadata().schema_descr().num_columns();
        let leaves: Option<Vec<usize>> = leaves.map(|mask| (0..columns).filter(|&c| mask.leaf_included(c)).collect());
        Plan::of_groups(metadata, leaves, 0..metadata.num_row_groups())
    }

    /// Row group `g`'s chunks, every leaf (a row group copied unchanged, or checked).
    fn of_row_group(metadata: &ParquetMetaData, g: usize) -> Plan {
        Plan::of_groups(metadata, None, g..g + 1)
    }

    fn of_groups(metadata: &ParquetMetaData, leaves: Option<Vec<usize>>, groups: std::ops::Range<usize>) -> Plan {
        let mut chunks = Vec::new();
        for (g, rg) in metadata.row_groups().iter().enumerate().take(groups.end).skip(groups.start) {
            for (c, chunk) in rg.columns().iter().enumerate() {
                if leaves.as_ref().is_none_or(|l| l.contains(&c)) {
                    let (start, length) = chunk.byte_range();
                    if length > 0 {
                        chunks.push((start, start + length, g));
                    }
                }
            }
        }
        chunks.sort_unstable();
        Plan { chunks, leaves }
    }

    /// The planned chunk holding `start..end`.
    fn chunk(&self, start: u64, end: u64) -> Option<(u64, u64, usize)> {
        let i = self.chunks.partition_point(|c| c.0 <= start).checked_sub(1)?;
        let c = self.chunks[i];
        (end <= c.1).then_some(c)
    }

    /// The spans of row group `g`'s planned chunks, neighbours joined.
    fn spans(&self, g: usize) -> Vec<Range<u64>> {
        let mut spans: Vec<Range<u64>> = Vec::new();
        for &(start, end, group) in &self.chunks {
            if group != g {
                continue;
            }
            match spans.last_mut() {
                Some(last) if start <= last.end + COALESCE_GAP => last.end = last.end.max(end),
                _ => spans.push(start..end),
            }
        }
        spans
    }
}

/// A row group's planned chunks, fetched: spans of the object, by start.
struct Fetched {
    group: usize,
    leaves: Option<Vec<usize>>,
    spans: Vec<(u64, Bytes)>,
}

impl Fetched {
    fn slice(&self, start: u64, end: u64) -> Option<Bytes> {
        let i = self.spans.partition_point(|s| s.0 <= start).checked_sub(1)?;
        let (at, bytes) = &self.spans[i];
        (end <= at + bytes.len() as u64).then(|| bytes.slice((start - at) as usize..(end - at) as usize))
    }

    /// From `start` to the end of its span.
    fn rest(&self, start: u64) -> Option<Bytes> {
        let i = self.spans.partition_point(|s| s.0 <= start).checked_sub(1)?;
        let (at, bytes) = &self.spans[i];
        (start < at + bytes.len() as u64).then(|| bytes.slice((start - at) as usize..))
    }
}

/// The row groups an object's readers fetched, least recently used first.
#[derive(Default)]
struct Cache {
    entries: Vec<Arc<Fetched>>,
}

impl RemoteObject {
    /// Row group `g` of `plan`, fetched now unless a reader did before.
    fn row_group(&self, plan: &Plan, g: usize) -> std::result::Result<Arc<Fetched>, ParquetError> {
        {
            let mut cache = lock(&self.cache);
            if let Some(i) = cache.entries.iter().position(|f| f.group == g && f.leaves == plan.leaves) {
                let hit = cache.entries.remove(i);
                cache.entries.push(hit.clone());
                return Ok(hit);
            }
        }
        let spans = plan.spans(g);
        let bytes = self.fetch(spans.clone())?;
        let fetched =
            Arc::new(Fetched { group: g, leaves: plan.leaves.clone(), spans: spans.iter().map(|s| s.start).zip(bytes).collect() });
        let mut cache = lock(&self.cache);
        let keep = (2 * self.readers.load(Ordering::Relaxed)).max(2);
        while cache.entries.len() >= keep {
            cache.entries.remove(0);
        }
        cache.entries.push(fetched.clone());
        Ok(fetched)
    }
}

/// Counts an open reader of an object while it lives (its clones share it).
struct ReaderCount(Arc<RemoteObject>);

impl Drop for ReaderCount {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Relaxed);
        let keep = (2 * self.0.readers.load(Ordering::Relaxed)).max(2);
        let mut cache = lock(&self.0.cache);
        let excess = cache.entries.len().saturating_sub(keep);
        cache.entries.drain(..excess);
    }
}

/// A reader of an object: Parquet's `ChunkReader` over range requests (the module doc).
#[derive(Clone)]
pub struct RemoteFile {
    object: Arc<RemoteObject>,
    plan: Option<Arc<Plan>>,
    /// The row group read last (no lock on the object's cache for every page).
    current: Arc<Mutex<Option<Arc<Fetched>>>>,
    _count: Arc<ReaderCount>,
}

impl RemoteFile {
    pub(crate) fn new(object: Arc<RemoteObject>, plan: Option<Arc<Plan>>) -> RemoteFile {
        object.readers.fetch_add(1, Ordering::Relaxed);
        let count = Arc::new(ReaderCount(object.clone()));
        RemoteFile { object, plan, current: Default::default(), _count: count }
    }

    /// The fetched row group holding the planned chunk `start..end`, if it is one.
    fn planned(&self, start: u64, end: u64) -> std::result::Result<Option<Arc<Fetched>>, ParquetError> {
        let Some(plan) = &self.plan else { return Ok(None) };
        let Some((_, _, g)) = plan.chunk(start, end) else { return Ok(None) };
        let mut current = lock(&self.current);
        if let Some(f) = current.as_ref().filter(|f| f.group == g) {
            return Ok(Some(f.clone()));
        }
        let fetched = self.object.row_group(plan, g)?;
        *current = Some(fetched.clone());
        Ok(Some(fetched))
    }

    fn check(&self, start: u64, end: u64) -> std::result::Result<(), ParquetError> {
        if end > self.object.size {
            return Err(ParquetError::EOF(format!(
                "{}: bytes {start}..{end} are past the end of an object of {} bytes",
                self.object.url.text, self.object.size
            )));
        }
        Ok(())
    }
}

impl Length for RemoteFile {
    fn len(&self) -> u64 {
        self.object.size
    }
}

impl parquet::file::reader::ChunkReader for RemoteFile {
    type T = RemoteRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<RemoteRead> {
        self.check(start, start)?;
        if let Some(tail) = self.object.tail_bytes(start, self.object.size) {
            return Ok(RemoteRead::Bytes(tail.reader()));
        }
        if let Some(rest) = self.planned(start, start + 1)?.and_then(|f| f.rest(start)) {
            return Ok(RemoteRead::Bytes(rest.reader()));
        }
        Ok(RemoteRead::Stream(Streamed { object: self.object.clone(), at: start, block: Bytes::new().reader() }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start + length as u64;
        self.check(start, end)?;
        if let Some(bytes) = self.object.tail_bytes(start, end) {
            return Ok(bytes);
        }
        if let Some(bytes) = self.planned(start, end)?.and_then(|f| f.slice(start, end)) {
            return Ok(bytes);
        }
        self.object.fetch_one(start..end)
    }
}

/// Bytes of an object from an offset: from memory, or fetched a block at a time.
pub enum RemoteRead {
    /// Bytes fetched before (a row group, the footer's).
    Bytes(bytes::buf::Reader<Bytes>),
    /// Bytes fetched as they are read.
    Stream(Streamed),
}

/// An object read from an offset, [`STREAM_BLOCK`] bytes a request.
pub struct Streamed {
    object: Arc<RemoteObject>,
    at: u64,
    block: bytes::buf::Reader<Bytes>,
}

/// Bytes a streamed read fetches at once.
const STREAM_BLOCK: u64 = 4 << 20;

impl std::io::Read for RemoteRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            RemoteRead::Bytes(r) => r.read(buf),
            RemoteRead::Stream(Streamed { object, at, block }) => {
                if !block.get_ref().has_remaining() {
                    let end = (*at + STREAM_BLOCK).min(object.size);
                    if *at >= end {
                        return Ok(0);
                    }
                    let bytes = object.fetch_one(*at..end).map_err(std::io::Error::other)?;
                    *at = end;
                    *block = bytes.reader();
                }
                block.read(buf)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_chunks_join_into_spans() {
        let plan =
            Plan { chunks: vec![(4, 100, 0), (100, 200, 0), (300, 400, 0), (200_000, 300_000, 0), (300_000, 300_010, 1)], leaves: None };
        assert_eq!(plan.spans(0), vec![4..400, 200_000..300_000]);
        assert_eq!(plan.spans(1), vec![300_000..300_010]);
        assert_eq!(plan.chunk(150, 160), Some((100, 200, 0)));
        assert_eq!(plan.chunk(150, 250), None, "across two chunks: not one planned chunk");
        assert_eq!(plan.chunk(0, 2), None);
        let f = Fetched { group: 0, leaves: None, spans: vec![(4, Bytes::from(vec![7u8; 396]))] };
        assert_eq!(f.slice(10, 20).map(|b| b.len()), Some(10));
        assert_eq!(f.slice(390, 401), None);
        assert_eq!(f.rest(399).map(|b| b.len()), Some(1));
    }
}

//! An object read by range requests: opened with its last bytes (the footer), its row
//! groups fetched a row group at a time for the decoders, which read them from memory, the
//! next ones fetched while the decoders read the one before (read-ahead).
//!
//! A reader ([`RemoteFile`]) knows which column chunks it will read (a plan: every chunk of
//! the file, or the leaves of a projection) and in which order it reads the row groups
//! (every row group of the file in file order, or those of a run, [`open_groups`]). A row
//! group's planned chunks are fetched together: neighbouring chunks (gaps up to
//! [`COALESCE_GAP`]) as one span, every span in pieces of at most [`PIECE_BYTES`],
//! `max_concurrency` pieces at once, as one task on the stores' runtime.
//!
//! **Read-ahead.** When a reader first reads a row group, the next row groups of its order
//! are started too, until [`READ_AHEAD_BYTES`] of planned chunks (at least one row group)
//! are fetched or being fetched ahead of it; a reader opened for a run starts its first row
//! group at once, so the runs of a merge all fetch their first row groups together as they
//! open. So a reader decodes one row group while the next are on the way, and waits only
//! where the store is slower than its decoder.
//!
//! **Memory.** The bytes of row groups fetched ahead and not yet read by a reader (in
//! flight or arrived) count against one bound for the whole process,
//! [`set_read_ahead_limit`] ([`DEFAULT_READ_AHEAD_LIMIT`] unless set; a merge sets it to its
//! budget's share, `crate::parquet::memory`): a row group that would pass it is not fetched
//! ahead (its reader fetches it when it reaches it). A row group counts from the moment its
//! fetch starts, for its planned bytes, until a reader first reads it: it is then that
//! reader's current row group, which the decoders' share holds (an object's run counts
//! two row groups' compressed bytes in its decoders' estimate,
//! `crate::parquet::inputs::decoder_bytes`, as many as its reader keeps).
//!
//! **Sharing.** Fetched row groups, and those being fetched, are shared by the readers of
//! the object: a reader that wants a row group being fetched waits for that fetch, never
//! starts another (each planned range is fetched once, unless the row group was dropped
//! before a reader came back to it). Row groups read are kept while readers may want them:
//! as many as each open reader may read at once (two, or all those a run's batch spans:
//! the decoder reads every column of a batch in turn, each across those row groups, so
//! keeping fewer would fetch them again column after column), the least recently used
//! dropped first. Bytes outside the plan (a
//! bloom filter, a chunk not projected) are fetched as asked; the object's last
//! [`TAIL_BYTES`] come with it when it is opened.
//!
//! **Faults and cancellation.** A read-ahead that failed (after object_store's retries) is
//! fetched once more when its reader reaches it, whose error, if it fails again, is the
//! reader's. A reader dropped (its run done, a DataFusion stream or a library reader
//! dropped, an error) aborts the row groups it fetched ahead that no reader took and waits
//! for their tasks to end; a reader opened again where another stopped (a run reopened for
//! another batch size) takes over those the other fetched ahead first, so none is fetched
//! twice. [`stop_read_ahead`] (a merge or a sort calls it as it ends: done, failed or
//! cancelled) aborts every row group fetched ahead that no reader took: no request of a
//! finished merge is left running.
//!
//! Every request carries the ETag the object was opened with (`If-Match`): an object
//! replaced since is an error ("changed since its footer was read"), not rows of another
//! version. Requests are retried by object_store on transient errors (5xx, throttling,
//! connection resets: [`object_store::RetryConfig`], set by the storage options).

use super::config::{settings, store_for};
use super::location::ObjectUrl;
use super::runtime::{block_on, runtime};
use super::ObjectVersion;
use crate::error::{Error, Result};
use bytes::{Buf, Bytes, BytesMut};
use futures::future::{BoxFuture, FutureExt, Shared};
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use tokio::task::AbortHandle;

/// Bytes at an object's end fetched when it is opened: the footer of most files, and the
/// bytes its identity's fingerprint hashes (as a local file's).
pub(crate) const TAIL_BYTES: u64 = 64 << 10;

/// The most bytes one request fetches: larger spans are fetched in pieces, at once.
pub(crate) const PIECE_BYTES: u64 = 8 << 20;

/// Chunks this close are fetched as one span (the gap's bytes are cheaper than a request).
pub(crate) const COALESCE_GAP: u64 = 64 << 10;

/// Bytes of planned chunks a reader keeps fetched (or being fetched) ahead of the row group
/// it reads: at least one row group, the next ones while they are fewer bytes than this.
pub(crate) const READ_AHEAD_BYTES: u64 = PIECE_BYTES;

/// The bound on bytes fetched ahead and not yet read, all objects together, unless
/// [`set_read_ahead_limit`] set another.
pub(crate) const DEFAULT_READ_AHEAD_LIMIT: u64 = super::DEFAULT_READ_AHEAD_LIMIT;

/// Bytes of row groups fetched ahead that no reader took yet (in flight or arrived).
static AHEAD_HELD: AtomicU64 = AtomicU64::new(0);

/// The most [`AHEAD_HELD`] may reach.
static AHEAD_LIMIT: AtomicU64 = AtomicU64::new(DEFAULT_READ_AHEAD_LIMIT);

/// Read-ahead tasks whose future is still alive (running, or aborted and not yet dropped).
static AHEAD_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Bytes of every row group in the objects' caches (fetched ahead, or taken by a reader
/// and kept), from the start of its fetch until it leaves the cache.
static CACHED: AtomicU64 = AtomicU64::new(0);

/// The most [`CACHED`] ever held (what the tests check against the budget).
#[cfg(test)]
static CACHED_PEAK: AtomicU64 = AtomicU64::new(0);

/// Readers opened in this process: each one's id, the owner of the row groups it fetches
/// ahead.
static READER_IDS: AtomicUsize = AtomicUsize::new(1);

/// The most [`AHEAD_HELD`] ever held (what the tests check against the bound).
#[cfg(test)]
static AHEAD_PEAK: AtomicU64 = AtomicU64::new(0);

/// Sets the bound on the bytes of row groups fetched ahead of their readers and not yet
/// read, all objects together (0: no read-ahead); returns the bound it replaces.
pub(crate) fn set_read_ahead_limit(bytes: u64) -> u64 {
    AHEAD_LIMIT.swap(bytes, Ordering::Relaxed)
}

/// Read-ahead tasks still alive: 0 once [`stop_read_ahead`] returned and no reader is open.
#[cfg(test)]
pub(crate) fn read_ahead_running() -> usize {
    AHEAD_RUNNING.load(Ordering::SeqCst)
}

/// The most bytes ever held ahead since [`reset_read_ahead_peak`].
#[cfg(test)]
pub(crate) fn read_ahead_peak() -> u64 {
    AHEAD_PEAK.load(Ordering::Relaxed)
}

#[cfg(test)]
pub(crate) fn reset_read_ahead_peak() {
    AHEAD_PEAK.store(AHEAD_HELD.load(Ordering::Relaxed), Ordering::Relaxed);
    CACHED_PEAK.store(CACHED.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// The most bytes of row groups the caches ever held (ahead or taken) since
/// [`reset_read_ahead_peak`].
#[cfg(test)]
pub(crate) fn cached_peak() -> u64 {
    CACHED_PEAK.load(Ordering::Relaxed)
}

/// Bytes of row groups the caches hold now.
#[cfg(test)]
pub(crate) fn cached_now() -> u64 {
    CACHED.load(Ordering::Relaxed)
}

/// Bytes of a row group in an object's cache, counted in [`CACHED`] while this lives.
struct Cached(u64);

impl Cached {
    fn new(bytes: u64) -> Cached {
        let _now = CACHED.fetch_add(bytes, Ordering::AcqRel) + bytes;
        #[cfg(test)]
        CACHED_PEAK.fetch_max(_now, Ordering::Relaxed);
        Cached(bytes)
    }
}

impl Drop for Cached {
    fn drop(&mut self) {
        CACHED.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// Bytes of a row group fetched ahead, counted in [`AHEAD_HELD`] while this lives.
struct Held(u64);

impl Held {
    /// `bytes` more ahead, if the bound allows them.
    fn try_new(bytes: u64) -> Option<Held> {
        let limit = AHEAD_LIMIT.load(Ordering::Relaxed);
        let mut held = AHEAD_HELD.load(Ordering::Relaxed);
        loop {
            if held + bytes > limit {
                return None;
            }
            match AHEAD_HELD.compare_exchange_weak(held, held + bytes, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        #[cfg(test)]
        AHEAD_PEAK.fetch_max(held + bytes, Ordering::Relaxed);
        Some(Held(bytes))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        AHEAD_HELD.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// Counts a read-ahead task in [`AHEAD_RUNNING`] while its future lives.
struct Running;

impl Running {
    fn new() -> Running {
        AHEAD_RUNNING.fetch_add(1, Ordering::SeqCst);
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        AHEAD_RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Aborts the row groups fetched ahead that no reader took, in every object opened, and
/// waits for their tasks to end (the module doc); drops the row groups kept of the objects
/// no reader has open. Readers still open fetch what they reach on demand.
pub(crate) fn stop_read_ahead() {
    let objects: Vec<Arc<RemoteObject>> = lock(&OBJECTS).values().cloned().collect();
    let mut stopped = Vec::new();
    for object in objects {
        let mut cache = lock(&object.cache);
        let (ahead, mut taken): (Vec<Entry>, Vec<Entry>) = cache.entries.drain(..).partition(|e| e.ahead.is_some());
        // Row groups read and kept for readers: gone with the last reader of the object.
        if object.readers.load(Ordering::Relaxed) == 0 {
            taken.clear();
        }
        cache.entries = taken;
        for e in &ahead {
            e.abort.abort();
        }
        stopped.extend(ahead.into_iter().map(|e| e.fetch));
    }
    // An aborted task resolves once its future (its requests) is dropped.
    for fetch in stopped {
        let _ = futures::executor::block_on(fetch);
    }
}

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
    /// Row groups the open readers keep (two per reader, or as many as a reader's batch
    /// spans): how many row groups read the cache holds.
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
    store_error_of(url, doing, &e)
}

/// [`store_error`] of an error shared by the readers that waited for one fetch.
fn store_error_of(url: &str, doing: &str, e: &object_store::Error) -> Error {
    let detail = match e {
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

/// A reader of the object at `path` for the row groups `groups` (every leaf) of `metadata`,
/// read in that order, up to `at_once` of them at once (a batch spanning several): the
/// first started at once, the next fetched ahead (a run's reader).
pub(crate) fn open_groups(path: &Path, metadata: &ParquetMetaData, groups: &[usize], at_once: usize) -> std::io::Result<RemoteFile> {
    Ok(RemoteFile::new(known_object(path)?, Some(Arc::new(Plan::of_order(metadata, groups, at_once)))))
}

/// A reader of the object at `path` for row group `g`'s chunks (all leaves) of `metadata`;
/// where `kept`, the row group stays in the cache for the next reader of it (held as if
/// fetched ahead: a row group checked now and copied later, fetched once for both).
pub(crate) fn open_row_group(path: &Path, metadata: &ParquetMetaData, g: usize, kept: bool) -> std::io::Result<RemoteFile> {
    Ok(RemoteFile::new(known_object(path)?, Some(Arc::new(Plan { kept, ..Plan::of_row_group(metadata, g) }))))
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
        fetched.map_err(|e| self.read_error(&ranges, &e))
    }

    /// The error of a failed read of `ranges`, naming the object and the bytes.
    fn read_error(&self, ranges: &[Range<u64>], e: &object_store::Error) -> ParquetError {
        let (first, last) = (ranges.first().map_or(0, |r| r.start), ranges.last().map_or(0, |r| r.end));
        let doing = format!("{} (bytes {first}..{last})", super::READ_FAILED);
        ParquetError::External(Box::new(store_error_of(&self.url.text, &doing, e)))
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

/// The column chunks a reader will read: `(start, end, row group)`, by start, and the order
/// it reads their row groups in.
pub(crate) struct Plan {
    chunks: Vec<(u64, u64, usize)>,
    /// Which leaves (all where `None`): part of a fetched row group's key.
    leaves: Option<Vec<usize>>,
    /// The row groups the reader reads, in its order: what it fetches ahead.
    order: Vec<usize>,
    /// Whether the reader starts its first row group as it opens (a run's reader).
    start_at_open: bool,
    /// Row groups the reader may read at once (a batch spanning several: every column
    /// reads each of them in turn), kept in the object's cache while it is open.
    keep: usize,
    /// Whether the row groups it fetches stay in the cache, counted against the
    /// read-ahead's bound, for the next reader of them (`open_row_group`).
    kept: bool,
}

impl Plan {
    fn new(metadata: &ParquetMetaData, leaves: Option<&ProjectionMask>) -> Plan {
        let columns = metadata.file_metadata().schema_descr().num_columns();
        let leaves: Option<Vec<usize>> = leaves.map(|mask| (0..columns).filter(|&c| mask.leaf_included(c)).collect());
        Plan::of_groups(metadata, leaves, (0..metadata.num_row_groups()).collect(), false)
    }

    /// Row group `g`'s chunks, every leaf (a row group copied unchanged, or checked).
    fn of_row_group(metadata: &ParquetMetaData, g: usize) -> Plan {
        Plan::of_groups(metadata, None, vec![g], false)
    }

    /// The chunks of the row groups `order` (every leaf), read in that order, the first
    /// started at open, up to `at_once` of them read at once.
    fn of_order(metadata: &ParquetMetaData, order: &[usize], at_once: usize) -> Plan {
        Plan { keep: at_once.max(2), ..Plan::of_groups(metadata, None, order.to_vec(), true) }
    }

    fn of_groups(metadata: &ParquetMetaData, leaves: Option<Vec<usize>>, order: Vec<usize>, start_at_open: bool) -> Plan {
        let mut chunks = Vec::new();
        let mut order: Vec<usize> = order.into_iter().filter(|&g| g < metadata.num_row_groups()).collect();
        let mut seen = std::collections::HashSet::new();
        order.retain(|&g| seen.insert(g));
        for &g in &order {
            for (c, chunk) in metadata.row_group(g).columns().iter().enumerate() {
                if leaves.as_ref().is_none_or(|l| l.contains(&c)) {
                    let (start, length) = chunk.byte_range();
                    if length > 0 {
                        chunks.push((start, start + length, g));
                    }
                }
            }
        }
        chunks.sort_unstable();
        Plan { chunks, leaves, order, start_at_open, keep: 2, kept: false }
    }

    /// Bytes of row group `g`'s spans.
    fn group_bytes(&self, g: usize) -> u64 {
        self.spans(g).iter().map(|s| s.end - s.start).sum()
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

/// A row group's fetch, shared by the readers that wait for it.
type Fetch = Shared<BoxFuture<'static, std::result::Result<Arc<Fetched>, Arc<object_store::Error>>>>;

/// A row group of an object, fetched or being fetched.
struct Entry {
    group: usize,
    leaves: Option<Vec<usize>>,
    fetch: Fetch,
    abort: AbortHandle,
    /// Fetched ahead and not taken by a reader yet: its bytes, counted against the bound.
    ahead: Option<Held>,
    /// The reader whose read-ahead wants it (stopped when that reader is dropped).
    owner: usize,
    /// Its planned bytes, counted in [`CACHED`] while it is in the cache.
    cached: Cached,
}

/// The row groups an object's readers fetched or are fetching, least recently used first
/// (a row group fetched ahead counts as used when it is started).
#[derive(Default)]
struct Cache {
    entries: Vec<Entry>,
}

impl Cache {
    fn position(&self, g: usize, leaves: &Option<Vec<usize>>) -> Option<usize> {
        self.entries.iter().position(|e| e.group == g && &e.leaves == leaves)
    }

    /// Drops the least recently used row groups that readers took beyond `keep` (those
    /// fetched ahead stay: the bound on read-ahead holds them).
    fn trim(&mut self, keep: usize) {
        let mut taken = self.entries.iter().filter(|e| e.ahead.is_none()).count();
        let mut i = 0;
        while taken > keep && i < self.entries.len() {
            if self.entries[i].ahead.is_none() {
                self.entries.remove(i);
                taken -= 1;
            } else {
                i += 1;
            }
        }
    }
}

impl RemoteObject {
    /// Row groups read kept in the cache: those the open readers may read at once (two
    /// per reader at least), two where none is open.
    fn keep(&self) -> usize {
        self.readers.load(Ordering::Relaxed).max(2)
    }

    /// Starts fetching row group `g` of `plan` on the stores' runtime (counted in
    /// [`AHEAD_RUNNING`] where `ahead`).
    fn start(&self, plan: &Plan, g: usize, ahead: bool) -> (Fetch, AbortHandle) {
        let spans = plan.spans(g);
        let (store, location, e_tag, concurrency) =
            (self.store.clone(), self.url.location.clone(), self.e_tag.clone(), self.max_concurrency);
        let running = ahead.then(Running::new);
        let task = runtime().spawn(async move {
            let _running = running;
            let bytes = fetch_ranges(store, location, e_tag, spans.clone(), concurrency).await?;
            Ok(Arc::new(Fetched { group: g, spans: spans.iter().map(|s| s.start).zip(bytes).collect() }))
        });
        let abort = task.abort_handle();
        let fetch = async move {
            match task.await {
                Ok(fetched) => fetched.map_err(Arc::new),
                Err(e) => Err(Arc::new(object_store::Error::Generic { store: "corank", source: Box::new(e) })),
            }
        };
        (fetch.boxed().shared(), abort)
    }

    /// Row group `g` of `plan`: taken from the cache (waiting for its fetch if it is on the
    /// way), or fetched now.
    fn row_group(&self, plan: &Plan, g: usize) -> std::result::Result<Arc<Fetched>, ParquetError> {
        let mut retried = false;
        loop {
            let (fetch, was_ahead) = {
                let mut cache = lock(&self.cache);
                let (fetch, was_ahead) = match cache.position(g, &plan.leaves) {
                    Some(i) => {
                        let mut entry = cache.entries.remove(i);
                        let was_ahead = entry.ahead.take().is_some();
                        if plan.kept {
                            entry.ahead = Held::try_new(entry.cached.0);
                            entry.owner = 0;
                        }
                        let fetch = entry.fetch.clone();
                        cache.entries.push(entry);
                        (fetch, was_ahead)
                    }
                    None => {
                        // Room made first: the cache never holds more than it keeps.
                        cache.trim(self.keep().saturating_sub(1));
                        let (fetch, abort) = self.start(plan, g, false);
                        let bytes = plan.group_bytes(g);
                        let (cached, ahead) = (Cached::new(bytes), plan.kept.then(|| Held::try_new(bytes)).flatten());
                        let leaves = plan.leaves.clone();
                        cache.entries.push(Entry { group: g, leaves, fetch: fetch.clone(), abort, ahead, owner: 0, cached });
                        (fetch, false)
                    }
                };
                cache.trim(self.keep());
                (fetch, was_ahead)
            };
            match futures::executor::block_on(fetch.clone()) {
                Ok(fetched) => return Ok(fetched),
                Err(e) => {
                    // Not kept: the next reader of the row group fetches it again.
                    let mut cache = lock(&self.cache);
                    if let Some(i) = cache.entries.iter().position(|e| e.fetch.ptr_eq(&fetch)) {
                        cache.entries.remove(i);
                    }
                    drop(cache);
                    // A read-ahead that failed is fetched once more by its reader.
                    if was_ahead && !retried {
                        retried = true;
                        continue;
                    }
                    return Err(self.read_error(&plan.spans(g), &e));
                }
            }
        }
    }

    /// Starts the row groups of `plan.order` from its `from`th that are not fetched or on
    /// the way, until [`READ_AHEAD_BYTES`] (at least one row group) are ahead, within the
    /// bound (the module doc), for the reader `owner`; those already fetched ahead become
    /// its own (a run's reader reopened takes over what the one it replaces started).
    fn read_ahead(&self, plan: &Plan, from: usize, owner: usize) {
        let mut ahead = 0;
        let mut cache = lock(&self.cache);
        for &g in plan.order.iter().skip(from) {
            if ahead >= READ_AHEAD_BYTES {
                break;
            }
            let bytes = plan.group_bytes(g);
            match cache.position(g, &plan.leaves) {
                Some(i) => {
                    if cache.entries[i].ahead.is_some() {
                        cache.entries[i].owner = owner;
                    }
                }
                None => {
                    let Some(held) = Held::try_new(bytes) else { break };
                    let (fetch, abort) = self.start(plan, g, true);
                    let (leaves, cached) = (plan.leaves.clone(), Cached::new(bytes));
                    cache.entries.push(Entry { group: g, leaves, fetch, abort, ahead: Some(held), owner, cached });
                }
            }
            ahead += bytes;
        }
    }

    /// Aborts the row groups the reader `owner` fetched ahead that no reader took, and
    /// waits for their tasks to end (the reader was dropped: nobody will read them).
    fn stop_ahead_of(&self, owner: usize) {
        let stopped: Vec<Fetch> = {
            let mut cache = lock(&self.cache);
            let (ahead, kept): (Vec<Entry>, Vec<Entry>) = cache.entries.drain(..).partition(|e| e.ahead.is_some() && e.owner == owner);
            cache.entries = kept;
            ahead.iter().for_each(|e| e.abort.abort());
            ahead.into_iter().map(|e| e.fetch).collect()
        };
        // An aborted task resolves once its future (its requests) is dropped, on the
        // stores' runtime, never on a reader's thread.
        for fetch in stopped {
            let _ = futures::executor::block_on(fetch);
        }
    }
}

/// Lets go of row group `g` (every leaf) of the object at `path` where a reader kept it
/// for the next (`open_row_group`'s `kept`) and none will take it (a copy too large to
/// hold, streamed instead): no longer held against the bound, dropped as the cache trims.
pub(crate) fn release_kept(path: &Path, g: usize) {
    let Some(object) = lock(&OBJECTS).get(path.to_string_lossy().as_ref()).cloned() else { return };
    let mut cache = lock(&object.cache);
    if let Some(i) = cache.position(g, &None) {
        if cache.entries[i].owner == 0 {
            cache.entries[i].ahead = None;
        }
    }
    let keep = object.keep();
    cache.trim(keep);
}

/// Counts an open reader of an object, by the row groups it keeps, while it lives (its
/// clones share it), and names it (`2`: its id, the owner of its read-aheads). As it is
/// dropped, the row groups it fetched ahead that no reader took are stopped.
struct ReaderCount(Arc<RemoteObject>, usize, usize);

impl Drop for ReaderCount {
    fn drop(&mut self) {
        self.0.stop_ahead_of(self.2);
        self.0.readers.fetch_sub(self.1, Ordering::Relaxed);
        let keep = self.0.keep();
        lock(&self.0.cache).trim(keep);
    }
}

/// A reader of an object: Parquet's `ChunkReader` over range requests (the module doc).
#[derive(Clone)]
pub struct RemoteFile {
    object: Arc<RemoteObject>,
    plan: Option<Arc<Plan>>,
    /// The row group read last (no lock on the object's cache for every page).
    current: Arc<Mutex<Option<Arc<Fetched>>>>,
    count: Arc<ReaderCount>,
}

impl RemoteFile {
    pub(crate) fn new(object: Arc<RemoteObject>, plan: Option<Arc<Plan>>) -> RemoteFile {
        // A reader without a plan caches nothing: it keeps no row group.
        let keep = plan.as_ref().map_or(0, |p| p.keep);
        object.readers.fetch_add(keep, Ordering::Relaxed);
        let id = READER_IDS.fetch_add(1, Ordering::Relaxed);
        let count = Arc::new(ReaderCount(object.clone(), keep, id));
        if let Some(plan) = plan.as_ref().filter(|p| p.start_at_open) {
            object.read_ahead(plan, 0, id);
        }
        RemoteFile { object, plan, current: Default::default(), count }
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
        // The next row groups come while this one is decoded.
        if let Some(at) = plan.order.iter().position(|&o| o == g) {
            self.object.read_ahead(plan, at + 1, self.count.2);
        }
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
        let plan = Plan {
            chunks: vec![(4, 100, 0), (100, 200, 0), (300, 400, 0), (200_000, 300_000, 0), (300_000, 300_010, 1)],
            leaves: None,
            order: vec![0, 1],
            start_at_open: false,
            keep: 2,
            kept: false,
        };
        assert_eq!(plan.spans(0), vec![4..400, 200_000..300_000]);
        assert_eq!(plan.spans(1), vec![300_000..300_010]);
        assert_eq!(plan.chunk(150, 160), Some((100, 200, 0)));
        assert_eq!(plan.chunk(150, 250), None, "across two chunks: not one planned chunk");
        assert_eq!(plan.chunk(0, 2), None);
        let f = Fetched { group: 0, spans: vec![(4, Bytes::from(vec![7u8; 396]))] };
        assert_eq!(f.slice(10, 20).map(|b| b.len()), Some(10));
        assert_eq!(f.slice(390, 401), None);
        assert_eq!(f.rest(399).map(|b| b.len()), Some(1));
    }
}

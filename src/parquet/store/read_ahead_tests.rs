//! The read-ahead of `object` over an in-memory store that counts, fails and holds requests:
//! every planned range fetched once, the bytes fetched ahead within the bound, a failed
//! read-ahead fetched again (or a clear error, never other rows), and nothing left running
//! once it is stopped.

use super::object::{self, read_ahead_running, set_read_ahead_limit, stop_read_ahead};
use super::register_object_store;
use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::WriterProperties;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The globals of the read-ahead (its bound, its peak) are the process's: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// What the store does to ranged GETs.
#[derive(Default)]
struct Faults {
    /// Fail the GETs of ranges starting here, this many times each.
    fail: HashMap<u64, usize>,
    /// Hold every ranged GET (not the footer's suffix GET) until the test lets it go.
    hold: bool,
}

/// An in-memory store that logs the ranges asked of it.
#[derive(Debug)]
struct Counting {
    inner: InMemory,
    log: Mutex<Vec<Range<u64>>>,
    faults: Mutex<FaultsDebug>,
    /// GETs whose future is alive.
    in_flight: Arc<AtomicUsize>,
    gate: tokio::sync::Semaphore,
}

#[derive(Default)]
struct FaultsDebug(Faults);

impl std::fmt::Debug for FaultsDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
}

impl std::fmt::Display for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counting")
    }
}

struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl ObjectStore for Counting {
    async fn put_opts(&self, location: &ObjectPath, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &ObjectPath, opts: PutMultipartOptions) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _alive = InFlight(self.in_flight.clone());
        if let Some(GetRange::Bounded(r)) = &options.range {
            self.log.lock().unwrap().push(r.clone());
            let hold = self.faults.lock().unwrap().0.hold;
            if hold {
                self.gate.acquire().await.expect("the gate stays open").forget();
            }
            let fail = match self.faults.lock().unwrap().0.fail.get_mut(&r.start) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            };
            if fail {
                return Err(object_store::Error::Generic { store: "Counting", source: "injected fault".into() });
            }
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &ObjectPath, ranges: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&ObjectPath>, offset: &ObjectPath) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &ObjectPath, to: &ObjectPath, options: RenameOptions) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// Rows `0..rows` in row groups of `group_rows`: an id and a string wide enough that a row
/// group is far more than the footer's 64 KiB.
fn file_bytes(rows: i64, group_rows: usize) -> (Bytes, Vec<RecordBatch>) {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("s", DataType::Utf8, false)]));
    let ids: Vec<i64> = (0..rows).collect();
    // Not compressible into nothing: every value differs.
    let strings: Vec<String> = ids.iter().map(|i| format!("{:0>64}", (*i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))).collect();
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids)), Arc::new(StringArray::from(strings))]).expect("a batch");
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(group_rows)).set_dictionary_enabled(false).build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).expect("a writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
    (Bytes::from(out), vec![batch])
}

/// A store under `s3://{bucket}` holding one file of `groups` row groups at `data/a.parquet`.
fn store_with_file(bucket: &str, groups: usize) -> (Arc<Counting>, String, Arc<ParquetMetaData>, Vec<RecordBatch>) {
    let (bytes, batches) = file_bytes(groups as i64 * 4096, 4096);
    let store = Arc::new(Counting {
        inner: InMemory::new(),
        log: Mutex::default(),
        faults: Mutex::default(),
        in_flight: Arc::default(),
        gate: tokio::sync::Semaphore::new(0),
    });
    let (s, b) = (store.clone(), bytes.clone());
    super::runtime::block_on(async move { s.inner.put(&ObjectPath::from("data/a.parquet"), b.into()).await }).expect("put");
    register_object_store(&format!("s3://{bucket}"), store.clone()).expect("registered");
    let metadata = ParquetRecordBatchReaderBuilder::try_new(bytes).expect("a footer").metadata().clone();
    assert_eq!(metadata.num_row_groups(), groups);
    (store, format!("s3://{bucket}/data/a.parquet"), metadata, batches)
}

/// Reads the row groups `groups` through a run's reader of the object.
fn read(url: &str, metadata: &Arc<ParquetMetaData>, groups: &[usize]) -> parquet::errors::Result<Vec<RecordBatch>> {
    read_batches(url, metadata, groups, 1024, 1)
}

/// [`read`] in batches of `rows`, the reader keeping `at_once` row groups.
fn read_batches(
    url: &str,
    metadata: &Arc<ParquetMetaData>,
    groups: &[usize],
    rows: usize,
    at_once: usize,
) -> parquet::errors::Result<Vec<RecordBatch>> {
    let (_, _) = object::open_object(Path::new(url), true).expect("opened");
    let file = object::open_groups(Path::new(url), metadata, groups, at_once).expect("a reader");
    let meta = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::default())?;
    let reader =
        ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta).with_row_groups(groups.to_vec()).with_batch_size(rows).build()?;
    reader.map(|b| b.map_err(parquet::errors::ParquetError::from)).collect()
}

/// The planned spans of row group `g` (all its chunks: they are neighbours).
fn span_of(metadata: &ParquetMetaData, g: usize) -> Range<u64> {
    let columns = metadata.row_group(g).columns();
    let start = columns.iter().map(|c| c.byte_range().0).min().expect("columns");
    let end = columns.iter().map(|c| c.byte_range().0 + c.byte_range().1).max().expect("columns");
    start..end
}

/// Waits (up to a minute) until a request of the read-ahead has reached the holding store.
fn wait_for_a_request(store: &Counting) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.in_flight.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the read-ahead never reached the store");
        std::thread::yield_now();
    }
}

/// Lets the holding store answer again (nothing should be waiting for it any more).
fn release_the_store(store: &Counting) {
    store.faults.lock().unwrap().0.hold = false;
    store.gate.add_permits(64);
}

fn rows_of(batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&batches[0].schema(), batches).expect("one schema")
}

#[test]
fn read_ahead_fetches_each_planned_range_once_within_the_bound() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, expected) = store_with_file("ra-test-once", 6);
    let group = span_of(&metadata, 1).end - span_of(&metadata, 1).start;
    assert!(group > 128 << 10, "row groups of {group} bytes: more than the footer's tail");
    // Room for two row groups ahead, not three.
    let bound = 2 * group + group / 2;
    set_read_ahead_limit(bound);
    object::reset_read_ahead_peak();
    let got = read(&url, &metadata, &[0, 1, 2, 3, 4, 5]).expect("read");
    assert_eq!(rows_of(&got), rows_of(&expected), "the rows of the file");
    let peak = object::read_ahead_peak();
    assert!(peak > 0, "nothing was fetched ahead");
    assert!(peak <= bound, "{peak} bytes ahead, over the bound of {bound}");
    // Each row group's span fetched exactly once (the footer came with the tail), nothing else.
    let mut log = store.log.lock().unwrap().clone();
    log.sort_by_key(|r| r.start);
    let planned: Vec<Range<u64>> = (0..6).map(|g| span_of(&metadata, g)).collect();
    assert_eq!(log, planned, "every planned range fetched once");
    stop_read_ahead();
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    assert_eq!(read_ahead_running(), 0);
}

/// A batch spanning three row groups reads every column across the three in turn: the
/// reader keeps them all (as `RunReader` asks, from its batch size), so none is fetched
/// again column after column.
#[test]
fn batches_across_row_groups_fetch_each_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, expected) = store_with_file("ra-test-span", 6);
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    // Batches of 2.5 row groups, starting mid-group: up to 4 row groups each.
    let rows = 4096 * 5 / 2;
    let got = read_batches(&url, &metadata, &[0, 1, 2, 3, 4, 5], rows, rows.div_ceil(4096) + 1).expect("read");
    assert_eq!(rows_of(&got), rows_of(&expected));
    let mut log = store.log.lock().unwrap().clone();
    log.sort_by_key(|r| r.start);
    assert_eq!(log, (0..6).map(|g| span_of(&metadata, g)).collect::<Vec<_>>(), "every row group fetched once");
    stop_read_ahead();
}

#[test]
fn no_read_ahead_beyond_a_zero_bound_and_the_same_rows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, expected) = store_with_file("ra-test-zero", 4);
    set_read_ahead_limit(0);
    object::reset_read_ahead_peak();
    let got = read(&url, &metadata, &[0, 1, 2, 3]).expect("read");
    assert_eq!(rows_of(&got), rows_of(&expected));
    assert_eq!(object::read_ahead_peak(), 0, "a zero bound fetches nothing ahead");
    assert_eq!(store.log.lock().unwrap().len(), 4, "each row group fetched once, as its reader reached it");
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
}

#[test]
fn a_failed_read_ahead_is_fetched_again_by_its_reader() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, expected) = store_with_file("ra-test-fault", 5);
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    // Row group 2 is fetched ahead (while 1 is read): its first GET fails.
    let failing = span_of(&metadata, 2);
    store.faults.lock().unwrap().0.fail.insert(failing.start, 1);
    let got = read(&url, &metadata, &[0, 1, 2, 3, 4]).expect("read despite the fault");
    assert_eq!(rows_of(&got), rows_of(&expected), "the rows of the file, none lost or doubled");
    let log = store.log.lock().unwrap().clone();
    assert_eq!(log.iter().filter(|r| **r == failing).count(), 2, "the failed range fetched once more: {log:?}");
    for g in [0, 1, 3, 4] {
        assert_eq!(log.iter().filter(|r| **r == span_of(&metadata, g)).count(), 1, "row group {g} fetched once");
    }
    stop_read_ahead();
}

#[test]
fn a_read_ahead_that_fails_for_good_is_an_error_naming_the_object() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, _) = store_with_file("ra-test-error", 4);
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    store.faults.lock().unwrap().0.fail.insert(span_of(&metadata, 2).start, usize::MAX);
    let err = read(&url, &metadata, &[0, 1, 2, 3]).expect_err("a row group that cannot be fetched");
    let text = err.to_string();
    assert!(text.contains(&url) && text.contains("injected fault"), "{text}");
    stop_read_ahead();
}

#[test]
fn stopping_the_read_ahead_leaves_no_request_running() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, _) = store_with_file("ra-test-stop", 4);
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    store.faults.lock().unwrap().0.hold = true;
    let (_, _) = object::open_object(Path::new(&url), true).expect("opened");
    // A run's reader starts its first row groups as it opens; they wait in the store.
    let reader = object::open_groups(Path::new(&url), &metadata, &[0, 1, 2, 3], 1).expect("a reader");
    wait_for_a_request(&store);
    assert!(read_ahead_running() > 0);
    drop(reader);
    stop_read_ahead();
    assert_eq!(read_ahead_running(), 0, "a read-ahead task outlived the stop");
    assert_eq!(store.in_flight.load(Ordering::SeqCst), 0, "a request outlived the stop");
    // The store answers again: nothing was waiting for it.
    release_the_store(&store);
}

/// A reader dropped with row groups still on the way (a DataFusion stream or a library
/// reader dropped early) stops them: no task, no request left, without `stop_read_ahead`.
#[test]
fn dropping_a_reader_stops_its_read_ahead() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, _) = store_with_file("ra-test-drop", 4);
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    store.faults.lock().unwrap().0.hold = true;
    let (_, _) = object::open_object(Path::new(&url), true).expect("opened");
    let reader = object::open_groups(Path::new(&url), &metadata, &[0, 1, 2, 3], 1).expect("a reader");
    // A clone shares the reader: dropping one of them stops nothing.
    let clone = reader.clone();
    wait_for_a_request(&store);
    let running = read_ahead_running();
    assert!(running > 0);
    drop(clone);
    assert_eq!(read_ahead_running(), running, "a clone dropped stopped its reader's read-ahead");
    drop(reader);
    assert_eq!(read_ahead_running(), 0, "a read-ahead task outlived its reader");
    assert_eq!(store.in_flight.load(Ordering::SeqCst), 0, "a request outlived its reader");
    release_the_store(&store);
}

/// A run's reader reopened where another stopped (a new batch size) takes over the row
/// groups the other fetched ahead: dropping the old one stops none of them, and each row
/// group is fetched once.
#[test]
fn a_reader_reopened_takes_over_the_read_ahead() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (store, url, metadata, expected) = store_with_file("ra-test-reopen", 4);
    set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT);
    let (_, _) = object::open_object(Path::new(&url), true).expect("opened");
    let first = object::open_groups(Path::new(&url), &metadata, &[0, 1, 2, 3], 2).expect("a reader");
    let second = object::open_groups(Path::new(&url), &metadata, &[0, 1, 2, 3], 2).expect("a reader");
    drop(first);
    let meta = ArrowReaderMetadata::try_new(metadata.clone(), ArrowReaderOptions::default()).expect("metadata");
    let got: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::new_with_metadata(second, meta)
        .with_batch_size(1024)
        .build()
        .expect("a reader")
        .collect::<Result<_, _>>()
        .expect("read");
    assert_eq!(rows_of(&got), rows_of(&expected));
    let mut log = store.log.lock().unwrap().clone();
    log.sort_by_key(|r| r.start);
    assert_eq!(log, (0..4).map(|g| span_of(&metadata, g)).collect::<Vec<_>>(), "every row group fetched once");
    stop_read_ahead();
}

/// A file of `groups` row groups of 4096 rows whose keys are `k * files + f`: the files
/// interleave row for row, so a merge copies no row group and reads every one.
fn interleaved(f: i64, files: i64, groups: usize) -> Bytes {
    use parquet::file::metadata::SortingColumn;
    let rows = groups as i64 * 4096;
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("s", DataType::Utf8, false)]));
    let ids: Vec<i64> = (0..rows).map(|k| k * files + f).collect();
    let strings: Vec<String> = ids.iter().map(|i| format!("{:0>64}", (*i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))).collect();
    let batch =
        RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids)), Arc::new(StringArray::from(strings))]).expect("a batch");
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(4096))
        .set_dictionary_enabled(false)
        .set_sorting_columns(Some(vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }]))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema, Some(props)).expect("a writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
    Bytes::from(out)
}

/// A merge of objects holds their fetched row groups within its memory budget: those its
/// runs read (two a run, in the decoders' share) and those fetched ahead (R/16), counted by
/// the readers' caches; the same bytes with a small limit and the default. A sort too.
#[test]
fn a_merge_and_a_sort_hold_fetched_row_groups_within_their_budget() {
    use crate::parquet::{merge_files, plan_merge, plan_sort, sort_files, MergeFilesOptions, Passthrough, SortFilesOptions};
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = Arc::new(Counting {
        inner: InMemory::new(),
        log: Mutex::default(),
        faults: Mutex::default(),
        in_flight: Arc::default(),
        gate: tokio::sync::Semaphore::new(0),
    });
    register_object_store("s3://ra-test-budget", store.clone()).expect("registered");
    // Nothing other tests left fetched ahead.
    stop_read_ahead();
    let files = 4;
    let mut paths = Vec::new();
    for f in 0..files {
        let (s, b) = (store.clone(), interleaved(f, files, 6));
        let key = format!("in/{f}.parquet");
        super::runtime::block_on(async move { s.inner.put(&ObjectPath::from(key.as_str()), b.into()).await }).expect("put");
        paths.push(std::path::PathBuf::from(format!("s3://ra-test-budget/in/{f}.parquet")));
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let plan = plan_merge(&paths, None).expect("a plan");
    // Two row groups a run, in the decoders' estimate (per decoder).
    let largest = |f: &crate::parquet::inputs::InputFile| {
        let m = f.metadata.metadata();
        (0..m.num_row_groups()).map(|g| m.row_group(g).columns().iter().map(|c| c.byte_range().1).sum::<u64>()).max().unwrap_or(0)
    };
    let held: u64 = plan.files.iter().map(|f| 2 * largest(f)).sum();
    for limit in [24usize << 20, crate::parquet::default_memory_limit()] {
        let options = MergeFilesOptions { memory_limit: limit, passthrough: Passthrough::Never, ..Default::default() };
        let budget = crate::parquet::memory::merge_budget(&plan, limit, options.writer.row_group_bytes).expect("a budget");
        assert!(budget.read.decoder_bytes as u64 >= held, "{} of decoders count {held} of fetched row groups", budget.read.decoder_bytes);
        // What other tests' objects still cache stays as it is meanwhile (one test at a time).
        object::reset_read_ahead_peak();
        let before = object::cached_now();
        let out = dir.path().join(format!("m{limit}.parquet"));
        let summary = merge_files(&plan, &out, &options, &|_| {}).expect("merged");
        assert_eq!(summary.rows, 4 * 6 * 4096);
        assert_eq!(object::cached_now(), before, "the merge's row groups dropped as it ended");
        let (peak, ahead) = (object::cached_peak() - before, object::read_ahead_peak());
        assert!(ahead > 0 && ahead <= budget.piece_bytes as u64, "{ahead} bytes ahead, bound {}", budget.piece_bytes);
        assert!(peak <= held + budget.piece_bytes as u64, "{peak} bytes of row groups held, budget {held} + {}", budget.piece_bytes);
        assert_eq!(read_ahead_running(), 0, "the merge left a read-ahead running");
    }
    // A sort reads ahead within R/16 of its own budget, not the fixed default.
    let limit = 24usize << 20;
    let options = SortFilesOptions { memory_limit: limit, ..Default::default() };
    let out = dir.path().join("sorted.parquet");
    let by = crate::parquet::parse_order_by("s").expect("keys");
    let sort = plan_sort(&paths, Some(by), &Default::default(), &out, &options).expect("a sort plan");
    assert!((sort.piece_bytes as u64) < super::DEFAULT_READ_AHEAD_LIMIT / 2, "{} is R/16 of a small limit", sort.piece_bytes);
    object::reset_read_ahead_peak();
    let summary = sort_files(&sort, &out, &options, &|_, _| {}).expect("sorted");
    assert_eq!(summary.rows, 4 * 6 * 4096);
    let ahead = object::read_ahead_peak();
    assert!(ahead <= sort.piece_bytes as u64, "{ahead} bytes ahead in a sort, bound {}", sort.piece_bytes);
    assert_eq!(read_ahead_running(), 0, "the sort left a read-ahead running");
    assert_eq!(object::set_read_ahead_limit(super::DEFAULT_READ_AHEAD_LIMIT), super::DEFAULT_READ_AHEAD_LIMIT, "the bound set back");
}

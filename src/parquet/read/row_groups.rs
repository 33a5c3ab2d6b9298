//! Row groups decoded on threads of their own, their batches handed out in list order.
//!
//! [`OrderedRowGroups`] reads a list of row groups (of one file or of many): up to
//! `threads` of them decode at once, each on a thread of its own, and their batches come
//! out in the list's order, row for row as the files hold them (a stable sort or merge
//! sees the input order). The sort reads all its inputs through one
//! ([`crate::parquet::sort_files()`]); the merge reads each run through one when few runs leave
//! cores idle ([`crate::parquet::merge_files()`]: two large files would otherwise decode on two
//! threads).
//!
//! The batches decoded ahead of the reader share one byte budget (`AheadBudget`), so a
//! row group behind the one being read decodes as far as the budget lets it, not a fixed
//! number of batches (otherwise the reader would wait on one decoder at a time). The row
//! group being read (the **front**) may always decode one batch beyond the budget: the
//! reader waits on it, so it never waits on the reader (no deadlock).
//!
//! Memory: the budget, plus per decoder the batch it decoded and holds while it waits for
//! room, plus the front's batch beyond the budget: `ahead_bytes + (threads + 1)` batches.
//! Dropping the reader stops the decoders (their channels close, the budget wakes them).
//!
//! Batch size: [`BatchSizing`] starts at a number of rows and, given a byte target, follows
//! what the batches measure (a decoder reopens its row group where it stopped when the size
//! changes by a factor of 2 or more); values so large that a batch overflows its 32-bit
//! offsets are read with fewer rows. The sizes depend on the data only, never on timing, so
//! the same inputs give the same batches and the output the same bytes (batch boundaries
//! reach the writer's page cuts): the first row group's first batch sets every row group's
//! starting size (`FirstSize`; the others wait for it before they open), then each row
//! group follows its own batches.

use super::{is_offset_overflow, resizes, rows_after_overflow};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::parquet::corrupt::{catch, decode_error};
use crate::parquet::inputs::conform;
use crate::parquet::inputs::hive::FilePartition;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// One row group to read.
#[derive(Clone)]
pub struct RowGroupSource {
    pub path: PathBuf,
    pub metadata: ArrowReaderMetadata,
    pub row_group: usize,
    /// Rows its metadata counts (the reader checks that they all came).
    pub rows: usize,
    /// The file's Hive partition values, set on every batch before it is conformed.
    pub partition: Option<Arc<FilePartition>>,
}

/// How many rows a batch holds.
#[derive(Debug, Clone, Copy)]
pub struct BatchSizing {
    /// Rows of the first batches.
    pub rows: usize,
    /// Bytes a batch should hold; `None`: always `rows`.
    pub target_bytes: Option<usize>,
    /// Bytes a row costs its consumer on top of its Arrow data (counted toward the target).
    pub extra_bytes_per_row: usize,
    /// Most rows of a batch.
    pub max_rows: usize,
}

/// Memory of a batch's rows (a slice at its share of its buffers).
pub fn batch_bytes(b: &RecordBatch) -> usize {
    b.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size())).sum()
}

/// The rows of a list of row groups in list order, decoded `threads` row groups at once
/// (see the module doc).
pub struct OrderedRowGroups {
    /// The row groups not started yet, in list order, numbered (their unit).
    waiting: VecDeque<(usize, RowGroupSource)>,
    /// The row groups decoding, in list order.
    decoding: VecDeque<Decoding>,
    threads: usize,
    budget: Arc<AheadBudget>,
    /// The batch size every row group starts at, once the first row group measured it.
    first_size: Arc<FirstSize>,
    sizing: BatchSizing,
    /// Batches are conformed to this schema on the decoding threads.
    schema: Option<SchemaRef>,
    /// Rows handed out so far.
    rows: usize,
    /// Stops the reader and its decoders once set ([`OrderedRowGroups::with_cancel`]).
    cancel: Option<Cancel>,
}

/// A row group decoding on its own thread, with the rows it handed out so far.
struct Decoding {
    unit: usize,
    source: RowGroupSource,
    batches: mpsc::Receiver<Result<(RecordBatch, usize)>>,
    rows: usize,
}

/// The bytes of the batches decoded and not yet taken by the reader, per unit, and the unit
/// the reader takes from (`front`). A decoder waits while its next batch would pass
/// `limit`, except the front's when it holds nothing: the reader waits on it.
struct AheadBudget {
    state: Mutex<AheadState>,
    changed: Condvar,
    limit: usize,
}

#[derive(Default)]
struct AheadState {
    held: usize,
    by_unit: HashMap<usize, usize>,
    front: usize,
    /// The reader is gone: nobody waits any more.
    closed: bool,
}

impl AheadBudget {
    fn lock(&self) -> MutexGuard<'_, AheadState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until unit `unit` may hold `bytes` more (or the reader is gone).
    fn acquire(&self, unit: usize, bytes: usize) {
        let mut state = self.lock();
        loop {
            let front_empty = state.front == unit && state.by_unit.get(&unit).is_none_or(|&b| b == 0);
            if state.closed || front_empty || state.held == 0 || state.held + bytes <= self.limit {
                break;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.held += bytes;
        *state.by_unit.entry(unit).or_default() += bytes;
    }

    fn release(&self, unit: usize, bytes: usize) {
        let mut state = self.lock();
        state.held = state.held.saturating_sub(bytes);
        if let Some(b) = state.by_unit.get_mut(&unit) {
            *b = b.saturating_sub(bytes);
            if *b == 0 {
                state.by_unit.remove(&unit);
            }
        }
        drop(state);
        self.changed.notify_all();
    }

    fn set_front(&self, unit: usize) {
        self.lock().front = unit;
        self.changed.notify_all();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

impl Drop for OrderedRowGroups {
    fn drop(&mut self) {
        // Decoders waiting for room wake up, find their channel closed and stop.
        self.budget.close();
    }
}

impl OrderedRowGroups {
    /// Reads `sources` in order, `threads` (at least 1) row groups at once, their batches
    /// ahead of the reader within `ahead_bytes`; conformed to `schema` where given.
    pub fn new(sources: Vec<RowGroupSource>, threads: usize, ahead_bytes: usize, sizing: BatchSizing, schema: Option<SchemaRef>) -> Self {
        let budget = AheadBudget { state: Default::default(), changed: Condvar::new(), limit: ahead_bytes };
        OrderedRowGroups {
            waiting: sources.into_iter().enumerate().collect(),
            decoding: VecDeque::new(),
            threads: threads.max(1),
            budget: Arc::new(budget),
            first_size: Arc::new(FirstSize::new()),
            sizing,
            schema,
            rows: 0,
            cancel: None,
        }
    }

    /// Stops once `cancel` is set: [`next_batch`](Self::next_batch) returns
    /// [`Error::Cancelled`] (also while it waits for a decoder), and every decoder stops
    /// before its next batch.
    pub fn with_cancel(mut self, cancel: Option<Cancel>) -> Self {
        self.cancel = cancel;
        self
    }

    /// Starts decoding `source` (unit `unit` in list order) on a thread of its own.
    fn start(&self, unit: usize, source: RowGroupSource) -> Result<Decoding> {
        let (send, batches) = mpsc::channel();
        let decoder = RowGroupDecoder {
            source: source.clone(),
            unit,
            schema: self.schema.clone(),
            budget: self.budget.clone(),
            first_size: self.first_size.clone(),
            // Unit 0 promises the first size from here on: a decoder that never runs (its
            // thread not started) keeps the promise as it is dropped.
            publisher: (unit == 0).then(|| FirstSizeGuard { first_size: self.first_size.clone(), fallback: self.sizing.first_rows() }),
            sizing: self.sizing,
            cancel: self.cancel.clone(),
        };
        let name = format!("corank-read-{unit}");
        let spawned = std::thread::Builder::new().name(name).spawn(move || decoder.run(send));
        spawned.map_err(|e| Error::io(&source.path, format!("cannot start a thread to read row group {}", source.row_group), e))?;
        Ok(Decoding { unit, source, batches, rows: 0 })
    }

    /// The next batch in list order; `None` after the last row group's last batch.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            while self.decoding.len() < self.threads {
                let Some((unit, source)) = self.waiting.pop_front() else { break };
                let started = self.start(unit, source)?;
                self.decoding.push_back(started);
            }
            let Some(front) = self.decoding.front_mut() else { return Ok(None) };
            match crate::cancel::recv(&front.batches, self.cancel.as_ref())?.ok_or(()) {
                Ok(batch) => {
                    let (batch, bytes) = batch?;
                    self.budget.release(front.unit, bytes);
                    front.rows += batch.num_rows();
                    self.rows += batch.num_rows();
                    return Ok(Some(batch));
                }
                Err(()) => {
                    // The row group's decoder is done (or was cancelled): every row its
                    // metadata counts came.
                    crate::cancel::check(self.cancel.as_ref())?;
                    let s = &front.source;
                    if front.rows != s.rows {
                        return Err(Error::File {
                            path: s.path.clone(),
                            detail: format!(
                                "row group {} ended after {} of the {} rows its metadata counts: the file is corrupt",
                                s.row_group, front.rows, s.rows
                            ),
                        });
                    }
                    // Units are numbered in list order: the next one is read next.
                    let next = front.unit + 1;
                    self.decoding.pop_front();
                    self.budget.set_front(next);
                }
            }
        }
    }

    /// Rows handed out so far.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

impl BatchSizing {
    /// The rows of the first batches, within bounds.
    fn first_rows(&self) -> usize {
        self.rows.clamp(1, self.max_rows.max(1))
    }

    /// The rows a batch should have by what `batch` (`bytes` of Arrow data) measured; `None`
    /// without a byte target.
    fn fit(&self, batch: &RecordBatch, bytes: usize) -> Option<usize> {
        let (target, rows) = (self.target_bytes?, batch.num_rows());
        if rows == 0 {
            return None;
        }
        let row_bytes = (bytes / rows).max(1) + self.extra_bytes_per_row;
        Some((target / row_bytes).clamp(1, self.max_rows.max(1)))
    }
}

/// The batch size every row group starts at: what the first row group's first batch
/// measured (its own first batches are [`BatchSizing::rows`]). Set once by unit 0's decoder,
/// right after that batch is decoded (before it waits for room in the budget, so the others
/// never wait on the reader), or when unit 0 ends without one; the others wait for it
/// before they open their row group.
type FirstSize = OnceLock<usize>;

/// Unit 0's promise to set the [`FirstSize`]: kept on every way out of its decoder (an
/// error, an empty row group, a closed channel, a thread that never started), with the first batches' size where no batch
/// measured one (a size set before stays).
struct FirstSizeGuard {
    first_size: Arc<FirstSize>,
    fallback: usize,
}

impl Drop for FirstSizeGuard {
    fn drop(&mut self) {
        let _ = self.first_size.set(self.fallback);
    }
}

/// What a decoding thread needs.
struct RowGroupDecoder {
    source: RowGroupSource,
    unit: usize,
    schema: Option<SchemaRef>,
    budget: Arc<AheadBudget>,
    first_size: Arc<FirstSize>,
    /// Unit 0's promise to set `first_size` (`None` for the others).
    publisher: Option<FirstSizeGuard>,
    sizing: BatchSizing,
    cancel: Option<Cancel>,
}

impl RowGroupDecoder {
    /// Opens the row group after its first `skip` rows, for batches of `rows`.
    fn open(&self, skip: usize, rows: usize) -> Result<ParquetRecordBatchReader> {
        let s = &self.source;
        let context = format!("reading row group {}", s.row_group);
        let file = crate::parquet::store::open(&s.path, s.metadata.metadata(), None).map_err(|e| Error::io(&s.path, context.clone(), e))?;
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, s.metadata.clone())
            .with_row_groups(vec![s.row_group])
            .with_batch_size(rows);
        if skip > 0 {
            builder = builder.with_row_selection(RowSelection::from(vec![RowSelector::skip(skip), RowSelector::select(s.rows - skip)]));
        }
        match catch(|| builder.build()) {
            Ok(reader) => reader.map_err(|e| Error::parquet(&s.path, context, e)),
            Err(panic) => Err(decode_error(&s.path, &s.metadata, &[s.row_group], &panic)),
        }
    }

    /// Decodes the row group into `send`, each batch counted in the budget before it goes.
    fn run(mut self, send: mpsc::Sender<Result<(RecordBatch, usize)>>) {
        let s = &self.source;
        let mut rows = 0; // decoded so far

        // Unit 0 measures the starting size for every row group; the others wait for it
        // (with no byte target every batch has the first batches' size: nothing to wait for).
        let first_rows = self.sizing.first_rows();
        let mut publisher = self.publisher.take();
        let mut batch_rows = match (&publisher, self.sizing.target_bytes) {
            (None, Some(_)) => *self.first_size.wait(),
            _ => first_rows,
        };
        // Set by a batch that overflowed its offsets: never go back above it.
        let mut cap = usize::MAX;
        'open: while rows < s.rows {
            let mut reader = match self.open(rows, batch_rows) {
                Ok(r) => r,
                Err(e) => {
                    let _ = send.send(Err(e));
                    return;
                }
            };
            loop {
                if crate::cancel::is_set(self.cancel.as_ref()) {
                    return; // the reader, cancelled too, reports it
                }
                // A panic of the decoder (corrupt pages) is an error like the others.
                let batch = match catch(|| reader.next()) {
                    Ok(None) => return,
                    Ok(Some(Ok(b))) => b,
                    // Values so large that a batch overflows its 32-bit offsets: fewer rows.
                    Ok(Some(Err(e))) if is_offset_overflow(&e) && batch_rows > 1 => {
                        batch_rows = rows_after_overflow(batch_rows);
                        cap = batch_rows;
                        continue 'open;
                    }
                    Ok(Some(Err(e))) => {
                        let _ = send.send(Err(decode_error(&s.path, &s.metadata, &[s.row_group], &e.to_string())));
                        return;
                    }
                    Err(panic) => {
                        let _ = send.send(Err(decode_error(&s.path, &s.metadata, &[s.row_group], &panic)));
                        return;
                    }
                };
                rows += batch.num_rows();
                if rows > s.rows {
                    let detail =
                        format!("row group {} holds more rows than the {} its metadata counts: the file is corrupt", s.row_group, s.rows);
                    let _ = send.send(Err(Error::File { path: s.path.clone(), detail }));
                    return;
                }
                let batch = match &s.partition {
                    Some(partition) => match partition.apply(batch) {
                        Ok(batch) => batch,
                        Err(e) => {
                            let _ = send.send(Err(e));
                            return;
                        }
                    },
                    None => batch,
                };
                let batch = match &self.schema {
                    Some(schema) => {
                        let first_row = rows - batch.num_rows();
                        conform(batch, schema).map_err(|e| Error::File {
                            path: s.path.clone(),
                            detail: format!("reading row group {} after its row {first_row}: {e}", s.row_group),
                        })
                    }
                    None => Ok(batch),
                };
                let mut wanted = batch_rows;
                let batch = batch.map(|b| {
                    let bytes = batch_bytes(&b);
                    if let Some(fit) = self.sizing.fit(&b, bytes) {
                        wanted = fit.min(cap);
                        if let Some(guard) = publisher.take() {
                            let _ = guard.first_size.set(fit);
                        }
                    }
                    self.budget.acquire(self.unit, bytes);
                    (b, bytes)
                });
                let failed = batch.is_err();
                // A closed channel: the reader stopped (an error elsewhere).
                if send.send(batch).is_err() || failed {
                    return;
                }
                if rows < s.rows && resizes(batch_rows, wanted) {
                    batch_rows = wanted;
                    continue 'open;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use parquet::arrow::arrow_reader::ArrowReaderOptions;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::collections::HashSet;

    /// A file of 24 row groups of 3000 rows whose rows differ in size by up to 40× from one
    /// row group to the next (so the batch size changes between and within row groups).
    fn uneven_file(dir: &std::path::Path) -> (PathBuf, ArrowReaderMetadata) {
        let path = dir.join("uneven.parquet");
        let ids = Int64Array::from_iter_values(0..72_000);
        let text = StringArray::from_iter_values((0..72_000).map(|i| "x".repeat(1 + (i / 3000 % 5) * (i / 3000 % 3) * 20)));
        let batch = RecordBatch::try_from_iter([("id", Arc::new(ids) as _), ("text", Arc::new(text) as _)]).unwrap();
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(3000)).build();
        let mut writer = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let metadata = ArrowReaderMetadata::load(&std::fs::File::open(&path).unwrap(), ArrowReaderOptions::new()).unwrap();
        (path, metadata)
    }

    /// The batch lengths of one read, the consumer pausing after batches as `pause` says.
    fn batch_lengths(path: &std::path::Path, metadata: &ArrowReaderMetadata, pause: impl Fn(usize) -> u64) -> Vec<usize> {
        let groups = metadata.metadata().num_row_groups();
        let sources = (0..groups)
            .map(|g| RowGroupSource {
                path: path.to_path_buf(),
                metadata: metadata.clone(),
                row_group: g,
                rows: metadata.metadata().row_group(g).num_rows() as usize,
                partition: None,
            })
            .collect();
        let sizing = BatchSizing { rows: 100, target_bytes: Some(64 << 10), extra_bytes_per_row: 16, max_rows: 1 << 20 };
        let mut reader = OrderedRowGroups::new(sources, 4, 256 << 10, sizing, None);
        let (mut lengths, mut next_id) = (Vec::new(), 0i64);
        while let Some(batch) = reader.next_batch().unwrap() {
            let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            assert!(ids.values().iter().all(|&id| {
                next_id += 1;
                id == next_id - 1
            }));
            lengths.push(batch.num_rows());
            std::thread::sleep(std::time::Duration::from_micros(pause(lengths.len())));
        }
        assert_eq!(next_id, 72_000);
        lengths
    }

    /// Batch boundaries reach the writer's page cuts: they must not depend on how fast the
    /// reader takes batches or the decoders make them.
    #[test]
    fn batch_sizes_do_not_depend_on_timing() {
        let dir = tempfile::tempdir().unwrap();
        let (path, metadata) = uneven_file(dir.path());
        let first = batch_lengths(&path, &metadata, |_| 0);
        assert!(first.iter().collect::<HashSet<_>>().len() > 2, "the sizes should vary: {first:?}");
        let patterns: [&dyn Fn(usize) -> u64; 4] =
            [&|_| 300, &|i| if i < 3 { 5000 } else { 0 }, &|i| (i as u64 * 7919) % 900, &|i| if i % 5 == 0 { 2000 } else { 0 }];
        for pause in patterns {
            assert_eq!(batch_lengths(&path, &metadata, pause), first);
        }
    }
}

//! A run read batch by batch (`RunReader`), or several of its row groups at once
//! (`parallel_run_reader`): the merge's readers. Batches are sized by the bytes the
//! rows measure (the first one short: footers' estimates can be far off), and shrink
//! where a batch overflows its offsets (`super::is_offset_overflow`).

use super::row_groups::{batch_bytes, BatchSizing, OrderedRowGroups, RowGroupSource};
use super::{is_offset_overflow, resizes, rows_after_overflow};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::parquet::corrupt::{catch, decode_error};
use crate::parquet::inputs::hive::FilePartition;
use crate::parquet::inputs::{MergePlan, Run};
use crate::parquet::memory::{FIRST_BATCH_ROWS, MAX_BATCH_BYTES, MAX_WINDOW_ROWS, ROUND_BYTES_PER_ROW};
use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use std::path::Path;

/// A batch of a run, and whether it is the run's last (so the merge can mark the run
/// exhausted at once: a run still open holds the frontier back).
pub(crate) type RunBatch = (RecordBatch, bool);

/// A run being read. It knows its position, so it can close its file between batches
/// (when files are scarce) and reopen it where it stopped, and it sizes its batches by the
/// measured bytes of the rows it decoded.
pub(crate) struct RunReader<'a> {
    run: &'a Run,
    path: &'a Path,
    metadata: &'a parquet::arrow::arrow_reader::ArrowReaderMetadata,
    /// The open reader and the batch size it was built with.
    reader: Option<(ParquetRecordBatchReader, usize)>,
    /// Rows of the run returned so far.
    position: usize,
    /// Rows of the next batch.
    batch_rows: usize,
    /// Bytes a batch should hold (a quarter of the run's window budget).
    batch_bytes: usize,
    /// Keep the file open between batches.
    keep_open: bool,
    /// The file's Hive partition values, set on every batch.
    partition: Option<&'a FilePartition>,
}

impl<'a> RunReader<'a> {
    pub(crate) fn new(run: &'a Run, plan: &'a MergePlan, window_bytes: usize, keep_open: bool) -> Self {
        let f = &plan.files[run.file];
        let batch_bytes = (window_bytes / 4).clamp(1, MAX_BATCH_BYTES);
        let row_bytes = (run.decoded_bytes as usize / run.rows().max(1)).max(1) + ROUND_BYTES_PER_ROW;
        // The first batch is short: estimates from footers can be far off (writers without
        // size statistics), and the batch's measured size sets the next ones.
        let mut batch_rows = (batch_bytes / row_bytes).clamp(1, FIRST_BATCH_ROWS);
        // A run that fits its window whole is read in one batch (and closed at once).
        if run.rows() <= FIRST_BATCH_ROWS && run.rows() * row_bytes <= window_bytes {
            batch_rows = run.rows();
        }
        let partition = f.partition.as_deref();
        RunReader { run, path: &f.path, metadata: &f.metadata, reader: None, position: 0, batch_rows, batch_bytes, keep_open, partition }
    }

    /// What the reader was doing, for its errors.
    fn context(&self) -> String {
        format!("reading row groups {:?}", self.run.row_groups)
    }

    fn error(&self, e: &dyn std::fmt::Display) -> Error {
        Error::File { path: self.path.to_path_buf(), detail: format!("{}: {e}", self.context()) }
    }

    /// Opens the file at the run's current position, for batches of `self.batch_rows`.
    fn open(&mut self) -> Result<()> {
        // The row group holding `position`, and the rows of it already read.
        let (mut first, mut skip) = (0, self.position);
        while skip >= self.run.row_group_rows[first] {
            skip -= self.run.row_group_rows[first];
            first += 1;
        }
        // The most row groups a batch of the reader reaches over, from wherever it starts:
        // the decoder reads each column of a batch across all of them in turn.
        let rest = &self.run.row_group_rows[first..];
        let smallest = rest.iter().copied().filter(|&r| r > 0).min().unwrap_or(1);
        let at_once = (self.batch_rows.div_ceil(smallest) + 1).min(rest.len());
        let file = crate::parquet::store::open_groups(self.path, self.metadata.metadata(), &self.run.row_groups[first..], at_once)
            .map_err(|e| Error::io(self.path, self.context(), e))?;
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.metadata.clone())
            .with_row_groups(self.run.row_groups[first..].to_vec())
            .with_batch_size(self.batch_rows);
        if skip > 0 {
            let rest = self.run.rows() - self.position;
            builder = builder.with_row_selection(RowSelection::from(vec![RowSelector::skip(skip), RowSelector::select(rest)]));
        }
        let reader = match catch(|| builder.build()) {
            Ok(reader) => reader.map_err(|e| Error::parquet(self.path, self.context(), e))?,
            Err(panic) => return Err(self.decode_error(&panic)),
        };
        self.reader = Some((reader, self.batch_rows));
        Ok(())
    }

    /// The error for the next batch failing to decode with `cause`: the row groups it
    /// would come from probed for the column and page that fail ([`decode_error`]).
    fn decode_error(&self, cause: &str) -> Error {
        let (mut first, mut skip) = (0, self.position);
        while first + 1 < self.run.row_groups.len() && skip >= self.run.row_group_rows[first] {
            skip -= self.run.row_group_rows[first];
            first += 1;
        }
        // The batch's rows reach from the position over as many row groups as it spans.
        let mut last = first;
        let mut rows = self.run.row_group_rows[first] - skip.min(self.run.row_group_rows[first]);
        while rows < self.batch_rows && last + 1 < self.run.row_groups.len() {
            last += 1;
            rows += self.run.row_group_rows[last];
        }
        decode_error(self.path, self.metadata, &self.run.row_groups[first..=last], cause)
    }

    pub(crate) fn next_batch(&mut self) -> Result<Option<RunBatch>> {
        loop {
            if self.position >= self.run.rows() {
                self.reader = None; // close the file as soon as the run is done
                return Ok(None);
            }
            // Opened, or reopened where it stopped with the new batch size (the reader it
            // replaces is dropped after: an object's row groups fetched stay shared).
            if self.reader.as_ref().is_none_or(|(_, rows)| *rows != self.batch_rows) {
                self.open()?;
            }
            // A panic of the decoder (corrupt pages) is an error like the others.
            let next = match catch(|| self.reader.as_mut().expect("opened above").0.next()) {
                Ok(next) => next,
                Err(panic) => {
                    self.reader = None;
                    return Err(self.decode_error(&panic));
                }
            };
            match next {
                Some(Ok(b)) => {
                    self.position += b.num_rows();
                    if self.position > self.run.rows() {
                        self.reader = None;
                        return Err(self.error(&format!(
                            "the row groups hold more rows than the {} their metadata counts: the file is corrupt",
                            self.run.rows()
                        )));
                    }
                    // Size the next batches by what this one measured, changing only for
                    // a factor of 2 or more (a change reopens the file).
                    let row_bytes = (batch_bytes(&b) / b.num_rows().max(1)).max(1) + ROUND_BYTES_PER_ROW;
                    let fit = (self.batch_bytes / row_bytes).clamp(1, MAX_WINDOW_ROWS);
                    if resizes(self.batch_rows, fit) {
                        self.batch_rows = fit;
                    }
                    let last = self.position >= self.run.rows();
                    if last {
                        // Pages holding rows past the count would otherwise go unread.
                        let (reader, _) = self.reader.as_mut().expect("opened above");
                        if matches!(catch(|| reader.next()), Ok(Some(Ok(more))) if more.num_rows() > 0) {
                            self.reader = None;
                            return Err(self.error(&format!(
                                "the row groups hold more rows than the {} their metadata counts: the file is corrupt",
                                self.run.rows()
                            )));
                        }
                    }
                    if !self.keep_open || last {
                        self.reader = None;
                    }
                    let b = match self.partition {
                        Some(partition) => partition.apply(b)?,
                        None => b,
                    };
                    return Ok(Some((b, last)));
                }
                // Values so large that a batch overflows its 32-bit offsets: fewer rows.
                Some(Err(e)) if is_offset_overflow(&e) && self.batch_rows > 1 => {
                    self.reader = None;
                    self.batch_rows = rows_after_overflow(self.batch_rows);
                }
                Some(Err(e)) => {
                    self.reader = None;
                    return Err(self.decode_error(&e.to_string()));
                }
                None => {
                    return Err(self.error(&format!(
                        "the file ended after {} of the {} rows its metadata counts: the file is corrupt",
                        self.position,
                        self.run.rows()
                    )))
                }
            }
        }
    }
}

/// A run's row groups decoded `decoders` at once, within the reading memory of a run read
/// one row group after another (the module doc: a quarter window decoded ahead, a quarter
/// window of overshoot). Batches are `window / (4 (decoders + 2))`: each decoder may hold
/// one while it waits for room, the row group being read one beyond the budget, and the
/// run's thread one it hands to the merge; the budget for batches decoded ahead is a
/// quarter window.
pub(crate) fn parallel_run_reader(
    plan: &MergePlan,
    run: &Run,
    window_bytes: usize,
    decoders: usize,
    cancel: Option<&Cancel>,
) -> OrderedRowGroups {
    let f = &plan.files[run.file];
    let sources = (run.row_groups.iter().zip(&run.row_group_rows))
        .map(|(&row_group, &rows)| RowGroupSource {
            path: f.path.clone(),
            metadata: f.metadata.clone(),
            row_group,
            rows,
            partition: f.partition.clone(),
        })
        .collect();
    let batch_bytes = (window_bytes / (4 * (decoders + 2))).clamp(1, MAX_BATCH_BYTES);
    let row_bytes = (run.decoded_bytes as usize / run.rows().max(1)).max(1) + ROUND_BYTES_PER_ROW;
    let sizing = BatchSizing {
        // The first batches are short: estimates from footers can be far off.
        rows: (batch_bytes / row_bytes).clamp(1, FIRST_BATCH_ROWS),
        target_bytes: Some(batch_bytes),
        extra_bytes_per_row: ROUND_BYTES_PER_ROW,
        max_rows: MAX_WINDOW_ROWS,
    };
    OrderedRowGroups::new(sources, decoders, window_bytes / 4, sizing, Some(plan.schema.clone())).with_cancel(cancel.cloned())
}

//! The encoder pipeline: a full row group's columns are encoded and compressed in
//! parallel (a task per leaf column, on rayon), several row groups at once, and appended
//! to the file in order; the first encoded row group also decides which columns keep
//! their dictionary ([`super::dictionary`]).

use super::copied::CopiedRowGroup;
use super::dictionary::{self, distinct_dictionary_values, narrow_dictionary, DictionaryChoice};
use super::{SortedParquetWriter, MAX_ROW_GROUPS};
use crate::cancel::{check, is_set, recv, Cancel};
use crate::error::{Error, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn};
use parquet::schema::types::SchemaDescriptor;
use rayon::prelude::*;
use std::sync::mpsc::Receiver;

/// Fewest row groups in flight (encoding, or queued to be copied), each encoded as a task
/// per column: one heavy column (long strings) takes as long as the rest together, so
/// several row groups are needed to keep the cores busy.
pub const ROW_GROUPS_IN_FLIGHT: usize = 4;

/// Most row groups in flight.
pub const MAX_ROW_GROUPS_IN_FLIGHT: usize = 16;

/// Row groups in flight on this machine: one per rayon thread, within
/// [`ROW_GROUPS_IN_FLIGHT`]..=[`MAX_ROW_GROUPS_IN_FLIGHT`]: a fixed few leave a many-core
/// host idle behind one heavy column. The memory plans divide
/// the writer's share by it, so more cores make smaller row groups, not more memory.
pub fn row_groups_in_flight() -> usize {
    rayon::current_num_threads().clamp(ROW_GROUPS_IN_FLIGHT, MAX_ROW_GROUPS_IN_FLIGHT)
}

/// Most bytes of Arrow data a row group buffers when the writer may hold `writer_bytes`:
/// the row groups in flight and the one filling, each held twice (Arrow data, encoded
/// pages); at least 1 MiB.
pub fn row_group_bytes_within(writer_bytes: usize) -> usize {
    (writer_bytes / (row_groups_in_flight() + 1) / 2).max(1 << 20)
}

/// Every this many bytes written, the kernel is asked to start writing the file to disk
/// (Linux `sync_file_range`), so that the `fsync` before the rename waits only for the
/// last of it instead of the whole file.
pub const WRITEBACK_BYTES: usize = 64 << 20;

/// A row group's encoded column chunks, per top-level column the number of distinct values
/// a narrow-keyed dictionary column holds in it (0 for other columns), and for the first
/// row group its chunks encoded without dictionaries too ([`super::dictionary`]).
type EncodedRowGroup = parquet::errors::Result<(Vec<ArrowColumnChunk>, Vec<usize>, Option<Vec<ArrowColumnChunk>>)>;

/// A row group on its way into the file, in output order.
pub(super) enum InFlight {
    /// Being encoded (on rayon), with its rows and bytes of Arrow data.
    Encoding(Receiver<EncodedRowGroup>, usize, usize),
    /// Copied unchanged from an input once every row group before it is written, so the
    /// writer never waits for an encode to finish before a copy (see
    /// [`SortedParquetWriter::append_row_group`]).
    Copy(CopiedRowGroup),
}

impl InFlight {
    pub(super) fn rows(&self) -> usize {
        match self {
            InFlight::Encoding(_, rows, _) => *rows,
            InFlight::Copy(c) => c.rows,
        }
    }
}

/// Encodes and compresses one row group's columns in parallel; with `plain_writers` (the
/// first row group's trial) a second time alongside, from the same leaves.
///
/// Once `cancel` is set every column stops before its next batch's leaf (a few thousand
/// rows) with an error that [`SortedParquetWriter::append_oldest`] reports as
/// [`Error::Cancelled`].
fn encode_row_group(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    writers: Vec<ArrowColumnWriter>,
    plain_writers: Option<Vec<ArrowColumnWriter>>,
    cancel: Option<Cancel>,
) -> EncodedRowGroup {
    let cancelled = || parquet::errors::ParquetError::General("cancelled".into());
    if is_set(cancel.as_ref()) {
        return Err(cancelled());
    }
    // 0. Distinct values of narrow dictionary columns (see the module doc).
    let distinct: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| if narrow_dictionary(f.data_type()) { distinct_dictionary_values(&batches, c) } else { 0 })
        .collect();
    // 1. Leaves of every batch, grouped by leaf column (a nested field has several).
    let mut leaves: Vec<Vec<ArrowLeafColumn>> = (0..writers.len()).map(|_| Vec::with_capacity(batches.len())).collect();
    for batch in &batches {
        let mut next = 0;
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            for leaf in compute_leaves(field, column)? {
                leaves[next].push(leaf);
                next += 1;
            }
        }
    }
    drop(batches);
    // 2. One task per column (and per encoding).
    let encode = |writers: Vec<ArrowColumnWriter>| {
        writers
            .into_par_iter()
            .zip(&leaves)
            .map(|(mut writer, leaves)| {
                for leaf in leaves {
                    if is_set(cancel.as_ref()) {
                        return Err(cancelled());
                    }
                    writer.write(leaf)?;
                }
                writer.close()
            })
            .collect::<parquet::errors::Result<Vec<_>>>()
    };
    match plain_writers {
        None => Ok((encode(writers)?, distinct, None)),
        Some(plain_writers) => {
            let (chunks, plain) = rayon::join(|| encode(writers), || encode(plain_writers));
            Ok((chunks?, distinct, Some(plain?)))
        }
    }
}

impl SortedParquetWriter {
    /// What column writers for this file are made from: its Parquet schema, Arrow schema
    /// and properties (see [`super::dictionary::factory_with`]), for row groups encoded
    /// elsewhere and appended with [`append_encoded_row_group`](Self::append_encoded_row_group).
    pub(crate) fn encoding(&self) -> (&SchemaDescriptor, &SchemaRef, &parquet::file::properties::WriterPropertiesPtr) {
        (self.writer.schema_descr(), &self.schema, self.writer.properties())
    }

    /// Appends a row group encoded elsewhere: `chunks` are its column chunks in leaf order,
    /// from column writers made as [`encoding`](Self::encoding) says; `distinct` per
    /// top-level column the distinct values a narrow dictionary column holds in it (see
    /// [`widened_dictionary_keys`]). Rows buffered by [`write`](Self::write) are cut as a
    /// row group first, and the row groups in flight written.
    pub(crate) fn append_encoded_row_group(&mut self, chunks: Vec<ArrowColumnChunk>, rows: usize, distinct: &[usize]) -> Result<()> {
        check(self.cancel.as_ref())?;
        self.flush_row_group()?;
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        if self.row_groups_started >= MAX_ROW_GROUPS {
            return Err(Error::InvalidArgument(format!(
                "{}: a Parquet file holds at most {MAX_ROW_GROUPS} row groups",
                self.target.display()
            )));
        }
        let target = self.target.clone();
        let err = |e: parquet::errors::ParquetError| Error::parquet(&target, "", e);
        if chunks.len() != self.writer.schema_descr().num_columns() {
            return Err(Error::Internal(format!(
                "{}: a row group of {} column chunks for {} leaf columns",
                target.display(),
                chunks.len(),
                self.writer.schema_descr().num_columns()
            )));
        }
        for (max, &n) in self.max_distinct.iter_mut().zip(distinct) {
            *max = (*max).max(n);
        }
        let mut row_group = self.writer.next_row_group().map_err(err)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group).map_err(err)?;
        }
        row_group.close().map_err(err)?;
        self.row_groups_started += 1;
        self.rows += rows;
        self.row_groups += 1;
        self.start_writeback();
        Ok(())
    }

    /// Starts encoding the buffered batches as one row group (a task per leaf column, on
    /// rayon), and appends finished row groups in order, keeping at most
    /// [`row_groups_in_flight`] in flight so that one heavy column (long strings) does not
    /// serialize the writer.
    pub(super) fn flush_row_group(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let target = self.target.clone();
        let err = |e| Error::parquet(&target, "", e);
        // The row groups after the first encoded one wait for its choice of dictionaries.
        while matches!(self.dictionary, DictionaryChoice::Trial) {
            self.append_oldest()?;
        }
        let g = self.row_groups_started;
        let (writers, plain_writers) = match &self.dictionary {
            DictionaryChoice::Undecided if self.expected_rows > self.rows() => {
                let props = dictionary::without_dictionaries(self.writer.properties());
                let plain = dictionary::factory_with(self.writer.schema_descr(), &self.schema, props).map_err(err)?;
                let plain_writers = plain.create_column_writers(g).map_err(err)?;
                self.dictionary = DictionaryChoice::Trial;
                (self.factory.create_column_writers(g).map_err(err)?, Some(plain_writers))
            }
            DictionaryChoice::Undecided | DictionaryChoice::Trial => {
                // One row group is all that is expected: nothing later to choose for. (No
                // trial is in flight here: the loop above waited for it.)
                self.dictionary = DictionaryChoice::Decided(None);
                (self.factory.create_column_writers(g).map_err(err)?, None)
            }
            DictionaryChoice::Decided(factory) => (factory.as_ref().unwrap_or(&self.factory).create_column_writers(g).map_err(err)?, None),
        };
        let batches = std::mem::take(&mut self.pending);
        let schema = self.schema.clone();
        let cancel = self.cancel.clone();
        let (done, result) = std::sync::mpsc::sync_channel(1);
        rayon::spawn(move || {
            let _ = done.send(encode_row_group(&schema, batches, writers, plain_writers, cancel));
        });
        self.in_flight.push_back(InFlight::Encoding(result, self.pending_rows, self.pending_bytes));
        self.row_groups_started += 1;
        self.pending_rows = 0;
        self.pending_bytes = 0;
        while self.in_flight.len() >= row_groups_in_flight() {
            self.append_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest row group in flight and appends it to the file.
    pub(super) fn append_oldest(&mut self) -> Result<()> {
        let Some(oldest) = self.in_flight.pop_front() else { return Ok(()) };
        let target = self.target.clone();
        let (result, rows, arrow_bytes) = match oldest {
            InFlight::Encoding(result, rows, arrow_bytes) => (result, rows, arrow_bytes),
            InFlight::Copy(copy) => return self.append_copy(copy),
        };
        let err = |e: parquet::errors::ParquetError| Error::parquet(&target, "", e);
        let waiting = std::time::Instant::now();
        // Cancelled: the encoders stop at their next leaf; nobody waits for them.
        let received = recv(&result, self.cancel.as_ref())?;
        self.encode_wait += waiting.elapsed();
        let appending = std::time::Instant::now();
        check(self.cancel.as_ref())?; // an encoder that stopped for it failed on purpose
        let (chunks, distinct, plain) =
            received.ok_or_else(|| Error::Internal(format!("{}: a row group encoder stopped", target.display())))?.map_err(err)?;
        for (max, n) in self.max_distinct.iter_mut().zip(distinct) {
            *max = (*max).max(n);
        }
        let chunks = match plain {
            None => chunks,
            Some(plain) => {
                let (chunks, went_plain) = dictionary::smaller_chunks(chunks, plain);
                let schema = self.writer.schema_descr();
                let names: Vec<String> =
                    schema.columns().iter().zip(&went_plain).filter(|(_, &p)| p).map(|(c, _)| c.path().string()).collect();
                log::debug!("{}: columns written without a dictionary: {}", target.display(), names.join(", "));
                let factory = dictionary::decided_factory(schema, &self.schema, self.writer.properties(), &went_plain).map_err(err)?;
                self.dictionary = DictionaryChoice::Decided(factory);
                chunks
            }
        };
        let before = self.writer.bytes_written();
        let mut row_group = self.writer.next_row_group().map_err(err)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group).map_err(err)?;
        }
        row_group.close().map_err(err)?;
        self.encoded.0 += arrow_bytes;
        self.encoded.1 += self.writer.bytes_written() - before;
        self.rows += rows;
        self.row_groups += 1;
        self.start_writeback();
        self.append_time += appending.elapsed();
        Ok(())
    }

    /// Starts the kernel writing the file out once [`WRITEBACK_BYTES`] more were written
    /// (Linux; elsewhere the `fsync` at the end does it all). Best effort: a failure here
    /// shows again at that `fsync`.
    pub(super) fn start_writeback(&mut self) {
        if !self.settings.sync {
            return;
        }
        let written = self.writer.bytes_written();
        if written < self.written_back + WRITEBACK_BYTES {
            return;
        }
        self.written_back = written;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // An upload to an object store has no file to write back.
            #[cfg_attr(not(feature = "object-store"), allow(irrefutable_let_patterns))]
            let crate::parquet::store::Sink::File(file) = self.writer.inner().get_ref() else {
                return;
            };
            let fd = file.as_raw_fd();
            // SAFETY: `fd` is the open output file; the call only schedules writeback of
            // its dirty pages (offset 0, length 0: to the end of the file).
            unsafe {
                libc::sync_file_range(fd, 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
    }
}

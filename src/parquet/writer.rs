//! The merged output: one Parquet file, written to a temporary file beside the target and
//! renamed over it only when complete, so a failure (or an interrupted run) never leaves a
//! partial output under the target's name. The temporary file is removed when the writer is
//! dropped, and also when a signal ends the process if the program asked for that
//! ([`super::interrupt`]).
//!
//! Row groups are cut at `row_group_rows` rows or `row_group_bytes` bytes of buffered
//! Arrow data, whichever comes first. Their columns are encoded and compressed in parallel
//! (one task per leaf column, arrow-rs's `ArrowRowGroupWriterFactory`), several row groups
//! at once, and appended in order.
//! Every row group carries the merge key as `sorting_columns`; the inputs' key-value
//! metadata is kept.

use super::interrupt::TempGuard;
use crate::api::SortKey;
use crate::error::{Error, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory, ArrowWriterOptions};
use parquet::arrow::{ArrowSchemaConverter, ArrowWriter};
use parquet::basic::Compression;
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::fs::File;
use std::sync::mpsc::Receiver;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use tempfile::NamedTempFile;

/// How the output is written (the knobs of arrow-rs's `parquet-rewrite`).
#[derive(Debug, Clone)]
pub struct WriterSettings {
    pub compression: Compression,
    /// Most rows per row group.
    pub row_group_rows: usize,
    /// Most bytes of Arrow data buffered per row group (before encoding).
    pub row_group_bytes: usize,
    /// Replace an existing output file.
    pub overwrite: bool,
}

impl Default for WriterSettings {
    fn default() -> Self {
        Self { compression: Compression::ZSTD(Default::default()), row_group_rows: 1 << 20, row_group_bytes: 128 << 20, overwrite: false }
    }
}

/// Parses `none`, `snappy`, `zstd` or `zstd(LEVEL)` (the codecs this build carries).
pub fn parse_compression(text: &str) -> Result<Compression> {
    let bad = |why: String| Error::InvalidArgument(format!("--compression {text}: {why} (use none, snappy, zstd or zstd(1..22))"));
    let lower = text.trim().to_ascii_lowercase();
    let c = match lower.as_str() {
        "none" | "uncompressed" => Compression::UNCOMPRESSED,
        "zstd" => Compression::ZSTD(Default::default()),
        other => Compression::from_str(other).map_err(|e| bad(e.to_string()))?,
    };
    match c {
        Compression::UNCOMPRESSED | Compression::SNAPPY | Compression::ZSTD(_) => Ok(c),
        other => Err(bad(format!("{other} is not built into corank"))),
    }
}

/// Bytes written and rows, once the file is in place.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub rows: usize,
    pub row_groups: usize,
    pub bytes: u64,
}

/// A sorted Parquet output in progress.
pub struct SortedParquetWriter {
    target: PathBuf,
    overwrite: bool,
    temp: NamedTempFile,
    /// Removes `temp` if a signal ends the process (src/parquet/interrupt.rs).
    _on_signal: TempGuard,
    writer: SerializedFileWriter<BufWriter<File>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    settings: WriterSettings,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
    rows: usize,
    row_groups: usize,
    row_groups_started: usize,
    /// Row groups being encoded, oldest first, with their row counts.
    in_flight: VecDeque<(Receiver<EncodedRowGroup>, usize)>,
}

/// Row groups encoded at once (each a task per column): enough to keep every core busy
/// when one column dominates.
pub const ROW_GROUPS_IN_FLIGHT: usize = 4;

type EncodedRowGroup = parquet::errors::Result<Vec<ArrowColumnChunk>>;

/// Encodes and compresses one row group's columns in parallel.
fn encode_row_group(schema: &SchemaRef, batches: Vec<RecordBatch>, writers: Vec<ArrowColumnWriter>) -> EncodedRowGroup {
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
    // 2. One task per column.
    writers
        .into_par_iter()
        .zip(leaves)
        .map(|(mut writer, leaves)| {
            for leaf in &leaves {
                writer.write(leaf)?;
            }
            writer.close()
        })
        .collect()
}

fn output_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), detail: what.to_string() }
}

/// `keys` as Parquet `sorting_columns`: they name leaf columns, and keys are top-level
/// primitive columns.
pub fn sorting_columns(schema: &Schema, keys: &[SortKey]) -> Result<Vec<SortingColumn>> {
    let leaves = ArrowSchemaConverter::new().convert(schema).map_err(|e| Error::Arrow(e.into()))?;
    keys.iter()
        .map(|k| {
            let idx = leaves
                .columns()
                .iter()
                .position(|c| c.path().parts() == [k.column.clone()])
                .ok_or_else(|| Error::InvalidArgument(format!("sort column '{}' is not a top-level primitive column", k.column)))?;
            Ok(SortingColumn { column_idx: idx as i32, descending: k.options.descending, nulls_first: k.options.nulls_first })
        })
        .collect()
}

/// Refuses an existing `target` unless `overwrite`; the check is repeated at the rename.
pub fn check_output(target: &Path, overwrite: bool) -> Result<()> {
    if target.is_dir() {
        return Err(Error::InvalidArgument(format!("output {} is a directory", target.display())));
    }
    if target.exists() && !overwrite {
        return Err(Error::InvalidArgument(format!("output {} exists; use --force to replace it", target.display())));
    }
    Ok(())
}

impl SortedParquetWriter {
    /// Creates the temporary file beside `target`. `metadata` is kept in the footer;
    /// `keys` become every row group's `sorting_columns`.
    pub fn create(target: &Path, schema: SchemaRef, keys: &[SortKey], metadata: Vec<KeyValue>, settings: WriterSettings) -> Result<Self> {
        check_output(target, settings.overwrite)?;
        if settings.row_group_rows == 0 || settings.row_group_bytes == 0 {
            return Err(Error::InvalidArgument("row group size must be at least 1".into()));
        }
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".corank-tmp")
            .tempfile_in(&dir)
            .map_err(|e| output_error(target, format!("cannot create a file in {}: {e}", dir.display())))?;
        let file = temp.reopen().map_err(|e| output_error(temp.path(), e))?;

        // Sorting columns name leaf columns; keys are top-level primitive columns.
        let sorting = sorting_columns(&schema, keys).map_err(|e| match e {
            Error::Arrow(e) => output_error(target, e),
            other => other,
        })?;
        let props = WriterProperties::builder()
            .set_compression(settings.compression)
            .set_max_row_group_row_count(Some(settings.row_group_rows))
            .set_sorting_columns(Some(sorting))
            .set_key_value_metadata((!metadata.is_empty()).then_some(metadata))
            .build();
        let options = ArrowWriterOptions::new().with_properties(props);
        let arrow_writer =
            ArrowWriter::try_new_with_options(BufWriter::with_capacity(1 << 20, file), schema.clone(), options).map_err(|e| output_error(target, e))?;
        let (writer, factory) = arrow_writer.into_serialized_writer().map_err(|e| output_error(target, e))?;
        Ok(Self {
            target: target.to_path_buf(),
            overwrite: settings.overwrite,
            _on_signal: TempGuard::register(temp.path()),
            temp,
            writer,
            factory,
            schema,
            settings,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            rows: 0,
            row_groups: 0,
            row_groups_started: 0,
            in_flight: VecDeque::new(),
        })
    }

    /// Buffers `batch`; writes a row group whenever one is full.
    pub fn write(&mut self, batch: RecordBatch) -> Result<()> {
        let mut batch = batch;
        while batch.num_rows() > 0 {
            let room = self.settings.row_group_rows - self.pending_rows;
            let take = room.min(batch.num_rows());
            let head = batch.slice(0, take);
            batch = batch.slice(take, batch.num_rows() - take);
            self.pending_rows += take;
            self.pending_bytes += head.get_array_memory_size();
            self.pending.push(head);
            if self.pending_rows >= self.settings.row_group_rows || self.pending_bytes >= self.settings.row_group_bytes {
                self.flush_row_group()?;
            }
        }
        Ok(())
    }

    /// Rows written so far (in finished row groups, in flight and buffered).
    pub fn rows(&self) -> usize {
        self.rows + self.in_flight.iter().map(|(_, r)| r).sum::<usize>() + self.pending_rows
    }

    /// Starts encoding the buffered batches as one row group (a task per leaf column, on
    /// rayon), and appends finished row groups in order, keeping at most
    /// [`ROW_GROUPS_IN_FLIGHT`] encoding at once so that one heavy column (long strings)
    /// does not serialize the writer.
    fn flush_row_group(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let target = self.target.clone();
        let writers = self.factory.create_column_writers(self.row_groups_started).map_err(|e| output_error(&target, e))?;
        let batches = std::mem::take(&mut self.pending);
        let schema = self.schema.clone();
        let (done, result) = std::sync::mpsc::sync_channel(1);
        rayon::spawn(move || {
            let _ = done.send(encode_row_group(&schema, batches, writers));
        });
        self.in_flight.push_back((result, self.pending_rows));
        self.row_groups_started += 1;
        self.pending_rows = 0;
        self.pending_bytes = 0;
        while self.in_flight.len() >= ROW_GROUPS_IN_FLIGHT {
            self.append_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest row group in flight and appends it to the file.
    fn append_oldest(&mut self) -> Result<()> {
        let Some((result, rows)) = self.in_flight.pop_front() else { return Ok(()) };
        let target = self.target.clone();
        let err = |e: parquet::errors::ParquetError| output_error(&target, e);
        let chunks = result.recv().map_err(|_| output_error(&target, "a row group encoder stopped"))?.map_err(err)?;
        let mut row_group = self.writer.next_row_group().map_err(err)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group).map_err(err)?;
        }
        row_group.close().map_err(err)?;
        self.rows += rows;
        self.row_groups += 1;
        Ok(())
    }

    /// Writes the last row group and the footer, then renames the file into place.
    /// Dropping the writer without calling this removes the temporary file.
    pub fn finish(mut self) -> Result<Written> {
        self.flush_row_group()?;
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        let target = self.target.clone();
        let inner = self.writer.into_inner().map_err(|e| output_error(&target, e))?;
        let file = inner.into_inner().map_err(|e| output_error(&target, e.error()))?;
        file.sync_all().map_err(|e| output_error(&target, e))?;
        let bytes = file.metadata().map_err(|e| output_error(&target, e))?.len();
        drop(file);
        let persisted = if self.overwrite { self.temp.persist(&target) } else { self.temp.persist_noclobber(&target) };
        persisted.map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                Error::InvalidArgument(format!("output {} exists; use --force to replace it", target.display()))
            } else {
                output_error(&target, e.error)
            }
        })?;
        Ok(Written { rows: self.rows, row_groups: self.row_groups, bytes })
    }
}

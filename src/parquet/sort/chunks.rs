//! The sort's first phase: the inputs read in order into chunks, each sorted stably and
//! written as a spill run (or, when every row fits one chunk, as the output).

use super::spill::{SpillDir, SpilledRun};
use super::{SortPhase, SortPlan, SortSummary, BATCH_ROWS, SORT_BYTES_PER_ROW};
use crate::cancel::{check, Cancel};
use crate::error::Result;
use crate::options::{Engine, EngineOptions};
use crate::parquet::read::row_groups::{batch_bytes, BatchSizing, OrderedRowGroups, RowGroupSource};
use crate::parquet::writer::{SortedParquetWriter, WriterSettings, Written};
use crate::permutation::{Indices, Permutation};
use crate::show_bytes::show_bytes;
use crate::sort::{sort_permutation_until, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use parquet::file::metadata::KeyValue;
use parquet::schema::types::SchemaDescriptor;
use std::path::Path;
use std::time::{Duration, Instant};

/// The inputs' rows in order (files as given, row groups in file order), in batches of the
/// plan's schema, decoded [`SortPlan::read_threads`] row groups at once.
pub(super) fn input_reader(plan: &SortPlan) -> OrderedRowGroups {
    let sources = (plan.inputs.files.iter())
        .flat_map(|file| {
            let meta = file.metadata.metadata();
            (0..meta.num_row_groups()).map(move |g| RowGroupSource {
                path: file.path.clone(),
                metadata: file.metadata.clone(),
                row_group: g,
                rows: meta.row_group(g).num_rows().max(0) as usize,
                partition: file.partition.clone(),
            })
        })
        .collect();
    let sizing = BatchSizing { rows: plan.read_rows, target_bytes: None, extra_bytes_per_row: 0, max_rows: plan.read_rows };
    OrderedRowGroups::new(sources, plan.read_threads, plan.ahead_bytes, sizing, Some(plan.inputs.schema.clone()))
}

/// Most rows of a piece gathered at once when the sort may be cancelled (32 batches: tens
/// of milliseconds).
const CANCEL_PIECE_ROWS: usize = 32 * BATCH_ROWS;

/// Sorts one chunk and writes it to `writer` in pieces; returns the engine that sorted.
/// Stops with [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is set (within
/// the sort, per piece, and in the writer).
#[allow(clippy::too_many_arguments)]
fn sort_chunk_into(
    chunk: &[RecordBatch],
    keys: &[SortKey],
    engine: &EngineOptions,
    piece_bytes: usize,
    writer: &mut SortedParquetWriter,
    sort_time: &mut Duration,
    spill_time: &mut Duration,
    cancel: Option<&Cancel>,
) -> Result<Engine> {
    let t = Instant::now();
    let options = SortBatchesOptions::default().with_engine_options(*engine).with_batch_size(BATCH_ROWS);
    let perm = sort_permutation_until(chunk, keys, &options, cancel)?;
    *sort_time += t.elapsed();
    let t = Instant::now();
    let rows = perm.len();
    let bytes: usize = chunk.iter().map(batch_bytes).sum();
    let mut piece_rows = (piece_bytes / (bytes / rows.max(1)).max(1)).max(BATCH_ROWS) / BATCH_ROWS * BATCH_ROWS;
    if cancel.is_some() {
        // A piece of a large chunk takes a second to gather: shorter ones let a cancel in.
        // (Cut at whole batches as before: the same batches reach the writer.)
        piece_rows = piece_rows.min(CANCEL_PIECE_ROWS);
    }
    let mut at = 0;
    while at < rows {
        check(cancel)?;
        let end = (at + piece_rows).min(rows);
        let indices = match &perm.indices {
            Indices::U32(v) => Indices::U32(v[at..end].to_vec()),
            Indices::U64(v) => Indices::U64(v[at..end].to_vec()),
        };
        let part = Permutation { indices, ..perm.clone_without_indices() };
        for b in crate::gather::gather(chunk, &part, BATCH_ROWS)? {
            writer.write(b)?;
        }
        at = end;
    }
    *spill_time += t.elapsed();
    Ok(perm.engine)
}

/// Writes sorted chunks: each into a new file (the output, or a spill run), closed after.
pub(super) struct ChunkWriter<'a> {
    pub(super) plan: &'a SortPlan,
    pub(super) engine: &'a EngineOptions,
    pub(super) parquet_schema: Option<SchemaDescriptor>,
    pub(super) metadata: Vec<KeyValue>,
    /// The sort's token ([`super::SortFilesOptions::cancel`]).
    pub(super) cancel: Option<&'a Cancel>,
}

impl ChunkWriter<'_> {
    /// Sorts a chunk of `rows` rows into a new file at `path` and closes it; the chunk is
    /// emptied before the file's last row group is flushed.
    pub(super) fn write(
        &self,
        chunk: &mut Vec<RecordBatch>,
        rows: usize,
        path: &Path,
        settings: &WriterSettings,
        summary: &mut SortSummary,
    ) -> Result<Written> {
        let inputs = &self.plan.inputs;
        let mut writer = SortedParquetWriter::create(
            path,
            inputs.schema.clone(),
            self.parquet_schema.clone(),
            &inputs.keys,
            self.metadata.clone(),
            rows,
            settings.clone(),
        )?;
        writer.set_cancel(self.cancel.cloned());
        if rows > 0 {
            let engine = sort_chunk_into(
                chunk,
                &inputs.keys,
                self.engine,
                self.plan.piece_bytes,
                &mut writer,
                &mut summary.sort_time,
                &mut summary.spill_time,
                self.cancel,
            )?;
            match engine {
                Engine::Gpu => summary.sorts_gpu += 1,
                _ => summary.sorts_cpu += 1,
            }
        }
        chunk.clear();
        let t = Instant::now();
        let written = writer.finish()?;
        summary.spill_time += t.elapsed();
        Ok(written)
    }
}

/// What the first phase ended with.
pub(super) enum Chunked {
    /// Every row fitted one chunk, sorted straight into the output.
    Output(Written),
    /// The sorted runs spilled, in chunk order.
    Spilled(Vec<SpilledRun>),
}

/// Phase 1: the inputs read into chunks of up to [`SortPlan::chunk_bytes`], each sorted and
/// spilled into the spill directory (created when first needed), unless the first chunk holds
/// every row: then it is sorted into `output` with `output_settings`.
pub(super) fn sort_chunks(
    writer: &ChunkWriter,
    spill_dir: &mut Option<SpillDir>,
    output: &Path,
    output_settings: &WriterSettings,
    spill_settings: &WriterSettings,
    progress: &(dyn Fn(SortPhase, usize) + Sync),
    summary: &mut SortSummary,
) -> Result<Chunked> {
    let plan = writer.plan;
    let mut reader = input_reader(plan).with_cancel(writer.cancel.cloned());
    let mut runs: Vec<SpilledRun> = Vec::new();
    let mut chunk: Vec<RecordBatch> = Vec::new();
    let mut chunk_bytes = 0;
    let mut pending: Option<RecordBatch> = None;
    loop {
        let t = Instant::now();
        let mut done = false;
        loop {
            check(writer.cancel)?;
            let next = match pending.take() {
                Some(b) => Some(b),
                None => reader.next_batch()?,
            };
            let Some(b) = next else {
                done = true;
                break;
            };
            let bytes = batch_bytes(&b) + b.num_rows() * SORT_BYTES_PER_ROW;
            if !chunk.is_empty() && chunk_bytes + bytes > plan.chunk_bytes {
                pending = Some(b);
                break;
            }
            chunk_bytes += bytes;
            if b.num_rows() > 0 {
                chunk.push(b);
            }
        }
        summary.read_time += t.elapsed();
        // A split output is written by the merge (its cuts), even from a single run.
        if done && runs.is_empty() && output_settings.split.is_none() {
            // Everything fits one chunk: sorted straight into the output.
            let rows: usize = chunk.iter().map(RecordBatch::num_rows).sum();
            super::check_rows(rows, plan.inputs.total_rows, output)?;
            let written = writer.write(&mut chunk, rows, output, output_settings, summary)?;
            progress(SortPhase::Runs, rows);
            progress(SortPhase::Merge, rows);
            return Ok(Chunked::Output(written));
        }
        if !chunk.is_empty() {
            if spill_dir.is_none() {
                *spill_dir = Some(SpillDir::create(&plan.temp_dir)?);
            }
            let dir = spill_dir.as_mut().expect("created above");
            let path = dir.next_file();
            let rows: usize = chunk.iter().map(RecordBatch::num_rows).sum();
            let written = writer.write(&mut chunk, rows, &path, spill_settings, summary)?;
            chunk_bytes = 0;
            summary.spill_bytes += written.bytes;
            log::debug!("spill run {}: {} rows, {}", runs.len(), rows, show_bytes(written.bytes));
            runs.push(SpilledRun { path, rows });
            progress(SortPhase::Runs, reader.rows());
        }
        if done {
            return Ok(Chunked::Spilled(runs));
        }
    }
}

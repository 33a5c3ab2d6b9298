//! Sorting Parquet files that are not sorted into one sorted Parquet file, in bounded
//! memory: an external merge sort.
//!
//! 1. **Runs.** The inputs are read in order (files as given, row groups and rows in file
//!    order; decoded in parallel, see below) into chunks of up to [`SortPlan::chunk_bytes`];
//!    each chunk is sorted stably ([`crate::sort_permutation`], on the engine of
//!    [`SortFilesOptions::engine`]) and
//!    written as a sorted **spill run** (`run-NNNNNN.parquet`, LZ4 by default) into a spill
//!    directory of its own (`.corank-sort-<hex>` under [`SortFilesOptions::temp_dir`]),
//!    not flushed to disk ([`WriterSettings::sync`] off: the merge reads it back from the
//!    page cache and it is removed after).
//!    When every row fits one chunk, the sorted chunk is the output and nothing is spilled.
//! 2. **Merge.** The runs, in chunk order, are merged into the output by
//!    [`merge_files`](super::merge_files()), which writes the output as a merge does (a
//!    temporary file renamed into place when complete, `sorting_columns` set). Chunk `i`
//!    holds rows that come before chunk `i + 1`'s in the input, and the merge breaks ties by
//!    run, so the output is the **stable** sort of the concatenation of the inputs. When
//!    the limit cannot hold a window of every run at once, neighbouring runs are first
//!    merged into longer runs (a pass of its own, stable for the same reason) until it can.
//!
//! The spill directory is removed when the sort ends, whether it succeeds or fails, and by
//! the signal handler of [`super::interrupt`] when a signal (Ctrl-C) ends the process. The
//! sort holds a lock on it while it exists; one left by a sort that was killed (SIGKILL) is
//! removed by the next sort or merge writing in its directory ([`super::leftovers`]).
//!
//! Reading: the inputs' row groups decode on threads of their own, up to one per core
//! ([`SortPlan::read_threads`], at most [`MAX_READ_THREADS`]), as far ahead as a shared byte
//! budget lets them ([`super::row_group_reader`]), and their batches go into the chunk in input order, so decoding runs on
//! every core and continues while a full chunk is sorted and spilled.
//!
//! Memory: the limit is split as [`super::memory`]'s module doc says ([`sort_budget`]); the merge
//! of the runs keeps to the merge's budget.

use super::inputs::{decoded_bytes, decoder_bytes, open_input, plan_merge_with, InputFile, MergePlan, PlanOptions, Run};
use super::interrupt::{spill_file_name, SpillDirGuard};
use super::memory::sort_budget;
use super::merge_files::{merge_files, MergeFilesOptions, MergeSummary};
use super::os::peak_memory;
use super::passthrough::Passthrough;
use super::row_group_reader::{batch_bytes, BatchSizing, OrderedRowGroups, RowGroupSource};
use super::sort_by_columns::{plan_columns, sort_by_columns, ColumnsPlan};
use super::writer::{check_row_groups, common_parquet_schema, SortedParquetWriter, WriterSettings, Written};
use crate::error::{Error, Result};
use crate::options::{Engine, EngineOptions};
use crate::permutation::{Indices, Permutation};
use crate::show_bytes::show_bytes;
use crate::sort::{sort_permutation, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use super::memory::{MAX_READ_THREADS, MIN_CHUNK_ROWS, SORT_BYTES_PER_ROW};

/// Rows per batch handed to the writer.
const BATCH_ROWS: usize = 8192;

/// How a file sort works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortStrategy {
    /// One column at a time where the memory limit allows it, else sorted runs.
    #[default]
    Auto,
    /// One column at a time ([`super::sort_by_columns`]): every value decoded and encoded
    /// once; needs the key columns and one other column of every row in memory.
    Columns,
    /// Sorted runs spilled and merged (an external merge sort, this module's doc): any
    /// number of rows in any memory limit that holds a chunk of them.
    Runs,
}

impl std::str::FromStr for SortStrategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(SortStrategy::Auto),
            "columns" => Ok(SortStrategy::Columns),
            "runs" => Ok(SortStrategy::Runs),
            other => Err(Error::InvalidArgument(format!("sort strategy \"{other}\": use auto, columns or runs"))),
        }
    }
}

/// Settings of a file sort.
#[derive(Debug, Clone)]
pub struct SortFilesOptions {
    /// Which engine sorts the chunks and merges the runs.
    pub engine: EngineOptions,
    /// Approximate cap on the memory the sort holds, in bytes.
    pub memory_limit: usize,
    /// The output's settings.
    pub writer: WriterSettings,
    /// Where the spill directory goes; `None`: beside the output.
    pub temp_dir: Option<PathBuf>,
    /// The spill runs' codec (fast: they are read once).
    pub spill_compression: Compression,
    /// Columns, runs, or whichever fits.
    pub strategy: SortStrategy,
}

impl Default for SortFilesOptions {
    fn default() -> Self {
        Self {
            engine: EngineOptions::default(),
            memory_limit: 2 << 30,
            writer: WriterSettings::default(),
            temp_dir: None,
            spill_compression: Compression::LZ4_RAW,
            strategy: SortStrategy::Auto,
        }
    }
}

/// What a file sort will do, worked out from the footers before a row is read.
#[derive(Debug, Clone)]
pub struct SortPlan {
    /// The inputs, their common schema and the key (a [`MergePlan`] whose runs are the
    /// inputs' row groups; the sort does not need them sorted).
    pub inputs: MergePlan,
    /// Estimated memory of the inputs' Parquet decoders (the largest row group's).
    pub decoder_bytes: usize,
    /// Most bytes of a chunk (Arrow data plus [`SORT_BYTES_PER_ROW`] a row).
    pub chunk_bytes: usize,
    /// Rows per decoded input batch.
    pub read_rows: usize,
    /// Row groups decoded at once, ahead of the chunk they go into.
    pub read_threads: usize,
    /// Bytes of decoded batches the row groups decoding may hold ahead of the chunk.
    pub ahead_bytes: usize,
    /// Estimated number of chunks (1: no spill).
    pub estimated_runs: usize,
    /// Most bytes of Arrow data per row group of a spill run or a one-chunk output.
    pub row_group_bytes: usize,
    /// Bytes of each piece of a sorted chunk handed to the writer.
    pub piece_bytes: usize,
    /// Where the spill directory would go.
    pub temp_dir: PathBuf,
    /// The column-at-a-time sort's plan, where it is the one that runs.
    pub columns: Option<ColumnsPlan>,
    /// Why the sort runs in runs: the strategy asked for it, or the columns did not fit.
    pub runs_because: Option<String>,
}

/// What a finished sort did.
#[derive(Debug, Clone)]
pub struct SortSummary {
    /// `columns` or `runs` ([`SortStrategy`]).
    pub strategy: &'static str,
    pub rows: usize,
    pub input_files: usize,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub output_row_groups: usize,
    /// Sorted runs written in phase 1 (0 when the rows fit one chunk and went straight to
    /// the output).
    pub spill_runs: usize,
    /// Bytes of those runs.
    pub spill_bytes: u64,
    /// Passes that merged neighbouring runs into longer ones before the final merge.
    pub intermediate_passes: usize,
    /// Runs the final merge read (1 without spill: the sorted chunk).
    pub final_runs: usize,
    /// Chunks sorted on the CPU and on the GPU.
    pub sorts_cpu: usize,
    pub sorts_gpu: usize,
    /// Rounds of the merges (intermediate and final) on the CPU and the GPU.
    pub rounds_cpu: usize,
    pub rounds_gpu: usize,
    /// The chunk budget in bytes.
    pub chunk_bytes: usize,
    pub elapsed: Duration,
    /// Reading and decoding the inputs.
    pub read_time: Duration,
    /// Sorting the chunks (keys and permutation).
    pub sort_time: Duration,
    /// Gathering and writing the sorted chunks (spill runs, or the output).
    pub spill_time: Duration,
    /// The merges of the runs (intermediate and final).
    pub merge_time: Duration,
    /// The process's peak resident memory at the end ([`peak_memory`]).
    pub peak_memory: Option<u64>,
}

impl SortSummary {
    /// `gpu`, `cpu`, or `gpu+cpu` when sorts or rounds ran on both.
    pub fn engine(&self) -> &'static str {
        match (self.sorts_gpu + self.rounds_gpu > 0, self.sorts_cpu + self.rounds_cpu > 0) {
            (true, true) => "gpu+cpu",
            (true, false) => "gpu",
            _ => "cpu",
        }
    }
}

/// Which phase a progress report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortPhase {
    /// Rows read and sorted into runs so far.
    Runs,
    /// Rows of the final output written so far.
    Merge,
}

/// The directory the spill directory goes into: `temp_dir`, else the output's directory.
fn spill_parent(output: &Path, temp_dir: Option<&Path>) -> PathBuf {
    match temp_dir {
        Some(d) => d.to_path_buf(),
        None => match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    }
}

/// Opens the inputs, checks their schemas and the key (as [`plan_merge_with`] does, with the
/// same errors), and sizes the chunks for `options.memory_limit`; a limit that cannot hold
/// [`MIN_CHUNK_ROWS`] rows is refused with the limit that would do.
pub fn plan_sort(
    paths: &[PathBuf],
    by: Option<Vec<SortKey>>,
    plan_options: &PlanOptions,
    output: &Path,
    options: &SortFilesOptions,
) -> Result<SortPlan> {
    let inputs = plan_merge_with(paths, by, plan_options)?;
    // Both strategies write the output's row groups as the settings say (the columns' sort
    // cuts them itself): settings that cannot are refused before a row is read.
    check_row_groups(&options.writer, inputs.total_rows)?;
    let (columns_plan, runs_because) = match options.strategy {
        SortStrategy::Runs => (None, Some("--strategy runs".to_string())),
        strategy => match plan_columns(&inputs, options.memory_limit, &options.writer) {
            Ok(plan) => (Some(plan), None),
            Err(why) if strategy == SortStrategy::Columns => {
                return Err(Error::InvalidArgument(format!(
                    "`memory_limit` {} is too small to sort one column at a time: {why}; raise it or sort in runs",
                    show_bytes(options.memory_limit as u64)
                )))
            }
            Err(why) => (None, Some(format!("one column at a time does not fit: {why}"))),
        },
    };
    let budget = sort_budget(&inputs, options.memory_limit, options.writer.row_group_bytes, columns_plan.is_some())?;
    Ok(SortPlan {
        inputs,
        decoder_bytes: budget.decoder_bytes,
        chunk_bytes: budget.chunk_bytes,
        read_rows: budget.read_rows,
        read_threads: budget.read_threads,
        ahead_bytes: budget.ahead_bytes,
        estimated_runs: budget.estimated_runs,
        row_group_bytes: budget.row_group_bytes,
        piece_bytes: budget.piece_bytes,
        temp_dir: spill_parent(output, options.temp_dir.as_deref()),
        columns: columns_plan,
        runs_because,
    })
}

/// Checks that a spill directory can be made in `dir` (made and removed again): a
/// temporary directory that cannot be written is an error before the inputs are read.
pub fn check_temp_dir(dir: &Path) -> Result<()> {
    SpillDir::create(dir).map(drop)
}

/// A spill directory: created empty, registered for the signal handler before it exists,
/// removed with everything in it when dropped.
pub(super) struct SpillDir {
    path: PathBuf,
    guard: SpillDirGuard,
    /// Spill files named so far (`run-000000.parquet` on).
    next: usize,
}

impl SpillDir {
    pub(super) fn create(parent: &Path) -> Result<SpillDir> {
        use std::hash::{BuildHasher, Hasher};
        let context = "cannot create the spill directory (set the temporary directory with --temp-dir)";
        for attempt in 0..64u32 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.write_u32(attempt);
            h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
            let path = parent.join(format!(".corank-sort-{:016x}", h.finish()));
            let mut guard = SpillDirGuard::register(&path);
            match std::fs::create_dir(&path) {
                // Locked while it exists, so a later run leaves it alone (super::leftovers);
                // one that removed it before the lock was taken makes us draw another name.
                Ok(()) => match std::fs::File::open(&path).and_then(|dir| super::leftovers::hold(dir, &path)) {
                    Ok(Some(held)) => {
                        guard.hold(held);
                        return Ok(SpillDir { path, guard, next: 0 });
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        let _ = std::fs::remove_dir(&path);
                        return Err(Error::io(parent, context, e));
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(parent, context, e)),
            }
        }
        Err(Error::io(parent, context, std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free directory name")))
    }

    /// The path of the next spill file (announced to the signal handler first).
    pub(super) fn next_file(&mut self) -> PathBuf {
        let i = self.next;
        self.next += 1;
        self.guard.announce(self.next);
        self.path.join(spill_file_name(i))
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            log::warn!("cannot remove the spill directory {}: {e}", self.path.display());
        }
    }
}

/// The footer metadata the output keeps: the inputs' key-value pairs, the first file's value
/// where they disagree (the Arrow schema is written anew), as a merge keeps them.
fn kept_metadata(files: &[InputFile]) -> Vec<KeyValue> {
    let mut kept: Vec<KeyValue> = Vec::new();
    for f in files {
        for kv in f.metadata.metadata().file_metadata().key_value_metadata().into_iter().flatten() {
            if kv.key != "ARROW:schema" && !kept.iter().any(|k| k.key == kv.key) {
                kept.push(kv.clone());
            }
        }
    }
    kept
}

/// The inputs' rows in order (files as given, row groups in file order), in batches of the
/// plan's schema, decoded [`SortPlan::read_threads`] row groups at once.
fn input_reader(plan: &SortPlan) -> OrderedRowGroups {
    let sources = (plan.inputs.files.iter())
        .flat_map(|file| {
            let meta = file.metadata.metadata();
            (0..meta.num_row_groups()).map(move |g| RowGroupSource {
                path: file.path.clone(),
                metadata: file.metadata.clone(),
                row_group: g,
                rows: meta.row_group(g).num_rows().max(0) as usize,
            })
        })
        .collect();
    let sizing = BatchSizing { rows: plan.read_rows, target_bytes: None, extra_bytes_per_row: 0, max_rows: plan.read_rows };
    OrderedRowGroups::new(sources, plan.read_threads, plan.ahead_bytes, sizing, Some(plan.inputs.schema.clone()))
}

/// Sorts one chunk and writes it to `writer` in pieces; returns the engine that sorted.
fn sort_chunk_into(
    chunk: &[RecordBatch],
    keys: &[SortKey],
    engine: &EngineOptions,
    piece_bytes: usize,
    writer: &mut SortedParquetWriter,
    sort_time: &mut Duration,
    spill_time: &mut Duration,
) -> Result<Engine> {
    let t = Instant::now();
    let options = SortBatchesOptions::default().with_engine_options(*engine).with_batch_size(BATCH_ROWS);
    let perm = sort_permutation(chunk, keys, &options)?;
    *sort_time += t.elapsed();
    let t = Instant::now();
    let rows = perm.len();
    let bytes: usize = chunk.iter().map(batch_bytes).sum();
    let piece_rows = (piece_bytes / (bytes / rows.max(1)).max(1)).max(BATCH_ROWS) / BATCH_ROWS * BATCH_ROWS;
    let mut at = 0;
    while at < rows {
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

/// A sorted run written to the spill directory.
struct SpilledRun {
    path: PathBuf,
    rows: usize,
}

/// Sorts the inputs of `plan` into `output` (see the module doc). `progress` is called with
/// the phase and the rows done in it. On any error the output is left as it was and the
/// spill directory is removed.
pub fn sort_files(
    plan: &SortPlan,
    output: &Path,
    options: &SortFilesOptions,
    progress: &(dyn Fn(SortPhase, usize) + Sync),
) -> Result<SortSummary> {
    let start = Instant::now();
    let inputs = &plan.inputs;
    if options.engine.engine == Engine::Gpu || (options.engine.engine == Engine::Auto && inputs.total_rows >= options.engine.gpu_min_rows) {
        crate::engine::warm_up_gpu(&options.engine, inputs.total_rows);
    }
    super::writer::check_output(output, options.writer.overwrite)?;
    // What killed runs left where this one writes (super::leftovers).
    let keep: Vec<&Path> = inputs.files.iter().map(|f| f.path.as_path()).collect();
    super::leftovers::remove_stale(&[&super::leftovers::dir_of(output), &plan.temp_dir], &keep);
    let parquet_schema = common_parquet_schema(&inputs.files, &inputs.schema);
    let metadata = kept_metadata(&inputs.files);
    let mut spill_settings = options.writer.clone();
    spill_settings.row_group_bytes = plan.row_group_bytes;
    spill_settings.overwrite = false;
    spill_settings.sync = false; // temporary: read back from the page cache, then removed
    let mut output_settings = spill_settings.clone();
    output_settings.overwrite = options.writer.overwrite;
    output_settings.sync = options.writer.sync;
    spill_settings.compression = options.spill_compression;
    // Created up front: a directory that cannot be written fails before a row is read (the
    // columns' sort keeps its encoded pages beyond its budget in a file there).
    let mut spill_dir = if plan.columns.is_some() || plan.estimated_runs > 1 { Some(SpillDir::create(&plan.temp_dir)?) } else { None };

    let mut summary = SortSummary {
        strategy: if plan.columns.is_some() { "columns" } else { "runs" },
        rows: 0,
        input_files: inputs.files.len(),
        input_bytes: inputs.total_bytes,
        output_bytes: 0,
        output_row_groups: 0,
        spill_runs: 0,
        spill_bytes: 0,
        intermediate_passes: 0,
        final_runs: 1,
        sorts_cpu: 0,
        sorts_gpu: 0,
        rounds_cpu: 0,
        rounds_gpu: 0,
        chunk_bytes: plan.chunk_bytes,
        elapsed: Duration::ZERO,
        read_time: Duration::ZERO,
        sort_time: Duration::ZERO,
        spill_time: Duration::ZERO,
        merge_time: Duration::ZERO,
        peak_memory: None,
    };
    if plan.columns.is_some() {
        let spill_dir = spill_dir.take().expect("created above for the columns' sort");
        sort_by_columns(plan, output, options, metadata, spill_dir, progress, &mut summary)?;
        summary.elapsed = start.elapsed();
        summary.peak_memory = peak_memory();
        return Ok(summary);
    }
    let mut reader = input_reader(plan);
    let mut runs: Vec<SpilledRun> = Vec::new();
    let mut chunk: Vec<RecordBatch> = Vec::new();
    let mut chunk_bytes = 0;
    let mut pending: Option<RecordBatch> = None;
    // Sorts a chunk of `rows` rows into a new file at `path` (the output, or a spill run)
    // and closes it; the chunk is emptied before the file's last row group is flushed.
    let write_sorted = |chunk: &mut Vec<RecordBatch>, rows: usize, path: &Path, settings: &WriterSettings, summary: &mut SortSummary| {
        let mut writer = SortedParquetWriter::create(
            path,
            inputs.schema.clone(),
            parquet_schema.clone(),
            &inputs.keys,
            metadata.clone(),
            rows,
            settings.clone(),
        )?;
        if rows > 0 {
            let engine = sort_chunk_into(
                chunk,
                &inputs.keys,
                &options.engine,
                plan.piece_bytes,
                &mut writer,
                &mut summary.sort_time,
                &mut summary.spill_time,
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
        Ok::<_, Error>(written)
    };
    // Phase 1: chunks, sorted; each spilled unless it is the only one.
    loop {
        let t = Instant::now();
        let mut done = false;
        loop {
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
        if done && runs.is_empty() {
            // Everything fits one chunk: sorted straight into the output.
            let rows: usize = chunk.iter().map(RecordBatch::num_rows).sum();
            check_rows(rows, inputs.total_rows, output)?;
            let written = write_sorted(&mut chunk, rows, output, &output_settings, &mut summary)?;
            progress(SortPhase::Runs, rows);
            progress(SortPhase::Merge, rows);
            finish_summary(&mut summary, &written, start);
            return Ok(summary);
        }
        if !chunk.is_empty() {
            if spill_dir.is_none() {
                spill_dir = Some(SpillDir::create(&plan.temp_dir)?);
            }
            let dir = spill_dir.as_mut().expect("created above");
            let path = dir.next_file();
            let rows: usize = chunk.iter().map(RecordBatch::num_rows).sum();
            let written = write_sorted(&mut chunk, rows, &path, &spill_settings, &mut summary)?;
            chunk_bytes = 0;
            summary.spill_bytes += written.bytes;
            log::debug!("spill run {}: {} rows, {}", runs.len(), rows, show_bytes(written.bytes));
            runs.push(SpilledRun { path, rows });
            progress(SortPhase::Runs, reader.rows());
        }
        if done {
            break;
        }
    }
    let total: usize = runs.iter().map(|r| r.rows).sum();
    check_rows(total, inputs.total_rows, output)?;
    summary.spill_runs = runs.len();
    let dir = spill_dir.as_mut().expect("runs were spilled");
    log::info!("{} rows sorted into {} runs ({} spilled); merging", total, runs.len(), show_bytes(summary.spill_bytes));

    // Phase 2: merge the runs, first into longer runs while the limit cannot hold them all.
    let merge_options = MergeFilesOptions {
        engine: options.engine,
        memory_limit: options.memory_limit,
        writer: spill_settings.clone(),
        passthrough: Passthrough::Never,
    };
    let mut files: Vec<InputFile> = runs.iter().map(|r| open_input(&r.path)).collect::<Result<_>>()?;
    loop {
        let fan_in = max_fan_in(&files, inputs, &merge_options)?;
        if fan_in >= files.len() {
            break;
        }
        summary.intermediate_passes += 1;
        // Where one merge of the first runs brings the rest within reach, only as many as
        // needed; otherwise a pass over all runs, `fan_in` at a time. Groups are runs next to
        // each other, so ties keep input order.
        let group = if files.len() - fan_in < fan_in { files.len() - fan_in + 1 } else { fan_in };
        log::info!("merge pass {}: {} runs, {} at a time", summary.intermediate_passes, files.len(), group);
        let mut next = Vec::new();
        let partial = files.len() - fan_in < fan_in;
        for (g, group) in files.chunks(group).enumerate() {
            if partial && g > 0 {
                next.extend(group.iter().cloned());
                continue;
            }
            if group.len() == 1 {
                next.push(group[0].clone());
                continue;
            }
            let path = dir.next_file();
            let t = Instant::now();
            let merged = merge_files(&runs_plan(group.to_vec(), inputs), &path, &merge_options, &|_| {})?;
            summary.merge_time += t.elapsed();
            add_rounds(&mut summary, &merged);
            for f in group {
                let _ = std::fs::remove_file(&f.path);
            }
            next.push(open_input(&path)?);
        }
        files = next;
    }
    summary.final_runs = files.len();
    let mut final_options = merge_options.clone();
    final_options.writer = output_settings;
    let t = Instant::now();
    let merged = merge_files(&runs_plan(files, inputs), output, &final_options, &|rows| progress(SortPhase::Merge, rows))?;
    summary.merge_time += t.elapsed();
    add_rounds(&mut summary, &merged);
    summary.rows = merged.rows;
    summary.output_bytes = merged.output_bytes;
    summary.output_row_groups = merged.output_row_groups;
    summary.elapsed = start.elapsed();
    summary.peak_memory = peak_memory();
    Ok(summary)
}

fn check_rows(rows: usize, expected: usize, output: &Path) -> Result<()> {
    if rows != expected {
        return Err(Error::Internal(format!(
            "{}: read {rows} rows but the inputs' metadata counts {expected}; nothing written",
            output.display()
        )));
    }
    Ok(())
}

fn finish_summary(summary: &mut SortSummary, written: &Written, start: Instant) {
    record_written(summary, written);
    summary.elapsed = start.elapsed();
    summary.peak_memory = peak_memory();
}

/// The output's rows, bytes and row groups into `summary`.
pub(super) fn record_written(summary: &mut SortSummary, written: &Written) {
    summary.rows = written.rows;
    summary.output_bytes = written.bytes;
    summary.output_row_groups = written.row_groups;
}

fn add_rounds(summary: &mut SortSummary, merged: &MergeSummary) {
    summary.rounds_cpu += merged.rounds_cpu;
    summary.rounds_gpu += merged.rounds_gpu;
}

/// The schema of the runs' merge: the inputs', with each dictionary column's key type the
/// widest any run stored (a run's writer widens a key type its row groups outgrew).
fn runs_schema(files: &[InputFile], schema: &SchemaRef) -> SchemaRef {
    let width = |t: &DataType| match t {
        DataType::Dictionary(k, _) => k.primitive_width().unwrap_or(0),
        _ => 0,
    };
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut t = f.data_type().clone();
            for file in files {
                if let Ok(g) = file.metadata.schema().field_with_name(f.name()) {
                    if matches!(g.data_type(), DataType::Dictionary(..)) && width(g.data_type()) > width(&t) {
                        t = g.data_type().clone();
                    }
                }
            }
            f.as_ref().clone().with_data_type(t)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A merge plan over sorted runs written by this module: one run per file (all its row
/// groups: each file is sorted as a whole), in the given order.
fn runs_plan(files: Vec<InputFile>, inputs: &MergePlan) -> MergePlan {
    let mut runs = Vec::new();
    let mut total_rows = 0;
    let mut decoded = 0;
    for (i, f) in files.iter().enumerate() {
        let groups: Vec<usize> =
            (0..f.metadata.metadata().num_row_groups()).filter(|&g| f.metadata.metadata().row_group(g).num_rows() > 0).collect();
        if groups.is_empty() {
            continue;
        }
        let row_group_rows: Vec<usize> = groups.iter().map(|&g| f.metadata.metadata().row_group(g).num_rows() as usize).collect();
        let decoded_run: u64 = groups.iter().map(|&g| decoded_bytes(f, g)).sum();
        total_rows += row_group_rows.iter().sum::<usize>();
        decoded += decoded_run;
        runs.push(Run {
            file: i,
            decoder_bytes: groups.iter().map(|&g| decoder_bytes(f, g)).max().unwrap_or(0),
            row_groups: groups,
            row_group_rows,
            declared: true,
            decoded_bytes: decoded_run,
        });
    }
    MergePlan {
        schema: runs_schema(&files, &inputs.schema),
        keys: inputs.keys.clone(),
        runs,
        total_rows,
        total_bytes: files.iter().map(|f| f.size).sum(),
        row_bytes: (decoded / total_rows.max(1) as u64).max(1) as usize,
        union_by_name: false,
        files,
    }
}

/// The most runs of `files` one merge can take within the memory limit (all of them when
/// they fit); an error when not even two fit.
fn max_fan_in(files: &[InputFile], inputs: &MergePlan, options: &MergeFilesOptions) -> Result<usize> {
    let fits = |n: usize| -> Result<()> {
        // The largest runs decide: take the n largest files.
        let mut by_size: Vec<&InputFile> = files.iter().collect();
        by_size.sort_by_key(|f| std::cmp::Reverse(f.size));
        let plan = runs_plan(by_size.into_iter().take(n).cloned().collect(), inputs);
        super::merge_files::read_plan(&plan, options.memory_limit).map(|_| ())
    };
    if fits(files.len()).is_ok() {
        return Ok(files.len());
    }
    // At least two runs per merge, or the sort cannot finish.
    fits(2)?;
    let (mut lo, mut hi) = (2, files.len());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid).is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

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
//!    [`merge_files`](crate::parquet::merge_files()), which writes the output as a merge does (a
//!    temporary file renamed into place when complete, `sorting_columns` set). Chunk `i`
//!    holds rows that come before chunk `i + 1`'s in the input, and the merge breaks ties by
//!    run, so the output is the **stable** sort of the concatenation of the inputs. When
//!    the limit cannot hold a window of every run at once, neighbouring runs are first
//!    merged into longer runs (a pass of its own, stable for the same reason) until it can.
//!
//! The spill directory is removed when the sort ends, whether it succeeds or fails, and by
//! the signal handler of [`crate::parquet::interrupt`] when a signal (Ctrl-C) ends the process. The
//! sort holds a lock on it while it exists; one left by a sort that was killed (SIGKILL) is
//! removed by the next sort or merge writing in its directory ([`crate::parquet::leftovers`]).
//!
//! Reading: the inputs' row groups decode on threads of their own, up to one per core
//! ([`SortPlan::read_threads`], at most [`MAX_READ_THREADS`]), as far ahead as a shared byte
//! budget lets them ([`crate::parquet::read::row_groups`]), and their batches go into the chunk in input order, so decoding runs on
//! every core and continues while a full chunk is sorted and spilled.
//!
//! Memory: the limit is split as [`crate::parquet::memory`]'s module doc says ([`sort_budget`]); the merge
//! of the runs keeps to the merge's budget.

pub mod chunks;
pub mod columns;
mod page_pool;
pub mod spill;

pub use spill::check_temp_dir;

use super::inputs::{plan_merge_with, MergePlan, PlanOptions};
use super::memory::sort_budget;
use super::merge::passthrough::Passthrough;
use super::merge::{kept_metadata, MergeFilesOptions, MergeSummary};
use super::os::peak_memory;
use super::writer::{check_row_groups, common_parquet_schema, WriterSettings, Written};
use crate::cancel::Cancel;
use crate::error::{Error, Result, Setting};
use crate::options::EngineOptions;
use crate::show_bytes::show_bytes;
use crate::sort_key::SortKey;
use chunks::{sort_chunks, ChunkWriter, Chunked};
use columns::{plan_columns, sort_by_columns, ColumnsPlan};
use parquet::basic::Compression;
use spill::{merge_runs, spill_parent, SpillDir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use super::memory::SORT_BYTES_PER_ROW;

/// Rows per batch handed to the writer.
pub(super) const BATCH_ROWS: usize = crate::DEFAULT_BATCH_SIZE;

/// How a file sort works ([`SortFilesOptions::strategy`]; [`sort_files`] has an example).
/// `FromStr` takes `auto`, `columns` and `runs`, in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortStrategy {
    /// One column at a time where the memory limit allows it, else sorted runs.
    #[default]
    Auto,
    /// One column at a time (`columns`): every value decoded and encoded
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

/// Settings of a file sort. [`sort_files`] has an example.
#[derive(Debug, Clone)]
pub struct SortFilesOptions {
    /// Which engine sorts the chunks and merges the runs.
    pub engine: EngineOptions,
    /// Approximate cap on the memory the sort holds, in bytes; by default
    /// [`default_memory_limit`](crate::parquet::default_memory_limit) (half the memory available).
    pub memory_limit: usize,
    /// The output's settings.
    pub writer: WriterSettings,
    /// Where the spill directory goes; `None`: beside the output.
    pub temp_dir: Option<PathBuf>,
    /// The spill runs' codec (fast: they are read once).
    pub spill_compression: Compression,
    /// Columns, runs, or whichever fits.
    pub strategy: SortStrategy,
    /// Stops the sort from another thread ([`Cancel::cancel`]): it returns
    /// [`Error::Cancelled`] within about 100 ms, the output left as it was and the spill
    /// directory removed (`None`: never).
    pub cancel: Option<Cancel>,
}

impl Default for SortFilesOptions {
    fn default() -> Self {
        Self {
            engine: EngineOptions::default(),
            memory_limit: super::memory::default_memory_limit(),
            writer: WriterSettings::default(),
            temp_dir: None,
            spill_compression: Compression::LZ4_RAW,
            strategy: SortStrategy::Auto,
            cancel: None,
        }
    }
}

/// What a file sort will do, worked out from the footers before a row is read
/// ([`plan_sort`]; [`sort_files`] has an example).
#[derive(Debug, Clone)]
pub struct SortPlan {
    /// The inputs, their common schema and the key (a [`MergePlan`] whose runs are the
    /// inputs' row groups; the sort does not need them sorted).
    pub inputs: MergePlan,
    /// Estimated memory of the inputs' Parquet decoders (the largest row group's).
    pub decoder_bytes: usize,
    /// Most bytes of a chunk (Arrow data plus `SORT_BYTES_PER_ROW` (64) a row).
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

/// What a finished sort did ([`sort_files`] returns it; its example prints one).
#[derive(Debug, Clone)]
pub struct SortSummary {
    /// `columns` or `runs` ([`SortStrategy`]).
    pub strategy: &'static str,
    /// Rows written.
    pub rows: usize,
    /// Input files sorted.
    pub input_files: usize,
    /// Bytes of the input files (their sizes on disk).
    pub input_bytes: u64,
    /// Bytes of the output file (of all its files where it is split).
    pub output_bytes: u64,
    /// Row groups of the output file (of all its files where it is split).
    pub output_row_groups: usize,
    /// The files of a split output ([`WriterSettings::split`]) in key order, with their
    /// rows, bytes and first and last keys; empty for an output of one file.
    pub output_files: Vec<crate::parquet::OutputFile>,
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
    /// Chunks sorted on the GPU.
    pub sorts_gpu: usize,
    /// Rounds of the merges (intermediate and final) on the CPU and the GPU.
    pub rounds_cpu: usize,
    /// Rounds of the merges on the GPU.
    pub rounds_gpu: usize,
    /// The chunk budget in bytes.
    pub chunk_bytes: usize,
    /// Wall time of the whole sort.
    pub elapsed: Duration,
    /// Reading and decoding the inputs.
    pub read_time: Duration,
    /// Sorting the chunks (keys and permutation).
    pub sort_time: Duration,
    /// Gathering and writing the sorted chunks (spill runs, or the output).
    pub spill_time: Duration,
    /// The merges of the runs (intermediate and final).
    pub merge_time: Duration,
    /// The process's peak resident memory at the end, in bytes (`None` where the platform
    /// does not tell it; Linux and macOS do).
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

/// Which phase a progress report of [`sort_files`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortPhase {
    /// Rows read and sorted into runs so far.
    Runs,
    /// Rows of the final output written so far.
    Merge,
}

impl SortSummary {
    /// A summary of nothing done yet, for `plan` run as `strategy`.
    fn new(plan: &SortPlan, strategy: &'static str) -> Self {
        SortSummary {
            strategy,
            rows: 0,
            input_files: plan.inputs.files.len(),
            input_bytes: plan.inputs.total_bytes,
            output_bytes: 0,
            output_row_groups: 0,
            output_files: Vec::new(),
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
        }
    }
}

/// Opens the inputs, checks their schemas and the key (as [`plan_merge`](crate::parquet::plan_merge)
/// does, with `plan_options` and the same errors), and sizes the chunks for
/// `options.memory_limit`; a limit that cannot hold `MIN_CHUNK_ROWS` (1024) rows is refused
/// with the limit that would do. [`sort_files`] has an example.
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
        // The columns' sort writes whole columns of one file: the split needs the rows.
        SortStrategy::Columns if options.writer.split.is_some() => {
            return Err(Error::InvalidArgument(
                "--strategy columns with a split output (--max-file-rows, --max-file-bytes): one column at a time writes one file; \
                 use --strategy runs or auto"
                    .into(),
            ))
        }
        SortStrategy::Auto if options.writer.split.is_some() => (None, Some("the output is split into files".to_string())),
        strategy => match plan_columns(&inputs, options.memory_limit, &options.writer) {
            Ok(plan) => (Some(plan), None),
            Err(why) if strategy == SortStrategy::Columns => {
                return Err(Error::InvalidSetting {
                    setting: Setting::MemoryLimit,
                    detail: format!(
                        "{} is too small to sort one column at a time: {why}; raise it or sort in runs",
                        show_bytes(options.memory_limit as u64)
                    ),
                })
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

/// Sorts the inputs of `plan` into `output` (see the module doc; a directory, or a store
/// prefix, of part files where `options.writer.split` is set:
/// [`SplitFiles`](crate::parquet::SplitFiles)). `progress` is called with
/// the phase and the rows done in it. On any error the output is left as it was and the
/// spill directory is removed.
///
/// ```no_run
/// use corank::parquet::{parse_order_by, plan_sort, sort_files, PlanOptions, SortFilesOptions, SortPhase};
/// use std::path::{Path, PathBuf};
///
/// let inputs = [PathBuf::from("events-a.parquet"), PathBuf::from("events-b.parquet")];
/// let output = Path::new("sorted.parquet");
/// let options = SortFilesOptions { memory_limit: 512 << 20, ..Default::default() };
/// let by = parse_order_by("user_id, ts DESC")?;
/// let plan = plan_sort(&inputs, Some(by), &PlanOptions::default(), output, &options)?;
/// let summary = sort_files(&plan, output, &options, &|phase, rows| {
///     if phase == SortPhase::Merge {
///         eprint!("\r{rows} rows written");
///     }
/// })?;
/// println!("{} rows, {} spill runs, engine {}", summary.rows, summary.spill_runs, summary.engine());
/// # Ok::<(), corank::Error>(())
/// ```
pub fn sort_files(
    plan: &SortPlan,
    output: &Path,
    options: &SortFilesOptions,
    progress: &(dyn Fn(SortPhase, usize) + Sync),
) -> Result<SortSummary> {
    let start = Instant::now();
    let inputs = &plan.inputs;
    crate::cancel::check(options.cancel.as_ref())?;
    // Inputs in object stores read ahead within R/16 of the sort's budget (out of its
    // slack, as a merge's); what no reader took is stopped as the sort ends.
    let _read_ahead = crate::parquet::store::ReadAhead::new(plan.piece_bytes as u64, inputs.files.iter().map(|f| f.path.as_path()));
    if crate::engine::placement::warm_up_pays(&options.engine, inputs.total_rows) {
        crate::engine::warm_up_gpu(&options.engine, inputs.total_rows);
    }
    let out_dir = match options.writer.split {
        Some(_) => {
            super::writer::split::check_split_output(output, options.writer.overwrite)?;
            super::writer::split::check_inputs_outside(output, inputs.files.iter().map(|f| f.path.as_path()))?;
            output.to_path_buf()
        }
        None => {
            super::writer::check_output(output, options.writer.overwrite)?;
            super::leftovers::dir_of(output)
        }
    };
    // What killed runs left where this one writes (super::leftovers).
    let keep: Vec<&Path> = inputs.files.iter().map(|f| f.path.as_path()).collect();
    super::leftovers::remove_stale(&[&out_dir, &plan.temp_dir], &keep);
    let parquet_schema = common_parquet_schema(&inputs.files, &inputs.schema);
    let metadata = kept_metadata(&inputs.files);
    let mut spill_settings = options.writer.clone();
    spill_settings.row_group_bytes = plan.row_group_bytes;
    spill_settings.overwrite = false;
    spill_settings.sync = false; // temporary: read back from the page cache, then removed
    spill_settings.split = None;
    let mut output_settings = spill_settings.clone();
    output_settings.overwrite = options.writer.overwrite;
    output_settings.sync = options.writer.sync;
    output_settings.split = options.writer.split;
    spill_settings.compression = options.spill_compression;
    // Created up front: a directory that cannot be written fails before a row is read (the
    // columns' sort keeps its encoded pages beyond its budget in a file there).
    let mut spill_dir = if plan.columns.is_some() || plan.estimated_runs > 1 || options.writer.split.is_some() {
        Some(SpillDir::create(&plan.temp_dir)?)
    } else {
        None
    };
    let mut summary = SortSummary::new(plan, if plan.columns.is_some() { "columns" } else { "runs" });
    if plan.columns.is_some() {
        let spill_dir = spill_dir.take().expect("created above for the columns' sort");
        sort_by_columns(plan, output, options, metadata, spill_dir, progress, &mut summary)?;
        summary.elapsed = start.elapsed();
        summary.peak_memory = peak_memory();
        return Ok(summary);
    }
    // Phase 1: chunks, sorted; each spilled unless it is the only one.
    let writer = ChunkWriter { plan, engine: &options.engine, parquet_schema, metadata, cancel: options.cancel.as_ref() };
    let runs = match sort_chunks(&writer, &mut spill_dir, output, &output_settings, &spill_settings, progress, &mut summary)? {
        Chunked::Output(written) => {
            finish_summary(&mut summary, &written, start);
            return Ok(summary);
        }
        Chunked::Spilled(runs) => runs,
    };
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
        cancel: options.cancel.clone(),
    };
    let mut final_options = merge_options.clone();
    final_options.writer = output_settings;
    let merged = merge_runs(&runs, dir, inputs, &merge_options, output, &final_options, progress, &mut summary)?;
    summary.rows = merged.rows;
    summary.output_bytes = merged.output_bytes;
    summary.output_row_groups = merged.output_row_groups;
    summary.output_files = merged.output_files;
    summary.elapsed = start.elapsed();
    summary.peak_memory = peak_memory();
    Ok(summary)
}

pub(super) fn check_rows(rows: usize, expected: usize, output: &Path) -> Result<()> {
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
pub(crate) fn record_written(summary: &mut SortSummary, written: &Written) {
    summary.rows = written.rows;
    summary.output_bytes = written.bytes;
    summary.output_row_groups = written.row_groups;
}

pub(super) fn add_rounds(summary: &mut SortSummary, merged: &MergeSummary) {
    summary.rounds_cpu += merged.rounds_cpu;
    summary.rounds_gpu += merged.rounds_gpu;
}

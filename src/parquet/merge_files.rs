//! Merging sorted Parquet files into one sorted Parquet file, in bounded memory.
//!
//! The runs of a [`MergePlan`] stream through a [`FrontierMerge`]: each run buffers a
//! window of rows, a round merges everything the frontier rule lets out, and the merged
//! rows go, gathered in pieces, to a writer thread that encodes row groups (columns in
//! parallel). Each run decodes on its own thread a batch ahead of the merge (up to
//! [`MAX_READER_THREADS`] runs; beyond, the merge loop reads the runs in parallel itself);
//! with fewer runs than cores, a run decodes several of its row groups at once
//! ([`read_plan`], [`super::row_group_reader`]), so two large files decode on every core,
//! not on two.
//! With `Engine::Auto`, each round merges on the engine that measured faster on the rounds
//! before ([`crate::engine::auto`]).
//!
//! Memory (`memory_limit` = B), by the real size of the decoded batches, not Parquet's
//! uncompressed sizes (dictionary-encoded strings decode to many times those):
//! - **decoders**: D, what the runs' Parquet decoders hold (pages, dictionaries,
//!   decompression contexts; estimated from the footers, [`decoder_bytes`], times the row
//!   groups a run decodes at once, which [`read_plan`] keeps to B/4); of the rest, R = B − D:
//! - **windows**: R/4 shared by the runs ([`window_budgets`]: a run that holds less than
//!   its share leaves the rest to the others), each run's window counted in buffered Arrow
//!   bytes plus [`ROUND_BYTES_PER_ROW`] a row for the round's key words and permutation;
//!   every run also holds one batch decoded ahead and may overshoot by one batch, batches
//!   being a quarter of a window: 3R/8 in all (a run decoding several row groups at once
//!   keeps to the same quarter window ahead and quarter window of overshoot in smaller
//!   batches: [`parallel_run_reader`]);
//! - **the round**: gathered in pieces of R/16, one piece handed to the writer while the
//!   next is gathered (R/8);
//! - **the writer**: R/4 for the row groups being encoded (their Arrow data and their
//!   encoded pages), and the row groups copied unchanged that wait in line behind them
//!   (their compressed bytes, two row groups' worth);
//! - **the next phase** (with passthrough, the merge runs in phases between copied row
//!   groups): its runs start decoding while the phase before merges, each holding up to
//!   [`NEXT_PHASE_AHEAD`] + 1 batches (a quarter window each); a run in both phases holds
//!   its window and those batches at once (and its decoders twice), so a pair of phases
//!   sharing every run can take up to 3R/16 more than the windows above, out of the slack;
//! - the rest (R/4) is slack for the allocator and everything not counted.
//!
//! A limit whose R cannot hold every run's smallest window, or smaller than 2D, is refused
//! up front with the limit that would do. Peak resident memory then stays within the limit
//! plus 20%, plus a fixed floor of 64 MiB (the program and its threads; docs/PERFORMANCE.md
//! has the measurements). Open files stay bounded: with more runs than [`open_file_budget`]
//! a run opens its file for each batch and closes it after (its decoders then live only
//! while it reads); a run closes its file as soon as its last row is read.

use super::corrupt::{catch, decode_error};
use super::inputs::{conform, MergePlan, Run};
use super::passthrough::{key_converter, schedule, verify_block, Passthrough, Verified};
use super::row_group_reader::{batch_bytes, BatchSizing, OrderedRowGroups, RowGroupSource};
use super::writer::{SortedParquetWriter, WriterSettings, Written};
use crate::engine::auto::AutoChoice;
use crate::error::{Error, Result};
use crate::frontier::{FrontierMerge, FrontierOptions, DEFAULT_WINDOW_ROWS};
use crate::options::{Engine, EngineOptions};
use crate::show_bytes::show_bytes;
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::DataType;
use arrow::row::{OwnedRow, RowConverter};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::file::metadata::KeyValue;
use rayon::prelude::*;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Settings of a file merge.
#[derive(Debug, Clone)]
pub struct MergeFilesOptions {
    /// Which engine, kernel and device merge each round.
    pub engine: EngineOptions,
    /// Approximate cap on the memory the merge holds, in bytes.
    pub memory_limit: usize,
    pub writer: WriterSettings,
    /// Whether row groups that need no merge are copied unchanged ([`super::passthrough`]).
    pub passthrough: Passthrough,
}

impl Default for MergeFilesOptions {
    fn default() -> Self {
        Self { engine: EngineOptions::default(), memory_limit: 2 << 30, writer: WriterSettings::default(), passthrough: Passthrough::Auto }
    }
}

/// Estimated memory of the runs' Parquet decoders: an open run's decoders live as long as
/// it is read; a run read in one batch (at most [`FIRST_BATCH_ROWS`] rows), or every run
/// when files are opened per batch (`keep_open` false), holds them only while it decodes,
/// and only as many runs decode at once as there are reader threads.
pub fn decoder_bytes(plan: &MergePlan, keep_open: bool) -> usize {
    let concurrent = if plan.runs.len() <= MAX_READER_THREADS { plan.runs.len() } else { rayon::current_num_threads() };
    let (held, mut transient): (Vec<&Run>, Vec<&Run>) = plan.runs.iter().partition(|r| keep_open && r.rows() > FIRST_BATCH_ROWS);
    transient.sort_unstable_by_key(|r| std::cmp::Reverse(r.decoder_bytes));
    held.iter().chain(transient.iter().take(concurrent)).map(|r| r.decoder_bytes as usize).sum()
}

/// Fewest rows a run's window may hold (or the whole run, if smaller); a smaller memory
/// limit is refused.
pub const MIN_WINDOW_ROWS: usize = 1024;
/// Most rows a run's window holds (larger windows only add memory): the streaming merge's
/// default window.
pub const MAX_WINDOW_ROWS: usize = DEFAULT_WINDOW_ROWS;
/// Bytes a buffered row costs a round on top of its own: key words (up to 32 bytes, and
/// the engine's copy) and the permutation.
pub const ROUND_BYTES_PER_ROW: usize = 48;
/// Most rows of a run's first batch.
pub const FIRST_BATCH_ROWS: usize = 1024;
/// Most bytes of one decoded batch: a batch of Utf8 or Binary beyond 2 GiB overflows its
/// offsets, so huge values are read a few rows at a time.
pub const MAX_BATCH_BYTES: usize = 256 << 20;

/// What a finished merge did.
#[derive(Debug, Clone)]
pub struct MergeSummary {
    pub rows: usize,
    pub input_files: usize,
    pub runs: usize,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub output_row_groups: usize,
    /// Rows copied unchanged, not decoded nor re-encoded ([`super::passthrough`]).
    pub passthrough_rows: usize,
    /// Row groups copied unchanged (each one of `output_row_groups`).
    pub passthrough_row_groups: usize,
    /// Of those, row groups that kept a codec other than the output's
    /// ([`Passthrough::Always`]).
    pub passthrough_codec_kept_row_groups: usize,
    pub rounds_cpu: usize,
    pub rounds_gpu: usize,
    /// The largest window of any run, in bytes.
    pub window_bytes: usize,
    pub elapsed: Duration,
    /// Time the merge loop spent reading and decoding input windows.
    pub read_time: Duration,
    /// Time the merge loop spent in merge rounds (permutation and gather).
    pub merge_time: Duration,
    /// Time the writer thread spent encoding and writing row groups.
    pub write_time: Duration,
    /// The process's peak resident memory at the end ([`peak_memory`]; Linux and macOS).
    pub peak_memory: Option<u64>,
}

/// The process's peak resident memory so far, in bytes: `VmHWM` of `/proc/self/status` on
/// Linux, `getrusage`'s `ru_maxrss` on macOS; `None` elsewhere or when unreadable.
pub fn peak_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(target_os = "macos")]
    {
        // SAFETY: `rusage` is plain integers: all zeros is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes the struct passed by pointer.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
        // On macOS ru_maxrss is in bytes (on Linux and the BSDs in KiB).
        ok.then(|| usage.ru_maxrss.max(0) as u64)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        None
    }
}

impl MergeSummary {
    /// `gpu`, `cpu`, or `gpu+cpu` when rounds ran on both.
    pub fn engine(&self) -> &'static str {
        match (self.rounds_gpu > 0, self.rounds_cpu > 0) {
            (true, true) => "gpu+cpu",
            (true, false) => "gpu",
            _ => "cpu",
        }
    }
}

/// The bytes of a run's smallest workable window: [`MIN_WINDOW_ROWS`] rows, or the whole
/// run if it is shorter, at the plan's estimate of its decoded size.
fn min_window_bytes(run: &Run) -> usize {
    let rows = run.rows().max(1);
    let row_bytes = (run.decoded_bytes as usize / rows).max(1) + ROUND_BYTES_PER_ROW;
    rows.min(MIN_WINDOW_ROWS) * row_bytes
}

/// Each run's window budget in bytes for `memory_limit` (see the module doc): R/4
/// shared out by water-filling, so a run that needs less than an equal share (a short run)
/// takes only its need and the others split the rest. Refused when the decoders or the
/// runs' smallest workable windows do not fit, with the limit that would fit.
pub fn window_budgets(plan: &MergePlan, memory_limit: usize, decoders: usize) -> Result<Vec<usize>> {
    let n = plan.runs.len();
    if n == 0 {
        return Ok(vec![]);
    }
    let rest = memory_limit.saturating_sub(decoders);
    let pool = rest / 4;
    let needed: usize = plan.runs.iter().map(min_window_bytes).sum();
    if needed > pool || decoders > memory_limit / 2 {
        // The smallest limit with R/4 >= needed and B >= 2D.
        let at_least = (decoders + needed * 4).max(2 * decoders);
        return Err(Error::InvalidArgument(format!(
            "`memory_limit` {} is too small for {n} sorted runs of about {} bytes a row and {} of Parquet decoders; it needs at least {}",
            show_bytes(memory_limit as u64),
            plan.row_bytes,
            show_bytes(decoders as u64),
            show_bytes_ceil(at_least as u64)
        )));
    }
    // Water-filling over the runs' estimated sizes, smallest first.
    let wanted: Vec<usize> =
        plan.runs.iter().map(|r| (r.decoded_bytes as usize + r.rows() * ROUND_BYTES_PER_ROW).max(min_window_bytes(r))).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| wanted[i]);
    let mut budgets = vec![0; n];
    let mut left = pool;
    for (k, &i) in order.iter().enumerate() {
        let share = left / (n - k);
        budgets[i] = wanted[i].min(share).max(min_window_bytes(&plan.runs[i]));
        left = left.saturating_sub(budgets[i]);
    }
    Ok(budgets)
}

/// Most row groups of one run decoded at once.
pub const MAX_DECODERS_PER_RUN: usize = 16;

/// How a merge reads its runs, worked out from the footers ([`read_plan`]).
#[derive(Debug, Clone)]
pub struct ReadPlan {
    /// Whether runs keep their files open between batches (else each batch reopens it).
    pub keep_open: bool,
    /// Row groups of a run decoded at once, each on a thread of its own (1: one after
    /// another, on the run's thread).
    pub decoders_per_run: usize,
    /// Estimated memory of the runs' Parquet decoders ([`decoder_bytes`] per decoder).
    pub decoder_bytes: usize,
    /// Each run's window budget in bytes ([`window_budgets`]).
    pub window_bytes: Vec<usize>,
}

/// How `plan`'s runs are read within `memory_limit`. Fewer runs than cores leave cores
/// idle, since a run decodes its row groups in order: such runs decode up to cores / runs
/// row groups at once ([`super::row_group_reader`]), as many as their decoders fit (at
/// most a quarter of the limit, and the windows still fitting). The windows as
/// [`window_budgets`], with its error where even one decoder per run does not fit.
pub fn read_plan(plan: &MergePlan, memory_limit: usize) -> Result<ReadPlan> {
    let runs = plan.runs.len();
    let keep_open = runs <= open_file_budget();
    let one_each = decoder_bytes(plan, keep_open);
    let most_row_groups = plan.runs.iter().map(|r| r.row_groups.len()).max().unwrap_or(1);
    let mut decoders_per_run = if keep_open && runs <= MAX_READER_THREADS {
        (rayon::current_num_threads() / runs.max(1)).clamp(1, MAX_DECODERS_PER_RUN.min(most_row_groups).max(1))
    } else {
        1
    };
    loop {
        let decoders = one_each * decoders_per_run;
        if decoders_per_run > 1 && decoders > memory_limit / 4 {
            decoders_per_run -= 1;
            continue;
        }
        match window_budgets(plan, memory_limit, decoders) {
            Ok(window_bytes) => return Ok(ReadPlan { keep_open, decoders_per_run, decoder_bytes: decoders, window_bytes }),
            Err(e) if decoders_per_run == 1 => return Err(e),
            Err(_) => decoders_per_run -= 1,
        }
    }
}

/// `1.5 GiB`, rounded up at the last digit shown (a hint to pass back must not be short).
pub(crate) fn show_bytes_ceil(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 1u64;
    let mut u = 0;
    while n >= unit * 1024 && u + 1 < UNITS.len() {
        unit *= 1024;
        u += 1;
    }
    if u == 0 {
        return format!("{n} B");
    }
    let tenths = (n * 10).div_ceil(unit);
    format!("{}.{} {}", tenths / 10, tenths % 10, UNITS[u])
}

/// Runs up to which each run is decoded on a thread of its own.
pub const MAX_READER_THREADS: usize = 256;

/// File descriptors kept for everything but the runs' files (output, libraries, GPU).
const RESERVED_FILES: u64 = 64;

/// On Unix, raises the soft limit on open files toward the hard limit (capped at 2^20;
/// halved until the system accepts it: macOS refuses more than its per-process maximum)
/// and returns how many input files a merge may hold open at once. Elsewhere 512 (the C
/// runtime's default on Windows).
pub fn open_file_budget() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: getrlimit/setrlimit read and write the plain struct passed by pointer.
        unsafe {
            let mut limit: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                let mut want = limit.rlim_max.min(1 << 20);
                while limit.rlim_cur < want {
                    let raised = libc::rlimit { rlim_cur: want, rlim_max: limit.rlim_max };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                        limit.rlim_cur = want;
                        break;
                    }
                    want /= 2;
                }
                return (limit.rlim_cur as u64).saturating_sub(RESERVED_FILES).max(16) as usize;
            }
        }
        512
    }
    #[cfg(not(unix))]
    {
        512
    }
}

/// Where the merge loop takes the batches of a phase's runs from, in the phase's order.
enum Sources<'a> {
    /// A decoding thread per run, each a batch ahead.
    Threads(Vec<mpsc::Receiver<Result<Option<RunBatch>>>>),
    /// Read in the merge loop (too many runs for a thread each).
    Inline(Vec<RunReader<'a>>),
}

/// A batch of a run, and whether it is the run's last (so the merge can mark the run
/// exhausted at once: a run still open holds the frontier back).
type RunBatch = (RecordBatch, bool);

/// A run being read. It knows its position, so it can close its file between batches
/// (when files are scarce) and reopen it where it stopped, and it sizes its batches by the
/// measured bytes of the rows it decoded.
struct RunReader<'a> {
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
}

impl<'a> RunReader<'a> {
    fn new(run: &'a Run, plan: &'a MergePlan, window_bytes: usize, keep_open: bool) -> Self {
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
        RunReader { run, path: &f.path, metadata: &f.metadata, reader: None, position: 0, batch_rows, batch_bytes, keep_open }
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
        let file = std::fs::File::open(self.path).map_err(|e| Error::io(self.path, self.context(), e))?;
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

    fn next_batch(&mut self) -> Result<Option<RunBatch>> {
        loop {
            if self.position >= self.run.rows() {
                self.reader = None; // close the file as soon as the run is done
                return Ok(None);
            }
            if self.reader.as_ref().is_some_and(|(_, rows)| *rows != self.batch_rows) {
                self.reader = None; // reopen where it stopped, with the new batch size
            }
            if self.reader.is_none() {
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
                    if fit * 2 <= self.batch_rows || fit >= self.batch_rows * 2 {
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
                    return Ok(Some((b, last)));
                }
                // Values so large that a batch overflows its 32-bit offsets: fewer rows.
                Some(Err(e)) if e.to_string().contains("overflow") && self.batch_rows > 1 => {
                    self.reader = None;
                    self.batch_rows = (self.batch_rows / 16).max(1);
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

/// The footer metadata the output keeps: the inputs' key-value pairs, the first file's value
/// where they disagree (the Arrow schema is written anew).
fn kept_metadata(plan: &MergePlan) -> Vec<KeyValue> {
    let mut kept: Vec<KeyValue> = Vec::new();
    for f in &plan.files {
        for kv in f.metadata.metadata().file_metadata().key_value_metadata().into_iter().flatten() {
            if kv.key != "ARROW:schema" && !kept.iter().any(|k| k.key == kv.key) {
                kept.push(kv.clone());
            }
        }
    }
    kept
}

/// What the merge loop sends the writer thread.
enum ToWriter {
    Rows(Vec<RecordBatch>),
    /// A row group copied unchanged: the index of its block in the schedule.
    Block(usize),
    Finish,
}

/// The `(key, run)` of a row, and where it comes from (for messages): the last row of the
/// output so far, or the first row of a piece about to follow it.
struct Mark {
    row: OwnedRow,
    run: usize,
    /// The file and row group holding the row.
    file: usize,
    row_group: usize,
}

impl Mark {
    /// Whether `self` may follow `before` in the output: `(key, run)` not below.
    fn follows(&self, before: &Mark) -> bool {
        match self.row.row().cmp(&before.row.row()) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Equal => self.run >= before.run,
            std::cmp::Ordering::Less => false,
        }
    }
}

/// The error for a piece that starts below the output's last row (see
/// [`super::passthrough`]): within one run, the run is not sorted; across runs, the
/// statistics that placed the pieces do not match the rows.
fn junction_error(plan: &MergePlan, before: &Mark, after: &Mark) -> Error {
    let path = |m: &Mark| plan.files[m.file].path.clone();
    if before.run == after.run {
        Error::FileNotSorted {
            path: path(after),
            row_group: after.row_group,
            row: 0,
            detail: format!("the row group starts below the last key of row group {}", before.row_group),
        }
    } else {
        Error::File {
            path: path(after),
            detail: format!(
                "row group {} starts below a row of {} row group {} although their statistics put it after: the statistics do not match the rows (merge with passthrough never)",
                after.row_group,
                path(before).display(),
                before.row_group
            ),
        }
    }
}

/// The part of `run` in a phase: row groups `range` of it (`None` when empty).
fn sub_run(run: &Run, range: &std::ops::Range<usize>) -> Option<Run> {
    if range.is_empty() {
        return None;
    }
    let rows: usize = run.row_group_rows[range.clone()].iter().sum();
    Some(Run {
        file: run.file,
        row_groups: run.row_groups[range.clone()].to_vec(),
        row_group_rows: run.row_group_rows[range.clone()].to_vec(),
        declared: run.declared,
        decoded_bytes: (run.decoded_bytes as u128 * rows as u128 / run.rows().max(1) as u128) as u64,
        decoder_bytes: run.decoder_bytes,
    })
}

/// Merges the runs of `plan` into `output`. `progress` is called after every piece written
/// with the rows written so far. On any error the output is left as it was.
///
/// Row groups that need no merge are copied unchanged where `options.passthrough` allows
/// ([`super::passthrough`]): the merge then runs in phases between them.
pub fn merge_files(
    plan: &MergePlan,
    output: &Path,
    options: &MergeFilesOptions,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<MergeSummary> {
    let start = Instant::now();
    // The GPU's start-up (context, cached kernels) overlaps opening the inputs and the
    // writer where a round may go to the GPU; a small `Auto` merge never touches it.
    if options.engine.engine == Engine::Gpu || (options.engine.engine == Engine::Auto && plan.total_rows >= options.engine.gpu_min_rows) {
        crate::engine::warm_up_gpu(&options.engine, plan.total_rows);
    }
    let ReadPlan { keep_open, decoders_per_run, decoder_bytes: decoders, window_bytes: budgets } = read_plan(plan, options.memory_limit)?;
    // What killed runs left beside the output (super::leftovers).
    let keep: Vec<&Path> = plan.files.iter().map(|f| f.path.as_path()).collect();
    super::leftovers::remove_stale(&[&super::leftovers::dir_of(output)], &keep);
    let rest = options.memory_limit - decoders;
    let mut writer_settings = options.writer.clone();
    // R/4 for the writer.
    let group_cap = super::writer::row_group_bytes_within(rest / 4);
    writer_settings.row_group_bytes = writer_settings.row_group_bytes.min(group_cap);
    let row_group_rows = writer_settings.row_group_rows;
    let piece_bytes = (rest / 16).max(1 << 20);
    let mut writer = SortedParquetWriter::create(
        output,
        plan.schema.clone(),
        super::writer::common_parquet_schema(&plan.files, &plan.schema),
        &plan.keys,
        kept_metadata(plan),
        plan.total_rows,
        writer_settings,
    )?;
    let schedule = schedule(plan, options.passthrough, options.writer.compression, writer.parquet_schema(), row_group_rows);
    match &schedule.off {
        Some(why) => log::info!("no row group copied unchanged: {why}"),
        None => log::info!(
            "{} of {} rows in {} row groups copied unchanged, the rest merged in {} phases",
            schedule.rows(),
            plan.total_rows,
            schedule.blocks.len(),
            schedule.phases.iter().filter(|p| !p.is_empty()).count()
        ),
    }
    writer.reserve_row_groups(2 * schedule.blocks.len());
    let converter = key_converter(plan)?;

    let key_index: Vec<usize> = plan.keys.iter().map(|k| plan.schema.index_of(&k.column)).collect::<Result<_, _>>()?;
    let key_types: Vec<_> = key_index.iter().map(|&i| plan.schema.field(i).data_type().clone()).collect();
    let batch_size = 8192;
    let frontier_options = FrontierOptions { engine: options.engine, window_rows: MAX_WINDOW_ROWS, batch_size, check_sorted: true };
    // The runs' parts in each phase, with their runs' indices: only the runs a phase holds
    // (a copied row group between every two rows of a file makes as many phases as rows).
    let phase_runs: Vec<Vec<(usize, Run)>> = schedule
        .phases
        .iter()
        .map(|p| p.iter().filter_map(|(r, range)| sub_run(&plan.runs[*r], range).map(|part| (*r, part))).collect())
        .collect();

    // The writer thread: one piece in flight between it and the merge. It renames the
    // output into place only on `Finish`; if the merge fails, the channel closes without
    // it and the temporary file is removed.
    let (to_writer, from_merge) = mpsc::sync_channel::<ToWriter>(1);
    let (mut rounds_cpu, mut rounds_gpu) = (0, 0);
    // `--engine auto`: each round to the engine that measured faster (engine::auto).
    let mut choice = AutoChoice::new(&options.engine);
    let (mut read_time, mut merge_time) = (Duration::ZERO, Duration::ZERO);
    let expected_rows = plan.total_rows;
    let schedule = &schedule;
    // Two phases read at once may hold a run's file open twice.
    let prefetch = !keep_open || plan.runs.len() * 2 <= open_file_budget();
    let (phase_runs, budgets) = (&phase_runs, &budgets);
    let written: Result<(Written, Duration)> = std::thread::scope(|scope| {
        let writer_thread = scope.spawn(move || -> Result<Option<(Written, Duration)>> {
            super::name_this_thread("corank-writer");
            let mut writer = writer;
            let mut busy = Duration::ZERO;
            for message in from_merge {
                match message {
                    ToWriter::Rows(batches) => {
                        let t = Instant::now();
                        for b in batches {
                            writer.write(b)?;
                        }
                        busy += t.elapsed();
                        progress(writer.rows());
                    }
                    ToWriter::Block(k) => {
                        let t = Instant::now();
                        let b = &schedule.blocks[k];
                        let footer =
                            schedule.footers[b.file].as_ref().ok_or_else(|| Error::Internal("a block without its footer".into()))?;
                        writer.append_row_group(&plan.files[b.file].path, footer, b.row_group, b.codec_kept)?;
                        busy += t.elapsed();
                        progress(writer.rows());
                    }
                    ToWriter::Finish => {
                        // Fewer rows than the metadata counts would mean a reader lost some.
                        if writer.rows() != expected_rows {
                            return Err(Error::Internal(format!(
                                "{}: merged {} rows but the inputs' metadata counts {expected_rows}; nothing written",
                                output.display(),
                                writer.rows()
                            )));
                        }
                        let t = Instant::now();
                        let written = writer.finish()?;
                        return Ok(Some((written, busy + t.elapsed())));
                    }
                }
            }
            Ok(None)
        });
        // The blocks' key columns, decoded and checked ahead of the merge, a few in parallel.
        let (verified_tx, verified) = mpsc::sync_channel::<Result<Verified>>(64);
        if !schedule.blocks.is_empty() {
            let converter = &converter;
            scope.spawn(move || {
                super::name_this_thread("corank-check");
                for chunk in schedule.blocks.chunks(rayon::current_num_threads().max(1)) {
                    let results: Vec<Result<Verified>> = chunk.par_iter().map(|b| verify_block(plan, b, converter)).collect();
                    for r in results {
                        let failed = r.is_err();
                        if verified_tx.send(r).is_err() || failed {
                            return;
                        }
                    }
                }
            });
        } else {
            drop(verified_tx);
        }
        let merged = (|| -> Result<()> {
            let mut last: Option<Mark> = None;
            let has_rows = |k: usize| !phase_runs[k].is_empty();
            // The readers of the next phase with rows, started while this one merges.
            let mut next: Option<(usize, Sources)> = None;
            for (k, runs) in phase_runs.iter().enumerate() {
                if has_rows(k) {
                    let sources = match next.take() {
                        Some((j, sources)) if j == k => sources,
                        _ => start_readers(scope, plan, runs, budgets, keep_open, decoders_per_run, 0),
                    };
                    if prefetch {
                        if let Some(j) = (k + 1..phase_runs.len()).find(|&j| has_rows(j)) {
                            next = Some((
                                j,
                                start_readers(scope, plan, &phase_runs[j], budgets, keep_open, decoders_per_run, NEXT_PHASE_AHEAD),
                            ));
                        }
                    }
                    let mut phase = Phase {
                        plan,
                        runs,
                        budgets,
                        sources: Some(sources),
                        key_index: &key_index,
                        key_types: &key_types,
                        frontier_options: frontier_options.clone(),
                        piece_bytes,
                        converter: &converter,
                        to_writer: &to_writer,
                    };
                    let done = phase.run(&mut last, &mut read_time, &mut merge_time, &mut rounds_cpu, &mut rounds_gpu, &mut choice)?;
                    if !done {
                        return Ok(()); // the writer failed; its error is reported below
                    }
                }
                if let Some(b) = schedule.blocks.get(k) {
                    let t = Instant::now();
                    let v = verified.recv().unwrap_or_else(|_| Err(Error::Internal("the block checker stopped".into())))?;
                    read_time += t.elapsed();
                    let first = Mark { row: v.first, run: b.run, file: b.file, row_group: b.row_group };
                    if let Some(before) = &last {
                        if !first.follows(before) {
                            return Err(junction_error(plan, before, &first));
                        }
                    }
                    last = Some(Mark { row: v.last, ..first });
                    if to_writer.send(ToWriter::Block(k)).is_err() {
                        return Ok(());
                    }
                }
            }
            let _ = to_writer.send(ToWriter::Finish);
            Ok(())
        })();
        drop(to_writer);
        drop(verified); // the checker, if still running, sees its channel close and stops
        let written = writer_thread.join().map_err(|_| Error::Internal("the writer thread panicked".into()))?;
        merged?;
        written?.ok_or_else(|| Error::Internal("the writer stopped before the end".into()))
    });
    let (written, write_time) = written?;
    Ok(MergeSummary {
        rows: written.rows,
        input_files: plan.files.len(),
        runs: plan.runs.len(),
        input_bytes: plan.total_bytes,
        output_bytes: written.bytes,
        output_row_groups: written.row_groups,
        passthrough_rows: written.passthrough_rows,
        passthrough_row_groups: written.passthrough_row_groups,
        passthrough_codec_kept_row_groups: written.codec_kept_row_groups,
        rounds_cpu,
        rounds_gpu,
        window_bytes: budgets.iter().copied().max().unwrap_or(0),
        elapsed: start.elapsed(),
        read_time,
        merge_time,
        write_time,
        peak_memory: peak_memory(),
    })
}

/// One phase of a merge: the runs' parts between two copied row groups, merged through a
/// frontier merge of their own and sent to the writer in pieces.
struct Phase<'a> {
    plan: &'a MergePlan,
    /// The runs with rows in this phase, in run order: each run's index in the plan and its
    /// part in this phase. The phase's frontier merge has an input for each, in this order.
    runs: &'a [(usize, Run)],
    /// Every run's window budget, by its index in the plan.
    budgets: &'a [usize],
    /// Where the runs' batches come from ([`start_readers`]); taken by [`Phase::run`].
    sources: Option<Sources<'a>>,
    key_index: &'a [usize],
    key_types: &'a [DataType],
    frontier_options: FrontierOptions,
    piece_bytes: usize,
    converter: &'a RowConverter,
    to_writer: &'a mpsc::SyncSender<ToWriter>,
}

/// Starts reading the runs' parts of a phase: with few runs each decodes on its own thread
/// of `scope`, ahead of the merge (decoding overlaps merging and writing), holding at most
/// `ahead` + 1 batches it decoded, and a run of several row groups decodes
/// `decoders_per_run` of them at once ([`parallel_run_reader`]); with many runs, the merge
/// loop reads them, in parallel.
fn start_readers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    plan: &'env MergePlan,
    runs: &'env [(usize, Run)],
    budgets: &'env [usize],
    keep_open: bool,
    decoders_per_run: usize,
    ahead: usize,
) -> Sources<'env> {
    if runs.len() > MAX_READER_THREADS {
        let readers = runs.iter().map(|(i, run)| RunReader::new(run, plan, budgets[*i], keep_open)).collect();
        return Sources::Inline(readers);
    }
    let receivers = runs
        .iter()
        .map(|(i, run)| {
            let budget = budgets[*i];
            let name = format!("corank-run{i}");
            let (send, receive) = mpsc::sync_channel::<Result<Option<RunBatch>>>(ahead);
            let decoders = decoders_per_run.min(run.row_groups.len());
            if decoders > 1 {
                let mut groups = parallel_run_reader(plan, run, budget, decoders);
                let mut taken = 0;
                scope.spawn(move || {
                    super::name_this_thread(&name);
                    loop {
                        let next = groups.next_batch().map(|b| {
                            b.map(|b| {
                                taken += b.num_rows();
                                (b, taken >= run.rows())
                            })
                        });
                        let last = !matches!(next, Ok(Some((_, false))));
                        // A closed channel means the merge stopped (an error): stop too.
                        if send.send(next).is_err() || last {
                            break;
                        }
                    }
                });
            } else {
                let mut reader = RunReader::new(run, plan, budget, keep_open);
                scope.spawn(move || {
                    super::name_this_thread(&name);
                    loop {
                        let next = reader.next_batch();
                        let last = !matches!(next, Ok(Some((_, false))));
                        if send.send(next).is_err() || last {
                            break;
                        }
                    }
                });
            }
            receive
        })
        .collect();
    Sources::Threads(receivers)
}

/// A run's row groups decoded `decoders` at once, within the reading memory of a run read
/// one row group after another (the module doc: a quarter window decoded ahead, a quarter
/// window of overshoot). Batches are `window / (4 (decoders + 2))`: each decoder may hold
/// one while it waits for room, the row group being read one beyond the budget, and the
/// run's thread one it hands to the merge; the budget for batches decoded ahead is a
/// quarter window.
fn parallel_run_reader(plan: &MergePlan, run: &Run, window_bytes: usize, decoders: usize) -> OrderedRowGroups {
    let f = &plan.files[run.file];
    let sources = (run.row_groups.iter().zip(&run.row_group_rows))
        .map(|(&row_group, &rows)| RowGroupSource { path: f.path.clone(), metadata: f.metadata.clone(), row_group, rows })
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
    OrderedRowGroups::new(sources, decoders, window_bytes / 4, sizing, Some(plan.schema.clone()))
}

/// Batches a run of the next phase decodes ahead, besides the one it holds, while the
/// phase before it merges ([`merge_files`]): enough for a short part (a row group or two,
/// between row groups copied unchanged) to be decoded whole before its phase starts.
const NEXT_PHASE_AHEAD: usize = 2;

impl Phase<'_> {
    /// Runs the phase; `last` is the output's last row before it and after it. `false`
    /// when the writer stopped (its error is reported by its thread).
    fn run(
        &mut self,
        last: &mut Option<Mark>,
        read_time: &mut Duration,
        merge_time: &mut Duration,
        rounds_cpu: &mut usize,
        rounds_gpu: &mut usize,
        choice: &mut AutoChoice,
    ) -> Result<bool> {
        let plan = self.plan;
        // The phase's own inputs: its runs, in run order (the merge's tie order).
        let n = self.runs.len();
        let batch_size = self.frontier_options.batch_size;
        let mut frontier = FrontierMerge::new(plan.schema.clone(), self.key_types, plan.keys.clone(), n, self.frontier_options.clone())?;
        for (i, (r, _)) in self.runs.iter().enumerate() {
            frontier.set_window_bytes(i, self.budgets[*r], ROUND_BYTES_PER_ROW);
        }
        // Per input: whether its first row in this phase was checked against `last`, and the
        // key of its last row pushed.
        let mut started = vec![false; n];
        let mut last_keys: Vec<Option<Vec<ArrayRef>>> = vec![None; n];
        let runs = self.runs;
        let mut sources = self.sources.take().ok_or_else(|| Error::Internal("a phase ran twice".into()))?;
        let outcome = (|| -> Result<bool> {
            while !frontier.is_finished() {
                // 1. Fill every window that wants rows.
                let t = Instant::now();
                loop {
                    let wanted: Vec<usize> = (0..n).filter(|&i| frontier.wants(i)).collect();
                    if wanted.is_empty() {
                        break;
                    }
                    let batches: Vec<(usize, Result<Option<RunBatch>>)> = match &mut sources {
                        Sources::Threads(receivers) => wanted.iter().map(|&i| (i, receivers[i].recv().unwrap_or(Ok(None)))).collect(),
                        Sources::Inline(readers) => {
                            let mut slots: Vec<(usize, &mut RunReader)> =
                                readers.iter_mut().enumerate().filter(|(i, _)| wanted.binary_search(i).is_ok()).collect();
                            slots.par_iter_mut().map(|(i, r)| (*i, r.next_batch())).collect()
                        }
                    };
                    for (i, batch) in batches {
                        let (r, run) = (runs[i].0, &runs[i].1);
                        match batch? {
                            None => frontier.finish_input(i),
                            Some((b, is_last)) => {
                                let b = conform(b, &plan.schema).map_err(|e| Error::File {
                                    path: plan.files[run.file].path.clone(),
                                    detail: format!("reading a batch: {e}"),
                                })?;
                                let keys: Vec<ArrayRef> = self.key_index.iter().map(|&c| b.column(c).clone()).collect();
                                if b.num_rows() > 0 {
                                    if !started[i] {
                                        started[i] = true;
                                        if let Some(before) = last.as_ref() {
                                            let first = self.mark(&keys, 0, r, run.file, run.row_groups[0])?;
                                            if !first.follows(before) {
                                                return Err(junction_error(plan, before, &first));
                                            }
                                        }
                                    }
                                    let end = b.num_rows() - 1;
                                    last_keys[i] = Some(keys.iter().map(|k| k.slice(end, 1)).collect());
                                }
                                frontier.push(i, b, keys).map_err(|e| not_sorted_in_file(e, plan, run))?;
                                if is_last {
                                    frontier.finish_input(i);
                                }
                            }
                        }
                    }
                }
                let filled = t.elapsed();
                *read_time += filled;
                // 2. Merge what the frontier lets out; 3. gather it in pieces for the writer.
                let t = Instant::now();
                let round = frontier.take_round()?;
                let round = if choice.cpu_next() { round.on_cpu() } else { round };
                let round = round.merge()?;
                let merged = t.elapsed();
                choice.record(round.perm.engine, round.rows(), merged);
                match round.perm.engine {
                    Engine::Gpu => *rounds_gpu += 1,
                    _ => *rounds_cpu += 1,
                }
                let rows = round.rows();
                let round_bytes: usize = round.runs.iter().map(batch_bytes).sum();
                let piece_rows = (self.piece_bytes / (round_bytes / rows.max(1)).max(1)).max(batch_size) / batch_size * batch_size;
                let mut at = 0;
                // Time spent waiting for the writer to take a piece (its channel holds one).
                let mut waited = Duration::ZERO;
                while at < rows {
                    let end = (at + piece_rows).min(rows);
                    let piece = round.gather(at, end, batch_size)?;
                    at = end;
                    let sent = Instant::now();
                    if self.to_writer.send(ToWriter::Rows(piece)).is_err() {
                        return Ok(false);
                    }
                    waited += sent.elapsed();
                }
                let round_time = t.elapsed();
                *merge_time += round_time;
                log::debug!(
                    "corank round: {} rows in {} runs; windows filled in {:.1?}, merged on the {:?} engine in {:.1?}, \
                     gathered in {:.1?}, waited {:.1?} for the writer",
                    rows,
                    round.runs.len(),
                    filled,
                    round.perm.engine,
                    merged,
                    round_time.saturating_sub(merged + waited),
                    waited
                );
            }
            Ok(true)
        })();
        drop(sources); // reader threads still running see their channel close and stop
        let outcome = outcome?;
        // The phase's last row: the largest (key, run) of the runs' last rows.
        for (i, keys) in last_keys.iter().enumerate() {
            let Some(keys) = keys else { continue };
            let (r, run) = (runs[i].0, &runs[i].1);
            let mark = self.mark(keys, 0, r, run.file, *run.row_groups.last().expect("a run has row groups"))?;
            if last.as_ref().is_none_or(|l| mark.follows(l)) {
                *last = Some(mark);
            }
        }
        Ok(outcome)
    }

    fn mark(&self, keys: &[ArrayRef], row: usize, run: usize, file: usize, row_group: usize) -> Result<Mark> {
        let columns: Vec<ArrayRef> = keys.iter().map(|k| k.slice(row, 1)).collect();
        let rows = self.converter.convert_columns(&columns)?;
        Ok(Mark { row: rows.row(0).owned(), run, file, row_group })
    }
}

/// Names the file, row group and row of an order violation in `run` (the part of a run
/// that a phase reads).
fn not_sorted_in_file(e: Error, plan: &MergePlan, run: &Run) -> Error {
    match e {
        Error::NotSorted { row, detail, .. } => {
            let (row_group, row) = run.locate(row);
            let float_key = plan.keys.iter().any(|k| {
                plan.schema
                    .field_with_name(&k.column)
                    .is_ok_and(|f| matches!(f.data_type(), DataType::Float16 | DataType::Float32 | DataType::Float64))
            });
            let detail = if run.declared && float_key {
                format!(
                    "{detail} (its sorting_columns declare this order, but corank orders floats by IEEE total order, -NaN < -inf < -0 < +0 < +inf < NaN, as arrow and DataFusion do; pyarrow and pandas put NaN last and -0 equal to +0)"
                )
            } else {
                detail
            };
            Error::FileNotSorted { path: plan.files[run.file].path.clone(), row_group, row, detail }
        }
        other => other,
    }
}

/// What [`merge_files`] would do with a plan and options, worked out before reading a row
/// ([`dry_run`]): `corank merge --dry-run` prints it.
#[derive(Debug, Clone)]
pub struct DryRun {
    /// The limit planned for ([`MergeFilesOptions::memory_limit`]).
    pub memory_limit: usize,
    /// Whether runs keep their files open between batches (else each batch reopens it).
    pub keep_files_open: bool,
    /// Row groups of a run decoded at once ([`ReadPlan::decoders_per_run`]).
    pub decoders_per_run: usize,
    /// Estimated memory of the runs' Parquet decoders ([`decoder_bytes`], per decoder).
    pub decoder_bytes: usize,
    /// Each run's window budget in bytes ([`window_budgets`]), in the order of the plan's runs.
    pub window_bytes: Vec<usize>,
    /// Most bytes of Arrow data per output row group: the writer's setting, capped by the limit.
    pub row_group_bytes: usize,
    /// Bytes of each piece of a round handed to the writer.
    pub piece_bytes: usize,
    // The row groups a merge would copy without decoding (issue 13, item 1, "passthrough")
    // belong here, as they are planned from the footers too.
}

/// The plan of merging `plan` with `options`, as [`merge_files`] works it out, with the same
/// error where the memory limit is too small. Reads no rows, writes nothing (it may raise
/// the soft limit on open files, as [`merge_files`] does: [`open_file_budget`]).
pub fn dry_run(plan: &MergePlan, options: &MergeFilesOptions) -> Result<DryRun> {
    let read = read_plan(plan, options.memory_limit)?;
    // As merge_files: read_plan refused a limit below twice the decoders.
    let rest = options.memory_limit.saturating_sub(read.decoder_bytes);
    let group_cap = super::writer::row_group_bytes_within(rest / 4);
    Ok(DryRun {
        memory_limit: options.memory_limit,
        keep_files_open: read.keep_open,
        decoders_per_run: read.decoders_per_run,
        decoder_bytes: read.decoder_bytes,
        window_bytes: read.window_bytes,
        row_group_bytes: options.writer.row_group_bytes.min(group_cap),
        piece_bytes: (rest / 16).max(1 << 20),
    })
}

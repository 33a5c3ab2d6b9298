//! The memory budget: the limit a merge or a sort holds itself to when not told
//! ([`default_memory_limit`]), and how a merge, a sort and `--dry-run` split it, in one
//! place, so the plan printed is the plan run. Sizes are the real size of decoded batches,
//! not Parquet's uncompressed sizes (dictionary-encoded strings decode to many times those),
//! estimated from the footers.
//!
//! **A merge** ([`merge_budget`]; `memory_limit` = B):
//! - **decoders**: D, what the runs' Parquet decoders hold (pages, dictionaries,
//!   decompression contexts; estimated from the footers, [`decoder_bytes`], times the row
//!   groups a run decodes at once, which [`read_plan`] keeps to B/4); of the rest, R = B − D:
//! - **windows**: R/4 shared by the runs ([`window_budgets`]: a run that holds less than
//!   its share leaves the rest to the others), each run's window counted in buffered Arrow
//!   bytes plus [`ROUND_BYTES_PER_ROW`] a row for the round's key words and permutation;
//!   every run also holds one batch decoded ahead and may overshoot by one batch, batches
//!   being a quarter of a window: 3R/8 in all (a run decoding several row groups at once
//!   keeps to the same quarter window ahead and quarter window of overshoot in smaller
//!   batches);
//! - **the round**: gathered in pieces of R/16 ([`MergeBudget::piece_bytes`]), one piece
//!   handed to the writer while the next is gathered (R/8);
//! - **the writer**: R/4 for the row groups being encoded (their Arrow data and their
//!   encoded pages: [`MergeBudget::row_group_bytes`]), and the row groups copied unchanged
//!   that wait in line behind them (their compressed bytes, two row groups' worth);
//! - **the next phase** (with passthrough, the merge runs in phases between copied row
//!   groups): its runs start decoding while the phase before merges, each holding up to
//!   `NEXT_PHASE_AHEAD` + 1 batches (a quarter window each); a run in both phases holds
//!   its window and those batches at once (and its decoders twice), so a pair of phases
//!   sharing every run can take up to 3R/16 more than the windows above, out of the slack;
//! - **read-ahead** (inputs in object stores): R/16 for the row groups fetched ahead of
//!   their readers and not read yet (their compressed bytes, in flight or arrived; the
//!   bound of `store::object`'s read-ahead, set by the merge while it runs), and the row
//!   groups checked for a copy unchanged and kept for it. A run's row groups being read
//!   are its decoders': for an object, [`decoder_bytes`] counts two row groups'
//!   compressed bytes (the one read, fetched whole, and the one before, kept);
//! - the rest (3R/16) is slack for the allocator and everything not counted.
//!
//! A limit whose R cannot hold every run's smallest window, or smaller than 2D, is refused
//! up front with the limit that would do. Peak resident memory then stays within the limit
//! plus 20%, plus a fixed floor of 64 MiB (the program and its threads; docs/performance.md
//! tracks it). Open files stay bounded: with more runs than
//! [`open_file_budget`] a run opens its file for each batch and
//! closes it after (its decoders then live only while it reads).
//!
//! **A sort in runs** ([`sort_budget`]; B): the Parquet decoders of one row group D (the
//! largest's); of the rest R = B − D, 3R/8 for the chunk (its Arrow data plus
//! [`SORT_BYTES_PER_ROW`] a row for the key words and the permutation), R/8 for the row
//! groups decoding ahead of it (half for their batches, half for their decoders beyond the
//! first: fewer threads where the decoders would not fit), R/16 for a piece of the sorted
//! chunk gathered for the writer, R/4 for the row groups being encoded, R/16 for the
//! inputs' row groups fetched ahead from object stores (`SortPlan::piece_bytes`, the
//! bound the sort sets while it runs); the rest is slack. D counts an object's row groups
//! as a merge's decoders do.
//! The merge of the spilled runs keeps to the merge's budget above. (The sort one column at
//! a time plans its own memory: `sort_by_columns::plan_columns`.)

use super::inputs::{decoder_bytes as row_group_decoder_bytes, MergePlan, Run, DECODER_BYTES_PER_COLUMN};
use super::os::{available_memory, open_file_budget};
use super::writer::row_group_bytes_within;
use crate::error::{Error, Result, Setting};
use crate::frontier::DEFAULT_WINDOW_ROWS;
use crate::show_bytes::show_bytes;

/// The share of the memory available to the process ([`available_memory`]) that a merge
/// or a sort takes when no limit is given: a half. The peak stays within the limit and 20%
/// (docs/memory.md), so 60% of what the machine or the container has at most, which
/// leaves the rest to the page cache, other processes and the CUDA context. DuckDB takes
/// 80% by default; Polars sets no limit.
pub const DEFAULT_MEMORY_SHARE: f64 = 0.5;

/// The limit where the memory available cannot be read (not Linux or a Unix).
const FALLBACK_MEMORY_LIMIT: usize = 2 << 30;

/// The memory limit a merge or a sort takes when none is given, in bytes: half the memory
/// available to the process, which is the physical memory or the limit of its cgroup (a
/// container, a systemd unit, a batch job) where that is lower; 2 GiB where neither can be
/// read. The default of [`MergeFilesOptions::memory_limit`](crate::parquet::MergeFilesOptions::memory_limit),
/// [`SortFilesOptions::memory_limit`](crate::parquet::SortFilesOptions::memory_limit) and
/// the CLI's `--memory-limit`.
///
/// ```
/// let limit = corank::parquet::default_memory_limit();
/// match corank::parquet::available_memory() {
///     Some(m) => assert_eq!(limit as u64, m.bytes / 2),
///     None => assert_eq!(limit, 2 << 30),
/// }
/// ```
pub fn default_memory_limit() -> usize {
    match available_memory() {
        Some(m) => (m.bytes as f64 * DEFAULT_MEMORY_SHARE) as usize,
        None => FALLBACK_MEMORY_LIMIT,
    }
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

/// Most row groups of one run decoded at once.
pub const MAX_DECODERS_PER_RUN: usize = 16;

/// Runs up to which each run is decoded on a thread of its own.
pub const MAX_READER_THREADS: usize = 256;

/// Bytes a chunk's row costs the sort on top of its own: key words (up to 32 bytes), the
/// permutation and the engine's scratch.
pub const SORT_BYTES_PER_ROW: usize = 64;
/// Fewest rows a chunk must hold; a smaller memory limit is refused.
pub const MIN_CHUNK_ROWS: usize = 1024;
/// Most row groups of the inputs decoded at once.
pub const MAX_READ_THREADS: usize = 16;
/// Batches each of the row groups decoding at once would hold if the ahead budget were
/// split evenly (the batch size follows from it).
const READ_BATCHES_PER_THREAD: usize = 6;

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
        return Err(Error::InvalidSetting {
            setting: Setting::MemoryLimit,
            detail: format!(
                "{} is too small for {n} sorted runs of about {} bytes a row and {} of Parquet decoders; it needs at least {}",
                show_bytes(memory_limit as u64),
                plan.row_bytes,
                show_bytes(decoders as u64),
                show_bytes_ceil(at_least as u64)
            ),
        });
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

/// The merge's split of the memory limit (the module doc), worked out from the footers;
/// [`merge_files`](super::merge_files()) and its dry run both take it from here.
#[derive(Debug, Clone)]
pub struct MergeBudget {
    /// How the runs are read: decoders, windows, files kept open.
    pub read: ReadPlan,
    /// Most bytes of Arrow data per output row group: the writer's setting, capped by R/4.
    pub row_group_bytes: usize,
    /// Bytes of each piece of a round handed to the writer: R/16, at least 1 MiB.
    pub piece_bytes: usize,
}

/// The merge budget of `plan` within `memory_limit` for a writer set to `row_group_bytes`;
/// the error of [`read_plan`] where the limit is too small.
pub fn merge_budget(plan: &MergePlan, memory_limit: usize, row_group_bytes: usize) -> Result<MergeBudget> {
    let read = read_plan(plan, memory_limit)?;
    // read_plan refused a limit below twice the decoders.
    let rest = memory_limit.saturating_sub(read.decoder_bytes);
    Ok(MergeBudget { row_group_bytes: row_group_bytes.min(row_group_bytes_within(rest / 4)), piece_bytes: (rest / 16).max(1 << 20), read })
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

/// The sort's split of the memory limit (the module doc), worked out from the footers.
#[derive(Debug, Clone)]
pub struct SortBudget {
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
}

/// The sort budget of `inputs` within `memory_limit` for a writer set to `row_group_bytes`.
/// A limit that cannot hold [`MIN_CHUNK_ROWS`] rows (or the decoders of a merge of two
/// spilled runs) is refused with the limit that would do, unless `columns_fit` (the sort
/// one column at a time runs instead, and the rest of this budget goes unused).
pub fn sort_budget(inputs: &MergePlan, memory_limit: usize, row_group_bytes: usize, columns_fit: bool) -> Result<SortBudget> {
    let decoders = inputs
        .files
        .iter()
        .flat_map(|f| (0..f.metadata.metadata().num_row_groups()).map(move |g| row_group_decoder_bytes(f, g)))
        .max()
        .unwrap_or(0) as usize;
    let row_bytes = inputs.row_bytes + SORT_BYTES_PER_ROW;
    let rest = memory_limit.saturating_sub(decoders);
    // R/2 for the chunk and the row groups decoded ahead of it: 3R/8 and R/8.
    let chunk_bytes = rest * 3 / 8;
    let ahead_bytes = rest / 8;
    let needed = MIN_CHUNK_ROWS * row_bytes;
    let row_group_bytes = row_group_bytes.min(row_group_bytes_within(rest / 4));
    // The merge of two spilled runs needs their decoders within half the limit (estimated
    // as the merge does: per column half its chunk of a row group, at most 512 KiB, and
    // the decompression context).
    let columns = inputs.files.first().map_or(1, |f| f.metadata.parquet_schema().num_columns().max(1));
    let run_decoders = columns * ((row_group_bytes / columns).min(1 << 20) / 2 + DECODER_BYTES_PER_COLUMN as usize);
    let spills = inputs.total_rows * row_bytes > chunk_bytes;
    let runs_fit = !(chunk_bytes < needed || decoders > memory_limit / 2 || (spills && 4 * run_decoders > memory_limit));
    if !runs_fit && !columns_fit {
        let at_least = (decoders + (8 * needed).div_ceil(3)).max(2 * decoders).max(if spills { 4 * run_decoders } else { 0 });
        return Err(Error::InvalidSetting {
            setting: Setting::MemoryLimit,
            detail: format!(
                "{} is too small to sort rows of about {} bytes with {} of Parquet decoders; it needs at least {}",
                show_bytes(memory_limit as u64),
                inputs.row_bytes,
                show_bytes(decoders as u64),
                show_bytes(at_least.next_multiple_of(1 << 20) as u64)
            ),
        });
    }
    // Row groups decode on up to one thread per core: half of the ahead budget for their
    // batches, half for their decoders beyond the one `rest` already leaves out.
    let mut read_threads = rayon::current_num_threads().clamp(1, MAX_READ_THREADS);
    while read_threads > 1 && (read_threads - 1) * decoders > ahead_bytes / 2 {
        read_threads -= 1;
    }
    // The batches ahead share half the ahead budget; each decoder may hold one more batch
    // while it waits for room (a sixth of it in all).
    let batch_bytes = ahead_bytes / 2 / (read_threads * READ_BATCHES_PER_THREAD);
    let read_rows = (batch_bytes / row_bytes).clamp(1, 65536);
    let total = inputs.total_rows * row_bytes;
    let estimated_runs = total.div_ceil(chunk_bytes).max(1);

    Ok(SortBudget {
        decoder_bytes: decoders,
        chunk_bytes,
        read_rows,
        read_threads,
        ahead_bytes: ahead_bytes / 2 - ahead_bytes / 2 / READ_BATCHES_PER_THREAD,
        estimated_runs,
        row_group_bytes,
        piece_bytes: (rest / 16).max(1 << 20),
    })
}

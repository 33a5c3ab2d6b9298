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
//! Memory: the limit is split as [`super::memory`]'s module doc says ([`merge_budget`]: decoders,
//! windows, the round's pieces, the writer's row groups); [`dry_run`] reports the same
//! budget without reading a row. A run closes its file as soon as its last row is read.

use super::inputs::{conform, MergePlan, Run};
use super::memory::{merge_budget, MergeBudget};
use super::passthrough::{key_converter, schedule, verify_block, Passthrough, Verified};
use super::read::row_groups::batch_bytes;
use super::read::run::{parallel_run_reader, RunBatch, RunReader};
use super::writer::{SortedParquetWriter, WriterSettings, Written};
use crate::engine::auto::AutoChoice;
use crate::error::{Error, Result};
use crate::frontier::{FrontierMerge, FrontierOptions};
use crate::options::{Engine, EngineOptions};
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::DataType;
use arrow::row::{OwnedRow, RowConverter};
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

pub use super::memory::{
    decoder_bytes, read_plan, window_budgets, ReadPlan, FIRST_BATCH_ROWS, MAX_BATCH_BYTES, MAX_DECODERS_PER_RUN, MAX_READER_THREADS,
    MAX_WINDOW_ROWS, MIN_WINDOW_ROWS, ROUND_BYTES_PER_ROW,
};
pub use super::os::{open_file_budget, peak_memory};

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

/// Where the merge loop takes the batches of a phase's runs from, in the phase's order.
enum Sources<'a> {
    /// A decoding thread per run, each a batch ahead.
    Threads(Vec<mpsc::Receiver<Result<Option<RunBatch>>>>),
    /// Read in the merge loop (too many runs for a thread each).
    Inline(Vec<RunReader<'a>>),
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
    let MergeBudget { read, row_group_bytes, piece_bytes, .. } = merge_budget(plan, options.memory_limit, options.writer.row_group_bytes)?;
    let ReadPlan { keep_open, decoders_per_run, window_bytes: budgets, .. } = read;
    // What killed runs left beside the output (super::leftovers).
    let keep: Vec<&Path> = plan.files.iter().map(|f| f.path.as_path()).collect();
    super::leftovers::remove_stale(&[&super::leftovers::dir_of(output)], &keep);
    let mut writer_settings = options.writer.clone();
    writer_settings.row_group_bytes = row_group_bytes;
    let row_group_rows = writer_settings.row_group_rows;
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
    let MergeBudget { read, row_group_bytes, piece_bytes, .. } = merge_budget(plan, options.memory_limit, options.writer.row_group_bytes)?;
    Ok(DryRun {
        memory_limit: options.memory_limit,
        keep_files_open: read.keep_open,
        decoders_per_run: read.decoders_per_run,
        decoder_bytes: read.decoder_bytes,
        window_bytes: read.window_bytes,
        row_group_bytes,
        piece_bytes,
    })
}

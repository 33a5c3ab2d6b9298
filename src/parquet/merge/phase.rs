//! One phase of a merge: the runs' parts between two row groups copied unchanged, read
//! ([`start_readers`]), merged through a frontier merge of their own round by round, and
//! sent to the writer thread in pieces. Where pieces meet (a phase and a copied row group,
//! or two phases), the order is checked again ([`Mark`]).

use super::writer_thread::ToWriter;
use crate::cancel::{check, is_set, Cancel};
use crate::engine::auto::AutoChoice;
use crate::error::{Error, Result};
use crate::frontier::{FrontierMerge, FrontierOptions};
use crate::options::Engine;
use crate::parquet::inputs::{conform, MergePlan, Run};
use crate::parquet::memory::{MAX_READER_THREADS, ROUND_BYTES_PER_ROW};
use crate::parquet::read::row_groups::batch_bytes;
use crate::parquet::read::run::{parallel_run_reader, RunBatch, RunReader};
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::DataType;
use arrow::row::{OwnedRow, RowConverter};
use rayon::prelude::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where the merge loop takes the batches of a phase's runs from, in the phase's order.
pub(super) enum Sources<'a> {
    /// A decoding thread per run, each a batch ahead.
    Threads(Vec<mpsc::Receiver<Result<Option<RunBatch>>>>),
    /// Read in the merge loop (too many runs for a thread each).
    Inline(Vec<RunReader<'a>>),
}

/// The `(key, run)` of a row, and where it comes from (for messages): the last row of the
/// output so far, or the first row of a piece about to follow it.
pub(super) struct Mark {
    pub(super) row: OwnedRow,
    pub(super) run: usize,
    /// The file and row group holding the row.
    pub(super) file: usize,
    pub(super) row_group: usize,
}

impl Mark {
    /// Whether `self` may follow `before` in the output: `(key, run)` not below.
    pub(super) fn follows(&self, before: &Mark) -> bool {
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
pub(super) fn junction_error(plan: &MergePlan, before: &Mark, after: &Mark) -> Error {
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
pub(super) fn sub_run(run: &Run, range: &std::ops::Range<usize>) -> Option<Run> {
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

/// One phase of a merge: the runs' parts between two copied row groups, merged through a
/// frontier merge of their own and sent to the writer in pieces.
pub(super) struct Phase<'a> {
    pub(super) plan: &'a MergePlan,
    /// The runs with rows in this phase, in run order: each run's index in the plan and its
    /// part in this phase. The phase's frontier merge has an input for each, in this order.
    pub(super) runs: &'a [(usize, Run)],
    /// Every run's window budget, by its index in the plan.
    pub(super) budgets: &'a [usize],
    /// Where the runs' batches come from ([`start_readers`]); taken by [`Phase::run`].
    pub(super) sources: Option<Sources<'a>>,
    pub(super) key_index: &'a [usize],
    pub(super) key_types: &'a [DataType],
    pub(super) frontier_options: FrontierOptions,
    pub(super) piece_bytes: usize,
    pub(super) converter: &'a RowConverter,
    pub(super) to_writer: &'a mpsc::SyncSender<ToWriter>,
    /// Checked per batch, round and piece.
    pub(super) cancel: Option<&'a Cancel>,
}

/// Starts reading the runs' parts of a phase: with few runs each decodes on its own thread
/// of `scope`, ahead of the merge (decoding overlaps merging and writing), holding at most
/// `ahead` + 1 batches it decoded, and a run of several row groups decodes
/// `decoders_per_run` of them at once ([`parallel_run_reader`]); with many runs, the merge
/// loop reads them, in parallel. A reader thread stops before its next batch once `cancel`
/// is set.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_readers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    plan: &'env MergePlan,
    runs: &'env [(usize, Run)],
    budgets: &'env [usize],
    keep_open: bool,
    decoders_per_run: usize,
    ahead: usize,
    cancel: Option<&'env Cancel>,
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
                let mut groups = parallel_run_reader(plan, run, budget, decoders, cancel);
                let mut taken = 0;
                scope.spawn(move || {
                    crate::parquet::name_this_thread(&name);
                    loop {
                        if is_set(cancel) {
                            let _ = send.send(Err(Error::Cancelled));
                            break;
                        }
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
                    crate::parquet::name_this_thread(&name);
                    loop {
                        if is_set(cancel) {
                            let _ = send.send(Err(Error::Cancelled));
                            break;
                        }
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

/// Most batches of a piece gathered at once when the merge may be cancelled (tens of
/// milliseconds of gathering).
const CANCEL_PIECE_BATCHES: usize = 32;

/// Batches a run of the next phase decodes ahead, besides the one it holds, while the
/// phase before it merges ([`merge_files`](super::merge_files())): enough for a short part (a row group or two,
/// between row groups copied unchanged) to be decoded whole before its phase starts.
pub(super) const NEXT_PHASE_AHEAD: usize = 2;

/// What the phases of one merge add up: time reading and merging, rounds per engine, and
/// `--engine auto`'s choice of engine for the next round (measured on the rounds before).
pub(super) struct Tally {
    pub(super) read_time: Duration,
    pub(super) merge_time: Duration,
    pub(super) rounds_cpu: usize,
    pub(super) rounds_gpu: usize,
    pub(super) choice: AutoChoice,
}

impl Tally {
    pub(super) fn new(engine: &crate::options::EngineOptions) -> Self {
        Tally { read_time: Duration::ZERO, merge_time: Duration::ZERO, rounds_cpu: 0, rounds_gpu: 0, choice: AutoChoice::new(engine) }
    }
}

/// Per input of a phase: whether its first row was checked against the output's last row,
/// and the key of its last row pushed.
struct Progress {
    started: Vec<bool>,
    last_keys: Vec<Option<Vec<ArrayRef>>>,
}

impl Phase<'_> {
    /// Runs the phase; `last` is the output's last row before it and after it. `false`
    /// when the writer stopped (its error is reported by its thread).
    pub(super) fn run(&mut self, last: &mut Option<Mark>, tally: &mut Tally) -> Result<bool> {
        let plan = self.plan;
        // The phase's own inputs: its runs, in run order (the merge's tie order).
        let n = self.runs.len();
        let mut frontier = FrontierMerge::new(plan.schema.clone(), self.key_types, plan.keys.clone(), n, self.frontier_options.clone())?;
        for (i, (r, _)) in self.runs.iter().enumerate() {
            frontier.set_window_bytes(i, self.budgets[*r], ROUND_BYTES_PER_ROW);
        }
        let mut progress = Progress { started: vec![false; n], last_keys: vec![None; n] };
        let mut sources = self.sources.take().ok_or_else(|| Error::Internal("a phase ran twice".into()))?;
        let outcome = (|| -> Result<bool> {
            while !frontier.is_finished() {
                // 1. Fill every window that wants rows.
                let t = Instant::now();
                self.fill(&mut frontier, &mut sources, &mut progress, last)?;
                let filled = t.elapsed();
                tally.read_time += filled;
                // 2. Merge what the frontier lets out; 3. gather it in pieces for the writer.
                if !self.round(&mut frontier, tally, filled)? {
                    return Ok(false);
                }
            }
            Ok(true)
        })();
        drop(sources); // reader threads still running see their channel close and stop
        let outcome = outcome?;
        self.close(last, &progress.last_keys)?;
        Ok(outcome)
    }

    /// Fills every window of `frontier` that wants rows from `sources`, checking each
    /// input's first row in the phase against `last`.
    fn fill(&self, frontier: &mut FrontierMerge, sources: &mut Sources, progress: &mut Progress, last: &Option<Mark>) -> Result<()> {
        loop {
            check(self.cancel)?;
            let wanted: Vec<usize> = (0..self.runs.len()).filter(|&i| frontier.wants(i)).collect();
            if wanted.is_empty() {
                return Ok(());
            }
            for (i, batch) in next_batches(sources, &wanted, self.cancel)? {
                match batch? {
                    None => frontier.finish_input(i),
                    Some((b, is_last)) => {
                        self.push(frontier, i, b, progress, last)?;
                        if is_last {
                            frontier.finish_input(i);
                        }
                    }
                }
            }
        }
    }

    /// Pushes batch `b` of input `i` into `frontier`: conformed to the plan's schema, its
    /// keys taken, its first row in the phase checked against `last`.
    fn push(&self, frontier: &mut FrontierMerge, i: usize, b: RecordBatch, progress: &mut Progress, last: &Option<Mark>) -> Result<()> {
        let plan = self.plan;
        let (r, run) = (self.runs[i].0, &self.runs[i].1);
        let b = conform(b, &plan.schema)
            .map_err(|e| Error::File { path: plan.files[run.file].path.clone(), detail: format!("reading a batch: {e}") })?;
        let keys: Vec<ArrayRef> = self.key_index.iter().map(|&c| b.column(c).clone()).collect();
        if b.num_rows() > 0 {
            if !progress.started[i] {
                progress.started[i] = true;
                if let Some(before) = last.as_ref() {
                    let first = self.mark(&keys, 0, r, run.file, run.row_groups[0])?;
                    if !first.follows(before) {
                        return Err(junction_error(plan, before, &first));
                    }
                }
            }
            let end = b.num_rows() - 1;
            progress.last_keys[i] = Some(keys.iter().map(|k| k.slice(end, 1)).collect());
        }
        frontier.push(i, b, keys).map_err(|e| not_sorted_in_file(e, plan, run))
    }

    /// Merges one round and sends it to the writer in pieces; `false` when the writer
    /// stopped.
    fn round(&self, frontier: &mut FrontierMerge, tally: &mut Tally, filled: Duration) -> Result<bool> {
        let batch_size = self.frontier_options.batch_size;
        let t = Instant::now();
        check(self.cancel)?;
        let round = frontier.take_round()?;
        let round = if tally.choice.cpu_next() { round.on_cpu() } else { round };
        let round = round.merge_until(self.cancel)?;
        let merged = t.elapsed();
        tally.choice.record(round.perm.engine, round.rows(), merged);
        match round.perm.engine {
            Engine::Gpu => tally.rounds_gpu += 1,
            _ => tally.rounds_cpu += 1,
        }
        let rows = round.rows();
        let round_bytes: usize = round.runs.iter().map(batch_bytes).sum();
        let mut piece_rows = (self.piece_bytes / (round_bytes / rows.max(1)).max(1)).max(batch_size) / batch_size * batch_size;
        if self.cancel.is_some() {
            // Shorter pieces let a cancel in sooner, cut at whole batches as before: the
            // same batches reach the writer.
            piece_rows = piece_rows.min(CANCEL_PIECE_BATCHES * batch_size);
        }
        let mut at = 0;
        // Time spent waiting for the writer to take a piece (its channel holds one).
        let mut waited = Duration::ZERO;
        while at < rows {
            check(self.cancel)?;
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
        tally.merge_time += round_time;
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
        Ok(true)
    }

    /// Moves `last` to the phase's last row: the largest (key, run) of the runs' last rows.
    fn close(&self, last: &mut Option<Mark>, last_keys: &[Option<Vec<ArrayRef>>]) -> Result<()> {
        for (i, keys) in last_keys.iter().enumerate() {
            let Some(keys) = keys else { continue };
            let (r, run) = (self.runs[i].0, &self.runs[i].1);
            let mark = self.mark(keys, 0, r, run.file, *run.row_groups.last().expect("a run has row groups"))?;
            if last.as_ref().is_none_or(|l| mark.follows(l)) {
                *last = Some(mark);
            }
        }
        Ok(())
    }

    fn mark(&self, keys: &[ArrayRef], row: usize, run: usize, file: usize, row_group: usize) -> Result<Mark> {
        let columns: Vec<ArrayRef> = keys.iter().map(|k| k.slice(row, 1)).collect();
        let rows = self.converter.convert_columns(&columns)?;
        Ok(Mark { row: rows.row(0).owned(), run, file, row_group })
    }
}

/// The next batch of each input in `wanted` (ascending): from its thread, or read here,
/// the inputs in parallel. [`Error::Cancelled`] once `cancel` is set, also while waiting
/// for a thread.
fn next_batches(sources: &mut Sources, wanted: &[usize], cancel: Option<&Cancel>) -> Result<Vec<(usize, Result<Option<RunBatch>>)>> {
    match sources {
        Sources::Threads(receivers) => wanted
            .iter()
            .map(|&i| {
                // A thread that stopped without a word finished its run (or was cancelled).
                let next = crate::cancel::recv(&receivers[i], cancel)?.unwrap_or(Ok(None));
                check(cancel)?;
                Ok((i, next))
            })
            .collect(),
        Sources::Inline(readers) => {
            let mut slots: Vec<(usize, &mut RunReader)> =
                readers.iter_mut().enumerate().filter(|(i, _)| wanted.binary_search(i).is_ok()).collect();
            let batches: Vec<_> = slots.par_iter_mut().map(|(i, r)| (*i, check(cancel).and_then(|()| r.next_batch()))).collect();
            check(cancel)?;
            Ok(batches)
        }
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

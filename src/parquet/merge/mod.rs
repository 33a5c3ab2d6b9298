//! Merging sorted Parquet files into one sorted Parquet file, in bounded memory.
//!
//! The runs of a [`MergePlan`] stream through a [`FrontierMerge`](crate::frontier::FrontierMerge): each run buffers a
//! window of rows, a round merges everything the frontier rule lets out, and the merged
//! rows go, gathered in pieces, to a writer thread that encodes row groups (columns in
//! parallel). Each run decodes on its own thread a batch ahead of the merge (up to
//! [`MAX_READER_THREADS`] runs; beyond, the merge loop reads the runs in parallel itself);
//! with fewer runs than cores, a run decodes several of its row groups at once
//! ([`read_plan`], [`super::read`]), so two large files decode on every core,
//! not on two.
//! With `Engine::Auto`, each round merges on the engine that measured faster on the rounds
//! before ([`crate::engine::auto`]).
//!
//! Memory: the limit is split as [`super::memory`]'s module doc says ([`merge_budget`]: decoders,
//! windows, the round's pieces, the writer's row groups); [`dry_run`] reports the same
//! budget without reading a row. A run closes its file as soon as its last row is read.

pub mod passthrough;
mod phase;
mod writer_thread;

#[cfg(test)]
mod tests;

use super::inputs::{InputFile, MergePlan, Run};
use super::memory::{merge_budget, MergeBudget};
use super::writer::split::{Finished, OutputWriter};
use super::writer::{OutputFile, WriterSettings};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::frontier::FrontierOptions;
use crate::options::EngineOptions;
use arrow::datatypes::DataType;
use arrow::row::RowConverter;
use parquet::file::metadata::KeyValue;
use passthrough::{key_converter, schedule, Passthrough, Schedule, Verified};
use phase::{junction_error, start_readers, sub_run, Mark, Phase, Sources, Tally, NEXT_PHASE_AHEAD};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use writer_thread::{check_blocks, write_all, ToWriter};

/// Settings of a file merge. The [`corank::parquet`](crate::parquet) example passes the
/// defaults to [`merge_files`].
#[derive(Debug, Clone)]
pub struct MergeFilesOptions {
    /// Which engine, kernel and device merge each round.
    pub engine: EngineOptions,
    /// Approximate cap on the memory the merge holds, in bytes; by default
    /// [`default_memory_limit`](crate::parquet::default_memory_limit) (half the memory available).
    pub memory_limit: usize,
    /// How the output is written (codec, row-group size, overwrite); its `row_group_bytes` is
    /// capped by what the memory limit leaves the writer.
    pub writer: WriterSettings,
    /// Whether row groups that need no merge are copied unchanged ([`Passthrough`]).
    pub passthrough: Passthrough,
    /// Stops the merge from another thread ([`Cancel::cancel`]): it returns
    /// [`Error::Cancelled`] within about 100 ms, the output left as it was (`None`: never).
    pub cancel: Option<Cancel>,
}

impl Default for MergeFilesOptions {
    fn default() -> Self {
        Self {
            engine: EngineOptions::default(),
            memory_limit: super::memory::default_memory_limit(),
            writer: WriterSettings::default(),
            passthrough: Passthrough::Auto,
            cancel: None,
        }
    }
}

pub use super::memory::{ReadPlan, MAX_WINDOW_ROWS};
pub use super::os::{open_file_budget, peak_memory};

/// What a finished merge did ([`merge_files`] returns it; the [`corank::parquet`](crate::parquet)
/// example prints its rows).
#[derive(Debug, Clone)]
pub struct MergeSummary {
    /// Rows written.
    pub rows: usize,
    /// Input files merged.
    pub input_files: usize,
    /// Runs of the plan ([`MergePlan::runs`]).
    pub runs: usize,
    /// Bytes of the input files (their sizes on disk).
    pub input_bytes: u64,
    /// Bytes of the output file (of all its files where it is split).
    pub output_bytes: u64,
    /// Row groups of the output file (of all its files where it is split).
    pub output_row_groups: usize,
    /// The files of a split output ([`WriterSettings::split`]) in key order, with their
    /// rows, bytes and first and last keys; empty for an output of one file.
    pub output_files: Vec<OutputFile>,
    /// Rows copied unchanged, not decoded nor re-encoded ([`Passthrough`]).
    pub passthrough_rows: usize,
    /// Row groups copied unchanged (each one of `output_row_groups`).
    pub passthrough_row_groups: usize,
    /// Of those, row groups that kept a codec other than the output's
    /// ([`Passthrough::Always`]).
    pub passthrough_codec_kept_row_groups: usize,
    /// Merge rounds that ran on the CPU.
    pub rounds_cpu: usize,
    /// Merge rounds that ran on the GPU.
    pub rounds_gpu: usize,
    /// The largest window of any run, in bytes.
    pub window_bytes: usize,
    /// Wall time of the whole merge, opening the output to renaming it into place.
    pub elapsed: Duration,
    /// Time the merge loop spent reading and decoding input windows.
    pub read_time: Duration,
    /// Time the merge loop spent in merge rounds (permutation and gather).
    pub merge_time: Duration,
    /// Time the writer thread spent encoding and writing row groups.
    pub write_time: Duration,
    /// The process's peak resident memory at the end, in bytes (`None` where the platform
    /// does not tell it; Linux and macOS do).
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

/// The footer metadata the output keeps: the inputs' key-value pairs, the first file's value
/// where they disagree (the Arrow schema is written anew). A sort keeps them as a merge does.
pub(crate) fn kept_metadata(files: &[InputFile]) -> Vec<KeyValue> {
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

/// Merges the runs of `plan` into `output` (a directory, or a store prefix, of part files
/// where `options.writer.split` is set: [`SplitFiles`](crate::parquet::SplitFiles)).
/// `progress` is called after every piece written with the rows written so far. On any
/// error the output is left as it was.
///
/// Row groups that need no merge are copied unchanged where `options.passthrough` allows
/// ([`Passthrough`]): the merge then runs in phases between them.
///
/// The [`corank::parquet`](crate::parquet) doc has an example.
pub fn merge_files(
    plan: &MergePlan,
    output: &Path,
    options: &MergeFilesOptions,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<MergeSummary> {
    let start = Instant::now();
    let cancel = options.cancel.as_ref();
    crate::cancel::check(cancel)?;
    if options.writer.split.is_some() {
        super::writer::split::check_inputs_outside(output, plan.files.iter().map(|f| f.path.as_path()))?;
    }
    // The GPU's start-up (context, cached kernels) overlaps opening the inputs and the
    // writer where a round may go to the GPU; a small `Auto` merge never touches it.
    if crate::engine::placement::warm_up_pays(&options.engine, plan.total_rows) {
        crate::engine::warm_up_gpu(&options.engine, plan.total_rows);
    }
    let MergeBudget { read, row_group_bytes, piece_bytes, .. } = merge_budget(plan, options.memory_limit, options.writer.row_group_bytes)?;
    let ReadPlan { keep_open, decoders_per_run, window_bytes: budgets, .. } = read;
    // Inputs in object stores fetch their next row groups ahead within R/16 (the memory
    // module's slack); what no reader took is stopped as the merge ends, however it ends.
    let _read_ahead = crate::parquet::store::ReadAhead::new(piece_bytes as u64, plan.files.iter().map(|f| f.path.as_path()));
    // What killed runs left beside the output (super::leftovers).
    let keep: Vec<&Path> = plan.files.iter().map(|f| f.path.as_path()).collect();
    let out_dir = if options.writer.split.is_some() { output.to_path_buf() } else { super::leftovers::dir_of(output) };
    super::leftovers::remove_stale(&[&out_dir], &keep);
    let mut writer_settings = options.writer.clone();
    writer_settings.row_group_bytes = row_group_bytes;
    let row_group_rows = writer_settings.row_group_rows;
    let mut writer = OutputWriter::create(
        output,
        plan.schema.clone(),
        super::writer::common_parquet_schema(&plan.files, &plan.schema),
        &plan.keys,
        kept_metadata(&plan.files),
        plan.total_rows,
        writer_settings,
    )?;
    writer.set_cancel(options.cancel.clone());
    let schedule = match options.writer.split {
        Some(_) => passthrough::split_schedule(plan, options.passthrough)?,
        None => schedule(plan, options.passthrough, options.writer.compression, writer.parquet_schema(), row_group_rows),
    };
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
    // The runs' parts in each phase, with their runs' indices: only the runs a phase holds
    // (a copied row group between every two rows of a file makes as many phases as rows).
    let phase_runs: Vec<Vec<(usize, Run)>> = schedule
        .phases
        .iter()
        .map(|p| p.iter().filter_map(|(r, range)| sub_run(&plan.runs[*r], range).map(|part| (*r, part))).collect())
        .collect();
    let phases = Phases {
        plan,
        schedule: &schedule,
        phase_runs: &phase_runs,
        budgets: &budgets,
        keep_open,
        decoders_per_run,
        // Two phases read at once may hold a run's file open twice.
        prefetch: !keep_open || plan.runs.len() * 2 <= open_file_budget(),
        key_index: &key_index,
        key_types: &key_types,
        frontier_options: FrontierOptions {
            engine: options.engine,
            window_rows: MAX_WINDOW_ROWS,
            batch_size: crate::DEFAULT_BATCH_SIZE,
            check_sorted: true,
        },
        piece_bytes,
        converter: &converter,
        cancel,
    };
    let mut tally = Tally::new(&options.engine);
    let ((written, output_files), write_time) = phases.run(writer, output, progress, &mut tally)?;
    Ok(MergeSummary {
        rows: written.rows,
        input_files: plan.files.len(),
        runs: plan.runs.len(),
        input_bytes: plan.total_bytes,
        output_bytes: written.bytes,
        output_row_groups: written.row_groups,
        output_files,
        passthrough_rows: written.passthrough_rows,
        passthrough_row_groups: written.passthrough_row_groups,
        passthrough_codec_kept_row_groups: written.codec_kept_row_groups,
        rounds_cpu: tally.rounds_cpu,
        rounds_gpu: tally.rounds_gpu,
        window_bytes: budgets.iter().copied().max().unwrap_or(0),
        elapsed: start.elapsed(),
        read_time: tally.read_time,
        merge_time: tally.merge_time,
        write_time,
        peak_memory: peak_memory(),
    })
}

/// The merge's phases and what they share, run on threads of one scope: the writer thread
/// ([`write_all`]), the block checker ([`check_blocks`]), the runs' readers
/// ([`start_readers`]), and the merge loop on the calling thread.
struct Phases<'a> {
    plan: &'a MergePlan,
    schedule: &'a Schedule,
    /// Each phase's runs: their indices in the plan and their parts in the phase.
    phase_runs: &'a [Vec<(usize, Run)>],
    /// Every run's window budget, by its index in the plan.
    budgets: &'a [usize],
    keep_open: bool,
    decoders_per_run: usize,
    /// Whether the next phase's readers start while a phase merges.
    prefetch: bool,
    key_index: &'a [usize],
    key_types: &'a [DataType],
    frontier_options: FrontierOptions,
    piece_bytes: usize,
    converter: &'a RowConverter,
    /// Checked by every thread of the merge: per batch read, round, piece and message.
    cancel: Option<&'a Cancel>,
}

impl<'a> Phases<'a> {
    /// Runs the merge: the writer thread and the block checker started, every phase merged
    /// and every copied row group sent in order. The written file and the writer's time.
    fn run(
        &self,
        writer: OutputWriter,
        output: &'a Path,
        progress: &'a (dyn Fn(usize) + Sync),
        tally: &mut Tally,
    ) -> Result<(Finished, Duration)> {
        std::thread::scope(|scope| {
            // One piece in flight between the merge and the writer. The writer renames the
            // output into place only on `Finish`; if the merge fails, the channel closes
            // without it and the temporary file is removed.
            let (to_writer, from_merge) = mpsc::sync_channel::<ToWriter>(1);
            let (plan, schedule) = (self.plan, self.schedule);
            let writer_thread = scope.spawn(move || write_all(writer, from_merge, plan, schedule, output, progress));
            // The blocks' key columns, decoded and checked ahead of the merge.
            let (verified_tx, verified) = mpsc::sync_channel::<Result<Verified>>(64);
            if !self.schedule.blocks.is_empty() {
                let (converter, cancel) = (self.converter, self.cancel);
                scope.spawn(move || check_blocks(plan, schedule, converter, verified_tx, cancel));
            } else {
                drop(verified_tx);
            }
            let merged = self.merge_phases(scope, &to_writer, &verified, tally);
            drop(to_writer);
            drop(verified); // the checker, if still running, sees its channel close and stops
            let written = writer_thread.join().map_err(|_| Error::Internal("the writer thread panicked".into()))?;
            merged?;
            written?.ok_or_else(|| Error::Internal("the writer stopped before the end".into()))
        })
    }

    /// The merge loop: each phase with rows merged (the next one's readers started
    /// meanwhile), then the copied row group after it checked against the output's last
    /// row and sent. Returns early, without error, when the writer stopped (its error is
    /// reported by its thread).
    fn merge_phases<'scope>(
        &self,
        scope: &'scope std::thread::Scope<'scope, 'a>,
        to_writer: &mpsc::SyncSender<ToWriter>,
        verified: &mpsc::Receiver<Result<Verified>>,
        tally: &mut Tally,
    ) -> Result<()> {
        let mut last: Option<Mark> = None;
        let has_rows = |k: usize| !self.phase_runs[k].is_empty();
        // The readers of the next phase with rows, started while this one merges.
        let mut next: Option<(usize, Sources)> = None;
        for (k, runs) in self.phase_runs.iter().enumerate() {
            crate::cancel::check(self.cancel)?;
            if has_rows(k) {
                let sources = match next.take() {
                    Some((j, sources)) if j == k => sources,
                    _ => self.start(scope, runs, 0),
                };
                if self.prefetch {
                    if let Some(j) = (k + 1..self.phase_runs.len()).find(|&j| has_rows(j)) {
                        next = Some((j, self.start(scope, &self.phase_runs[j], NEXT_PHASE_AHEAD)));
                    }
                }
                let mut phase = Phase {
                    plan: self.plan,
                    runs,
                    budgets: self.budgets,
                    sources: Some(sources),
                    key_index: self.key_index,
                    key_types: self.key_types,
                    frontier_options: self.frontier_options.clone(),
                    piece_bytes: self.piece_bytes,
                    converter: self.converter,
                    to_writer,
                    cancel: self.cancel,
                };
                if !phase.run(&mut last, tally)? {
                    return Ok(()); // the writer failed; its error is reported by its thread
                }
            }
            if let Some(b) = self.schedule.blocks.get(k) {
                let t = Instant::now();
                let v = crate::cancel::recv(verified, self.cancel)?
                    .unwrap_or_else(|| Err(Error::Internal("the block checker stopped".into())))?;
                tally.read_time += t.elapsed();
                let first = Mark { row: v.first, run: b.run, file: b.file, row_group: b.row_group };
                if let Some(before) = &last {
                    if !first.follows(before) {
                        return Err(junction_error(self.plan, before, &first));
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
    }

    /// Starts reading `runs` (a phase's), each holding at most `ahead` + 1 batches.
    fn start<'scope>(&self, scope: &'scope std::thread::Scope<'scope, 'a>, runs: &'a [(usize, Run)], ahead: usize) -> Sources<'a> {
        start_readers(scope, self.plan, runs, self.budgets, self.keep_open, self.decoders_per_run, ahead, self.cancel)
    }
}

/// What [`merge_files`] would do with a plan and options, worked out before reading a row
/// ([`dry_run`], which has an example): `corank merge --dry-run` prints it.
#[derive(Debug, Clone)]
pub struct DryRun {
    /// The limit planned for ([`MergeFilesOptions::memory_limit`]).
    pub memory_limit: usize,
    /// Whether runs keep their files open between batches (else each batch reopens it).
    pub keep_files_open: bool,
    /// Row groups of a run decoded at once.
    pub decoders_per_run: usize,
    /// Estimated memory of the runs' Parquet decoders (`decoder_bytes`, per decoder).
    pub decoder_bytes: usize,
    /// Each run's window budget in bytes (`window_budgets`), in the order of the plan's runs.
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
/// the soft limit on open files, as [`merge_files`] does: `open_file_budget`).
///
/// ```no_run
/// use corank::parquet::{dry_run, expand_inputs, plan_merge, MergeFilesOptions};
///
/// let plan = plan_merge(&expand_inputs(&["runs/".to_string()])?, None)?;
/// let options = MergeFilesOptions { memory_limit: 256 << 20, ..Default::default() };
/// let dry = dry_run(&plan, &options)?; // an error if 256 MiB cannot hold the runs' windows
/// println!("{} runs, windows of up to {} bytes", plan.runs.len(), dry.window_bytes.iter().max().unwrap_or(&0));
/// # Ok::<(), corank::Error>(())
/// ```
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

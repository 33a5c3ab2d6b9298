//! The task behind `CoRankSortExec`'s output stream: reads every input partition at once,
//! sorts chunks of each partition as they fill (off the async runtime, up to one chunk per
//! core at a time, each sort itself on rayon threads), spills runs to disk when the memory
//! pool says no, then produces the output.
//!
//! **Runs.** A run is one chunk: consecutive rows of one input partition, as batches, and
//! their stable sort order over those batches. On the CPU a chunk is sorted as pieces of at
//! most [`PIECE_ROWS`] rows, each sorted and gathered on its own in cache, in parallel, and
//! the pieces' keys are merged into the run's order; on the GPU the chunk is sorted as a
//! whole and its batches stay as they came (`sort_chunk`). With every run still in memory
//! at the end, the runs' keys are merged once ([`merge_sorted_chunks`], on the engine of the
//! settings) into one permutation of all their rows, which is gathered into the output in
//! rounds on blocking threads (the first round one batch, so that it comes early; each
//! later round gathered while the previous one is sent); on the CPU that gather reads every
//! piece front to back. Once some run is spilled (gathered into sorted batches, then
//! written), the runs still in memory are spilled too, and the spill files are merged by the
//! merge node's task ([`MergeTask`]).
//!
//! **Stability.** A chunk's sort is stable. Runs are keyed (partition, chunk) and merged in
//! that order, and both merges give ties to the earlier run. So equal keys come out in
//! partition order, then row order: the stable sort of the partitions' concatenation, for
//! every chunk size and whether runs were spilled or not.
//!
//! **Memory.** Every input batch is counted in the node's reservation (a spillable
//! `MemoryConsumer`) when it arrives, a run at its batches' size plus its sort order's (4 or
//! 8 bytes a row) once sorted.
//! When the reservation cannot grow, every partition's unfinished chunk is sorted and every
//! run in memory is written to a spill file (Arrow IPC, through DataFusion's `SpillManager`
//! and the runtime's `DiskManager`), then the batch is counted again: a second refusal, or no
//! disk manager, is the pool's `ResourcesExhausted` error. The in-memory output holds the
//! runs until the last round and two output rounds besides, counted in the merge's
//! reservation before the first; a pool that refuses those spills every run and merges the
//! spill files instead. The spill merge holds at most `min(window_rows, batch_size)` rows per
//! run (plus a batch) in that reservation. The sort and merge themselves (key words,
//! indices) and a run's gathered copy while it is written to disk use memory that is not
//! counted, as `SortExec`'s does beyond `sort_spill_reservation_bytes`.

use super::exec::MergeSettings;
use super::stream::{to_datafusion, MergeMetrics, MergeTask};
use crate::gather::gather;
use crate::options::{Engine, OnGpuFailure};
use crate::permutation::{Indices, Permutation};
use crate::sort::{merge_sorted_chunks, sort_columns, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::utils::memory::get_record_batch_memory_size;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::spill_file::SpillFile;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::common::spawn_buffered;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, Time};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{SendableRecordBatchStream, SpillManager};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

/// Rows per chunk unless the node says otherwise: about the size the CPU sort handles at
/// full speed on all cores, small enough that sorting overlaps reading.
pub const DEFAULT_CHUNK_ROWS: usize = 1 << 20;

/// Bytes of input batches (their memory size) at which a chunk is sorted whatever its rows.
pub const CHUNK_BYTES: usize = 256 << 20;

/// The node's metrics: the merge's (output rows, elapsed compute, which also counts the
/// chunk sorts, rounds), the runs sorted, and the time spent sorting them. Spills are
/// counted by the `SpillManager` (`spill_count`, `spilled_bytes`, `spilled_rows`).
pub struct SortMetrics {
    pub merge: MergeMetrics,
    pub runs: Count,
    pub sort_time: Time,
}

impl SortMetrics {
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            merge: MergeMetrics::new(set, partition),
            runs: MetricBuilder::new(set).counter("runs", partition),
            sort_time: MetricBuilder::new(set).subset_time("sort_time", partition),
        }
    }
}

/// One execution of the sort node (built by `CoRankSortExec::execute`).
pub struct SortTask {
    /// The input partitions' streams, in partition (tie) order.
    pub inputs: Vec<SendableRecordBatchStream>,
    pub schema: SchemaRef,
    pub expr: LexOrdering,
    pub settings: MergeSettings,
    /// Rows per chunk of a partition.
    pub chunk_rows: usize,
    /// Rows per output batch (the session's `batch_size`).
    pub batch_size: usize,
    /// Input batches and runs in memory (spillable).
    pub reservation: MemoryReservation,
    /// The merge's windows.
    pub merge_reservation: MemoryReservation,
    /// Writes and reads spill files; `None` without a disk manager (then no spilling).
    pub spill: Option<SpillManager>,
    pub metrics: SortMetrics,
}

/// A run's place in the tie order: (input partition, chunk within the partition).
type RunKey = (usize, usize);

/// A sorted run, in memory (counted in the reservation at `bytes`) or in a spill file. In
/// memory a run is its chunk's input batches as they came and their stable sort order
/// (`perm`, over the batches): its rows are gathered only once, into the output (or into a
/// spill file).
enum Run {
    Memory { batches: Vec<RecordBatch>, perm: Permutation, bytes: usize },
    Spilled(Arc<dyn SpillFile>),
}

/// A partition's chunk being filled.
#[derive(Default)]
struct Chunk {
    batches: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
}

/// A chunk sorted on a blocking thread: its key, the memory its input was counted at, its
/// batches and their sort order, the time the sort took.
type Sorted = (RunKey, usize, Result<(Vec<RecordBatch>, Permutation)>, Duration);

/// The sort expressions evaluated on every batch: `[batch][sort column]`.
fn key_columns(batches: &[RecordBatch], expr: &LexOrdering) -> Result<Vec<Vec<arrow::array::ArrayRef>>> {
    batches.iter().map(|b| expr.iter().map(|e| e.expr.evaluate(b)?.into_array(b.num_rows())).collect::<Result<Vec<_>>>()).collect()
}

/// Rows of a piece of a chunk that the CPU path sorts and gathers on its own: one batch's
/// columns fit a core's cache, so the gather within it reads no memory at random.
pub const PIECE_ROWS: usize = 8192;

/// Whether a chunk of `rows` rows is sorted on the CPU (else on the GPU, as a whole).
fn chunk_on_cpu(options: &SortBatchesOptions, rows: usize) -> bool {
    let engine = &options.engine;
    match engine.engine {
        Engine::Cpu => true,
        Engine::Gpu => false,
        Engine::Auto if engine.on_gpu_failure == OnGpuFailure::Error => false,
        Engine::Auto => rows < engine.gpu_min_rows || crate::engine::gpu_availability().is_err(),
    }
}

/// Sorts one chunk stably into a run: batches and their sort order (positions over the
/// batches). Two ways, the same order:
///
/// - CPU: the chunk's batches cut into pieces of at most [`PIECE_ROWS`] rows, each sorted
///   and gathered on its own, in parallel (in cache), then the pieces' keys merged (the
///   run's order, over the sorted pieces). A later gather of the run, in any merge with other
///   runs, reads every piece front to back: no read at random over the chunk's memory.
/// - GPU: the chunk sorted as a whole on the device; the input batches stay as they are.
fn sort_chunk(
    batches: Vec<RecordBatch>,
    expr: &LexOrdering,
    specs: &[SortKey],
    options: &SortBatchesOptions,
) -> Result<(Vec<RecordBatch>, Permutation)> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if !chunk_on_cpu(options, rows) {
        let perm = sort_columns(&key_columns(&batches, expr)?, specs, options).map_err(to_datafusion)?;
        return Ok((batches, perm));
    }
    let cpu = options.clone().with_engine(Engine::Cpu);
    let pieces: Vec<RecordBatch> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).step_by(PIECE_ROWS).map(move |s| b.slice(s, PIECE_ROWS.min(b.num_rows() - s))))
        .collect();
    drop(batches);
    let sorted: Vec<Vec<RecordBatch>> = pieces
        .into_par_iter()
        .map(|piece| {
            let piece = [piece];
            let perm = sort_columns(&key_columns(&piece, expr)?, specs, &cpu).map_err(to_datafusion)?;
            gathered(&piece, &perm, PIECE_ROWS)
        })
        .collect::<Result<_>>()?;
    let sorted: Vec<RecordBatch> = sorted.into_iter().flatten().collect();
    // Every sorted batch is a run in order: the identity within it.
    let mut offsets = Vec::with_capacity(sorted.len() + 1);
    offsets.push(0);
    let mut orders = Vec::with_capacity(sorted.len());
    for b in &sorted {
        offsets.push(offsets.last().unwrap() + b.num_rows());
        orders.push(Indices::U32((0..b.num_rows() as u32).collect()));
    }
    let perm = merge_sorted_chunks(&key_columns(&sorted, expr)?, specs, &offsets, &orders, &cpu).map_err(to_datafusion)?;
    Ok((sorted, perm))
}

/// Bytes of a permutation's indices.
fn indices_bytes(indices: &Indices) -> usize {
    match indices {
        Indices::U32(v) => v.len() * 4,
        Indices::U64(v) => v.len() * 8,
    }
}

/// A run in memory gathered into sorted batches (to spill it).
fn gathered(batches: &[RecordBatch], perm: &Permutation, batch_size: usize) -> Result<Vec<RecordBatch>> {
    gather(batches, perm, batch_size).map_err(to_datafusion)
}

fn out_of_memory(e: DataFusionError, spilling: bool) -> DataFusionError {
    let why = if spilling {
        "CoRankSortExec: not enough memory to sort, even after spilling every sorted run to disk; \
         consider increasing 'datafusion.runtime.memory_limit'"
    } else {
        "CoRankSortExec: not enough memory to sort and the disk manager is disabled (no spilling); \
         consider increasing 'datafusion.runtime.memory_limit' or enabling the disk manager"
    };
    e.context(why)
}

/// The ingest state: chunks being filled, chunks being sorted, the runs.
struct Runs {
    expr: LexOrdering,
    specs: Vec<SortKey>,
    options: SortBatchesOptions,
    chunk_rows: usize,
    reservation: MemoryReservation,
    spill: Option<SpillManager>,
    pending: Vec<Chunk>,
    /// Chunks started per partition (the next chunk's number).
    chunks: Vec<usize>,
    sorting: FuturesUnordered<JoinHandle<Sorted>>,
    runs: BTreeMap<RunKey, Run>,
    runs_count: Count,
    sort_time: Time,
    elapsed_compute: Time,
}

impl Runs {
    /// Adds an input batch of partition `i` to its chunk; a full chunk starts sorting.
    async fn push(&mut self, i: usize, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = get_record_batch_memory_size(&batch);
        self.reserve(bytes).await?;
        let chunk = &mut self.pending[i];
        chunk.rows += batch.num_rows();
        chunk.bytes += bytes;
        chunk.batches.push(batch);
        if chunk.rows >= self.chunk_rows || chunk.bytes >= CHUNK_BYTES {
            self.start_sort(i);
        }
        Ok(())
    }

    /// Counts `bytes` more, spilling everything first if the pool says no.
    async fn reserve(&mut self, bytes: usize) -> Result<()> {
        if let Err(e) = self.reservation.try_grow(bytes) {
            if self.spill.is_none() {
                return Err(out_of_memory(e, false));
            }
            self.spill_all().await?;
            self.reservation.try_grow(bytes).map_err(|e| out_of_memory(e, true))?;
        }
        Ok(())
    }

    /// Sorts partition `i`'s chunk (if it holds rows) on a blocking thread.
    fn start_sort(&mut self, i: usize) {
        let chunk = std::mem::take(&mut self.pending[i]);
        if chunk.rows == 0 {
            return;
        }
        let key = (i, self.chunks[i]);
        self.chunks[i] += 1;
        let (expr, specs, options) = (self.expr.clone(), self.specs.clone(), self.options.clone());
        self.sorting.push(tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let sorted = sort_chunk(chunk.batches, &expr, &specs, &options);
            (key, chunk.bytes, sorted, started.elapsed())
        }));
    }

    /// Makes a sorted chunk a run in memory, counted at its batches' size (instead of its
    /// input's) plus its sort order's; false if the pool refused that (it is counted anyway:
    /// the caller spills).
    fn add_run(&mut self, done: std::result::Result<Sorted, tokio::task::JoinError>) -> Result<bool> {
        let (key, in_bytes, sorted, elapsed) = done.map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.sort_time.add_duration(elapsed);
        self.elapsed_compute.add_duration(elapsed);
        let (batches, perm) = sorted?;
        let order_bytes = indices_bytes(&perm.indices);
        let bytes = batches.iter().map(get_record_batch_memory_size).sum::<usize>() + order_bytes;
        self.reservation.shrink(in_bytes.min(self.reservation.size()));
        let fits = self.reservation.try_grow(bytes).is_ok();
        if !fits {
            self.reservation.grow(bytes);
        }
        self.runs_count.add(1);
        self.runs.insert(key, Run::Memory { batches, perm, bytes });
        Ok(fits)
    }

    /// A chunk's sort finished: its run stays in memory if it fits, else everything spills.
    async fn finish_sort(&mut self, done: std::result::Result<Sorted, tokio::task::JoinError>) -> Result<()> {
        if !self.add_run(done)? {
            if self.spill.is_none() {
                let e = DataFusionError::ResourcesExhausted(format!("a sorted run of {} bytes does not fit", self.reservation.size()));
                return Err(out_of_memory(e, false));
            }
            self.spill_all().await?;
        }
        Ok(())
    }

    /// Sorts every unfinished chunk, waits for every sort, and writes every run in memory
    /// to its own spill file (uncounting it).
    async fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.clone() else {
            return Err(DataFusionError::Internal("CoRankSortExec: spilling without a spill manager".into()));
        };
        for i in 0..self.pending.len() {
            self.start_sort(i);
        }
        while let Some(done) = self.sorting.next().await {
            self.add_run(done)?;
        }
        self.spill_memory_runs(&spill).await
    }

    /// Writes every run in memory to its own spill file, gathered into sorted batches (off
    /// the runtime; the gathered copy of one run at a time is not counted, as the sort's own
    /// buffers are not).
    async fn spill_memory_runs(&mut self, spill: &SpillManager) -> Result<()> {
        let batch_size = self.options.batch_size;
        for run in self.runs.values_mut() {
            let Run::Memory { batches, perm, bytes } = run else { continue };
            let (batches, bytes) = (std::mem::take(batches), *bytes);
            let empty = Permutation { run_offsets: vec![0], indices: Indices::U32(vec![]), engine: perm.engine, key_bytes: 0 };
            let perm = std::mem::replace(perm, empty);
            let writer = spill.clone();
            let file = tokio::task::spawn_blocking(move || {
                let sorted = gathered(&batches, &perm, batch_size)?;
                drop(batches);
                writer.spill_record_batch_and_finish(&sorted, "CoRankSortExec")
            })
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))??;
            let Some(file) = file else {
                return Err(DataFusionError::Internal("CoRankSortExec: a run with rows spilled no file".into()));
            };
            *run = Run::Spilled(file);
            self.reservation.shrink(bytes.min(self.reservation.size()));
        }
        Ok(())
    }
}

/// What a pull of input `i` gave, and its stream to pull again.
type Arrival = (usize, Option<Result<RecordBatch>>, SendableRecordBatchStream);

fn next_batch(i: usize, stream: SendableRecordBatchStream) -> impl Future<Output = Arrival> {
    stream.into_future().map(move |(item, stream)| (i, item, stream))
}

/// A spilled run read back, each batch copied into buffers of its own: a batch decoded from a
/// spill file holds slices of one large read buffer, which DataFusion's memory accounting
/// (and the merge's) counts whole for every column (measured: about 768 KB a batch of 256
/// rows of three columns), so a merge of a few spilled runs overran a small pool.
fn compacted(stream: SendableRecordBatchStream, schema: SchemaRef) -> SendableRecordBatchStream {
    let compact = |b: RecordBatch| -> Result<RecordBatch> {
        let all = arrow::array::UInt32Array::from_iter_values(0..b.num_rows() as u32);
        Ok(arrow::compute::take_record_batch(&b, &all)?)
    };
    Box::pin(RecordBatchStreamAdapter::new(schema, stream.map(move |b| b.and_then(compact))))
}

impl SortTask {
    /// Reads, sorts, spills and merges, sending the sorted batches to `tx`; returns when
    /// all are sent or the receiver was dropped.
    pub async fn run(self, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let SortTask { inputs, schema, expr, settings, chunk_rows, batch_size, reservation, merge_reservation, spill, metrics } = self;
        let SortMetrics { merge: merge_metrics, runs: runs_count, sort_time } = metrics;
        let n = inputs.len();
        let specs: Vec<SortKey> = expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect();
        let options = SortBatchesOptions { engine: settings.engine, batch_size: batch_size.max(1) };
        let mut state = Runs {
            expr: expr.clone(),
            specs,
            options,
            chunk_rows: chunk_rows.max(1),
            reservation,
            spill,
            pending: (0..n).map(|_| Chunk::default()).collect(),
            chunks: vec![0; n],
            sorting: FuturesUnordered::new(),
            runs: BTreeMap::new(),
            runs_count,
            sort_time,
            elapsed_compute: merge_metrics.baseline.elapsed_compute().clone(),
        };
        // 1. Read every partition at once (each polled by its own task, two batches ahead);
        //    sort chunks as they fill, at most one per core at a time (reading pauses
        //    meanwhile: the sorts use every core).
        let max_sorting = std::thread::available_parallelism().map_or(1, |c| c.get());
        let mut pulling: FuturesUnordered<_> = inputs.into_iter().enumerate().map(|(i, s)| next_batch(i, spawn_buffered(s, 2))).collect();
        loop {
            tokio::select! {
                biased;
                Some(done) = state.sorting.next(), if !state.sorting.is_empty() => state.finish_sort(done).await?,
                Some((i, item, stream)) = pulling.next(), if !pulling.is_empty() && state.sorting.len() < max_sorting => match item {
                    Some(Ok(batch)) => {
                        state.push(i, batch).await?;
                        pulling.push(next_batch(i, stream));
                    }
                    Some(Err(e)) => return Err(e),
                    None => state.start_sort(i),
                },
                else => break,
            }
        }
        // 2. Nothing spilled: one merge of every run's keys, one gather into the output, if
        //    the pool holds two output rounds besides the runs; else (or once anything
        //    spilled) the rest spills too: memory for the merge's windows.
        let mut spilled = state.runs.values().any(|r| matches!(r, Run::Spilled(_)));
        if !spilled {
            let (rows, in_bytes) = state.runs.values().fold((0, 0), |(r, b), run| match run {
                Run::Memory { perm, bytes, .. } => (r + perm.len(), b + bytes - indices_bytes(&perm.indices)),
                Run::Spilled(_) => (r, b),
            });
            let round_rows = output_round_rows(batch_size).min(rows);
            let round_bytes = (in_bytes as u128 * round_rows as u128 / rows.max(1) as u128) as usize;
            if merge_reservation.try_grow(2 * round_bytes).is_ok() {
                let Runs { runs, reservation, options, sort_time, .. } = state;
                let runs = runs
                    .into_values()
                    .filter_map(|run| match run {
                        Run::Memory { batches, perm, .. } => Some((batches, perm)),
                        Run::Spilled(_) => None,
                    })
                    .collect();
                let sorted = SortedOutput { expr, options, batch_size, metrics: &merge_metrics, sort_time: &sort_time };
                let result = sorted.run(runs, tx).await;
                drop(reservation);
                return result;
            }
            if state.spill.is_none() {
                let e = DataFusionError::ResourcesExhausted(format!("no room for {} bytes of output rounds", 2 * round_bytes));
                return Err(out_of_memory(e, false));
            }
        }
        if let Some(spill) = state.spill.clone() {
            state.spill_memory_runs(&spill).await?;
            spilled = true;
        }
        // 3. The spilled runs in (partition, chunk) order: the merge's inputs in tie order.
        let Runs { runs, spill, .. } = state;
        let mut streams = Vec::with_capacity(runs.len());
        for run in runs.into_values() {
            streams.push(match run {
                Run::Memory { .. } => return Err(DataFusionError::Internal("CoRankSortExec: a run in memory after spilling".into())),
                Run::Spilled(file) => {
                    let spill = spill
                        .as_ref()
                        .ok_or_else(|| DataFusionError::Internal("CoRankSortExec: a spilled run without a spill manager".into()))?;
                    compacted(spill.read_spill_as_stream(file, None)?, Arc::clone(&schema))
                }
            });
        }
        if streams.len() <= 1 {
            // One run (or none) is the output as it is.
            if let Some(mut stream) = streams.pop() {
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    merge_metrics.baseline.record_output(batch.num_rows());
                    if tx.send(Ok(batch)).await.is_err() {
                        return Ok(()); // the output stream was dropped
                    }
                }
            }
            merge_metrics.baseline.done();
            return Ok(());
        }
        let window_rows = if spilled { settings.window_rows.min(batch_size).max(1) } else { settings.window_rows };
        let task = MergeTask {
            inputs: streams,
            schema,
            expr,
            fetch: None,
            settings: MergeSettings { window_rows, ..settings },
            check_sorted: false,
            batch_size,
            reservation: merge_reservation,
            metrics: merge_metrics,
        };
        task.run(tx).await
    }
}

/// Rows per output round of the in-memory path (after the first round, one batch): whole
/// batches, about [`CPU_ROUND_ROWS`](super::stream::CPU_ROUND_ROWS), gathered on all cores
/// while the previous round's batches are sent.
fn output_round_rows(batch_size: usize) -> usize {
    let batch_size = batch_size.max(1);
    (super::stream::CPU_ROUND_ROWS / batch_size).max(1) * batch_size
}

/// The in-memory path's output: every run in memory (input batches and their sort order).
struct SortedOutput<'a> {
    expr: LexOrdering,
    options: SortBatchesOptions,
    batch_size: usize,
    metrics: &'a MergeMetrics,
    sort_time: &'a Time,
}

impl SortedOutput<'_> {
    /// Merges the runs' keys into one permutation of all their rows (off the runtime, on the
    /// engine of the settings: [`merge_sorted_chunks`]), then gathers it in rounds, each
    /// round on a blocking thread (on every core) while the previous one is sent: the first
    /// round one batch, so that it comes early, the others [`output_round_rows`].
    async fn run(self, runs: Vec<(Vec<RecordBatch>, Permutation)>, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let SortedOutput { expr, options, batch_size, metrics, sort_time } = self;
        if runs.is_empty() {
            metrics.baseline.done();
            return Ok(()); // no rows
        }
        let elapsed_compute = metrics.baseline.elapsed_compute().clone();
        let specs: Vec<SortKey> = expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect();
        let merge_options = options.clone();
        let (batches, perm, elapsed) = tokio::task::spawn_blocking(move || -> Result<_> {
            let started = Instant::now();
            let mut chunk_offsets = vec![0];
            let mut orders = Vec::with_capacity(runs.len());
            let mut batches = Vec::new();
            for (run_batches, perm) in runs {
                chunk_offsets.push(chunk_offsets.last().unwrap() + perm.len());
                orders.push(perm.indices);
                batches.extend(run_batches);
            }
            let columns = key_columns(&batches, &expr)?;
            let perm = merge_sorted_chunks(&columns, &specs, &chunk_offsets, &orders, &merge_options).map_err(to_datafusion)?;
            Ok((batches, perm, started.elapsed()))
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))??;
        sort_time.add_duration(elapsed);
        elapsed_compute.add_duration(elapsed);
        match perm.engine {
            crate::options::Engine::Gpu => metrics.rounds_gpu.add(1),
            _ => metrics.rounds_cpu.add(1),
        }
        let (batches, perm) = (Arc::new(batches), Arc::new(perm));
        let n = perm.len();
        let gather_round = |s: usize, e: usize| {
            let (batches, perm) = (Arc::clone(&batches), Arc::clone(&perm));
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let indices = match &perm.indices {
                    Indices::U32(v) => Indices::U32(v[s..e].to_vec()),
                    Indices::U64(v) => Indices::U64(v[s..e].to_vec()),
                };
                let round = Permutation { run_offsets: perm.run_offsets.clone(), indices, engine: perm.engine, key_bytes: perm.key_bytes };
                (gathered(&batches, &round, batch_size), started.elapsed())
            })
        };
        let mut next = batch_size.max(1).min(n);
        let mut pending = (n > 0).then(|| gather_round(0, next));
        while let Some(handle) = pending.take() {
            let (out, elapsed) = handle.await.map_err(|e| DataFusionError::External(Box::new(e)))?;
            elapsed_compute.add_duration(elapsed);
            let out = out?;
            if next < n {
                let end = (next + output_round_rows(batch_size)).min(n);
                pending = Some(gather_round(next, end));
                next = end;
            }
            for batch in out {
                metrics.output_batches.add(1);
                metrics.baseline.record_output(batch.num_rows());
                if tx.send(Ok(batch)).await.is_err() {
                    return Ok(()); // the output stream was dropped
                }
            }
        }
        metrics.baseline.done();
        Ok(())
    }
}

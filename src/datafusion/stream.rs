//! The task behind `CoRankMergeExec`'s output stream: pulls the input partitions, runs the
//! frontier merge round by round (off the async runtime), sends merged batches, all three
//! at once (no barrier; [`MergeTask::run`]).

use super::exec::MergeSettings;
use crate::frontier::{FrontierMerge, FrontierOptions, MergedChunk};
use crate::options::{Engine, EngineOptions, OnGpuFailure};
use crate::sort_key::SortKey;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::metrics::{BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, Time};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Sender;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The node's metrics: output rows, batches, bytes and compute time (baseline), rounds per
/// engine, bytes of keys up to and indices down from the GPU, the time spent in GPU rounds,
/// and the input batches that arrived while a round merged (the pipelining at work).
pub struct MergeMetrics {
    pub baseline: BaselineMetrics,
    /// `output_bytes` as the batches' rows take them. The baseline's own counter, fed by
    /// `RecordOutput`, counts a batch's whole buffers, and the output batches are slices of
    /// a round's (or a whole sort's) arrays: every batch would count all of them again.
    /// Registered under the same name, so the plan's summed metrics show this one.
    output_bytes: Count,
    pub batches_while_merging: Count,
    pub rounds_cpu: Count,
    pub rounds_gpu: Count,
    pub gpu_bytes_up: Count,
    pub gpu_bytes_down: Count,
    pub gpu_time: Time,
}

impl MergeMetrics {
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            baseline: BaselineMetrics::new(set, partition),
            output_bytes: MetricBuilder::new(set).output_bytes(partition),
            batches_while_merging: MetricBuilder::new(set).counter("input_batches_while_merging", partition),
            rounds_cpu: MetricBuilder::new(set).counter("rounds_cpu", partition),
            rounds_gpu: MetricBuilder::new(set).counter("rounds_gpu", partition),
            gpu_bytes_up: MetricBuilder::new(set).counter("gpu_bytes_up", partition),
            gpu_bytes_down: MetricBuilder::new(set).counter("gpu_bytes_down", partition),
            gpu_time: MetricBuilder::new(set).subset_time("gpu_time", partition),
        }
    }

    /// Counts one output batch: its rows, the batch, and the bytes of its rows.
    pub fn record_batch(&self, batch: &RecordBatch) {
        self.baseline.record_output(batch.num_rows());
        self.baseline.output_batches().add(1);
        self.output_bytes.add(row_bytes(batch));
    }
}

/// The bytes `batch`'s rows take in its buffers: a slice's share, as
/// `get_slice_memory_size` counts it (the whole arrays where it cannot). For byte views that
/// is the views and the validity, counted here without building the slice's `ArrayData`,
/// which would clone every data buffer's handle: a whole sort's output shares all the input
/// batches' buffers.
pub fn row_bytes(batch: &RecordBatch) -> usize {
    let slice_bytes = |array: &dyn Array| match array.data_type() {
        DataType::Utf8View | DataType::BinaryView => array.len() * 16 + array.nulls().map_or(0, |n| n.len().div_ceil(8)),
        _ => array.to_data().get_slice_memory_size().unwrap_or_else(|_| array.get_array_memory_size()),
    };
    batch.columns().iter().map(|c| slice_bytes(c.as_ref())).sum()
}

/// corank's error as DataFusion's (arrow errors stay arrow errors).
pub fn to_datafusion(e: crate::Error) -> DataFusionError {
    match e {
        crate::Error::Arrow(a) => DataFusionError::ArrowError(Box::new(a), None),
        other => DataFusionError::External(Box::new(other)),
    }
}

/// An input out of order as an error that names the input partition and the row (counted
/// from the partition's first row); other errors as [`to_datafusion`].
fn not_sorted(e: crate::Error, expr: &LexOrdering) -> DataFusionError {
    match e {
        crate::Error::NotSorted { run, row, detail } => DataFusionError::Execution(format!(
            "CoRankMergeExec: input partition {run} is not sorted by [{expr}]: row {row} sorts before row {}: {detail}",
            row.saturating_sub(1)
        )),
        other => to_datafusion(other),
    }
}

/// One execution of the node's merge: everything the task needs, by name (DataFusion's
/// `StreamingMergeBuilder` in one struct).
pub struct MergeTask {
    /// The input partitions' streams, in tie order.
    pub inputs: Vec<SendableRecordBatchStream>,
    pub schema: SchemaRef,
    pub expr: LexOrdering,
    /// Stop after this many rows (`LIMIT`).
    pub fetch: Option<usize>,
    pub settings: MergeSettings,
    /// Check every input partition's order while merging (`corank.check_sorted`).
    pub check_sorted: bool,
    /// Rows per output batch (the session's `batch_size`).
    pub batch_size: usize,
    /// The buffered windows' memory, in DataFusion's `MemoryPool`.
    pub reservation: MemoryReservation,
    pub metrics: MergeMetrics,
}

/// Rows a round merged on the CPU holds at most. The CPU merge and gather are fastest on
/// rounds of about this size (their working set stays in cache, their buffers are reused):
/// 16 inputs of 1M rows (u64 key, 4 payload columns) on the 2-core dev VM took 37 ns a
/// row in rounds of 256K rows, 53 ns in rounds of 1M, 95 ns in rounds of 8M.
pub const CPU_ROUND_ROWS: usize = 1 << 18;

/// Rounds merging at once where a GPU merges. With two, the next round's key encoding (on
/// the CPU) runs while the previous round gathers (its fixed-width columns on the GPU), and
/// its keys go up as soon as the device is free, instead of after the previous round is
/// done. A CPU round uses every core in its merge and its gather, so CPU rounds go one at a
/// time.
pub const GPU_ROUNDS_IN_FLIGHT: usize = 2;

/// A round on a blocking thread: its merge and gather (with the time they took), and the
/// memory its rows hold. Rounds are taken, merged and sent in order.
struct Merging {
    handle: JoinHandle<(crate::Result<MergedChunk>, Duration)>,
    bytes: usize,
}

/// Merged batches not yet sent: the memory they are counted at is their round's, in
/// proportion to the rows left.
#[derive(Default)]
struct Outgoing {
    batches: VecDeque<RecordBatch>,
    rows: usize,
    round_rows: usize,
    round_bytes: usize,
}

impl Outgoing {
    fn new(chunk: MergedChunk, round_bytes: usize) -> Self {
        Self { batches: chunk.batches.into(), rows: chunk.rows, round_rows: chunk.rows, round_bytes }
    }

    fn bytes(&self) -> usize {
        (self.round_bytes as u128 * self.rows as u128 / self.round_rows.max(1) as u128) as usize
    }

    fn pop(&mut self) -> Option<RecordBatch> {
        let batch = self.batches.pop_front()?;
        self.rows -= batch.num_rows();
        Some(batch)
    }
}

/// Whether a round of `rows` rows merges on the CPU (then the first round, about one
/// output batch, merges on the task, as SPM does, not on a GPU from the async runtime).
fn cpu_round(engine: &EngineOptions, rows: usize) -> bool {
    match engine.engine {
        Engine::Cpu => true,
        Engine::Auto => rows < engine.gpu_min_rows && engine.on_gpu_failure != OnGpuFailure::Error,
        Engine::Gpu => false,
    }
}

/// Counts a merged round in the metrics (`elapsed`: its merge and gather).
fn record_round(metrics: &MergeMetrics, chunk: &MergedChunk, elapsed: Duration) {
    metrics.baseline.elapsed_compute().add_duration(elapsed);
    match chunk.engine {
        Engine::Gpu => {
            metrics.rounds_gpu.add(1);
            metrics.gpu_bytes_up.add(chunk.key_bytes);
            metrics.gpu_bytes_down.add(chunk.rows * if chunk.rows <= u32::MAX as usize { 4 } else { 8 });
            metrics.gpu_time.add_duration(elapsed);
        }
        _ => metrics.rounds_cpu.add(1),
    }
}

/// `input` polled by its own task, up to `buffer` batches ahead, so that inputs decode in
/// parallel: DataFusion's `spawn_buffered`, except that once it has sent its first batch
/// with rows, the task waits until `first_round` is true (the merge took its first round)
/// before it decodes further. On a runtime of one thread, as there, the input is returned
/// as it is.
///
/// Why the wait, twice over (docs/PERFORMANCE.md, "The first batch: the merge task waited in tokio's LIFO slot"):
/// - The send wakes the merge task on this worker thread, into tokio's LIFO slot, which no
///   other worker may steal (tokio issue 4941). Had the task gone on, the worker would
///   decode this input's next batch (hundreds of microseconds to milliseconds in one poll)
///   before it ran the merge, so the first round started one decode late: on the H200
///   host the first batch at 100M rows was 0.91-0.97x stock's before, level with the wait.
/// - The first output batch needs every input's first batch. Until the slowest has
///   decoded, the inputs that are done would decode ahead (stock's, one batch ahead, do)
///   on the workers that the slowest input's decode, woken when its file's bytes are read,
///   waits for.
pub(crate) fn spawn_input(
    mut input: SendableRecordBatchStream,
    buffer: usize,
    mut first_round: watch::Receiver<bool>,
) -> SendableRecordBatchStream {
    let multi_thread =
        tokio::runtime::Handle::try_current().is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if !multi_thread {
        return input;
    }
    let mut builder = RecordBatchReceiverStreamBuilder::new(input.schema(), buffer);
    let tx = builder.tx();
    builder.spawn(async move {
        let mut waited = false;
        while let Some(item) = input.next().await {
            let rows = item.as_ref().map_or(0, |b| b.num_rows());
            if tx.send(item).await.is_err() {
                break; // the merge is gone
            }
            if !waited && rows > 0 {
                waited = true;
                // An error: the merge is gone (the next send says so).
                drop(first_round.wait_for(|&taken| taken).await);
            }
        }
        Ok(())
    });
    builder.build()
}

/// What a pull of input `i` gave, and its stream to pull again.
type Arrival = (usize, Option<Result<RecordBatch>>, SendableRecordBatchStream);

/// The next batch of input `i`.
fn next_batch(i: usize, stream: SendableRecordBatchStream) -> impl Future<Output = Arrival> {
    stream.into_future().map(move |(item, stream)| (i, item, stream))
}

/// Pushes what a pull gave into the frontier (a batch with its evaluated key columns, or
/// the input's end) and parks the stream until it is pulled again; `merging`: whether a
/// round merges meanwhile (a metric).
fn arrive(
    merger: &mut FrontierMerge,
    idle: &mut [Option<SendableRecordBatchStream>],
    expr: &LexOrdering,
    metrics: &MergeMetrics,
    merging: bool,
    (i, item, stream): Arrival,
) -> Result<()> {
    match item {
        Some(Ok(batch)) => {
            if merging {
                metrics.batches_while_merging.add(1);
            }
            let timer = metrics.baseline.elapsed_compute().timer();
            let keys = expr.iter().map(|e| e.expr.evaluate(&batch)?.into_array(batch.num_rows())).collect::<Result<Vec<_>>>()?;
            merger.push(i, batch, keys).map_err(|e| not_sorted(e, expr))?;
            timer.done();
            idle[i] = Some(stream);
            Ok(())
        }
        Some(Err(e)) => Err(e),
        None => {
            merger.finish_input(i);
            Ok(())
        }
    }
}

impl MergeTask {
    /// Drives the merge, sending batches to `tx`; returns when the output is complete,
    /// `fetch` rows were sent, or the receiver was dropped (cancellation).
    ///
    /// No barrier: every input is pulled at once and each batch goes into the frontier as
    /// it arrives. The first round starts as soon as every live input holds a batch (until
    /// then an input holding one is not pulled further, as in stock SPM), emits about one
    /// output batch and merges right here on the CPU (as SPM merges; with any engine, unless
    /// a GPU is required), so the first batch comes when SPM's would. Each later round waits until every live input holds a target
    /// number of rows (or a full window) and is taken here (cheap: the frontier and the
    /// emittable prefixes move out of the buffers), then merged and gathered on a blocking
    /// thread, while this task keeps pulling inputs into the windows and sending the
    /// previous round's batches. Rounds the CPU merges hold at most [`CPU_ROUND_ROWS`]
    /// rows (the target: their share of it), the size the CPU merges fastest, so the
    /// windows fill while the merge keeps up; where a GPU may merge, the target doubles
    /// each round from one output batch up to `window_rows`, for large GPU rounds.
    /// Where a GPU merges, two rounds merge at once ([`GPU_ROUNDS_IN_FLIGHT`]): the next
    /// round's keys are encoded and go up while the previous round gathers. Output is held
    /// for at most two rounds besides those merging (one sending, one merged), and `tx` is
    /// bounded, so a slow consumer slows the merge; windows bound what is pulled.
    pub async fn run(self, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let MergeTask { inputs, schema, expr, fetch, settings, check_sorted, batch_size, reservation, metrics } = self;
        // The start of the task, for the trace lines of the first batch's path.
        let task_started = Instant::now();
        let trace =
            |what: std::fmt::Arguments| log::trace!("CoRankMergeExec +{:.3} ms: {what}", task_started.elapsed().as_secs_f64() * 1e3);
        trace(format_args!("task started, {} inputs", inputs.len()));
        let n = inputs.len();
        let key_types: Vec<DataType> = expr.iter().map(|e| e.expr.data_type(&schema)).collect::<Result<_>>()?;
        let specs: Vec<SortKey> = expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect();
        let window_rows = settings.window_rows.max(1);
        let options = FrontierOptions { engine: settings.engine, window_rows, batch_size, check_sorted };
        let mut merger = FrontierMerge::new(schema, &key_types, specs, n, options).map_err(to_datafusion)?;
        // Each input is polled by its own task, two batches ahead, so inputs decode in
        // parallel; an input not being pulled waits here. Until the first round is taken,
        // an input that sent rows decodes no further (`spawn_input`).
        let (first_round_taken, first_round_gate) = watch::channel(false);
        let mut idle: Vec<Option<SendableRecordBatchStream>> =
            inputs.into_iter().map(|s| Some(spawn_input(s, 2, first_round_gate.clone()))).collect();
        drop(first_round_gate);
        let mut pulling = FuturesUnordered::new();
        // Whether rounds may go to a GPU (with `Auto`: whether one is usable, found off the
        // runtime while the first batches arrive).
        let mut gpu = match settings.engine.engine {
            Engine::Cpu => Some(false),
            Engine::Gpu => Some(true),
            Engine::Auto if settings.engine.on_gpu_failure == OnGpuFailure::Error => Some(true),
            Engine::Auto => None,
        };
        let gpu_required = settings.engine.on_gpu_failure == OnGpuFailure::Error;
        let mut gpu_check = gpu.is_none().then(|| tokio::task::spawn_blocking(crate::engine::gpu_availability));
        // Rounds merging, oldest first: one, or GPU_ROUNDS_IN_FLIGHT where a GPU merges.
        let mut merging: VecDeque<Merging> = VecDeque::new();
        let mut merged: Option<Outgoing> = None;
        let mut sending = Outgoing::default();
        // Rows every live input holds before the next round (1: any batch, the first round).
        let mut target = 1usize;
        let mut first_round = true;
        // Whether the first output batch has gone out: until then no later round is taken,
        // so that a GPU round's encoding (on every core) does not delay it.
        let mut output_started = false;
        // Rows taken into rounds, rows sent.
        let (mut taken, mut sent) = (0usize, 0usize);
        loop {
            // 1. A merged round goes out once the previous round's batches are all sent.
            if sending.batches.is_empty() {
                if let Some(next) = merged.take() {
                    sending = next;
                }
            }
            // 2. Pull: every input that wants rows (not exhausted, window not full) has a
            //    `next()` in flight, also while a round merges; before the first round, only
            //    inputs holding no rows. Once rounds taken cover `fetch`, nothing more: the
            //    inputs are dropped (which stops their producers).
            let enough = fetch.is_some_and(|f| taken >= f);
            if enough {
                idle.iter_mut().for_each(|s| *s = None);
                pulling.clear();
            }
            for (i, slot) in idle.iter_mut().enumerate() {
                if merger.wants(i) && (!first_round || merger.buffered_rows(i) == 0) {
                    if let Some(stream) = slot.take() {
                        pulling.push(next_batch(i, stream));
                    }
                }
            }
            // 3. A round is due when fewer rounds merge than may (one, or
            //    GPU_ROUNDS_IN_FLIGHT on a GPU) and none waits to be sent, the first output
            //    batch (if one is waiting) has gone out, every live input holds a row and
            //    either holds `target` rows (or a full window), or nothing else would happen:
            //    no round merging, nothing to send, the consumer has taken every batch, and
            //    no input has a batch at hand (a barrier would wait for slow inputs here).
            let in_flight = if gpu == Some(true) { GPU_ROUNDS_IN_FLIGHT } else { 1 };
            let possible = merging.len() < in_flight
                && merged.is_none()
                && (output_started || sending.batches.is_empty())
                && !enough
                && !merger.is_finished()
                && merger.ready();
            let mut due = possible && merger.ready_for(target);
            let idle_output = possible && !due && sending.batches.is_empty() && merging.is_empty();
            if idle_output && tx.capacity() == tx.max_capacity() {
                match pulling.next().now_or_never() {
                    Some(Some(arrival)) => {
                        arrive(&mut merger, &mut idle, &expr, &metrics, false, arrival)?;
                        continue;
                    }
                    _ => due = true,
                }
            }
            // 4. Take the round. Later batches may arrive before it merges: the frontier
            //    stays valid (the frontier module's pipelining invariant), rounds go out in
            //    the order they are taken.
            if due {
                if let Some(check) = gpu_check.take() {
                    gpu = Some(check.await.is_ok_and(|usable| usable.is_ok()));
                }
                let gpu = gpu.expect("known before the first round");
                let timer = metrics.baseline.elapsed_compute().timer();
                let cap = match (first_round, gpu) {
                    (true, _) => batch_size,
                    (false, false) => CPU_ROUND_ROWS,
                    (false, true) => usize::MAX,
                };
                let round = merger.take_round_at_most(cap).map_err(to_datafusion)?;
                timer.done();
                trace(format_args!("round taken: {} rows (first: {first_round})", round.rows()));
                taken += round.rows();
                target = match gpu {
                    false => CPU_ROUND_ROWS / n.max(1),
                    true if target <= 1 => batch_size,
                    true => target.saturating_mul(2),
                }
                .clamp(1, window_rows);
                let bytes = round.bytes();
                if first_round && (!gpu || !gpu_required || cpu_round(&settings.engine, round.rows())) {
                    // About one output batch, on the CPU: merged here, sent first thing
                    // (a GPU's launch and transfer latency would delay the first batch
                    // past SPM's; only a GPU required (`OnGpuFailure::Error`) takes it).
                    let round = if gpu_required { round } else { round.on_cpu() };
                    let started = Instant::now();
                    let chunk = round.merge_gathered().map_err(to_datafusion)?;
                    record_round(&metrics, &chunk, started.elapsed());
                    trace(format_args!("first round merged and gathered on the task"));
                    merged = Some(Outgoing::new(chunk, bytes));
                } else {
                    let handle = tokio::task::spawn_blocking(move || {
                        let started = Instant::now();
                        let chunk = round.merge_gathered();
                        (chunk, started.elapsed())
                    });
                    merging.push_back(Merging { handle, bytes });
                }
                // The inputs decode ahead again (the first round's batches go out next).
                first_round_taken.send_replace(true);
                first_round = false;
                continue;
            }
            // 5. Done: everything merged and sent (or `fetch` rows taken and sent).
            if merging.is_empty() && merged.is_none() && sending.batches.is_empty() && (enough || merger.is_finished()) {
                break;
            }
            // The memory held: the windows, the round merging, the merged batches not sent.
            let merging_bytes: usize = merging.iter().map(|m| m.bytes).sum();
            let outgoing_bytes = sending.bytes() + merged.as_ref().map_or(0, Outgoing::bytes);
            reservation.try_resize(merger.buffered_bytes() + merging_bytes + outgoing_bytes)?;
            // 6. Wait for the next event: the oldest round merged (once the round before it
            //    is out of `merged`), room in the output channel, an input's batch, the
            //    consumer taking the last batch (for step 3). In that order when several are
            //    ready: a merged round frees a thread for the next, a sent batch frees memory.
            tokio::select! {
                biased;
                done = async { (&mut merging.front_mut().expect("a round is merging").handle).await }, if !merging.is_empty() && merged.is_none() => {
                    let (chunk, elapsed) = done.map_err(|e| DataFusionError::External(Box::new(e)))?;
                    let Merging { bytes, .. } = merging.pop_front().expect("a round is merging");
                    let chunk = chunk.map_err(to_datafusion)?;
                    record_round(&metrics, &chunk, elapsed);
                    merged = Some(Outgoing::new(chunk, bytes));
                }
                permit = tx.reserve(), if !sending.batches.is_empty() => {
                    let Ok(permit) = permit else {
                        return Ok(()); // the stream was dropped: stop, buffers are freed on return
                    };
                    let batch = sending.pop().expect("a batch to send");
                    // Stop at `fetch` rows.
                    let batch = match fetch {
                        Some(f) if sent + batch.num_rows() > f => batch.slice(0, f - sent),
                        _ => batch,
                    };
                    sent += batch.num_rows();
                    if !output_started {
                        trace(format_args!("first batch sent"));
                    }
                    output_started = true;
                    if batch.num_rows() > 0 {
                        metrics.record_batch(&batch);
                        permit.send(Ok(batch));
                    }
                    if fetch.is_some_and(|f| sent >= f) {
                        break;
                    }
                }
                Some(arrival) = pulling.next(), if !pulling.is_empty() => {
                    arrive(&mut merger, &mut idle, &expr, &metrics, !merging.is_empty(), arrival)?;
                }
                drained = tx.reserve_many(tx.max_capacity()), if idle_output => {
                    if drained.is_err() {
                        return Ok(()); // the stream was dropped
                    }
                }
                else => return internal_err!("CoRankMergeExec: the merge waits on nothing"),
            }
        }
        metrics.baseline.done();
        Ok(())
    }
}

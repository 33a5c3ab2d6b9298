//! The task behind `CoRankMergeExec`'s output stream: pulls the input partitions, runs the
//! frontier merge round by round (off the async runtime), sends merged batches, all three
//! at once (no barrier; [`MergeTask::run`]). The loop's state is one struct
//! (`MergeLoop`), each step of the loop one of its methods.

use super::error::not_sorted;
pub use super::error::to_datafusion;
use super::exec::MergeSettings;
use super::merge_inputs::{next_batch, spawn_input, Arrival};
use super::metrics::record_round;
pub use super::metrics::MergeMetrics;
use crate::engine::placement;
use crate::frontier::{FrontierMerge, FrontierOptions, MergedChunk};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{Permit, Sender};
use tokio::sync::watch;
use tokio::task::JoinHandle;

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
/// rounds of about this size (their working set stays in cache, their buffers are reused;
/// larger rounds cost more a row, `docs/performance.md`).
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

impl MergeTask {
    /// Drives the merge, sending batches to `tx`; returns when the output is complete,
    /// `fetch` rows were sent, or the receiver was dropped (cancellation).
    ///
    /// No barrier: every input is pulled at once and each batch goes into the frontier as
    /// it arrives. The first round starts as soon as every live input holds a batch (until
    /// then an input holding one is not pulled further, as in stock SPM), emits about one
    /// output batch and merges right here on the CPU (as SPM merges; with any engine, unless
    /// a GPU is required: [`placement::first_round_on_cpu`]), so the first batch comes when
    /// SPM's would. Each later round waits until every live input holds a target number of
    /// rows (or a full window) and is taken here (cheap: the frontier and the emittable
    /// prefixes move out of the buffers), then merged and gathered on a blocking thread,
    /// while this task keeps pulling inputs into the windows and sending the previous
    /// round's batches. Rounds the CPU merges hold at most [`CPU_ROUND_ROWS`] rows (the
    /// target: their share of it), the size the CPU merges fastest, so the windows fill
    /// while the merge keeps up; where a GPU may merge ([`placement::rounds_on_gpu`]), the
    /// target doubles each round from one output batch up to `window_rows`, for large GPU
    /// rounds. Where a GPU merges, two rounds merge at once ([`GPU_ROUNDS_IN_FLIGHT`]): the
    /// next round's keys are encoded and go up while the previous round gathers. Output is
    /// held for at most two rounds besides those merging (one sending, one merged), and
    /// `tx` is bounded, so a slow consumer slows the merge; windows bound what is pulled.
    pub async fn run(self, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let mut state = MergeLoop::new(self)?;
        loop {
            // 1. A merged round goes out once the previous round's batches are all sent.
            state.promote_merged();
            // 2. Pull (see `pull`).
            let enough = state.pull();
            // 3. Is a round due (see `round_possible`)? Where nothing else would happen, a
            //    batch at hand is taken first, else the round is due anyway.
            let possible = state.round_possible(enough);
            let mut due = possible && state.merger.ready_for(state.target);
            let idle_output = possible && !due && state.sending.batches.is_empty() && state.merging.is_empty();
            if idle_output && tx.capacity() == tx.max_capacity() {
                match state.pulling.next().now_or_never() {
                    Some(Some(arrival)) => {
                        state.arrive(arrival, false)?;
                        continue;
                    }
                    _ => due = true,
                }
            }
            // 4. Take the round. Later batches may arrive before it merges: the frontier
            //    stays valid (the frontier module's pipelining invariant), rounds go out in
            //    the order they are taken.
            if due {
                state.take_round().await?;
                continue;
            }
            // 5. Done: everything merged and sent (or `fetch` rows taken and sent).
            if state.finished(enough) {
                break;
            }
            state.account()?;
            // 6. Wait for the next event.
            match state.next_event(&tx, idle_output).await? {
                Flow::Go => {}
                Flow::Done => break,
                Flow::Dropped => return Ok(()), // buffers are freed on return
            }
        }
        state.metrics.baseline.done();
        Ok(())
    }
}

/// What the loop does after an event.
enum Flow {
    /// Goes on.
    Go,
    /// The output is complete (`fetch` rows sent).
    Done,
    /// The output stream was dropped: stop at once.
    Dropped,
}

/// The state of one run of [`MergeTask::run`]: the task's settings, the frontier, the input
/// streams (parked or being pulled), the rounds merging, merged and being sent, and the
/// counters of the loop's rules.
struct MergeLoop {
    expr: LexOrdering,
    fetch: Option<usize>,
    settings: MergeSettings,
    batch_size: usize,
    window_rows: usize,
    inputs: usize,
    reservation: MemoryReservation,
    metrics: MergeMetrics,
    /// The start of the task, for the trace lines of the first batch's path.
    started: Instant,
    merger: FrontierMerge,
    /// Each input's stream while it is not being pulled (`None`: pulled, or done).
    idle: Vec<Option<SendableRecordBatchStream>>,
    pulling: FuturesUnordered<BoxFuture<'static, Arrival>>,
    /// Tells the inputs' tasks that the first round was taken (they decode ahead again).
    first_round_taken: watch::Sender<bool>,
    /// Whether rounds may go to a GPU (with `Auto`: whether one is usable, found off the
    /// runtime while the first batches arrive, `gpu_check`).
    gpu: Option<bool>,
    gpu_check: Option<JoinHandle<bool>>,
    /// Rounds merging, oldest first: one, or GPU_ROUNDS_IN_FLIGHT where a GPU merges.
    merging: VecDeque<Merging>,
    merged: Option<Outgoing>,
    sending: Outgoing,
    /// Rows every live input holds before the next round (1: any batch, the first round).
    target: usize,
    first_round: bool,
    /// Whether the first output batch has gone out: until then no later round is taken,
    /// so that a GPU round's encoding (on every core) does not delay it.
    output_started: bool,
    /// Rows taken into rounds, rows sent.
    taken: usize,
    sent: usize,
}

impl MergeLoop {
    /// The loop's state before its first step: the frontier built, every input polled by its
    /// own task, two batches ahead, so inputs decode in parallel (an input not being pulled
    /// waits here; until the first round is taken, an input that sent rows decodes no
    /// further: `spawn_input`), and the GPU check started where the engine leaves it open.
    fn new(task: MergeTask) -> Result<Self> {
        let MergeTask { inputs, schema, expr, fetch, settings, check_sorted, batch_size, reservation, metrics } = task;
        let started = Instant::now();
        let n = inputs.len();
        let key_types: Vec<DataType> = expr.iter().map(|e| e.expr.data_type(&schema)).collect::<Result<_>>()?;
        let specs: Vec<SortKey> = expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect();
        let window_rows = settings.window_rows.max(1);
        let options = FrontierOptions { engine: settings.engine, window_rows, batch_size, check_sorted };
        let merger = FrontierMerge::new(schema, &key_types, specs, n, options).map_err(to_datafusion)?;
        let (first_round_taken, first_round_gate) = watch::channel(false);
        let idle = inputs.into_iter().map(|s| Some(spawn_input(s, 2, first_round_gate.clone()))).collect();
        let gpu = placement::rounds_on_gpu(&settings.engine);
        let gpu_check = gpu.is_none().then(|| tokio::task::spawn_blocking(placement::gpu_usable));
        let state = Self {
            expr,
            fetch,
            settings,
            batch_size,
            window_rows,
            inputs: n,
            reservation,
            metrics,
            started,
            merger,
            idle,
            pulling: FuturesUnordered::new(),
            first_round_taken,
            gpu,
            gpu_check,
            merging: VecDeque::new(),
            merged: None,
            sending: Outgoing::default(),
            target: 1,
            first_round: true,
            output_started: false,
            taken: 0,
            sent: 0,
        };
        state.trace(format_args!("task started, {n} inputs"));
        Ok(state)
    }

    fn trace(&self, what: std::fmt::Arguments) {
        log::trace!("CoRankMergeExec +{:.3} ms: {what}", self.started.elapsed().as_secs_f64() * 1e3);
    }

    /// Step 1: the merged round becomes the one being sent once the previous is all sent.
    fn promote_merged(&mut self) {
        if self.sending.batches.is_empty() {
            if let Some(next) = self.merged.take() {
                self.sending = next;
            }
        }
    }

    /// Step 2: every input that wants rows (not exhausted, window not full) has a `next()`
    /// in flight, also while a round merges; before the first round, only inputs holding no
    /// rows. Once rounds taken cover `fetch`, nothing more: the inputs are dropped (which
    /// stops their producers). Returns whether they cover `fetch`.
    fn pull(&mut self) -> bool {
        let enough = self.fetch.is_some_and(|f| self.taken >= f);
        if enough {
            self.idle.iter_mut().for_each(|s| *s = None);
            self.pulling.clear();
        }
        for (i, slot) in self.idle.iter_mut().enumerate() {
            if self.merger.wants(i) && (!self.first_round || self.merger.buffered_rows(i) == 0) {
                if let Some(stream) = slot.take() {
                    self.pulling.push(next_batch(i, stream).boxed());
                }
            }
        }
        enough
    }

    /// Step 3: a round may be taken when fewer rounds merge than may (one, or
    /// GPU_ROUNDS_IN_FLIGHT on a GPU) and none waits to be sent, the first output batch (if
    /// one is waiting) has gone out, and every live input holds a row. It is due once every
    /// live input also holds `target` rows (or a full window), or nothing else would happen:
    /// no round merging, nothing to send, the consumer has taken every batch, and no input
    /// has a batch at hand (a barrier would wait for slow inputs here).
    fn round_possible(&self, enough: bool) -> bool {
        let in_flight = if self.gpu == Some(true) { GPU_ROUNDS_IN_FLIGHT } else { 1 };
        self.merging.len() < in_flight
            && self.merged.is_none()
            && (self.output_started || self.sending.batches.is_empty())
            && !enough
            && !self.merger.is_finished()
            && self.merger.ready()
    }

    /// Step 4: takes a round (the GPU check answered first, where one is pending). The
    /// first round (about one output batch) merges here on the CPU unless a GPU is required
    /// and takes it; every other round merges on a blocking thread.
    async fn take_round(&mut self) -> Result<()> {
        if let Some(check) = self.gpu_check.take() {
            self.gpu = Some(check.await.unwrap_or(false));
        }
        let gpu = self.gpu.expect("known before the first round");
        let timer = self.metrics.baseline.elapsed_compute().timer();
        let cap = match (self.first_round, gpu) {
            (true, _) => self.batch_size,
            (false, false) => CPU_ROUND_ROWS,
            (false, true) => usize::MAX,
        };
        let round = self.merger.take_round_at_most(cap).map_err(to_datafusion)?;
        timer.done();
        self.trace(format_args!("round taken: {} rows (first: {})", round.rows(), self.first_round));
        self.taken += round.rows();
        self.target = match gpu {
            false => CPU_ROUND_ROWS / self.inputs.max(1),
            true if self.target <= 1 => self.batch_size,
            true => self.target.saturating_mul(2),
        }
        .clamp(1, self.window_rows);
        let bytes = round.bytes();
        let engine = &self.settings.engine;
        let required = placement::gpu_required(engine);
        if self.first_round && (!gpu || !required || placement::first_round_on_cpu(engine, round.rows())) {
            // About one output batch, on the CPU: merged here, sent first thing (a GPU's
            // launch and transfer latency would delay the first batch past SPM's; only a GPU
            // required (`OnGpuFailure::Error`) takes it).
            let round = if required { round } else { round.on_cpu() };
            let started = Instant::now();
            let chunk = round.merge_gathered().map_err(to_datafusion)?;
            record_round(&self.metrics, &chunk, started.elapsed());
            self.trace(format_args!("first round merged and gathered on the task"));
            self.merged = Some(Outgoing::new(chunk, bytes));
        } else {
            let handle = tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let chunk = round.merge_gathered();
                (chunk, started.elapsed())
            });
            self.merging.push_back(Merging { handle, bytes });
        }
        // The inputs decode ahead again (the first round's batches go out next).
        self.first_round_taken.send_replace(true);
        self.first_round = false;
        Ok(())
    }

    /// Step 5: everything merged and sent (or `fetch` rows taken and sent).
    fn finished(&self, enough: bool) -> bool {
        self.merging.is_empty() && self.merged.is_none() && self.sending.batches.is_empty() && (enough || self.merger.is_finished())
    }

    /// The memory held, in the reservation: the windows, the rounds merging, the merged
    /// batches not sent.
    fn account(&mut self) -> Result<()> {
        let merging_bytes: usize = self.merging.iter().map(|m| m.bytes).sum();
        let outgoing_bytes = self.sending.bytes() + self.merged.as_ref().map_or(0, Outgoing::bytes);
        self.reservation.try_resize(self.merger.buffered_bytes() + merging_bytes + outgoing_bytes)?;
        Ok(())
    }

    /// Step 6: waits for the next event: the oldest round merged (once the round before it
    /// is out of `merged`), room in the output channel, an input's batch, the consumer
    /// taking the last batch (for step 3). In that order when several are ready: a merged
    /// round frees a thread for the next, a sent batch frees memory.
    async fn next_event(&mut self, tx: &Sender<Result<RecordBatch>>, idle_output: bool) -> Result<Flow> {
        let merging = !self.merging.is_empty();
        let (can_merge, can_send, can_pull) =
            (merging && self.merged.is_none(), !self.sending.batches.is_empty(), !self.pulling.is_empty());
        let (queue, pulling) = (&mut self.merging, &mut self.pulling);
        tokio::select! {
            biased;
            done = async { (&mut queue.front_mut().expect("a round is merging").handle).await }, if can_merge => {
                let (chunk, elapsed) = done.map_err(|e| DataFusionError::External(Box::new(e)))?;
                self.round_merged(chunk, elapsed)?;
            }
            permit = tx.reserve(), if can_send => {
                let Ok(permit) = permit else {
                    return Ok(Flow::Dropped);
                };
                return Ok(self.send(permit));
            }
            Some(arrival) = pulling.next(), if can_pull => {
                self.arrive(arrival, merging)?;
            }
            drained = tx.reserve_many(tx.max_capacity()), if idle_output => {
                if drained.is_err() {
                    return Ok(Flow::Dropped);
                }
            }
            else => return internal_err!("CoRankMergeExec: the merge waits on nothing"),
        }
        Ok(Flow::Go)
    }

    /// The oldest round merging is merged: it waits to be sent.
    fn round_merged(&mut self, chunk: crate::Result<MergedChunk>, elapsed: Duration) -> Result<()> {
        let Merging { bytes, .. } = self.merging.pop_front().expect("a round is merging");
        let chunk = chunk.map_err(to_datafusion)?;
        record_round(&self.metrics, &chunk, elapsed);
        self.merged = Some(Outgoing::new(chunk, bytes));
        Ok(())
    }

    /// Sends the next batch through `permit`, cut at `fetch` rows.
    fn send(&mut self, permit: Permit<'_, Result<RecordBatch>>) -> Flow {
        let batch = self.sending.pop().expect("a batch to send");
        let batch = match self.fetch {
            Some(f) if self.sent + batch.num_rows() > f => batch.slice(0, f - self.sent),
            _ => batch,
        };
        self.sent += batch.num_rows();
        if !self.output_started {
            self.trace(format_args!("first batch sent"));
        }
        self.output_started = true;
        if batch.num_rows() > 0 {
            self.metrics.record_batch(&batch);
            permit.send(Ok(batch));
        }
        if self.fetch.is_some_and(|f| self.sent >= f) {
            Flow::Done
        } else {
            Flow::Go
        }
    }

    /// Pushes what a pull gave into the frontier (a batch with its evaluated key columns,
    /// or the input's end) and parks the stream until it is pulled again; `merging`:
    /// whether a round merges meanwhile (a metric).
    fn arrive(&mut self, (i, item, stream): Arrival, merging: bool) -> Result<()> {
        match item {
            Some(Ok(batch)) => {
                if merging {
                    self.metrics.batches_while_merging.add(1);
                }
                let timer = self.metrics.baseline.elapsed_compute().timer();
                let keys = self.expr.iter().map(|e| e.expr.evaluate(&batch)?.into_array(batch.num_rows())).collect::<Result<Vec<_>>>()?;
                self.merger.push(i, batch, keys).map_err(|e| not_sorted(e, &self.expr))?;
                timer.done();
                self.idle[i] = Some(stream);
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => {
                self.merger.finish_input(i);
                Ok(())
            }
        }
    }
}

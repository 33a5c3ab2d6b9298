//! The task behind `CoRankSortExec`'s output stream: reads every input partition at once,
//! sorts chunks of each partition as they fill (off the async runtime, up to one chunk per
//! core at a time, each sort itself on rayon threads), spills runs to disk when the memory
//! pool says no, then produces the output.
//!
//! **Runs.** A run is one chunk: consecutive rows of one input partition, sorted stably into
//! batches of `batch_size` rows. On the CPU a chunk is sorted as pieces of at most
//! [`PIECE_ROWS`] rows, each sorted and gathered on its own in cache, in parallel, then the
//! pieces' keys are merged and the chunk gathered from its sorted pieces; on the GPU the
//! chunk is sorted as a whole and gathered from its input batches (`sort_chunk`). At the end
//! the runs, in memory or spilled, are merged by the merge node's task ([`MergeTask`]: the
//! frontier merge in rounds, on the engine of the settings; its first round one batch, so
//! that it comes early). Once some run is spilled, the runs still in memory are spilled too.
//!
//! **Many runs.** One merge takes at most [`MAX_MERGE_FAN_IN`] runs (and, of spill files,
//! no more than the pool holds the windows of): the merge's work per input batch and per
//! round grows with its inputs, so one merge of thousands of tiny runs was quadratic. More
//! runs are first merged down in groups of consecutive runs, level by level, each group by
//! the same merge task into a run in memory or a spill file (`RunMerges::merge_down`):
//! O(n log k) in all. A spill writes each partition's runs in memory as one file, merged
//! (they are consecutive in the tie order), not a file per chunk.
//!
//! **The whole input on the device** (`super::sort_device`). Where the GPU sorts and every
//! column is one the device gathers, no chunk is cut while the input is read: once it is
//! all in, it is sorted as one chunk and every column gathered on the device, and that is
//! the output, with no merge at all; where the pool, the device's memory or the device
//! says no, the deferred chunks are sorted and merged as above.
//!
//! **Why runs are gathered before the merge.** Every gather reads its sources front to
//! back, and each reads from few at once: a piece's rows (in cache), a chunk's pieces (one
//! line per piece and column), the runs (one batch each). The earlier design merged all
//! runs' keys into one permutation and gathered it from every sorted piece at once: each
//! output row came from a different piece, a cache miss for every column of every row, and
//! nothing came out before that merge of every row was done (it was slower than stock).
//!
//! **Stability.** A chunk's sort is stable. Runs are keyed (partition, chunk) and merged in
//! that order, and every merge gives ties to the earlier run; a merge of a group of
//! consecutive runs takes their place in that order (the stable merge of `R1..Rk` is the
//! stable merge of the stable merges of consecutive groups, in order). So equal keys come
//! out in partition order, then row order: the stable sort of the partitions'
//! concatenation, for every chunk size and number of runs, whether runs were spilled or not.
//!
//! **Memory.** Every input batch is counted in the node's reservation (a spillable
//! `MemoryConsumer`) when it arrives, a run at its sorted batches' size once sorted.
//! When the reservation cannot grow, every partition's unfinished chunk is sorted and every
//! run in memory is written to a spill file (Arrow IPC, through DataFusion's `SpillManager`
//! and the runtime's `DiskManager`), then the batch is counted again: a second refusal, or no
//! disk manager, is the pool's `ResourcesExhausted` error. Before runs in memory are merged,
//! the merge's reservation must hold two output rounds; a pool that refuses spills every run
//! and merges the spill files instead. Each run in memory then keeps its batches counted
//! until the merge pulls them (two batches late: the merge reads two ahead), and the merge
//! counts its windows, rounds and output in its own reservation. The spill merge holds at
//! most `min(window_rows, batch_size)` rows per run (plus a batch) in that reservation. A
//! merge in between of runs in memory counts its output run in the node's reservation as it
//! comes (where the pool refuses, every run spills); of spill files, it writes a spill file.
//! The sort itself (key words, indices, a chunk's sorted pieces while it is gathered, the
//! merge of a partition's runs as it spills them) uses memory that is not counted, as
//! `SortExec`'s does beyond `sort_spill_reservation_bytes`.

//!
//! The pieces, one concept a file: chunks and their sort (`super::sort_chunk`), the ingest
//! state (`super::sort_runs`), runs and spill files (`super::sort_spill`), the merges of
//! runs (`super::sort_merge`), the whole input on the device (`super::sort_device`), the
//! metrics (`super::metrics`); this file drives them.

use super::error::out_of_memory;
use super::exec::MergeSettings;
use super::merge_inputs::next_batch;
use super::metrics::MergeMetrics;
pub use super::metrics::SortMetrics;
pub use super::sort_chunk::DEFAULT_CHUNK_ROWS;
use super::sort_merge::{merge_window_rows, RunMerges};
use super::sort_runs::Runs;
use super::sort_spill::Run;
use super::stream::MergeTask;
use crate::sort::SortBatchesOptions;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::common::spawn_buffered;
use datafusion::physical_plan::{SendableRecordBatchStream, SpillManager};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

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

impl SortTask {
    /// Reads, sorts, spills and merges, sending the sorted batches to `tx`; returns when
    /// all are sent or the receiver was dropped.
    pub async fn run(self, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let SortTask { inputs, schema, expr, settings, chunk_rows, batch_size, reservation, merge_reservation, spill, metrics } = self;
        let SortMetrics { merge: merge_metrics, runs: runs_count, runs_gpu, sort_time, merge_fan_in, merge_passes } = metrics;
        let n = inputs.len();
        let options = SortBatchesOptions { engine: settings.engine, batch_size: batch_size.max(1) };
        let elapsed_compute = merge_metrics.baseline.elapsed_compute().clone();
        let mut state =
            Runs::new((n, &schema), &expr, options, chunk_rows, reservation, spill, (runs_count, runs_gpu, sort_time, elapsed_compute));
        // 1. Read every partition at once, sorting chunks as they fill.
        state.ingest(inputs).await?;
        // 1b. Chunks deferred to the end (nothing spilled): the whole input sorted on the
        //     device is the output; else the chunks are sorted now, as step 1 would have.
        if state.defer {
            state.defer = false;
            if let Some(batches) = state.sort_whole(&schema).await? {
                // The output reservation (in `state`) lives until every batch is sent.
                return send_run(futures::stream::iter(batches.into_iter().map(Ok)), &tx, &merge_metrics).await;
            }
            for i in 0..n {
                state.start_sort(i);
            }
            while let Some(done) = state.sorting.next().await {
                state.finish_sort(done).await?;
            }
        }
        // 2. Room for the merge's output rounds, or every run spills.
        let mut spilled = state.make_room_to_merge(&merge_reservation, batch_size).await?;
        // 3. The runs in (partition, chunk) order: the merge's inputs in tie order. More than
        //    MAX_MERGE_FAN_IN are first merged down, in groups of consecutive runs, to at most
        //    that many. A run in memory hands its part of the reservation to its stream.
        let Runs { runs, spill, reservation, .. } = state;
        let merges = RunMerges {
            schema: &schema,
            expr: &expr,
            settings: &settings,
            batch_size,
            spill: spill.as_ref(),
            reservation: &reservation,
            merge_reservation: &merge_reservation,
            metrics: &merge_metrics,
            merge_fan_in: &merge_fan_in,
            merge_passes: &merge_passes,
        };
        let runs = merges.merge_down(runs.into_values().collect(), &mut spilled).await?;
        let mut streams = runs.into_iter().map(|run| merges.stream(run)).collect::<Result<Vec<_>>>()?;
        drop(reservation);
        if streams.len() <= 1 {
            // One run (or none) is the output as it is.
            return match streams.pop() {
                Some(run) => send_run(run, &tx, &merge_metrics).await,
                None => send_run(futures::stream::empty(), &tx, &merge_metrics).await,
            };
        }
        let window_rows = merge_window_rows(&settings, batch_size, spilled);
        merge_fan_in.set_max(streams.len());
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

impl Runs {
    /// Step 1: reads every partition at once (each polled by its own task, two batches
    /// ahead) and sorts chunks as they fill, at most one per core at a time (reading pauses
    /// meanwhile: the sorts use every core).
    async fn ingest(&mut self, inputs: Vec<SendableRecordBatchStream>) -> Result<()> {
        let mut pulling: FuturesUnordered<_> = inputs.into_iter().enumerate().map(|(i, s)| next_batch(i, spawn_buffered(s, 2))).collect();
        loop {
            tokio::select! {
                biased;
                Some(done) = self.sorting.next(), if !self.sorting.is_empty() => self.finish_sort(done).await?,
                Some((i, item, stream)) = pulling.next(), if !pulling.is_empty() && self.sorting.len() < self.max_sorting && self.queued.is_empty() => match item {
                    Some(Ok(batch)) => {
                        self.push(i, batch).await?;
                        pulling.push(next_batch(i, stream));
                    }
                    Some(Err(e)) => return Err(e),
                    None if self.defer => {}
                    None => self.start_sort(i),
                },
                else => break,
            }
        }
        Ok(())
    }

    /// Step 2, once every chunk is sorted: where nothing spilled, the runs in memory are
    /// merged if the pool holds two output rounds besides them; else (or once anything
    /// spilled) every run spills: memory for the merge's windows. (Runs sorted after the last
    /// spill are still in memory then: they spill too, or the merge of the spill files finds
    /// the pool full.) Returns whether the runs are spilled.
    async fn make_room_to_merge(&mut self, merge_reservation: &MemoryReservation, batch_size: usize) -> Result<bool> {
        if self.runs.values().any(|r| matches!(r, Run::Spilled { .. })) {
            if let Some(spill) = self.spill.clone() {
                self.spill_memory_runs(&spill).await?;
            }
            return Ok(true);
        }
        let (rows, in_bytes) = self.runs.values().fold((0, 0), |(r, b), run| match run {
            Run::Memory { batches, bytes } => (r + batches.iter().map(|b| b.num_rows()).sum::<usize>(), b + bytes),
            Run::Spilled { .. } => (r, b),
        });
        let round_rows = output_round_rows(batch_size).min(rows);
        let round_bytes = (in_bytes as u128 * round_rows as u128 / rows.max(1) as u128) as usize;
        if merge_reservation.try_grow(2 * round_bytes).is_ok() {
            // The merge counts what it holds from here on.
            merge_reservation.shrink(2 * round_bytes);
            Ok(false)
        } else if self.spill.is_none() {
            let e = DataFusionError::ResourcesExhausted(format!("no room for {} bytes of output rounds", 2 * round_bytes));
            Err(out_of_memory(e, false))
        } else if let Some(spill) = self.spill.clone() {
            self.spill_memory_runs(&spill).await?;
            Ok(true)
        } else {
            Ok(false)
        }
    }
}

/// Sends one sorted run's batches as the output, as they come; returns when all are sent or
/// the receiver was dropped.
async fn send_run(
    mut run: impl futures::Stream<Item = Result<RecordBatch>> + Unpin,
    tx: &Sender<Result<RecordBatch>>,
    metrics: &MergeMetrics,
) -> Result<()> {
    while let Some(batch) = run.next().await {
        let batch = batch?;
        metrics.record_batch(&batch);
        if tx.send(Ok(batch)).await.is_err() {
            return Ok(()); // the output stream was dropped
        }
    }
    metrics.baseline.done();
    Ok(())
}

/// Rows of an output round of the merge of runs in memory, as the room check before it
/// counts them: whole batches, about [`CPU_ROUND_ROWS`](super::stream::CPU_ROUND_ROWS).
fn output_round_rows(batch_size: usize) -> usize {
    let batch_size = batch_size.max(1);
    (super::stream::CPU_ROUND_ROWS / batch_size).max(1) * batch_size
}

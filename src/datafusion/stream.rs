//! The task behind `CoRankMergeExec`'s output stream: pulls the input partitions, runs the
//! frontier merge round by round (off the async runtime), sends merged batches.

use super::exec::MergeSettings;
use crate::frontier::{FrontierMerge, FrontierOptions};
use crate::options::Engine;
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::common::spawn_buffered;
use datafusion::physical_plan::metrics::{BaselineMetrics, Count, ExecutionPlanMetricsSet, MetricBuilder, Time};
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use tokio::sync::mpsc::Sender;

/// The node's metrics: output rows and compute time (baseline), rounds per engine, bytes
/// of keys up to and indices down from the GPU, and the time spent in GPU rounds.
pub struct MergeMetrics {
    pub baseline: BaselineMetrics,
    pub output_batches: Count,
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
            output_batches: MetricBuilder::new(set).counter("output_batches_merged", partition),
            rounds_cpu: MetricBuilder::new(set).counter("rounds_cpu", partition),
            rounds_gpu: MetricBuilder::new(set).counter("rounds_gpu", partition),
            gpu_bytes_up: MetricBuilder::new(set).counter("gpu_bytes_up", partition),
            gpu_bytes_down: MetricBuilder::new(set).counter("gpu_bytes_down", partition),
            gpu_time: MetricBuilder::new(set).subset_time("gpu_time", partition),
        }
    }
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

impl MergeTask {
    /// Drives the merge, sending batches to `tx`; returns when the output is complete,
    /// `fetch` rows were sent, or the receiver was dropped (cancellation).
    pub async fn run(self, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let MergeTask { inputs, schema, expr, fetch, settings, check_sorted, batch_size, reservation, metrics } = self;
        let n = inputs.len();
        let key_types: Vec<DataType> = expr.iter().map(|e| e.expr.data_type(&schema)).collect::<Result<_>>()?;
        let specs: Vec<SortKey> = expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect();
        let options = FrontierOptions { engine: settings.engine, window_rows: settings.window_rows, batch_size, check_sorted };
        let mut merger = Some(FrontierMerge::new(schema, &key_types, specs, n, options).map_err(to_datafusion)?);
        // Each input is polled by its own task, two batches ahead, so inputs read in parallel.
        let mut inputs: Vec<SendableRecordBatchStream> = inputs.into_iter().map(|s| spawn_buffered(s, 2)).collect();
        let mut sent = 0usize;
        loop {
            // 1. Fill every input up to its window (or its end).
            let m = merger.as_mut().expect("the merger is returned after every round");
            for (i, input) in inputs.iter_mut().enumerate() {
                while m.wants(i) {
                    match input.next().await {
                        Some(Ok(batch)) => {
                            let keys =
                                expr.iter().map(|e| e.expr.evaluate(&batch)?.into_array(batch.num_rows())).collect::<Result<Vec<_>>>()?;
                            m.push(i, batch, keys).map_err(|e| not_sorted(e, &expr))?;
                            reservation.try_resize(m.buffered_bytes())?;
                        }
                        Some(Err(e)) => return Err(e),
                        None => m.finish_input(i),
                    }
                }
            }
            if m.is_finished() {
                break;
            }
            // 2. One round, on a blocking thread (the merge is CPU or GPU work).
            let mut m = merger.take().expect("taken once per round");
            let timer = metrics.baseline.elapsed_compute().timer();
            let started = std::time::Instant::now();
            let (m, chunk) = tokio::task::spawn_blocking(move || {
                let chunk = m.merge_round();
                (m, chunk)
            })
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
            timer.done();
            let chunk = chunk.map_err(to_datafusion)?;
            reservation.try_resize(m.buffered_bytes())?;
            merger = Some(m);
            match chunk.engine {
                Engine::Gpu => {
                    metrics.rounds_gpu.add(1);
                    metrics.gpu_bytes_up.add(chunk.key_bytes);
                    metrics.gpu_bytes_down.add(chunk.rows * if chunk.rows <= u32::MAX as usize { 4 } else { 8 });
                    metrics.gpu_time.add_duration(started.elapsed());
                }
                _ => metrics.rounds_cpu.add(1),
            }
            // 3. Send, stopping at `fetch` rows.
            for batch in chunk.batches {
                let batch = match fetch {
                    Some(f) if sent + batch.num_rows() > f => batch.slice(0, f - sent),
                    _ => batch,
                };
                if batch.num_rows() == 0 {
                    break;
                }
                sent += batch.num_rows();
                metrics.output_batches.add(1);
                metrics.baseline.record_output(batch.num_rows());
                if tx.send(Ok(batch)).await.is_err() {
                    return Ok(()); // the stream was dropped: stop, buffers are freed on return
                }
            }
            if fetch.is_some_and(|f| sent >= f) {
                break;
            }
        }
        metrics.baseline.done();
        Ok(())
    }
}

//! The metrics of corank's nodes: the merge node's ([`MergeMetrics`]: output, rounds per
//! engine, GPU traffic, the pipelining) and the sort node's ([`SortMetrics`]: the merge's,
//! plus the runs, the sort time, the merges in between), and how a merged round or a merge
//! in between is counted in them.

use crate::frontier::MergedChunk;
use crate::options::Engine;
use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use datafusion::physical_plan::metrics::{BaselineMetrics, Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder, Time};
use std::time::Duration;

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

/// Counts a merged round in the metrics (`elapsed`: its merge and gather).
pub(super) fn record_round(metrics: &MergeMetrics, chunk: &MergedChunk, elapsed: Duration) {
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

/// The node's metrics: the merge's (output rows, elapsed compute, which also counts the
/// chunk sorts and the merges in between, rounds), the runs sorted, the time spent sorting
/// them, the most inputs one merge of the node took (`merge_fan_in`: the merge's work per
/// input batch and per round grows with it; at most
/// [`MAX_MERGE_FAN_IN`](super::sort_merge::MAX_MERGE_FAN_IN)) and the levels of
/// merges in between (`merge_passes`). Spills are counted by the `SpillManager`
/// (`spill_count`: files, the merges' in between included; `spilled_bytes`, `spilled_rows`).
pub struct SortMetrics {
    pub merge: MergeMetrics,
    pub runs: Count,
    /// Runs the device sorted: chunks, or the whole input at once (`gpu_bytes_up` and
    /// `gpu_time` count the merges' rounds only).
    pub runs_gpu: Count,
    pub sort_time: Time,
    pub merge_fan_in: Gauge,
    /// Levels of merges in between (`MAX_MERGE_FAN_IN`).
    pub merge_passes: Count,
}

impl SortMetrics {
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            merge: MergeMetrics::new(set, partition),
            runs: MetricBuilder::new(set).counter("runs", partition),
            runs_gpu: MetricBuilder::new(set).counter("runs_gpu", partition),
            sort_time: MetricBuilder::new(set).subset_time("sort_time", partition),
            merge_fan_in: MetricBuilder::new(set).gauge("merge_fan_in", partition),
            merge_passes: MetricBuilder::new(set).counter("merge_passes", partition),
        }
    }
}

/// Adds a merge's compute time and rounds (in `set`) to the node's metrics.
pub(super) fn add_merge_work(node: &MergeMetrics, set: &ExecutionPlanMetricsSet) {
    let m = set.clone_inner();
    let value = |name: &str| m.sum_by_name(name).map_or(0, |v| v.as_usize());
    node.baseline.elapsed_compute().add_duration(Duration::from_nanos(m.elapsed_compute().unwrap_or(0) as u64));
    node.rounds_cpu.add(value("rounds_cpu"));
    node.rounds_gpu.add(value("rounds_gpu"));
    node.gpu_bytes_up.add(value("gpu_bytes_up"));
    node.gpu_bytes_down.add(value("gpu_bytes_down"));
    node.gpu_time.add_duration(Duration::from_nanos(value("gpu_time") as u64));
    node.batches_while_merging.add(value("input_batches_while_merging"));
}

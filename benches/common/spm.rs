//! Shared by the benches: sorted runs handed to DataFusion as one partition each, cut into
//! fixed-size batches, and `SortPreservingMergeExec` over them (round-robin tie breaker off).
#![allow(dead_code)] // each bench uses what it needs

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use std::sync::Arc;

/// One in-memory partition per run, each fed as `batch`-row batches, and the ascending
/// (nulls last) ordering on `keys` that every partition satisfies.
pub fn batched_source(runs: &[RecordBatch], keys: &[&str], batch: usize) -> (Arc<dyn ExecutionPlan>, LexOrdering) {
    let schema = runs[0].schema();
    let partitions: Vec<Vec<RecordBatch>> =
        runs.iter().map(|b| (0..b.num_rows()).step_by(batch).map(|s| b.slice(s, batch.min(b.num_rows() - s))).collect()).collect();
    let source = MemorySourceConfig::try_new_exec(&partitions, schema.clone(), None).unwrap();
    let ordering = LexOrdering::new(
        keys.iter().map(|k| PhysicalSortExpr::new(col(k, &schema).unwrap(), SortOptions { descending: false, nulls_first: false })),
    )
    .unwrap();
    (source, ordering)
}

/// SortPreservingMergeExec over [`batched_source`], round robin off.
pub fn spm_plan(runs: &[RecordBatch], keys: &[&str], batch: usize) -> Arc<dyn ExecutionPlan> {
    let (source, ordering) = batched_source(runs, keys, batch);
    Arc::new(SortPreservingMergeExec::new(ordering, source).with_round_robin_repartition(false))
}

/// A task context whose operators emit `batch`-row batches.
pub fn task_context(batch: usize) -> Arc<TaskContext> {
    Arc::new(TaskContext::default().with_session_config(SessionConfig::new().with_batch_size(batch)))
}

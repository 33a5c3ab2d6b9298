//! `CoRankSortExec`: the plan node that replaces `SortExec` (and the
//! `SortPreservingMergeExec` above a `SortExec` that preserves partitioning).
//!
//! It reads every input partition at once and produces one sorted output partition: each
//! partition's rows are cut into chunks of at most `chunk_rows` rows (or
//! [`CHUNK_BYTES`](super::sort_stream::CHUNK_BYTES)), each chunk is sorted off the async
//! runtime by the crate's sort ([`crate::sort::sort_columns`], on the engine of the settings)
//! into a sorted run (several chunks at once, one per core), runs that do not fit
//! DataFusion's `MemoryPool` are spilled to disk through the runtime's `DiskManager`, and
//! the runs, in memory or spilled, are merged by the frontier merge
//! ([`super::stream::MergeTask`], as `CoRankMergeExec` merges), at most
//! [`MAX_MERGE_FAN_IN`](super::sort_stream::MAX_MERGE_FAN_IN) runs a merge (more are merged
//! down first, in groups of consecutive runs). See [`super::sort_stream`].
//!
//! **Order.** The output is the **stable sort of the concatenation of the input partitions
//! in partition order**: equal keys keep partition order, then row order within a
//! partition. (A chunk holds consecutive rows of one partition, its sort is stable, and the
//! merges take runs ordered by (partition, chunk), ties to the earlier run.) Stock
//! `SortExec` + `SortPreservingMergeExec` order ties by neither.
//!
//! Dropping the output stream aborts the task that reads, sorts and merges; a sort on a
//! blocking thread finishes its chunk and its result is dropped. A memory pool too small
//! for one batch more, with nothing left to spill or no disk manager, is a
//! `ResourcesExhausted` error, as with `SortExec`.

use super::exec::MergeSettings;
use super::sort_stream::{SortMetrics, SortTask, DEFAULT_CHUNK_ROWS};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, CardinalityEffect, EmissionType, EvaluationType, SchedulingType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet, SpillMetrics};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
    SendableRecordBatchStream, SpillManager,
};
use std::sync::Arc;

/// Output batches the node's task may send ahead of the consumer. A whole sort's output is
/// all in memory when its first batch goes (the batches are slices of it), and handing its
/// many batches over two at a time cost more than the sort (`docs/performance.md`). The
/// merge counts a batch until it is sent: up to this many batches in the channel, not yet
/// taken, are not counted in the pool.
const OUTPUT_BATCHES_AHEAD: usize = 16;

/// Sorts all partitions of its input into one sorted partition with corank.
///
/// [`CoRankRule`](super::CoRankRule) puts it in place of `SortExec`; a plan can also hold
/// it directly:
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use corank::datafusion::{CoRankSortExec, MergeSettings};
/// use corank::{Engine, EngineOptions};
/// use datafusion::datasource::memory::MemorySourceConfig;
/// use datafusion::execution::TaskContext;
/// use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
/// use datafusion::physical_plan::{collect, expressions::col};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> datafusion::common::Result<()> {
/// let batch = |k: Vec<i64>| RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as _)]).unwrap();
/// let (a, b) = (batch(vec![5, 1, 4]), batch(vec![3, 2]));
/// let schema = a.schema();
/// let input = MemorySourceConfig::try_new_exec(&[vec![a], vec![b]], schema.clone(), None)?;
/// let order = LexOrdering::new([PhysicalSortExpr::new_default(col("k", &schema)?)]).unwrap();
/// let settings = MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu), ..Default::default() };
/// let sort = CoRankSortExec::new(order, input).with_settings(settings).with_chunk_rows(2);
/// let out = collect(Arc::new(sort), Arc::new(TaskContext::default())).await?;
/// let k = arrow::compute::concat_batches(&schema, &out)?;
/// assert_eq!(k.column(0).as_ref(), &Int64Array::from(vec![1, 2, 3, 4, 5]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CoRankSortExec {
    input: Arc<dyn ExecutionPlan>,
    expr: LexOrdering,
    settings: MergeSettings,
    /// Rows per sorted chunk (per input partition) before it becomes a run.
    chunk_rows: usize,
    metrics: ExecutionPlanMetricsSet,
    cache: Arc<PlanProperties>,
}

impl CoRankSortExec {
    /// A node sorting all of `input`'s partitions by `expr` into one: the default
    /// [`MergeSettings`] (those of the `corank.*` defaults) and chunks of
    /// `corank.sort_chunk_rows`' default, 8,388,608 rows.
    pub fn new(expr: LexOrdering, input: Arc<dyn ExecutionPlan>) -> Self {
        let cache = Arc::new(Self::compute_properties(&input, expr.clone()));
        Self {
            input,
            expr,
            settings: MergeSettings::default(),
            chunk_rows: DEFAULT_CHUNK_ROWS,
            metrics: ExecutionPlanMetricsSet::new(),
            cache,
        }
    }

    /// The engine of the chunk sorts and of the merge, and the merge's window.
    pub fn with_settings(mut self, settings: MergeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Rows per chunk (at least 1): each input partition's rows are sorted in chunks of this
    /// many rows (fewer where `CHUNK_BYTES`, 256 MiB, is reached
    /// first, or memory runs short), each a run of the final merge. The result is the same
    /// for every chunk size.
    pub fn with_chunk_rows(mut self, chunk_rows: usize) -> Self {
        self.chunk_rows = chunk_rows.max(1);
        self
    }

    /// The input plan, whose partitions are sorted.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The order the rows are sorted by.
    pub fn expr(&self) -> &LexOrdering {
        &self.expr
    }

    /// The engine of the chunk sorts and of the merge, and the merge's window.
    pub fn settings(&self) -> &MergeSettings {
        &self.settings
    }

    /// Rows per chunk ([`with_chunk_rows`](Self::with_chunk_rows)).
    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    /// As `SortExec::compute_properties` without `preserve_partitioning`: one partition,
    /// the input's equivalences reordered by the sort ordering, all output at the end (an
    /// unbounded input would need unbounded memory: the rule leaves those to `SortExec`).
    fn compute_properties(input: &Arc<dyn ExecutionPlan>, ordering: LexOrdering) -> PlanProperties {
        let mut eq = input.equivalence_properties().clone();
        eq.clear_per_partition_constants();
        if eq.reorder(ordering.clone()).is_err() {
            // Only the ordering is then known (never a claim the output does not hold).
            eq = EquivalenceProperties::new(input.schema());
            eq.add_ordering(ordering);
        }
        let boundedness = match input.boundedness() {
            Boundedness::Unbounded { .. } => Boundedness::Unbounded { requires_infinite_memory: true },
            bounded => bounded,
        };
        PlanProperties::new(eq, Partitioning::UnknownPartitioning(1), EmissionType::Final, boundedness)
            .with_evaluation_type(EvaluationType::Eager)
            .with_scheduling_type(SchedulingType::Cooperative)
    }
}

impl DisplayAs for CoRankSortExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "CoRankSortExec: expr=[{}], engine={}", self.expr, self.settings.engine)?;
                if self.chunk_rows != DEFAULT_CHUNK_ROWS {
                    write!(f, ", chunk_rows={}", self.chunk_rows)?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => {
                writeln!(f, "engine={}", self.settings.engine)?;
                super::exec::fmt_sort_exprs_sql(&self.expr, f)
            }
        }
    }
}

impl ExecutionPlan for CoRankSortExec {
    fn name(&self) -> &'static str {
        "CoRankSortExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::Equal
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::UnspecifiedDistribution]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(&self, f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>) -> Result<TreeNodeRecursion> {
        super::exec::apply_to_sort_exprs(&self.expr, f)
    }

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("CoRankSortExec takes one child, got {}", children.len());
        }
        Ok(Arc::new(
            CoRankSortExec::new(self.expr.clone(), children.swap_remove(0))
                .with_settings(self.settings.clone())
                .with_chunk_rows(self.chunk_rows),
        ))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("CoRankSortExec has one output partition, asked for {partition}");
        }
        let inputs = super::exec::execute_every_partition(&self.input, &context)?;
        let runtime = context.runtime_env();
        let reservation = MemoryConsumer::new(format!("CoRankSortExec[{partition}]")).with_can_spill(true).register(&runtime.memory_pool);
        let merge_reservation = MemoryConsumer::new(format!("CoRankSortExec[{partition}] merge")).register(&runtime.memory_pool);
        let schema = self.schema();
        let spill = runtime.disk_manager.tmp_files_enabled().then(|| {
            SpillManager::new(Arc::clone(&runtime), SpillMetrics::new(&self.metrics, partition), Arc::clone(&schema))
                .with_compression_type(context.session_config().spill_compression())
        });
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&schema), OUTPUT_BATCHES_AHEAD);
        let tx = builder.tx();
        let task = SortTask {
            inputs,
            schema,
            expr: self.expr.clone(),
            settings: self.settings.clone(),
            chunk_rows: self.chunk_rows,
            batch_size: context.session_config().batch_size(),
            reservation,
            merge_reservation,
            spill,
            metrics: SortMetrics::new(&self.metrics, partition),
        };
        builder.spawn(task.run(tx));
        Ok(builder.build())
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

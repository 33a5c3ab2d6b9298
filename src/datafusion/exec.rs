//! `CoRankMergeExec`: the plan node that replaces `SortPreservingMergeExec`.
//!
//! Same properties (one output partition, the input ordering, `fetch`), same output as
//! SPM with its round-robin tie breaker off: stable, ties go to the lower input partition.
//! It streams with the frontier rule ([`crate::frontier::FrontierMerge`]): memory stays within
//! `window_rows` rows per input partition, accounted in DataFusion's `MemoryPool` (a budget
//! too small is a `ResourcesExhausted` error). Dropping the output stream aborts the task
//! that drives the inputs and the merge, which frees its buffers.

pub use super::config::MergeSettings;
use super::metrics::MergeMetrics;
use super::stream::MergeTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, OrderingRequirements, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{CardinalityEffect, EvaluationType, SchedulingType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use std::sync::Arc;

/// Merges the sorted partitions of its input into one sorted partition with corank.
///
/// [`CoRankRule`](super::CoRankRule) puts it in place of `SortPreservingMergeExec`; a plan
/// can also hold it directly:
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use corank::datafusion::{CoRankMergeExec, MergeSettings};
/// use corank::{Engine, EngineOptions};
/// use datafusion::datasource::memory::MemorySourceConfig;
/// use datafusion::execution::TaskContext;
/// use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
/// use datafusion::physical_plan::{collect, expressions::col};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> datafusion::common::Result<()> {
/// let batch = |k: Vec<i64>| RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as _)]).unwrap();
/// let (a, b) = (batch(vec![1, 4, 6]), batch(vec![2, 3, 5]));
/// let schema = a.schema();
/// // Two partitions, each sorted by k.
/// let input = MemorySourceConfig::try_new_exec(&[vec![a], vec![b]], schema.clone(), None)?;
/// let order = LexOrdering::new([PhysicalSortExpr::new_default(col("k", &schema)?)]).unwrap();
/// let settings = MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu), ..Default::default() };
/// let merge = CoRankMergeExec::new(order, input).with_settings(settings).with_fetch(Some(4));
/// let out = collect(Arc::new(merge), Arc::new(TaskContext::default())).await?;
/// let rows: usize = out.iter().map(|b| b.num_rows()).sum();
/// assert_eq!(rows, 4);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CoRankMergeExec {
    input: Arc<dyn ExecutionPlan>,
    expr: LexOrdering,
    fetch: Option<usize>,
    settings: MergeSettings,
    /// Check every input partition's order while merging (`corank.check_sorted`).
    check_sorted: bool,
    metrics: ExecutionPlanMetricsSet,
    cache: Arc<PlanProperties>,
}

impl CoRankMergeExec {
    /// A node merging `input`'s partitions, each sorted by `expr`, into one: the default
    /// [`MergeSettings`] (those of the `corank.*` defaults), no fetch, no order check.
    pub fn new(expr: LexOrdering, input: Arc<dyn ExecutionPlan>) -> Self {
        let cache = Arc::new(Self::compute_properties(&input, expr.clone()));
        Self {
            input,
            expr,
            fetch: None,
            settings: MergeSettings::default(),
            check_sorted: false,
            metrics: ExecutionPlanMetricsSet::new(),
            cache,
        }
    }

    /// Stops after `fetch` rows (`None`, the default: every row), as
    /// `SortPreservingMergeExec`'s fetch does.
    pub fn with_fetch(mut self, fetch: Option<usize>) -> Self {
        self.fetch = fetch;
        self
    }

    /// The engine and the window of the merge.
    pub fn with_settings(mut self, settings: MergeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Checks every input partition's order while merging: a partition out of order is an
    /// error naming the partition and the row, never wrong rows.
    pub fn with_check_sorted(mut self, check: bool) -> Self {
        self.check_sorted = check;
        self
    }

    /// Whether the node checks its input partitions' order
    /// ([`with_check_sorted`](Self::with_check_sorted)).
    pub fn check_sorted(&self) -> bool {
        self.check_sorted
    }

    /// The input plan, whose partitions are merged.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The order the partitions are sorted and merged by.
    pub fn expr(&self) -> &LexOrdering {
        &self.expr
    }

    /// The engine and window of the merge.
    pub fn settings(&self) -> &MergeSettings {
        &self.settings
    }

    /// As `SortPreservingMergeExec::compute_properties`: one partition, the input's
    /// equivalences plus the merge ordering.
    fn compute_properties(input: &Arc<dyn ExecutionPlan>, ordering: LexOrdering) -> PlanProperties {
        let (drive, scheduling) = if input.output_partitioning().partition_count() > 1 {
            (EvaluationType::Eager, SchedulingType::Cooperative)
        } else {
            (input.properties().evaluation_type, input.properties().scheduling_type)
        };
        let mut eq = input.equivalence_properties().clone();
        eq.clear_per_partition_constants();
        eq.add_ordering(ordering);
        PlanProperties::new(eq, Partitioning::UnknownPartitioning(1), input.pipeline_behavior(), input.boundedness())
            .with_evaluation_type(drive)
            .with_scheduling_type(scheduling)
    }
}

/// `apply_expressions` of corank's nodes, whose expressions are their sort expressions: `f`
/// on each in order, until one returns `Stop`.
pub(crate) fn apply_to_sort_exprs(
    expr: &LexOrdering,
    f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
) -> Result<TreeNodeRecursion> {
    let mut recursion = TreeNodeRecursion::Continue;
    for e in expr.iter() {
        recursion = f(&e.expr)?;
        if recursion == TreeNodeRecursion::Stop {
            break;
        }
    }
    Ok(recursion)
}

/// The streams of every partition of `input`, in partition order (corank's nodes read them
/// all at once).
pub(crate) fn execute_every_partition(
    input: &Arc<dyn ExecutionPlan>,
    context: &Arc<TaskContext>,
) -> Result<Vec<SendableRecordBatchStream>> {
    let n = input.output_partitioning().partition_count();
    (0..n).map(|p| input.execute(p, Arc::clone(context))).collect()
}

/// The sort expressions as SQL, comma-separated (the tree rendering of corank's nodes).
pub(crate) fn fmt_sort_exprs_sql(expr: &LexOrdering, f: &mut std::fmt::Formatter) -> std::fmt::Result {
    for (i, e) in expr.iter().enumerate() {
        if i > 0 {
            write!(f, ", ")?;
        }
        e.fmt_sql(f)?;
    }
    Ok(())
}

impl DisplayAs for CoRankMergeExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "CoRankMergeExec: [{}]", self.expr)?;
                if let Some(fetch) = self.fetch {
                    write!(f, ", fetch={fetch}")?;
                }
                write!(f, ", engine={}", self.settings.engine)?;
                if self.check_sorted {
                    write!(f, ", check_sorted")?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => {
                if let Some(fetch) = self.fetch {
                    writeln!(f, "limit={fetch}")?;
                }
                writeln!(f, "engine={}", self.settings.engine)?;
                if self.check_sorted {
                    writeln!(f, "check_sorted")?;
                }
                fmt_sort_exprs_sql(&self.expr, f)
            }
        }
    }
}

impl ExecutionPlan for CoRankMergeExec {
    fn name(&self) -> &'static str {
        "CoRankMergeExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.cache
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        Some(Arc::new(Self { fetch: limit, metrics: ExecutionPlanMetricsSet::new(), ..self.clone() }))
    }

    fn supports_limit_pushdown(&self) -> bool {
        true
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        if self.fetch.is_none() {
            CardinalityEffect::Equal
        } else {
            CardinalityEffect::LowerEqual
        }
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::UnspecifiedDistribution]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        vec![Some(OrderingRequirements::from(self.expr.clone()))]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(&self, f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>) -> Result<TreeNodeRecursion> {
        apply_to_sort_exprs(&self.expr, f)
    }

    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return internal_err!("CoRankMergeExec takes one child, got {}", children.len());
        }
        Ok(Arc::new(
            CoRankMergeExec::new(self.expr.clone(), children.swap_remove(0))
                .with_fetch(self.fetch)
                .with_settings(self.settings.clone())
                .with_check_sorted(self.check_sorted),
        ))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("CoRankMergeExec has one output partition, asked for {partition}");
        }
        let inputs = execute_every_partition(&self.input, &context)?;
        let reservation = MemoryConsumer::new(format!("CoRankMergeExec[{partition}]")).register(&context.runtime_env().memory_pool);
        let metrics = MergeMetrics::new(&self.metrics, partition);
        let schema = self.schema();
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&schema), 2);
        let tx = builder.tx();
        let task = MergeTask {
            inputs,
            schema,
            expr: self.expr.clone(),
            fetch: self.fetch,
            settings: self.settings.clone(),
            check_sorted: self.check_sorted,
            batch_size: context.session_config().batch_size(),
            reservation,
            metrics,
        };
        builder.spawn(task.run(tx));
        Ok(builder.build())
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

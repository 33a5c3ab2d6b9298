//! `CoRankForeignRule`, the rule for hosts that see corank across DataFusion's FFI, run
//! where such a host puts it: appended after DataFusion's own rules (after
//! `SanityCheckPlan`), as datafusion-python's `add_physical_optimizer_rule` does. The plans
//! here are native, so the rule sees them as it sees foreign ones (names, properties,
//! statistics). The Python suite runs it across the FFI for real (python/tests/test_sql.py).
//!
//! Every query's rows are compared with the same query in a stock session: the key
//! columns equal in order, the rows equal as multisets (ties may come in another order).

use arrow::array::*;
use arrow::datatypes::*;
use corank::datafusion::CoRankForeignRule;
use datafusion::catalog::MemTable;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, Statistics};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::{
    collect, displayable, ChildStats, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, StatisticsArgs,
};
use datafusion::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// `parts` partitions of `rows` rows each: `k` sorted within each partition (many ties
/// across partitions), `v` unsorted, `id` unique.
fn table(parts: usize, rows: usize) -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("id", DataType::Int64, false),
    ]));
    let batches = (0..parts)
        .map(|p| {
            let k = Int64Array::from_iter_values((0..rows).map(|i| ((i * 7 + p * 3) / 5) as i64));
            let v = Int64Array::from_iter((0..rows).map(|i| (i % 11 != 3).then_some(((i * 7919 + p * 104_729) % 1000) as i64)));
            let id = Int64Array::from_iter_values((0..rows).map(|i| (p * rows + i) as i64));
            vec![RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(k), Arc::new(v), Arc::new(id)]).unwrap()]
        })
        .collect();
    MemTable::try_new(schema, batches).unwrap().with_sort_order(vec![vec![col("k").sort(true, false)]])
}

/// A session with `t` registered; with the rule appended after DataFusion's rules when
/// `corank`, and `settings` as the entries of a config extension that is not corank's (as
/// settings arrive across the FFI).
fn session(corank: bool, partitions: usize, settings: &[(&str, &str)]) -> SessionContext {
    session_over(corank, partitions, settings, 4)
}

/// [`session`] over a table of `parts` partitions.
fn session_over(corank: bool, partitions: usize, settings: &[(&str, &str)], parts: usize) -> SessionContext {
    let mut config = SessionConfig::new().with_target_partitions(partitions);
    if !settings.is_empty() {
        let entries = settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        config = config.with_option_extension(ForeignOptions(entries));
    }
    let mut rules = PhysicalOptimizer::new().rules;
    if corank {
        rules.push(Arc::new(CoRankForeignRule));
    }
    let state = SessionStateBuilder::new().with_config(config).with_default_features().with_physical_optimizer_rules(rules).build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_table("t", Arc::new(table(parts, 3000))).unwrap();
    ctx
}

/// What datafusion-ffi's `FFI_ExtensionOptions` looks like to the rule: entries under their
/// full names (`corank.engine`) in an extension of its own namespace.
#[derive(Debug, Clone)]
struct ForeignOptions(HashMap<String, String>);

impl ConfigExtension for ForeignOptions {
    const PREFIX: &'static str = "datafusion_ffi";
}

impl ExtensionOptions for ForeignOptions {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }
    fn set(&mut self, key: &str, value: &str) -> datafusion::common::Result<()> {
        self.0.insert(key.to_string(), value.to_string());
        Ok(())
    }
    fn entries(&self) -> Vec<ConfigEntry> {
        self.0.iter().map(|(k, v)| ConfigEntry { key: k.clone(), value: Some(v.clone()), description: "" }).collect()
    }
}

/// The plan's text and rows.
async fn run(ctx: &SessionContext, sql: &str) -> (String, Vec<RecordBatch>, Arc<dyn ExecutionPlan>) {
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let text = displayable(plan.as_ref()).indent(true).to_string();
    let rows = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    (text, rows, plan)
}

fn column(batches: &[RecordBatch], name: &str) -> Vec<Option<i64>> {
    batches
        .iter()
        .flat_map(|b| b.column_by_name(name).unwrap().as_any().downcast_ref::<Int64Array>().unwrap().iter().collect::<Vec<_>>())
        .collect()
}

fn rows(batches: &[RecordBatch]) -> Vec<(Option<i64>, Option<i64>, Option<i64>)> {
    let (k, v, id) = (column(batches, "k"), column(batches, "v"), column(batches, "id"));
    let mut all: Vec<_> = (0..k.len()).map(|i| (k[i], v[i], id[i])).collect();
    all.sort();
    all
}

/// Runs `sql` with the rule and in a stock session; checks the answers agree (`key` in the
/// same order, the same rows, or for a `LIMIT` over ties the same keys) and returns the
/// plan's text.
async fn compare(sql: &str, key: &str, partitions: usize, settings: &[(&str, &str)]) -> String {
    let (text, ours, _) = run(&session(true, partitions, settings), sql).await;
    let (stock_text, theirs, _) = run(&session(false, partitions, &[]), sql).await;
    assert_eq!(column(&ours, key), column(&theirs, key), "{sql}\n{text}\nstock:\n{stock_text}");
    if !sql.contains("LIMIT") {
        assert_eq!(rows(&ours), rows(&theirs), "{sql}\n{text}");
    }
    text
}

/// Node names from the root down the first child, as the plan's text shows them.
fn spine(text: &str) -> Vec<&str> {
    text.lines().map(|l| l.trim_start().split([':', ' ']).next().unwrap()).collect()
}

#[tokio::test]
async fn merge_goes_under_the_hosts_merge_node() {
    let text = compare("SELECT * FROM t ORDER BY k", "k", 4, &[]).await;
    assert_eq!(spine(&text)[..2], ["SortPreservingMergeExec", "CoRankMergeExec"], "{text}");
}

#[tokio::test]
async fn limit_stays_with_the_hosts_merge_node() {
    let text = compare("SELECT * FROM t ORDER BY k LIMIT 7", "k", 4, &[]).await;
    assert!(text.starts_with("SortPreservingMergeExec: [k@0 ASC NULLS LAST], fetch=7"), "{text}");
    assert_eq!(spine(&text)[1], "CoRankMergeExec", "{text}");
    let (_, batches, _) = run(&session(true, 4, &[]), "SELECT * FROM t ORDER BY k LIMIT 7").await;
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
}

#[tokio::test]
async fn sort_without_fetch_becomes_corank_sort_under_the_merge() {
    let text = compare("SELECT * FROM t ORDER BY v DESC NULLS LAST, id", "id", 4, &[]).await;
    assert_eq!(spine(&text)[..2], ["SortPreservingMergeExec", "CoRankSortExec"], "{text}");
}

#[tokio::test]
async fn sort_into_one_partition_becomes_corank_sort() {
    let sql = "SELECT * FROM t ORDER BY v, id";
    let (text, ours, _) = run(&session_over(true, 1, &[], 1), sql).await;
    let (_, theirs, _) = run(&session_over(false, 1, &[], 1), sql).await;
    assert_eq!(column(&ours, "id"), column(&theirs, "id"), "{text}");
    assert_eq!(spine(&text)[0], "CoRankSortExec", "{text}");
    assert!(!spine(&text).contains(&"SortExec"), "{text}");
}

/// A TopK's fetch shows in its statistics (exact input rows above the fetch): it stays
/// DataFusion's, and corank merges its sorted partitions under the host's merge.
#[tokio::test]
async fn topk_stays_with_datafusion() {
    for partitions in [1, 4] {
        let text = compare("SELECT * FROM t ORDER BY v, id LIMIT 5", "id", partitions, &[]).await;
        assert!(text.contains("SortExec: TopK(fetch=5)"), "{text}");
        assert!(!text.contains("CoRankSortExec"), "{text}");
    }
}

/// Below a filter the row count is an estimate; the sort's name says it has no fetch.
#[tokio::test]
async fn sort_over_estimated_rows() {
    let text = compare("SELECT * FROM t WHERE v > 10 ORDER BY v, id", "id", 4, &[]).await;
    assert_eq!(spine(&text)[..2], ["SortPreservingMergeExec", "CoRankSortExec"], "{text}");
    let text = compare("SELECT * FROM t WHERE v > 10 ORDER BY v, id LIMIT 100000", "id", 4, &[]).await;
    assert!(text.contains("SortExec: TopK(fetch=100000)") && !text.contains("CoRankSortExec"), "{text}");
}

/// A sort with a fetch that a host named `SortExec` stays the host's: its statistics show
/// the fetch.
#[tokio::test]
async fn fetch_seen_in_statistics_keeps_the_sort() {
    let ctx = session(false, 4, &[]);
    for sql in ["SELECT * FROM t ORDER BY v, id LIMIT 5", "SELECT * FROM t WHERE v > 10 ORDER BY v, id LIMIT 5"] {
        let stock = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let plan = stock.transform_up(|node| {
            Ok(if node.name() == "SortExec(TopK)" {
                Transformed::yes(Arc::new(NamedSort(node)) as Arc<dyn ExecutionPlan>)
            } else {
                Transformed::no(node)
            })
        });
        let plan = plan.unwrap().data;
        let optimized = CoRankForeignRule.optimize(Arc::clone(&plan), ctx.state().config_options()).unwrap();
        let text = displayable(optimized.as_ref()).indent(true).to_string();
        assert!(text.contains("NamedSort") && !text.contains("CoRankSortExec"), "{sql}\n{text}");
        let rows: usize = collect(optimized, ctx.task_ctx()).await.unwrap().iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 5, "{sql}\n{text}");
    }
}

/// A TopK sort under the name `SortExec` (all else delegated).
#[derive(Debug)]
struct NamedSort(Arc<dyn ExecutionPlan>);

impl DisplayAs for NamedSort {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "NamedSort")
    }
}

impl ExecutionPlan for NamedSort {
    fn name(&self) -> &str {
        "SortExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.0.properties()
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.0.children()
    }
    fn apply_expressions(&self, f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>) -> Result<TreeNodeRecursion> {
        self.0.apply_expressions(f)
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(NamedSort(replace_children_if_necessary(Arc::clone(&self.0), children)?)))
    }
    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.0.execute(partition, context)
    }
    fn child_stats_requests(&self, partition: Option<usize>) -> Vec<ChildStats> {
        self.0.child_stats_requests(partition)
    }
    fn statistics_from_inputs(&self, input_stats: &[Arc<Statistics>], args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        self.0.statistics_from_inputs(input_stats, args)
    }
}

#[tokio::test]
async fn settings_across_the_ffi_are_read() {
    let off = compare("SELECT * FROM t ORDER BY k", "k", 4, &[("corank.enabled", "false")]).await;
    assert!(!off.contains("CoRank"), "{off}");
    let no_sort = compare("SELECT * FROM t ORDER BY v, id", "id", 4, &[("corank.sort", "false")]).await;
    assert!(!no_sort.contains("CoRankSortExec"), "{no_sort}");
    // Behind the namespace, as the options come when converted twice.
    let (default, _, _) = run(&session(true, 4, &[]), "SELECT * FROM t ORDER BY k").await;
    assert!(default.contains("engine=auto"), "{default}");
    let cpu = session(true, 4, &[("datafusion_ffi.corank.engine", "cpu"), ("corank.check_sorted", "true")]);
    let (text, _, _) = run(&cpu, "SELECT * FROM t ORDER BY k").await;
    assert!(text.contains("engine=cpu, check_sorted"), "{text}");
    let bad = session(true, 4, &[("corank.engine", "fastest")]);
    let err = bad.sql("SELECT * FROM t ORDER BY k").await.unwrap().create_physical_plan().await.unwrap_err();
    assert!(err.to_string().contains("unknown engine 'fastest'"), "{err}");
}

/// A column as an expression across the FFI looks to the other side: equal only to itself,
/// known by its text.
#[derive(Debug)]
struct Opaque(Arc<dyn PhysicalExpr>);

impl PartialEq for Opaque {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for Opaque {}
impl std::hash::Hash for Opaque {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_string().hash(state)
    }
}
impl std::fmt::Display for Opaque {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PhysicalExpr for Opaque {
    fn data_type(&self, schema: &Schema) -> Result<DataType> {
        self.0.data_type(schema)
    }
    fn nullable(&self, schema: &Schema) -> Result<bool> {
        self.0.nullable(schema)
    }
    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        self.0.evaluate(batch)
    }
    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![]
    }
    fn with_new_children(self: Arc<Self>, _: Vec<Arc<dyn PhysicalExpr>>) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self)
    }
    fn fmt_sql(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.fmt_sql(f)
    }
}

/// The host sorts partitions its table provider across the FFI declared sorted (it cannot
/// match the provider's order with its own): corank merges them instead.
#[tokio::test]
async fn sort_of_sorted_partitions_becomes_a_merge() {
    use datafusion::physical_expr::expressions::col as column_expr;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::sorts::sort::SortExec;
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
    let ctx = session(false, 4, &[]);
    let stock = ctx.sql("SELECT * FROM t ORDER BY k").await.unwrap().create_physical_plan().await.unwrap();
    let source = Arc::clone(stock.children()[0]);
    assert_eq!(source.name(), "DataSourceExec");
    let opaque = |name: &str| Arc::new(Opaque(column_expr(name, &source.schema()).unwrap())) as Arc<dyn PhysicalExpr>;
    let host_order =
        |name: &str| LexOrdering::new([PhysicalSortExpr::new(opaque(name), arrow::compute::SortOptions::new(false, false))]).unwrap();
    let want = column(&collect(Arc::clone(&stock), ctx.task_ctx()).await.unwrap(), "k");
    for (key, merged) in [("k", true), ("v", false)] {
        let sort = Arc::new(SortExec::new(host_order(key), Arc::clone(&source)).with_preserve_partitioning(true));
        let order = sort.properties().output_ordering().unwrap().clone();
        let plan = Arc::new(SortPreservingMergeExec::new(order, sort)) as Arc<dyn ExecutionPlan>;
        let optimized = CoRankForeignRule.optimize(plan, ctx.state().config_options()).unwrap();
        let text = displayable(optimized.as_ref()).indent(true).to_string();
        let expect = if merged { "CoRankMergeExec" } else { "CoRankSortExec" };
        assert_eq!(spine(&text)[..3], ["SortPreservingMergeExec", expect, "DataSourceExec"], "{text}");
        let got = collect(optimized, ctx.task_ctx()).await.unwrap();
        if merged {
            assert_eq!(column(&got, "k"), want, "{text}");
        }
    }
    // One sorted partition: the sort goes away.
    let one = session_over(false, 4, &[], 1);
    let stock = one.sql("SELECT * FROM t").await.unwrap().create_physical_plan().await.unwrap();
    let sort = Arc::new(SortExec::new(host_order("k"), Arc::clone(&stock)));
    let optimized = CoRankForeignRule.optimize(sort, one.state().config_options()).unwrap();
    assert_eq!(optimized.name(), "DataSourceExec");
}

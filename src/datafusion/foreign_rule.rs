//! [`CoRankForeignRule`]: corank's rule for a host that hands it its plan across DataFusion's
//! FFI; the struct's doc is the spec.

use super::config::CoRankSettings;
use super::exec::CoRankMergeExec;
use super::rule::keys_supported;
use super::sort_exec::CoRankSortExec;
use super::stream::to_datafusion;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{replace_children_if_necessary, Boundedness};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, StatisticsArgs, StatisticsContext};
use std::sync::Arc;

#[cfg(doc)]
use super::CoRankRule;

/// The name of DataFusion's merge node, as its `name()` says across the FFI.
const MERGE: &str = "SortPreservingMergeExec";
/// The name of DataFusion's sort node without a fetch (with one it is `SortExec(TopK)`).
const SORT: &str = "SortExec";

/// The rule for a host that hands corank its plan across DataFusion's FFI
/// (`datafusion-ffi`), as datafusion-python's `SessionContext.add_physical_optimizer_rule`
/// does.
///
/// Across the FFI every node of the host's plan is opaque: corank cannot downcast it, so it
/// knows a node by its `name()`, its properties (partitioning, output ordering,
/// boundedness), its children and its statistics. Two things of the stock nodes do not
/// cross: a `SortPreservingMergeExec`'s or a `SortExec`'s **`fetch`** (its `LIMIT`) and its
/// sort expressions (apache/datafusion#25155). So this rule, unlike [`CoRankRule`]:
///
/// - **keeps the host's `SortPreservingMergeExec`** and replaces only its input: a merge of
///   several sorted partitions becomes `SortPreservingMergeExec(CoRankMergeExec(input))`.
///   The host's node then has one input partition, which it passes through, applying its
///   own `fetch`: whatever `LIMIT` it holds stays where it was.
/// - **replaces a `SortExec` only where it has no `fetch`.** DataFusion 55 names a sort
///   with a fetch `SortExec(TopK)` and one without `SortExec`, and the name crosses the
///   FFI; a sort named `SortExec` is replaced unless its statistics show a fetch anyway
///   (fewer rows than its input's exact count, or an estimate where its input has none:
///   `Statistics::with_fetch`), so a host that named its sorts otherwise would keep its
///   limits too. A replaced sort under a merge is merged by corank
///   (`SortPreservingMergeExec(CoRankSortExec(input))`); a sort into one partition becomes
///   a `CoRankSortExec`.
/// - **merges what the host sorts but is sorted.** A table provider across the FFI (such
///   as corank's `SortedRowGroupsTable` in datafusion-python) declares its order in
///   expressions the host cannot compare with its own, so the host sorts partitions that
///   are sorted already. Where a sort's input declares the sort's order (the same columns,
///   told apart by their text `name@index`, and options), corank merges the input's
///   partitions instead.
/// - takes the sort order from the nodes' **output ordering** (the properties that cross),
///   whose expressions it evaluates through the FFI like any `PhysicalExpr`.
///
/// It does not check that Parquet files below a merge are sorted as declared (it cannot
/// see the files); `corank.check_sorted` makes an unsorted input an error while merging.
/// The host appends the rule after its own rules (after `SanityCheckPlan`): every plan it
/// returns satisfies the orderings the host's nodes require.
///
/// Native plans work too: the same names, properties and statistics are there.
///
/// The Python package installs it in datafusion-python sessions (docs/python.md, "SQL
/// through datafusion-python").
#[derive(Debug, Default)]
pub struct CoRankForeignRule;

/// Whether the statistics of `node` (a sort over `input`) show a fetch: a sort without
/// one passes its input's row count through unchanged (exact, estimated or absent).
fn statistics_show_fetch(node: &Arc<dyn ExecutionPlan>, input: &Arc<dyn ExecutionPlan>) -> bool {
    // A node across the FFI answers through its `partition_statistics`, which the context
    // falls back to; it computes the host's statistics on the host's side.
    let statistics = StatisticsContext::new();
    let args = StatisticsArgs::new();
    let (Ok(ours), Ok(theirs)) = (statistics.compute(node.as_ref(), &args), statistics.compute(input.as_ref(), &args)) else {
        return true; // unknown: assume the worst
    };
    ours.num_rows != theirs.num_rows
}

/// Whether `a` and `b` name the same column: one of them is a column and the other
/// displays as it (`name@index`: an expression across the FFI compares equal to nothing
/// but itself, and shows what it is only in its text).
fn same_column(a: &Arc<dyn PhysicalExpr>, b: &Arc<dyn PhysicalExpr>) -> bool {
    match (a.downcast_ref::<Column>(), b.downcast_ref::<Column>()) {
        (Some(x), Some(y)) => x == y,
        (Some(column), None) => b.to_string() == column.to_string(),
        (None, Some(column)) => a.to_string() == column.to_string(),
        (None, None) => false,
    }
}

/// Whether every partition of `input` is sorted by `order` already: its output ordering
/// starts with `order`'s columns and options. A table provider across the FFI declares
/// its order in expressions the host cannot match, so the host sorts what is sorted.
fn already_sorted(input: &Arc<dyn ExecutionPlan>, order: &LexOrdering) -> bool {
    let Some(have) = input.output_ordering() else { return false };
    have.len() >= order.len()
        && order.iter().zip(have.iter()).all(|(want, have)| want.options == have.options && same_column(&want.expr, &have.expr))
}

/// What may replace the sort `node`, if anything (it has no fetch, a bounded input, an
/// output ordering whose keys corank encodes): where its input's partitions are sorted
/// already, their merge (or the input itself, one partition); else a `CoRankSortExec`.
fn replace_sort(node: &Arc<dyn ExecutionPlan>, settings: &CoRankSettings) -> Option<Arc<dyn ExecutionPlan>> {
    let [input] = node.children()[..] else { return None };
    let order = node.output_ordering()?.clone();
    let replaceable = settings.sort
        && node.name() == SORT
        && matches!(input.boundedness(), Boundedness::Bounded)
        && keys_supported(&order, &input.schema())
        && !statistics_show_fetch(node, input);
    if !replaceable {
        return None;
    }
    if already_sorted(input, &order) {
        if input.output_partitioning().partition_count() < 2 {
            return Some(Arc::clone(input));
        }
        let merge =
            CoRankMergeExec::new(order, Arc::clone(input)).with_settings(settings.merge.clone()).with_check_sorted(settings.check_sorted);
        return Some(Arc::new(merge));
    }
    let sort =
        CoRankSortExec::new(order, Arc::clone(input)).with_settings(settings.merge.clone()).with_chunk_rows(settings.sort_chunk_rows);
    Some(Arc::new(sort))
}

/// What the merge `node` gets as its new input, if anything: the input's sort when corank
/// takes it, else corank's merge of the input's sorted partitions.
fn merge_input(node: &Arc<dyn ExecutionPlan>, settings: &CoRankSettings) -> Option<Arc<dyn ExecutionPlan>> {
    let [input] = node.children()[..] else { return None };
    if input.output_partitioning().partition_count() < 2 {
        return None;
    }
    if input.name() == SORT {
        if let Some(sort) = replace_sort(input, settings) {
            return Some(sort);
        }
    }
    let order = input.output_ordering()?.clone();
    if !keys_supported(&order, &input.schema()) {
        return None;
    }
    let merge =
        CoRankMergeExec::new(order, Arc::clone(input)).with_settings(settings.merge.clone()).with_check_sorted(settings.check_sorted);
    Some(Arc::new(merge))
}

impl PhysicalOptimizerRule for CoRankForeignRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let settings = CoRankSettings::from_options(config).map_err(to_datafusion)?;
        if !settings.enabled {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            let name = node.name();
            if name == MERGE {
                if let Some(input) = merge_input(&node, &settings) {
                    return Ok(Transformed::yes(replace_children_if_necessary(Arc::clone(&node), vec![input])?));
                }
            } else if name == SORT && node.output_partitioning().partition_count() == 1 {
                if let Some(sort) = replace_sort(&node, &settings) {
                    return Ok(Transformed::yes(sort));
                }
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "CoRankForeignRule"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

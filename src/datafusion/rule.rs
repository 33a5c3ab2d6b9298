//! The physical optimizer rule: replaces every plan-level `SortPreservingMergeExec` whose
//! keys corank can encode with a [`CoRankMergeExec`]; leaves the rest untouched.
//!
//! It also makes sure each merge's input partitions are sorted: DataFusion 55.2 declares a
//! Parquet file sorted when its first row group's `sorting_columns` say so, which a file of
//! overlapping sorted row groups is not. The files under every plan-level merge are checked
//! by their row-group statistics (`file_order`); a file not proven one sorted run is split
//! into runs of row groups (one partition each), or a sort goes below the merge.
//!
//! It must run after the rules that look for SPM by type (EnforceDistribution,
//! EnforceSorting, LimitPushdown, PushdownSort, ...) and before `SanityCheckPlan`:
//! [`super::register`] inserts it there. SPMs created inside operators at run time (sort
//! spills, order-preserving repartitions) are not plan nodes and stay as they are.
//! With `corank.enabled = false` the rule does nothing (stock DataFusion).
//!
//! Each merge's scans read their files in their groups' order ([`preserve_file_order`]):
//! under an `ORDER BY … LIMIT`, DataFusion's `LimitPushdown` marks a scan order-insensitive,
//! and its partitions then trade files at run time (`enable_file_stream_work_stealing`), so
//! a partition would be another's file, or two files one after the other: ties out of file
//! order, a run that is not sorted.
//!
//! Sorts (`corank.sort`, on by default): `SortPreservingMergeExec(SortExec(preserve_partitioning,
//! input))` becomes one [`CoRankSortExec`]`(input)`, and a `SortExec` with one output partition
//! (not preserving partitioning, or over one partition) becomes a `CoRankSortExec`, where the
//! sort has no `fetch` (a `LIMIT` stays with DataFusion's TopK), its input is bounded and
//! corank encodes its keys. The `SortExec` the rule itself puts below a merge (files not
//! proven sorted) is left as it is: it sorts each partition for the `CoRankMergeExec` above.

use super::config::{CoRankConfig, CoRankSettings, MergeSettings};
use super::exec::CoRankMergeExec;
use super::file_order::{forget_unproven_order, repair, FileAccess, Repair};
use super::sort_exec::CoRankSortExec;
use super::stream::to_datafusion;
use crate::keys::is_supported;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::{replace_children_if_necessary, Boundedness};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use std::sync::Arc;

/// Swaps SortPreservingMergeExec for CoRankMergeExec.
/// [`with_corank_rule`](super::with_corank_rule) has an example of where it goes.
#[derive(Debug, Default)]
pub struct CoRankRule;

/// `input`, or what replaces it so that each of its partitions is sorted by `expr`: the
/// unproven Parquet files split into row-group runs, or a sort of each partition.
fn sorted_input(
    input: &Arc<dyn ExecutionPlan>,
    expr: &LexOrdering,
    fetch: Option<usize>,
    access: &FileAccess,
) -> Result<Arc<dyn ExecutionPlan>> {
    // The sort's input must not claim the order it is there to establish (a `SortExec`
    // over an input claiming its order passes the input through).
    let sort = || -> Result<Arc<dyn ExecutionPlan>> {
        let unsorted = forget_unproven_order(input, access)?;
        Ok(Arc::new(SortExec::new(expr.clone(), unsorted).with_preserve_partitioning(true).with_fetch(fetch)))
    };
    Ok(match repair(input, access)? {
        Repair::Proven => Arc::clone(input),
        Repair::Split(split) if split.equivalence_properties().ordering_satisfy(expr.clone())? => split,
        Repair::Split(_) | Repair::Sort => sort()?,
    })
}

/// `plan` with every scan whose order reaches its root told to keep its files' order
/// (`ExecutionPlan::with_preserve_order(true)`): each partition reads the files of its own
/// group, in order, whatever `LimitPushdown` decided (the module doc says why). The walk stops
/// at a node that does not keep its input's order (a sort, a repartition): below it, file
/// order means nothing to the merge.
fn preserve_file_order(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_down(|node| {
        let below =
            if node.maintains_input_order().iter().all(|&kept| kept) { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Jump };
        Ok(match node.with_preserve_order(true) {
            Some(kept) => Transformed::new(kept, true, below),
            None => Transformed::new(node, false, below),
        })
    })
    .data()
}

/// Whether corank encodes every key of `expr` over `schema`.
pub(super) fn keys_supported(expr: &LexOrdering, schema: &arrow::datatypes::Schema) -> bool {
    expr.iter().all(|e| e.expr.data_type(schema).is_ok_and(|t| is_supported(&t)))
}

/// Whether `sort` may become a [`CoRankSortExec`]: no fetch (TopK stays), a bounded input,
/// keys corank encodes.
fn replaceable(sort: &SortExec) -> bool {
    sort.fetch().is_none()
        && matches!(sort.input().boundedness(), Boundedness::Bounded)
        && keys_supported(sort.expr(), &sort.input().schema())
}

/// The `CoRankSortExec` that replaces `sort` (`sort` must be [`replaceable`]).
fn corank_sort(sort: &SortExec, settings: &MergeSettings, chunk_rows: usize) -> Arc<dyn ExecutionPlan> {
    Arc::new(CoRankSortExec::new(sort.expr().clone(), Arc::clone(sort.input())).with_settings(settings.clone()).with_chunk_rows(chunk_rows))
}

/// What replaces a sort node (`SortExec`, or `SortPreservingMergeExec` over a `SortExec`),
/// if anything: see the module doc.
fn replace_sort(node: &Arc<dyn ExecutionPlan>, settings: &MergeSettings, chunk_rows: usize) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(sort) = node.downcast_ref::<SortExec>() {
        let one_partition = !sort.preserve_partitioning() || sort.input().output_partitioning().partition_count() == 1;
        return Ok((one_partition && replaceable(sort)).then(|| corank_sort(sort, settings, chunk_rows)));
    }
    let Some(spm) = node.downcast_ref::<SortPreservingMergeExec>() else {
        return Ok(None);
    };
    if spm.fetch().is_some() {
        return Ok(None);
    }
    let child = spm.input();
    if let Some(sort) = child.downcast_ref::<SortExec>() {
        if sort.preserve_partitioning() && replaceable(sort) {
            let replacement = corank_sort(sort, settings, chunk_rows);
            // The sort's order satisfies the merge's (the merge required it); checked anyway.
            if replacement.equivalence_properties().ordering_satisfy(spm.expr().clone())? {
                return Ok(Some(replacement));
            }
        }
    } else if child.downcast_ref::<CoRankSortExec>().is_some() && child.equivalence_properties().ordering_satisfy(spm.expr().clone())? {
        // A sort of one partition, replaced below: the merge has nothing to merge.
        return Ok(Some(Arc::clone(child)));
    }
    Ok(None)
}

impl PhysicalOptimizerRule for CoRankRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let corank = config.extensions.get::<CoRankConfig>();
        if corank.is_some_and(|c| !c.enabled) {
            return Ok(plan);
        }
        let settings = CoRankSettings::from_options(config).map_err(to_datafusion)?;
        let access = corank.map(CoRankConfig::file_access).unwrap_or_default();
        plan.transform_up(|node| {
            if settings.sort {
                if let Some(replacement) = replace_sort(&node, &settings.merge, settings.sort_chunk_rows)? {
                    return Ok(Transformed::yes(replacement));
                }
            }
            let Some(spm) = node.downcast_ref::<SortPreservingMergeExec>() else {
                return Ok(Transformed::no(node));
            };
            let input = preserve_file_order(sorted_input(spm.input(), spm.expr(), spm.fetch(), &access)?)?;
            let schema = spm.input().schema();
            let supported = keys_supported(spm.expr(), &schema);
            if !supported {
                if Arc::ptr_eq(&input, spm.input()) {
                    return Ok(Transformed::no(node));
                }
                return Ok(Transformed::yes(replace_children_if_necessary(Arc::clone(&node), vec![input])?));
            }
            let merge = CoRankMergeExec::new(spm.expr().clone(), input)
                .with_fetch(spm.fetch())
                .with_settings(settings.merge.clone())
                .with_check_sorted(settings.check_sorted);
            Ok(Transformed::yes(Arc::new(merge) as Arc<dyn ExecutionPlan>))
        })
        .data()
    }

    fn name(&self) -> &str {
        "CoRankRule"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

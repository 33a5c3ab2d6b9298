//! The physical optimizer rule: replaces every plan-level `SortPreservingMergeExec` whose
//! keys corank can encode with a [`CoRankMergeExec`]; leaves the rest untouched.
//!
//! It must run after the rules that look for SPM by type (EnforceDistribution,
//! EnforceSorting, LimitPushdown, PushdownSort, ...) and before `SanityCheckPlan`:
//! [`super::register`] inserts it there. SPMs created inside operators at run time (sort
//! spills, order-preserving repartitions) are not plan nodes and stay as they are.

use super::config::CoRankConfig;
use super::exec::{CoRankMergeExec, MergeSettings};
use super::stream::to_datafusion;
use crate::keys::is_supported;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::ExecutionPlan;
use std::sync::Arc;

/// Swaps SortPreservingMergeExec for CoRankMergeExec.
#[derive(Debug, Default)]
pub struct CoRankRule;

impl PhysicalOptimizerRule for CoRankRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let cfg = config.extensions.get::<CoRankConfig>().cloned().unwrap_or_default();
        if !cfg.enabled {
            return Ok(plan);
        }
        let settings = MergeSettings::try_from(&cfg).map_err(to_datafusion)?;
        plan.transform_up(|node| {
            let Some(spm) = node.downcast_ref::<SortPreservingMergeExec>() else {
                return Ok(Transformed::no(node));
            };
            let schema = spm.input().schema();
            let supported = spm.expr().iter().all(|e| e.expr.data_type(&schema).is_ok_and(|t| is_supported(&t)));
            if !supported {
                return Ok(Transformed::no(node));
            }
            let merge = CoRankMergeExec::new(spm.expr().clone(), Arc::clone(spm.input()))
                .with_fetch(spm.fetch())
                .with_settings(settings.clone());
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

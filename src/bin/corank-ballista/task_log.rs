//! The executor's execution engine: Ballista's, which also logs (at info, target
//! `corank_ballista::task_log`) each task's corank nodes and the `corank.engine` of its
//! context, so an operator (and the cluster test) sees which executor ran what:
//!
//! ```text
//! corank task job=Ab3dE stage=1 task=0 executor=exec-1: CoRankMergeExec: [k@0 ASC], engine=cpu; corank.engine=cpu
//! ```
//!
//! A task without corank's nodes logs `none`; a context without the `corank.*` extension
//! (an executor without corank's config producer) logs `corank.engine=(not registered)`.

use ballista_core::JobId;
use ballista_executor::execution_engine::{ExecutionEngine, QueryStageExecutor};
use corank::datafusion::{CoRankConfig, CoRankMergeExec, CoRankSortExec};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion::prelude::SessionConfig;
use std::sync::Arc;

/// Wraps an execution engine; see the module doc.
pub struct TaskLog {
    executor_id: String,
    inner: Arc<dyn ExecutionEngine>,
}

impl TaskLog {
    pub fn new(executor_id: String, inner: Arc<dyn ExecutionEngine>) -> Self {
        Self { executor_id, inner }
    }
}

/// The one-line renderings of the corank nodes of `plan`, top down.
fn corank_nodes(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut nodes = vec![];
    let _ = plan.apply(|node| {
        if node.downcast_ref::<CoRankMergeExec>().is_some() || node.downcast_ref::<CoRankSortExec>().is_some() {
            nodes.push(displayable(node.as_ref()).one_line().to_string().trim_end().to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    nodes
}

impl ExecutionEngine for TaskLog {
    fn create_query_stage_exec(
        &self,
        job_id: JobId,
        stage_id: usize,
        task_id: usize,
        global_output_partition_ids: Vec<usize>,
        plan: Arc<dyn ExecutionPlan>,
        work_dir: &str,
        config: &SessionConfig,
    ) -> Result<Arc<dyn QueryStageExecutor>> {
        let nodes = corank_nodes(&plan);
        let nodes = if nodes.is_empty() { "none".to_string() } else { nodes.join(" | ") };
        let engine = config.options().extensions.get::<CoRankConfig>().map_or("(not registered)".to_string(), |c| c.engine.clone());
        log::info!(
            "corank task job={job_id} stage={stage_id} task={task_id} executor={}: {nodes}; corank.engine={engine}",
            self.executor_id
        );
        self.inner.create_query_stage_exec(job_id, stage_id, task_id, global_output_partition_ids, plan, work_dir, config)
    }
}

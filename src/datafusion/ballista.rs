//! corank in Apache Ballista 55 (feature `ballista`): what a scheduler and its executors need
//! so that `ORDER BY` merges run as [`CoRankMergeExec`] (and sorts as [`CoRankSortExec`]) on
//! the executors.
//!
//! Three things, each forced by how Ballista 55 plans and ships a query:
//! 1. **The codec.** The scheduler sends each task's plan to an executor as protobuf; corank's
//!    nodes travel through [`CoRankCodec`], Ballista's own (shuffle readers and writers)
//!    through Ballista's codec. [`physical_codec`] composes the two; scheduler and executors
//!    must use the same one.
//! 2. **The static planner.** Ballista's adaptive planner (on by default) plans the physical
//!    plan with its own rules, not the session's: corank's nodes would not run. So
//!    [`session_config`] turns it off (`ballista.planner.adaptive.enabled = false`), and a
//!    scheduler's [`session_builder`] keeps it off whatever a client's session says, so the
//!    scheduler plans with the session's physical optimizer rules, [`super::CoRankRule`]
//!    among them.
//! 3. **One task reads every input partition.** Ballista's static planner gives each task of a
//!    stage only its own partitions of the stage's leaves, except below a
//!    `SortPreservingMergeExec`, a `CoalescePartitionsExec` or an operator that requires a
//!    single input partition. corank's nodes are none of these, so the one task of the final
//!    stage would merge only the first input partition. [`ReadAllPartitionsRule`] (last among
//!    the physical rules, after `SanityCheckPlan`) puts a no-op `GlobalLimitExec` (no skip, no
//!    fetch; it requires one input partition, which the node's single output is) over every
//!    corank node with more than one input partition: Ballista then leaves the node's input
//!    whole, and the node runs in the executor's task over all of it.
//!
//! [`session_state`] is a Ballista scheduler's session with all three; [`session_builder`] has
//! the signature of Ballista's `SessionBuilder` for a scheduler built with
//! `SchedulerConfig::override_session_builder`, and [`standalone`] starts an in-process
//! scheduler and executor (Ballista's standalone mode) with them.
//!
//! A cluster of separate processes: the `corank-ballista` binary (`scheduler` and
//! `executor` subcommands, `src/bin/corank-ballista/`) sets these up through Ballista's
//! config overrides; docs/ballista.md says how to start one and what must match.
//!
//! [`standalone`] has an example; `examples/ballista.rs` runs an `ORDER BY` over sorted
//! Parquet files this way (`cargo run --features ballista --example ballista`).

use super::{CoRankCodec, CoRankMergeExec, CoRankSortExec, SessionStateBuilderExt};
use ballista_core::config::BALLISTA_ADAPTIVE_PLANNER_ENABLED;
use ballista_core::extension::SessionConfigExt;
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::Result;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::limit::GlobalLimitExec;
use datafusion::physical_plan::{Distribution, ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::physical_plan::{ComposedPhysicalExtensionCodec, PhysicalExtensionCodec};
use std::sync::Arc;

/// Ballista's physical codec and [`CoRankCodec`], composed (each node is tagged with the
/// codec that wrote it). The scheduler and every executor must use this codec.
/// [`session_config`] sets it; the module doc has the examples.
pub fn physical_codec() -> Arc<dyn PhysicalExtensionCodec> {
    Arc::new(ComposedPhysicalExtensionCodec::new(vec![Arc::new(BallistaPhysicalExtensionCodec::default()), Arc::new(CoRankCodec)]))
}

/// `config` made a Ballista config (its settings kept) with the `corank.*` settings,
/// [`physical_codec`] and Ballista's static planner. [`session_state`] uses it; a
/// scheduler's config producer returns it (over Ballista's default config), so that the
/// `corank.*` settings a client sends are kept (Ballista applies them to the producer's
/// config and drops the keys of extensions it does not hold). The module doc has the
/// examples.
pub fn session_config(config: SessionConfig) -> SessionConfig {
    super::with_corank_config(config.upgrade_for_ballista())
        .with_ballista_physical_extension_codec(physical_codec())
        .set_bool(BALLISTA_ADAPTIVE_PLANNER_ENABLED, false)
}

/// A Ballista scheduler's session (Ballista's default session builder) over
/// [`session_config`]`(config)`, with corank's rules: [`super::CoRankRule`] before
/// `SanityCheckPlan` and [`ReadAllPartitionsRule`] last. Clients use it too
/// (`SessionContext::remote_with_state`): their settings travel with each query.
/// [`standalone`] has an example.
pub fn session_state(config: SessionConfig) -> Result<SessionState> {
    let state = ballista_core::utils::default_session_builder(session_config(config))?;
    let builder = SessionStateBuilder::new_from_existing(state).with_corank();
    Ok(with_read_all_partitions(builder).build())
}

/// [`session_state`] with the signature of Ballista's scheduler `SessionBuilder`
/// (`SchedulerConfig::override_session_builder`), for the config of a client's session.
/// The planner is always the static one: a client that asks for Ballista's adaptive
/// planner (its default; `ballista.planner.adaptive.enabled = true`) gets the static one,
/// which the scheduler logs at info. The adaptive planner plans without the session's
/// physical rules: corank's nodes would not run, and files of overlapping sorted row
/// groups would come out mis-ordered (DataFusion trusts their `sorting_columns`;
/// docs/ballista.md). The module doc has the examples.
pub fn session_builder(config: SessionConfig) -> Result<SessionState> {
    if config.ballista_adaptive_query_planner_enabled() {
        log::info!("corank: the session asks for Ballista's adaptive planner; planning with the static planner, which runs corank's rules");
    }
    session_state(config)
}

/// An in-process Ballista scheduler and executor (Ballista's standalone mode) whose sessions
/// are [`session_state`]`(config)`, and a client context connected to them.
///
/// ```no_run
/// # async fn run() -> datafusion::common::Result<()> {
/// use corank::datafusion::with_corank_config;
/// use datafusion::prelude::SessionConfig;
///
/// // A standalone scheduler keeps the session it starts with: settings go in here.
/// let config = with_corank_config(SessionConfig::new().with_target_partitions(4)).set_str("corank.engine", "cpu");
/// let ctx = corank::datafusion::ballista::standalone(config).await?;
/// ctx.sql("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 'data/' WITH ORDER (k ASC NULLS LAST)").await?;
/// let batches = ctx.sql("SELECT * FROM t ORDER BY k").await?.collect().await?;
/// # Ok(()) }
/// ```
pub async fn standalone(config: SessionConfig) -> Result<SessionContext> {
    use ballista::prelude::SessionContextExt;
    SessionContext::standalone_with_state(session_state(config)?).await
}

/// `builder` with [`ReadAllPartitionsRule`] appended to its physical optimizer rules (once).
fn with_read_all_partitions(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    let mut rules = builder.physical_optimizers().take().map(|o| o.rules).unwrap_or_default();
    if !rules.iter().any(|r| r.name() == ReadAllPartitionsRule.name()) {
        rules.push(Arc::new(ReadAllPartitionsRule));
    }
    builder.with_physical_optimizer_rules(rules)
}

/// Puts a no-op `GlobalLimitExec` over every [`CoRankMergeExec`] and [`CoRankSortExec`] that
/// reads more than one partition, unless its parent already requires it as one partition (see
/// the module doc: Ballista's static planner then gives the node's task its whole input).
/// It changes no result: the limit has no skip and no fetch, and the node has one output
/// partition. [`session_state`] adds it; the module doc has the examples.
#[derive(Debug, Default)]
pub struct ReadAllPartitionsRule;

/// Whether `plan` is a corank node over more than one partition.
fn merges_partitions(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let corank = plan.downcast_ref::<CoRankMergeExec>().is_some() || plan.downcast_ref::<CoRankSortExec>().is_some();
    corank && plan.children().first().is_some_and(|input| input.output_partitioning().partition_count() > 1)
}

impl PhysicalOptimizerRule for ReadAllPartitionsRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let wrap = |node: Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> { Arc::new(GlobalLimitExec::new(node, 0, None)) };
        let plan = if merges_partitions(&plan) { wrap(plan) } else { plan };
        // Top down: each node wraps those of its children that are corank nodes over several
        // partitions, unless it already requires that child as a single partition (as the
        // wrapping limit does, so a wrapped node is not wrapped twice).
        plan.transform_down(|node| {
            let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
            let required = node.input_distribution_requirements().into_per_child();
            let wraps = |i: usize, child: &Arc<dyn ExecutionPlan>| {
                merges_partitions(child) && !matches!(required.get(i), Some(Distribution::SinglePartition))
            };
            if !children.iter().enumerate().any(|(i, c)| wraps(i, c)) {
                return Ok(Transformed::no(node));
            }
            let children =
                children.iter().enumerate().map(|(i, c)| if wraps(i, c) { wrap(Arc::clone(c)) } else { Arc::clone(c) }).collect();
            Ok(Transformed::yes(replace_children_if_necessary(node, children)?))
        })
        .data()
    }

    fn name(&self) -> &str {
        "CoRankReadAllPartitions"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

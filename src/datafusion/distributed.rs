//! corank in datafusion-distributed 4 (feature `distributed`): a coordinator session whose
//! `ORDER BY` scans run on the workers and whose final merge is a [`CoRankMergeExec`], and
//! the workers' set-up (corank's codec and `corank.*` options). docs/datafusion-distributed.md
//! has the commands of a cluster.
//!
//! Why the rule cannot simply run where it does in one process: datafusion-distributed plans in
//! its query planner, *after* the physical optimizer rules, and cuts a plan into stages only
//! under DataFusion's own `SortPreservingMergeExec` and `CoalescePartitionsExec`. A plan in
//! which [`CoRankRule`] already put its node in place of the merge has no
//! place to cut: the scans under corank's node would silently stay on the coordinator. So the
//! coordinator plans in three steps:
//!
//! 1. The physical optimizer rules, [`CoRankRule`] among them, as in one
//!    process: the merge's input is proven or repaired (files split into row-group runs, or a
//!    sort of each partition), and sorts become [`CoRankSortExec`]. Then `CoRankStageCut`
//!    (the rule after it) gives the distributed planner its cut back: each `CoRankMergeExec`
//!    becomes the `SortPreservingMergeExec` it replaced (its input, order and fetch), and each
//!    `CoRankSortExec` gets a `SortPreservingMergeExec` over it.
//! 2. datafusion-distributed's planner: the stage under each of those merges runs on the
//!    workers (its scans split over the tasks), behind a `NetworkCoalesceExec` whose
//!    partitions are the tasks' sorted partitions: the row-group runs and sorted files, or one
//!    sorted run per task (the `CoRankSortExec` runs on each worker over that task's files).
//! 3. This module's query planner, wrapping the distributed one, puts a `CoRankMergeExec` in
//!    place of each such merge (the final merge, on the coordinator or wherever the merge
//!    was). A merge over a network boundary checks its runs' order as it merges
//!    (`check_sorted`), whatever `corank.check_sorted` says: the workers read the files the
//!    distributed planner regrouped after the rule proved them, so a run out of order is an
//!    error, never wrong rows. A merge whose input does not claim its order is an error.
//!
//! Workers: plans travel as protobuf; corank's nodes through [`CoRankCodec`], so every worker
//! needs it ([`worker_session`], [`worker`]): a worker without it fails the query with
//! datafusion-distributed's decoding error. The `corank.*` settings travel twice: inside the
//! nodes (engine, window, chunk rows: what the nodes run with), and as the session's
//! `corank.*` options, which the coordinator sends with each task and [`worker_session`] reads
//! into the worker's session.
//!
//! ```no_run
//! # async fn run() -> datafusion::common::Result<()> {
//! use corank::datafusion::distributed::{session_context, WorkerUrls};
//! use datafusion::prelude::SessionConfig;
//! let workers = WorkerUrls::new(["http://127.0.0.1:50051", "http://127.0.0.1:50052"])?;
//! let ctx = session_context(SessionConfig::new(), workers);
//! ctx.sql("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/data/t/'").await?;
//! let batches = ctx.sql("SELECT * FROM t ORDER BY k").await?.collect().await?;
//! # Ok(()) }
//! ```

use super::config::{CoRankConfig, CoRankSettings};
use super::rule::keys_supported;
use super::stream::to_datafusion;
use super::{CoRankCodec, CoRankMergeExec, CoRankRule, CoRankSortExec, SessionStateBuilderExt};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::config::{ConfigOptions, ExtensionOptions};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::{plan_err, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_distributed::{
    DistributedConfig, DistributedExt, NetworkBoundaryExt, SessionStateBuilderExt as _, Worker, WorkerQueryContext, WorkerResolver,
};
use std::sync::Arc;
use url::Url;

/// The workers at fixed URLs (`http://host:port`), a [`WorkerResolver`] for a coordinator
/// whose workers do not move. The module doc has an example.
#[derive(Debug, Clone)]
pub struct WorkerUrls(Vec<Url>);

impl WorkerUrls {
    /// The workers at `urls`; an error names a URL that does not parse.
    pub fn new<S: AsRef<str>>(urls: impl IntoIterator<Item = S>) -> Result<Self> {
        let urls = urls
            .into_iter()
            .map(|u| {
                Url::parse(u.as_ref())
                    .map_err(|e| datafusion::common::DataFusionError::Configuration(format!("worker URL {}: {e}", u.as_ref())))
            })
            .collect::<Result<Vec<_>>>()?;
        if urls.is_empty() {
            return plan_err!("a corank coordinator needs at least one worker URL");
        }
        Ok(Self(urls))
    }
}

impl WorkerResolver for WorkerUrls {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}

/// `builder` made a coordinator's: corank registered
/// ([`SessionStateBuilderExt::with_corank`]), its codec and `corank.*` options sent to the
/// workers, and the three planning steps of the module doc. The worker resolver is the
/// caller's (`DistributedExt::with_distributed_worker_resolver`, before or after this call);
/// so are datafusion-distributed's other options. A query planner set on `builder` before
/// this call plans first (the distributed planner wraps it); set none after it.
pub fn with_distributed_corank(builder: SessionStateBuilder) -> SessionStateBuilder {
    let mut builder = builder.with_corank();
    let rules = builder.physical_optimizers().take().map(|o| o.rules).unwrap_or_default();
    let mut builder = builder.with_physical_optimizer_rules(with_stage_cut(rules));
    let corank = builder.config().as_ref().and_then(|c| c.options().extensions.get::<CoRankConfig>().cloned()).unwrap_or_default();
    let mut builder = builder.with_distributed_user_codec(CoRankCodec).with_distributed_option_extension(corank).with_distributed_planner();
    // `with_distributed_planner` always sets its planner; wrap it.
    match builder.query_planner().take() {
        Some(distributed) => builder.with_query_planner(Arc::new(CoRankAfterDistribution { distributed })),
        None => builder,
    }
}

/// A coordinator's `SessionContext` over `config` (its settings kept) with DataFusion's
/// defaults, [`with_distributed_corank`], and the workers `workers` names.
pub fn session_context(config: SessionConfig, workers: impl WorkerResolver + 'static) -> SessionContext {
    let builder = SessionStateBuilder::new().with_config(config).with_default_features().with_distributed_worker_resolver(workers);
    SessionContext::new_with_state(with_distributed_corank(builder).build())
}

/// A worker's session for one task (the signature of datafusion-distributed's
/// `WorkerSessionBuilder`): the coordinator's `corank.*` options and corank's codec.
pub async fn worker_session(ctx: WorkerQueryContext) -> Result<SessionState> {
    Ok(corank_worker_builder(ctx)?.build())
}

/// The builder of [`worker_session`], before `build`.
fn corank_worker_builder(ctx: WorkerQueryContext) -> Result<SessionStateBuilder> {
    // Registers the extension (and its propagation to the stages this worker reads from).
    let mut builder = ctx.builder.with_distributed_option_extension_from_headers::<CoRankConfig>(&ctx.headers)?;
    if let Some(corank) = builder.config().as_mut().and_then(|c| c.options_mut().extensions.get_mut::<CoRankConfig>()) {
        let headers = ctx.headers.iter().map(|(name, value)| (name.as_str(), value.to_str()));
        set_from_headers(corank, headers)?;
    }
    Ok(builder.with_distributed_user_codec(CoRankCodec))
}

/// The header datafusion-distributed sends a `corank.*` option in: its prefix, the
/// extension's prefix and a dot, then the entry's key, which for corank holds the prefix
/// again (`corank.engine`: `SHOW` lists the full names).
const OPTION_HEADER: &str = "x-datafusion-distributed-config-corank.";

/// Sets `corank`'s options from the task's `headers`. datafusion-distributed's own reading
/// strips the extension's prefix with `trim_start_matches`, which removes both `corank.` of
/// a header and then finds no such entry: the options would silently keep their defaults.
/// A header naming no corank option (a newer coordinator's) is skipped, as datafusion-distributed
/// skips them; a value corank refuses is an error.
fn set_from_headers<'a, E: std::fmt::Display>(
    corank: &mut CoRankConfig,
    headers: impl Iterator<Item = (&'a str, std::result::Result<&'a str, E>)>,
) -> Result<()> {
    let known: Vec<String> = corank.entries().into_iter().map(|e| e.key).collect();
    for (name, value) in headers {
        let Some(key) = name.strip_prefix(OPTION_HEADER) else { continue };
        if !known.iter().any(|k| k == key) {
            continue;
        }
        let value = value.map_err(|e| datafusion::common::DataFusionError::Configuration(format!("the header of {key}: {e}")))?;
        corank.set(key, value)?;
    }
    Ok(())
}

/// A datafusion-distributed worker whose sessions are [`worker_session`]'s; serve it with
/// `tonic` (`Server::builder().add_service(worker().into_worker_server())`), as the
/// `corank-distributed-worker` binary does.
pub fn worker() -> Worker {
    Worker::from_session_builder(worker_session)
}

/// [`worker`] with `extend` applied to each task's session builder after corank's set-up
/// (a plan hook, UDFs, an object store registered on the runtime, ...).
pub fn worker_with(extend: impl Fn(SessionStateBuilder) -> SessionStateBuilder + Send + Sync + 'static) -> Worker {
    let extend = Arc::new(extend);
    Worker::from_session_builder(move |ctx: WorkerQueryContext| {
        let extend = Arc::clone(&extend);
        async move { Ok(extend(corank_worker_builder(ctx)?).build()) }
    })
}

/// `rules` with `CoRankStageCut` right after [`CoRankRule`] (appended where it is absent);
/// unchanged if it is there.
fn with_stage_cut(mut rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    if rules.iter().any(|r| r.name() == CoRankStageCut.name()) {
        return rules;
    }
    let at = rules.iter().position(|r| r.name() == CoRankRule.name()).map_or(rules.len(), |i| i + 1);
    rules.insert(at, Arc::new(CoRankStageCut));
    rules
}

/// Step 1's second half (module doc): gives the distributed planner a merge to cut under.
#[derive(Debug, Default)]
struct CoRankStageCut;

impl PhysicalOptimizerRule for CoRankStageCut {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(merge) = node.downcast_ref::<CoRankMergeExec>() {
                let spm = SortPreservingMergeExec::new(merge.expr().clone(), Arc::clone(merge.input())).with_fetch(merge.fetch());
                return Ok(Transformed::yes(Arc::new(spm) as Arc<dyn ExecutionPlan>));
            }
            if let Some(sort) = node.downcast_ref::<CoRankSortExec>() {
                let spm = SortPreservingMergeExec::new(sort.expr().clone(), Arc::clone(&node));
                return Ok(Transformed::yes(Arc::new(spm) as Arc<dyn ExecutionPlan>));
            }
            Ok(Transformed::no(node))
        })
        .data()
    }

    fn name(&self) -> &str {
        "CoRankStageCut"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Step 3 (module doc): the distributed query planner, then corank's merges in place of the
/// merges it cut under.
#[derive(Debug)]
struct CoRankAfterDistribution {
    distributed: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for CoRankAfterDistribution {
    async fn create_physical_plan(&self, logical_plan: &LogicalPlan, session: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self.distributed.create_physical_plan(logical_plan, session).await?;
        corank_merges(plan, session.config_options())
    }
}

/// Every `SortPreservingMergeExec` whose keys corank encodes becomes a [`CoRankMergeExec`]
/// (one over a single sorted `CoRankSortExec` partition, without fetch, becomes that sort).
/// With corank off (or not registered), `plan` as it is: [`CoRankRule`] then left every merge
/// as DataFusion's, and so does this. With datafusion-distributed's dynamic task count, too
/// (with a warning): its stages are cut at run time, under the merges.
fn corank_merges(plan: Arc<dyn ExecutionPlan>, options: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
    if !options.extensions.get::<CoRankConfig>().is_some_and(|c| c.enabled) {
        return Ok(plan);
    }
    if DistributedConfig::from_config_options(options).is_ok_and(|d| d.dynamic_task_count) {
        // Stages are cut at run time, under the merges: they stay DataFusion's, so that the
        // scans below them are still distributed.
        log::warn!("corank: datafusion-distributed's dynamic task count is on; the final merges stay SortPreservingMergeExec");
        return Ok(plan);
    }
    let settings = CoRankSettings::from_options(options).map_err(to_datafusion)?;
    plan.transform_up(|node| {
        let Some(spm) = node.downcast_ref::<SortPreservingMergeExec>() else {
            return Ok(Transformed::no(node));
        };
        let input = spm.input();
        if !keys_supported(spm.expr(), &input.schema()) {
            return Ok(Transformed::no(node));
        }
        if !input.equivalence_properties().ordering_satisfy(spm.expr().clone())? {
            return plan_err!(
                "corank: the input of the merge by [{}] does not claim that order after distributed planning ({})",
                spm.expr(),
                input.name()
            );
        }
        let one_sorted_run = input.output_partitioning().partition_count() == 1 && input.downcast_ref::<CoRankSortExec>().is_some();
        if one_sorted_run && spm.fetch().is_none() {
            return Ok(Transformed::yes(Arc::clone(input)));
        }
        let merge = CoRankMergeExec::new(spm.expr().clone(), Arc::clone(input))
            .with_fetch(spm.fetch())
            .with_settings(settings.merge.clone())
            .with_check_sorted(settings.check_sorted || input.is_network_boundary());
        Ok(Transformed::yes(Arc::new(merge) as Arc<dyn ExecutionPlan>))
    })
    .data()
}

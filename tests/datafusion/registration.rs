//! Registration that composes, and settings visible as DataFusion's are.
//!
//! - `SessionStateBuilder::with_corank()` and `register` keep the builder's own config
//!   extensions and physical optimizer rules, and add corank's.
//! - `SHOW ALL` and `SHOW` list corank's settings under their full names (`corank.engine`);
//!   `SET` checks them when set; `SET corank.engine = 'cpu'` is what the node runs.

use arrow::array::{Array, Int64Array, RecordBatch, StringArray};
use corank::datafusion::{register, session_context, CoRankConfig, CoRankMergeExec, SessionStateBuilderExt};
use datafusion::common::config::{ConfigExtension, ConfigOptions};
use datafusion::common::extensions_options;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::*;
use parquet::arrow::ArrowWriter;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

extensions_options! {
    /// A config extension of some other DataFusion extension.
    pub struct OtherConfig {
        /// A setting of it.
        pub level: usize, default = 1
    }
}

impl ConfigExtension for OtherConfig {
    const PREFIX: &'static str = "other";
}

/// A physical optimizer rule of some other extension: counts its runs.
#[derive(Debug, Default)]
struct CountingRule(Arc<AtomicUsize>);

impl PhysicalOptimizerRule for CountingRule {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _: &ConfigOptions) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(plan)
    }

    fn name(&self) -> &str {
        "CountingRule"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn rule_names(ctx: &SessionContext) -> Vec<String> {
    ctx.state().physical_optimizers().iter().map(|r| r.name().to_string()).collect()
}

fn other_config() -> SessionConfig {
    SessionConfig::new().with_option_extension(OtherConfig { level: 7 }).with_target_partitions(3).with_information_schema(true)
}

/// Two sorted files in a new directory, registered as `t`, ordered by `k`.
async fn table(ctx: &SessionContext, dir: &std::path::Path) {
    for (f, keys) in [[1i64, 4, 4, 9], [2, 3, 4, 8]].iter().enumerate() {
        let batch = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(keys.to_vec())) as _)]).unwrap();
        let mut w = ArrowWriter::try_new(std::fs::File::create(dir.join(format!("p{f}.parquet"))).unwrap(), batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}' WITH ORDER (k ASC NULLS LAST)", dir.display()))
        .await
        .unwrap();
}

/// Runs the ORDER BY on `t`; returns the keys and the merge node's plan.
async fn order_by(ctx: &SessionContext) -> (Vec<i64>, Arc<dyn ExecutionPlan>) {
    let plan = ctx.sql("SELECT k FROM t ORDER BY k").await.unwrap().create_physical_plan().await.unwrap();
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    let keys = batches.iter().flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()).collect();
    (keys, plan)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_corank_keeps_the_builders_rules_and_extensions() {
    let runs = Arc::new(AtomicUsize::new(0));
    let state = SessionStateBuilder::new()
        .with_config(other_config())
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(CountingRule(Arc::clone(&runs))))
        .with_corank()
        .build();
    let ctx = SessionContext::new_with_state(state);
    let names = rule_names(&ctx);
    let corank = names.iter().position(|n| n == "CoRankRule").expect("CoRankRule registered");
    assert_eq!(names[corank + 1], "SanityCheckPlan", "{names:?}");
    assert_eq!(names.last().unwrap(), "CountingRule", "{names:?}");
    assert_eq!(names.iter().filter(|n| *n == "CoRankRule").count(), 1);
    let options = ctx.state().config().options().clone();
    assert_eq!(options.extensions.get::<OtherConfig>().expect("the builder's extension stays").level, 7);
    assert!(options.extensions.get::<CoRankConfig>().is_some());
    assert_eq!(ctx.state().config().target_partitions(), 3);

    let dir = tempfile::tempdir().unwrap();
    table(&ctx, dir.path()).await;
    let (keys, plan) = order_by(&ctx).await;
    assert_eq!(keys, [1, 2, 3, 4, 4, 4, 8, 9]);
    assert!(plan.downcast_ref::<CoRankMergeExec>().is_some());
    assert!(runs.load(Ordering::SeqCst) > 0, "the builder's rule ran");
    // Both settings are SET-able in the same session.
    ctx.sql("SET other.level = 9").await.unwrap();
    ctx.sql("SET corank.window_rows = 2").await.unwrap();
    let options = ctx.state().config().options().clone();
    assert_eq!(options.extensions.get::<OtherConfig>().unwrap().level, 9);
    assert_eq!(options.extensions.get::<CoRankConfig>().unwrap().window_rows, 2);
}

#[tokio::test]
async fn a_replaced_rule_list_stays_and_with_corank_twice_is_harmless() {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut rules = datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
    rules.insert(0, Arc::new(CountingRule(Arc::clone(&runs))));
    let state = SessionStateBuilder::new()
        .with_config(other_config())
        .with_default_features()
        .with_physical_optimizer_rules(rules.clone())
        .with_corank()
        .with_corank()
        .build();
    let ctx = SessionContext::new_with_state(state);
    let names = rule_names(&ctx);
    assert_eq!(names[0], "CountingRule");
    assert_eq!(names.len(), rules.len() + 1, "{names:?}");
    assert_eq!(names.iter().filter(|n| *n == "CoRankRule").count(), 1);
    // A builder made from an existing state keeps that state's rules too.
    let again = SessionStateBuilder::new_from_existing(ctx.state()).with_corank().build();
    assert_eq!(again.physical_optimizers().len(), names.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_keeps_the_builders_extensions_and_rules() {
    let runs = Arc::new(AtomicUsize::new(0));
    let builder = SessionStateBuilder::new()
        .with_config(other_config())
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(CountingRule(Arc::clone(&runs))));
    // The given config's options win; its corank settings come along; the builder's
    // extension and rule stay.
    let mut corank = CoRankConfig::default();
    corank.engine = "cpu".into();
    let given = SessionConfig::new().with_target_partitions(2).with_option_extension(corank).with_information_schema(true);
    let ctx = SessionContext::new_with_state(register(builder, given).build());
    let options = ctx.state().config().options().clone();
    assert_eq!(options.extensions.get::<OtherConfig>().expect("the builder's extension stays").level, 7);
    assert_eq!(options.extensions.get::<CoRankConfig>().unwrap().engine, "cpu");
    assert_eq!(ctx.state().config().target_partitions(), 2);
    let names = rule_names(&ctx);
    assert!(names.contains(&"CountingRule".to_string()) && names.contains(&"CoRankRule".to_string()), "{names:?}");
    let dir = tempfile::tempdir().unwrap();
    table(&ctx, dir.path()).await;
    let (keys, plan) = order_by(&ctx).await;
    assert_eq!(keys, [1, 2, 3, 4, 4, 4, 8, 9]);
    assert_eq!(plan.downcast_ref::<CoRankMergeExec>().unwrap().settings().engine.engine, corank::Engine::Cpu);
    assert!(runs.load(Ordering::SeqCst) > 0);
    // `session_context` keeps the given config's extensions.
    let ctx = session_context(other_config());
    assert_eq!(ctx.state().config().options().extensions.get::<OtherConfig>().unwrap().level, 7);
}

/// `(name, value)` rows of a SHOW statement.
async fn show(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<Vec<(String, String)>> {
    let batches = ctx.sql(sql).await?.collect().await?;
    let mut rows = vec![];
    for b in &batches {
        let text = |c: usize| arrow::compute::cast(b.column(c), &arrow::datatypes::DataType::Utf8).unwrap();
        let (names, values) = (text(0), text(1));
        let names = names.as_any().downcast_ref::<StringArray>().unwrap();
        let values = values.as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..b.num_rows() {
            rows.push((names.value(i).to_string(), if values.is_null(i) { String::new() } else { values.value(i).to_string() }));
        }
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_show_and_set_under_their_full_names() {
    let ctx = session_context(SessionConfig::new().with_information_schema(true).with_target_partitions(2));
    let all = show(&ctx, "SHOW ALL").await.unwrap();
    let value = |rows: &[(String, String)], name: &str| rows.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    for (name, default) in [
        ("corank.enabled", "true"),
        ("corank.engine", "auto"),
        ("corank.kernel", "auto"),
        ("corank.devices", "0"),
        ("corank.window_rows", "1048576"),
        ("corank.gpu_min_rows", &corank::GPU_MIN_ROWS.to_string()),
        ("corank.check_sorted", "false"),
        ("corank.sort_chunk_rows", "8388608"),
    ] {
        assert_eq!(value(&all, name).as_deref(), Some(default), "SHOW ALL: {name}\n{all:?}");
    }
    for bare in ["enabled", "engine", "kernel", "devices", "window_rows", "gpu_min_rows", "check_sorted", "sort_chunk_rows"] {
        assert!(value(&all, bare).is_none(), "SHOW ALL lists '{bare}' without its prefix");
    }
    // SHOW one setting, before and after SET.
    assert_eq!(show(&ctx, "SHOW corank.window_rows").await.unwrap(), [("corank.window_rows".to_string(), "1048576".to_string())]);
    ctx.sql("SET corank.window_rows = 4096").await.unwrap();
    // The kernel and the devices reach the node's settings (the CPU engine ignores them).
    ctx.sql("SET corank.kernel = 'KWay'").await.unwrap();
    ctx.sql("SET corank.devices = '3, 1'").await.unwrap();
    assert_eq!(value(&show(&ctx, "SHOW corank.devices").await.unwrap(), "corank.devices").as_deref(), Some("1,3"));
    assert_eq!(show(&ctx, "SHOW corank.window_rows").await.unwrap(), [("corank.window_rows".to_string(), "4096".to_string())]);
    // Bad values are errors at SET, and leave the setting as it was.
    let err = ctx.sql("SET corank.engine = 'nope'").await.unwrap_err().to_string();
    assert!(err.contains("unknown engine 'nope'"), "{err}");
    assert_eq!(value(&show(&ctx, "SHOW corank.engine").await.unwrap(), "corank.engine").as_deref(), Some("auto"));
    let err = ctx.sql("SET corank.kernel = 'fastest'").await.unwrap_err().to_string();
    assert!(err.contains("unknown kernel 'fastest'"), "{err}");
    for bad in [
        "SET corank.window_rows = 0",
        "SET corank.window_rows = 'many'",
        "SET corank.sort_chunk_rows = 0",
        "SET corank.enabled = 'maybe'",
        "SET corank.devices = -1",
        "SET corank.devices = '0,x'",
        "SET corank.device = 1",
        "SET corank.nope = 1",
    ] {
        assert!(ctx.sql(bad).await.is_err(), "{bad} was accepted");
    }
    assert!(show(&ctx, "SHOW corank.nope").await.is_err());
    // SET corank.engine = 'cpu': the node runs on the CPU engine.
    ctx.sql("SET corank.engine = 'CPU'").await.unwrap();
    assert_eq!(value(&show(&ctx, "SHOW corank.engine").await.unwrap(), "corank.engine").as_deref(), Some("cpu"));
    let dir = tempfile::tempdir().unwrap();
    table(&ctx, dir.path()).await;
    let (keys, plan) = order_by(&ctx).await;
    assert_eq!(keys, [1, 2, 3, 4, 4, 4, 8, 9]);
    let merge = plan.downcast_ref::<CoRankMergeExec>().expect("the merge at the top");
    assert_eq!(merge.settings().engine.engine, corank::Engine::Cpu);
    assert_eq!(merge.settings().window_rows, 4096);
    assert_eq!((merge.settings().engine.kernel, merge.settings().engine.devices), (corank::Kernel::KWay, corank::Devices::Set(0b1010)));
    let metrics = merge.metrics().unwrap();
    assert!(metrics.sum_by_name("rounds_cpu").is_some_and(|m| m.as_usize() > 0), "{metrics}");
    assert_eq!(metrics.sum_by_name("rounds_gpu").map(|m| m.as_usize()), Some(0));
    // Settings from a config's string map and from SET agree on the names.
    let map = std::collections::HashMap::from([("corank.engine".to_string(), "gpu".to_string())]);
    let mut config = SessionConfig::new().with_option_extension(CoRankConfig::default());
    for (k, v) in &map {
        config.options_mut().set(k, v).unwrap();
    }
    assert_eq!(config.options().extensions.get::<CoRankConfig>().unwrap().engine, "gpu");
    assert!(config.options_mut().set("corank.engine", "tpu").is_err());
}

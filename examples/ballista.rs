//! SQL ORDER BY in Apache Ballista, merged by corank on the executor.
//!
//! Starts an in-process Ballista scheduler and executor (Ballista's standalone mode) with
//! corank's session (`corank::datafusion::ballista`), writes four sorted Parquet files, runs
//! an ORDER BY over them, and prints the first rows and the plan the executor ran, with its
//! metrics: `CoRankMergeExec` where DataFusion would have run `SortPreservingMergeExec`.
//!
//!   cargo run --release --features ballista --example ballista
//!
//! With a scheduler's URL it is a client of a cluster of separate processes instead
//! (`corank-ballista scheduler` and `executor`, docs/ballista.md); the files go to the
//! temporary directory, which the scheduler and executors must see at the same path:
//!
//!   cargo run --release --features ballista --example ballista -- df://127.0.0.1:50050

#[path = "../src/cli/datagen.rs"]
mod datagen;

use ballista_core::execution_plans::DistributedQueryExec;
use datafusion::prelude::*;
use datafusion_proto::protobuf::LogicalPlanNode;
use datagen::{sorted_runs, KeyShape};
use parquet::arrow::ArrowWriter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("corank-ballista-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // 1. Four sorted files of 100k rows: u64 key k + 3 payload columns.
    for (i, batch) in sorted_runs(KeyShape::U64, 4, 100_000, None, 1).into_iter().enumerate() {
        let mut w = ArrowWriter::try_new(std::fs::File::create(dir.join(format!("part-{i}.parquet")))?, batch.schema(), None)?;
        w.write(&batch)?;
        w.close()?;
    }
    // 2. The scheduler and executor, with corank's codec, rules and settings (the engine is
    //    set here: a standalone scheduler keeps the session it was started with), or a
    //    client of a cluster, whose settings travel with each query.
    let config = corank::datafusion::with_corank_config(SessionConfig::new().with_target_partitions(4)).set_str("corank.engine", "auto");
    let ctx = match std::env::args().nth(1) {
        Some(url) => {
            use ballista::prelude::SessionContextExt;
            let ctx = SessionContext::remote_with_state(&url, corank::datafusion::ballista::session_state(config)?).await?;
            ctx.sql("SET corank.engine = 'cpu'").await?;
            ctx
        }
        None => corank::datafusion::ballista::standalone(config).await?,
    };
    let ddl = format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}/' WITH ORDER (k ASC NULLS LAST)", dir.display());
    ctx.sql(&ddl).await?;
    // 3. The query runs on the cluster; its executed plan comes back from the scheduler.
    let query = "SELECT k, p_i64 FROM t ORDER BY k ASC NULLS LAST";
    let plan = ctx.sql(query).await?.create_physical_plan().await?;
    let batches = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx()).await?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    println!("{query}: {rows} rows; the first:");
    let first = batches.first().map(|b| b.slice(0, b.num_rows().min(5)));
    println!("{}", arrow::util::pretty::pretty_format_batches(first.as_slice())?);
    if let Some(query) = plan.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>() {
        println!("The plan the cluster ran:\n{}", query.explain_executed_plan(&ctx.copied_config(), true).await?);
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

//! SQL ORDER BY over sorted Parquet files, merged by corank's CoRankMergeExec.
//!
//! Writes a few sorted Parquet files, registers corank on a DataFusion session, prints its
//! `corank.*` settings, the EXPLAIN of an ORDER BY .. LIMIT query and its result.
//!
//!   cargo run --release --example sql_order_by

#[path = "../src/cli/datagen.rs"]
mod datagen;

use corank::datafusion::SessionStateBuilderExt;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::*;
use datagen::{sorted_runs, KeyShape};
use parquet::arrow::ArrowWriter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("corank-sql-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // 1. Four sorted files of 100k rows: u64 key k + 3 payload columns.
    for (i, batch) in sorted_runs(KeyShape::U64, 4, 100_000, None, 1).into_iter().enumerate() {
        let mut w = ArrowWriter::try_new(std::fs::File::create(dir.join(format!("part-{i}.parquet")))?, batch.schema(), None)?;
        w.write(&batch)?;
        w.close()?;
    }
    // 2. A session with corank registered (the rule and the corank.* settings), the way
    //    other DataFusion extensions register (`corank::datafusion::session_context(config)`
    //    is the short form).
    let config = SessionConfig::new().with_target_partitions(4).with_repartition_file_scans(false).with_information_schema(true);
    let state = SessionStateBuilder::new().with_config(config).with_default_features().with_corank().build();
    let ctx = SessionContext::new_with_state(state);
    ctx.sql("SET corank.engine = 'cpu'").await?;
    ctx.sql("SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'corank.%' ORDER BY name").await?.show().await?;
    ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}' WITH ORDER (k ASC NULLS LAST)", dir.display())).await?;
    // 3. EXPLAIN shows CoRankMergeExec where DataFusion would put SortPreservingMergeExec.
    let query = "SELECT k, p_i64 FROM t ORDER BY k ASC NULLS LAST LIMIT 5";
    ctx.sql(&format!("EXPLAIN {query}")).await?.show().await?;
    ctx.sql(query).await?.show().await?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

//! SQL ORDER BY over unsorted data, sorted by corank's `CoRankSortExec` (which replaces
//! `SortExec` + `SortPreservingMergeExec`).
//!
//! Registers corank on a DataFusion session and an in-memory table of 4 partitions in
//! random order, then prints the EXPLAIN of an `ORDER BY` on an unsorted column, the first
//! rows of its result, and the node's metrics from EXPLAIN ANALYZE. `runs` there is the
//! number of sorted runs the node merged: 1 where the whole input was sorted at once on the
//! GPU (every column fixed-width or a string view, as here, and a GPU usable), one per chunk
//! otherwise.
//!
//!   cargo run --release --example sql_sort [-- auto|cpu|gpu]

use arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringViewArray};
use datafusion::datasource::MemTable;
use datafusion::prelude::*;
use std::sync::Arc;

/// Partition `p` of the table: `rows` rows with a unique `id`, a `price` in random order
/// (every 10th null), a `qty` and a `sku` (a string view, as DataFusion reads Parquet
/// strings; 14 bytes, longer than the 12 a view holds inline).
fn partition(p: i64, rows: i64) -> RecordBatch {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (p as u64 + 1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let id: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows).map(|i| p * rows + i)));
    let price: ArrayRef = Arc::new(Float64Array::from_iter((0..rows).map(|i| (i % 10 != 0).then(|| (next() % 100_000) as f64 / 100.0))));
    let qty: ArrayRef = Arc::new(Int32Array::from_iter_values((0..rows).map(|i| 1 + (i % 50) as i32)));
    let sku: ArrayRef =
        Arc::new(StringViewArray::from_iter_values((0..rows).map(|i| format!("SKU-{:08}-{}", (p * rows + i) % 99_991, i % 7))));
    RecordBatch::try_from_iter([("id", id), ("price", price), ("qty", qty), ("sku", sku)]).expect("columns of one length")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = std::env::args().nth(1).unwrap_or_else(|| "auto".into());
    // 1. Four partitions of 250k rows, each in batches of 8192 rows.
    let partitions: Vec<Vec<RecordBatch>> = (0..4)
        .map(|p| {
            let all = partition(p, 250_000);
            (0..all.num_rows()).step_by(8192).map(|s| all.slice(s, 8192.min(all.num_rows() - s))).collect()
        })
        .collect();
    let table = MemTable::try_new(partitions[0][0].schema(), partitions)?;
    // 2. A session with corank registered (the rule and the corank.* settings).
    let ctx = corank::datafusion::session_context(SessionConfig::new().with_target_partitions(4));
    ctx.register_table("t", Arc::new(table))?;
    ctx.sql(&format!("SET corank.engine = '{engine}'")).await?;
    // 3. EXPLAIN shows CoRankSortExec where DataFusion would sort each partition and merge.
    let query = "SELECT id, price, qty, sku FROM t ORDER BY price DESC NULLS LAST, id";
    ctx.sql(&format!("EXPLAIN {query}")).await?.show().await?;
    // 4. The sorted rows (the first five), and the node's metrics.
    let sorted = ctx.sql(query).await?.collect().await?;
    let rows: usize = sorted.iter().map(|b| b.num_rows()).sum();
    println!("{rows} rows sorted; the first five:");
    arrow::util::pretty::print_batches(&[sorted[0].slice(0, 5.min(sorted[0].num_rows()))])?;
    let analyzed = ctx.sql(&format!("EXPLAIN ANALYZE {query}")).await?.collect().await?;
    let plan = arrow::util::pretty::pretty_format_batches(&analyzed)?.to_string();
    for line in plan.lines().filter(|l| l.contains("CoRankSortExec")) {
        println!("{}", line.trim_matches(|c: char| c == '|' || c.is_whitespace()));
    }
    Ok(())
}

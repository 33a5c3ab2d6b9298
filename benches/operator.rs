//! The DataFusion operator benchmark (issue 4), one run, one table:
//!
//! (a) in memory: P partitions x N rows, one u64 key + 3 payload columns:
//!     SortPreservingMergeExec (round robin off) vs CoRankMergeExec with the CPU engine and
//!     with the GPU engine (where one is usable), same partitions, same machine;
//! (b) SQL `SELECT * FROM t ORDER BY k` over 16 sorted Parquet files (lineitem-like
//!     columns, zstd), end to end: stock DataFusion vs DataFusion with corank registered.
//!
//!   cargo bench --bench operator -- [ROWS_PER_PARTITION [PARQUET_ROWS]]
//! Defaults: 16M rows per partition x 16 partitions; 12M Parquet rows. Each figure is the
//! median of 3 runs after one warm-up.

use arrow::array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use corank::datafusion::{session_context, CoRankMergeExec, MergeSettings};
use corank::{Engine, EngineOptions};
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::*;
use datagen::{sorted_runs, KeyShape};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../src/bin/corank/datagen.rs"]
mod datagen;
#[path = "common/spm.rs"]
mod spm;

const BATCH: usize = 8192;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median of 3 timed runs after one warm-up; returns the time and the rows of the last run.
fn time<F: FnMut() -> usize>(mut f: F) -> (Duration, usize) {
    let rows = f();
    let mut times = vec![];
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(f(), rows);
        times.push(t.elapsed());
    }
    (median(times), rows)
}

fn row(table: &mut Vec<String>, name: &str, rows: usize, d: Duration, base: Duration) {
    table.push(format!(
        "{:<44} {:>12} {:>10.1} {:>12.1} {:>8.2}x",
        name,
        rows,
        d.as_secs_f64() * 1e3,
        rows as f64 / d.as_secs_f64() / 1e6,
        base.as_secs_f64() / d.as_secs_f64()
    ));
}

/// Lineitem-like sorted files: l_orderkey (the key), l_partkey, l_quantity, l_extendedprice,
/// l_discount, l_shipdate, l_returnflag, l_comment.
fn write_parquet(dir: &std::path::Path, files: usize, rows: usize) {
    let runs = sorted_runs(KeyShape::U64, files, rows, Some(rows as u64 * files as u64 / 4), 99);
    std::thread::scope(|s| {
        for (i, run) in runs.iter().enumerate() {
            s.spawn(move || {
                let n = run.num_rows();
                let k = run.column(0).clone();
                let batch = RecordBatch::try_from_iter([
                    ("l_orderkey", k),
                    ("l_partkey", Arc::new(Int64Array::from_iter_values((0..n as i64).map(|x| x * 7919 % 200_000))) as _),
                    ("l_quantity", Arc::new(Int32Array::from_iter_values((0..n as i32).map(|x| 1 + x % 50))) as _),
                    ("l_extendedprice", Arc::new(Float64Array::from_iter_values((0..n).map(|x| (x % 100_000) as f64 * 1.01))) as _),
                    ("l_discount", Arc::new(Float64Array::from_iter_values((0..n).map(|x| (x % 11) as f64 / 100.0))) as _),
                    ("l_shipdate", Arc::new(Int32Array::from_iter_values((0..n as i32).map(|x| 8000 + x % 2500))) as _),
                    ("l_returnflag", Arc::new(StringArray::from_iter_values((0..n).map(|x| ["A", "N", "R"][x % 3]))) as _),
                    (
                        "l_comment",
                        Arc::new(StringArray::from_iter_values((0..n).map(|x| format!("carefully final deposits {}", x % 977)))) as _,
                    ),
                ])
                .unwrap();
                let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap())).build();
                let f = std::fs::File::create(dir.join(format!("lineitem-{i:02}.parquet"))).unwrap();
                let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props)).unwrap();
                for s in (0..n).step_by(1 << 16) {
                    w.write(&batch.slice(s, (1 << 16).min(n - s))).unwrap();
                }
                w.close().unwrap();
            });
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rows: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(16 << 20);
    let pq_rows: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(12 << 20);
    let parts = 16;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let gpu = corank::engine::gpu_availability();
    let mut table = vec![format!("{:<44} {:>12} {:>10} {:>12} {:>9}", "case", "rows", "ms", "M rows/s", "vs stock")];

    // (a) The operator in memory.
    let runs = sorted_runs(KeyShape::U64, parts, rows, None, 42);
    let (source, ordering) = spm::batched_source(&runs, &["k"], BATCH);
    let ctx = spm::task_context(BATCH);
    let run_plan = |plan: Arc<dyn ExecutionPlan>| -> usize {
        rt.block_on(collect(plan, Arc::clone(&ctx))).unwrap().iter().map(|b| b.num_rows()).sum()
    };
    let spm: Arc<dyn ExecutionPlan> =
        Arc::new(SortPreservingMergeExec::new(ordering.clone(), source.clone()).with_round_robin_repartition(false));
    let (t_spm, n) = time(|| run_plan(Arc::clone(&spm)));
    row(&mut table, &format!("(a) SPM, {parts} x {rows} in memory"), n, t_spm, t_spm);
    let mut engines = vec![Engine::Cpu];
    if gpu.is_ok() {
        engines.push(Engine::Gpu);
    }
    for engine in engines {
        let settings = MergeSettings { engine: EngineOptions::default().with_engine(engine).with_gpu_min_rows(0), window_rows: 1 << 20 };
        let node: Arc<dyn ExecutionPlan> = Arc::new(CoRankMergeExec::new(ordering.clone(), source.clone()).with_settings(settings));
        let (t, n) = time(|| run_plan(Arc::clone(&node)));
        row(&mut table, &format!("(a) CoRankMergeExec, engine {engine}"), n, t, t_spm);
    }
    drop((runs, source));

    // (b) SQL over sorted Parquet files, end to end.
    let dir = std::env::temp_dir().join(format!("corank-operator-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_parquet(&dir, 16, pq_rows / 16);
    let ddl =
        format!("CREATE EXTERNAL TABLE lineitem STORED AS PARQUET LOCATION '{}' WITH ORDER (l_orderkey ASC NULLS LAST)", dir.display());
    let query = "SELECT * FROM lineitem ORDER BY l_orderkey ASC NULLS LAST";
    let config = || SessionConfig::new().with_target_partitions(16).with_repartition_file_scans(false);
    let run_sql = |ctx: &SessionContext| -> usize {
        rt.block_on(async {
            let batches = ctx.sql(query).await.unwrap().collect().await.unwrap();
            batches.iter().map(|b| b.num_rows()).sum()
        })
    };
    let stock = SessionContext::new_with_config(config());
    rt.block_on(stock.sql(&ddl)).unwrap();
    let (t_stock, n) = time(|| run_sql(&stock));
    row(&mut table, "(b) SQL ORDER BY, 16 Parquet files, stock", n, t_stock, t_stock);
    let mut engines = vec!["cpu"];
    if gpu.is_ok() {
        engines.push("gpu");
    }
    for engine in engines {
        let ctx = session_context(config());
        rt.block_on(ctx.sql(&ddl)).unwrap();
        rt.block_on(ctx.sql(&format!("SET corank.engine = '{engine}'"))).unwrap();
        let (t, n) = time(|| run_sql(&ctx));
        row(&mut table, &format!("(b) SQL ORDER BY, 16 Parquet files, corank {engine}"), n, t, t_stock);
    }
    std::fs::remove_dir_all(&dir).ok();
    println!("\n{}", table.join("\n"));
    println!(
        "threads: {}, GPU: {}",
        rayon::current_num_threads(),
        match gpu {
            Ok(()) => corank::engine::gpu_device_name(0).unwrap_or_default(),
            Err(e) => format!("none ({e})"),
        }
    );
}

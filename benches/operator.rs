//! The DataFusion operator benchmark (issue 4), one run, one table:
//!
//! (a) in memory: P partitions x N rows, one u64 key + 3 payload columns:
//!     SortPreservingMergeExec (round robin off) vs CoRankMergeExec with the CPU engine and
//!     with the GPU engine (where one is usable), same partitions, same machine;
//! (b) SQL `SELECT * FROM t ORDER BY k` over 16 sorted Parquet files (lineitem-like
//!     columns, zstd), end to end: stock DataFusion vs DataFusion with corank registered.
//!
//! Each run drains the output stream and records the total time and the time to its first
//! batch (from `execute` in memory, from `ctx.sql` in SQL): the "first batch" rows.
//!
//!   cargo bench --bench operator -- [ROWS_PER_PARTITION [PARQUET_ROWS [RUNS]]]
//! Defaults: 16M rows per partition x 16 partitions; 12M Parquet rows; 5 runs. Each figure
//! is the median of RUNS runs after one warm-up; the cases of (a), and those of (b), run in
//! turn within each round (the order reversed every other round), so that load from other
//! processes falls on stock and corank alike.

use arrow::array::{Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use corank::datafusion::{session_context, CoRankMergeExec, MergeSettings};
use corank::{Engine, EngineOptions};
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use datafusion::prelude::*;
use datagen::{sorted_runs, KeyShape};
use futures::future::BoxFuture;
use futures::StreamExt;
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

/// A case: opens its output stream.
type Open<'a> = Box<dyn Fn() -> BoxFuture<'static, SendableRecordBatchStream> + 'a>;

/// What the runs of a case measured: median total and first-batch times, rows, and the
/// first batch's rows.
struct Measured {
    total: Duration,
    first: Duration,
    rows: usize,
    first_rows: usize,
}

/// One run: opens the stream and drains it; (total time, time to the first batch, rows,
/// rows of the first batch).
fn run_once(rt: &tokio::runtime::Runtime, open: &Open) -> (Duration, Duration, usize, usize) {
    rt.block_on(async {
        let t = Instant::now();
        let mut stream = open().await;
        let (mut rows, mut first) = (0, None);
        while let Some(batch) = stream.next().await {
            let n = batch.unwrap().num_rows();
            first.get_or_insert((t.elapsed(), n));
            rows += n;
        }
        let (first, first_rows) = first.unwrap_or((t.elapsed(), 0));
        (t.elapsed(), first, rows, first_rows)
    })
}

/// Every case once to warm up, then `runs` rounds that run every case once, in turn (the
/// order reversed every other round); medians per case.
fn measure(rt: &tokio::runtime::Runtime, cases: &[Open], runs: usize) -> Vec<Measured> {
    let warm: Vec<_> = cases.iter().map(|open| run_once(rt, open)).collect();
    let mut samples: Vec<Vec<(Duration, Duration)>> = vec![vec![]; cases.len()];
    for r in 0..runs {
        let order: Vec<usize> = if r % 2 == 0 { (0..cases.len()).collect() } else { (0..cases.len()).rev().collect() };
        for c in order {
            let (total, first, rows, _) = run_once(rt, &cases[c]);
            assert_eq!(rows, warm[c].2, "every run returns the same rows");
            samples[c].push((total, first));
        }
    }
    samples
        .into_iter()
        .zip(warm)
        .map(|(s, w)| Measured {
            total: median(s.iter().map(|x| x.0).collect()),
            first: median(s.iter().map(|x| x.1).collect()),
            rows: w.2,
            first_rows: w.3,
        })
        .collect()
}

/// The table rows of a group of cases (the first is the baseline): throughput rows, then
/// first-batch rows.
fn table_rows(table: &mut Vec<String>, names: &[String], measured: &[Measured]) {
    let base = &measured[0];
    for (name, m) in names.iter().zip(measured) {
        table.push(format!(
            "{:<52} {:>12} {:>10.1} {:>12.1} {:>8.2}x",
            name,
            m.rows,
            m.total.as_secs_f64() * 1e3,
            m.rows as f64 / m.total.as_secs_f64() / 1e6,
            base.total.as_secs_f64() / m.total.as_secs_f64()
        ));
    }
    for (name, m) in names.iter().zip(measured) {
        table.push(format!(
            "{:<52} {:>12} {:>10.2} {:>12} {:>8.2}x",
            format!("{name}, first batch"),
            m.first_rows,
            m.first.as_secs_f64() * 1e3,
            "-",
            base.first.as_secs_f64() / m.first.as_secs_f64()
        ));
    }
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
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5).max(1);
    let parts = 16;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let gpu = corank::engine::gpu_availability();
    let mut table = vec![format!("{:<52} {:>12} {:>10} {:>12} {:>9}", "case", "rows", "ms", "M rows/s", "vs stock")];

    // (a) The operator in memory.
    let data = sorted_runs(KeyShape::U64, parts, rows, None, 42);
    let (source, ordering) = spm::batched_source(&data, &["k"], BATCH);
    let ctx = spm::task_context(BATCH);
    let plan_case = |plan: Arc<dyn ExecutionPlan>| -> Open {
        let ctx = Arc::clone(&ctx);
        Box::new(move || {
            let stream = plan.execute(0, Arc::clone(&ctx)).unwrap();
            Box::pin(async move { stream })
        })
    };
    let mut names = vec![format!("(a) SPM, {parts} x {rows} in memory")];
    let spm_plan = SortPreservingMergeExec::new(ordering.clone(), source.clone()).with_round_robin_repartition(false);
    let mut cases = vec![plan_case(Arc::new(spm_plan))];
    let mut engines = vec![Engine::Cpu];
    if gpu.is_ok() {
        engines.push(Engine::Gpu);
    }
    for engine in engines {
        let settings = MergeSettings { engine: EngineOptions::default().with_engine(engine).with_gpu_min_rows(0), window_rows: 1 << 20 };
        names.push(format!("(a) CoRankMergeExec, engine {engine}"));
        cases.push(plan_case(Arc::new(CoRankMergeExec::new(ordering.clone(), source.clone()).with_settings(settings))));
    }
    let measured = measure(&rt, &cases, runs);
    table_rows(&mut table, &names, &measured);
    drop((cases, data, source));

    // (b) SQL over sorted Parquet files, end to end.
    let dir = std::env::temp_dir().join(format!("corank-operator-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    write_parquet(&dir, 16, pq_rows / 16);
    let ddl =
        format!("CREATE EXTERNAL TABLE lineitem STORED AS PARQUET LOCATION '{}' WITH ORDER (l_orderkey ASC NULLS LAST)", dir.display());
    let query = "SELECT * FROM lineitem ORDER BY l_orderkey ASC NULLS LAST";
    let config = || SessionConfig::new().with_target_partitions(16).with_repartition_file_scans(false);
    let sql_case = |ctx: SessionContext| -> Open {
        Box::new(move || {
            let ctx = ctx.clone();
            Box::pin(async move { ctx.sql(query).await.unwrap().execute_stream().await.unwrap() })
        })
    };
    let stock = SessionContext::new_with_config(config());
    rt.block_on(stock.sql(&ddl)).unwrap();
    let mut names = vec!["(b) SQL ORDER BY, 16 Parquet files, stock".to_string()];
    let mut cases = vec![sql_case(stock)];
    let mut engines = vec!["cpu"];
    if gpu.is_ok() {
        engines.push("gpu");
    }
    for engine in engines {
        let ctx = session_context(config());
        rt.block_on(ctx.sql(&ddl)).unwrap();
        rt.block_on(ctx.sql(&format!("SET corank.engine = '{engine}'"))).unwrap();
        names.push(format!("(b) SQL ORDER BY, 16 Parquet files, corank {engine}"));
        cases.push(sql_case(ctx));
    }
    let measured = measure(&rt, &cases, runs);
    table_rows(&mut table, &names, &measured);
    std::fs::remove_dir_all(&dir).ok();
    println!("\n{}", table.join("\n"));
    println!(
        "runs: {runs} (medians), threads: {}, GPU: {}",
        rayon::current_num_threads(),
        match gpu {
            Ok(()) => corank::engine::gpu_device_name(0).unwrap_or_default(),
            Err(e) => format!("none ({e})"),
        }
    );
}

//! The DataFusion operator benchmark (issue 4), one run, one table:
//!
//! (a) in memory: P partitions x N rows, one u64 key + 3 payload columns:
//!     SortPreservingMergeExec (round robin off) vs CoRankMergeExec with the CPU engine and
//!     with the GPU engine (where one is usable), same partitions, same machine;
//! (b) SQL `SELECT * FROM t ORDER BY k` over 16 sorted Parquet files (lineitem-like
//!     columns, zstd), end to end: stock DataFusion vs DataFusion with corank registered,
//!     and the floor: the same scan without `ORDER BY` (decoding the files on every core),
//!     which no merge can beat; the last column says how close each case comes to it;
//! (c) the sort in memory (issue 14): P partitions x S rows in random order, one random u64
//!     key + 3 payload columns: stock `SortExec` (preserve_partitioning) +
//!     `SortPreservingMergeExec` (round robin off) vs one `CoRankSortExec` with the CPU
//!     engine, and with the GPU engine where one is usable and the GPU sort runs;
//! (d) the sort in SQL (issue 14): `SELECT * FROM lineitem ORDER BY l_partkey` over (b)'s
//!     Parquet files (l_partkey is not sorted; one partition per file), stock DataFusion
//!     (`SortExec` per partition + `SortPreservingMergeExec`) vs DataFusion with corank
//!     registered (`CoRankSortExec`) with the CPU engine, and the GPU engine where the GPU
//!     sort runs; then the same with the fixed-width columns alone (`SELECT l_orderkey,
//!     l_partkey, l_quantity, l_extendedprice, l_discount, l_shipdate`: with the GPU the node
//!     sorts the whole input on the device). Outputs are checked by l_partkey in output order
//!     (stock breaks ties in no fixed order) and by their rows in any order.
//!
//! Each run drains the output stream and records the total time. The "first batch" rows
//! are the median of FIRST_BATCH_RUNS more runs per case that stop at the first batch (from
//! `execute` in memory, from `ctx.sql` in SQL; the stream is dropped there, then 50 ms pass
//! so that the cancelled run's last work does not overlap the next): a figure of a few ms
//! that the source's own `execute` alone moves by ±5 ms on the 16-core host needs more
//! samples than the totals. Their "vs stock" is the median of the paired ratios (stock's
//! first batch over the case's, run r against run r: the cases run in turn, so load that
//! drifts falls on both), with the median's 95% confidence interval from order statistics
//! beside it: an interval that holds 1.00x means the first batches are level within what
//! the runs can tell apart. (The sorts' first batches come after the whole sort: theirs
//! are from the drained runs.) Outputs
//! are checked equal before a time counts: the warm-up run of every case digests its
//! output (row count, the key column in output order, and an order-free hash of every
//! row's values), and every case of a group must match the first (the floor only by rows
//! and values: it is not sorted).
//!
//!   cargo bench --bench operator -- [ROWS_PER_PARTITION [PARQUET_ROWS[,PARQUET_ROWS..] [RUNS [SORT_ROWS_PER_PARTITION]]]]
//! Defaults: 16M rows per partition x 16 partitions; 12M Parquet rows; 5 runs; (c) as many
//! rows per partition as (a). Each figure
//! is the median of RUNS runs after one warm-up (one run for 64M Parquet rows and more);
//! the cases of (a), and those of (b), run in turn within each round (the order reversed
//! every other round), so that load from other processes falls on stock and corank alike.
//! ROWS_PER_PARTITION 0 skips (a), PARQUET_ROWS 0 skips (b), SORT_ROWS_PER_PARTITION 0 skips (c);
//! e.g. the sort alone at 16 x 1M rows: `cargo bench --bench operator -- 0 0 5 1048576`;
//! `CORANK_BENCH_CHUNK_ROWS=N` sets the sorts' chunk rows ((c): `CoRankSortExec::with_chunk_rows`,
//! (d): `SET corank.sort_chunk_rows`).
//! (d) runs at every PARQUET_ROWS size, after (b) on the same files; `CORANK_BENCH_SQL=sort`
//! runs (d) alone (no (b) cases), `CORANK_BENCH_SQL=merge` (b) alone; e.g. the SQL sort alone
//! at 12.6M rows: `CORANK_BENCH_SQL=sort cargo bench --bench operator -- 0 12582912 3 0`.

use arrow::array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use corank::datafusion::{session_context, CoRankMergeExec, CoRankSortExec, MergeSettings};
use corank::{Devices, Engine, EngineOptions};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use datafusion::prelude::*;
use datagen::{sorted_runs, KeyShape};
use digest::Digest;
use futures::future::BoxFuture;
use futures::StreamExt;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../src/cli/datagen.rs"]
mod datagen;
#[path = "common/digest.rs"]
mod digest;
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
    /// The first batches' times, run by run (the paired ratios to the baseline's).
    firsts: Vec<Duration>,
}

/// Runs per case that stop at the first batch, for the first-batch medians.
const FIRST_BATCH_RUNS: usize = 31;

/// Time from opening a case's stream to its first batch (then the stream is dropped).
fn first_batch_once(rt: &tokio::runtime::Runtime, open: &Open) -> Duration {
    let first = rt.block_on(async {
        let t = Instant::now();
        let mut stream = open().await;
        let _ = stream.next().await;
        t.elapsed()
    });
    std::thread::sleep(Duration::from_millis(50));
    first
}

/// One run: opens the stream and drains it; (total time, time to the first batch, rows,
/// rows of the first batch), and the output's digest where asked (outside the timing's
/// purpose: only the warm-up run digests).
fn run_once(rt: &tokio::runtime::Runtime, open: &Open, digest: Option<usize>) -> (Duration, Duration, usize, usize, Digest) {
    rt.block_on(async {
        let t = Instant::now();
        let mut stream = open().await;
        let (mut rows, mut first, mut d) = (0, None, Digest::default());
        while let Some(batch) = stream.next().await {
            let batch = batch.unwrap();
            let n = batch.num_rows();
            first.get_or_insert((t.elapsed(), n));
            rows += n;
            if let Some(key) = digest {
                d.add(&batch, key);
            }
        }
        let (first, first_rows) = first.unwrap_or((t.elapsed(), 0));
        (t.elapsed(), first, rows, first_rows, d)
    })
}

/// Every case once to warm up (its output digested and checked against the first case's;
/// `unordered` cases by rows and values only), then `runs` rounds that run every case
/// once, in turn (the order reversed every other round), then `first_runs` such rounds that
/// stop at the first batch (0: the first batches of the drained runs count); medians per
/// case. The key column checked in order is column `key` (the sort column; ties may come
/// in any order: stock's sort is not stable).
fn measure(
    rt: &tokio::runtime::Runtime,
    cases: &[Open],
    unordered: &[bool],
    names: &[String],
    runs: usize,
    first_runs: usize,
    key: usize,
) -> Vec<Measured> {
    let warm: Vec<_> = cases.iter().map(|open| run_once(rt, open, Some(key))).collect();
    let base = warm[0].4;
    for ((w, &free), name) in warm.iter().zip(unordered).zip(names) {
        let d = w.4;
        assert_eq!((d.rows, d.rows_any_order), (base.rows, base.rows_any_order), "{name}: not the same rows as {}", names[0]);
        if !free {
            assert_eq!(d.keys_in_order, base.keys_in_order, "{name}: keys not in the order of {}", names[0]);
        }
    }
    let mut samples: Vec<Vec<Duration>> = vec![vec![]; cases.len()];
    let mut firsts: Vec<Vec<Duration>> = vec![vec![]; cases.len()];
    let in_turn = |r: usize| -> Vec<usize> {
        if r.is_multiple_of(2) {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        }
    };
    for r in 0..runs {
        for c in in_turn(r) {
            let (total, first, rows, _, _) = run_once(rt, &cases[c], None);
            assert_eq!(rows, warm[c].2, "every run returns the same rows");
            samples[c].push(total);
            if first_runs == 0 {
                firsts[c].push(first);
            }
        }
    }
    for r in 0..first_runs {
        for c in in_turn(r) {
            firsts[c].push(first_batch_once(rt, &cases[c]));
        }
    }
    samples
        .into_iter()
        .zip(firsts)
        .zip(warm)
        .map(|((s, f), w)| Measured { total: median(s), first: median(f.clone()), rows: w.2, first_rows: w.3, firsts: f })
        .collect()
}

/// The table rows of a group of cases (the first is the baseline; `floor`, where given,
/// the case no merge can beat): throughput rows, then first-batch rows.
fn table_rows(table: &mut Vec<String>, names: &[String], measured: &[Measured], floor: Option<usize>) {
    let base = &measured[0];
    for (name, m) in names.iter().zip(measured) {
        let to_floor = floor.map_or("-".to_string(), |f| format!("{:.2}x", measured[f].total.as_secs_f64() / m.total.as_secs_f64()));
        table.push(format!(
            "{:<56} {:>12} {:>10.1} {:>12.1} {:>8.2}x {:>9}",
            name,
            m.rows,
            m.total.as_secs_f64() * 1e3,
            m.rows as f64 / m.total.as_secs_f64() / 1e6,
            base.total.as_secs_f64() / m.total.as_secs_f64(),
            to_floor
        ));
    }
    for (name, m) in names.iter().zip(measured) {
        let (ratio, low, high) = paired_ratio(&base.firsts, &m.firsts);
        table.push(format!(
            "{:<56} {:>12} {:>10.2} {:>12} {:>8.2}x {:>9} 95% CI {low:.2}-{high:.2}x",
            format!("{name}, first batch"),
            m.first_rows,
            m.first.as_secs_f64() * 1e3,
            "-",
            ratio,
            "-"
        ));
    }
}

/// The median of `base[r] / case[r]` over the runs r, with the median's 95% confidence
/// interval from order statistics (the k-th smallest and largest ratios, k from the normal
/// approximation of the binomial: about the 10th and 22nd of 31).
fn paired_ratio(base: &[Duration], case: &[Duration]) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> = base.iter().zip(case).map(|(b, c)| b.as_secs_f64() / c.as_secs_f64()).collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let k = ((n as f64 / 2.0 - 0.98 * (n as f64).sqrt()).floor() as usize).max(1).min(n);
    (ratios[n / 2], ratios[k - 1], ratios[n - k])
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

/// Which SQL groups run at each Parquet size: `CORANK_BENCH_SQL` = `merge` ((b) only),
/// `sort` ((d) only), or unset / anything else (both).
struct SqlCases {
    merge: bool,
    sort: bool,
}

impl SqlCases {
    fn from_env() -> Self {
        match std::env::var("CORANK_BENCH_SQL").as_deref() {
            Ok("merge") => SqlCases { merge: true, sort: false },
            Ok("sort") => SqlCases { merge: false, sort: true },
            _ => SqlCases { merge: true, sort: true },
        }
    }
}

/// splitmix64: the bench's random keys.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `parts` partitions of `rows` rows in random order: a random u64 key `k` and 3 payload
/// columns (as (a)'s runs, unsorted).
fn unsorted_runs(parts: usize, rows: usize, seed: u64) -> Vec<RecordBatch> {
    (0..parts)
        .map(|p| {
            let base = mix(seed ^ (p as u64) << 32);
            let k: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..rows).map(|i| mix(base.wrapping_add(i as u64)))));
            let p_i64: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows).map(|i| (p * rows + i) as i64)));
            let p_f64: ArrayRef = Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.5)));
            let p_u64: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..rows).map(|i| mix(i as u64))));
            RecordBatch::try_from_iter([("k", k), ("p_i64", p_i64), ("p_f64", p_f64), ("p_u64", p_u64)]).unwrap()
        })
        .collect()
}

/// Whether the GPU sort runs here (a few rows sorted with `Engine::Gpu`).
fn gpu_sort_runs() -> bool {
    let k: ArrayRef = Arc::new(UInt64Array::from(vec![3u64, 1, 2]));
    let batch = RecordBatch::try_from_iter([("k", k)]).unwrap();
    let options = corank::SortBatchesOptions::default().with_engine(Engine::Gpu);
    corank::sort_batches(&[batch], &[corank::SortKey::asc("k")], &options).is_ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rows: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(16 << 20);
    let pq_sizes: Vec<usize> =
        args.get(1).map_or(vec![12 << 20], |s| s.split(',').filter_map(|x| x.parse().ok()).filter(|&n| n > 0).collect());
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5).max(1);
    let sort_rows: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(rows);
    let sql_cases = SqlCases::from_env();
    let parts = 16;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let gpu = corank::gpu_availability();
    let mut table = vec![format!("{:<56} {:>12} {:>10} {:>12} {:>9} {:>9}", "case", "rows", "ms", "M rows/s", "vs stock", "vs floor")];

    // (a) The operator in memory.
    if rows > 0 {
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
        // With two or more GPUs, the GPU engine also on all of them (each round split).
        let gpus = (0..).take_while(|&d| corank::gpu_device_name(d).is_ok()).count();
        let mut configs: Vec<(Engine, Devices)> = engines.iter().map(|&e| (e, Devices::One(0))).collect();
        if gpu.is_ok() && gpus >= 2 {
            configs.push((Engine::Gpu, Devices::All));
        }
        for (engine, devices) in configs {
            let options = EngineOptions::default().with_engine(engine).with_devices(devices).with_gpu_min_rows(0);
            let settings = MergeSettings { engine: options, window_rows: 1 << 20 };
            let on = if devices == Devices::All { format!(", all {gpus} GPUs") } else { String::new() };
            names.push(format!("(a) CoRankMergeExec, engine {engine}{on}"));
            cases.push(plan_case(Arc::new(CoRankMergeExec::new(ordering.clone(), source.clone()).with_settings(settings))));
        }
        let measured = measure(&rt, &cases, &vec![false; cases.len()], &names, runs, FIRST_BATCH_RUNS, 0);
        table_rows(&mut table, &names, &measured, None);
    }

    // (b) SQL over sorted Parquet files, end to end, at each size.
    for pq_rows in pq_sizes {
        let dir = std::env::temp_dir().join(format!("corank-operator-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_parquet(&dir, 16, pq_rows / 16);
        let ddl =
            format!("CREATE EXTERNAL TABLE lineitem STORED AS PARQUET LOCATION '{}' WITH ORDER (l_orderkey ASC NULLS LAST)", dir.display());
        let sorted = "SELECT * FROM lineitem ORDER BY l_orderkey ASC NULLS LAST";
        let scan = "SELECT * FROM lineitem";
        let config = || SessionConfig::new().with_target_partitions(16).with_repartition_file_scans(false);
        let sql_case = |ctx: SessionContext, query: &'static str| -> Open {
            Box::new(move || {
                let ctx = ctx.clone();
                Box::pin(async move { ctx.sql(query).await.unwrap().execute_stream().await.unwrap() })
            })
        };
        let stock = SessionContext::new_with_config(config());
        rt.block_on(stock.sql(&ddl)).unwrap();
        let mut names = vec!["(b) SQL ORDER BY, 16 Parquet files, stock".to_string()];
        let mut cases = vec![sql_case(stock.clone(), sorted)];
        let mut unordered = vec![false];
        let mut engines = vec!["cpu"];
        if gpu.is_ok() {
            engines.push("gpu");
        }
        for engine in engines {
            let ctx = session_context(config());
            rt.block_on(ctx.sql(&ddl)).unwrap();
            rt.block_on(ctx.sql(&format!("SET corank.engine = '{engine}'"))).unwrap();
            names.push(format!("(b) SQL ORDER BY, 16 Parquet files, corank {engine}"));
            cases.push(sql_case(ctx, sorted));
            unordered.push(false);
        }
        names.push("(b) floor: the same scan, no ORDER BY, stock".to_string());
        cases.push(sql_case(stock, scan));
        unordered.push(true);
        let floor = cases.len() - 1;
        let size_runs = if pq_rows >= 64 << 20 { 1 } else { runs };
        if sql_cases.merge {
            let measured = measure(&rt, &cases, &unordered, &names, size_runs, FIRST_BATCH_RUNS, 0);
            table.push(format!("-- {pq_rows} Parquet rows, {size_runs} run(s)"));
            table_rows(&mut table, &names, &measured, Some(floor));
        }
        // (d) SQL sort over the same files by a column they are not sorted by: stock
        //     (SortExec per file + SPM) vs corank registered (CoRankSortExec) per engine.
        if sql_cases.sort {
            // Every column (two strings: the node sorts in chunks), then the fixed-width
            // columns alone (with the GPU, one sort of the whole input on the device).
            let queries = [
                ("(d) SQL ORDER BY l_partkey (unsorted)", "SELECT * FROM lineitem ORDER BY l_partkey"),
                (
                    "(d) fixed-width columns, ORDER BY l_partkey",
                    "SELECT l_orderkey, l_partkey, l_quantity, l_extendedprice, l_discount, l_shipdate FROM lineitem ORDER BY l_partkey",
                ),
            ];
            for (label, sort_query) in queries {
                let stock = SessionContext::new_with_config(config());
                rt.block_on(stock.sql(&ddl)).unwrap();
                let mut names = vec![format!("{label}, stock")];
                let mut cases = vec![sql_case(stock, sort_query)];
                let mut engines = vec!["cpu"];
                if gpu.is_ok() && gpu_sort_runs() {
                    engines.push("gpu");
                }
                for engine in engines {
                    let ctx = session_context(config());
                    rt.block_on(ctx.sql(&ddl)).unwrap();
                    rt.block_on(ctx.sql(&format!("SET corank.engine = '{engine}'"))).unwrap();
                    if let Ok(chunk_rows) = std::env::var("CORANK_BENCH_CHUNK_ROWS") {
                        rt.block_on(ctx.sql(&format!("SET corank.sort_chunk_rows = {chunk_rows}"))).unwrap();
                    }
                    names.push(format!("{label}, corank {engine}"));
                    cases.push(sql_case(ctx, sort_query));
                }
                let measured = measure(&rt, &cases, &vec![false; cases.len()], &names, size_runs, 0, 1);
                table.push(format!("-- {pq_rows} Parquet rows, sorted by l_partkey, {size_runs} run(s)"));
                table_rows(&mut table, &names, &measured, None);
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }
    // (c) The sort in memory: stock SortExec per partition + SPM vs one CoRankSortExec.
    if sort_rows > 0 {
        let data = unsorted_runs(parts, sort_rows, 7);
        let (source, ordering) = spm::batched_source(&data, &["k"], BATCH);
        drop(data);
        let ctx = spm::task_context(BATCH);
        let plan_case = |plan: Arc<dyn ExecutionPlan>| -> Open {
            let ctx = Arc::clone(&ctx);
            Box::new(move || {
                let stream = plan.execute(0, Arc::clone(&ctx)).unwrap();
                Box::pin(async move { stream })
            })
        };
        let stock = SortExec::new(ordering.clone(), source.clone()).with_preserve_partitioning(true);
        let stock = SortPreservingMergeExec::new(ordering.clone(), Arc::new(stock)).with_round_robin_repartition(false);
        let mut names = vec![format!("(c) SortExec + SPM, {parts} x {sort_rows} unsorted")];
        let mut cases = vec![plan_case(Arc::new(stock))];
        let mut engines = vec![Engine::Cpu];
        if gpu.is_ok() && gpu_sort_runs() {
            engines.push(Engine::Gpu);
        }
        for engine in engines {
            let options = EngineOptions::default().with_engine(engine).with_gpu_min_rows(0);
            let settings = MergeSettings { engine: options, window_rows: 1 << 20 };
            names.push(format!("(c) CoRankSortExec, engine {engine}"));
            let mut node = CoRankSortExec::new(ordering.clone(), source.clone()).with_settings(settings);
            if let Some(chunk_rows) = std::env::var("CORANK_BENCH_CHUNK_ROWS").ok().and_then(|s| s.parse().ok()) {
                node = node.with_chunk_rows(chunk_rows);
            }
            cases.push(plan_case(Arc::new(node)));
        }
        let measured = measure(&rt, &cases, &vec![false; cases.len()], &names, runs, 0, 0);
        table_rows(&mut table, &names, &measured, None);
    }
    println!("\n{}", table.join("\n"));
    println!(
        "runs: {runs} (medians), threads: {}, GPU: {}",
        rayon::current_num_threads(),
        match gpu {
            Ok(()) => corank::gpu_device_name(0).unwrap_or_default(),
            Err(e) => format!("none ({e})"),
        }
    );
}

//! The CPU engine against DataFusion's SortPreservingMergeExec (round-robin tie breaker off)
//! on the same in-memory runs, same machine, one run. Each side produces merged
//! RecordBatches of 8192 rows from the runs.
//!
//!   cargo bench --bench cpu_vs_spm            (all scenarios)
//!   cargo bench --bench cpu_vs_spm -- a_16x1M (one scenario)
//!
//! After criterion's report it prints one table with the ratio SPM time / corank time,
//! read from criterion's estimates of this run.

use arrow::array::RecordBatch;
use corank::{Engine, MergeOptions, SortKey};
use criterion::{criterion_group, Criterion};
use datafusion::physical_plan::collect;
use datagen::{sorted_runs, KeyShape};
use std::time::Duration;

#[path = "../src/bin/corank/datagen.rs"]
mod datagen;
#[path = "common/spm.rs"]
mod spm;

const BATCH: usize = 8192;

struct Scenario {
    name: &'static str,
    shape: KeyShape,
    runs: usize,
    rows: usize,
}

const SCENARIOS: &[Scenario] = &[
    Scenario { name: "a_16x1M_u64", shape: KeyShape::U64, runs: 16, rows: 1 << 20 },
    Scenario { name: "b_2x8M_u64", shape: KeyShape::U64, runs: 2, rows: 1 << 23 },
    Scenario { name: "c_16x256K_utf8", shape: KeyShape::Utf8, runs: 16, rows: 1 << 18 },
    Scenario { name: "d_16x1M_two_keys", shape: KeyShape::TwoColumns, runs: 16, rows: 1 << 20 },
];

fn key_names(shape: KeyShape) -> Vec<&'static str> {
    match shape {
        KeyShape::TwoColumns => vec!["k", "k2"],
        _ => vec!["k"],
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let ctx = spm::task_context(BATCH);
    for s in SCENARIOS {
        let runs = sorted_runs(s.shape, s.runs, s.rows, None, 42);
        let keys = key_names(s.shape);
        let sort_keys: Vec<SortKey> = keys.iter().map(|k| SortKey::asc(*k)).collect();
        let opts = MergeOptions::default().with_engine(Engine::Cpu).with_batch_size(BATCH);
        let plan = spm::spm_plan(&runs, &keys, BATCH);
        // Both sides must agree before either is timed.
        let ours = corank::merge(&runs, &sort_keys, &opts).unwrap();
        let theirs = rt.block_on(collect(plan.clone(), ctx.clone())).unwrap();
        let concat = |b: &[RecordBatch]| arrow::compute::concat_batches(&b[0].schema(), b).unwrap();
        assert_eq!(concat(&ours), concat(&theirs), "{}: corank and SPM differ", s.name);

        let mut g = c.benchmark_group(s.name);
        g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(8));
        g.throughput(criterion::Throughput::Elements((s.runs * s.rows) as u64));
        g.bench_function("corank_cpu", |b| b.iter(|| corank::merge(&runs, &sort_keys, &opts).unwrap()));
        g.bench_function("spm", |b| b.iter(|| rt.block_on(collect(plan.clone(), ctx.clone())).unwrap()));
        g.finish();
    }
}

criterion_group!(benches, bench);

/// Criterion's point estimate (mean, ns) of one benchmark in this run.
fn estimate_ns(dir: &std::path::Path, group: &str, func: &str) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join(group).join(func).join("new/estimates.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn main() {
    let home = std::env::var("CRITERION_HOME").unwrap_or_else(|_| "target/criterion".into());
    std::env::set_var("CRITERION_HOME", &home);
    benches();
    Criterion::default().configure_from_args().final_summary();
    let dir = std::path::Path::new(&home);
    println!(
        "\n{:<20} {:>8} {:>14} {:>14} {:>12} {:>12} {:>8}",
        "scenario", "rows", "corank ms", "SPM ms", "corank Mr/s", "SPM Mr/s", "ratio"
    );
    for s in SCENARIOS {
        let (Some(ours), Some(theirs)) = (estimate_ns(dir, s.name, "corank_cpu"), estimate_ns(dir, s.name, "spm")) else {
            continue; // filtered out
        };
        let rows = (s.runs * s.rows) as f64;
        println!(
            "{:<20} {:>8} {:>14.1} {:>14.1} {:>12.1} {:>12.1} {:>7.2}x",
            s.name,
            s.runs * s.rows,
            ours / 1e6,
            theirs / 1e6,
            rows / ours * 1e3,
            rows / theirs * 1e3,
            theirs / ours
        );
    }
    println!("threads: {}", rayon::current_num_threads());
}

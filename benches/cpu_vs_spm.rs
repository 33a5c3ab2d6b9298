//! The CPU engine against DataFusion's SortPreservingMergeExec (round-robin tie breaker off)
//! on the same in-memory runs, same machine, one run. Each side produces merged
//! RecordBatches of 8192 rows from the runs.
//!
//!   cargo bench --bench cpu_vs_spm            (all scenarios)
//!   cargo bench --bench cpu_vs_spm -- a_16x1M (one scenario)
//!
//! Each side runs once to warm up, then the two alternate for `CORANK_BENCH_REPS` rounds
//! (default 10); the table gives each side's median and the ratio SPM time / corank time.

use arrow::array::RecordBatch;
use corank::{Engine, MergeOptions, SortKey};
use datafusion::physical_plan::collect;
use datagen::{sorted_runs, KeyShape};
use std::time::{Duration, Instant};

#[path = "../src/cli/datagen.rs"]
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

/// The median of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters scenarios by name.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let reps: usize = std::env::var("CORANK_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let ctx = spm::task_context(BATCH);
    println!(
        "{:<20} {:>8} {:>14} {:>14} {:>12} {:>12} {:>8}",
        "scenario", "rows", "corank ms", "SPM ms", "corank Mr/s", "SPM Mr/s", "ratio"
    );
    for s in SCENARIOS.iter().filter(|s| filter.is_empty() || filter.iter().any(|f| s.name.contains(f.as_str()))) {
        let runs = sorted_runs(s.shape, s.runs, s.rows, None, 42);
        let keys = key_names(s.shape);
        let sort_keys: Vec<SortKey> = keys.iter().map(|k| SortKey::asc(*k)).collect();
        let opts = MergeOptions::default().with_engine(Engine::Cpu).with_batch_size(BATCH);
        let plan = spm::spm_plan(&runs, &keys, BATCH);
        // Both sides must agree before either is timed (this is also the warm-up).
        let ours = corank::merge(&runs, &sort_keys, &opts).unwrap();
        let theirs = rt.block_on(collect(plan.clone(), ctx.clone())).unwrap();
        let concat = |b: &[RecordBatch]| arrow::compute::concat_batches(&b[0].schema(), b).unwrap();
        assert_eq!(concat(&ours), concat(&theirs), "{}: corank and SPM differ", s.name);
        drop((ours, theirs));

        let (mut corank_times, mut spm_times) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
        for _ in 0..reps {
            let t = Instant::now();
            drop(corank::merge(&runs, &sort_keys, &opts).unwrap());
            corank_times.push(t.elapsed());
            let t = Instant::now();
            drop(rt.block_on(collect(plan.clone(), ctx.clone())).unwrap());
            spm_times.push(t.elapsed());
        }
        let (ours, theirs) = (median(corank_times).as_secs_f64(), median(spm_times).as_secs_f64());
        let rows = (s.runs * s.rows) as f64;
        println!(
            "{:<20} {:>8} {:>14.1} {:>14.1} {:>12.1} {:>12.1} {:>7.2}x",
            s.name,
            s.runs * s.rows,
            ours * 1e3,
            theirs * 1e3,
            rows / ours / 1e6,
            rows / theirs / 1e6,
            theirs / ours
        );
    }
    println!("threads: {}, medians of {reps} alternating runs", rayon::current_num_threads());
}

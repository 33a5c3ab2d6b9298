//! The comparison with other tools (`benches/cli`, `cargo bench --bench cli`) under `cargo
//! test`: the harness's modules are included here, so their unit tests run (a `harness =
//! false` bench's own `#[test]`s never do), and a small comparison runs end to end through
//! the `corank` binary. The DataFusion contenders run in-process here: their child is the
//! bench executable itself, which a test cannot start.
// The harness's entry points (its `main`, `session::run`) are the bench's, unused here.
#![allow(dead_code)]

#[path = "../../benches/cli/args.rs"]
mod args;
#[path = "../../benches/cli/chart.rs"]
mod chart;
#[path = "../../benches/cli/check.rs"]
mod check;
// The cluster bench's (`benches/cluster`) reading of Ballista's stages, for its unit tests.
#[path = "../../benches/cluster/stages.rs"]
mod cluster_stages;
#[path = "../../benches/cli/contenders.rs"]
mod contenders;
#[path = "../../benches/cli/datafusion_copy.rs"]
mod datafusion_copy;
#[path = "../../benches/cli/measure.rs"]
mod measure;
#[path = "../../benches/cli/png.rs"]
mod png;
#[path = "../../benches/cli/session.rs"]
mod session;
#[path = "../../benches/cli/store.rs"]
mod store;
#[path = "../../benches/cli/table.rs"]
mod table;
#[path = "../../src/cli/units.rs"]
mod units;
// The harness's modules name the generator `super::datagen`.
use crate::datagen;

use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use clap::Parser;
use datagen::{dataset_key_range, write_dataset, Dataset, LINEITEM_KEY};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::path::{Path, PathBuf};

#[test]
fn a_small_comparison_checks_every_output_and_draws_its_table_and_chart() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let only = "corank-cpu,floor-corank";
    let argv = ["cli", "--sizes", "20k", "--files", "4", "--datasets", "lineitem,time", "--only", only, "--dir", dir, "--bench"];
    // `cargo bench` appends `--bench`; the harness's main drops it before parsing.
    let args = args::BenchArgs::parse_from(argv.into_iter().filter(|a| *a != "--bench"));
    let (results, contenders) = session::measure_all(&args, &contenders::Programs::here()).unwrap();
    let table = table::render(&results, &contenders);
    // | dataset | rows | contender | version | seconds | M rows/s | peak RSS MiB | corank best / this | this / floor |
    for dataset in ["lineitem", "time"] {
        for contender in ["corank-cpu", "floor-corank"] {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {dataset} | 20,000 | {contender} |")))
                .unwrap_or_else(|| panic!("no {dataset} {contender} row in\n{table}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let rss: f64 = cells[7].parse().unwrap_or_else(|_| panic!("no peak RSS in {row}"));
            assert!(rss > 1.0, "{row}");
            let best: f64 = cells[8].trim_end_matches('x').parse().unwrap_or_else(|_| panic!("no corank ratio in {row}"));
            assert!(best > 0.0 && (contender != "corank-cpu" || best == 1.0), "{row}");
            assert_eq!(cells[9], "n/a", "no floor ran: {row}");
        }
    }
    // No --memory-limit: corank's default, half the memory available here.
    let bound = table::memory_bound(&results, &args).unwrap();
    assert_eq!(bound, format!("corank's peak RSS is within --memory-limit {} + 20% in every run", table::memory_limit_shown(&args)));
    assert!(bound.contains(" GiB (default) + 20%"), "{bound}");
    let chart = d.path().join("chart.png");
    chart::draw(&chart, "Merging", &results).unwrap();
    assert_eq!(&std::fs::read(&chart).unwrap()[1..4], b"PNG");
}

#[test]
fn the_s3_comparison_merges_from_objects_and_measures_the_store() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let bucket = crate::common::moto::bucket("bench-s3");
    let endpoint = format!("http://127.0.0.1:{}", crate::common::moto::servers().s3);
    let only = "corank-cpu,corank-cpu-s3,store-floor";
    let argv = ["cli", "--sizes", "20k", "--files", "4", "--datasets", "lineitem", "--only", only, "--dir", dir];
    let args = args::BenchArgs::parse_from(argv.into_iter().chain(["--s3-endpoint", &endpoint, "--s3-bucket", &bucket]));
    let (results, contenders) = session::measure_all(&args, &contenders::Programs::here()).unwrap();
    let table = table::render(&results, &contenders);
    // corank-cpu-s3's output was fetched and checked (rows, order, checksum) like the
    // others; store-floor timed the objects' GET and one PUT.
    for contender in ["corank-cpu", "corank-cpu-s3", "store-floor"] {
        let row = table.lines().find(|l| l.starts_with(&format!("| lineitem | 20,000 | {contender} |")));
        let row = row.unwrap_or_else(|| panic!("no {contender} row in\n{table}"));
        let seconds: f64 = row.split('|').map(str::trim).nth(5).unwrap().parse().unwrap();
        assert!(seconds > 0.0, "{row}");
    }
    // The inputs stay in the bucket (reused by the next run); the outputs are gone.
    let (keys, uploads) = crate::store::keys_and_uploads(&bucket);
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("lineitem-4x")) && uploads.is_empty(), "{keys:?} {uploads:?}");
}

#[test]
fn duckdb_gets_corank_memory_limit_only_when_asked() {
    let limit_of = |extra: &[&str]| {
        let args = args::BenchArgs::parse_from(["cli", "--memory-limit", "2GiB"].iter().chain(extra));
        let cmd = contenders::command_for("duckdb", &args, &contenders::Programs::here(), &[], Path::new("out.parquet"));
        let env = cmd.get_envs().find(|(k, _)| *k == "DUCKDB_MEMORY_LIMIT").and_then(|(_, v)| v.map(|v| v.to_owned()));
        env.map(|v| v.to_string_lossy().into_owned())
    };
    assert_eq!(limit_of(&["--equal-memory"]), Some("2048MiB".into()));
    assert_eq!(limit_of(&[]), None);
    assert!(args::BenchArgs::try_parse_from(["cli", "--equal-memory"]).is_err(), "--equal-memory needs --memory-limit");
}

#[test]
fn the_datafusion_contender_and_the_floor_keep_every_row() {
    let d = tempfile::tempdir().unwrap();
    let files = write_dataset(&d.path().join("in"), Dataset::Time, 3, 10_000, 4_000, 5).unwrap();
    let input = check::check_output(&files, LINEITEM_KEY).unwrap();
    assert_eq!(input.rows, 30_000);
    for no_order in [false, true] {
        let output = d.path().join(format!("out-{no_order}.parquet"));
        let copy = args::DataFusionCopyArgs { no_order, output: output.clone(), key: LINEITEM_KEY.into(), files: files.clone() };
        datafusion_copy::run(&copy).unwrap();
        let out = check::check_output(std::slice::from_ref(&output), LINEITEM_KEY).unwrap();
        assert_eq!((out.rows, out.checksum), (input.rows, input.checksum), "no_order {no_order}");
        assert!(out.sorted || no_order, "COPY .. ORDER BY wrote rows out of order");
    }
}

/// Each file's rows: (count, sorted, min, max) of `l_orderkey`.
fn keys_of(path: &Path) -> (usize, bool, i64, i64) {
    let (mut n, mut sorted, mut lo, mut hi) = (0, true, i64::MAX, i64::MIN);
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap().build().unwrap();
    for batch in reader {
        let batch = batch.unwrap();
        for &k in batch.column_by_name(LINEITEM_KEY).unwrap().as_primitive::<Int64Type>().values() {
            sorted &= n == 0 || k >= hi;
            n += 1;
            lo = lo.min(k);
            hi = hi.max(k);
        }
    }
    (n, sorted, lo, hi)
}

#[test]
fn time_partitioned_files_are_sorted_and_overlap_by_at_most_5_percent() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_dataset(dir.path(), Dataset::Time, 5, 40_000, 6_000, 1).unwrap();
    let files: Vec<_> = paths.iter().map(|p| keys_of(p)).collect();
    for (f, &(n, sorted, lo, hi)) in files.iter().enumerate() {
        assert_eq!(n, 40_000, "file {f}");
        assert!(sorted, "file {f} is not sorted");
        let (a, w) = dataset_key_range(Dataset::Time, 5, 40_000, f);
        assert!(lo >= a as i64 && hi < (a + w) as i64, "file {f}: {lo}..={hi} outside {a}..{}", a + w);
    }
    for (f, pair) in files.windows(2).enumerate() {
        let ((_, _, lo0, hi0), (_, _, lo1, hi1)) = (pair[0], pair[1]);
        let overlap = hi0 - lo1;
        assert!(lo1 > lo0 && hi1 > hi0, "files {f} and {} are not in key order", f + 1);
        assert!(overlap > 0, "files {f} and {} do not overlap", f + 1);
        assert!(overlap as f64 <= 0.05 * (hi0 - lo0) as f64, "files {f} and {}: overlap {overlap} of {}", f + 1, hi0 - lo0);
    }
    // The lineitem dataset: every file sorted, spanning the whole key range.
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = write_dataset(dir.path(), Dataset::Lineitem, 3, 30_000, 7_000, 1).unwrap();
    let (_, width) = dataset_key_range(Dataset::Lineitem, 3, 30_000, 0);
    for p in &paths {
        let (n, sorted, lo, hi) = keys_of(p);
        assert!(n == 30_000 && sorted, "{}", p.display());
        assert!(lo < width as i64 / 20 && hi > width as i64 * 19 / 20, "{lo}..={hi} of {width}");
    }
}

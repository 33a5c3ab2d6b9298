//! Cancelling a file merge or sort from another thread ([`crate::Cancel`]): every path
//! returns [`Error::Cancelled`] promptly and leaves nothing behind (no output, no temporary
//! file, no spill directory). The bound asserted (2 s) is generous so that a loaded machine
//! never fails it; `measure_cancel_latency` (ignored) prints the real figures.

use crate::common::Rng;
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use corank::parquet::{
    merge_files, plan_merge, plan_sort, sort_files, MergeFilesOptions, PlanOptions, SortFilesOptions, SortPhase, SortStrategy,
};
use corank::{Cancel, Engine, EngineOptions, Error, SortKey};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The bound no cancel may pass, even on a loaded machine (measured: well under 100 ms).
const BOUND: Duration = Duration::from_secs(2);

/// `files` files of `rows` rows each in `dir`: `k` sorted (the merge key), `v` random (the
/// sort key) and `s`, `v` as text; row groups of 100k rows.
fn inputs(dir: &Path, files: usize, rows: usize) -> Vec<PathBuf> {
    let mut rng = Rng::new(7);
    (0..files)
        .map(|f| {
            let mut k: Vec<i64> = (0..rows).map(|_| rng.below(1 << 40) as i64).collect();
            k.sort_unstable();
            let v: Vec<i64> = (0..rows).map(|_| rng.below(1 << 60) as i64).collect();
            let s = StringArray::from_iter_values(v.iter().map(|x| x.to_string()));
            let batch = RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
                ("v", Arc::new(Int64Array::from(v)) as ArrayRef),
                ("s", Arc::new(s) as ArrayRef),
            ])
            .unwrap();
            let path = dir.join(format!("in-{f}.parquet"));
            let props = WriterProperties::builder().set_compression(Compression::UNCOMPRESSED).set_max_row_group_row_count(Some(100_000));
            let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props.build())).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            path
        })
        .collect()
}

/// Runs `work` with a token that another thread cancels `delay` after the work first calls
/// its trigger (from a progress report, or at once). The work's result and the time from
/// the cancel to its return (`None`: it returned before the cancel).
fn cancelled<T>(
    delay: Duration,
    work: impl FnOnce(Cancel, &(dyn Fn() + Sync)) -> corank::Result<T>,
) -> (corank::Result<T>, Option<Duration>) {
    let cancel = Cancel::new();
    let at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (armed, arm) = mpsc::channel::<()>();
    let canceller = {
        let (cancel, at) = (cancel.clone(), Arc::clone(&at));
        std::thread::spawn(move || {
            if arm.recv().is_ok() {
                std::thread::sleep(delay);
                *at.lock().unwrap() = Some(Instant::now());
                cancel.cancel();
            }
        })
    };
    let armed = Mutex::new(Some(armed));
    let trigger = || {
        if let Some(armed) = armed.lock().unwrap().take() {
            let _ = armed.send(());
        }
    };
    let result = work(cancel, &trigger);
    let returned = Instant::now();
    drop(armed.lock().unwrap().take());
    let cancelled_at = *at.lock().unwrap();
    canceller.join().unwrap();
    (result, cancelled_at.map(|t| returned.saturating_duration_since(t)))
}

/// The names in `dir` besides the inputs.
fn left(dir: &Path, inputs: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !inputs.contains(p))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn cpu() -> EngineOptions {
    EngineOptions::default().with_engine(Engine::Cpu)
}

/// A merge of `inputs` into `dir/out.parquet`, cancelled `delay` after its first progress
/// report (`at_start`: after it starts); the latency.
fn cancel_merge(dir: &Path, inputs: &[PathBuf], delay: Duration, at_start: bool) -> Duration {
    let plan = plan_merge(inputs, Some(vec![SortKey::asc("k")])).unwrap();
    let out = dir.join("out.parquet");
    let (result, latency) = cancelled(delay, |cancel, trigger| {
        if at_start {
            trigger();
        }
        let options = MergeFilesOptions { engine: cpu(), cancel: Some(cancel), ..Default::default() };
        merge_files(&plan, &out, &options, &|rows| {
            if rows > 0 {
                trigger()
            }
        })
    });
    check_cancelled(result.map(drop), latency, dir, inputs)
}

/// A sort of `inputs` into `dir/out.parquet` with `strategy` and `memory_limit`, cancelled
/// `delay` after its first progress report of `phase` (`None`: after it starts).
fn cancel_sort(
    dir: &Path,
    inputs: &[PathBuf],
    strategy: SortStrategy,
    memory_limit: usize,
    phase: Option<SortPhase>,
    delay: Duration,
) -> Duration {
    let out = dir.join("out.parquet");
    let (result, latency) = cancelled(delay, |cancel, trigger| {
        if phase.is_none() {
            trigger();
        }
        let options = SortFilesOptions { engine: cpu(), memory_limit, strategy, cancel: Some(cancel), ..Default::default() };
        let plan = plan_sort(inputs, Some(vec![SortKey::asc("v")]), &PlanOptions::default(), &out, &options)?;
        let expected = if strategy == SortStrategy::Columns { "columns" } else { "runs" };
        assert_eq!(plan.columns.is_some(), expected == "columns", "the plan runs as {expected}");
        sort_files(&plan, &out, &options, &|p, rows| {
            if Some(p) == phase && rows > 0 {
                trigger()
            }
        })
    });
    check_cancelled(result.map(drop), latency, dir, inputs)
}

fn check_cancelled(result: corank::Result<()>, latency: Option<Duration>, dir: &Path, inputs: &[PathBuf]) -> Duration {
    let latency = latency.expect("the work ended before the cancel: give it more rows");
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    assert!(latency < BOUND, "{latency:?} from the cancel to the return");
    assert_eq!(left(dir, inputs), Vec::<String>::new(), "nothing is left behind");
    latency
}

#[test]
fn a_merge_stops_within_bounds_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 4, 400_000);
    // While it writes (the first piece written), and while it starts (readers, writer).
    cancel_merge(dir.path(), &files, Duration::from_millis(20), false);
    cancel_merge(dir.path(), &files, Duration::from_millis(5), true);
}

#[test]
fn a_merge_cancelled_before_it_starts_does_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 2, 1000);
    let plan = plan_merge(&files, Some(vec![SortKey::asc("k")])).unwrap();
    let cancel = Cancel::new();
    cancel.cancel();
    let options = MergeFilesOptions { cancel: Some(cancel), ..Default::default() };
    let result = merge_files(&plan, &dir.path().join("out.parquet"), &options, &|_| {});
    assert!(matches!(result, Err(Error::Cancelled)), "{result:?}");
    assert_eq!(left(dir.path(), &files), Vec::<String>::new());
    assert_eq!(Error::Cancelled.to_string(), "cancelled: stopped before the end, nothing written");
}

#[test]
fn a_sort_in_runs_stops_in_each_phase_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 4, 250_000);
    // Spilled runs: while chunks are read, sorted and spilled; while the runs merge.
    cancel_sort(dir.path(), &files, SortStrategy::Runs, 24 << 20, Some(SortPhase::Runs), Duration::from_millis(10));
    cancel_sort(dir.path(), &files, SortStrategy::Runs, 24 << 20, Some(SortPhase::Merge), Duration::from_millis(10));
    // Every row in one chunk, sorted straight into the output: cancelled in the sort.
    cancel_sort(dir.path(), &files, SortStrategy::Runs, 1 << 30, None, Duration::from_millis(150));
}

#[test]
fn a_sort_by_columns_stops_in_each_phase_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(dir.path(), 4, 250_000);
    // In the key sort (or the keys' decoding), and while the columns encode.
    cancel_sort(dir.path(), &files, SortStrategy::Columns, 1 << 30, None, Duration::from_millis(30));
    cancel_sort(dir.path(), &files, SortStrategy::Columns, 1 << 30, Some(SortPhase::Runs), Duration::from_millis(10));
}

/// The latencies for the report: `cargo test --profile quick --all-features --lib
/// measure_cancel_latency -- --ignored --nocapture` (4 files of 2.5M rows, about 400 MB of
/// Arrow data).
#[test]
#[ignore]
fn measure_cancel_latency() {
    let dir = tempfile::tempdir().unwrap();
    let rows = std::env::var("CORANK_CANCEL_ROWS").ok().and_then(|r| r.parse().ok()).unwrap_or(2_500_000);
    let files = inputs(dir.path(), 4, rows);
    let ms = Duration::from_millis;
    let show = |what: &str, runs: Vec<Duration>| {
        let runs: Vec<f64> = runs.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        println!("{what:<44} cancel -> return: {:?} ms", runs.iter().map(|m| format!("{m:.1}")).collect::<Vec<_>>());
    };
    let delays: Vec<Duration> = std::env::var("CORANK_CANCEL_DELAYS")
        .map(|d| d.split(',').map(|m| ms(m.parse().unwrap())).collect())
        .unwrap_or_else(|_| vec![ms(50), ms(300), ms(900)]);
    let only = std::env::var("CORANK_CANCEL_ONLY").unwrap_or_default();
    if only == "merge" {
        show("merge_files", delays.iter().map(|&d| cancel_merge(dir.path(), &files, d, true)).collect());
        return;
    }
    if only == "one_chunk" {
        let one_chunk = |d| cancel_sort(dir.path(), &files, SortStrategy::Runs, 8 << 30, None, d);
        show("sort_files runs: one chunk (sort, write)", delays.iter().map(|&d| one_chunk(d)).collect());
        return;
    }
    show("merge_files", delays.iter().map(|&d| cancel_merge(dir.path(), &files, d, true)).collect());
    let runs = |phase, d| cancel_sort(dir.path(), &files, SortStrategy::Runs, 256 << 20, phase, d);
    show("sort_files runs: reading, sorting, spilling", delays.iter().map(|&d| runs(None, d)).collect());
    show("sort_files runs: final merge", [ms(10), ms(200), ms(600)].iter().map(|&d| runs(Some(SortPhase::Merge), d)).collect());
    let one_chunk = |d| cancel_sort(dir.path(), &files, SortStrategy::Runs, 8 << 30, None, d);
    show("sort_files runs: one chunk (sort, write)", delays.iter().map(|&d| one_chunk(d)).collect());
    let columns = |phase, d| cancel_sort(dir.path(), &files, SortStrategy::Columns, 4 << 30, phase, d);
    show("sort_files columns: keys read and sorted", [ms(100), ms(400), ms(800)].iter().map(|&d| columns(None, d)).collect());
    show("sort_files columns: columns encoded", delays.iter().map(|&d| columns(Some(SortPhase::Runs), d)).collect());
}

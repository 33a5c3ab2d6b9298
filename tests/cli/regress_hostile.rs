//! Regression tests of issue 62 (hostile and unusual files) for `corank merge`: a full
//! stderr or stdout never panics (4); row groups tied on a key's first column join as runs,
//! and many runs stay within the memory limit (10); leftovers of killed runs are skipped as
//! inputs and cleared by the next run (13); `--max-row-group-bytes` holds below 8,192 rows
//! (15).

use crate::cli_common::{command, corank, files_in, read_file, simple_file, text, write_file, Keys};
use crate::common::{oracle, random_key_columns, sorted_run, Rng};
use arrow::array::{ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{Int64Type, UInt64Type};
use arrow::row::{RowConverter, SortField};
use corank::parquet::{merge_files, plan_merge, MergeFilesOptions};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::fs::File;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn keys_of(path: &Path, column: &str) -> Vec<i64> {
    let (batches, _) = read_file(path);
    batches.iter().flat_map(|b| b.column_by_name(column).unwrap().as_primitive::<Int64Type>().values().to_vec()).collect()
}

fn one_json_object(out: &Output) -> serde_json::Value {
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "not one line: {stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

// --- 4. a full stderr or stdout --------------------------------------------------------

/// A device that takes no byte: every write fails with ENOSPC.
fn full() -> Stdio {
    Stdio::from(File::create("/dev/full").unwrap())
}

/// Runs `corank ARGS` with stderr on /dev/full (and stdout too with `stdout_full`); its exit code.
fn code_with_full(args: &[&str], stdout_full: bool, env: Option<(&str, &str)>) -> Option<i32> {
    let mut c = command();
    c.args(args).stderr(full()).stdout(if stdout_full { full() } else { Stdio::piped() });
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(out.status.code().is_some(), "{args:?}: ended by a signal ({})", out.status);
    out.status.code()
}

/// `eprintln!` panics when stderr fails (exit 101): every line the binary prints goes
/// through writes whose failure is ignored, and the exit code says what the run did.
#[test]
fn a_full_stderr_or_stdout_never_panics() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a.parquet"), d.path().join("b.parquet"));
    simple_file(&a, &[vec![1, 3, 5]], true);
    simple_file(&b, &[vec![2, 4]], true);
    let unsorted = d.path().join("unsorted.parquet");
    simple_file(&unsorted, &[vec![3, 1, 2]], false);
    let (a, b, unsorted) = (a.to_str().unwrap(), b.to_str().unwrap(), unsorted.to_str().unwrap());
    let out = |name: &str| d.path().join(name).display().to_string();

    // Success with -v (its lines on stderr): 0, and the output written.
    let o = out("v.parquet");
    assert_eq!(code_with_full(&["merge", a, b, "-o", &o, "-v", "--engine", "cpu"], false, None), Some(0));
    assert_eq!(keys_of(Path::new(&o), "k"), [1, 2, 3, 4, 5]);
    let o = out("vv.parquet");
    assert_eq!(code_with_full(&["merge", a, b, "-o", &o, "-vvv", "--engine", "cpu"], false, None), Some(0));
    let o = out("sorted.parquet");
    assert_eq!(code_with_full(&["sort", unsorted, "-o", &o, "--by", "k", "-v", "--engine", "cpu"], false, None), Some(0));
    assert_eq!(keys_of(Path::new(&o), "k"), [1, 2, 3]);
    // RUST_LOG's unreadable directives are reported on stderr.
    let o = out("log.parquet");
    assert_eq!(code_with_full(&["merge", a, b, "-o", &o, "--engine", "cpu"], false, Some(("RUST_LOG", "loud"))), Some(0));
    // Errors: their exit codes (1 a missing input, 2 usage, 3 unsorted), with --json too.
    let missing = out("missing.parquet");
    assert_eq!(code_with_full(&["merge", &missing, "-o", &out("x.parquet")], false, None), Some(1));
    assert_eq!(code_with_full(&["merge", a], false, None), Some(2));
    assert_eq!(code_with_full(&["merge", a, "-o", &out("x.parquet"), "--by", "nope", "--json"], true, None), Some(2));
    assert_eq!(code_with_full(&["merge", unsorted, "-o", &out("x.parquet"), "--by", "k"], false, None), Some(3));
    assert_eq!(code_with_full(&["merge", unsorted, "-o", &out("x.parquet"), "--by", "k", "--json"], true, None), Some(3));
    // A full stdout too: the summary or plan that cannot be written is the run's error (1);
    // the output stays.
    let o = out("both.parquet");
    assert_eq!(code_with_full(&["merge", a, b, "-o", &o, "--engine", "cpu"], true, None), Some(1));
    assert_eq!(keys_of(Path::new(&o), "k"), [1, 2, 3, 4, 5]);
    assert_eq!(code_with_full(&["merge", a, b, "-o", &out("dry.parquet"), "--dry-run"], true, None), Some(1));
    assert_eq!(code_with_full(&["--version"], true, None), Some(0));
    assert_eq!(code_with_full(&["merge", "--help"], true, None), Some(0));
    assert!(!d.path().join("x.parquet").exists() && !d.path().join("dry.parquet").exists());
    // Only stdout full, stderr fine: the error is said on stderr.
    let res = command().args(["merge", a, b, "-o", &out("s.parquet"), "--json"]).stdout(full()).output().unwrap();
    assert_eq!(res.status.code(), Some(1), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("stdout"), "{}", text(&res.stderr));
}

// --- 10. runs from row groups tied on the first key column; many runs -------------------

/// A file of `n` one-row row groups sorted by `(a, b)`: `a` ties across runs of 100 row
/// groups, `(a, b)` across pairs. Written uncompressed with statistics.
fn tied_file(path: &Path, n: i64) {
    let groups: Vec<RecordBatch> = (0..n)
        .map(|i| {
            RecordBatch::try_from_iter([
                ("a", Arc::new(Int64Array::from(vec![i / 200])) as ArrayRef),
                ("b", Arc::new(Int32Array::from(vec![(i / 2 % 100) as i32])) as ArrayRef),
                ("id", Arc::new(Int64Array::from(vec![i])) as ArrayRef),
            ])
            .unwrap()
        })
        .collect();
    write_file(path, &groups, None);
}

/// The brief's case: a file of thousands of one-row row groups sorted by a two-column key
/// whose first column ties across row groups was one run per row group (ties on the first
/// column were never joined for a longer key), and a merge of it held memory quadratic in
/// them (every phase between copied row groups listed every run). It is one run now, and
/// a merge stays within the limit + 20% + the 64 MiB floor.
#[test]
fn row_groups_tied_on_the_first_key_column_join_as_one_run() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("tied.parquet");
    let n = 3000;
    tied_file(&input, n);
    let input = input.to_str().unwrap();
    let out = d.path().join("out.parquet");
    let out_s = out.to_str().unwrap();
    let res = corank(&["merge", input, "-o", out_s, "--by", "a, b", "--dry-run", "--json"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let runs = one_json_object(&res)["runs"].as_array().unwrap().len();
    assert_eq!(runs, 1, "the row groups continue each other");
    let limit = 64u64 << 20;
    for by in ["a, b", "a, b, id"] {
        let _ = std::fs::remove_file(&out);
        let args =
            ["merge", input, "-o", out_s, "--by", by, "--json", "--engine", "cpu", "--memory-limit", "64MiB", "--compression", "none"];
        let res = corank(&args);
        assert!(res.status.success(), "{}", text(&res.stderr));
        let v = one_json_object(&res);
        assert_eq!(v["runs"].as_u64(), Some(1), "{by}");
        let peak = v["peak_memory_bytes"].as_u64().unwrap();
        assert!(peak <= limit * 6 / 5 + (64 << 20), "{by}: peak {peak} bytes");
        assert_eq!(keys_of(&out, "id"), (0..n).collect::<Vec<_>>(), "{by}");
    }
}

/// Thousands of runs that each lie apart from the others (one file, its one-row row groups
/// in descending order, merged ascending: no two join, every one is copied untouched), so
/// thousands of phases: the merge's memory stays within the limit + 20% + the floor, as it
/// does when they are all merged in one phase.
#[test]
fn thousands_of_copied_runs_stay_within_the_memory_limit() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("descending.parquet");
    let n: i64 = 3000;
    let groups: Vec<RecordBatch> = (0..n)
        .map(|i| {
            let k = n - 1 - i;
            RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(vec![k])) as ArrayRef),
                ("v", Arc::new(StringArray::from(vec![format!("value {k}")])) as ArrayRef),
            ])
            .unwrap()
        })
        .collect();
    write_file(&input, &groups, None);
    let out = d.path().join("out.parquet");
    // Uncompressed as the input, so that its row groups are copied (passthrough auto).
    let args = [
        "merge",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--by",
        "k",
        "--engine",
        "cpu",
        "--memory-limit",
        "32MiB",
        "--compression",
        "none",
    ];
    let res = corank(&[&args[..], &["--dry-run", "--json"]].concat());
    assert!(res.status.success(), "{}", text(&res.stderr));
    let plan = one_json_object(&res);
    assert_eq!(plan["runs"].as_array().unwrap().len(), n as usize);
    assert_eq!(plan["passthrough"]["row_groups"].as_u64(), Some(n as u64), "{}", plan["passthrough"]);
    // Copied, and all merged (one phase of thousands of runs).
    for passthrough in ["auto", "never"] {
        let _ = std::fs::remove_file(&out);
        let res = corank(&[&args[..], &["--json", "--passthrough", passthrough]].concat());
        assert!(res.status.success(), "{}", text(&res.stderr));
        let v = one_json_object(&res);
        let peak = v["peak_memory_bytes"].as_u64().unwrap();
        assert!(peak <= (32u64 << 20) * 6 / 5 + (64 << 20), "passthrough {passthrough}: peak {peak} bytes");
        assert_eq!(keys_of(&out, "k"), (0..n).collect::<Vec<_>>(), "passthrough {passthrough}");
    }
}

/// Row groups join as runs only where they continue each other: random files of sorted
/// rows cut into small row groups (some neighbours swapped), keys of two or three columns
/// of random types, directions and nulls. Every run the plan makes is sorted as a whole,
/// the merge is the oracle, and ties on leading columns do join.
#[test]
fn row_groups_join_only_where_they_continue() {
    let mut joined = 0;
    for seed in 0..60u64 {
        let mut rng = Rng::new(6200 + seed);
        let ncols = 2 + rng.below(2) as usize;
        let (types, options) = random_key_columns(&mut rng, ncols);
        let keys: Keys = options.iter().enumerate().map(|(i, o)| (format!("k{i}"), *o)).collect();
        let domain = [1, 2, 3, 6][rng.below(4) as usize];
        let null_p = [0.0, 0.2, 0.6][rng.below(3) as usize];
        let n = 30 + rng.below(60) as usize;
        let sorted = sorted_run(&mut rng, &types, &options, n, domain, null_p, 0);
        let mut groups = Vec::new();
        let mut at = 0;
        while at < n {
            let len = (1 + rng.below(4) as usize).min(n - at);
            groups.push(sorted.slice(at, len));
            at += len;
        }
        for _ in 0..rng.below(3) {
            let i = rng.below(groups.len() as u64 - 1) as usize;
            groups.swap(i, i + 1);
        }
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("in.parquet");
        write_file(&path, &groups, None);
        let context = format!("seed {seed}: types {types:?}, options {options:?}, domain {domain}, nulls {null_p}");
        // The file as Parquet gives it back, and where each row group starts.
        let (batches, _) = read_file(&path);
        let all = concat_batches(&batches[0].schema(), &batches).unwrap();
        let mut starts = vec![0];
        for g in &groups {
            starts.push(starts.last().unwrap() + g.num_rows());
        }
        let by: Vec<corank::SortKey> = keys.iter().map(|(c, o)| corank::SortKey::new(c.clone(), *o)).collect();
        let plan = plan_merge(std::slice::from_ref(&path), Some(by)).unwrap();
        let fields: Vec<SortField> =
            keys.iter().map(|(c, o)| SortField::new_with_options(all.column_by_name(c).unwrap().data_type().clone(), *o)).collect();
        let converter = RowConverter::new(fields).unwrap();
        let columns: Vec<ArrayRef> = keys.iter().map(|(c, _)| all.column_by_name(c).unwrap().clone()).collect();
        let rows = converter.convert_columns(&columns).unwrap();
        for run in &plan.runs {
            let (first, last) = (starts[run.row_groups[0]], starts[*run.row_groups.last().unwrap() + 1]);
            for r in first + 1..last {
                assert!(rows.row(r - 1) <= rows.row(r), "{context}: run of row groups {:?} is not sorted at row {r}", run.row_groups);
            }
        }
        joined += groups.len() - plan.runs.len();
        // The merge is the stable sort of the file's rows.
        let out = d.path().join("out.parquet");
        merge_files(&plan, &out, &MergeFilesOptions::default(), &|_| {}).unwrap_or_else(|e| panic!("{context}: {e}"));
        let want = take(
            all.column_by_name("id").unwrap(),
            &UInt64Array::from_iter_values(oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| i as u64)),
            None,
        )
        .unwrap();
        let (got, _) = read_file(&out);
        let got: Vec<u64> =
            got.iter().flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect();
        assert_eq!(got, want.as_primitive::<UInt64Type>().values().to_vec(), "{context}");
    }
    assert!(joined > 0, "no row group joined a run");
}

// --- 13. leftovers of killed runs ------------------------------------------------------

/// Holds an exclusive `flock` on `path` (a file or directory), as a running corank does.
fn flock(path: &Path) -> File {
    use std::os::unix::io::AsRawFd;
    let f = File::open(path).unwrap();
    // SAFETY: flock on a descriptor `f` owns.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    f
}

/// A killed run's temporary output and spill directory (with a spill run of real rows)
/// beside the inputs: a `**` glob does not read them, and the merge removes them; the same
/// leftovers of a run still going (their locks held) are neither read nor removed.
#[test]
fn leftovers_of_killed_runs_are_not_inputs_and_the_next_run_removes_them() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    simple_file(&data.join("a.parquet"), &[vec![1, 3, 5]], true);
    simple_file(&data.join("sub/b.parquet"), &[vec![2, 4]], true);
    let stale_dir = data.join(".corank-sort-0123456789abcdef");
    let live_dir = data.join(".corank-sort-fedcba9876543210");
    for dir in [&stale_dir, &live_dir] {
        std::fs::create_dir(dir).unwrap();
        simple_file(&dir.join("run-000000.parquet"), &[vec![100, 200]], true);
    }
    let stale_tmp = data.join(".corank-00000000deadbeef.tmp");
    let live_tmp = data.join(".corank-00000000feedf00d.tmp");
    std::fs::copy(data.join("a.parquet"), &stale_tmp).unwrap();
    std::fs::copy(data.join("a.parquet"), &live_tmp).unwrap();
    let _held = (flock(&live_dir), flock(&live_tmp));

    let out = data.join("out.parquet");
    let pattern = format!("{}/**/*.parquet", data.display());
    let res = corank(&["merge", &pattern, "-o", out.to_str().unwrap(), "--engine", "cpu"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(keys_of(&out, "k"), [1, 2, 3, 4, 5], "spill runs read as inputs");
    assert!(text(&res.stderr).contains(".corank-sort-fedcba9876543210"), "the skipped file is named: {}", text(&res.stderr));
    assert!(!stale_dir.exists() && !stale_tmp.exists(), "left: {:?}", files_in(&data));
    assert!(live_dir.join("run-000000.parquet").exists() && live_tmp.exists(), "a running one's files removed");
    // A spill run named explicitly is an input like any file, and its directory stays.
    let res = corank(&["merge", live_dir.join("run-000000.parquet").to_str().unwrap(), "-o", out.to_str().unwrap(), "-f"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(keys_of(&out, "k"), [100, 200]);
}

/// A sort killed (SIGKILL) while it spills leaves its spill directory in --temp-dir; the
/// next sort there removes it, and writes its own output as if nothing were there.
#[test]
fn a_sort_killed_while_spilling_leaves_what_the_next_sort_removes() {
    let d = tempfile::tempdir().unwrap();
    let tmp = d.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let input = d.path().join("in.parquet");
    let n = 600_000i64;
    let k: Vec<i64> = (0..n).map(|i| (i * 7919) % n).collect();
    let v: Vec<String> = k.iter().map(|x| format!("{x:040}")).collect();
    let batch =
        RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
            .unwrap();
    let groups: Vec<RecordBatch> = (0..6).map(|i| batch.slice(i * 100_000, 100_000)).collect();
    write_file(&input, &groups, None);
    let spill_dirs = || -> Vec<String> { files_in(&tmp).into_iter().filter(|f| f.starts_with(".corank-sort-")).collect() };
    let args = |out: &Path| -> Vec<String> {
        ["sort", input.to_str().unwrap(), "-o", out.to_str().unwrap(), "--by", "k", "--engine", "cpu", "--strategy", "runs"]
            .iter()
            .map(|s| s.to_string())
            .chain(["--memory-limit".into(), "16MiB".into(), "--temp-dir".into(), tmp.display().to_string()])
            .collect()
    };
    // Spilling: a spill directory holds a run. (The binary first creates and removes an
    // empty one to check that --temp-dir can be written: killing the sort then proves
    // nothing, and waiting for the directory alone raced with that check's removal.)
    let spilling = || {
        spill_dirs().iter().any(|dir| {
            // (The check's directory may go between the listing and this read.)
            std::fs::read_dir(tmp.join(dir))
                .is_ok_and(|mut e| e.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().starts_with("run-"))))
        })
    };
    let killed = d.path().join("killed.parquet");
    let mut child = command().args(args(&killed)).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let start = Instant::now();
    while !spilling() {
        assert!(child.try_wait().unwrap().is_none(), "the sort ended before it spilled");
        assert!(start.elapsed() < Duration::from_secs(120), "no spill directory after 120 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL: no handler runs
    child.wait().unwrap();
    let left = spill_dirs();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(!killed.exists());
    let out = d.path().join("out.parquet");
    let res = command().args(args(&out)).output().unwrap();
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(spill_dirs(), Vec::<String>::new(), "the killed sort's spill directory is still there");
    assert_eq!(keys_of(&out, "k"), (0..n).collect::<Vec<_>>());
}

// --- 15. --max-row-group-bytes below 8,192 rows -----------------------------------------

/// Bytes of a row group's Arrow data as the writer counts them (its columns' slices).
fn row_group_arrow_bytes(path: &Path, g: usize) -> usize {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .with_row_groups(vec![g])
        .with_batch_size(1 << 20)
        .build()
        .unwrap();
    reader.map(|b| b.unwrap().columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap()).sum::<usize>()).sum()
}

/// The merge handed the writer batches of 8,192 rows and the writer cut row groups only
/// between batches: `--max-row-group-bytes 64KiB` gave row groups of 8,192 rows (~900 KB).
/// Now every row group keeps within the limit, down to a few hundred rows, and a row larger
/// than the limit alone gets a row group of its own, with a warning.
#[test]
fn max_row_group_bytes_holds_below_8192_rows() {
    let d = tempfile::tempdir().unwrap();
    // Two inputs whose rows interleave: nothing is copied untouched, every row is merged.
    let (a, b) = (d.path().join("a.parquet"), d.path().join("b.parquet"));
    let n = 20_000i64;
    let file = |path: &Path, parity: i64, width: usize, n: i64| {
        let k: Vec<i64> = (0..n).filter(|x| x % 2 == parity).collect();
        let v: Vec<String> = k.iter().map(|x| format!("{x:0width$}")).collect();
        let batch = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
            ("v", Arc::new(StringArray::from(v)) as ArrayRef),
        ])
        .unwrap();
        write_file(path, &[batch], None);
    };
    file(&a, 0, 100, n);
    file(&b, 1, 100, n);
    let out = d.path().join("out.parquet");
    let limit = 64 << 10;
    let res = corank(&[
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--by",
        "k",
        "--engine",
        "cpu",
        "--max-row-group-bytes",
        "64KiB",
    ]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(text(&res.stderr), "", "no warning: every row fits");
    let meta = SerializedFileReader::new(File::open(&out).unwrap()).unwrap().metadata().clone();
    assert!(meta.num_row_groups() > 20, "{} row groups", meta.num_row_groups());
    for g in 0..meta.num_row_groups() {
        let (rows, bytes) = (meta.row_group(g).num_rows(), row_group_arrow_bytes(&out, g));
        assert!(bytes <= limit, "row group {g}: {rows} rows, {bytes} bytes of Arrow data, over {limit}");
        assert!(rows < 8192 && (rows > 300 || g + 1 == meta.num_row_groups()), "row group {g}: {rows} rows");
    }
    assert_eq!(keys_of(&out, "k"), (0..n).collect::<Vec<_>>());

    // Rows of ~200 bytes under a limit of 100: a row group a row, and a warning.
    let (a, b) = (d.path().join("wide-a.parquet"), d.path().join("wide-b.parquet"));
    file(&a, 0, 200, 40);
    file(&b, 1, 200, 40);
    let out = d.path().join("wide.parquet");
    let res = corank(&[
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--by",
        "k",
        "--engine",
        "cpu",
        "--max-row-group-bytes",
        "100",
        "--row-group-size",
        "1000",
    ]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let stderr = text(&res.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("row groups of more than 100 bytes") && stderr.contains("larger than that alone"), "{stderr}");
    let meta = SerializedFileReader::new(File::open(&out).unwrap()).unwrap().metadata().clone();
    assert!(meta.row_groups().iter().all(|g| g.num_rows() == 1), "one row a row group");
}

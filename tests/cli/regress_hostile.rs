//! Regression tests of issue 62 (hostile and unusual files) for `corank merge`: a full
//! stderr or stdout never panics (4); `--max-row-group-bytes` holds below 8,192 rows (15).

use crate::cli_common::{command, corank, read_file, simple_file, text, write_file};
use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::Int64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};
use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

fn keys_of(path: &Path, column: &str) -> Vec<i64> {
    let (batches, _) = read_file(path);
    batches.iter().flat_map(|b| b.column_by_name(column).unwrap().as_primitive::<Int64Type>().values().to_vec()).collect()
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

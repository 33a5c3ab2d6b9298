//! Regression tests of issue 62 (hostile and unusual files) for `corank merge`: a full
//! stderr or stdout never panics (4).

use crate::cli_common::{command, read_file, simple_file, text};
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use std::fs::File;
use std::path::Path;
use std::process::Stdio;

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

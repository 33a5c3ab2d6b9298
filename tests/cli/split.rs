//! Split outputs (`--max-file-rows`, `--max-file-bytes`) of `corank merge` and `corank sort`,
//! local (object stores: `store.rs`): every file sorted with the output's schema and
//! `sorting_columns`, key ranges disjoint and increasing, the files' rows in order the
//! unsplit output's, the limits kept, and nothing left by a failure.

use crate::cli_common::{command, files_in, ok, read_file, s, text, write_file, Keys};
use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::compute::SortOptions;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

/// A batch of `k` (Int64) and `v` (strings of varied length).
fn batch(k: Vec<i64>, tag: &str) -> RecordBatch {
    let v: Vec<String> = k.iter().map(|k| format!("{tag}{k}-{}", "x".repeat((*k % 13) as usize))).collect();
    RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
        .unwrap()
}

/// Three inputs sorted by `k`, with ties within and across files, and in c.parquet a run
/// of 1,500 rows of key 1000 (longer than the tests' row limit), in row groups of 1,000.
pub fn sorted_inputs(dir: &Path) -> Vec<PathBuf> {
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    let a: Vec<i64> = (0..3000).map(|i| i / 2).collect();
    let b: Vec<i64> = (0..3000).map(|i| i * 3 / 5).collect();
    let c: Vec<i64> = (0..1000).chain(std::iter::repeat_n(1000, 1500)).chain(1001..1501).collect();
    [("a", a), ("b", b), ("c", c)]
        .into_iter()
        .map(|(name, k)| {
            let groups: Vec<RecordBatch> = k.chunks(1000).map(|c| batch(c.to_vec(), name)).collect();
            let path = dir.join(format!("{name}.parquet"));
            write_file(&path, &groups, Some(&keys));
            path
        })
        .collect()
}

/// A file's rows, concatenated, and its first row group's sorting_columns.
fn rows_and_sorting(path: &Path) -> (RecordBatch, Option<Vec<parquet::file::metadata::SortingColumn>>) {
    let (batches, sorting) = read_file(path);
    let schema = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .schema()
        .clone();
    (arrow::compute::concat_batches(&schema, &batches).unwrap(), sorting)
}

fn keys_of(b: &RecordBatch) -> Vec<i64> {
    let k = b.column_by_name("k").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
    (0..k.len()).map(|i| k.value(i)).collect()
}

/// Checks the parts of a split output (local paths, in order) against the unsplit output
/// `oracle`: the same schema and sorting_columns, each sorted by `k`, key ranges disjoint
/// and increasing, at most `max_rows` rows where a file holds more than one key, files
/// (but the last) of at least `min_bytes`, and together the oracle's rows in its order.
/// `listed` is `--json`'s `output_files` (its paths as named by `names`).
pub fn check_parts(
    parts: &[PathBuf],
    oracle: &Path,
    max_rows: Option<usize>,
    min_bytes: Option<u64>,
    listed: &serde_json::Value,
    names: &[String],
) {
    let (want, want_sorting) = rows_and_sorting(oracle);
    assert!(want_sorting.is_some());
    let listed = listed.as_array().expect("output_files");
    assert_eq!(listed.len(), parts.len());
    let mut all = Vec::new();
    let mut last: Option<i64> = None;
    for (i, (part, entry)) in parts.iter().zip(listed).enumerate() {
        let (rows, sorting) = rows_and_sorting(part);
        assert_eq!(rows.schema(), want.schema(), "{}", part.display());
        assert_eq!(sorting, want_sorting, "{}: sorting_columns", part.display());
        let k = keys_of(&rows);
        assert!(!k.is_empty(), "{}: empty", part.display());
        assert!(k.windows(2).all(|w| w[0] <= w[1]), "{}: not sorted", part.display());
        if let Some(before) = last {
            assert!(before < k[0], "{}: starts at {} but the file before ends at {before}", part.display(), k[0]);
        }
        last = k.last().copied();
        if let Some(most) = max_rows {
            assert!(k.len() <= most || k[0] == k[k.len() - 1], "{}: {} rows of several keys", part.display(), k.len());
        }
        let bytes = std::fs::metadata(part).unwrap().len();
        if let Some(least) = min_bytes.filter(|_| i + 1 < parts.len()) {
            assert!(bytes >= least, "{}: {bytes} bytes, ended before {least}", part.display());
        }
        assert_eq!(entry["path"].as_str(), Some(names[i].as_str()));
        assert_eq!(entry["rows"].as_u64(), Some(k.len() as u64));
        assert_eq!(entry["bytes"].as_u64(), Some(bytes));
        assert_eq!(entry["first_key"], serde_json::json!([k[0].to_string()]));
        assert_eq!(entry["last_key"], serde_json::json!([k[k.len() - 1].to_string()]));
        all.push(rows);
    }
    let got = arrow::compute::concat_batches(&want.schema(), &all).unwrap();
    assert_eq!(got, want, "the parts together are not the unsplit output");
}

/// The parts in `dir` (all its files must be parts), in name order.
fn parts_in(dir: &Path) -> Vec<PathBuf> {
    let names = files_in(dir);
    for (i, n) in names.iter().enumerate() {
        assert_eq!(n, &format!("part-{i:05}.parquet"), "{names:?}");
    }
    names.iter().map(|n| dir.join(n)).collect()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

/// Runs `corank ARGS -o DIR --json` and checks DIR against `oracle`.
fn split_and_check(args: &[&str], dir: &Path, oracle: &Path, max_rows: Option<usize>, min_bytes: Option<u64>) -> usize {
    let out = ok(&[args, &["-o", s(dir), "--json"]].concat());
    let v = json(&out);
    let parts = parts_in(dir);
    let names: Vec<String> = parts.iter().map(|p| s(p).to_string()).collect();
    check_parts(&parts, oracle, max_rows, min_bytes, &v["output_files"], &names);
    assert_eq!(v["rows"].as_u64(), Some(9_000));
    let bytes: u64 = parts.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(v["output_bytes"].as_u64(), Some(bytes));
    parts.len()
}

#[test]
fn merges_split_by_rows_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = sorted_inputs(d);
    let inputs: Vec<&str> = inputs.iter().map(|p| s(p)).collect();
    let oracle = d.join("oracle.parquet");
    ok(&[&["merge", "-q"], &inputs[..], &["-o", s(&oracle), "--row-group-size", "300"]].concat());
    let merge = [&["merge", "--row-group-size", "300"], &inputs[..]].concat();

    // By rows: the run of 1,500 rows of key 1000 fills a file of its own.
    let by_rows = d.join("by-rows");
    let n = split_and_check(&[&merge[..], &["--max-file-rows", "1000"]].concat(), &by_rows, &oracle, Some(1000), None);
    assert!(n >= 9, "{n} files");
    let long: Vec<usize> = parts_in(&by_rows).iter().map(|p| keys_of(&rows_and_sorting(p).0).len()).filter(|&r| r > 1000).collect();
    // (1,500 rows of c.parquet, 2 of a's and 2 of b's)
    assert_eq!(long, [1504]);

    // By bytes: each file but the last reaches the limit.
    let by_bytes = d.join("by-bytes");
    let n = split_and_check(&[&merge[..], &["--max-file-bytes", "8KiB"]].concat(), &by_bytes, &oracle, None, Some(8 << 10));
    assert!(n >= 3, "{n} files");

    // Both, and a limit above the rows: one file.
    let both = d.join("both");
    split_and_check(&[&merge[..], &["--max-file-rows", "2000", "--max-file-bytes", "32KiB"]].concat(), &both, &oracle, Some(2000), None);
    let one = d.join("one");
    assert_eq!(split_and_check(&[&merge[..], &["--max-file-rows", "1M"]].concat(), &one, &oracle, None, None), 1);

    // The summary line says how many files; --passthrough auto is quietly off.
    let line = d.join("line");
    let out = ok(&[&merge[..], &["--max-file-rows", "4000", "-o", s(&line)]].concat());
    assert!(text(&out.stdout).contains("; split into 3 files"), "{}", text(&out.stdout));
}

#[test]
fn sorts_split_by_rows_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The sorted inputs' rows, shuffled into two files.
    let sorted = sorted_inputs(d);
    let mut rows: Vec<(i64, String)> = Vec::new();
    for p in &sorted {
        let (b, _) = rows_and_sorting(p);
        let v = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        rows.extend(keys_of(&b).into_iter().zip((0..v.len()).map(|i| v.value(i).to_string())));
    }
    let mut x = 7u64;
    for i in (1..rows.len()).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        rows.swap(i, (x >> 33) as usize % (i + 1));
    }
    let inputs: Vec<PathBuf> = rows
        .chunks(4500)
        .enumerate()
        .map(|(i, chunk)| {
            let b = RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(chunk.iter().map(|r| r.0).collect::<Vec<_>>())) as ArrayRef),
                ("v", Arc::new(StringArray::from(chunk.iter().map(|r| r.1.clone()).collect::<Vec<_>>())) as ArrayRef),
            ])
            .unwrap();
            let path = d.join(format!("shuffled-{i}.parquet"));
            write_file(&path, &[b.slice(0, 2000), b.slice(2000, 2500)], None);
            path
        })
        .collect();
    let inputs: Vec<&str> = inputs.iter().map(|p| s(p)).collect();
    let oracle = d.join("oracle.parquet");
    let sort = [&["sort", "--by", "k", "--row-group-size", "300"], &inputs[..]].concat();
    ok(&[&sort[..], &["-q", "-o", s(&oracle)]].concat());

    let by_rows = d.join("by-rows");
    assert!(split_and_check(&[&sort[..], &["--max-file-rows", "1000"]].concat(), &by_rows, &oracle, Some(1000), None) >= 9);
    let by_bytes = d.join("by-bytes");
    let n = split_and_check(&[&sort[..], &["--max-file-bytes", "8KiB"]].concat(), &by_bytes, &oracle, None, Some(8 << 10));
    assert!(n > 2, "{n} files");
    // In runs, several spilled.
    let runs = d.join("runs");
    let spilled = [&sort[..], &["--strategy", "runs", "--memory-limit", "24MiB", "--max-file-rows", "700"]].concat();
    split_and_check(&spilled, &runs, &oracle, Some(700), None);
}

#[test]
fn bad_split_settings_are_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = sorted_inputs(d);
    let (a, b) = (s(&inputs[0]), s(&inputs[1]));
    let out = d.join("out");
    let o = s(&out);
    let cases: &[(&[&str], &str)] = &[
        (&["merge", a, b, "-o", o, "--max-file-rows", "0"], "--max-file-rows (max_rows) 0"),
        (&["merge", a, b, "-o", o, "--max-file-bytes", "0"], "--max-file-bytes (max_bytes) 0"),
        (&["merge", a, b, "-o", o, "--max-file-bytes", "lots"], "lots"),
        (&["merge", a, b, "-o", o, "--max-file-rows", "-3"], "-3"),
        (&["merge", a, b, "-o", o, "--max-file-rows", "10", "--passthrough", "always"], "--passthrough always with a split output"),
        (&["sort", a, b, "-o", o, "--max-file-rows", "10", "--strategy", "columns"], "--strategy columns with a split output"),
        (&["merge", a, b, "-o", a, "--max-file-rows", "10", "--force"], "is a file: a split output"),
    ];
    for (args, needle) in cases {
        let run = command().args(*args).output().unwrap();
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: '{needle}' not in {stderr}");
        assert!(!out.exists(), "{args:?}: the output directory was made");
    }
    assert_eq!(files_in(d), ["a.parquet", "b.parquet", "c.parquet"]);
}

#[test]
fn force_replaces_the_older_parts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = sorted_inputs(d);
    let inputs: Vec<&str> = inputs.iter().map(|p| s(p)).collect();
    let out = d.join("out");
    let merge = |extra: &[&str]| command().args([&["merge", "-q"], &inputs[..], &["-o", s(&out)], extra].concat()).output().unwrap();
    assert!(merge(&["--max-file-rows", "2000"]).status.success());
    let first = files_in(&out);
    assert!(first.len() >= 5, "{first:?}");
    std::fs::write(out.join("_SUCCESS"), "").unwrap();
    // Without --force: refused, nothing changed.
    let again = merge(&["--max-file-rows", "6000"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("part-00000.parquet"), "{}", text(&again.stderr));
    let mut before = [&first[..], &["_SUCCESS".to_string()]].concat();
    before.sort();
    assert_eq!(files_in(&out), before);
    // With --force: the new set, the older parts beyond it removed, other files kept.
    assert!(merge(&["--max-file-rows", "6000", "--force"]).status.success());
    assert_eq!(files_in(&out), ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]);
    let total: usize = ["part-00000.parquet", "part-00001.parquet"].iter().map(|n| keys_of(&rows_and_sorting(&out.join(n)).0).len()).sum();
    assert_eq!(total, 9_000);
    // Compacting the directory into itself: refused, even with --force (a failure while the
    // new set is put in place would lose rows).
    for cmd in ["merge", "sort"] {
        let run = command().args([cmd, "-q", s(&out), "-o", s(&out), "--max-file-rows", "3000", "--force"]).output().unwrap();
        assert_eq!(run.status.code(), Some(2), "{cmd}: {}", text(&run.stderr));
        assert!(text(&run.stderr).contains("is a part of the split output"), "{cmd}: {}", text(&run.stderr));
    }
    assert_eq!(files_in(&out), ["_SUCCESS", "part-00000.parquet", "part-00001.parquet"]);
}

#[test]
fn a_failure_after_files_were_finished_leaves_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    // Sorted rows, but the last row group of b.parquet has a row out of order: found when
    // that row group is merged, long after the first files are finished.
    let n = 300_000i64;
    let a: Vec<RecordBatch> = (0..n).collect::<Vec<_>>().chunks(50_000).map(|c| batch(c.to_vec(), "a")).collect();
    write_file(&d.join("a.parquet"), &a, Some(&keys));
    let mut b: Vec<RecordBatch> = (0..n).map(|k| k + 1).collect::<Vec<_>>().chunks(50_000).map(|c| batch(c.to_vec(), "b")).collect();
    b.push(batch(vec![n + 10, n + 12, n + 11, n + 13], "b"));
    write_file(&d.join("b.parquet"), &b, Some(&keys));
    for existing in [false, true] {
        let out = d.join(format!("out-{existing}"));
        if existing {
            std::fs::create_dir(&out).unwrap();
        }
        let run = command()
            .args(["merge", "-v", s(&d.join("a.parquet")), s(&d.join("b.parquet")), "-o", s(&out), "--max-file-rows", "20000"])
            .args(["--memory-limit", "64MiB", "--engine", "cpu"])
            .output()
            .unwrap();
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains("(put in place at the end)"), "no file was finished before the error: {stderr}");
        // The directory this run made is removed; one that was there stays, empty.
        assert_eq!(out.exists(), existing);
        if existing {
            assert_eq!(files_in(&out), Vec::<String>::new());
        }
    }
}

#[test]
fn a_dry_run_says_the_output_is_split() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = sorted_inputs(d);
    let inputs: Vec<&str> = inputs.iter().map(|p| s(p)).collect();
    let out = d.join("out");
    for cmd in ["merge", "sort"] {
        let args = [&[cmd, "--dry-run"], &inputs[..], &["-o", s(&out), "--max-file-rows", "1000", "--max-file-bytes", "1MiB"]].concat();
        let text_out = text(&ok(&args).stdout);
        assert!(
            text_out.contains(&format!("output: {}/part-NNNNN.parquet, split into files of at most 1,000 rows or about 1.0 MiB", s(&out))),
            "{cmd}: {text_out}"
        );
        let v = json(&ok(&[&args[..], &["--json"]].concat()));
        assert_eq!(v["split"], serde_json::json!({"max_file_rows": 1000, "max_file_bytes": 1 << 20}), "{cmd}");
        let one = json(&ok(&[&[cmd, "--dry-run", "--json"], &inputs[..], &["-o", s(&d.join("x.parquet"))]].concat()));
        assert_eq!(one["split"], serde_json::Value::Null);
        assert!(!out.exists());
    }
}

/// Ctrl-C once a file of the set is finished (two temporary files in the directory: the
/// finished one waiting, the next being written): the process ends by SIGINT and leaves
/// no file. A merge that ended before the signal landed (a loaded machine) must have
/// written the whole set, and runs again.
#[cfg(unix)]
#[test]
fn interrupted_split_merge_leaves_no_file() {
    use crate::datagen::{write_lineitem_files, FileLayout};
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let d = tempfile::tempdir().unwrap();
    let inputs = d.path().join("in");
    write_lineitem_files(&inputs, 4, 500_000, 65_536, FileLayout::Sorted, 11).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for attempt in 0..5 {
        let mut child = command()
            .args(["merge", s(&inputs), "-o", s(&out), "-q", "--engine", "cpu", "--max-file-rows", "100000"])
            .spawn()
            .expect("the corank binary runs");
        let start = Instant::now();
        let seen = loop {
            if files_in(&out).iter().filter(|f| f.starts_with(".corank-") && f.ends_with(".tmp")).count() >= 2 {
                break true;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no second temporary file after 60 s");
            std::thread::sleep(Duration::from_millis(1));
        };
        if seen {
            // SAFETY: kill(2) with the pid of our own child; no memory is involved.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        let status = child.wait().unwrap();
        let left = files_in(&out);
        if status.signal() == Some(libc::SIGINT) && left.is_empty() {
            return;
        }
        assert!(status.success() || status.signal() == Some(libc::SIGINT), "attempt {attempt}: {status}");
        assert!(left.len() >= 20 && left.iter().all(|f| f.starts_with("part-")), "attempt {attempt}: {left:?}");
        for f in left {
            std::fs::remove_file(out.join(f)).unwrap();
        }
    }
    panic!("five merges ended before their signal");
}

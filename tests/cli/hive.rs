//! Hive-partitioned inputs (`…/date=2026-12-01/k=3/part-0.parquet`): the partition columns
//! detected, typed and read (nulls, percent-encoding), turned off and forced, mismatched
//! layouts, and merges and sorts by them against the oracle (the stable sort of the
//! inputs' rows with their partition values). On S3: `store.rs`.

use crate::cli_common::{corank, ok, read_file, s, text, write_file, Keys};
use crate::common::oracle;
use arrow::array::{new_null_array, ArrayRef, Date32Array, Int64Array, RecordBatch, StringArray};
use arrow::compute::{concat_batches, take, SortOptions};
use arrow::datatypes::{DataType, Field, Schema};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One partition value of a test's layout.
#[derive(Clone)]
pub enum Part {
    Int(i64),
    Date(i32),
    Text(&'static str),
    Null,
}

/// One input file's rows: `x` (Int64, sorted, with ties) and `v` (Utf8 naming the file and
/// row), `rows` of them, in `row_groups` row groups, `x` declared as `sorting_columns`.
pub fn write_part(path: &Path, seed: i64, rows: usize, row_groups: usize) -> RecordBatch {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let x: Vec<i64> = (0..rows as i64).map(|i| (i * (seed % 5 + 1)) / 3 + seed % 7).collect();
    let v: Vec<String> = (0..rows).map(|i| format!("f{seed}r{i}")).collect();
    let batch =
        RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(x)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
            .unwrap();
    let per = rows.div_ceil(row_groups.max(1)).max(1);
    let groups: Vec<RecordBatch> = (0..rows).step_by(per).map(|at| batch.slice(at, per.min(rows - at))).collect();
    let keys: Keys = vec![("x".into(), SortOptions { descending: false, nulls_first: false })];
    write_file(path, &groups, Some(&keys));
    batch
}

/// `batch` with the partition columns `parts` (name, type, value) appended.
pub fn with_parts(batch: &RecordBatch, parts: &[(&str, DataType, Part)]) -> RecordBatch {
    let n = batch.num_rows();
    let mut fields: Vec<Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns = batch.columns().to_vec();
    for (name, data_type, value) in parts {
        fields.push(Field::new(*name, data_type.clone(), true));
        columns.push(match value {
            Part::Int(i) => Arc::new(Int64Array::from(vec![*i; n])) as ArrayRef,
            Part::Date(d) => Arc::new(Date32Array::from(vec![*d; n])),
            Part::Text(s) => Arc::new(StringArray::from(vec![*s; n])),
            Part::Null => new_null_array(data_type, n),
        });
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// The rows of `batches` (one per input, in tie order) sorted stably by `keys`.
pub fn expected(batches: &[RecordBatch], keys: &[(&str, bool, bool)]) -> RecordBatch {
    let keys: Keys = keys.iter().map(|(k, desc, nf)| (k.to_string(), SortOptions { descending: *desc, nulls_first: *nf })).collect();
    let all = concat_batches(&batches[0].schema(), batches).unwrap();
    let idx = arrow::array::UInt64Array::from(oracle(batches, &keys).into_iter().map(|i| i as u64).collect::<Vec<_>>());
    let columns = all.columns().iter().map(|c| take(c, &idx, None).unwrap()).collect();
    loose(&RecordBatch::try_new(all.schema(), columns).unwrap())
}

/// `b` with every field nullable and no metadata: outputs and oracles compare by names,
/// types and values.
pub fn loose(b: &RecordBatch) -> RecordBatch {
    let fields: Vec<Field> =
        b.schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true).with_metadata(Default::default())).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), b.columns().to_vec()).unwrap()
}

/// A file's rows as one batch, its fields nullable (the comparison is of names, types and
/// values).
pub fn rows_at(path: &Path) -> RecordBatch {
    let (batches, _) = read_file(path);
    loose(&concat_batches(&batches[0].schema(), &batches).unwrap())
}

/// Days since 1970-01-01 of 2026-12-01 and the days after it.
const DEC_1: i32 = 20788;

/// `t/date=2026-12-0D/k=K/part-0.parquet` for 2 dates × 3 keys; each file's expected rows
/// with its partition values (in path order: the tie order of a directory's files).
fn layout(root: &Path) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    for (d, date) in ["2026-12-01", "2026-12-02"].iter().enumerate() {
        for k in [3i64, 10, -2] {
            let seed = d as i64 * 10 + k + 3;
            let path = root.join(format!("date={date}/k={k}/part-0.parquet"));
            let batch = write_part(&path, seed, 700 + 100 * d, 3);
            batches.push((
                path,
                with_parts(&batch, &[("date", DataType::Date32, Part::Date(DEC_1 + d as i32)), ("k", DataType::Int64, Part::Int(k))]),
            ));
        }
    }
    // A directory's files in path order: `k=-2` before `k=10` before `k=3`.
    batches.sort_by(|a, b| a.0.cmp(&b.0));
    batches.into_iter().map(|(_, b)| b).collect()
}

fn names(b: &RecordBatch) -> Vec<String> {
    b.schema().fields().iter().map(|f| f.name().clone()).collect()
}

#[test]
fn partition_columns_are_found_typed_and_merged_by() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let batches = layout(&t);
    let out = dir.path().join("out.parquet");
    // A merge by `date, k, x`: every file is one partition, sorted by `x` within it.
    for input in [format!("{}/", s(&t)), format!("{}/*/*/*.parquet", s(&t)), format!("{}/**/*.parquet", s(&t))] {
        ok(&["merge", "-q", "-f", &input, "-o", s(&out), "--by", "date, k, x"]);
        let got = rows_at(&out);
        assert_eq!(names(&got), ["x", "v", "date", "k"], "{input}");
        assert_eq!(got, expected(&batches, &[("date", false, false), ("k", false, false), ("x", false, false)]), "{input}");
    }
    // Descending partitions; `--by` of a partition column alone keeps each file's order.
    ok(&["merge", "-q", "-f", s(&t), "-o", s(&out), "--by", "k DESC, date DESC, x"]);
    assert_eq!(rows_at(&out), expected(&batches, &[("k", true, true), ("date", true, true), ("x", false, false)]));
    // A constant column is sorted: `x, date` is each file's order too.
    ok(&["merge", "-q", "-f", s(&t), "-o", s(&out), "--by", "x, date"]);
    assert_eq!(rows_at(&out), expected(&batches, &[("x", false, false), ("date", false, false)]));
    // Files not sorted by the key within a partition are refused, as any unsorted input.
    let bad = corank(&["merge", "-q", "-f", s(&t), "-o", s(&out), "--by", "date, v"]);
    assert_eq!(bad.status.code(), Some(3), "{}", text(&bad.stderr));

    // Sorts, both strategies.
    for (strategy, limit) in [("columns", "256MiB"), ("runs", "4MiB")] {
        ok(&["sort", "-q", "-f", s(&t), "-o", s(&out), "--by", "x DESC, date", "--strategy", strategy, "--memory-limit", limit]);
        assert_eq!(rows_at(&out), expected(&batches, &[("x", true, true), ("date", false, false)]), "{strategy}");
        ok(&["sort", "-q", "-f", s(&t), "-o", s(&out), "--by", "k, v", "--strategy", strategy, "--memory-limit", limit]);
        assert_eq!(rows_at(&out), expected(&batches, &[("k", false, false), ("v", false, false)]), "{strategy}");
    }
    // The output declares the key, partition columns included.
    let (_, sorting) = read_file(&out);
    assert_eq!(sorting.map(|s| s.iter().map(|c| c.column_idx).collect::<Vec<_>>()), Some(vec![3, 1]));

    // The dry run and -v name them; passthrough is off for them.
    let dry = ok(&["merge", "--dry-run", "--json", "-f", s(&t), "-o", s(&out), "--by", "date, k, x"]);
    let v: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
    assert_eq!(v["hive_partitions"], serde_json::json!(["date", "k"]));
    assert!(v["passthrough"].to_string().contains("Hive partition columns"), "{}", v["passthrough"]);
    let dry = ok(&["sort", "--dry-run", "-f", s(&t), "-o", s(&out), "--by", "x"]);
    assert!(text(&dry.stdout).contains("hive partitions: date (Date32), k (Int64)\n"), "{}", text(&dry.stdout));
    let verbose = ok(&["merge", "-v", "-q", "-f", s(&t), "-o", s(&out), "--by", "date, k, x"]);
    assert!(text(&verbose.stderr).contains("Hive partition columns from the paths: date (Date32), k (Int64)"), "{}", text(&verbose.stderr));
}

#[test]
fn nulls_percent_encoding_and_text_values() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let mut batches = Vec::new();
    for (i, (dirname, value)) in [
        ("k=a%2Fb", Part::Text("a/b")),
        ("k=__HIVE_DEFAULT_PARTITION__", Part::Null),
        ("k=007", Part::Text("007")),
        ("k=z%20z", Part::Text("z z")),
    ]
    .into_iter()
    .enumerate()
    {
        let batch = write_part(&t.join(dirname).join("p.parquet"), i as i64, 300, 2);
        batches.push((dirname, with_parts(&batch, &[("k", DataType::Utf8, value)])));
    }
    batches.sort_by(|a, b| a.0.cmp(b.0));
    let batches: Vec<RecordBatch> = batches.into_iter().map(|(_, b)| b).collect();
    let out = dir.path().join("out.parquet");
    ok(&["merge", "-q", s(&t), "-o", s(&out), "--by", "k NULLS FIRST, x"]);
    assert_eq!(rows_at(&out), expected(&batches, &[("k", false, true), ("x", false, false)]));
    ok(&["sort", "-q", "-f", s(&t), "-o", s(&out), "--by", "x, k DESC"]);
    assert_eq!(rows_at(&out), expected(&batches, &[("x", false, false), ("k", true, true)]));
}

#[test]
fn partitioning_turned_off_forced_and_mismatched() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let plain: Vec<RecordBatch> = layout(&t).iter().map(|b| b.project(&[0, 1]).unwrap()).collect();
    let out = dir.path().join("out.parquet");
    let glob = format!("{}/*/*/*.parquet", s(&t));
    for off in [&["--hive-partitioning=false"][..], &["--no-hive-partitioning"], &["--hive-partitioning=FALSE"]] {
        ok(&[&["sort", "-q", "-f", &glob, "-o", s(&out), "--by", "x"], off].concat());
        assert_eq!(rows_at(&out), expected(&plain, &[("x", false, false)]), "{off:?}");
    }
    let summary = ok(&["sort", "--json", "-f", &glob, "-o", s(&out), "--by", "x", "--no-hive-partitioning"]);
    let v: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
    assert_eq!(v["hive_partitions"], serde_json::json!([]));
    let summary = ok(&["sort", "--json", "-f", &glob, "-o", s(&out), "--by", "x"]);
    let v: serde_json::Value = serde_json::from_slice(&summary.stdout).unwrap();
    assert_eq!(v["hive_partitions"], serde_json::json!(["date", "k"]));
    let conflict = corank(&["sort", &glob, "-o", s(&out), "--by", "x", "--no-hive-partitioning", "--hive-partitioning=true"]);
    assert_eq!(conflict.status.code(), Some(2), "{}", text(&conflict.stderr));
    let bad = corank(&["sort", &glob, "-o", s(&out), "--by", "x", "--hive-partitioning=maybe"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("use auto, true or false"), "{}", text(&bad.stderr));
    // A partition column named in --by with partitioning off: not a column.
    let off = corank(&["merge", "-q", "-f", &glob, "-o", s(&out), "--by", "date", "--no-hive-partitioning"]);
    assert_eq!(off.status.code(), Some(2), "{}", text(&off.stderr));
    assert!(text(&off.stderr).contains("sort column 'date' is not in the inputs"), "{}", text(&off.stderr));

    // Mismatched layouts: plain files when auto, an error when forced (exit 2, no output).
    let m = dir.path().join("m");
    let a = write_part(&m.join("a=1/p.parquet"), 1, 50, 1);
    let c = write_part(&m.join("c=2/p.parquet"), 2, 50, 1);
    let flat = write_part(&m.join("flat.parquet"), 3, 50, 1);
    let mglob = format!("{}/*/*.parquet", s(&m));
    let out2 = dir.path().join("out2.parquet");
    ok(&["sort", "-q", &mglob, "-o", s(&out2), "--by", "x"]);
    assert_eq!(rows_at(&out2), expected(&[a.clone(), c.clone()], &[("x", false, false)]));
    std::fs::remove_file(&out2).unwrap();
    for forced in ["--hive-partitioning=true", "--hive-partitioning"] {
        let e = corank(&["sort", "-q", &mglob, "-o", s(&out2), "--by", "x", forced]);
        let stderr = text(&e.stderr);
        assert_eq!(e.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("c=2/p.parquet has the partition keys c but") && stderr.contains("a=1/p.parquet has a"), "{stderr}");
        assert!(!out2.exists());
    }
    // A directory with files beside its partitions: all of them, as plain files (auto)...
    ok(&["sort", "-q", s(&m), "-o", s(&out2), "--by", "x"]);
    assert_eq!(rows_at(&out2), expected(&[a.clone(), c.clone(), flat.clone()], &[("x", false, false)]));
    // ... an error when forced, naming the file without keys.
    let e = corank(&["sort", "-q", "-f", s(&m), "-o", s(&out2), "--by", "x", "--hive-partitioning=true"]);
    assert_eq!(e.status.code(), Some(2), "{}", text(&e.stderr));
    // A file forced with no key=value directory at all.
    let e = corank(&["sort", "-q", "-f", s(&m.join("flat.parquet")), "-o", s(&out2), "--by", "x", "--hive-partitioning=true"]);
    assert!(text(&e.stderr).contains("has no key=value directory"), "{}", text(&e.stderr));
    assert_eq!(e.status.code(), Some(2));
}

#[test]
fn a_partition_key_that_is_a_column_replaces_it() {
    // DuckDB reads the path's value in place of the file's column: so does corank, saying so.
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let mut batches = Vec::new();
    for (i, x) in [5i64, 1].into_iter().enumerate() {
        let batch = write_part(&t.join(format!("x={x}/p.parquet")), i as i64, 100, 2);
        let replaced = with_parts(&batch.project(&[1]).unwrap(), &[("x", DataType::Int64, Part::Int(x))]);
        batches.push(replaced.project(&[1, 0]).unwrap());
    }
    batches.reverse(); // x=1 before x=5
    let out = dir.path().join("out.parquet");
    let run = ok(&["merge", "-q", s(&t), "-o", s(&out), "--by", "x"]);
    assert!(text(&run.stderr).contains("column 'x' of the inputs is also a Hive partition key"), "{}", text(&run.stderr));
    assert_eq!(rows_at(&out), expected(&batches, &[("x", false, false)]));
}

/// The layout of [`partition_columns_are_found_typed_and_merged_by`] for other tests (S3):
/// its files under `root` and their expected rows in path order.
pub fn hive_layout(root: &Path) -> (Vec<PathBuf>, Vec<RecordBatch>) {
    let batches = layout(root);
    let mut paths = Vec::new();
    for date in ["2026-12-01", "2026-12-02"] {
        for k in [-2i64, 10, 3] {
            paths.push(root.join(format!("date={date}/k={k}/part-0.parquet")));
        }
    }
    (paths, batches)
}

#[test]
fn partition_types_chosen_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t");
    let batches = layout(&t);
    let out = dir.path().join("out.parquet");
    // Repeated or comma-separated: k an Int32, date text; the merge by them as those types.
    for types in [&["--hive-types", "k=INTEGER", "--hive-types", "date=VARCHAR"][..], &["--hive-types=k=int, date=Utf8"]] {
        let dry = ok(&[&["merge", "--dry-run", "-f", s(&t), "-o", s(&out), "--by", "date, k, x"], types].concat());
        assert!(text(&dry.stdout).contains("hive partitions: date (Utf8), k (Int32)\n"), "{}", text(&dry.stdout));
        ok(&[&["merge", "-q", "-f", s(&t), "-o", s(&out), "--by", "k DESC, date, x"], types].concat());
        let got = rows_at(&out);
        assert_eq!((got.column(2).data_type(), got.column(3).data_type()), (&DataType::Utf8, &DataType::Int32));
        // Cast back to the inferred types, the rows are the inferred merge's.
        let back: Vec<ArrayRef> = vec![
            got.column(0).clone(),
            got.column(1).clone(),
            arrow::compute::cast(got.column(2), &DataType::Date32).unwrap(),
            arrow::compute::cast(got.column(3), &DataType::Int64).unwrap(),
        ];
        let want = expected(&batches, &[("k", true, true), ("date", false, false), ("x", false, false)]);
        assert_eq!(RecordBatch::try_new(want.schema(), back).unwrap(), want);
    }
    // Values that do not cast, keys that are no partition, unknown types: exit 2, no output.
    std::fs::remove_file(&out).unwrap();
    for (types, needle) in [
        ("k=DATE", "hive partition k=-2 is not a Date32 (--hive-types)"),
        ("zz=INTEGER", "hive types name 'zz', which is no partition key of the inputs (date, k)"),
        ("k=NUMBER", "unknown type \"NUMBER\""),
        ("k", "use key=TYPE"),
    ] {
        let e = corank(&["sort", "-q", s(&t), "-o", s(&out), "--by", "x", "--hive-types", types]);
        let stderr = text(&e.stderr);
        assert_eq!(e.status.code(), Some(2), "{types}: {stderr}");
        assert!(stderr.contains(needle), "{types}: {stderr}");
        assert!(!out.exists());
    }
    let e = corank(&["sort", "-q", s(&t), "-o", s(&out), "--by", "x", "--hive-types", "k=INTEGER", "--no-hive-partitioning"]);
    assert!(text(&e.stderr).contains("hive types name 'k', but Hive partitioning is off"), "{}", text(&e.stderr));
}

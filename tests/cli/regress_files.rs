//! Real-world input files (issue 10): each test reproduces one observed defect of
//! `corank merge` — rows duplicated from its own previous output, trusted declarations that
//! were wrong, memory far over the limit, file handles exhausted, tiny runs refused,
//! metadata lost, harmless schema differences refused — and checks the fixed behaviour
//! against the oracle (the stable sort of the inputs' concatenation). A random
//! differential suite closes the file: dictionary columns of every key width, float keys
//! with NaN and ±0, many files and row groups, memory limits from 64 MiB; the peak resident
//! memory of merges under 64 and 256 MiB limits is checked against the limit (the child's
//! own `VmHWM`, printed by `corank merge -v`).

use crate::cli_common::{corank, files_in, text, write_file, Keys};
use crate::common::{oracle, sorted_run, Rng};
use arrow::array::*;
use arrow::compute::{concat_batches, SortOptions};
use arrow::datatypes::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

fn asc() -> SortOptions {
    SortOptions { descending: false, nulls_first: false }
}

/// Runs `corank ARGS` with the open-file limit (soft and hard) set to `nofile` if given.
#[cfg(target_os = "linux")]
fn corank_measured(args: &[&str], nofile: Option<u64>) -> (Output, ()) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corank"));
    cmd.args(args).env("CORANK_REQUIRE_GPU", "0");
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    (cmd.output().expect("the corank binary runs"), ())
}

/// The file's rows as one batch (dictionary columns as their values: concatenating
/// small-keyed dictionaries could overflow their keys).
fn read_all(path: &Path) -> RecordBatch {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    let schema = undictionary_schema(builder.schema());
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| undictionary(&b.unwrap(), &schema)).collect();
    concat_batches(&schema, &batches).unwrap()
}

fn undictionary_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, v) => f.as_ref().clone().with_data_type(v.as_ref().clone()),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

fn undictionary(b: &RecordBatch, schema: &SchemaRef) -> RecordBatch {
    let columns = b.columns().iter().zip(schema.fields()).map(|(c, f)| arrow::compute::cast(c, f.data_type()).unwrap()).collect();
    RecordBatch::try_new(schema.clone(), columns).unwrap()
}

/// The type of column `name` in the Parquet file at `path` (as Arrow reads it back).
fn column_type(path: &Path, name: &str) -> DataType {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    builder.schema().field_with_name(name).unwrap().data_type().clone()
}

fn int_column(b: &RecordBatch, name: &str) -> Vec<i64> {
    let c = arrow::compute::cast(b.column_by_name(name).unwrap(), &DataType::Int64).unwrap();
    c.as_primitive::<Int64Type>().iter().map(|v| v.unwrap_or(i64::MIN)).collect()
}

/// A batch `k` (Int64), `id` (UInt64).
fn k_id(k: &[i64], first_id: u64) -> RecordBatch {
    RecordBatch::try_from_iter([
        ("k", Arc::new(Int64Array::from(k.to_vec())) as ArrayRef),
        ("id", Arc::new(UInt64Array::from_iter_values(first_id..first_id + k.len() as u64)) as ArrayRef),
    ])
    .unwrap()
}

fn keys_k() -> Keys {
    vec![("k".into(), asc())]
}

/// The ids of the stable sort of `inputs` (in order) by `keys`.
fn expected_ids(inputs: &[RecordBatch], keys: &Keys) -> Vec<u64> {
    let all = concat_batches(&inputs[0].schema(), inputs).unwrap();
    let order = oracle(std::slice::from_ref(&all), keys);
    let ids = all.column_by_name("id").unwrap().as_primitive::<UInt64Type>();
    order.into_iter().map(|i| ids.value(i)).collect()
}

fn ids_of(b: &RecordBatch) -> Vec<u64> {
    b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()
}

/// Defect 2: a second `--force` run with the output inside the input directory read its own
/// previous output (10,000 rows became 20,000).
#[test]
fn force_never_merges_its_own_output() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    write_file(&dir.join("a.parquet"), &[k_id(&(0..5000).map(|i| 2 * i).collect::<Vec<_>>(), 0)], Some(&keys_k()));
    write_file(&dir.join("b.parquet"), &[k_id(&(0..5000).map(|i| 2 * i + 1).collect::<Vec<_>>(), 5000)], Some(&keys_k()));
    let out = dir.join("merged.parquet");
    let (dir_s, out_s) = (dir.to_str().unwrap(), out.to_str().unwrap());
    for round in 0..3 {
        let res = corank(&["merge", dir_s, "-o", out_s, "--force", "--engine", "cpu"]);
        assert!(res.status.success(), "round {round}: {}", text(&res.stderr));
        assert!(text(&res.stdout).starts_with("merged 10,000 rows (2 files"), "round {round}: {}", text(&res.stdout));
        assert_eq!(read_all(&out).num_rows(), 10_000, "round {round}");
    }
    // Through a glob, and through a hard link to the output: still left out.
    let glob = format!("{dir_s}/*.parquet");
    let res = corank(&["merge", &glob, "-o", out_s, "--force", "--engine", "cpu"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(read_all(&out).num_rows(), 10_000);
    let link = dir.join("link.parquet");
    std::fs::hard_link(&out, &link).unwrap();
    let res = corank(&["merge", dir_s, "-o", out_s, "--force", "--engine", "cpu"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(read_all(&out).num_rows(), 10_000);
    std::fs::remove_file(&link).unwrap();
    // The output named as an input: a usage error, the output untouched.
    let before = std::fs::read(&out).unwrap();
    let res = corank(&["merge", dir.join("a.parquet").to_str().unwrap(), out_s, "-o", out_s, "--force"]);
    assert_eq!(res.status.code(), Some(2), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("is also an input"), "{}", text(&res.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), before);
}

/// Defect 7: pyarrow and pandas declare float columns sorted with NaN last even for DESC
/// and -0.0 equal to +0.0; corank trusted the declaration and wrote rows in neither order.
#[test]
fn declared_float_orders_are_verified() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let file = |name: &str, values: Vec<f64>, desc: bool| {
        let b = RecordBatch::try_from_iter([
            ("x", Arc::new(Float64Array::from(values)) as ArrayRef),
            ("id", Arc::new(UInt64Array::from_iter_values(0..3)) as ArrayRef),
        ])
        .unwrap();
        let keys: Keys = vec![("x".into(), SortOptions { descending: desc, nulls_first: desc })];
        let path = dir.join(name);
        write_file(&path, &[b], Some(&keys));
        path
    };
    let nan_last = file("nan_last.parquet", vec![3.0, 1.0, f64::NAN], true);
    let zeros = file("zeros.parquet", vec![0.0, -0.0, 1.0], false);
    let good = file("good.parquet", vec![-0.0, 0.0, f64::NAN], false);
    let out = dir.join("out.parquet");
    for (input, by, row) in [(&nan_last, "x DESC", 2), (&zeros, "x", 1)] {
        for by in [Some(by), None] {
            let mut args = vec!["merge", input.to_str().unwrap(), good.to_str().unwrap(), "-o", out.to_str().unwrap(), "--force"];
            if let Some(by) = by {
                args.extend(["--by", by]);
            }
            // Against `good` when ascending; alone when descending (good is ascending).
            if by.is_some_and(|b| b.contains("DESC")) || input == &nan_last {
                args.remove(2);
            }
            let res = corank(&args);
            let stderr = text(&res.stderr);
            assert_eq!(res.status.code(), Some(3), "{args:?}: {stderr}");
            assert!(stderr.contains(&format!("not sorted: row group 0, row {row}")), "{args:?}: {stderr}");
            assert!(stderr.contains("IEEE total order"), "{args:?}: {stderr}");
            assert!(!out.exists(), "{args:?}: output written");
        }
    }
    let res = corank(&["merge", good.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(res.status.success(), "{}", text(&res.stderr));
}

/// Defect 5: runs joined only when the key strictly increased, so a globally sorted file
/// with a low-cardinality key and small row groups became one run per row group, and one
/// open file per run exhausted `ulimit -n 1024` (1,100 files, or 1,500 row groups). Here
/// 10,000 files and a file of 1,500 overlapping row groups merge at `ulimit -n 1024`.
#[cfg(target_os = "linux")]
#[test]
fn many_files_and_row_groups_within_the_open_file_limit() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // A sorted file, low-cardinality key (equal boundary keys), 1,500 row groups of 20 rows:
    // one run.
    let groups: Vec<RecordBatch> = (0..1500).map(|g| k_id(&[g as i64 / 10; 20], g as u64 * 20)).collect();
    let sorted = dir.join("sorted.parquet");
    write_file(&sorted, &groups, Some(&keys_k()));
    let plan = corank::parquet::plan_merge(std::slice::from_ref(&sorted), None).unwrap();
    assert_eq!(plan.runs.len(), 1, "equal boundary keys join one run");
    // A file of 1,500 overlapping row groups (1,500 runs of one file), and 10,000 files.
    let mut rng = Rng::new(5);
    let mut inputs: Vec<RecordBatch> = Vec::new();
    let mut next = 0u64;
    let mut overlapping = Vec::new();
    for _ in 0..1500 {
        let mut k: Vec<i64> = (0..4).map(|_| rng.below(1000) as i64).collect();
        k.sort();
        overlapping.push(k_id(&k, next));
        next += 4;
    }
    write_file(&dir.join("overlap.parquet"), &overlapping, Some(&keys_k()));
    inputs.extend(overlapping);
    let files_dir = dir.join("many");
    std::fs::create_dir(&files_dir).unwrap();
    for f in 0..10_000 {
        let mut k: Vec<i64> = (0..3).map(|_| rng.below(1000) as i64).collect();
        k.sort();
        let b = k_id(&k, next);
        next += 3;
        write_file(&files_dir.join(format!("f{f:05}.parquet")), std::slice::from_ref(&b), Some(&keys_k()));
        inputs.push(b);
    }
    let out = dir.join("out.parquet");
    let overlap = dir.join("overlap.parquet");
    let args = ["merge", overlap.to_str().unwrap(), files_dir.to_str().unwrap(), "-o", out.to_str().unwrap(), "--engine", "cpu"];
    let (res, _) = corank_measured(&args, Some(1024));
    assert!(res.status.success(), "{}", text(&res.stderr));
    // 1,500 runs of one file (fewer where neighbours happen not to overlap) and 10,000 files.
    assert!(text(&res.stdout).contains("rows (10001 files, "), "{}", text(&res.stdout));
    assert_eq!(ids_of(&read_all(&out)), expected_ids(&inputs, &keys_k()));
    // The sorted file under a tight limit too.
    let out2 = dir.join("out2.parquet");
    let (res, _) = corank_measured(&["merge", sorted.to_str().unwrap(), "-o", out2.to_str().unwrap()], Some(64));
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(read_all(&out2).num_rows(), 30_000);
}

/// Defect 6: 20,000 row groups of 5 rows were refused as needing 6.1 GiB.
#[test]
fn many_tiny_runs_are_not_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let mut rng = Rng::new(9);
    let groups: Vec<RecordBatch> = (0..20_000)
        .map(|g| {
            let mut k: Vec<i64> = (0..5).map(|_| rng.below(1 << 20) as i64).collect();
            k.sort();
            k_id(&k, g * 5)
        })
        .collect();
    let path = dir.join("tiny.parquet");
    write_file(&path, &groups, Some(&keys_k()));
    let out = dir.join("out.parquet");
    let res = corank(&["merge", path.to_str().unwrap(), "-o", out.to_str().unwrap(), "--engine", "cpu", "--memory-limit", "256MiB"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(ids_of(&read_all(&out)), expected_ids(&groups, &keys_k()));
}

/// Defect 8: field-level metadata present only in a later file aborted the merge with an
/// internal Arrow error.
#[test]
fn field_metadata_of_later_files_is_merged() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let a = dir.join("a.parquet");
    let b = dir.join("b.parquet");
    write_file(&a, &[k_id(&[1, 3], 0)], Some(&keys_k()));
    let meta: HashMap<String, String> = [("unit".to_string(), "seconds".to_string())].into();
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false).with_metadata(meta.clone()),
        Field::new("id", DataType::UInt64, false),
    ]));
    let batch = RecordBatch::try_new(schema.clone(), k_id(&[2, 4], 2).columns().to_vec()).unwrap();
    write_file(&b, &[batch], Some(&keys_k()));
    let plan = corank::parquet::plan_merge(&[a.clone(), b.clone()], None).unwrap();
    assert_eq!(plan.schema.field_with_name("k").unwrap().metadata(), &meta, "the merge's schema");
    let out = dir.join("out.parquet");
    let res = corank(&["merge", a.to_str().unwrap(), b.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    assert_eq!(int_column(&merged, "k"), [1, 2, 3, 4]);
    assert_eq!(merged.schema().field_with_name("k").unwrap().metadata(), &meta, "the output's Arrow schema");
}

/// Defect 14: files of one table that differ in nullability alone. DuckDB marks a column
/// required in a file that happens to hold no nulls (so one day's export may be `NOT NULL`
/// and the next nullable); they merge without `--union-by-name`, the column nullable in
/// the output, the rows the oracle's.
#[test]
fn nullability_alone_may_differ() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b) = (dir.join("a.parquet"), dir.join("b.parquet"));
    let batch = |nullable: bool, k: Vec<Option<i64>>, v: Vec<Option<&str>>, first_id: u64| {
        let n = k.len() as u64;
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("k", DataType::Int64, nullable),
                Field::new("v", DataType::Utf8, nullable),
                Field::new("id", DataType::UInt64, false),
            ])),
            vec![
                Arc::new(Int64Array::from(k)),
                Arc::new(StringArray::from(v)),
                Arc::new(UInt64Array::from_iter_values(first_id..first_id + n)),
            ],
        )
        .unwrap()
    };
    write_file(&a, &[batch(false, vec![Some(1), Some(3), Some(5)], vec![Some("a1"), Some("a3"), Some("a5")], 0)], Some(&keys_k()));
    write_file(&b, &[batch(true, vec![Some(2), Some(3), None], vec![None, Some("b3"), Some("bn")], 3)], Some(&keys_k()));
    let out = dir.join("out.parquet");
    for inputs in [[&a, &b], [&b, &a]] {
        let res = corank(&["merge", inputs[0].to_str().unwrap(), inputs[1].to_str().unwrap(), "-o", out.to_str().unwrap(), "-f"]);
        assert!(res.status.success(), "{}", text(&res.stderr));
        let merged = read_all(&out);
        let schema = merged.schema();
        assert!(schema.field(0).is_nullable() && schema.field(1).is_nullable(), "nullable where any input is");
        assert!(!schema.field(2).is_nullable(), "required where every input is");
        // ASC NULLS LAST (the declared order); equal keys in input order.
        let expected: [u64; 6] = if inputs[0] == &a { [0, 3, 1, 4, 2, 5] } else { [0, 3, 4, 1, 2, 5] };
        assert_eq!(ids_of(&merged), expected);
    }
}

/// Defect 11: schemas that differ only harmlessly (column order, nullability, int32 vs
/// int64, a column missing) merge with `--union-by-name`; exact matching stays the default.
#[test]
fn union_by_name_merges_harmless_schema_differences() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let a = dir.join("a.parquet");
    let b = dir.join("b.parquet");
    let first = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Utf8, false),
            Field::new("id", DataType::UInt64, false),
        ])),
        vec![
            Arc::new(Int32Array::from(vec![1, 3, 5])),
            Arc::new(StringArray::from(vec!["a1", "a3", "a5"])),
            Arc::new(UInt64Array::from(vec![0, 1, 2])),
        ],
    )
    .unwrap();
    let second = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::UInt64, true),
            Field::new("extra", DataType::Float32, true),
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(UInt64Array::from(vec![3, 4, 5])),
            Arc::new(Float32Array::from(vec![0.5, 1.5, 2.5])),
            Arc::new(Int64Array::from(vec![Some(2), Some(3), Some(1 << 40)])),
            Arc::new(StringArray::from(vec![Some("b2"), None, Some("b-big")])),
        ],
    )
    .unwrap();
    write_file(&a, std::slice::from_ref(&first), Some(&keys_k()));
    write_file(&b, std::slice::from_ref(&second), Some(&keys_k()));
    let out = dir.join("out.parquet");
    let (a_s, b_s, out_s) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    let res = corank(&["merge", a_s, b_s, "-o", out_s]);
    assert_eq!(res.status.code(), Some(1), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("schema differs") && text(&res.stderr).contains("--union-by-name"), "{}", text(&res.stderr));
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    let schema = merged.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["k", "v", "id", "extra"]);
    assert_eq!(schema.field(0).data_type(), &DataType::Int64);
    assert!(schema.fields().iter().all(|f| f.is_nullable()));
    assert_eq!(int_column(&merged, "k"), [1, 2, 3, 3, 5, 1 << 40]);
    assert_eq!(ids_of(&merged), [0, 3, 1, 4, 2, 5]);
    let v = merged.column_by_name("v").unwrap().as_string::<i32>();
    assert_eq!(v.iter().collect::<Vec<_>>(), [Some("a1"), Some("b2"), Some("a3"), None, Some("a5"), Some("b-big")]);
    let extra = merged.column_by_name("extra").unwrap().as_primitive::<Float32Type>();
    assert_eq!(extra.iter().collect::<Vec<_>>(), [None, Some(0.5), None, Some(1.5), None, Some(2.5)]);
    // No type holds both: an error naming the column.
    let c = dir.join("c.parquet");
    let strings = RecordBatch::try_from_iter([("k", Arc::new(StringArray::from(vec!["x"])) as ArrayRef)]).unwrap();
    write_file(&c, &[strings], None);
    let res = corank(&["merge", a_s, c.to_str().unwrap(), "-o", out_s, "--force", "--by", "k", "--union-by-name"]);
    assert_eq!(res.status.code(), Some(1), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("column 'k'"), "{}", text(&res.stderr));
}

/// Defect 15: exports of one table by DuckDB and by Polars differ in units and types that
/// hold each other's values: timestamps and times in microseconds against nanoseconds, UUIDs
/// as `FixedSizeBinary(16)` against large binaries, decimals of other precision and scale.
/// With `--union-by-name` they merge into the finer unit (values multiplied exactly), the
/// binary type and the decimal holding both; a value the finer unit cannot hold is an error
/// naming the column and the file, and no output is left. UUIDs also sort as keys.
#[test]
fn other_writers_units_and_uuids_join() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b) = (dir.join("a.parquet"), dir.join("b.parquet"));
    let uuid = |i: u8| [vec![i; 2], vec![0; 13], vec![255 - i]].concat();
    // DuckDB's types: microseconds, FixedSizeBinary(16), DECIMAL(10,2).
    let duck = RecordBatch::try_from_iter([
        ("ts", Arc::new(TimestampMicrosecondArray::from(vec![1_000, 3_000, 5_000]).with_timezone("UTC")) as ArrayRef),
        ("t", Arc::new(Time64MicrosecondArray::from(vec![Some(1), None, Some(86_399_999_999)])) as ArrayRef),
        ("u", Arc::new(FixedSizeBinaryArray::try_from_iter([uuid(1), uuid(3), uuid(5)].into_iter()).unwrap()) as ArrayRef),
        ("amount", Arc::new(Decimal128Array::from(vec![12345, -1, 0]).with_precision_and_scale(10, 2).unwrap()) as ArrayRef),
        ("id", Arc::new(UInt64Array::from(vec![0, 1, 2])) as ArrayRef),
    ])
    .unwrap();
    // Polars' types: nanoseconds, LargeBinary, DECIMAL(12,4).
    let polars = |t_last: i64| {
        RecordBatch::try_from_iter([
            ("ts", Arc::new(TimestampNanosecondArray::from(vec![2_000_000, 3_000_000, 9_000_000]).with_timezone("UTC")) as ArrayRef),
            ("t", Arc::new(Time64NanosecondArray::from(vec![5, 6, t_last])) as ArrayRef),
            ("u", Arc::new(LargeBinaryArray::from_iter_values([uuid(2), uuid(3), uuid(4)])) as ArrayRef),
            ("amount", Arc::new(Decimal128Array::from(vec![1, 2, 3]).with_precision_and_scale(12, 4).unwrap()) as ArrayRef),
            ("id", Arc::new(UInt64Array::from(vec![3, 4, 5])) as ArrayRef),
        ])
        .unwrap()
    };
    let ts_keys: Keys = vec![("ts".into(), asc())];
    write_file(&a, std::slice::from_ref(&duck), Some(&ts_keys));
    write_file(&b, &[polars(7)], Some(&ts_keys));
    let out = dir.join("out.parquet");
    let (a_s, b_s, out_s) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    let utc_ns = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    let types: Vec<DataType> = merged.schema().fields().iter().map(|f| f.data_type().clone()).collect();
    assert_eq!(
        types,
        [utc_ns, DataType::Time64(TimeUnit::Nanosecond), DataType::LargeBinary, DataType::Decimal128(12, 4), DataType::UInt64]
    );
    assert_eq!(ids_of(&merged), [0, 3, 1, 4, 2, 5], "ts 1,2,3,3,5,9 ms; the first file's 3 first");
    let ts = merged.column(0).as_primitive::<TimestampNanosecondType>();
    assert_eq!(ts.values().to_vec(), [1_000_000, 2_000_000, 3_000_000, 3_000_000, 5_000_000, 9_000_000]);
    let t = merged.column(1).as_primitive::<Time64NanosecondType>();
    assert_eq!(t.iter().collect::<Vec<_>>(), [Some(1_000), Some(5), None, Some(6), Some(86_399_999_999_000), Some(7)]);
    let u = merged.column(2).as_binary::<i64>();
    assert_eq!(u.iter().map(|v| v.unwrap()[0]).collect::<Vec<_>>(), [1, 2, 3, 3, 5, 4]);
    let amount = merged.column(3).as_primitive::<Decimal128Type>();
    assert_eq!(amount.values().to_vec(), [1_234_500, 1, -100, 2, 0, 3]);

    // UUIDs as the key, in DuckDB's type and joined with Polars'.
    let u_keys: Keys = vec![("u".into(), asc())];
    let a2 = dir.join("a2.parquet");
    write_file(&a2, std::slice::from_ref(&duck), Some(&u_keys));
    let res = corank(&["merge", a_s, a2.to_str().unwrap(), "-o", out_s, "-f", "--by", "u"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    assert_eq!(merged.column(2).data_type(), &DataType::FixedSizeBinary(16));
    assert_eq!(ids_of(&merged), expected_ids(&[duck.clone(), duck.clone()], &u_keys));
    assert_eq!(ids_of(&merged), [0, 0, 1, 1, 2, 2]);
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "-f", "--by", "u", "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(ids_of(&read_all(&out)), [0, 3, 1, 4, 5, 2], "uuid 1,2,3,3,4,5: the first file's 3 first");
    std::fs::remove_file(&a2).unwrap();

    // A time the finer unit cannot hold: an error naming the column and the file, no output.
    std::fs::remove_file(&out).unwrap();
    let huge = RecordBatch::try_from_iter([
        ("ts", Arc::new(TimestampMicrosecondArray::from(vec![0]).with_timezone("UTC")) as ArrayRef),
        ("t", Arc::new(Time64MicrosecondArray::from(vec![i64::MAX / 10])) as ArrayRef),
    ])
    .unwrap();
    let c = dir.join("c.parquet");
    write_file(&c, &[huge], Some(&ts_keys));
    let res = corank(&["merge", a_s, b_s, c.to_str().unwrap(), "-o", out_s, "--union-by-name"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("c.parquet") && stderr.contains("column 't'") && stderr.contains("does not fit"), "{stderr}");
    assert_eq!(stderr.matches("Cast error").count(), 1, "the cause once: {stderr}");
    assert_eq!(files_in(dir), ["a.parquet", "b.parquet", "c.parquet"], "{stderr}");
}

/// Timestamps of two time zones (pandas' `Europe/Paris`, DuckDB's `+00:00`) join in UTC;
/// milliseconds-since-epoch dates (Date64) join days (Date32) as days, a time of day in a
/// Date64 an error; a local timestamp and a zoned one stay apart.
#[test]
fn time_zones_and_dates_join() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b, out) = (dir.join("a.parquet"), dir.join("b.parquet"), dir.join("out.parquet"));
    const DAY: i64 = 86_400_000;
    let paris = |d_last: i64| {
        RecordBatch::try_from_iter([
            ("ts", Arc::new(TimestampMillisecondArray::from(vec![1, 3, 5]).with_timezone("Europe/Paris")) as ArrayRef),
            ("d", Arc::new(Date64Array::from(vec![Some(DAY), None, Some(d_last)])) as ArrayRef),
            ("id", Arc::new(UInt64Array::from(vec![0, 1, 2])) as ArrayRef),
        ])
        .unwrap()
    };
    let duck = RecordBatch::try_from_iter([
        ("ts", Arc::new(TimestampMicrosecondArray::from(vec![2_000, 3_000, 4_000]).with_timezone("+00:00")) as ArrayRef),
        ("d", Arc::new(Date32Array::from(vec![7, 8, 9])) as ArrayRef),
        ("id", Arc::new(UInt64Array::from(vec![3, 4, 5])) as ArrayRef),
    ])
    .unwrap();
    let ts_keys: Keys = vec![("ts".into(), asc())];
    write_file(&a, &[paris(3 * DAY)], Some(&ts_keys));
    write_file(&b, std::slice::from_ref(&duck), Some(&ts_keys));
    let (a_s, b_s, out_s) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    let types: Vec<DataType> = merged.schema().fields().iter().map(|f| f.data_type().clone()).collect();
    assert_eq!(types, [DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), DataType::Date32, DataType::UInt64]);
    assert_eq!(ids_of(&merged), [0, 3, 1, 4, 5, 2], "ts 1,2,3,3,4,5 ms; the first file's 3 first");
    let ts = merged.column(0).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.values().to_vec(), [1_000, 2_000, 3_000, 3_000, 4_000, 5_000]);
    let dates = merged.column(1).as_primitive::<Date32Type>();
    assert_eq!(dates.iter().collect::<Vec<_>>(), [Some(1), Some(7), None, Some(8), Some(9), Some(3)]);

    // Noon is no date: an error naming the file and the column, no output.
    std::fs::remove_file(&out).unwrap();
    write_file(&a, &[paris(3 * DAY + DAY / 2)], Some(&ts_keys));
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--union-by-name"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a.parquet") && stderr.contains("column 'd'") && stderr.contains("not a whole day"), "{stderr}");
    assert_eq!(files_in(dir), ["a.parquet", "b.parquet"], "{stderr}");

    // A local timestamp beside a zoned one: refused, with the types named.
    let local = RecordBatch::try_from_iter([("ts", Arc::new(TimestampMicrosecondArray::from(vec![0])) as ArrayRef)]).unwrap();
    write_file(&a, &[local], Some(&ts_keys));
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--union-by-name"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("column 'ts'") && stderr.contains("no type that holds both"), "{stderr}");
    assert_eq!(files_in(dir), ["a.parquet", "b.parquet"], "{stderr}");
}

/// Defect 4 (second half): large repeated string values overflowed the reader ("index
/// overflow decoding byte array"): a run read in one batch held more than 2 GiB of strings.
#[test]
fn huge_repeated_strings_are_read_in_smaller_batches() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let big = "x".repeat(64 << 10);
    let rows = 36_000; // 2.3 GB of strings once decoded, a few hundred KB on disk
    let path = dir.join("big.parquet");
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("s", DataType::Utf8, false)]));
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(rows)).set_compression(parquet::basic::Compression::SNAPPY);
    let chunks: Vec<RecordBatch> = (0..rows / 2000)
        .map(|c| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values((c * 2000..(c + 1) * 2000).map(|i| i as i64))),
                    Arc::new(StringArray::from_iter_values((0..2000).map(|_| big.as_str()))),
                ],
            )
            .unwrap()
        })
        .collect();
    {
        let sorting = vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }];
        let mut w = ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            schema.clone(),
            Some(props.set_sorting_columns(Some(sorting)).build()),
        )
        .unwrap();
        for c in &chunks {
            w.write(c).unwrap();
        }
        w.close().unwrap();
    }
    drop(chunks);
    let out = dir.join("out.parquet");
    let res = corank(&["merge", path.to_str().unwrap(), "-o", out.to_str().unwrap(), "--engine", "cpu", "--compression", "snappy"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap().with_batch_size(1000).build().unwrap();
    let mut n = 0;
    for b in reader {
        let b = b.unwrap();
        let k = b.column(0).as_primitive::<Int64Type>();
        let s = b.column(1).as_string::<i32>();
        for i in 0..b.num_rows() {
            assert_eq!(k.value(i), n as i64);
            assert_eq!(s.value(i).len(), big.len());
            n += 1;
        }
    }
    assert_eq!(n, rows);
}

/// Decoded-size estimates and the memory a merge holds: lineitem files (dictionary-encoded
/// strings) merged under limits from 64 MiB must stay within the limit + 20% + the fixed
/// floor that docs/PERFORMANCE.md measures (the program, its threads and the Parquet page
/// buffers, independent of the limit).
#[cfg(target_os = "linux")]
#[test]
fn peak_memory_stays_within_the_limit() {
    use crate::datagen::{write_lineitem_files, FileLayout};
    const FLOOR: u64 = 64 << 20;
    let d = tempfile::tempdir().unwrap();
    let inputs = d.path().join("in");
    // 4 sorted files (4 runs) at 64 MiB; 8 files of 2 overlapping row groups (16 runs) at
    // 256 MiB; both 2,000,000 rows.
    let sorted = d.path().join("sorted");
    write_lineitem_files(&sorted, 4, 500_000, 125_000, FileLayout::Sorted, 3).unwrap();
    write_lineitem_files(&inputs, 8, 250_000, 125_000, FileLayout::RowGroupsSorted, 3).unwrap();
    for (limit_mib, dir) in [(64u64, &sorted), (256, &inputs)] {
        let out = d.path().join(format!("out-{limit_mib}.parquet"));
        let limit = format!("{limit_mib}MiB");
        let (res, _) = corank_measured(
            &["merge", dir.to_str().unwrap(), "-o", out.to_str().unwrap(), "--engine", "cpu", "--memory-limit", &limit, "-v"],
            None,
        );
        assert!(res.status.success(), "{}", text(&res.stderr));
        // The child's own VmHWM, which `-v` prints (wait4's ru_maxrss would also count the
        // test process's memory that the child shared between fork and exec).
        let stderr = text(&res.stderr);
        let peak = peak_from_verbose(&stderr);
        let allowed = (limit_mib << 20) * 6 / 5 + FLOOR;
        eprintln!("limit {limit_mib} MiB: peak {} MiB (allowed {} MiB): {}", peak >> 20, allowed >> 20, stderr.trim());
        assert!(peak <= allowed, "limit {limit_mib} MiB: peak {} MiB > {} MiB", peak >> 20, allowed >> 20);
        assert_eq!(
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap().metadata().file_metadata().num_rows(),
            2_000_000
        );
    }
}

/// Bytes of `peak memory 123.4 MiB` in `corank merge -v` output.
fn peak_from_verbose(stderr: &str) -> u64 {
    let at = stderr.find("peak memory ").unwrap_or_else(|| panic!("no peak memory in: {stderr}")) + "peak memory ".len();
    let mut parts = stderr[at..].split_whitespace();
    let value: f64 = parts.next().unwrap().parse().unwrap();
    let unit = match parts.next().unwrap().trim_end_matches([',', ';']) {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        other => panic!("unit {other}"),
    };
    (value * unit) as u64
}

/// The random differential suite: files with dictionary payload columns of every key
/// width, float keys with NaN and ±0, random row groups, many files, random memory limits
/// from 64 MiB; the output equals the oracle row for row and the payload keeps its type.
#[test]
fn random_real_world_files_merge_like_the_oracle() {
    let key_widths = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
    ];
    for seed in 0..12u64 {
        let mut rng = Rng::new(seed + 100);
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let key_type = [DataType::Float64, DataType::Float32, DataType::Int64, DataType::Utf8][rng.below(4) as usize].clone();
        let options = rng.sort_options();
        let keys: Keys = vec![("k0".into(), options)];
        let dict_type = DataType::Dictionary(Box::new(key_widths[seed as usize % key_widths.len()].clone()), Box::new(DataType::Utf8));
        let nfiles = if seed % 4 == 0 { 300 } else { 1 + rng.below(12) as usize };
        let mut inputs = Vec::new();
        let mut paths = Vec::new();
        let mut next = 0u64;
        for f in 0..nfiles {
            let groups = 1 + rng.below(if nfiles > 20 { 2 } else { 6 }) as usize;
            let mut batches = Vec::new();
            for _ in 0..groups {
                let n = rng.below(if nfiles > 20 { 20 } else { 400 }) as usize;
                let run = sorted_run(&mut rng, std::slice::from_ref(&key_type), &[options], n, 40, 0.1, next);
                next += n as u64;
                // The payload: 100 categories, the same in every file.
                let cats: ArrayRef = Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("cat{}", (i * 7 + f) % 100))));
                let cats = arrow::compute::cast(&cats, &dict_type).unwrap();
                let mut fields: Vec<(String, ArrayRef, bool)> =
                    run.schema().fields().iter().zip(run.columns()).map(|(f, c)| (f.name().clone(), c.clone(), true)).collect();
                fields.push(("cat".into(), cats, true));
                batches.push(RecordBatch::try_from_iter_with_nullable(fields).unwrap());
            }
            let path = dir.join(format!("f{f:03}.parquet"));
            // Writers that declare the order and writers that do not.
            write_file(&path, &batches, rng.chance(0.5).then_some(&keys));
            inputs.extend(batches);
            paths.push(path);
        }
        // The oracle over the inputs as Parquet gives them back.
        let read: Vec<RecordBatch> = paths.iter().map(|p| read_all(p)).collect();
        let want = expected_ids(&read, &keys);
        let cat_by_id: HashMap<u64, String> = read
            .iter()
            .flat_map(|b| {
                let cats = b.column_by_name("cat").unwrap().as_string::<i32>().iter().map(|c| c.unwrap().to_string()).collect::<Vec<_>>();
                ids_of(b).into_iter().zip(cats)
            })
            .collect();
        let out = dir.join("out.parquet");
        let limit = format!("{}MiB", 64 << rng.below(3));
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(paths.iter().map(|p| p.display().to_string()));
        let by =
            format!("k0 {} NULLS {}", if options.descending { "DESC" } else { "ASC" }, if options.nulls_first { "FIRST" } else { "LAST" });
        args.extend([
            "-o".into(),
            out.display().to_string(),
            "--by".into(),
            by,
            "--engine".into(),
            "cpu".into(),
            "--memory-limit".into(),
            limit,
        ]);
        args.extend(["--row-group-size".into(), "500".into()]);
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let res = corank(&refs);
        assert!(res.status.success(), "seed {seed}: {}", text(&res.stderr));
        let merged = read_all(&out);
        assert_eq!(ids_of(&merged), want, "seed {seed}");
        assert_eq!(column_type(&out, "cat"), dict_type, "seed {seed}");
        let cats = merged.column_by_name("cat").unwrap().as_string::<i32>();
        for (id, c) in ids_of(&merged).iter().zip(cats.iter()) {
            assert_eq!(c.unwrap(), cat_by_id[id], "seed {seed}: id {id}");
        }
    }
}

//! End-to-end tests of `corank sort`: Parquet files in any order sorted into one file and
//! compared with the oracle (the stable sort of the inputs' concatenation by arrow-row
//! bytes), in memory and with many spilled runs; every bad input of `corank merge` with
//! its exit code and a one-line message; a spill directory that cannot be written; the
//! spill directory removed after success, failure and SIGINT.

use crate::cli_common::{bad_files, corank, expect_failure, files_in, read_file, simple_file, text, write_compressed, Keys};
use crate::common::{key_types, oracle, random_array, sorted_run, Rng};
use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::{concat_batches, take, SortOptions};
use arrow::datatypes::{DataType, Int64Type, UInt64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn by_clause(keys: &Keys) -> String {
    keys.iter()
        .map(|(name, o)| {
            format!("\"{name}\" {} NULLS {}", if o.descending { "DESC" } else { "ASC" }, if o.nulls_first { "FIRST" } else { "LAST" })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a case's rows are laid out before the sort.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Random,
    /// Sorted by the key already (each file).
    Sorted,
    /// Sorted the other way.
    Reversed,
}

/// `n` rows of random key columns `k0..` in `shape`, and an `id` column numbering them
/// from `first_id` (it pins stability). Values from `domain` choices, nulls with
/// probability `null_p`.
fn batch(
    rng: &mut Rng,
    types: &[DataType],
    options: &[SortOptions],
    shape: Shape,
    n: usize,
    (domain, null_p): (u64, f64),
    first_id: u64,
) -> RecordBatch {
    let sorted = sorted_run(rng, types, options, n, domain, null_p, first_id);
    let keys: Vec<ArrayRef> = match shape {
        Shape::Sorted => (0..types.len()).map(|i| sorted.column(i).clone()).collect(),
        Shape::Reversed => {
            let rev = UInt64Array::from_iter_values((0..n as u64).rev());
            (0..types.len()).map(|i| take(sorted.column(i), &rev, None).unwrap()).collect()
        }
        Shape::Random => types.iter().map(|t| random_array(rng, t, n, domain, null_p)).collect(),
    };
    let mut fields: Vec<(String, ArrayRef, bool)> = keys.into_iter().enumerate().map(|(i, c)| (format!("k{i}"), c, true)).collect();
    fields.push(("id".into(), Arc::new(UInt64Array::from_iter_values(first_id..first_id + n as u64)), true));
    RecordBatch::try_from_iter_with_nullable(fields).unwrap()
}

/// A case: the inputs written, the expected output (the oracle's order) and the sort key.
struct Case {
    dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    keys: Keys,
    expected: RecordBatch,
}

fn make_case(seed: u64, rows: &[Vec<usize>], types: &[DataType], shape: Shape, domain: u64, null_p: f64) -> Case {
    let mut rng = Rng::new(seed);
    let options: Vec<SortOptions> = types.iter().map(|_| rng.sort_options()).collect();
    let keys: Keys = options.iter().enumerate().map(|(i, o)| (format!("k{i}"), *o)).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut next_id = 0;
    for (f, groups) in rows.iter().enumerate() {
        let batches: Vec<RecordBatch> = groups
            .iter()
            .map(|&n| {
                let b = batch(&mut rng, types, &options, shape, n, (domain, null_p), next_id);
                next_id += n as u64;
                b
            })
            .collect();
        let path = dir.path().join(format!("in-{f:02}.parquet"));
        write_compressed(&path, &batches, None, Compression::SNAPPY);
        paths.push(path);
    }
    // The oracle over the inputs as read back (the types Parquet gives back).
    let inputs: Vec<RecordBatch> = paths.iter().flat_map(|p| read_file(p).0).collect();
    let schema = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&paths[0]).unwrap()).unwrap().schema().clone();
    let all = concat_batches(&schema, &inputs).unwrap();
    let order = UInt64Array::from_iter_values(oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| i as u64));
    let columns = all.columns().iter().map(|c| take(c, &order, None).unwrap()).collect();
    let expected = RecordBatch::try_new(schema, columns).unwrap();
    Case { dir, paths, keys, expected }
}

/// Sorts the case with `extra` arguments; checks the output against the oracle (every
/// column, row for row) and its `sorting_columns`; returns the JSON summary.
fn sort_and_check(case: &Case, extra: &[&str], context: &str) -> serde_json::Value {
    let output = case.dir.path().join("out.parquet");
    let _ = std::fs::remove_file(&output);
    let by = by_clause(&case.keys);
    let mut args: Vec<&str> = vec!["sort"];
    let paths: Vec<String> = case.paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let out_s = output.display().to_string();
    args.extend(["-o", &out_s, "--by", &by, "--engine", "cpu", "--json"]);
    args.extend(extra);
    let out = corank(&args);
    assert!(out.status.success(), "{context}: {args:?}\nstderr: {}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let (batches, sorting) = read_file(&output);
    let got = concat_batches(&case.expected.schema(), &batches).unwrap();
    assert_eq!(got.num_rows(), case.expected.num_rows(), "{context}");
    assert_eq!(got.column_by_name("id").unwrap(), case.expected.column_by_name("id").unwrap(), "{context}: order differs from the oracle");
    for (i, f) in case.expected.schema().fields().iter().enumerate() {
        assert_eq!(got.column(i).as_ref(), case.expected.column(i).as_ref(), "{context}: column {}", f.name());
    }
    if got.num_rows() > 0 {
        let schema = case.expected.schema();
        let want: Vec<(usize, bool, bool)> =
            case.keys.iter().map(|(n, o)| (schema.index_of(n).unwrap(), o.descending, o.nulls_first)).collect();
        let have: Vec<(usize, bool, bool)> =
            sorting.expect("sorting_columns").iter().map(|s| (s.column_idx as usize, s.descending, s.nulls_first)).collect();
        assert_eq!(have, want, "{context}: sorting_columns");
    }
    assert_eq!(summary["rows"].as_u64(), Some(got.num_rows() as u64), "{context}");
    // Nothing left beside the inputs and the output: no spill directory, no temporary file.
    let left: Vec<String> = files_in(case.dir.path()).into_iter().filter(|f| !f.starts_with("in-")).collect();
    assert_eq!(left, ["out.parquet"], "{context}: files left behind");
    summary
}

/// The smallest `--memory-limit` the sort of `case` accepts, read from its refusal of 1 KiB.
fn smallest_limit(case: &Case) -> usize {
    let by = by_clause(&case.keys);
    let out_s = case.dir.path().join("out.parquet").display().to_string();
    let mut args: Vec<&str> = vec!["sort"];
    let paths: Vec<String> = case.paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    args.extend(["-o", &out_s, "--by", &by, "--memory-limit", "1KiB", "--force"]);
    let out = corank(&args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let at_least = stderr.split("it needs at least ").nth(1).unwrap_or_else(|| panic!("{stderr}")).trim();
    let (num, unit) = at_least.split_once(' ').unwrap();
    let scale = match unit {
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => 1.0,
    };
    (num.parse::<f64>().unwrap() * scale).ceil() as usize
}

#[test]
fn random_inputs_sort_like_the_oracle() {
    let types = key_types();
    for seed in 0..30 {
        let mut rng = Rng::new(seed + 100);
        let ncols = 1 + rng.below(3) as usize;
        let key_types: Vec<DataType> = (0..ncols).map(|_| types[rng.below(types.len() as u64) as usize].clone()).collect();
        let files = 1 + rng.below(4) as usize;
        let rows: Vec<Vec<usize>> =
            (0..files).map(|_| (0..1 + rng.below(3)).map(|_| [0, 1, 2, 7, 300, 1000][rng.below(6) as usize]).collect()).collect();
        let shape = [Shape::Random, Shape::Random, Shape::Sorted, Shape::Reversed][rng.below(4) as usize];
        let domain = [1, 3, 50, 1 << 40][rng.below(4) as usize];
        let null_p = [0.0, 0.1, 0.9][rng.below(3) as usize];
        let case = make_case(seed, &rows, &key_types, shape, domain, null_p);
        // Both strategies, and the one `auto` picks (columns: these inputs fit).
        for strategy in ["columns", "runs", "auto"] {
            let context = format!(
                "seed {seed}: {key_types:?}, {:?}, {shape:?}, rows {rows:?}, domain {domain}, nulls {null_p}, {strategy}",
                case.keys
            );
            let summary = sort_and_check(&case, &["--strategy", strategy], &context);
            assert_eq!(summary["spill_runs"].as_u64(), Some(0), "{context}: {summary}");
            let expected = if strategy == "runs" { "runs" } else { "columns" };
            assert_eq!(summary["strategy"].as_str(), Some(expected), "{context}: {summary}");
        }
    }
}

#[test]
fn sizes_zero_and_one_and_all_equal_keys() {
    for (seed, rows) in [(1, vec![vec![0]]), (2, vec![vec![1]]), (3, vec![vec![0], vec![1], vec![0, 0]]), (4, vec![vec![1], vec![1]])] {
        let case = make_case(seed, &rows, &[DataType::Int64], Shape::Random, 1 << 20, 0.3);
        sort_and_check(&case, &[], &format!("rows {rows:?}"));
    }
    // All keys equal: the output is the input order (stability), with and without spills.
    let case = make_case(5, &[vec![30_000], vec![20_000, 40_000]], &[DataType::Utf8], Shape::Random, 1, 0.0);
    sort_and_check(&case, &["--strategy", "columns"], "all equal, by columns");
    sort_and_check(&case, &["--strategy", "runs"], "all equal, in runs");
    let limit = smallest_limit(&case).to_string();
    let summary = sort_and_check(&case, &["--memory-limit", &limit, "--strategy", "runs"], "all equal, spilled");
    assert!(summary["spill_runs"].as_u64().unwrap() > 1, "{summary}");
    let ids: Vec<u64> = case.expected.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec();
    assert!(ids.iter().copied().eq(0..90_000), "all keys equal, yet the order is not the input order");
}

/// Row groups decode in parallel, several at once, but go into the chunks in input order:
/// with every key equal, the output is the inputs' concatenation, row group for row group,
/// in one chunk and across spilled runs.
#[test]
fn row_groups_decoded_in_parallel_keep_the_input_order() {
    let rows: Vec<Vec<usize>> = (0..6).map(|f| (0..5).map(|g| [0, 1, 3_000, 700, 9_000][(f + g) % 5]).collect()).collect();
    let total: usize = rows.iter().flatten().sum();
    let case = make_case(21, &rows, &[DataType::Utf8], Shape::Random, 1, 0.0);
    let limit = smallest_limit(&case).to_string();
    for extra in [&["--strategy", "columns"][..], &["--strategy", "runs"][..], &["--memory-limit", &limit, "--strategy", "runs"][..]] {
        let summary = sort_and_check(&case, extra, &format!("all keys equal, {extra:?}"));
        assert_eq!(summary["rows"].as_u64(), Some(total as u64));
    }
    let ids: Vec<u64> = case.expected.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec();
    assert!(ids.iter().copied().eq(0..total as u64), "all keys equal, yet the oracle's order is not the input order");
}

/// A memory limit that holds a small part of the rows: many sorted runs spilled, merged
/// (through intermediate passes where the limit holds too few runs at once), the result
/// still the oracle's, in every shape and for several key types.
#[test]
fn small_memory_limit_spills_many_runs() {
    let cases: [(u64, Vec<DataType>, Shape, u64); 5] = [
        (10, vec![DataType::Int64], Shape::Random, 1 << 40),
        (11, vec![DataType::Utf8, DataType::Float64], Shape::Random, 50),
        (12, vec![DataType::UInt32], Shape::Sorted, 1000),
        (13, vec![DataType::Int32, DataType::Utf8View], Shape::Reversed, 30),
        (14, vec![DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)), DataType::Date32], Shape::Random, 20),
    ];
    let mut passes = 0;
    for (seed, types, shape, domain) in cases {
        let rows = vec![vec![20_000, 15_000], vec![0], vec![25_000], vec![1, 9_999]];
        let case = make_case(seed, &rows, &types, shape, domain, 0.1);
        let limit = smallest_limit(&case);
        let context = format!("seed {seed}: {types:?} {shape:?} {:?}, limit {limit}", case.keys);
        let summary = sort_and_check(&case, &["--memory-limit", &limit.to_string(), "-v", "--strategy", "runs"], &context);
        let runs = summary["spill_runs"].as_u64().unwrap();
        assert!(runs > 2, "{context}: {summary}");
        assert!(summary["spill_bytes"].as_u64().unwrap() > 0, "{context}: {summary}");
        passes += summary["intermediate_passes"].as_u64().unwrap();
    }
    assert!(passes > 0, "no case merged runs in an intermediate pass");
}

/// Every bad input of `corank merge` (tests/cli/merge.rs) gets the same exit code and message
/// from `corank sort`, and leaves no file behind.
#[test]
fn bad_inputs_get_merges_exit_codes_and_leave_no_output() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let p = |name: &str| dir.join(name).display().to_string();
    simple_file(&dir.join("a.parquet"), &[vec![5, 3, 1]], false);
    simple_file(&dir.join("b.parquet"), &[vec![2, 4]], true);
    bad_files(dir);
    let base = ["a.parquet", "b.parquet", "other.parquet", "text.parquet", "trunc.parquet"];
    let out = p("out.parquet");
    let (a, b) = (p("a.parquet"), p("b.parquet"));

    expect_failure(dir, &["sort", &a, &p("missing.parquet"), "-o", &out, "--by", "k"], 1, "missing.parquet: no such file", &base);
    expect_failure(dir, &["sort", &a, &p("text.parquet"), "-o", &out, "--by", "k"], 1, "text.parquet", &base);
    expect_failure(dir, &["sort", &a, &p("trunc.parquet"), "-o", &out, "--by", "k"], 1, "trunc.parquet", &base);
    expect_failure(dir, &["sort", &a, &p("other.parquet"), "-o", &out, "--by", "k"], 1, "schema differs", &base);
    expect_failure(dir, &["sort", &a, &b, "-o", &out, "--by", "nope"], 2, "sort column 'nope' is not in the inputs", &base);
    // No --by and no sorting_columns to take the key from.
    expect_failure(dir, &["sort", &a, &b, "-o", &out], 2, "no sorting_columns metadata; give the sort key with --by", &base);
    expect_failure(dir, &["sort", &a, &b, "-o", &out, "--by", "k SIDEWAYS"], 2, "--by", &base);
    expect_failure(dir, &["sort", &a, &b, "-o", &out, "--by", "k", "--compression", "zip"], 2, "--compression", &base);
    expect_failure(dir, &["sort", &a, &b, "-o", &out, "--by", "k", "--spill-compression", "zip"], 2, "--spill-compression", &base);
    expect_failure(
        dir,
        &["sort", &a, &b, "-o", &out, "--by", "k", "--memory-limit", "1KiB"],
        2,
        "--memory-limit 1.0 KiB is too small",
        &base,
    );
    expect_failure(dir, &["sort", &a, &b, "-o", &out, "--no-such-flag"], 2, "--no-such-flag", &base);
    expect_failure(dir, &["sort", &p("*.nothing"), "-o", &out, "--by", "k"], 1, "no file matches", &base);
    expect_failure(dir, &["sort", &a, "-o", &a, "--by", "k", "--force"], 2, "is also an input", &base);
    expect_failure(dir, &["sort", &a, "-o", "-", "--by", "k"], 2, "stdout is not supported", &base);
    expect_failure(dir, &["sort", &a, "-o", dir.to_str().unwrap(), "--by", "k"], 2, "is a directory", &base);
    // A nested sort key: Parquet's sorting_columns cannot name it.
    let list = arrow::array::ListArray::from_iter_primitive::<Int64Type, _, _>([Some(vec![Some(1)])]);
    let nested = RecordBatch::try_from_iter([("l", Arc::new(list) as ArrayRef)]).unwrap();
    let nested_dir = tempfile::tempdir().unwrap();
    write_compressed(&nested_dir.path().join("n.parquet"), &[nested], None, Compression::UNCOMPRESSED);
    let n = nested_dir.path().join("n.parquet").display().to_string();
    expect_failure(dir, &["sort", &n, "-o", &out, "--by", "l"], 2, "sorting_columns name leaf columns", &base);
    // An existing output needs --force and stays untouched without it.
    std::fs::write(dir.join("out.parquet"), "keep me").unwrap();
    let mut with_out = base.to_vec();
    with_out.push("out.parquet");
    with_out.sort();
    expect_failure(dir, &["sort", &a, &b, "-o", &out, "--by", "k"], 2, "exists; use --force", &with_out);
    assert_eq!(std::fs::read(dir.join("out.parquet")).unwrap(), b"keep me");
    // An output directory that does not exist: nothing written.
    expect_failure(dir, &["sort", &a, &b, "-o", &p("no/such/dir/out.parquet"), "--by", "k"], 1, "cannot create", &with_out);
    // The good case, with --force.
    let ok = corank(&["sort", &a, &b, "-o", &out, "--force", "--by", "k"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let (batches, _) = read_file(&dir.join("out.parquet"));
    let k: Vec<i64> = batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
    assert_eq!(k, [1, 2, 3, 4, 5]);
    assert!(text(&ok.stdout).starts_with("sorted 5 rows (2 files)"), "{}", text(&ok.stdout));
    // --json errors: one object on stdout too.
    let out_json = corank(&["sort", &a, &b, "-o", &out, "--by", "nope", "--json"]);
    let v: serde_json::Value = serde_json::from_str(text(&out_json.stdout).trim()).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["exit_code"], 2);
    assert_eq!(corank(&["sort"]).status.code(), Some(2));
}

/// A spill directory that cannot be created (the temporary directory is a file, or does
/// not exist, or is read-only): a clear error, exit 1, no output, nothing left anywhere.
#[test]
fn a_temp_dir_that_cannot_be_written_is_an_error() {
    let case = make_case(20, &[vec![20_000], vec![20_000]], &[DataType::Int64], Shape::Random, 1 << 40, 0.0);
    let limit = smallest_limit(&case).to_string();
    for strategy in ["runs", "columns"] {
        // Runs spill at the smallest limit; the columns' sort keeps its encoded pages in a
        // file of the spill directory beyond its budget, so it needs the directory too.
        let limit = if strategy == "runs" { limit.as_str() } else { "2GiB" };
        temp_dir_errors(&case, &["--memory-limit", limit, "--strategy", strategy]);
    }
}

fn temp_dir_errors(case: &Case, extra: &[&str]) {
    let by = by_clause(&case.keys);
    let out = case.dir.path().join("out.parquet");
    let (a, b) = (case.paths[0].display().to_string(), case.paths[1].display().to_string());
    let before = files_in(case.dir.path());
    let sort_with_temp = |temp: &Path| {
        let mut args = vec!["sort", &a, &b, "-o", out.to_str().unwrap(), "--by", &by, "--temp-dir", temp.to_str().unwrap()];
        args.extend(extra);
        corank(&args)
    };
    let file = case.dir.path().join("in-00.parquet");
    let missing = case.dir.path().join("missing");
    for (temp, needle) in [(file.as_path(), "--temp-dir is not a directory"), (missing.as_path(), "--temp-dir is not a directory")] {
        let res = sort_with_temp(temp);
        let stderr = text(&res.stderr);
        assert_eq!(res.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(needle) && stderr.trim_end().lines().count() == 1, "{stderr}");
        assert_eq!(files_in(case.dir.path()), before);
    }
    // Read-only: only meaningful where permissions bind (not as root).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = tempfile::tempdir().unwrap();
        std::fs::set_permissions(ro.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
        let binds = std::fs::File::create(ro.path().join("probe")).is_err();
        if binds {
            let res = sort_with_temp(ro.path());
            let stderr = text(&res.stderr);
            assert_eq!(res.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("cannot create the spill directory"), "{stderr}");
            assert_eq!(files_in(ro.path()), Vec::<String>::new());
            assert_eq!(files_in(case.dir.path()), before);
        } else {
            let _ = std::fs::remove_file(ro.path().join("probe"));
        }
        std::fs::set_permissions(ro.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A writable one: the sort succeeds and leaves it empty.
    let temp = tempfile::tempdir().unwrap();
    let res = sort_with_temp(temp.path());
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(files_in(temp.path()), Vec::<String>::new(), "spill files left after success");
    std::fs::remove_file(&out).unwrap();
}

/// A failure in the middle of the sort (a page of the third input is corrupt, after
/// runs of the first inputs were spilled): an error, no output, the spill directory gone.
#[test]
fn a_failure_after_spilling_leaves_nothing_behind() {
    let case = make_case(30, &[vec![20_000], vec![20_000], vec![20_000]], &[DataType::Int64], Shape::Random, 1 << 40, 0.0);
    let limit = smallest_limit(&case).to_string();
    // Break the third file's first page header (the footer stays readable).
    let mut bytes = std::fs::read(&case.paths[2]).unwrap();
    for x in &mut bytes[4..68] {
        *x = 0xff;
    }
    std::fs::write(&case.paths[2], &bytes).unwrap();
    fails_on_the_third_input_leaving_nothing(&case, &["--memory-limit", &limit, "-v", "--strategy", "runs"]);
}

/// Sorts `case` with `extra`, expecting exit 1 with a message naming `in-02.parquet` (one
/// line, unless `-v` adds log lines), no output and nothing left in the temporary directory.
fn fails_on_the_third_input_leaving_nothing(case: &Case, extra: &[&str]) {
    let temp = tempfile::tempdir().unwrap();
    let out = case.dir.path().join("out.parquet");
    let mut args: Vec<String> = vec!["sort".into()];
    args.extend(case.paths.iter().map(|p| p.display().to_string()));
    args.extend(["-o".into(), out.display().to_string(), "--by".into(), by_clause(&case.keys)]);
    args.extend(extra.iter().map(|e| e.to_string()));
    args.extend(["--temp-dir".into(), temp.path().display().to_string()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let res = corank(&argv);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{extra:?}: {stderr}");
    assert!(stderr.contains("in-02.parquet"), "{stderr}");
    if !extra.contains(&"-v") {
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
    assert!(!out.exists());
    assert_eq!(files_in(temp.path()), Vec::<String>::new(), "{extra:?}: spill files left after a failure");
}

/// Ctrl-C during the sort, once spill runs exist (or, sorting by columns, the file for its
/// encoded pages): the process ends by SIGINT and neither the output, its temporary file
/// nor the spill directory is left. A sort that ended before the signal landed proves
/// nothing: it must have succeeded, and it is run again.
#[cfg(unix)]
#[test]
fn interrupted_sort_leaves_no_file() {
    let case =
        make_case(40, &[vec![100_000], vec![100_000], vec![100_000]], &[DataType::Int64, DataType::Utf8], Shape::Random, 1 << 40, 0.0);
    let limit = smallest_limit(&case).to_string();
    interrupted_sort_leaves_no_file_with(&case, &["--memory-limit", &limit, "--strategy", "runs"]);
    interrupted_sort_leaves_no_file_with(&case, &["--strategy", "columns"]);
}

#[cfg(unix)]
fn interrupted_sort_leaves_no_file_with(case: &Case, extra: &[&str]) {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let by = by_clause(&case.keys);
    let temp = tempfile::tempdir().unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("sorted.parquet");
    let spill_files =
        |dir: &Path| -> usize { std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()).map(|e| files_in(&e.path()).len()).sum() };
    for attempt in 0..5 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_corank"))
            .args(["sort", "-q", "--engine", "cpu", "--by", &by])
            .args(extra)
            .arg("--temp-dir")
            .arg(temp.path())
            .arg("-o")
            .arg(&out)
            .args(&case.paths)
            .spawn()
            .expect("the corank binary runs");
        let start = Instant::now();
        let seen = loop {
            if spill_files(temp.path()) > 0 {
                break true;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{extra:?}: no spill file after 60 s");
            std::thread::sleep(Duration::from_millis(1));
        };
        if seen {
            // SAFETY: kill(2) with the pid of our own child; no memory is involved.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        let status = child.wait().unwrap();
        let left = files_in(temp.path());
        let outputs = files_in(out_dir.path());
        if status.signal() == Some(libc::SIGINT) && left.is_empty() && outputs.is_empty() {
            return;
        }
        assert!(status.success() || status.signal() == Some(libc::SIGINT), "attempt {attempt}: {status}");
        assert!(left.is_empty(), "attempt {attempt}: spill files left behind: {left:?}");
        assert_eq!(outputs, ["sorted.parquet"], "attempt {attempt}: files left behind");
        std::fs::remove_file(&out).unwrap();
    }
    panic!("{extra:?}: five sorts ended before their signal");
}

#[test]
fn dry_run_writes_nothing() {
    let case = make_case(50, &[vec![5000], vec![5000]], &[DataType::Int64], Shape::Random, 1 << 40, 0.0);
    let by = by_clause(&case.keys);
    let out = case.dir.path().join("out.parquet");
    let before = files_in(case.dir.path());
    let (a, b) = (case.paths[0].display().to_string(), case.paths[1].display().to_string());
    let res = corank(&["sort", &a, &b, "-o", out.to_str().unwrap(), "--by", &by, "--dry-run"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert!(text(&res.stdout).starts_with("dry run, nothing written: would sort 10,000 rows (2 files"), "{}", text(&res.stdout));
    // An Int64 key without nulls and a roomy limit: its columns are put in order by chunk.
    assert!(text(&res.stdout).contains("fixed-width columns placed in order chunk by chunk"), "{}", text(&res.stdout));
    let res = corank(&["sort", &a, &b, "-o", out.to_str().unwrap(), "--by", &by, "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_str(text(&res.stdout).trim()).unwrap();
    assert_eq!(v["rows"], 10_000);
    assert_eq!(v["estimated_runs"], 1);
    assert_eq!(v["strategy"], "columns");
    let res = corank(&["sort", &a, &b, "-o", out.to_str().unwrap(), "--by", &by, "--dry-run", "--strategy", "runs"]);
    assert!(text(&res.stdout).contains("\nstrategy: runs (--strategy runs)\n"), "{}", text(&res.stdout));
    assert_eq!(files_in(case.dir.path()), before);
}

/// A corrupt page of a payload column, met once the keys are sorted and the file of
/// encoded pages exists: an error naming the file, no output, the spill directory gone.
#[test]
fn a_failure_while_sorting_by_columns_leaves_nothing_behind() {
    let case = make_case(31, &[vec![20_000], vec![20_000], vec![20_000]], &[DataType::Int64], Shape::Random, 1 << 40, 0.0);
    // Break the first page header of the third file's `id` column (not the key).
    let footer = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&case.paths[2]).unwrap()).unwrap().metadata().clone();
    let id = footer.row_group(0).columns().iter().find(|c| c.column_path().string() == "id").unwrap();
    let at = id.dictionary_page_offset().unwrap_or(id.data_page_offset()) as usize;
    let mut bytes = std::fs::read(&case.paths[2]).unwrap();
    for x in &mut bytes[at..at + 32] {
        *x = 0xff;
    }
    std::fs::write(&case.paths[2], &bytes).unwrap();
    fails_on_the_third_input_leaving_nothing(&case, &["--strategy", "columns"]);
}

/// Reads every batch of `path` as one batch.
fn read_all(path: &Path) -> RecordBatch {
    let (batches, _) = read_file(path);
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// Sorts `paths` by `by` with each strategy (and `extra`), checks that both outputs hold
/// the same rows in the same order, and returns the columns' output.
fn sort_both_ways(dir: &Path, paths: &[PathBuf], by: &str, extra: &[&str]) -> RecordBatch {
    let mut outputs = Vec::new();
    for strategy in ["columns", "runs"] {
        let out = dir.join(format!("out-{strategy}.parquet"));
        let mut args: Vec<String> = vec!["sort".into()];
        args.extend(paths.iter().map(|p| p.display().to_string()));
        args.extend(["-o".into(), out.display().to_string(), "--by".into(), by.into(), "--strategy".into(), strategy.into()]);
        args.extend(["--json".into(), "--engine".into(), "cpu".into(), "-f".into()]);
        args.extend(extra.iter().map(|e| e.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let res = corank(&argv);
        assert!(res.status.success(), "{strategy}: {}", text(&res.stderr));
        let summary: serde_json::Value = serde_json::from_str(text(&res.stdout).trim()).unwrap();
        assert_eq!(summary["strategy"], strategy, "{summary}");
        outputs.push(read_all(&out));
    }
    assert_eq!(outputs[0], outputs[1], "the two strategies' outputs differ");
    outputs.swap_remove(0)
}

/// Payloads of every kind (struct, list, a narrow dictionary whose key type the output's row
/// groups outgrow, large strings, binaries, fixed-size binaries, booleans, decimals) sorted
/// one column at a time into several row groups: the oracle's rows, as the runs give them.
#[test]
fn payloads_of_every_kind_sort_by_columns_as_in_runs() {
    use arrow::array::{
        BinaryArray, BooleanArray, Decimal128Array, DictionaryArray, FixedSizeBinaryArray, Int32Array, LargeStringArray, ListArray,
        StructArray,
    };
    use arrow::datatypes::{Field, Int8Type};
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(77);
    let mut paths = Vec::new();
    let mut next_id = 0u64;
    for f in 0..2u64 {
        let groups: Vec<RecordBatch> = (0..2)
            .map(|_| {
                let n = 2500;
                let k = random_array(&mut rng, &DataType::Int64, n, 1000, 0.05);
                let ids = UInt64Array::from_iter_values(next_id..next_id + n as u64);
                next_id += n as u64;
                let words: Vec<String> = (0..n).map(|i| format!("w{}-{}", f, (i as u64 * 7919 + next_id) % 100)).collect();
                let dict: DictionaryArray<Int8Type> = words.iter().map(String::as_str).collect();
                let a = Int32Array::from_iter((0..n).map(|i| (i % 5 != 0).then_some(i as i32)));
                let b = StringArray::from_iter((0..n).map(|i| (i % 3 != 0).then(|| format!("s{i}"))));
                let st = StructArray::from(vec![
                    (Arc::new(Field::new("a", DataType::Int32, true)), Arc::new(a) as ArrayRef),
                    (Arc::new(Field::new("b", DataType::Utf8, true)), Arc::new(b) as ArrayRef),
                ]);
                let list = ListArray::from_iter_primitive::<Int64Type, _, _>(
                    (0..n).map(|i| (i % 4 != 0).then(|| (0..i % 3).map(|j| Some((i * j) as i64)).collect::<Vec<_>>())),
                );
                let large = LargeStringArray::from_iter((0..n).map(|i| (i % 6 != 0).then(|| "x".repeat(i % 40))));
                let bin = BinaryArray::from_iter((0..n).map(|i| (i % 7 != 0).then(|| vec![i as u8; i % 20])));
                let fixed = FixedSizeBinaryArray::try_from_sparse_iter_with_size((0..n).map(|i| Some([(i % 251) as u8; 4])), 4).unwrap();
                let flags = BooleanArray::from_iter((0..n).map(|i| (i % 9 != 0).then_some(i % 2 == 0)));
                let dec = Decimal128Array::from_iter((0..n).map(|i| (i % 8 != 0).then_some(i as i128 * 1001)))
                    .with_precision_and_scale(20, 3)
                    .unwrap();
                RecordBatch::try_from_iter_with_nullable([
                    ("k", k, true),
                    ("id", Arc::new(ids) as ArrayRef, false),
                    ("dict", Arc::new(dict) as ArrayRef, false),
                    ("st", Arc::new(st) as ArrayRef, true),
                    ("list", Arc::new(list) as ArrayRef, true),
                    ("large", Arc::new(large) as ArrayRef, true),
                    ("bin", Arc::new(bin) as ArrayRef, true),
                    ("fixed", Arc::new(fixed) as ArrayRef, true),
                    ("flags", Arc::new(flags) as ArrayRef, true),
                    ("dec", Arc::new(dec) as ArrayRef, true),
                ])
                .unwrap()
            })
            .collect();
        let path = dir.path().join(format!("in-{f:02}.parquet"));
        write_compressed(&path, &groups, None, Compression::SNAPPY);
        paths.push(path);
    }
    let keys: Keys = vec![("k".into(), SortOptions { descending: true, nulls_first: false })];
    let got = sort_both_ways(dir.path(), &paths, &by_clause(&keys), &["--row-group-size", "3000"]);
    // The oracle, over the inputs as read back.
    // (The dictionary column as strings: the inputs' Int8 keys cannot index both files' values.)
    let as_text = |a: &ArrayRef| arrow::compute::cast(a, &DataType::Utf8).unwrap();
    let inputs: Vec<RecordBatch> = paths
        .iter()
        .map(|p| {
            let b = read_all(p);
            let columns =
                b.schema().fields().iter().zip(b.columns()).map(|(f, c)| if f.name() == "dict" { as_text(c) } else { c.clone() }).collect();
            RecordBatch::try_from_iter(b.schema().fields().iter().map(|f| f.name().clone()).zip::<Vec<ArrayRef>>(columns)).unwrap()
        })
        .collect();
    let all = concat_batches(&inputs[0].schema(), &inputs).unwrap();
    let order = UInt64Array::from_iter_values(oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| i as u64));
    assert_eq!(got.num_rows(), all.num_rows());
    for (i, f) in all.schema().fields().iter().enumerate() {
        let want = take(all.column(i), &order, None).unwrap();
        let have = got.column_by_name(f.name()).unwrap();
        if f.name() == "dict" {
            // 200 distinct values in a row group: the Int8 keys were widened.
            assert_eq!(have.data_type(), &DataType::Dictionary(Box::new(DataType::Int16), Box::new(DataType::Utf8)));
            assert_eq!(as_text(have).as_ref(), want.as_ref(), "column dict");
        } else {
            assert_eq!(have.as_ref(), want.as_ref(), "column {}", f.name());
        }
    }
    let (_, sorting) = read_file(&dir.path().join("out-columns.parquet"));
    assert_eq!(sorting.map(|s| s.len()), Some(1));
    let row_groups = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(dir.path().join("out-columns.parquet")).unwrap())
        .unwrap()
        .metadata()
        .num_row_groups();
    assert_eq!(row_groups, 4, "10,000 rows in row groups of 3,000");
}

/// `--union-by-name`: a column one file lacks reads as nulls, a narrower type is widened,
/// one column at a time as in runs.
#[test]
fn union_by_name_sorts_by_columns_as_in_runs() {
    use arrow::array::{Float64Array, Int32Array};
    let dir = tempfile::tempdir().unwrap();
    let a = RecordBatch::try_from_iter([
        ("k", Arc::new(Int32Array::from(vec![5, 1, 3, 1])) as ArrayRef),
        ("v", Arc::new(StringArray::from(vec!["a5", "a1", "a3", "a1b"])) as ArrayRef),
    ])
    .unwrap();
    let b = RecordBatch::try_from_iter([
        ("w", Arc::new(Float64Array::from(vec![0.5, 1.5, 2.5])) as ArrayRef),
        ("k", Arc::new(Int64Array::from(vec![2, 1, 6])) as ArrayRef),
    ])
    .unwrap();
    let (pa, pb) = (dir.path().join("in-a.parquet"), dir.path().join("in-b.parquet"));
    write_compressed(&pa, &[a], None, Compression::UNCOMPRESSED);
    write_compressed(&pb, &[b], None, Compression::UNCOMPRESSED);
    let got = sort_both_ways(dir.path(), &[pa, pb], "k", &["--union-by-name"]);
    let k: Vec<i64> = got.column_by_name("k").unwrap().as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(k, [1, 1, 1, 2, 3, 5, 6]);
    let v = got.column_by_name("v").unwrap().as_string::<i32>();
    let v: Vec<Option<&str>> = v.iter().collect();
    assert_eq!(v, [Some("a1"), Some("a1b"), None, None, Some("a3"), Some("a5"), None]);
}

/// Encoded pages past the page budget go to a file in the spill directory and come back
/// from it into the output: the oracle's rows, nothing left behind.
#[test]
fn encoded_pages_past_the_budget_go_to_the_spill_directory() {
    use corank::parquet::PlanOptions;
    use corank::parquet::{parse_order_by, plan_sort, sort_files, SortFilesOptions, SortStrategy};
    let case = make_case(61, &[vec![30_000, 10_000], vec![25_000]], &[DataType::Utf8, DataType::Int32], Shape::Random, 50, 0.1);
    let temp = tempfile::tempdir().unwrap();
    let out = case.dir.path().join("out.parquet");
    let options =
        SortFilesOptions { strategy: SortStrategy::Columns, temp_dir: Some(temp.path().to_path_buf()), ..SortFilesOptions::default() };
    let mut options = options;
    options.writer.row_group_rows = 20_000;
    let keys = parse_order_by(&by_clause(&case.keys)).unwrap();
    let mut plan = plan_sort(&case.paths, Some(keys), &PlanOptions::default(), &out, &options).unwrap();
    plan.columns.as_mut().expect("sorted by columns").page_budget = 0;
    let summary = sort_files(&plan, &out, &options, &|_, _| {}).unwrap();
    assert_eq!(summary.strategy, "columns");
    assert!(summary.spill_bytes > 0, "no page went to the spill directory");
    assert_eq!(summary.output_row_groups, 4);
    let got = read_all(&out);
    assert_eq!(got, case.expected);
    assert_eq!(files_in(temp.path()), Vec::<String>::new(), "spill files left after success");
}

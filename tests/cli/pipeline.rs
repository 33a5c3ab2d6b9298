//! What pipelines need from `corank merge` (issue 13, item 4), end to end through the
//! binary: `--json` (one JSON object on stdout, its numbers those of the written file;
//! errors as an object too, exit codes unchanged), `--dry-run` (the plan, nothing written),
//! the gzip / lz4 / brotli codecs written and read (output equal to the oracle, the codec
//! in the file's metadata), `RUST_LOG` and `-v` logging on stderr, and bad `--compression`
//! values as usage errors.

use crate::cli_common::{command, corank, files_in, text, write_compressed, Keys};
use crate::common::{oracle, sorted_run, Rng};
use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::{concat_batches, SortOptions};
use arrow::datatypes::{DataType, UInt64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

fn read_rows(path: &Path) -> Vec<RecordBatch> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap().build().unwrap();
    reader.map(|b| b.unwrap()).collect()
}

/// The codec of every column chunk of every row group of `path`.
fn codecs(path: &Path) -> Vec<Compression> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    builder.metadata().row_groups().iter().flat_map(|g| g.columns().iter().map(|c| c.compression())).collect()
}

fn same_codec(a: Compression, b: Compression) -> bool {
    // Levels are not stored in the file: compare the codec only.
    std::mem::discriminant(&a) == std::mem::discriminant(&b)
}

/// `stdout` as exactly one JSON object on one line.
fn one_json_object(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "stdout is not one line: {stdout:?} (stderr: {})", text(&out.stderr));
    assert!(stdout.ends_with('\n'), "{stdout:?}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert!(v.is_object(), "{stdout}");
    v
}

/// Random sorted inputs: `files` files of 1 to 3 row groups (each group sorted, groups of a
/// file overlapping, so a file may be several runs), keys `k0` (Int64) and `k1` (Utf8)
/// `ASC NULLS LAST` declared, payload `id` (the row's global number); file `f` written with
/// `codecs[f % codecs.len()]`. Returns the paths and the oracle's ids in merged order.
fn random_inputs(dir: &Path, seed: u64, files: usize, codecs: &[Compression]) -> (Vec<PathBuf>, Vec<u64>) {
    let mut rng = Rng::new(seed);
    let asc = SortOptions { descending: false, nulls_first: false };
    let keys: Keys = vec![("k0".into(), asc), ("k1".into(), asc)];
    let mut paths = Vec::new();
    let mut next = 0;
    for f in 0..files {
        let groups: Vec<RecordBatch> = (0..1 + rng.below(3))
            .map(|_| {
                let n = 1 + rng.below(400) as usize;
                let run = sorted_run(&mut rng, &[DataType::Int64, DataType::Utf8], &[asc, asc], n, 60, 0.05, next);
                next += n as u64;
                run
            })
            .collect();
        let path = dir.join(format!("in-{f:02}.parquet"));
        write_compressed(&path, &groups, Some(&keys), codecs[f % codecs.len()]);
        paths.push(path);
    }
    let inputs: Vec<RecordBatch> = paths.iter().flat_map(|p| read_rows(p)).collect();
    let all = concat_batches(&inputs[0].schema(), &inputs).unwrap();
    let ids = all.column_by_name("id").unwrap().as_primitive::<UInt64Type>();
    let want = oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| ids.value(i)).collect();
    (paths, want)
}

fn ids_of(path: &Path) -> Vec<u64> {
    read_rows(path).iter().flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect()
}

fn args_with<'a>(paths: &'a [String], rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["merge"];
    args.extend(paths.iter().map(String::as_str));
    args.extend(rest);
    args
}

#[test]
fn json_summary_is_one_object_with_the_files_numbers() {
    let d = tempfile::tempdir().unwrap();
    let (paths, want) = random_inputs(d.path(), 1, 5, &[Compression::SNAPPY]);
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let output = d.path().join("out \"quoted\"\\ é.parquet"); // escaped in the JSON
    let out_s = output.display().to_string();
    let out = corank(&args_with(&shown, &["-o", &out_s, "--engine", "cpu", "--row-group-size", "300", "--json"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = one_json_object(&out);
    // The output file is what the object says.
    let got = ids_of(&output);
    assert_eq!(got, want, "rows differ from the oracle");
    let meta = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&output).unwrap()).unwrap().metadata().clone();
    assert_eq!(v["ok"], true);
    assert_eq!(v["output"], out_s.as_str());
    assert_eq!(v["rows"].as_u64(), Some(got.len() as u64));
    assert_eq!(v["rows"].as_u64(), Some(meta.file_metadata().num_rows() as u64));
    assert_eq!(v["files"].as_u64(), Some(5));
    let runs = corank::parquet::plan_merge(&paths, None).unwrap().runs.len();
    assert_eq!(v["runs"].as_u64(), Some(runs as u64));
    assert!(runs > 5, "some file is more than one run ({runs} runs)");
    assert_eq!(v["output_bytes"].as_u64(), Some(std::fs::metadata(&output).unwrap().len()));
    let input_bytes: u64 = paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(v["input_bytes"].as_u64(), Some(input_bytes));
    assert_eq!(v["output_row_groups"].as_u64(), Some(meta.num_row_groups() as u64));
    assert_eq!(v["output_row_groups"].as_u64(), Some(got.len().div_ceil(300) as u64));
    assert_eq!(v["engine"], "cpu");
    assert_eq!(v["rounds_gpu"].as_u64(), Some(0));
    assert!(v["rounds"].as_u64().unwrap() >= 1);
    assert_eq!(v["rounds"].as_u64(), Some(v["rounds_cpu"].as_u64().unwrap()));
    assert_eq!(v["compression"], "zstd(3)");
    assert_eq!(v["by"], "k0 ASC NULLS LAST, k1 ASC NULLS LAST");
    assert_eq!(v["memory_limit"].as_u64(), Some(corank::parquet::default_memory_limit() as u64), "the default: half the memory available");
    for key in ["elapsed_s", "read_s", "merge_s", "write_s", "rows_per_s"] {
        assert!(v[key].as_f64().is_some_and(|s| s >= 0.0), "{key}: {}", v[key]);
    }
    // -q does not hide the object (the caller asked for it); -v adds only stderr.
    let out2 = d.path().join("out2.parquet").display().to_string();
    let out = corank(&args_with(&shown, &["-o", &out2, "--engine", "cpu", "--json", "-q", "-v"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(one_json_object(&out)["rows"].as_u64(), Some(want.len() as u64));
    // Without --json: the summary line, not JSON.
    let out3 = d.path().join("out3.parquet").display().to_string();
    let out = corank(&args_with(&shown, &["-o", &out3, "--engine", "cpu"]));
    assert!(text(&out.stdout).starts_with("merged "), "{}", text(&out.stdout));
}

#[test]
fn json_errors_keep_exit_codes_and_stderr() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let asc = SortOptions { descending: false, nulls_first: false };
    let keys: Keys = vec![("k".into(), asc)];
    let batch = |k: Vec<i64>| {
        let v: Vec<String> = k.iter().map(|x| format!("v{x}")).collect();
        RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
            .unwrap()
    };
    write_compressed(&dir.join("a.parquet"), &[batch(vec![1, 3, 5])], Some(&keys), Compression::SNAPPY);
    write_compressed(&dir.join("bad.parquet"), &[batch(vec![4, 2])], Some(&keys), Compression::SNAPPY);
    let p = |name: &str| dir.join(name).display().to_string();
    let (a, bad, out) = (p("a.parquet"), p("bad.parquet"), p("out.parquet"));
    let before = files_in(dir);
    for (args, code, needle) in [
        (vec!["merge", &a, &bad, "-o", &out, "--json"], 3, "bad.parquet: not sorted"),
        (vec!["merge", &a, "-o", &out, "--by", "nope", "--json"], 2, "sort column 'nope'"),
        (vec!["merge", &a, "-o", &out, "--json", "--compression", "gzip(10)"], 2, "--compression"),
        (vec!["merge", &a, "-o", &out, "--json", "--no-such-flag"], 2, "--no-such-flag"),
        (vec!["merge", &p("missing.parquet"), "-o", &out, "--json"], 1, "missing.parquet"),
        (vec!["merge", &a, &bad, "-o", &out, "--json", "--dry-run", "--by", "k, v DESC, nope"], 2, "nope"),
    ] {
        let res = corank(&args);
        let stderr = text(&res.stderr);
        assert_eq!(res.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("corank: error: ") && stderr.contains(needle), "{args:?}: {stderr}");
        let v = one_json_object(&res);
        assert_eq!(v["ok"], false, "{args:?}");
        assert_eq!(v["exit_code"].as_i64(), Some(code as i64), "{args:?}");
        let message = v["error"].as_str().unwrap();
        assert!(stderr.contains(message), "{args:?}: the JSON's message {message:?} is not stderr's {stderr:?}");
        assert_eq!(files_in(dir), before, "{args:?}: a file was left");
    }
    // Without --json an error prints nothing on stdout.
    let res = corank(&["merge", &a, &bad, "-o", &out]);
    assert_eq!(res.status.code(), Some(3));
    assert_eq!(text(&res.stdout), "");
}

/// Files with a known number of runs: `whole` (3 row groups continuing each other: 1 run),
/// `overlap` (2 row groups overlapping: 2 runs), `single` (1 run).
fn planned_inputs(dir: &Path) -> Vec<PathBuf> {
    let asc = SortOptions { descending: false, nulls_first: false };
    let keys: Keys = vec![("k".into(), asc)];
    let batch = |k: std::ops::Range<i64>, first_id: u64| {
        let n = k.end - k.start;
        RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from_iter_values(k)) as ArrayRef),
            ("id", Arc::new(UInt64Array::from_iter_values(first_id..first_id + n as u64)) as ArrayRef),
        ])
        .unwrap()
    };
    let whole = dir.join("whole.parquet");
    write_compressed(&whole, &[batch(0..100, 0), batch(100..200, 100), batch(200..300, 200)], Some(&keys), Compression::SNAPPY);
    let overlap = dir.join("overlap.parquet");
    write_compressed(&overlap, &[batch(0..50, 300), batch(10..60, 350)], Some(&keys), Compression::SNAPPY);
    let single = dir.join("single.parquet");
    write_compressed(&single, &[batch(5..25, 400)], Some(&keys), Compression::SNAPPY);
    vec![whole, overlap, single]
}

#[test]
fn dry_run_lists_the_runs_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let paths = planned_inputs(dir);
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let output = dir.join("out.parquet");
    let out_s = output.display().to_string();
    let before = files_in(dir);

    // For people: one line per run, the memory plan, the engine.
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run", "--memory-limit", "64MiB", "--compression", "gzip(7)"]));
    let stdout = text(&res.stdout);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(files_in(dir), before, "a dry run wrote a file");
    assert!(!output.exists());
    assert!(stdout.starts_with("dry run, nothing written: would merge 420 rows (3 files, 4 runs"), "{stdout}");
    let runs: Vec<&str> = stdout.lines().filter(|l| l.starts_with("run ")).collect();
    assert_eq!(runs.len(), 4, "{stdout}");
    assert!(runs[0].contains("whole.parquet, row groups 0-2, 300 rows"), "{stdout}");
    assert!(runs[1].contains("overlap.parquet, row group 0, 50 rows"), "{stdout}");
    assert!(runs[2].contains("overlap.parquet, row group 1, 50 rows"), "{stdout}");
    assert!(runs[3].contains("single.parquet, row group 0, 20 rows"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("memory: limit 64.0 MiB")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("engine: ")), "{stdout}");
    assert!(stdout.lines().any(|l| l == format!("output: {out_s}, gzip(7)")), "{stdout}");

    // As JSON.
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run", "--json", "--engine", "cpu", "--memory-limit", "64MiB"]));
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(files_in(dir), before, "a dry run wrote a file");
    let v = one_json_object(&res);
    assert_eq!(v["ok"], true);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["rows"].as_u64(), Some(420));
    assert_eq!(v["engine"], "cpu");
    assert_eq!(v["compression"], "zstd(3)");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let groups: Vec<Value> = runs.iter().map(|r| r["row_groups"].clone()).collect();
    assert_eq!(groups, [serde_json::json!([0, 1, 2]), serde_json::json!([0]), serde_json::json!([1]), serde_json::json!([0])]);
    let rows: Vec<u64> = runs.iter().map(|r| r["rows"].as_u64().unwrap()).collect();
    assert_eq!(rows, [300, 50, 50, 20]);
    let files: Vec<u64> = runs.iter().map(|r| r["file"].as_u64().unwrap()).collect();
    assert_eq!(files, [0, 1, 1, 2]);
    assert_eq!(v["files"].as_array().unwrap().len(), 3);
    assert_eq!(v["files"][1]["row_groups"].as_u64(), Some(2));
    assert_eq!(v["files"][0]["bytes"].as_u64(), Some(std::fs::metadata(&paths[0]).unwrap().len()));
    let memory = &v["memory"];
    assert_eq!(memory["memory_limit"].as_u64(), Some(64 << 20));
    assert_eq!(memory["memory_limit_origin"], "--memory-limit");
    let windows: u64 = runs.iter().map(|r| r["window_bytes"].as_u64().unwrap()).sum();
    assert!(windows > 0 && windows == memory["window_bytes"].as_u64().unwrap());
    assert!(windows <= (64 << 20) / 4, "windows {windows} beyond a quarter of the limit");
    assert_eq!(memory["keep_files_open"], true);

    // The plan is the merge's: the same runs, and a limit the merge refuses is refused.
    let res = corank(&args_with(&shown, &["-o", &out_s, "--json", "--engine", "cpu", "--memory-limit", "64MiB"]));
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(one_json_object(&res)["runs"].as_u64(), Some(4));
    std::fs::remove_file(&output).unwrap();
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run", "--memory-limit", "1KiB"]));
    assert_eq!(res.status.code(), Some(2), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("--memory-limit 1.0 KiB is too small"), "{}", text(&res.stderr));

    // No --memory-limit: half the memory available, said in the plan, the JSON and -v.
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run", "--json"]));
    assert!(res.status.success(), "{}", text(&res.stderr));
    let memory = one_json_object(&res)["memory"].clone();
    let default = corank::parquet::default_memory_limit() as u64;
    assert_eq!(memory["memory_limit"].as_u64(), Some(default));
    let available = corank::parquet::available_memory().expect("Linux tells").bytes;
    assert_eq!(default, available / 2);
    let origin = memory["memory_limit_origin"].as_str().unwrap();
    assert!(origin.starts_with("default, half of ") && (origin.ends_with("of physical memory") || origin.ends_with("limit")), "{origin}");
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run"]));
    assert!(
        text(&res.stdout).contains(&format!("memory: limit {} ({origin})", crate::show_bytes::show_bytes(default))),
        "{}",
        text(&res.stdout)
    );
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run", "-v"]));
    assert!(
        text(&res.stderr).contains(&format!("memory limit {} ({origin})", crate::show_bytes::show_bytes(default))),
        "{}",
        text(&res.stderr)
    );

    // An existing output: refused without --force as the merge would; with --force left as it is.
    std::fs::write(&output, "keep me").unwrap();
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run"]));
    assert_eq!(res.status.code(), Some(2), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("use --force"), "{}", text(&res.stderr));
    let res = corank(&args_with(&shown, &["-o", &out_s, "--dry-run", "--force"]));
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert_eq!(std::fs::read(&output).unwrap(), b"keep me");
    let mut with_out = before.clone();
    with_out.push("out.parquet".to_string());
    with_out.sort();
    assert_eq!(files_in(dir), with_out, "no temporary file either");
}

#[test]
fn codecs_are_written_and_read_end_to_end() {
    // Inputs in every codec the crate reads (LZ4 in both framings).
    let input_codecs = [
        Compression::GZIP(GzipLevel::try_new(6).unwrap()),
        Compression::LZ4,
        Compression::LZ4_RAW,
        Compression::BROTLI(BrotliLevel::try_new(5).unwrap()),
        Compression::ZSTD(ZstdLevel::try_new(3).unwrap()),
        Compression::SNAPPY,
        Compression::UNCOMPRESSED,
    ];
    let d = tempfile::tempdir().unwrap();
    let (paths, want) = random_inputs(d.path(), 7, input_codecs.len(), &input_codecs);
    for (path, codec) in paths.iter().zip(input_codecs) {
        assert!(codecs(path).iter().all(|&c| same_codec(c, codec)), "{}: {:?}, not {codec:?}", path.display(), codecs(path));
    }
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let gzip = Compression::GZIP(GzipLevel::default());
    let brotli = Compression::BROTLI(BrotliLevel::default());
    let zstd = Compression::ZSTD(ZstdLevel::default());
    for (flag, codec, shown_as) in [
        ("gzip", gzip, "gzip(6)"),
        ("gzip(9)", gzip, "gzip(9)"),
        ("GZIP(0)", gzip, "gzip(0)"),
        ("lz4", Compression::LZ4_RAW, "lz4"),
        ("lz4_raw", Compression::LZ4_RAW, "lz4"),
        ("brotli", brotli, "brotli(1)"),
        ("brotli(4)", brotli, "brotli(4)"),
        ("zstd(5)", zstd, "zstd(5)"),
        ("snappy", Compression::SNAPPY, "snappy"),
        ("none", Compression::UNCOMPRESSED, "none"),
    ] {
        let output = d.path().join(format!("out-{}.parquet", flag.replace(['(', ')'], "_")));
        let out_s = output.display().to_string();
        let res =
            corank(&args_with(&shown, &["-o", &out_s, "--engine", "cpu", "--compression", flag, "--row-group-size", "500", "--json"]));
        assert!(res.status.success(), "{flag}: {}", text(&res.stderr));
        assert_eq!(one_json_object(&res)["compression"], shown_as, "{flag}");
        let found = codecs(&output);
        assert!(!found.is_empty() && found.iter().all(|&c| same_codec(c, codec)), "{flag}: the output's codecs are {found:?}");
        assert_eq!(ids_of(&output), want, "{flag}: rows differ from the oracle");
    }
}

#[test]
fn bad_compression_values_are_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    let paths = planned_inputs(d.path());
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let out_s = d.path().join("out.parquet").display().to_string();
    let before = files_in(d.path());
    for (value, why) in [
        ("zip", "unknown codec 'zip'"),
        ("gzip(10)", "gzip level 10 is not in 0..9"),
        ("zstd(0)", "zstd level 0 is not in 1..22"),
        ("brotli(12)", "brotli level 12 is not in 0..11"),
        ("brotli(x)", "'x' is not a level"),
        ("zstd(3", "no ')'"),
        ("lz4(1)", "lz4 takes no level"),
        ("snappy(2)", "snappy takes no level"),
        ("lzo", "unknown codec 'lzo'"),
        ("", "no codec named"),
    ] {
        for dry in [false, true] {
            let mut args = args_with(&shown, &["-o", &out_s, "--compression", value]);
            if dry {
                args.push("--dry-run");
            }
            let res = corank(&args);
            let stderr = text(&res.stderr);
            assert_eq!(res.status.code(), Some(2), "{value:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{value:?}: {stderr}");
            assert!(
                stderr.starts_with(&format!("corank: error: invalid argument: --compression \"{value}\": {why}")),
                "{value:?}: {stderr}"
            );
            assert!(stderr.contains("gzip(0..9)") && stderr.contains("lz4"), "{value:?}: the codecs are not listed: {stderr}");
            assert_eq!(text(&res.stdout), "");
            assert_eq!(files_in(d.path()), before);
        }
    }
}

#[test]
fn rust_log_and_verbose_log_on_stderr() {
    let d = tempfile::tempdir().unwrap();
    let paths = planned_inputs(d.path());
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let output = d.path().join("out.parquet");
    let out_s = output.display().to_string();
    let run = |extra: &[&str], rust_log: Option<&str>| {
        let _ = std::fs::remove_file(&output);
        let mut c = command();
        c.args(args_with(&shown, &["-o", &out_s, "--json"])).args(extra);
        if let Some(spec) = rust_log {
            c.env("RUST_LOG", spec);
        }
        let res = c.output().unwrap();
        assert!(res.status.success(), "{extra:?} {rust_log:?}: {}", text(&res.stderr));
        // Logs never reach stdout: it stays one JSON object.
        assert_eq!(one_json_object(&res)["rows"].as_u64(), Some(420));
        text(&res.stderr)
    };
    let plan_line = "INFO  corank::cli::merge] merging 420 rows of 3 files as 4 runs by k ASC NULLS LAST";
    // Default: warnings only, so nothing on a good run.
    assert_eq!(run(&["--engine", "cpu"], None), "");
    // RUST_LOG=info: the plan line, with a time stamp.
    let stderr = run(&["--engine", "cpu"], Some("info"));
    let line = stderr.lines().find(|l| l.contains(plan_line)).unwrap_or_else(|| panic!("no plan line in: {stderr}"));
    assert!(line.starts_with("[20") && line.contains("Z INFO "), "{line}");
    // Module filters: only what is named.
    assert!(!run(&["--engine", "cpu"], Some("corank::cli::merge=info")).is_empty());
    assert_eq!(run(&["--engine", "cpu"], Some("corank::engine=info,corank::cli=warn")), "");
    assert_eq!(run(&["--engine", "cpu"], Some("off")), "");
    // -v raises corank's own records to info, also over RUST_LOG.
    assert!(run(&["--engine", "cpu", "-v"], None).contains(plan_line));
    assert!(run(&["--engine", "cpu", "-v"], Some("error")).contains(plan_line));
    assert!(!run(&["--engine", "cpu", "-vv"], None).is_empty());
    // -vv: each round's phases and the writer's wait for its encodes.
    let debug = run(&["--engine", "cpu", "-vv"], None);
    let round = debug.lines().find(|l| l.contains("corank round: ")).unwrap_or_else(|| panic!("no round line in: {debug}"));
    for phase in ["windows filled in ", "merged on the Cpu engine in ", "gathered in ", " for the writer"] {
        assert!(round.contains(phase), "'{phase}' not in: {round}");
    }
    assert!(debug.contains("row groups encoded; waited "), "no writer line in: {debug}");
    // A spec that cannot be read is reported, not fatal.
    assert!(run(&["--engine", "cpu"], Some("corank=loud")).contains("RUST_LOG: ignoring 'corank=loud'"));
    // Where no GPU is usable, --engine auto says so with -v (the engine's info line).
    if corank::gpu_availability().is_err() {
        let stderr = run(&[], None);
        assert_eq!(stderr, "", "without -v the fallback is not a warning");
        let stderr = run(&["-v"], None);
        assert!(stderr.contains("INFO  corank::engine] corank: no usable GPU ("), "{stderr}");
        assert!(stderr.contains("merging on the CPU"), "{stderr}");
        let stderr = run(&[], Some("corank::engine=info"));
        assert!(stderr.contains("no usable GPU"), "{stderr}");
    }
}

/// `--passthrough`: two files whose keys do not overlap (the second's first key equals the
/// first's last: the earlier input's rows come first, so both copy) are copied row group by
/// row group under `auto` (same codec), merged under `never`; the JSON summary, the summary
/// line and the dry run say so, and both outputs hold the oracle's rows.
#[test]
fn passthrough_is_reported_and_switched_off_by_never() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    let batch = |lo: u64| {
        let k: ArrayRef = Arc::new(UInt64Array::from_iter_values(lo..lo + 1000));
        let v: ArrayRef = Arc::new(StringArray::from_iter_values((lo..lo + 1000).map(|x| format!("v{x}"))));
        RecordBatch::try_from_iter([("k", k), ("v", v)]).unwrap()
    };
    let zstd = Compression::ZSTD(ZstdLevel::try_new(3).unwrap());
    let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
    write_compressed(&a, &[batch(0), batch(1000)], Some(&keys), zstd);
    write_compressed(&b, &[batch(1999), batch(3000)], Some(&keys), zstd);
    let inputs = [read_rows(&a), read_rows(&b)].concat();
    let all = concat_batches(&inputs[0].schema(), &inputs).unwrap();
    let order = UInt64Array::from_iter_values(oracle(&inputs, &keys).into_iter().map(|i| i as u64));
    let expected = arrow::compute::take_record_batch(&all, &order).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());

    let dry = corank(&["merge", a, b, "-o", dir.path().join("dry.parquet").to_str().unwrap(), "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let plan = text(&dry.stdout);
    assert!(plan.contains("passthrough auto: 4,000 rows in 4 row groups copied untouched"), "{plan}");
    assert_eq!(plan.lines().filter(|l| l.starts_with("copy: ")).count(), 4, "{plan}");

    for (mode, copied) in [("auto", 4000u64), ("never", 0)] {
        let out = dir.path().join(format!("{mode}.parquet"));
        let res = corank(&["merge", a, b, "-o", out.to_str().unwrap(), "--passthrough", mode, "--json"]);
        assert!(res.status.success(), "{mode}: {}", text(&res.stderr));
        let v: Value = serde_json::from_str(text(&res.stdout).trim()).unwrap();
        assert_eq!(v["passthrough"], mode);
        assert_eq!(v["passthrough_rows"].as_u64(), Some(copied), "{v}");
        assert_eq!(v["passthrough_row_groups"].as_u64(), Some(copied / 1000), "{v}");
        let got = concat_batches(&expected.schema(), &read_rows(&out)).unwrap();
        assert_eq!(got, expected, "{mode}");
    }
    let line = corank(&["merge", a, b, "-o", dir.path().join("line.parquet").to_str().unwrap()]);
    assert!(text(&line.stdout).contains("; 4,000 rows in 4 row groups copied untouched"), "{}", text(&line.stdout));
    let bad = corank(&["merge", a, b, "-o", dir.path().join("bad.parquet").to_str().unwrap(), "--passthrough", "sometimes"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
}

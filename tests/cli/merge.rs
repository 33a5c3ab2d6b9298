//! End-to-end tests of the `corank` binary: random sorted Parquet inputs merged by
//! `corank merge` and compared with the oracle (the stable sort of the inputs'
//! concatenation by arrow-row bytes); every bad input with its exit code, a one-line
//! message and no output left behind; an interrupted merge (SIGINT) leaves no file behind;
//! `corank demo` (the comparison with other tools: `bench.rs`).

use crate::cli_common::{bad_files, corank, expect_failure, files_in, read_file, simple_file, text, write_file, Keys};
use crate::common::{oracle, random_key_columns, sorted_run, Rng};
use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt64Array};
use arrow::compute::{concat_batches, take, SortOptions};
use arrow::datatypes::{DataType, UInt64Type};
use corank::parquet::plan_merge;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::path::PathBuf;
use std::process::Command;

fn by_clause(keys: &Keys, rng: &mut Rng) -> String {
    keys.iter()
        .map(|(name, o)| {
            let mut s = if rng.chance(0.5) { format!("\"{name}\"") } else { name.clone() };
            let default_nulls_first = o.descending;
            if o.descending {
                s += if rng.chance(0.5) { " DESC" } else { " desc" };
            } else if rng.chance(0.5) {
                s += " ASC";
            }
            if o.nulls_first != default_nulls_first || rng.chance(0.5) {
                s += if o.nulls_first { " NULLS FIRST" } else { " NULLS LAST" };
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One random case: random key types and options, files sorted as a whole or per row
/// group, with or without `sorting_columns`, some empty; merged, then compared with the
/// oracle row for row (the `id` column pins stability).
fn random_case(seed: u64, max_files: u64) {
    let mut rng = Rng::new(seed);
    let ncols = 1 + rng.below(3) as usize;
    let (key_types, options) = random_key_columns(&mut rng, ncols);
    let keys: Keys = options.iter().enumerate().map(|(i, o)| (format!("k{i}"), *o)).collect();
    let domain = [1, 3, 50, 1 << 40][rng.below(4) as usize];
    let null_p = [0.0, 0.1, 0.9][rng.below(3) as usize];
    let nfiles = 1 + rng.below(max_files) as usize;
    let with_metadata = rng.chance(0.5);
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut next_id = 0;
    for f in 0..nfiles {
        let row_groups = if rng.chance(0.3) { 1 + rng.below(4) as usize } else { 1 };
        let mut groups = Vec::new();
        for _ in 0..row_groups {
            let n = if rng.chance(0.1) { 0 } else { rng.below(600) as usize };
            groups.push(sorted_run(&mut rng, &key_types, &options, n, domain, null_p, next_id));
            next_id += n as u64;
        }
        let path = dir.path().join(format!("in-{f:02}.parquet"));
        write_file(&path, &groups, with_metadata.then_some(&keys));
        paths.push(path);
    }
    // The oracle over the inputs as read back from Parquet (the types Parquet gives back).
    let inputs: Vec<RecordBatch> = paths.iter().flat_map(|p| read_file(p).0).collect();
    let schema = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&paths[0]).unwrap()).unwrap().schema().clone();
    let all = concat_batches(&schema, &inputs).unwrap();
    let expected_ids = take(
        all.column_by_name("id").unwrap(),
        &UInt64Array::from_iter_values(oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| i as u64)),
        None,
    )
    .unwrap();

    let output = dir.path().join("out.parquet");
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    args.extend(["-o".into(), output.display().to_string(), "--engine".into(), "cpu".into(), "--row-group-size".into(), "700".into()]);
    if !with_metadata || rng.chance(0.3) {
        args.extend(["--by".into(), by_clause(&keys, &mut rng)]);
    }
    if rng.chance(0.3) {
        args.push("--check-sorted".into());
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = corank(&argv);
    let context = format!("seed {seed}: types {key_types:?}, options {options:?}, {nfiles} files, metadata {with_metadata}, args {args:?}");
    assert!(out.status.success(), "{context}\nstderr: {}", text(&out.stderr));
    let (batches, sorting) = read_file(&output);
    let got = concat_batches(&schema, &batches).unwrap();
    assert_eq!(got.num_rows(), all.num_rows(), "{context}");
    assert_eq!(got.column_by_name("id").unwrap().as_ref(), expected_ids.as_ref(), "{context}: order differs from the oracle");
    // Every column travelled with its row.
    let expect_all = take_batch(&all, &expected_ids);
    for (i, f) in schema.fields().iter().enumerate() {
        assert_eq!(got.column(i).as_ref(), expect_all.column(i).as_ref(), "{context}: column {}", f.name());
    }
    if got.num_rows() > 0 {
        let sorting = sorting.expect("sorting_columns on the output");
        let want: Vec<(usize, bool, bool)> = keys.iter().map(|(n, o)| (schema.index_of(n).unwrap(), o.descending, o.nulls_first)).collect();
        let have: Vec<(usize, bool, bool)> = sorting.iter().map(|s| (s.column_idx as usize, s.descending, s.nulls_first)).collect();
        assert_eq!(have, want, "{context}: sorting_columns");
    }
}

/// `all`'s rows in the order of the ids in `ids` (ids are row numbers of `all`).
fn take_batch(all: &RecordBatch, ids: &ArrayRef) -> RecordBatch {
    let id_col = all.column_by_name("id").unwrap().as_primitive::<UInt64Type>();
    let mut pos = vec![0u64; all.num_rows()];
    for (row, id) in id_col.values().iter().enumerate() {
        pos[*id as usize] = row as u64;
    }
    let idx = UInt64Array::from_iter_values(ids.as_primitive::<UInt64Type>().values().iter().map(|&id| pos[id as usize]));
    let cols = all.columns().iter().map(|c| take(c, &idx, None).unwrap()).collect();
    RecordBatch::try_new(all.schema(), cols).unwrap()
}

#[test]
fn random_inputs_merge_like_the_oracle() {
    for seed in 0..40 {
        random_case(seed, 8);
    }
}

#[test]
fn sixty_four_files() {
    random_case(1000, 64);
    for seed in 2000..2003 {
        random_case_with_files(seed, 64);
    }
}

fn random_case_with_files(seed: u64, files: usize) {
    // Same as random_case, with exactly `files` inputs of a simple Int64 key.
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let keys: Keys = vec![("k0".into(), rng.sort_options())];
    let mut paths = Vec::new();
    let mut next = 0;
    for f in 0..files {
        let n = rng.below(300) as usize;
        let run = sorted_run(&mut rng, &[DataType::Int64], &[keys[0].1], n, 40, 0.05, next);
        next += n as u64;
        let path = dir.path().join(format!("f{f:02}.parquet"));
        write_file(&path, &[run], Some(&keys));
        paths.push(path);
    }
    let inputs: Vec<RecordBatch> = paths.iter().flat_map(|p| read_file(p).0).collect();
    let all = concat_batches(&inputs[0].schema(), &inputs).unwrap();
    let want: Vec<u64> =
        oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| all.column(1).as_primitive::<UInt64Type>().value(i)).collect();
    let output = dir.path().join("out.parquet");
    // A directory as the input: its files in name order.
    let out = corank(&["merge", dir.path().to_str().unwrap(), "-o", output.to_str().unwrap(), "--engine", "cpu"]);
    assert!(out.status.success(), "seed {seed}: {}", text(&out.stderr));
    let (batches, _) = read_file(&output);
    let got: Vec<u64> = batches.iter().flat_map(|b| b.column(1).as_primitive::<UInt64Type>().values().to_vec()).collect();
    assert_eq!(got, want, "seed {seed}");
}

#[test]
fn bad_inputs_get_their_exit_code_and_leave_no_output() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let p = |name: &str| dir.join(name).display().to_string();
    simple_file(&dir.join("a.parquet"), &[vec![1, 3, 5]], true);
    simple_file(&dir.join("b.parquet"), &[vec![2, 4]], true);
    bad_files(dir);
    simple_file(&dir.join("unsorted.parquet"), &[vec![1, 2, 3], vec![4, 9, 7]], false);
    simple_file(&dir.join("liar.parquet"), &[vec![5, 1]], true);
    simple_file(&dir.join("nometa.parquet"), &[vec![1, 2]], false);
    let base =
        ["a.parquet", "b.parquet", "liar.parquet", "nometa.parquet", "other.parquet", "text.parquet", "trunc.parquet", "unsorted.parquet"];
    let out = p("out.parquet");
    let (a, b) = (p("a.parquet"), p("b.parquet"));

    expect_failure(dir, &["merge", &a, &p("missing.parquet"), "-o", &out], 1, "missing.parquet: no such file", &base);
    expect_failure(dir, &["merge", &a, &p("text.parquet"), "-o", &out], 1, "text.parquet", &base);
    expect_failure(dir, &["merge", &a, &p("trunc.parquet"), "-o", &out], 1, "trunc.parquet", &base);
    expect_failure(dir, &["merge", &a, &p("other.parquet"), "-o", &out, "--by", "k"], 1, "schema differs", &base);
    expect_failure(dir, &["merge", &a, &b, "-o", &out, "--by", "nope"], 2, "sort column 'nope' is not in the inputs", &base);
    expect_failure(dir, &["merge", &a, &p("nometa.parquet"), "-o", &out], 2, "no sorting_columns", &base);
    expect_failure(dir, &["merge", &a, &b, "-o", &out, "--by", "k SIDEWAYS"], 2, "--by", &base);
    expect_failure(dir, &["merge", &a, &b, "-o", &out, "--compression", "zip"], 2, "--compression", &base);
    expect_failure(dir, &["merge", &a, &b, "-o", &out, "--memory-limit", "1KiB"], 2, "memory-limit", &base);
    expect_failure(dir, &["merge", &a, &b, "-o", &out, "--no-such-flag"], 2, "--no-such-flag", &base);
    expect_failure(dir, &["merge", &p("*.nothing"), "-o", &out], 1, "no file matches", &base);
    // Unsorted: named by file, row group and row; exit 3.
    expect_failure(
        dir,
        &["merge", &a, &p("unsorted.parquet"), "-o", &out, "--by", "k"],
        3,
        "unsorted.parquet: not sorted: row group 1, row 2",
        &base,
    );
    // Metadata that lies is believed without --check-sorted, caught with it.
    expect_failure(
        dir,
        &["merge", &a, &p("liar.parquet"), "-o", &out, "--check-sorted"],
        3,
        "liar.parquet: not sorted: row group 0, row 1",
        &base,
    );
    // An existing output needs --force and stays untouched without it.
    std::fs::write(dir.join("out.parquet"), "keep me").unwrap();
    let mut with_out = base.to_vec();
    with_out.push("out.parquet");
    with_out.sort();
    expect_failure(dir, &["merge", &a, &b, "-o", &out], 2, "exists; use --force", &with_out);
    assert_eq!(std::fs::read(dir.join("out.parquet")).unwrap(), b"keep me");
    // A failure after the output file was started leaves the old one in place.
    expect_failure(dir, &["merge", &a, &p("unsorted.parquet"), "-o", &out, "--by", "k", "--force"], 3, "not sorted", &with_out);
    assert_eq!(std::fs::read(dir.join("out.parquet")).unwrap(), b"keep me");
    let ok = corank(&["merge", &a, &b, "-o", &out, "--force"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let (batches, _) = read_file(&dir.join("out.parquet"));
    let k: Vec<i64> = batches.iter().flat_map(|b| b.column(0).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec()).collect();
    assert_eq!(k, [1, 2, 3, 4, 5]);
    assert!(text(&ok.stdout).starts_with("merged 5 rows (2 files, 2 runs)"), "{}", text(&ok.stdout));
    // Usage without arguments.
    assert_eq!(corank(&["merge"]).status.code(), Some(2));
}

#[test]
fn empty_and_row_group_sorted_files() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    simple_file(&dir.join("a.parquet"), &[vec![]], true);
    // Row groups sorted each, overlapping: three runs.
    simple_file(&dir.join("b.parquet"), &[vec![1, 5, 9], vec![2, 3], vec![0, 10]], true);
    // Globally sorted over three row groups: one run (statistics show they continue).
    simple_file(&dir.join("c.parquet"), &[vec![1, 2], vec![4, 6], vec![7, 8]], true);
    let paths: Vec<PathBuf> = ["a", "b", "c"].iter().map(|n| dir.join(format!("{n}.parquet"))).collect();
    let plan = plan_merge(&paths, None).unwrap();
    assert_eq!(plan.runs.len(), 4, "{:?}", plan.runs);
    assert_eq!(plan.runs[3].row_groups, [0, 1, 2]);
    let out = dir.join("out.parquet");
    let glob = format!("{}/*.parquet", dir.display());
    let res = corank(&["merge", &glob, "-o", out.to_str().unwrap()]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let (batches, _) = read_file(&out);
    let k: Vec<i64> = batches.iter().flat_map(|b| b.column(0).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec()).collect();
    assert_eq!(k, [0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // Only empty inputs: an empty output with the schema.
    let only_empty = dir.join("empty-out.parquet");
    let res = corank(&["merge", dir.join("a.parquet").to_str().unwrap(), "-o", only_empty.to_str().unwrap(), "--by", "k"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&only_empty).unwrap()).unwrap();
    assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
    assert_eq!(reader.schema().fields().len(), 2);
}

/// Ctrl-C during a merge: the process ends by SIGINT (as it would without a handler) and
/// neither the output nor the temporary file is left in the directory. The signal goes as
/// soon as the temporary file is seen (the writer registers it for the handler before
/// creating it, so any moment will do). A merge that ended before the signal landed (a
/// loaded machine) proves nothing: it must have succeeded, and it is run again.
#[cfg(unix)]
#[test]
fn interrupted_merge_leaves_no_file() {
    use crate::datagen::{write_lineitem_files, FileLayout};
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let d = tempfile::tempdir().unwrap();
    let inputs = d.path().join("in");
    write_lineitem_files(&inputs, 4, 500_000, 65_536, FileLayout::Sorted, 11).unwrap();
    let out_dir = d.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("merged.parquet");
    for attempt in 0..5 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_corank"))
            .args(["merge", inputs.to_str().unwrap(), "-o", out.to_str().unwrap(), "-q", "--engine", "cpu"])
            .spawn()
            .expect("the corank binary runs");
        // Interrupt once the temporary output exists (the merge is then under way).
        let start = Instant::now();
        let seen = loop {
            if files_in(&out_dir).iter().any(|f| f.starts_with(".corank-") && f.ends_with(".tmp")) {
                break true;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no temporary file after 60 s");
            std::thread::sleep(Duration::from_millis(1));
        };
        if seen {
            // SAFETY: kill(2) with the pid of our own child; no memory is involved.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        let status = child.wait().unwrap();
        let left = files_in(&out_dir);
        if status.signal() == Some(libc::SIGINT) && left.is_empty() {
            return;
        }
        // Not interrupted in time: the merge finished (or the signal came after the
        // rename); either way the whole output is there, and nothing else.
        assert!(status.success() || status.signal() == Some(libc::SIGINT), "attempt {attempt}: {status}");
        assert_eq!(left, ["merged.parquet"], "attempt {attempt}: files left behind");
        let rows =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&out).unwrap()).unwrap().metadata().file_metadata().num_rows();
        assert_eq!(rows, 2_000_000, "attempt {attempt}");
        std::fs::remove_file(&out).unwrap();
    }
    panic!("five merges ended before their signal");
}

#[test]
fn demo_runs_and_verifies() {
    let out = corank(&["demo", "--files", "3", "--rows", "20k"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("merged 60,000 rows (3 files"), "{stdout}");
    assert!(stdout.contains("verified"), "{stdout}");
}

/// The bench's time-partitioned files (zstd level 1) pass through a merge to zstd(3), as
/// the bench runs it: passthrough compares codecs, not levels.
#[test]
fn time_partitioned_files_pass_through_a_zstd3_merge() {
    use crate::datagen::{write_dataset, Dataset};
    let d = tempfile::tempdir().unwrap();
    let inputs = write_dataset(&d.path().join("in"), Dataset::Time, 4, 100_000, 10_000, 5).unwrap();
    let out = d.path().join("out.parquet");
    let mut args = vec!["merge", "--json", "--engine", "cpu", "--compression", "zstd(3)", "-o", out.to_str().unwrap()];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    let o = corank(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    let field = |name: &str| -> u64 {
        let at = stdout.find(&format!("\"{name}\":")).unwrap_or_else(|| panic!("no {name} in {stdout}"));
        let rest = &stdout[at + name.len() + 3..];
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()].parse().unwrap()
    };
    // 10 row groups a file, 3% overlap: the first and last of a file may be merged, the rest pass.
    assert!(field("passthrough_rows") >= 240_000, "{stdout}");
}

/// Few runs of many row groups each: every run decodes several of its row groups at once
/// (`RAYON_NUM_THREADS=8` over 2 or 3 runs: 2 to 4 decoders a run, as `--dry-run` says),
/// and the merged rows are still the oracle's, row for row: row groups of 1 to 9,000 rows
/// whose keys tie across their boundaries (so a row group handed out of order would show),
/// nulls, DESC, a memory limit that keeps batches small, and a large one (batches grow after
/// the first: the decoders reopen their row groups where they stopped).
#[test]
fn runs_of_many_row_groups_decode_in_parallel_in_order() {
    let sizes = [1, 3_000, 700, 9_000, 50, 2, 4_000, 1_200];
    for (seed, files, limit) in [(31, 2, "2GiB"), (32, 3, "2GiB"), (33, 2, "24MiB"), (34, 3, "32MiB")] {
        let mut rng = Rng::new(seed);
        let options = [SortOptions { descending: seed % 2 == 0, nulls_first: seed % 3 == 0 }];
        let keys: Keys = vec![("k0".into(), options[0])];
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        let mut next = 0;
        for f in 0..files {
            // One sorted run, cut into row groups: each file is one run.
            let counts: Vec<usize> = (0..sizes.len()).map(|g| sizes[(g + f) % sizes.len()]).collect();
            let total: usize = counts.iter().sum();
            let run = sorted_run(&mut rng, &[DataType::Int64, DataType::Utf8], &[options[0], options[0]], total, 30, 0.05, next);
            next += total as u64;
            let mut at = 0;
            let groups: Vec<RecordBatch> = counts
                .iter()
                .map(|&n| {
                    at += n;
                    run.slice(at - n, n)
                })
                .collect();
            let path = dir.path().join(format!("in-{f}.parquet"));
            write_file(&path, &groups, Some(&keys));
            paths.push(path);
        }
        let inputs: Vec<RecordBatch> = paths.iter().flat_map(|p| read_file(p).0).collect();
        let all = concat_batches(&inputs[0].schema(), &inputs).unwrap();
        let ids = all.column_by_name("id").unwrap().as_primitive::<UInt64Type>();
        let want: Vec<u64> = oracle(std::slice::from_ref(&all), &keys).into_iter().map(|i| ids.value(i)).collect();
        let output = dir.path().join("out.parquet");
        let mut args: Vec<&str> = vec!["merge"];
        args.extend(paths.iter().map(|p| p.to_str().unwrap()));
        args.extend(["-o", output.to_str().unwrap(), "--engine", "cpu", "--memory-limit", limit, "--passthrough", "never"]);
        let run = |extra: &[&str]| {
            let mut argv = args.clone();
            argv.extend(extra);
            Command::new(env!("CARGO_BIN_EXE_corank"))
                .args(&argv)
                .env("CORANK_REQUIRE_GPU", "0")
                .env("RAYON_NUM_THREADS", "8")
                .output()
                .expect("the corank binary runs")
        };
        let context = format!("seed {seed}, {files} files, limit {limit}");
        let dry = run(&["--dry-run", "--json"]);
        assert!(dry.status.success(), "{context}: {}", text(&dry.stderr));
        let plan: serde_json::Value = serde_json::from_slice(&dry.stdout).unwrap();
        let decoders = plan["memory"]["decoders_per_run"].as_u64().unwrap();
        assert!(decoders > 1, "{context}: {decoders} decoder a run: {plan}");
        let out = run(&[]);
        assert!(out.status.success(), "{context}: {}", text(&out.stderr));
        let (batches, _) = read_file(&output);
        let got: Vec<u64> =
            batches.iter().flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect();
        assert_eq!(got.len(), want.len(), "{context}");
        assert!(got == want, "{context}: order differs from the oracle");
    }
}

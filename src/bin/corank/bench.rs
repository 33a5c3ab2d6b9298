//! `corank bench`: the standard comparison. For each dataset and input size, 16 sorted
//! lineitem-like Parquet files (zstd) are merged by key into one zstd(3) Parquet file. The
//! datasets (`--datasets`): `lineitem`, every file spanning the whole key range, and `time`,
//! time-partitioned files (file `f` covers a contiguous key range, consecutive files
//! overlapping by 3% of it, like daily files sorted by timestamp), where most row groups
//! pass through `corank merge` untouched. The contenders:
//!
//! - `corank merge --engine gpu` (when a GPU is usable) and `--engine cpu`;
//! - stock DataFusion 55.2 (`COPY (SELECT * FROM t ORDER BY k) TO 'out.parquet'`, run the way
//!   `datafusion-cli` runs it: a listing table over the files, default session);
//! - DuckDB (`COPY (SELECT * FROM read_parquet([...]) ORDER BY k) TO ..`) and Polars
//!   (`scan_parquet(..).sort(k, maintain_order=True).sink_parquet(..)`), through `python3`
//!   when their packages import;
//! - the floor: the Parquet work no merge can avoid, decoding and re-encoding the same rows
//!   with no merge (stock DataFusion's `COPY (SELECT * FROM t) TO ..` without ORDER BY,
//!   the same scan on all cores as the DataFusion contender's);
//! - corank's own floor (`floor-corank`): the files concatenated into one sorted input (the
//!   first corank output of the run, kept for it), put through `corank merge --passthrough
//!   never`: corank's reader and writer on the same rows with nothing to merge.
//!
//! With `--sort`, the same files are sorted by a column they are not sorted by
//! (`--sort-key`, `l_partkey`): `corank sort` against the same DataFusion, DuckDB and Polars
//! queries by that column.
//!
//! Every contender is a separate process, timed wall clock, one after another on the same
//! files, its peak RSS read from `wait4` (Unix); every output is checked (row count, key
//! order, and a checksum of the rows' key and `l_orderkey` that must equal the inputs'; the
//! floor's output is not in key order, so not its order). Prints one table and draws a PNG
//! chart of rows/s by contender and input size, one panel per dataset.

use crate::common::group_digits;
use crate::datagen::{write_dataset, Dataset, LINEITEM_KEY};
use crate::parse_count;
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use clap::Args;
use corank::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Total input rows per dataset, comma-separated.
    #[arg(long, default_value = "1M,4M,10M", value_delimiter = ',', value_parser = parse_count)]
    pub sizes: Vec<usize>,
    /// Input files per dataset.
    #[arg(long, default_value_t = 16)]
    pub files: usize,
    /// Datasets, comma-separated: lineitem (every file spans the whole key range) and time
    /// (time-partitioned: each file a contiguous key range, overlapping the next by 3%).
    #[arg(long, default_value = "lineitem,time", value_delimiter = ',', value_enum)]
    pub datasets: Vec<Dataset>,
    /// Where datasets are generated (and reused) and outputs written.
    #[arg(long, default_value = "target/corank-bench")]
    pub dir: PathBuf,
    /// The PNG chart to draw (default docs/cli_bench.png, with --sort docs/cli_sort_bench.png).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// The Python that runs DuckDB and Polars.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Contenders to run (default: all that are available): corank-gpu, corank-cpu,
    /// datafusion, duckdb, polars, floor, floor-corank.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Sort the files by --sort-key (`corank sort`) instead of merging them by their key.
    #[arg(long)]
    pub sort: bool,
    /// The column `--sort` sorts by (one the files are not sorted by).
    #[arg(long, default_value = "l_partkey")]
    pub sort_key: String,
    /// `--memory-limit` of corank (both commands).
    #[arg(long, default_value = "2GiB")]
    pub memory_limit: String,
}

/// Hidden: `corank datafusion-copy OUT KEY FILE...`, the stock DataFusion contender (and,
/// with `--no-order`, the floor).
#[derive(Args, Debug, Clone)]
pub struct DataFusionCopyArgs {
    /// No ORDER BY: decode and re-encode the rows in scan order (the bench's floor).
    #[arg(long)]
    pub no_order: bool,
    pub output: PathBuf,
    pub key: String,
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// The dataset's name (`lineitem`, `time`).
    pub dataset: String,
    pub rows: usize,
    pub contender: String,
    pub seconds: f64,
    /// The process' peak resident set, bytes (None where the platform does not tell).
    pub peak_rss: Option<u64>,
}

/// The floor contender's name.
pub const FLOOR: &str = "floor";
/// corank's own floor: one sorted input through `corank merge --passthrough never`.
pub const FLOOR_CORANK: &str = "floor-corank";

const DUCKDB: &str = r#"
import sys, duckdb
out, key, files = sys.argv[1], sys.argv[2], sys.argv[3:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY {key}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
"#;

const POLARS: &str = r#"
import sys, polars as pl
out, key, files = sys.argv[1], sys.argv[2], sys.argv[3:]
pl.scan_parquet(files).sort(key, maintain_order=True).sink_parquet(out, compression="zstd", compression_level=3)
"#;

fn python_has(python: &str, module: &str) -> Option<String> {
    let out = Command::new(python).args(["-c", &format!("import {module}; print({module}.__version__)")]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The contenders available here, with a version or note.
fn contenders(args: &BenchArgs) -> Vec<(String, String)> {
    let mut all = Vec::new();
    match corank::engine::gpu_availability() {
        Ok(()) => all.push(("corank-gpu".to_string(), corank::engine::gpu_device_name(0).unwrap_or_default())),
        Err(why) => tell!("corank-gpu skipped: {why}"),
    }
    all.push(("corank-cpu".into(), format!("{} threads", rayon::current_num_threads())));
    all.push(("datafusion".into(), "55.2 (COPY .. ORDER BY)".into()));
    for (name, module) in [("duckdb", "duckdb"), ("polars", "polars")] {
        match python_has(&args.python, module) {
            Some(v) => all.push((name.into(), v)),
            None => tell!("{name} skipped: `{} -c 'import {module}'` failed", args.python),
        }
    }
    all.push((FLOOR.into(), "DataFusion 55.2 COPY, no ORDER BY".into()));
    all.push((FLOOR_CORANK.into(), "corank merge, 1 sorted input, no passthrough".into()));
    all.retain(|(name, _)| args.only.is_empty() || args.only.iter().any(|o| o == name));
    all
}

fn command_for(contender: &str, args: &BenchArgs, files: &[PathBuf], output: &Path) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("corank"));
    let (command, key) = if args.sort { ("sort", args.sort_key.as_str()) } else { ("merge", LINEITEM_KEY) };
    let mut cmd;
    match contender {
        "corank-gpu" | "corank-cpu" => {
            cmd = Command::new(exe);
            cmd.args([command, "-q", "--force", "--by", key, "--engine", &contender[7..], "--compression", "zstd(3)"]);
            cmd.args(["--memory-limit", &args.memory_limit, "-o"]);
            cmd.arg(output);
            cmd.args(files);
        }
        "datafusion" => {
            cmd = Command::new(exe);
            cmd.arg("datafusion-copy").arg(output).arg(key).args(files);
        }
        FLOOR => {
            cmd = Command::new(exe);
            cmd.args(["datafusion-copy", "--no-order"]).arg(output).arg(key).args(files);
        }
        FLOOR_CORANK => {
            cmd = Command::new(exe);
            cmd.args(["merge", "-q", "--force", "--by", key, "--engine", "cpu", "--compression", "zstd(3)", "--passthrough", "never"]);
            cmd.args(["--memory-limit", &args.memory_limit, "-o"]);
            cmd.arg(output);
            cmd.args(files);
        }
        other => {
            cmd = Command::new(&args.python);
            cmd.args(["-c", if other == "duckdb" { DUCKDB } else { POLARS }]).arg(output).arg(key).args(files);
        }
    }
    cmd
}

/// Rows of `paths`, whether their `key` column (Int64) is in order, and a checksum of the
/// rows' (`key`, `l_orderkey`) pairs that does not depend on their order. Streams batches.
fn check_output(paths: &[PathBuf], key: &str) -> Result<(usize, bool, u64)> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ProjectionMask;
    let (mut rows, mut last, mut sorted, mut sum) = (0, i64::MIN, true, 0u64);
    for path in paths {
        let err = |e| Error::parquet(path, "checking", e);
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "checking", e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(err)?;
        let (k, o) = (builder.schema().index_of(key)?, builder.schema().index_of(LINEITEM_KEY)?);
        let mask = ProjectionMask::roots(builder.parquet_schema(), [k, o]);
        for batch in builder.with_projection(mask).with_batch_size(1 << 16).build().map_err(err)? {
            let batch = batch?;
            let schema = batch.schema();
            let keys = batch.column(schema.index_of(key)?).as_primitive::<Int64Type>();
            let orderkeys = batch.column(schema.index_of(LINEITEM_KEY)?).as_primitive::<Int64Type>();
            for (&k, &o) in keys.values().iter().zip(orderkeys.values().iter()) {
                sorted &= k >= last;
                last = k;
                rows += 1;
                let mut h = (k as u64).wrapping_mul(0x9e3779b97f4a7c15) ^ (o as u64).rotate_left(29);
                h ^= h >> 31;
                sum = sum.wrapping_add(h.wrapping_mul(0xbf58476d1ce4e5b9));
            }
        }
    }
    Ok((rows, sorted, sum))
}

/// Runs `cmd` to its end: whether it succeeded, and its peak RSS in bytes (`wait4`'s
/// `ru_maxrss` of this child alone; None off Unix).
fn run_measured(mut cmd: Command) -> std::io::Result<(bool, Option<u64>)> {
    let child = cmd.spawn()?;
    #[cfg(unix)]
    {
        let pid = child.id() as libc::pid_t;
        let mut status: libc::c_int = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `pid` is our child, not yet reaped (std's Child reaps only in wait()).
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            if r == pid {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        drop(child);
        let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        // Linux reports kilobytes, macOS bytes.
        let scale = if cfg!(target_os = "macos") { 1 } else { 1024 };
        Ok((ok, Some(usage.ru_maxrss.max(0) as u64 * scale)))
    }
    #[cfg(not(unix))]
    {
        let mut child = child;
        Ok((child.wait()?.success(), None))
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.datasets.is_empty() || args.files == 0 {
        return Err(Error::InvalidArgument("corank bench needs a dataset and at least one file".into()));
    }
    let contenders = contenders(&args);
    if contenders.iter().any(|(name, _)| name == "corank-gpu") {
        warm_gpu_kernel_cache(&args)?;
    }
    let mut results: Vec<Measurement> = Vec::new();
    let mut datasets = args.datasets.clone();
    datasets.dedup();
    for &dataset in &datasets {
        for &rows in &args.sizes {
            results.extend(bench_one(&args, &contenders, dataset, rows)?);
        }
    }
    if args.sort {
        say!("sort by {} (corank sort, --memory-limit {})", args.sort_key, args.memory_limit);
    }
    print_table(&results, &contenders);
    if let Ok(limit) = crate::parse_bytes(&args.memory_limit) {
        let bound = limit as f64 * 1.2;
        let over: Vec<String> = results
            .iter()
            .filter(|m| m.contender.starts_with("corank") && m.peak_rss.is_some_and(|r| r as f64 > bound))
            .map(|m| format!("{} {} {} rows", m.dataset, m.contender, group_digits(m.rows)))
            .collect();
        if results.iter().any(|m| m.contender.starts_with("corank") && m.peak_rss.is_some()) {
            match over.is_empty() {
                true => say!("corank's peak RSS is within --memory-limit {} + 20% in every run", args.memory_limit),
                false => say!("corank's peak RSS is over --memory-limit {} + 20% in: {}", args.memory_limit, over.join(", ")),
            }
        }
    }
    let chart =
        args.chart.clone().unwrap_or_else(|| PathBuf::from(if args.sort { "docs/cli_sort_bench.png" } else { "docs/cli_bench.png" }));
    let title = match args.sort {
        true => format!("Sorting {} Parquet files by {} into one", args.files, args.sort_key),
        false => format!("Merging {} sorted Parquet files into one", args.files),
    };
    crate::chart::draw(&chart, &title, &results)?;
    say!("chart: {}", chart.display());
    Ok(())
}

/// The dataset `dataset` of `rows` rows, generated once (and reused), then every contender on it.
/// Runs corank-gpu's command once, untimed, on a small lineitem dataset, so the kernels it
/// needs are compiled into the disk cache before a timed run: the first GPU run on a
/// machine compiles them (about 2 s, once per machine and corank version), which no later
/// run pays and no other contender has.
fn warm_gpu_kernel_cache(args: &BenchArgs) -> Result<()> {
    let data = args.dir.join(format!("warm-up-{}x256", args.files));
    let done = data.join(".complete");
    if !done.exists() {
        write_dataset(&data, Dataset::Lineitem, args.files, 256, 1 << 17, 7)?;
        std::fs::write(&done, b"").map_err(|e| Error::io(&done, "", e))?;
    }
    let files: Vec<PathBuf> = (0..args.files).map(|f| data.join(format!("part-{f:02}.parquet"))).collect();
    let output = args.dir.join("out-warm-up.parquet");
    let t = Instant::now();
    let ran = run_measured(command_for("corank-gpu", args, &files, &output));
    let _ = std::fs::remove_file(&output);
    match ran {
        Ok((true, _)) => tell!("corank-gpu: kernel cache warmed by a small run ({:.2} s, not counted)", t.elapsed().as_secs_f64()),
        other => tell!("corank-gpu: the warm-up run failed ({other:?}); the first timed run may compile the kernels"),
    }
    Ok(())
}

fn bench_one(args: &BenchArgs, contenders: &[(String, String)], dataset: Dataset, rows: usize) -> Result<Vec<Measurement>> {
    let mut results = Vec::new();
    let data = args.dir.join(format!("{}-{}x{}", dataset.name(), args.files, rows));
    let done = data.join(".complete");
    let per_file = rows / args.files;
    let files: Vec<PathBuf> = (0..args.files).map(|f| data.join(format!("part-{f:02}.parquet"))).collect();
    if !done.exists() {
        let t = Instant::now();
        write_dataset(&data, dataset, args.files, per_file, 1 << 17, 42)?;
        std::fs::write(&done, b"").map_err(|e| Error::io(&done, "", e))?;
        tell!("generated {} in {:.1?}", data.display(), t.elapsed());
    }
    let total = per_file * args.files;
    let bytes: u64 = files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    tell!("dataset {}: {} files, {} rows, {:.1} MiB", dataset.name(), args.files, group_digits(total), bytes as f64 / (1 << 20) as f64);
    let key = if args.sort { args.sort_key.as_str() } else { LINEITEM_KEY };
    let (_, _, input_sum) = check_output(&files, key)?;
    // Each contender, one run, output checked. The first corank output is kept as
    // floor-corank's one sorted input.
    let sorted_input = args.dir.join("sorted-input.parquet");
    let _ = std::fs::remove_file(&sorted_input);
    let mut have_sorted_input = false;
    for (name, _) in contenders {
        let inputs = match name.as_str() {
            FLOOR_CORANK if !have_sorted_input => {
                tell!("{name} skipped: it needs a corank contender's output as its input");
                continue;
            }
            FLOOR_CORANK => vec![sorted_input.clone()],
            _ => files.clone(),
        };
        let output = args.dir.join(format!("out-{name}.parquet"));
        let _ = std::fs::remove_file(&output);
        let t = Instant::now();
        let run = run_measured(command_for(name, args, &inputs, &output));
        let seconds = t.elapsed().as_secs_f64();
        let peak_rss = match run {
            Ok((true, rss)) => rss,
            other => {
                tell!("{name} failed on {} {rows} rows: {other:?}", dataset.name());
                continue;
            }
        };
        let (out_rows, sorted, sum) = check_output(std::slice::from_ref(&output), key)?;
        // The floor writes the rows in scan order: its order is not checked.
        let sorted = sorted || name == FLOOR;
        if out_rows != total || !sorted || sum != input_sum {
            return Err(Error::File {
                path: output,
                detail: format!("{name}: {out_rows} rows of {total}, sorted by {key}: {sorted}, rows as the inputs': {}", sum == input_sum),
            });
        }
        if name.starts_with("corank") && !have_sorted_input {
            std::fs::rename(&output, &sorted_input).map_err(|e| Error::io(&output, "keeping the output", e))?;
            have_sorted_input = true;
        }
        let _ = std::fs::remove_file(&output);
        tell!("{name:>12}: {seconds:.2} s, peak RSS {}", show_rss(peak_rss));
        results.push(Measurement { dataset: dataset.name().into(), rows: total, contender: name.clone(), seconds, peak_rss });
    }
    let _ = std::fs::remove_file(&sorted_input);
    Ok(results)
}

/// A peak RSS in MiB, or `n/a`.
fn show_rss(rss: Option<u64>) -> String {
    rss.map_or_else(|| "n/a".into(), |b| format!("{:.0}", b as f64 / (1 << 20) as f64))
}

/// The table: per dataset and size, every contender. `corank best / this`: the best corank
/// engine's speed over this contender's (its seconds over corank's; above 1, corank is
/// faster). `this / floor`: this contender's seconds over the floor's (1.00 = only the
/// decoding and re-encoding; lower is faster, below 1 where passthrough skips that work).
fn print_table(results: &[Measurement], contenders: &[(String, String)]) {
    say!("| dataset | rows | contender | version | seconds | M rows/s | peak RSS MiB | corank best / this | this / floor |");
    say!("|---|---:|---|---|---:|---:|---:|---:|---:|");
    let mut groups: Vec<(&str, usize)> = results.iter().map(|m| (m.dataset.as_str(), m.rows)).collect();
    groups.dedup();
    for (dataset, rows) in groups {
        let at: Vec<&Measurement> = results.iter().filter(|m| m.dataset == dataset && m.rows == rows).collect();
        let best = at.iter().filter(|m| m.contender.starts_with("corank")).map(|m| m.seconds).fold(f64::INFINITY, f64::min);
        let floor = at.iter().find(|m| m.contender == FLOOR).map(|m| m.seconds);
        for m in at {
            let version = contenders.iter().find(|(n, _)| *n == m.contender).map(|(_, v)| v.as_str()).unwrap_or("");
            let ratio = |x: f64| if x.is_finite() { format!("{x:.2}x") } else { "n/a".into() };
            say!(
                "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} |",
                dataset,
                group_digits(rows),
                m.contender,
                version,
                m.seconds,
                rows as f64 / m.seconds / 1e6,
                show_rss(m.peak_rss),
                ratio(m.seconds / best),
                ratio(floor.map_or(f64::NAN, |f| m.seconds / f)),
            );
        }
    }
    say!(
        "(corank best / this: how many times faster the best corank engine is than this contender; \
         this / floor: this contender's time over the floor's, decoding and re-encoding the rows with no merge; lower is faster)"
    );
}

/// The stock DataFusion contender, as `datafusion-cli` would run the COPY.
pub fn datafusion_copy(args: DataFusionCopyArgs) -> Result<()> {
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    let df_err =
        |e: datafusion::error::DataFusionError| Error::File { path: args.output.clone(), detail: format!("DataFusion's COPY: {e}") };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|source| Error::Io {
        path: None,
        context: "starting the tokio runtime".into(),
        source,
    })?;
    runtime.block_on(async {
        let ctx = SessionContext::new();
        let paths: Vec<String> = args.files.iter().map(|p| p.display().to_string()).collect();
        let df = ctx.read_parquet(paths, ParquetReadOptions::default()).await.map_err(df_err)?;
        ctx.register_table("t", df.into_view()).map_err(df_err)?;
        let order = if args.no_order { String::new() } else { format!(" ORDER BY \"{}\"", args.key) };
        let sql = format!(
            "COPY (SELECT * FROM t{order}) TO '{}' STORED AS PARQUET OPTIONS ('format.compression' 'zstd(3)')",
            args.output.display()
        );
        ctx.sql(&sql).await.map_err(df_err)?.collect().await.map_err(df_err)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datagen::dataset_key_range;

    /// Each file's rows: (count, sorted, min, max) of `l_orderkey`.
    fn keys_of(path: &Path) -> (usize, bool, i64, i64) {
        let (mut n, mut sorted, mut lo, mut hi) = (0, true, i64::MAX, i64::MIN);
        for b in crate::demo::read_column(&[path.to_path_buf()], LINEITEM_KEY).unwrap() {
            for &k in b.column(0).as_primitive::<Int64Type>().values() {
                sorted &= n == 0 || k >= hi;
                n += 1;
                lo = lo.min(k);
                hi = hi.max(k);
            }
        }
        (n, sorted, lo, hi)
    }

    #[test]
    fn time_partitioned_files_are_sorted_and_overlap_by_at_most_5_percent() {
        let dir = tempfile::tempdir().unwrap();
        let paths = write_dataset(dir.path(), Dataset::Time, 5, 40_000, 6_000, 1).unwrap();
        let files: Vec<_> = paths.iter().map(|p| keys_of(p)).collect();
        for (f, &(n, sorted, lo, hi)) in files.iter().enumerate() {
            assert_eq!(n, 40_000, "file {f}");
            assert!(sorted, "file {f} is not sorted");
            let (a, w) = dataset_key_range(Dataset::Time, 5, 40_000, f);
            assert!(lo >= a as i64 && hi < (a + w) as i64, "file {f}: {lo}..={hi} outside {a}..{}", a + w);
        }
        for (f, pair) in files.windows(2).enumerate() {
            let ((_, _, lo0, hi0), (_, _, lo1, hi1)) = (pair[0], pair[1]);
            let overlap = hi0 - lo1;
            assert!(lo1 > lo0 && hi1 > hi0, "files {f} and {} are not in key order", f + 1);
            assert!(overlap > 0, "files {f} and {} do not overlap", f + 1);
            assert!(overlap as f64 <= 0.05 * (hi0 - lo0) as f64, "files {f} and {}: overlap {overlap} of {}", f + 1, hi0 - lo0);
        }
        // The lineitem dataset: every file sorted, spanning the whole key range.
        let dir = tempfile::tempdir().unwrap();
        let paths = write_dataset(dir.path(), Dataset::Lineitem, 3, 30_000, 7_000, 1).unwrap();
        let (_, width) = dataset_key_range(Dataset::Lineitem, 3, 30_000, 0);
        for p in &paths {
            let (n, sorted, lo, hi) = keys_of(p);
            assert!(n == 30_000 && sorted, "{}", p.display());
            assert!(lo < width as i64 / 20 && hi > width as i64 * 19 / 20, "{lo}..={hi} of {width}");
        }
    }

    #[test]
    fn rss_is_measured_per_child() {
        let (ok, rss) = run_measured(Command::new("true")).unwrap();
        assert!(ok);
        #[cfg(unix)]
        assert!(rss.is_some_and(|r| r > 0), "{rss:?}");
        let (ok, _) = run_measured(Command::new("false")).unwrap();
        assert!(!ok);
    }
}

//! `corank bench`: the standard comparison. For each input size, 16 sorted lineitem
//! Parquet files (zstd) are merged by key into one zstd(3) Parquet file by
//!
//! - `corank merge --engine gpu` (when a GPU is usable) and `--engine cpu`;
//! - stock DataFusion 55.2 (`COPY (SELECT * FROM t ORDER BY k) TO 'out.parquet'`, run the way
//!   `datafusion-cli` runs it: a listing table over the files, default session);
//! - DuckDB (`COPY (SELECT * FROM read_parquet([...]) ORDER BY k) TO ..`) and Polars
//!   (`scan_parquet(..).sort(k, maintain_order=True).sink_parquet(..)`), through `python3`
//!   when their packages import.
//!
//! With `--sort`, the same files are sorted by a column they are not sorted by
//! (`--sort-key`, `l_partkey`): `corank sort` against the same DataFusion, DuckDB and Polars
//! queries by that column.
//!
//! Every contender is a separate process, timed wall clock, one after another on the same
//! files; every output is checked (row count, key order, and a checksum of the rows' key
//! and `l_orderkey` that must equal the inputs'). Prints one table and draws a PNG chart of
//! rows/s by engine and input size.

use crate::datagen::{write_lineitem_files, FileLayout, LINEITEM_KEY};
use crate::merge::group_digits;
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
    /// Where datasets are generated (and reused) and outputs written.
    #[arg(long, default_value = "target/corank-bench")]
    pub dir: PathBuf,
    /// The PNG chart to draw (default docs/cli_bench.png, with --sort docs/cli_sort_bench.png).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// The Python that runs DuckDB and Polars.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Contenders to run (default: all that are available).
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

/// Hidden: `corank datafusion-copy OUT KEY FILE...`, the stock DataFusion contender.
#[derive(Args, Debug, Clone)]
pub struct DataFusionCopyArgs {
    pub output: PathBuf,
    pub key: String,
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub rows: usize,
    pub contender: String,
    pub seconds: f64,
}

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
        Err(why) => eprintln!("corank-gpu skipped: {why}"),
    }
    all.push(("corank-cpu".into(), format!("{} threads", rayon::current_num_threads())));
    all.push(("datafusion".into(), "55.2 (COPY .. ORDER BY)".into()));
    for (name, module) in [("duckdb", "duckdb"), ("polars", "polars")] {
        match python_has(&args.python, module) {
            Some(v) => all.push((name.into(), v)),
            None => eprintln!("{name} skipped: `{} -c 'import {module}'` failed", args.python),
        }
    }
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
        other => {
            cmd = Command::new(&args.python);
            cmd.args(["-c", if other == "duckdb" { DUCKDB } else { POLARS }]).arg(output).arg(key).args(files);
        }
    }
    cmd
}

/// Rows of `paths`, whether their `key` column (Int64) is in order, and a checksum of the
/// rows' (`key`, `l_orderkey`) pairs that does not depend on their order.
fn check_output(paths: &[PathBuf], key: &str) -> Result<(usize, bool, u64)> {
    let (mut rows, mut last, mut sorted, mut sum) = (0, i64::MIN, true, 0u64);
    let keys = crate::demo::read_column(paths, key)?;
    let orderkeys = crate::demo::read_column(paths, LINEITEM_KEY)?;
    let orderkeys = orderkeys.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().iter().copied());
    let keys = keys.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().iter().copied().collect::<Vec<_>>());
    for (k, o) in keys.zip(orderkeys) {
        sorted &= k >= last;
        last = k;
        rows += 1;
        let mut h = (k as u64).wrapping_mul(0x9e3779b97f4a7c15) ^ (o as u64).rotate_left(29);
        h ^= h >> 31;
        sum = sum.wrapping_add(h.wrapping_mul(0xbf58476d1ce4e5b9));
    }
    Ok((rows, sorted, sum))
}

pub fn run(args: BenchArgs) -> Result<()> {
    let contenders = contenders(&args);
    let mut results: Vec<Measurement> = Vec::new();
    for &rows in &args.sizes {
        // 1. The dataset, generated once per size.
        let data = args.dir.join(format!("lineitem-{}x{}", args.files, rows));
        let done = data.join(".complete");
        let per_file = rows / args.files.max(1);
        let files: Vec<PathBuf> = (0..args.files).map(|f| data.join(format!("part-{f:02}.parquet"))).collect();
        if !done.exists() {
            let t = Instant::now();
            write_lineitem_files(&data, args.files, per_file, 1 << 17, FileLayout::Sorted, 42)?;
            std::fs::write(&done, b"").map_err(|e| Error::io(&done, "", e))?;
            eprintln!("generated {} in {:.1?}", data.display(), t.elapsed());
        }
        let total = per_file * args.files;
        let bytes: u64 = files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
        eprintln!("dataset: {} files, {} rows, {:.1} MiB", args.files, group_digits(total), bytes as f64 / (1 << 20) as f64);
        let key = if args.sort { args.sort_key.as_str() } else { LINEITEM_KEY };
        let (_, _, input_sum) = check_output(&files, key)?;
        // 2. Each contender, one run, output checked.
        for (name, _) in &contenders {
            let output = args.dir.join(format!("out-{name}.parquet"));
            let _ = std::fs::remove_file(&output);
            let t = Instant::now();
            let status = command_for(name, &args, &files, &output).status();
            let seconds = t.elapsed().as_secs_f64();
            match status {
                Ok(s) if s.success() => {}
                other => {
                    eprintln!("{name} failed on {rows} rows: {other:?}");
                    continue;
                }
            }
            let (out_rows, sorted, sum) = check_output(std::slice::from_ref(&output), key)?;
            if out_rows != total || !sorted || sum != input_sum {
                return Err(Error::File {
                    path: output,
                    detail: format!(
                        "{name}: {out_rows} rows of {total}, sorted by {key}: {sorted}, rows as the inputs': {}",
                        sum == input_sum
                    ),
                });
            }
            let _ = std::fs::remove_file(&output);
            eprintln!("{name:>11}: {seconds:.2} s");
            results.push(Measurement { rows: total, contender: name.clone(), seconds });
        }
    }
    if args.sort {
        println!("sort by {} (corank sort, --memory-limit {})", args.sort_key, args.memory_limit);
    }
    print_table(&results, &contenders);
    let chart =
        args.chart.clone().unwrap_or_else(|| PathBuf::from(if args.sort { "docs/cli_sort_bench.png" } else { "docs/cli_bench.png" }));
    crate::chart::draw(&chart, &results)?;
    println!("chart: {}", chart.display());
    Ok(())
}

fn print_table(results: &[Measurement], contenders: &[(String, String)]) {
    println!("| rows | contender | version | seconds | M rows/s | corank best / this |");
    println!("|---:|---|---|---:|---:|---:|");
    let mut sizes: Vec<usize> = results.iter().map(|m| m.rows).collect();
    sizes.dedup();
    for rows in sizes {
        let at: Vec<&Measurement> = results.iter().filter(|m| m.rows == rows).collect();
        let best = at.iter().filter(|m| m.contender.starts_with("corank")).map(|m| m.seconds).fold(f64::INFINITY, f64::min);
        for m in at {
            let version = contenders.iter().find(|(n, _)| *n == m.contender).map(|(_, v)| v.as_str()).unwrap_or("");
            println!(
                "| {} | {} | {} | {:.2} | {:.2} | {:.2}x |",
                group_digits(rows),
                m.contender,
                version,
                m.seconds,
                rows as f64 / m.seconds / 1e6,
                m.seconds / best
            );
        }
    }
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
        let sql = format!(
            "COPY (SELECT * FROM t ORDER BY \"{}\") TO '{}' STORED AS PARQUET OPTIONS ('format.compression' 'zstd(3)')",
            args.key,
            args.output.display()
        );
        ctx.sql(&sql).await.map_err(df_err)?.collect().await.map_err(df_err)?;
        Ok(())
    })
}

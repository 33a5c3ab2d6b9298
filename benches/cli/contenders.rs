//! The contenders: which of them can run here, and the command line each runs as.

use super::args::BenchArgs;
use super::datagen::LINEITEM_KEY;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The floor contender's name.
pub const FLOOR: &str = "floor";
/// corank's own floor: one sorted input through `corank merge --passthrough never`.
pub const FLOOR_CORANK: &str = "floor-corank";
/// The harness's first argument that makes it the DataFusion child
/// ([`super::datafusion_copy`]) instead of the comparison.
pub const DATAFUSION_COPY: &str = "datafusion-copy";

/// The executables the contenders run.
#[derive(Debug, Clone)]
pub struct Programs {
    /// The `corank` binary (`corank merge`, `corank sort`).
    pub corank: PathBuf,
    /// The harness itself: `HARNESS datafusion-copy ...` runs stock DataFusion in a process
    /// of its own, so that its peak RSS is its own.
    pub harness: PathBuf,
}

impl Programs {
    /// The package's `corank` binary, as cargo built it for this target (or the one
    /// `CORANK_BENCH_CORANK` names: the harness run away from its build, as on the GPU
    /// machine), and this executable.
    pub fn here() -> Self {
        let built = PathBuf::from(env!("CARGO_BIN_EXE_corank"));
        let corank = std::env::var_os("CORANK_BENCH_CORANK").map_or(built, PathBuf::from);
        Programs { harness: std::env::current_exe().unwrap_or_else(|_| corank.clone()), corank }
    }
}

/// DuckDB's COPY .. ORDER BY, run as `python -c DUCKDB OUT KEY FILE...`.
const DUCKDB: &str = r#"
import os, sys, duckdb
out, key, files = sys.argv[1], sys.argv[2], sys.argv[3:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
if "DUCKDB_MEMORY_LIMIT" in os.environ:
    con.execute(f"SET memory_limit = '{os.environ['DUCKDB_MEMORY_LIMIT']}'")
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY {key}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
"#;

/// Polars' stable sort streamed to Parquet, run as `python -c POLARS OUT KEY FILE...`.
const POLARS: &str = r#"
import sys, polars as pl
out, key, files = sys.argv[1], sys.argv[2], sys.argv[3:]
pl.scan_parquet(files).sort(key, maintain_order=True).sink_parquet(out, compression="zstd", compression_level=3)
"#;

/// The version of the Python `module`, where `python` imports it.
fn python_has(python: &str, module: &str) -> Option<String> {
    let out = Command::new(python).args(["-c", &format!("import {module}; print({module}.__version__)")]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A contender's name and its version (or a note on what it runs).
pub type Contender = (String, String);

/// The contenders available here (those `--only` names, if it names any), each with a
/// version or note; every one skipped says why on stderr.
pub fn available(args: &BenchArgs) -> Vec<Contender> {
    let mut all = Vec::new();
    match corank::gpu_availability() {
        Ok(()) => all.push(("corank-gpu".to_string(), corank::gpu_device_name(0).unwrap_or_default())),
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
    all.push((FLOOR.into(), "DataFusion 55.2 COPY, no ORDER BY".into()));
    if args.s3_endpoint.is_some() {
        if all.iter().any(|(n, _)| n == "corank-gpu") {
            all.push(("corank-gpu-s3".into(), "S3 to S3".into()));
        }
        all.push(("corank-cpu-s3".into(), "S3 to S3".into()));
        let python = args.s3_python.as_deref().unwrap_or(&args.python);
        match python_has(python, "duckdb") {
            Some(v) => all.push(("duckdb-s3".into(), format!("{v}, httpfs, S3 to S3"))),
            None => eprintln!("duckdb-s3 skipped: `{python} -c 'import duckdb'` failed"),
        }
        all.push((super::store::STORE_FLOOR.into(), "GET every input once + PUT the output's size".into()));
    }
    all.push((FLOOR_CORANK.into(), "corank merge, 1 sorted input, no passthrough".into()));
    all.retain(|(name, _)| args.only.is_empty() || args.only.iter().any(|o| o == name));
    all
}

/// The command that runs `contender` on `files`, writing `output`.
pub fn command_for(contender: &str, args: &BenchArgs, programs: &Programs, files: &[PathBuf], output: &Path) -> Command {
    let (command, key) = if args.sort { ("sort", args.sort_key.as_str()) } else { ("merge", LINEITEM_KEY) };
    let mut cmd;
    match contender {
        "corank-gpu" | "corank-cpu" | "corank-gpu-s3" | "corank-cpu-s3" => {
            cmd = Command::new(&programs.corank);
            cmd.args([command, "-q", "--force", "--by", key, "--engine", &contender[7..10], "--compression", "zstd(3)"]);
            if let Some(limit) = &args.memory_limit {
                cmd.args(["--memory-limit", limit]);
            }
            cmd.arg("-o");
            cmd.arg(output);
            cmd.args(files);
        }
        "datafusion" => {
            cmd = Command::new(&programs.harness);
            cmd.arg(DATAFUSION_COPY).arg(output).arg(key).args(files);
        }
        FLOOR => {
            cmd = Command::new(&programs.harness);
            cmd.args([DATAFUSION_COPY, "--no-order"]).arg(output).arg(key).args(files);
        }
        FLOOR_CORANK => {
            cmd = Command::new(&programs.corank);
            cmd.args(["merge", "-q", "--force", "--by", key, "--engine", "cpu", "--compression", "zstd(3)", "--passthrough", "never"]);
            if let Some(limit) = &args.memory_limit {
                cmd.args(["--memory-limit", limit]);
            }
            cmd.arg("-o");
            cmd.arg(output);
            cmd.args(files);
        }
        "duckdb-s3" => {
            cmd = Command::new(args.s3_python.as_deref().unwrap_or(&args.python));
            cmd.args(["-c", super::store::DUCKDB_S3, &args.duckdb_httpfs]).arg(output).arg(key).args(files);
        }
        other => {
            cmd = Command::new(&args.python);
            cmd.args(["-c", if other == "duckdb" { DUCKDB } else { POLARS }]).arg(output).arg(key).args(files);
        }
    }
    if contender.starts_with("duckdb") && args.equal_memory {
        if let Some(bytes) = args.memory_limit.as_deref().and_then(|l| super::units::parse_bytes(l).ok()) {
            cmd.env("DUCKDB_MEMORY_LIMIT", format!("{}MiB", bytes >> 20));
        }
    }
    cmd
}

//! Comparing `corank` with other tools: the standard comparison, run with
//!
//! ```text
//! cargo bench --bench cli -- --sizes 20M --datasets lineitem,time [--only corank-cpu,duckdb] [--sort]
//! ```
//!
//! For each dataset and input size, `--files` (16) sorted lineitem-like Parquet files (zstd)
//! are merged by key into one zstd(3) Parquet file. The datasets (`--datasets`): `lineitem`,
//! every file spanning the whole key range, and `time`, time-partitioned files (file `f`
//! covers a contiguous key range, consecutive files overlapping by 3% of it, like daily files
//! sorted by timestamp), where most row groups pass through `corank merge` untouched. The
//! contenders:
//!
//! - `corank merge --engine gpu` (when a GPU is usable) and `--engine cpu`;
//! - stock DataFusion 55.2 (`COPY (SELECT * FROM t ORDER BY k) TO 'out.parquet'`, run the way
//!   `datafusion-cli` runs it: a listing table over the files, default session);
//! - DuckDB (`COPY (SELECT * FROM read_parquet([...]) ORDER BY k) TO ..`) and Polars
//!   (`scan_parquet(..).sort(k, maintain_order=True).sink_parquet(..)`), through `python3`
//!   when their packages import (else they are skipped, saying why);
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
//!
//! The `corank` binary is the package's own (`CARGO_BIN_EXE_corank`, built by `cargo bench`
//! with the bench's profile; `CORANK_BENCH_CORANK` names another, for a harness run away
//! from its build, as on the GPU machine). The DataFusion contenders run in this executable, started
//! again as a child with [`contenders::DATAFUSION_COPY`] as its first argument, so their
//! peak RSS is their own. The harness is not part of the shipped binary: the chart's
//! plotting library and font are dev-dependencies.
//!
//! The modules refer to each other through `super::`, so that `tests/cli/bench.rs` can
//! include them (`#[path]`) and test them under `cargo test` (a `harness = false` bench's own
//! `#[test]`s never run).

mod args;
mod chart;
mod check;
mod contenders;
mod datafusion_copy;
#[path = "../../src/cli/datagen.rs"]
mod datagen;
mod measure;
mod png;
mod session;
mod store;
mod table;
#[path = "../../src/cli/units.rs"]
mod units;

use args::{BenchArgs, DataFusionCopyArgs};
use clap::Parser;
use contenders::{Programs, DATAFUSION_COPY};
use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench` to every bench target; the harness has no use for it.
    let argv: Vec<OsString> = std::env::args_os().filter(|a| a != "--bench").collect();
    let result = if argv.get(1).is_some_and(|a| a == DATAFUSION_COPY) {
        datafusion_copy::run(&DataFusionCopyArgs::parse_from(&argv[1..]))
    } else {
        session::run(&BenchArgs::parse_from(&argv), &Programs::here())
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cargo bench --bench cli: error: {e}");
            ExitCode::FAILURE
        }
    }
}

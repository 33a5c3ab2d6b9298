//! The harness's flags (`cargo bench --bench cli -- --help`) and those of its DataFusion
//! child (`datafusion-copy`).

use super::datagen::Dataset;
use super::units::parse_count;
use clap::Parser;
use std::path::PathBuf;

/// Compare corank with DataFusion, DuckDB, Polars and the floor (decode + re-encode, no
/// merge) on generated lineitem and time-partitioned files: time, peak RSS, a table and a
/// chart.
#[derive(Parser, Debug, Clone)]
#[command(name = "cargo bench --bench cli --")]
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
    /// `--memory-limit` of corank (both commands); none: corank's default (half the memory
    /// available), as DuckDB and Polars run with theirs.
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// Give DuckDB the same memory limit as corank (`SET memory_limit`, from
    /// --memory-limit, which it needs): the comparison at equal memory. Polars has no such
    /// setting and runs as it does.
    #[arg(long, requires = "memory_limit")]
    pub equal_memory: bool,
    /// An S3-compatible endpoint (`http://127.0.0.1:9000`): the datasets are uploaded to
    /// --s3-bucket and merged (or sorted) from objects to an object by `corank-cpu-s3`
    /// (`corank-gpu-s3`) and `duckdb-s3`, beside the store's own GET/PUT time
    /// (`store-floor`) and the local contenders.
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    /// The bucket at --s3-endpoint (it must exist).
    #[arg(long, default_value = "corank-bench")]
    pub s3_bucket: String,
    /// The Python that runs `duckdb-s3` (default: --python).
    #[arg(long)]
    pub s3_python: Option<String>,
    /// DuckDB's httpfs extension file for `duckdb-s3` to load (default: `LOAD httpfs`, which
    /// needs it installed).
    #[arg(long, default_value = "httpfs")]
    pub duckdb_httpfs: String,
}

/// `datafusion-copy [--no-order] OUT KEY FILE...`: the stock DataFusion contender (and, with
/// `--no-order`, the floor), run by the harness in a child process of its own.
#[derive(Parser, Debug, Clone)]
#[command(name = "datafusion-copy")]
pub struct DataFusionCopyArgs {
    /// No ORDER BY: decode and re-encode the rows in scan order (the bench's floor).
    #[arg(long)]
    pub no_order: bool,
    pub output: PathBuf,
    pub key: String,
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

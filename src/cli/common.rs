//! The flags `corank merge` and `corank sort` share ([`CommonArgs`], [`ReportArgs`],
//! flattened into `MergeArgs` and `SortArgs`; [`EngineArgs`], also `corank demo`'s), the
//! checks they make before a row is read, and the engine set-up: the GPU started early, the
//! engine a run would use ([`planned_engine_for`]).

use super::units::{group_digits, parse_bytes, parse_count};
use crate::engine::placement::{self, CpuBecause, PlannedEngine as Planned};
use crate::parquet::inputs::{expand_inputs_excluding, HivePartitioning, HiveTypes, PlanOptions};
use crate::parquet::{
    available_memory, default_memory_limit, parse_order_by, AvailableMemory, MemorySource, MergePlan, SplitFiles, WriterSettings,
    DEFAULT_MEMORY_SHARE,
};
use crate::show_bytes::show_bytes;
use crate::{Engine, Error, Result, SortKey};
use clap::{Arg, ArgAction, Args};
use parquet::basic::Compression;
use std::path::{Path, PathBuf};

/// The output, the key, the engine and how the output is written: the flags `corank merge`
/// and `corank sort` take alike. `--memory-limit`'s help is each command's ([`FlagHelp`]):
/// what the memory holds differs.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// The sorted Parquet file to write (a regular file; not `-`: no output to stdout), or
    /// an object to upload: s3://, gs://, az:// or abfss:// (docs/object-stores.md). With
    /// --max-file-rows or --max-file-bytes, a directory (or a prefix: s3://bucket/path/)
    /// for the files part-00000.parquet, part-00001.parquet, ...
    #[arg(short, long, value_name = "OUTPUT")]
    pub output: PathBuf,
    /// A setting of the object stores, KEY=VALUE (repeatable): endpoint, region,
    /// allow_http, access_key_id, timeout, ... (object_store's keys), or corank's
    /// max_retries, retry_timeout, retry_backoff, retry_max_backoff, part_size,
    /// max_concurrency. Credentials and endpoints otherwise come
    /// from the provider's environment variables (AWS_*, GOOGLE_*, AZURE_*).
    #[arg(long = "storage-option", value_name = "KEY=VALUE")]
    pub storage_options: Vec<String>,
    /// Sort key in SQL ORDER BY syntax, e.g. "k DESC NULLS LAST, j". Default: the inputs'
    /// common sorting_columns metadata.
    #[arg(long, value_name = "ORDER BY")]
    pub by: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Match columns by name across inputs: a column missing from a file reads as nulls,
    /// nullable where any input's is, numeric types widened where every value fits.
    /// Without it the inputs' schemas must be the same.
    #[arg(long)]
    pub union_by_name: bool,
    /// Hive partitions: the `key=value` directories of the input paths (date=2026-12-01/)
    /// as columns after the files' own, usable in --by. auto: where every path has the same
    /// keys (as DuckDB detects them); true: a path without them is an error; false: never.
    #[arg(long, value_name = "auto|true|false", default_value = "auto", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_named::<HivePartitioning>)]
    pub hive_partitioning: HivePartitioning,
    /// The same as --hive-partitioning=false.
    #[arg(long, conflicts_with = "hive_partitioning")]
    pub no_hive_partitioning: bool,
    /// Hive partition keys' types, instead of inferred ones (DuckDB's hive_types):
    /// KEY=TYPE pairs, comma-separated or repeated; TYPE such as BIGINT, INTEGER, DOUBLE,
    /// DATE, TIMESTAMP, VARCHAR, BOOLEAN, DECIMAL(p,s), or an Arrow type (Int32). A value
    /// that does not cast is an error naming its file.
    #[arg(long, value_name = "KEY=TYPE", value_parser = parse_named::<HiveTypes>)]
    pub hive_types: Vec<HiveTypes>,
    /// Replace OUTPUT if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// Output compression: none, snappy, lz4 (LZ4_RAW), zstd or zstd(1..22), gzip or
    /// gzip(0..9), brotli or brotli(0..11).
    #[arg(long, default_value = "zstd(3)")]
    pub compression: String,
    /// Most rows per output row group.
    #[arg(long, default_value = "1M", value_parser = parse_count)]
    pub row_group_size: usize,
    /// Most bytes of Arrow data per output row group (before encoding).
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
    pub max_row_group_bytes: usize,
    /// Split the output into files of at most N rows, cut only between different keys
    /// (a run of equal keys longer than N fills a file of its own): OUTPUT is a directory.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub max_file_rows: Option<usize>,
    /// Split the output into files of about SIZE bytes: a file ends at the first key change
    /// after it reaches SIZE (approximate: a file passes SIZE by about a row group).
    /// OUTPUT is a directory.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_file_bytes: Option<usize>,
    // The approximate cap on the memory the command holds (help: FlagHelp); none given:
    // `default_memory_limit`, half the memory available (`memory_limit()`).
    #[arg(long, value_parser = parse_bytes)]
    pub memory_limit: Option<usize>,
}

/// What `--help` says of `--memory-limit`'s default, after each command's own words.
const MEMORY_LIMIT_DEFAULT_HELP: &str =
    "[default: half the memory available to the process: the physical memory, or its cgroup's limit (a container's, a job's) where lower]";

/// What the command prints: the progress bar and the summary line, the JSON object, the
/// dry run's plan, `-v`'s lines. The help of `-v` and `--dry-run` is each command's
/// ([`FlagHelp`]): what they print differs.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// No progress bar and no summary line (with --json the JSON object is still printed).
    #[arg(short, long)]
    pub quiet: bool,
    // Also print where the time went, and corank's info log lines (help: FlagHelp).
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
    /// Print the summary as one JSON object on stdout, nothing else (errors: an object
    /// with "ok": false, beside the message on stderr).
    #[arg(long)]
    pub json: bool,
    // Read the footers and print the plan without running: nothing is written (help:
    // FlagHelp).
    #[arg(long)]
    pub dry_run: bool,
}

/// The help of the shared flags whose words are each command's, set on the command's flags
/// by `#[command(mut_args(|arg| HELP.set(arg)))]` on `MergeArgs` and `SortArgs`.
pub struct FlagHelp {
    pub memory_limit: &'static str,
    pub verbose: &'static str,
    pub dry_run: &'static str,
}

impl FlagHelp {
    /// `arg` with its help from here where it is one of these flags, else as it is.
    pub fn set(&self, arg: Arg) -> Arg {
        let help = match arg.get_id().as_str() {
            "memory_limit" => return arg.help(format!("{} {MEMORY_LIMIT_DEFAULT_HELP}", self.memory_limit)),
            "verbose" => self.verbose,
            "dry_run" => self.dry_run,
            _ => return arg,
        };
        arg.help(help)
    }
}

/// What the default memory limit is a share of: `half of 23.4 GiB of physical memory`.
pub fn memory_limit_source() -> String {
    let share = if DEFAULT_MEMORY_SHARE == 0.5 { "half".to_string() } else { format!("{:.0}%", DEFAULT_MEMORY_SHARE * 100.0) };
    match available_memory() {
        Some(AvailableMemory { bytes, source: MemorySource::Physical }) => {
            format!("default, {share} of {} of physical memory", show_bytes(bytes))
        }
        Some(AvailableMemory { bytes, source: MemorySource::Cgroup }) => {
            format!("default, {share} of the cgroup's {} limit", show_bytes(bytes))
        }
        None => "default; the memory available is unknown here".to_string(),
    }
}

impl CommonArgs {
    /// `--memory-limit`, or the library's default (half the memory available).
    pub fn memory_limit(&self) -> usize {
        match self.memory_limit {
            Some(limit) => limit,
            None => default_memory_limit(),
        }
    }

    /// Where `--memory-limit`'s value came from, for `--dry-run`: the flag, or the default
    /// and what it is half of.
    pub fn memory_limit_origin(&self) -> String {
        match self.memory_limit {
            Some(_) => "--memory-limit".to_string(),
            None => memory_limit_source(),
        }
    }
    /// The first checks, before any file is looked at: `-o -` refused, `--by` and
    /// `--compression` parsed, `--storage-option`s set.
    pub fn parse_key_and_compression(&self) -> Result<(Option<Vec<SortKey>>, Compression)> {
        if self.output == Path::new("-") {
            return Err(Error::InvalidArgument(
                "-o -: writing the output to stdout is not supported; name a file (./- for a file named '-')".into(),
            ));
        }
        let by = self.by.as_deref().map(parse_order_by).transpose()?;
        let compression = super::compression::parse_output_compression(&self.compression)?;
        let options = (self.storage_options.iter())
            .map(|o| {
                o.split_once('=').filter(|(k, _)| !k.is_empty()).ok_or_else(|| {
                    Error::InvalidArgument(format!("--storage-option {o}: KEY=VALUE expected (e.g. endpoint=http://127.0.0.1:9000)"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        crate::parquet::store::set_storage_options(options)?;
        Ok((by, compression))
    }

    /// OUTPUT may be written: a regular file, or none, or `--force`; a split output's
    /// limits are valid, and its directory holds no parts, or `--force`.
    pub fn check_output(&self) -> Result<()> {
        match self.split() {
            Some(split) => {
                split.check()?;
                crate::parquet::writer::split::check_split_output(&self.output, self.force)
            }
            None => crate::parquet::writer::check_output(&self.output, self.force),
        }
    }

    /// `--max-file-rows` and `--max-file-bytes`, where either is given.
    pub fn split(&self) -> Option<SplitFiles> {
        (self.max_file_rows.is_some() || self.max_file_bytes.is_some())
            .then_some(SplitFiles { max_rows: self.max_file_rows, max_bytes: self.max_file_bytes.map(|b| b as u64) })
    }

    /// `--engine gpu`: the GPU libraries checked (a dry run: the driver too), and outside a
    /// dry run the driver started.
    pub fn start_gpu(&self, dry_run: bool) -> Result<()> {
        if self.engine.engine == Engine::Gpu && !dry_run {
            // Only the libraries are checked here. The driver's start (cuInit, the contexts,
            // the cached kernels) runs on a background thread while the footers and
            // the first windows (or chunk) are read; a device that cannot be used is the
            // first round's (or sort's) error, before a row is written (`--engine gpu` never
            // falls back to the CPU). `--engine auto` starts the GPU in merge_files, once
            // the rows are known to reach --gpu-min-rows.
            crate::engine::gpu_libraries_present().map_err(Error::GpuUnavailable)?;
            crate::engine::warm_up_gpu(&self.engine.options(), 0);
        } else if self.engine.engine == Engine::Gpu {
            crate::engine::gpu_availability().map_err(Error::GpuUnavailable)?;
        }
        Ok(())
    }

    /// A dry run with `--engine gpu`: the devices, once their contexts are up.
    pub fn wait_for_gpu(&self, dry_run: bool) -> Result<()> {
        if self.engine.engine == Engine::Gpu && dry_run {
            crate::engine::gpu_devices_shown(self.engine.devices)?; // waits for the contexts
        }
        Ok(())
    }

    /// The input files the arguments name; the output is never one (compared by device and
    /// inode), with or without --force.
    pub fn input_paths(&self, inputs: &[String]) -> Result<Vec<PathBuf>> {
        let paths = expand_inputs_excluding(inputs, &self.output)?;
        if self.split().is_some() {
            // Not a part of a split OUTPUT either (the library checks too; here a dry run does).
            crate::parquet::writer::split::check_inputs_outside(&self.output, paths.iter().map(PathBuf::as_path))?;
        }
        Ok(paths)
    }

    /// How the inputs are read: `--union-by-name`, `--hive-partitioning`.
    pub fn plan_options(&self) -> PlanOptions {
        let hive_partitioning = if self.no_hive_partitioning { HivePartitioning::Never } else { self.hive_partitioning };
        let mut hive_types = HiveTypes::default();
        self.hive_types.iter().for_each(|t| hive_types.extend(t.clone()));
        PlanOptions { union_by_name: self.union_by_name, hive_partitioning, hive_types }
    }

    /// How the output is written.
    pub fn writer(&self, compression: Compression) -> WriterSettings {
        WriterSettings {
            compression,
            row_group_rows: self.row_group_size,
            row_group_bytes: self.max_row_group_bytes,
            overwrite: self.force,
            sync: true,
            split: self.split(),
        }
    }
}

/// Options shared by the commands that merge.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// Merge engine: auto (GPU for large rounds when one is usable; `merge` then sends each
    /// round to the engine measured faster), gpu or cpu.
    #[arg(long, default_value = "auto", value_parser = parse_named::<crate::Engine>)]
    pub engine: crate::Engine,
    /// GPU kernel: auto (the fastest measured), basic, tiled, circular or kway.
    #[arg(long, default_value = "auto", value_parser = parse_named::<crate::Kernel>)]
    pub kernel: crate::Kernel,
    /// CUDA devices of the GPU engine: an ordinal (0), a list (0,1: each merge round and
    /// each chunk sort is split across them) or all.
    #[arg(long, visible_alias = "device", default_value = "0", value_parser = parse_named::<crate::Devices>)]
    pub devices: crate::Devices,
    /// With --engine auto, rounds of at least this many rows merge on the GPU.
    #[arg(long, default_value_t = crate::GPU_MIN_ROWS, value_parser = parse_count)]
    pub gpu_min_rows: usize,
}

impl EngineArgs {
    /// The library's engine options. `CORANK_REQUIRE_GPU=1` (read here, at the edge) makes a
    /// missing or failing GPU an error instead of a fallback to the CPU.
    pub fn options(&self) -> crate::EngineOptions {
        let strict = std::env::var("CORANK_REQUIRE_GPU").is_ok_and(|v| v == "1");
        crate::EngineOptions {
            engine: self.engine,
            kernel: self.kernel,
            devices: self.devices,
            gpu_min_rows: self.gpu_min_rows,
            on_gpu_failure: if strict { crate::OnGpuFailure::Error } else { crate::OnGpuFailure::UseCpu },
        }
    }
}

/// A flag's value parsed by the library's `FromStr` (its error as clap shows it).
pub fn parse_named<T: std::str::FromStr<Err = crate::Error>>(s: &str) -> std::result::Result<T, String> {
    s.parse().map_err(|e: crate::Error| e.to_string())
}

/// The engine a merge would use, as far as it is known before the first round.
pub struct PlannedEngine {
    /// `cpu`, `gpu`, or `gpu+cpu` (`--engine auto` with a usable GPU: rounds of
    /// `--gpu-min-rows` rows and more on the GPU, smaller ones on the CPU).
    pub engine: &'static str,
    /// The GPUs, "ORDINAL NAME" each, where one would be used.
    pub device: Option<String>,
    /// Why no GPU is usable, where `--engine auto` falls back to the CPU.
    pub gpu_unavailable: Option<String>,
    /// One line for people.
    pub note: String,
}

/// The engine of a command with these engine flags over `plan`'s rows (`corank merge`,
/// `corank sort`).
pub fn planned_engine_for(engine: &EngineArgs, plan: &MergePlan) -> Result<PlannedEngine> {
    let options = engine.options();
    let planned = |engine, device: Option<String>, gpu_unavailable, note: String| PlannedEngine { engine, device, gpu_unavailable, note };
    Ok(match placement::planned_engine(&options, plan.total_rows)? {
        Planned::Cpu(CpuBecause::Chosen) => planned("cpu", None, None, "cpu (--engine cpu)".into()),
        Planned::Gpu { devices, required: false } => {
            planned("gpu", Some(devices.clone()), None, format!("gpu (--engine gpu): device {devices}"))
        }
        Planned::Cpu(CpuBecause::NoUsableGpu(why)) => {
            log::info!("corank: no usable GPU ({why}); the merge would run on the CPU");
            planned("cpu", None, Some(why.clone()), format!("cpu (--engine auto: no usable GPU: {why})"))
        }
        Planned::Gpu { devices, required: true } => {
            planned("gpu", Some(devices.clone()), None, format!("gpu (CORANK_REQUIRE_GPU=1: every round): device {devices}"))
        }
        Planned::Cpu(CpuBecause::BelowGpuMinRows) => planned(
            "cpu",
            None,
            None,
            format!(
                "cpu (--engine auto: {} rows in all, below --gpu-min-rows {})",
                group_digits(plan.total_rows),
                group_digits(options.gpu_min_rows)
            ),
        ),
        Planned::GpuAndCpu { devices } => planned(
            "gpu+cpu",
            Some(devices.clone()),
            None,
            format!(
                "gpu+cpu (--engine auto: rounds of {} rows and more on device {devices}, smaller ones on the CPU; once both are timed, each round on the faster)",
                group_digits(options.gpu_min_rows),
            ),
        ),
    })
}

//! `corank merge`: arguments, progress bar and summary around
//! [`corank::parquet::merge_files`]; `--json` (the summary as one JSON object) and
//! `--dry-run` (the plan, nothing written).

use crate::json::Json;
use crate::show_bytes::show_bytes;
use crate::{parse_bytes, parse_count, parse_named, EngineArgs};
use clap::{ArgAction, Args};
use corank::parquet::inputs::{expand_inputs_excluding, plan_merge_with, show_keys, PlanOptions};
use corank::parquet::merge_files::{dry_run, DryRun};
use corank::parquet::passthrough::{schedule_for, Schedule};
use corank::parquet::{merge_files, parse_order_by, MergeFilesOptions, MergePlan, MergeSummary, Passthrough, WriterSettings};
use corank::{Engine, Error, OnGpuFailure, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// Parquet files, directories (their *.parquet files) or glob patterns, in tie order.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<String>,
    /// The merged Parquet file to write (a regular file; not `-`: no output to stdout).
    #[arg(short, long, value_name = "OUTPUT")]
    pub output: PathBuf,
    /// Sort key in SQL ORDER BY syntax, e.g. "k DESC NULLS LAST, j". Default: the inputs'
    /// common sorting_columns metadata.
    #[arg(long, value_name = "ORDER BY")]
    pub by: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Check every row of every input for order. Always on: inputs whose sorting_columns
    /// declare the key are checked too (the flag is kept for scripts that pass it).
    #[arg(long)]
    pub check_sorted: bool,
    /// Match columns by name across inputs: a column missing from a file reads as nulls,
    /// nullable where any input's is, numeric types widened where every value fits.
    /// Without it the inputs' schemas must be the same.
    #[arg(long)]
    pub union_by_name: bool,
    /// Replace OUTPUT if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// Output compression: none, snappy, lz4 (LZ4_RAW), zstd or zstd(1..22), gzip or
    /// gzip(0..9), brotli or brotli(0..11).
    #[arg(long, default_value = "zstd(3)")]
    pub compression: String,
    /// Row groups that overlap no other input are copied as they are, not decoded: auto
    /// (where their codec is the output's), always (keeping their codec), never.
    #[arg(long, default_value = "auto", value_parser = parse_named::<Passthrough>)]
    pub passthrough: Passthrough,
    /// Most rows per output row group.
    #[arg(long, default_value = "1M", value_parser = parse_count)]
    pub row_group_size: usize,
    /// Most bytes of Arrow data per output row group (before encoding).
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
    pub max_row_group_bytes: usize,
    /// Approximate cap on the memory the merge holds (windows, rounds, row group).
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_limit: usize,
    /// No progress bar and no summary line (with --json the JSON object is still printed).
    #[arg(short, long)]
    pub quiet: bool,
    /// Also print where the time went (reading, merging, writing) and the window size, and
    /// corank's info log lines (-vv debug, -vvv trace; RUST_LOG selects any logs).
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
    /// Print the summary as one JSON object on stdout, nothing else (errors: an object
    /// with "ok": false, beside the message on stderr).
    #[arg(long)]
    pub json: bool,
    /// Read the footers and print the plan (runs, memory, engine) without merging: nothing
    /// is written. With --json, the plan as one JSON object.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs a merge as the arguments say and prints the summary line (or the JSON object, or
/// the dry run's plan). A closed stdout (EPIPE) ends the run quietly; any other stdout
/// error is an error; the output stays either way.
pub fn run(args: MergeArgs) -> Result<()> {
    let prepared = prepare(&args)?;
    if args.dry_run {
        let plan = dry_run(&prepared.plan, &prepared.options)?;
        let engine = planned_engine(&args, &prepared.plan)?;
        let copies = schedule_for(&prepared.plan, &prepared.options)?;
        let text = if args.json {
            dry_run_json(&args, &prepared, &plan, &engine, &copies).to_line()
        } else {
            dry_run_text(&args, &prepared, &plan, &engine, &copies)
        };
        return print_stdout(&text, "the plan (nothing was written)");
    }
    let summary = merge_prepared(&args, &prepared)?;
    let written = format!("the summary ({} was written)", args.output.display());
    if args.json {
        print_stdout(&summary_json(&summary, &args, &prepared).to_line(), &written)?;
    } else if !args.quiet {
        print_stdout(&summary_line(&summary, &args.output), &written)?;
    }
    if args.verbose > 0 {
        eprintln!(
            "reading {:.2?}, merging {:.2?} ({} cpu + {} gpu rounds), writing {:.2?} (its own thread); window up to {} per run; {} output row groups; peak memory {}; {}",
            summary.read_time,
            summary.merge_time,
            summary.rounds_cpu,
            summary.rounds_gpu,
            summary.write_time,
            show_bytes(summary.window_bytes as u64),
            summary.output_row_groups,
            summary.peak_memory.map_or("unknown".into(), show_bytes),
            show_untouched(&summary)
        );
    }
    Ok(())
}

/// Prints `text` and a newline on stdout. A closed stdout (EPIPE) is not an error; another
/// failure is, saying what could not be printed.
pub fn print_stdout(text: &str, what: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(Error::Io { path: None, context: format!("stdout: cannot write {what}"), source }),
    }
}

/// What a merge knows before it reads a row: the plan from the footers and the options.
pub struct Prepared {
    pub plan: MergePlan,
    pub options: MergeFilesOptions,
}

/// The merge without the summary line (the demo and bench print their own).
pub fn execute(args: &MergeArgs) -> Result<MergeSummary> {
    merge_prepared(args, &prepare(args)?)
}

/// Everything up to the first row read: arguments checked, footers read, runs planned.
/// Nothing is written (a dry run stops here).
pub fn prepare(args: &MergeArgs) -> Result<Prepared> {
    // 1. Everything that can be refused before reading a row.
    if args.output == Path::new("-") {
        return Err(Error::InvalidArgument(
            "-o -: writing the output to stdout is not supported; name a file (./- for a file named '-')".into(),
        ));
    }
    let by = args.by.as_deref().map(parse_order_by).transpose()?;
    let compression = parse_output_compression(&args.compression)?;
    corank::parquet::writer::check_output(&args.output, args.force)?;
    if args.engine.engine == Engine::Gpu && !args.dry_run {
        // Only the libraries are checked here. The driver's start (cuInit, the contexts,
        // the cached kernels: ~0.35 s) runs on a background thread while the footers and
        // the first windows are read; a device that cannot be used is the first round's
        // error, before a row is written (`--engine gpu` never falls back to the CPU).
        // `--engine auto` starts the GPU in merge_files, once the rows are known to reach
        // --gpu-min-rows.
        corank::engine::gpu_libraries_present().map_err(Error::GpuUnavailable)?;
        corank::engine::warm_up_gpu(&args.engine.options(), 0);
    } else if args.engine.engine == Engine::Gpu {
        corank::engine::gpu_availability().map_err(Error::GpuUnavailable)?;
    }
    // The output is never an input (compared by device and inode), with or without --force.
    let paths = expand_inputs_excluding(&args.inputs, &args.output)?;
    // 2. Footers: schemas, key, runs.
    let plan = plan_merge_with(&paths, by, &PlanOptions { union_by_name: args.union_by_name })?;
    if args.engine.engine == Engine::Gpu && args.dry_run {
        corank::engine::gpu_devices_shown(args.engine.devices)?; // waits for the contexts
    }
    log::info!(
        "merging {} rows of {} files as {} runs by {} into {}",
        plan.total_rows,
        plan.files.len(),
        plan.runs.len(),
        show_keys(&plan.keys),
        args.output.display()
    );
    let options = MergeFilesOptions {
        engine: args.engine.options(),
        memory_limit: args.memory_limit,
        writer: WriterSettings {
            compression,
            row_group_rows: args.row_group_size,
            row_group_bytes: args.max_row_group_bytes,
            overwrite: args.force,
            sync: true,
        },
        passthrough: args.passthrough,
    };
    Ok(Prepared { plan, options })
}

/// The merge of a prepared plan, with a progress bar on a terminal.
fn merge_prepared(args: &MergeArgs, prepared: &Prepared) -> Result<MergeSummary> {
    let (plan, options) = (&prepared.plan, &prepared.options);
    let bar = progress_bar(plan.total_rows as u64, args.quiet);
    let input_bytes = plan.total_bytes;
    let total_rows = plan.total_rows.max(1) as u64;
    let on_progress = |rows: usize| {
        bar.set_position(rows as u64);
        bar.set_message(format!("{} of {} read", show_bytes(input_bytes * rows as u64 / total_rows), show_bytes(input_bytes)));
    };
    let result = merge_files(plan, &args.output, options, &on_progress);
    bar.finish_and_clear();
    result
}

pub fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
    // Hidden when stderr is not a terminal (indicatif checks) or with --quiet.
    let target = if quiet { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(progress_style());
    bar
}

/// `{spinner} [00:00:02] =====>    1,200,000/4,000,000 rows, 2.39 M rows/s, ETA 1s (...)`.
fn progress_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} rows, {rate}, ETA {eta} ({msg})")
        .expect("a valid template")
        .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&show_rate(state.per_sec()));
        })
        .progress_chars("=> ")
}

/// `2.39 M rows/s`, `512.0 k rows/s`, `12 rows/s`.
pub fn show_rate(rows_per_sec: f64) -> String {
    if !rows_per_sec.is_finite() || rows_per_sec < 0.0 {
        "- rows/s".to_string()
    } else if rows_per_sec >= 1e9 {
        format!("{:.2} G rows/s", rows_per_sec / 1e9)
    } else if rows_per_sec >= 1e6 {
        format!("{:.2} M rows/s", rows_per_sec / 1e6)
    } else if rows_per_sec >= 1e3 {
        format!("{:.1} k rows/s", rows_per_sec / 1e3)
    } else {
        format!("{rows_per_sec:.0} rows/s")
    }
}

/// `merged 10,000,000 rows (16 files, 16 runs) into out.parquet: 1.2 GiB in, 1.1 GiB out, 5.31 M rows/s, engine gpu, 1.88 s`
/// (with `; 3,000,000 rows in 3 row groups copied untouched` where passthrough copied any)
pub fn summary_line(s: &MergeSummary, output: &std::path::Path) -> String {
    let mut line = format!(
        "merged {} rows ({} files, {} runs) into {}: {} in, {} out, {:.2} M rows/s, engine {}, {:.2} s",
        group_digits(s.rows),
        s.input_files,
        s.runs,
        output.display(),
        show_bytes(s.input_bytes),
        show_bytes(s.output_bytes),
        s.rows as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6,
        s.engine(),
        s.elapsed.as_secs_f64()
    );
    if s.passthrough_rows > 0 {
        line += &format!("; {}", show_untouched(s));
    }
    line
}

/// `3,000,000 rows in 3 row groups copied untouched (1 kept its codec)`, or `no row group
/// copied untouched`.
fn show_untouched(s: &MergeSummary) -> String {
    if s.passthrough_row_groups == 0 {
        return "no row group copied untouched".into();
    }
    let kept = match s.passthrough_codec_kept_row_groups {
        0 => String::new(),
        n => format!(" ({n} kept {} codec)", if n == 1 { "its" } else { "their" }),
    };
    let groups = s.passthrough_row_groups;
    format!("{} rows in {groups} row group{} copied untouched{kept}", group_digits(s.passthrough_rows), if groups == 1 { "" } else { "s" })
}

/// The codecs `--compression` names, for its error message.
const CODECS: &str = "none, snappy, lz4, zstd, zstd(1..22), gzip, gzip(0..9), brotli or brotli(0..11)";

/// `--compression`: `none` (or `uncompressed`), `snappy`, `lz4` (Parquet's LZ4_RAW;
/// `lz4_raw` too), `zstd` / `zstd(1..22)`, `gzip` / `gzip(0..9)`, `brotli` / `brotli(0..11)`,
/// in any case. Without a level, the parquet crate's default (zstd 1, gzip 6, brotli 1).
pub fn parse_output_compression(text: &str) -> Result<Compression> {
    let bad = |why: String| Error::InvalidArgument(format!("compression \"{text}\": {why} (use {CODECS})"));
    let lower = text.trim().to_ascii_lowercase();
    let (name, level) = match lower.split_once('(') {
        Some((name, rest)) => {
            let digits = rest.strip_suffix(')').ok_or_else(|| bad("no ')' after the level".into()))?.trim();
            let level: i64 = digits.parse().map_err(|_| bad(format!("'{digits}' is not a level")))?;
            (name.trim(), Some(level))
        }
        None => (lower.as_str(), None),
    };
    let range = |lo: i64, hi: i64| -> Result<Option<u32>> {
        match level {
            None => Ok(None),
            Some(l) if (lo..=hi).contains(&l) => Ok(Some(l as u32)),
            Some(l) => Err(bad(format!("{name} level {l} is not in {lo}..{hi}"))),
        }
    };
    let no_level = |c: Compression| match level {
        None => Ok(c),
        Some(_) => Err(bad(format!("{name} takes no level"))),
    };
    let internal = |e: parquet::errors::ParquetError| bad(e.to_string());
    match name {
        "none" | "uncompressed" => no_level(Compression::UNCOMPRESSED),
        "snappy" => no_level(Compression::SNAPPY),
        "lz4" | "lz4_raw" => no_level(Compression::LZ4_RAW),
        "zstd" => Ok(Compression::ZSTD(match range(1, 22)? {
            Some(l) => ZstdLevel::try_new(l as i32).map_err(internal)?,
            None => ZstdLevel::default(),
        })),
        "gzip" => Ok(Compression::GZIP(match range(0, 9)? {
            Some(l) => GzipLevel::try_new(l).map_err(internal)?,
            None => GzipLevel::default(),
        })),
        "brotli" => Ok(Compression::BROTLI(match range(0, 11)? {
            Some(l) => BrotliLevel::try_new(l).map_err(internal)?,
            None => BrotliLevel::default(),
        })),
        "" => Err(bad("no codec named".into())),
        other => Err(bad(format!("unknown codec '{other}'"))),
    }
}

/// A codec as `--compression` names it: `zstd(3)`, `gzip(6)`, `lz4`, `none`.
pub fn show_compression(c: Compression) -> String {
    match c {
        Compression::UNCOMPRESSED => "none".into(),
        Compression::SNAPPY => "snappy".into(),
        Compression::LZ4_RAW => "lz4".into(),
        Compression::ZSTD(l) => format!("zstd({})", l.compression_level()),
        Compression::GZIP(l) => format!("gzip({})", l.compression_level()),
        Compression::BROTLI(l) => format!("brotli({})", l.compression_level()),
        other => other.to_string().to_ascii_lowercase(),
    }
}

/// The summary as one JSON object (`--json`): what the summary line says, and what `-v`
/// adds, in numbers (bytes, seconds).
pub fn summary_json(s: &MergeSummary, args: &MergeArgs, prepared: &Prepared) -> Json {
    let seconds = s.elapsed.as_secs_f64();
    Json::object()
        .field("ok", true)
        .field("output", args.output.as_path())
        .field("rows", s.rows)
        .field("files", s.input_files)
        .field("runs", s.runs)
        .field("input_bytes", s.input_bytes)
        .field("output_bytes", s.output_bytes)
        .field("output_row_groups", s.output_row_groups)
        .field("rounds", s.rounds_cpu + s.rounds_gpu)
        .field("rounds_cpu", s.rounds_cpu)
        .field("rounds_gpu", s.rounds_gpu)
        .field("engine", s.engine())
        .field("by", show_keys(&prepared.plan.keys))
        .field("compression", show_compression(prepared.options.writer.compression))
        .field("elapsed_s", seconds)
        .field("read_s", s.read_time.as_secs_f64())
        .field("merge_s", s.merge_time.as_secs_f64())
        .field("write_s", s.write_time.as_secs_f64())
        .field("rows_per_s", s.rows as f64 / seconds.max(1e-9))
        .field("window_bytes", s.window_bytes)
        .field("memory_limit", prepared.options.memory_limit)
        .field("peak_memory_bytes", s.peak_memory)
        .field("passthrough", show_passthrough(prepared.options.passthrough))
        .field("passthrough_rows", s.passthrough_rows)
        .field("passthrough_row_groups", s.passthrough_row_groups)
        .field("passthrough_codec_kept_row_groups", s.passthrough_codec_kept_row_groups)
}

fn show_passthrough(p: Passthrough) -> String {
    p.to_string()
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

/// The engine of `corank merge` with these arguments, as the merge chooses it.
fn planned_engine(args: &MergeArgs, plan: &MergePlan) -> Result<PlannedEngine> {
    planned_engine_for(&args.engine, plan)
}

/// The engine of a command with these engine flags over `plan`'s rows (`corank merge`,
/// `corank sort`).
pub fn planned_engine_for(engine: &EngineArgs, plan: &MergePlan) -> Result<PlannedEngine> {
    let options = engine.options();
    let strict = options.on_gpu_failure == OnGpuFailure::Error;
    let planned = |engine, device: Option<String>, gpu_unavailable, note: String| PlannedEngine { engine, device, gpu_unavailable, note };
    Ok(match options.engine {
        Engine::Cpu => planned("cpu", None, None, "cpu (--engine cpu)".into()),
        Engine::Gpu => {
            let name = corank::engine::gpu_devices_shown(options.devices)?;
            planned("gpu", Some(name.clone()), None, format!("gpu (--engine gpu): device {name}"))
        }
        Engine::Auto => match corank::engine::gpu_availability()
            .and_then(|()| corank::engine::gpu_devices_shown(options.devices).map_err(|e| e.to_string()))
        {
            Err(why) if strict => return Err(Error::GpuUnavailable(why)),
            Err(why) => {
                log::info!("corank: no usable GPU ({why}); the merge would run on the CPU");
                planned("cpu", None, Some(why.clone()), format!("cpu (--engine auto: no usable GPU: {why})"))
            }
            Ok(name) if strict => {
                planned("gpu", Some(name.clone()), None, format!("gpu (CORANK_REQUIRE_GPU=1: every round): device {name}"))
            }
            Ok(_) if plan.total_rows < options.gpu_min_rows => planned(
                "cpu",
                None,
                None,
                format!(
                    "cpu (--engine auto: {} rows in all, below --gpu-min-rows {})",
                    group_digits(plan.total_rows),
                    group_digits(options.gpu_min_rows)
                ),
            ),
            Ok(name) => planned(
                "gpu+cpu",
                Some(name.clone()),
                None,
                format!(
                    "gpu+cpu (--engine auto: rounds of {} rows and more on device {name}, smaller ones on the CPU; once both are timed, each round on the faster)",
                    group_digits(options.gpu_min_rows),
                ),
            ),
        },
    })
}

/// `0`, `0-3`: a run's row groups (consecutive).
fn show_row_groups(groups: &[usize]) -> String {
    match (groups.first(), groups.last()) {
        (Some(a), Some(b)) if a != b => format!("{a}-{b}"),
        (Some(a), _) => a.to_string(),
        _ => "none".into(),
    }
}

/// The dry run for people: the runs, the memory plan, the engine, the output settings.
fn dry_run_text(args: &MergeArgs, prepared: &Prepared, dry: &DryRun, engine: &PlannedEngine, copies: &Schedule) -> String {
    let (plan, options) = (&prepared.plan, &prepared.options);
    let mut out = format!(
        "dry run, nothing written: would merge {} rows ({} files, {} runs, {} in) by {} into {}\n",
        group_digits(plan.total_rows),
        plan.files.len(),
        plan.runs.len(),
        show_bytes(plan.total_bytes),
        show_keys(&plan.keys),
        args.output.display()
    );
    for (i, (run, window)) in plan.runs.iter().zip(&dry.window_bytes).enumerate() {
        let groups = run.row_groups.len();
        out += &format!(
            "run {i}: {}, row group{} {}, {} rows, window {}{}\n",
            plan.files[run.file].path.display(),
            if groups == 1 { "" } else { "s" },
            show_row_groups(&run.row_groups),
            group_digits(run.rows()),
            show_bytes(*window as u64),
            if run.declared { ", sorting_columns declare the key" } else { "" }
        );
    }
    // Row groups copied untouched (passthrough), after the runs.
    match (&copies.off, copies.blocks.is_empty()) {
        (Some(why), _) => out += &format!("passthrough {}: no row group copied ({why})\n", options.passthrough),
        (None, true) => out += &format!("passthrough {}: no row group lies apart from the other inputs' rows\n", options.passthrough),
        (None, false) => {
            out += &format!(
                "passthrough {}: {} rows in {} row groups copied untouched\n",
                options.passthrough,
                group_digits(copies.rows()),
                copies.blocks.len()
            );
            for block in &copies.blocks {
                out += &format!(
                    "copy: run {}, {}, row group {}, {} rows{}\n",
                    block.run,
                    plan.files[block.file].path.display(),
                    block.row_group,
                    group_digits(block.rows),
                    if block.codec_kept { ", keeping its codec" } else { "" }
                );
            }
        }
    }
    let windows: usize = dry.window_bytes.iter().sum();
    out += &format!(
        "memory: limit {}; Parquet decoders {} ({} row group{} of a run decoded at once); windows {} in all, up to {} a run; output row groups up to {} rows and {}; round pieces of {}; input files {}\n",
        show_bytes(dry.memory_limit as u64),
        show_bytes(dry.decoder_bytes as u64),
        dry.decoders_per_run,
        if dry.decoders_per_run == 1 { "" } else { "s" },
        show_bytes(windows as u64),
        show_bytes(dry.window_bytes.iter().copied().max().unwrap_or(0) as u64),
        group_digits(options.writer.row_group_rows),
        show_bytes(dry.row_group_bytes as u64),
        show_bytes(dry.piece_bytes as u64),
        if dry.keep_files_open { "kept open" } else { "opened for each batch (more runs than the open-file limit)" }
    );
    out += &format!("engine: {}\n", engine.note);
    out += &format!("output: {}, {}", args.output.display(), show_compression(options.writer.compression));
    out
}

/// The dry run as one JSON object (`--dry-run --json`).
fn dry_run_json(args: &MergeArgs, prepared: &Prepared, dry: &DryRun, engine: &PlannedEngine, copies: &Schedule) -> Json {
    let (plan, options) = (&prepared.plan, &prepared.options);
    let files: Vec<Json> = plan
        .files
        .iter()
        .map(|f| {
            let meta = f.metadata.metadata();
            Json::object()
                .field("path", f.path.as_path())
                .field("bytes", f.size)
                .field("rows", meta.file_metadata().num_rows().max(0) as u64)
                .field("row_groups", meta.num_row_groups())
        })
        .collect();
    let runs: Vec<Json> = plan
        .runs
        .iter()
        .zip(&dry.window_bytes)
        .map(|(run, &window)| {
            Json::object()
                .field("file", run.file)
                .field("path", plan.files[run.file].path.as_path())
                .field("row_groups", run.row_groups.clone())
                .field("rows", run.rows())
                .field("declared", run.declared)
                .field("decoded_bytes", run.decoded_bytes)
                .field("window_bytes", window)
        })
        .collect();
    let memory = Json::object()
        .field("memory_limit", dry.memory_limit)
        .field("decoder_bytes", dry.decoder_bytes)
        .field("decoders_per_run", dry.decoders_per_run)
        .field("window_bytes", dry.window_bytes.iter().sum::<usize>())
        .field("max_window_bytes", dry.window_bytes.iter().copied().max().unwrap_or(0))
        .field("row_group_bytes", dry.row_group_bytes)
        .field("piece_bytes", dry.piece_bytes)
        .field("keep_files_open", dry.keep_files_open);
    Json::object()
        .field("ok", true)
        .field("dry_run", true)
        .field("output", args.output.as_path())
        .field("rows", plan.total_rows)
        .field("input_bytes", plan.total_bytes)
        .field("by", show_keys(&plan.keys))
        .field("files", Json::Array(files))
        .field("runs", Json::Array(runs))
        .field("passthrough", passthrough_json(prepared, copies))
        .field("memory", memory)
        .field("engine", engine.engine)
        .field("gpu_device", engine.device.clone())
        .field("gpu_unavailable", engine.gpu_unavailable.clone())
        .field("compression", show_compression(options.writer.compression))
        .field("row_group_rows", options.writer.row_group_rows)
}

/// The row groups a dry run would copy untouched: the mode, the rows and row groups, each
/// copy, and why none is copied where passthrough is off.
fn passthrough_json(prepared: &Prepared, copies: &Schedule) -> Json {
    let blocks: Vec<Json> = copies
        .blocks
        .iter()
        .map(|b| {
            Json::object()
                .field("run", b.run)
                .field("file", b.file)
                .field("path", prepared.plan.files[b.file].path.as_path())
                .field("row_group", b.row_group)
                .field("rows", b.rows)
                .field("codec_kept", b.codec_kept)
        })
        .collect();
    Json::object()
        .field("mode", show_passthrough(prepared.options.passthrough))
        .field("rows", copies.rows())
        .field("row_groups", copies.blocks.len())
        .field("off", copies.off.clone())
        .field("blocks", Json::Array(blocks))
}

/// `10,000,000`.
pub fn group_digits(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_shown_in_rows_per_second() {
        assert_eq!(show_rate(2_393_309.0), "2.39 M rows/s");
        assert_eq!(show_rate(512_000.0), "512.0 k rows/s");
        assert_eq!(show_rate(12.4), "12 rows/s");
        assert_eq!(show_rate(3.5e9), "3.50 G rows/s");
        assert_eq!(show_rate(f64::INFINITY), "- rows/s");
        // The bar draws it through its "rate" key.
        let term = Recorder::default();
        let bar = ProgressBar::with_draw_target(Some(10_000_000), ProgressDrawTarget::term_like(Box::new(term.clone())));
        bar.set_style(progress_style());
        std::thread::sleep(std::time::Duration::from_millis(50));
        bar.set_position(1_000_000);
        bar.force_draw();
        let drawn = term.0.lock().unwrap().clone();
        assert!(drawn.contains(" rows/s, ETA "), "{drawn}");
        assert!(!drawn.contains("/s/s") && !drawn.contains(".0000"), "{drawn}");
    }

    /// A terminal that keeps what is written to it.
    #[derive(Debug, Clone, Default)]
    struct Recorder(std::sync::Arc<std::sync::Mutex<String>>);

    impl indicatif::TermLike for Recorder {
        fn width(&self) -> u16 {
            160
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

//! `corank merge`: arguments, progress bar and summary around
//! [`crate::parquet::merge_files()`]; `--json` (the summary as one JSON object) and
//! `--dry-run` (the plan, nothing written).

use super::common::{parse_named, planned_engine_for, CommonArgs, FlagHelp, PlannedEngine, ReportArgs};
use super::compression::show_compression;
use super::json::Json;
use super::output::{
    dry_run_json_head, engine_and_output_lines, hive_partitions_json, hive_partitions_line, output_files_json, split_json, split_note,
    with_progress_bar,
};
use super::units::group_digits;
use crate::parquet::inputs::{plan_merge_with, show_keys};
use crate::parquet::merge::passthrough::{schedule_for, Schedule};
use crate::parquet::{dry_run, DryRun};
use crate::parquet::{merge_files, MergeFilesOptions, MergePlan, MergeSummary, Passthrough};
use crate::show_bytes::show_bytes;
use crate::Result;
use clap::Args;

/// `--memory-limit`, `-v` and `--dry-run` (flags of [`CommonArgs`] and [`ReportArgs`]) as a
/// merge's help says them.
const HELP: FlagHelp = FlagHelp {
    memory_limit: "Approximate cap on the memory the merge holds (windows, rounds, row group)",
    verbose: "Also print where the time went (reading, merging, writing) and the window size, and corank's info log lines (-vv debug, -vvv trace; RUST_LOG selects any logs)",
    dry_run: "Read the footers and print the plan (runs, memory, engine) without merging: nothing is written. With --json, the plan as one JSON object",
};

/// `corank merge`'s flags: those it shares with `corank sort` ([`CommonArgs`],
/// [`ReportArgs`]) and its own.
#[derive(Args, Debug, Clone)]
#[command(mut_args(|arg| HELP.set(arg)))]
pub struct MergeArgs {
    /// Parquet files, directories (their *.parquet files, also in key=value
    /// subdirectories) or glob patterns, in tie order; local, or URLs of object stores
    /// (s3://bucket/key, a prefix ending in /, a pattern).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Check every row of every input for order. Always on: inputs whose sorting_columns
    /// declare the key are checked too (the flag is kept for scripts that pass it).
    #[arg(long)]
    pub check_sorted: bool,
    /// Row groups that overlap no other input are copied as they are, not decoded: auto
    /// (where their codec is the output's), always (keeping their codec), never.
    #[arg(long, default_value = "auto", value_parser = parse_named::<Passthrough>)]
    pub passthrough: Passthrough,
    #[command(flatten)]
    pub report: ReportArgs,
}

/// Runs a merge as the arguments say and prints the summary line (or the JSON object, or
/// the dry run's plan). A closed stdout (EPIPE) ends the run quietly; any other stdout
/// error is an error; the output stays either way.
pub fn run(args: MergeArgs) -> Result<()> {
    let prepared = prepare(&args)?;
    if args.report.dry_run {
        let plan = dry_run(&prepared.plan, &prepared.options)?;
        let engine = planned_engine_for(&args.common.engine, &prepared.plan)?;
        let copies = schedule_for(&prepared.plan, &prepared.options)?;
        return args.report.print_plan(
            || dry_run_json(&args, &prepared, &plan, &engine, &copies),
            || dry_run_text(&args, &prepared, &plan, &engine, &copies),
        );
    }
    let summary = merge_prepared(&args, &prepared)?;
    let output = &args.common.output;
    args.report.print_summary(output, || summary_json(&summary, &args, &prepared), || summary_line(&summary, output))?;
    if args.report.verbose > 0 {
        tell!(
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
    let (common, dry_run) = (&args.common, args.report.dry_run);
    // 1. Everything that can be refused before reading a row.
    let (by, compression) = common.parse_key_and_compression()?;
    common.check_output()?;
    common.start_gpu(dry_run)?;
    let paths = common.input_paths(&args.inputs)?;
    // 2. Footers: schemas, key, runs.
    let plan = plan_merge_with(&paths, by, &common.plan_options())?;
    common.wait_for_gpu(dry_run)?;
    log::info!(
        "merging {} rows of {} files as {} runs by {} into {}",
        plan.total_rows,
        plan.files.len(),
        plan.runs.len(),
        show_keys(&plan.keys),
        common.output.display()
    );
    let options = MergeFilesOptions {
        engine: common.engine.options(),
        memory_limit: common.memory_limit(),
        writer: common.writer(compression),
        passthrough: args.passthrough,
        cancel: None,
    };
    Ok(Prepared { plan, options })
}

/// The merge of a prepared plan, with a progress bar on a terminal.
fn merge_prepared(args: &MergeArgs, prepared: &Prepared) -> Result<MergeSummary> {
    let (plan, options) = (&prepared.plan, &prepared.options);
    with_progress_bar(plan.total_rows as u64, args.report.quiet, |bar| {
        let input_bytes = plan.total_bytes;
        let total_rows = plan.total_rows.max(1) as u64;
        let on_progress = |rows: usize| {
            bar.set_position(rows as u64);
            bar.set_message(format!("{} of {} read", show_bytes(input_bytes * rows as u64 / total_rows), show_bytes(input_bytes)));
        };
        merge_files(plan, &args.common.output, options, &on_progress)
    })
}

/// `merged 10,000,000 rows (16 files, 16 runs) into out.parquet: 1.2 GiB in, 1.1 GiB out, 5.31 M rows/s, engine gpu, 1.88 s`
/// (with `; 3,000,000 rows in 3 row groups copied untouched` where passthrough copied any,
/// and `; split into 3 files` for a split output)
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
    line + &split_note(&s.output_files)
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

/// The summary as one JSON object (`--json`): what the summary line says, and what `-v`
/// adds, in numbers (bytes, seconds).
pub fn summary_json(s: &MergeSummary, args: &MergeArgs, prepared: &Prepared) -> Json {
    let seconds = s.elapsed.as_secs_f64();
    Json::object()
        .field("ok", true)
        .field("output", args.common.output.as_path())
        .field("rows", s.rows)
        .field("files", s.input_files)
        .field("runs", s.runs)
        .field("input_bytes", s.input_bytes)
        .field("output_bytes", s.output_bytes)
        .field("output_row_groups", s.output_row_groups)
        .field("output_files", output_files_json(&s.output_files))
        .field("rounds", s.rounds_cpu + s.rounds_gpu)
        .field("rounds_cpu", s.rounds_cpu)
        .field("rounds_gpu", s.rounds_gpu)
        .field("engine", s.engine())
        .field("by", show_keys(&prepared.plan.keys))
        .field("hive_partitions", hive_partitions_json(&prepared.plan))
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
        args.common.output.display()
    );
    out += &hive_partitions_line(plan);
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
        "memory: limit {} ({}); Parquet decoders {} ({} row group{} of a run decoded at once); windows {} in all, up to {} a run; output row groups up to {} rows and {}; round pieces of {}; input files {}\n",
        show_bytes(dry.memory_limit as u64),
        args.common.memory_limit_origin(),
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
    out += &engine_and_output_lines(&engine.note, &args.common.output, options.writer.compression, options.writer.split);
    out
}

/// The dry run as one JSON object (`--dry-run --json`).
fn dry_run_json(args: &MergeArgs, prepared: &Prepared, dry: &DryRun, engine: &PlannedEngine, copies: &Schedule) -> Json {
    let (plan, options) = (&prepared.plan, &prepared.options);
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
        .field("memory_limit_origin", args.common.memory_limit_origin())
        .field("decoder_bytes", dry.decoder_bytes)
        .field("decoders_per_run", dry.decoders_per_run)
        .field("window_bytes", dry.window_bytes.iter().sum::<usize>())
        .field("max_window_bytes", dry.window_bytes.iter().copied().max().unwrap_or(0))
        .field("row_group_bytes", dry.row_group_bytes)
        .field("piece_bytes", dry.piece_bytes)
        .field("keep_files_open", dry.keep_files_open);
    dry_run_json_head(&args.common.output, plan)
        .field("runs", Json::Array(runs))
        .field("passthrough", passthrough_json(prepared, copies))
        .field("memory", memory)
        .field("engine", engine.engine)
        .field("gpu_device", engine.device.clone())
        .field("gpu_unavailable", engine.gpu_unavailable.clone())
        .field("compression", show_compression(options.writer.compression))
        .field("row_group_rows", options.writer.row_group_rows)
        .field("split", split_json(options.writer.split))
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

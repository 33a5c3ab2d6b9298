//! `corank sort`: arguments, progress bar and summary around
//! [`crate::parquet::sort_files()`]: Parquet files in any order sorted into one sorted file
//! (an external merge sort: sorted runs spilled to a temporary directory, then merged).
//! Flags, errors and exit codes as `corank merge`'s.

use super::common::{planned_engine_for, CommonArgs, FlagHelp, ReportArgs};
use super::compression::{parse_output_compression, show_compression};
use super::json::Json;
use super::output::{
    dry_run_json_head, engine_and_output_lines, hive_partitions_json, hive_partitions_line, output_files_json, split_json, split_note,
    with_progress_bar,
};
use super::units::group_digits;
use crate::parquet::inputs::show_keys;
use crate::parquet::{plan_sort, sort_files, SortFilesOptions, SortPhase, SortPlan, SortStrategy, SortSummary};
use crate::show_bytes::show_bytes;
use crate::{Error, Result, Setting};
use clap::Args;
use std::path::{Path, PathBuf};

/// `--memory-limit`, `-v` and `--dry-run` (flags of [`CommonArgs`] and [`ReportArgs`]) as a
/// sort's help says them.
const HELP: FlagHelp = FlagHelp {
    memory_limit: "Approximate cap on the memory the sort holds (the chunk being sorted, then the merge's windows); more data than fits is sorted in runs spilled to --temp-dir",
    verbose: "Also print where the time went (reading, sorting, spilling, merging) and the runs, and corank's info log lines (-vv debug, -vvv trace; RUST_LOG selects any logs)",
    dry_run: "Read the footers and print the plan (rows, chunks, memory, engine) without sorting: nothing is written. With --json, the plan as one JSON object",
};

/// `corank sort`'s flags: those it shares with `corank merge` ([`CommonArgs`],
/// [`ReportArgs`]) and its own.
#[derive(Args, Debug, Clone)]
#[command(mut_args(|arg| HELP.set(arg)))]
pub struct SortArgs {
    /// Parquet files, directories (their *.parquet files, also in key=value
    /// subdirectories) or glob patterns, local or URLs of object stores (s3://bucket/key,
    /// a prefix ending in /, a pattern), in tie order:
    /// rows with equal keys keep this order (the sort is stable).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Compression of the sorted runs spilled to the temporary directory (read once).
    #[arg(long, default_value = "lz4")]
    pub spill_compression: String,
    /// Where the temporary directory of sorted runs goes (removed at the end, on failure
    /// and on Ctrl-C). Default: OUTPUT's directory (the system's temporary directory where
    /// OUTPUT is an object-store URL).
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
    /// How to sort: `columns` builds the output one column at a time (every value decoded
    /// and encoded once; needs the key columns and one other column of all rows within
    /// --memory-limit), `runs` sorts chunks of whole rows into runs spilled to --temp-dir and
    /// merges them (any size), `auto` takes columns where they fit.
    #[arg(long, default_value = "auto", value_parser = parse_strategy)]
    pub strategy: SortStrategy,
    #[command(flatten)]
    pub report: ReportArgs,
}

fn parse_strategy(s: &str) -> std::result::Result<SortStrategy, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// What a sort knows before it reads a row.
pub struct Prepared {
    pub plan: SortPlan,
    pub options: SortFilesOptions,
}

/// Runs a sort as the arguments say and prints the summary line (or the JSON object, or
/// the dry run's plan).
pub fn run(args: SortArgs) -> Result<()> {
    let prepared = prepare(&args)?;
    if args.report.dry_run {
        let engine = planned_engine_for(&args.common.engine, &prepared.plan.inputs)?;
        return args.report.print_plan(|| dry_run_json(&args, &prepared, &engine.note), || dry_run_text(&args, &prepared, &engine.note));
    }
    let summary = sort_prepared(&args, &prepared)?;
    let output = &args.common.output;
    args.report.print_summary(output, || summary_json(&summary, &args, &prepared), || summary_line(&summary, output))?;
    if args.report.verbose > 0 {
        let peak = summary.peak_memory.map_or("unknown".into(), show_bytes);
        if summary.strategy == "columns" {
            tell!(
                "strategy columns; reading {:.2?} (the keys, then each column), sorting the keys {:.2?} on the {}, writing the columns {:.2?} ({} output row groups, {} of encoded pages spilled); peak memory {}",
                summary.read_time,
                summary.sort_time,
                summary.engine(),
                summary.merge_time,
                summary.output_row_groups,
                show_bytes(summary.spill_bytes),
                peak,
            );
        } else {
            tell!(
                "strategy runs; reading {:.2?}, sorting {:.2?} ({} cpu + {} gpu chunk sorts), writing sorted chunks {:.2?}, merging {:.2?} ({} spill runs, {} intermediate passes, {} runs in the final merge; {} cpu + {} gpu rounds); chunks up to {}; {} output row groups; peak memory {}",
                summary.read_time,
                summary.sort_time,
                summary.sorts_cpu,
                summary.sorts_gpu,
                summary.spill_time,
                summary.merge_time,
                summary.spill_runs,
                summary.intermediate_passes,
                summary.final_runs,
                summary.rounds_cpu,
                summary.rounds_gpu,
                show_bytes(summary.chunk_bytes as u64),
                summary.output_row_groups,
                peak,
            );
        }
    }
    Ok(())
}

/// Everything up to the first row read, with `corank merge`'s checks and errors.
pub fn prepare(args: &SortArgs) -> Result<Prepared> {
    let (common, dry_run) = (&args.common, args.report.dry_run);
    let (by, compression) = common.parse_key_and_compression()?;
    let spill_compression = parse_output_compression(&args.spill_compression).map_err(|e| match e {
        Error::InvalidSetting { setting: Setting::Compression, detail } => {
            Error::InvalidSetting { setting: Setting::SpillCompression, detail }
        }
        other => other,
    })?;
    common.check_output()?;
    if let Some(dir) = &args.temp_dir {
        if !dir.is_dir() {
            return Err(Error::File { path: dir.clone(), detail: "--temp-dir is not a directory".into() });
        }
        // One that cannot be written fails here, before a footer is read (a dry run writes
        // nothing, not even this).
        if !dry_run {
            crate::parquet::sort::check_temp_dir(dir)?;
        }
    }
    common.start_gpu(dry_run)?;
    let paths = common.input_paths(&args.inputs)?;
    let options = SortFilesOptions {
        engine: common.engine.options(),
        memory_limit: common.memory_limit(),
        writer: common.writer(compression),
        temp_dir: args.temp_dir.clone(),
        spill_compression,
        strategy: args.strategy,
        cancel: None,
    };
    let plan = plan_sort(&paths, by, &common.plan_options(), &common.output, &options)?;
    common.wait_for_gpu(dry_run)?;
    match (&plan.columns, &plan.runs_because) {
        (Some(c), _) => log::info!(
            "sorting one column at a time: {} row groups of {} rows, {} decoded at once, {}, {} of encoded pages in memory",
            c.row_groups,
            c.row_group_rows,
            columns_at_once(c),
            fixed_width_path(c),
            show_bytes(c.page_budget as u64)
        ),
        (None, Some(why)) => log::info!("sorting in runs: {why}"),
        (None, None) => {}
    }
    log::info!(
        "sorting {} rows of {} files by {} into {} (chunks up to {}, about {} runs)",
        plan.inputs.total_rows,
        plan.inputs.files.len(),
        show_keys(&plan.inputs.keys),
        args.common.output.display(),
        show_bytes(plan.chunk_bytes as u64),
        plan.estimated_runs
    );
    Ok(Prepared { plan, options })
}

/// The sort of a prepared plan, with a progress bar on a terminal: the rows sorted into
/// runs, then the rows merged.
fn sort_prepared(args: &SortArgs, prepared: &Prepared) -> Result<SortSummary> {
    let (plan, options) = (&prepared.plan, &prepared.options);
    let total = plan.inputs.total_rows as u64;
    with_progress_bar(2 * total, args.report.quiet, |bar| {
        let by_columns = plan.columns.is_some();
        let on_progress = |phase: SortPhase, rows: usize| match phase {
            SortPhase::Runs => {
                bar.set_position(rows as u64);
                bar.set_message(if by_columns { "sorting the keys" } else { "sorting into runs" });
            }
            SortPhase::Merge => {
                bar.set_position(total + rows as u64);
                bar.set_message(if by_columns { "writing the columns" } else { "merging the runs" });
            }
        };
        sort_files(plan, &args.common.output, options, &on_progress)
    })
}

/// `sorted 10,000,000 rows (4 files) into out.parquet: 1.2 GiB in, 1.1 GiB out, 6 runs spilled (1.4 GiB), 5.31 M rows/s, engine cpu, 1.88 s`
pub fn summary_line(s: &SortSummary, output: &Path) -> String {
    let spilled = if s.strategy == "columns" {
        match s.spill_bytes {
            0 => "one column at a time, nothing spilled".to_string(),
            b => format!("one column at a time, {} of encoded pages spilled", show_bytes(b)),
        }
    } else if s.spill_runs == 0 {
        "in memory, nothing spilled".to_string()
    } else {
        format!("{} runs spilled ({})", s.spill_runs, show_bytes(s.spill_bytes))
    };
    format!(
        "sorted {} rows ({} files) into {}: {} in, {} out, {spilled}, {:.2} M rows/s, engine {}, {:.2} s{}",
        group_digits(s.rows),
        s.input_files,
        output.display(),
        show_bytes(s.input_bytes),
        show_bytes(s.output_bytes),
        s.rows as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6,
        s.engine(),
        s.elapsed.as_secs_f64(),
        split_note(&s.output_files)
    )
}

/// The summary as one JSON object (`--json`).
pub fn summary_json(s: &SortSummary, args: &SortArgs, prepared: &Prepared) -> Json {
    let seconds = s.elapsed.as_secs_f64();
    Json::object()
        .field("ok", true)
        .field("output", args.common.output.as_path())
        .field("strategy", s.strategy)
        .field("rows", s.rows)
        .field("files", s.input_files)
        .field("input_bytes", s.input_bytes)
        .field("output_bytes", s.output_bytes)
        .field("output_row_groups", s.output_row_groups)
        .field("output_files", output_files_json(&s.output_files))
        .field("spill_runs", s.spill_runs)
        .field("spill_bytes", s.spill_bytes)
        .field("intermediate_passes", s.intermediate_passes)
        .field("final_runs", s.final_runs)
        .field("sorts_cpu", s.sorts_cpu)
        .field("sorts_gpu", s.sorts_gpu)
        .field("rounds_cpu", s.rounds_cpu)
        .field("rounds_gpu", s.rounds_gpu)
        .field("engine", s.engine())
        .field("by", show_keys(&prepared.plan.inputs.keys))
        .field("hive_partitions", hive_partitions_json(&prepared.plan.inputs))
        .field("compression", show_compression(prepared.options.writer.compression))
        .field("spill_compression", show_compression(prepared.options.spill_compression))
        .field("elapsed_s", seconds)
        .field("read_s", s.read_time.as_secs_f64())
        .field("sort_s", s.sort_time.as_secs_f64())
        .field("spill_s", s.spill_time.as_secs_f64())
        .field("merge_s", s.merge_time.as_secs_f64())
        .field("rows_per_s", s.rows as f64 / seconds.max(1e-9))
        .field("chunk_bytes", s.chunk_bytes)
        .field("memory_limit", prepared.options.memory_limit)
        .field("peak_memory_bytes", s.peak_memory)
}

fn dry_run_text(args: &SortArgs, prepared: &Prepared, engine: &str) -> String {
    let plan = &prepared.plan;
    let inputs = &plan.inputs;
    let mut out = format!(
        "dry run, nothing written: would sort {} rows ({} files, {} in) by {} into {}\n",
        group_digits(inputs.total_rows),
        inputs.files.len(),
        show_bytes(inputs.total_bytes),
        show_keys(&inputs.keys),
        args.common.output.display()
    );
    out += &hive_partitions_line(inputs);
    for f in &inputs.files {
        let meta = f.metadata.metadata();
        out += &format!(
            "input: {}, {} rows, {} row groups, {}\n",
            f.path.display(),
            group_digits(meta.file_metadata().num_rows().max(0) as usize),
            meta.num_row_groups(),
            show_bytes(f.size)
        );
    }
    out += &format!(
        "memory: limit {} ({}); Parquet decoders {}; chunks up to {} (about {} sorted run{}{}); batches of {} rows, {} input row groups decoded at once; row groups up to {}\n",
        show_bytes(prepared.options.memory_limit as u64),
        args.common.memory_limit_origin(),
        show_bytes(plan.decoder_bytes as u64),
        show_bytes(plan.chunk_bytes as u64),
        plan.estimated_runs,
        if plan.estimated_runs == 1 { "" } else { "s" },
        if plan.estimated_runs == 1 && prepared.options.writer.split.is_none() {
            ", nothing spilled".to_string()
        } else {
            format!(", spilled in {} under {}", show_compression(prepared.options.spill_compression), plan.temp_dir.display())
        },
        group_digits(plan.read_rows),
        plan.read_threads,
        show_bytes(plan.row_group_bytes as u64),
    );
    out += &match (&plan.columns, &plan.runs_because) {
        (Some(c), _) => format!(
            "strategy: columns (one column at a time): {} row groups of {} rows, {} decoded at once, {}, key sort about {}, columns about {}, up to {} of encoded pages in memory\n",
            c.row_groups,
            group_digits(c.row_group_rows),
            columns_at_once(c),
            fixed_width_path(c),
            show_bytes(c.key_phase_bytes as u64),
            show_bytes(c.column_phase_bytes as u64),
            show_bytes(c.page_budget as u64)
        ),
        (None, why) => format!("strategy: runs ({})\n", why.as_deref().unwrap_or("chosen")),
    };
    out += &engine_and_output_lines(engine, &args.common.output, prepared.options.writer.compression, prepared.options.writer.split);
    out
}

fn dry_run_json(args: &SortArgs, prepared: &Prepared, engine: &str) -> Json {
    let plan = &prepared.plan;
    let inputs = &plan.inputs;
    dry_run_json_head(&args.common.output, inputs)
        .field("memory_limit", prepared.options.memory_limit)
        .field("memory_limit_origin", args.common.memory_limit_origin())
        .field("decoder_bytes", plan.decoder_bytes)
        .field("chunk_bytes", plan.chunk_bytes)
        .field("estimated_runs", plan.estimated_runs)
        .field("strategy", if plan.columns.is_some() { "columns" } else { "runs" })
        .field("temp_dir", plan.temp_dir.as_path())
        .field("engine", engine)
        .field("compression", show_compression(prepared.options.writer.compression))
        .field("spill_compression", show_compression(prepared.options.spill_compression))
        .field("split", split_json(prepared.options.writer.split))
}

/// How a sort by columns puts its fixed-width columns without nulls in order, in words
/// ([`ColumnsPlan::ordered`](crate::parquet::ColumnsPlan::ordered)).
fn fixed_width_path(plan: &crate::parquet::sort::columns::ColumnsPlan) -> &'static str {
    if plan.ordered {
        "fixed-width columns placed in order chunk by chunk"
    } else {
        "every column gathered row by row"
    }
}

/// How many columns a sort by columns decodes at once, in words.
fn columns_at_once(plan: &crate::parquet::sort::columns::ColumnsPlan) -> &'static str {
    if plan.depth == 1 {
        "one column"
    } else {
        "two columns"
    }
}

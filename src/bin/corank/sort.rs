//! `corank sort`: arguments, progress bar and summary around
//! [`corank::parquet::sort_files`]: Parquet files in any order sorted into one sorted file
//! (an external merge sort: sorted runs spilled to a temporary directory, then merged).
//! Flags, errors and exit codes as `corank merge`'s.

use crate::json::Json;
use crate::merge::{group_digits, parse_output_compression, planned_engine_for, print_stdout, progress_bar, show_compression};
use crate::show_bytes::show_bytes;
use crate::{parse_bytes, parse_count, EngineArgs};
use clap::{ArgAction, Args};
use corank::parquet::inputs::{expand_inputs_excluding, show_keys, PlanOptions};
use corank::parquet::{
    parse_order_by, plan_sort, sort_files, SortFilesOptions, SortPhase, SortPlan, SortStrategy, SortSummary, WriterSettings,
};
use corank::{Engine, Error, Result};
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct SortArgs {
    /// Parquet files, directories (their *.parquet files) or glob patterns, in tie order:
    /// rows with equal keys keep this order (the sort is stable).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<String>,
    /// The sorted Parquet file to write (a regular file; not `-`: no output to stdout).
    #[arg(short, long, value_name = "OUTPUT")]
    pub output: PathBuf,
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
    /// Replace OUTPUT if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// Output compression: none, snappy, lz4 (LZ4_RAW), zstd or zstd(1..22), gzip or
    /// gzip(0..9), brotli or brotli(0..11).
    #[arg(long, default_value = "zstd(3)")]
    pub compression: String,
    /// Compression of the sorted runs spilled to the temporary directory (read once).
    #[arg(long, default_value = "lz4")]
    pub spill_compression: String,
    /// Where the temporary directory of sorted runs goes (removed at the end, on failure
    /// and on Ctrl-C). Default: OUTPUT's directory.
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
    /// Most rows per output row group.
    #[arg(long, default_value = "1M", value_parser = parse_count)]
    pub row_group_size: usize,
    /// Most bytes of Arrow data per output row group (before encoding).
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
    pub max_row_group_bytes: usize,
    /// Approximate cap on the memory the sort holds (the chunk being sorted, then the
    /// merge's windows); more data than fits is sorted in runs spilled to --temp-dir.
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_limit: usize,
    /// How to sort: `columns` builds the output one column at a time (every value decoded
    /// and encoded once; needs the key columns and one other column of all rows within
    /// --memory-limit), `runs` sorts chunks of whole rows into runs spilled to --temp-dir and
    /// merges them (any size), `auto` takes columns where they fit.
    #[arg(long, default_value = "auto", value_parser = parse_strategy)]
    pub strategy: SortStrategy,
    /// No progress bar and no summary line (with --json the JSON object is still printed).
    #[arg(short, long)]
    pub quiet: bool,
    /// Also print where the time went (reading, sorting, spilling, merging) and the runs,
    /// and corank's info log lines (-vv debug, -vvv trace; RUST_LOG selects any logs).
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,
    /// Print the summary as one JSON object on stdout, nothing else (errors: an object
    /// with "ok": false, beside the message on stderr).
    #[arg(long)]
    pub json: bool,
    /// Read the footers and print the plan (rows, chunks, memory, engine) without sorting:
    /// nothing is written. With --json, the plan as one JSON object.
    #[arg(long)]
    pub dry_run: bool,
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
    if args.dry_run {
        let engine = planned_engine_for(&args.engine, &prepared.plan.inputs)?;
        let text =
            if args.json { dry_run_json(&args, &prepared, &engine.note).to_line() } else { dry_run_text(&args, &prepared, &engine.note) };
        return print_stdout(&text, "the plan (nothing was written)");
    }
    let summary = sort_prepared(&args, &prepared)?;
    let written = format!("the summary ({} was written)", args.output.display());
    if args.json {
        print_stdout(&summary_json(&summary, &args, &prepared).to_line(), &written)?;
    } else if !args.quiet {
        print_stdout(&summary_line(&summary, &args.output), &written)?;
    }
    if args.verbose > 0 {
        let peak = summary.peak_memory.map_or("unknown".into(), show_bytes);
        if summary.strategy == "columns" {
            eprintln!(
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
            eprintln!(
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
    if args.output == Path::new("-") {
        return Err(Error::InvalidArgument(
            "-o -: writing the output to stdout is not supported; name a file (./- for a file named '-')".into(),
        ));
    }
    let by = args.by.as_deref().map(parse_order_by).transpose()?;
    let compression = parse_output_compression(&args.compression)?;
    let spill_compression = parse_output_compression(&args.spill_compression).map_err(|e| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("--spill-compression: {}", m.replace("compression \"", "codec \""))),
        other => other,
    })?;
    corank::parquet::writer::check_output(&args.output, args.force)?;
    if let Some(dir) = &args.temp_dir {
        if !dir.is_dir() {
            return Err(Error::File { path: dir.clone(), detail: "--temp-dir is not a directory".into() });
        }
    }
    if args.engine.engine == Engine::Gpu && !args.dry_run {
        // As `corank merge`: the libraries here, the driver's start on a background thread
        // while the first chunk is read; an unusable device is the first sort's error.
        corank::engine::gpu_libraries_present().map_err(Error::GpuUnavailable)?;
        corank::engine::warm_up_gpu(&args.engine.options(), 0);
    } else if args.engine.engine == Engine::Gpu {
        corank::engine::gpu_availability().map_err(Error::GpuUnavailable)?;
    }
    let paths = expand_inputs_excluding(&args.inputs, &args.output)?;
    let options = SortFilesOptions {
        engine: args.engine.options(),
        memory_limit: args.memory_limit,
        writer: WriterSettings {
            compression,
            row_group_rows: args.row_group_size,
            row_group_bytes: args.max_row_group_bytes,
            overwrite: args.force,
            sync: true,
        },
        temp_dir: args.temp_dir.clone(),
        spill_compression,
        strategy: args.strategy,
    };
    let plan = plan_sort(&paths, by, &PlanOptions { union_by_name: args.union_by_name }, &args.output, &options)?;
    if args.engine.engine == Engine::Gpu && args.dry_run {
        corank::engine::gpu_devices_shown(args.engine.devices)?; // waits for the contexts
    }
    match (&plan.columns, &plan.runs_because) {
        (Some(c), _) => log::info!(
            "sorting one column at a time: {} row groups of {} rows, {} decoded at once, {} of encoded pages in memory",
            c.row_groups,
            c.row_group_rows,
            columns_at_once(c),
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
        args.output.display(),
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
    let bar = progress_bar(2 * total, args.quiet);
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
    let result = sort_files(plan, &args.output, options, &on_progress);
    bar.finish_and_clear();
    result
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
        "sorted {} rows ({} files) into {}: {} in, {} out, {spilled}, {:.2} M rows/s, engine {}, {:.2} s",
        group_digits(s.rows),
        s.input_files,
        output.display(),
        show_bytes(s.input_bytes),
        show_bytes(s.output_bytes),
        s.rows as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6,
        s.engine(),
        s.elapsed.as_secs_f64()
    )
}

/// The summary as one JSON object (`--json`).
pub fn summary_json(s: &SortSummary, args: &SortArgs, prepared: &Prepared) -> Json {
    let seconds = s.elapsed.as_secs_f64();
    Json::object()
        .field("ok", true)
        .field("output", args.output.as_path())
        .field("strategy", s.strategy)
        .field("rows", s.rows)
        .field("files", s.input_files)
        .field("input_bytes", s.input_bytes)
        .field("output_bytes", s.output_bytes)
        .field("output_row_groups", s.output_row_groups)
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
        args.output.display()
    );
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
        "memory: limit {}; Parquet decoders {}; chunks up to {} (about {} sorted run{}{}); batches of {} rows, {} input row groups decoded at once; row groups up to {}\n",
        show_bytes(prepared.options.memory_limit as u64),
        show_bytes(plan.decoder_bytes as u64),
        show_bytes(plan.chunk_bytes as u64),
        plan.estimated_runs,
        if plan.estimated_runs == 1 { "" } else { "s" },
        if plan.estimated_runs == 1 {
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
            "strategy: columns (one column at a time): {} row groups of {} rows, {} decoded at once, key sort about {}, columns about {}, up to {} of encoded pages in memory\n",
            c.row_groups,
            group_digits(c.row_group_rows),
            columns_at_once(c),
            show_bytes(c.key_phase_bytes as u64),
            show_bytes(c.column_phase_bytes as u64),
            show_bytes(c.page_budget as u64)
        ),
        (None, why) => format!("strategy: runs ({})\n", why.as_deref().unwrap_or("chosen")),
    };
    out += &format!("engine: {engine}\n");
    out += &format!("output: {}, {}", args.output.display(), show_compression(prepared.options.writer.compression));
    out
}

fn dry_run_json(args: &SortArgs, prepared: &Prepared, engine: &str) -> Json {
    let plan = &prepared.plan;
    let inputs = &plan.inputs;
    let files: Vec<Json> = inputs
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
    Json::object()
        .field("ok", true)
        .field("dry_run", true)
        .field("output", args.output.as_path())
        .field("rows", inputs.total_rows)
        .field("input_bytes", inputs.total_bytes)
        .field("by", show_keys(&inputs.keys))
        .field("files", Json::Array(files))
        .field("memory_limit", prepared.options.memory_limit)
        .field("decoder_bytes", plan.decoder_bytes)
        .field("chunk_bytes", plan.chunk_bytes)
        .field("estimated_runs", plan.estimated_runs)
        .field("strategy", if plan.columns.is_some() { "columns" } else { "runs" })
        .field("temp_dir", plan.temp_dir.as_path())
        .field("engine", engine)
        .field("compression", show_compression(prepared.options.writer.compression))
        .field("spill_compression", show_compression(prepared.options.spill_compression))
}

/// How many columns a sort by columns decodes at once, in words.
fn columns_at_once(plan: &corank::parquet::sort_by_columns::ColumnsPlan) -> &'static str {
    if plan.depth == 1 {
        "one column"
    } else {
        "two columns"
    }
}

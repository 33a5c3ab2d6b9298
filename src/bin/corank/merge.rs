//! `corank merge`: arguments, progress bar and summary around
//! [`corank::parquet::merge_files`].

use crate::show_bytes::show_bytes;
use crate::{parse_bytes, parse_count, EngineArgs};
use clap::Args;
use corank::parquet::inputs::{expand_inputs_excluding, plan_merge_with, show_keys, PlanOptions};
use corank::parquet::{merge_files, parse_compression, parse_order_by, MergeFilesOptions, MergeSummary, WriterSettings};
use corank::{Engine, Error, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
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
    /// Output compression: none, snappy, zstd or zstd(LEVEL).
    #[arg(long, default_value = "zstd(3)")]
    pub compression: String,
    /// Most rows per output row group.
    #[arg(long, default_value = "1M", value_parser = parse_count)]
    pub row_group_size: usize,
    /// Most bytes of Arrow data per output row group (before encoding).
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
    pub max_row_group_bytes: usize,
    /// Approximate cap on the memory the merge holds (windows, rounds, row group).
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_limit: usize,
    /// No progress bar and no summary line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Also print where the time went (reading, merging, writing) and the window size.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Runs a merge as the arguments say and prints the summary line. A closed stdout (EPIPE)
/// ends the run quietly; any other stdout error is an error; the output stays either way.
pub fn run(args: MergeArgs) -> Result<()> {
    let summary = execute(&args)?;
    if !args.quiet {
        let mut stdout = std::io::stdout().lock();
        match writeln!(stdout, "{}", summary_line(&summary, &args.output)).and_then(|()| stdout.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(source) => {
                let context = format!("stdout: cannot write the summary ({} was written)", args.output.display());
                return Err(Error::Io { path: None, context, source });
            }
        }
    }
    if args.verbose {
        eprintln!(
            "reading {:.2?}, merging {:.2?} ({} cpu + {} gpu rounds), writing {:.2?} (its own thread); window up to {} per run; {} output row groups; peak memory {}",
            summary.read_time,
            summary.merge_time,
            summary.rounds_cpu,
            summary.rounds_gpu,
            summary.write_time,
            show_bytes(summary.window_bytes as u64),
            summary.output_row_groups,
            summary.peak_memory.map_or("unknown".into(), show_bytes)
        );
    }
    Ok(())
}

/// The merge without the summary line (the demo and bench print their own).
pub fn execute(args: &MergeArgs) -> Result<MergeSummary> {
    // 1. Everything that can be refused before reading a row.
    if args.output == Path::new("-") {
        return Err(Error::InvalidArgument(
            "-o -: writing the output to stdout is not supported; name a file (./- for a file named '-')".into(),
        ));
    }
    let by = args.by.as_deref().map(parse_order_by).transpose()?;
    let compression = parse_compression(&args.compression)?;
    corank::parquet::writer::check_output(&args.output, args.force)?;
    if args.engine.engine == Engine::Gpu {
        corank::engine::gpu_availability().map_err(Error::GpuUnavailable)?;
        corank::engine::gpu_device_name(args.engine.device)?;
    }
    // The output is never an input (compared by device and inode), with or without --force.
    let paths = expand_inputs_excluding(&args.inputs, &args.output)?;
    // 2. Footers: schemas, key, runs.
    let plan = plan_merge_with(&paths, by, &PlanOptions { union_by_name: args.union_by_name })?;
    log::info!("merging {} files as {} runs by {}", plan.files.len(), plan.runs.len(), show_keys(&plan.keys));
    // 3. The merge, with a progress bar on a terminal.
    let options = MergeFilesOptions {
        engine: args.engine.options(),
        memory_limit: args.memory_limit,
        writer: WriterSettings {
            compression,
            row_group_rows: args.row_group_size,
            row_group_bytes: args.max_row_group_bytes,
            overwrite: args.force,
        },
    };
    let bar = progress_bar(plan.total_rows as u64, args.quiet);
    let input_bytes = plan.total_bytes;
    let total_rows = plan.total_rows.max(1) as u64;
    let on_progress = |rows: usize| {
        bar.set_position(rows as u64);
        bar.set_message(format!("{} of {} read", show_bytes(input_bytes * rows as u64 / total_rows), show_bytes(input_bytes)));
    };
    let result = merge_files(&plan, &args.output, &options, &on_progress);
    bar.finish_and_clear();
    result
}

fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
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
pub fn summary_line(s: &MergeSummary, output: &std::path::Path) -> String {
    format!(
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
    )
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

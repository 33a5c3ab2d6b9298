//! What `corank merge` and `corank sort` share: the flags both take ([`CommonArgs`],
//! [`ReportArgs`], flattened into `MergeArgs` and `SortArgs`), the checks before a row is
//! read, stdout, the progress bar, and how counts, codecs and the planned engine are shown.

use crate::json::Json;
use crate::{parse_bytes, parse_count, EngineArgs};
use clap::{Arg, ArgAction, Args};
use corank::parquet::inputs::{expand_inputs_excluding, show_keys};
use corank::parquet::{parse_order_by, MergePlan, WriterSettings};
use corank::{Engine, Error, OnGpuFailure, Result, SortKey};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The output, the key, the engine and how the output is written: the flags `corank merge`
/// and `corank sort` take alike. `--memory-limit`'s help is each command's ([`FlagHelp`]):
/// what the memory holds differs.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
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
    /// Most rows per output row group.
    #[arg(long, default_value = "1M", value_parser = parse_count)]
    pub row_group_size: usize,
    /// Most bytes of Arrow data per output row group (before encoding).
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
    pub max_row_group_bytes: usize,
    // The approximate cap on the memory the command holds (help: FlagHelp).
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub memory_limit: usize,
}

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
            "memory_limit" => self.memory_limit,
            "verbose" => self.verbose,
            "dry_run" => self.dry_run,
            _ => return arg,
        };
        arg.help(help)
    }
}

impl CommonArgs {
    /// The first checks, before any file is looked at: `-o -` refused, `--by` and
    /// `--compression` parsed.
    pub fn parse_key_and_compression(&self) -> Result<(Option<Vec<SortKey>>, Compression)> {
        if self.output == Path::new("-") {
            return Err(Error::InvalidArgument(
                "-o -: writing the output to stdout is not supported; name a file (./- for a file named '-')".into(),
            ));
        }
        let by = self.by.as_deref().map(parse_order_by).transpose()?;
        let compression = parse_output_compression(&self.compression)?;
        Ok((by, compression))
    }

    /// OUTPUT may be written: a regular file, or none, or `--force`.
    pub fn check_output(&self) -> Result<()> {
        corank::parquet::writer::check_output(&self.output, self.force)
    }

    /// `--engine gpu`: the GPU libraries checked (a dry run: the driver too), and outside a
    /// dry run the driver started.
    pub fn start_gpu(&self, dry_run: bool) -> Result<()> {
        if self.engine.engine == Engine::Gpu && !dry_run {
            // Only the libraries are checked here. The driver's start (cuInit, the contexts,
            // the cached kernels: ~0.35 s) runs on a background thread while the footers and
            // the first windows (or chunk) are read; a device that cannot be used is the
            // first round's (or sort's) error, before a row is written (`--engine gpu` never
            // falls back to the CPU). `--engine auto` starts the GPU in merge_files, once
            // the rows are known to reach --gpu-min-rows.
            corank::engine::gpu_libraries_present().map_err(Error::GpuUnavailable)?;
            corank::engine::warm_up_gpu(&self.engine.options(), 0);
        } else if self.engine.engine == Engine::Gpu {
            corank::engine::gpu_availability().map_err(Error::GpuUnavailable)?;
        }
        Ok(())
    }

    /// A dry run with `--engine gpu`: the devices, once their contexts are up.
    pub fn wait_for_gpu(&self, dry_run: bool) -> Result<()> {
        if self.engine.engine == Engine::Gpu && dry_run {
            corank::engine::gpu_devices_shown(self.engine.devices)?; // waits for the contexts
        }
        Ok(())
    }

    /// The input files the arguments name; the output is never one (compared by device and
    /// inode), with or without --force.
    pub fn input_paths(&self, inputs: &[String]) -> Result<Vec<PathBuf>> {
        expand_inputs_excluding(inputs, &self.output)
    }

    /// How the output is written.
    pub fn writer(&self, compression: Compression) -> WriterSettings {
        WriterSettings {
            compression,
            row_group_rows: self.row_group_size,
            row_group_bytes: self.max_row_group_bytes,
            overwrite: self.force,
            sync: true,
        }
    }
}

impl ReportArgs {
    /// The dry run's plan on stdout: the JSON object with --json, else the text.
    pub fn print_plan(&self, json: impl FnOnce() -> Json, text: impl FnOnce() -> String) -> Result<()> {
        let text = if self.json { json().to_line() } else { text() };
        print_stdout(&text, "the plan (nothing was written)")
    }

    /// The summary on stdout once `output` is written: the JSON object with --json, else
    /// the line unless --quiet.
    pub fn print_summary(&self, output: &Path, json: impl FnOnce() -> Json, line: impl FnOnce() -> String) -> Result<()> {
        let written = format!("the summary ({} was written)", output.display());
        if self.json {
            print_stdout(&json().to_line(), &written)?;
        } else if !self.quiet {
            print_stdout(&line(), &written)?;
        }
        Ok(())
    }
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

/// Runs `work` with a progress bar of `total` rows (hidden with `quiet`), cleared after.
pub fn with_progress_bar<T>(total: u64, quiet: bool, work: impl FnOnce(&ProgressBar) -> T) -> T {
    let bar = progress_bar(total, quiet);
    let result = work(&bar);
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

/// The head of a dry run's JSON object: `ok`, `dry_run`, the output, the rows, bytes, key
/// and files of the inputs (path, bytes, rows and row groups each).
pub fn dry_run_json_head(output: &Path, plan: &MergePlan) -> Json {
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
    Json::object()
        .field("ok", true)
        .field("dry_run", true)
        .field("output", output)
        .field("rows", plan.total_rows)
        .field("input_bytes", plan.total_bytes)
        .field("by", show_keys(&plan.keys))
        .field("files", Json::Array(files))
}

/// The last lines of a dry run's text: `engine: ...` and `output: PATH, CODEC`.
pub fn engine_and_output_lines(engine: &str, output: &Path, compression: Compression) -> String {
    format!("engine: {engine}\noutput: {}, {}", output.display(), show_compression(compression))
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

//! What `corank merge` and `corank sort` print: stdout that reports its own failure, the
//! progress bar, the summary or plan (text or `--json`), and the dry run's shared parts.

use super::common::ReportArgs;
use super::compression::show_compression;
use super::json::Json;
use super::units::group_digits;
use crate::parquet::inputs::show_keys;
use crate::parquet::{MergePlan, OutputFile, SplitFiles};
use crate::show_bytes::show_bytes;
use crate::{Error, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use parquet::basic::Compression;
use std::io::Write;
use std::path::Path;

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
        .field("hive_partitions", hive_partitions_json(plan))
        .field("files", Json::Array(files))
}

/// The Hive partition columns' names (`["date", "k"]`; empty where none), for `--json`.
pub fn hive_partitions_json(plan: &MergePlan) -> Json {
    Json::Array(plan.hive_partitions.iter().map(|c| Json::from(c.as_str())).collect())
}

/// The dry run's line of the Hive partition columns (`hive partitions: date, k`), where
/// the paths gave any.
pub fn hive_partitions_line(plan: &MergePlan) -> String {
    if plan.hive_partitions.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = (plan.hive_partitions.iter())
        .map(|c| plan.schema.field_with_name(c).map_or_else(|_| c.clone(), |f| format!("{c} ({})", f.data_type())))
        .collect();
    format!("hive partitions: {}\n", shown.join(", "))
}

/// The last lines of a dry run's text: `engine: ...` and `output: PATH, CODEC` (a split
/// output: `output: DIR/part-NNNNN.parquet, split into files of at most N rows, CODEC`).
pub fn engine_and_output_lines(engine: &str, output: &Path, compression: Compression, split: Option<SplitFiles>) -> String {
    let output = match split {
        None => output.display().to_string(),
        Some(split) => {
            format!("{}/part-NNNNN.parquet, split into files of {}", output.display().to_string().trim_end_matches('/'), show_split(split))
        }
    };
    format!("engine: {engine}\noutput: {output}, {}", show_compression(compression))
}

/// `at most 1,000,000 rows`, `about 128.0 MiB`, or both joined by `or`.
pub fn show_split(split: SplitFiles) -> String {
    let rows = split.max_rows.map(|n| format!("at most {} rows", group_digits(n)));
    let bytes = split.max_bytes.map(|b| format!("about {}", show_bytes(b)));
    match (rows, bytes) {
        (Some(r), Some(b)) => format!("{r} or {b}"),
        (r, b) => r.or(b).unwrap_or_default(),
    }
}

/// `--dry-run --json`'s `split`: the limits, `null` for an output of one file.
pub fn split_json(split: Option<SplitFiles>) -> Json {
    split.map_or(Json::Null, |s| Json::object().field("max_file_rows", s.max_rows).field("max_file_bytes", s.max_bytes))
}

/// `; split into 3 files` for a split output's summary line, else nothing.
pub fn split_note(files: &[OutputFile]) -> String {
    match files.len() {
        0 => String::new(),
        n => format!("; split into {n} file{}", if n == 1 { "" } else { "s" }),
    }
}

/// `--json`'s `output_files`: a split output's files in key order, each with its path,
/// rows, row groups, bytes and first and last key (a value per key column, as text); an
/// empty array for an output of one file.
pub fn output_files_json(files: &[OutputFile]) -> Json {
    Json::Array(
        files
            .iter()
            .map(|f| {
                Json::object()
                    .field("path", f.path.as_path())
                    .field("rows", f.rows)
                    .field("row_groups", f.row_groups)
                    .field("bytes", f.bytes)
                    .field("first_key", f.first_key.clone())
                    .field("last_key", f.last_key.clone())
            })
            .collect(),
    )
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

//! The `corank` command line (feature `cli`): merge sorted Parquet files into one sorted
//! Parquet file, or sort files in any order. The `corank` binary is [`main`]; a host that
//! embeds the command (the Python package's `corank` script) calls [`main_with_args`].
//!
//! ```text
//! corank merge INPUT... -o OUTPUT [--by "k DESC NULLS LAST, j"] [--engine auto|gpu|cpu] [--json] [--dry-run]
//! corank sort INPUT... -o OUTPUT --by "k DESC NULLS LAST, j" [--memory-limit 2GiB] [--temp-dir DIR] [--json] [--dry-run]
//! corank demo       # generate sorted files, merge, verify (no GPU needed)
//! ```
//!
//! Comparing corank with DataFusion, DuckDB and Polars is not a command of this binary: it is
//! the bench target `benches/cli` (`cargo bench --bench cli -- --sizes 20M`, docs/cli.md).
//!
//! Exit codes: 0 success, 1 failure (I/O, bad Parquet, schemas that differ, GPU, stdout,
//! internal errors), 2 usage (bad arguments, unknown sort column or one of a type corank
//! cannot sort by, output exists without `--force` or is not a regular file), 3 an input is
//! not sorted. With `--json` an error is also one JSON object on stdout:
//! `{"ok":false,"error":"...","exit_code":2}`. Logs (`RUST_LOG`, `-v`) go to stderr.

// Every line the program prints goes through `say!` (stdout) and `tell!` (stderr), which
// never panic: `println!` and `eprintln!` panic when the write fails (a full disk, a closed
// stream), turning a run's outcome into exit code 101. The lints keep them out.
#![deny(clippy::print_stdout, clippy::print_stderr)]

/// A line on stdout, a failure to write it ignored (where a failing stdout is the run's
/// error, `output::print_stdout` reports it instead).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// A line on stderr, a failure to write it ignored: there is nowhere left to say it, and
/// the exit code still tells the run's outcome.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod common;
mod compression;
mod datagen;
mod demo;
mod json;
mod logging;
mod merge;
mod output;
mod sort;
mod units;

use crate::{Error, Setting};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "corank", version, about = "Stable k-way merge of sorted Parquet files (GPU co-rank kernels, or CPU threads)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Merge sorted Parquet files (or files whose row groups are each sorted) into one sorted file.
    Merge(merge::MergeArgs),
    /// Sort Parquet files in any order into one sorted file (stable; an external merge sort
    /// in bounded memory, sorted runs spilled to a temporary directory).
    Sort(sort::SortArgs),
    /// Generate sorted Parquet files in a temporary directory, merge them and verify the result.
    Demo(demo::DemoArgs),
}

/// The exit code for an error: 2 usage, 3 unsorted input, 1 anything else (I/O, Parquet,
/// files that are not what they must be, GPU failures, internal errors).
fn exit_code(e: &Error) -> u8 {
    match e {
        Error::InvalidArgument(_)
        | Error::InvalidSetting { .. }
        | Error::SettingNeeded { .. }
        | Error::OutputExists { .. }
        | Error::MissingColumn { .. }
        | Error::UnsupportedType { .. } => 2,
        Error::NotSorted { .. } | Error::FileNotSorted { .. } => 3,
        _ => 1,
    }
}

/// The flag that sets a library option ([`Setting`]; the library names it by its field).
fn flag(setting: Setting) -> &'static str {
    match setting {
        Setting::Overwrite => "--force",
        Setting::MemoryLimit => "--memory-limit",
        Setting::RowGroupRows => "--row-group-size",
        Setting::RowGroupBytes => "--max-row-group-bytes",
        Setting::UnionByName => "--union-by-name",
        Setting::SortKey => "--by",
        Setting::Compression => "--compression",
        Setting::SpillCompression => "--spill-compression",
    }
}

/// An error's message as the user should read it: an error about a setting names its flag,
/// and the message is one line (any newline of a nested error folded).
fn error_message(e: &Error) -> String {
    let message = match e {
        Error::InvalidSetting { setting, detail } => format!("invalid argument: {} {detail}", flag(*setting)),
        Error::SettingNeeded { setting: Setting::SortKey, detail } => format!("invalid argument: {detail}; give the sort key with --by"),
        Error::SettingNeeded { setting, detail } => format!("invalid argument: {detail}; set {}", flag(*setting)),
        Error::OutputExists { path } => {
            format!("invalid argument: output {} exists; use {} to replace it", path.display(), flag(Setting::Overwrite))
        }
        Error::SchemaDiffers { path, detail } => {
            format!("{}: {detail} ({})", path.display(), crate::error::schema_hint(flag(Setting::UnionByName)))
        }
        other => other.to_string(),
    };
    message.replace('\n', " ")
}

/// Clap's message up to its first blank line (or `Usage:`) as one line, without `error: `:
/// `the following required arguments were not provided: --output <OUTPUT>`.
fn one_line_usage_error(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty() && !l.starts_with("Usage:")).collect();
    let joined = lines.join(" ");
    let joined = joined.trim_start_matches("error: ");
    if joined.is_empty() {
        "bad arguments".to_string()
    } else {
        joined.to_string()
    }
}

/// With `--json`, an error as one JSON object on stdout too (the message stays on stderr).
fn print_json_error(message: &str, code: u8) {
    use std::io::Write;
    let line = json::Json::object().field("ok", false).field("error", message).field("exit_code", code).to_line();
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

/// The most malloc arenas for a run held to `memory_limit` bytes: one for every 64 MiB of
/// the limit, at least 2 and at most 8.
///
/// glibc gives each thread that allocates an arena of its own (up to 8 per core) and keeps
/// what a thread frees in that arena for the threads using it. A merge or a sort allocates
/// on every pool thread, reader and encoder; on many cores the memory freed but kept, spread
/// over dozens of arenas, outgrew the 20% that the memory bound allows beside the counted
/// memory (docs/memory.md). Fewer arenas share what is freed; more than needed costs the
/// threads lock waits, which matter only where the limit is large enough to keep them busy.
fn malloc_arenas(memory_limit: usize) -> usize {
    (memory_limit >> 26).clamp(2, 8)
}

/// Caps glibc's malloc arenas for `memory_limit` ([`malloc_arenas`]) unless the user set
/// `MALLOC_ARENA_MAX`. Called before the program starts a thread.
fn cap_malloc_arenas(memory_limit: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let arenas = malloc_arenas(memory_limit) as libc::c_int;
        // SAFETY: mallopt sets a tunable of the allocator; it takes no pointer, and no other
        // thread exists yet to allocate concurrently.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = malloc_arenas(memory_limit);
}

/// Runs the command line on the process's arguments and returns its exit code (see the
/// module doc).
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     corank::cli::main()
/// }
/// ```
pub fn main() -> ExitCode {
    main_with_args(std::env::args_os())
}

/// Runs the command line on `args` (the program name first, as `std::env::args_os` gives
/// it) and returns its exit code: 0 success, 1 failure, 2 usage, 3 an input not sorted.
/// It prints what the command prints, installs the signal handlers that remove a temporary
/// output on Ctrl-C, and sets up the `log` logger once per process.
///
/// ```
/// let code = corank::cli::main_with_args(["corank", "--version"]);
/// assert_eq!(code, std::process::ExitCode::SUCCESS);
/// ```
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            let _ = e.print(); // --help, --version
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // A usage error on one line, as every other error: clap's message with the lines
            // it names arguments on (a missing one), without its tip and usage lines.
            let message = one_line_usage_error(&e.to_string());
            tell!("corank: error: {message} (see corank --help)");
            if args.iter().skip(1).any(|a| a == "--json") {
                print_json_error(&message, 2);
            }
            return ExitCode::from(2);
        }
    };
    let (verbose, json) = match &cli.command {
        Command::Merge(merge::MergeArgs { report, .. }) | Command::Sort(sort::SortArgs { report, .. }) => (report.verbose, report.json),
        _ => (0, false),
    };
    logging::init(verbose);
    let memory_limit = match &cli.command {
        Command::Merge(args) => Some(args.common.memory_limit()),
        Command::Sort(args) => Some(args.common.memory_limit()),
        _ => None,
    };
    if let Some(limit) = memory_limit {
        let common = match &cli.command {
            Command::Merge(args) => &args.common,
            Command::Sort(args) => &args.common,
            Command::Demo(_) => unreachable!("demo has no memory limit"),
        };
        if common.memory_limit.is_none() {
            log::info!("memory limit {} ({})", crate::show_bytes::show_bytes(limit as u64), common.memory_limit_origin());
        }
        cap_malloc_arenas(limit);
    }
    // The pool's threads named for profiles (`top -H`, `perf`); rayon's defaults otherwise.
    let _ = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("corank-pool{i}")).build_global();
    // Ctrl-C (or SIGTERM, SIGHUP) during a merge or a sort removes the temporary output
    // file (and a sort's spill directory).
    crate::parquet::interrupt::remove_temp_file_on_signal();
    let result = match cli.command {
        Command::Merge(args) => merge::run(args),
        Command::Sort(args) => sort::run(args),
        Command::Demo(args) => demo::run(args),
    };
    // The moment the work ended: what a timeline (RUST_LOG=debug) needs to tell the
    // process's own time from its exit's (the GPU driver's teardown).
    log::debug!("corank: done ({}), exiting", if result.is_ok() { "ok" } else { "error" });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let (message, code) = (error_message(&e), exit_code(&e));
            tell!("corank: error: {message}");
            if json {
                print_json_error(&message, code);
            }
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_on_one_line_with_the_missing_argument() {
        let e = Cli::try_parse_from(["corank", "merge", "a.parquet"]).err().expect("-o is required");
        assert_eq!(one_line_usage_error(&e.to_string()), "the following required arguments were not provided: --output <OUTPUT>");
        let e = Cli::try_parse_from(["corank", "merge", "a.parquet", "-o", "x", "--nope"]).err().expect("unknown flag");
        assert_eq!(one_line_usage_error(&e.to_string()), "unexpected argument '--nope' found");
    }

    #[test]
    fn every_flag_of_merge_and_sort_has_its_help() {
        use clap::CommandFactory;
        let cli = Cli::command();
        cli.clone().debug_assert();
        let command = |name: &str| cli.get_subcommands().find(|c| c.get_name() == name).cloned().expect("a subcommand");
        let help = |name: &str, id: &str| {
            let arg = command(name).get_arguments().find(|a| a.get_id() == id).cloned().expect("a flag");
            arg.get_help().map(ToString::to_string).unwrap_or_default()
        };
        for name in ["merge", "sort"] {
            for arg in command(name).get_arguments() {
                assert!(arg.get_help().is_some(), "corank {name}: {} has no help", arg.get_id());
            }
        }
        // The shared flags whose help is each command's (common::FlagHelp).
        for (id, merge, sort) in [
            ("memory_limit", "the merge holds", "the sort holds"),
            ("verbose", "merging, writing", "sorting, spilling"),
            ("dry_run", "without merging", "without sorting"),
        ] {
            assert!(help("merge", id).contains(merge), "{id}: {}", help("merge", id));
            assert!(help("sort", id).contains(sort), "{id}: {}", help("sort", id));
        }
    }

    #[test]
    fn library_errors_name_the_flags() {
        let by = crate::parquet::parse_order_by("k SIDEWAYS").unwrap_err();
        assert!(error_message(&by).starts_with("invalid argument: --by \"k SIDEWAYS\": unexpected 'SIDEWAYS'"), "{by}");
        let compression = crate::parquet::parse_compression("zip").unwrap_err();
        assert!(error_message(&compression).starts_with("invalid argument: --compression \"zip\": "), "{compression}");
        let exists = Error::OutputExists { path: "o".into() };
        assert_eq!(error_message(&exists), "invalid argument: output o exists; use --force to replace it");
        assert_eq!(exists.to_string(), "invalid argument: output o exists; set `overwrite` to replace it");
        let memory =
            Error::InvalidSetting { setting: Setting::MemoryLimit, detail: "1.0 KiB is too small; it needs at least 2.0 MiB".into() };
        assert_eq!(error_message(&memory), "invalid argument: --memory-limit 1.0 KiB is too small; it needs at least 2.0 MiB");
        assert!(memory.to_string().starts_with("invalid argument: `memory_limit` 1.0 KiB"), "{memory}");
        let key = Error::SettingNeeded { setting: Setting::SortKey, detail: "x: row group 0 has no sorting_columns metadata".into() };
        assert!(error_message(&key).ends_with("metadata; give the sort key with --by"), "{key}");
        let schema = Error::SchemaDiffers { path: "b".into(), detail: "schema differs from a".into() };
        assert!(error_message(&schema).starts_with("b: schema differs from a (--union-by-name merges"), "{schema}");
        assert_eq!(exit_code(&exists), 2);
        assert_eq!(exit_code(&schema), 1);
        assert_eq!(exit_code(&by), 2);
        assert_eq!(exit_code(&Error::Internal("x".into())), 1);
        let io = Error::io("f", "", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(exit_code(&io), 1);
        assert!(std::error::Error::source(&io).is_some());
    }
}

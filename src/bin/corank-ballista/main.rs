//! `corank-ballista`: an Apache Ballista 55 scheduler and executor with corank built in
//! (feature `ballista`). One binary links Ballista once; its subcommands start either side:
//!
//! ```text
//! corank-ballista scheduler --bind-host 0.0.0.0 --bind-port 50050 [--task-distribution round-robin] ...
//! corank-ballista executor --scheduler-host HOST --scheduler-port 50050 --bind-port 50051 --bind-grpc-port 50052 ...
//! ```
//!
//! Both take the flags of Ballista's stock `ballista-scheduler` and `ballista-executor` that
//! matter outside Kubernetes (the same names and defaults; `--help` lists them) and set up
//! corank through Ballista's config overrides (docs/ballista.md):
//! - the scheduler: the session builder (`corank::datafusion::ballista::session_builder`:
//!   `CoRankRule` and `ReadAllPartitionsRule` among the physical rules), the config producer
//!   (Ballista's config with the `corank.*` extension registered, so a client's `corank.*`
//!   settings are kept instead of dropped) and the physical codec (Ballista's and
//!   `CoRankCodec`, composed);
//! - an executor: the same codec and config producer (so each task's context holds the
//!   client's `corank.*` settings); with `--log-corank-tasks`, an execution engine that logs,
//!   for each task, the corank nodes of its plan and the `corank.engine` of its context.
//!
//! Logs go to stderr, filtered as `--log-level-setting` (or `RUST_LOG`) says, in
//! env_logger's syntax (`info`, `info,datafusion=warn`).

// Every line the program prints goes through `tell!`, which never panics (the logger it
// shares with the `corank` command uses it).
#![deny(clippy::print_stdout, clippy::print_stderr)]

/// A line on stderr, a failure to write it ignored: there is nowhere left to say it.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

#[path = "../../cli/logging.rs"]
#[allow(dead_code)] // `filter_for` serves the `corank` command's `-v`
mod logging;

mod executor;
mod policy;
mod scheduler;
mod task_log;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "corank-ballista", version, about = "An Apache Ballista scheduler or executor with corank's merge and sort nodes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a scheduler: it plans queries with corank's rule and ships corank's nodes to
    /// the executors.
    Scheduler(scheduler::SchedulerArgs),
    /// Start an executor: it runs the tasks (corank's nodes among them) a scheduler sends.
    Executor(executor::ExecutorArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_level = match &cli.command {
        Command::Scheduler(a) => a.log_level_setting.clone(),
        Command::Executor(a) => a.log_level_setting.clone(),
    };
    // `RUST_LOG` wins over the flag, as in Ballista's binaries.
    let spec = std::env::var("RUST_LOG").ok().filter(|s| !s.trim().is_empty()).unwrap_or(log_level);
    logging::install(logging::filter_for(Some(&spec), 0));
    // Ballista's binaries run on a 32 MiB thread stack (deep plans recurse when they are
    // encoded and decoded).
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(32 * 1024 * 1024).build() {
        Ok(r) => r,
        Err(e) => {
            tell!("corank-ballista: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Scheduler(args) => scheduler::run(args).await,
            Command::Executor(args) => executor::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tell!("corank-ballista: error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! `corank-distributed-worker`: a datafusion-distributed 4 worker with corank's codec and the
//! coordinator's `corank.*` options (`corank::datafusion::distributed::worker`), served over
//! gRPC. docs/datafusion-distributed.md has the cluster's commands.
//!
//! ```text
//! corank-distributed-worker [--host 127.0.0.1] [--port 50051] [--log-tasks]
//! ```
//!
//! `--port 0` takes a free port. Once listening it prints `listening on http://HOST:PORT` (the
//! port bound) on stdout, the line a supervisor or test waits for. With `--log-tasks` it
//! prints each task it is given on stderr: `task I/N`, the session's `corank.*` options, and
//! the task's plan, one `  | `-prefixed line per node.

use corank::datafusion::CoRankConfig;
use datafusion::physical_plan::displayable;
use datafusion_distributed::{DistributedExt, DistributedTaskContext, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

const USAGE: &str = "usage: corank-distributed-worker [--host ADDR] [--port PORT] [--log-tasks]";

struct Args {
    host: IpAddr,
    port: u16,
    log_tasks: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { host: IpAddr::from([127, 0, 0, 1]), port: 50051, log_tasks: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--host" => args.host = value("--host")?.parse().map_err(|e| format!("--host: {e}"))?,
            "--port" => args.port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?,
            "--log-tasks" => args.log_tasks = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// Prints the task's plan on stderr (`--log-tasks`) and leaves it as it is.
fn log_task(ev: WorkerPlanRewriteEvent) -> datafusion::common::Result<WorkerPlanRewriteEventResponse> {
    let task = ev.session_config.get_extension::<DistributedTaskContext>();
    let (index, count) = task.map_or((0, 0), |t| (t.task_index, t.task_count));
    let corank = ev.session_config.options().extensions.get::<CoRankConfig>();
    let options = corank
        .map_or("none".to_string(), |c| format!("engine={} sort_chunk_rows={} window_rows={}", c.engine, c.sort_chunk_rows, c.window_rows));
    let plan = displayable(ev.plan.as_ref()).indent(true).to_string();
    let plan: String = plan.lines().map(|l| format!("  | {l}\n")).collect();
    // One write, so that tasks running at once do not interleave their lines.
    let _ = std::io::stderr().lock().write_all(format!("task {index}/{count} corank: {options}\n{plan}").as_bytes());
    Ok(WorkerPlanRewriteEventResponse::new(ev.plan))
}

async fn serve(args: Args) -> Result<(), String> {
    let incoming = TcpIncoming::bind(SocketAddr::new(args.host, args.port))
        .map_err(|e| format!("cannot listen on {}:{}: {e}", args.host, args.port))?;
    let bound = incoming.local_addr().map_err(|e| format!("the listening address: {e}"))?;
    let log_tasks = args.log_tasks;
    let worker = corank::datafusion::distributed::worker_with(move |builder| {
        if log_tasks {
            builder.with_distributed_worker_plan_rewrite_handler(log_task)
        } else {
            builder
        }
    });
    println!("listening on http://{bound}");
    let _ = std::io::stdout().flush();
    Server::builder()
        .add_service(worker.into_worker_server())
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| format!("serving on {bound}: {e}"))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("corank-distributed-worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("corank-distributed-worker: {message}");
            ExitCode::FAILURE
        }
    }
}

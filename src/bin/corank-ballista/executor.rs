//! `corank-ballista executor`: Ballista's executor with corank's physical codec and config
//! producer; with `--log-corank-tasks`, an execution engine that logs the corank nodes of
//! each task ([`crate::task_log`]). The flags are those of Ballista 55's `ballista-executor`, with its
//! defaults; the health-probe port and log files are not offered (Ballista builds them only
//! with its `build-binary` feature; logs go to stderr).
//!
//! The hidden flag `--without-corank-codec` starts the executor Ballista's stock binary would
//! be (Ballista's codec and config only): a task holding corank's nodes cannot be decoded
//! there, and its job fails (docs/ballista.md says how). It exists for the test of that
//! failure (`tests/datafusion/ballista_cluster.rs`).

use crate::policy::SchedulingPolicy;
use crate::task_log::TaskLog;
use ballista_core::error::Result;
use ballista_core::extension::SessionConfigExt;
use ballista_executor::execution_engine::{DefaultExecutionEngine, ExecutionEngine};
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use corank::datafusion::ballista::{physical_codec, session_config};
use datafusion::prelude::SessionConfig;
use std::sync::Arc;

/// The executor's flags (Ballista's names and defaults).
#[derive(clap::Args, Debug)]
pub struct ExecutorArgs {
    /// Scheduler host.
    #[arg(long, default_value = "localhost")]
    scheduler_host: String,
    /// Scheduler port.
    #[arg(long, default_value_t = 50050)]
    scheduler_port: u16,
    /// Local IP address to bind to.
    #[arg(long, default_value = "0.0.0.0")]
    bind_host: String,
    /// Host name or IP address registered with the scheduler, so that other executors and
    /// clients can connect to this one (default: the address the scheduler sees).
    #[arg(long)]
    external_host: Option<String>,
    /// Identifier for this executor (default: a new unique id).
    #[arg(long = "id")]
    executor_id: Option<String>,
    /// Arrow Flight port (shuffle data and results are fetched here).
    #[arg(short = 'p', long, default_value_t = 50051)]
    bind_port: u16,
    /// gRPC service port (the scheduler sends tasks here).
    #[arg(long, default_value_t = 50052)]
    bind_grpc_port: u16,
    /// Seconds to keep trying to reach the scheduler at start (0: one attempt).
    #[arg(long, default_value_t = 0)]
    scheduler_connect_timeout_seconds: u16,
    /// Directory for shuffle files and spills (default: a new temporary directory).
    #[arg(long)]
    work_dir: Option<String>,
    /// Virtual cores advertised to the scheduler: task slots (0: the CPU count).
    #[arg(short = 'c', long, default_value_t = 0, conflicts_with = "concurrent_tasks")]
    vcores: usize,
    /// The older name of `--vcores` (Ballista 55 still accepts it).
    #[arg(long)]
    concurrent_tasks: Option<usize>,
    /// Task scheduling policy; must be the scheduler's.
    #[arg(short = 's', long, value_enum, default_value_t = SchedulingPolicy::PushStaged)]
    task_scheduling_policy: SchedulingPolicy,
    /// Interval in seconds between cleanups of old job data (0: none).
    #[arg(long, default_value_t = 0)]
    job_data_clean_up_interval_seconds: u64,
    /// Seconds a finished job's data is kept.
    #[arg(long, default_value_t = 604800)]
    job_data_ttl_seconds: u64,
    /// The largest message (bytes) the gRPC server decodes.
    #[arg(long, default_value_t = 16777216)]
    grpc_server_max_decoding_message_size: u32,
    /// The largest message (bytes) the gRPC server encodes.
    #[arg(long, default_value_t = 16777216)]
    grpc_server_max_encoding_message_size: u32,
    /// Interval in seconds between heartbeats to the scheduler.
    #[arg(long, default_value_t = 60)]
    executor_heartbeat_interval_seconds: u64,
    /// Memory pool of all tasks together, bytes (default: a fraction of the memory).
    #[arg(long)]
    memory_pool_size: Option<u64>,
    /// Fraction of the host's (or cgroup's) memory for the pool without --memory-pool-size.
    // Ballista's default (its constant is private to its crate).
    #[arg(long, default_value_t = 0.7)]
    memory_pool_fraction: f64,
    /// Sessions whose runtime (object store clients, footer cache) the executor keeps.
    #[arg(long, default_value_t = 16)]
    session_runtime_cache_capacity: usize,
    /// Seconds an idle connection to another executor is kept (0: none kept).
    #[arg(long, default_value_t = 30)]
    client_ttl: u64,
    /// Log filter, env_logger's syntax (`RUST_LOG` wins when set).
    #[arg(long, default_value = "INFO,datafusion=INFO")]
    pub log_level_setting: String,
    /// Log each task's corank nodes and `corank.engine` at info. Connections to other
    /// executors are then not pooled (Ballista's pool is private to its default engine).
    #[arg(long)]
    log_corank_tasks: bool,
    /// Leave corank out (Ballista's codec and config only), as Ballista's stock executor.
    #[arg(long, hide = true)]
    without_corank_codec: bool,
}

/// Starts the executor, registers it with the scheduler and serves until the process ends.
pub async fn run(args: ExecutorArgs) -> Result<()> {
    let executor_id = args.executor_id.unwrap_or_else(ballista_core::ids::new_instance_id);
    let mut config = ExecutorProcessConfig {
        executor_id: executor_id.clone(),
        bind_host: args.bind_host,
        external_host: args.external_host,
        port: args.bind_port,
        grpc_port: args.bind_grpc_port,
        scheduler_host: args.scheduler_host,
        scheduler_port: args.scheduler_port,
        scheduler_connect_timeout_seconds: args.scheduler_connect_timeout_seconds,
        vcores: args.concurrent_tasks.unwrap_or(args.vcores),
        task_scheduling_policy: args.task_scheduling_policy.into(),
        work_dir: args.work_dir,
        special_mod_log_level: args.log_level_setting,
        job_data_ttl_seconds: args.job_data_ttl_seconds,
        job_data_clean_up_interval_seconds: args.job_data_clean_up_interval_seconds,
        grpc_max_decoding_message_size: args.grpc_server_max_decoding_message_size,
        grpc_max_encoding_message_size: args.grpc_server_max_encoding_message_size,
        executor_heartbeat_interval_seconds: args.executor_heartbeat_interval_seconds,
        memory_pool_size: args.memory_pool_size,
        memory_pool_fraction: args.memory_pool_fraction,
        session_runtime_cache_capacity: args.session_runtime_cache_capacity,
        client_ttl: args.client_ttl,
        ..ExecutorProcessConfig::default()
    };
    if args.log_corank_tasks {
        let inner: Arc<dyn ExecutionEngine> = Arc::new(DefaultExecutionEngine::new());
        config.override_execution_engine = Some(Arc::new(TaskLog::new(executor_id.clone(), inner)));
    }
    if args.without_corank_codec {
        log::warn!("corank-ballista executor {executor_id}: without corank's codec (tasks with corank's nodes will fail)");
    } else {
        // Each task's context is the producer's config with the client's settings applied;
        // `corank.*` keys are kept only where the extension is registered.
        config.override_config_producer = Some(Arc::new(|| session_config(SessionConfig::new_with_ballista())));
        config.override_physical_codec = Some(physical_codec());
    }
    log::info!("corank-ballista executor {executor_id} (corank {})", env!("CARGO_PKG_VERSION"));
    start_executor_process(Arc::new(config)).await
}

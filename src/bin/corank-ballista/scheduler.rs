//! `corank-ballista scheduler`: Ballista's scheduler with corank's session builder, config
//! producer and physical codec (the module doc of `main.rs` says what each does). The flags
//! are those of Ballista 55's `ballista-scheduler` for a scheduler outside Kubernetes, with
//! its defaults; the REST API, Flight SQL and the history server are not built (Ballista's
//! features `rest-api`, `flight-sql`; docs/ballista.md, "Limits").

use crate::policy::{SchedulingPolicy, TaskDistribution};
use ballista_core::config::BALLISTA_CLIENT_GRPC_MAX_MESSAGE_SIZE;
use ballista_core::error::{BallistaError, Result};
use ballista_core::extension::SessionConfigExt;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use corank::datafusion::ballista::{physical_codec, session_builder, session_config};
use datafusion::prelude::SessionConfig;
use std::net::SocketAddr;
use std::sync::Arc;

/// The scheduler's flags (Ballista's names and defaults).
#[derive(clap::Args, Debug)]
pub struct SchedulerArgs {
    /// Local host name or IP address to bind to.
    #[arg(long, default_value = "0.0.0.0")]
    bind_host: String,
    /// Scheduler bind port (gRPC; clients and executors connect here).
    #[arg(short = 'p', long, default_value_t = 50050)]
    bind_port: u16,
    /// Host name or IP address so that executors can connect to this scheduler.
    #[arg(long, default_value = "localhost")]
    external_host: String,
    /// Namespace for the Ballista cluster.
    #[arg(short = 'n', long, default_value = "ballista")]
    namespace: String,
    /// Identifier for this scheduler (default: a new unique id).
    #[arg(long = "id")]
    scheduler_id: Option<String>,
    /// Task scheduling policy; executors must use the same.
    #[arg(short = 's', long, value_enum, default_value_t = SchedulingPolicy::PushStaged)]
    scheduler_policy: SchedulingPolicy,
    /// How tasks are distributed over executors' free slots.
    #[arg(long, value_enum, default_value_t = TaskDistribution::Bias)]
    task_distribution: TaskDistribution,
    /// Event loop buffer size.
    #[arg(long, default_value_t = 1000)]
    event_loop_buffer_size: u32,
    /// Delay in seconds before a finished job's data is cleaned up.
    #[arg(long, default_value_t = 300)]
    finished_job_data_clean_up_interval_seconds: u64,
    /// Delay in seconds before a finished job's state is cleaned up.
    #[arg(long, default_value_t = 3600)]
    finished_job_state_clean_up_interval_seconds: u64,
    /// Milliseconds after which a job that could not be scheduled is resubmitted (0: never).
    #[arg(long, default_value_t = 0)]
    job_resubmit_interval_ms: u64,
    /// Seconds after which a terminating executor is considered lost.
    #[arg(long, default_value_t = 30)]
    executor_termination_grace_period: u64,
    /// Seconds without a heartbeat after which an executor is considered dead.
    #[arg(long, default_value_t = 180)]
    executor_timeout_seconds: u64,
    /// Interval in seconds between checks for dead executors.
    #[arg(long, default_value_t = 15)]
    expire_dead_executor_interval_seconds: u64,
    /// Seconds to wait for an executor to (re)register after the last one is lost before
    /// failing running jobs (default: --executor-timeout-seconds).
    #[arg(long)]
    no_executors_grace_period_seconds: Option<u64>,
    /// Failed attempts of a task before its job fails.
    #[arg(long, default_value_t = 4)]
    task_max_failures: usize,
    /// Failed attempts of a stage before its job fails.
    #[arg(long, default_value_t = 4)]
    stage_max_failures: usize,
    /// The largest message (bytes) the gRPC server decodes.
    #[arg(long, default_value_t = 16777216)]
    grpc_server_max_decoding_message_size: u32,
    /// The largest message (bytes) the gRPC server encodes.
    #[arg(long, default_value_t = 16777216)]
    grpc_server_max_encoding_message_size: u32,
    /// The largest message (bytes) the scheduler's gRPC clients send (task launches).
    #[arg(long, default_value_t = 16777216)]
    grpc_client_max_message_size: u32,
    /// Address (HOST:PORT) advertised to clients for fetching results over Arrow Flight.
    #[arg(long)]
    advertise_flight_endpoint: Option<String>,
    /// Start an embedded Arrow Flight proxy, so clients fetch results through the scheduler.
    #[arg(long)]
    enable_embedded_flight_proxy: bool,
    /// Log filter, env_logger's syntax (`RUST_LOG` wins when set).
    #[arg(long, default_value = "INFO,datafusion=INFO")]
    pub log_level_setting: String,
}

/// Starts the scheduler and serves until the process ends.
pub async fn run(args: SchedulerArgs) -> Result<()> {
    let addr: SocketAddr = format!("{}:{}", args.bind_host, args.bind_port)
        .parse()
        .map_err(|e| BallistaError::Configuration(format!("--bind-host/--bind-port: {e}")))?;
    let client_max = args.grpc_client_max_message_size as usize;
    // A config producer that registers `corank.*`: the scheduler applies each client's
    // settings to the producer's config before it builds the session, and drops the keys
    // of extensions it does not hold. Ballista also takes its gRPC client settings from an
    // overriding producer, so the flag's value goes in here.
    let producer = move || session_config(SessionConfig::new_with_ballista()).set_usize(BALLISTA_CLIENT_GRPC_MAX_MESSAGE_SIZE, client_max);
    let config = SchedulerConfig {
        namespace: args.namespace,
        scheduler_id: args.scheduler_id.unwrap_or_else(ballista_core::ids::new_instance_id),
        external_host: args.external_host,
        bind_port: args.bind_port,
        bind_host: args.bind_host,
        scheduling_policy: args.scheduler_policy.into(),
        event_loop_buffer_size: args.event_loop_buffer_size,
        task_distribution: args.task_distribution.into(),
        finished_job_data_clean_up_interval_seconds: args.finished_job_data_clean_up_interval_seconds,
        finished_job_state_clean_up_interval_seconds: args.finished_job_state_clean_up_interval_seconds,
        advertise_flight_endpoint: args.advertise_flight_endpoint.filter(|e| !e.is_empty()),
        enable_embedded_flight_proxy: args.enable_embedded_flight_proxy,
        job_resubmit_interval_ms: (args.job_resubmit_interval_ms > 0).then_some(args.job_resubmit_interval_ms),
        executor_termination_grace_period: args.executor_termination_grace_period,
        grpc_server_max_decoding_message_size: args.grpc_server_max_decoding_message_size,
        grpc_server_max_encoding_message_size: args.grpc_server_max_encoding_message_size,
        grpc_client_max_message_size: args.grpc_client_max_message_size,
        executor_timeout_seconds: args.executor_timeout_seconds,
        expire_dead_executor_interval_seconds: args.expire_dead_executor_interval_seconds,
        no_executors_grace_period_seconds: args.no_executors_grace_period_seconds.unwrap_or(args.executor_timeout_seconds),
        task_max_failures: args.task_max_failures,
        stage_max_failures: args.stage_max_failures,
        override_config_producer: Some(Arc::new(producer)),
        override_session_builder: Some(Arc::new(session_builder)),
        override_physical_codec: Some(physical_codec()),
        ..SchedulerConfig::default()
    };
    config.validate()?;
    log::info!("corank-ballista scheduler {} (corank {}) on {addr}", config.scheduler_id, env!("CARGO_PKG_VERSION"));
    let cluster = BallistaCluster::new_from_config(&config).await?;
    start_server(cluster, addr, Arc::new(config)).await
}

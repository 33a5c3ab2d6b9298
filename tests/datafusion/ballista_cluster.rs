//! corank in a Ballista cluster of separate processes: the `corank-ballista` binary started
//! as a scheduler and two executors on free 127.0.0.1 ports, a client session
//! (`corank::datafusion::ballista::session_state`) connected to them.
//!
//! - `ORDER BY` over sorted Parquet files and over files whose row groups are each sorted,
//!   and `ORDER BY` an unsorted column (the sort node), each with and without `LIMIT`: the
//!   rows equal the oracle, and the executed plan (the scheduler's stage plans with the
//!   metrics the executors reported) shows corank's nodes produced them;
//! - the union of two `ORDER BY … LIMIT` subqueries under a `GROUP BY`: a stage of two
//!   partitions, each a corank merge, which the scheduler (round-robin, one partition a task)
//!   gives to both executors; each executor's log (`--log-corank-tasks`) names the corank
//!   nodes of its tasks;
//! - `SET corank.engine = 'cpu'` in the client reaches the scheduler's plan (the node's
//!   `engine=cpu`) and each executor's task context (the executors' logs);
//! - a client asking for Ballista's adaptive planner (`SET ballista.planner.adaptive.enabled
//!   = true`) still gets the static planner, corank's nodes and the oracle's rows, and so
//!   does a stock Ballista client (`SessionContext::remote`), with corank's defaults;
//! - an executor without corank's codec: the job fails with an error, no rows;
//! - an executor killed mid-query: the rows equal the oracle's or the query fails with an
//!   error, never wrong or missing rows.
//!
//! Every process is killed when its `Cluster` is dropped (also when a test fails), and
//! with the test thread if the test process dies (`PR_SET_PDEATHSIG`). The clusters take
//! turns (one lock), so a loaded 2-core machine runs one at a time.

use super::ballista::{ids, metric, order_by, write_file, write_table, KEY_TYPES};
use crate::common::{oracle, sorted_run, Rng};
use arrow::compute::SortOptions;
use arrow::record_batch::RecordBatch;
use ballista::prelude::SessionContextExt;
use ballista_core::execution_plans::DistributedQueryExec;
use datafusion::prelude::*;
use datafusion_proto::protobuf::LogicalPlanNode;
use std::collections::BTreeSet;
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One cluster at a time (each is three processes; the test binary runs tests in parallel).
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a process may take to be ready, and a query to finish, on a loaded machine.
const READY: Duration = Duration::from_secs(45);
const QUERY: Duration = Duration::from_secs(90);

struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log holds every one of `lines`; an error (with the log) if the
    /// process exits first or `READY` passes.
    fn wait_for(&mut self, lines: &[&str]) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let log = self.log();
            if lines.iter().all(|l| log.contains(l)) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited ({status}) before it was ready:\n{log}", self.name));
            }
            if start.elapsed() > READY {
                return Err(format!("{} not ready after {READY:?}:\n{log}", self.name));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A port nobody listens on now (the OS picks it). Ballista's processes advertise the
/// ports they bind, so they cannot bind port 0 themselves; a process that loses its port
/// to another in between exits, and is started again on new ports.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn connects(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok()
}

/// Waits until `port` accepts connections (the log says a server starts before it binds).
fn wait_connects(p: &mut Process, port: u16) -> Result<(), String> {
    let start = Instant::now();
    while !connects(port) {
        if let Ok(Some(status)) = p.child.try_wait() {
            return Err(format!("{} exited ({status}):\n{}", p.name, p.log()));
        }
        if start.elapsed() > READY {
            return Err(format!("{} does not accept connections on {port}:\n{}", p.name, p.log()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A scheduler and executors of `corank-ballista`, killed on drop.
struct Cluster {
    dir: tempfile::TempDir,
    processes: Vec<Process>,
    port: u16,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.processes {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

impl Cluster {
    /// Starts `corank-ballista ARGS`, its stderr (the log) to a file.
    fn spawn(&mut self, name: &str, args: &[String]) -> Process {
        let log = self.dir.path().join(format!("{name}.{}.log", self.processes.len()));
        let mut command = Command::new(env!("CARGO_BIN_EXE_corank-ballista"));
        command.args(args).env_remove("RUST_LOG").stdout(Stdio::null()).stderr(File::create(&log).unwrap());
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent; the child
        // gets SIGKILL when the thread that started it (the test's) ends, so a test process
        // killed outright leaves no cluster behind.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        Process { name: name.to_string(), child: command.spawn().unwrap(), log }
    }

    /// Starts a process, `args(ports)` on new free ports each time, until it is ready
    /// (`lines` logged, the first port listening); three tries.
    fn start(&mut self, name: &str, ports: usize, lines: &[&str], args: impl Fn(&[u16]) -> Vec<String>) -> Vec<u16> {
        let mut last = String::new();
        for _ in 0..3 {
            let ports: Vec<u16> = (0..ports).map(|_| free_port()).collect();
            let mut p = self.spawn(name, &args(&ports));
            match p.wait_for(lines).and_then(|()| wait_connects(&mut p, ports[0])) {
                Ok(()) => {
                    self.processes.push(p);
                    return ports;
                }
                Err(e) => {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    last = e;
                }
            }
        }
        panic!("{name} did not start: {last}");
    }

    /// A scheduler (round-robin task distribution, and `scheduler_args`) and one executor
    /// per entry of `executors` (its extra flags), each with 2 task slots.
    fn new(scheduler_args: &[&str], executors: &[&[&str]]) -> Cluster {
        let mut cluster = Cluster { dir: tempfile::tempdir().unwrap(), processes: vec![], port: 0 };
        let sched_args: Vec<String> = scheduler_args.iter().map(|s| s.to_string()).collect();
        cluster.port = cluster.start("scheduler", 1, &["listening on"], |p| {
            let mut args: Vec<String> =
                ["scheduler", "--bind-host", "127.0.0.1", "--external-host", "127.0.0.1", "--task-distribution", "round-robin"]
                    .map(String::from)
                    .to_vec();
            args.extend(["--bind-port".into(), p[0].to_string()]);
            args.extend(sched_args.clone());
            args
        })[0];
        for (i, extra) in executors.iter().enumerate() {
            let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            let work_dir = cluster.dir.path().join(format!("work-{i}"));
            std::fs::create_dir_all(&work_dir).unwrap();
            let scheduler_port = cluster.port;
            cluster.start(&format!("exec-{i}"), 2, &["Executor registration succeed", "flight server listening"], |p| {
                let mut args: Vec<String> =
                    ["executor", "--bind-host", "127.0.0.1", "--external-host", "127.0.0.1", "--scheduler-host", "127.0.0.1", "-c", "2"]
                        .map(String::from)
                        .to_vec();
                args.extend(["--scheduler-port".into(), scheduler_port.to_string(), "--id".into(), format!("exec-{i}")]);
                args.extend(["--bind-port".into(), p[0].to_string(), "--bind-grpc-port".into(), p[1].to_string()]);
                args.extend(["--work-dir".into(), work_dir.display().to_string(), "--log-corank-tasks".into()]);
                args.extend(extra.clone());
                args
            });
        }
        cluster
    }

    /// A client session on the cluster: corank's session (`corank.*` registered), 8 target
    /// partitions, each file a partition (ties then come out in file order, the oracle's).
    async fn client(&self) -> SessionContext {
        let session = SessionConfig::new().with_target_partitions(8).with_repartition_file_scans(false);
        let state = corank::datafusion::ballista::session_state(corank::datafusion::with_corank_config(session)).unwrap();
        SessionContext::remote_with_state(&format!("df://127.0.0.1:{}", self.port), state).await.unwrap()
    }

    fn executor(&self, name: &str) -> &Process {
        self.processes.iter().find(|p| p.name == name).unwrap()
    }

    /// The tasks the executors' logs name: (executor, job, corank nodes, corank.engine).
    fn tasks(&self) -> Vec<Task> {
        self.processes.iter().filter(|p| p.name.starts_with("exec-")).flat_map(|p| parse_tasks(&p.log())).collect()
    }
}

#[derive(Debug, Clone)]
struct Task {
    executor: String,
    job: String,
    nodes: String,
    engine: String,
}

/// The `corank task job=J stage=S task=T executor=E: NODES; corank.engine=X` lines of `log`.
fn parse_tasks(log: &str) -> Vec<Task> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("corank task job=")? + "corank task job=".len()..];
            let job = rest.split(' ').next()?.to_string();
            let executor = rest[rest.find("executor=")? + "executor=".len()..].split(':').next()?.to_string();
            let (nodes, engine) = rest[rest.find(": ")? + 2..].rsplit_once("; corank.engine=")?;
            Some(Task { executor, job, nodes: nodes.to_string(), engine: engine.to_string() })
        })
        .collect()
}

/// Runs `sql` on the cluster: its ids in output order and the executed plan, or the error.
async fn try_run(ctx: &SessionContext, sql: &str) -> Result<(Vec<u64>, String), String> {
    let run = async {
        let plan = ctx.sql(sql).await?.create_physical_plan().await?;
        let batches = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx()).await?;
        let query = plan.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>().expect("a Ballista context plans a DistributedQueryExec");
        let executed = query.explain_executed_plan(&ctx.copied_config(), true).await?;
        Ok::<_, datafusion::error::DataFusionError>((batches, executed))
    };
    match tokio::time::timeout(QUERY, run).await {
        Ok(Ok((batches, executed))) => Ok((ids(&batches), executed)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => panic!("{sql}: no answer after {QUERY:?}"),
    }
}

async fn run(ctx: &SessionContext, sql: &str) -> (Vec<u64>, String) {
    try_run(ctx, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

const ASC: [SortOptions; 2] = [SortOptions { descending: false, nulls_first: false }, SortOptions { descending: false, nulls_first: true }];
const DESC: [SortOptions; 2] = [SortOptions { descending: true, nulls_first: true }, SortOptions { descending: false, nulls_first: false }];

/// The two tables of the standalone test: sorted files (one run each, in 3 row groups) and
/// files of 4 overlapping sorted row groups. Returns (name, runs, options) of each.
async fn tables(ctx: &SessionContext, dir: &Path) -> Vec<(&'static str, Vec<RecordBatch>, [SortOptions; 2])> {
    let mut rng = Rng::new(67);
    let mut out = vec![];
    for (name, files, runs_per_file, options) in [("sorted_files", 5, 1, ASC), ("sorted_row_groups", 3, 4, DESC)] {
        let runs = write_table(&dir.join(name), &mut rng, files, runs_per_file, &options);
        let ddl = format!(
            "CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}/' WITH ORDER ({})",
            dir.join(name).display(),
            order_by(&options)
        );
        ctx.sql(&ddl).await.unwrap();
        out.push((name, runs, options));
    }
    out
}

/// The oracle's ids for `runs` ordered by `keys` (column, options), the first `limit`.
fn expected(runs: &[RecordBatch], keys: &[(&str, SortOptions)], limit: Option<usize>) -> Vec<u64> {
    let keys: Vec<(String, SortOptions)> = keys.iter().map(|(k, o)| (k.to_string(), *o)).collect();
    let all: Vec<u64> = oracle(runs, &keys).into_iter().map(|i| i as u64).collect();
    all[..limit.unwrap_or(all.len()).min(all.len())].to_vec()
}

fn with_limit(sql: String, limit: Option<usize>) -> String {
    format!("{sql}{}", limit.map(|l| format!(" LIMIT {l}")).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_runs_corank_in_both_executors() {
    let _one = ONE_CLUSTER.lock().await;
    let cluster = Cluster::new(&[], &[&[], &[]]);
    let ctx = cluster.client().await;
    let data = tempfile::tempdir().unwrap();
    let tables = tables(&ctx, data.path()).await;

    // ORDER BY the declared order: corank's merge, in an executor, produced every row.
    for (name, runs, options) in &tables {
        let keys = [("k0", options[0]), ("k1", options[1])];
        for limit in [None, Some(25)] {
            let sql = with_limit(format!("SELECT * FROM {name} ORDER BY {}", order_by(options)), limit);
            let (got, executed) = run(&ctx, &sql).await;
            let want = expected(runs, &keys, limit);
            assert_eq!(got, want, "{sql}: rows differ from the oracle\n{executed}");
            let rows = datafusion::common::human_readable_count(want.len());
            assert_eq!(metric(&executed, "CoRankMergeExec", "output_rows"), Some(rows.as_str()), "{sql}\n{executed}");
            assert!(executed.contains("engine=auto"), "{sql}: the default engine\n{executed}");
            assert!(
                !executed.contains("SortPreservingMergeExec") && !executed.contains("SortExec"),
                "{sql}: a stock merge or sort ran\n{executed}"
            );
        }
    }

    // ORDER BY a column the files are not sorted by: corank's sort node; with a LIMIT,
    // DataFusion's TopK stays (the rule leaves a sort with a fetch alone).
    let (_, runs, _) = &tables[0];
    let id_asc = SortOptions { descending: false, nulls_first: false };
    let by = [("k1", SortOptions { descending: true, nulls_first: false }), ("id", id_asc)];
    for limit in [None, Some(25)] {
        let sql = with_limit("SELECT * FROM sorted_files ORDER BY k1 DESC NULLS LAST, id".to_string(), limit);
        let (got, executed) = run(&ctx, &sql).await;
        let want = expected(runs, &by, limit);
        assert_eq!(got, want, "{sql}: rows differ from the oracle\n{executed}");
        if limit.is_none() {
            let rows = datafusion::common::human_readable_count(want.len());
            assert_eq!(metric(&executed, "CoRankSortExec", "output_rows"), Some(rows.as_str()), "{sql}\n{executed}");
        } else {
            assert!(executed.contains("TopK") || executed.contains("fetch=25"), "{sql}: DataFusion's TopK\n{executed}");
        }
    }

    // The union of two ORDER BY … LIMIT subqueries under a GROUP BY: the union's stage (up
    // to the GROUP BY's shuffle) has two partitions, each a corank merge; one partition a
    // task, the round-robin scheduler gives them to different executors.
    ctx.sql("SET ballista.scheduler.max_partitions_per_task = 1").await.unwrap();
    let top = 400;
    let sql = format!(
        "SELECT id FROM (SELECT id FROM (SELECT k0, k1, id FROM sorted_files ORDER BY {} LIMIT {top}) \
         UNION ALL SELECT id FROM (SELECT k0, k1, id FROM sorted_row_groups ORDER BY {} LIMIT {top})) GROUP BY id ORDER BY id",
        order_by(&ASC),
        order_by(&DESC)
    );
    let jobs_before: BTreeSet<String> = cluster.tasks().into_iter().map(|t| t.job).collect();
    let (got, executed) = run(&ctx, &sql).await;
    let a = expected(&tables[0].1, &[("k0", ASC[0]), ("k1", ASC[1])], Some(top));
    let b = expected(&tables[1].1, &[("k0", DESC[0]), ("k1", DESC[1])], Some(top));
    let want: Vec<u64> = a.into_iter().chain(b).collect::<BTreeSet<u64>>().into_iter().collect();
    assert_eq!(got, want, "{sql}: rows differ from the oracle\n{executed}");
    assert_eq!(executed.matches("CoRankMergeExec").count(), 2, "{sql}: both sides merged by corank\n{executed}");
    let union: Vec<Task> = cluster.tasks().into_iter().filter(|t| !jobs_before.contains(&t.job)).collect();
    let merging: BTreeSet<&str> = union.iter().filter(|t| t.nodes.contains("CoRankMergeExec")).map(|t| t.executor.as_str()).collect();
    assert_eq!(merging, BTreeSet::from(["exec-0", "exec-1"]), "both executors ran corank's merge: {union:#?}");
    assert_eq!(union.iter().map(|t| t.job.as_str()).collect::<BTreeSet<_>>().len(), 1, "one job: {union:#?}");

    // A setting changed in the client reaches the scheduler's plan and the executors' tasks.
    let tasks = cluster.tasks();
    assert!(tasks.iter().all(|t| t.engine == "auto"), "the default engine in every task: {tasks:#?}");
    let jobs_before: BTreeSet<String> = tasks.into_iter().map(|t| t.job).collect();
    ctx.sql("SET corank.engine = 'cpu'").await.unwrap();
    let (got, executed) = run(&ctx, &sql).await;
    assert_eq!(got, want, "{sql}: rows differ from the oracle\n{executed}");
    assert!(
        executed.matches("engine=cpu").count() >= 2 && !executed.contains("engine=auto"),
        "{sql}: every corank node on the CPU\n{executed}"
    );
    let after: Vec<Task> = cluster.tasks().into_iter().filter(|t| !jobs_before.contains(&t.job)).collect();
    assert!(!after.is_empty() && after.iter().all(|t| t.engine == "cpu"), "corank.engine reached every task: {after:#?}");
    for e in ["exec-0", "exec-1"] {
        assert!(
            after.iter().any(|t| t.executor == e && t.nodes.contains("engine=cpu")),
            "{e} ran a corank node with engine=cpu: {after:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adaptive_planner_request_still_plans_with_corank() {
    let _one = ONE_CLUSTER.lock().await;
    let cluster = Cluster::new(&[], &[&[], &[]]);
    let ctx = cluster.client().await;
    let data = tempfile::tempdir().unwrap();
    let tables = tables(&ctx, data.path()).await;
    // Ballista's adaptive planner ignores the session's physical rules; with it, the files
    // of overlapping sorted row groups came out mis-ordered (DataFusion's merge trusts their
    // `sorting_columns`). corank's scheduler keeps the static planner instead.
    ctx.sql("SET ballista.planner.adaptive.enabled = true").await.unwrap();
    for (name, runs, options) in &tables {
        for limit in [None, Some(25)] {
            let sql = with_limit(format!("SELECT * FROM {name} ORDER BY {}", order_by(options)), limit);
            let (got, executed) = run(&ctx, &sql).await;
            assert_eq!(
                got,
                expected(runs, &[("k0", options[0]), ("k1", options[1])], limit),
                "{sql}: rows differ from the oracle\n{executed}"
            );
            assert!(
                executed.contains("CoRankMergeExec") && !executed.contains("SortPreservingMergeExec"),
                "{sql}: corank's merge ran\n{executed}"
            );
        }
    }
    let log = cluster.processes[0].log();
    assert!(log.contains("asks for Ballista's adaptive planner; planning with the static planner"), "the scheduler says so:\n{log}");

    // A stock Ballista client (no corank in its session, the adaptive planner its default)
    // gets corank's merge with the default settings: the scheduler's session has them.
    let stock = SessionContext::remote(&format!("df://127.0.0.1:{}", cluster.port)).await.unwrap();
    let (name, runs, options) = &tables[1];
    let ddl = format!(
        "CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}/' WITH ORDER ({})",
        data.path().join(name).display(),
        order_by(options)
    );
    stock.sql(&ddl).await.unwrap();
    let sql = format!("SELECT * FROM {name} ORDER BY {}", order_by(options));
    let (got, executed) = run(&stock, &sql).await;
    assert_eq!(got, expected(runs, &[("k0", options[0]), ("k1", options[1])], None), "{sql}: rows differ from the oracle\n{executed}");
    assert!(executed.contains("CoRankMergeExec") && executed.contains("engine=auto"), "{sql}: corank's merge ran\n{executed}");
    assert!(stock.sql("SET corank.engine = 'cpu'").await.is_err(), "a stock client has no corank.* settings");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executor_without_corank_codec_fails_the_job() {
    let _one = ONE_CLUSTER.lock().await;
    let cluster = Cluster::new(&["--task-max-failures", "1"], &[&["--without-corank-codec"]]);
    let ctx = cluster.client().await;
    let data = tempfile::tempdir().unwrap();
    let tables = tables(&ctx, data.path()).await;
    let sql = format!("SELECT * FROM sorted_files ORDER BY {}", order_by(&tables[0].2));
    let err = try_run(&ctx, &sql).await.map(|(ids, _)| ids.len()).expect_err("a task holding corank's nodes cannot run there");
    eprintln!("without corank's codec: {err}");
    // Ballista reports an executor's refusal without its reason; the executor logs it.
    assert!(err.contains("rejected by executor") || err.contains("CoRank") || err.contains("decode"), "{err}");
    let log = cluster.executor("exec-0").log();
    assert!(log.contains("failed to decode"), "the executor says why:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executor_killed_mid_query_retries_or_fails() {
    let _one = ONE_CLUSTER.lock().await;
    // Heartbeats each second and a 4 s timeout, so the scheduler notices the lost executor.
    let beat: &[&str] = &["--executor-heartbeat-interval-seconds", "1"];
    let mut cluster = Cluster::new(&["--executor-timeout-seconds", "4", "--expire-dead-executor-interval-seconds", "1"], &[beat, beat]);
    let ctx = cluster.client().await;
    let data = tempfile::tempdir().unwrap();
    // Large enough that the merge still runs when an executor is killed: 6 sorted files.
    let mut rng = Rng::new(68);
    let mut runs = vec![];
    let dir = data.path().join("big");
    std::fs::create_dir_all(&dir).unwrap();
    for f in 0..6u64 {
        let run = sorted_run(&mut rng, &KEY_TYPES, &ASC, 60_000, 1000, 0.05, f * 60_000);
        write_file(&dir.join(format!("f{f}.parquet")), std::slice::from_ref(&run), &ASC, 4);
        runs.push(run);
    }
    ctx.sql(&format!("CREATE EXTERNAL TABLE big STORED AS PARQUET LOCATION '{}/' WITH ORDER ({})", dir.display(), order_by(&ASC)))
        .await
        .unwrap();
    // Two merges (a task on each executor), a shuffle, and corank's sort of the GROUP BY's output.
    ctx.sql("SET ballista.scheduler.max_partitions_per_task = 1").await.unwrap();
    let by = order_by(&ASC);
    let sql = format!(
        "SELECT id FROM (SELECT id FROM (SELECT k0, k1, id FROM big ORDER BY {by} LIMIT 1000000) \
         UNION ALL SELECT id FROM (SELECT k0, k1, id FROM big ORDER BY {by} LIMIT 1000000)) GROUP BY id ORDER BY id"
    );
    let want: Vec<u64> = (0..6 * 60_000).collect();
    let query = {
        let ctx = ctx.clone();
        let sql = sql.clone();
        tokio::spawn(async move { try_run(&ctx, &sql).await })
    };
    // Kill the first executor that starts a task of the query.
    let start = Instant::now();
    let victim = loop {
        if let Some(t) = cluster.tasks().first() {
            break t.executor.clone();
        }
        assert!(start.elapsed() < QUERY, "no executor started a task");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let p = cluster.processes.iter_mut().find(|p| p.name == victim).unwrap();
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    match query.await.unwrap() {
        Ok((got, executed)) => {
            assert_eq!(got, want, "{sql}: wrong or missing rows after {victim} was killed\n{executed}");
            eprintln!("{victim} killed: the query still answered right (Ballista ran its tasks again)");
        }
        Err(e) => {
            assert!(!e.is_empty(), "an error that says nothing");
            eprintln!("{victim} killed: the query failed: {e}");
        }
    }
}

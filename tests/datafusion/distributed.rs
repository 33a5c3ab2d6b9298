//! corank in datafusion-distributed 4: two `corank-distributed-worker` processes on free
//! 127.0.0.1 ports and a coordinator (`corank::datafusion::distributed::session_context`) in
//! the test process run `ORDER BY` over sorted Parquet files, over files whose row groups
//! are each sorted, and over an unsorted column, with and without `LIMIT`. The rows equal the
//! oracle (a total order: the id breaks ties); the coordinator's plan has corank's merge over
//! a network boundary of two tasks; each worker's task log (`--log-tasks`) shows the scan (and
//! the `CoRankSortExec`) it ran. A `corank.*` setting changed in the coordinator's session is
//! in the workers' plans and sessions; a stock worker (no corank codec) and a worker killed
//! once it has taken its task end the query in an error, never in wrong or missing rows.
//!
//! Worker processes are killed when their guard drops, also when a test fails.

use crate::common::{oracle, sorted_run, Rng};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use corank::datafusion::distributed::{session_context, WorkerUrls};
use datafusion::prelude::*;
use datafusion_distributed::{display_plan_ascii, DistributedConfig, DistributedExt};
use futures::StreamExt;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long a worker may take to listen (a loaded machine starts processes slowly).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A `corank-distributed-worker` process, killed on drop; its stderr (the task log) is
/// collected in `log`.
struct WorkerProcess {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WorkerProcess {
    /// Starts a worker on a free port and waits (at most [`START_TIMEOUT`]) until it listens.
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_corank-distributed-worker"))
            .args(["--host", "127.0.0.1", "--port", "0", "--log-tasks"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start corank-distributed-worker");
        let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let mut worker = WorkerProcess { child, url: String::new(), log: Arc::default() };
        let log = Arc::clone(&worker.log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
            let status = worker.child.try_wait();
            panic!("the worker did not listen within {START_TIMEOUT:?} ({status:?}); stderr:\n{}", worker.log())
        });
        worker.url = line.strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line: {line}")).to_string();
        worker
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// A coordinator session over the workers at `urls`, every file scan split over as many tasks
/// as there are workers.
fn cluster(urls: &[String]) -> SessionContext {
    session_context(config(), WorkerUrls::new(urls).unwrap())
}

fn config() -> SessionConfig {
    // datafusion-distributed's options need its config extension first.
    // As many target partitions as files or more, and no byte-range splitting of files on the
    // coordinator: each sorted file is a partition of its own, which DataFusion declares
    // sorted (a partition of several overlapping files it sorts instead).
    let config = SessionConfig::new()
        .with_target_partitions(8)
        .with_repartition_file_scans(false)
        .with_distributed_option_extension(DistributedConfig::default());
    config.with_distributed_file_scan_config_bytes_per_partition(1).unwrap()
}

const KEY_TYPES: [DataType; 2] = [DataType::Int32, DataType::Utf8];

/// Writes `runs` as one file, each run a row group (or cut into `row_groups_per_run`), every
/// row group saying it is sorted by (k0, k1, id).
fn write_file(path: &Path, runs: &[RecordBatch], options: &[SortOptions], row_groups_per_run: usize) {
    let id = SortingColumn { column_idx: options.len() as i32, descending: false, nulls_first: false };
    let sorting = options
        .iter()
        .enumerate()
        .map(|(i, o)| SortingColumn { column_idx: i as i32, descending: o.descending, nulls_first: o.nulls_first })
        .chain([id]);
    let props = WriterProperties::builder().set_sorting_columns(Some(sorting.collect())).build();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), runs[0].schema(), Some(props)).unwrap();
    for run in runs {
        let step = run.num_rows().div_ceil(row_groups_per_run).max(1);
        for at in (0..run.num_rows()).step_by(step) {
            writer.write(&run.slice(at, step.min(run.num_rows() - at))).unwrap();
            writer.flush().unwrap(); // ends the row group
        }
    }
    writer.close().unwrap();
}

/// The `ORDER BY` list of (k0, k1) in `options`, then `id` (the tie-breaker: a total order,
/// whatever partition a row comes from).
fn order_by(options: &[SortOptions]) -> String {
    let one = |i: usize, o: &SortOptions| {
        format!("k{i} {} NULLS {}", if o.descending { "DESC" } else { "ASC" }, if o.nulls_first { "FIRST" } else { "LAST" })
    };
    let keys: Vec<String> = options.iter().enumerate().map(|(i, o)| one(i, o)).collect();
    format!("{}, id ASC NULLS LAST", keys.join(", "))
}

/// The oracle's keys for [`order_by`]`(options)`.
fn oracle_keys(options: &[SortOptions]) -> Vec<(String, SortOptions)> {
    let mut keys: Vec<(String, SortOptions)> = options.iter().enumerate().map(|(i, o)| (format!("k{i}"), *o)).collect();
    keys.push(("id".into(), SortOptions { descending: false, nulls_first: false }));
    keys
}

/// `files` files under `dir` of `runs_per_file` sorted runs each (row groups), with `rows`
/// rows a run at most; returns the runs in file and row-group order.
fn write_table(dir: &Path, rng: &mut Rng, files: usize, runs_per_file: usize, rows: u64, options: &[SortOptions]) -> Vec<RecordBatch> {
    std::fs::create_dir_all(dir).unwrap();
    let mut all = vec![];
    let mut id = 0;
    for f in 0..files {
        let runs: Vec<RecordBatch> = (0..runs_per_file)
            .map(|_| {
                let n = 1 + rng.below(rows) as usize;
                let run = sorted_run(rng, &KEY_TYPES, options, n, 40, 0.1, id);
                id += n as u64;
                run
            })
            .collect();
        write_file(&dir.join(format!("f{f}.parquet")), &runs, options, if runs_per_file == 1 { 3 } else { 1 });
        all.extend(runs);
    }
    all
}

/// Registers `dir` as table `name`, declared sorted by [`order_by`]`(options)`.
async fn register(ctx: &SessionContext, name: &str, dir: &Path, options: &[SortOptions]) {
    let ddl = format!("CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}/' WITH ORDER ({})", dir.display(), order_by(options));
    ctx.sql(&ddl).await.unwrap();
}

fn ids(batches: &[RecordBatch]) -> Vec<u64> {
    batches.iter().flat_map(|b| b.column_by_name("id").unwrap().as_any().downcast_ref::<UInt64Array>().unwrap().values().to_vec()).collect()
}

/// The coordinator's distributed plan of `sql`, and its rows.
async fn run(ctx: &SessionContext, sql: &str) -> datafusion::common::Result<(String, Vec<u64>)> {
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    let shown = display_plan_ascii(plan.as_ref(), false);
    let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await?;
    Ok((shown, ids(&batches)))
}

/// The plan's head stage (the coordinator's part, above the first stage it reads).
fn head(plan: &str) -> &str {
    plan.split("┌───── Stage").next().unwrap()
}

/// The task log each worker wrote since `from` (byte offsets of their logs).
fn new_tasks(workers: &[WorkerProcess], from: &[usize]) -> Vec<String> {
    workers.iter().zip(from).map(|(w, &at)| w.log()[at..].to_string()).collect()
}

fn log_lengths(workers: &[WorkerProcess]) -> Vec<usize> {
    workers.iter().map(|w| w.log().len()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_by_scans_and_sorts_on_both_workers() {
    let workers = [WorkerProcess::start(), WorkerProcess::start()];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let ctx = cluster(&urls);

    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(67);
    let asc = [SortOptions { descending: false, nulls_first: false }, SortOptions { descending: false, nulls_first: true }];
    let desc = [SortOptions { descending: true, nulls_first: true }, SortOptions { descending: false, nulls_first: false }];
    // Sorted files (one run each, in 3 row groups), and files of 4 overlapping sorted row
    // groups each (the rule splits them into row-group runs).
    let tables = [("sorted_files", 6, 1, asc), ("sorted_row_groups", 4, 4, desc)];
    for (name, files, runs_per_file, options) in tables {
        let path = dir.path().join(name);
        let runs = write_table(&path, &mut rng, files, runs_per_file, 600, &options);
        register(&ctx, name, &path, &options).await;
        let expected: Vec<u64> = oracle(&runs, &oracle_keys(&options)).into_iter().map(|i| i as u64).collect();
        // An unsorted order: (k1 DESC, id); the sort node.
        let unsorted = [SortOptions { descending: true, nulls_first: true }];
        let unsorted_keys = [("k1".to_string(), unsorted[0]), ("id".to_string(), SortOptions { descending: false, nulls_first: false })];
        let expected_unsorted: Vec<u64> = oracle(&runs, &unsorted_keys).into_iter().map(|i| i as u64).collect();

        for limit in [None, Some(25)] {
            let tail = limit.map(|l| format!(" LIMIT {l}")).unwrap_or_default();
            for (sql, want, sort) in [
                (format!("SELECT * FROM {name} ORDER BY {}{tail}", order_by(&options)), &expected, false),
                (format!("SELECT * FROM {name} ORDER BY k1 DESC NULLS FIRST, id{tail}"), &expected_unsorted, true),
            ] {
                let before = log_lengths(&workers);
                let (plan, got) = run(&ctx, &sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
                let want = &want[..limit.unwrap_or(want.len()).min(want.len())];
                assert_eq!(got, want, "{sql}: rows differ from the oracle\n{plan}");
                // The coordinator merges with corank over the network boundary; no stock merge.
                let top = head(&plan);
                assert!(top.contains("CoRankMergeExec") && top.contains("NetworkCoalesceExec"), "{sql}\n{plan}");
                assert!(plan.contains("tasks=2"), "{sql}: the scan is not split over two tasks\n{plan}");
                assert!(!plan.contains("SortPreservingMergeExec"), "{sql}: a stock merge\n{plan}");
                // Each worker ran a task of the scan (and, for the unsorted order without a
                // LIMIT, corank's sort of its files; a LIMIT stays DataFusion's TopK).
                let tasks = new_tasks(&workers, &before);
                for (w, log) in tasks.iter().enumerate() {
                    assert!(
                        log.contains("task ") && log.contains(&format!("{name}/f")),
                        "{sql}: worker {w} ran no scan task:\n{log}\n{plan}"
                    );
                    if sort && limit.is_none() {
                        assert!(log.contains("CoRankSortExec"), "{sql}: worker {w} did not sort with corank:\n{log}");
                    }
                    if !sort {
                        assert!(!log.contains("SortExec"), "{sql}: sorted inputs were sorted again on worker {w}:\n{log}");
                    }
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_corank_setting_reaches_the_workers() {
    let workers = [WorkerProcess::start(), WorkerProcess::start()];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let ctx = cluster(&urls);
    let dir = tempfile::tempdir().unwrap();
    let options = [SortOptions::default(), SortOptions::default()];
    let runs = write_table(&dir.path().join("t"), &mut Rng::new(7), 4, 1, 400, &options);
    register(&ctx, "t", &dir.path().join("t"), &options).await;

    ctx.sql("SET corank.sort_chunk_rows = 777").await.unwrap();
    ctx.sql("SET corank.engine = 'cpu'").await.unwrap();
    let before = log_lengths(&workers);
    let sql = "SELECT * FROM t ORDER BY k1 DESC NULLS FIRST, id";
    let (plan, got) = run(&ctx, sql).await.unwrap();
    let keys = [("k1".to_string(), SortOptions { descending: true, nulls_first: true }), ("id".to_string(), SortOptions::default())];
    let want: Vec<u64> = oracle(&runs, &keys).into_iter().map(|i| i as u64).collect();
    assert_eq!(got, want, "{plan}");
    for (w, log) in new_tasks(&workers, &before).iter().enumerate() {
        // In the plan the worker ran (the node's settings) and in its session's options.
        assert!(log.contains("CoRankSortExec") && log.contains("engine=cpu, chunk_rows=777"), "worker {w}:\n{log}");
        assert!(log.contains("corank: engine=cpu sort_chunk_rows=777"), "worker {w}:\n{log}");
    }
}

/// Serves a stock datafusion-distributed worker (no corank codec) in this process.
async fn stock_worker() -> (String, tokio::task::JoinHandle<()>) {
    let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://{}", incoming.local_addr().unwrap());
    let server = tonic::transport::Server::builder().add_service(datafusion_distributed::Worker::default().into_worker_server());
    let handle = tokio::spawn(async move {
        let _ = server.serve_with_incoming(incoming).await;
    });
    (url, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_without_the_codec_fails_the_query() {
    let corank_worker = WorkerProcess::start();
    let (stock, server) = stock_worker().await;
    let ctx = cluster(&[corank_worker.url.clone(), stock]);
    let dir = tempfile::tempdir().unwrap();
    let options = [SortOptions::default(), SortOptions::default()];
    write_table(&dir.path().join("t"), &mut Rng::new(8), 4, 1, 400, &options);
    register(&ctx, "t", &dir.path().join("t"), &options).await;
    // The sort's stage holds a CoRankSortExec, which only corank's codec decodes.
    let err = run(&ctx, "SELECT * FROM t ORDER BY k1, id").await.expect_err("a worker without corank's codec must fail the query");
    let message = err.to_string();
    assert!(message.contains("CoRankSortExec") || message.to_lowercase().contains("codec"), "not a clear error: {message}");
    eprintln!("stock worker: {message}");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_query_ends_in_an_error() {
    let mut workers = [WorkerProcess::start(), WorkerProcess::start()];
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let ctx = cluster(&urls);
    // About 400k rows a worker: more than it sends in the moment between taking its task and
    // the kill.
    let dir = tempfile::tempdir().unwrap();
    let options = [SortOptions::default(), SortOptions::default()];
    let runs = write_table(&dir.path().join("t"), &mut Rng::new(9), 8, 1, 200_000, &options);
    register(&ctx, "t", &dir.path().join("t"), &options).await;
    let total: usize = runs.iter().map(|r| r.num_rows()).sum();

    let sql = format!("SELECT * FROM t ORDER BY {}", order_by(&options));
    let plan = ctx.sql(&sql).await.unwrap().create_physical_plan().await.unwrap();
    let mut stream = datafusion::physical_plan::execute_stream(plan, ctx.task_ctx()).unwrap();
    let query = tokio::spawn(async move {
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            match batch {
                Ok(batch) => rows += batch.num_rows(),
                Err(e) => return (rows, Some(e)),
            }
        }
        (rows, None)
    });
    // Kill the second worker once it has its task (the query is running).
    let waited = tokio::time::timeout(START_TIMEOUT, async {
        while !workers[1].log().contains("task ") {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the second worker got no task within {START_TIMEOUT:?}:\n{}", workers[1].log());
    let _ = workers[1].child.kill();
    let _ = workers[1].child.wait();
    let ended = tokio::time::timeout(Duration::from_secs(60), query).await;
    let (rows, err) = ended.expect("the query neither ended nor failed within 60 s of the kill").unwrap();
    let err = err.unwrap_or_else(|| panic!("the query ended without an error after a worker was killed ({rows} of {total} rows)"));
    assert!(rows < total, "every row ({rows} of {total}) came out, and then an error: {err}");
    eprintln!("killed worker: {rows} of {total} rows, then: {err}");
}

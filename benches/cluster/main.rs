//! SQL `ORDER BY` over sorted lineitem files in a Ballista cluster of separate processes
//! against one process (issue 67's benchmark), run with
//!
//! ```text
//! cargo bench --features ballista --bench cluster -- --rows 100M [--runs 3] [--dir D] [--limit 10000]
//! ```
//!
//! The data: `--files` (16) sorted lineitem Parquet files of `--rows` rows in all, made by the
//! generator the comparison bench (`benches/cli`) uses, in the same folder layout
//! (`DIR/lineitem-16xROWS`, reused while its `.complete` marker is there, so the two benches
//! share a dataset). A table over them declared `WITH ORDER (l_orderkey ASC NULLS LAST)`,
//! each file one partition (`target_partitions` = files, no file repartitioning).
//!
//! The cluster: `corank-ballista scheduler` (round-robin task distribution) and two
//! `corank-ballista executor`s (`--vcores`, default half the cores each) on free 127.0.0.1
//! ports, the binary from this build (`CARGO_BIN_EXE_corank-ballista`) or the one
//! `CORANK_BENCH_BALLISTA` names (the bench run away from its build, as on the GPU machine).
//! One cluster serves both sides: corank's rule is a per-query setting, so the stock
//! Ballista client is a corank client session with `SET corank.enabled = false` (the
//! scheduler plans its query without corank's rule: Ballista's stage plan with DataFusion's
//! `SortPreservingMergeExec`). Both sides plan with Ballista's static planner, which
//! `corank-ballista`'s scheduler always uses (a stock Ballista scheduler defaults to its
//! adaptive planner; docs/ballista.md, "Planners").
//!
//! The cases, for `SELECT * FROM lineitem ORDER BY l_orderkey` and the same with
//! `LIMIT --limit`: stock DataFusion in this process, DataFusion with corank in this process
//! (`corank.engine` per `--engines`: cpu, and gpu where one is usable), stock Ballista in the
//! cluster, corank in the cluster (per engine). Every case drains the result through the
//! client's stream; its warm-up run digests it (row count, the key column in output order,
//! an order-free hash of the rows) and must match the first case's (stock, one process),
//! else its time does not count (the table says so and the bench fails). With `LIMIT`, the
//! rows tied with the output's last key count by number only: which of them make the cut is
//! open (SQL leaves it so; stock DataFusion's merge breaks ties by poll counts). The warm-up also
//! checks which merge ran: a stock case no corank node, a corank case `CoRankMergeExec`
//! (in the cluster: in the executed stage plans the executors reported).
//!
//! Then `--runs` rounds run every case once, in turn (the order reversed every other round,
//! so that load from other processes falls on all alike); the table gives each case's
//! median, its ratio to stock in one process, and for the cluster the stages as Ballista
//! tells them ([`stages`]): each stage's operators, tasks, executors and span (median over
//! the runs), and the rest of the client's time (planning, scheduling, fetching the result
//! from the executor that holds it). The executors' work folders are emptied after every
//! cluster query (each writes its shuffle and result files: gigabytes at 100M rows).
//!
//! Every process is killed when the bench ends, on an error, and with the bench (Ctrl-C:
//! [`processes`]).

#[path = "../../src/cli/datagen.rs"]
mod datagen;
#[path = "../common/digest.rs"]
mod digest;
mod processes;
mod stages;
#[path = "../../src/cli/units.rs"]
mod units;

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::row::{RowConverter, SortField};
use ballista::prelude::SessionContextExt;
use ballista_core::execution_plans::DistributedQueryExec;
use clap::Parser;
use datafusion::prelude::*;
use datafusion_proto::protobuf::LogicalPlanNode;
use digest::Digest;
use futures::StreamExt;
use processes::Cluster;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SQL ORDER BY over sorted lineitem files: stock DataFusion and corank in one process and
/// in a Ballista cluster of two executors.
#[derive(Parser, Debug)]
#[command(name = "cargo bench --features ballista --bench cluster --")]
struct Args {
    /// Rows in all (`2M`, `100M`).
    #[arg(long, default_value = "2M", value_parser = units::parse_count)]
    rows: usize,
    /// Sorted files (each one partition).
    #[arg(long, default_value_t = 16)]
    files: usize,
    /// Where the dataset is made (and reused) and the cluster's work folders live.
    #[arg(long, default_value = "target/corank-bench")]
    dir: PathBuf,
    /// Timed runs per case (the median counts), after one warm-up run that checks outputs.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The LIMIT of the second query (0: no such query); the warm-up run holds its output
    /// in memory for the check.
    #[arg(long, default_value_t = 10_000)]
    limit: usize,
    /// corank's engines (`corank.engine`), comma-separated (default: cpu, and gpu where one
    /// is usable here).
    #[arg(long, value_delimiter = ',')]
    engines: Vec<String>,
    /// Task slots of each executor (default: half the cores, at least 1).
    #[arg(long)]
    vcores: Option<usize>,
    /// Executors in the cluster.
    #[arg(long, default_value_t = 2)]
    executors: usize,
    /// Leave the cluster out: the one-process cases only.
    #[arg(long)]
    no_cluster: bool,
    /// Make (or find) the dataset, then stop: no case runs.
    #[arg(long)]
    data_only: bool,
}

/// Where a case runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    OneProcess,
    Cluster,
}

/// A case: a client session and a query.
struct Case {
    name: String,
    ctx: SessionContext,
    place: Place,
    corank: bool,
}

/// One run of a case: its time, rows, digest (where asked), and for the cluster the job's
/// stages and executed plan.
struct Run {
    time: Duration,
    rows: usize,
    digest: Digest,
    stages: Vec<(u32, stages::Stage)>,
    executed: String,
}

/// The digest of a `LIMIT` query's output (`batches`, in output order): its rows, and the
/// key order and values of the rows before its last key. Which of the rows tied with the
/// last key make the cut is open (SQL leaves it so, and stock DataFusion's merge breaks ties
/// by poll counts), so they count as rows only.
fn digest_before_last_key(batches: &[RecordBatch]) -> datafusion::error::Result<Digest> {
    let mut d = Digest::default();
    let Some(last) = batches.iter().rev().find(|b| b.num_rows() > 0) else { return Ok(d) };
    let converter = RowConverter::new(vec![SortField::new(last.column(0).data_type().clone())])?;
    let last_key = converter.convert_columns(&[last.column(0).slice(last.num_rows() - 1, 1)])?;
    let last_key = last_key.row(0).owned();
    for batch in batches {
        let keys = converter.convert_columns(&[Arc::clone(batch.column(0))])?;
        let before: BooleanArray = (0..batch.num_rows()).map(|i| Some(keys.row(i) != last_key.row())).collect();
        d.add(&filter_record_batch(batch, &before)?, 0);
    }
    d.rows = batches.iter().map(|b| b.num_rows()).sum();
    Ok(d)
}

/// Runs `sql` (a `LIMIT` query when `limited`) in `case`'s session and drains the output
/// (digesting it when `digest`); for the cluster, then reads the job's stages and executed
/// plan.
async fn run_once(case: &Case, sql: &str, limited: bool, digest: bool, cluster: Option<&Cluster>) -> Result<Run, String> {
    let err = |e: datafusion::error::DataFusionError| format!("{}: {sql}: {e}", case.name);
    let t = Instant::now();
    let plan = case.ctx.sql(sql).await.map_err(err)?.create_physical_plan().await.map_err(err)?;
    let mut stream = datafusion::physical_plan::execute_stream(Arc::clone(&plan), case.ctx.task_ctx()).map_err(err)?;
    let (mut rows, mut d, mut kept) = (0, Digest::default(), vec![]);
    // The rows' order-free hash on rayon's threads, a batch a job, at most IN_FLIGHT
    // batches held (100M rows take a core minutes to hash; the time of a digesting run does
    // not count).
    const IN_FLIGHT: usize = 64;
    let (tx, hashes) = std::sync::mpsc::channel::<u64>();
    let mut in_flight = 0;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(err)?;
        rows += batch.num_rows();
        match (digest, limited) {
            (true, false) => {
                d.add_keys(&batch, 0);
                let tx = tx.clone();
                rayon::spawn(move || {
                    let _ = tx.send(digest::rows_hash(&batch));
                });
                in_flight += 1;
                while in_flight >= IN_FLIGHT {
                    d.rows_any_order = d.rows_any_order.wrapping_add(hashes.recv().map_err(|e| e.to_string())?);
                    in_flight -= 1;
                }
            }
            (true, true) => kept.push(batch),
            (false, _) => {}
        }
    }
    for _ in 0..in_flight {
        d.rows_any_order = d.rows_any_order.wrapping_add(hashes.recv().map_err(|e| e.to_string())?);
    }
    let time = t.elapsed();
    drop(stream);
    if digest && limited {
        d = digest_before_last_key(&kept).map_err(err)?;
    }
    let mut run = Run { time, rows, digest: d, stages: vec![], executed: String::new() };
    if case.place == Place::Cluster {
        let query = plan.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>().ok_or("a Ballista client plans a DistributedQueryExec")?;
        let job = query.job_id().ok_or("the query ran without a job id")?.to_string();
        run.executed = query.explain_executed_plan(&case.ctx.copied_config(), true).await.map_err(err)?;
        if let Some(c) = cluster {
            run.stages = stages::stages(&job, &c.executor_logs(), &run.executed).into_iter().collect();
            c.remove_job_data();
        }
    } else {
        run.executed = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
    }
    Ok(run)
}

/// Whether `run`'s plan shows the merge its case should have run: corank's node for a
/// corank case, none for a stock one.
fn check_merge(case: &Case, run: &Run) -> Result<(), String> {
    let has_corank = run.executed.contains("CoRankMergeExec") || run.executed.contains("CoRankSortExec");
    match (case.corank, has_corank) {
        (true, false) => Err(format!("{}: no corank node in the plan:\n{}", case.name, run.executed)),
        (false, true) => Err(format!("{}: a corank node in a stock plan:\n{}", case.name, run.executed)),
        _ => Ok(()),
    }
}

/// The medians of a case's timed runs: its time and each stage's span (in ms).
struct Measured {
    time: Duration,
    rows: usize,
    stages: Vec<(u32, stages::Stage)>,
    matches: Result<(), String>,
}

fn median<T: Copy + Ord>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

/// Every case once, digested and checked against the first, then `runs` rounds in turn
/// (`limited`: `sql` has a `LIMIT`).
fn measure(
    rt: &tokio::runtime::Runtime,
    cases: &[Case],
    sql: &str,
    limited: bool,
    runs: usize,
    cluster: Option<&Cluster>,
) -> Result<Vec<Measured>, String> {
    let mut warm = vec![];
    for case in cases {
        let run = rt.block_on(run_once(case, sql, limited, true, cluster))?;
        check_merge(case, &run)?;
        eprintln!("{:<48} warm-up {:>9.3} s, {} rows", case.name, run.time.as_secs_f64(), run.rows);
        if case.place == Place::Cluster {
            eprintln!("executed plan of {} ({sql}):\n{}\n", case.name, run.executed);
        }
        warm.push(run);
    }
    let base = warm[0].digest;
    let matches: Vec<Result<(), String>> = warm
        .iter()
        .zip(cases)
        .map(|(w, c)| match w.digest {
            d if d == base => Ok(()),
            d if (d.rows, d.rows_any_order) != (base.rows, base.rows_any_order) => {
                Err(format!("{}: not the rows of {} ({} rows against {})", c.name, cases[0].name, d.rows, base.rows))
            }
            _ => Err(format!("{}: keys not in the order of {}", c.name, cases[0].name)),
        })
        .collect();
    let mut samples: Vec<Vec<Run>> = (0..cases.len()).map(|_| vec![]).collect();
    for r in 0..runs {
        let order: Vec<usize> = if r.is_multiple_of(2) { (0..cases.len()).collect() } else { (0..cases.len()).rev().collect() };
        for c in order {
            let run = rt.block_on(run_once(&cases[c], sql, limited, false, cluster))?;
            if run.rows != warm[c].rows {
                return Err(format!("{}: {} rows, the warm-up run had {}", cases[c].name, run.rows, warm[c].rows));
            }
            samples[c].push(run);
        }
    }
    Ok(samples
        .into_iter()
        .zip(warm)
        .zip(matches)
        .map(|((runs, w), matches)| {
            let time = median(runs.iter().map(|r| r.time).collect());
            // Each stage's median span over the runs (the stage ids of the first run).
            let stages = runs[0]
                .stages
                .iter()
                .map(|(id, s)| {
                    let spans: Vec<u64> =
                        runs.iter().filter_map(|r| r.stages.iter().find(|(i, _)| i == id)).map(|(_, s)| s.span_ms).collect();
                    (*id, stages::Stage { span_ms: median(spans), ..s.clone() })
                })
                .collect();
            Measured { time, rows: w.rows, stages, matches }
        })
        .collect())
}

/// The files of the dataset, made unless an earlier run (of this bench or `benches/cli`)
/// left them complete.
fn dataset(dir: &Path, files: usize, rows: usize) -> Result<Vec<PathBuf>, String> {
    let data = dir.join(format!("lineitem-{files}x{rows}"));
    let done = data.join(".complete");
    if !done.exists() {
        let t = Instant::now();
        datagen::write_dataset(&data, datagen::Dataset::Lineitem, files, rows / files, 1 << 17, 42).map_err(|e| e.to_string())?;
        std::fs::write(&done, b"").map_err(|e| format!("{}: {e}", done.display()))?;
        eprintln!("generated {} in {:.1?}", data.display(), t.elapsed());
    }
    Ok((0..files).map(|f| data.join(format!("part-{f:02}.parquet"))).collect())
}

/// The client sessions of every case, each with the table declared.
fn cases(
    rt: &tokio::runtime::Runtime,
    args: &Args,
    engines: &[String],
    table: &Path,
    cluster: Option<&Cluster>,
) -> Result<Vec<Case>, String> {
    let config = || SessionConfig::new().with_target_partitions(args.files).with_repartition_file_scans(false);
    let ddl = format!(
        "CREATE EXTERNAL TABLE lineitem STORED AS PARQUET LOCATION '{}/' WITH ORDER ({} ASC NULLS LAST)",
        table.display(),
        datagen::LINEITEM_KEY
    );
    let setup = |ctx: &SessionContext, settings: &[String]| -> Result<(), String> {
        for sql in std::iter::once(&ddl).chain(settings) {
            rt.block_on(async { ctx.sql(sql).await?.collect().await }).map_err(|e| format!("{sql}: {e}"))?;
        }
        Ok(())
    };
    let engine = |e: &String| vec![format!("SET corank.engine = '{e}'")];
    let mut out = vec![];
    let stock = SessionContext::new_with_config(config());
    setup(&stock, &[])?;
    out.push(Case { name: "stock DataFusion, one process".into(), ctx: stock, place: Place::OneProcess, corank: false });
    for e in engines {
        let ctx = corank::datafusion::session_context(config());
        setup(&ctx, &engine(e))?;
        out.push(Case { name: format!("corank {e}, one process"), ctx, place: Place::OneProcess, corank: true });
    }
    if let Some(c) = cluster {
        let url = format!("df://127.0.0.1:{}", c.port);
        let remote = || -> Result<SessionContext, String> {
            let state =
                corank::datafusion::ballista::session_state(corank::datafusion::with_corank_config(config())).map_err(|e| e.to_string())?;
            rt.block_on(SessionContext::remote_with_state(&url, state)).map_err(|e| format!("{url}: {e}"))
        };
        let n = args.executors;
        let stock = remote()?;
        setup(&stock, &["SET corank.enabled = false".to_string()])?;
        out.push(Case { name: format!("stock Ballista, {n} executors"), ctx: stock, place: Place::Cluster, corank: false });
        for e in engines {
            let ctx = remote()?;
            setup(&ctx, &engine(e))?;
            out.push(Case { name: format!("corank {e}, Ballista, {n} executors"), ctx, place: Place::Cluster, corank: true });
        }
    }
    Ok(out)
}

/// The table's lines for one query.
fn table(lines: &mut Vec<String>, cases: &[Case], measured: &[Measured]) {
    let base = measured[0].time.as_secs_f64();
    for (case, m) in cases.iter().zip(measured) {
        let secs = m.time.as_secs_f64();
        let (shown, ratio) = match &m.matches {
            Ok(()) => (format!("{secs:.3}"), format!("{:.2}x", base / secs)),
            Err(_) => ("no time".to_string(), "output differs".to_string()),
        };
        let in_stages: u64 = m.stages.iter().map(|(_, s)| s.span_ms).sum();
        let stages = m
            .stages
            .iter()
            .map(|(id, s)| {
                format!("stage {id}: {:.3} s, {} task(s) on {} executor(s) [{}]", s.span_ms as f64 / 1e3, s.tasks, s.executors, s.operators)
            })
            .collect::<Vec<_>>();
        let rest = if case.place == Place::Cluster { format!("{:.3}", secs - in_stages as f64 / 1e3) } else { "-".into() };
        lines.push(format!(
            "| {} | {} | {shown} | {ratio} | {rest} | {} |",
            case.name,
            m.rows,
            if stages.is_empty() { "-".into() } else { stages.join("; ") }
        ));
    }
}

fn run(args: &Args) -> Result<bool, String> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let engines: Vec<String> = match args.engines.is_empty() {
        false => args.engines.clone(),
        true if corank::gpu_availability().is_ok() => vec!["cpu".into(), "gpu".into()],
        true => vec!["cpu".into()],
    };
    if args.files == 0 || args.rows < args.files {
        return Err("the bench needs at least one file and a row per file".into());
    }
    std::fs::create_dir_all(&args.dir).map_err(|e| format!("{}: {e}", args.dir.display()))?;
    let dir = args.dir.canonicalize().map_err(|e| format!("{}: {e}", args.dir.display()))?;
    processes::remove_leftovers(&dir);
    let files = dataset(&dir, args.files, args.rows)?;
    let table_dir = files[0].parent().ok_or("the dataset's folder")?.to_path_buf();
    let bytes: u64 = files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    if args.data_only {
        println!("{}: {} files, {:.1} MiB", table_dir.display(), files.len(), bytes as f64 / (1 << 20) as f64);
        return Ok(true);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let vcores = args.vcores.unwrap_or((cores / 2).max(1));
    // The processes are started from this (the main) thread: their PR_SET_PDEATHSIG is tied
    // to the thread that started them.
    let cluster = match args.no_cluster {
        true => None,
        false => {
            let binary =
                std::env::var_os("CORANK_BENCH_BALLISTA").map_or(PathBuf::from(env!("CARGO_BIN_EXE_corank-ballista")), PathBuf::from);
            Some(Cluster::start(&binary, &dir, args.executors, vcores)?)
        }
    };
    let cases = cases(&rt, args, &engines, &table_dir, cluster.as_ref())?;
    let key = datagen::LINEITEM_KEY;
    let mut queries = vec![format!("SELECT * FROM lineitem ORDER BY {key} ASC NULLS LAST")];
    if args.limit > 0 {
        queries.push(format!("{} LIMIT {}", queries[0], args.limit));
    }
    let header = "| case | rows | seconds (median) | vs stock, one process | cluster: rest (planning, scheduling, fetch) | cluster: stages (span, median) |";
    let mut lines = vec![];
    let mut all_match = true;
    for (q, sql) in queries.iter().enumerate() {
        let measured = measure(&rt, &cases, sql, q > 0, args.runs.max(1), cluster.as_ref())?;
        for m in &measured {
            if let Err(e) = &m.matches {
                eprintln!("output differs: {e}");
                all_match = false;
            }
        }
        lines.push(format!("\n`{sql}`\n\n{header}\n|---|---:|---:|---:|---:|---|"));
        table(&mut lines, &cases, &measured);
    }
    drop(cluster);
    let shown_cluster = match args.no_cluster {
        true => "no cluster".to_string(),
        false => format!("cluster: 1 scheduler + {} executors x {vcores} vcores on 127.0.0.1", args.executors),
    };
    println!(
        "{} rows in {} sorted lineitem files ({:.1} MiB, zstd); {cores} cores; {shown_cluster}; runs: {} (medians); engines: {}",
        args.rows / args.files * args.files,
        args.files,
        bytes as f64 / (1 << 20) as f64,
        args.runs.max(1),
        engines.join(",")
    );
    println!("{}", lines.join("\n"));
    Ok(all_match)
}

fn main() -> std::process::ExitCode {
    // `cargo bench` passes `--bench` to every bench target; the bench has no use for it.
    let args = Args::parse_from(std::env::args_os().filter(|a| a != "--bench"));
    match run(&args) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("cargo bench --bench cluster: outputs differ (the table says where)");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cargo bench --bench cluster: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! corank in Apache Ballista: an in-process scheduler and executor (Ballista's standalone
//! mode) with corank's session (`corank::datafusion::ballista`) run `SELECT … ORDER BY`, with
//! and without `LIMIT`, over sorted Parquet files and over files whose row groups are each
//! sorted. The rows equal the oracle (the stable sort of the inputs in file and row-group
//! order), and the plan the executors ran, with their metrics, shows that corank's merge
//! produced them there.
//!
//! The default engine in CI (no GPU there: the CPU); with `CORANK_REQUIRE_GPU=1` (the GPU
//! machine) the GPU engine, where rounds after the first must merge on the GPU.

use crate::common::{oracle, sorted_run, Rng};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use ballista_core::execution_plans::DistributedQueryExec;
use datafusion::prelude::*;
use datafusion_proto::protobuf::LogicalPlanNode;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;
use std::path::Path;

pub(crate) const KEY_TYPES: [DataType; 2] = [DataType::Int32, DataType::Utf8];

/// Writes `runs` as one file, each run a row group (or, with `row_groups_per_run`, the run
/// cut into that many row groups), every row group saying it is sorted by (k0, k1).
pub(crate) fn write_file(path: &Path, runs: &[RecordBatch], options: &[SortOptions], row_groups_per_run: usize) {
    let sorting = options.iter().enumerate().map(|(i, o)| SortingColumn {
        column_idx: i as i32,
        descending: o.descending,
        nulls_first: o.nulls_first,
    });
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

/// The `ORDER BY` list for (k0, k1) in `options`.
pub(crate) fn order_by(options: &[SortOptions]) -> String {
    let one = |i: usize, o: &SortOptions| {
        format!("k{i} {} NULLS {}", if o.descending { "DESC" } else { "ASC" }, if o.nulls_first { "FIRST" } else { "LAST" })
    };
    options.iter().enumerate().map(|(i, o)| one(i, o)).collect::<Vec<_>>().join(", ")
}

/// A table of sorted inputs under `dir`: `files` files, each holding `runs_per_file` sorted
/// runs (as row groups). With one run per file the files are sorted; with more, only their
/// row groups are. Returns the runs in file and row-group order (ids number them so).
pub(crate) fn write_table(dir: &Path, rng: &mut Rng, files: usize, runs_per_file: usize, options: &[SortOptions]) -> Vec<RecordBatch> {
    std::fs::create_dir_all(dir).unwrap();
    let mut all = vec![];
    let mut id = 0;
    for f in 0..files {
        let runs: Vec<RecordBatch> = (0..runs_per_file)
            .map(|_| {
                let n = 1 + rng.below(600) as usize;
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

pub(crate) fn ids(batches: &[RecordBatch]) -> Vec<u64> {
    batches.iter().flat_map(|b| b.column_by_name("id").unwrap().as_any().downcast_ref::<UInt64Array>().unwrap().values().to_vec()).collect()
}

/// The metric `name` of the first line of `plan` that names `node`, as Ballista renders the
/// executed plan (one section per stage, metrics on each line, counts human-readable: "1.77 K").
pub(crate) fn metric<'a>(plan: &'a str, node: &str, name: &str) -> Option<&'a str> {
    let line = plan.lines().find(|l| l.trim_start().starts_with(&format!("{node}:")))?;
    let at = [format!("[{name}="), format!(" {name}=")].iter().find_map(|m| line.find(m.as_str()))? + name.len() + 2;
    line[at..].split([',', ']']).next()
}

/// Runs `sql` on the cluster; returns the ids in output order and the executed plan.
async fn run(ctx: &SessionContext, sql: &str) -> (Vec<u64>, String) {
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let batches = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx()).await.unwrap();
    let query = plan.downcast_ref::<DistributedQueryExec<LogicalPlanNode>>().expect("a Ballista context plans a DistributedQueryExec");
    let executed = query.explain_executed_plan(&ctx.copied_config(), true).await.unwrap();
    (ids(&batches), executed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_by_merges_with_corank_in_the_executor() {
    let gpu = std::env::var("CORANK_REQUIRE_GPU").as_deref() == Ok("1");
    // More target partitions than files and no byte-range splitting of files: each file is a
    // partition of its own, in file order, so ties come out in file order (the oracle's). A
    // partition of two overlapping files would be sorted instead, and split files may be
    // regrouped; either way ties would follow an order DataFusion chose.
    let session = SessionConfig::new().with_target_partitions(8).with_repartition_file_scans(false);
    let mut config = corank::datafusion::with_corank_config(session);
    if gpu {
        // Rounds after the first merge on the GPU; with engine 'gpu' a GPU failure is an error
        // (no CPU fallback).
        config = config.set_str("corank.engine", "gpu");
    }
    let ctx = corank::datafusion::ballista::standalone(config).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(55);
    let asc = [SortOptions { descending: false, nulls_first: false }, SortOptions { descending: false, nulls_first: true }];
    let desc = [SortOptions { descending: true, nulls_first: true }, SortOptions { descending: false, nulls_first: false }];
    // Sorted files (one run each, in 3 row groups), and files of 4 overlapping sorted row
    // groups each (the rule splits them into row-group runs).
    let tables = [("sorted_files", 5, 1, asc), ("sorted_row_groups", 3, 4, desc)];
    for (name, files, runs_per_file, options) in tables {
        let runs = write_table(&dir.path().join(name), &mut rng, files, runs_per_file, &options);
        let by = order_by(&options);
        let ddl =
            format!("CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}/' WITH ORDER ({by})", dir.path().join(name).display());
        ctx.sql(&ddl).await.unwrap();
        let keys: Vec<(String, SortOptions)> = options.iter().enumerate().map(|(i, o)| (format!("k{i}"), *o)).collect();
        let expected: Vec<u64> = oracle(&runs, &keys).into_iter().map(|i| i as u64).collect();

        for limit in [None, Some(25)] {
            let sql = format!("SELECT * FROM {name} ORDER BY {by}{}", limit.map(|l| format!(" LIMIT {l}")).unwrap_or_default());
            let (got, executed) = run(&ctx, &sql).await;
            let want = &expected[..limit.unwrap_or(expected.len()).min(expected.len())];
            assert_eq!(got, want, "{sql}: rows differ from the oracle\n{executed}");
            // corank's merge ran in the executor and produced every row; no stock merge ran.
            let rows = datafusion::common::human_readable_count(want.len());
            assert_eq!(metric(&executed, "CoRankMergeExec", "output_rows"), Some(rows.as_str()), "{sql}\n{executed}");
            // The node's first round (about one batch) merges on the CPU for the first batch's
            // latency; a LIMIT 25 is all first round.
            if gpu && limit.is_none() {
                let rounds = metric(&executed, "CoRankMergeExec", "rounds_gpu");
                assert!(rounds.is_some_and(|r| r != "0"), "{sql}: no round merged on the GPU\n{executed}");
            }
            assert!(!executed.contains("SortPreservingMergeExec"), "{sql}: a stock merge ran\n{executed}");
            assert!(!executed.contains("SortExec"), "{sql}: sorted inputs were sorted again\n{executed}");
        }
    }
}

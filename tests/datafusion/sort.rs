//! `CoRankSortExec`: SQL `ORDER BY` over unsorted data (in-memory tables and Parquet files,
//! several partitions) runs through it instead of `SortExec` + `SortPreservingMergeExec`.
//!
//! Checks: the plan holds the node and no `SortExec`; the output is sorted by the keys and
//! is the same multiset of rows as stock DataFusion's; the node's output equals, row for
//! row, the stable sort of its input partitions concatenated in partition order (captured
//! once, so that the comparison is deterministic); `LIMIT` keeps DataFusion's TopK; spills
//! forced by a small memory pool give the same rows and count in the spill metric; no disk
//! manager is a `ResourcesExhausted` error; `corank.sort = false` restores `SortExec`; the
//! codec ships the node; dropping the stream frees its memory.

use crate::common::{in_memory_key_types, random_array, Rng};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::*;
use arrow::row::{RowConverter, SortField};
use corank::datafusion::{session_context, CoRankCodec, CoRankSortExec, MergeSettings};
use corank::{Engine, EngineOptions};
use datafusion::common::DataFusionError;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::MemTable;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::{collect, collect_partitioned, displayable, ExecutionPlan};
use datafusion::prelude::*;
use datafusion_proto::bytes::{physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec};
use futures::StreamExt;
use std::sync::Arc;

fn count_nodes(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    (plan.name() == name) as usize + plan.children().iter().map(|c| count_nodes(c, name)).sum::<usize>()
}

fn find_sort(plan: &Arc<dyn ExecutionPlan>) -> Option<&CoRankSortExec> {
    plan.downcast_ref::<CoRankSortExec>().or_else(|| plan.children().into_iter().find_map(find_sort))
}

pub(crate) fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(schema, batches).unwrap()
}

/// The stable sort of `parts` (concatenated in partition order) by `expr`.
pub(crate) fn stable_oracle(parts: &[Vec<RecordBatch>], expr: &LexOrdering, schema: &SchemaRef) -> RecordBatch {
    let flat: Vec<RecordBatch> = parts.iter().flatten().cloned().collect();
    let all = concat(schema, &flat);
    let rows = key_rows(&all, expr);
    let mut idx: Vec<usize> = (0..rows.num_rows()).collect();
    idx.sort_by(|&x, &y| rows.row(x).cmp(&rows.row(y))); // stable
    let take = UInt32Array::from_iter_values(idx.iter().map(|&i| i as u32));
    arrow::compute::take_record_batch(&all, &take).unwrap()
}

/// `batch`'s sort keys as arrow rows (the order's reference).
fn key_rows(batch: &RecordBatch, expr: &LexOrdering) -> arrow::row::Rows {
    let schema = batch.schema();
    let cols: Vec<ArrayRef> = expr.iter().map(|e| e.expr.evaluate(batch).unwrap().into_array(batch.num_rows()).unwrap()).collect();
    let fields = expr.iter().map(|e| SortField::new_with_options(e.expr.data_type(&schema).unwrap(), e.options)).collect();
    RowConverter::new(fields).unwrap().convert_columns(&cols).unwrap()
}

/// Every row's values as arrow-row bytes, sorted: equal for the same rows in any order.
fn multiset(batch: &RecordBatch) -> Vec<Vec<u8>> {
    let fields = batch.schema().fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    let rows = RowConverter::new(fields).unwrap().convert_columns(batch.columns()).unwrap();
    let mut v: Vec<Vec<u8>> = rows.iter().map(|r| r.as_ref().to_vec()).collect();
    v.sort();
    v
}

fn assert_sorted(batch: &RecordBatch, expr: &LexOrdering, what: &str) {
    let rows = key_rows(batch, expr);
    for i in 1..rows.num_rows() {
        assert!(rows.row(i - 1) <= rows.row(i), "{what}: row {i} sorts before row {}", i - 1);
    }
}

fn sql_order(col: &str, o: SortOptions) -> String {
    format!("{col} {} NULLS {}", if o.descending { "DESC" } else { "ASC" }, if o.nulls_first { "FIRST" } else { "LAST" })
}

/// Unsorted partitions: key `k1` of type `dt`, `k2` (Int64, few values: many ties), `id`; in
/// batches of `batch` rows, each with its own buffers (no slices, whose memory DataFusion
/// counts at their whole buffers').
pub(crate) fn partitions(rng: &mut Rng, dt: &DataType, sizes: &[usize], batch: usize, null_p: f64) -> Vec<Vec<RecordBatch>> {
    let mut id = 0i64;
    sizes
        .iter()
        .map(|&n| {
            (0..n)
                .step_by(batch.max(1))
                .map(|s| {
                    let m = batch.min(n - s);
                    let k1 = random_array(rng, dt, m, 40, null_p);
                    let k2 = random_array(rng, &DataType::Int64, m, 5, null_p);
                    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(id..id + m as i64));
                    id += m as i64;
                    RecordBatch::try_from_iter([("k1", k1), ("k2", k2), ("id", ids)]).unwrap()
                })
                .collect()
        })
        .collect()
}

/// Runs `sql` on `ctx` (corank) and on `stock`; checks the plan, sortedness, the multiset
/// against stock, and that the node's output is the stable sort of its captured input
/// partitions. Returns the output.
async fn check(ctx: &SessionContext, stock: &SessionContext, sql: &str) -> RecordBatch {
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let text = displayable(plan.as_ref()).indent(true).to_string();
    assert_eq!(count_nodes(&plan, "CoRankSortExec"), 1, "{sql}\n{text}");
    assert_eq!(count_nodes(&plan, "SortExec") + count_nodes(&plan, "SortPreservingMergeExec"), 0, "{sql}\n{text}");
    let schema = plan.schema();
    let ours = concat(&schema, &collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap());
    let theirs = stock.sql(sql).await.unwrap().collect().await.unwrap();
    let theirs = concat(&schema, &theirs);
    assert_eq!(ours.num_rows(), theirs.num_rows(), "{sql}");
    assert!(multiset(&ours) == multiset(&theirs), "{sql}: not the rows of stock DataFusion\n{text}");
    let sort = find_sort(&plan).unwrap();
    assert_sorted(&ours, sort.expr(), sql);
    // The contract, exactly: the stable sort of the input partitions in partition order.
    let parts = collect_partitioned(Arc::clone(sort.input()), ctx.task_ctx()).await.unwrap();
    let in_schema = sort.input().schema();
    let source = MemorySourceConfig::try_new_exec(&parts, Arc::clone(&in_schema), None).unwrap();
    for chunk_rows in [usize::MAX, 97] {
        let node =
            CoRankSortExec::new(sort.expr().clone(), source.clone()).with_settings(sort.settings().clone()).with_chunk_rows(chunk_rows);
        let got = concat(&in_schema, &collect(Arc::new(node), ctx.task_ctx()).await.unwrap());
        assert!(got == stable_oracle(&parts, sort.expr(), &in_schema), "{sql}: chunks of {chunk_rows}: not the stable sort\n{text}");
    }
    ours
}

pub(crate) fn config(partitions: usize, batch: usize) -> SessionConfig {
    SessionConfig::new().with_target_partitions(partitions).with_batch_size(batch)
}

async fn register(ctx: &SessionContext, parts: &[Vec<RecordBatch>]) {
    let schema = parts.iter().flatten().next().unwrap().schema();
    let table = MemTable::try_new(schema, parts.to_vec()).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
}

/// Every key type the merge supports, ASC/DESC, nulls first/last, one and two columns,
/// with and without LIMIT, over 4 unsorted in-memory partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_every_key_type_in_memory() {
    let mut rng = Rng::new(5);
    for (case, dt) in in_memory_key_types().iter().enumerate() {
        let sizes: Vec<usize> = (0..4).map(|p| if case % 7 == p { 0 } else { rng.below(700) as usize }).collect();
        let batch = 1 + rng.below(300) as usize;
        let parts = partitions(&mut rng, dt, &sizes, batch, [0.0, 0.2][case % 2]);
        let ctx = session_context(config(4, 256));
        let stock = SessionContext::new_with_config(config(4, 256));
        register(&ctx, &parts).await;
        register(&stock, &parts).await;
        let o1 = rng.sort_options();
        let o2 = rng.sort_options();
        let one = format!("SELECT * FROM t ORDER BY {}", sql_order("k1", o1));
        let two = format!("SELECT * FROM t ORDER BY {}, {}", sql_order("k1", o1), sql_order("k2", o2));
        let out = check(&ctx, &stock, &one).await;
        assert_eq!(out.num_rows(), sizes.iter().sum::<usize>(), "{dt}");
        check(&ctx, &stock, &two).await;
        check(&ctx, &stock, &format!("SELECT k2, id FROM t ORDER BY {}, id DESC", sql_order("k2", o2))).await;

        // LIMIT: DataFusion's TopK stays; the top rows' keys are those of stock.
        let limited = format!("{two} LIMIT 25");
        let plan = ctx.sql(&limited).await.unwrap().create_physical_plan().await.unwrap();
        let text = displayable(plan.as_ref()).indent(true).to_string();
        assert!(count_nodes(&plan, "CoRankSortExec") == 0 && text.contains("TopK(fetch=25)"), "{text}");
        let schema = plan.schema();
        let ours = concat(&schema, &collect(plan, ctx.task_ctx()).await.unwrap());
        let theirs = concat(&schema, &stock.sql(&limited).await.unwrap().collect().await.unwrap());
        assert_eq!(ours.num_rows(), theirs.num_rows());
        let keys = ["k1", "k2"].map(|c| ours.schema().index_of(c).unwrap());
        assert!(ours.project(&keys).unwrap() == theirs.project(&keys).unwrap(), "{limited}: other keys than stock");
    }
}

/// Unsorted Parquet files read in 4 partitions (byte ranges of files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_over_unsorted_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(9);
    let types = [DataType::Int64, DataType::Utf8, DataType::Float64, DataType::Date32, DataType::Int32];
    for (f, dt) in types.iter().enumerate() {
        let sub = dir.path().join(format!("t{f}"));
        std::fs::create_dir(&sub).unwrap();
        let parts = partitions(&mut rng, dt, &[3000, 1, 0, 2500, 700], 4096, 0.1);
        for (i, part) in parts.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            let file = std::fs::File::create(sub.join(format!("part-{i}.parquet"))).unwrap();
            let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(500)).build();
            let mut w = parquet::arrow::ArrowWriter::try_new(file, part[0].schema(), Some(props)).unwrap();
            for b in part {
                w.write(b).unwrap();
            }
            w.close().unwrap();
        }
        let ctx = session_context(config(4, 1000));
        let stock = SessionContext::new_with_config(config(4, 1000));
        for c in [&ctx, &stock] {
            c.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}'", sub.display())).await.unwrap();
        }
        let o = SortOptions { descending: f % 2 == 1, nulls_first: f % 3 == 0 };
        let out = check(&ctx, &stock, &format!("SELECT * FROM t ORDER BY {}, k2", sql_order("k1", o))).await;
        assert_eq!(out.num_rows(), 6201);
        check(&ctx, &stock, &format!("SELECT id, k1 FROM t WHERE k2 IS NOT NULL ORDER BY {}, id", sql_order("k1", o))).await;
    }
}

/// One partition (target_partitions 1): a plain `SortExec` is replaced too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partition_sort_is_replaced() {
    let mut rng = Rng::new(21);
    let parts = partitions(&mut rng, &DataType::Int64, &[5000], 333, 0.1);
    let ctx = session_context(config(1, 512));
    let stock = SessionContext::new_with_config(config(1, 512));
    register(&ctx, &parts).await;
    register(&stock, &parts).await;
    let out = check(&ctx, &stock, "SELECT * FROM t ORDER BY k1 DESC NULLS LAST, k2").await;
    // One partition: the output is exactly the stable sort of the table.
    let schema = out.schema();
    let expr = LexOrdering::new([
        PhysicalSortExpr::new(col("k1", &schema).unwrap(), SortOptions { descending: true, nulls_first: false }),
        PhysicalSortExpr::new(col("k2", &schema).unwrap(), SortOptions { descending: false, nulls_first: false }),
    ])
    .unwrap();
    assert!(out == stable_oracle(&parts, &expr, &schema));
}

fn sort_node(parts: &[Vec<RecordBatch>], chunk_rows: usize) -> (Arc<dyn ExecutionPlan>, LexOrdering) {
    let schema = parts.iter().flatten().next().unwrap().schema();
    let source = MemorySourceConfig::try_new_exec(parts, Arc::clone(&schema), None).unwrap();
    let expr = LexOrdering::new([PhysicalSortExpr::new(col("k1", &schema).unwrap(), SortOptions::default())]).unwrap();
    let settings = MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu), window_rows: 1 << 20 };
    (Arc::new(CoRankSortExec::new(expr.clone(), source).with_settings(settings).with_chunk_rows(chunk_rows)), expr)
}

/// A metric of `plan` summed over partitions (`sum_by_name` skips the built-in ones).
pub(crate) fn metric(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let m = plan.metrics().unwrap();
    match name {
        "output_rows" => m.output_rows(),
        "spill_count" => m.spill_count(),
        "spilled_bytes" => m.spilled_bytes(),
        "output_batches" => m.sum(|m| matches!(m.value(), MetricValue::OutputBatches(_))).map(|v| v.as_usize()),
        "output_bytes" => m.sum(|m| matches!(m.value(), MetricValue::OutputBytes(_))).map(|v| v.as_usize()),
        _ => m.sum_by_name(name).map(|v| v.as_usize()),
    }
    .unwrap_or(0)
}

/// Batches sliced from one array (an in-memory table) are cut into chunks by the bytes of
/// their rows, not by their memory size, which counts the whole array for every slice: 2M
/// rows in batches of 8192 sliced from one 16 MB array make 2 chunks of 1M rows, not 16 of
/// 128K (256 MB of memory size each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliced_batches_are_chunked_by_their_rows() {
    let n = 2usize << 20;
    let k: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| (i * 7919) % 1_000_003)));
    let whole = RecordBatch::try_from_iter([("k1", k)]).unwrap();
    let parts = vec![(0..n).step_by(8192).map(|s| whole.slice(s, 8192)).collect::<Vec<_>>()];
    let schema = whole.schema();
    let (plan, expr) = sort_node(&parts, 1 << 20);
    let task = SessionStateBuilder::new().with_config(config(1, 8192)).build().task_ctx();
    let out = concat(&schema, &collect(Arc::clone(&plan), task).await.unwrap());
    assert_eq!(metric(&plan, "runs"), 2);
    // No run sorted on a device where there is none (CI's machine).
    if corank::gpu_availability().is_err() {
        assert_eq!(metric(&plan, "runs_gpu"), 0);
    }
    assert!(out == stable_oracle(&parts, &expr, &schema), "not the stable sort");
}

/// A memory pool too small for the data: runs spill (metric > 0) and the output is the same,
/// row for row, as without spilling; without a disk manager it is `ResourcesExhausted`.
///
/// About 8 MB of input in 2 partitions, a 4 MB pool, chunks as large as a partition: the runs
/// are the spills' (a few per partition). The merge of all runs holds a batch or two of each
/// (batches of 256 rows; a batch read back from a spill file is counted at its whole IPC
/// message per column), which stays well inside the pool for that number of runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spills_under_a_small_memory_pool() {
    let mut rng = Rng::new(33);
    let parts = partitions(&mut rng, &DataType::Utf8, &[100_000, 100_000], 1024, 0.05);
    let schema = parts[0][0].schema();
    let task = |runtime: Option<Arc<datafusion::execution::runtime_env::RuntimeEnv>>| {
        let state = SessionStateBuilder::new().with_config(config(2, 256));
        let state = match runtime {
            Some(r) => state.with_runtime_env(r),
            None => state,
        };
        state.build().task_ctx()
    };
    let (plan, expr) = sort_node(&parts, 10_000);
    let free = concat(&schema, &collect(Arc::clone(&plan), task(None)).await.unwrap());
    assert_eq!(metric(&plan, "spill_count"), 0);
    assert!(metric(&plan, "runs") >= 20, "{}", metric(&plan, "runs"));
    assert!(free == stable_oracle(&parts, &expr, &schema));

    let pool = || RuntimeEnvBuilder::new().with_memory_limit(4 << 20, 1.0).build_arc().unwrap();
    let (plan, _) = sort_node(&parts, usize::MAX);
    let spilled = concat(&schema, &collect(Arc::clone(&plan), task(Some(pool()))).await.unwrap());
    assert!(metric(&plan, "spill_count") > 0 && metric(&plan, "spilled_bytes") > 0, "no spill");
    assert!(spilled == free, "spilling changed the output");

    // Through SQL: the same rows as stock.
    let ctx = session_context(config(2, 256));
    let ctx = SessionContext::new_with_state(SessionStateBuilder::new_from_existing(ctx.state()).with_runtime_env(pool()).build());
    register(&ctx, &parts).await;
    let sql = "SELECT * FROM t ORDER BY k1 DESC, id";
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    assert_eq!(count_nodes(&plan, "CoRankSortExec"), 1);
    let ours = concat(&schema, &collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap());
    assert!(metric(find_sort_arc(&plan).unwrap(), "spill_count") > 0, "no spill through SQL");
    let stock = SessionContext::new_with_config(config(2, 256));
    register(&stock, &parts).await;
    let theirs = concat(&schema, &stock.sql(sql).await.unwrap().collect().await.unwrap());
    assert!(ours == theirs, "{sql}: not stock's output (keys are unique with id)");

    // No disk manager: the pool's error, not a wrong answer.
    let no_disk = RuntimeEnvBuilder::new()
        .with_memory_limit(4 << 20, 1.0)
        .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled))
        .build_arc()
        .unwrap();
    let (plan, _) = sort_node(&parts, usize::MAX);
    let err = collect(plan, task(Some(no_disk))).await.unwrap_err();
    assert!(matches!(err.find_root(), DataFusionError::ResourcesExhausted(_)), "{err:?}");
    assert!(err.to_string().contains("disk manager is disabled"), "{err}");
}

fn find_sort_arc(plan: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    if plan.name() == "CoRankSortExec" {
        return Some(plan);
    }
    plan.children().into_iter().find_map(find_sort_arc)
}

/// Chunk sizes, empty input, one row: always the stable sort; EXPLAIN and the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_edges_explain_and_setting() {
    let mut rng = Rng::new(44);
    let ctx = SessionContext::new_with_config(config(4, 100)).task_ctx();
    for sizes in [vec![0, 0], vec![1], vec![0, 1, 0], vec![999, 1000, 1001], vec![4096, 1, 4095]] {
        let parts = partitions(&mut rng, &DataType::Int32, &sizes, 100, 0.1);
        if parts.iter().all(|p| p.is_empty()) {
            let schema = Arc::new(Schema::new(vec![Field::new("k1", DataType::Int32, true)]));
            let source = MemorySourceConfig::try_new_exec(&[vec![], vec![]], Arc::clone(&schema), None).unwrap();
            let expr = LexOrdering::new([PhysicalSortExpr::new(col("k1", &schema).unwrap(), SortOptions::default())]).unwrap();
            let out = collect(Arc::new(CoRankSortExec::new(expr, source)), Arc::clone(&ctx)).await.unwrap();
            assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
            continue;
        }
        let schema = parts.iter().flatten().next().unwrap().schema();
        for chunk in [1, 7, 1000, usize::MAX] {
            let (plan, expr) = sort_node(&parts, chunk);
            let sent = collect(Arc::clone(&plan), Arc::clone(&ctx)).await.unwrap();
            let out = concat(&schema, &sent);
            assert!(out == stable_oracle(&parts, &expr, &schema), "{sizes:?}, chunks of {chunk}");
            assert_eq!(metric(&plan, "output_rows"), sizes.iter().sum::<usize>());
            // Batches and bytes as sent: each batch's rows counted once (they are slices of
            // the runs' or the merge rounds' arrays, whose whole buffers are not counted again
            // for every batch).
            assert_eq!(metric(&plan, "output_batches"), sent.len(), "{sizes:?}, chunks of {chunk}");
            let bytes: usize = sent.iter().flat_map(|b| b.columns()).map(|c| c.to_data().get_slice_memory_size().unwrap()).sum();
            assert_eq!(metric(&plan, "output_bytes"), bytes, "{sizes:?}, chunks of {chunk}");
        }
    }

    let parts = partitions(&mut rng, &DataType::Int64, &[100, 100], 10, 0.0);
    let ctx = session_context(config(4, 100).with_information_schema(true));
    register(&ctx, &parts).await;
    let explain = |sql: &'static str| {
        let ctx = ctx.clone();
        async move {
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string()
        }
    };
    let text = explain("EXPLAIN SELECT * FROM t ORDER BY k1 DESC NULLS FIRST, k2").await;
    assert!(text.contains("CoRankSortExec: expr=[k1@0 DESC, k2@1 ASC NULLS LAST], engine=auto"), "{text}");
    let text = explain("EXPLAIN ANALYZE SELECT * FROM t ORDER BY k1").await;
    // The memory table is read in 4 partitions: 4 runs.
    assert!(text.contains("CoRankSortExec") && text.contains("output_rows=200") && text.contains("runs=4"), "{text}");
    // corank.sort_chunk_rows reaches the node: 4 partitions of 50 rows (batches of 10) in
    // chunks of 30 rows make 8 runs.
    ctx.sql("SET corank.sort_chunk_rows = 30").await.unwrap();
    let text = explain("EXPLAIN ANALYZE SELECT * FROM t ORDER BY k1").await;
    assert!(text.contains("chunk_rows=30") && text.contains("output_rows=200") && text.contains("runs=8"), "{text}");
    ctx.sql("SET corank.sort_chunk_rows = 1048576").await.unwrap();
    let shown = explain("SHOW corank.sort").await;
    assert!(shown.contains("corank.sort") && shown.contains("true"), "{shown}");
    ctx.sql("SET corank.sort = false").await.unwrap();
    let text = explain("EXPLAIN SELECT * FROM t ORDER BY k1").await;
    assert!(!text.contains("CoRankSortExec") && text.contains("SortExec"), "{text}");
    let err = ctx.sql("SET corank.sort = maybe").await.unwrap_err();
    assert!(err.to_string().contains("maybe"), "{err}");
}

/// The codec ships the node (version 5) with its settings and chunk size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codec_round_trip() {
    let mut rng = Rng::new(55);
    let parts = partitions(&mut rng, &DataType::Float64, &[300, 200], 64, 0.1);
    let schema = parts[0][0].schema();
    let source = MemorySourceConfig::try_new_exec(&parts, Arc::clone(&schema), None).unwrap();
    let expr = LexOrdering::new([
        PhysicalSortExpr::new(col("k1", &schema).unwrap(), SortOptions { descending: true, nulls_first: true }),
        PhysicalSortExpr::new(col("id", &schema).unwrap(), SortOptions::default()),
    ])
    .unwrap();
    let settings = MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu).with_gpu_min_rows(77), window_rows: 1234 };
    let node = CoRankSortExec::new(expr.clone(), source).with_settings(settings.clone()).with_chunk_rows(50);
    let plan: Arc<dyn ExecutionPlan> = Arc::new(node);
    let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &CoRankCodec).unwrap();
    let ctx = SessionContext::new();
    let back = physical_plan_from_bytes_with_extension_codec(&bytes, &ctx.task_ctx(), &CoRankCodec).unwrap();
    let sort = back.downcast_ref::<CoRankSortExec>().expect("a CoRankSortExec");
    assert_eq!((sort.settings(), sort.chunk_rows()), (&settings, 50));
    assert_eq!(sort.expr(), &expr);
    let a = concat(&schema, &collect(plan, ctx.task_ctx()).await.unwrap());
    let b = concat(&schema, &collect(back, ctx.task_ctx()).await.unwrap());
    assert!(a == b && a == stable_oracle(&parts, &expr, &schema));
}

/// Dropping the output stream stops the work and frees the node's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_frees_memory() {
    let mut rng = Rng::new(66);
    let parts = partitions(&mut rng, &DataType::Int64, &[20_000, 20_000, 20_000], 1000, 0.0);
    let runtime = RuntimeEnvBuilder::new().with_memory_limit(1 << 30, 1.0).build_arc().unwrap();
    let task = SessionStateBuilder::new().with_config(config(3, 1000)).with_runtime_env(Arc::clone(&runtime)).build().task_ctx();
    let (plan, _) = sort_node(&parts, 5000);
    let mut stream = plan.execute(0, task).unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    assert!(runtime.memory_pool.reserved() > 0);
    drop(stream);
    // The task is aborted on drop; its reservations go when it unwinds.
    for _ in 0..1000 {
        if runtime.memory_pool.reserved() == 0 {
            break;
        }
        tokio::task::spawn_blocking(|| std::thread::sleep(std::time::Duration::from_millis(10))).await.unwrap();
    }
    assert_eq!(runtime.memory_pool.reserved(), 0);
}

/// Many partitions sorted at once (several chunk sorts in flight), keys whose chunks encode
/// differently (nulls in some partitions only, strings longer than the key's prefix, so
/// ties are resolved by value across runs): the output is the stable sort of the partitions
/// in order, in memory (the runs merged by the merge task) at every chunk size, and the same
/// under a pool small enough to spill; the pool is empty afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_partitions_sorted_concurrently_stay_stable() {
    let mut rng = Rng::new(77);
    let mut id = 0i64;
    let parts: Vec<Vec<RecordBatch>> = (0..12)
        .map(|p| {
            let n = if p == 5 { 0 } else { 3000 + rng.below(6000) as usize };
            (0..n)
                .step_by(700)
                .map(|s| {
                    let m = 700.min(n - s);
                    // A 40-byte common prefix, then one of 25 values: many ties, inexact keys.
                    let k1: ArrayRef = Arc::new(StringArray::from_iter((0..m).map(|_| {
                        let null = p % 2 == 0 && rng.chance(0.05);
                        (!null).then(|| format!("{:x>40}{}", "", rng.below(25)))
                    })));
                    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(id..id + m as i64));
                    id += m as i64;
                    let k2: ArrayRef = Arc::new(Int64Array::from_iter_values((0..m).map(|_| rng.below(3) as i64)));
                    RecordBatch::try_from_iter([("k1", k1), ("k2", k2), ("id", ids)]).unwrap()
                })
                .collect()
        })
        .collect();
    let schema = parts[0][0].schema();
    let task = |runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>| {
        SessionStateBuilder::new().with_config(config(12, 256)).with_runtime_env(runtime).build().task_ctx()
    };
    for (chunk, limit) in [(usize::MAX, 1usize << 30), (2000, 1 << 30), (333, 1 << 30), (usize::MAX, 3 << 20)] {
        let runtime = RuntimeEnvBuilder::new().with_memory_limit(limit, 1.0).build_arc().unwrap();
        let (plan, expr) = sort_node(&parts, chunk);
        let out = concat(&schema, &collect(Arc::clone(&plan), task(Arc::clone(&runtime))).await.unwrap());
        assert!(out == stable_oracle(&parts, &expr, &schema), "chunks of {chunk}, pool of {limit}: not the stable sort");
        let spills = metric(&plan, "spill_count");
        assert!((limit < 1 << 30) == (spills > 0), "chunks of {chunk}, pool of {limit}: {spills} spills");
        // (The task's reservations go when it returns, which the drained stream waits for.)
        assert_eq!(runtime.memory_pool.reserved(), 0, "chunks of {chunk}, pool of {limit}: memory left reserved");
    }
}

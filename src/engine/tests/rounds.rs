//! A frontier round merged on the GPU gathers its fixed-width columns on the GPU too, where
//! the bytes say that pays (`gather_on_gpu_pays`), and its other columns on the CPU at the
//! same time: the batches must equal a CPU round's, column by column (values, validity,
//! batch boundaries), with a string column and a dictionary column beside the fixed ones.
//!
//! The node's rounds on the GPU (several merging at once, `GPU_ROUNDS_IN_FLIGHT`) must give
//! the CPU engine's output, row for row, in order.
//!
//! `CoRankSortExec` on the GPU (chunks sorted on the device, runs merged in GPU rounds, in
//! memory or spilled) must give the CPU engine's output, row for row.
//!
//! Without a GPU the tests skip (a line on stderr) unless `CORANK_REQUIRE_GPU=1`.

use super::support::{gpu_or_skip, small_only};
use arrow::array::{ArrayRef, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Int8Type};
use corank::datafusion::{CoRankMergeExec, CoRankSortExec, MergeSettings};
use corank::engine::gpu::gather_on_gpu_pays;
use corank::frontier::{FrontierMerge, FrontierOptions};
use corank::{Engine, EngineOptions, OnGpuFailure, SortKey};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionConfig;
use std::sync::Arc;

/// Run `r` of `k`: `rows` sorted u64 keys (many ties across runs) and payload columns.
fn run(r: u64, rows: usize) -> RecordBatch {
    let mut x = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(r + 1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut keys: Vec<u64> = (0..rows).map(|_| next() % (rows as u64 / 2)).collect();
    keys.sort_unstable();
    let n = rows as u64;
    let id: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..n).map(|i| (r << 40) | i)));
    let small: ArrayRef = Arc::new(Int32Array::from_iter((0..n).map(|i| (i % 7 != 3).then_some((i * 31 + r) as i32))));
    let price: ArrayRef = Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64 * 0.25 + r as f64)));
    let text: ArrayRef = Arc::new(StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("r{r}-{}", i % 1000)))));
    let flag: ArrayRef = Arc::new((0..n).map(|i| ["A", "N", "R"][(i % 3) as usize]).collect::<DictionaryArray<Int8Type>>());
    let key: ArrayRef = Arc::new(UInt64Array::from(keys));
    RecordBatch::try_from_iter([("k", key), ("id", id), ("small", small), ("price", price), ("text", text), ("flag", flag)]).unwrap()
}

/// All rows of `runs` merged in one frontier round with `engine`.
fn merge(runs: &[RecordBatch], engine: EngineOptions) -> (Vec<RecordBatch>, Engine) {
    let schema = runs[0].schema();
    let specs = vec![SortKey::new("k", SortOptions { descending: false, nulls_first: false })];
    let options = FrontierOptions { engine, window_rows: usize::MAX / 2, batch_size: 8192, check_sorted: false };
    let mut merger = FrontierMerge::new(schema, &[DataType::UInt64], specs, runs.len(), options).unwrap();
    for (i, batch) in runs.iter().enumerate() {
        merger.push(i, batch.clone(), vec![Arc::clone(batch.column(0))]).unwrap();
        merger.finish_input(i);
    }
    let chunk = merger.merge_round().unwrap();
    assert!(merger.is_finished());
    (chunk.batches, chunk.engine)
}

#[test]
fn a_gpu_round_gathers_fixed_columns_on_the_gpu_and_equals_a_cpu_round() {
    if !gpu_or_skip("a_gpu_round_gathers_fixed_columns_on_the_gpu_and_equals_a_cpu_round") {
        return;
    }
    let (k, rows) = (8u64, 1usize << 19); // 4M rows: 28 fixed bytes a row pays on the GPU
    assert!(gather_on_gpu_pays(k as usize * rows, 8 + 8 + 4 + 8, 4, 16), "the case must take the GPU gather");
    let runs: Vec<RecordBatch> = (0..k).map(|r| run(r, rows)).collect();
    let cpu = EngineOptions::default().with_engine(Engine::Cpu);
    let gpu = EngineOptions { engine: Engine::Gpu, on_gpu_failure: OnGpuFailure::Error, ..EngineOptions::default() };
    let (want, want_engine) = merge(&runs, cpu);
    let (got, got_engine) = merge(&runs, gpu);
    assert_eq!((want_engine, got_engine), (Engine::Cpu, Engine::Gpu));
    assert_eq!(got.len(), want.len(), "batch boundaries");
    for (b, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.schema(), w.schema(), "batch {b}");
        for c in 0..w.num_columns() {
            assert_eq!(g.column(c).to_data(), w.column(c).to_data(), "batch {b}, column {}", w.schema().field(c).name());
        }
    }
}

/// The node over `partitions` with `engine`: its output batches and how many rounds the GPU
/// merged.
fn node_output(partitions: &[Vec<RecordBatch>], engine: EngineOptions, window_rows: usize) -> (Vec<RecordBatch>, usize) {
    let schema = partitions[0][0].schema();
    let source = MemorySourceConfig::try_new_exec(partitions, Arc::clone(&schema), None).unwrap();
    let expr = LexOrdering::new([PhysicalSortExpr::new(col("k", &schema).unwrap(), SortOptions { descending: false, nulls_first: false })])
        .unwrap();
    let node = Arc::new(CoRankMergeExec::new(expr, source).with_settings(MergeSettings { engine, window_rows }));
    let ctx = Arc::new(TaskContext::default().with_session_config(SessionConfig::new().with_batch_size(8192)));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let out = rt.block_on(collect(Arc::clone(&node) as Arc<dyn ExecutionPlan>, ctx)).unwrap();
    let metrics = node.metrics().unwrap();
    let rounds_gpu = metrics.sum_by_name("rounds_gpu").map_or(0, |m| m.as_usize());
    (out, rounds_gpu)
}

#[test]
fn the_nodes_gpu_rounds_in_flight_give_the_cpu_output_in_order() {
    if !gpu_or_skip("the_nodes_gpu_rounds_in_flight_give_the_cpu_output_in_order") {
        return;
    }
    // 8 partitions of 2M rows in 8,192-row batches, windows of 512K rows: rounds grow from
    // one batch to 4M rows (the larger ones gather on the GPU), several merging at once
    // (CORANK_GPU_SMALL: 128K rows, windows of 32K rows, for compute-sanitizer).
    let (k, batch) = (8u64, 8192);
    let (rows, window_rows) = if small_only() { (1usize << 17, 1 << 15) } else { (1 << 21, 1 << 19) };
    let partitions: Vec<Vec<RecordBatch>> = (0..k)
        .map(|r| {
            let all = run(r, rows);
            (0..rows).step_by(batch).map(|s| all.slice(s, batch)).collect()
        })
        .collect();
    let cpu = EngineOptions::default().with_engine(Engine::Cpu);
    let gpu = EngineOptions { engine: Engine::Gpu, on_gpu_failure: OnGpuFailure::Error, ..EngineOptions::default() };
    let (want, _) = node_output(&partitions, cpu, window_rows);
    let (got, rounds_gpu) = node_output(&partitions, gpu, window_rows);
    assert!(rounds_gpu >= 4, "the GPU merged {rounds_gpu} rounds");
    let rows_of = |b: &[RecordBatch]| b.iter().map(RecordBatch::num_rows).sum::<usize>();
    assert_eq!((rows_of(&got), rows_of(&want)), (k as usize * rows, k as usize * rows));
    let want = arrow::compute::concat_batches(&want[0].schema(), &want).unwrap();
    let got = arrow::compute::concat_batches(&got[0].schema(), &got).unwrap();
    for c in 0..want.num_columns() {
        assert_eq!(got.column(c).to_data(), want.column(c).to_data(), "column {}", want.schema().field(c).name());
    }
}

/// Batch `b` of partition `p` of an unsorted table, `rows` rows from row `b * 1000`: keys
/// with many ties (`k`), a string key whose words tie on different values (`text`, nulls),
/// a unique `id` (stability shows).
fn unsorted(p: u64, b: u64, rows: usize) -> RecordBatch {
    let mut rng = super::support::Rng(0x2545_f491_4f6c_dd1d ^ ((p << 20) + b + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (n, first) = (rows as u64, b * 1000);
    let k: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..n).map(|_| rng.below(20_000))));
    let text: ArrayRef =
        Arc::new(StringArray::from_iter((0..n).map(|_| (rng.below(9) != 0).then(|| format!("same-long-prefix-{:03}", rng.below(40))))));
    let id: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..n).map(|i| (p << 40) | (first + i))));
    let price: ArrayRef = Arc::new(Float64Array::from_iter((0..n).map(|i| (i % 11 != 0).then_some((first + i) as f64 * 0.5))));
    RecordBatch::try_from_iter([("k", k), ("text", text), ("id", id), ("price", price)]).unwrap()
}

/// `CoRankSortExec` over `partitions` by `k`, then `second` descending, nulls first, with
/// `engine`, chunks of `chunk_rows` rows, batches of `batch_size` rows, a memory pool of
/// `pool_bytes` (unbounded if `None`): the output batches, and the metrics `runs` and
/// `spill_count`.
fn sort_node_batches(
    partitions: &[Vec<RecordBatch>],
    second: &str,
    batch_size: usize,
    engine: EngineOptions,
    chunk_rows: usize,
    pool_bytes: Option<usize>,
) -> (Vec<RecordBatch>, usize, usize) {
    let schema = partitions[0][0].schema();
    let source = MemorySourceConfig::try_new_exec(partitions, Arc::clone(&schema), None).unwrap();
    let expr = LexOrdering::new([
        PhysicalSortExpr::new(col("k", &schema).unwrap(), SortOptions { descending: false, nulls_first: false }),
        PhysicalSortExpr::new(col(second, &schema).unwrap(), SortOptions { descending: true, nulls_first: true }),
    ])
    .unwrap();
    let settings = MergeSettings { engine, window_rows: 1 << 16 };
    let node = Arc::new(CoRankSortExec::new(expr, source).with_settings(settings).with_chunk_rows(chunk_rows));
    let mut state = SessionStateBuilder::new().with_config(SessionConfig::new().with_batch_size(batch_size));
    if let Some(bytes) = pool_bytes {
        state = state.with_runtime_env(RuntimeEnvBuilder::new().with_memory_limit(bytes, 1.0).build_arc().unwrap());
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
    let out = rt.block_on(collect(Arc::clone(&node) as Arc<dyn ExecutionPlan>, state.build().task_ctx())).unwrap();
    let metrics = node.metrics().unwrap();
    let runs = metrics.sum_by_name("runs").map_or(0, |m| m.as_usize());
    let spills = metrics.spill_count().unwrap_or(0);
    (out, runs, spills)
}

/// [`sort_node_batches`] by `k`, then `text`, in batches of 1024 rows, the output concatenated.
fn sort_node_output(
    partitions: &[Vec<RecordBatch>],
    engine: EngineOptions,
    chunk_rows: usize,
    pool_bytes: Option<usize>,
) -> (RecordBatch, usize, usize) {
    let (out, runs, spills) = sort_node_batches(partitions, "text", 1024, engine, chunk_rows, pool_bytes);
    (arrow::compute::concat_batches(&partitions[0][0].schema(), &out).unwrap(), runs, spills)
}

/// Partitions of the given row counts in batches of 1000 rows made by `batch(p, b, rows)`,
/// and their total rows.
fn table_of(sizes: &[usize], batch: fn(u64, u64, usize) -> RecordBatch) -> (Vec<Vec<RecordBatch>>, usize) {
    let partitions = sizes
        .iter()
        .enumerate()
        .map(|(p, &rows)| (0..rows).step_by(1000).map(|s| batch(p as u64, (s / 1000) as u64, 1000.min(rows - s))).collect())
        .collect();
    (partitions, sizes.iter().sum())
}

/// `got` holds `want`'s rows, column for column.
fn same_columns(got: &RecordBatch, want: &RecordBatch, what: &str) {
    assert_eq!(got.num_rows(), want.num_rows(), "{what}");
    for c in 0..want.num_columns() {
        assert_eq!(got.column(c).to_data(), want.column(c).to_data(), "{what}: column {}", want.schema().field(c).name());
    }
}

#[test]
fn the_sort_node_on_the_gpu_gives_the_cpu_output_in_memory_and_spilled() {
    if !gpu_or_skip("the_sort_node_on_the_gpu_gives_the_cpu_output_in_memory_and_spilled") {
        return;
    }
    // 4 partitions of uneven sizes (one empty) in batches of 1000 rows (CORANK_GPU_SMALL: a
    // tenth, but for the spill case, whose pool must hold the merge's rounds).
    let table = |scale: usize| table_of(&[150_000 / scale, 1 + 60_000 / scale, 0, 190_000 / scale], unsorted);
    let cpu = EngineOptions::default().with_engine(Engine::Cpu);
    let gpu = EngineOptions { engine: Engine::Gpu, on_gpu_failure: OnGpuFailure::Error, ..EngineOptions::default() };
    let (partitions, total) = table(if small_only() { 10 } else { 1 });
    let (want, cpu_runs, _) = sort_node_output(&partitions, cpu, 1 << 20, None);
    assert_eq!((want.num_rows(), cpu_runs), (total, 3), "each partition with rows one chunk");
    // A partition a chunk: three device sorts, their runs merged.
    let (got, runs, spills) = sort_node_output(&partitions, gpu, 1 << 20, None);
    same_columns(&got, &want, "a partition a chunk");
    assert_eq!((runs, spills), (3, 0), "a partition a chunk");
    // Small chunks (cut at batch ends): 201 device sorts, several at once from the node's
    // blocking threads (CORANK_GPU_SMALL: a batch a chunk, 41).
    let (got, runs, spills) = sort_node_output(&partitions, gpu, total / 200, None);
    same_columns(&got, &want, "small chunks");
    assert!(runs > 40 && spills == 0, "small chunks: {runs} runs, {spills} spills");
    // A pool of half the input (about 10 MB): sorted chunks spill, the spill files merge.
    let (partitions, total) = table(1);
    let (want, _, _) = sort_node_output(&partitions, cpu, 1 << 20, None);
    let input_bytes: usize = partitions.iter().flatten().map(|b| b.get_array_memory_size()).sum();
    let (got, runs, spills) = sort_node_output(&partitions, gpu, total / 4, Some(input_bytes / 2));
    same_columns(&got, &want, "spilled");
    assert!(runs > 3 && spills > 0, "spilled: {runs} runs, {spills} spills");
}

/// Batch `b` of partition `p` of an unsorted table of fixed-width and byte view columns,
/// `rows` rows: keys with many ties (`k`), a nullable float key (`price`), a unique `id`
/// (stability shows), payload of 1-, 4- and 16-byte types, some with nulls, and a string
/// view column (`note`: nulls, inline and longer values, several data buffers a batch; as a
/// key, long values tie on their first words).
fn unsorted_fixed(p: u64, b: u64, rows: usize) -> RecordBatch {
    use arrow::array::{Date32Array, Decimal128Array, Int8Array};
    let mut rng = super::support::Rng(0x5851_f42d_4c95_7f2d ^ ((p << 20) + b + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let (n, first) = (rows as u64, b * 1000);
    let k: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..n).map(|_| rng.below(5_000))));
    let price: ArrayRef = Arc::new(Float64Array::from_iter((0..n).map(|_| (rng.below(13) != 0).then(|| rng.below(50) as f64 * 0.5))));
    let id: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..n).map(|i| (p << 40) | (first + i))));
    let tiny: ArrayRef = Arc::new(Int8Array::from_iter((0..n).map(|i| (i % 5 != 1).then_some((i % 100) as i8))));
    let day: ArrayRef = Arc::new(Date32Array::from_iter_values((0..n).map(|i| (first + i) as i32)));
    let amount: ArrayRef = Arc::new(
        Decimal128Array::from_iter((0..n).map(|i| (i % 9 != 4).then_some((first + i) as i128 * 1_000_003)))
            .with_precision_and_scale(30, 2)
            .unwrap(),
    );
    let mut notes = arrow::array::StringViewBuilder::new().with_fixed_block_size(4096);
    for i in 0..n {
        let r = rng.below(60);
        notes.append_option((i % 7 != 3).then(|| {
            if r < 20 {
                format!("n{r}")
            } else {
                format!("a-longer-shared-prefix-note-{r:03}-{}", i % 3)
            }
        }));
    }
    let note: ArrayRef = Arc::new(notes.finish());
    RecordBatch::try_from_iter([("k", k), ("price", price), ("id", id), ("tiny", tiny), ("day", day), ("amount", amount), ("note", note)])
        .unwrap()
}

/// [`sort_node_batches`] by `k`, then `second`, in batches of 1000 rows (checked: none
/// longer), the output concatenated.
fn sort_fixed_output(
    partitions: &[Vec<RecordBatch>],
    second: &str,
    engine: EngineOptions,
    chunk_rows: usize,
    pool_bytes: Option<usize>,
) -> (RecordBatch, usize, usize) {
    let (out, runs, spills) = sort_node_batches(partitions, second, 1000, engine, chunk_rows, pool_bytes);
    assert!(out.iter().all(|b| b.num_rows() <= 1000), "batches of at most batch_size rows");
    (arrow::compute::concat_batches(&partitions[0][0].schema(), &out).unwrap(), runs, spills)
}

#[test]
fn the_sort_node_sorts_fixed_width_and_view_input_whole_on_the_gpu_and_falls_back_to_chunks() {
    if !gpu_or_skip("the_sort_node_sorts_fixed_width_and_view_input_whole_on_the_gpu_and_falls_back_to_chunks") {
        return;
    }
    // 4 partitions of uneven sizes (one empty) in batches of 1000 rows (CORANK_GPU_SMALL: a
    // tenth, but for the pool cases, whose pool must hold the merge's rounds).
    let table = |scale: usize| table_of(&[120_000 / scale, 1 + 50_000 / scale, 0, 170_000 / scale], unsorted_fixed);
    let (partitions, total) = table(if small_only() { 10 } else { 1 });
    let cpu = EngineOptions::default().with_engine(Engine::Cpu);
    let gpu = EngineOptions { engine: Engine::Gpu, on_gpu_failure: OnGpuFailure::Error, ..EngineOptions::default() };
    let (want, cpu_runs, _) = sort_fixed_output(&partitions, "price", cpu, total / 8, None);
    assert_eq!(want.num_rows(), total);
    assert!(cpu_runs > 3, "the CPU engine sorts chunks: {cpu_runs} runs");
    // The whole input as one device sort, whatever the chunk size: one run, no merge.
    for chunk_rows in [1 << 20, total / 8] {
        let (got, runs, spills) = sort_fixed_output(&partitions, "price", gpu, chunk_rows, None);
        same_columns(&got, &want, &format!("whole, chunk rows {chunk_rows}"));
        assert_eq!((runs, spills), (1, 0), "whole, chunk rows {chunk_rows}");
    }
    // By the string views as the second key: still one device sort.
    let (want_note, _, _) = sort_fixed_output(&partitions, "note", cpu, total / 8, None);
    let (got, runs, spills) = sort_fixed_output(&partitions, "note", gpu, 1 << 20, None);
    same_columns(&got, &want_note, "whole, by k then note");
    assert_eq!((runs, spills), (1, 0), "whole, by k then note");
    // A pool that holds the input (and its sorted runs) but not the whole sort's output
    // beside it: the deferred chunks are sorted and merged instead.
    let (partitions, total) = table(1);
    let (want, _, _) = sort_fixed_output(&partitions, "price", cpu, total / 8, None);
    let input_bytes: usize = partitions.iter().flatten().map(|b| b.get_array_memory_size()).sum();
    let (got, runs, _) = sort_fixed_output(&partitions, "price", gpu, total / 8, Some(input_bytes * 3 / 2));
    same_columns(&got, &want, "no room for the output");
    assert!(runs > 3, "no room for the output: {runs} runs");
    // A pool of half the input: the pool refuses a batch on the way in, the deferred chunks
    // are cut as they would have been, sorted and spilled; the spill files merge.
    let (got, runs, spills) = sort_fixed_output(&partitions, "price", gpu, total / 8, Some(input_bytes / 2));
    same_columns(&got, &want, "spilled");
    assert!(runs > 3 && spills > 0, "spilled: {runs} runs, {spills} spills");
}

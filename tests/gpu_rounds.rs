//! A frontier round merged on the GPU gathers its fixed-width columns on the GPU too, where
//! the bytes say that pays (`gather_on_gpu_pays`), and its other columns on the CPU at the
//! same time: the batches must equal a CPU round's, column by column (values, validity,
//! batch boundaries), with a string column and a dictionary column beside the fixed ones.
//!
//! The node's rounds on the GPU (several merging at once, `GPU_ROUNDS_IN_FLIGHT`) must give
//! the CPU engine's output, row for row, in order.
//!
//! Without a GPU the tests skip (a line on stderr) unless `CORANK_REQUIRE_GPU=1`.
#![cfg(all(feature = "gpu", feature = "datafusion"))]

use arrow::array::{ArrayRef, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Int8Type};
use corank::datafusion::{CoRankMergeExec, MergeSettings};
use corank::engine::gpu::gather_on_gpu_pays;
use corank::frontier::{FrontierMerge, FrontierOptions};
use corank::{Engine, EngineOptions, OnGpuFailure, SortKey};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionConfig;
use std::sync::Arc;

#[path = "common/gpu.rs"]
#[allow(dead_code)] // Rng serves other test binaries
mod gpu_common;
use gpu_common::{gpu_or_skip, small_only};

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

//! A frontier round merged on the GPU gathers its fixed-width columns on the GPU too, where
//! the bytes say that pays (`gather_on_gpu_pays`), and its other columns on the CPU at the
//! same time: the batches must equal a CPU round's, column by column (values, validity,
//! batch boundaries), with a string column and a dictionary column beside the fixed ones.
//!
//! Without a GPU the test skips (a line on stderr) unless `CORANK_REQUIRE_GPU=1`.
#![cfg(feature = "gpu")]

use arrow::array::{ArrayRef, DictionaryArray, Float64Array, Int32Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Int8Type};
use corank::engine::gpu::gather_on_gpu_pays;
use corank::frontier::{FrontierMerge, FrontierOptions};
use corank::{Engine, EngineOptions, OnGpuFailure, SortKey};
use std::sync::Arc;

#[path = "common/gpu.rs"]
#[allow(dead_code)] // small_only and Rng serve other test binaries
mod gpu_common;
use gpu_common::gpu_or_skip;

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

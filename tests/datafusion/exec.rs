//! CoRankMergeExec on in-memory partitions: a merge fuzz test in the manner of DataFusion's
//! `merge_fuzz.rs` (staggered batches of 1..100 rows, random partition counts, small
//! windows so the frontier moves many times), memory limits, and cancellation.

use crate::common::{sorted_run, Rng};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::*;
use corank::datafusion::{CoRankMergeExec, MergeSettings};
use corank::{Engine, EngineOptions};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionConfig;
use futures::StreamExt;
use std::sync::Arc;

/// `parts` sorted partitions, each cut into batches of 1..=max_batch rows.
fn partitions(
    rng: &mut Rng,
    types: &[DataType],
    options: &[SortOptions],
    parts: usize,
    max_rows: usize,
    max_batch: usize,
) -> Vec<Vec<RecordBatch>> {
    let mut id = 0;
    (0..parts)
        .map(|_| {
            let n = rng.below(max_rows as u64 + 1) as usize;
            let run = sorted_run(rng, types, options, n, 20, 0.1, id);
            id += n as u64;
            let mut batches = vec![];
            let mut s = 0;
            while s < n {
                let len = (1 + rng.below(max_batch as u64) as usize).min(n - s);
                // A compact copy: each batch owns its buffers, as a scan's batches do, so the
                // memory accounting sees the batch and not the whole run behind a slice.
                let slice = run.slice(s, len);
                let all = UInt32Array::from_iter_values(0..len as u32);
                batches.push(arrow::compute::take_record_batch(&slice, &all).unwrap());
                s += len;
            }
            batches
        })
        .collect()
}

fn ordering(schema: &SchemaRef, options: &[SortOptions]) -> LexOrdering {
    LexOrdering::new(options.iter().enumerate().map(|(i, o)| PhysicalSortExpr::new(col(&format!("k{i}"), schema).unwrap(), *o))).unwrap()
}

fn task_ctx(batch_size: usize) -> Arc<TaskContext> {
    Arc::new(TaskContext::default().with_session_config(SessionConfig::new().with_batch_size(batch_size)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_fuzz() {
    let mut rng = Rng::new(5);
    for case in 0..150 {
        let n_keys = 1 + rng.below(2) as usize;
        let (types, options) = crate::common::random_key_columns(&mut rng, n_keys);
        let parts = 1 + rng.below(if case % 10 == 0 { 64 } else { 12 }) as usize;
        let data = partitions(&mut rng, &types, &options, parts, 400, 100);
        let schema = data
            .iter()
            .flatten()
            .next()
            .map(|b| b.schema())
            .unwrap_or_else(|| crate::common::sorted_run(&mut Rng::new(1), &types, &options, 0, 1, 0.0, 0).schema());
        let source = MemorySourceConfig::try_new_exec(&data, Arc::clone(&schema), None).unwrap();
        let expr = ordering(&schema, &options);
        let fetch = if rng.chance(0.3) { Some(rng.below(500) as usize) } else { None };
        let settings = MergeSettings {
            engine: EngineOptions::default().with_engine(Engine::Cpu).with_gpu_min_rows(usize::MAX),
            window_rows: 1 + rng.below(300) as usize,
        };
        let ours = CoRankMergeExec::new(expr.clone(), source.clone()).with_fetch(fetch).with_settings(settings.clone());
        let theirs = SortPreservingMergeExec::new(expr, source).with_fetch(fetch).with_round_robin_repartition(false);
        let ctx = task_ctx(1 + rng.below(100) as usize);
        let a = collect(Arc::new(ours), Arc::clone(&ctx)).await.unwrap();
        let b = collect(Arc::new(theirs), ctx).await.unwrap();
        let a = arrow::compute::concat_batches(&schema, &a).unwrap();
        let b = arrow::compute::concat_batches(&schema, &b).unwrap();
        assert_eq!(a, b, "case {case}: {types:?} {options:?} parts {parts} fetch {fetch:?} {settings:?}");
    }
}

fn big_input(rng: &mut Rng) -> (Arc<dyn ExecutionPlan>, LexOrdering) {
    let o = [SortOptions::default()];
    let data = partitions(rng, &[DataType::Int64], &o, 8, 20_000, 1000);
    let schema = data[0][0].schema();
    (MemorySourceConfig::try_new_exec(&data, Arc::clone(&schema), None).unwrap(), ordering(&schema, &o))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_memory_budget_fails_cleanly_or_completes() {
    let mut rng = Rng::new(9);
    let (source, expr) = big_input(&mut rng);
    let ctx_with_limit = |bytes: usize| {
        let runtime = RuntimeEnvBuilder::new().with_memory_limit(bytes, 1.0).build_arc().unwrap();
        Arc::new(TaskContext::default().with_runtime(runtime))
    };
    // A budget below one window of every input: ResourcesExhausted, not an abort.
    let settings =
        MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu).with_gpu_min_rows(usize::MAX), window_rows: 1 << 20 };
    let node = Arc::new(CoRankMergeExec::new(expr.clone(), Arc::clone(&source)).with_settings(settings));
    let err = collect(node, ctx_with_limit(64 * 1024)).await.unwrap_err();
    assert!(err.to_string().contains("Resources exhausted"), "{err}");
    // Small windows fit in the same budget and complete.
    let settings =
        MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu).with_gpu_min_rows(usize::MAX), window_rows: 500 };
    let node = Arc::new(CoRankMergeExec::new(expr, source).with_settings(settings));
    let ctx = ctx_with_limit(1 << 20);
    let out = collect(node, Arc::clone(&ctx)).await.unwrap();
    assert!(out.iter().map(|b| b.num_rows()).sum::<usize>() > 0);
    assert_eq!(ctx.runtime_env().memory_pool.reserved(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_stops_the_merge_and_frees_memory() {
    let mut rng = Rng::new(13);
    let (source, expr) = big_input(&mut rng);
    let settings =
        MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu).with_gpu_min_rows(usize::MAX), window_rows: 2000 };
    let node = CoRankMergeExec::new(expr, source).with_settings(settings);
    let ctx = task_ctx(100);
    let mut stream = node.execute(0, Arc::clone(&ctx)).unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    assert!(ctx.runtime_env().memory_pool.reserved() > 0, "the merge holds buffered rows");
    drop(stream);
    // The driving task is aborted; its reservation is released when it unwinds.
    for _ in 0..100 {
        if ctx.runtime_env().memory_pool.reserved() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(ctx.runtime_env().memory_pool.reserved(), 0, "memory still reserved after the stream was dropped");
}

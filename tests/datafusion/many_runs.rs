//! `CoRankSortExec` over thousands of tiny runs (issue 62): the runs are merged with a
//! bounded fan-in (no merge of the node takes more than a few hundred inputs, so its work
//! per input batch and per round stays bounded: the whole merge is O(n log k), not O(n k)),
//! in memory and when the runs are spill files, and the output is still the stable sort of
//! the partitions in order (ties in input order).
//!
//! The bound is checked on the node's `merge_fan_in` metric (the most inputs one merge
//! took), a count of the work's shape rather than a time, so a loaded machine cannot make it
//! flaky. Before the bounded fan-in, 20k one-row runs were one merge of 20k inputs, whose
//! every input batch and round scanned all 20k: 0.9 / 5.5 / 38 s for 10k / 20k / 40k
//! one-row runs on the 2-core dev VM, against stock `SortExec`'s 0.01 / 0.04 / 0.08 s.

use crate::common::Rng;
use crate::sort::{concat, config, metric, partitions, stable_oracle};
use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema};
use corank::datafusion::{CoRankSortExec, MergeSettings};
use corank::{Engine, EngineOptions};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::{collect, ExecutionPlan};
use std::sync::Arc;

/// The most inputs the test lets one merge take: the node's bound is smaller; before the
/// fix a merge took every run.
const FAN_IN_BOUND: usize = 256;

/// `partitions` with every batch under one schema (a batch of one row without a null
/// would otherwise have its key columns declared non-nullable).
fn tiny_partitions(rng: &mut Rng, dt: &DataType, sizes: &[usize], batch: usize) -> Vec<Vec<RecordBatch>> {
    let parts = partitions(rng, dt, sizes, batch, 0.1);
    let fields: Vec<Field> = ["k1", "k2", "id"]
        .iter()
        .map(|&name| {
            let t = parts.iter().flatten().next().unwrap().schema().field_with_name(name).unwrap().data_type().clone();
            Field::new(name, t, name != "id")
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    parts
        .into_iter()
        .map(|p| p.into_iter().map(|b| RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec()).unwrap()).collect())
        .collect()
}

/// The node over `parts` by `k1` (ascending or descending, nulls first or last) then `k2`,
/// on the CPU engine, in chunks of `chunk_rows`.
fn node(parts: &[Vec<RecordBatch>], chunk_rows: usize, o: SortOptions) -> (Arc<dyn ExecutionPlan>, LexOrdering) {
    let schema = parts.iter().flatten().next().unwrap().schema();
    let source = MemorySourceConfig::try_new_exec(parts, Arc::clone(&schema), None).unwrap();
    let expr = LexOrdering::new([
        PhysicalSortExpr::new(col("k1", &schema).unwrap(), o),
        PhysicalSortExpr::new(col("k2", &schema).unwrap(), SortOptions::default()),
    ])
    .unwrap();
    let settings = MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu), window_rows: 1 << 20 };
    (Arc::new(CoRankSortExec::new(expr.clone(), source).with_settings(settings).with_chunk_rows(chunk_rows)), expr)
}

/// 20k one-row runs in memory (one partition, chunks of one row), and ~6k runs of a few
/// rows over 5 partitions with string keys that tie on their key words (a long common
/// prefix: resolved by value): every merge takes at most `FAN_IN_BOUND` inputs, and the
/// output is the stable sort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_tiny_runs_merge_with_bounded_fan_in() {
    let mut rng = Rng::new(62);
    let cases: [(DataType, Vec<usize>, usize, usize); 2] =
        [(DataType::Int64, vec![20_000], 1, 1), (DataType::Utf8, vec![4000, 0, 7000, 1, 6000], 3, 3)];
    for (dt, sizes, batch, chunk_rows) in cases {
        let parts = tiny_partitions(&mut rng, &dt, &sizes, batch);
        let schema = parts.iter().flatten().next().unwrap().schema();
        let o = SortOptions { descending: dt == DataType::Utf8, nulls_first: true };
        let (plan, expr) = node(&parts, chunk_rows, o);
        let task = SessionStateBuilder::new().with_config(config(sizes.len(), 100)).build().task_ctx();
        let out = concat(&schema, &collect(Arc::clone(&plan), task).await.unwrap());
        let runs = metric(&plan, "runs");
        let fan_in = metric(&plan, "merge_fan_in");
        assert!(runs >= 5000, "{dt}: {runs} runs");
        assert!((2..=FAN_IN_BOUND).contains(&fan_in), "{dt}: one merge took {fan_in} of the {runs} runs");
        assert_eq!(metric(&plan, "output_rows"), sizes.iter().sum::<usize>(), "{dt}");
        assert!(out == stable_oracle(&parts, &expr, &schema), "{dt}: {runs} runs: not the stable sort");
    }
}

/// Thousands of runs that are spill files: 400 partitions of a few dozen rows under a pool
/// far smaller than the data, so that every spill writes a file for each partition (a
/// partition's runs in memory go to one file, merged), a few spills over. They are merged
/// with a bounded fan-in too (the merges in between write spill files), the output is the
/// stable sort, the pool is empty afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_spilled_runs_merge_with_bounded_fan_in() {
    let mut rng = Rng::new(6212);
    let sizes: Vec<usize> = (0..400).map(|p| if p % 17 == 3 { 0 } else { 20 + rng.below(40) as usize }).collect();
    let parts = tiny_partitions(&mut rng, &DataType::Int32, &sizes, 2);
    let schema = parts.iter().flatten().next().unwrap().schema();
    let runtime = RuntimeEnvBuilder::new().with_memory_limit(64 << 10, 1.0).build_arc().unwrap();
    let task = SessionStateBuilder::new().with_config(config(400, 64)).with_runtime_env(Arc::clone(&runtime)).build().task_ctx();
    let o = SortOptions { descending: false, nulls_first: false };
    let (plan, expr) = node(&parts, 8, o);
    let out = concat(&schema, &collect(Arc::clone(&plan), task).await.unwrap());
    let (runs, fan_in, spills) = (metric(&plan, "runs"), metric(&plan, "merge_fan_in"), metric(&plan, "spill_count"));
    // (Spill files: the runs', then the merges' in between.)
    assert!(spills >= 1000 && metric(&plan, "merge_passes") >= 1, "{runs} runs, {spills} spill files");
    assert!((2..=FAN_IN_BOUND).contains(&fan_in), "one merge took {fan_in} of the {runs} spilled runs");
    assert!(out == stable_oracle(&parts, &expr, &schema), "{runs} spilled runs: not the stable sort");
    assert_eq!(runtime.memory_pool.reserved(), 0, "memory left reserved");
}

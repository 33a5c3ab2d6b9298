//! CoRankMergeExec without a barrier (issue 12, item 1): the first round starts as soon as
//! every input holds a batch, inputs are pulled while a round merges, and `fetch`,
//! cancellation and errors still behave. Inputs are scripted partitions
//! (`StreamingTableExec`) that can wait on a gate, fail, or yield to reorder arrivals.
//! Outcomes are deterministic; timeouts only turn a regression (a hang) into a failure.

use crate::common::Rng;
use arrow::array::{ArrayRef, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, SortOptions};
use arrow::datatypes::SchemaRef;
use corank::datafusion::{CoRankMergeExec, MergeSettings};
use corank::{Engine, EngineOptions};
use datafusion::common::DataFusionError;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{collect, ExecutionPlan, SendableRecordBatchStream};
use datafusion::prelude::SessionConfig;
use futures::StreamExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// Partition `p`'s sorted rows cut into batches of the given sizes: `k` (sorted, with
/// duplicates across partitions and nulls last), `p` and `r` (its row) to see stability.
fn partition(rng: &mut Rng, p: usize, sizes: &[usize], domain: u64) -> Vec<RecordBatch> {
    let n: usize = sizes.iter().sum();
    let mut k: Vec<Option<i64>> = (0..n).map(|_| if rng.chance(0.05) { None } else { Some(rng.below(domain) as i64) }).collect();
    k.sort_by_key(|v| (v.is_none(), *v));
    let all = RecordBatch::try_from_iter_with_nullable([
        ("k", Arc::new(Int64Array::from(k)) as ArrayRef, true),
        ("p", Arc::new(UInt32Array::from(vec![p as u32; n])) as ArrayRef, false),
        ("r", Arc::new(UInt32Array::from_iter_values(0..n as u32)) as ArrayRef, false),
    ])
    .unwrap();
    let mut at = 0;
    sizes
        .iter()
        .map(|&len| {
            at += len;
            all.slice(at - len, len)
        })
        .collect()
}

fn ordering(schema: &SchemaRef) -> LexOrdering {
    LexOrdering::new([PhysicalSortExpr::new(col("k", schema).unwrap(), SortOptions { descending: false, nulls_first: false })]).unwrap()
}

fn task_ctx(batch_size: usize) -> Arc<TaskContext> {
    Arc::new(TaskContext::default().with_session_config(SessionConfig::new().with_batch_size(batch_size)))
}

fn cpu(window_rows: usize) -> MergeSettings {
    MergeSettings { engine: EngineOptions::default().with_engine(Engine::Cpu).with_gpu_min_rows(usize::MAX), window_rows }
}

/// One scripted input partition: its batches in order; before batch `gate.0` it waits for
/// the gate to open; in place of batch `error_at` an error ends it; before batch `i` it
/// yields to the runtime `yields[i]` times. `open` counts its streams not yet dropped,
/// `produced` (where given) the batches it gave.
#[derive(Debug, Clone)]
struct Script {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    gate: Option<(usize, watch::Receiver<bool>)>,
    error_at: Option<usize>,
    yields: Vec<usize>,
    open: Arc<AtomicUsize>,
    produced: Option<Arc<AtomicUsize>>,
}

impl Script {
    fn new(batches: Vec<RecordBatch>, open: &Arc<AtomicUsize>) -> Self {
        Self { schema: batches[0].schema(), batches, gate: None, error_at: None, yields: vec![], open: Arc::clone(open), produced: None }
    }
}

/// Counts a stream as open until it is dropped.
struct Open(Arc<AtomicUsize>);
impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PartitionStream for Script {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        self.open.fetch_add(1, Ordering::SeqCst);
        let open = Open(Arc::clone(&self.open));
        let stream = futures::stream::unfold((self.clone(), 0usize, open), |(script, i, open)| async move {
            if let Some((at, gate)) = &script.gate {
                if i == *at {
                    gate.clone().wait_for(|&opened| opened).await.ok()?;
                }
            }
            for _ in 0..script.yields.get(i).copied().unwrap_or(0) {
                tokio::task::yield_now().await;
            }
            if script.error_at == Some(i) {
                let e = DataFusionError::Execution(format!("scripted input failed at batch {i}"));
                return Some((Err(e), (script, usize::MAX, open)));
            }
            let batch = script.batches.get(i)?.clone();
            if let Some(produced) = &script.produced {
                produced.fetch_add(1, Ordering::SeqCst);
            }
            Some((Ok(batch), (script, i + 1, open)))
        });
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

fn scripted(scripts: Vec<Script>) -> Arc<dyn ExecutionPlan> {
    let schema = scripts[0].schema.clone();
    let partitions = scripts.into_iter().map(|s| Arc::new(s) as Arc<dyn PartitionStream>).collect();
    Arc::new(StreamingTableExec::try_new(schema.clone(), partitions, None, [ordering(&schema)], false, None).unwrap())
}

/// The same partitions in memory, merged by SortPreservingMergeExec (round robin off).
async fn stock(data: &[Vec<RecordBatch>], fetch: Option<usize>, batch_size: usize) -> RecordBatch {
    let schema = data[0][0].schema();
    let source = MemorySourceConfig::try_new_exec(data, schema.clone(), None).unwrap();
    let spm = SortPreservingMergeExec::new(ordering(&schema), source).with_fetch(fetch).with_round_robin_repartition(false);
    concat_batches(&schema, &collect(Arc::new(spm), task_ctx(batch_size)).await.unwrap()).unwrap()
}

fn metric(node: &CoRankMergeExec, name: &str) -> usize {
    node.metrics().unwrap().sum_by_name(name).map_or(0, |v| v.as_usize())
}

/// Waits (without a time threshold on the outcome) until `done` holds; fails after [`HANG`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(HANG, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting until {what}");
}

/// 4 partitions of 5 batches of 100 rows.
fn four_partitions(seed: u64) -> Vec<Vec<RecordBatch>> {
    let mut rng = Rng::new(seed);
    (0..4).map(|p| partition(&mut rng, p, &[100; 5], 300)).collect()
}

/// Every input yields one batch, then waits until the test has received the first output
/// batch. With a barrier that fills windows first (here one million rows), this hangs; the
/// node and stock SPM both emit from the first batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_batch_does_not_wait_for_full_windows() {
    let data = four_partitions(1);
    let open = Arc::new(AtomicUsize::new(0));
    for corank in [true, false] {
        let (gate, opened) = watch::channel(false);
        let scripts = data.iter().map(|b| Script { gate: Some((1, opened.clone())), ..Script::new(b.clone(), &open) }).collect();
        let input = scripted(scripts);
        let plan: Arc<dyn ExecutionPlan> = if corank {
            Arc::new(CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(1 << 20)))
        } else {
            Arc::new(SortPreservingMergeExec::new(ordering(&input.schema()), input).with_round_robin_repartition(false))
        };
        let mut stream = plan.execute(0, task_ctx(64)).unwrap();
        let first = tokio::time::timeout(HANG, stream.next()).await;
        let first = first.unwrap_or_else(|_| panic!("no first batch before the inputs' second batches (corank: {corank})"));
        let mut out = vec![first.unwrap().unwrap()];
        assert!(out[0].num_rows() > 0);
        gate.send(true).unwrap();
        while let Some(b) = tokio::time::timeout(HANG, stream.next()).await.expect("the merge finishes") {
            out.push(b.unwrap());
        }
        let got = concat_batches(&out[0].schema(), &out).unwrap();
        assert_eq!(got, stock(&data, None, 64).await, "corank: {corank}");
    }
    eventually("every input stream is dropped", || open.load(Ordering::SeqCst) == 0).await;
}

/// Until the first round is taken, an input that has given its first batch with rows is
/// not read further (its task waits, leaving the cores to the inputs still decoding their
/// first batch), while inputs whose first batches are empty, or that hold no rows at all,
/// do not hold the first round up. Input 0 gives rows at once, input 1 two empty batches
/// first, input 2 only empty ones, input 3 its first batch when the test opens a gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_wait_after_their_first_rows_until_the_first_round() {
    let mut rng = Rng::new(21);
    let data = vec![
        partition(&mut rng, 0, &[50, 50, 50, 50], 300),
        partition(&mut rng, 1, &[0, 0, 40, 40], 300),
        partition(&mut rng, 2, &[0, 0], 300),
        partition(&mut rng, 3, &[60, 60], 300),
    ];
    let open = Arc::new(AtomicUsize::new(0));
    let produced = Arc::new(AtomicUsize::new(0));
    let (gate, opened) = watch::channel(false);
    let scripts = data
        .iter()
        .enumerate()
        .map(|(p, b)| {
            let script = Script::new(b.clone(), &open);
            match p {
                0 => Script { produced: Some(Arc::clone(&produced)), ..script },
                3 => Script { gate: Some((0, opened.clone())), ..script },
                _ => script,
            }
        })
        .collect();
    let input = scripted(scripts);
    let node = CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(1 << 20));
    let mut stream = node.execute(0, task_ctx(64)).unwrap();
    let first = tokio::spawn(async move { (stream.next().await, stream) });
    eventually("input 0 has given its first batch", || produced.load(Ordering::SeqCst) >= 1).await;
    // Time for a task that went on to read input 0 ahead (two batches): it must not have.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(produced.load(Ordering::SeqCst), 1, "input 0 was read ahead before the first round");
    gate.send(true).unwrap();
    let (first, mut stream) = tokio::time::timeout(HANG, first).await.expect("a first batch").unwrap();
    let mut out = vec![first.expect("a first batch").unwrap()];
    while let Some(b) = tokio::time::timeout(HANG, stream.next()).await.expect("the merge finishes") {
        out.push(b.unwrap());
    }
    assert_eq!(produced.load(Ordering::SeqCst), 4, "input 0 was read to its end after the first round");
    let got = concat_batches(&out[0].schema(), &out).unwrap();
    assert_eq!(got, stock(&data, None, 64).await);
    drop(stream);
    eventually("every input stream is dropped", || open.load(Ordering::SeqCst) == 0).await;
}

/// A runtime whose only blocking thread the test holds: the node's round, merged on a
/// blocking thread, waits until [`Blocker::release`].
struct Blocker {
    release: std::sync::mpsc::Sender<()>,
}

impl Blocker {
    fn hold(rt: &tokio::runtime::Runtime) -> Self {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (held, is_held) = std::sync::mpsc::channel::<()>();
        rt.spawn_blocking(move || {
            held.send(()).unwrap();
            let _ = wait.recv();
        });
        is_held.recv().unwrap();
        Self { release }
    }

    fn release(self) {
        self.release.send(()).unwrap();
    }
}

fn one_blocking_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).max_blocking_threads(1).enable_all().build().unwrap()
}

/// 4 partitions: a first batch of 200 rows, then 4 batches of 100.
fn long_first_batches(seed: u64) -> Vec<Vec<RecordBatch>> {
    let mut rng = Rng::new(seed);
    (0..4).map(|p| partition(&mut rng, p, &[200, 100, 100, 100, 100], 500)).collect()
}

/// The first round (about one output batch of 64 rows, 16 of each input) merges on the
/// node's task; the second is due at once (every input still holds at least 184 rows, a
/// full window of 150) and waits for the blocking thread the test holds. It takes every row
/// of at least one input, which is then pulled while the round waits; the first round's
/// batch is received meanwhile.
#[test]
fn inputs_are_pulled_while_a_round_merges() {
    let rt = one_blocking_thread();
    let blocker = Blocker::hold(&rt);
    let data = long_first_batches(2);
    let open = Arc::new(AtomicUsize::new(0));
    let input = scripted(data.iter().map(|b| Script::new(b.clone(), &open)).collect());
    let schema = input.schema();
    let node = Arc::new(CoRankMergeExec::new(ordering(&schema), input).with_settings(cpu(150)));
    rt.block_on(async {
        let mut stream = node.execute(0, task_ctx(64)).unwrap();
        let first = tokio::time::timeout(HANG, stream.next()).await.expect("the first round's batch").unwrap().unwrap();
        eventually("a batch arrived while the second round merged", || metric(&node, "input_batches_while_merging") >= 1).await;
        assert_eq!(metric(&node, "rounds_cpu"), 1, "only the first round merged");
        blocker.release();
        let mut out = vec![first];
        while let Some(b) = tokio::time::timeout(HANG, stream.next()).await.expect("the merge finishes") {
            out.push(b.unwrap());
        }
        assert_eq!(concat_batches(&schema, &out).unwrap(), stock(&data, None, 64).await);
    });
}

/// Dropping the output stream while a round merges stops the node: its input streams are
/// dropped and its memory reservation is freed, before the round could finish.
#[test]
fn dropping_the_stream_while_a_round_merges_stops_the_inputs() {
    let rt = one_blocking_thread();
    let blocker = Blocker::hold(&rt);
    let data = long_first_batches(3);
    let open = Arc::new(AtomicUsize::new(0));
    let (_gate, opened) = watch::channel(false);
    // The inputs never get past their third batch: only cancellation ends them.
    let scripts = data.iter().map(|b| Script { gate: Some((3, opened.clone())), ..Script::new(b.clone(), &open) }).collect();
    let input = scripted(scripts);
    // Windows of 150 rows: the second round is due at once (as in the test above).
    let node = Arc::new(CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(150)));
    let ctx = task_ctx(64);
    rt.block_on(async {
        let stream = node.execute(0, Arc::clone(&ctx)).unwrap();
        eventually("a batch arrived while the second round merged", || metric(&node, "input_batches_while_merging") >= 1).await;
        assert!(ctx.runtime_env().memory_pool.reserved() > 0, "the node holds buffered rows");
        assert_eq!(open.load(Ordering::SeqCst), 4);
        drop(stream);
        eventually("the input streams are dropped", || open.load(Ordering::SeqCst) == 0).await;
        eventually("the reservation is freed", || ctx.runtime_env().memory_pool.reserved() == 0).await;
        assert_eq!(metric(&node, "rounds_cpu"), 1, "the second round had not merged");
    });
    blocker.release();
}

/// `fetch` rows from the first round end the merge though the inputs never deliver more
/// (a barrier would wait for them forever); the inputs are then dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_finishes_while_inputs_wait() {
    let data = four_partitions(4);
    let open = Arc::new(AtomicUsize::new(0));
    let (_gate, opened) = watch::channel(false);
    let scripts = data.iter().map(|b| Script { gate: Some((1, opened.clone())), ..Script::new(b.clone(), &open) }).collect();
    let input = scripted(scripts);
    // The first two rounds need only the first batches (100 rows each): the first emits
    // about one output batch, the second (due once the consumer took that batch and the
    // inputs have nothing more) every row up to the smallest first-batch last key.
    let node = CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(1 << 20)).with_fetch(Some(70));
    let out = tokio::time::timeout(HANG, collect(Arc::new(node), task_ctx(16))).await.expect("fetch ends the merge").unwrap();
    assert_eq!(concat_batches(&data[0][0].schema(), &out).unwrap(), stock(&data, Some(70), 16).await);
    eventually("the input streams are dropped", || open.load(Ordering::SeqCst) == 0).await;
}

/// An input's error arriving at any point (here while other inputs still stream) is the
/// stream's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_error_is_the_output_error() {
    let data = four_partitions(5);
    let open = Arc::new(AtomicUsize::new(0));
    let scripts =
        data.iter().enumerate().map(|(p, b)| Script { error_at: (p == 2).then_some(3), ..Script::new(b.clone(), &open) }).collect();
    let input = scripted(scripts);
    let node = CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(150));
    let err = collect(Arc::new(node), task_ctx(64)).await.unwrap_err().to_string();
    assert!(err.contains("scripted input failed at batch 3"), "{err}");
    eventually("the input streams are dropped", || open.load(Ordering::SeqCst) == 0).await;
}

/// `check_sorted`: a partition whose later batch starts below its earlier one's last key
/// is an error naming the partition and the row, also when that batch arrives while a
/// round merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_sorted_names_the_partition_and_row() {
    let mut data = four_partitions(6);
    // Partition 2: batches 0 and 1 swapped; row 100 (batch 1's first) sorts before row 99.
    data[2].swap(0, 1);
    let last = data[2][0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(99);
    let next = data[2][1].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
    assert!(last > next, "the swap breaks the order");
    let open = Arc::new(AtomicUsize::new(0));
    let input = scripted(data.iter().map(|b| Script::new(b.clone(), &open)).collect());
    let node = CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(1 << 20)).with_check_sorted(true);
    let err = collect(Arc::new(node), task_ctx(64)).await.unwrap_err().to_string();
    assert!(err.contains("input partition 2 is not sorted") && err.contains("row 100 sorts before row 99"), "{err}");
}

/// Random partitions, batch sizes, windows, output batch sizes and `fetch`, with inputs
/// that yield a random number of times before each batch (so batches arrive in varying
/// orders, before, during and after rounds): the output is stock SPM's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_arrival_orders_match_spm() {
    let mut rng = Rng::new(12);
    for case in 0..60 {
        let parts = 1 + rng.below(8) as usize;
        let domain = 1 + rng.below(500);
        let data: Vec<Vec<RecordBatch>> = (0..parts)
            .map(|p| {
                let sizes: Vec<usize> = (0..1 + rng.below(12)).map(|_| 1 + rng.below(60) as usize).collect();
                partition(&mut rng, p, &sizes, domain)
            })
            .collect();
        let open = Arc::new(AtomicUsize::new(0));
        let scripts = data
            .iter()
            .map(|b| {
                let yields = (0..b.len()).map(|_| rng.below(4) as usize).collect();
                Script { yields, ..Script::new(b.clone(), &open) }
            })
            .collect();
        let input = scripted(scripts);
        let window = 1 + rng.below(400) as usize;
        let batch_size = 1 + rng.below(100) as usize;
        let fetch = rng.chance(0.3).then(|| rng.below(600) as usize);
        let node = CoRankMergeExec::new(ordering(&input.schema()), input).with_settings(cpu(window)).with_fetch(fetch);
        let out = tokio::time::timeout(HANG, collect(Arc::new(node), task_ctx(batch_size))).await.expect("the merge finishes").unwrap();
        let got = concat_batches(&data[0][0].schema(), &out).unwrap();
        assert_eq!(got, stock(&data, fetch, batch_size).await, "case {case}: {parts} partitions, window {window}, fetch {fetch:?}");
        eventually("the input streams are dropped", || open.load(Ordering::SeqCst) == 0).await;
    }
}

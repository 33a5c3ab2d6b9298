//! The task behind `CoRankSortExec`'s output stream: reads every input partition at once,
//! sorts chunks of each partition as they fill (off the async runtime, up to one chunk per
//! core at a time, each sort itself on rayon threads), spills runs to disk when the memory
//! pool says no, then produces the output.
//!
//! **Runs.** A run is one chunk: consecutive rows of one input partition, sorted stably into
//! batches of `batch_size` rows. On the CPU a chunk is sorted as pieces of at most
//! [`PIECE_ROWS`] rows, each sorted and gathered on its own in cache, in parallel, then the
//! pieces' keys are merged and the chunk gathered from its sorted pieces; on the GPU the
//! chunk is sorted as a whole and gathered from its input batches (`sort_chunk`). At the end
//! the runs, in memory or spilled, are merged by the merge node's task ([`MergeTask`]: the
//! frontier merge in rounds, on the engine of the settings; its first round one batch, so
//! that it comes early). Once some run is spilled, the runs still in memory are spilled too.
//!
//! **Many runs.** One merge takes at most [`MAX_MERGE_FAN_IN`] runs (and, of spill files,
//! no more than the pool holds the windows of): the merge's work per input batch and per
//! round grows with its inputs, so one merge of thousands of tiny runs was quadratic. More
//! runs are first merged down in groups of consecutive runs, level by level, each group by
//! the same merge task into a run in memory or a spill file (`RunMerges::merge_down`):
//! O(n log k) in all. A spill writes each partition's runs in memory as one file, merged
//! (they are consecutive in the tie order), not a file per chunk.
//!
//! **The whole input on the device.** Where the GPU sorts and every column is fixed-width
//! or a byte view (`Utf8View`, `BinaryView`, DataFusion's strings from Parquet: the device
//! gathers the 16-byte views, the strings stay in the input's buffers, which the output
//! shares), no chunk is cut while the input is read: once it is all in,
//! it is sorted as one chunk and every column gathered on the device
//! ([`sort_on_device`]), and that is the output, with no merge at all. A chunk sort gathers
//! every row on the CPU at random and the merge gathers it again; this moves each row over
//! PCIe up once and down once instead. The pool must hold the output beside the input, and
//! the device's memory the sort and the gather; where they do not, or the pool refuses a
//! batch on the way in (the deferred chunks are then cut and sorted as they would have
//! been, and spilled), or the device fails and the options allow the CPU, the chunks are
//! sorted and merged as above.
//!
//! **Why runs are gathered before the merge.** Every gather reads its sources front to
//! back, and each reads from few at once: a piece's rows (in cache), a chunk's pieces (one
//! line per piece and column), the runs (one batch each). The earlier design merged all
//! runs' keys into one permutation and gathered it from every sorted piece at once: each
//! output row came from a different piece, a cache miss for every column of every row, and
//! nothing came out before that merge of every row was done (with chunks also cut too small
//! then, it measured 0.67x stock on 16 x 4M rows on 2 cores, 0.32x on 16 x 16M on 16 cores;
//! docs/PERFORMANCE.md).
//!
//! **Stability.** A chunk's sort is stable. Runs are keyed (partition, chunk) and merged in
//! that order, and every merge gives ties to the earlier run; a merge of a group of
//! consecutive runs takes their place in that order (the stable merge of `R1..Rk` is the
//! stable merge of the stable merges of consecutive groups, in order). So equal keys come
//! out in partition order, then row order: the stable sort of the partitions'
//! concatenation, for every chunk size and number of runs, whether runs were spilled or not.
//!
//! **Memory.** Every input batch is counted in the node's reservation (a spillable
//! `MemoryConsumer`) when it arrives, a run at its sorted batches' size once sorted.
//! When the reservation cannot grow, every partition's unfinished chunk is sorted and every
//! run in memory is written to a spill file (Arrow IPC, through DataFusion's `SpillManager`
//! and the runtime's `DiskManager`), then the batch is counted again: a second refusal, or no
//! disk manager, is the pool's `ResourcesExhausted` error. Before runs in memory are merged,
//! the merge's reservation must hold two output rounds; a pool that refuses spills every run
//! and merges the spill files instead. Each run in memory then keeps its batches counted
//! until the merge pulls them (two batches late: the merge reads two ahead), and the merge
//! counts its windows, rounds and output in its own reservation. The spill merge holds at
//! most `min(window_rows, batch_size)` rows per run (plus a batch) in that reservation. A
//! merge in between of runs in memory counts its output run in the node's reservation as it
//! comes (where the pool refuses, every run spills); of spill files, it writes a spill file.
//! The sort itself (key words, indices, a chunk's sorted pieces while it is gathered, the
//! merge of a partition's runs as it spills them) uses memory that is not counted, as
//! `SortExec`'s does beyond `sort_spill_reservation_bytes`.

use super::exec::MergeSettings;
use super::stream::{row_bytes, to_datafusion, MergeMetrics, MergeTask};
use crate::gather::gather;
use crate::options::{Engine, OnGpuFailure};
use crate::permutation::{Indices, Permutation};
use crate::sort::{merge_sorted_chunks, sort_columns, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::utils::memory::{get_record_batch_memory_size, RecordBatchMemoryCounter};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::spill_file::SpillFile;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::common::spawn_buffered;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, Gauge, MetricBuilder, Time};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{SendableRecordBatchStream, SpillManager};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Sender;
use tokio::task::JoinHandle;

/// Rows per chunk unless the node says otherwise; [`CHUNK_BYTES`] cuts wide rows sooner.
/// Each chunk is a run of the final merge and, with the GPU engine, one sort holding the
/// device: in memory (16 x 16M rows of 32 bytes) 1M-row chunks made 256 runs and 256 device
/// sorts one after the other, and 8M-row chunks sorted 1.36x faster on the CPU engine, 1.75x
/// on the GPU (H100 host, one call; docs/PERFORMANCE.md, stop 41). Wide rows, as read from
/// lineitem files, reach [`CHUNK_BYTES`] at 1-2M rows, so sorting still overlaps reading.
pub const DEFAULT_CHUNK_ROWS: usize = 1 << 23;

/// Bytes of input rows at which a chunk is sorted whatever its rows: the bytes the rows
/// themselves take (a slice's share of its buffers), not the batches' memory size, which
/// counts a sliced batch's whole buffers (the batches of an in-memory table, cut from one
/// array, each counted at the whole array: chunks of 16 times fewer rows on 16 x 1M rows).
pub const CHUNK_BYTES: usize = 256 << 20;

/// The node's metrics: the merge's (output rows, elapsed compute, which also counts the
/// chunk sorts and the merges in between, rounds), the runs sorted, the time spent sorting
/// them, the most inputs one merge of the node took (`merge_fan_in`: the merge's work per
/// input batch and per round grows with it; at most [`MAX_MERGE_FAN_IN`]) and the levels of
/// merges in between (`merge_passes`). Spills are counted by the `SpillManager`
/// (`spill_count`: files, the merges' in between included; `spilled_bytes`, `spilled_rows`).
pub struct SortMetrics {
    pub merge: MergeMetrics,
    pub runs: Count,
    pub sort_time: Time,
    pub merge_fan_in: Gauge,
    /// Levels of merges in between ([`MAX_MERGE_FAN_IN`]).
    pub merge_passes: Count,
}

impl SortMetrics {
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            merge: MergeMetrics::new(set, partition),
            runs: MetricBuilder::new(set).counter("runs", partition),
            sort_time: MetricBuilder::new(set).subset_time("sort_time", partition),
            merge_fan_in: MetricBuilder::new(set).gauge("merge_fan_in", partition),
            merge_passes: MetricBuilder::new(set).counter("merge_passes", partition),
        }
    }
}

/// One execution of the sort node (built by `CoRankSortExec::execute`).
pub struct SortTask {
    /// The input partitions' streams, in partition (tie) order.
    pub inputs: Vec<SendableRecordBatchStream>,
    pub schema: SchemaRef,
    pub expr: LexOrdering,
    pub settings: MergeSettings,
    /// Rows per chunk of a partition.
    pub chunk_rows: usize,
    /// Rows per output batch (the session's `batch_size`).
    pub batch_size: usize,
    /// Input batches and runs in memory (spillable).
    pub reservation: MemoryReservation,
    /// The merge's windows.
    pub merge_reservation: MemoryReservation,
    /// Writes and reads spill files; `None` without a disk manager (then no spilling).
    pub spill: Option<SpillManager>,
    pub metrics: SortMetrics,
}

/// A run's place in the tie order: (input partition, chunk within the partition).
type RunKey = (usize, usize);

/// A sorted run: its sorted batches in memory (counted in the reservation at `bytes`), or
/// a spill file of `rows` rows whose largest batch takes about `batch_bytes` once read back
/// ([`batch_bytes`]).
enum Run {
    Memory { batches: Vec<RecordBatch>, bytes: usize },
    Spilled { file: Arc<dyn SpillFile>, rows: usize, batch_bytes: usize },
}

/// About the memory `batch` takes read back from a spill file (each column in buffers of its
/// own, [`compacted`]), as the merge counts a buffered batch (`get_array_memory_size`, array
/// structs included): that, or, for a slice of larger arrays (a GPU round's output batches),
/// its rows' share of them with room for each column's structs and buffers' padding.
fn batch_bytes(batch: &RecordBatch) -> usize {
    batch.get_array_memory_size().min(row_bytes(batch) + 512 * batch.num_columns())
}

impl Run {
    fn rows(&self) -> usize {
        match self {
            Run::Memory { batches, .. } => batches.iter().map(|b| b.num_rows()).sum(),
            Run::Spilled { rows, .. } => *rows,
        }
    }
}

/// A partition's chunk being filled.
#[derive(Default)]
struct Chunk {
    batches: Vec<RecordBatch>,
    rows: usize,
    /// The batches' memory size (as counted in the reservation).
    bytes: usize,
    /// The bytes of the rows themselves (for [`CHUNK_BYTES`]).
    row_bytes: usize,
}

/// The bytes of `batch`'s byte view columns' data buffers (the strings the views point to).
fn view_data_bytes(batch: &RecordBatch) -> usize {
    use arrow::array::AsArray;
    let buffers = |b: &[arrow::buffer::Buffer]| b.iter().map(|b| b.capacity()).sum::<usize>();
    batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => buffers(c.as_string_view().data_buffers()),
            DataType::BinaryView => buffers(c.as_binary_view().data_buffers()),
            _ => 0,
        })
        .sum()
}

/// A chunk sorted on a blocking thread: its key, the memory its input was counted at, its
/// sorted batches, the time the sort took.
type Sorted = (RunKey, usize, Result<Vec<RecordBatch>>, Duration);

/// The sort expressions evaluated on every batch: `[batch][sort column]`.
fn key_columns(batches: &[RecordBatch], expr: &LexOrdering) -> Result<Vec<Vec<arrow::array::ArrayRef>>> {
    batches.iter().map(|b| expr.iter().map(|e| e.expr.evaluate(b)?.into_array(b.num_rows())).collect::<Result<Vec<_>>>()).collect()
}

/// Rows of a piece of a chunk that the CPU path sorts and gathers on its own: one batch's
/// columns fit a core's cache, so the gather within it reads no memory at random.
pub const PIECE_ROWS: usize = 8192;

/// Whether a chunk of `rows` rows is sorted on the CPU (else on the GPU, as a whole).
fn chunk_on_cpu(options: &SortBatchesOptions, rows: usize) -> bool {
    let engine = &options.engine;
    match engine.engine {
        Engine::Cpu => true,
        Engine::Gpu => false,
        Engine::Auto if engine.on_gpu_failure == OnGpuFailure::Error => false,
        Engine::Auto => rows < engine.gpu_min_rows || crate::engine::gpu_availability().is_err(),
    }
}

/// Sorts one chunk stably into a run: sorted batches of `options.batch_size` rows. Two
/// ways, the same order:
///
/// - CPU: the chunk's batches cut into pieces of at most [`PIECE_ROWS`] rows, each sorted
///   and gathered on its own, in parallel (in cache), then the pieces' keys merged and the
///   run gathered from the sorted pieces, each read front to back: no read at random over
///   the chunk's memory.
/// - GPU: the chunk sorted as a whole on the device, gathered from its input batches.
fn sort_chunk(batches: Vec<RecordBatch>, expr: &LexOrdering, specs: &[SortKey], options: &SortBatchesOptions) -> Result<Vec<RecordBatch>> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if !chunk_on_cpu(options, rows) {
        let perm = sort_columns(&key_columns(&batches, expr)?, specs, options).map_err(to_datafusion)?;
        return gathered(&batches, &perm, options.batch_size);
    }
    let cpu = options.clone().with_engine(Engine::Cpu);
    let pieces: Vec<RecordBatch> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).step_by(PIECE_ROWS).map(move |s| b.slice(s, PIECE_ROWS.min(b.num_rows() - s))))
        .collect();
    drop(batches);
    let sorted: Vec<Vec<RecordBatch>> = pieces
        .into_par_iter()
        .map(|piece| {
            let piece = [piece];
            let perm = sort_columns(&key_columns(&piece, expr)?, specs, &cpu).map_err(to_datafusion)?;
            gathered(&piece, &perm, PIECE_ROWS)
        })
        .collect::<Result<_>>()?;
    let sorted: Vec<RecordBatch> = sorted.into_iter().flatten().collect();
    // Every sorted batch is a run in order: the identity within it.
    let mut offsets = Vec::with_capacity(sorted.len() + 1);
    offsets.push(0);
    let mut orders = Vec::with_capacity(sorted.len());
    for b in &sorted {
        offsets.push(offsets.last().unwrap() + b.num_rows());
        orders.push(Indices::U32((0..b.num_rows() as u32).collect()));
    }
    let perm = merge_sorted_chunks(&key_columns(&sorted, expr)?, specs, &offsets, &orders, &cpu).map_err(to_datafusion)?;
    gathered(&sorted, &perm, options.batch_size)
}

/// Whether the node defers its chunks to sort the whole input on the device: the engine may
/// use the GPU, one is usable, and every column is of a type the device gathers
/// ([`device_width`](crate::engine::gpu::gather::device_width): fixed-width types and byte
/// views).
fn sorts_whole_on_device(schema: &SchemaRef, options: &SortBatchesOptions) -> bool {
    #[cfg(feature = "gpu")]
    {
        use crate::engine::gpu::gather::device_width;
        options.engine.engine != Engine::Cpu
            && !schema.fields().is_empty()
            && schema.fields().iter().all(|f| device_width(f.data_type()).is_some())
            && crate::engine::gpu_availability().is_ok()
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (schema, options);
        false
    }
}

/// Sorts `batches` (the whole input, partitions in order) stably as one chunk on the GPU and
/// gathers every column on the device into ordinary memory
/// ([`GatherOutput::Pageable`](crate::engine::gpu::GatherOutput)): batches of
/// `options.batch_size` rows with `schema`, slices of one array per column. `None`, before
/// any work, where the device's memory cannot hold the sort and the gather
/// ([`whole_sort_device_bytes`](crate::engine::gpu::whole_sort_device_bytes), with the key
/// words' width bounded by the sort columns' types): the caller sorts chunks instead.
#[cfg(feature = "gpu")]
fn sort_on_device(
    batches: &[RecordBatch],
    expr: &LexOrdering,
    specs: &[SortKey],
    options: &SortBatchesOptions,
    schema: &SchemaRef,
) -> Result<Option<Vec<RecordBatch>>> {
    use crate::engine::gpu::gather::{device_width, fixed_width};
    use crate::engine::gpu::{device_bytes_available, gather_fixed_gpu_into, whole_sort_device_bytes, GatherOutput, GpuOptions};
    use arrow::array::RecordBatchOptions;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    // At most: each sort column's value bytes (the widest key word, 32 bytes, for a type of
    // no fixed width: strings sort by prefix words) and a byte where it may be null, in
    // whole 8-byte words, up to the widest key word.
    let mut key_bytes = 0;
    for e in expr.iter() {
        key_bytes += fixed_width(&e.expr.data_type(schema)?).unwrap_or(32) + usize::from(e.expr.nullable(schema)?);
    }
    let key_bytes = key_bytes.next_multiple_of(8).clamp(8, 32);
    let device_row_bytes: usize = schema.fields().iter().map(|f| device_width(f.data_type()).unwrap_or(16) + 1).sum();
    let device = options.engine.devices.first();
    if whole_sort_device_bytes(rows, key_bytes, device_row_bytes) > device_bytes_available(device).map_err(to_datafusion)? {
        return Ok(None);
    }
    let perm = sort_columns(&key_columns(batches, expr)?, specs, options).map_err(to_datafusion)?;
    let columns: Vec<usize> = (0..schema.fields().len()).collect();
    let gpu_options = GpuOptions { devices: options.engine.devices, ..GpuOptions::default() };
    let arrays = gather_fixed_gpu_into(batches, &perm, &columns, &gpu_options, GatherOutput::Pageable).map_err(to_datafusion)?;
    let rows = perm.len();
    let batch_size = options.batch_size.max(1);
    let out = (0..rows)
        .step_by(batch_size)
        .map(|start| {
            let len = batch_size.min(rows - start);
            let columns = arrays.iter().map(|a| a.slice(start, len)).collect();
            let options = RecordBatchOptions::new().with_row_count(Some(len));
            Ok(RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)?)
        })
        .collect::<Result<_>>()?;
    Ok(Some(out))
}

#[cfg(not(feature = "gpu"))]
fn sort_on_device(
    _: &[RecordBatch],
    _: &LexOrdering,
    _: &[SortKey],
    _: &SortBatchesOptions,
    _: &SchemaRef,
) -> Result<Option<Vec<RecordBatch>>> {
    Err(DataFusionError::NotImplemented("corank was built without the `gpu` feature".into()))
}

/// Rows gathered into batches of `batch_size` rows in the order of `perm`.
fn gathered(batches: &[RecordBatch], perm: &Permutation, batch_size: usize) -> Result<Vec<RecordBatch>> {
    gather(batches, perm, batch_size).map_err(to_datafusion)
}

fn out_of_memory(e: DataFusionError, spilling: bool) -> DataFusionError {
    let why = if spilling {
        "CoRankSortExec: not enough memory to sort, even after spilling every sorted run to disk; \
         consider increasing 'datafusion.runtime.memory_limit'"
    } else {
        "CoRankSortExec: not enough memory to sort and the disk manager is disabled (no spilling); \
         consider increasing 'datafusion.runtime.memory_limit' or enabling the disk manager"
    };
    e.context(why)
}

/// The ingest state: chunks being filled, chunks being sorted, the runs.
struct Runs {
    expr: LexOrdering,
    specs: Vec<SortKey>,
    options: SortBatchesOptions,
    chunk_rows: usize,
    reservation: MemoryReservation,
    spill: Option<SpillManager>,
    pending: Vec<Chunk>,
    /// Chunks started per partition (the next chunk's number).
    chunks: Vec<usize>,
    sorting: FuturesUnordered<JoinHandle<Sorted>>,
    /// Chunks waiting for a sort to finish ([`Runs::launch`]), keyed already.
    queued: VecDeque<(RunKey, Chunk)>,
    /// Chunk sorts at most at once: one per core (each sort itself runs on every core).
    max_sorting: usize,
    /// No chunk is cut while true: the input may be sorted whole on the device
    /// ([`sorts_whole_on_device`]); false from the first spill on.
    defer: bool,
    runs: BTreeMap<RunKey, Run>,
    /// The keys of the runs in memory (a spill writes these, not every run so far).
    memory_runs: Vec<RunKey>,
    runs_count: Count,
    sort_time: Time,
    elapsed_compute: Time,
}

impl Runs {
    /// Adds an input batch of partition `i` to its chunk; a full chunk starts sorting.
    async fn push(&mut self, i: usize, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = get_record_batch_memory_size(&batch);
        self.reserve(bytes).await?;
        let chunk = &mut self.pending[i];
        chunk.rows += batch.num_rows();
        chunk.bytes += bytes;
        chunk.row_bytes += row_bytes(&batch);
        chunk.batches.push(batch);
        if !self.defer && (chunk.rows >= self.chunk_rows || chunk.row_bytes >= CHUNK_BYTES) {
            self.start_sort(i);
        }
        Ok(())
    }

    /// Counts `bytes` more, spilling everything first if the pool says no.
    async fn reserve(&mut self, bytes: usize) -> Result<()> {
        if let Err(e) = self.reservation.try_grow(bytes) {
            if self.spill.is_none() {
                return Err(out_of_memory(e, false));
            }
            self.spill_all().await?;
            self.reservation.try_grow(bytes).map_err(|e| out_of_memory(e, true))?;
        }
        Ok(())
    }

    /// Sorts partition `i`'s chunk (if it holds rows) on blocking threads: as one chunk, or,
    /// where it grew past the chunk limits while chunks were deferred, as the chunks
    /// [`Runs::push`] would have cut (after the batch that reaches a limit).
    fn start_sort(&mut self, i: usize) {
        let pending = std::mem::take(&mut self.pending[i]);
        if pending.rows < self.chunk_rows && pending.row_bytes < CHUNK_BYTES {
            return self.spawn_sort(i, pending);
        }
        let mut chunk = Chunk::default();
        for batch in pending.batches {
            // The same size push counted it at.
            chunk.bytes += get_record_batch_memory_size(&batch);
            chunk.rows += batch.num_rows();
            chunk.row_bytes += row_bytes(&batch);
            chunk.batches.push(batch);
            if chunk.rows >= self.chunk_rows || chunk.row_bytes >= CHUNK_BYTES {
                self.spawn_sort(i, std::mem::take(&mut chunk));
            }
        }
        self.spawn_sort(i, chunk);
    }

    /// Queues `chunk`, partition `i`'s next, for a sort (nothing without rows), and starts
    /// what the limit allows.
    fn spawn_sort(&mut self, i: usize, chunk: Chunk) {
        if chunk.rows == 0 {
            return;
        }
        let key = (i, self.chunks[i]);
        self.chunks[i] += 1;
        self.queued.push_back((key, chunk));
        self.launch();
    }

    /// Starts queued chunk sorts on blocking threads while fewer than `max_sorting` run: a
    /// partition cut into many chunks at once (deferred chunks, a spill) is sorted a core's
    /// worth at a time, as reading would have paced it, so the sorted copies of at most that
    /// many chunks exist beside their input at once.
    fn launch(&mut self) {
        while self.sorting.len() < self.max_sorting {
            let Some((key, chunk)) = self.queued.pop_front() else { break };
            let (expr, specs, options) = (self.expr.clone(), self.specs.clone(), self.options.clone());
            self.sorting.push(tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let sorted = sort_chunk(chunk.batches, &expr, &specs, &options);
                (key, chunk.bytes, sorted, started.elapsed())
            }));
        }
    }

    /// The whole input, deferred in the partitions' chunks, sorted at once on the device
    /// ([`sort_on_device`]): the output batches, counted in the reservation until the
    /// reservation drops, the input uncounted; `None` where the chunks are to be sorted
    /// instead (too few rows for the engine, no room in the pool for the output beside
    /// the input or on the device for the sort and the gather, or the device failed and the
    /// options allow the CPU).
    async fn sort_whole(&mut self, schema: &SchemaRef) -> Result<Option<Vec<RecordBatch>>> {
        let batches: Vec<RecordBatch> = self.pending.iter().flat_map(|c| c.batches.iter().cloned()).collect();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if rows == 0 {
            return Ok(Some(Vec::new()));
        }
        if chunk_on_cpu(&self.options, rows) {
            return Ok(None);
        }
        // The output's own bytes, and the input's string buffers that byte view columns
        // share with it (they stay alive with the output once the input's count is dropped).
        let out_bytes = self.pending.iter().map(|c| c.row_bytes).sum::<usize>() + batches.iter().map(view_data_bytes).sum::<usize>();
        if self.reservation.try_grow(out_bytes).is_err() {
            return Ok(None);
        }
        let (expr, specs, options, out_schema) = (self.expr.clone(), self.specs.clone(), self.options.clone(), Arc::clone(schema));
        let started = Instant::now();
        let sorted = tokio::task::spawn_blocking(move || sort_on_device(&batches, &expr, &specs, &options, &out_schema))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        match sorted {
            Ok(None) => {
                // The device's memory cannot hold it: chunks.
                self.reservation.shrink(out_bytes.min(self.reservation.size()));
                Ok(None)
            }
            Ok(Some(out)) => {
                self.sort_time.add_duration(started.elapsed());
                self.elapsed_compute.add_duration(started.elapsed());
                self.runs_count.add(1);
                let in_bytes: usize = self.pending.iter_mut().map(|c| std::mem::take(c).bytes).sum();
                self.reservation.shrink(in_bytes.min(self.reservation.size()));
                Ok(Some(out))
            }
            Err(e) if self.options.engine.on_gpu_failure != OnGpuFailure::Error => {
                log::warn!("corank: sorting the whole input on the GPU failed ({e}); sorting it in chunks instead");
                self.reservation.shrink(out_bytes.min(self.reservation.size()));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Makes a sorted chunk a run in memory, counted at its sorted batches' size (instead of
    /// its input's); false if the pool refused that (it is counted anyway: the caller
    /// spills).
    fn add_run(&mut self, done: std::result::Result<Sorted, tokio::task::JoinError>) -> Result<bool> {
        self.launch(); // a sort finished: room for a queued one
        let (key, in_bytes, sorted, elapsed) = done.map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.sort_time.add_duration(elapsed);
        self.elapsed_compute.add_duration(elapsed);
        let batches = sorted?;
        let bytes = batches.iter().map(get_record_batch_memory_size).sum::<usize>();
        self.reservation.shrink(in_bytes.min(self.reservation.size()));
        let fits = self.reservation.try_grow(bytes).is_ok();
        if !fits {
            self.reservation.grow(bytes);
        }
        self.runs_count.add(1);
        self.runs.insert(key, Run::Memory { batches, bytes });
        self.memory_runs.push(key);
        Ok(fits)
    }

    /// A chunk's sort finished: its run stays in memory if it fits, else everything spills.
    async fn finish_sort(&mut self, done: std::result::Result<Sorted, tokio::task::JoinError>) -> Result<()> {
        if !self.add_run(done)? {
            if self.spill.is_none() {
                let e = DataFusionError::ResourcesExhausted(format!("a sorted run of {} bytes does not fit", self.reservation.size()));
                return Err(out_of_memory(e, false));
            }
            self.spill_all().await?;
        }
        Ok(())
    }

    /// Sorts every unfinished chunk, waits for every sort, and writes every run in memory
    /// to its own spill file (uncounting it).
    async fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.clone() else {
            return Err(DataFusionError::Internal("CoRankSortExec: spilling without a spill manager".into()));
        };
        // The input no longer fits whole: chunks from here on.
        self.defer = false;
        for i in 0..self.pending.len() {
            self.start_sort(i);
        }
        while let Some(done) = self.sorting.next().await {
            self.add_run(done)?;
        }
        self.spill_memory_runs(&spill).await
    }

    /// Writes the runs in memory to spill files (off the runtime): each partition's as one
    /// file, merged, where it holds several. A partition's runs in memory are its chunks
    /// since its last spill (a spill waits for every sort started), consecutive in the tie
    /// order, so their merge is a run in their place; one file each would hold an open file
    /// for every chunk (thousands of small chunks ran out of file handles) and make the
    /// merge take them all. Only the runs in memory are visited (with a spill every few
    /// batches, visiting every run so far made the spills quadratic in the runs).
    async fn spill_memory_runs(&mut self, spill: &SpillManager) -> Result<()> {
        let mut keys = std::mem::take(&mut self.memory_runs);
        keys.sort_unstable();
        for same in keys.chunk_by(|a, b| a.0 == b.0) {
            let (first, last) = (same[0], same[same.len() - 1]);
            let consecutive = self.runs.range(first..=last).count() == same.len();
            if same.len() == 1 || !consecutive {
                for key in same {
                    if let Some(run) = self.runs.get_mut(key) {
                        spill_run(run, spill, &self.reservation).await?;
                    }
                }
                continue;
            }
            let mut runs = Vec::with_capacity(same.len());
            let mut bytes = 0;
            for key in same {
                match self.runs.remove(key) {
                    Some(Run::Memory { batches, bytes: b }) => {
                        runs.push(batches);
                        bytes += b;
                    }
                    _ => return Err(DataFusionError::Internal("CoRankSortExec: a run to spill is not in memory".into())),
                }
            }
            let (expr, specs, options, writer) = (self.expr.clone(), self.specs.clone(), self.options.clone(), spill.clone());
            let (file, rows, batch_bytes) =
                tokio::task::spawn_blocking(move || merge_into_spill_file(runs, &expr, &specs, &options, &writer))
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))??;
            let file = file.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: runs with rows spilled no file".into()))?;
            self.runs.insert(first, Run::Spilled { file, rows, batch_bytes });
            self.reservation.shrink(bytes.min(self.reservation.size()));
        }
        Ok(())
    }
}

/// Merges consecutive sorted runs in memory (in tie order) on the CPU, as a chunk's pieces
/// are merged ([`sort_chunk`]), and writes the merge to one spill file, gathered a few
/// batches at a time (the merged copy is never whole in memory).
fn merge_into_spill_file(
    runs: Vec<Vec<RecordBatch>>,
    expr: &LexOrdering,
    specs: &[SortKey],
    options: &SortBatchesOptions,
    spill: &SpillManager,
) -> Result<Written> {
    let cpu = options.clone().with_engine(Engine::Cpu);
    let mut offsets = vec![0];
    let mut orders = Vec::with_capacity(runs.len());
    for run in &runs {
        let rows: usize = run.iter().map(|b| b.num_rows()).sum();
        offsets.push(offsets.last().unwrap() + rows);
        orders.push(Indices::U32((0..rows as u32).collect()));
    }
    let batches: Vec<RecordBatch> = runs.into_iter().flatten().collect();
    let perm = merge_sorted_chunks(&key_columns(&batches, expr)?, specs, &offsets, &orders, &cpu).map_err(to_datafusion)?;
    let mut file = spill.create_in_progress_file("CoRankSortExec")?;
    let piece = cpu.batch_size.max(1) * 8;
    let mut largest = 0;
    for start in (0..perm.len()).step_by(piece) {
        let end = (start + piece).min(perm.len());
        let indices = match &perm.indices {
            Indices::U32(v) => Indices::U32(v[start..end].to_vec()),
            Indices::U64(v) => Indices::U64(v[start..end].to_vec()),
        };
        let part = Permutation { indices, ..perm.clone_without_indices() };
        for batch in gathered(&batches, &part, cpu.batch_size)? {
            largest = largest.max(batch_bytes(&batch));
            file.append_batch(&batch)?;
        }
    }
    Ok((file.finish()?, perm.len(), largest))
}

/// Writes `run`, if in memory, to its own spill file (off the runtime), uncounting it from
/// `reservation`.
async fn spill_run(run: &mut Run, spill: &SpillManager, reservation: &MemoryReservation) -> Result<()> {
    let Run::Memory { batches, bytes } = run else { return Ok(()) };
    let (batches, bytes) = (std::mem::take(batches), *bytes);
    let rows = batches.iter().map(|b| b.num_rows()).sum();
    let largest = batches.iter().map(batch_bytes).max().unwrap_or(0);
    let writer = spill.clone();
    let file = tokio::task::spawn_blocking(move || writer.spill_record_batch_and_finish(&batches, "CoRankSortExec"))
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))??;
    let Some(file) = file else {
        return Err(DataFusionError::Internal("CoRankSortExec: a run with rows spilled no file".into()));
    };
    *run = Run::Spilled { file, rows, batch_bytes: largest };
    reservation.shrink(bytes.min(reservation.size()));
    Ok(())
}

/// A run in memory as a stream of its sorted batches. Its reservation (the run's bytes)
/// shrinks by each batch's share of it (by rows: a merged run's batches may share buffers)
/// two pulls after the batch leaves (the merge's input task reads two ahead; the merge counts
/// a batch once it holds it) and is freed with the stream.
fn memory_run_stream(batches: Vec<RecordBatch>, reservation: MemoryReservation, schema: SchemaRef) -> SendableRecordBatchStream {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let state = (VecDeque::from(batches), VecDeque::new(), reservation, rows);
    let stream = futures::stream::unfold(state, |(mut batches, mut lagging, reservation, rows)| async move {
        let batch = batches.pop_front()?;
        // The batch's share of what the reservation holds for the rows left.
        let share =
            (reservation.size().saturating_sub(lagging.iter().sum()) as u128 * batch.num_rows() as u128 / rows.max(1) as u128) as usize;
        lagging.push_back(share);
        if lagging.len() > 2 {
            let bytes = lagging.pop_front().unwrap_or(0);
            reservation.shrink(bytes.min(reservation.size()));
        }
        let rows = rows - batch.num_rows();
        Some((Ok(batch), (batches, lagging, reservation, rows)))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// What a pull of input `i` gave, and its stream to pull again.
type Arrival = (usize, Option<Result<RecordBatch>>, SendableRecordBatchStream);

fn next_batch(i: usize, stream: SendableRecordBatchStream) -> impl Future<Output = Arrival> {
    stream.into_future().map(move |(item, stream)| (i, item, stream))
}

/// A spilled run read back, each batch copied into buffers of its own: a batch decoded from a
/// spill file holds slices of one large read buffer, which DataFusion's memory accounting
/// (and the merge's) counts whole for every column (measured: about 768 KB a batch of 256
/// rows of three columns), so a merge of a few spilled runs overran a small pool.
fn compacted(stream: SendableRecordBatchStream, schema: SchemaRef) -> SendableRecordBatchStream {
    let compact = |b: RecordBatch| -> Result<RecordBatch> {
        let all = arrow::array::UInt32Array::from_iter_values(0..b.num_rows() as u32);
        Ok(arrow::compute::take_record_batch(&b, &all)?)
    };
    Box::pin(RecordBatchStreamAdapter::new(schema, stream.map(move |b| b.and_then(compact))))
}

impl SortTask {
    /// Reads, sorts, spills and merges, sending the sorted batches to `tx`; returns when
    /// all are sent or the receiver was dropped.
    pub async fn run(self, tx: Sender<Result<RecordBatch>>) -> Result<()> {
        let SortTask { inputs, schema, expr, settings, chunk_rows, batch_size, reservation, merge_reservation, spill, metrics } = self;
        let SortMetrics { merge: merge_metrics, runs: runs_count, sort_time, merge_fan_in, merge_passes } = metrics;
        let n = inputs.len();
        let specs: Vec<SortKey> = expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect();
        let options = SortBatchesOptions { engine: settings.engine, batch_size: batch_size.max(1) };
        let mut state = Runs {
            expr: expr.clone(),
            specs,
            options,
            chunk_rows: chunk_rows.max(1),
            reservation,
            spill,
            pending: (0..n).map(|_| Chunk::default()).collect(),
            chunks: vec![0; n],
            sorting: FuturesUnordered::new(),
            queued: VecDeque::new(),
            max_sorting: std::thread::available_parallelism().map_or(1, |c| c.get()),
            defer: false,
            runs: BTreeMap::new(),
            memory_runs: Vec::new(),
            runs_count,
            sort_time,
            elapsed_compute: merge_metrics.baseline.elapsed_compute().clone(),
        };
        state.defer = sorts_whole_on_device(&schema, &state.options);
        // 1. Read every partition at once (each polled by its own task, two batches ahead);
        //    sort chunks as they fill, at most one per core at a time (reading pauses
        //    meanwhile: the sorts use every core).
        let mut pulling: FuturesUnordered<_> = inputs.into_iter().enumerate().map(|(i, s)| next_batch(i, spawn_buffered(s, 2))).collect();
        loop {
            tokio::select! {
                biased;
                Some(done) = state.sorting.next(), if !state.sorting.is_empty() => state.finish_sort(done).await?,
                Some((i, item, stream)) = pulling.next(), if !pulling.is_empty() && state.sorting.len() < state.max_sorting && state.queued.is_empty() => match item {
                    Some(Ok(batch)) => {
                        state.push(i, batch).await?;
                        pulling.push(next_batch(i, stream));
                    }
                    Some(Err(e)) => return Err(e),
                    None if state.defer => {}
                    None => state.start_sort(i),
                },
                else => break,
            }
        }
        // 1b. Chunks deferred to the end (nothing spilled): the whole input sorted on the
        //     device is the output; else the chunks are sorted now, as step 1 would have.
        if state.defer {
            state.defer = false;
            if let Some(batches) = state.sort_whole(&schema).await? {
                // The output reservation (in `state`) lives until every batch is sent.
                return send_run(futures::stream::iter(batches.into_iter().map(Ok)), &tx, &merge_metrics).await;
            }
            for i in 0..n {
                state.start_sort(i);
            }
            while let Some(done) = state.sorting.next().await {
                state.finish_sort(done).await?;
            }
        }
        // 2. Nothing spilled: the runs in memory are merged if the pool holds two output
        //    rounds besides them; else (or once anything spilled) every run spills: memory
        //    for the merge's windows. (Runs sorted after the last spill are still in memory
        //    then: they spill too, or the merge of the spill files finds the pool full.)
        let mut spilled = state.runs.values().any(|r| matches!(r, Run::Spilled { .. }));
        if spilled {
            if let Some(spill) = state.spill.clone() {
                state.spill_memory_runs(&spill).await?;
            }
        } else {
            let (rows, in_bytes) = state.runs.values().fold((0, 0), |(r, b), run| match run {
                Run::Memory { batches, bytes } => (r + batches.iter().map(|b| b.num_rows()).sum::<usize>(), b + bytes),
                Run::Spilled { .. } => (r, b),
            });
            let round_rows = output_round_rows(batch_size).min(rows);
            let round_bytes = (in_bytes as u128 * round_rows as u128 / rows.max(1) as u128) as usize;
            if merge_reservation.try_grow(2 * round_bytes).is_ok() {
                // The merge counts what it holds from here on.
                merge_reservation.shrink(2 * round_bytes);
            } else if state.spill.is_none() {
                let e = DataFusionError::ResourcesExhausted(format!("no room for {} bytes of output rounds", 2 * round_bytes));
                return Err(out_of_memory(e, false));
            } else if let Some(spill) = state.spill.clone() {
                state.spill_memory_runs(&spill).await?;
                spilled = true;
            }
        }
        // 3. The runs in (partition, chunk) order: the merge's inputs in tie order. More than
        //    MAX_MERGE_FAN_IN are first merged down, in groups of consecutive runs, to at most
        //    that many. A run in memory hands its part of the reservation to its stream.
        let Runs { runs, spill, reservation, .. } = state;
        let merges = RunMerges {
            schema: &schema,
            expr: &expr,
            settings: &settings,
            batch_size,
            spill: spill.as_ref(),
            reservation: &reservation,
            merge_reservation: &merge_reservation,
            metrics: &merge_metrics,
            merge_fan_in: &merge_fan_in,
            merge_passes: &merge_passes,
        };
        let runs = merges.merge_down(runs.into_values().collect(), &mut spilled).await?;
        let mut streams = runs.into_iter().map(|run| merges.stream(run)).collect::<Result<Vec<_>>>()?;
        drop(reservation);
        if streams.len() <= 1 {
            // One run (or none) is the output as it is.
            return match streams.pop() {
                Some(run) => send_run(run, &tx, &merge_metrics).await,
                None => send_run(futures::stream::empty(), &tx, &merge_metrics).await,
            };
        }
        let window_rows = merge_window_rows(&settings, batch_size, spilled);
        merge_fan_in.set_max(streams.len());
        let task = MergeTask {
            inputs: streams,
            schema,
            expr,
            fetch: None,
            settings: MergeSettings { window_rows, ..settings },
            check_sorted: false,
            batch_size,
            reservation: merge_reservation,
            metrics: merge_metrics,
        };
        task.run(tx).await
    }
}

/// Inputs one merge of the node takes at most. The merge task's work per input batch and
/// per round grows with its inputs (every live input holds a row before each round; the
/// frontier is the least of their last keys), so a merge of all of thousands of tiny runs
/// was quadratic: 10k / 20k / 40k one-row runs took 0.9 / 5.5 / 38 s on the 2-core dev VM
/// (stock `SortExec`: 0.01 / 0.04 / 0.08 s). More runs than this are merged down first, in
/// groups of consecutive runs ([`level_groups`]), each group's merge a run of the next level:
/// ceil(log_F k) levels of work O(n) each, and no more than this many spill files open at
/// once. Consecutive groups keep the order: the stable merge of runs `R1..Rk` is the stable
/// merge of the stable merges of `R1..Ri`, `Ri+1..Rj`, ... in that order.
pub const MAX_MERGE_FAN_IN: usize = 128;

/// A merge written to a spill file: the file (none without rows), its rows, the
/// [`batch_bytes`] of its largest batch.
type Written = (Option<Arc<dyn SpillFile>>, usize, usize);

/// Output batches a merge in between may send ahead of the code that keeps them.
const GROUP_BATCHES_AHEAD: usize = 4;

/// Rows each input of a merge of the node buffers: `window_rows`, or, when the runs are
/// spill files, at most a batch (the windows are what the merge holds in memory).
fn merge_window_rows(settings: &MergeSettings, batch_size: usize, spilled: bool) -> usize {
    if spilled {
        settings.window_rows.min(batch_size).max(1)
    } else {
        settings.window_rows
    }
}

/// The groups of consecutive runs (ranges of `rows`, each run's rows) that one level merges,
/// each into one run, so that at most `fan_in` runs remain, or, where one level cannot get
/// there, as few as it can; none if `rows` holds at most `fan_in` runs. Where a few groups
/// suffice, those of the fewest rows: the runs left alone are not copied again.
fn level_groups(rows: &[usize], fan_in: usize) -> Vec<std::ops::Range<usize>> {
    let (k, fan_in) = (rows.len(), fan_in.max(2));
    if k <= fan_in {
        return Vec::new();
    }
    let excess = k - fan_in;
    // A group of g runs takes away g - 1.
    let groups = excess.div_ceil(fan_in - 1);
    if groups == 1 {
        // One group of excess + 1 runs: the window of that many with the fewest rows.
        let len = excess + 1;
        let mut sum: usize = rows[..len].iter().sum();
        let (mut best, mut best_sum) = (0, sum);
        for start in 1..=k - len {
            sum = sum + rows[start + len - 1] - rows[start - 1];
            if sum < best_sum {
                (best, best_sum) = (start, sum);
            }
        }
        return std::iter::once(best..best + len).collect();
    }
    let blocks: Vec<std::ops::Range<usize>> = (0..k).step_by(fan_in).map(|s| s..(s + fan_in).min(k)).collect();
    let full = blocks.iter().filter(|b| b.len() == fan_in).count();
    if full < groups {
        // This level merges every block; the next goes on.
        return blocks.into_iter().filter(|b| b.len() > 1).collect();
    }
    // `groups` full blocks are enough: those of the fewest rows, in order.
    let mut chosen: Vec<std::ops::Range<usize>> = blocks.into_iter().filter(|b| b.len() == fan_in).collect();
    chosen.sort_by_key(|b| (rows[b.clone()].iter().sum::<usize>(), b.start));
    chosen.truncate(groups);
    chosen.sort_by_key(|b| b.start);
    chosen
}

/// What the merges of the node's runs share: the final merge and the merges in between
/// ([`MAX_MERGE_FAN_IN`]).
struct RunMerges<'a> {
    schema: &'a SchemaRef,
    expr: &'a LexOrdering,
    settings: &'a MergeSettings,
    batch_size: usize,
    spill: Option<&'a SpillManager>,
    /// The runs in memory, each counted at its bytes.
    reservation: &'a MemoryReservation,
    /// The merge's consumer: a merge in between counts its windows in an empty reservation
    /// of it.
    merge_reservation: &'a MemoryReservation,
    /// The node's: the merges in between add their compute time and rounds, not their
    /// output.
    metrics: &'a MergeMetrics,
    merge_fan_in: &'a Gauge,
    merge_passes: &'a Count,
}

impl RunMerges<'_> {
    /// A run as a merge's input: a run in memory takes its bytes out of the reservation with
    /// it.
    fn stream(&self, run: Run) -> Result<SendableRecordBatchStream> {
        Ok(match run {
            Run::Memory { batches, bytes } => {
                let run_reservation = self.reservation.split(bytes.min(self.reservation.size()));
                memory_run_stream(batches, run_reservation, Arc::clone(self.schema))
            }
            Run::Spilled { file, .. } => {
                let spill =
                    self.spill.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: a spilled run without a spill manager".into()))?;
                compacted(spill.read_spill_as_stream(file, None)?, Arc::clone(self.schema))
            }
        })
    }

    /// Merges `runs` (in tie order) down to at most [`fan_in`](Self::fan_in) runs, level by
    /// level ([`level_groups`]). A group of runs in memory merges into a run in memory, of
    /// spill files into a spill file; where the pool refuses a merged run in memory, every
    /// run spills (as when a sorted chunk does not fit), `spilled` turns true, and the next
    /// level goes on with the spill files.
    async fn merge_down(&self, mut runs: Vec<Run>, spilled: &mut bool) -> Result<Vec<Run>> {
        loop {
            let fan_in = self.fan_in(&runs, *spilled);
            if runs.len() <= fan_in {
                return Ok(runs);
            }
            let rows: Vec<usize> = runs.iter().map(Run::rows).collect();
            self.merge_passes.add(1);
            let mut slots: Vec<Option<Run>> = runs.into_iter().map(Some).collect();
            let take = |slot: &mut Option<Run>| slot.take().expect("every run is taken once");
            let mut next: Vec<Run> = Vec::with_capacity(slots.len());
            let mut at = 0;
            for group in level_groups(&rows, fan_in) {
                next.extend(slots[at..group.start].iter_mut().map(take));
                let inputs: Vec<Run> = slots[group.clone()].iter_mut().map(take).collect();
                at = group.end;
                let (merged, fits) = self.merge_group(inputs, *spilled).await?;
                next.push(merged);
                if !fits {
                    let Some(spill) = self.spill else {
                        let e =
                            DataFusionError::ResourcesExhausted(format!("a merged run of {} bytes does not fit", self.reservation.size()));
                        return Err(out_of_memory(e, false));
                    };
                    for run in next.iter_mut().chain(slots[at..].iter_mut().flatten()) {
                        spill_run(run, spill, self.reservation).await?;
                    }
                    *spilled = true;
                    break; // the next level's groups fit the spill files' windows
                }
            }
            next.extend(slots[at..].iter_mut().map(take));
            runs = next;
        }
    }

    /// Inputs a merge of `runs` may take: [`MAX_MERGE_FAN_IN`], and, where the runs are
    /// spill files, no more than the pool holds the windows of (as stock DataFusion merges
    /// its spill files): about four of the runs' largest batches an input (one buffered, the
    /// rest of one a round cut, the round's rows, their merged output); at least 2.
    fn fan_in(&self, runs: &[Run], spilled: bool) -> usize {
        if !spilled {
            return MAX_MERGE_FAN_IN;
        }
        let largest = runs.iter().map(|r| if let Run::Spilled { batch_bytes, .. } = r { *batch_bytes } else { 0 }).max().unwrap_or(0);
        let probe = self.merge_reservation.new_empty();
        let mut fits = 0;
        while fits < MAX_MERGE_FAN_IN.min(runs.len()) && probe.try_grow(4 * largest).is_ok() {
            fits += 1;
        }
        fits.max(2)
    }

    /// Merges a group of consecutive runs into one (the merge task, as the final merge runs
    /// it): into memory (counted in the reservation; false with it where the pool refused:
    /// it is counted anyway, the caller spills), or, with `spilled`, into a spill file.
    async fn merge_group(&self, group: Vec<Run>, spilled: bool) -> Result<(Run, bool)> {
        self.merge_fan_in.set_max(group.len());
        let inputs = group.into_iter().map(|run| self.stream(run)).collect::<Result<Vec<_>>>()?;
        // The merge's own metrics, not the node's: its output is not the node's.
        let metrics_set = ExecutionPlanMetricsSet::new();
        let task = MergeTask {
            inputs,
            schema: Arc::clone(self.schema),
            expr: self.expr.clone(),
            fetch: None,
            settings: MergeSettings { window_rows: merge_window_rows(self.settings, self.batch_size, spilled), ..self.settings.clone() },
            check_sorted: false,
            batch_size: self.batch_size,
            reservation: self.merge_reservation.new_empty(),
            metrics: MergeMetrics::new(&metrics_set, 0),
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(GROUP_BATCHES_AHEAD);
        let merged = if spilled {
            let spill = self.spill.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: spilling without a spill manager".into()))?;
            let mut file = spill.create_in_progress_file("CoRankSortExec")?;
            // Written off the runtime as the batches come.
            let writer = tokio::task::spawn_blocking(move || -> Result<Written> {
                let (mut rows, mut largest) = (0, 0);
                while let Some(batch) = rx.blocking_recv() {
                    let batch = batch?;
                    rows += batch.num_rows();
                    largest = largest.max(batch_bytes(&batch));
                    file.append_batch(&batch)?;
                }
                Ok((file.finish()?, rows, largest))
            });
            // (A failed write drops the receiver: the merge then stops without an error.)
            let (done, written) = tokio::join!(task.run(tx), writer);
            done?;
            let (file, rows, batch_bytes) = written.map_err(|e| DataFusionError::External(Box::new(e)))??;
            let file = file.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: a merge of runs with rows spilled no file".into()))?;
            (Run::Spilled { file, rows, batch_bytes }, true)
        } else {
            let keep = async {
                // Batches of a merged round may share buffers: each buffer counted once.
                let mut counter = RecordBatchMemoryCounter::new();
                let (mut batches, mut bytes, mut fits) = (Vec::new(), 0, true);
                while let Some(batch) = rx.recv().await {
                    let batch = batch?;
                    let more = counter.count_batch(&batch);
                    if self.reservation.try_grow(more).is_err() {
                        self.reservation.grow(more);
                        fits = false;
                    }
                    bytes += more;
                    batches.push(batch);
                }
                Ok::<_, DataFusionError>((batches, bytes, fits))
            };
            let (done, kept) = tokio::join!(task.run(tx), keep);
            done?;
            let (batches, bytes, fits) = kept?;
            (Run::Memory { batches, bytes }, fits)
        };
        add_merge_work(self.metrics, &metrics_set);
        Ok(merged)
    }
}

/// Adds a merge's compute time and rounds (in `set`) to the node's metrics.
fn add_merge_work(node: &MergeMetrics, set: &ExecutionPlanMetricsSet) {
    let m = set.clone_inner();
    let value = |name: &str| m.sum_by_name(name).map_or(0, |v| v.as_usize());
    node.baseline.elapsed_compute().add_duration(Duration::from_nanos(m.elapsed_compute().unwrap_or(0) as u64));
    node.rounds_cpu.add(value("rounds_cpu"));
    node.rounds_gpu.add(value("rounds_gpu"));
    node.gpu_bytes_up.add(value("gpu_bytes_up"));
    node.gpu_bytes_down.add(value("gpu_bytes_down"));
    node.gpu_time.add_duration(Duration::from_nanos(value("gpu_time") as u64));
    node.batches_while_merging.add(value("input_batches_while_merging"));
}

/// Sends one sorted run's batches as the output, as they come; returns when all are sent or
/// the receiver was dropped.
async fn send_run(
    mut run: impl futures::Stream<Item = Result<RecordBatch>> + Unpin,
    tx: &Sender<Result<RecordBatch>>,
    metrics: &MergeMetrics,
) -> Result<()> {
    while let Some(batch) = run.next().await {
        let batch = batch?;
        metrics.record_batch(&batch);
        if tx.send(Ok(batch)).await.is_err() {
            return Ok(()); // the output stream was dropped
        }
    }
    metrics.baseline.done();
    Ok(())
}

/// Rows of an output round of the merge of runs in memory, as the room check before it
/// counts them: whole batches, about [`CPU_ROUND_ROWS`](super::stream::CPU_ROUND_ROWS).
fn output_round_rows(batch_size: usize) -> usize {
    let batch_size = batch_size.max(1);
    (super::stream::CPU_ROUND_ROWS / batch_size).max(1) * batch_size
}

#[cfg(test)]
mod tests {
    use super::level_groups;

    /// Applies `level_groups` until at most `fan_in` runs remain: each level's groups are
    /// disjoint ranges of at least 2 and at most `fan_in` runs, every level shrinks the
    /// count, the levels are about log_fan_in(k), and the rows add up.
    #[test]
    fn levels_merge_down_to_the_fan_in() {
        for (k, fan_in) in [(1, 4), (4, 4), (5, 4), (7, 4), (8, 4), (16, 4), (17, 4), (100, 4), (129, 128), (300, 128), (40_000, 128)] {
            let mut rows: Vec<usize> = (0..k).map(|i| 1 + (i * 7919) % 13).collect();
            let total: usize = rows.iter().sum();
            let mut levels = 0;
            loop {
                let groups = level_groups(&rows, fan_in);
                if rows.len() <= fan_in {
                    assert!(groups.is_empty(), "{k} runs, fan-in {fan_in}");
                    break;
                }
                levels += 1;
                let mut next = Vec::new();
                let mut at = 0;
                for g in &groups {
                    assert!(g.start >= at && g.len() >= 2 && g.len() <= fan_in, "{k} runs, fan-in {fan_in}: {groups:?}");
                    next.extend_from_slice(&rows[at..g.start]);
                    next.push(rows[g.clone()].iter().sum());
                    at = g.end;
                }
                next.extend_from_slice(&rows[at..]);
                assert!(next.len() < rows.len());
                rows = next;
            }
            assert_eq!(rows.iter().sum::<usize>(), total);
            let bound = (k.max(2) as f64).log(fan_in as f64).ceil() as usize;
            assert!(levels < bound.max(1), "{k} runs, fan-in {fan_in}: {levels} levels");
        }
        // One group suffices: the window of the fewest rows (the first of equals).
        assert_eq!(level_groups(&[5, 1, 1, 9, 1], 4), std::iter::once(1..3).collect::<Vec<_>>());
        assert_eq!(level_groups(&[5, 1, 9, 1, 1], 3), std::iter::once(1..4).collect::<Vec<_>>());
        assert_eq!(level_groups(&[9, 9, 9, 1, 1, 1, 2, 2, 2], 5), std::iter::once(3..8).collect::<Vec<_>>());
    }
}

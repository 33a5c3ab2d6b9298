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
//! that order, and both merges give ties to the earlier run. So equal keys come out in
//! partition order, then row order: the stable sort of the partitions' concatenation, for
//! every chunk size and whether runs were spilled or not.
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
//! most `min(window_rows, batch_size)` rows per run (plus a batch) in that reservation. The
//! sort itself (key words, indices, a chunk's sorted pieces while it is gathered) uses
//! memory that is not counted, as `SortExec`'s does beyond `sort_spill_reservation_bytes`.

use super::exec::MergeSettings;
use super::stream::{row_bytes, to_datafusion, MergeMetrics, MergeTask};
use crate::gather::gather;
use crate::options::{Engine, OnGpuFailure};
use crate::permutation::{Indices, Permutation};
use crate::sort::{merge_sorted_chunks, sort_columns, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::utils::memory::get_record_batch_memory_size;
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
/// chunk sorts, rounds), the runs sorted, the time spent sorting them, and the most inputs
/// one merge of the node took (`merge_fan_in`: the merge's work per input batch and per
/// round grows with it). Spills are counted by the `SpillManager` (`spill_count`,
/// `spilled_bytes`, `spilled_rows`).
pub struct SortMetrics {
    pub merge: MergeMetrics,
    pub runs: Count,
    pub sort_time: Time,
    pub merge_fan_in: Gauge,
}

impl SortMetrics {
    pub fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        Self {
            merge: MergeMetrics::new(set, partition),
            runs: MetricBuilder::new(set).counter("runs", partition),
            sort_time: MetricBuilder::new(set).subset_time("sort_time", partition),
            merge_fan_in: MetricBuilder::new(set).gauge("merge_fan_in", partition),
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
/// a spill file.
enum Run {
    Memory { batches: Vec<RecordBatch>, bytes: usize },
    Spilled(Arc<dyn SpillFile>),
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

    /// Writes every run in memory to its own spill file (off the runtime).
    async fn spill_memory_runs(&mut self, spill: &SpillManager) -> Result<()> {
        for run in self.runs.values_mut() {
            let Run::Memory { batches, bytes } = run else { continue };
            let (batches, bytes) = (std::mem::take(batches), *bytes);
            let writer = spill.clone();
            let file = tokio::task::spawn_blocking(move || writer.spill_record_batch_and_finish(&batches, "CoRankSortExec"))
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))??;
            let Some(file) = file else {
                return Err(DataFusionError::Internal("CoRankSortExec: a run with rows spilled no file".into()));
            };
            *run = Run::Spilled(file);
            self.reservation.shrink(bytes.min(self.reservation.size()));
        }
        Ok(())
    }
}

/// A run in memory as a stream of its sorted batches. Its reservation (the run's bytes)
/// shrinks by each batch two pulls after the batch leaves (the merge's input task reads two
/// ahead; the merge counts a batch once it holds it) and is freed with the stream.
fn memory_run_stream(batches: Vec<RecordBatch>, reservation: MemoryReservation, schema: SchemaRef) -> SendableRecordBatchStream {
    let state = (VecDeque::from(batches), VecDeque::new(), reservation);
    let stream = futures::stream::unfold(state, |(mut batches, mut lagging, reservation)| async move {
        let batch = batches.pop_front()?;
        lagging.push_back(get_record_batch_memory_size(&batch));
        if lagging.len() > 2 {
            let bytes = lagging.pop_front().unwrap_or(0);
            reservation.shrink(bytes.min(reservation.size()));
        }
        Some((Ok(batch), (batches, lagging, reservation)))
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
        let SortMetrics { merge: merge_metrics, runs: runs_count, sort_time, merge_fan_in } = metrics;
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
        let mut spilled = state.runs.values().any(|r| matches!(r, Run::Spilled(_)));
        if spilled {
            if let Some(spill) = state.spill.clone() {
                state.spill_memory_runs(&spill).await?;
            }
        } else {
            let (rows, in_bytes) = state.runs.values().fold((0, 0), |(r, b), run| match run {
                Run::Memory { batches, bytes } => (r + batches.iter().map(|b| b.num_rows()).sum::<usize>(), b + bytes),
                Run::Spilled(_) => (r, b),
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
        // 3. The runs in (partition, chunk) order: the merge's inputs in tie order. A run in
        //    memory hands its part of the reservation to its stream.
        let Runs { runs, spill, reservation, .. } = state;
        let mut streams = Vec::with_capacity(runs.len());
        for run in runs.into_values() {
            streams.push(match run {
                Run::Memory { batches, bytes } => {
                    let run_reservation = reservation.split(bytes.min(reservation.size()));
                    memory_run_stream(batches, run_reservation, Arc::clone(&schema))
                }
                Run::Spilled(file) => {
                    let spill = spill
                        .as_ref()
                        .ok_or_else(|| DataFusionError::Internal("CoRankSortExec: a spilled run without a spill manager".into()))?;
                    compacted(spill.read_spill_as_stream(file, None)?, Arc::clone(&schema))
                }
            });
        }
        drop(reservation);
        if streams.len() <= 1 {
            // One run (or none) is the output as it is.
            return match streams.pop() {
                Some(run) => send_run(run, &tx, &merge_metrics).await,
                None => send_run(futures::stream::empty(), &tx, &merge_metrics).await,
            };
        }
        let window_rows = if spilled { settings.window_rows.min(batch_size).max(1) } else { settings.window_rows };
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

//! A sort node's ingest state ([`Runs`]): each partition's chunk being filled, the chunk
//! sorts in flight (off the async runtime, at most one per core), the sorted runs in tie
//! order, and the spills when the memory pool says no (see the module doc of
//! [`super::sort_stream`] for the memory rules).

use super::error::out_of_memory;
use super::sort_chunk::{sort_chunk, Chunk};
use super::sort_spill::{merge_into_spill_file, spill_run, Run};
use crate::engine::placement;
use crate::sort::SortBatchesOptions;
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::utils::memory::get_record_batch_memory_size;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::metrics::{Count, Time};
use datafusion::physical_plan::SpillManager;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// A run's place in the tie order: (input partition, chunk within the partition).
pub(super) type RunKey = (usize, usize);

/// A chunk sorted on a blocking thread: its key, the memory its input was counted at, its
/// sorted batches, the time the sort took.
pub(super) type Sorted = (RunKey, usize, Result<(Vec<RecordBatch>, bool)>, Duration);

/// The ingest state: chunks being filled, chunks being sorted, the runs.
pub(super) struct Runs {
    pub(super) expr: LexOrdering,
    pub(super) specs: Vec<SortKey>,
    pub(super) options: SortBatchesOptions,
    pub(super) chunk_rows: usize,
    pub(super) reservation: MemoryReservation,
    pub(super) spill: Option<SpillManager>,
    pub(super) pending: Vec<Chunk>,
    /// Chunks started per partition (the next chunk's number).
    pub(super) chunks: Vec<usize>,
    pub(super) sorting: FuturesUnordered<JoinHandle<Sorted>>,
    /// Chunks waiting for a sort to finish ([`Runs::launch`]), keyed already.
    pub(super) queued: VecDeque<(RunKey, Chunk)>,
    /// Chunk sorts at most at once: one per core (each sort itself runs on every core).
    pub(super) max_sorting: usize,
    /// No chunk is cut while true: the input may be sorted whole on the device
    /// ([`placement::sorts_whole_on_device`]); false from the first spill on.
    pub(super) defer: bool,
    pub(super) runs: BTreeMap<RunKey, Run>,
    /// The keys of the runs in memory (a spill writes these, not every run so far).
    pub(super) memory_runs: Vec<RunKey>,
    pub(super) runs_count: Count,
    /// Runs the device sorted (chunks, or the whole input at once).
    pub(super) runs_gpu: Count,
    pub(super) sort_time: Time,
    pub(super) elapsed_compute: Time,
}

impl Runs {
    /// The ingest state of a sort of `partitions` input partitions, nothing read yet; it
    /// defers its chunks where the whole input of `schema` may sort on the device
    /// ([`placement::sorts_whole_on_device`]).
    pub(super) fn new(
        (partitions, schema): (usize, &SchemaRef),
        expr: &LexOrdering,
        options: SortBatchesOptions,
        chunk_rows: usize,
        reservation: MemoryReservation,
        spill: Option<SpillManager>,
        metrics: (Count, Count, Time, Time),
    ) -> Self {
        let (runs_count, runs_gpu, sort_time, elapsed_compute) = metrics;
        let defer = placement::sorts_whole_on_device(&options.engine, schema.fields().iter().map(|f| f.data_type()));
        Self {
            expr: expr.clone(),
            specs: expr.iter().map(|e| SortKey::new(e.expr.to_string(), e.options)).collect(),
            options,
            chunk_rows: chunk_rows.max(1),
            reservation,
            spill,
            pending: (0..partitions).map(|_| Chunk::default()).collect(),
            chunks: vec![0; partitions],
            sorting: FuturesUnordered::new(),
            queued: VecDeque::new(),
            max_sorting: std::thread::available_parallelism().map_or(1, |c| c.get()),
            defer,
            runs: BTreeMap::new(),
            memory_runs: Vec::new(),
            runs_count,
            runs_gpu,
            sort_time,
            elapsed_compute,
        }
    }

    /// Adds an input batch of partition `i` to its chunk; a full chunk starts sorting.
    pub(super) async fn push(&mut self, i: usize, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = get_record_batch_memory_size(&batch);
        self.reserve(bytes).await?;
        let chunk = &mut self.pending[i];
        chunk.add(batch, bytes);
        if !self.defer && chunk.full(self.chunk_rows) {
            self.start_sort(i);
        }
        Ok(())
    }

    /// Counts `bytes` more, spilling everything first if the pool says no.
    pub(super) async fn reserve(&mut self, bytes: usize) -> Result<()> {
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
    pub(super) fn start_sort(&mut self, i: usize) {
        let pending = std::mem::take(&mut self.pending[i]);
        if !pending.full(self.chunk_rows) {
            return self.spawn_sort(i, pending);
        }
        let mut chunk = Chunk::default();
        for batch in pending.batches {
            // The same size push counted it at.
            let bytes = get_record_batch_memory_size(&batch);
            chunk.add(batch, bytes);
            if chunk.full(self.chunk_rows) {
                self.spawn_sort(i, std::mem::take(&mut chunk));
            }
        }
        self.spawn_sort(i, chunk);
    }

    /// Queues `chunk`, partition `i`'s next, for a sort (nothing without rows), and starts
    /// what the limit allows.
    pub(super) fn spawn_sort(&mut self, i: usize, chunk: Chunk) {
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
    pub(super) fn launch(&mut self) {
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

    /// spills).
    pub(super) fn add_run(&mut self, done: std::result::Result<Sorted, tokio::task::JoinError>) -> Result<bool> {
        self.launch(); // a sort finished: room for a queued one
        let (key, in_bytes, sorted, elapsed) = done.map_err(|e| DataFusionError::External(Box::new(e)))?;
        self.sort_time.add_duration(elapsed);
        self.elapsed_compute.add_duration(elapsed);
        let (batches, on_device) = sorted?;
        self.runs_gpu.add(usize::from(on_device));
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
    pub(super) async fn finish_sort(&mut self, done: std::result::Result<Sorted, tokio::task::JoinError>) -> Result<()> {
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
    pub(super) async fn spill_all(&mut self) -> Result<()> {
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
    pub(super) async fn spill_memory_runs(&mut self, spill: &SpillManager) -> Result<()> {
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

//! A sort node's runs and spill files: a sorted run in memory or spilled ([`Run`]), a run
//! written to a spill file ([`spill_run`]) or the merge of a partition's consecutive runs
//! written to one ([`merge_into_spill_file`]), and both read back as a merge's input
//! ([`memory_run_stream`], [`compacted`]). Files go through DataFusion's `SpillManager`
//! (Arrow IPC, the runtime's `DiskManager`).

use super::error::to_datafusion;
use super::metrics::row_bytes;
use super::sort_chunk::{gathered, key_columns};
use crate::options::Engine;
use crate::permutation::{Indices, Permutation};
use crate::sort::{merge_sorted_chunks, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::execution::spill_file::SpillFile;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{SendableRecordBatchStream, SpillManager};
use futures::StreamExt;
use std::collections::VecDeque;
use std::sync::Arc;

/// A sorted run: its sorted batches in memory (counted in the reservation at `bytes`), or
/// a spill file of `rows` rows whose largest batch takes about `batch_bytes` once read back
/// ([`batch_bytes`]).
pub(super) enum Run {
    Memory { batches: Vec<RecordBatch>, bytes: usize },
    Spilled { file: Arc<dyn SpillFile>, rows: usize, batch_bytes: usize },
}

/// About the memory `batch` takes read back from a spill file (each column in buffers of its
/// own, [`compacted`]), as the merge counts a buffered batch (`get_array_memory_size`, array
/// structs included): that, or, for a slice of larger arrays (a GPU round's output batches),
/// its rows' share of them with room for each column's structs and buffers' padding.
pub(super) fn batch_bytes(batch: &RecordBatch) -> usize {
    batch.get_array_memory_size().min(row_bytes(batch) + 512 * batch.num_columns())
}

impl Run {
    pub(super) fn rows(&self) -> usize {
        match self {
            Run::Memory { batches, .. } => batches.iter().map(|b| b.num_rows()).sum(),
            Run::Spilled { rows, .. } => *rows,
        }
    }
}

/// Merges consecutive sorted runs in memory (in tie order) on the CPU, as a chunk's pieces
/// are merged ([`sort_chunk`](super::sort_chunk::sort_chunk)), and writes the merge to one spill file, gathered a few
/// batches at a time (the merged copy is never whole in memory).
pub(super) fn merge_into_spill_file(
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
pub(super) async fn spill_run(run: &mut Run, spill: &SpillManager, reservation: &MemoryReservation) -> Result<()> {
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
pub(super) fn memory_run_stream(batches: Vec<RecordBatch>, reservation: MemoryReservation, schema: SchemaRef) -> SendableRecordBatchStream {
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

/// A spilled run read back, each batch copied into buffers of its own: a batch decoded from a
/// spill file holds slices of one large read buffer, which DataFusion's memory accounting
/// (and the merge's) counts whole for every column (many times a small batch's own size),
/// so a merge of a few spilled runs overran a small pool.
pub(super) fn compacted(stream: SendableRecordBatchStream, schema: SchemaRef) -> SendableRecordBatchStream {
    let compact = |b: RecordBatch| -> Result<RecordBatch> {
        let all = arrow::array::UInt32Array::from_iter_values(0..b.num_rows() as u32);
        Ok(arrow::compute::take_record_batch(&b, &all)?)
    };
    Box::pin(RecordBatchStreamAdapter::new(schema, stream.map(move |b| b.and_then(compact))))
}

/// A merge written to a spill file: the file (none without rows), its rows, the
/// [`batch_bytes`] of its largest batch.
pub(super) type Written = (Option<Arc<dyn SpillFile>>, usize, usize);

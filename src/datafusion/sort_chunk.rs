//! A sort node's chunks: consecutive rows of one input partition, cut at `chunk_rows` rows
//! or [`CHUNK_BYTES`] bytes of rows, each sorted stably into a run ([`sort_chunk`]: on the
//! CPU in pieces of [`PIECE_ROWS`] rows, then merged; on the GPU as a whole, as
//! [`placement::chunk_on_cpu`] decides).

use super::error::to_datafusion;
use super::metrics::row_bytes;
use crate::engine::placement;
use crate::gather::gather;
use crate::options::Engine;
use crate::permutation::{Indices, Permutation};
use crate::sort::{merge_sorted_chunks, sort_columns, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, RecordBatch};
use datafusion::common::Result;
use datafusion::physical_expr::LexOrdering;
use rayon::prelude::*;

/// Rows per chunk unless the node says otherwise; [`CHUNK_BYTES`] cuts wide rows sooner.
/// Each chunk is a run of the final merge and, with the GPU engine, one sort holding the
/// device: small chunks make many runs and many device sorts one after the other, so large
/// chunks sort faster on either engine (`docs/performance.md`). Wide rows reach
/// [`CHUNK_BYTES`] well before this many rows, so sorting still overlaps reading.
pub const DEFAULT_CHUNK_ROWS: usize = 1 << 23;

/// Bytes of input rows at which a chunk is sorted whatever its rows: the bytes the rows
/// themselves take (a slice's share of its buffers), not the batches' memory size, which
/// counts a sliced batch's whole buffers (the batches of an in-memory table, cut from one
/// array, each counted at the whole array: chunks of 16 times fewer rows on 16 x 1M rows).
pub const CHUNK_BYTES: usize = 256 << 20;

/// A partition's chunk being filled.
#[derive(Default)]
pub(super) struct Chunk {
    pub(super) batches: Vec<RecordBatch>,
    pub(super) rows: usize,
    /// The batches' memory size (as counted in the reservation).
    pub(super) bytes: usize,
    /// The bytes of the rows themselves (for [`CHUNK_BYTES`]).
    pub(super) row_bytes: usize,
}

impl Chunk {
    /// Adds `batch`, counted in the reservation at `bytes`.
    pub(super) fn add(&mut self, batch: RecordBatch, bytes: usize) {
        self.rows += batch.num_rows();
        self.bytes += bytes;
        self.row_bytes += row_bytes(&batch);
        self.batches.push(batch);
    }

    /// Whether the chunk reached `chunk_rows` rows or [`CHUNK_BYTES`] bytes of rows.
    pub(super) fn full(&self, chunk_rows: usize) -> bool {
        self.rows >= chunk_rows || self.row_bytes >= CHUNK_BYTES
    }
}

/// The sort expressions evaluated on every batch: `[batch][sort column]`.
pub(super) fn key_columns(batches: &[RecordBatch], expr: &LexOrdering) -> Result<Vec<Vec<ArrayRef>>> {
    batches.iter().map(|b| expr.iter().map(|e| e.expr.evaluate(b)?.into_array(b.num_rows())).collect::<Result<Vec<_>>>()).collect()
}

/// Rows of a piece of a chunk that the CPU path sorts and gathers on its own: one batch's
/// columns fit a core's cache, so the gather within it reads no memory at random.
pub const PIECE_ROWS: usize = 8192;

/// Sorts one chunk stably into a run: sorted batches of `options.batch_size` rows. Two
/// ways, the same order:
///
/// - CPU: the chunk's batches cut into pieces of at most [`PIECE_ROWS`] rows, each sorted
///   and gathered on its own, in parallel (in cache), then the pieces' keys merged and the
///   run gathered from the sorted pieces, each read front to back: no read at random over
///   the chunk's memory.
/// - GPU: the chunk sorted as a whole on the device, gathered from its input batches.
///
/// Also returns whether the device sorted it (the `runs_gpu` metric).
pub(super) fn sort_chunk(
    batches: Vec<RecordBatch>,
    expr: &LexOrdering,
    specs: &[SortKey],
    options: &SortBatchesOptions,
) -> Result<(Vec<RecordBatch>, bool)> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    if !placement::chunk_on_cpu(&options.engine, rows) {
        let perm = sort_columns(&key_columns(&batches, expr)?, specs, options).map_err(to_datafusion)?;
        return Ok((gathered(&batches, &perm, options.batch_size)?, perm.engine == Engine::Gpu));
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
    Ok((gathered(&sorted, &perm, options.batch_size)?, false))
}

/// Rows gathered into batches of `batch_size` rows in the order of `perm`.
pub(super) fn gathered(batches: &[RecordBatch], perm: &Permutation, batch_size: usize) -> Result<Vec<RecordBatch>> {
    gather(batches, perm, batch_size).map_err(to_datafusion)
}

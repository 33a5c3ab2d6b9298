//! The public sort API: RecordBatches in any order + sort keys → stable permutation → batches.
//!
//! The counterpart of the merge API ([`merge`](crate::merge),
//! [`merge_permutation`](crate::merge_permutation)) for input that is not sorted: the sort
//! columns of all input batches are encoded as one sequence of key words
//! ([`crate::keys`]), sorted stably by the sort engine ([`crate::engine::sort`]: sorted
//! tiles, then the co-rank merge tree), rows whose words tie but whose values may differ
//! (long strings, columns past the key budget) are ordered exactly by the full comparator
//! (`order::ties`), and the rows are gathered ([`crate::gather()`]).
//!
//! The sort is **stable, always**: equal keys keep their input order (batch order, then row
//! order within a batch), the same order as a stable sort of the concatenated batches by
//! arrow's row format for the same [`SortOptions`](arrow::compute::SortOptions).

use crate::api::key_columns;
use crate::cancel::Cancel;
use crate::engine::merge_keys_carrying;
use crate::engine::sort::sort_keys;
use crate::error::{Error, Result};
use crate::gather::gather;
use crate::keys::{encode_runs, KeyColumn, KeyWord};
use crate::options::{Engine, EngineOptions};
use crate::order::ties::{resolve_ties, FullComparator};
use crate::permutation::{Indices, Permutation};
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, RecordBatch};
use rayon::prelude::*;

/// How to sort (named so as not to clash with arrow's per-column `SortOptions`).
/// [`sort_batches`] has an example.
#[derive(Debug, Clone)]
pub struct SortBatchesOptions {
    /// Which engine sorts (`sort_keys`: the same choice
    /// as the merge's, `gpu_min_rows` and the CPU fallback included).
    pub engine: EngineOptions,
    /// Rows per output batch of [`sort_batches`] ([`DEFAULT_BATCH_SIZE`](crate::DEFAULT_BATCH_SIZE)
    /// by default; 0 is an error).
    pub batch_size: usize,
}

impl Default for SortBatchesOptions {
    fn default() -> Self {
        Self { engine: EngineOptions::default(), batch_size: crate::DEFAULT_BATCH_SIZE }
    }
}

impl SortBatchesOptions {
    /// Sets the engine, keeping the other engine options.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine.engine = engine;
        self
    }
    /// Sets all the engine options ([`engine`](Self::engine)).
    pub fn with_engine_options(mut self, engine: EngineOptions) -> Self {
        self.engine = engine;
        self
    }
    /// Sets [`batch_size`](Self::batch_size), in rows.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
}

/// The stable sort order of key columns: `batches[b][c]` is input batch `b`'s array for
/// sort column `c` (same types in every batch). The result's `run_offsets` are the
/// batches' offsets, its indices the global input position (batch offset + row) of every
/// output row.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{ArrayRef, StringArray};
/// use corank::{sort_columns, SortBatchesOptions, SortKey};
///
/// let col = Arc::new(StringArray::from(vec![Some("b"), None, Some("a")])) as ArrayRef;
/// let perm = sort_columns(&[vec![col]], &[SortKey::asc("s")], &SortBatchesOptions::default())?;
/// assert_eq!(perm.indices.to_vec(), [2, 0, 1]); // ascending, nulls last
/// # Ok::<(), corank::Error>(())
/// ```
pub fn sort_columns(batches: &[Vec<ArrayRef>], keys: &[SortKey], options: &SortBatchesOptions) -> Result<Permutation> {
    sort_columns_until(batches, keys, options, None)
}

/// [`sort_columns`] that stops with [`Error::Cancelled`] once `cancel` is set (between its
/// steps, and within the CPU sort: [`sort_keys`]). The Parquet sort's.
pub(crate) fn sort_columns_until(
    batches: &[Vec<ArrayRef>],
    keys: &[SortKey],
    options: &SortBatchesOptions,
    cancel: Option<&Cancel>,
) -> Result<Permutation> {
    let encoded = encode_runs(batches, keys)?;
    crate::cancel::check(cancel)?;
    // The full comparator is only needed where keys may tie on different values.
    let full = if encoded.exact { None } else { Some(FullComparator::new(batches, keys, &encoded.run_offsets)?) };
    let (mut indices, engine) = sort_keys(&encoded.keys, &options.engine, cancel)?;
    if let Some(full) = &full {
        // Equal words form contiguous segments of the sorted output, each in input order
        // (the sort is stable): a stable sort of each by the full comparator finishes it.
        resolve_ties(&mut indices, &encoded.keys, full);
    }
    let key_bytes = encoded.keys.key_bytes();
    Ok(Permutation { run_offsets: encoded.run_offsets, indices, engine, key_bytes })
}

/// The stable sort order of key columns whose rows come in chunks that are each sorted
/// already: `batches[b][c]` is batch `b`'s array for sort column `c` (as for
/// [`sort_columns`]); chunk `k` is the batches whose rows are `chunk_offsets[k] ..
/// chunk_offsets[k + 1]` (batch boundaries, the last entry the total), and `orders[k]` its
/// stable sort order, as [`sort_columns`] gives it for the chunk's batches (positions from
/// the chunk's first row). Returns what [`sort_columns`] returns for all the batches at
/// once (the same indices), with one merge of the sorted chunks instead of a sort.
///
/// The keys of all batches are encoded again together (a chunk's own encoding may differ
/// from another's: a null bit only where a chunk has nulls, string prefixes by its longest
/// value), put in each chunk's sorted order, and merged by the engine carrying their input
/// positions; rows whose words tie but whose values may differ are then ordered by the full
/// comparator (in each segment of equal words, every chunk's rows are in its sorted order, so
/// a stable sort of the segment by value gives input order among equal values).
/// (The DataFusion sort node's merge of its CPU pieces; unused without that feature.)
#[cfg_attr(not(feature = "datafusion"), allow(dead_code))]
pub(crate) fn merge_sorted_chunks(
    batches: &[Vec<ArrayRef>],
    keys: &[SortKey],
    chunk_offsets: &[usize],
    orders: &[Indices],
    options: &SortBatchesOptions,
) -> Result<Permutation> {
    let encoded = encode_runs(batches, keys)?;
    let n = encoded.keys.len();
    let chunk_len = |k: usize| chunk_offsets[k + 1] - chunk_offsets[k];
    if chunk_offsets.first() != Some(&0)
        || chunk_offsets.last() != Some(&n)
        || orders.len() + 1 != chunk_offsets.len()
        || orders.iter().enumerate().any(|(k, o)| chunk_offsets[k + 1] < chunk_offsets[k] || o.len() != chunk_len(k))
    {
        return Err(Error::InvalidArgument("merge_sorted_chunks: chunk offsets and orders do not match the batches".into()));
    }
    let full = if encoded.exact { None } else { Some(FullComparator::new(batches, keys, &encoded.run_offsets)?) };
    let sorted = match &encoded.keys {
        KeyColumn::U32(v) => KeyColumn::U32(in_chunk_order(v, chunk_offsets, orders)),
        KeyColumn::U64(v) => KeyColumn::U64(in_chunk_order(v, chunk_offsets, orders)),
        KeyColumn::U64x2(v) => KeyColumn::U64x2(in_chunk_order(v, chunk_offsets, orders)),
        KeyColumn::U64x3(v) => KeyColumn::U64x3(in_chunk_order(v, chunk_offsets, orders)),
        KeyColumn::U64x4(v) => KeyColumn::U64x4(in_chunk_order(v, chunk_offsets, orders)),
    };
    let positions = |o: &Indices, base: usize, j: usize| base + o.get(j);
    let idx = if n <= u32::MAX as usize {
        Indices::U32(in_chunks(n, chunk_offsets, |k, j| positions(&orders[k], chunk_offsets[k], j) as u32))
    } else {
        Indices::U64(in_chunks(n, chunk_offsets, |k, j| positions(&orders[k], chunk_offsets[k], j) as u64))
    };
    let (mut indices, engine) = merge_keys_carrying(sorted, idx, chunk_offsets, &options.engine)?;
    if let Some(full) = &full {
        resolve_ties(&mut indices, &encoded.keys, full);
    }
    let key_bytes = encoded.keys.key_bytes();
    Ok(Permutation { run_offsets: encoded.run_offsets, indices, engine, key_bytes })
}

/// `keys` with every chunk's rows in its sorted order.
fn in_chunk_order<T: KeyWord>(keys: &[T], chunk_offsets: &[usize], orders: &[Indices]) -> Vec<T> {
    in_chunks(keys.len(), chunk_offsets, |k, j| keys[chunk_offsets[k] + orders[k].get(j)])
}

/// Rows per parallel task of [`in_chunks`].
const PIECE: usize = 1 << 16;

/// `n` values, value `chunk_offsets[k] + j` being `f(k, j)`, the chunks in parallel.
fn in_chunks<T: Copy + Default + Send>(n: usize, chunk_offsets: &[usize], f: impl Fn(usize, usize) -> T + Sync) -> Vec<T> {
    let mut out = vec![T::default(); n];
    // (chunk, first position within the chunk, piece): long chunks in pieces of their own,
    // so that a few chunks still keep every thread busy.
    let mut pieces: Vec<(usize, usize, &mut [T])> = Vec::with_capacity(chunk_offsets.len());
    let mut rest = out.as_mut_slice();
    for k in 0..chunk_offsets.len().saturating_sub(1) {
        let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(chunk_offsets[k + 1] - chunk_offsets[k]);
        for (p, piece) in chunk.chunks_mut(PIECE).enumerate() {
            pieces.push((k, p * PIECE, piece));
        }
        rest = tail;
    }
    pieces.into_par_iter().for_each(|(k, start, piece)| {
        for (j, o) in piece.iter_mut().enumerate() {
            *o = f(k, start + j);
        }
    });
    out
}

/// The stable sort order of RecordBatches by `keys`: for every output row, its input batch
/// and row (see [`Permutation::run_row`]; "run" is the input batch here). Equal keys keep
/// batch order, then row order. Every batch must have the first batch's columns (names and
/// types); errors name the batch as the run.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use corank::{sort_permutation, SortBatchesOptions, SortKey};
///
/// let batch = |k: Vec<i64>| RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as _)]).unwrap();
/// let perm = sort_permutation(&[batch(vec![5, 2]), batch(vec![4])], &[SortKey::desc("k")], &SortBatchesOptions::default())?;
/// assert_eq!(perm.to_run_rows(), [(0, 0), (1, 0), (0, 1)]);
/// # Ok::<(), corank::Error>(())
/// ```
pub fn sort_permutation(batches: &[RecordBatch], keys: &[SortKey], options: &SortBatchesOptions) -> Result<Permutation> {
    sort_permutation_until(batches, keys, options, None)
}

/// [`sort_permutation`] that stops with [`Error::Cancelled`] once `cancel` is set
/// ([`sort_columns_until`]).
pub(crate) fn sort_permutation_until(
    batches: &[RecordBatch],
    keys: &[SortKey],
    options: &SortBatchesOptions,
    cancel: Option<&Cancel>,
) -> Result<Permutation> {
    let columns = key_columns(batches, keys)?;
    sort_columns_until(&columns, keys, options, cancel)
}

/// Sorts RecordBatches stably by `keys` into batches of `options.batch_size` rows (shorter
/// where a dictionary batch had to be split, as [`gather()`] does); no input rows, no
/// output batches.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch, StringArray};
/// use corank::{sort_batches, Engine, SortBatchesOptions, SortKey};
///
/// let batch = |k: Vec<i64>, v: Vec<&str>| {
///     RecordBatch::try_from_iter([
///         ("k", Arc::new(Int64Array::from(k)) as _),
///         ("v", Arc::new(StringArray::from(v)) as _),
///     ]).unwrap()
/// };
/// let batches = [batch(vec![3, 1], vec!["a", "b"]), batch(vec![2, 3], vec!["c", "d"])];
/// let options = SortBatchesOptions::default().with_engine(Engine::Cpu);
/// let out = sort_batches(&batches, &[SortKey::asc("k")], &options)?;
/// let v = out[0].column(1).as_any().downcast_ref::<StringArray>().unwrap();
/// let v: Vec<_> = v.iter().map(Option::unwrap).collect();
/// assert_eq!(v, ["b", "c", "a", "d"]); // the two 3s in input order
/// # Ok::<(), corank::Error>(())
/// ```
pub fn sort_batches(batches: &[RecordBatch], keys: &[SortKey], options: &SortBatchesOptions) -> Result<Vec<RecordBatch>> {
    if options.batch_size == 0 {
        return Err(Error::InvalidArgument("batch size must be at least 1".into()));
    }
    let perm = sort_permutation(batches, keys, options)?;
    gather(batches, &perm, options.batch_size)
}

//! The public sort API: RecordBatches in any order + sort keys → stable permutation → batches.
//!
//! The counterpart of the merge API ([`crate::api`]) for input that is not sorted: the sort
//! columns of all input batches are encoded as one sequence of key words
//! ([`crate::keys`]), sorted stably by the sort engine ([`crate::engine::sort`]: sorted
//! tiles, then the co-rank merge tree), rows whose words tie but whose values may differ
//! (long strings, columns past the key budget) are ordered exactly by the full comparator
//! ([`crate::order::ties`]), and the rows are gathered ([`crate::gather()`]).
//!
//! The sort is **stable, always**: equal keys keep their input order (batch order, then row
//! order within a batch), the same order as a stable sort of the concatenated batches by
//! arrow's row format for the same [`SortOptions`](arrow::compute::SortOptions).

use crate::api::key_columns;
use crate::engine::sort::sort_keys;
use crate::error::{Error, Result};
use crate::gather::gather;
use crate::keys::encode_runs;
use crate::options::{Engine, EngineOptions};
use crate::order::ties::{resolve_ties, FullComparator};
use crate::permutation::Permutation;
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, RecordBatch};

/// How to sort (named so as not to clash with arrow's per-column `SortOptions`).
#[derive(Debug, Clone)]
pub struct SortBatchesOptions {
    /// Which engine sorts ([`sort_keys`](crate::engine::sort::sort_keys): the same choice
    /// as the merge's, `gpu_min_rows` and the CPU fallback included).
    pub engine: EngineOptions,
    /// Rows per output batch of [`sort_batches`].
    pub batch_size: usize,
}

impl Default for SortBatchesOptions {
    fn default() -> Self {
        Self { engine: EngineOptions::default(), batch_size: 8192 }
    }
}

impl SortBatchesOptions {
    /// Sets the engine, keeping the other engine options.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine.engine = engine;
        self
    }
    pub fn with_engine_options(mut self, engine: EngineOptions) -> Self {
        self.engine = engine;
        self
    }
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
}

/// The stable sort order of key columns: `batches[b][c]` is input batch `b`'s array for
/// sort column `c` (same types in every batch). The result's `run_offsets` are the
/// batches' offsets, its indices the global input position (batch offset + row) of every
/// output row.
pub fn sort_columns(batches: &[Vec<ArrayRef>], keys: &[SortKey], options: &SortBatchesOptions) -> Result<Permutation> {
    let encoded = encode_runs(batches, keys)?;
    // The full comparator is only needed where keys may tie on different values.
    let full = if encoded.exact { None } else { Some(FullComparator::new(batches, keys, &encoded.run_offsets)?) };
    let (mut indices, engine) = sort_keys(&encoded.keys, &options.engine)?;
    if let Some(full) = &full {
        // Equal words form contiguous segments of the sorted output, each in input order
        // (the sort is stable): a stable sort of each by the full comparator finishes it.
        resolve_ties(&mut indices, &encoded.keys, full);
    }
    let key_bytes = encoded.keys.key_bytes();
    Ok(Permutation { run_offsets: encoded.run_offsets, indices, engine, key_bytes })
}

/// The stable sort order of RecordBatches by `keys`: for every output row, its input batch
/// and row (see [`Permutation::run_row`]; "run" is the input batch here). Equal keys keep
/// batch order, then row order. Every batch must have the first batch's columns (names and
/// types); errors name the batch as the run.
pub fn sort_permutation(batches: &[RecordBatch], keys: &[SortKey], options: &SortBatchesOptions) -> Result<Permutation> {
    let columns = key_columns(batches, keys)?;
    sort_columns(&columns, keys, options)
}

/// Sorts RecordBatches stably by `keys` into batches of `options.batch_size` rows (shorter
/// where a dictionary batch had to be split, as [`gather()`] does); no input rows, no
/// output batches.
pub fn sort_batches(batches: &[RecordBatch], keys: &[SortKey], options: &SortBatchesOptions) -> Result<Vec<RecordBatch>> {
    if options.batch_size == 0 {
        return Err(Error::InvalidArgument("batch size must be at least 1".into()));
    }
    let perm = sort_permutation(batches, keys, options)?;
    gather(batches, &perm, options.batch_size)
}

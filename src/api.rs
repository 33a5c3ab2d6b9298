//! The public merge API: sorted runs (RecordBatches) + sort keys → permutation → batches.

use crate::engine::merge_keys;
use crate::error::{Error, Result};
use crate::gather::gather;
use crate::keys::encode_runs;
use crate::options::{Engine, EngineOptions};
use crate::order::check::check_sorted;
use crate::order::ties::{resolve_ties, FullComparator};
use crate::permutation::Permutation;
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, RecordBatch};

/// How to merge.
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Which engine, kernel and device.
    pub engine: EngineOptions,
    /// Verify every run is sorted first (an error names the run and the first row out of
    /// order). Costs one pass over the keys.
    pub check_sorted: bool,
    /// Rows per output batch of [`merge`].
    pub batch_size: usize,
}

impl Default for MergeOptions {
    fn default() -> Self {
        Self { engine: EngineOptions::default(), check_sorted: false, batch_size: crate::DEFAULT_BATCH_SIZE }
    }
}

impl MergeOptions {
    /// Sets the engine, keeping the other engine options.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine.engine = engine;
        self
    }
    pub fn with_engine_options(mut self, engine: EngineOptions) -> Self {
        self.engine = engine;
        self
    }
    pub fn with_check_sorted(mut self, check: bool) -> Self {
        self.check_sorted = check;
        self
    }
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
}

/// The stable merge order of sorted key columns: `runs[r][c]` is run `r`'s array for sort
/// column `c` (same types in every run).
pub fn merge_columns(runs: &[Vec<ArrayRef>], keys: &[SortKey], options: &MergeOptions) -> Result<Permutation> {
    let encoded = encode_runs(runs, keys)?;
    // The full comparator is only needed where keys may tie on different values.
    let full = if encoded.exact { None } else { Some(FullComparator::new(runs, keys, &encoded.run_offsets)?) };
    if options.check_sorted {
        check_sorted(&encoded, full.as_ref(), runs)?;
    }
    let (mut indices, engine) = merge_keys(&encoded.keys, &encoded.run_offsets, &options.engine)?;
    if let Some(full) = &full {
        resolve_ties(&mut indices, &encoded.keys, full);
    }
    let key_bytes = encoded.keys.key_bytes();
    Ok(Permutation { run_offsets: encoded.run_offsets, indices, engine, key_bytes })
}

/// Checks that every run has run 0's columns (names and types) and finds the sort columns.
pub(crate) fn key_columns(runs: &[RecordBatch], keys: &[SortKey]) -> Result<Vec<Vec<ArrayRef>>> {
    if keys.is_empty() {
        return Err(Error::InvalidArgument("at least one sort key is required".into()));
    }
    let Some(first) = runs.first() else { return Ok(vec![]) };
    let schema = first.schema();
    for (r, batch) in runs.iter().enumerate().skip(1) {
        let other = batch.schema();
        if other.fields().len() != schema.fields().len() {
            return Err(Error::SchemaMismatch {
                run: r,
                detail: format!("{} columns instead of {}", other.fields().len(), schema.fields().len()),
            });
        }
        for (a, b) in schema.fields().iter().zip(other.fields()) {
            if a.name() != b.name() || a.data_type() != b.data_type() {
                return Err(Error::SchemaMismatch {
                    run: r,
                    detail: format!("column {}: {} instead of {}: {}", b.name(), b.data_type(), a.name(), a.data_type()),
                });
            }
        }
    }
    runs.iter()
        .enumerate()
        .map(|(r, batch)| {
            keys.iter()
                .map(|k| batch.column_by_name(&k.column).cloned().ok_or_else(|| Error::MissingColumn { run: r, column: k.column.clone() }))
                .collect()
        })
        .collect()
}

/// The stable merge order of sorted runs: for every output row, which run and row it
/// comes from. Equal keys keep run order, then row order: the output is the stable sort of
/// the concatenation of the runs.
pub fn merge_permutation(runs: &[RecordBatch], keys: &[SortKey], options: &MergeOptions) -> Result<Permutation> {
    let columns = key_columns(runs, keys)?;
    merge_columns(&columns, keys, options)
}

/// Merges sorted runs into sorted RecordBatches of `options.batch_size` rows.
pub fn merge(runs: &[RecordBatch], keys: &[SortKey], options: &MergeOptions) -> Result<Vec<RecordBatch>> {
    let perm = merge_permutation(runs, keys, options)?;
    gather(runs, &perm, options.batch_size)
}

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
///
/// ```
/// use corank::{Engine, MergeOptions};
///
/// let options = MergeOptions::default().with_engine(Engine::Cpu).with_check_sorted(true).with_batch_size(1024);
/// assert_eq!(options.engine.engine, Engine::Cpu);
/// ```
#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// Which engine, kernel and device.
    pub engine: EngineOptions,
    /// Verify every run is sorted first (an error names the run and the first row out of
    /// order). Costs one pass over the keys. Off by default.
    pub check_sorted: bool,
    /// Rows per output batch of [`merge`] ([`DEFAULT_BATCH_SIZE`](crate::DEFAULT_BATCH_SIZE)
    /// by default; 0 is an error).
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
    /// Sets all the engine options ([`engine`](Self::engine)).
    pub fn with_engine_options(mut self, engine: EngineOptions) -> Self {
        self.engine = engine;
        self
    }
    /// Sets [`check_sorted`](Self::check_sorted).
    pub fn with_check_sorted(mut self, check: bool) -> Self {
        self.check_sorted = check;
        self
    }
    /// Sets [`batch_size`](Self::batch_size), in rows.
    pub fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }
}

/// The stable merge order of sorted key columns: `runs[r][c]` is run `r`'s array for sort
/// column `c` (same types in every run).
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{ArrayRef, Int32Array};
/// use corank::{merge_columns, MergeOptions, SortKey};
///
/// let col = |v: Vec<i32>| Arc::new(Int32Array::from(v)) as ArrayRef;
/// let runs = vec![vec![col(vec![1, 5])], vec![col(vec![2, 5])]];
/// // The key's name only names it in errors; `runs` hold its arrays.
/// let perm = merge_columns(&runs, &[SortKey::asc("k")], &MergeOptions::default())?;
/// assert_eq!(perm.to_run_rows(), [(0, 0), (1, 0), (0, 1), (1, 1)]);
/// # Ok::<(), corank::Error>(())
/// ```
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

/// Checks that every run has run 0's columns (names and types; metadata and nullability
/// may differ) and finds the sort columns.
pub(crate) fn key_columns(runs: &[RecordBatch], keys: &[SortKey]) -> Result<Vec<Vec<ArrayRef>>> {
    if keys.is_empty() {
        return Err(Error::InvalidArgument("at least one sort key is required".into()));
    }
    crate::gather::check_same_columns(runs)?;
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
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use corank::{gather, merge_permutation, MergeOptions, SortKey};
///
/// let run = |k: Vec<i64>| RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as _)]).unwrap();
/// let runs = [run(vec![3, 8]), run(vec![1, 8, 9])];
/// let perm = merge_permutation(&runs, &[SortKey::asc("k")], &MergeOptions::default())?;
/// assert_eq!(perm.to_run_rows(), [(1, 0), (0, 0), (0, 1), (1, 1), (1, 2)]);
/// let batches = gather(&runs, &perm, 8192)?; // what `merge` returns
/// assert_eq!(batches[0].num_rows(), 5);
/// # Ok::<(), corank::Error>(())
/// ```
pub fn merge_permutation(runs: &[RecordBatch], keys: &[SortKey], options: &MergeOptions) -> Result<Permutation> {
    let columns = key_columns(runs, keys)?;
    merge_columns(&columns, keys, options)
}

/// Merges sorted runs into sorted RecordBatches of `options.batch_size` rows.
///
/// The [crate doc](crate) has an example.
pub fn merge(runs: &[RecordBatch], keys: &[SortKey], options: &MergeOptions) -> Result<Vec<RecordBatch>> {
    let perm = merge_permutation(runs, keys, options)?;
    gather(runs, &perm, options.batch_size)
}

//! Gathers whole rows in permutation order into RecordBatches, one output batch range per
//! parallel task.
//!
//! Fixed-width columns (integers, floats, decimals, temporal types) are read through a
//! table of the runs' value addresses (`FixedColumn`), string and binary views the same way
//! (`ViewColumn`, long values' buffers renumbered per batch), strings and bytes with offsets
//! by their offsets (`BytesColumn`); other columns but dictionaries go through arrow's
//! `interleave`. Top-level dictionary columns (`Dictionary(K, V)`, every key type
//! Int8..UInt64, every value type) are gathered with their dictionaries merged exactly,
//! because arrow merges them only best effort (a hash table that overwrites on collisions,
//! and no merge at all for non-byte value types) and fails with "Dictionary key bigger than
//! the key type" as soon as the runs of a round
//! (several files, or several batches of one file: the Parquet reader gives every batch its
//! own dictionary) hold more values together than the key type can index, even when they
//! all hold the same few categories:
//!
//! - Once per gather, every dictionary value that a row of some run references gets a
//!   global id; values are compared by their `arrow::row` bytes (exact for every value
//!   type, nulls included), so equal values of different runs, or repeated in one
//!   dictionary, share one id. Unreferenced dictionary values are never looked at.
//! - Per output batch, the distinct ids of its rows, in order of first appearance, are the
//!   batch's dictionary (its values taken from the runs' dictionaries by `interleave`), and
//!   the keys are remapped to it. The column keeps its declared type (key and value type),
//!   so the output schema is the input's.
//!
//! **Split batches.** When the distinct values of one output batch do not fit its key type
//! (more than 128 for Int8 keys, 256 for UInt8, ...), the batch is cut greedily into the
//! longest consecutive pieces that fit. When arrow fails for a batch with an offset
//! overflow (string or list data of more than 2 GiB in one i32-offset column), the batch is
//! halved and each half retried, down to one row. Either way the output then holds batches
//! shorter than `batch_size` (all with the same schema): smaller batches are the only way to
//! keep the column's declared type.
//!
//! The files: this one (the entry, the checks, one run's `take`, the run slots, how each
//! column is gathered), `gatherer` (the output batches of many runs, split where needed),
//! `fixed` (fixed-width columns, and the address reads the others share), `view` (string
//! and binary views), `bytes` (strings and bytes with offsets), `dictionary` (the exact
//! dictionary merge), `piece` (one column gathered from many pieces, for `corank sort`).

mod bytes;
mod dictionary;
mod fixed;
mod gatherer;
#[cfg(feature = "parquet")]
mod piece;
mod view;

use crate::error::{Error, Result};
use crate::permutation::{Indices, Permutation};
use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array, UInt64Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use bytes::BytesColumn;
use dictionary::DictColumn;
use fixed::FixedColumn;
use gatherer::Gatherer;
use rayon::prelude::*;
use std::sync::Arc;
use view::ViewColumn;

#[cfg(feature = "parquet")]
pub(crate) use piece::PieceGather;

/// Checks that every run has run 0's columns: the same names and types, in the same order
/// (nullability and metadata, of the schema or of a field, may differ: [`merged_schema`]).
/// A run that differs is [`Error::SchemaMismatch`], naming the run and the column.
pub(crate) fn check_same_columns(runs: &[RecordBatch]) -> Result<()> {
    let Some(first) = runs.first() else { return Ok(()) };
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
    Ok(())
}

/// The output schema: run 0's, its metadata and its fields' metadata included (as
/// DataFusion's union and arrow's `concat_batches` keep the first input's), with a column
/// nullable where any run's is. Runs whose schema or field metadata differ (pandas writes
/// its own per data frame) merge all the same.
fn merged_schema(runs: &[RecordBatch]) -> Arc<Schema> {
    let first = runs[0].schema();
    let fields: Vec<Field> = first
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| {
            let nullable = runs.iter().any(|b| b.schema().field(c).is_nullable());
            f.as_ref().clone().with_nullable(nullable)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, first.metadata().clone()))
}

/// Rows of `runs` in the order of `perm`, in batches of `batch_size` rows (shorter where a
/// batch had to be split, see the module doc).
/// [`merge_permutation`](crate::merge_permutation) has an example.
pub fn gather(runs: &[RecordBatch], perm: &Permutation, batch_size: usize) -> Result<Vec<RecordBatch>> {
    if batch_size == 0 {
        return Err(Error::InvalidArgument("batch size must be at least 1".into()));
    }
    if runs.is_empty() || perm.is_empty() {
        return Ok(vec![]);
    }
    check_fits(runs, perm)?;
    check_same_columns(runs)?;
    let schema = merged_schema(runs);
    // Every run under the output schema: the same columns, whatever their metadata says.
    let runs: Vec<RecordBatch> = runs
        .iter()
        .map(|b| {
            let options = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
            RecordBatch::try_new_with_options(schema.clone(), b.columns().to_vec(), &options)
        })
        .collect::<Result<_, _>>()?;
    if runs.len() == 1 && perm.len() == runs[0].num_rows() && is_identity(&perm.indices) {
        // One run merged: the identity; slice without copying. (A sort of one batch is not.)
        let n = runs[0].num_rows();
        return Ok((0..n).step_by(batch_size).map(|s| runs[0].slice(s, batch_size.min(n - s))).collect());
    }
    let starts: Vec<usize> = (0..perm.len()).step_by(batch_size).collect();
    if runs.len() == 1 {
        return take_from_one_run(&runs[0], perm, &starts, batch_size);
    }
    let gatherer = Gatherer::new(&runs, perm)?;
    let piece = |slots: &mut RunSlots, s: usize| gatherer.gather_range(slots, s, (s + batch_size).min(perm.len()));
    // One output batch is gathered on the calling thread (no hand-off to the pool).
    let pieces: Vec<Vec<RecordBatch>> = if starts.len() == 1 {
        vec![piece(&mut RunSlots::new(runs.len()), 0)?]
    } else {
        starts.into_par_iter().map_init(|| RunSlots::new(runs.len()), piece).collect::<std::result::Result<_, ArrowError>>()?
    };
    Ok(pieces.into_iter().flatten().collect())
}

/// A permutation built for other runs (run offsets that are not the runs' row counts, an
/// index past the last row) is an error here, not a panic in arrow's gathers.
fn check_fits(runs: &[RecordBatch], perm: &Permutation) -> Result<()> {
    let offsets = &perm.run_offsets;
    let matches_runs = offsets.len() == runs.len() + 1
        && offsets[0] == 0
        && runs.iter().zip(offsets.windows(2)).all(|(run, w)| w[1].checked_sub(w[0]) == Some(run.num_rows()));
    if !matches_runs {
        let rows: Vec<usize> = runs.iter().map(RecordBatch::num_rows).collect();
        return Err(Error::InvalidArgument(format!(
            "the permutation's run offsets {offsets:?} do not match the runs' row counts {rows:?}"
        )));
    }
    let total = offsets[runs.len()];
    let largest = match &perm.indices {
        Indices::U32(v) => v.par_iter().max().map(|&i| i as usize),
        Indices::U64(v) => v.par_iter().max().map(|&i| usize::try_from(i).unwrap_or(usize::MAX)),
    };
    match largest {
        Some(i) if i >= total => Err(Error::InvalidArgument(format!("the permutation's index {i} is past the runs' {total} rows"))),
        _ => Ok(()),
    }
}

/// Rows of one run (a sort of one batch) through arrow's `take`: output row `i` reads its
/// view, offset or key from the one source array as it is, where `interleave` would remap
/// every string view's buffer index (it serves any number of arrays), at a higher cost per
/// row. Nothing needs a split: a dictionary column keeps the run's dictionary
/// (its keys fit their type already), and a permutation never takes more bytes than the
/// run holds (no offset overflow).
fn take_from_one_run(run: &RecordBatch, perm: &Permutation, starts: &[usize], batch_size: usize) -> Result<Vec<RecordBatch>> {
    let piece = |s: usize| -> std::result::Result<RecordBatch, ArrowError> {
        let e = (s + batch_size).min(perm.len());
        match &perm.indices {
            Indices::U32(v) => take_record_batch(run, &UInt32Array::from(v[s..e].to_vec())),
            Indices::U64(v) => take_record_batch(run, &UInt64Array::from(v[s..e].to_vec())),
        }
    };
    let batches = if starts.len() == 1 {
        vec![piece(starts[0])?]
    } else {
        starts.par_iter().map(|&s| piece(s)).collect::<std::result::Result<_, ArrowError>>()?
    };
    Ok(batches)
}

/// Whether output row `i` is input row `i` for every `i`.
fn is_identity(indices: &Indices) -> bool {
    match indices {
        Indices::U32(v) => v.par_iter().enumerate().all(|(i, &x)| x as usize == i),
        Indices::U64(v) => v.par_iter().enumerate().all(|(i, &x)| x as usize == i),
    }
}

/// Where an output row comes from: (run, row within the run).
type Source = (usize, usize);

/// Runs up to which an output batch is gathered from every run's arrays as they are.
const FEW_RUNS: usize = 64;

/// Renumbers an output batch's rows over the runs it references. arrow's `interleave`
/// looks at every array it is given (its type, its nulls, its value buffer) for every
/// output batch, so a batch gathered from thousands of runs (a sort's sorted pieces) would
/// cost O(runs) however few rows it takes from each: quadratic over a whole sort. With the
/// runs renumbered, a batch costs O(its rows).
struct RunSlots {
    /// Per run, its number among the current batch's runs, or `u32::MAX`; every entry is
    /// `u32::MAX` between batches.
    slot: Vec<u32>,
}

impl RunSlots {
    fn new(runs: usize) -> Self {
        Self { slot: if runs > FEW_RUNS { vec![u32::MAX; runs] } else { Vec::new() } }
    }

    /// The runs `idx` references (in order of first reference) and `idx` over them; `None`
    /// for few runs (the batch takes every run's arrays).
    fn renumber(&mut self, idx: &[Source]) -> Option<(Vec<usize>, Vec<Source>)> {
        if self.slot.is_empty() {
            return None;
        }
        let mut used: Vec<usize> = Vec::new();
        let local = idx
            .iter()
            .map(|&(run, row)| {
                if self.slot[run] == u32::MAX {
                    self.slot[run] = used.len() as u32;
                    used.push(run);
                }
                (self.slot[run] as usize, row)
            })
            .collect();
        for &run in &used {
            self.slot[run] = u32::MAX;
        }
        Some((used, local))
    }
}

/// How a column is gathered.
enum Column {
    /// arrow's `interleave` of the runs' arrays.
    Interleave(Vec<ArrayRef>),
    /// With an exact dictionary merge.
    Dictionary(DictColumn),
    /// Fixed-width values read through the runs' value pointers.
    Fixed(FixedColumn),
    /// String or binary views read as fixed-width values.
    View(ViewColumn),
    /// Strings or bytes with offsets: offsets read as fixed-width values, bytes copied.
    Bytes(BytesColumn),
}

impl Column {
    /// The column of `arrays` (one per run, all of `data_type`) read through the runs'
    /// addresses where its type allows, else interleaved (dictionaries included).
    fn by_address(arrays: Vec<ArrayRef>, data_type: &DataType) -> Column {
        let column = match data_type {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                BytesColumn::new(&arrays, data_type).map(Column::Bytes)
            }
            DataType::Utf8View | DataType::BinaryView => ViewColumn::new(&arrays, data_type).map(Column::View),
            DataType::Dictionary(..) => None,
            _ => FixedColumn::new(&arrays, data_type).map(Column::Fixed),
        };
        column.unwrap_or(Column::Interleave(arrays))
    }
}

//! The output batches of a gather of many runs ([`Gatherer`]): each column read by address
//! or interleaved, a batch cut where its dictionary values do not fit the key type, and
//! halved where arrow's offsets overflow.

use super::dictionary::{DictColumn, NULL_ID};
use super::{Column, RunSlots};
use crate::error::Result;
use crate::permutation::{Indices, Permutation, RunLocator};
use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::{interleave, interleave_record_batch};
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;
use std::collections::HashSet;
use std::sync::Arc;

/// The gather of many runs' rows into output batches (see the module doc of `gather`).
pub(super) struct Gatherer<'a> {
    runs: &'a [RecordBatch],
    perm: &'a Permutation,
    locator: RunLocator<'a>,
    schema: Arc<Schema>,
    /// `None` when every column goes through `interleave` (arrow's `interleave_record_batch`
    /// then).
    columns: Option<Vec<Column>>,
    /// Whether some column goes through `interleave` (which takes the runs' arrays).
    interleaves: bool,
}

impl<'a> Gatherer<'a> {
    pub(super) fn new(runs: &'a [RecordBatch], perm: &'a Permutation) -> Result<Self> {
        let schema = runs[0].schema();
        let columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(c, f)| {
                let arrays: Vec<ArrayRef> = runs.iter().map(|b| b.column(c).clone()).collect();
                Ok(match f.data_type() {
                    DataType::Dictionary(k, v) => match DictColumn::prepare(runs, c, k, v)? {
                        Some(d) => Column::Dictionary(d),
                        None => Column::Interleave(arrays),
                    },
                    data_type => Column::by_address(arrays, data_type),
                })
            })
            .collect::<std::result::Result<Vec<_>, ArrowError>>()?;
        let all_interleaved = columns.iter().all(|c| matches!(c, Column::Interleave(_)));
        let interleaves = columns.iter().any(|c| matches!(c, Column::Interleave(_)));
        let columns = (!all_interleaved).then_some(columns);
        Ok(Gatherer { runs, perm, locator: RunLocator::new(&perm.run_offsets), schema, columns, interleaves })
    }

    /// The output rows `s..e`: one batch, or several where it had to be split.
    pub(super) fn gather_range(&self, slots: &mut RunSlots, s: usize, e: usize) -> std::result::Result<Vec<RecordBatch>, ArrowError> {
        let mut out = Vec::new();
        for (a, b) in self.dictionary_cuts(s, e) {
            match self.build(slots, a, b) {
                Ok(batch) => out.push(batch),
                Err(err) if b - a > 1 && splittable(&err) => {
                    let mid = a + (b - a) / 2;
                    out.extend(self.gather_range(slots, a, mid)?);
                    out.extend(self.gather_range(slots, mid, b)?);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(out)
    }

    /// `s..e` cut into the longest consecutive pieces whose distinct dictionary values fit
    /// every dictionary column's key type.
    fn dictionary_cuts(&self, s: usize, e: usize) -> Vec<(usize, usize)> {
        let dicts: Vec<&DictColumn> = match &self.columns {
            None => return vec![(s, e)],
            Some(columns) => columns
                .iter()
                .filter_map(|c| match c {
                    // (Fewer rows, or fewer values in all, than the key type holds: no cut.)
                    Column::Dictionary(d) if d.capacity < e - s && d.capacity < d.reps.len() => Some(d),
                    _ => None,
                })
                .collect(),
        };
        if dicts.is_empty() {
            return vec![(s, e)];
        }
        let mut cuts = Vec::new();
        let mut seen: Vec<HashSet<u32>> = vec![HashSet::new(); dicts.len()];
        let mut start = s;
        for i in s..e {
            let (run, row) = self.locator.locate(self.perm.indices.get(i));
            let full = dicts.iter().zip(&seen).any(|(d, set)| {
                let id = d.ids[run][row];
                id != NULL_ID && set.len() >= d.capacity && !set.contains(&id)
            });
            if full {
                cuts.push((start, i));
                start = i;
                seen.iter_mut().for_each(HashSet::clear);
            }
            for (d, set) in dicts.iter().zip(seen.iter_mut()) {
                let id = d.ids[run][row];
                if id != NULL_ID {
                    set.insert(id);
                }
            }
        }
        cuts.push((start, e));
        cuts
    }

    /// The output rows `a..b` as one batch.
    fn build(&self, slots: &mut RunSlots, a: usize, b: usize) -> std::result::Result<RecordBatch, ArrowError> {
        let idx: Vec<(usize, usize)> = match &self.perm.indices {
            Indices::U32(v) => v[a..b].iter().map(|&g| self.locator.locate(g as usize)).collect(),
            Indices::U64(v) => v[a..b].iter().map(|&g| self.locator.locate(g as usize)).collect(),
        };
        // The arrays to interleave: every run's, or those of the runs `idx` references (none
        // where no column is interleaved).
        let interleaves = self.interleaves;
        let renumbered = if interleaves { slots.renumber(&idx) } else { None };
        let every_run: Vec<usize>;
        let (runs, local_idx): (&[usize], &[(usize, usize)]) = match &renumbered {
            Some((used, local)) => (used, local),
            None if interleaves => {
                every_run = (0..self.runs.len()).collect();
                (&every_run, &idx)
            }
            None => (&[], &[]),
        };
        let Some(columns) = &self.columns else {
            let refs: Vec<&RecordBatch> = runs.iter().map(|&r| &self.runs[r]).collect();
            return interleave_record_batch(&refs, local_idx);
        };
        let arrays = columns
            .iter()
            .map(|c| match c {
                Column::Interleave(arrays) => {
                    let refs: Vec<&dyn Array> = runs.iter().map(|&r| arrays[r].as_ref()).collect();
                    interleave(&refs, local_idx)
                }
                Column::Dictionary(d) => d.gather(&idx, slots),
                Column::Fixed(fixed) => fixed.gather(&idx),
                Column::View(views) => Ok(views.gather(&idx)),
                Column::Bytes(bytes) => bytes.gather(&idx),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &RecordBatchOptions::new().with_row_count(Some(idx.len())))
    }
}

/// Errors that a smaller batch avoids: offsets (or dictionary keys, or run ends) out of range.
///
/// Arrow's kernels report these as variants (`OffsetOverflowError`,
/// `DictionaryKeyOverflowError`), except `MutableArrayData::try_extend`, which `interleave`
/// uses for nested types: it reports an `InvalidArgumentError` whose text starts with
/// "offset overflow" (or "run end overflow"), and that text is all there is to tell it by.
fn splittable(e: &ArrowError) -> bool {
    match e {
        ArrowError::OffsetOverflowError(_) | ArrowError::DictionaryKeyOverflowError => true,
        ArrowError::InvalidArgumentError(message) => message.starts_with("offset overflow") || message.starts_with("run end overflow"),
        _ => false,
    }
}

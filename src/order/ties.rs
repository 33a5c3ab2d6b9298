//! Exact resolution of rows whose keys tie but whose sort values may differ (string
//! prefixes, or columns past the key budget).
//!
//! Invariant used: the engines merge stably by key words, so rows with equal words form a
//! contiguous segment of the output, ordered by global index (run, then row). Because the
//! key order is consistent with the sort order, sorting each such segment stably by the full
//! comparator yields the exact stable merge.

use crate::error::Result;
use crate::keys::KeyColumn;
use crate::permutation::{locate, Indices};
use crate::sort_key::SortKey;
use arrow::array::ArrayRef;
use arrow::row::{RowConverter, Rows, SortField};
use std::cmp::Ordering;

/// The full sort order of any two input rows: arrow-row bytes of the key columns, per run.
pub struct FullComparator {
    rows: Vec<Rows>,
    run_offsets: Vec<usize>,
}

impl FullComparator {
    pub fn new(runs: &[Vec<ArrayRef>], specs: &[SortKey], run_offsets: &[usize]) -> Result<Self> {
        let fields = match runs.first() {
            Some(cols) => cols.iter().zip(specs).map(|(c, s)| SortField::new_with_options(c.data_type().clone(), s.options)).collect(),
            None => vec![],
        };
        let converter = RowConverter::new(fields)?;
        let rows = runs.iter().map(|cols| converter.convert_columns(cols)).collect::<Result<_, _>>()?;
        Ok(Self { rows, run_offsets: run_offsets.to_vec() })
    }

    /// Compares two input rows given by global index.
    pub fn cmp(&self, a: usize, b: usize) -> Ordering {
        let (ra, ia) = locate(&self.run_offsets, a);
        let (rb, ib) = locate(&self.run_offsets, b);
        self.rows[ra].row(ia).cmp(&self.rows[rb].row(ib))
    }
}

/// Sorts every segment of equal key words in `indices` stably by the full comparator.
pub fn resolve_ties(indices: &mut Indices, keys: &KeyColumn, full: &FullComparator) {
    fn run<I: Copy + Into<u64> + TryFrom<u64>>(idx: &mut [I], keys: &KeyColumn, full: &FullComparator) {
        let g = |x: I| -> usize { x.into() as usize };
        let mut start = 0;
        while start < idx.len() {
            let mut end = start + 1;
            while end < idx.len() && keys.words_equal(g(idx[start]), g(idx[end])) {
                end += 1;
            }
            if end - start > 1 {
                // Already ordered by global index; a stable sort keeps that for equal rows.
                idx[start..end].sort_by(|&a, &b| full.cmp(g(a), g(b)));
            }
            start = end;
        }
    }
    match indices {
        Indices::U32(v) => run(v, keys, full),
        Indices::U64(v) => run(v, keys, full),
    }
}

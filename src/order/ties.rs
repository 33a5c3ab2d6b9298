//! Exact resolution of rows whose keys tie but whose sort values may differ (string
//! prefixes, or columns past the key budget).
//!
//! Invariant used: the engines merge (and sort, [`crate::engine::sort`]) stably by key words,
//! so rows with equal words form a contiguous segment of the output, ordered by global index
//! (run, then row; for a sort, input position), though not by their full values. Because the
//! key order is consistent with the sort order, sorting each such segment stably by the full
//! comparator yields the exact stable merge (or sort).

use crate::error::Result;
use crate::keys::KeyColumn;
use crate::permutation::{locate, Indices};
use crate::sort_key::SortKey;
use arrow::array::ArrayRef;
use arrow::row::{RowConverter, Rows, SortField};
use rayon::prelude::*;
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

/// Segments at least this long are sorted by several threads.
const PAR_SEGMENT: usize = 1 << 15;

/// Sorts every segment of equal key words in `indices` stably by the full comparator, the
/// segments in parallel (and long ones on several threads each).
pub fn resolve_ties(indices: &mut Indices, keys: &KeyColumn, full: &FullComparator) {
    fn run<I: Copy + Send + Into<u64>>(idx: &mut [I], keys: &KeyColumn, full: &FullComparator) {
        let g = |x: I| -> usize { x.into() as usize };
        // The segments of more than one row, as disjoint slices.
        let mut segments: Vec<&mut [I]> = Vec::new();
        let mut rest = idx;
        while !rest.is_empty() {
            let mut end = 1;
            while end < rest.len() && keys.words_equal(g(rest[0]), g(rest[end])) {
                end += 1;
            }
            let (segment, tail) = std::mem::take(&mut rest).split_at_mut(end);
            if end > 1 {
                segments.push(segment);
            }
            rest = tail;
        }
        // Each is already ordered by global index; a stable sort keeps that for equal rows.
        segments.into_par_iter().for_each(|segment| {
            if segment.len() >= PAR_SEGMENT {
                segment.par_sort_by(|&a, &b| full.cmp(g(a), g(b)));
            } else {
                segment.sort_by(|&a, &b| full.cmp(g(a), g(b)));
            }
        });
    }
    match indices {
        Indices::U32(v) => run(v, keys, full),
        Indices::U64(v) => run(v, keys, full),
    }
}

//! Fixed-width columns put in output order in two passes over memory that stays in cache,
//! instead of one read at a random place of the whole column per output row.
//!
//! The column phase gathers every output row's value from wherever the sort put it: a
//! random read of the decoded column for each row, which for a column larger than the cache
//! waits on memory every time (the largest share of a column-at-a-time sort's time on the
//! CPU, above the encoding; docs/log/2026-12-performance-log.md has the profile). For a
//! column of fixed-width values without nulls (integers, floats, decimals, dates, times,
//! timestamps, durations, intervals), the values move instead:
//!
//! 1. **By chunk** ([`OrderedColumn::new`]): each input piece (in parallel) is read in
//!    order and every value is appended to the part of a buffer of the output's
//!    [`GATHER_ROWS`]-row chunk it belongs to: a few hundred sequential write streams, a
//!    cache line of each hot at a time.
//! 2. **Within the chunk** ([`OrderedColumn::chunk`]): when the chunk is encoded, its values
//!    are put at their rows of the chunk: random writes into a chunk's values, which fit in
//!    a core's cache.
//!
//! Where each input row goes, its chunk and its row within the chunk, is worked out once for
//! every column ([`Partitions`], from the locations of the output rows), and checked there:
//! every input row is the source of exactly one output row, so the chunks' parts are
//! disjoint and filled exactly. The output is the same array the gather gives (the same
//! values in the same order, no nulls), so the file's bytes do not change.
//!
//! **Memory**: 4 bytes an input row (its chunk) and 2 bytes an output row (its row within the
//! chunk) for the sort, 4 more bytes a row while they are worked out; per column, its values
//! once in the buffer (the decoded pieces are dropped once they are moved), both while a
//! column moves. [`super::plan_columns`] counts it ([`ORDERED_BYTES_PER_ROW`]) and takes
//! this path only where it fits beside the rest.

use super::encode::Location;
use super::GATHER_ROWS;
use crate::error::{Error, Result};
use arrow::array::{make_array, Array, ArrayData, ArrayRef};
use arrow::buffer::Buffer;
use arrow::datatypes::{i256, ArrowNativeType, DataType};
use rayon::prelude::*;

/// Bytes a row the sort holds for this path beside the locations (the chunk of an input row,
/// the row of an output row within its chunk, and the output row of an input row while
/// they are worked out).
pub const ORDERED_BYTES_PER_ROW: usize = 4 + 2 + 4;

/// Most (piece, chunk) cursors this path keeps (8 bytes each, three copies while they are
/// worked out: at most 24 MiB, which the plan does not count); beyond that (inputs of very
/// many small row groups) every column is gathered.
pub const MAX_CURSORS: usize = 1 << 20;

/// Where every input row goes: its output chunk, and per chunk where each piece's rows
/// start in the chunk's part of a column's buffer.
pub(super) struct Partitions {
    row_group_rows: usize,
    chunks_per_group: usize,
    rows: usize,
    chunks: usize,
    /// The first row of every piece in the concatenation of the pieces, and the total.
    starts: Vec<usize>,
    /// Per input row (in the concatenation), its chunk.
    chunk_of: Vec<u32>,
    /// Per position in a column's buffer (the chunks in output order, each chunk's rows in
    /// input order), the output row within its chunk.
    local: Vec<u16>,
    /// `piece * chunks + chunk`: where the piece's rows of the chunk start in the buffer.
    cursors: Vec<usize>,
}

impl Partitions {
    /// The partitions of `locations` (of every output row, its piece and row) over pieces
    /// starting at `starts` (`total` rows), the output cut in row groups of
    /// `row_group_rows` rows, each in chunks of [`GATHER_ROWS`]; `None` where this path does
    /// not apply (too many rows or cursors). An error if `locations` is not a permutation of
    /// the pieces' rows.
    pub(super) fn new(locations: &[Location], starts: &[usize], total: usize, row_group_rows: usize) -> Result<Option<Self>> {
        let rows = locations.len();
        let row_group_rows = row_group_rows.max(1);
        let chunks_per_group = row_group_rows.div_ceil(GATHER_ROWS);
        let chunks = rows.div_ceil(row_group_rows) * chunks_per_group;
        let pieces = starts.len();
        if rows != total || rows >= u32::MAX as usize || chunks >= u32::MAX as usize || pieces.saturating_mul(chunks) > MAX_CURSORS {
            return Ok(None);
        }
        let bad = |why: &str| Error::Internal(format!("the sort's order of {rows} rows {why}"));
        // The output row of every input row; each set once.
        let mut output_of = vec![u32::MAX; rows];
        for (o, &l) in locations.iter().enumerate() {
            let (piece, row) = ((l >> 32) as usize, (l & 0xffff_ffff) as usize);
            let end = starts.get(piece + 1).copied().unwrap_or(total);
            let at = starts.get(piece).map(|s| s + row).filter(|&at| at < end).ok_or_else(|| bad("points outside the pieces"))?;
            if output_of[at] != u32::MAX {
                return Err(bad("takes an input row twice"));
            }
            output_of[at] = o as u32;
        }
        // Every slot was set once by `rows` distinct outputs: a permutation.
        let mut p = Partitions {
            row_group_rows,
            chunks_per_group,
            rows,
            chunks,
            starts: starts.iter().copied().chain([total]).collect(),
            chunk_of: Vec::new(),
            local: Vec::new(),
            cursors: Vec::new(),
        };
        let chunk_of = output_of.par_iter().map(|&o| p.chunk_of_output(o as usize) as u32).collect();
        p.chunk_of = chunk_of;
        // Per piece, its rows of every chunk; then the cursors, chunk by chunk in piece order.
        let counts: Vec<Vec<usize>> = (0..pieces)
            .into_par_iter()
            .map(|i| {
                let mut c = vec![0usize; chunks];
                for &k in &p.chunk_of[p.starts[i]..p.starts[i + 1]] {
                    c[k as usize] += 1;
                }
                c
            })
            .collect();
        let mut cursors = vec![0usize; pieces * chunks];
        for k in 0..chunks {
            let range = p.chunk_range(k);
            let mut at = range.start;
            for (i, c) in counts.iter().enumerate() {
                cursors[i * chunks + k] = at;
                at += c[k];
            }
            if at != range.end {
                return Err(bad("does not fill its chunks"));
            }
        }
        // Each position of the buffer: the output row within its chunk.
        let mut local = vec![0u16; rows];
        let mut next = cursors.clone();
        for i in 0..pieces {
            let rows_of_piece = p.starts[i]..p.starts[i + 1];
            for (&k, &o) in p.chunk_of[rows_of_piece.clone()].iter().zip(&output_of[rows_of_piece]) {
                let (k, o) = (k as usize, o as usize);
                local[next[i * chunks + k]] = (o - p.chunk_range(k).start) as u16;
                next[i * chunks + k] += 1;
            }
        }
        p.local = local;
        p.cursors = cursors;
        Ok(Some(p))
    }

    /// The chunk of output row `o`: its row group's chunks, then its chunk in the group.
    fn chunk_of_output(&self, o: usize) -> usize {
        let g = o / self.row_group_rows;
        g * self.chunks_per_group + (o - g * self.row_group_rows) / GATHER_ROWS
    }

    /// The output rows of chunk `k` (empty for a chunk past the end of a short last group).
    fn chunk_range(&self, k: usize) -> std::ops::Range<usize> {
        let (g, c) = (k / self.chunks_per_group, k % self.chunks_per_group);
        let group_end = ((g + 1) * self.row_group_rows).min(self.rows);
        let start = (g * self.row_group_rows + c * GATHER_ROWS).min(group_end);
        start..(start + GATHER_ROWS).min(group_end)
    }
}

/// A fixed-width column's values moved to their output chunks (step 1 of the module doc).
pub(super) struct OrderedColumn {
    data_type: DataType,
    width: usize,
    values: Buffer,
}

/// Whether a column of `data_type` with these decoded `pieces` takes this path: fixed-width
/// primitive values, no nulls (a null buffer of only valid rows is no null, as the gather
/// leaves it out too), every piece's values aligned for their type; their width.
fn applies(data_type: &DataType, pieces: &[ArrayRef]) -> Option<usize> {
    let width = data_type.primitive_width().filter(|_| data_type.is_primitive())?;
    if !matches!(width, 1 | 2 | 4 | 8 | 16 | 32) {
        return None;
    }
    let fits = |p: &ArrayRef| {
        let d = p.to_data();
        p.data_type() == data_type
            && p.null_count() == 0
            && d.buffers().len() == 1
            && d.buffers()[0].len() >= (d.offset() + d.len()) * width
            && d.buffers()[0].as_ptr().align_offset(align_of_width(width)) == 0
    };
    pieces.iter().all(fits).then_some(width)
}

/// The alignment of the values of `width` bytes ([`OrderedColumn::new`]'s types).
fn align_of_width(width: usize) -> usize {
    match width {
        16 => std::mem::align_of::<i128>(),
        32 => std::mem::align_of::<i256>(),
        w => w,
    }
}

impl OrderedColumn {
    /// The column of `pieces` (one per input piece, as [`Partitions`] counts them) moved to
    /// its chunks; `Ok(None)` where the column does not take this path (its pieces given
    /// back for the gather).
    pub(super) fn new(parts: &Partitions, data_type: &DataType, pieces: Vec<ArrayRef>) -> Result<std::result::Result<Self, Vec<ArrayRef>>> {
        let Some(width) = applies(data_type, &pieces) else { return Ok(Err(pieces)) };
        if pieces.len() + 1 != parts.starts.len()
            || pieces.iter().enumerate().any(|(i, p)| p.len() != parts.starts[i + 1] - parts.starts[i])
        {
            return Err(Error::Internal(format!("{} decoded pieces where the sort planned {}", pieces.len(), parts.starts.len() - 1)));
        }
        let values = match width {
            1 => move_to_chunks::<u8>(parts, &pieces),
            2 => move_to_chunks::<u16>(parts, &pieces),
            4 => move_to_chunks::<u32>(parts, &pieces),
            8 => move_to_chunks::<u64>(parts, &pieces),
            16 => move_to_chunks::<i128>(parts, &pieces),
            _ => move_to_chunks::<i256>(parts, &pieces),
        };
        Ok(Ok(OrderedColumn { data_type: data_type.clone(), width, values }))
    }

    /// Output rows `range` (one chunk: where the column phase encodes) in output order
    /// (step 2 of the module doc).
    pub(super) fn chunk(&self, parts: &Partitions, range: std::ops::Range<usize>) -> Result<ArrayRef> {
        let k = parts.chunk_of_output(range.start);
        if parts.chunk_range(k) != range {
            return Err(Error::Internal(format!("rows {range:?} are not a chunk of the sort's output")));
        }
        let values = match self.width {
            1 => in_chunk_order::<u8>(parts, &self.values, range.clone()),
            2 => in_chunk_order::<u16>(parts, &self.values, range.clone()),
            4 => in_chunk_order::<u32>(parts, &self.values, range.clone()),
            8 => in_chunk_order::<u64>(parts, &self.values, range.clone()),
            16 => in_chunk_order::<i128>(parts, &self.values, range.clone()),
            _ => in_chunk_order::<i256>(parts, &self.values, range.clone()),
        };
        let data = ArrayData::builder(self.data_type.clone()).len(range.len()).add_buffer(values).build()?;
        Ok(make_array(data))
    }
}

/// A pointer to the buffer's values that the pieces' tasks write through, each to its own
/// positions.
#[derive(Clone, Copy)]
struct Out<T>(*mut T);
// SAFETY: the tasks write disjoint positions (see `move_to_chunks`).
unsafe impl<T: Send> Send for Out<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Out<T> {}

impl<T> Out<T> {
    /// The pointer, through the wrapper: a closure that calls this captures the whole
    /// (Send) wrapper, not its raw pointer field.
    fn get(&self) -> *mut T {
        self.0
    }
}

/// Every piece's values appended to their chunks' parts of one buffer (pieces in parallel).
fn move_to_chunks<T: ArrowNativeType>(parts: &Partitions, pieces: &[ArrayRef]) -> Buffer {
    let mut out: Vec<T> = vec![T::default(); parts.rows];
    let ptr = Out(out.as_mut_ptr());
    pieces.par_iter().enumerate().for_each(|(i, piece)| {
        let data = piece.to_data();
        let values: &[T] = &data.buffer::<T>(0)[..piece.len()];
        let mut next = parts.cursors[i * parts.chunks..(i + 1) * parts.chunks].to_vec();
        for (&v, &k) in values.iter().zip(&parts.chunk_of[parts.starts[i]..parts.starts[i + 1]]) {
            let at = &mut next[k as usize];
            // SAFETY: piece `i`'s rows of chunk `k` go to `cursors[i][k]..` for as many
            // rows as it has of the chunk (counted from the same `chunk_of`), ranges that
            // `Partitions::new` laid out disjoint, inside the chunk, and filling the buffer
            // of `rows` values; no other task writes them, and `out` outlives the tasks.
            unsafe { ptr.get().add(*at).write(v) };
            *at += 1;
        }
    });
    Buffer::from_vec(out)
}

/// The values of chunk `range` from its part of `values`, each at its row.
fn in_chunk_order<T: ArrowNativeType>(parts: &Partitions, values: &Buffer, range: std::ops::Range<usize>) -> Buffer {
    let all: &[T] = values.typed_data::<T>();
    let mut out: Vec<T> = vec![T::default(); range.len()];
    for (&v, &r) in all[range.clone()].iter().zip(&parts.local[range]) {
        out[r as usize] = v;
    }
    Buffer::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int32Array, Int64Array, StringArray};
    use std::sync::Arc;

    /// Pieces of 3, 70000 and 5 rows (a chunk boundary inside the long one), a permutation
    /// of their rows (the locations of the output rows), the pieces' starts and the rows.
    fn case(seed: u64) -> (Vec<ArrayRef>, Vec<Location>, Vec<usize>, usize) {
        let lengths = [3usize, 70_000, 5];
        let starts: Vec<usize> = lengths.iter().scan(0, |s, &l| Some(std::mem::replace(s, *s + l))).collect();
        let total: usize = lengths.iter().sum();
        let pieces: Vec<ArrayRef> = (lengths.iter().zip(&starts))
            .map(|(&l, &s)| Arc::new(Int64Array::from_iter_values((s..s + l).map(|v| v as i64 * 3))) as ArrayRef)
            .collect();
        // A deterministic shuffle of the concatenation.
        let mut order: Vec<usize> = (0..total).collect();
        let mut x = seed;
        for i in (1..total).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        let locations = order
            .iter()
            .map(|&p| {
                let piece = starts.partition_point(|&s| s <= p) - 1;
                ((piece as u64) << 32) | (p - starts[piece]) as u64
            })
            .collect();
        (pieces, locations, starts, total)
    }

    #[test]
    fn chunks_hold_the_gathered_rows() {
        for (group, seed) in [(70_008, 1), (30_000, 2), (65_536, 3), (1, 4), (100_000, 5)] {
            let (pieces, locations, starts, total) = case(seed);
            let parts = Partitions::new(&locations, &starts, total, group).unwrap().unwrap();
            let column = OrderedColumn::new(&parts, &DataType::Int64, pieces).ok().unwrap().ok().unwrap();
            let mut at = 0;
            while at < total {
                let group_end = (at - at % group + group).min(total);
                let end = (at + GATHER_ROWS).min(group_end);
                let got = column.chunk(&parts, at..end).unwrap();
                let want: Int64Array = locations[at..end]
                    .iter()
                    .map(|&l| Some((starts[(l >> 32) as usize] + (l & 0xffff_ffff) as usize) as i64 * 3))
                    .collect();
                assert_eq!(got.as_ref(), &want as &dyn Array, "group {group}, rows {at}..{end}");
                at = end;
            }
            // A range that is not a chunk is refused, not answered.
            if group > 2 {
                assert!(column.chunk(&parts, 1..2).is_err());
            }
        }
    }

    #[test]
    fn other_widths_and_types_are_kept() {
        let (pieces, locations, starts, total) = case(7);
        let parts = Partitions::new(&locations, &starts, total, 50_000).unwrap().unwrap();
        let as_i32: Vec<ArrayRef> =
            pieces.iter().map(|p| Arc::new(arrow::compute::cast(p, &DataType::Int32).unwrap()) as ArrayRef).collect();
        let as_dec: Vec<ArrayRef> = pieces
            .iter()
            .map(|p| {
                let d = arrow::compute::cast(p, &DataType::Decimal128(15, 2)).unwrap();
                Arc::new(d.as_any().downcast_ref::<Decimal128Array>().unwrap().clone()) as ArrayRef
            })
            .collect();
        for (dt, col) in [(DataType::Int32, as_i32), (DataType::Decimal128(15, 2), as_dec)] {
            let column = OrderedColumn::new(&parts, &dt, col.clone()).ok().unwrap().ok().unwrap();
            let got = column.chunk(&parts, 0..GATHER_ROWS.min(50_000)).unwrap();
            assert_eq!(got.data_type(), &dt);
            let refs: Vec<&dyn Array> = col.iter().map(|a| a.as_ref()).collect();
            let from: Vec<(usize, usize)> =
                locations[..got.len()].iter().map(|&l| ((l >> 32) as usize, (l & 0xffff_ffff) as usize)).collect();
            let want = arrow::compute::interleave(&refs, &from).unwrap();
            assert_eq!(got.as_ref(), want.as_ref());
        }
        // Strings and columns with nulls are given back for the gather.
        let strings: Vec<ArrayRef> = pieces.iter().map(|p| Arc::new(StringArray::from(vec!["x"; p.len()])) as ArrayRef).collect();
        assert!(OrderedColumn::new(&parts, &DataType::Utf8, strings).unwrap().is_err());
        let mut with_null: Vec<ArrayRef> = pieces.iter().map(|p| arrow::compute::cast(p, &DataType::Int32).unwrap()).collect();
        with_null[0] = Arc::new(Int32Array::from(vec![Some(1), None, Some(2)]));
        assert!(OrderedColumn::new(&parts, &DataType::Int32, with_null).unwrap().is_err());
    }

    #[test]
    fn an_order_that_is_not_a_permutation_is_an_error() {
        let (_, mut locations, starts, total) = case(9);
        locations[5] = locations[6];
        assert!(Partitions::new(&locations, &starts, total, 70_008).is_err());
        let (_, mut locations, starts, total) = case(9);
        locations[0] = 2 << 32 | 5; // row 5 of a piece of 5 rows
        assert!(Partitions::new(&locations, &starts, total, 70_008).is_err());
    }
}

//! A batch of Parquet data pages to encode on the device (issue 69, stage 4), as the
//! caller lays it out, in builds with and without the `gpu` feature: the argument records
//! of `cuda/parquet_encode.cu` field for field ([`EncodeColumnArg`], [`EncodePageArg`],
//! [`EncodeTileArg`]), planned once here ([`plan_job`]) and read alike by the kernels and
//! by their CPU reference (`parquet/device/encode_cpu.rs`), which both write the same
//! [`EncodeOutput`].
//!
//! A job is columns (flat, fixed-width: INT32, INT64, FLOAT, DOUBLE; every row's PLAIN
//! value, nulls' slots included, and an optional validity bitmap in Arrow's bit order from
//! row 0), each cut into pages (row ranges), each page into tiles of [`ENCODE_TILE`] rows
//! (a thread block's). Three launches:
//!
//! 1. `parquet_encode_summarize`, a block a tile: the tile's non-null count, min and max;
//! 2. `parquet_encode_scan`, a thread a page: each tile's place among its page's values (an
//!    exclusive scan of the counts, in order), the page's statistics (the tiles' folded in
//!    order), its level encoding and its body's layout, and the bytes before its levels;
//! 3. `parquet_encode_write`, a block a tile: the tile's level bits and non-null values at
//!    their places in its page's body.
//!
//! Each page's body lands at the start of its slot in one output buffer (`out`, 16-byte
//! aligned, room for the largest body its rows can make), `body_len` bytes of it. The body
//! is a data page v1's (the spec: `parquet/device/encode_cpu.rs`): in an OPTIONAL column a
//! 4-byte length, then the definition levels (one RLE run where the page has no null or only
//! nulls, else one bit-packed run), then the non-null values PLAIN; in a REQUIRED one the
//! values alone.
//!
//! Statistics are PLAIN bits in a u64 (a 4-byte value zero-extended). They follow
//! parquet-rs's writer: integers compare signed; a float NaN is skipped; floats compare by
//! `>`, so -0.0 and +0.0 tie, and every min or max that is a zero is written as -0.0 (min)
//! or +0.0 (max) as soon as it is found (a tile's, then a page's). So a tile's min and max do
//! not depend on the order its values were compared in, and a kernel that reduces in a
//! tree gives the bits an in-order fold gives.

// Its callers are the Parquet encoder's reference and tests, and the device path under
// construction.
#![cfg_attr(not(test), allow(dead_code))]

use std::mem::{align_of, offset_of, size_of};
use std::ops::Range;

/// Rows a tile holds (a thread block's work), a multiple of 8 so a tile's level bits start
/// on a byte of its page's (cuda/parquet_encode.cu's `ENCODE_TILE`, the same).
pub(crate) const ENCODE_TILE: u32 = 1024;

/// The column's physical type (`EncodeColumnArg::kind`).
pub(crate) const KIND_INT32: u32 = 0;
pub(crate) const KIND_INT64: u32 = 1;
pub(crate) const KIND_FLOAT: u32 = 2;
pub(crate) const KIND_DOUBLE: u32 = 3;

/// `EncodeColumnArg::flags`: the column is OPTIONAL (its pages carry definition levels).
pub(crate) const COLUMN_NULLABLE: u32 = 1;

/// `EncodeTileArg::flags` and `EncodePageArg::flags`: a min and a max were found (a
/// non-null value that is not NaN).
pub(crate) const HAS_MIN_MAX: u32 = 1;
/// `EncodePageArg::flags`: the levels are one bit-packed run (else one RLE run, or none).
pub(crate) const PAGE_BIT_PACKED: u32 = 2;

/// Bytes a value of `kind` takes (4 or 8), or `None` for a kind that is none of these.
pub(crate) fn kind_width(kind: u32) -> Option<usize> {
    match kind {
        KIND_INT32 | KIND_FLOAT => Some(4),
        KIND_INT64 | KIND_DOUBLE => Some(8),
        _ => None,
    }
}

/// The kernels' `EncodeColumn`, field for field: a column's values (`rows` of
/// `kind_width(kind)` bytes, little-endian, from row 0) and validity bitmap (bit `r` of byte
/// `r / 8` for row `r`; 0: every row valid) as device addresses; the CPU reference reads
/// its host columns instead and ignores both.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EncodeColumnArg {
    pub values: u64,
    pub validity: u64,
    pub rows: u64,
    pub kind: u32,
    pub flags: u32,
}

/// The kernels' `EncodePage`, field for field. The planner sets the first group
/// (`out` an offset in the job's output); the scan writes the second.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EncodePageArg {
    /// Its slot's offset in the output (16-byte aligned).
    pub out: u64,
    /// Its first row in its column.
    pub first_row: u64,
    pub column: u32,
    pub rows: u32,
    /// Its tiles are `first_tile..first_tile + tiles` of the job's.
    pub first_tile: u32,
    pub tiles: u32,
    /// Its slot's bytes: room for the largest body `rows` rows make ([`slot_len`]).
    pub slot_len: u32,
    // Written by the scan:
    /// Non-null rows (the page's nulls are `rows - non_null`).
    pub non_null: u32,
    /// Its body's bytes from the slot's start.
    pub body_len: u32,
    /// Where its bit-packed level bytes start in the body (0 without a bit-packed run).
    pub levels_at: u32,
    /// Where its values start in the body.
    pub values_at: u32,
    /// [`HAS_MIN_MAX`], [`PAGE_BIT_PACKED`].
    pub flags: u32,
    /// Its min and max, PLAIN bits (where [`HAS_MIN_MAX`]).
    pub min: u64,
    pub max: u64,
}

/// The kernels' `EncodeTile`, field for field. The planner sets the first group; the
/// summary writes `non_null`, `flags`, `min`, `max`; the scan writes `at`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EncodeTileArg {
    pub page: u32,
    /// Its first row in its page (a multiple of [`ENCODE_TILE`]).
    pub first: u32,
    pub rows: u32,
    // Written by the summary and the scan:
    pub non_null: u32,
    /// Non-null rows of its page's tiles before it: where its values start among the page's.
    pub at: u32,
    /// [`HAS_MIN_MAX`].
    pub flags: u32,
    pub min: u64,
    pub max: u64,
}

// The layouts cuda/parquet_encode.cu asserts (its sizes there, the same).
const _: () = {
    assert!(size_of::<EncodeColumnArg>() == 32);
    assert!(align_of::<EncodeColumnArg>() == 8);
    assert!(size_of::<EncodePageArg>() == 72);
    assert!(offset_of!(EncodePageArg, column) == 16);
    assert!(offset_of!(EncodePageArg, flags) == 52);
    assert!(offset_of!(EncodePageArg, min) == 56);
    assert!(size_of::<EncodeTileArg>() == 40);
    assert!(offset_of!(EncodeTileArg, min) == 24);
};

/// One launch's work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EncodeJob {
    pub columns: Vec<EncodeColumnArg>,
    pub pages: Vec<EncodePageArg>,
    pub tiles: Vec<EncodeTileArg>,
    /// The output buffer's bytes (every slot lies inside it).
    pub output_len: usize,
}

/// What a run of a job gives back, on the device or the CPU: the pages and tiles with what
/// the kernels wrote into them, and the output buffer (zero outside the bodies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EncodeOutput {
    pub pages: Vec<EncodePageArg>,
    pub tiles: Vec<EncodeTileArg>,
    pub output: Vec<u8>,
}

impl EncodeOutput {
    /// Page `p`'s body.
    pub fn body(&self, p: usize) -> &[u8] {
        let page = &self.pages[p];
        &self.output[page.out as usize..page.out as usize + page.body_len as usize]
    }
}

/// Bytes of the unsigned LEB128 varint of `v`.
pub(crate) fn uleb_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The largest body `rows` rows of `width`-byte values make: all values, and in an
/// OPTIONAL column the length prefix and the longer of the two level runs (a bit-packed
/// run's header and `ceil(rows / 8)` bytes, an RLE run's header and its value byte).
pub(crate) fn slot_len(rows: usize, width: usize, nullable: bool) -> Option<usize> {
    let values = rows.checked_mul(width)?;
    if !nullable {
        return Some(values);
    }
    let bytes = rows.div_ceil(8);
    let packed = uleb_len(((bytes as u64) << 1) | 1) + bytes;
    let rle = uleb_len((rows as u64) << 1) + 1;
    values.checked_add(4 + packed.max(rle))
}

/// The job of `columns` (their `values` and `validity` as the runner reads them: device
/// addresses for the device, anything for the CPU reference), column `c` cut into the
/// pages `pages[c]`: row ranges that cover its rows exactly once, in order, none empty and
/// none over `i32::MAX` rows or bytes (a page header's counts). Pure; an `Err` says which
/// page or column is wrong.
pub(crate) fn plan_job(columns: &[EncodeColumnArg], pages: &[Vec<Range<usize>>]) -> Result<EncodeJob, String> {
    if columns.len() != pages.len() {
        return Err(format!("{} page tables for {} columns", pages.len(), columns.len()));
    }
    let mut job = EncodeJob { columns: columns.to_vec(), ..Default::default() };
    for (c, (col, cuts)) in columns.iter().zip(pages).enumerate() {
        let width = kind_width(col.kind).ok_or_else(|| format!("column {c}: kind {} is not a covered type", col.kind))?;
        if col.flags & !COLUMN_NULLABLE != 0 {
            return Err(format!("column {c}: unknown flags {:#x}", col.flags));
        }
        let mut next = 0usize;
        for (i, cut) in cuts.iter().enumerate() {
            if cut.start != next {
                return Err(format!("column {c}, page {i} starts at row {}, not at row {next}", cut.start));
            }
            if cut.is_empty() {
                return Err(format!("column {c}, page {i} holds no rows"));
            }
            if cut.end as u64 > col.rows {
                return Err(format!("column {c}, page {i} (rows {}..{}) runs past the column's {} rows", cut.start, cut.end, col.rows));
            }
            let rows = cut.len();
            let slot = slot_len(rows, width, col.flags & COLUMN_NULLABLE != 0)
                .filter(|&s| i32::try_from(s).is_ok())
                .ok_or_else(|| format!("column {c}, page {i}: {rows} rows make a page larger than a page header states"))?;
            let first_tile = job.tiles.len();
            let page = job.pages.len();
            for first in (0..rows).step_by(ENCODE_TILE as usize) {
                job.tiles.push(EncodeTileArg {
                    page: u32::try_from(page).map_err(|_| "more than 2^32 pages in one job".to_string())?,
                    first: first as u32,
                    rows: (ENCODE_TILE as usize).min(rows - first) as u32,
                    ..Default::default()
                });
            }
            let out = job.output_len.div_ceil(16) * 16;
            job.output_len = out + slot;
            job.pages.push(EncodePageArg {
                out: out as u64,
                first_row: cut.start as u64,
                column: c as u32,
                rows: rows as u32,
                first_tile: u32::try_from(first_tile).map_err(|_| "more than 2^32 tiles in one job".to_string())?,
                tiles: (job.tiles.len() - first_tile) as u32,
                slot_len: slot as u32,
                ..Default::default()
            });
            next = cut.end;
        }
        if next as u64 != col.rows {
            return Err(format!("column {c}: the pages cover {next} of its {} rows", col.rows));
        }
    }
    Ok(job)
}

impl EncodeJob {
    /// Checks what the kernels rely on without checking it themselves: every page reads
    /// rows of its column and writes inside the output, its tiles are its rows in order.
    /// The launch and the CPU reference check this before they run.
    pub fn check(&self) -> Result<(), String> {
        for (c, col) in self.columns.iter().enumerate() {
            if kind_width(col.kind).is_none() || col.flags & !COLUMN_NULLABLE != 0 {
                return Err(format!("column {c}: kind {} flags {:#x}", col.kind, col.flags));
            }
        }
        let mut next_tile = 0usize;
        for (i, p) in self.pages.iter().enumerate() {
            let col = self.columns.get(p.column as usize).ok_or_else(|| format!("page {i} names column {}", p.column))?;
            let width = kind_width(col.kind).expect("checked above");
            if p.rows == 0 || p.first_row.checked_add(u64::from(p.rows)).is_none_or(|e| e > col.rows) {
                return Err(format!("page {i}: rows {}+{} of a column of {}", p.first_row, p.rows, col.rows));
            }
            let need = slot_len(p.rows as usize, width, col.flags & COLUMN_NULLABLE != 0);
            let end = p.out.checked_add(u64::from(p.slot_len));
            if need.is_none_or(|n| n > p.slot_len as usize) || end.is_none_or(|e| e > self.output_len as u64) || p.out % 16 != 0 {
                return Err(format!(
                    "page {i}: its slot ({} bytes at {}) does not hold its body or lies outside the output",
                    p.slot_len, p.out
                ));
            }
            if p.first_tile as usize != next_tile || p.tiles as usize != (p.rows as usize).div_ceil(ENCODE_TILE as usize) {
                return Err(format!("page {i}: tiles {}+{} do not follow the pages before", p.first_tile, p.tiles));
            }
            for k in 0..p.tiles {
                let t = self.tiles.get((p.first_tile + k) as usize).ok_or_else(|| format!("page {i}: tile {k} is missing"))?;
                let first = k * ENCODE_TILE;
                if t.page as usize != i || t.first != first || t.rows != ENCODE_TILE.min(p.rows - first) {
                    return Err(format!("page {i}: tile {k} is not its rows {first}.."));
                }
            }
            next_tile += p.tiles as usize;
        }
        if next_tile != self.tiles.len() {
            return Err(format!("{} tiles for {next_tile} tiles of pages", self.tiles.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One page's cut (a `vec!` of one range reads as a mistake to clippy).
    fn one(rows: Range<usize>) -> Vec<Range<usize>> {
        vec![rows]
    }

    fn col(rows: u64, kind: u32, nullable: bool) -> EncodeColumnArg {
        EncodeColumnArg { rows, kind, flags: if nullable { COLUMN_NULLABLE } else { 0 }, ..Default::default() }
    }

    #[test]
    fn varints_and_slots() {
        for (v, n) in [(0u64, 1), (1, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (u32::MAX as u64, 5), (u64::MAX, 10)] {
            let mut out = Vec::new();
            let mut x = v;
            while x >= 0x80 {
                out.push(x as u8 | 0x80);
                x >>= 7;
            }
            out.push(x as u8);
            assert_eq!((uleb_len(v), out.len()), (n, n), "{v}");
        }
        assert_eq!(slot_len(10, 8, false), Some(80));
        // 10 rows: a bit-packed run of 2 bytes (header 1 byte) against an RLE run (1 + 1).
        assert_eq!(slot_len(10, 4, true), Some(40 + 4 + 3));
        // 1 row: the RLE run's 2 bytes, the bit-packed run's 2 bytes.
        assert_eq!(slot_len(1, 4, true), Some(4 + 4 + 2));
        assert_eq!(slot_len(usize::MAX, 8, false), None);
    }

    #[test]
    fn jobs_cut_pages_into_tiles() {
        let cols = [col(2500, KIND_INT32, true), col(3, KIND_DOUBLE, false)];
        let job = plan_job(&cols, &[vec![0..2049, 2049..2500], one(0..3)]).unwrap();
        job.check().unwrap();
        let pages: Vec<_> = job.pages.iter().map(|p| (p.column, p.first_row, p.rows, p.first_tile, p.tiles)).collect();
        assert_eq!(pages, [(0, 0, 2049, 0, 3), (0, 2049, 451, 3, 1), (1, 0, 3, 4, 1)]);
        let tiles: Vec<_> = job.tiles.iter().map(|t| (t.page, t.first, t.rows)).collect();
        assert_eq!(tiles, [(0, 0, 1024), (0, 1024, 1024), (0, 2048, 1), (1, 0, 451), (2, 0, 3)]);
        // Slots follow one another, 16-byte aligned, each room for its largest body.
        assert_eq!(job.pages[0].out, 0);
        assert_eq!(job.pages[0].slot_len as usize, slot_len(2049, 4, true).unwrap());
        assert_eq!(job.pages[1].out as usize, (job.pages[0].slot_len as usize).div_ceil(16) * 16);
        assert_eq!(job.pages[2].slot_len, 24);
        assert_eq!(job.output_len, job.pages[2].out as usize + 24);
        assert_eq!(plan_job(&[], &[]).unwrap(), EncodeJob::default());
    }

    #[test]
    fn wrong_cuts_are_errors() {
        let c = [col(10, KIND_INT64, true)];
        let err = |cuts: Vec<Range<usize>>| plan_job(&c, &[cuts]).unwrap_err();
        assert!(err(vec![0..4, 5..10]).contains("page 1 starts at row 5, not at row 4"));
        assert!(err(vec![0..4, 4..4, 4..10]).contains("page 1 holds no rows"));
        assert!(err(vec![0..4, 4..11]).contains("runs past the column's 10 rows"));
        assert!(err(one(0..4)).contains("cover 4 of its 10 rows"));
        assert!(plan_job(&c, &[]).unwrap_err().contains("0 page tables for 1 columns"));
        assert!(plan_job(&[col(1, 7, false)], &[one(0..1)]).unwrap_err().contains("kind 7"));
        let huge = [col(1 << 30, KIND_DOUBLE, false)];
        assert!(plan_job(&huge, &[one(0..1 << 30)]).unwrap_err().contains("larger than a page header states"));
    }

    #[test]
    fn damaged_jobs_fail_their_check() {
        let good = plan_job(&[col(3000, KIND_FLOAT, true)], &[vec![0..1500, 1500..3000]]).unwrap();
        good.check().unwrap();
        type Damage = fn(&mut EncodeJob);
        let damage: [(&str, Damage); 8] = [
            ("names column 1", |j| j.pages[0].column = 1),
            ("rows 1500+1501", |j| j.pages[1].rows = 1501),
            ("does not hold its body", |j| j.pages[0].slot_len -= 1),
            ("lies outside the output", |j| j.output_len -= 1),
            ("do not follow", |j| j.pages[1].first_tile = 1),
            ("tile 1 is not its rows", |j| j.tiles[1].rows = 1000),
            ("tiles for", |j| j.tiles.push(EncodeTileArg::default())),
            ("kind 9", |j| j.columns[0].kind = 9),
        ];
        for (want, f) in damage {
            let mut j = good.clone();
            f(&mut j);
            let e = j.check().unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}

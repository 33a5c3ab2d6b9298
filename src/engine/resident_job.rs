//! A merge round whose columns already live on the device (issue 69, stage 3): what the
//! device is asked to do, in one description the launch (`engine/gpu/resident.rs`) and the
//! checks here share.
//!
//! The inputs are *segments*: stretches of rows decoded on the device (a row group's column
//! chunks), each with its sort columns' key program ([`KeyFieldArg`]s holding the segment's
//! device addresses) and, for every payload column to gather, its values' and validity's
//! device addresses. The merge's *runs* are consecutive segments (a sorted file is one run
//! of its row groups); a global row is its position in the concatenation of the segments,
//! so ties go to the earlier run and, inside a run, to the earlier row: the order the CPU's
//! merge gives the same runs.
//!
//! The device, in order: every segment's keys encoded into one buffer at the segment's first
//! row (`cuda/key_encode.cu`); the runs merged on those keys (the co-rank levels of
//! `engine/gpu/merge.rs`, whose input keys may be any device buffer); each payload column's
//! segments concatenated where they are not already contiguous, then gathered in the
//! merge's order (`cuda/gather.cu`, values and validity); each byte array column gathered
//! from its segments' offsets and values (`cuda/gather_bytes.cu`: lengths, a scan, a copy).
//! What comes down: the permutation (for the columns the device does not hold) and the
//! gathered columns.
//!
//! Invariants, checked by [`ResidentJob::check`] before anything runs: every run is a
//! non-empty, in-order stretch of segments covering them all; every segment has one key
//! program of the same shape (the layout's fields) and one entry per payload column; a
//! column's width is one the gather copies (1 byte to 64 KiB); no address is 0 where a value
//! is read.

// Its callers are the tests and the device path under construction (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use super::key_job::{KeyFieldArg, KEY_NULL_BIT};
use crate::permutation::Indices;
use crate::{Error, Result};

/// Where one segment's column is on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentColumn {
    /// The values, `rows * width` bytes.
    pub values: u64,
    /// The validity bitmap (Arrow's bit order, from the segment's first row), or `None`
    /// where every row is valid.
    pub validity: Option<u64>,
}

/// Where one segment's byte array column is on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentBytes {
    /// `rows + 1` offsets of the column's offset width, from the first value byte.
    pub offsets: u64,
    /// The first value byte.
    pub values: u64,
    pub validity: Option<u64>,
}

/// `cuda/gather_bytes.cu`'s `ByteSegment`, field for field: one segment of a byte array
/// column in the kernels' segment table.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ByteSegmentArg {
    pub offsets: u64,
    pub values: u64,
    pub offset_width: u32,
    pub pad: u32,
}

// The layout cuda/gather_bytes.cu asserts for `ByteSegment`.
const _: () = assert!(std::mem::size_of::<ByteSegmentArg>() == 24);

/// One segment: its rows, its key program, and its payload columns' addresses (one per
/// [`ResidentJob::widths`] entry, one per [`ResidentJob::offset_widths`] entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub rows: usize,
    pub keys: Vec<KeyFieldArg>,
    pub columns: Vec<SegmentColumn>,
    pub bytes: Vec<SegmentBytes>,
}

/// A device-resident merge round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResidentJob {
    pub device: usize,
    pub segments: Vec<Segment>,
    /// Run `r` is segments `runs[r]..runs[r + 1]` (`runs[0] == 0`, the last entry is the
    /// number of segments).
    pub runs: Vec<usize>,
    /// The key's bits (the layout's): a u32 a key up to 32, else one to four u64 words.
    pub bits: u32,
    /// Each payload column's value width in bytes.
    pub widths: Vec<usize>,
    /// Each byte array column's offset width (4 or 8), in its segments and in the output.
    pub offset_widths: Vec<u32>,
}

/// What comes down from a round.
#[derive(Debug)]
pub(crate) struct ResidentOutput {
    /// The merge's order: for every output row, its global row (segments concatenated).
    pub indices: Indices,
    /// Each payload column gathered: `rows * width` bytes of values, and its validity
    /// bitmap (`rows` bits, Arrow's order, whole bytes) where any segment has one.
    pub columns: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Each byte array column gathered.
    pub bytes: Vec<GatheredBytes>,
    /// Wall times on the host: keys encoded, merged, gathered (each waited for).
    pub keys: std::time::Duration,
    pub merge: std::time::Duration,
    pub gather: std::time::Duration,
}

/// A byte array column gathered, in Arrow's layout.
#[derive(Debug)]
pub(crate) struct GatheredBytes {
    /// `rows + 1` offsets of the column's offset width, from 0.
    pub offsets: Vec<u8>,
    pub values: Vec<u8>,
    /// The validity bitmap where any segment has one.
    pub validity: Option<Vec<u8>>,
}

impl ResidentJob {
    /// Rows of all segments.
    pub fn rows(&self) -> usize {
        self.segments.iter().map(|s| s.rows).sum()
    }

    /// Each segment's first global row, then the total.
    pub fn segment_starts(&self) -> Vec<usize> {
        let mut at = 0;
        let mut starts: Vec<usize> = self
            .segments
            .iter()
            .map(|s| {
                let here = at;
                at += s.rows;
                here
            })
            .collect();
        starts.push(at);
        starts
    }

    /// Each run's first global row, then the total (the merge's run offsets).
    pub fn run_offsets(&self) -> Vec<usize> {
        let starts = self.segment_starts();
        self.runs.iter().map(|&s| starts[s]).collect()
    }

    /// The invariants of the module doc; an `Error::Internal` naming the first broken one.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Internal(format!("a device-resident round: {what}")));
        let n = self.segments.len();
        if self.runs.first() != Some(&0) || self.runs.last() != Some(&n) || self.runs.len() < 2 {
            return bad(format!("runs {:?} do not cover {n} segments", self.runs));
        }
        if self.runs.windows(2).any(|w| w[0] >= w[1]) {
            return bad(format!("runs {:?} are not non-empty stretches in order", self.runs));
        }
        if self.bits == 0 || self.bits > 256 {
            return bad(format!("a key of {} bits", self.bits));
        }
        if let Some(&w) = self.widths.iter().find(|&&w| !gathers(w)) {
            return bad(format!("a payload column of width {w}"));
        }
        if let Some(&w) = self.offset_widths.iter().find(|&&w| w != 4 && w != 8) {
            return bad(format!("a byte array column of offset width {w}"));
        }
        let shape: Vec<(u32, u32, u32)> = self.segments.first().map_or(Vec::new(), |s| s.keys.iter().map(field_shape).collect());
        if shape.is_empty() && n > 0 {
            return bad("no key field".into());
        }
        for (i, s) in self.segments.iter().enumerate() {
            if s.keys.iter().map(field_shape).collect::<Vec<_>>() != shape {
                return bad(format!("segment {i}'s key program differs from segment 0's"));
            }
            if s.columns.len() != self.widths.len() || s.bytes.len() != self.offset_widths.len() {
                return bad(format!("segment {i} has {} payload and {} byte array columns", s.columns.len(), s.bytes.len()));
            }
            if s.rows == 0 {
                continue; // nothing is read
            }
            for (f, d) in s.keys.iter().enumerate() {
                let end = d.offset + (d.flags & KEY_NULL_BIT) + 8 * d.bytes;
                if d.values == 0 || end > self.bits {
                    return bad(format!("segment {i}'s key field {f} has no values or does not fit the key"));
                }
            }
            if s.columns.iter().any(|c| c.values == 0 || c.validity == Some(0))
                || s.bytes.iter().any(|b| b.offsets == 0 || b.values == 0 || b.validity == Some(0))
            {
                return bad(format!("segment {i} has a payload column at address 0"));
            }
        }
        Ok(())
    }

    /// The validity table of payload column `c` for `cuda/gather.cu`'s `gather_validity`:
    /// each segment's first global row, the total, then each segment's bitmap as a bit
    /// position from `base` (the lowest of the segments' bitmap addresses, returned first),
    /// or `!0` for a segment without one. `None` where no segment has a bitmap.
    pub fn validity_table(&self, c: usize) -> Option<(u64, Vec<u64>)> {
        self.table_of(|s| s.columns[c].validity)
    }

    /// [`Self::validity_table`] of byte array column `c`.
    pub fn bytes_validity_table(&self, c: usize) -> Option<(u64, Vec<u64>)> {
        self.table_of(|s| s.bytes[c].validity)
    }

    fn table_of(&self, validity: impl Fn(&Segment) -> Option<u64>) -> Option<(u64, Vec<u64>)> {
        let base = self.segments.iter().filter(|s| s.rows > 0).filter_map(&validity).min()?;
        let mut table: Vec<u64> = self.segment_starts().iter().map(|&r| r as u64).collect();
        table.extend(self.segments.iter().map(|s| match validity(s) {
            Some(v) if s.rows > 0 => (v - base) * 8,
            _ => !0,
        }));
        Some((base, table))
    }

    /// The kernels' segment table of byte array column `c` (an empty segment's entry is
    /// never read: `gather_run_of` gives a row the last segment starting at or before it).
    pub fn byte_segments(&self, c: usize) -> Vec<ByteSegmentArg> {
        let w = self.offset_widths[c];
        self.segments
            .iter()
            .map(|s| ByteSegmentArg { offsets: s.bytes[c].offsets, values: s.bytes[c].values, offset_width: w, pad: 0 })
            .collect()
    }

    /// Where payload column `c`'s values are one stretch of device memory already (every
    /// non-empty segment's values right after the previous one's): its address.
    pub fn contiguous(&self, c: usize) -> Option<u64> {
        let w = self.widths[c] as u64;
        let mut segs = self.segments.iter().filter(|s| s.rows > 0);
        let first = segs.next()?;
        let mut next = first.columns[c].values + first.rows as u64 * w;
        for s in segs {
            if s.columns[c].values != next {
                return None;
            }
            next += s.rows as u64 * w;
        }
        Some(first.columns[c].values)
    }
}

/// A key field's place, width and flags (what every segment's program must agree on).
fn field_shape(d: &KeyFieldArg) -> (u32, u32, u32) {
    (d.offset, d.bytes, d.flags)
}

/// The tile sizes of the byte gather's scan, level by level: level 0 is the `n` lengths,
/// each next level the previous one's tile totals (`tile` items a tile), up to the first
/// level of a single tile, whose total is the sum of all.
pub(crate) fn scan_levels(n: usize, tile: usize) -> Vec<usize> {
    let mut levels = vec![n];
    while *levels.last().expect("one level") > tile {
        let tiles = levels.last().expect("one level").div_ceil(tile);
        levels.push(tiles);
    }
    levels
}

/// Whether `cuda/gather.cu`'s `gather_values` copies values of `width` bytes (any width,
/// in the widest unit that divides it; a u32 argument, bounded here far below).
pub(crate) fn gathers(width: usize) -> bool {
    (1..=1 << 16).contains(&width)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(rows: usize, values: u64, validity: Option<u64>) -> Segment {
        Segment {
            rows,
            keys: vec![KeyFieldArg { values: values + 1, offset: 0, bytes: 8, flags: 0, ..Default::default() }],
            columns: vec![SegmentColumn { values, validity }],
            bytes: vec![SegmentBytes { offsets: values + 2, values: values + 3, validity }],
        }
    }

    fn job(segments: Vec<Segment>, runs: Vec<usize>) -> ResidentJob {
        ResidentJob { device: 0, segments, runs, bits: 64, widths: vec![8], offset_widths: vec![4] }
    }

    #[test]
    fn offsets_tables_and_contiguity() {
        let j = job(vec![seg(3, 1000, Some(5000)), seg(0, 7, None), seg(2, 1024, None), seg(4, 4096, Some(5008))], vec![0, 2, 4]);
        j.check().unwrap();
        assert_eq!(j.rows(), 9);
        assert_eq!(j.segment_starts(), vec![0, 3, 3, 5, 9]);
        assert_eq!(j.run_offsets(), vec![0, 3, 9]);
        let (base, table) = j.validity_table(0).unwrap();
        assert_eq!(base, 5000);
        assert_eq!(table, vec![0, 3, 3, 5, 9, 0, !0, !0, 64]);
        // 1000 + 3 * 8 = 1024: the second non-empty segment follows the first; the third does not.
        assert_eq!(j.contiguous(0), None);
        assert_eq!(j.bytes_validity_table(0), j.validity_table(0));
        let segs = j.byte_segments(0);
        assert_eq!(segs[3], ByteSegmentArg { offsets: 4098, values: 4099, offset_width: 4, pad: 0 });
        let j = job(vec![seg(3, 1000, None), seg(0, 7, None), seg(2, 1024, None)], vec![0, 3]);
        assert_eq!(j.contiguous(0), Some(1000));
        assert_eq!(j.validity_table(0), None);
    }

    #[test]
    fn broken_jobs_are_refused() {
        let ok = || job(vec![seg(3, 1000, None), seg(2, 2000, None)], vec![0, 1, 2]);
        ok().check().unwrap();
        let mut j = ok();
        j.runs = vec![0, 2, 1, 2];
        assert!(j.check().is_err(), "runs out of order");
        let mut j = ok();
        j.runs = vec![0, 1];
        assert!(j.check().is_err(), "a segment outside every run");
        let mut j = ok();
        j.segments[1].keys[0].flags = KEY_NULL_BIT;
        assert!(j.check().is_err(), "programs differ");
        let mut j = ok();
        j.segments[1].keys[0].offset = 60;
        j.segments[0].keys[0].offset = 60;
        assert!(j.check().is_err(), "a field past the key");
        let mut j = ok();
        j.segments[0].columns[0].values = 0;
        assert!(j.check().is_err(), "a column at 0");
        let mut j = ok();
        j.widths = vec![0];
        assert!(j.check().is_err(), "a width the gather does not copy");
        let mut j = ok();
        j.segments[1].columns.clear();
        assert!(j.check().is_err(), "a missing column");
        let mut j = ok();
        j.bits = 300;
        assert!(j.check().is_err(), "a key too wide");
        let mut j = ok();
        j.offset_widths = vec![2];
        assert!(j.check().is_err(), "an offset width of 2");
        let mut j = ok();
        j.segments[0].bytes[0].values = 0;
        assert!(j.check().is_err(), "byte values at 0");
    }

    #[test]
    fn scan_levels_end_in_one_tile() {
        assert_eq!(scan_levels(0, 2048), vec![0]);
        assert_eq!(scan_levels(2048, 2048), vec![2048]);
        assert_eq!(scan_levels(2049, 2048), vec![2049, 2]);
        assert_eq!(scan_levels(2048 * 2048 + 1, 2048), vec![2048 * 2048 + 1, 2049, 2]);
    }
}

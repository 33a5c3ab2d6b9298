//! Parquet's RLE / bit-packed hybrid, read as the device kernels read it
//! (`cuda/parquet_decode.cu`, `hybrid_*`): a stream is walked run header by run header (the
//! serial part), each run kept as a [`Run`], and any value of a run is then read alone from
//! it (the part every thread of a block does at once). The CPU reference
//! ([`super::decode_cpu`]) uses these very functions.
//!
//! The format (parquet-format's Encodings.md): a sequence of runs, each a ULEB128 header
//! `h`: `h & 1 == 0` an RLE run of `h >> 1` copies of one value stored in
//! `ceil(bit_width / 8)` little-endian bytes; `h & 1 == 1` a bit-packed run of
//! `(h >> 1) * 8` values, `bit_width` bits each, packed from the least significant bit of
//! each byte. A header is at most 5 bytes (32 bits); a bit-packed run's bytes may be cut by
//! the stream's end (a value whose bits are missing is a fault when it is read, as
//! parquet-rs's reader only fails on a value it needs).
//!
//! Every read is checked against the stream's length; a damaged stream is a [`Fault`],
//! never a read out of bounds.

use super::decode_fault::Fault;

/// One run of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The index of its first value in the stream.
    pub start: u64,
    /// Values in it (a bit-packed run's padding included).
    pub count: u64,
    /// An RLE run's value; `None` for a bit-packed run.
    pub value: Option<u32>,
    /// A bit-packed run's first byte in the stream, and its bytes present there.
    pub at: usize,
    pub bytes: usize,
}

/// Walks a stream's run headers.
pub(crate) struct Walker<'a> {
    pub stream: &'a [u8],
    pub pos: usize,
    /// The value index the next run starts at.
    pub next: u64,
    pub bit_width: u32,
}

impl<'a> Walker<'a> {
    pub fn new(stream: &'a [u8], bit_width: u32) -> Walker<'a> {
        Walker { stream, pos: 0, next: 0, bit_width }
    }

    /// The next run of at least one value (empty runs are skipped), `Ok(None)` at the
    /// stream's end. `end` is the fault of a header cut short; `bad_value` of an RLE value
    /// above `max_value`.
    pub fn next_run(&mut self, max_value: u32, end: Fault, bad_value: Fault) -> Result<Option<Run>, Fault> {
        loop {
            if self.pos >= self.stream.len() {
                return Ok(None);
            }
            let mut h = 0u64;
            let mut shift = 0;
            loop {
                let Some(&b) = self.stream.get(self.pos) else { return Err(end) };
                self.pos += 1;
                h |= u64::from(b & 0x7f) << shift;
                if b & 0x80 == 0 {
                    break;
                }
                shift += 7;
                if shift >= 35 {
                    return Err(Fault::RunHeader);
                }
            }
            if h > u64::from(u32::MAX) {
                return Err(Fault::RunHeader);
            }
            let start = self.next;
            if h & 1 == 0 {
                let count = h >> 1;
                let n = self.bit_width.div_ceil(8) as usize;
                if self.stream.len() - self.pos < n {
                    return Err(end);
                }
                let mut v = 0u32;
                for k in 0..n {
                    v |= u32::from(self.stream[self.pos + k]) << (8 * k);
                }
                self.pos += n;
                if v > max_value {
                    return Err(bad_value);
                }
                if count == 0 {
                    continue;
                }
                self.next += count;
                return Ok(Some(Run { start, count, value: Some(v), at: 0, bytes: 0 }));
            }
            let groups = h >> 1;
            let want = groups * u64::from(self.bit_width);
            let left = (self.stream.len() - self.pos) as u64;
            let bytes = want.min(left) as usize;
            let at = self.pos;
            self.pos += bytes;
            if groups == 0 {
                continue;
            }
            self.next += groups * 8;
            return Ok(Some(Run { start, count: groups * 8, value: None, at, bytes }));
        }
    }
}

/// The runs of a stream that cover the values a tile needs, as the kernel keeps them in
/// shared memory (`hybrid_cover`, `hybrid_value`): at most `capacity` runs; covering
/// `[from, to)` drops the runs that end at or before `from`, then reads run headers until
/// the last run reaches `to`. A tile of `t` values needs at most `t + 1` runs (one kept
/// from before, then each run read covers at least one value of the tile); running out of
/// room is [`Fault::Launch`] (a bug of this bound, never the file's).
pub(crate) struct Window<'a> {
    pub walker: Walker<'a>,
    pub runs: Vec<Run>,
    pub capacity: usize,
}

impl<'a> Window<'a> {
    pub fn new(stream: &'a [u8], bit_width: u32, capacity: usize) -> Window<'a> {
        Window { walker: Walker::new(stream, bit_width), runs: Vec::with_capacity(capacity), capacity }
    }

    /// Makes the window cover values `[from, to)` (`from < to`).
    pub fn cover(&mut self, from: u64, to: u64, max_value: u32, end: Fault, bad_value: Fault) -> Result<(), Fault> {
        self.runs.retain(|r| r.start + r.count > from);
        while self.runs.last().is_none_or(|r| r.start + r.count < to) {
            let run = self.walker.next_run(max_value, end, bad_value)?.ok_or(end)?;
            if self.runs.len() == self.capacity {
                return Err(Fault::Launch);
            }
            self.runs.push(run);
        }
        Ok(())
    }

    /// Value `i` from the run that holds it (a binary search, as the kernel's): `Err(end)`
    /// where no run holds it or its bits are missing.
    pub fn value(&self, i: u64, end: Fault) -> Result<u32, Fault> {
        let k = self.runs.partition_point(|r| r.start <= i);
        let run = k.checked_sub(1).map(|k| &self.runs[k]).filter(|r| i < r.start + r.count).ok_or(end)?;
        value(self.walker.stream, run, i, self.walker.bit_width, end)
    }
}

/// Value `i` of the stream (`run.start <= i < run.start + run.count`), read from its run:
/// `Err(end)` where a bit-packed value's bits lie past the stream's end.
pub(crate) fn value(stream: &[u8], run: &Run, i: u64, bit_width: u32, end: Fault) -> Result<u32, Fault> {
    if let Some(v) = run.value {
        return Ok(v);
    }
    if bit_width == 0 {
        return Ok(0);
    }
    let bit = (i - run.start) * u64::from(bit_width);
    let first = (bit / 8) as usize;
    let last_bit = bit + u64::from(bit_width);
    if last_bit.div_ceil(8) as usize > run.bytes {
        return Err(end);
    }
    // At most 5 bytes hold a value of up to 32 bits at any bit offset.
    let mut word = 0u64;
    let n = (last_bit.div_ceil(8) as usize - first).min(5);
    for k in 0..n {
        word |= u64::from(stream[run.at + first + k]) << (8 * k);
    }
    let v = (word >> (bit % 8)) & ((1u64 << bit_width) - 1);
    Ok(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uleb(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A hybrid stream (parquet-rs keeps its encoder crate-private): groups of 8 equal
    /// values become RLE runs (consecutive ones merged), other groups bit-packed runs of
    /// one group; the last group padded with zeros.
    fn encode(values: &[u64], bw: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let groups: Vec<Vec<u64>> = values.chunks(8).map(|g| (0..8).map(|k| g.get(k).copied().unwrap_or(0)).collect()).collect();
        let mut i = 0;
        while i < groups.len() {
            let g = &groups[i];
            if g.iter().all(|&v| v == g[0]) && (i + 1) * 8 <= values.len() {
                let mut j = i + 1;
                while j < groups.len() && (j + 1) * 8 <= values.len() && groups[j].iter().all(|&v| v == g[0]) {
                    j += 1;
                }
                uleb(&mut out, ((j - i) as u64 * 8) << 1);
                out.extend_from_slice(&g[0].to_le_bytes()[..bw.div_ceil(8) as usize]);
                i = j;
            } else {
                uleb(&mut out, (1 << 1) | 1);
                let mut packed = vec![0u8; bw as usize];
                for (k, &v) in g.iter().enumerate() {
                    for b in 0..bw as usize {
                        let bit = k * bw as usize + b;
                        packed[bit / 8] |= (((v >> b) & 1) as u8) << (bit % 8);
                    }
                }
                out.extend_from_slice(&packed);
                i += 1;
            }
        }
        out
    }

    fn all(stream: &[u8], bw: u32, n: usize) -> Result<Vec<u32>, Fault> {
        let max = if bw >= 32 { u32::MAX } else { (1u32 << bw) - 1 };
        let mut w = Walker::new(stream, bw);
        let mut out = Vec::new();
        while out.len() < n {
            let Some(run) = w.next_run(max, Fault::IndicesEnd, Fault::IndexRange)? else { return Err(Fault::IndicesEnd) };
            for i in run.start..(run.start + run.count).min(n as u64) {
                out.push(value(stream, &run, i, bw, Fault::IndicesEnd)?);
            }
        }
        Ok(out)
    }

    /// Streams of every bit width read back, runs of both kinds (whole files of parquet-rs's
    /// writer are read in `decode_tests`).
    #[test]
    fn reads_parquet_rs_streams() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for bw in 0..=32u32 {
            let mask = if bw == 32 { u64::from(u32::MAX) } else { (1u64 << bw) - 1 };
            let values: Vec<u64> = (0..3000)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Long runs of one value among random stretches.
                    if (i / 100) % 2 == 0 {
                        5 & mask
                    } else {
                        x & mask
                    }
                })
                .collect();
            let bytes = encode(&values, bw);
            let got = all(&bytes, bw, values.len()).unwrap();
            assert_eq!(got, values.iter().map(|&v| v as u32).collect::<Vec<_>>(), "bit width {bw}");
            // Cut anywhere: a fault or a shorter read, never a panic.
            for cut in 0..bytes.len() {
                if let Ok(v) = all(&bytes[..cut], bw, values.len()) {
                    assert_eq!(v.len(), values.len());
                }
            }
        }
    }

    /// The window's bound holds at its tightest: RLE runs of one value each (a tile needs
    /// all its runs plus the one kept), and runs that straddle the tiles.
    #[test]
    fn windows_hold_a_tile_of_single_value_runs() {
        const TILE: u64 = 256;
        for run_len in [1u64, 3, 8, 255, 257] {
            let n = 2000u64;
            let mut stream = Vec::new();
            let mut want = Vec::new();
            let mut i = 0;
            while i < n {
                let len = run_len.min(n - i);
                let v = ((i / run_len) % 2) as u8;
                uleb(&mut stream, len << 1);
                stream.push(v);
                want.extend(std::iter::repeat_n(u32::from(v), len as usize));
                i += len;
            }
            let mut w = Window::new(&stream, 1, TILE as usize + 1);
            for from in (0..n).step_by(TILE as usize) {
                let to = (from + TILE).min(n);
                w.cover(from, to, 1, Fault::LevelsEnd, Fault::LevelValue).unwrap();
                assert!(w.runs.len() <= TILE as usize + 1);
                for i in from..to {
                    assert_eq!(w.value(i, Fault::LevelsEnd), Ok(want[i as usize]), "runs of {run_len}, value {i}");
                }
            }
            // A window one run smaller cannot hold single-value runs past the first tile.
            if run_len == 1 {
                let mut small = Window::new(&stream, 1, TILE as usize);
                small.cover(0, TILE, 1, Fault::LevelsEnd, Fault::LevelValue).unwrap();
                assert_eq!(small.cover(TILE - 1, 2 * TILE, 1, Fault::LevelsEnd, Fault::LevelValue), Err(Fault::Launch));
            }
        }
    }

    #[cfg(feature = "gpu")]
    #[test]
    fn tiles_are_the_kernel_block() {
        assert_eq!(super::super::decode_cpu::TILE as u32, crate::engine::gpu::tuning::THREADS);
    }

    #[test]
    fn damaged_headers_are_faults() {
        // A header longer than 5 bytes.
        assert_eq!(all(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 1, 1), Err(Fault::RunHeader));
        // An RLE value above the maximum.
        assert_eq!(all(&[0x02, 0x03], 1, 1), Err(Fault::IndexRange));
        // A bit-packed run cut short.
        assert_eq!(all(&[0x03, 0xff], 16, 1), Err(Fault::IndicesEnd));
        // Runs of nothing, then the end.
        assert_eq!(all(&[0x00, 0x00, 0x01], 1, 1), Err(Fault::IndicesEnd));
    }
}

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

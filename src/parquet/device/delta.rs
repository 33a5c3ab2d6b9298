//! DELTA_BINARY_PACKED (INT32, INT64), read as the device kernel reads it
//! (`cuda/parquet_decode.cu`, `delta_*`): the header and each block's header walked in order
//! (the serial part, the kernel's thread 0), each miniblock kept as a [`Mini`] in a window
//! that covers a tile's deltas, and any delta then read alone from its miniblock (what every
//! thread does at once); the values are a prefix sum of the deltas (the kernel's block scan),
//! which the caller does. The CPU reference ([`super::decode_cpu`]) uses these functions.
//!
//! The format (parquet-format's Encodings.md): a header of ULEB128 block size (values, a
//! multiple of 128), miniblocks a block (each of `block size / miniblocks` values, a
//! multiple of 32; here at most `u32::MAX` values a block), the total value count, and the
//! first value (zigzag ULEB128); then
//! blocks, each a zigzag ULEB128 minimum delta, one bit-width byte a miniblock, then the
//! miniblocks, bit-packed from each byte's least significant bit. Value `k > 0` is value
//! `k - 1` plus the minimum delta plus its packed delta, wrapping (in 32 bits for INT32:
//! the low 32 bits of the 64-bit sum are the same). A bit width wider than the type is
//! refused, as parquet-rs does; a miniblock cut by the stream's end is kept with the bytes
//! present (a delta whose bits are missing is a fault when it is read).
//!
//! Every read is checked against the stream's length: a damaged stream is a [`Fault`]
//! (`DeltaHeader`: a header that is cut, too long or inconsistent; `DeltaEnd`: the stream's
//! values end before the page's), never a read out of bounds.

use super::decode_fault::Fault;

/// A miniblock: the index of its first delta, its bit width and minimum delta, where its
/// bytes start in the stream and how many are there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mini {
    pub start: u64,
    pub min_delta: u64,
    pub bit_width: u32,
    pub at: usize,
    pub bytes: usize,
}

/// A stream's header and the walk of its blocks.
#[derive(Debug, Clone)]
pub(crate) struct Delta<'a> {
    pub stream: &'a [u8],
    pub pos: usize,
    /// Values a miniblock, miniblocks a block, the values in the stream, the first value.
    pub per_mini: u64,
    pub minis: u64,
    pub total: u64,
    pub first: u64,
    /// The most bits a delta may take (the type's width).
    pub max_bits: u32,
    /// The current block: its minimum delta, where its bit widths are, miniblocks left.
    pub min_delta: u64,
    pub widths_at: usize,
    pub left: u64,
    /// The first delta index of the next miniblock.
    pub next: u64,
}

/// A ULEB128 of at most 10 bytes (64 bits) at `*pos`, or `None` where it is cut or longer.
fn uleb(s: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for k in 0..10 {
        let b = *s.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * k);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn zigzag(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

impl<'a> Delta<'a> {
    /// The stream's header, of a type of `max_bits` bits (32 or 64).
    pub fn new(stream: &'a [u8], max_bits: u32) -> Result<Delta<'a>, Fault> {
        let mut pos = 0;
        let mut next = || uleb(stream, &mut pos).ok_or(Fault::DeltaHeader);
        let (block, minis, total, first) = (next()?, next()?, next()?, next()?);
        // A block of at most u32::MAX values keeps every size below in 64 bits.
        if block == 0 || block > u64::from(u32::MAX) || block % 128 != 0 || minis == 0 || block % minis != 0 || (block / minis) % 32 != 0 {
            return Err(Fault::DeltaHeader);
        }
        Ok(Delta {
            stream,
            pos,
            per_mini: block / minis,
            minis,
            total,
            first: zigzag(first),
            max_bits,
            min_delta: 0,
            widths_at: 0,
            left: 0,
            next: 0,
        })
    }

    /// The next miniblock (a block's header read first where one starts).
    fn next_mini(&mut self) -> Result<Mini, Fault> {
        if self.left == 0 {
            let mut pos = self.pos;
            let min = uleb(self.stream, &mut pos).ok_or(Fault::DeltaEnd)?;
            if (self.stream.len() - pos) as u64 <= self.minis.saturating_sub(1) {
                return Err(Fault::DeltaEnd);
            }
            self.min_delta = zigzag(min);
            self.widths_at = pos;
            self.pos = pos + self.minis as usize;
            self.left = self.minis;
        }
        let bit_width = u32::from(self.stream[self.widths_at + (self.minis - self.left) as usize]);
        if bit_width > self.max_bits {
            return Err(Fault::DeltaHeader);
        }
        let want = self.per_mini * u64::from(bit_width) / 8;
        let bytes = want.min((self.stream.len() - self.pos) as u64) as usize;
        let m = Mini { start: self.next, min_delta: self.min_delta, bit_width, at: self.pos, bytes };
        self.pos += bytes;
        self.left -= 1;
        self.next += self.per_mini;
        Ok(m)
    }
}

/// The miniblocks that cover a tile's deltas, as the kernel keeps them in shared memory: at
/// most `capacity` (a tile of `t` deltas needs `t / 32 + 2`: miniblocks hold at least 32).
pub(crate) struct DeltaWindow<'a> {
    pub delta: Delta<'a>,
    pub minis: Vec<Mini>,
    pub capacity: usize,
}

impl<'a> DeltaWindow<'a> {
    pub fn new(delta: Delta<'a>, capacity: usize) -> DeltaWindow<'a> {
        DeltaWindow { delta, minis: Vec::with_capacity(capacity), capacity }
    }

    /// Makes the window cover deltas `[from, to)` (`from < to`): a fault where the stream
    /// holds fewer than `to` deltas (`total - 1`).
    pub fn cover(&mut self, from: u64, to: u64) -> Result<(), Fault> {
        if to > self.delta.total.saturating_sub(1) {
            return Err(Fault::DeltaEnd);
        }
        let per = self.delta.per_mini;
        self.minis.retain(|m| m.start + per > from);
        while self.minis.last().is_none_or(|m| m.start + per < to) {
            let m = self.delta.next_mini()?;
            if self.minis.len() == self.capacity {
                return Err(Fault::Launch);
            }
            self.minis.push(m);
        }
        Ok(())
    }

    /// Delta `i` (its miniblock's minimum added), wrapping: a fault where no miniblock holds
    /// it or its bits are missing.
    pub fn delta(&self, i: u64) -> Result<u64, Fault> {
        let per = self.delta.per_mini;
        let k = self.minis.partition_point(|m| m.start <= i);
        let m = k.checked_sub(1).map(|k| &self.minis[k]).filter(|m| i < m.start + per).ok_or(Fault::DeltaEnd)?;
        let bits =
            unpack(&self.delta.stream[m.at..m.at + m.bytes], (i - m.start) * u64::from(m.bit_width), m.bit_width).ok_or(Fault::DeltaEnd)?;
        Ok(m.min_delta.wrapping_add(bits))
    }
}

/// The `width`-bit value (at most 64) at bit `bit` of `s`, least significant bit first;
/// `None` where its bits run past `s`.
pub(crate) fn unpack(s: &[u8], bit: u64, width: u32) -> Option<u64> {
    if (bit + u64::from(width)).div_ceil(8) > s.len() as u64 {
        return None;
    }
    let mut v = 0u64;
    let mut k = 0u32;
    while k < width {
        let at = bit + u64::from(k);
        let shift = (at % 8) as u32;
        let take = (8 - shift).min(width - k);
        let part = (u64::from(s[(at / 8) as usize]) >> shift) & ((1u64 << take) - 1);
        v |= part << k;
        k += take;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_every_width() {
        let s: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        let bits = |from: u64, w: u32| {
            (0..w).fold(0u64, |v, k| v | (u64::from(s[((from + u64::from(k)) / 8) as usize] >> ((from + u64::from(k)) % 8) & 1) << k))
        };
        for w in 0..=64 {
            for from in [0u64, 1, 7, 8, 13, 63, 100] {
                assert_eq!(unpack(&s, from, w), Some(bits(from, w)), "width {w} at {from}");
            }
            if w > 0 {
                assert_eq!(unpack(&s, 320 - u64::from(w), w), Some(bits(320 - u64::from(w), w)));
                assert_eq!(unpack(&s, 320 - u64::from(w) + 1, w), None);
            }
        }
    }

    #[test]
    fn damaged_headers_are_faults() {
        // Block size not a multiple of 128; miniblocks of 16 values; cut.
        assert_eq!(Delta::new(&[100, 1, 5, 0], 64).unwrap_err(), Fault::DeltaHeader);
        assert_eq!(Delta::new(&[0x80, 0x01, 8, 5, 0], 64).unwrap_err(), Fault::DeltaHeader);
        assert_eq!(Delta::new(&[0x80, 0x01, 4], 64).unwrap_err(), Fault::DeltaHeader);
        // A block of 2^35 values.
        assert_eq!(Delta::new(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 4, 5, 0], 64).unwrap_err(), Fault::DeltaHeader);
        // A ULEB of 11 bytes.
        assert_eq!(
            Delta::new(&[0x80, 0x01, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0], 64).unwrap_err(),
            Fault::DeltaHeader
        );
        // A bit width wider than the type.
        let d = Delta::new(&[0x80, 0x01, 4, 5, 0, 0, 33, 0, 0, 0], 32).unwrap();
        let mut w = DeltaWindow::new(d, 10);
        assert_eq!(w.cover(0, 4), Err(Fault::DeltaHeader));
        // Fewer values than asked.
        let d = Delta::new(&[0x80, 0x01, 4, 5, 0, 0, 0, 0, 0, 0], 32).unwrap();
        let mut w = DeltaWindow::new(d, 10);
        assert_eq!(w.cover(0, 5), Err(Fault::DeltaEnd));
        w.cover(0, 4).unwrap();
        assert_eq!(w.delta(3), Ok(0));
    }
}

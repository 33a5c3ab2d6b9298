//! The CPU reference of the page decode kernels (`cuda/parquet_decode.cu`): the same
//! [`DecodePlan`], the same per-page algorithm, the same faults, in Rust, so CI checks the
//! algorithm against parquet-rs's arrow reader where there is no GPU, and the GPU tests
//! check the kernels against both.
//!
//! One data page, its values `n` (nulls included), its body decompressed: first its set-up
//! (where the definition levels are: none, every value defined, or the hybrid of bit width
//! 1 after a v1 page's 4-byte length or at a v2 page's stated place; where the values
//! start; a dictionary page's bit-width byte; a DELTA_BINARY_PACKED page's header), then
//! tiles of [`TILE`] values, each:
//!
//! 1. the window of level runs made to cover the tile ([`super::hybrid::Window`], the
//!    kernel's shared-memory window, of the same capacity), each level read from its run;
//! 2. each defined value's rank among the page's defined values (a prefix count; the
//!    kernel's block scan);
//! 3. dictionary pages: the window of index runs made to cover the tile's ranks;
//!    DELTA_BINARY_PACKED pages: the window of miniblocks ([`super::delta`], of
//!    [`DELTA_WIN`]) made to cover the deltas the tile's ranks need;
//! 4. the value of rank `k` (PLAIN: the `k`-th stored value; dictionary: the entry of
//!    index `k`; delta: the first value plus deltas `0..k`, the kernel's block scan of the
//!    tile's terms plus the tiles' before, wrapping) written at output row
//!    `first_row + i`, widened as the plan says; a null's slot stays zero and its validity
//!    bit clear;
//!
//! then a v2 page's nulls checked against its header's count. The faults are the kernel's,
//! found in the same order, except that among the threads of one step the kernel keeps
//! whichever fault it met first where this keeps the lowest value's.
//!
//! The output: one values buffer of `rows * out_width` bytes and, for a nullable column, a
//! validity bitmap of `rows` bits (Arrow's layout: bit `r % 8` of byte `r / 8`).
//!
//! BYTE_ARRAY chunks ([`Physical::ByteArray`]) go through three more steps, the kernels'
//! (the chunk's bodies laid end to end as stage 1 lays them on the device, so a value's
//! place is one offset in that input):
//!
//! 0. the dictionary page walked into a [`Slot`] table, an entry's place and length
//!    ([`dictionary_slots`]: serial, the kernel's one thread);
//! 1. each page as above, but step 4 writes a row's [`Slot`] (a null's stays zero, a
//!    zero-length value, as parquet-rs gives nulls), the value of rank `k` being, for a
//!    PLAIN page, the `k`-th length-prefixed value: before step 4, the tile's defined
//!    values' length prefixes are walked in order (serial, the kernel's thread 0, carried
//!    from tile to tile); for a dictionary page, the entry's slot;
//! 2. the chunk's offsets, a scan of its slots' lengths ([`offsets_of`]); i32 offsets
//!    whose total passes `i32::MAX` are [`Fault::OffsetOverflow`];
//! 3. the values buffer, of the scan's total, each value copied to its offset and, for a
//!    string type, checked UTF-8 ([`utf8_ok`]) ([`copy_values`]).
//!
//! The values buffer's size is the scan's total, read back by the host before the copy
//! (exact; a bound from the pages would not do for dictionaries: rows times the longest
//! entry is unbounded by the chunk's bytes). Faults of steps 2 and 3 are the chunk's, not a
//! page's.

use super::decode_fault::Fault;
use super::decode_plan::{DataPage, DecodePlan, Levels, Physical, Values, Widen};
use super::delta::{Delta, DeltaWindow};
use super::hybrid::Window;
pub(crate) use crate::engine::decode_job::Slot;
use arrow::array::ArrayData;
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};

/// A column chunk decoded: its values and validity, in Arrow's layouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodedChunk {
    pub rows: usize,
    pub values: Vec<u8>,
    /// `rows` bits; `None` for a column of maximum definition level 0.
    pub validity: Option<Vec<u8>>,
    /// A byte array chunk's value bytes (`values` then holds its `rows + 1` offsets).
    pub data: Option<Vec<u8>>,
}

impl DecodedChunk {
    /// The chunk as Arrow array data of `plan`'s type.
    pub fn to_array_data(&self, plan: &DecodePlan) -> arrow::error::Result<ArrayData> {
        let nulls = self.validity.as_ref().map(|v| NullBuffer::new(BooleanBuffer::new(Buffer::from(v.as_slice()), 0, self.rows)));
        let mut b = ArrayData::builder(plan.data_type.clone()).len(self.rows).add_buffer(Buffer::from(self.values.as_slice()));
        if let Some(data) = &self.data {
            b = b.add_buffer(Buffer::from(data.as_slice()));
        }
        b.nulls(nulls).align_buffers(true).build()
    }
}

/// A page's part of the output: its values' bytes (or a byte array page's slots) and,
/// where nullable, the chunk's whole bitmap (a page's rows need not start on a byte).
struct Out<'a> {
    sink: Sink<'a>,
    validity: Option<&'a mut [u8]>,
}

enum Sink<'a> {
    /// Fixed-width values, `out_width` bytes a row.
    Fixed(&'a mut [u8]),
    /// A byte array page's rows' slots; `base` is the page body's offset in the input,
    /// `dict` the dictionary's slots.
    Bytes { slots: &'a mut [Slot], base: u64, dict: &'a [Slot] },
}

/// The chunk-level faults of a byte array chunk (steps 2 and 3) report this as their page.
pub(crate) const CHUNK: usize = usize::MAX;

/// Decodes a chunk: `bodies[i]` is the body of page `i` of its table once decompressed
/// (`None` for a page the plan does not read), `dictionary` the dictionary page's body.
/// `Err` is the first failing page's index in the table and its fault.
/// `Err` is the first failing page's index in the table (or [`CHUNK`]) and its fault.
pub(crate) fn decode_chunk(plan: &DecodePlan, bodies: &[Option<&[u8]>]) -> Result<DecodedChunk, (usize, Fault)> {
    if plan.physical == Physical::ByteArray {
        return decode_bytes_chunk(plan, bodies);
    }
    let rows = usize::try_from(plan.rows).map_err(|_| (0, Fault::Launch))?;
    let mut values = vec![0u8; rows * plan.out_width];
    let mut validity = plan.nullable.then(|| vec![0u8; rows.div_ceil(8)]);
    let dictionary: &[u8] = match plan.dictionary {
        Some(d) => bodies.get(d.page).copied().flatten().filter(|b| b.len() == d.body_len).ok_or((d.page, Fault::Launch))?,
        None => &[],
    };
    for p in &plan.pages {
        let body = bodies.get(p.page).copied().flatten().ok_or((p.page, Fault::Launch))?;
        let first = p.first_row as usize;
        let out = Out {
            sink: Sink::Fixed(&mut values[first * plan.out_width..(first + p.values as usize) * plan.out_width]),
            validity: validity.as_deref_mut(),
        };
        decode_page(plan, p, body, dictionary, out).map_err(|f| (p.page, f))?;
    }
    Ok(DecodedChunk { rows, values, validity, data: None })
}

/// A byte array chunk (the module doc's steps 0 to 3), its bodies laid end to end.
fn decode_bytes_chunk(plan: &DecodePlan, bodies: &[Option<&[u8]>]) -> Result<DecodedChunk, (usize, Fault)> {
    let rows = usize::try_from(plan.rows).map_err(|_| (0, Fault::Launch))?;
    let mut input = Vec::new();
    let mut base = vec![0u64; bodies.len()];
    for (i, b) in bodies.iter().enumerate() {
        if let Some(b) = b {
            base[i] = input.len() as u64;
            input.extend_from_slice(b);
        }
    }
    let dict = match plan.dictionary {
        Some(d) => {
            let body = bodies.get(d.page).copied().flatten().filter(|b| b.len() == d.body_len).ok_or((d.page, Fault::Launch))?;
            dictionary_slots(&input, base[d.page], body.len() as u64, d.entries).map_err(|f| (d.page, f))?
        }
        None => Vec::new(),
    };
    let mut slots = vec![Slot::default(); rows];
    let mut validity = plan.nullable.then(|| vec![0u8; rows.div_ceil(8)]);
    for p in &plan.pages {
        let body = bodies.get(p.page).copied().flatten().ok_or((p.page, Fault::Launch))?;
        let first = p.first_row as usize;
        let out = Out {
            sink: Sink::Bytes { slots: &mut slots[first..first + p.values as usize], base: base[p.page], dict: &dict },
            validity: validity.as_deref_mut(),
        };
        decode_page(plan, p, body, &[], out).map_err(|f| (p.page, f))?;
    }
    let (offsets, total) = offsets_of(&slots, plan.out_width).map_err(|f| (CHUNK, f))?;
    let data = copy_values(&input, &slots, &offsets, plan.out_width, total, plan.utf8).map_err(|f| (CHUNK, f))?;
    Ok(DecodedChunk { rows, values: offsets, validity, data: Some(data) })
}

/// Step 0: a byte array dictionary page of `entries` values, `len` bytes at `at` in
/// `input`, walked into its entries' slots (the kernel's one thread, in order).
pub(crate) fn dictionary_slots(input: &[u8], at: u64, len: u64, entries: u32) -> Result<Vec<Slot>, Fault> {
    let end = at.checked_add(len).filter(|&e| e <= input.len() as u64).ok_or(Fault::Launch)?;
    let body = &input[at as usize..end as usize];
    let mut slots = Vec::with_capacity(entries as usize);
    let mut pos = 0usize;
    for _ in 0..entries {
        let (at_value, n) = length_prefixed(body, pos).ok_or(Fault::DictionaryEnd)?;
        slots.push(Slot { at: at + at_value as u64, len: n, pad: 0 });
        pos = at_value + n as usize;
    }
    Ok(slots)
}

/// The value whose 4-byte little-endian length prefix is at `pos` of `stored`: where its
/// bytes start, and its length; `None` where the prefix or the bytes run past the end.
fn length_prefixed(stored: &[u8], pos: usize) -> Option<(usize, u32)> {
    let prefix = stored.get(pos..pos.checked_add(4)?)?;
    let n = u32::from_le_bytes(prefix.try_into().expect("4 bytes"));
    (n as usize <= stored.len() - pos - 4).then_some((pos + 4, n))
}

/// Step 2: the chunk's `rows + 1` offsets of `width` bytes (4 or 8, little-endian) from
/// its slots' lengths, and their total; i32 offsets past `i32::MAX` are a fault.
pub(crate) fn offsets_of(slots: &[Slot], width: usize) -> Result<(Vec<u8>, u64), Fault> {
    let mut out = Vec::with_capacity((slots.len() + 1) * width);
    let mut total = 0u64;
    out.extend_from_slice(&0u64.to_le_bytes()[..width]);
    for s in slots {
        total += u64::from(s.len);
        out.extend_from_slice(&total.to_le_bytes()[..width]);
    }
    if width == 4 && total > i32::MAX as u64 {
        return Err(Fault::OffsetOverflow);
    }
    Ok((out, total))
}

/// Step 3: each row's value copied from `input` to its offset (`offsets`, `width` bytes
/// each) in a buffer of `total` bytes, checked UTF-8 where `utf8`.
pub(crate) fn copy_values(input: &[u8], slots: &[Slot], offsets: &[u8], width: usize, total: u64, utf8: bool) -> Result<Vec<u8>, Fault> {
    let total = usize::try_from(total).map_err(|_| Fault::Launch)?;
    let mut data = vec![0u8; total];
    for (r, s) in slots.iter().enumerate() {
        let mut o = [0u8; 8];
        o[..width].copy_from_slice(offsets.get(r * width..(r + 1) * width).ok_or(Fault::Launch)?);
        let dst = u64::from_le_bytes(o) as usize;
        let src = s.at.checked_add(u64::from(s.len)).filter(|&e| e <= input.len() as u64).ok_or(Fault::Launch)?;
        let src = &input[s.at as usize..src as usize];
        let to = data.get_mut(dst..dst + src.len()).ok_or(Fault::Launch)?;
        if utf8 && !utf8_ok(src) {
            return Err(Fault::Utf8);
        }
        to.copy_from_slice(src);
    }
    Ok(data)
}

/// Whether `s` is UTF-8: the kernel's `utf8_ok`, byte by byte (the Unicode standard's
/// table 3-7 of well-formed sequences; a test checks it against `std::str::from_utf8`).
pub(crate) fn utf8_ok(s: &[u8]) -> bool {
    let n = s.len();
    let mut i = 0;
    while i < n {
        let c = s[i];
        if c < 0x80 {
            i += 1;
            continue;
        }
        let (need, lo, hi) = match c {
            0xC2..=0xDF => (1, 0x80, 0xBF),
            0xE0 => (2, 0xA0, 0xBF),
            0xE1..=0xEC | 0xEE..=0xEF => (2, 0x80, 0xBF),
            0xED => (2, 0x80, 0x9F),
            0xF0 => (3, 0x90, 0xBF),
            0xF1..=0xF3 => (3, 0x80, 0xBF),
            0xF4 => (3, 0x80, 0x8F),
            _ => return false,
        };
        if n - i - 1 < need {
            return false;
        }
        if s[i + 1] < lo || s[i + 1] > hi {
            return false;
        }
        for k in 2..=need {
            if s[i + k] & 0xC0 != 0x80 {
                return false;
            }
        }
        i += need + 1;
    }
    true
}

/// Values a tile: the kernel's block size (`THREADS`, tuning.rs; a test checks).
pub(crate) const TILE: usize = 256;

/// Miniblocks a DELTA_BINARY_PACKED window holds: a tile's deltas span at most
/// `TILE / 32 + 1` miniblocks of at least 32 values, plus the one kept (the kernel's
/// `DELTA_WIN`).
pub(crate) const DELTA_WIN: usize = TILE / 32 + 2;

/// One data page (the module doc's steps), tile by tile as the kernel goes.
fn decode_page(plan: &DecodePlan, p: &DataPage, body: &[u8], dictionary: &[u8], out: Out<'_>) -> Result<(), Fault> {
    if body.len() != p.body_len {
        return Err(Fault::Launch);
    }
    let n = p.values as usize;
    // Set-up (the kernel's thread 0 before the tiles): the levels, where the values start,
    // a dictionary page's bit width.
    let (levels, values_at): (Option<&[u8]>, usize) = match p.levels {
        Levels::None => (None, p.values_at),
        Levels::Prefixed => {
            let len = body.get(..4).ok_or(Fault::LevelsLength)?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            if len > body.len() - 4 {
                return Err(Fault::LevelsLength);
            }
            (Some(&body[4..4 + len]), 4 + len)
        }
        Levels::Stated { at, len } => {
            let stream = at.checked_add(len).and_then(|end| body.get(at..end)).ok_or(Fault::LevelsLength)?;
            (Some(stream), p.values_at)
        }
    };
    let stored = body.get(values_at..).ok_or(Fault::ValuesEnd)?;
    let width = plan.physical.bytes();
    let (indices, bw): (&[u8], u32) = match p.encoding {
        Values::Plain | Values::Delta => (&[], 0),
        Values::Dictionary => match stored.split_first() {
            Some((&bw, rest)) if bw <= 32 => (rest, u32::from(bw)),
            _ => return Err(Fault::BitWidth),
        },
    };
    let entries = plan.dictionary.map_or(0, |d| d.entries);
    let mut level_runs = Window::new(levels.unwrap_or_default(), 1, TILE + 1);
    let mut index_runs = Window::new(indices, bw, TILE + 1);
    let Out { mut sink, mut validity } = out;
    let mut rank_base = 0u64;
    let mut defined = [false; TILE];
    // A byte array PLAIN page: the next length prefix, and the tile's values (the kernel's
    // shared arrays).
    let mut plain_pos = 0usize;
    let mut tile_values: Vec<(usize, u32)> = Vec::with_capacity(TILE);
    // A DELTA_BINARY_PACKED page: its header (set-up), the window of miniblocks, and the
    // running sum of the terms (the kernel's scan carry).
    let mut deltas = match p.encoding {
        Values::Delta => Some(DeltaWindow::new(Delta::new(stored, 8 * width as u32)?, DELTA_WIN)),
        _ => None,
    };
    let mut carry = 0u64;
    for from in (0..n).step_by(TILE) {
        let to = (from + TILE).min(n);
        // 1. The tile's levels.
        if levels.is_some() {
            level_runs.cover(from as u64, to as u64, 1, Fault::LevelsEnd, Fault::LevelValue)?;
        }
        for i in from..to {
            defined[i - from] = levels.is_none() || level_runs.value(i as u64, Fault::LevelsEnd)? == 1;
        }
        // 2. Ranks (the kernel's block scan).
        let tile_defined = defined[..to - from].iter().filter(|&&d| d).count() as u64;
        // 3. The tile's dictionary indices.
        if p.encoding == Values::Dictionary && tile_defined > 0 {
            index_runs.cover(rank_base, rank_base + tile_defined, u32::MAX, Fault::IndicesEnd, Fault::IndexRange)?;
        }
        // 3''. A DELTA_BINARY_PACKED page: the miniblocks of the deltas the tile's ranks need
        // (rank k > 0 needs delta k - 1).
        if let (Some(w), true) = (deltas.as_mut(), tile_defined > 0) {
            if rank_base + tile_defined > w.delta.total {
                return Err(Fault::DeltaEnd);
            }
            let (lo, hi) = (rank_base.max(1) - 1, rank_base + tile_defined - 1);
            if lo < hi {
                w.cover(lo, hi)?;
            }
        }
        // 3'. A byte array PLAIN page: the tile's values' length prefixes, in order.
        if matches!(sink, Sink::Bytes { .. }) && p.encoding == Values::Plain {
            tile_values.clear();
            for _ in 0..tile_defined {
                let (at, len) = length_prefixed(stored, plain_pos).ok_or(Fault::ValuesEnd)?;
                tile_values.push((at, len));
                plain_pos = at + len as usize;
            }
        }
        // 4. Each defined value to its row.
        let mut rank = rank_base;
        for i in from..to {
            if !defined[i - from] {
                continue;
            }
            let k = rank as usize;
            // A delta page's value: the first value, plus every delta up to this rank.
            let summed = match &deltas {
                Some(w) => {
                    let term = if rank == 0 { w.delta.first } else { w.delta(rank - 1)? };
                    carry = carry.wrapping_add(term);
                    Some(carry.to_le_bytes())
                }
                None => None,
            };
            let entry = match p.encoding {
                Values::Plain | Values::Delta => None,
                Values::Dictionary => {
                    let e = index_runs.value(rank, Fault::IndicesEnd)?;
                    if e >= entries {
                        return Err(Fault::IndexRange);
                    }
                    Some(e as usize)
                }
            };
            match &mut sink {
                Sink::Fixed(values) => {
                    let src = match (entry, &summed) {
                        (None, Some(v)) => &v[..width],
                        (None, None) => stored.get(k * width..(k + 1) * width).ok_or(Fault::ValuesEnd)?,
                        (Some(e), _) => &dictionary[e * width..(e + 1) * width],
                    };
                    write_value(plan.widen, src, &mut values[i * plan.out_width..(i + 1) * plan.out_width]);
                }
                Sink::Bytes { slots, base, dict } => {
                    slots[i] = match entry {
                        None => {
                            let (at, len) = tile_values[(rank - rank_base) as usize];
                            Slot { at: *base + (values_at + at) as u64, len, pad: 0 }
                        }
                        Some(e) => *dict.get(e).ok_or(Fault::Launch)?,
                    };
                }
            }
            if let Some(bits) = validity.as_deref_mut() {
                let r = p.first_row as usize + i;
                bits[r / 8] |= 1 << (r % 8);
            }
            rank += 1;
        }
        rank_base = rank;
    }
    // 5. A v2 page's header's null count.
    if let Some(nulls) = p.nulls {
        if n as u64 - rank_base != u64::from(nulls) {
            return Err(Fault::NullCount);
        }
    }
    Ok(())
}

/// One value, stored bytes `src`, to its output slot `dst`.
fn write_value(widen: Widen, src: &[u8], dst: &mut [u8]) {
    match widen {
        Widen::Copy => dst.copy_from_slice(src),
        Widen::SignExtend16 => {
            let v: i128 = if src.len() == 4 {
                i32::from_le_bytes(src.try_into().expect("4 bytes")).into()
            } else {
                i64::from_le_bytes(src.try_into().expect("8 bytes")).into()
            };
            dst.copy_from_slice(&v.to_le_bytes());
        }
        Widen::BigEndian16 => {
            let sign = if src[0] & 0x80 != 0 { 0xff } else { 0 };
            for (k, d) in dst.iter_mut().enumerate() {
                *d = if k < src.len() { src[src.len() - 1 - k] } else { sign };
            }
        }
    }
}

/// One block of the kernel from its launch arguments alone: `arg` (offsets in `input` and
/// in `output`, as a `DecodeJob` holds them) decoded from `input` (stage 1's buffer) into
/// `output` (the job's buffer). The tests run a whole job through it, which checks that the
/// arguments carry everything the plan says (`decode::layout`).
#[cfg(test)]
pub(crate) fn decode_arg(arg: &crate::engine::decode_job::DecodePageArg, input: &[u8], output: &mut [u8]) -> Result<(), Fault> {
    use super::decode_plan::{Dictionary, Physical};
    use crate::engine::decode_job as job;
    let slice = |at: u64, len: u64| -> Result<&[u8], Fault> {
        let end = at.checked_add(len).filter(|&e| e <= input.len() as u64).ok_or(Fault::Launch)?;
        Ok(&input[at as usize..end as usize])
    };
    let body = slice(arg.body, arg.body_len.into())?;
    let dictionary = arg.flags & job::FLAG_DICTIONARY != 0;
    let bytes = arg.flags & job::FLAG_BYTES != 0;
    // A byte array page's dictionary is its slot table, in the output.
    let dict = if dictionary && !bytes { slice(arg.dict, arg.dict_len.into())? } else { &[] };
    let physical = match (arg.widths & 0xff, bytes) {
        (4, false) => Physical::Four,
        (8, false) => Physical::Eight,
        (0, true) if arg.widths >> 8 == 16 => Physical::ByteArray,
        (n @ 1.., false) => Physical::FixedLen(n as usize),
        _ => return Err(Fault::Launch),
    };
    let out_width = ((arg.widths >> 8) & 0xff) as usize;
    let plan = DecodePlan {
        data_type: arrow::datatypes::DataType::Null,
        physical,
        widen: match (arg.flags & job::FLAG_SIGN_EXTEND != 0, arg.flags & job::FLAG_BIG_ENDIAN != 0) {
            (false, false) => Widen::Copy,
            (true, false) => Widen::SignExtend16,
            (false, true) => Widen::BigEndian16,
            (true, true) => return Err(Fault::Launch),
        },
        out_width,
        utf8: false,
        nullable: arg.out_valid != job::NO_VALIDITY,
        rows: arg.chunk_rows,
        dictionary: dictionary.then_some(Dictionary { page: 0, entries: arg.dict_entries, body_len: dict.len() }),
        pages: Vec::new(),
    };
    if dictionary && !bytes && arg.dict_entries as usize * physical.bytes() > dict.len() {
        return Err(Fault::Launch);
    }
    let levels = match arg.flags & 3 {
        job::LEVELS_NONE => Levels::None,
        job::LEVELS_PREFIXED => Levels::Prefixed,
        job::LEVELS_STATED => Levels::Stated { at: arg.levels_at as usize, len: arg.levels_len as usize },
        _ => return Err(Fault::Launch),
    };
    let page = DataPage {
        page: 0,
        values: arg.num_values,
        first_row: arg.first_row,
        body_len: body.len(),
        levels,
        values_at: arg.values_at as usize,
        encoding: match (dictionary, arg.flags & job::FLAG_DELTA != 0) {
            (false, false) => Values::Plain,
            (true, false) => Values::Dictionary,
            (false, true) => Values::Delta,
            (true, true) => return Err(Fault::Launch),
        },
        nulls: (arg.nulls != job::NULLS_UNCHECKED).then_some(arg.nulls),
    };
    let rows = arg.chunk_rows as usize;
    let (first, n) = (arg.first_row as usize, arg.num_values as usize);
    if first + n > rows {
        return Err(Fault::Launch);
    }
    let dict_slots = if dictionary && bytes {
        let at = arg.dict as usize;
        read_slots(output.get(at..at + arg.dict_entries as usize * 16).ok_or(Fault::Launch)?)
    } else {
        Vec::new()
    };
    let values_at = arg.out_values as usize;
    let valid_at = plan.nullable.then_some(arg.out_valid as usize);
    // The values and the validity words are apart in the output (decode::layout).
    let (values, validity) = match valid_at {
        Some(v) if v >= values_at + rows * out_width => {
            let (head, tail) = output.split_at_mut(v);
            (&mut head[values_at + first * out_width..values_at + (first + n) * out_width], Some(&mut tail[..rows.div_ceil(32) * 4]))
        }
        Some(_) => return Err(Fault::Launch),
        None => (&mut output[values_at + first * out_width..values_at + (first + n) * out_width], None),
    };
    if !bytes {
        return decode_page(&plan, &page, body, dict, Out { sink: Sink::Fixed(values), validity });
    }
    // The slots as the kernel's 16-byte records: read, written, put back.
    let mut slots = read_slots(values);
    decode_page(&plan, &page, body, &[], Out { sink: Sink::Bytes { slots: &mut slots, base: arg.body, dict: &dict_slots }, validity })?;
    write_slots(&slots, values);
    Ok(())
}

#[cfg(test)]
fn read_slots(bytes: &[u8]) -> Vec<Slot> {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    bytes.chunks_exact(16).map(|r| Slot { at: word(&r[..8]), len: word(&r[8..]) as u32, pad: 0 }).collect()
}

#[cfg(test)]
fn write_slots(slots: &[Slot], bytes: &mut [u8]) {
    for (s, r) in slots.iter().zip(bytes.chunks_exact_mut(16)) {
        r[..8].copy_from_slice(&s.at.to_le_bytes());
        r[8..12].copy_from_slice(&s.len.to_le_bytes());
        r[12..].fill(0);
    }
}

/// The dictionary kernel's block from its arguments (`decode_arg`'s companion): the
/// dictionary page's slot table written into `output`.
#[cfg(test)]
pub(crate) fn dict_arg(arg: &crate::engine::decode_job::BytesDictArg, input: &[u8], output: &mut [u8]) -> Result<(), Fault> {
    let slots = dictionary_slots(input, arg.body, arg.body_len.into(), arg.entries)?;
    let at = arg.slots as usize;
    write_slots(&slots, output.get_mut(at..at + slots.len() * 16).ok_or(Fault::Launch)?);
    Ok(())
}

/// The scan kernel's block from its arguments: the chunk's offsets written into `output`,
/// its total into `arg`.
#[cfg(test)]
pub(crate) fn offsets_arg(arg: &mut crate::engine::decode_job::BytesChunkArg, output: &mut [u8]) -> Result<(), Fault> {
    let (rows, w) = (arg.rows as usize, arg.offset_width as usize);
    let slots = read_slots(output.get(arg.slots as usize..arg.slots as usize + rows * 16).ok_or(Fault::Launch)?);
    let (offsets, total) = offsets_of(&slots, w)?;
    output.get_mut(arg.offsets as usize..arg.offsets as usize + (rows + 1) * w).ok_or(Fault::Launch)?.copy_from_slice(&offsets);
    arg.total = total;
    Ok(())
}

/// The copy kernel's block from its arguments: the chunk's values written into `values`
/// (the values buffer) at `arg.values`.
#[cfg(test)]
pub(crate) fn copy_arg(
    arg: &crate::engine::decode_job::BytesChunkArg,
    input: &[u8],
    output: &[u8],
    values: &mut [u8],
) -> Result<(), Fault> {
    let (rows, w) = (arg.rows as usize, arg.offset_width as usize);
    let slots = read_slots(output.get(arg.slots as usize..arg.slots as usize + rows * 16).ok_or(Fault::Launch)?);
    let offsets = output.get(arg.offsets as usize..arg.offsets as usize + (rows + 1) * w).ok_or(Fault::Launch)?;
    let data = copy_values(input, &slots, offsets, w, arg.total, arg.utf8 != 0)?;
    values.get_mut(arg.values as usize..arg.values as usize + data.len()).ok_or(Fault::Launch)?.copy_from_slice(&data);
    Ok(())
}

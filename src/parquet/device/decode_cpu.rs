//! The CPU reference of the page decode kernels (`cuda/parquet_decode.cu`): the same
//! [`DecodePlan`], the same per-page algorithm, the same faults, in Rust, so CI checks the
//! algorithm against parquet-rs's arrow reader where there is no GPU, and the GPU tests
//! check the kernels against both.
//!
//! One data page, its values `n` (nulls included), its body decompressed: first its set-up
//! (where the definition levels are: none, every value defined, or the hybrid of bit width
//! 1 after a v1 page's 4-byte length or at a v2 page's stated place; where the values
//! start; a dictionary page's bit-width byte), then tiles of [`TILE`] values, each:
//!
//! 1. the window of level runs made to cover the tile ([`super::hybrid::Window`], the
//!    kernel's shared-memory window, of the same capacity), each level read from its run;
//! 2. each defined value's rank among the page's defined values (a prefix count; the
//!    kernel's block scan);
//! 3. dictionary pages: the window of index runs made to cover the tile's ranks;
//! 4. the value of rank `k` (PLAIN: the `k`-th stored value; dictionary: the entry of
//!    index `k`) written at output row `first_row + i`, widened as the plan says; a null's
//!    slot stays zero and its validity bit clear;
//!
//! then a v2 page's nulls checked against its header's count. The faults are the kernel's,
//! found in the same order, except that among the threads of one step the kernel keeps
//! whichever fault it met first where this keeps the lowest value's.
//!
//! The output: one values buffer of `rows * out_width` bytes and, for a nullable column, a
//! validity bitmap of `rows` bits (Arrow's layout: bit `r % 8` of byte `r / 8`).

use super::decode_fault::Fault;
use super::decode_plan::{DataPage, DecodePlan, Levels, Values, Widen};
use super::hybrid::Window;
use arrow::array::ArrayData;
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};

/// A column chunk decoded: its values and validity, in Arrow's layouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodedChunk {
    pub rows: usize,
    pub values: Vec<u8>,
    /// `rows` bits; `None` for a column of maximum definition level 0.
    pub validity: Option<Vec<u8>>,
}

impl DecodedChunk {
    /// The chunk as Arrow array data of `plan`'s type.
    pub fn to_array_data(&self, plan: &DecodePlan) -> arrow::error::Result<ArrayData> {
        let nulls = self.validity.as_ref().map(|v| NullBuffer::new(BooleanBuffer::new(Buffer::from(v.as_slice()), 0, self.rows)));
        ArrayData::builder(plan.data_type.clone())
            .len(self.rows)
            .add_buffer(Buffer::from(self.values.as_slice()))
            .nulls(nulls)
            .align_buffers(true)
            .build()
    }
}

/// A page's part of the output: its values' bytes and, where nullable, the chunk's whole
/// bitmap (a page's rows need not start on a byte).
struct Out<'a> {
    values: &'a mut [u8],
    validity: Option<&'a mut [u8]>,
}

/// Decodes a chunk: `bodies[i]` is the body of page `i` of its table once decompressed
/// (`None` for a page the plan does not read), `dictionary` the dictionary page's body.
/// `Err` is the first failing page's index in the table and its fault.
pub(crate) fn decode_chunk(plan: &DecodePlan, bodies: &[Option<&[u8]>]) -> Result<DecodedChunk, (usize, Fault)> {
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
            values: &mut values[first * plan.out_width..(first + p.values as usize) * plan.out_width],
            validity: validity.as_deref_mut(),
        };
        decode_page(plan, p, body, dictionary, out).map_err(|f| (p.page, f))?;
    }
    Ok(DecodedChunk { rows, values, validity })
}

/// Values a tile: the kernel's block size (`THREADS`, tuning.rs; a test checks).
pub(crate) const TILE: usize = 256;

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
        Values::Plain => (&[], 0),
        Values::Dictionary => match stored.split_first() {
            Some((&bw, rest)) if bw <= 32 => (rest, u32::from(bw)),
            _ => return Err(Fault::BitWidth),
        },
    };
    let entries = plan.dictionary.map_or(0, |d| d.entries);
    let mut level_runs = Window::new(levels.unwrap_or_default(), 1, TILE + 1);
    let mut index_runs = Window::new(indices, bw, TILE + 1);
    let Out { values, mut validity } = out;
    let mut rank_base = 0u64;
    let mut defined = [false; TILE];
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
        // 4. Each defined value to its row.
        let mut rank = rank_base;
        for i in from..to {
            if !defined[i - from] {
                continue;
            }
            let k = rank as usize;
            let src = match p.encoding {
                Values::Plain => stored.get(k * width..(k + 1) * width).ok_or(Fault::ValuesEnd)?,
                Values::Dictionary => {
                    let e = index_runs.value(rank, Fault::IndicesEnd)?;
                    if e >= entries {
                        return Err(Fault::IndexRange);
                    }
                    &dictionary[e as usize * width..(e as usize + 1) * width]
                }
            };
            write_value(plan.widen, src, &mut values[i * plan.out_width..(i + 1) * plan.out_width]);
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
    let dict = if dictionary { slice(arg.dict, arg.dict_len.into())? } else { &[] };
    let physical = match arg.widths & 0xff {
        4 => Physical::Four,
        8 => Physical::Eight,
        _ => return Err(Fault::Launch),
    };
    let out_width = ((arg.widths >> 8) & 0xff) as usize;
    let plan = DecodePlan {
        data_type: arrow::datatypes::DataType::Null,
        physical,
        widen: if arg.flags & job::FLAG_SIGN_EXTEND != 0 { Widen::SignExtend16 } else { Widen::Copy },
        out_width,
        nullable: arg.out_valid != job::NO_VALIDITY,
        rows: arg.chunk_rows,
        dictionary: dictionary.then_some(Dictionary { page: 0, entries: arg.dict_entries, body_len: dict.len() }),
        pages: Vec::new(),
    };
    if dictionary && arg.dict_entries as usize * physical.bytes() > dict.len() {
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
        encoding: if dictionary { Values::Dictionary } else { Values::Plain },
        nulls: (arg.nulls != job::NULLS_UNCHECKED).then_some(arg.nulls),
    };
    let rows = arg.chunk_rows as usize;
    let (first, n) = (arg.first_row as usize, arg.num_values as usize);
    if first + n > rows {
        return Err(Fault::Launch);
    }
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
    decode_page(&plan, &page, body, dict, Out { values, validity })
}

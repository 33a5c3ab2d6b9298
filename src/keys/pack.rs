//! Writes every row's fields into its key words, in parallel over row ranges.

use super::layout::{Field, FieldKind, Layout};
use super::word::KeyColumn;
use super::{bytes, fixed};
use arrow::array::{Array, ArrayRef};
use rayon::prelude::*;

/// Rows per parallel encoding task.
const ROWS_PER_TASK: usize = 1 << 16;

/// ORs the low `width` bits of `value` into `key` at bit `offset` from the most
/// significant bit of word 0. `width <= 64`.
#[inline]
fn put64(key: &mut [u64], offset: u32, width: u32, value: u64) {
    if width == 0 {
        return;
    }
    let word = (offset / 64) as usize;
    let s = offset % 64; // bits already used in this word, from the top
    if s + width <= 64 {
        key[word] |= value << (64 - s - width);
    } else {
        let rest = s + width - 64; // bits that spill into the next word
        key[word] |= value >> rest;
        key[word + 1] |= value << (64 - rest);
    }
}

/// As [`put64`] for up to 128 bits.
#[inline]
fn put(key: &mut [u64], offset: u32, width: u32, value: u128) {
    if width > 64 {
        put64(key, offset, width - 64, (value >> 64) as u64);
        put64(key, offset + width - 64, 64, value as u64);
    } else {
        put64(key, offset, width, value as u64);
    }
}

/// A key as the packer writes it: its words, most significant first.
trait KeyWords: Copy + Default + Send + Sync {
    fn words(&mut self) -> &mut [u64];
}
impl KeyWords for u64 {
    fn words(&mut self) -> &mut [u64] {
        std::slice::from_mut(self)
    }
}
impl<const N: usize> KeyWords for [u64; N]
where
    [u64; N]: Default,
{
    fn words(&mut self) -> &mut [u64] {
        self
    }
}

/// Writes one field for the rows `start..start + keys.len()` of `array`.
fn write_field<K: KeyWords>(field: &Field, array: &dyn Array, start: usize, keys: &mut [K]) {
    let rows = start..start + keys.len();
    let desc = field.options.descending;
    let nulls = array.logical_nulls();
    let is_null = |i: usize| nulls.as_ref().is_some_and(|n| n.is_null(i));
    // The null bit: 1 for values when nulls come first, 0 for values when nulls come last.
    let valid_bit = field.options.nulls_first as u64;
    let value_offset = field.offset + field.null_bit as u32;
    // Writes the row's null bit (where the field has one); true when the row is null.
    let write_null_bit = |key: &mut [u64], i: usize| -> bool {
        let null = is_null(i);
        if field.null_bit {
            put64(key, field.offset, 1, if null { 1 - valid_bit } else { valid_bit });
        }
        null
    };
    match field.kind {
        FieldKind::Fixed { width } => {
            let mask = if width == 128 { u128::MAX } else { (1u128 << width) - 1 };
            fixed::for_each_value(array, rows, |i, v| {
                let key = keys[i - start].words();
                if write_null_bit(key, i) {
                    return; // a null's value bits stay zero
                }
                put(key, value_offset, width, if desc { !v & mask } else { v });
            });
        }
        FieldKind::Bytes { prefix, len_bits } => {
            let prefix = prefix as usize;
            let len_mask = (1u64 << len_bits) - 1;
            bytes::for_each_bytes(array, rows, |i, b| {
                let key = keys[i - start].words();
                if write_null_bit(key, i) {
                    return; // a null's value bits stay zero
                }
                let mut off = value_offset;
                for chunk in 0..prefix.div_ceil(8) {
                    let n = (prefix - 8 * chunk).min(8);
                    let bits = 8 * n as u32;
                    let v = bytes::prefix_chunk(b, chunk, n);
                    let m = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
                    put64(key, off, bits, if desc { !v & m } else { v });
                    off += bits;
                }
                // min(len, P + 1): P + 1 says "longer than the prefix".
                let code = b.len().min(prefix + 1) as u64;
                put64(key, off, len_bits, if desc { !code & len_mask } else { code });
            });
        }
    }
}

fn pack<K: KeyWords>(runs: &[Vec<ArrayRef>], layout: &Layout, total: usize) -> Vec<K> {
    let mut out = vec![K::default(); total];
    // One task per (run, row range); tasks write disjoint slices of `out`.
    let mut tasks: Vec<(usize, usize, &mut [K])> = Vec::new();
    let mut rest: &mut [K] = &mut out;
    for (r, cols) in runs.iter().enumerate() {
        let len = cols.first().map_or(0, |c| c.len());
        let (mut run_keys, tail) = rest.split_at_mut(len);
        rest = tail;
        let mut start = 0;
        while !run_keys.is_empty() {
            let n = run_keys.len().min(ROWS_PER_TASK);
            let (head, tail) = run_keys.split_at_mut(n);
            tasks.push((r, start, head));
            run_keys = tail;
            start += n;
        }
    }
    let work = |(r, start, keys): (usize, usize, &mut [K])| {
        for field in &layout.fields {
            write_field(field, runs[r][field.column].as_ref(), start, keys);
        }
    };
    // One task's worth of rows is packed on the calling thread: handing it to the pool
    // costs more than the work (waking a worker; a first round of ~8K rows took 0.2 ms).
    if total <= ROWS_PER_TASK {
        tasks.into_iter().for_each(work);
    } else {
        tasks.into_par_iter().for_each(work);
    }
    out
}

/// Packs the keys of all runs in the narrowest key width that holds `layout.bits`.
pub fn pack_runs(runs: &[Vec<ArrayRef>], layout: &Layout, total: usize) -> KeyColumn {
    match layout.bits {
        0..=32 => {
            // The key sits in the top half of one u64 word.
            let wide = pack::<u64>(runs, layout, total);
            let narrow = |k: u64| (k >> 32) as u32;
            KeyColumn::U32(if total <= ROWS_PER_TASK {
                wide.into_iter().map(narrow).collect()
            } else {
                wide.into_par_iter().map(narrow).collect()
            })
        }
        33..=64 => KeyColumn::U64(pack::<u64>(runs, layout, total)),
        65..=128 => KeyColumn::U64x2(pack::<[u64; 2]>(runs, layout, total)),
        129..=192 => KeyColumn::U64x3(pack::<[u64; 3]>(runs, layout, total)),
        _ => KeyColumn::U64x4(pack::<[u64; 4]>(runs, layout, total)),
    }
}

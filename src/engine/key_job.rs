//! Sort keys encoded on the device from decoded columns (issue 69, stage 3): the key program
//! a launch of `cuda/key_encode.cu` runs, and that kernel's CPU reference.
//!
//! A device-resident round decodes the sort columns on the device (stage 2) and must key
//! them there too, so that no key crosses PCIe. The bit layout stays the CPU's
//! ([`crate::keys`]: planned once by `plan_layout`, its module doc is the spec); this module
//! turns it into one [`KeyFieldArg`] a field for the kernel. Covered: every field a
//! fixed-width column of a type stage 2 decodes into its own Arrow layout (Int32, Date32,
//! Float32, Int64, Float64, Decimal128: stored little-endian at its width, a validity
//! bitmap in Arrow's bit order). Anything else ([`key_program`] answers `None`) keeps the
//! CPU's encoding.
//!
//! [`encode_on_cpu`] runs the kernel's algorithm on host buffers; the tests hold it to
//! `keys::encode_runs` on every covered type and direction, and the GPU tests hold the
//! kernel to it.

// Its callers are the tests and the device path under construction.
#![cfg_attr(not(test), allow(dead_code))]

use crate::keys::{FieldKind, KeyColumn, Layout};
use crate::{Error, Result};
use arrow::datatypes::DataType;
use std::mem::{align_of, size_of};

/// The field starts with a null bit.
pub(crate) const KEY_NULL_BIT: u32 = 1;
/// Nulls order first (the null bit is 1 for values).
pub(crate) const KEY_NULLS_FIRST: u32 = 2;
/// The value bits are inverted within the field's width.
pub(crate) const KEY_DESCENDING: u32 = 4;
/// A two's complement value: its sign bit is flipped.
pub(crate) const KEY_SIGNED: u32 = 8;
/// An IEEE float: IEEE total order.
pub(crate) const KEY_FLOAT: u32 = 16;

/// The kernel's `KeyField`, field for field. In a [`key_program`] `values` and `validity`
/// are 0; the caller sets them to the column's device addresses (`validity` stays 0 for a
/// column without nulls).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeyFieldArg {
    pub values: u64,
    pub validity: u64,
    /// The field's first bit (its null bit, where it has one) from the key's top.
    pub offset: u32,
    /// The stored width in bytes (4, 8 or 16); the value takes 8 × `bytes` bits.
    pub bytes: u32,
    pub flags: u32,
    pub pad: u32,
}

// The layout cuda/key_encode.cu asserts for `KeyField`.
const _: () = {
    assert!(size_of::<KeyFieldArg>() == 32);
    assert!(align_of::<KeyFieldArg>() == 8);
};

/// The kernel's key width for a key of `bits` bits: 0 for a u32 a key, else the u64 words
/// a key (the widths of `KeyColumn`, as `keys::pack` picks them).
pub(crate) fn key_words(bits: u32) -> u32 {
    match bits {
        0..=32 => 0,
        33..=64 => 1,
        65..=128 => 2,
        129..=192 => 3,
        _ => 4,
    }
}

/// The stored width and flags of a covered type.
fn covered(dt: &DataType) -> Option<(u32, u32)> {
    Some(match dt {
        DataType::Int32 | DataType::Date32 => (4, KEY_SIGNED),
        DataType::Float32 => (4, KEY_FLOAT),
        DataType::Int64 => (8, KEY_SIGNED),
        DataType::Float64 => (8, KEY_FLOAT),
        DataType::Decimal128(_, _) => (16, KEY_SIGNED),
        _ => return None,
    })
}

/// The kernel's fields for `layout`, whose sort column `c` has type `types[c]`, or `None`
/// where a field is not covered (a byte field, or a type stage 2 does not decode).
pub(crate) fn key_program(layout: &Layout, types: &[DataType]) -> Option<Vec<KeyFieldArg>> {
    if layout.bits > 256 {
        return None;
    }
    let mut fields = Vec::with_capacity(layout.fields.len());
    for field in &layout.fields {
        let (bytes, mut flags) = covered(types.get(field.column)?)?;
        // The layout gives a fixed field the type's own width, which is what the kernel reads.
        if field.kind != (FieldKind::Fixed { width: 8 * bytes }) {
            return None;
        }
        if field.null_bit {
            flags |= KEY_NULL_BIT;
        }
        if field.options.nulls_first {
            flags |= KEY_NULLS_FIRST;
        }
        if field.options.descending {
            flags |= KEY_DESCENDING;
        }
        fields.push(KeyFieldArg { offset: field.offset, bytes, flags, ..Default::default() });
    }
    Some(fields)
}

/// One field's column in host memory: its values at their stored width from row 0, and
/// its validity bitmap (Arrow's bit order) where it has nulls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostColumn<'a> {
    pub values: &'a [u8],
    pub validity: Option<&'a [u8]>,
}

/// ORs the low `width` (1..=64) bits of `v` into `key` at bit `offset` from the top (the
/// kernel's `key_put64`, the CPU's `keys::pack::put64`).
fn put64(key: &mut [u64; 4], offset: u32, width: u32, v: u64) {
    let (w, s) = ((offset / 64) as usize, offset % 64);
    if s + width <= 64 {
        key[w] |= v << (64 - s - width);
    } else {
        let rest = s + width - 64;
        key[w] |= v >> rest;
        key[w + 1] |= v << (64 - rest);
    }
}

/// The kernel's algorithm on host buffers: the keys of `rows` rows, field `f` read from
/// `columns[f]`, for a key of `bits` bits (the layout's).
pub(crate) fn encode_on_cpu(fields: &[KeyFieldArg], columns: &[HostColumn], rows: usize, bits: u32) -> Result<KeyColumn> {
    if fields.len() != columns.len() {
        return Err(Error::Internal(format!("{} key fields, {} columns", fields.len(), columns.len())));
    }
    for (f, (d, c)) in fields.iter().zip(columns).enumerate() {
        let end = d.offset + (d.flags & KEY_NULL_BIT) + 8 * d.bytes;
        if !matches!(d.bytes, 4 | 8 | 16) || end > bits || c.values.len() < rows * d.bytes as usize {
            return Err(Error::Internal(format!("key field {f} does not fit its key or its column")));
        }
        if c.validity.is_some_and(|v| v.len() < rows.div_ceil(8)) {
            return Err(Error::Internal(format!("key field {f}'s validity is short")));
        }
    }
    let mut keys = Vec::with_capacity(rows);
    for row in 0..rows {
        let mut key = [0u64; 4];
        for (d, c) in fields.iter().zip(columns) {
            let null = c.validity.is_some_and(|v| v[row >> 3] >> (row & 7) & 1 == 0);
            let mut at = d.offset;
            if d.flags & KEY_NULL_BIT != 0 {
                let valid_bit = u64::from(d.flags & KEY_NULLS_FIRST != 0);
                put64(&mut key, at, 1, if null { 1 - valid_bit } else { valid_bit });
                at += 1;
            }
            if null {
                continue;
            }
            let desc = d.flags & KEY_DESCENDING != 0;
            let b = d.bytes as usize;
            let raw = &c.values[row * b..(row + 1) * b];
            if b == 16 {
                let mut lo = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
                let mut hi = u64::from_le_bytes(raw[8..].try_into().expect("8 bytes"));
                if d.flags & KEY_SIGNED != 0 {
                    hi ^= 1 << 63;
                }
                if desc {
                    (lo, hi) = (!lo, !hi);
                }
                put64(&mut key, at, 64, hi);
                put64(&mut key, at + 64, 64, lo);
            } else {
                let width = 8 * d.bytes;
                let mut v = if b == 8 {
                    u64::from_le_bytes(raw.try_into().expect("8 bytes"))
                } else {
                    u64::from(u32::from_le_bytes(raw.try_into().expect("4 bytes")))
                };
                let sign = 1u64 << (width - 1);
                let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
                if d.flags & KEY_FLOAT != 0 {
                    v = if v & sign != 0 { !v & mask } else { v | sign };
                } else if d.flags & KEY_SIGNED != 0 {
                    v ^= sign;
                }
                if desc {
                    v = !v & mask;
                }
                put64(&mut key, at, width, v);
            }
        }
        keys.push(key);
    }
    Ok(match key_words(bits) {
        0 => KeyColumn::U32(keys.iter().map(|k| (k[0] >> 32) as u32).collect()),
        1 => KeyColumn::U64(keys.iter().map(|k| k[0]).collect()),
        2 => KeyColumn::U64x2(keys.iter().map(|k| [k[0], k[1]]).collect()),
        3 => KeyColumn::U64x3(keys.iter().map(|k| [k[0], k[1], k[2]]).collect()),
        _ => KeyColumn::U64x4(keys),
    })
}

/// Test data shared with the GPU tests (`engine/gpu/key_encode.rs`).
#[cfg(test)]
pub(crate) mod cases {
    use arrow::array::{Array, ArrayRef, Date32Array, Decimal128Array, Float32Array, Float64Array, Int32Array, Int64Array};
    use arrow::compute::SortOptions;
    use std::sync::Arc;

    /// xorshift64*: deterministic data.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// A column of each covered type, `rows` rows, a share of nulls (`nulls` in 0..=4
    /// fifths), values drawn from few distinct ones so fields tie and later fields decide.
    pub fn column(kind: usize, rows: usize, nulls: u64, rng: &mut Rng) -> ArrayRef {
        let mut valid = Vec::with_capacity(rows);
        let mut raw = Vec::with_capacity(rows);
        for _ in 0..rows {
            valid.push(rng.next() % 5 >= nulls);
            // Extremes and signs included: 0, ±1, the type's min and max, small values.
            raw.push(match rng.next() % 8 {
                0 => 0i128,
                1 => -1,
                2 => 1,
                3 => i128::MIN,
                4 => i128::MAX,
                _ => (rng.next() % 7) as i128 - 3,
            });
        }
        let opt = |i: usize| valid[i];
        match kind % 6 {
            0 => {
                Arc::new(Int32Array::from_iter((0..rows).map(|i| opt(i).then(|| raw[i].clamp(i32::MIN as i128, i32::MAX as i128) as i32))))
            }
            1 => Arc::new(Date32Array::from_iter((0..rows).map(|i| opt(i).then(|| (raw[i] % 40_000) as i32)))),
            2 => Arc::new(Float32Array::from_iter((0..rows).map(|i| {
                opt(i).then(|| [0.0f32, -0.0, 1.5, -1.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN][(raw[i] & 7) as usize])
            }))),
            3 => {
                Arc::new(Int64Array::from_iter((0..rows).map(|i| opt(i).then(|| raw[i].clamp(i64::MIN as i128, i64::MAX as i128) as i64))))
            }
            4 => Arc::new(Float64Array::from_iter((0..rows).map(|i| {
                opt(i).then(|| [0.0, -0.0, 2.5, -2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE][(raw[i] & 7) as usize])
            }))),
            _ => Arc::new(
                Decimal128Array::from_iter((0..rows).map(|i| opt(i).then_some(raw[i])))
                    .with_precision_and_scale(38, 2)
                    .expect("valid decimal"),
            ),
        }
    }

    /// A column's stored values and validity bytes, as stage 2 leaves them on the device.
    pub fn host(array: &ArrayRef) -> (Vec<u8>, Option<Vec<u8>>) {
        let data = array.to_data();
        assert_eq!(data.offset(), 0);
        let values = data.buffers()[0].as_slice().to_vec();
        let validity = array.nulls().map(|n| n.buffer().as_slice().to_vec());
        (values, validity)
    }

    /// The four directions.
    pub fn options(i: usize) -> SortOptions {
        SortOptions { descending: i & 1 == 1, nulls_first: i & 2 == 2 }
    }
}

#[cfg(test)]
mod tests {
    use super::cases::{column, host, options, Rng};
    use super::*;
    use crate::keys::{encode_runs, plan_layout};
    use crate::sort_key::SortKey;
    use arrow::array::ArrayRef;

    /// The kernel's algorithm gives the CPU's keys: every covered type alone in each
    /// direction and null share, then keys of two to four fields (up to 256 bits).
    #[test]
    fn reference_matches_the_cpu_encoding() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut shapes: Vec<Vec<(usize, usize, u64)>> = Vec::new();
        for kind in 0..6 {
            for dir in 0..4 {
                for nulls in [0, 2, 5] {
                    shapes.push(vec![(kind, dir, nulls)]);
                }
            }
        }
        for case in 0..60u64 {
            let n = 2 + (case % 3) as usize;
            shapes.push((0..n).map(|_| ((rng.next() % 6) as usize, (rng.next() % 4) as usize, rng.next() % 3)).collect());
        }
        shapes.push(vec![(5, 0, 0), (3, 1, 0)]); // 192 bits
        shapes.push(vec![(5, 0, 0), (5, 3, 0)]); // 256 bits
        shapes.push(vec![(5, 0, 1), (5, 1, 1), (4, 2, 0)]); // 2 × 129 + 64: past 256 bits, a prefix
        let mut widths = std::collections::BTreeSet::new();
        for shape in &shapes {
            let rows = 1 + (rng.next() % 300) as usize;
            let cols: Vec<ArrayRef> = shape.iter().map(|&(k, _, nulls)| column(k, rows, nulls, &mut rng)).collect();
            let specs: Vec<SortKey> = shape.iter().enumerate().map(|(i, &(_, d, _))| SortKey::new(format!("c{i}"), options(d))).collect();
            let runs = vec![cols.clone()];
            let layout = plan_layout(&runs, &specs).unwrap();
            let types: Vec<DataType> = cols.iter().map(|c| c.data_type().clone()).collect();
            let fields = key_program(&layout, &types).expect("covered");
            let owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = layout.fields.iter().map(|f| host(&cols[f.column])).collect();
            let columns: Vec<HostColumn> = owned.iter().map(|(v, n)| HostColumn { values: v, validity: n.as_deref() }).collect();
            let got = encode_on_cpu(&fields, &columns, rows, layout.bits).unwrap();
            let want = encode_runs(&runs, &specs).unwrap();
            assert_eq!(got, want.keys, "shape {shape:?}, {rows} rows");
            widths.insert(key_words(layout.bits));
        }
        assert_eq!(widths.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4], "every key width");
    }

    /// A broken reference must fail the comparison above: flipping the sign handling of
    /// one field changes the keys of rows with negative values.
    #[test]
    fn a_wrong_program_gives_other_keys() {
        let mut rng = Rng(7);
        let col = column(3, 200, 0, &mut rng);
        let specs = vec![SortKey::asc("c0")];
        let runs = vec![vec![col.clone()]];
        let layout = plan_layout(&runs, &specs).unwrap();
        let mut fields = key_program(&layout, &[col.data_type().clone()]).unwrap();
        fields[0].flags &= !KEY_SIGNED;
        let (v, n) = host(&col);
        let got = encode_on_cpu(&fields, &[HostColumn { values: &v, validity: n.as_deref() }], 200, layout.bits).unwrap();
        assert_ne!(got, encode_runs(&runs, &specs).unwrap().keys);
    }

    /// Byte fields and types stage 2 does not decode are declined.
    #[test]
    fn uncovered_fields_are_declined() {
        use arrow::array::{StringArray, UInt32Array};
        use std::sync::Arc;
        for col in [Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef, Arc::new(UInt32Array::from(vec![1, 2])) as ArrayRef] {
            let runs = vec![vec![col.clone()]];
            let layout = plan_layout(&runs, &[SortKey::asc("c")]).unwrap();
            assert!(key_program(&layout, &[col.data_type().clone()]).is_none(), "{}", col.data_type());
        }
    }

    /// Buffers too short for their fields are errors, not reads past their ends.
    #[test]
    fn short_buffers_are_errors() {
        let f = KeyFieldArg { offset: 0, bytes: 8, flags: KEY_SIGNED, ..Default::default() };
        let v = [0u8; 15];
        assert!(encode_on_cpu(&[f], &[HostColumn { values: &v, validity: None }], 2, 64).is_err());
        let v = [0u8; 16];
        assert!(encode_on_cpu(&[f], &[HostColumn { values: &v, validity: Some(&[]) }], 2, 64).is_err());
        assert!(encode_on_cpu(&[f], &[HostColumn { values: &v, validity: None }], 2, 32).is_err(), "past the key");
        assert!(encode_on_cpu(&[f], &[HostColumn { values: &v, validity: None }], 2, 64).is_ok());
    }
}

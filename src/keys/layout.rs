//! Plans the bit layout of the key: one field per sort column, at a fixed offset.

use crate::error::{Error, Result};
use crate::sort_key::SortKey;
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, IntervalUnit};

/// The largest key: four `u64` words.
pub const MAX_KEY_BITS: u32 = 256;

/// How a column's values become bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Fixed-width value bits of this width (integers, floats, temporal, decimal, boolean).
    Fixed { width: u32 },
    /// Bytes: `prefix` bytes then a length code of `len_bits` bits (none for
    /// `FixedSizeBinary`, whose values all have one length).
    Bytes { prefix: u32, len_bits: u32 },
}

/// One sort column's place in the key.
#[derive(Debug, Clone)]
pub struct Field {
    pub column: usize,
    /// Bit offset from the most significant bit of the key.
    pub offset: u32,
    /// Whether the field starts with a null bit.
    pub null_bit: bool,
    pub kind: FieldKind,
    pub options: SortOptions,
}

impl Field {
    pub fn width(&self) -> u32 {
        self.null_bit as u32 + self.value_bits()
    }
    pub fn value_bits(&self) -> u32 {
        match self.kind {
            FieldKind::Fixed { width } => width,
            FieldKind::Bytes { prefix, len_bits } => 8 * prefix + len_bits,
        }
    }
}

/// The whole key layout.
#[derive(Debug, Clone)]
pub struct Layout {
    pub fields: Vec<Field>,
    pub bits: u32,
    /// Equal keys imply equal sort values.
    pub exact: bool,
}

/// Bits needed to write the numbers `0..=max`.
fn bits_for(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// Value bits of a fixed-width type, or `None` for variable-length types; an error for
/// types corank cannot encode.
fn fixed_width(name: &str, dt: &DataType) -> Result<Option<u32>> {
    use DataType::*;
    Ok(Some(match dt {
        Boolean => 1,
        Int8 | UInt8 => 8,
        Int16 | UInt16 | Float16 => 16,
        Int32 | UInt32 | Float32 | Date32 | Time32(_) | Decimal32(_, _) | Interval(IntervalUnit::YearMonth) => 32,
        Int64
        | UInt64
        | Float64
        | Date64
        | Time64(_)
        | Timestamp(_, _)
        | Duration(_)
        | Decimal64(_, _)
        | Interval(IntervalUnit::DayTime) => 64,
        Decimal128(_, _) | Interval(IntervalUnit::MonthDayNano) => 128,
        Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_) | Decimal256(_, _) => return Ok(None),
        other => return Err(Error::UnsupportedType { column: name.to_string(), data_type: other.clone() }),
    }))
}

/// Bytes a value of a fixed-width byte type takes in the key: FixedSizeBinary's width, or
/// 32 for Decimal256 (its i256 as big-endian bytes with the sign bit flipped, see
/// [`super::bytes::for_each_bytes`]); 0 for other types.
fn fixed_byte_width(dt: &DataType) -> u32 {
    match dt {
        DataType::FixedSizeBinary(w) => (*w).max(0) as u32,
        DataType::Decimal256(_, _) => 32,
        _ => 0,
    }
}

/// The longest non-null value of a byte column in `array`.
fn max_len(array: &ArrayRef) -> usize {
    fn longest(valid: impl Fn(usize) -> bool, lens: impl Iterator<Item = usize>) -> usize {
        lens.enumerate().filter(|(i, _)| valid(*i)).map(|(_, l)| l).max().unwrap_or(0)
    }
    let valid = |i: usize| array.is_valid(i);
    match array.data_type() {
        DataType::Utf8 => longest(valid, array.as_string::<i32>().offsets().lengths()),
        DataType::LargeUtf8 => longest(valid, array.as_string::<i64>().offsets().lengths()),
        DataType::Binary => longest(valid, array.as_binary::<i32>().offsets().lengths()),
        DataType::LargeBinary => longest(valid, array.as_binary::<i64>().offsets().lengths()),
        DataType::Utf8View => longest(valid, array.as_string_view().views().iter().map(|v| *v as u32 as usize)),
        DataType::BinaryView => longest(valid, array.as_binary_view().views().iter().map(|v| *v as u32 as usize)),
        _ => 0,
    }
}

/// What the layout of a sort column depends on: its type, whether any run holds a null in
/// it, and (byte columns) its longest non-null value. A caller whose columns are not in host
/// memory (the device path, issue 69) states these from the file's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnSummary {
    pub data_type: DataType,
    pub nulls: bool,
    /// The longest non-null value in bytes (read for the byte types that are not
    /// FixedSizeBinary or Decimal256 only).
    pub longest: usize,
}

/// Plans the layout for these runs (dictionaries already decoded). All runs must agree
/// on each column's type.
pub fn plan_layout(runs: &[Vec<ArrayRef>], specs: &[SortKey]) -> Result<Layout> {
    for (r, cols) in runs.iter().enumerate() {
        if cols.len() != specs.len() {
            return Err(Error::InvalidArgument(format!("run {r} has {} key columns, expected {}", cols.len(), specs.len())));
        }
    }
    let Some(first) = runs.first() else {
        return Ok(Layout { fields: Vec::new(), bits: 0, exact: true }); // no runs: nothing to encode
    };
    let mut columns = Vec::with_capacity(specs.len());
    for (c, spec) in specs.iter().enumerate() {
        let dt = first[c].data_type().clone();
        for (r, cols) in runs.iter().enumerate() {
            if cols[c].data_type() != &dt {
                return Err(Error::SchemaMismatch {
                    run: r,
                    detail: format!("sort column '{}' has type {} in run {r} and {dt} in run 0", spec.column, cols[c].data_type()),
                });
            }
        }
        let nulls = runs.iter().any(|cols| cols[c].null_count() > 0);
        // Only the variable-length byte types read the longest value: skip the scan for the rest.
        let longest = if matches!(fixed_width(&spec.column, &dt), Ok(None)) && fixed_byte_width(&dt) == 0 {
            runs.iter().map(|cols| max_len(&cols[c])).max().unwrap_or(0)
        } else {
            0
        };
        columns.push(ColumnSummary { data_type: dt, nulls, longest });
    }
    plan_layout_of(&columns, specs)
}

/// Plans the layout of sort columns described by `columns` (one per spec): the layout
/// [`plan_layout`] gives runs of such columns.
pub(crate) fn plan_layout_of(columns: &[ColumnSummary], specs: &[SortKey]) -> Result<Layout> {
    if columns.len() != specs.len() {
        return Err(Error::InvalidArgument(format!("{} key columns described, expected {}", columns.len(), specs.len())));
    }
    let mut fields = Vec::new();
    let mut used = 0u32;
    let mut exact = true;
    for (c, (spec, column)) in specs.iter().zip(columns).enumerate() {
        let dt = &column.data_type;
        let width = fixed_width(&spec.column, dt)?;
        let null_bit = column.nulls;
        let available = MAX_KEY_BITS - used;
        if null_bit as u32 > available {
            // Not even the null bit fits (the key is full): the rest of the key is a prefix.
            // (A byte column whose values are all empty would otherwise take a field of its
            // null bit alone past the budget.)
            exact = false;
            break;
        }
        let kind = match (width, dt) {
            (Some(w), _) => {
                if null_bit as u32 + w > available {
                    exact = false; // this column does not fit: the key is a prefix
                    break;
                }
                FieldKind::Fixed { width: w }
            }
            (None, DataType::FixedSizeBinary(_) | DataType::Decimal256(_, _)) => {
                // Every value has the type's width, so no length code is needed: the bytes
                // alone order the values, whole when they fit, else as a prefix.
                let w = fixed_byte_width(dt);
                let prefix = w.min(available.saturating_sub(null_bit as u32) / 8);
                if prefix < w {
                    exact = false;
                    if prefix == 0 {
                        break;
                    }
                }
                FieldKind::Bytes { prefix, len_bits: 0 }
            }
            (None, _) => {
                let longest = column.longest as u64;
                let room = available.saturating_sub(null_bit as u32) as u64;
                if 8 * longest + bits_for(longest) as u64 <= room {
                    FieldKind::Bytes { prefix: longest as u32, len_bits: bits_for(longest) }
                } else {
                    // Truncate: the most prefix bytes whose length code (up to P + 1) fits.
                    let mut p = room / 8;
                    while p > 0 && 8 * p + bits_for(p + 1) as u64 > room {
                        p -= 1;
                    }
                    if room < bits_for(p + 1) as u64 || room == 0 {
                        exact = false;
                        break;
                    }
                    exact = false;
                    FieldKind::Bytes { prefix: p as u32, len_bits: bits_for(p + 1) }
                }
            }
        };
        let field = Field { column: c, offset: used, null_bit, kind, options: spec.options };
        used += field.width();
        fields.push(field);
        if !exact {
            break; // fields after a prefix cannot be ordered by the key
        }
    }
    Ok(Layout { fields, bits: used, exact })
}

/// Whether corank can encode a sort column of this type (dictionaries by their values;
/// types of neither the fixed nor the byte family by their arrow-row bytes, see
/// `super::rows`).
///
/// ```
/// use arrow::datatypes::{DataType, TimeUnit};
///
/// assert!(corank::is_supported(&DataType::Utf8));
/// assert!(corank::is_supported(&DataType::Timestamp(TimeUnit::Microsecond, None)));
/// ```
pub fn is_supported(dt: &DataType) -> bool {
    match dt {
        DataType::Dictionary(_, values) => is_supported(values),
        other => is_direct(other) || super::rows::orders(other),
    }
}

/// Whether the fixed or the byte family encodes this type (dictionaries already decoded).
pub fn is_direct(dt: &DataType) -> bool {
    fixed_width("", dt).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal256Array, FixedSizeBinaryArray, Float64Array, Int32Array, StringArray};
    use arrow::datatypes::i256;
    use std::sync::Arc;

    /// A layout planned from summaries equals the one planned from the arrays they summarize:
    /// fixed and byte columns, with and without nulls, whole and cut to a prefix.
    #[test]
    fn summaries_plan_the_layout_of_their_arrays() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]));
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0]));
        let short: ArrayRef = Arc::new(StringArray::from(vec![Some("ab"), None, Some("abcde")]));
        let long: ArrayRef = Arc::new(StringArray::from(vec!["x".repeat(40), "y".into(), String::new()]));
        let fsb: ArrayRef = Arc::new(FixedSizeBinaryArray::try_from_iter([[1u8, 2], [3, 4], [5, 6]].into_iter()).unwrap());
        let d256: ArrayRef = Arc::new(Decimal256Array::from(vec![i256::from(1), i256::from(-2), i256::from(3)]));
        let sets: Vec<Vec<ArrayRef>> = vec![
            vec![ints.clone()],
            vec![floats.clone(), ints.clone()],
            vec![short.clone(), ints.clone()],
            vec![long.clone(), ints.clone()],
            vec![fsb, d256, ints.clone(), floats],
            vec![ints.clone(), short, long],
        ];
        for (s, cols) in sets.iter().enumerate() {
            for descending in [false, true] {
                let specs: Vec<SortKey> =
                    (0..cols.len()).map(|i| SortKey::new(format!("c{i}"), SortOptions { descending, nulls_first: i % 2 == 0 })).collect();
                // Two runs: the second's nulls and longest values count too.
                let runs = vec![cols.iter().map(|c| c.slice(0, 1)).collect::<Vec<_>>(), cols.iter().map(|c| c.slice(1, 2)).collect()];
                let summaries: Vec<ColumnSummary> = cols
                    .iter()
                    .map(|c| ColumnSummary { data_type: c.data_type().clone(), nulls: c.null_count() > 0, longest: max_len(c) })
                    .collect();
                let from_arrays = plan_layout(&runs, &specs).unwrap();
                let from_summaries = plan_layout_of(&summaries, &specs).unwrap();
                assert_eq!(format!("{from_arrays:?}"), format!("{from_summaries:?}"), "set {s}");
            }
        }
        assert!(plan_layout_of(&[], &[SortKey::new("a", SortOptions::default())]).is_err());
    }
}

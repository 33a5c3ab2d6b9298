//! Fixed-width families: integers, floats, booleans, temporal types, decimals, intervals. Each value
//! becomes an unsigned integer of the field's width whose order is the value order.

use crate::error::Result;
use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::datatypes::*;

/// Decodes a dictionary array to its values (other arrays pass through).
pub fn decode_dictionary(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::Dictionary(_, value_type) => {
            let decoded = arrow::compute::cast(array, value_type)?;
            decode_dictionary(&decoded) // a dictionary of dictionaries
        }
        _ => Ok(array.clone()),
    }
}

/// IEEE total order as unsigned bits: negatives have every bit inverted, the others their
/// sign bit set (`f64::total_cmp` order).
#[inline]
fn float_order(bits: u64, width: u32) -> u64 {
    let sign = 1u64 << (width - 1);
    let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    if bits & sign != 0 {
        !bits & mask
    } else {
        bits | sign
    }
}

/// An i32 with its sign bit flipped, as unsigned bits in a u64: its order as unsigned.
#[inline]
fn flip32(v: i32) -> u64 {
    (v as u32 ^ 1 << 31) as u64
}

/// Calls `f(row, value)` for every row in `rows` with the order-preserving unsigned value
/// of a fixed-width array (`value` is meaningless for null rows).
pub fn for_each_value(array: &dyn Array, rows: std::ops::Range<usize>, mut f: impl FnMut(usize, u128)) {
    fn prim<T: ArrowPrimitiveType>(
        a: &dyn Array,
        rows: std::ops::Range<usize>,
        f: &mut impl FnMut(usize, u128),
        map: impl Fn(T::Native) -> u128,
    ) {
        let a: &PrimitiveArray<T> = a.as_primitive::<T>();
        let values = a.values();
        for i in rows {
            f(i, map(values[i]));
        }
    }
    macro_rules! signed {
        ($t:ty, $u:ty) => {
            prim::<$t>(array, rows, &mut f, |v| (v as $u ^ (1 as $u).rotate_right(1)) as u128)
        };
    }
    macro_rules! unsigned {
        ($t:ty) => {
            prim::<$t>(array, rows, &mut f, |v| v as u128)
        };
    }
    use DataType::*;
    match array.data_type() {
        Boolean => {
            let a = array.as_boolean();
            for i in rows {
                f(i, a.value(i) as u128);
            }
        }
        Int8 => signed!(Int8Type, u8),
        Int16 => signed!(Int16Type, u16),
        Int32 => signed!(Int32Type, u32),
        Int64 => signed!(Int64Type, u64),
        UInt8 => unsigned!(UInt8Type),
        UInt16 => unsigned!(UInt16Type),
        UInt32 => unsigned!(UInt32Type),
        UInt64 => unsigned!(UInt64Type),
        Float16 => prim::<Float16Type>(array, rows, &mut f, |v| float_order(v.to_bits() as u64, 16) as u128),
        Float32 => prim::<Float32Type>(array, rows, &mut f, |v| float_order(v.to_bits() as u64, 32) as u128),
        Float64 => prim::<Float64Type>(array, rows, &mut f, |v| float_order(v.to_bits(), 64) as u128),
        Date32 => signed!(Date32Type, u32),
        Date64 => signed!(Date64Type, u64),
        Time32(TimeUnit::Second) => signed!(Time32SecondType, u32),
        Time32(_) => signed!(Time32MillisecondType, u32),
        Time64(TimeUnit::Microsecond) => signed!(Time64MicrosecondType, u64),
        Time64(_) => signed!(Time64NanosecondType, u64),
        // Every timestamp and duration unit is an i64 underneath; read the raw values.
        Timestamp(TimeUnit::Second, _) => signed!(TimestampSecondType, u64),
        Timestamp(TimeUnit::Millisecond, _) => signed!(TimestampMillisecondType, u64),
        Timestamp(TimeUnit::Microsecond, _) => signed!(TimestampMicrosecondType, u64),
        Timestamp(TimeUnit::Nanosecond, _) => signed!(TimestampNanosecondType, u64),
        Duration(TimeUnit::Second) => signed!(DurationSecondType, u64),
        Duration(TimeUnit::Millisecond) => signed!(DurationMillisecondType, u64),
        Duration(TimeUnit::Microsecond) => signed!(DurationMicrosecondType, u64),
        Duration(TimeUnit::Nanosecond) => signed!(DurationNanosecondType, u64),
        Decimal32(_, _) => signed!(Decimal32Type, u32),
        Decimal64(_, _) => signed!(Decimal64Type, u64),
        Decimal128(_, _) => signed!(Decimal128Type, u128),
        // Intervals order by their fields in turn, each signed (arrow's and arrow-row's
        // order): the fields' sign-flipped values side by side, the first most significant.
        Interval(IntervalUnit::YearMonth) => signed!(IntervalYearMonthType, u32),
        Interval(IntervalUnit::DayTime) => {
            prim::<IntervalDayTimeType>(array, rows, &mut f, |v| (flip32(v.days) << 32 | flip32(v.milliseconds)) as u128)
        }
        Interval(IntervalUnit::MonthDayNano) => prim::<IntervalMonthDayNanoType>(array, rows, &mut f, |v| {
            (flip32(v.months) as u128) << 96 | (flip32(v.days) as u128) << 64 | (v.nanoseconds as u64 ^ 1 << 63) as u128
        }),
        other => unreachable!("layout admitted a non-fixed type {other}"),
    }
}

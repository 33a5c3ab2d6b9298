//! A batch of an input fitted to the merge's schema: columns by name, missing ones as nulls,
//! narrower types cast without losing a value.

use crate::error::{Error, Result};
use arrow::array::{new_null_array, Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use std::sync::Arc;

/// The finer of two time units.
pub(super) fn finer_unit(a: &TimeUnit, b: &TimeUnit) -> TimeUnit {
    let rank = |u: &TimeUnit| match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    };
    if rank(a) >= rank(b) {
        *a
    } else {
        *b
    }
}

/// A time, timestamp or duration array in the finer unit `to` of its family: each value
/// multiplied by the ratio of the units, an error for a value the finer unit cannot hold
/// (arrow's cast multiplies times unchecked, and makes an overflowing timestamp null).
/// `None` when `to` is not such a widening of the array's type.
fn widen_time_unit(array: &ArrayRef, to: &DataType) -> Option<Result<ArrayRef>> {
    use DataType::*;
    let per_second = |u: &TimeUnit| -> i64 {
        match u {
            TimeUnit::Second => 1,
            TimeUnit::Millisecond => 1_000,
            TimeUnit::Microsecond => 1_000_000,
            TimeUnit::Nanosecond => 1_000_000_000,
        }
    };
    let (from_unit, to_unit) = match (array.data_type(), to) {
        (Time32(x) | Time64(x), Time32(y) | Time64(y)) | (Duration(x), Duration(y)) => (x, y),
        // One time zone, none, or two (the same instants, relabelled in UTC).
        (Timestamp(x, zx), Timestamp(y, zy)) if zx.is_some() == zy.is_some() => (x, y),
        _ => return None,
    };
    let factor = per_second(to_unit) / per_second(from_unit);
    if factor < 1 || per_second(to_unit) % per_second(from_unit) != 0 {
        return None;
    }
    Some((|| -> Result<ArrayRef> {
        // The values as plain integers: the same buffers under an integer type.
        let storage = |t: &DataType| if matches!(t, Time32(_)) { Int32 } else { Int64 };
        let retyped = |a: &ArrayRef, t: &DataType| -> Result<ArrayRef> {
            Ok(arrow::array::make_array(a.to_data().into_builder().data_type(t.clone()).build()?))
        };
        let ints = arrow::compute::cast(&retyped(array, &storage(array.data_type()))?, &Int64)?;
        let overflow =
            |v: i64| arrow::error::ArrowError::CastError(format!("{v} in {} does not fit {to} (it overflows 64 bits)", array.data_type()));
        let scaled: arrow::array::Int64Array =
            ints.as_primitive::<arrow::datatypes::Int64Type>().try_unary(|v| v.checked_mul(factor).ok_or_else(|| overflow(v)))?;
        let scaled: ArrayRef = Arc::new(scaled);
        let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
        let stored = arrow::compute::cast_with_options(&scaled, &storage(to), &options)?;
        retyped(&stored, to)
    })())
}

/// `array` cast to `to`, a value `to` cannot hold an error rather than a null or a wrapped
/// number (the union-by-name joins of `unify_types` lose no value otherwise).
pub fn cast_checked(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
    if let (DataType::Date64, DataType::Date32) = (array.data_type(), to) {
        // arrow's cast divides, dropping the time of day.
        const MS_PER_DAY: i64 = 86_400_000;
        let ms = array.as_primitive::<arrow::datatypes::Date64Type>();
        if let Some(v) = ms.iter().flatten().find(|v| v % MS_PER_DAY != 0) {
            return Err(Error::Arrow(arrow::error::ArrowError::CastError(format!(
                "{v} ms in Date64 is not a whole day, so Date32 cannot hold it"
            ))));
        }
    }
    if let Some(dict) = array.as_any_dictionary_opt() {
        if !matches!(to, DataType::Dictionary(..)) {
            // The values the rows reference, then those checked (an unused value that `to`
            // cannot hold is no error).
            let plain = arrow::compute::take(dict.values().as_ref(), dict.keys(), None)?;
            return if plain.data_type() == to { Ok(plain) } else { cast_checked(&plain, to) };
        }
    }
    if matches!(to, DataType::Float64) {
        if let Some(v) = inexact_in_float64(array) {
            return Err(Error::Arrow(arrow::error::ArrowError::CastError(format!(
                "{v} in {} has no exact Float64 (it would become {})",
                array.data_type(),
                v.as_f64()
            ))));
        }
    }
    widen_time_unit(array, to).unwrap_or_else(|| Ok(arrow::compute::cast_with_options(array, to, &options)?))
}

/// A 64-bit integer of `array` that Float64 holds only rounded (above 2^53 with low bits
/// set), or `None` (also for other types).
fn inexact_in_float64(array: &ArrayRef) -> Option<Int64Value> {
    match array.data_type() {
        DataType::Int64 => {
            let ints = array.as_primitive::<arrow::datatypes::Int64Type>();
            ints.iter().flatten().find(|&v| v as f64 as i128 != v as i128).map(Int64Value::Signed)
        }
        DataType::UInt64 => {
            let ints = array.as_primitive::<arrow::datatypes::UInt64Type>();
            ints.iter().flatten().find(|&v| v as f64 as u128 != v as u128).map(Int64Value::Unsigned)
        }
        _ => None,
    }
}

/// A value of a 64-bit integer column, for messages.
#[derive(Debug, Clone, Copy)]
enum Int64Value {
    Signed(i64),
    Unsigned(u64),
}

impl Int64Value {
    fn as_f64(self) -> f64 {
        match self {
            Int64Value::Signed(v) => v as f64,
            Int64Value::Unsigned(v) => v as f64,
        }
    }
}

impl std::fmt::Display for Int64Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Int64Value::Signed(v) => write!(f, "{v}"),
            Int64Value::Unsigned(v) => write!(f, "{v}"),
        }
    }
}

/// `batch` (read from an input) as a batch of the merge's `schema`: columns taken by name
/// (in union-by-name mode a missing column becomes nulls and a narrower type is cast), the
/// schema's field metadata and nullability applied. A value the wider type cannot hold (a
/// time in a finer unit past 64 bits) is an error naming the column; callers add the file.
pub fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields().len() == schema.fields().len()
        && batch.schema().fields().iter().zip(schema.fields()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
    {
        let rows = batch.num_rows();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        return Ok(RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options)?);
    }
    let rows = batch.num_rows();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            None => Ok(new_null_array(f.data_type(), rows)),
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => cast_checked(c, f.data_type()).map_err(|e| {
                // The cause without arrow's own "Cast error: " (the detail wraps it in one).
                let e = match e {
                    Error::Arrow(arrow::error::ArrowError::CastError(m)) => m,
                    Error::Arrow(e) => e.to_string(),
                    e => e.to_string(),
                };
                let detail = format!("column '{}' as {} (its type in another input): {e}", f.name(), f.data_type());
                Error::Arrow(arrow::error::ArrowError::CastError(detail))
            }),
        })
        .collect::<Result<_>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}

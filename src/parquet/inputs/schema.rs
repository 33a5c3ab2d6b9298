//! The merge's schema: the inputs' schemas matched, or unified by name
//! ([`PlanOptions::union_by_name`](super::PlanOptions::union_by_name)).

use super::cast::finer_unit;
use super::paths::file_error;
use super::InputFile;
use crate::error::{Error, Result};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, TimeUnit};
use parquet::schema::types::SchemaDescPtr;
use std::collections::HashMap;
use std::sync::Arc;

/// The widest type both `a` and `b` convert to without losing a value, for
/// [`PlanOptions::union_by_name`](super::PlanOptions::union_by_name): integers widen within their signedness (and signed with
/// unsigned to the next signed width up to 64 bits), floats widen, integers of up to 16
/// (32) bits join Float32 (Float64) and 64-bit integers Float64 (`cast_checked` refuses
/// one that Float64 holds only rounded), dictionaries join as their values (categoricals
/// of the same values and key signedness keep the wider key), strings and binaries join
/// their large or view form,
/// lists their large form, fixed-size binaries join binaries, times, timestamps and
/// durations their finer unit (timestamps of two time zones in UTC), Date64 with Date32 as
/// days, decimals the larger scale and integer digits
/// of either (up to 38 digits), lists and structs unify their fields (nested nullability as
/// in either). `None` where no such type exists.
pub fn unify_types(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(a.clone());
    }
    // Each family decides for the pairs it is given; no two families take the same pair.
    match (a, b) {
        (Dictionary(..), _) | (_, Dictionary(..)) => unify_dictionaries(a, b),
        _ if (int_bits(a).is_some() && int_bits(b).is_some()) || float_bits(a).is_some() || float_bits(b).is_some() => unify_numbers(a, b),
        _ if is_bytes(a) && is_bytes(b) => unify_bytes(a, b),
        _ if is_temporal(a) && is_temporal(b) => unify_temporal(a, b),
        _ if decimal_parts(a).is_some() && decimal_parts(b).is_some() => unify_decimals(a, b),
        _ => unify_nested(a, b),
    }
}

/// A signed integer type's width in bits.
fn signed_bits(t: &DataType) -> Option<u32> {
    use DataType::*;
    match t {
        Int8 => Some(8),
        Int16 => Some(16),
        Int32 => Some(32),
        Int64 => Some(64),
        _ => None,
    }
}

/// An unsigned integer type's width in bits.
fn unsigned_bits(t: &DataType) -> Option<u32> {
    use DataType::*;
    match t {
        UInt8 => Some(8),
        UInt16 => Some(16),
        UInt32 => Some(32),
        UInt64 => Some(64),
        _ => None,
    }
}

/// A float type's width in bits.
fn float_bits(t: &DataType) -> Option<u32> {
    use DataType::*;
    match t {
        Float16 => Some(16),
        Float32 => Some(32),
        Float64 => Some(64),
        _ => None,
    }
}

/// An integer type's width in bits, signed or not.
fn int_bits(t: &DataType) -> Option<u32> {
    signed_bits(t).or(unsigned_bits(t))
}

/// The integer type of `bits` bits and that signedness.
fn int_of(bits: u32, is_signed: bool) -> DataType {
    use DataType::*;
    match (bits, is_signed) {
        (8, true) => Int8,
        (16, true) => Int16,
        (32, true) => Int32,
        (64, true) => Int64,
        (8, false) => UInt8,
        (16, false) => UInt16,
        (32, false) => UInt32,
        _ => UInt64,
    }
}

/// The float type of `bits` bits.
fn float_of(bits: u32) -> DataType {
    use DataType::*;
    match bits {
        16 => Float16,
        32 => Float32,
        _ => Float64,
    }
}

/// A decimal's storage width, precision and scale (scales below 0 are left alone).
fn decimal_parts(t: &DataType) -> Option<(u32, u8, i8)> {
    use DataType::*;
    match *t {
        Decimal32(p, s) if s >= 0 => Some((32, p, s)),
        Decimal64(p, s) if s >= 0 => Some((64, p, s)),
        Decimal128(p, s) if s >= 0 => Some((128, p, s)),
        _ => None,
    }
}

/// Whether `t` is a string, a binary or a fixed-size binary.
fn is_bytes(t: &DataType) -> bool {
    use DataType::*;
    matches!(t, Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_))
}

/// Whether `t` is a time, a timestamp, a date or a duration.
fn is_temporal(t: &DataType) -> bool {
    use DataType::*;
    matches!(t, Time32(_) | Time64(_) | Timestamp(..) | Date32 | Date64 | Duration(_))
}

/// The join of two types one of which at least is a dictionary.
fn unify_dictionaries(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    match (a, b) {
        // Categoricals (pandas, Polars) of key types of one signedness keep the wider key; a
        // dictionary beside other values (the same column written plain by another writer)
        // joins them as its values.
        (Dictionary(ka, va), Dictionary(kb, vb)) if va == vb && signed_bits(ka).is_some() == signed_bits(kb).is_some() => {
            Some(Dictionary(Box::new(unify_types(ka, kb)?), va.clone()))
        }
        (Dictionary(_, va), Dictionary(_, vb)) => unify_types(va, vb),
        (Dictionary(_, v), other) | (other, Dictionary(_, v)) => unify_types(v, other),
        _ => None,
    }
}

/// The join of two integers, or of a float and a number (`None` beside anything else).
fn unify_numbers(a: &DataType, b: &DataType) -> Option<DataType> {
    let (signed, unsigned, float) = (signed_bits, unsigned_bits, float_bits);
    match (a, b) {
        _ if signed(a).is_some() && signed(b).is_some() => Some(int_of(signed(a)?.max(signed(b)?), true)),
        _ if unsigned(a).is_some() && unsigned(b).is_some() => Some(int_of(unsigned(a)?.max(unsigned(b)?), false)),
        _ if int_bits(a).is_some() && int_bits(b).is_some() => {
            // One signed, one unsigned: a signed type twice the unsigned one's width.
            let need = signed(a).or(signed(b))?.max(2 * unsigned(a).or(unsigned(b))?);
            (need <= 64).then(|| int_of(need, true))
        }
        _ if float(a).is_some() && float(b).is_some() => Some(float_of(float(a)?.max(float(b)?))),
        _ if float(a).is_some() || float(b).is_some() => {
            let (f, i) = if float(a).is_some() { (float(a)?, int_bits(b)?) } else { (float(b)?, int_bits(a)?) };
            // Float32 holds every integer of up to 16 bits, Float64 of up to 32, and 64-bit
            // integers up to 2^53 and beyond where their low bits are zero: `cast_checked`
            // refuses one Float64 does not hold exactly rather than round it.
            let need = if i <= 16 { 32 } else { 64 };
            Some(float_of(f.max(need)))
        }
        _ => None,
    }
}

/// The join of two strings, binaries or fixed-size binaries.
fn unify_bytes(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    match (a, b) {
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => {
            Some(if matches!((a, b), (LargeUtf8, _) | (_, LargeUtf8)) { LargeUtf8 } else { Utf8View })
        }
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => {
            Some(if matches!((a, b), (LargeBinary, _) | (_, LargeBinary)) { LargeBinary } else { BinaryView })
        }
        // A fixed-size binary (DuckDB's UUIDs) joins the binaries: Polars writes UUIDs as
        // large binaries, and the bytes order the same either way.
        (FixedSizeBinary(_), FixedSizeBinary(_) | Binary | LargeBinary | BinaryView)
        | (Binary | LargeBinary | BinaryView, FixedSizeBinary(_)) => {
            Some(if matches!((a, b), (LargeBinary, _) | (_, LargeBinary)) { LargeBinary } else { BinaryView })
        }
        _ => None,
    }
}

/// The join of two times, timestamps, dates or durations.
fn unify_temporal(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    match (a, b) {
        // Times, timestamps (of one time zone) and durations join their finer unit (Polars
        // writes nanoseconds where DuckDB writes microseconds); `conform` fails on a value
        // the finer unit cannot hold rather than wrap it or make it null.
        (Time32(x) | Time64(x), Time32(y) | Time64(y)) => {
            let unit = finer_unit(x, y);
            Some(if matches!(unit, TimeUnit::Second | TimeUnit::Millisecond) { Time32(unit) } else { Time64(unit) })
        }
        (Timestamp(x, zx), Timestamp(y, zy)) if zx == zy => Some(Timestamp(finer_unit(x, y), zx.clone())),
        // Timestamps of two time zones hold instants since the epoch in UTC either way
        // (Parquet's isAdjustedToUTC): they join in UTC. A time zone and none (local
        // times) stay apart: no single instant is right for a local time.
        (Timestamp(x, Some(_)), Timestamp(y, Some(_))) => Some(Timestamp(finer_unit(x, y), Some("UTC".into()))),
        // Dates join as days, Parquet's DATE (arrow-rs writes a Date64 as a bare INT64
        // other readers take for a number); `cast_checked` refuses a Date64 that is not a
        // whole day rather than truncate it.
        (Date32, Date64) | (Date64, Date32) => Some(Date32),
        (Duration(x), Duration(y)) => Some(Duration(finer_unit(x, y))),
        _ => None,
    }
}

/// The join of two decimals: the scale of either and the integer digits of either, when a
/// decimal of up to 38 digits holds both.
fn unify_decimals(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    let ((wa, pa, sa), (wb, pb, sb)) = (decimal_parts(a)?, decimal_parts(b)?);
    let scale = sa.max(sb);
    let digits = (pa as i16 - sa as i16).max(pb as i16 - sb as i16) + scale as i16;
    let precision = u8::try_from(digits).ok()?;
    match wa.max(wb) {
        32 if precision <= 9 => Some(Decimal32(precision, scale)),
        32 | 64 if precision <= 18 => Some(Decimal64(precision, scale)),
        _ if precision <= 38 => Some(Decimal128(precision, scale)),
        _ => None,
    }
}

/// The join of two lists or two structs, their fields unified (`None` for any other pair).
fn unify_nested(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    match (a, b) {
        (List(x), List(y)) => Some(List(unify_fields(x, y)?)),
        // Polars writes large lists where DuckDB and pyarrow write lists.
        (LargeList(x), LargeList(y)) | (List(x), LargeList(y)) | (LargeList(x), List(y)) => Some(LargeList(unify_fields(x, y)?)),
        (FixedSizeList(x, n), FixedSizeList(y, m)) if n == m => Some(FixedSizeList(unify_fields(x, y)?, *n)),
        (Struct(xs), Struct(ys)) if xs.len() == ys.len() => {
            let fields: Option<Vec<FieldRef>> =
                xs.iter().zip(ys.iter()).map(|(x, y)| (x.name() == y.name()).then(|| unify_fields(x, y)).flatten()).collect();
            Some(Struct(fields?.into()))
        }
        _ => None,
    }
}

/// `x` with the unified type of `x` and `y`, nullable where either is.
fn unify_fields(x: &FieldRef, y: &FieldRef) -> Option<FieldRef> {
    let t = unify_types(x.data_type(), y.data_type())?;
    Some(Arc::new(x.as_ref().clone().with_data_type(t).with_nullable(x.is_nullable() || y.is_nullable())))
}

/// Field metadata of every file merged into the first schema's fields (the first value kept
/// where files disagree), so a batch of any file fits the merge's schema.
pub(super) fn merge_field_metadata(schema: &Schema, files: &[InputFile]) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut metadata = f.metadata().clone();
            for other in files {
                if let Ok(o) = other.metadata.schema().field_with_name(f.name()) {
                    for (k, v) in o.metadata() {
                        metadata.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
            f.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// The schema of a union by name: the first file's columns, then each later file's new
/// columns in its order; types unified, nullable where any file's is or a file lacks it.
pub(super) fn union_schema(files: &[InputFile]) -> Result<Schema> {
    let mut fields: Vec<Field> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut seen_in: Vec<usize> = Vec::new();
    for f in files {
        for field in f.metadata.schema().fields() {
            match at.get(field.name()) {
                None => {
                    at.insert(field.name().clone(), fields.len());
                    fields.push(field.as_ref().clone());
                    seen_in.push(1);
                }
                Some(&i) => {
                    let t = unify_types(fields[i].data_type(), field.data_type()).ok_or_else(|| {
                        file_error(
                            &f.path,
                            format!(
                                "column '{}' is {} here but {} in an earlier input, and there is no type that holds both",
                                field.name(),
                                field.data_type(),
                                fields[i].data_type()
                            ),
                        )
                    })?;
                    let nullable = fields[i].is_nullable() || field.is_nullable();
                    fields[i] = fields[i].clone().with_data_type(t).with_nullable(nullable);
                    seen_in[i] += 1;
                }
            }
        }
    }
    for (field, seen) in fields.iter_mut().zip(seen_in) {
        if seen < files.len() {
            *field = field.clone().with_nullable(true);
        }
    }
    Ok(merge_field_metadata(&Schema::new_with_metadata(fields, files[0].metadata.schema().metadata().clone()), files))
}

/// The match check: every file has the first file's columns (names, order, types).
/// Nullability and field metadata may differ. Returns the first file's schema with every
/// column nullable where any file's is.
pub(super) fn check_same_schema(files: &[InputFile]) -> Result<Schema> {
    let schema = files[0].metadata.schema();
    let mut nullable: Vec<bool> = schema.fields().iter().map(|f| f.is_nullable()).collect();
    for f in &files[1..] {
        let other = f.metadata.schema();
        if other.fields().len() != schema.fields().len() {
            return Err(Error::SchemaDiffers {
                path: f.path.clone(),
                detail: format!(
                    "schema differs from {}: {} columns here, {} there",
                    files[0].path.display(),
                    other.fields().len(),
                    schema.fields().len()
                ),
            });
        }
        for ((a, b), nullable) in schema.fields().iter().zip(other.fields()).zip(&mut nullable) {
            if a.name() != b.name() || a.data_type() != b.data_type() {
                return Err(Error::SchemaDiffers {
                    path: f.path.clone(),
                    detail: format!(
                        "schema differs from {}: column '{}' {} there, '{}' {} here",
                        files[0].path.display(),
                        a.name(),
                        a.data_type(),
                        b.name(),
                        b.data_type(),
                    ),
                });
            }
            *nullable |= b.is_nullable();
        }
    }
    let fields: Vec<Field> = schema.fields().iter().zip(nullable).map(|(f, n)| f.as_ref().clone().with_nullable(n)).collect();
    Ok(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The top-level leaf `name` of `schema`, if it has one.
pub(super) fn top_level_leaf<'a>(schema: &'a SchemaDescPtr, name: &str) -> Option<&'a parquet::schema::types::Type> {
    schema.root_schema().get_fields().iter().map(|t| t.as_ref()).find(|t| t.name() == name && t.is_primitive())
}

/// Refuses inputs whose INTERVAL columns the output would not keep as INTERVAL (one where
/// `--union-by-name` joins it with another type, or with a column of its name that is not
/// an INTERVAL): their bytes would be written as an anonymous binary.
pub(super) fn check_intervals_kept(files: &[InputFile], schema: &Schema) -> Result<()> {
    let intervals = |d: &SchemaDescPtr| -> Vec<String> {
        d.columns().iter().filter(|c| super::types::is_interval(c.self_type())).map(|c| c.path().string()).collect()
    };
    if files.iter().all(|f| intervals(&f.stored_schema).is_empty()) {
        return Ok(());
    }
    let output = match crate::parquet::writer::common_parquet_schema(files, schema) {
        Some(d) => Arc::new(d),
        None => Arc::new(parquet::arrow::ArrowSchemaConverter::new().convert(schema).map_err(|source| Error::Parquet {
            path: None,
            context: "deriving the Parquet schema".into(),
            source,
        })?),
    };
    let kept = intervals(&output);
    for f in files {
        if let Some(lost) = intervals(&f.stored_schema).into_iter().find(|c| !kept.contains(c)) {
            return Err(file_error(
                &f.path,
                format!(
                    "column '{lost}' is a Parquet INTERVAL, which the output cannot keep: another input stores the column \
                     otherwise (another type, or bytes without the INTERVAL annotation), or it is nested in a column the \
                     inputs store differently; nothing is written rather than the intervals as bare bytes"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unify_types;
    use crate::parquet::inputs::cast_checked;
    use arrow::array::{Array, ArrayRef, AsArray, Time32SecondArray, Time64MicrosecondArray, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, Time64NanosecondType, TimeUnit, TimestampNanosecondType};
    use std::sync::Arc;

    #[test]
    fn times_timestamps_and_durations_join_their_finer_unit() {
        use DataType::*;
        use TimeUnit::*;
        assert_eq!(unify_types(&Time64(Microsecond), &Time64(Nanosecond)), Some(Time64(Nanosecond)));
        assert_eq!(unify_types(&Time32(Millisecond), &Time32(Second)), Some(Time32(Millisecond)));
        assert_eq!(unify_types(&Time32(Second), &Time64(Microsecond)), Some(Time64(Microsecond)));
        let utc = Some("UTC".into());
        assert_eq!(
            unify_types(&Timestamp(Nanosecond, utc.clone()), &Timestamp(Microsecond, utc.clone())),
            Some(Timestamp(Nanosecond, utc.clone()))
        );
        assert_eq!(unify_types(&Timestamp(Millisecond, None), &Timestamp(Microsecond, utc.clone())), None, "local and UTC");
        assert_eq!(
            unify_types(&Timestamp(Millisecond, Some("Europe/Paris".into())), &Timestamp(Microsecond, Some("+00:00".into()))),
            Some(Timestamp(Microsecond, utc)),
            "two time zones"
        );
        assert_eq!(unify_types(&Date64, &Date32), Some(Date32));
        assert_eq!(unify_types(&Duration(Second), &Duration(Millisecond)), Some(Duration(Millisecond)));
        assert_eq!(unify_types(&Time64(Microsecond), &Timestamp(Microsecond, None)), None);
    }

    #[test]
    fn finer_units_multiply_exactly_and_refuse_overflow() {
        let secs: ArrayRef = Arc::new(Time32SecondArray::from(vec![Some(0), None, Some(86_399)]));
        let ns = cast_checked(&secs, &DataType::Time64(TimeUnit::Nanosecond)).unwrap();
        let ns = ns.as_primitive::<Time64NanosecondType>();
        assert_eq!((ns.value(0), ns.is_null(1), ns.value(2)), (0, true, 86_399_000_000_000));
        let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![-1, 1_700_000_000_000]).with_timezone("UTC"));
        let to = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        let ts = cast_checked(&ms, &to).unwrap();
        assert_eq!(ts.data_type(), &to);
        assert_eq!(ts.as_primitive::<TimestampNanosecondType>().values().to_vec(), vec![-1_000_000, 1_700_000_000_000_000_000]);
        // arrow's own cast would wrap this product (times) or make it null (timestamps).
        let big: ArrayRef = Arc::new(Time64MicrosecondArray::from(vec![1, i64::MAX / 100]));
        let err = cast_checked(&big, &DataType::Time64(TimeUnit::Nanosecond)).unwrap_err().to_string();
        assert!(err.contains("does not fit"), "{err}");
        let big: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![i64::MIN / 10]));
        assert!(cast_checked(&big, &DataType::Timestamp(TimeUnit::Microsecond, None)).is_err());
        // Another time zone: the same instants, relabelled.
        let paris: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![-1, 5]).with_timezone("Europe/Paris"));
        let utc = cast_checked(&paris, &to).unwrap();
        assert_eq!(utc.as_primitive::<TimestampNanosecondType>().values().to_vec(), vec![-1_000_000, 5_000_000]);
        // Dates: whole days convert, a time of day is refused.
        let days: ArrayRef = Arc::new(arrow::array::Date64Array::from(vec![Some(-86_400_000), None, Some(19_000 * 86_400_000)]));
        let d32 = cast_checked(&days, &DataType::Date32).unwrap();
        assert_eq!(d32.as_primitive::<arrow::datatypes::Date32Type>().iter().collect::<Vec<_>>(), vec![Some(-1), None, Some(19_000)]);
        let noon: ArrayRef = Arc::new(arrow::array::Date64Array::from(vec![43_200_000]));
        let err = cast_checked(&noon, &DataType::Date32).unwrap_err().to_string();
        assert!(err.contains("not a whole day"), "{err}");
    }

    #[test]
    fn decimals_join_scale_and_integer_digits() {
        use DataType::*;
        assert_eq!(unify_types(&Decimal128(10, 2), &Decimal128(12, 4)), Some(Decimal128(12, 4)));
        assert_eq!(unify_types(&Decimal128(10, 2), &Decimal128(5, 4)), Some(Decimal128(12, 4)));
        assert_eq!(unify_types(&Decimal64(18, 0), &Decimal32(9, 3)), Some(Decimal128(21, 3)), "past Decimal64's 18 digits");
        assert_eq!(unify_types(&Decimal32(4, 2), &Decimal32(5, 1)), Some(Decimal32(6, 2)));
        assert_eq!(unify_types(&Decimal128(38, 0), &Decimal128(38, 10)), None, "48 digits");
        let a: ArrayRef = Arc::new(arrow::array::Decimal128Array::from(vec![Some(12345), None]).with_precision_and_scale(10, 2).unwrap());
        let b = cast_checked(&a, &Decimal128(12, 4)).unwrap();
        assert_eq!(b.as_primitive::<arrow::datatypes::Decimal128Type>().value(0), 1_234_500);
    }

    #[test]
    fn int64_joins_float64_where_every_value_is_exact() {
        use DataType::*;
        assert_eq!(unify_types(&Int64, &Float64), Some(Float64));
        assert_eq!(unify_types(&Float32, &UInt64), Some(Float64));
        assert_eq!(unify_types(&Int8, &Float16), Some(Float32));
        let exact: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![Some(-(1 << 53)), None, Some(1 << 60), Some(i64::MIN)]));
        let f = cast_checked(&exact, &Float64).unwrap();
        let f = f.as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![Some(-(2f64.powi(53))), None, Some(2f64.powi(60)), Some(-(2f64.powi(63)))]);
        for (v, shown) in [((1i64 << 53) + 1, "9007199254740993"), (i64::MAX, "9223372036854775807")] {
            let rounded: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![1, v]));
            let err = cast_checked(&rounded, &Float64).unwrap_err().to_string();
            assert!(err.contains(shown) && err.contains("no exact Float64"), "{err}");
        }
        let big: ArrayRef = Arc::new(arrow::array::UInt64Array::from(vec![u64::MAX]));
        assert!(cast_checked(&big, &Float64).is_err());
    }

    #[test]
    fn dictionaries_join_their_values_and_wider_keys() {
        use arrow::array::DictionaryArray;
        use arrow::datatypes::{Int16Type, Int8Type};
        use DataType::*;
        let dict = |k: DataType, v: DataType| Dictionary(Box::new(k), Box::new(v));
        assert_eq!(unify_types(&dict(Int8, Utf8), &Utf8), Some(Utf8));
        assert_eq!(unify_types(&LargeUtf8, &dict(Int32, Utf8)), Some(LargeUtf8));
        assert_eq!(unify_types(&dict(Int8, Utf8), &Utf8View), Some(Utf8View));
        assert_eq!(unify_types(&dict(Int8, Utf8), &dict(Int16, Utf8)), Some(dict(Int16, Utf8)));
        assert_eq!(unify_types(&dict(Int8, Utf8), &dict(UInt16, Utf8)), Some(Utf8), "keys of two signednesses: the values");
        assert_eq!(unify_types(&dict(Int8, Utf8), &dict(Int8, LargeUtf8)), Some(LargeUtf8));
        assert_eq!(unify_types(&dict(Int8, Utf8), &Int64), None);
        let a: DictionaryArray<Int8Type> = vec![Some("x"), None, Some("y"), Some("x")].into_iter().collect();
        let a: ArrayRef = Arc::new(a);
        let plain = cast_checked(&a, &Utf8).unwrap();
        assert_eq!(plain.as_string::<i32>().iter().collect::<Vec<_>>(), vec![Some("x"), None, Some("y"), Some("x")]);
        let wide = cast_checked(&a, &dict(Int16, Utf8)).unwrap();
        assert_eq!(wide.as_any_dictionary().keys().len(), 4);
        // Values of a dictionary are checked as the column's: only those the rows use.
        let values: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![(1 << 53) + 1, 7]));
        let keys = arrow::array::PrimitiveArray::<Int16Type>::from(vec![1, 1]);
        let unused_inexact: ArrayRef = Arc::new(DictionaryArray::new(keys, values));
        let f = cast_checked(&unused_inexact, &Float64).unwrap();
        assert_eq!(f.as_primitive::<arrow::datatypes::Float64Type>().values().to_vec(), vec![7.0, 7.0]);
    }

    #[test]
    fn fixed_size_binaries_join_binaries() {
        use DataType::*;
        assert_eq!(unify_types(&FixedSizeBinary(16), &LargeBinary), Some(LargeBinary));
        assert_eq!(unify_types(&Binary, &FixedSizeBinary(16)), Some(BinaryView));
        assert_eq!(unify_types(&FixedSizeBinary(16), &FixedSizeBinary(8)), Some(BinaryView));
        assert_eq!(unify_types(&FixedSizeBinary(16), &Utf8), None);
    }

    #[test]
    fn lists_join_their_large_form_with_their_items_unified() {
        let item = |t: DataType, nullable: bool| Arc::new(Field::new("element", t, nullable));
        let list = DataType::List(item(DataType::Int32, false));
        let large = DataType::LargeList(item(DataType::Int64, true));
        let want = DataType::LargeList(item(DataType::Int64, true));
        assert_eq!(unify_types(&list, &large), Some(want.clone()));
        assert_eq!(unify_types(&large, &list), Some(want));
        assert_eq!(unify_types(&list, &DataType::LargeList(item(DataType::Utf8, true))), None, "items no type holds both of");
    }
}

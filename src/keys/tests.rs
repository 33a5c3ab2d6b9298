//! Key encoding: each type's extremes, in both directions and both null placements, checked
//! against arrow-row (the reference byte order).

use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::*;
use arrow::row::{RowConverter, SortField};
use corank::keys::encode_runs;
use corank::SortKey;
use std::cmp::Ordering;
use std::sync::Arc;

fn all_options() -> Vec<SortOptions> {
    let mut v = vec![];
    for descending in [false, true] {
        for nulls_first in [false, true] {
            v.push(SortOptions { descending, nulls_first });
        }
    }
    v
}

/// Checks the key order against arrow-row for every pair of rows: consistent always, and
/// equal to it where the encoding is exact.
fn check(columns: Vec<ArrayRef>) {
    for options in all_options() {
        let specs: Vec<SortKey> = (0..columns.len()).map(|i| SortKey::new(format!("c{i}"), options)).collect();
        let enc = encode_runs(std::slice::from_ref(&columns), &specs).unwrap();
        let conv =
            RowConverter::new(columns.iter().map(|c| SortField::new_with_options(c.data_type().clone(), options)).collect()).unwrap();
        let rows = conv.convert_columns(&columns).unwrap();
        let n = columns[0].len();
        for i in 0..n {
            for j in 0..n {
                let by_rows = rows.row(i).cmp(&rows.row(j));
                let by_keys = enc.keys.cmp_words(i, j);
                let ok = if enc.exact { by_keys == by_rows } else { by_keys == by_rows || by_keys == Ordering::Equal };
                assert!(
                    ok,
                    "{:?} {options:?}: rows {i} and {j}: keys say {by_keys:?}, arrow-row says {by_rows:?}",
                    columns.iter().map(|c| c.data_type().clone()).collect::<Vec<_>>()
                );
            }
        }
    }
}

#[test]
fn integers_at_their_extremes() {
    check(vec![Arc::new(Int8Array::from(vec![Some(i8::MIN), Some(-1), None, Some(0), Some(1), Some(i8::MAX)]))]);
    check(vec![Arc::new(Int16Array::from(vec![Some(i16::MIN), Some(-1), Some(0), None, Some(i16::MAX)]))]);
    check(vec![Arc::new(Int32Array::from(vec![i32::MIN, -1, 0, 1, i32::MAX]))]);
    check(vec![Arc::new(Int64Array::from(vec![Some(i64::MIN), Some(-1), Some(0), None, Some(i64::MAX), Some(i64::MAX)]))]);
    check(vec![Arc::new(UInt8Array::from(vec![Some(0), Some(1), None, Some(u8::MAX)]))]);
    check(vec![Arc::new(UInt16Array::from(vec![0, 1, u16::MAX]))]);
    check(vec![Arc::new(UInt32Array::from(vec![Some(0), None, Some(u32::MAX), Some(7)]))]);
    check(vec![Arc::new(UInt64Array::from(vec![Some(0), Some(u64::MAX), None, Some(1 << 63), Some((1 << 63) - 1)]))]);
}

#[test]
fn floats_in_total_order() {
    let specials = [
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        f64::MIN,
        f64::MAX,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        1.5,
        -1.5,
    ];
    let mut v: Vec<Option<f64>> = specials.iter().copied().map(Some).collect();
    v.push(None);
    check(vec![Arc::new(Float64Array::from(v.clone()))]);
    check(vec![Arc::new(Float32Array::from(v.iter().map(|x| x.map(|x| x as f32)).collect::<Vec<_>>()))]);
    check(vec![Arc::new(Float16Array::from(v.iter().map(|x| x.map(half::f16::from_f64)).collect::<Vec<_>>()))]);
    // -0 < +0 and NaN above +inf, ascending.
    let a: ArrayRef = Arc::new(Float64Array::from(vec![0.0, -0.0, f64::NAN, f64::INFINITY]));
    let enc = encode_runs(&[vec![a]], &[SortKey::new("f", SortOptions::default())]).unwrap();
    assert_eq!(enc.keys.cmp_words(1, 0), Ordering::Less);
    assert_eq!(enc.keys.cmp_words(3, 2), Ordering::Less);
}

#[test]
fn booleans_temporal_decimal() {
    check(vec![Arc::new(BooleanArray::from(vec![Some(true), None, Some(false), Some(true)]))]);
    check(vec![Arc::new(Date32Array::from(vec![i32::MIN, 0, i32::MAX]))]);
    check(vec![Arc::new(Date64Array::from(vec![Some(i64::MIN), None, Some(0), Some(i64::MAX)]))]);
    check(vec![Arc::new(Time32SecondArray::from(vec![0, 86399]))]);
    check(vec![Arc::new(Time32MillisecondArray::from(vec![0, 86399000, 5]))]);
    check(vec![Arc::new(Time64MicrosecondArray::from(vec![0, 1, 86_399_000_000]))]);
    check(vec![Arc::new(Time64NanosecondArray::from(vec![0, 1, 86_399_000_000_000]))]);
    check(vec![Arc::new(TimestampSecondArray::from(vec![i64::MIN, -1, 0, i64::MAX]))]);
    check(vec![Arc::new(TimestampMillisecondArray::from(vec![i64::MIN, 0, i64::MAX]).with_timezone("+02:00"))]);
    check(vec![Arc::new(TimestampMicrosecondArray::from(vec![Some(i64::MIN), None, Some(i64::MAX)]))]);
    check(vec![Arc::new(TimestampNanosecondArray::from(vec![i64::MIN, 3, i64::MAX]).with_timezone("UTC"))]);
    check(vec![Arc::new(DurationSecondArray::from(vec![i64::MIN, 0, i64::MAX]))]);
    check(vec![Arc::new(DurationMillisecondArray::from(vec![-5, 0, 5]))]);
    check(vec![Arc::new(DurationMicrosecondArray::from(vec![i64::MAX, i64::MIN]))]);
    check(vec![Arc::new(DurationNanosecondArray::from(vec![Some(1), None, Some(-1)]))]);
    check(vec![Arc::new(
        Decimal128Array::from(vec![Some(i128::MIN), Some(-1), None, Some(0), Some(i128::MAX)]).with_precision_and_scale(38, 2).unwrap(),
    )]);
    check(vec![Arc::new(Decimal64Array::from(vec![i64::MIN, 0, i64::MAX]).with_precision_and_scale(18, 2).unwrap())]);
    check(vec![Arc::new(Decimal32Array::from(vec![i32::MIN, 0, i32::MAX]).with_precision_and_scale(9, 2).unwrap())]);
}

fn tricky_strings() -> Vec<Option<String>> {
    let long = "x".repeat(40);
    vec![
        Some("".into()),
        None,
        Some("a".into()),
        Some("a\0".into()),
        Some("a\0\0".into()),
        Some("ab".into()),
        Some("\0".into()),
        Some(format!("{long}a")),
        Some(format!("{long}b")),
        Some(format!("{long}a\0")),
        Some(long.clone()),
        Some("\u{7f}".into()),
        Some("é".into()),
    ]
}

#[test]
fn strings_and_binary() {
    let s = tricky_strings();
    check(vec![Arc::new(StringArray::from(s.clone()))]);
    check(vec![Arc::new(LargeStringArray::from(s.clone()))]);
    check(vec![Arc::new(StringViewArray::from(s.clone()))]);
    let b: Vec<Option<Vec<u8>>> = s.iter().map(|x| x.as_ref().map(|x| x.as_bytes().to_vec())).collect();
    let mut b2 = b.clone();
    b2.push(Some(vec![0xff, 0x00]));
    b2.push(Some(vec![0xff]));
    check(vec![Arc::new(BinaryArray::from_iter(b2.clone()))]);
    check(vec![Arc::new(LargeBinaryArray::from_iter(b2.clone()))]);
    check(vec![Arc::new(BinaryViewArray::from_iter(b2))]);
    // Short strings fit whole: the encoding is exact.
    let short: ArrayRef = Arc::new(StringArray::from(vec!["", "a", "a\0", "b"]));
    let enc = encode_runs(&[vec![short]], &[SortKey::new("s", SortOptions::default())]).unwrap();
    assert!(enc.exact);
    // Long strings equal on the prefix: not exact, and ties resolved later.
    let long: ArrayRef = Arc::new(StringArray::from(vec!["x".repeat(100) + "a", "x".repeat(100) + "b"]));
    let enc = encode_runs(&[vec![long]], &[SortKey::new("s", SortOptions::default())]).unwrap();
    assert!(!enc.exact);
    assert_eq!(enc.keys.cmp_words(0, 1), Ordering::Equal);
}

#[test]
fn fixed_size_binary() {
    let b: Vec<Option<Vec<u8>>> = vec![
        Some(vec![0; 16]),
        None,
        Some(vec![0xff; 16]),
        Some([vec![0x12, 0x34], vec![0; 14]].concat()),
        Some([vec![0x12, 0x34], vec![0; 13], vec![1]].concat()),
        Some([vec![0x80], vec![0; 15]].concat()),
        Some([vec![0x7f], vec![0xff; 15]].concat()),
    ];
    check(vec![Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(b.clone().into_iter(), 16).unwrap())]);
    // Whole UUIDs fit: exact, 16 bytes and a null bit, no length code.
    let uuids: ArrayRef = Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(b.into_iter(), 16).unwrap());
    let enc = encode_runs(&[vec![uuids]], &[SortKey::new("u", SortOptions::default())]).unwrap();
    assert!(enc.exact);
    assert_eq!(enc.bits, 129);
    // Wider than the key (40 bytes): a prefix, still consistent, and equal prefixes tie.
    let wide = |last: u8| [vec![b'x'; 39], vec![last]].concat();
    let w: Vec<Option<Vec<u8>>> = vec![Some(wide(2)), Some(wide(1)), None, Some(vec![0; 40]), Some(wide(1))];
    let wide_col: ArrayRef = Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(w.into_iter(), 40).unwrap());
    check(vec![wide_col.clone()]);
    let enc = encode_runs(&[vec![wide_col]], &[SortKey::new("w", SortOptions::default())]).unwrap();
    assert!(!enc.exact);
    assert_eq!(enc.keys.cmp_words(0, 1), Ordering::Equal);
    // A short one beside an integer column, and one of width 0 (every value equal).
    check(vec![
        Arc::new(FixedSizeBinaryArray::try_from_iter(vec![vec![1u8, 2], vec![1, 1], vec![0, 9], vec![1, 1]].into_iter()).unwrap()),
        Arc::new(Int32Array::from(vec![Some(1), None, Some(3), Some(0)])),
    ]);
    check(vec![Arc::new(
        FixedSizeBinaryArray::try_from_sparse_iter_with_size(vec![Some(vec![]), None, Some(vec![])].into_iter(), 0).unwrap(),
    )]);
}

#[test]
fn decimal256() {
    let v = |x: i128| Some(i256::from_i128(x));
    let values = vec![
        Some(i256::MIN),
        v(-1),
        None,
        v(0),
        v(1),
        Some(i256::MAX),
        Some(i256::from_parts(0, i128::MAX)),  // high half only
        Some(i256::from_parts(u128::MAX, -1)), // -1 in the high half, all ones below
        Some(i256::from_parts(1, -1)),
        v(i128::MIN),
        v(i128::MAX),
        v(1),
    ];
    let col = |v: Vec<Option<i256>>| -> ArrayRef { Arc::new(Decimal256Array::from(v).with_precision_and_scale(76, 10).unwrap()) };
    check(vec![col(values.clone())]);
    // Without nulls its 256 bits fill the key and it is exact; with a null bit it is a
    // prefix, and values that differ only in their last byte tie.
    let no_nulls: Vec<Option<i256>> = values.iter().flatten().map(|x| Some(*x)).collect();
    let enc = encode_runs(&[vec![col(no_nulls.clone())]], &[SortKey::new("d", SortOptions::default())]).unwrap();
    assert!(enc.exact);
    assert_eq!(enc.bits, 256);
    let enc = encode_runs(&[vec![col(vec![v(256), v(257), None])]], &[SortKey::new("d", SortOptions::default())]).unwrap();
    assert!(!enc.exact);
    assert_eq!(enc.keys.cmp_words(0, 1), Ordering::Equal);
    // Behind another column it is a prefix too; still consistent.
    check(vec![Arc::new(Int8Array::from(vec![1i8; no_nulls.len()])), col(no_nulls)]);
}

#[test]
fn intervals() {
    let ym = IntervalYearMonthArray::from(vec![Some(i32::MIN), Some(-1), None, Some(0), Some(1), Some(i32::MAX), Some(1)]);
    check(vec![Arc::new(ym)]);
    let dt = |d, ms| Some(IntervalDayTime::new(d, ms));
    let day_time =
        IntervalDayTimeArray::from(vec![dt(0, 5), dt(-1, i32::MAX), None, dt(0, -5), dt(i32::MIN, 0), dt(i32::MAX, i32::MIN), dt(0, 5)]);
    check(vec![Arc::new(day_time)]);
    let mdn = |m, d, n| Some(IntervalMonthDayNano::new(m, d, n));
    let month_day_nano = IntervalMonthDayNanoArray::from(vec![
        mdn(1, 0, 0),
        mdn(0, 40, i64::MAX),
        None,
        mdn(0, 40, i64::MIN),
        mdn(-1, i32::MAX, 7),
        mdn(i32::MIN, 0, 0),
        mdn(i32::MAX, i32::MIN, -1),
        mdn(0, 40, i64::MIN),
    ]);
    check(vec![Arc::new(month_day_nano.clone())]);
    // Exact (the fields are the whole value): 128 bits and a null bit.
    let enc = encode_runs(&[vec![Arc::new(month_day_nano) as ArrayRef]], &[SortKey::new("i", SortOptions::default())]).unwrap();
    assert!(enc.exact);
    assert_eq!(enc.bits, 129);
    // Beside another column.
    check(vec![
        Arc::new(Int8Array::from(vec![1, 1, 0, 1])),
        Arc::new(IntervalDayTimeArray::from(vec![dt(1, 0), dt(0, 1), dt(0, 0), None])),
    ]);
}

/// Lists and structs: their arrow-row bytes as the key (a prefix where long, exact where
/// every value fits), in every option set.
#[test]
fn nested_types() {
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None]),
        None,
        Some(vec![]),
        Some(vec![Some(1)]),
        Some(vec![Some(-3), Some(7)]),
        Some(vec![Some(1), None, Some(2)]),
        Some(vec![Some(1)]),
    ]);
    check(vec![Arc::new(list)]);
    let long =
        ListArray::from_iter_primitive::<Int64Type, _, _>((0..6).map(|i| Some((0..20).map(|j| Some(j + (i % 3))).collect::<Vec<_>>())));
    check(vec![Arc::new(long.clone())]);
    let enc = encode_runs(&[vec![Arc::new(long) as ArrayRef]], &[SortKey::new("l", SortOptions::default())]).unwrap();
    assert!(!enc.exact, "20 i64 values do not fit 256 bits");
    let st = StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Int32Array::from(vec![None, Some(3), Some(0), None, Some(3)])) as ArrayRef,
        ),
        (Arc::new(Field::new("s", DataType::Utf8, false)), Arc::new(StringArray::from(vec!["x", "a", "b", "a", "a"])) as ArrayRef),
    ]);
    check(vec![Arc::new(st.clone())]);
    check(vec![Arc::new(Int8Array::from(vec![1, 1, 0, 1, 1])), Arc::new(st)]);
}

#[test]
fn dictionaries() {
    let d: DictionaryArray<Int32Type> = tricky_strings().iter().map(|s| s.as_deref()).collect();
    check(vec![Arc::new(d)]);
    let d: DictionaryArray<UInt8Type> = vec![Some("b"), None, Some("a"), Some("b")].into_iter().collect();
    check(vec![Arc::new(d)]);
}

#[test]
fn several_columns() {
    check(vec![
        Arc::new(Int32Array::from(vec![Some(1), Some(1), None, Some(2), Some(1)])),
        Arc::new(StringArray::from(vec![Some("b"), Some("a"), Some("a"), None, Some("a")])),
        Arc::new(BooleanArray::from(vec![Some(true), Some(false), None, Some(true), Some(true)])),
    ]);
    // Past the 256-bit budget: decimal + decimal + long string — a prefix, still consistent.
    check(vec![
        Arc::new(Decimal128Array::from(vec![1, 1, 2, 1])),
        Arc::new(Decimal128Array::from(vec![i128::MAX, i128::MAX, 0, i128::MIN])),
        Arc::new(Int8Array::from(vec![2, 1, 0, 3])),
    ]);
}

/// A key already full (two Decimal128 columns without nulls: 256 bits) before a nullable
/// byte column whose values are all empty: the column's null bit alone does not fit, so
/// the key stops (a prefix), not a field past the budget. Found by the oracle suite with a
/// Decimal256 key (seed 15049160432371500447).
#[test]
fn a_full_key_leaves_out_the_next_null_bit() {
    let d = |v: Vec<i128>| -> ArrayRef { Arc::new(Decimal128Array::from(v)) };
    let empty: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b""[..]), None, Some(&b""[..]), None]));
    check(vec![d(vec![1, 1, 1, 0]), d(vec![2, 2, 2, 2]), empty.clone()]);
    let specs: Vec<SortKey> = (0..3).map(|i| SortKey::new(format!("c{i}"), SortOptions::default())).collect();
    let enc = encode_runs(&[vec![d(vec![1, 1, 1, 0]), d(vec![2, 2, 2, 2]), empty]], &specs).unwrap();
    assert_eq!(enc.bits, 256);
    assert!(!enc.exact);
    let wide: ArrayRef = Arc::new(Decimal256Array::from(vec![i256::from_i128(5), i256::from_i128(5)]));
    let empty: ArrayRef = Arc::new(BinaryArray::from(vec![None, Some(&b""[..])]));
    check(vec![wide, empty]);
}

#[test]
fn narrow_keys_are_u32() {
    let a: ArrayRef = Arc::new(Int16Array::from(vec![Some(3), None, Some(-3)]));
    let enc = encode_runs(&[vec![a]], &[SortKey::new("a", SortOptions::default())]).unwrap();
    assert!(matches!(enc.keys, corank::keys::KeyColumn::U32(_)));
    assert_eq!(enc.bits, 17);
}

/// Every type arrow-row orders is a key now, nested ones by their row bytes; a key column
/// whose runs disagree on its type is still refused, naming it.
#[test]
fn every_arrow_row_type_is_supported() {
    for dt in [
        DataType::new_list(DataType::Int32, true),
        DataType::new_large_list(DataType::Utf8, true),
        DataType::Struct(Fields::from(vec![Field::new("a", DataType::Int32, true)])),
        DataType::Interval(IntervalUnit::MonthDayNano),
        DataType::Decimal256(76, 0),
    ] {
        assert!(corank::keys::is_supported(&dt), "{dt}");
    }
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1)])]));
    let ints: ArrayRef = Arc::new(Int32Array::from(vec![1]));
    let err = encode_runs(&[vec![list], vec![ints]], &[SortKey::new("tags", SortOptions::default())]).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("'tags'") && msg.contains("List"), "{msg}");
}

//! Test support: random sorted runs of many types, and the oracle (the stable sort of the
//! concatenated runs by arrow-row bytes).
#![allow(dead_code)]

pub mod moto;

use arrow::array::*;
use arrow::compute::{concat, lexsort_to_indices, take, SortColumn, SortOptions};
use arrow::datatypes::*;
use arrow::row::{RowConverter, SortField};
use std::sync::Arc;

/// A small xorshift generator: deterministic from a seed that proptest chooses.
pub struct Rng(pub u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e3779b97f4a7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    /// ASC or DESC, nulls first or last, each even odds.
    pub fn sort_options(&mut self) -> SortOptions {
        SortOptions { descending: self.chance(0.5), nulls_first: self.chance(0.5) }
    }
}

/// `n_keys` key columns of random types (from [`key_types`]) and random options.
pub fn random_key_columns(rng: &mut Rng, n_keys: usize) -> (Vec<DataType>, Vec<SortOptions>) {
    random_key_columns_from(rng, n_keys, &key_types())
}

/// `n_keys` key columns of random types from `all` and random options.
pub fn random_key_columns_from(rng: &mut Rng, n_keys: usize, all: &[DataType]) -> (Vec<DataType>, Vec<SortOptions>) {
    let types: Vec<DataType> = (0..n_keys).map(|_| all[rng.below(all.len() as u64) as usize].clone()).collect();
    let options = (0..n_keys).map(|_| rng.sort_options()).collect();
    (types, options)
}

/// Every key type the property tests draw from.
pub fn key_types() -> Vec<DataType> {
    use DataType::*;
    vec![
        Int8,
        Int16,
        Int32,
        Int64,
        UInt8,
        UInt16,
        UInt32,
        UInt64,
        Float16,
        Float32,
        Float64,
        Boolean,
        Date32,
        Date64,
        Time32(TimeUnit::Millisecond),
        Time64(TimeUnit::Nanosecond),
        Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        Timestamp(TimeUnit::Second, None),
        Duration(TimeUnit::Microsecond),
        Decimal128(38, 4),
        Decimal256(50, 2),
        Utf8,
        LargeUtf8,
        Utf8View,
        Binary,
        LargeBinary,
        BinaryView,
        FixedSizeBinary(16),
        FixedSizeBinary(40),
        Dictionary(Box::new(Int32), Box::new(Utf8)),
    ]
}

/// [`key_types`] and the key types that `corank merge`'s files do not take (arrow-rs writes
/// no MonthDayNano interval; Parquet's sorting_columns name no list or struct), for the
/// suites that stay in memory.
pub fn in_memory_key_types() -> Vec<DataType> {
    let mut v = key_types();
    v.extend([IntervalUnit::YearMonth, IntervalUnit::DayTime, IntervalUnit::MonthDayNano].map(DataType::Interval));
    v.push(DataType::new_list(DataType::Int32, true));
    v.push(DataType::Struct(Fields::from(vec![Field::new("a", DataType::Int32, true), Field::new("s", DataType::Utf8, false)])));
    v
}

/// A random float drawn to hit the special values often.
fn special_f64(rng: &mut Rng, domain: u64) -> f64 {
    match rng.below(12) {
        0 => f64::NAN,
        1 => -f64::NAN,
        2 => f64::INFINITY,
        3 => f64::NEG_INFINITY,
        4 => 0.0,
        5 => -0.0,
        _ => (rng.below(domain) as f64 - domain as f64 / 2.0) / 4.0,
    }
}

/// Random bytes from a small alphabet with NUL and high bytes, often sharing long prefixes
/// (so string keys are truncated and ties must be resolved exactly).
fn random_bytes(rng: &mut Rng, domain: u64) -> Vec<u8> {
    let id = rng.below(domain);
    let mut r = Rng::new(id + 1);
    let common = if r.chance(0.3) { r.below(48) as usize } else { 0 };
    let mut v = vec![b'x'; common];
    for _ in 0..r.below(6) {
        v.push([0u8, 1, b'a', b'b', 0x7f, 0x80, 0xff][r.below(7) as usize]);
    }
    v
}

/// A random array of `n` rows of type `dt`; values drawn from `domain` distinct choices
/// (small domains mean many duplicates), nulls with probability `null_p`.
pub fn random_array(rng: &mut Rng, dt: &DataType, n: usize, domain: u64, null_p: f64) -> ArrayRef {
    let valid: Vec<bool> = (0..n).map(|_| !rng.chance(null_p)).collect();
    let nulls = Some(arrow::buffer::NullBuffer::from(valid.clone()));
    macro_rules! prim {
        ($t:ty, $f:expr) => {{
            let v: Vec<<$t as ArrowPrimitiveType>::Native> = (0..n).map(|_| $f(rng)).collect();
            Arc::new(PrimitiveArray::<$t>::new(v.into(), nulls).with_data_type(dt.clone())) as ArrayRef
        }};
    }
    // Integers: a domain drawn around zero and at the extremes.
    let int = |rng: &mut Rng| -> i64 {
        match rng.below(10) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.below(domain) as i64 - (domain / 2) as i64,
        }
    };
    use DataType::*;
    match dt {
        Int8 => prim!(Int8Type, |r: &mut Rng| int(r).clamp(-128, 127) as i8),
        Int16 => prim!(Int16Type, |r: &mut Rng| int(r).clamp(i16::MIN as i64, i16::MAX as i64) as i16),
        Int32 => prim!(Int32Type, |r: &mut Rng| int(r).clamp(i32::MIN as i64, i32::MAX as i64) as i32),
        Int64 => prim!(Int64Type, int),
        UInt8 => prim!(UInt8Type, |r: &mut Rng| int(r).clamp(0, 255) as u8),
        UInt16 => prim!(UInt16Type, |r: &mut Rng| int(r).clamp(0, u16::MAX as i64) as u16),
        UInt32 => prim!(UInt32Type, |r: &mut Rng| int(r).clamp(0, u32::MAX as i64) as u32),
        UInt64 => prim!(UInt64Type, |r: &mut Rng| (int(r) as u64).wrapping_add(1 << 63)),
        Float16 => prim!(Float16Type, |r: &mut Rng| half::f16::from_f64(special_f64(r, domain))),
        Float32 => prim!(Float32Type, |r: &mut Rng| special_f64(r, domain) as f32),
        Float64 => prim!(Float64Type, |r: &mut Rng| special_f64(r, domain)),
        Date32 | Time32(_) => {
            let v: Vec<i32> = (0..n).map(|_| int(rng).clamp(0, 86_399_000) as i32).collect();
            let a: ArrayRef = Arc::new(Int32Array::new(v.into(), nulls));
            arrow::compute::cast(&a, dt).unwrap()
        }
        Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => {
            let v: Vec<i64> = (0..n).map(|_| int(rng).clamp(0, 86_399_000_000_000)).collect();
            let a: ArrayRef = Arc::new(Int64Array::new(v.into(), nulls));
            arrow::compute::cast(&a, dt).unwrap()
        }
        Decimal128(_, _) => prim!(Decimal128Type, |r: &mut Rng| (int(r) as i128) * 1_000_000_000_007),
        // Intervals: few values in the leading fields, so the later ones order the ties.
        Interval(IntervalUnit::YearMonth) => {
            prim!(IntervalYearMonthType, |r: &mut Rng| int(r).clamp(i32::MIN as i64, i32::MAX as i64) as i32)
        }
        Interval(IntervalUnit::DayTime) => prim!(IntervalDayTimeType, |r: &mut Rng| {
            IntervalDayTime::new(r.below(3) as i32 - 1, int(r).clamp(i32::MIN as i64, i32::MAX as i64) as i32)
        }),
        Interval(IntervalUnit::MonthDayNano) => prim!(IntervalMonthDayNanoType, |r: &mut Rng| {
            IntervalMonthDayNano::new([i32::MIN, 0, 1][r.below(3) as usize], r.below(2) as i32 - 1, int(r))
        }),
        // Values past i128, so the high half of the 256 bits orders them too.
        Decimal256(_, _) => prim!(Decimal256Type, |r: &mut Rng| i256::from_i128(int(r) as i128).wrapping_mul(i256::from_i128(1 << 100))),
        Boolean => {
            let v: Vec<Option<bool>> = (0..n).map(|i| valid[i].then(|| rng.below(2) == 1)).collect();
            Arc::new(BooleanArray::from(v))
        }
        Utf8 | LargeUtf8 | Utf8View | Dictionary(_, _) => {
            let v: Vec<Option<String>> = (0..n)
                .map(|i| {
                    let b = random_bytes(rng, domain);
                    valid[i].then(|| b.iter().map(|&c| char::from(c.min(0x7f))).collect())
                })
                .collect();
            let a: ArrayRef = Arc::new(StringArray::from(v));
            arrow::compute::cast(&a, dt).unwrap()
        }
        Binary | LargeBinary | BinaryView => {
            let v: Vec<Option<Vec<u8>>> = (0..n)
                .map(|i| {
                    let b = random_bytes(rng, domain);
                    valid[i].then_some(b)
                })
                .collect();
            let a: ArrayRef = Arc::new(BinaryArray::from_iter(v));
            arrow::compute::cast(&a, dt).unwrap()
        }
        FixedSizeBinary(w) => {
            // The random bytes cut or zero padded to the width (UUIDs at 16; 40 is past
            // what one key holds beside a null bit, so its ties are resolved exactly).
            let v: Vec<Option<Vec<u8>>> = (0..n)
                .map(|i| {
                    let mut b = random_bytes(rng, domain);
                    b.resize(*w as usize, 0);
                    valid[i].then_some(b)
                })
                .collect();
            Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(v.into_iter(), *w).unwrap())
        }
        // Short lists of few values (prefixes of one another often), null elements too.
        List(_) => {
            let v: Vec<Option<Vec<Option<i32>>>> = (0..n)
                .map(|i| {
                    let len = rng.below(4);
                    let list: Vec<Option<i32>> =
                        (0..len).map(|_| (!rng.chance(0.1)).then(|| rng.below(domain.min(5)) as i32 - 2)).collect();
                    valid[i].then_some(list)
                })
                .collect();
            Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(v))
        }
        // A nullable integer and a non-null string: ties on the first field are common.
        Struct(fields) => {
            let a = random_array(rng, fields[0].data_type(), n, domain.min(6), 0.2);
            let s = random_array(rng, fields[1].data_type(), n, domain, 0.0);
            Arc::new(StructArray::new(fields.clone(), vec![a, s], nulls))
        }
        other => panic!("no generator for {other}"),
    }
}

/// A sorted run: random key columns sorted by `options`, plus a payload column `id`
/// numbering the rows globally (from `first_id`).
pub fn sorted_run(
    rng: &mut Rng,
    types: &[DataType],
    options: &[SortOptions],
    n: usize,
    domain: u64,
    null_p: f64,
    first_id: u64,
) -> RecordBatch {
    let cols: Vec<ArrayRef> = types.iter().map(|t| random_array(rng, t, n, domain, null_p)).collect();
    let sort_cols: Vec<SortColumn> = cols.iter().zip(options).map(|(c, o)| SortColumn { values: c.clone(), options: Some(*o) }).collect();
    let order = lexsort_to_indices(&sort_cols, None).unwrap();
    let mut fields: Vec<(String, ArrayRef)> =
        cols.iter().enumerate().map(|(i, c)| (format!("k{i}"), take(c, &order, None).unwrap())).collect();
    fields.push(("id".into(), Arc::new(UInt64Array::from_iter_values(first_id..first_id + n as u64))));
    // Every field nullable, so runs with and without nulls share one schema.
    RecordBatch::try_from_iter_with_nullable(fields.into_iter().map(|(n, a)| (n, a, true))).unwrap()
}

/// The oracle: global indices of the stable sort of the concatenated runs by arrow-row bytes.
pub fn oracle(runs: &[RecordBatch], keys: &[(String, SortOptions)]) -> Vec<usize> {
    if runs.is_empty() {
        return vec![];
    }
    let fields: Vec<SortField> =
        keys.iter().map(|(name, o)| SortField::new_with_options(runs[0].column_by_name(name).unwrap().data_type().clone(), *o)).collect();
    let conv = RowConverter::new(fields).unwrap();
    let cols: Vec<ArrayRef> = keys
        .iter()
        .map(|(name, _)| {
            let parts: Vec<&dyn Array> = runs.iter().map(|b| b.column_by_name(name).unwrap().as_ref()).collect();
            concat(&parts).unwrap()
        })
        .collect();
    let rows = conv.convert_columns(&cols).unwrap();
    let mut idx: Vec<usize> = (0..rows.num_rows()).collect();
    idx.sort_by(|&a, &b| rows.row(a).cmp(&rows.row(b))); // stable
    idx
}

//! Parquet types other writers use that arrow-rs reads with a loss by default (issue 62):
//! Spark's and Impala's INT96 timestamps outside 1677–2262, DuckDB's INTERVAL, pyarrow's
//! `date64` (a Parquet DATE read back as Date64), and the `--union-by-name` joins of
//! int64 with float64 and of categoricals with plain strings. Each test writes the files the
//! way those writers store them (the parquet crate's low-level writer where arrow-rs cannot
//! write the type) and reads the output back: values, Arrow types and the Parquet schema.

use crate::cli_common::{corank, files_in, text, write_file, write_file_with, Keys};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{ConvertedType, LogicalType, TimeUnit as ParquetTimeUnit, Type as PhysicalType};
use parquet::column::reader::ColumnReader;
use parquet::data_type::{ByteArray, FixedLenByteArray, FixedLenByteArrayType, Int64Type as ParquetInt64, Int96, Int96Type};
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::ColumnDescPtr;
use std::path::Path;
use std::sync::Arc;

fn asc() -> SortOptions {
    SortOptions { descending: false, nulls_first: false }
}

/// A column for [`write_low_level`]: values of a required column, or of an optional one
/// (`None` a null).
enum Column {
    Int64(Vec<i64>),
    Int96(Vec<Option<Int96>>),
    Fixed(Vec<Option<Vec<u8>>>),
}

/// Writes one file of the Parquet schema `message` with the parquet crate's column writers,
/// one row group per entry of `groups` (its columns in schema order), declaring
/// `sorting_columns` if given.
fn write_low_level(path: &Path, message: &str, groups: Vec<Vec<Column>>, sorting: Option<Vec<SortingColumn>>) {
    let schema = Arc::new(parse_message_type(message).unwrap());
    let props = Arc::new(WriterProperties::builder().set_sorting_columns(sorting).build());
    let mut writer = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    for columns in groups {
        let mut rg = writer.next_row_group().unwrap();
        for column in columns {
            let mut c = rg.next_column().unwrap().unwrap();
            let defs = |n: &[bool]| -> Vec<i16> { n.iter().map(|&some| some as i16).collect() };
            match column {
                Column::Int64(v) => {
                    c.typed::<ParquetInt64>().write_batch(&v, None, None).unwrap();
                }
                Column::Int96(v) => {
                    let d = defs(&v.iter().map(Option::is_some).collect::<Vec<_>>());
                    let values: Vec<Int96> = v.into_iter().flatten().collect();
                    c.typed::<Int96Type>().write_batch(&values, Some(&d), None).unwrap();
                }
                Column::Fixed(v) => {
                    let d = defs(&v.iter().map(Option::is_some).collect::<Vec<_>>());
                    let values: Vec<FixedLenByteArray> =
                        v.into_iter().flatten().map(|b| FixedLenByteArray::from(ByteArray::from(b))).collect();
                    c.typed::<FixedLenByteArrayType>().write_batch(&values, Some(&d), None).unwrap();
                }
            }
            c.close().unwrap();
        }
        rg.close().unwrap();
    }
    writer.close().unwrap();
}

/// The leaf column `name` of the Parquet file at `path`.
fn leaf(path: &Path, name: &str) -> ColumnDescPtr {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let descr = reader.metadata().file_metadata().schema_descr_ptr();
    let c = descr.columns().iter().find(|c| c.path().string() == name).unwrap_or_else(|| panic!("no column {name}")).clone();
    c
}

/// The file's rows as one batch, as arrow-rs reads it.
fn read_all(path: &Path) -> RecordBatch {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&schema, &batches).unwrap()
}

/// The values of the optional FIXED_LEN_BYTE_ARRAY column at leaf `index`, as stored.
fn fixed_values(path: &Path, index: usize) -> Vec<Option<Vec<u8>>> {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for g in 0..reader.num_row_groups() {
        let ColumnReader::FixedLenByteArrayColumnReader(mut r) = reader.get_row_group(g).unwrap().get_column_reader(index).unwrap() else {
            panic!("column {index} is not FIXED_LEN_BYTE_ARRAY")
        };
        let (mut defs, mut values) = (Vec::new(), Vec::new());
        loop {
            let (records, _, _) = r.read_records(1024, Some(&mut defs), None, &mut values).unwrap();
            if records == 0 {
                break;
            }
        }
        let mut values = values.into_iter();
        out.extend(defs.iter().map(|&d| (d == 1).then(|| values.next().unwrap().data().to_vec())));
    }
    out
}

/// An INT96 timestamp as Spark writes it: nanoseconds of the day, then the Julian day.
fn int96(days_since_epoch: i64, nanos_of_day: u64) -> Int96 {
    let mut v = Int96::new();
    v.set_data(nanos_of_day as u32, (nanos_of_day >> 32) as u32, (days_since_epoch + 2_440_588) as u32);
    v
}

/// Days from 1970-01-01 to 9999-12-31, to 2000-01-01 and to 1600-01-01.
const Y9999: i64 = 2_932_896;
const Y2000: i64 = 10_957;
const Y1600: i64 = -135_140;
const DAY_US: i64 = 86_400_000_000;

/// The schema of Spark's files: an id (the key) and an INT96 timestamp.
const SPARK: &str = "message spark_schema { required int64 id; optional int96 ts; }";

fn by_id() -> Option<Vec<SortingColumn>> {
    Some(vec![SortingColumn { column_idx: 0, descending: false, nulls_first: false }])
}

/// Defect 5: INT96 timestamps outside 1677-09-21 .. 2262-04-11 (Spark's 9999-12-31 "end of
/// time", dates of 1600) were wrapped into other instants by the nanosecond conversion
/// (9999-12-31 came out as 1816-03-29), exit 0. They are read at the finest unit that holds
/// every value exactly (microseconds here), files whose values all fit read at nanoseconds
/// as before, and values no unit holds (nanosecond digits beside the year 9999) are refused,
/// naming the file, the column and the values; nothing is written.
#[test]
fn int96_timestamps_keep_their_instant_or_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b, out) = (dir.join("a.parquet"), dir.join("b.parquet"), dir.join("out.parquet"));
    let (a_s, b_s, out_s) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    // Microsecond digits, the year 9999, a null, the year 1600.
    let far = vec![Some(int96(Y2000, 1_000)), Some(int96(Y9999, 0)), None, Some(int96(Y1600, 3_600_000_000_000))];
    write_low_level(&a, SPARK, vec![vec![Column::Int64(vec![0, 1, 2, 3]), Column::Int96(far)]], by_id());
    let res = corank(&["merge", a_s, "-o", out_s, "--by", "id"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    assert_eq!(merged.schema().field(1).data_type(), &DataType::Timestamp(TimeUnit::Microsecond, None));
    let ts = merged.column(1).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(
        ts.iter().collect::<Vec<_>>(),
        [Some(Y2000 * DAY_US + 1), Some(Y9999 * DAY_US), None, Some(Y1600 * DAY_US + 3_600_000_000)],
        "2000-01-01 00:00:00.000001, 9999-12-31, null, 1600-01-01 01:00"
    );
    let column = leaf(&out, "ts");
    assert_eq!(column.physical_type(), PhysicalType::INT64);
    assert!(
        matches!(column.logical_type_ref(), Some(LogicalType::Timestamp(t)) if t.unit == ParquetTimeUnit::MICROS),
        "{:?}",
        column.logical_type_ref()
    );

    // Within 1677–2262: nanoseconds, as before, every digit kept.
    write_low_level(
        &b,
        SPARK,
        vec![vec![Column::Int64(vec![0, 5]), Column::Int96(vec![Some(int96(Y2000, 1)), Some(int96(0, 999_999_999))])]],
        by_id(),
    );
    let res = corank(&["merge", b_s, "-o", out_s, "-f", "--by", "id"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    assert_eq!(merged.schema().field(1).data_type(), &DataType::Timestamp(TimeUnit::Nanosecond, None));
    let ts = merged.column(1).as_primitive::<TimestampNanosecondType>();
    assert_eq!(ts.values().to_vec(), [Y2000 * DAY_US * 1_000 + 1, 999_999_999]);

    // The year 9999 beside nanosecond digits: no unit holds both. Refused, nothing written.
    std::fs::remove_file(&out).unwrap();
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--by", "id"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("a.parquet")
            && stderr.contains("column 'ts'")
            && stderr.contains("9999-12-31")
            && stderr.contains("2000-01-01 00:00:00.000000001")
            && stderr.contains("b.parquet"),
        "{stderr}"
    );
    assert_eq!(files_in(dir), ["a.parquet", "b.parquet"]);

    // The same from `corank sort`, and the far values as the key of a merge: in order.
    let res = corank(&["sort", a_s, b_s, "-o", out_s, "--by", "id"]);
    assert_eq!(res.status.code(), Some(1), "{}", text(&res.stderr));
    assert!(text(&res.stderr).contains("9999-12-31"), "{}", text(&res.stderr));
    let res = corank(&["sort", a_s, "-o", out_s, "--by", "ts"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    let ts = merged.column(1).as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.iter().collect::<Vec<_>>(), [Some(Y1600 * DAY_US + 3_600_000_000), Some(Y2000 * DAY_US + 1), Some(Y9999 * DAY_US), None]);
}

/// DuckDB's INTERVAL: FIXED_LEN_BYTE_ARRAY(12), months, days and milliseconds.
fn interval(months: u32, days: u32, millis: u32) -> Vec<u8> {
    [months.to_le_bytes(), days.to_le_bytes(), millis.to_le_bytes()].concat()
}

/// Defect 6: DuckDB's INTERVAL columns lost their months ("1 month 1 day" came out as "1
/// day"; arrow-rs reads them as `Interval(DayTime)`). They are read as their 12 bytes and
/// written back as INTERVAL, the bytes unchanged, with `--union-by-name` too; an INTERVAL
/// sort key is refused (exit 2), and so is a union that would store one as bare bytes.
#[test]
fn duckdb_intervals_keep_their_months() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b, out) = (dir.join("a.parquet"), dir.join("b.parquet"), dir.join("out.parquet"));
    let (a_s, b_s, out_s) = (a.to_str().unwrap(), b.to_str().unwrap(), out.to_str().unwrap());
    let duck = "message duckdb_schema { required int64 k; optional fixed_len_byte_array(12) iv (INTERVAL); }";
    let by_k = by_id();
    let a_iv = vec![Some(interval(1, 1, 0)), None, Some(interval(14, 3, 86_399_999))];
    let b_iv = vec![Some(interval(0, 0, 1_500)), Some(interval(u32::MAX, 2, 7))];
    write_low_level(&a, duck, vec![vec![Column::Int64(vec![1, 3, 5]), Column::Fixed(a_iv.clone())]], by_k.clone());
    write_low_level(&b, duck, vec![vec![Column::Int64(vec![2, 4]), Column::Fixed(b_iv.clone())]], by_k.clone());
    let expected = vec![a_iv[0].clone(), b_iv[0].clone(), a_iv[1].clone(), b_iv[1].clone(), a_iv[2].clone()];
    let check = |out: &Path| {
        let column = leaf(out, "iv");
        assert_eq!(column.physical_type(), PhysicalType::FIXED_LEN_BYTE_ARRAY);
        assert_eq!(column.type_length(), 12);
        assert_eq!(column.converted_type(), ConvertedType::INTERVAL);
        assert_eq!(fixed_values(out, 1), expected, "months, days and milliseconds as the inputs hold them");
        let k = read_all(out).column(0).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(k, [1, 2, 3, 4, 5]);
    };
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--by", "k"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    check(&out);
    // `corank sort` too.
    let res = corank(&["sort", b_s, a_s, "-o", out_s, "-f", "--by", "k"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    check(&out);

    // With `--union-by-name` (a file with a column more): still INTERVAL, the same bytes.
    let c = dir.join("c.parquet");
    let wider = "message duckdb_schema { required int64 k; optional fixed_len_byte_array(12) iv (INTERVAL); required int64 x; }";
    write_low_level(&c, wider, vec![vec![Column::Int64(vec![2, 4]), Column::Fixed(b_iv.clone()), Column::Int64(vec![7, 8])]], by_k.clone());
    let res = corank(&["merge", a_s, c.to_str().unwrap(), "-o", out_s, "-f", "--by", "k", "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    check(&out);

    // Row groups apart from the others are copied as they are, INTERVAL and all.
    let f = dir.join("f.parquet");
    write_low_level(&f, duck, vec![vec![Column::Int64(vec![10, 11]), Column::Fixed(b_iv.clone())]], by_k.clone());
    let res = corank(&["merge", a_s, f.to_str().unwrap(), "-o", out_s, "-f", "--by", "k", "--passthrough", "always"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    assert!(text(&res.stdout).contains("5 rows in 2 row groups copied untouched"), "{}", text(&res.stdout));
    assert_eq!(leaf(&out, "iv").converted_type(), ConvertedType::INTERVAL);
    assert_eq!(fixed_values(&out, 1), [a_iv.clone(), b_iv.clone()].concat());
    std::fs::remove_file(&f).unwrap();

    // An INTERVAL sort key: refused as a usage error.
    std::fs::remove_file(&out).unwrap();
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--by", "iv"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'iv'") && stderr.contains("INTERVAL"), "{stderr}");

    // The same column as bare 12 bytes in another file: the output could not say INTERVAL.
    let e = dir.join("e.parquet");
    let bare = "message other { required int64 k; optional fixed_len_byte_array(12) iv; }";
    write_low_level(&e, bare, vec![vec![Column::Int64(vec![9]), Column::Fixed(vec![Some(vec![0; 12])])]], by_k);
    let res = corank(&["merge", a_s, e.to_str().unwrap(), "-o", out_s, "--by", "k", "--union-by-name"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("column 'iv'") && stderr.contains("INTERVAL"), "{stderr}");
    assert_eq!(files_in(dir), ["a.parquet", "b.parquet", "c.parquet", "e.parquet"]);
}

/// Defect 7: pyarrow's `date64` columns (stored as Parquet DATE, the `ARROW:schema` saying
/// Date64) came back as bare INT64 milliseconds, a number to every other reader. They are
/// read as the days they store and written as DATE.
#[test]
fn pyarrow_date64_columns_stay_dates() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b, out) = (dir.join("a.parquet"), dir.join("b.parquet"), dir.join("out.parquet"));
    const DAY: i64 = 86_400_000;
    let batch = |days: &[i64], first_id: u64| {
        RecordBatch::try_from_iter([
            ("d", Arc::new(Date64Array::from(days.iter().map(|d| d * DAY).collect::<Vec<_>>())) as ArrayRef),
            ("id", Arc::new(UInt64Array::from_iter_values(first_id..first_id + days.len() as u64)) as ArrayRef),
        ])
        .unwrap()
    };
    let keys: Keys = vec![("d".into(), asc())];
    // What pyarrow writes: Parquet DATE (INT32 days), Date64 in the stored Arrow schema.
    let pyarrow = || WriterProperties::builder().set_coerce_types(true);
    let (first, second) = (batch(&[-1, 3, 19_000], 0), batch(&[0, 3, 20_000], 3));
    write_file_with(&a, first.schema(), std::slice::from_ref(&first), Some(&keys), pyarrow());
    write_file_with(&b, second.schema(), std::slice::from_ref(&second), Some(&keys), pyarrow());
    assert_eq!(leaf(&a, "d").logical_type_ref(), Some(&LogicalType::Date), "the input is a Parquet DATE");
    assert_eq!(read_all(&a).schema().field(0).data_type(), &DataType::Date64, "read back as Date64");
    let res = corank(&["merge", a.to_str().unwrap(), b.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let column = leaf(&out, "d");
    assert_eq!(column.physical_type(), PhysicalType::INT32);
    assert_eq!(column.logical_type_ref(), Some(&LogicalType::Date));
    let merged = read_all(&out);
    let dates = merged.column(0).as_primitive::<Date32Type>();
    assert_eq!(dates.values().to_vec(), [-1, 0, 3, 3, 19_000, 20_000]);
    let ids = merged.column(1).as_primitive::<UInt64Type>();
    assert_eq!(ids.values().to_vec(), [0, 3, 1, 4, 2, 5]);
}

/// Defect 17: `--union-by-name` refused int64 beside float64 although every value converts
/// exactly (the README says ints join floats where exact), and a categorical column
/// (dictionary of strings) beside the same column as plain strings. Both join now: int64 as
/// float64 (a value float64 holds only rounded is an error naming the column, the file and
/// the value), a dictionary with strings as the plain strings, categoricals of two key
/// widths as the wider.
#[test]
fn union_by_name_joins_int64_with_float64_and_categoricals_with_strings() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let (a, b, c, out) = (dir.join("a.parquet"), dir.join("b.parquet"), dir.join("c.parquet"), dir.join("out.parquet"));
    let (a_s, b_s, c_s, out_s) = (a.to_str().unwrap(), b.to_str().unwrap(), c.to_str().unwrap(), out.to_str().unwrap());
    let keys: Keys = vec![("k".into(), asc())];
    let categorical = |values: &[&str]| -> ArrayRef { Arc::new(values.iter().copied().collect::<DictionaryArray<Int8Type>>()) };
    // pandas: int64 keys, a categorical; Polars: float64 keys, plain strings.
    let first = RecordBatch::try_from_iter([
        ("k", Arc::new(Int64Array::from(vec![1, 3, 1 << 60])) as ArrayRef),
        ("v", categorical(&["a1", "a3", "a-big"])),
    ])
    .unwrap();
    let second = RecordBatch::try_from_iter([
        ("k", Arc::new(Float64Array::from(vec![2.0, 3.0, 4.5])) as ArrayRef),
        ("v", Arc::new(StringArray::from(vec!["b2", "b3", "b4.5"])) as ArrayRef),
    ])
    .unwrap();
    write_file(&a, std::slice::from_ref(&first), Some(&keys));
    write_file(&b, std::slice::from_ref(&second), Some(&keys));
    let res = corank(&["merge", a_s, b_s, "-o", out_s, "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    let types: Vec<DataType> = merged.schema().fields().iter().map(|f| f.data_type().clone()).collect();
    assert_eq!(types, [DataType::Float64, DataType::Utf8]);
    let k = merged.column(0).as_primitive::<Float64Type>();
    assert_eq!(k.values().to_vec(), [1.0, 2.0, 3.0, 3.0, 4.5, (1u64 << 60) as f64]);
    let v = merged.column(1).as_string::<i32>();
    assert_eq!(v.iter().flatten().collect::<Vec<_>>(), ["a1", "b2", "a3", "b3", "b4.5", "a-big"]);

    // Two categoricals of other key widths: the wider.
    let wide: ArrayRef = Arc::new(["c0", "c9"].into_iter().collect::<DictionaryArray<Int16Type>>());
    let third = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![0, 9])) as ArrayRef), ("v", wide)]).unwrap();
    write_file(&c, std::slice::from_ref(&third), Some(&keys));
    let res = corank(&["merge", a_s, c_s, "-o", out_s, "-f", "--union-by-name"]);
    assert!(res.status.success(), "{}", text(&res.stderr));
    let merged = read_all(&out);
    assert_eq!(merged.schema().field(1).data_type(), &DataType::Dictionary(Box::new(DataType::Int16), Box::new(DataType::Utf8)));
    let v = arrow::compute::cast(merged.column(1), &DataType::Utf8).unwrap();
    assert_eq!(v.as_string::<i32>().iter().flatten().collect::<Vec<_>>(), ["c0", "a1", "a3", "c9", "a-big"]);

    // An int64 that float64 holds only rounded: an error naming the column, file and value.
    std::fs::remove_file(&out).unwrap();
    let rounded = RecordBatch::try_from_iter([
        ("k", Arc::new(Int64Array::from(vec![5, (1 << 53) + 1])) as ArrayRef),
        ("v", Arc::new(StringArray::from(vec!["c5", "c-odd"])) as ArrayRef),
    ])
    .unwrap();
    write_file(&c, &[rounded], Some(&keys));
    let res = corank(&["merge", a_s, b_s, c_s, "-o", out_s, "--union-by-name"]);
    let stderr = text(&res.stderr);
    assert_eq!(res.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("c.parquet") && stderr.contains("column 'k'") && stderr.contains("9007199254740993"), "{stderr}");
    assert_eq!(files_in(dir), ["a.parquet", "b.parquet", "c.parquet"]);
}

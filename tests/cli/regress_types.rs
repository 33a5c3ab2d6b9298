//! Parquet types other writers use that arrow-rs reads with a loss by default (issue 62),
//! and the `--union-by-name` joins of int64 with float64 and of categoricals with plain
//! strings. Each test writes the files the way those writers store them and reads the
//! output back: values, Arrow types and the Parquet schema.

use crate::cli_common::{corank, files_in, text, write_file, Keys};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::path::Path;
use std::sync::Arc;

fn asc() -> SortOptions {
    SortOptions { descending: false, nulls_first: false }
}

/// The file's rows as one batch, as arrow-rs reads it.
fn read_all(path: &Path) -> RecordBatch {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&schema, &batches).unwrap()
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

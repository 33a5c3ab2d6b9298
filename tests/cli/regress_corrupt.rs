//! Hostile and unusual files (issue 62): each test reproduces one observed defect of `corank
//! merge` or `corank sort` on a damaged or unusual input — a panic (exit 101, or an abort
//! leaving the temporary output behind), an "internal error", a corrupt page merged into
//! the output — and checks the fixed behaviour: the rows merged as the oracle says, or one
//! line naming the file, row group, column (and page) with exit 1, and nothing left behind.

use crate::cli_common::{corank, files_in, read_file, text, write_file_with};
use arrow::array::*;
use arrow::datatypes::*;
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;

/// Writes `groups` (one row group each) with `props`.
fn write(path: &Path, groups: &[RecordBatch], props: parquet::file::properties::WriterPropertiesBuilder) {
    write_file_with(path, groups[0].schema(), groups, None, props);
}

/// A pandas categorical (`dictionary<int8|int16, string>`) whose values are null in a
/// whole output batch made `merge` and `sort --strategy runs` panic in arrow's
/// `normalized_keys` of an empty dictionary (exit 134, the temporary file and the spill
/// directory left behind). All-null and trailing-null categoricals, and one whose
/// dictionary holds no values at all, merge and sort like the oracle.
#[test]
fn categoricals_null_over_a_whole_batch_merge_and_sort() {
    let rows = 40_000usize;
    for key in [DataType::Int8, DataType::Int16] {
        for case in ["all null", "trailing nulls", "no values"] {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path();
            let c_type = DataType::Dictionary(Box::new(key.clone()), Box::new(DataType::Utf8));
            let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("c", c_type.clone(), true)]));
            // Two files whose keys interleave (every row merged), `c` as the case says.
            let file = |name: &str, parity: i64| {
                let k: Vec<i64> = (0..rows as i64).map(|i| 2 * i + parity).collect();
                let c: ArrayRef = match case {
                    "all null" => {
                        let values: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
                        let keys: ArrayRef = Arc::new(Int64Array::from(vec![None::<i64>; rows]));
                        let keys = arrow::compute::cast(&keys, &key).unwrap();
                        dictionary_of(&key, keys, values)
                    }
                    "trailing nulls" => {
                        let values: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
                        let keys: ArrayRef =
                            Arc::new(Int64Array::from((0..rows).map(|i| (i < 1000).then_some((i % 2) as i64)).collect::<Vec<_>>()));
                        let keys = arrow::compute::cast(&keys, &key).unwrap();
                        dictionary_of(&key, keys, values)
                    }
                    _ => {
                        let values: ArrayRef = Arc::new(StringArray::from(Vec::<&str>::new()));
                        let keys: ArrayRef = Arc::new(Int64Array::from(vec![None::<i64>; rows]));
                        let keys = arrow::compute::cast(&keys, &key).unwrap();
                        dictionary_of(&key, keys, values)
                    }
                };
                let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(k)), c]).unwrap();
                write(&dir.join(name), &[batch], WriterProperties::builder());
            };
            file("a.parquet", 0);
            file("b.parquet", 1);
            let p = |name: &str| dir.join(name).display().to_string();
            let want_k: Vec<i64> = (0..2 * rows as i64).collect();
            let want_c: Vec<Option<String>> = match case {
                "trailing nulls" => (0..2 * rows).map(|i| (i / 2 < 1000).then(|| ["a", "b"][(i / 2) % 2].to_string())).collect(),
                _ => vec![None; 2 * rows],
            };
            let runs: [&[&str]; 3] = [
                &["merge", &p("a.parquet"), &p("b.parquet"), "-o", &p("out.parquet"), "--by", "k"],
                &[
                    "sort",
                    &p("a.parquet"),
                    &p("b.parquet"),
                    "-o",
                    &p("out.parquet"),
                    "--by",
                    "k",
                    "--strategy",
                    "runs",
                    "--memory-limit",
                    "64MiB",
                ],
                &["sort", &p("a.parquet"), &p("b.parquet"), "-o", &p("out.parquet"), "--by", "k"],
            ];
            for args in runs {
                let out = corank(&[args, &["--force"][..]].concat());
                assert!(out.status.success(), "{key} {case} {args:?}: {}", text(&out.stderr));
                let (batches, _) = read_file(&dir.join("out.parquet"));
                let k: Vec<i64> = batches.iter().flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec()).collect();
                let c: Vec<Option<String>> = batches
                    .iter()
                    .flat_map(|b| {
                        let c = arrow::compute::cast(b.column(1), &DataType::Utf8).unwrap();
                        c.as_string::<i32>().iter().map(|s| s.map(str::to_string)).collect::<Vec<_>>()
                    })
                    .collect();
                assert!(k == want_k, "{key} {case} {args:?}: keys differ");
                assert!(c == want_c, "{key} {case} {args:?}: categories differ");
                assert_eq!(files_in(dir), ["a.parquet", "b.parquet", "out.parquet"], "{key} {case} {args:?}");
            }
        }
    }
}

/// A dictionary array of key type `key` over `values`.
fn dictionary_of(key: &DataType, keys: ArrayRef, values: ArrayRef) -> ArrayRef {
    match key {
        DataType::Int8 => Arc::new(DictionaryArray::new(keys.as_primitive::<Int8Type>().clone(), values)),
        DataType::Int16 => Arc::new(DictionaryArray::new(keys.as_primitive::<Int16Type>().clone(), values)),
        other => panic!("no dictionary of {other} keys here"),
    }
}

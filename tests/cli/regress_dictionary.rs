//! Regression (issue 10, defect 3): dictionary payload columns with small key types
//! (pandas `Categorical`, pyarrow `dictionary<int8, string>`) failed to merge with
//! "Dictionary key bigger than the key type" as soon as one output batch gathered rows of
//! runs whose dictionaries together exceeded the key type, even when all held the same
//! categories. The gather now merges dictionaries exactly, keeps the declared type, and
//! splits an output batch whose distinct values do not fit the key type.

use crate::common::Rng;
use arrow::array::*;
use arrow::compute::cast;
use arrow::datatypes::*;
use corank::{merge, Engine, MergeOptions, SortKey};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn cpu() -> MergeOptions {
    MergeOptions::default().with_engine(Engine::Cpu)
}

fn dict_type(key: &DataType, value: &DataType) -> DataType {
    DataType::Dictionary(Box::new(key.clone()), Box::new(value.clone()))
}

/// A dictionary array of key type `K`: `keys` index `values` (None: a null key).
fn dict_of<K: ArrowDictionaryKeyType>(keys: &[Option<usize>], values: ArrayRef) -> ArrayRef {
    let keys: PrimitiveArray<K> = keys.iter().map(|k| k.map(|k| K::Native::from_usize(k).unwrap())).collect();
    Arc::new(DictionaryArray::<K>::try_new(keys, values).unwrap())
}

fn dict_array(key: &DataType, keys: &[Option<usize>], values: ArrayRef) -> ArrayRef {
    match key {
        DataType::Int8 => dict_of::<Int8Type>(keys, values),
        DataType::Int16 => dict_of::<Int16Type>(keys, values),
        DataType::Int32 => dict_of::<Int32Type>(keys, values),
        DataType::Int64 => dict_of::<Int64Type>(keys, values),
        DataType::UInt8 => dict_of::<UInt8Type>(keys, values),
        DataType::UInt16 => dict_of::<UInt16Type>(keys, values),
        DataType::UInt32 => dict_of::<UInt32Type>(keys, values),
        DataType::UInt64 => dict_of::<UInt64Type>(keys, values),
        other => panic!("not a key type: {other}"),
    }
}

/// A fresh values array (its own buffers) of category ids `ids` (None: a null value).
fn category_values(value: &DataType, ids: &[Option<u64>]) -> ArrayRef {
    let name = |id: u64| format!("category-{id:04}");
    match value {
        DataType::Utf8 => Arc::new(ids.iter().map(|i| i.map(name)).collect::<StringArray>()),
        DataType::LargeUtf8 => Arc::new(ids.iter().map(|i| i.map(name)).collect::<LargeStringArray>()),
        DataType::Int64 => Arc::new(ids.iter().map(|i| i.map(|i| i as i64 * 7919 - 100_000)).collect::<Int64Array>()),
        other => panic!("no values of type {other}"),
    }
}

/// A run: sorted Int64 key `k` (ties across and within runs) and the dictionary column `v`.
fn run(k: Vec<i64>, v: ArrayRef) -> RecordBatch {
    RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", v)]).unwrap()
}

/// `v` of `batches` as text (dictionary values cast to Utf8), row by row.
fn texts(batches: &[RecordBatch]) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let s = cast(b.column_by_name("v").unwrap(), &DataType::Utf8).unwrap();
            s.as_string::<i32>().iter().map(|x| x.map(str::to_string)).collect::<Vec<_>>()
        })
        .collect()
}

fn keys_of(batches: &[RecordBatch]) -> Vec<i64> {
    batches.iter().flat_map(|b| b.column_by_name("k").unwrap().as_primitive::<Int64Type>().values().to_vec()).collect()
}

/// The oracle: the stable sort of the runs' concatenation by `k`, as (k, v text).
fn oracle(runs: &[RecordBatch]) -> (Vec<i64>, Vec<Option<String>>) {
    let keys = keys_of(runs);
    let vals = texts(runs);
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i]); // stable
    (order.iter().map(|&i| keys[i]).collect(), order.iter().map(|&i| vals[i].clone()).collect())
}

/// Checks `out` against the oracle, the column type and batch sizes; returns how many
/// batches hold a dictionary value twice (none when the merge is exact).
fn check(runs: &[RecordBatch], out: &[RecordBatch], want_type: &DataType, batch_size: usize, context: &str) -> usize {
    let (keys, vals) = oracle(runs);
    assert_eq!(keys_of(out), keys, "{context}: keys");
    let got = texts(out);
    assert_eq!(got.len(), vals.len(), "{context}: rows");
    for (i, (g, w)) in got.iter().zip(&vals).enumerate() {
        assert_eq!(g, w, "{context}: row {i}");
    }
    let mut duplicated = 0;
    for b in out {
        assert_eq!(b.schema().field_with_name("v").unwrap().data_type(), want_type, "{context}: schema");
        let col = b.column_by_name("v").unwrap();
        assert_eq!(col.data_type(), want_type, "{context}: column type");
        assert!(b.num_rows() <= batch_size && b.num_rows() > 0, "{context}: batch of {} rows", b.num_rows());
        let dict = col.as_any_dictionary();
        let values = dict.values();
        let distinct: HashSet<Option<String>> = {
            let s = cast(values, &DataType::Utf8).unwrap();
            s.as_string::<i32>().iter().map(|x| x.map(str::to_string)).collect()
        };
        duplicated += usize::from(distinct.len() != values.len());
    }
    duplicated
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// Sorted keys with many ties: `n` draws from 0..`domain`.
fn sorted_keys(rng: &mut Rng, n: usize, domain: u64) -> Vec<i64> {
    let mut k: Vec<i64> = (0..n).map(|_| rng.below(domain) as i64).collect();
    k.sort();
    k
}

/// pandas' Categorical: every run has the same 100 categories, each its own (differently
/// ordered) dictionary array; Int8 keys.
fn same_categories_runs(rng: &mut Rng, nruns: usize, rows: usize) -> Vec<RecordBatch> {
    (0..nruns)
        .map(|_| {
            let mut cats: Vec<Option<u64>> = (0..100).map(Some).collect();
            shuffle(rng, &mut cats);
            let values = category_values(&DataType::Utf8, &cats);
            let keys: Vec<Option<usize>> = (0..rows).map(|_| Some(rng.below(100) as usize)).collect();
            run(sorted_keys(rng, rows, 500), dict_array(&DataType::Int8, &keys, values))
        })
        .collect()
}

#[test]
fn int8_dictionaries_with_the_same_categories_merge() {
    let mut rng = Rng::new(10);
    let runs = same_categories_runs(&mut rng, 8, 1000);
    let want = dict_type(&DataType::Int8, &DataType::Utf8);
    let out = merge(&runs, &[SortKey::asc("k")], &cpu()).expect("merging int8 dictionaries with the same 100 categories");
    assert_eq!(check(&runs, &out, &want, 8192, "same 100 categories"), 0, "duplicate dictionary values");
    // 100 categories fit Int8 keys: the batches need no split.
    assert_eq!(out.len(), 1);
}

#[test]
fn dictionaries_whose_union_exceeds_the_key_type_split_batches() {
    // 3 runs with 100 categories each, all different: 300 distinct values, Int8 keys.
    let mut rng = Rng::new(11);
    let runs: Vec<RecordBatch> = (0..3u64)
        .map(|r| {
            let cats: Vec<Option<u64>> = (r * 100..r * 100 + 100).map(Some).collect();
            let keys: Vec<Option<usize>> = (0..2000).map(|_| Some(rng.below(100) as usize)).collect();
            run(sorted_keys(&mut rng, 2000, 1000), dict_array(&DataType::Int8, &keys, category_values(&DataType::Utf8, &cats)))
        })
        .collect();
    let want = dict_type(&DataType::Int8, &DataType::Utf8);
    let out = merge(&runs, &[SortKey::asc("k")], &cpu()).expect("merging int8 dictionaries of 300 distinct values");
    assert_eq!(check(&runs, &out, &want, 8192, "300 distinct values"), 0, "duplicate dictionary values");
    assert!(out.len() >= 3, "300 distinct values need at least 3 batches of Int8 keys, got {}", out.len());
    // The whole input is one batch of 6000 rows: the split cuts it into the fewest pieces
    // that fit (greedy), each a full 128 values except the last.
    for b in &out[..out.len() - 1] {
        assert_eq!(b.column(1).as_any_dictionary().values().len(), 128);
    }
}

/// Random runs with dictionary column `v` of `key`/`value` type: per run its own
/// dictionary of up to `per_run` categories from a domain of `domain`, with a duplicate, an
/// unreferenced entry and a null value at times, and null keys.
fn random_runs(rng: &mut Rng, key: &DataType, value: &DataType, per_run: u64, domain: u64) -> Vec<RecordBatch> {
    let nruns = if rng.chance(0.15) { 1 } else { 2 + rng.below(5) as usize };
    (0..nruns)
        .map(|_| {
            let n = if rng.chance(0.1) { 0 } else { rng.below(1500) as usize };
            let size = 1 + rng.below(per_run);
            let mut dict: Vec<Option<u64>> = (0..size).map(|_| Some(rng.below(domain))).collect();
            if rng.chance(0.3) {
                dict[rng.below(size) as usize] = None;
            }
            let used = if rng.chance(0.3) && size > 1 { size - 1 } else { size }; // the last entry unreferenced at times
            let values = category_values(value, &dict);
            let keys: Vec<Option<usize>> = (0..n).map(|_| if rng.chance(0.05) { None } else { Some(rng.below(used) as usize) }).collect();
            run(sorted_keys(rng, n, 300), dict_array(key, &keys, values))
        })
        .collect()
}

#[test]
fn every_key_width_and_value_type_merges_like_the_oracle() {
    use DataType::*;
    let mut rng = Rng::new(12);
    let mut duplicated = Vec::new();
    for key in [Int8, Int16, UInt8, UInt16, Int32, UInt32, Int64, UInt64] {
        // At most what one dictionary of this key type holds.
        let per_run = match key {
            Int8 => 128,
            UInt8 => 256,
            _ => 400,
        };
        for value in [Utf8, LargeUtf8, Int64] {
            for case in 0..6 {
                let domain = [50, 300, 2000][case % 3];
                let runs = random_runs(&mut rng, &key, &value, per_run, domain);
                let batch_size = [8192, 1000, 7][rng.below(3) as usize];
                let options = cpu().with_batch_size(batch_size);
                let context = format!("key {key}, value {value}, case {case}, {} runs, batch size {batch_size}", runs.len());
                let out = merge(&runs, &[SortKey::asc("k")], &options).unwrap_or_else(|e| panic!("{context}: {e}"));
                // (One run comes back as slices of itself, its dictionary as it was.)
                if check(&runs, &out, &dict_type(&key, &value), batch_size, &context) > 0 && runs.len() > 1 {
                    duplicated.push(context);
                }
            }
        }
    }
    assert!(duplicated.is_empty(), "batches with duplicate dictionary values: {duplicated:#?}");
}

/// A gather from more runs than it passes to arrow whole (64): each output batch takes the
/// arrays of only the runs it references, renumbered, for dictionary and plain columns
/// alike (issue 14: a sort's final gather read thousands of sorted pieces).
#[test]
fn gathers_from_hundreds_of_runs_like_the_oracle() {
    let mut rng = Rng::new(13);
    for (nruns, batch_size) in [(65, 8192), (150, 97), (300, 5)] {
        let runs: Vec<RecordBatch> = (0..nruns)
            .map(|_| {
                let n = rng.below(40) as usize;
                let size = 1 + rng.below(100);
                let values = category_values(&DataType::Utf8, &(0..size).map(|_| Some(rng.below(150))).collect::<Vec<_>>());
                let keys: Vec<Option<usize>> =
                    (0..n).map(|_| if rng.chance(0.05) { None } else { Some(rng.below(size) as usize) }).collect();
                run(sorted_keys(&mut rng, n, 200), dict_array(&DataType::Int8, &keys, values))
            })
            .collect();
        let context = format!("{nruns} runs, batch size {batch_size}");
        let options = cpu().with_batch_size(batch_size);
        let out = merge(&runs, &[SortKey::asc("k")], &options).unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_eq!(check(&runs, &out, &dict_type(&DataType::Int8, &DataType::Utf8), batch_size, &context), 0, "{context}: duplicates");
        // The same runs with the column as plain strings.
        let plain: Vec<RecordBatch> = runs
            .iter()
            .map(|b| run(keys_of(std::slice::from_ref(b)), cast(b.column_by_name("v").unwrap(), &DataType::Utf8).unwrap()))
            .collect();
        let out = merge(&plain, &[SortKey::asc("k")], &options).unwrap_or_else(|e| panic!("{context}, plain: {e}"));
        let (keys, vals) = oracle(&plain);
        assert_eq!(keys_of(&out), keys, "{context}, plain: keys");
        assert_eq!(texts(&out), vals, "{context}, plain: values");
    }
}

/// Writes `groups` as one Parquet file, one row group per batch (the Arrow schema stored,
/// so the column reads back as Dictionary(Int8, Utf8), as pyarrow writes categoricals).
fn write_file(path: &Path, groups: &[RecordBatch]) {
    let props = WriterProperties::builder().build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), groups[0].schema(), Some(props)).unwrap();
    for g in groups {
        w.write(g).unwrap();
        w.flush().unwrap();
    }
    w.close().unwrap();
}

fn read_file(path: &Path) -> Vec<RecordBatch> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    builder.build().unwrap().map(|b| b.unwrap()).collect()
}

/// The file's Arrow schema (as stored) and its rows read without it (`v` as Utf8): arrow's
/// Parquet reader refuses a column chunk whose dictionary holds more values than the stored
/// key type indexes, which a merge of files with different categories can produce.
fn read_file_plain(path: &Path) -> (SchemaRef, Vec<RecordBatch>) {
    let stored = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap().schema().clone();
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(std::fs::File::open(path).unwrap(), options).unwrap();
    (stored, builder.build().unwrap().map(|b| b.unwrap()).collect())
}

#[test]
fn parquet_categoricals_merge_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(13);
    let want = dict_type(&DataType::Int8, &DataType::Utf8);
    // Case 1: one file whose 4 row groups overlap (4 runs of one file), the same 100
    // categories each. Case 2: 3 files of 2 row groups each; case 3: 3 files whose
    // categories are all different (300 distinct in all).
    let cases: Vec<(usize, usize, bool)> = vec![(1, 4, false), (3, 2, false), (3, 2, true)];
    for (c, &(nfiles, groups, distinct)) in cases.iter().enumerate() {
        let mut paths = Vec::new();
        let mut inputs = Vec::new();
        for f in 0..nfiles {
            let batches: Vec<RecordBatch> = (0..groups)
                .map(|_| {
                    let base = if distinct { f as u64 * 100 } else { 0 };
                    let mut cats: Vec<Option<u64>> = (base..base + 100).map(Some).collect();
                    shuffle(&mut rng, &mut cats);
                    let keys: Vec<Option<usize>> =
                        (0..3000).map(|_| if rng.chance(0.02) { None } else { Some(rng.below(100) as usize) }).collect();
                    run(sorted_keys(&mut rng, 3000, 5000), dict_array(&DataType::Int8, &keys, category_values(&DataType::Utf8, &cats)))
                })
                .collect();
            let path = dir.path().join(format!("case{c}-in{f}.parquet"));
            write_file(&path, &batches);
            let back = read_file(&path);
            assert_eq!(back[0].schema().field(1).data_type(), &want, "Parquet gives back Dictionary(Int8, Utf8)");
            inputs.extend(back);
            paths.push(path);
        }
        let output = dir.path().join(format!("case{c}-out.parquet"));
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(paths.iter().map(|p| p.display().to_string()));
        // A small memory limit: every run of 3,000 rows arrives in several batches (the first
        // batch of a run is at most 1,024 rows), each with its own dictionary.
        args.extend(
            ["-o", &output.display().to_string(), "--by", "k", "--engine", "cpu", "--memory-limit", "8MiB", "--row-group-size", "5000"]
                .map(String::from),
        );
        let out = Command::new(env!("CARGO_BIN_EXE_corank")).args(&args).env("CORANK_REQUIRE_GPU", "0").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "case {c}: {args:?}: stderr: {stderr}");
        let (stored, merged) = read_file_plain(&output);
        // 100 categories keep Dictionary(Int8, Utf8); 300 in a row group (more than Int8
        // indexes) store the narrowest key type that holds them, so readers accept the
        // file's dictionary pages.
        let stored_type = if distinct { dict_type(&DataType::Int16, &DataType::Utf8) } else { want.clone() };
        assert_eq!(stored.field(1).data_type(), &stored_type, "case {c}: output type");
        let (keys, vals) = oracle(&inputs);
        assert_eq!(keys_of(&merged), keys, "case {c}: keys");
        assert!(texts(&merged) == vals, "case {c}: values differ from the oracle");
        // The output reads back with its stored schema (arrow-rs checks every dictionary
        // page against the key type).
        let back = read_file(&output);
        assert_eq!(keys_of(&back), keys, "case {c}: keys read back with the stored schema");
        for b in &back {
            assert_eq!(b.schema().field(1).data_type(), &stored_type, "case {c}: output type read back");
        }
    }
}

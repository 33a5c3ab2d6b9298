//! Test support for the command line's tests: the `corank` binary and its output, and the
//! Parquet files a test writes and reads back.
#![allow(dead_code)]

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::compute::SortOptions;
use arrow::datatypes::{Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

/// Sort key columns by name, as the tests declare them.
pub type Keys = Vec<(String, SortOptions)>;

/// The binary, with no GPU required and no `RUST_LOG` from the environment (a test that
/// counts stderr's lines sees corank's own).
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_corank"));
    c.env("CORANK_REQUIRE_GPU", "0").env_remove("RUST_LOG");
    c
}

/// Runs `corank ARGS` to its end.
pub fn corank(args: &[&str]) -> Output {
    command().args(args).output().expect("the corank binary runs")
}

/// A path as the `&str` an argument list takes (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `corank ARGS`, which must succeed; its output.
pub fn ok(args: &[&str]) -> Output {
    let out = corank(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    out
}

pub fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// The names of the files in `dir`, sorted (a test checks that nothing else is left: no
/// output, no temporary file).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `keys` as the `sorting_columns` of a file of `schema`.
pub fn sorting_columns(schema: &Schema, keys: &Keys) -> Vec<SortingColumn> {
    keys.iter()
        .map(|(name, o)| SortingColumn {
            column_idx: schema.index_of(name).unwrap() as i32,
            descending: o.descending,
            nulls_first: o.nulls_first,
        })
        .collect()
}

/// Writes `groups` (of `schema`, maybe none) as one file, one row group per batch, with
/// `props` and `sorting` declared as `sorting_columns`.
pub fn write_file_with(path: &Path, schema: SchemaRef, groups: &[RecordBatch], sorting: Option<&Keys>, props: WriterPropertiesBuilder) {
    let props = props.set_sorting_columns(sorting.map(|keys| sorting_columns(&schema, keys))).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props)).unwrap();
    for g in groups {
        w.write(g).unwrap();
        w.flush().unwrap();
    }
    w.close().unwrap();
}

/// Writes `groups` (at least one) as one file, one row group per batch, uncompressed, with
/// `sorting` declared as `sorting_columns`.
pub fn write_file(path: &Path, groups: &[RecordBatch], sorting: Option<&Keys>) {
    write_file_with(path, groups[0].schema(), groups, sorting, WriterProperties::builder());
}

/// A file's batches and its first row group's `sorting_columns`.
pub fn read_file(path: &Path) -> (Vec<RecordBatch>, Option<Vec<SortingColumn>>) {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    let sorting = builder.metadata().row_groups().first().and_then(|g| g.sorting_columns().cloned());
    (builder.build().unwrap().map(|b| b.unwrap()).collect(), sorting)
}

/// Runs `corank ARGS` expecting failure with `code`; checks the message is one line
/// mentioning `needle`, and that `dir` holds exactly `left` afterwards.
pub fn expect_failure(dir: &Path, args: &[&str], code: i32, needle: &str, left: &[&str]) {
    let out = corank(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: stderr {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: not one line: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: '{needle}' not in: {stderr}");
    assert_eq!(files_in(dir), left, "{args:?}: files left behind");
}

/// Writes `groups` (at least one) as one file, one row group per batch, with `compression`
/// and `sorting` declared as `sorting_columns`.
pub fn write_compressed(path: &Path, groups: &[RecordBatch], sorting: Option<&Keys>, compression: parquet::basic::Compression) {
    write_file_with(path, groups[0].schema(), groups, sorting, WriterProperties::builder().set_compression(compression));
}

/// A small file with columns `k` (Int64) and `v` (Utf8, `v` and the key), `k` as given, one
/// row group a group; `sorting_columns` says `k ASC NULLS LAST` when `declared`.
pub fn simple_file(path: &Path, groups: &[Vec<i64>], declared: bool) {
    let batches: Vec<RecordBatch> = groups
        .iter()
        .map(|k| {
            let v: Vec<String> = k.iter().map(|x| format!("v{x}")).collect();
            RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(k.clone())) as ArrayRef),
                ("v", Arc::new(StringArray::from(v)) as ArrayRef),
            ])
            .unwrap()
        })
        .collect();
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    write_file(path, &batches, declared.then_some(&keys));
}

/// The bad inputs every command shares, in `dir` beside its `a.parquet`: `text.parquet`
/// (not Parquet), `trunc.parquet` (`a.parquet` less its last 10 bytes) and `other.parquet`
/// (`k` and `v` of another type).
pub fn bad_files(dir: &Path) {
    std::fs::write(dir.join("text.parquet"), "not parquet at all").unwrap();
    let good = std::fs::read(dir.join("a.parquet")).unwrap();
    std::fs::write(dir.join("trunc.parquet"), &good[..good.len() - 10]).unwrap();
    let other = RecordBatch::try_from_iter([
        ("k", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
        ("v", Arc::new(StringArray::from(vec!["y"])) as ArrayRef),
    ])
    .unwrap();
    write_file(&dir.join("other.parquet"), &[other], None);
}

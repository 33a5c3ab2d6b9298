//! Passthrough from objects: a merge whose inputs are in S3 (moto's server, as in
//! `store.rs`) copies the row groups that need no merge unchanged, fetched by range
//! requests, as it does from local files, and its output holds the rows of the merge that
//! decodes everything (`--passthrough never`). One input has no offset index, so the
//! copied row groups' offset indexes are built from page headers read from the object.

use crate::cli_common::{read_file, s, text, write_file_with, Keys};
use crate::common::moto::{bucket, get};
use crate::store::{corank_s3_command, keys_and_uploads, upload};
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::compute::{concat_batches, SortOptions};
use parquet::basic::Compression;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use std::path::Path;
use std::sync::Arc;

/// A row group of keys `from..to` (step 1) with a string column.
fn group(name: &str, from: i64, to: i64) -> RecordBatch {
    let k: Vec<i64> = (from..to).collect();
    let v: Vec<String> = k.iter().map(|k| format!("{name}{k}-{}", "y".repeat((*k % 13) as usize))).collect();
    RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
        .unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = corank_s3_command().args(args).arg("--json").output().expect("the corank binary runs");
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rows(path: &Path) -> RecordBatch {
    let (batches, sorting) = read_file(path);
    assert!(sorting.is_some_and(|s| !s.is_empty()), "{}: sorting_columns set", path.display());
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

#[test]
fn row_groups_of_objects_pass_through_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    // a and b interleave by row group without overlapping; c's one row group overlaps a's
    // last. So a0, b0, a1, b1 (4 × 3000 rows) can be copied, a2 and c0 are merged.
    let (a, b, c) = (d.join("a.parquet"), d.join("b.parquet"), d.join("c.parquet"));
    // zstd, the output's codec: `--passthrough auto` copies only row groups in it.
    let small_pages = || {
        WriterProperties::builder()
            .set_data_page_row_count_limit(500)
            .set_write_batch_size(500)
            .set_compression(Compression::ZSTD(Default::default()))
    };
    let a_groups = [group("a", 0, 3000), group("a", 6000, 9000), group("a", 12000, 15000)];
    write_file_with(&a, a_groups[0].schema(), &a_groups, Some(&keys), small_pages());
    // b without an offset index (chunk statistics only: a page-level one would bring it).
    let b_groups = [group("b", 3000, 6000), group("b", 9000, 12000)];
    let no_index = small_pages().set_statistics_enabled(EnabledStatistics::Chunk).set_offset_index_disabled(true);
    write_file_with(&b, b_groups[0].schema(), &b_groups, Some(&keys), no_index);
    write_file_with(&c, a_groups[0].schema(), &[group("c", 14000, 16000)], Some(&keys), small_pages());
    let bk = bucket("passthrough");
    let remote = upload(&bk, &[a.clone(), b.clone(), c.clone()]);
    let remote: Vec<&str> = remote.iter().map(String::as_str).collect();
    let locals = [s(&a), s(&b), s(&c)];

    // The oracle: every row group decoded and merged, from the local files.
    let oracle_path = d.join("oracle.parquet");
    let v = json(&[&["merge", "-q", "--passthrough", "never"], &locals[..], &["-o", s(&oracle_path)]].concat());
    assert_eq!(v["passthrough_rows"].as_u64(), Some(0), "{v}");
    let oracle = rows(&oracle_path);
    assert_eq!(oracle.num_rows(), 17_000);

    // The plan says what is copied, from objects as from files.
    let dry =
        corank_s3_command().args([&["merge", "--dry-run"], &remote[..], &["-o", s(&d.join("dry.parquet"))]].concat()).output().unwrap();
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let plan = text(&dry.stdout);
    assert!(plan.contains("passthrough auto: 12,000 rows in 4 row groups copied untouched"), "{plan}");

    // S3 to S3, S3 to a local file, and a mix of both kinds of input.
    let target = format!("s3://{bk}/out/merged.parquet");
    let v = json(&[&["merge", "-q"], &remote[..], &["-o", &target]].concat());
    assert_eq!((v["passthrough_rows"].as_u64(), v["passthrough_row_groups"].as_u64()), (Some(12_000), Some(4)), "{v}");
    let merged = d.join("merged.parquet");
    std::fs::write(&merged, get(&bk, "out/merged.parquet")).unwrap();
    assert_eq!(rows(&merged), oracle);
    let to_local = d.join("to-local.parquet");
    let v = json(&[&["merge", "-q"], &remote[..], &["-o", s(&to_local)]].concat());
    assert_eq!(v["passthrough_rows"].as_u64(), Some(12_000), "{v}");
    assert_eq!(rows(&to_local), oracle);
    let mixed = d.join("mixed.parquet");
    let v = json(&["merge", "-q", remote[0], locals[1], remote[2], "-o", s(&mixed)]);
    assert_eq!(v["passthrough_rows"].as_u64(), Some(12_000), "{v}");
    assert_eq!(rows(&mixed), oracle);
    // The copied row groups carry offset indexes (b's built from its page headers).
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required)
        .parse_and_finish(&std::fs::File::open(&to_local).unwrap())
        .unwrap();
    assert!(meta.offset_index().is_some_and(|oi| oi.iter().all(|rg| rg.len() == 2)), "every chunk has an offset index");
    let (_, uploads) = keys_and_uploads(&bk);
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

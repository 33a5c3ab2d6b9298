//! Passthrough (issue 13, item 1): row groups that need no merge are copied unchanged.
//! Every merge here is checked against the oracle (the stable sort of the inputs'
//! concatenation, by arrow-row bytes) through a global row id, and the summary's counts
//! against the row groups that should (or should not) pass; one test proves the copy by the
//! column chunks' bytes.

use crate::common::{oracle, Rng};
use arrow::array::*;
use arrow::compute::{concat_batches, SortOptions};
use arrow::datatypes::*;
use corank::parquet::merge::passthrough::schedule_for;
use corank::parquet::plan_merge;
use corank::parquet::{merge_files, MergeFilesOptions, MergeSummary, Passthrough};
use corank::SortKey;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Keys = Vec<(String, SortOptions)>;

fn opts(descending: bool, nulls_first: bool) -> SortOptions {
    SortOptions { descending, nulls_first }
}

/// A file of one row group per batch.
fn write_file(path: &Path, groups: &[RecordBatch], props: WriterPropertiesBuilder) {
    let schema = groups[0].schema();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props.build())).unwrap();
    for g in groups {
        w.write(g).unwrap();
        w.flush().unwrap();
    }
    w.close().unwrap();
}

fn read_all(path: &Path) -> RecordBatch {
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
    concat_batches(&schema, &batches).unwrap()
}

fn footer(path: &Path) -> ParquetMetaData {
    ParquetMetaDataReader::new().parse_and_finish(&std::fs::File::open(path).unwrap()).unwrap()
}

/// Batches with columns `k0..` (the given arrays) and `id` numbering the rows from `first_id`.
fn group(keys: Vec<ArrayRef>, first_id: &mut u64) -> RecordBatch {
    let n = keys[0].len() as u64;
    let mut fields: Vec<(String, ArrayRef, bool)> = keys.into_iter().enumerate().map(|(i, a)| (format!("k{i}"), a, true)).collect();
    fields.push(("id".into(), Arc::new(UInt64Array::from_iter_values(*first_id..*first_id + n)), true));
    *first_id += n;
    RecordBatch::try_from_iter_with_nullable(fields).unwrap()
}

fn ints(v: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(Int64Array::from_iter(v))
}

fn int_range(r: std::ops::Range<i64>) -> ArrayRef {
    ints(r.map(Some))
}

/// Merges `files` (each a list of row groups) by `keys` with `options`, checks the output
/// against the oracle and its `sorting_columns`, and returns the summary and the output.
struct Case {
    dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    inputs: Vec<RecordBatch>,
}

fn case(files: &[Vec<RecordBatch>], props: impl Fn() -> WriterPropertiesBuilder) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut inputs = Vec::new();
    for (i, groups) in files.iter().enumerate() {
        let path = dir.path().join(format!("in{i:02}.parquet"));
        write_file(&path, groups, props());
        inputs.push(concat_batches(&groups[0].schema(), groups).unwrap());
        paths.push(path);
    }
    Case { dir, paths, inputs }
}

impl Case {
    fn merge(&self, keys: &Keys, options: &MergeFilesOptions) -> (MergeSummary, PathBuf) {
        let out = self.dir.path().join(format!("out-{}.parquet", options.passthrough));
        let _ = std::fs::remove_file(&out);
        let by: Vec<SortKey> = keys.iter().map(|(c, o)| SortKey::new(c.clone(), *o)).collect();
        let plan = plan_merge(&self.paths, Some(by)).unwrap();
        let summary = merge_files(&plan, &out, options, &|_| {}).unwrap();
        // The dry run's plan is the merge's.
        let planned = schedule_for(&plan, options).unwrap();
        assert_eq!((planned.rows(), planned.blocks.len()), (summary.passthrough_rows, summary.passthrough_row_groups));
        // The oracle, through the ids.
        let ids: Vec<u64> = {
            let all: Vec<u64> =
                self.inputs.iter().flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect();
            oracle(&self.inputs, keys).into_iter().map(|i| all[i]).collect()
        };
        let got = read_all(&out);
        let got_ids = got.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec();
        assert_eq!(got_ids, ids, "output differs from the oracle ({})", options.passthrough);
        assert_eq!(summary.rows, ids.len());
        // Every row group declares the key.
        let meta = footer(&out);
        for rg in meta.row_groups() {
            let sorting = rg.sorting_columns().expect("sorting_columns");
            assert_eq!(sorting.len(), keys.len());
            for (s, (_, o)) in sorting.iter().zip(keys) {
                assert_eq!((s.descending, s.nulls_first), (o.descending, o.nulls_first));
            }
        }
        assert_eq!(summary.output_row_groups, meta.num_row_groups());
        (summary, out)
    }

    /// Merges with `Never` and `Auto` (both checked against the oracle) and returns the
    /// `Auto` summary.
    fn merge_both(&self, keys: &Keys) -> MergeSummary {
        let (never, _) = self.merge(keys, &MergeFilesOptions { passthrough: Passthrough::Never, ..Default::default() });
        assert_eq!((never.passthrough_rows, never.passthrough_row_groups), (0, 0));
        self.merge(keys, &MergeFilesOptions::default()).0
    }
}

/// The inputs' writer settings: the output's default codec (zstd), so `Auto` copies.
fn plain() -> WriterPropertiesBuilder {
    WriterProperties::builder().set_compression(Compression::ZSTD(Default::default()))
}

fn key0(o: SortOptions) -> Keys {
    vec![("k0".into(), o)]
}

#[test]
fn disjoint_files_pass_through_whole() {
    // Three files of four row groups each, key ranges apart, named out of key order.
    let mut id = 0;
    let ranges = [(400, 800), (0, 400), (800, 1200)];
    let files: Vec<Vec<RecordBatch>> = ranges
        .iter()
        .map(|&(lo, hi)| (0..4).map(|q| group(vec![int_range(lo + q * (hi - lo) / 4..lo + (q + 1) * (hi - lo) / 4)], &mut id)).collect())
        .collect();
    let c = case(&files, plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!((s.passthrough_rows, s.passthrough_row_groups), (1200, 12));
    assert_eq!(s.output_row_groups, 12, "a copied row group keeps its size");
    assert_eq!(s.passthrough_codec_kept_row_groups, 0);
}

#[test]
fn touching_boundaries_follow_stability() {
    // Input 0 ends with key 10, input 1 starts with 10: input 0's rows come first, so both
    // row groups at the boundary pass.
    let mut id = 0;
    let a = vec![group(vec![int_range(0..6)], &mut id), group(vec![ints([6, 8, 10, 10].map(Some))], &mut id)];
    let b = vec![group(vec![ints([10, 10, 11].map(Some))], &mut id), group(vec![int_range(12..20)], &mut id)];
    let c = case(&[a.clone(), b.clone()], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!(s.passthrough_row_groups, 4);
    // The other way round: input 0 starts where input 1 ends, so input 0's key-10 rows come
    // first although their row group sorts after: the two row groups that meet are merged.
    let mut id = 0;
    let b2: Vec<RecordBatch> = b.iter().map(|g| group(vec![g.column(0).clone()], &mut id)).collect();
    let a2: Vec<RecordBatch> = a.iter().map(|g| group(vec![g.column(0).clone()], &mut id)).collect();
    let c = case(&[b2, a2], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!(s.passthrough_row_groups, 2);
    assert_eq!(s.passthrough_rows, 6 + 8);
}

#[test]
fn partly_overlapping_files_merge_only_the_overlap() {
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..4).map(|q| group(vec![int_range(q * 250..(q + 1) * 250)], &mut id)).collect();
    let b: Vec<RecordBatch> = (0..4).map(|q| group(vec![int_range(900 + q * 250..900 + (q + 1) * 250)], &mut id)).collect();
    let c = case(&[a, b], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    // A's last row group (750..1000) and B's first (900..1150) overlap.
    assert_eq!(s.passthrough_row_groups, 6);
    assert_eq!(s.passthrough_rows, 1500);
}

#[test]
fn fully_overlapping_files_are_merged() {
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..3).map(|q| group(vec![ints((q * 100..(q + 1) * 100).map(|x| Some(x * 2)))], &mut id)).collect();
    let b: Vec<RecordBatch> = (0..3).map(|q| group(vec![ints((q * 100..(q + 1) * 100).map(|x| Some(x * 2 + 1)))], &mut id)).collect();
    let c = case(&[a, b], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!(s.passthrough_row_groups, 0);
}

#[test]
fn nulls_at_either_end() {
    for nulls_first in [true, false] {
        for descending in [false, true] {
            let o = opts(descending, nulls_first);
            // Values of each file in sort order, nulls where they sort.
            let sorted = |lo: i64, hi: i64, nulls: usize| -> Vec<Option<i64>> {
                let mut v: Vec<Option<i64>> = (lo..hi).map(Some).collect();
                if descending {
                    v.reverse();
                }
                let n = vec![None; nulls];
                if nulls_first {
                    n.into_iter().chain(v).collect()
                } else {
                    v.into_iter().chain(n).collect()
                }
            };
            let split = |v: Vec<Option<i64>>, size: usize, id: &mut u64| -> Vec<RecordBatch> {
                v.chunks(size).map(|c| group(vec![ints(c.to_vec())], id)).collect()
            };
            // Only input 0 has nulls: its null row group sits at one end, apart from input 1.
            let (lo_a, lo_b) = if descending { (200, 0) } else { (0, 200) };
            let mut id = 0;
            let a = split(sorted(lo_a, lo_a + 100, 30), 50, &mut id);
            let b = split(sorted(lo_b, lo_b + 100, 0), 50, &mut id);
            let total = a.len() + b.len();
            let c = case(&[a, b], plain);
            let s = c.merge_both(&key0(o));
            assert_eq!(s.passthrough_row_groups, total, "nulls only in input 0, {o:?}");
            // Both have nulls, in row groups that also hold values: those overlap at the
            // null end (a row group of nulls alone would pass: the earlier input's first).
            let mut id = 0;
            let a = split(sorted(lo_a, lo_a + 100, 30), 40, &mut id);
            let b = split(sorted(lo_b, lo_b + 100, 20), 40, &mut id);
            let total = a.len() + b.len();
            let c = case(&[a, b], plain);
            let s = c.merge_both(&key0(o));
            assert!(s.passthrough_row_groups < total, "{o:?}");
        }
    }
}

#[test]
fn descending_keys() {
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..3).map(|q| group(vec![ints((0..100).map(|x| Some(1000 - q * 100 - x)))], &mut id)).collect();
    let b: Vec<RecordBatch> = (0..3).map(|q| group(vec![ints((0..100).map(|x| Some(2000 - q * 100 - x)))], &mut id)).collect();
    let c = case(&[a, b], plain);
    let s = c.merge_both(&key0(opts(true, false)));
    assert_eq!(s.passthrough_row_groups, 6);
    // Read ascending, the same files are not sorted: an error, not a wrong file.
    let by = vec![SortKey::asc("k0")];
    let plan = plan_merge(&c.paths, Some(by)).unwrap();
    let err = merge_files(&plan, &c.dir.path().join("bad.parquet"), &MergeFilesOptions::default(), &|_| {}).unwrap_err();
    assert!(err.to_string().contains("not sorted"), "{err}");
    assert!(!c.dir.path().join("bad.parquet").exists());
}

#[test]
fn multi_column_keys() {
    // (k0 ASC, k1 DESC). Inputs meet on k0 = 10: the row groups there pass only when their
    // k1 ranges are apart in the key order (and the earlier input's rows come first).
    let o = vec![("k0".to_string(), opts(false, false)), ("k1".to_string(), opts(true, false))];
    let rows = |k0: Vec<i64>, k1: Vec<i64>, id: &mut u64| group(vec![ints(k0.into_iter().map(Some)), ints(k1.into_iter().map(Some))], id);
    // Apart: input 0's k0 = 10 rows have k1 in 20..=15, input 1's k1 in 5..=0 (DESC: later).
    let mut id = 0;
    let a = vec![rows(vec![1, 2, 3], vec![0, 0, 0], &mut id), rows(vec![10, 10, 10], vec![20, 17, 15], &mut id)];
    let b = vec![rows(vec![10, 10, 10], vec![5, 3, 0], &mut id), rows(vec![11, 12], vec![9, 9], &mut id)];
    let c = case(&[a, b], plain);
    let s = c.merge_both(&o);
    assert_eq!(s.passthrough_row_groups, 4);
    // Interleaved on k1 within k0 = 10: those two row groups are merged.
    let mut id = 0;
    let a = vec![rows(vec![1, 2, 3], vec![0, 0, 0], &mut id), rows(vec![10, 10, 10], vec![20, 5, 1], &mut id)];
    let b = vec![rows(vec![10, 10, 10], vec![9, 3, 0], &mut id), rows(vec![11, 12], vec![9, 9], &mut id)];
    let c = case(&[a, b], plain);
    let s = c.merge_both(&o);
    assert_eq!(s.passthrough_row_groups, 2);
    // k0 ties across inputs with k1 ranges that would pass per column but the tuple
    // bound is what counts: input 1 first in key order on k1 (DESC), input 0 second.
    let mut id = 0;
    let a = vec![rows(vec![10, 10], vec![2, 1], &mut id)];
    let b = vec![rows(vec![10, 10], vec![9, 8], &mut id)];
    let c = case(&[a, b], plain);
    let s = c.merge_both(&o);
    assert_eq!(s.passthrough_row_groups, 2);
}

#[test]
fn string_keys_exact_and_truncated() {
    let strings = |prefix: &str, r: std::ops::Range<u32>| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(r.map(|i| format!("{prefix}{i:06}"))))
    };
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..3).map(|q| group(vec![strings("a", q * 100..(q + 1) * 100)], &mut id)).collect();
    let b: Vec<RecordBatch> = (0..3).map(|q| group(vec![strings("b", q * 100..(q + 1) * 100)], &mut id)).collect();
    let c = case(&[b.clone(), a.clone()], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!(s.passthrough_row_groups, 6);
    // Long values with statistics truncated to 4 bytes: not exact, so decoded.
    let long = |prefix: &str, r: std::ops::Range<u32>| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(r.map(|i| format!("{prefix}{}{i:06}", "x".repeat(40)))))
    };
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..3).map(|q| group(vec![long("a", q * 100..(q + 1) * 100)], &mut id)).collect();
    let b: Vec<RecordBatch> = (0..3).map(|q| group(vec![long("b", q * 100..(q + 1) * 100)], &mut id)).collect();
    let c = case(&[b, a], || plain().set_statistics_truncate_length(Some(4)));
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!(s.passthrough_row_groups, 0);
}

/// The byte range of column chunk `c` of row group `g` in a file.
fn chunk_bytes(path: &Path, meta: &ParquetMetaData, g: usize, c: usize) -> Vec<u8> {
    let col = meta.row_group(g).column(c);
    let start = col.dictionary_page_offset().unwrap_or(col.data_page_offset()) as usize;
    let bytes = std::fs::read(path).unwrap();
    bytes[start..start + col.compressed_size() as usize].to_vec()
}

#[test]
fn copied_chunks_are_the_input_bytes() {
    let mut id = 0;
    let mut rng = Rng::new(7);
    let payload =
        |n: usize, rng: &mut Rng| -> ArrayRef { Arc::new(StringArray::from_iter_values((0..n).map(|_| format!("p{}", rng.below(1000))))) };
    let g = |lo: i64, n: i64, rng: &mut Rng, id: &mut u64| {
        let b = group(vec![int_range(lo..lo + n)], id);
        let mut cols = b.columns().to_vec();
        cols.push(payload(n as usize, rng));
        let mut fields: Vec<Field> = b.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("payload", DataType::Utf8, true));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    };
    let a = vec![g(0, 300, &mut rng, &mut id), g(300, 300, &mut rng, &mut id)];
    let b = vec![g(1000, 200, &mut rng, &mut id), g(1200, 400, &mut rng, &mut id)];
    let props = || WriterProperties::builder().set_compression(Compression::ZSTD(Default::default()));
    let c = case(&[a, b], props);
    let keys = key0(opts(false, false));
    let (s, out) = c.merge(&keys, &MergeFilesOptions::default());
    assert_eq!(s.passthrough_row_groups, 4);
    let out_meta = footer(&out);
    assert_eq!(out_meta.num_row_groups(), 4);
    // Output row group k is input row group k of the files in key order.
    let sources = [(0, 0), (0, 1), (1, 0), (1, 1)];
    for (k, &(f, g)) in sources.iter().enumerate() {
        let in_meta = footer(&c.paths[f]);
        assert_eq!(out_meta.row_group(k).num_rows(), in_meta.row_group(g).num_rows());
        for col in 0..in_meta.row_group(g).num_columns() {
            assert_eq!(chunk_bytes(&out, &out_meta, k, col), chunk_bytes(&c.paths[f], &in_meta, g, col), "row group {k} column {col}");
        }
    }
    // Never: nothing copied; the rows are re-encoded into one row group.
    let (s, out) = c.merge(&keys, &MergeFilesOptions { passthrough: Passthrough::Never, ..Default::default() });
    assert_eq!((s.passthrough_rows, s.passthrough_row_groups), (0, 0));
    let out_meta = footer(&out);
    assert_eq!(out_meta.num_row_groups(), 1);
    for (f, g) in sources {
        let in_meta = footer(&c.paths[f]);
        assert_ne!(chunk_bytes(&out, &out_meta, 0, 0), chunk_bytes(&c.paths[f], &in_meta, g, 0));
    }
}

/// Many phases, each cut into several small encoded row groups, alternate with copied row
/// groups: the copies wait in line behind the encodes still in flight, and the next
/// phase's runs decode while the one before merges. The output must still be the oracle,
/// in order, with every copied row group's chunks the input's bytes.
#[test]
fn copies_queue_behind_encodes_across_many_phases() {
    let mut id = 0;
    // Five time-partitioned files of six row groups of 40 keys; each file's first and last
    // row groups overlap the neighbours' (one phase per boundary), the rest pass through.
    let files: Vec<Vec<RecordBatch>> =
        (0..5i64).map(|f| (0..6i64).map(|q| group(vec![int_range(f * 220 + q * 40..f * 220 + q * 40 + 40)], &mut id)).collect()).collect();
    let c = case(&files, plain);
    let keys = key0(opts(false, false));
    // Copies read ahead into memory, and (row groups of at most 1 byte of Arrow data, so
    // every copy is more than the copies may hold) streamed from their files.
    for row_group_bytes in [128 << 20, 1] {
        let writer = corank::parquet::WriterSettings { row_group_rows: 7, row_group_bytes, ..Default::default() };
        check_copies_in_order(&c, &keys, writer);
    }
}

fn check_copies_in_order(c: &Case, keys: &Keys, writer: corank::parquet::WriterSettings) {
    let (s, out) = c.merge(keys, &MergeFilesOptions { writer, ..Default::default() });
    assert!(s.passthrough_row_groups >= 10, "{} row groups copied", s.passthrough_row_groups);
    // Each copied row group is found, byte for byte, in the input, in file order.
    let out_meta = footer(&out);
    let mut found = Vec::new();
    for k in 0..out_meta.num_row_groups() {
        let bytes = chunk_bytes(&out, &out_meta, k, 1);
        for (f, path) in c.paths.iter().enumerate() {
            let in_meta = footer(path);
            for g in 0..in_meta.num_row_groups() {
                if in_meta.row_group(g).num_rows() == out_meta.row_group(k).num_rows() && chunk_bytes(path, &in_meta, g, 1) == bytes {
                    found.push((f, g));
                }
            }
        }
    }
    assert_eq!(found.len(), s.passthrough_row_groups, "copied row groups found in the inputs: {found:?}");
    assert!(found.windows(2).all(|w| w[0] < w[1]), "copied row groups out of order: {found:?}");
    // The merged rows were cut into row groups of at most 7 rows around the copies.
    let merged_groups = out_meta.num_row_groups() - s.passthrough_row_groups;
    assert!(merged_groups >= (s.rows - s.passthrough_rows).div_ceil(7), "{merged_groups} merged row groups");
}

#[test]
fn codec_mismatch_auto_decodes_always_keeps() {
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..2).map(|q| group(vec![int_range(q * 100..(q + 1) * 100)], &mut id)).collect();
    let b: Vec<RecordBatch> = (0..2).map(|q| group(vec![int_range(500 + q * 100..500 + (q + 1) * 100)], &mut id)).collect();
    let c = case(&[a, b], || WriterProperties::builder().set_compression(Compression::SNAPPY));
    let keys = key0(opts(false, false));
    // The output is zstd (the default): Auto decodes.
    let (s, out) = c.merge(&keys, &MergeFilesOptions::default());
    assert_eq!(s.passthrough_row_groups, 0);
    for rg in footer(&out).row_groups() {
        assert!(rg.columns().iter().all(|col| matches!(col.compression(), Compression::ZSTD(_))));
    }
    // Always copies them, snappy kept, and says so.
    let (s, out) = c.merge(&keys, &MergeFilesOptions { passthrough: Passthrough::Always, ..Default::default() });
    assert_eq!((s.passthrough_row_groups, s.passthrough_codec_kept_row_groups, s.passthrough_rows), (4, 4, 400));
    for rg in footer(&out).row_groups() {
        assert!(rg.columns().iter().all(|col| col.compression() == Compression::SNAPPY));
    }
    // With a snappy output, Auto copies them.
    let mut o = MergeFilesOptions::default();
    o.writer.compression = Compression::SNAPPY;
    let (s, _) = c.merge(&keys, &o);
    assert_eq!((s.passthrough_row_groups, s.passthrough_codec_kept_row_groups), (4, 0));
}

#[test]
fn an_unsorted_row_group_is_caught_though_copied() {
    // Input 0's second row group is apart from input 1 by its statistics but not sorted
    // inside: the merge fails and writes nothing.
    let mut id = 0;
    let a = vec![group(vec![int_range(0..10)], &mut id), group(vec![ints([15, 12, 14, 19].map(Some))], &mut id)];
    let b = vec![group(vec![int_range(100..110)], &mut id)];
    let c = case(&[a, b], plain);
    let plan = plan_merge(&c.paths, Some(vec![SortKey::asc("k0")])).unwrap();
    let out = c.dir.path().join("bad.parquet");
    let err = merge_files(&plan, &out, &MergeFilesOptions::default(), &|_| {}).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("not sorted") && text.contains("row group 1"), "{text}");
    assert!(!out.exists());
}

/// Inputs without page indexes (DuckDB and parquet-mr before 1.11 write none): their copied
/// row groups get offset indexes built from their page headers, since the output's encoded
/// row groups have them and a file's offset index is all or nothing (the parquet crate's
/// writer panicked finishing a file of both kinds). The built indexes must locate the
/// pages: a read that skips pages through them returns the oracle's rows.
#[test]
fn copied_row_groups_without_offset_indexes_get_them_built() {
    use parquet::arrow::arrow_reader::{ArrowReaderOptions, RowSelection, RowSelector};
    use parquet::file::metadata::PageIndexPolicy;
    use parquet::file::properties::{EnabledStatistics, WriterVersion};
    for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
        let mut id = 0;
        // Several pages a chunk, dictionary pages in front of the payload's.
        let g = |lo: i64, n: i64, id: &mut u64| {
            let b = group(vec![int_range(lo..lo + n)], id);
            let payload: ArrayRef = Arc::new(StringArray::from_iter((lo..lo + n).map(|x| (x % 5 != 0).then(|| format!("p{}", x % 37)))));
            let mut fields: Vec<Field> = b.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
            fields.push(Field::new("payload", DataType::Utf8, true));
            let mut cols = b.columns().to_vec();
            cols.push(payload);
            RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
        };
        let a: Vec<RecordBatch> = (0..4).map(|q| g(q * 250, 250, &mut id)).collect();
        let b: Vec<RecordBatch> = (0..4).map(|q| g(900 + q * 250, 250, &mut id)).collect();
        let no_index = || {
            plain()
                .set_writer_version(version)
                .set_statistics_enabled(EnabledStatistics::Chunk)
                .set_offset_index_disabled(true)
                .set_data_page_row_count_limit(40)
                .set_write_batch_size(20)
        };
        let c = case(&[a, b], no_index);
        assert!(ParquetMetaDataReader::new()
            .with_page_index_policy(PageIndexPolicy::Optional)
            .parse_and_finish(&std::fs::File::open(&c.paths[0]).unwrap())
            .unwrap()
            .offset_index()
            .is_none());
        let keys = key0(opts(false, false));
        let (s, out) = c.merge(&keys, &MergeFilesOptions::default());
        // As in partly_overlapping_files_merge_only_the_overlap: six copied, two merged.
        assert_eq!((s.passthrough_row_groups, s.passthrough_rows), (6, 1500), "{version:?}");
        let file = std::fs::File::open(&out).unwrap();
        let meta = ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Required).parse_and_finish(&file).unwrap();
        let index = meta.offset_index().expect("every row group has an offset index");
        assert_eq!(index.len(), meta.num_row_groups());
        assert!(index[0].iter().all(|c| c.page_locations().len() >= 6), "a copied chunk's pages, each located");
        // Rows read through the offset index, skipping pages: the oracle's.
        let expected: Vec<u64> = {
            let all = read_all(&out);
            all.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()
        };
        let selection = RowSelection::from(vec![
            RowSelector::skip(101),
            RowSelector::select(7),
            RowSelector::skip(700),
            RowSelector::select(90),
            RowSelector::skip(1000),
            RowSelector::select(3),
        ]);
        let reader = ParquetRecordBatchReaderBuilder::try_new_with_options(
            std::fs::File::open(&out).unwrap(),
            ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required),
        )
        .unwrap()
        .with_row_selection(selection)
        .build()
        .unwrap();
        let got: Vec<u64> =
            reader.flat_map(|b| b.unwrap().column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect();
        let want: Vec<u64> = [101..108, 808..898, 1898..1901].into_iter().flat_map(|r| expected[r].to_vec()).collect();
        assert_eq!(got, want, "{version:?}");
    }
}

/// A repeated column's v1 pages do not count their rows, so no offset index can be built
/// for a row group of such a file without one: it is merged, not copied.
#[test]
fn row_groups_with_repeated_columns_and_no_offset_index_are_merged() {
    use parquet::file::properties::EnabledStatistics;
    let mut id = 0;
    let g = |lo: i64, n: i64, id: &mut u64| {
        let b = group(vec![int_range(lo..lo + n)], id);
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>((lo..lo + n).map(|x| Some(vec![Some(x), None]))));
        let mut fields: Vec<Field> = b.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("list", list.data_type().clone(), true));
        let mut cols = b.columns().to_vec();
        cols.push(list);
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    };
    let a: Vec<RecordBatch> = (0..2).map(|q| g(q * 100, 100, &mut id)).collect();
    let b: Vec<RecordBatch> = (0..2).map(|q| g(150 + q * 100, 100, &mut id)).collect();
    let keys = key0(opts(false, false));
    let c = case(&[a.clone(), b.clone()], || plain().set_statistics_enabled(EnabledStatistics::Chunk).set_offset_index_disabled(true));
    let s = c.merge_both(&keys);
    assert_eq!(s.passthrough_row_groups, 0);
    // With offset indexes the same files pass: a's first row group and b's last.
    let c = case(&[a, b], plain);
    let s = c.merge_both(&keys);
    assert_eq!(s.passthrough_row_groups, 2);
}

/// Files of one table that differ in nullability alone (DuckDB marks a column required in a
/// file without nulls): the output's Parquet schema is theirs with the column optional, so
/// the files with the optional column keep their row groups copied; a file with the
/// required one is merged (its chunks have no definition levels to copy).
#[test]
fn nullability_alone_keeps_the_others_copied() {
    let mut id = 0;
    let g = |r: std::ops::Range<i64>, nullable: bool, id: &mut u64| {
        let b = group(vec![int_range(r)], id);
        let fields: Vec<Field> =
            b.schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(nullable || f.name() != "k0")).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), b.columns().to_vec()).unwrap()
    };
    let a: Vec<RecordBatch> = (0..2).map(|q| g(q * 100..(q + 1) * 100, true, &mut id)).collect();
    let b: Vec<RecordBatch> = (0..3).map(|q| g(500 + q * 100..500 + (q + 1) * 100, false, &mut id)).collect();
    let c: Vec<RecordBatch> = (0..2).map(|q| g(1000 + q * 100..1000 + (q + 1) * 100, true, &mut id)).collect();
    let case = case(&[a, b, c], plain);
    let keys = key0(opts(false, false));
    let s = case.merge_both(&keys);
    assert_eq!((s.passthrough_row_groups, s.passthrough_rows), (4, 400), "a's and c's row groups copied, b's merged");
    let out = case.dir.path().join("out-auto.parquet");
    let meta = footer(&out);
    let k0 = meta.file_metadata().schema_descr().column(0);
    assert_eq!(k0.self_type().get_basic_info().repetition(), parquet::basic::Repetition::OPTIONAL);
    assert!(read_all(&out).schema().field(0).is_nullable());
}

#[test]
fn one_file_is_copied() {
    let mut id = 0;
    let a: Vec<RecordBatch> = (0..5).map(|q| group(vec![int_range(q * 10..(q + 1) * 10)], &mut id)).collect();
    let c = case(&[a], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!((s.passthrough_row_groups, s.passthrough_rows), (5, 50));
}

#[test]
fn float_keys_are_merged() {
    let mut id = 0;
    let f = |r: std::ops::Range<i32>| -> ArrayRef { Arc::new(Float64Array::from_iter_values(r.map(|x| x as f64))) };
    let a = vec![group(vec![f(0..10)], &mut id)];
    let b = vec![group(vec![f(20..30)], &mut id)];
    let c = case(&[a, b], plain);
    let s = c.merge_both(&key0(opts(false, false)));
    assert_eq!(s.passthrough_row_groups, 0);
}

/// Random time-partitioned-like inputs: files of sorted keys over ranges that overlap a
/// little, random row group sizes, keys of several types and orders, nulls.
#[test]
fn random_differential() {
    let mut rng = Rng::new(2026);
    let mut passed = 0;
    for case_no in 0..40 {
        let dt = [DataType::Int64, DataType::Int32, DataType::Utf8, DataType::UInt16, DataType::Date32][case_no % 5].clone();
        let o = opts(rng.chance(0.5), rng.chance(0.5));
        let two_keys = rng.chance(0.3);
        let files_n = 1 + rng.below(5) as usize;
        let null_p = if rng.chance(0.3) { 0.05 } else { 0.0 };
        let mut id = 0u64;
        let mut files = Vec::new();
        for f in 0..files_n {
            let rows = 50 + rng.below(400) as usize;
            let base = f as i64 * 1000 + rng.below(300) as i64 - 150;
            let width = 1000 + rng.below(200) as i64;
            // Sorted keys (and a second key column), in the key order.
            let mut vals: Vec<(Option<i64>, i64)> =
                (0..rows).map(|_| ((!rng.chance(null_p)).then(|| base + rng.below(width as u64) as i64), rng.below(4) as i64)).collect();
            let cmp_opt = |x: &Option<i64>, y: &Option<i64>| -> std::cmp::Ordering {
                match (x, y) {
                    (None, None) => std::cmp::Ordering::Equal,
                    (None, Some(_)) => {
                        if o.nulls_first {
                            std::cmp::Ordering::Less
                        } else {
                            std::cmp::Ordering::Greater
                        }
                    }
                    (Some(_), None) => {
                        if o.nulls_first {
                            std::cmp::Ordering::Greater
                        } else {
                            std::cmp::Ordering::Less
                        }
                    }
                    (Some(a), Some(b)) => {
                        if o.descending {
                            b.cmp(a)
                        } else {
                            a.cmp(b)
                        }
                    }
                }
            };
            vals.sort_by(|a, b| cmp_opt(&a.0, &b.0).then(a.1.cmp(&b.1)));
            let mut groups = Vec::new();
            let mut at = 0;
            while at < rows {
                let n = (1 + rng.below(120) as usize).min(rows - at);
                let part = &vals[at..at + n];
                let k0: ArrayRef = ints(part.iter().map(|v| v.0));
                let k0 = match &dt {
                    DataType::Utf8 => {
                        Arc::new(StringArray::from_iter(part.iter().map(|v| v.0.map(|x| format!("{:08}", x + 10_000_000))))) as ArrayRef
                    }
                    DataType::UInt16 => arrow::compute::cast(&ints(part.iter().map(|v| v.0.map(|x| x + 1000))), &DataType::UInt16).unwrap(),
                    other => arrow::compute::cast(&arrow::compute::cast(&k0, &DataType::Int32).unwrap(), other).unwrap(),
                };
                let mut keys = vec![k0];
                if two_keys {
                    keys.push(ints(part.iter().map(|v| Some(v.1))));
                }
                groups.push(group(keys, &mut id));
                at += n;
            }
            files.push(groups);
        }
        let c = case(&files, plain);
        let mut keys = key0(o);
        if two_keys {
            keys.push(("k1".into(), opts(false, false)));
        }
        let s = c.merge_both(&keys);
        passed += s.passthrough_row_groups;
        // A small memory limit still merges (the phases' windows stay within it).
        let small = MergeFilesOptions { memory_limit: 64 << 20, ..Default::default() };
        let (s2, _) = c.merge(&keys, &small);
        assert_eq!(s2.passthrough_rows, s.passthrough_rows);
    }
    assert!(passed > 40, "passthrough happened in the random cases ({passed} row groups)");
}

/// Rough figures (ignored by default; `cargo test --release --test merge -- --ignored
/// --nocapture passthrough::measure`): 16 time-partitioned files (each key range overlapping its
/// neighbours' by 5% of a day), merged with `Never` and with `Auto`.
#[test]
#[ignore]
fn measure_time_partitioned() {
    let files_n = 16;
    let rows: usize = std::env::var("CORANK_PT_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(4_000_000);
    let per_file = rows / files_n;
    let group_rows = std::env::var("CORANK_PT_GROUP").ok().and_then(|v| v.parse().ok()).unwrap_or(65_536);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(1);
    let day: i64 = 86_400_000_000;
    let mut paths = Vec::new();
    let t = std::time::Instant::now();
    for f in 0..files_n {
        // Timestamps over the day, widened by 2.5% of a day at either end: neighbours
        // overlap by 5% of a day.
        let lo = f as i64 * day - day / 40;
        let span = day + day / 20;
        let mut ts: Vec<i64> = (0..per_file).map(|_| lo + (rng.next() % span as u64) as i64).collect();
        ts.sort_unstable();
        let n = per_file;
        let user: ArrayRef = Arc::new(Int64Array::from_iter_values((0..n).map(|_| (rng.next() % 1_000_000) as i64)));
        let value: ArrayRef = Arc::new(Float64Array::from_iter_values((0..n).map(|_| (rng.next() % 100_000) as f64 / 100.0)));
        let cats = ["click", "view", "purchase", "scroll", "login", "logout"];
        let category: ArrayRef = Arc::new(StringArray::from_iter_values((0..n).map(|_| cats[(rng.next() % 6) as usize])));
        let text: ArrayRef =
            Arc::new(StringArray::from_iter_values((0..n).map(|_| format!("session-{:x}-{}", rng.next() % 100_000, rng.next() % 97))));
        let batch = RecordBatch::try_from_iter(vec![
            ("ts", Arc::new(TimestampMicrosecondArray::from(ts)) as ArrayRef),
            ("user", user),
            ("value", value),
            ("category", category),
            ("text", text),
        ])
        .unwrap();
        let path = dir.path().join(format!("day{f:02}.parquet"));
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(Default::default()))
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        paths.push(path);
    }
    let bytes: u64 = paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    println!(
        "{files_n} files, {rows} rows, row groups of {group_rows}, {:.1} MiB, written in {:.2?}",
        bytes as f64 / 1048576.0,
        t.elapsed()
    );
    let plan = plan_merge(&paths, Some(vec![SortKey::asc("ts")])).unwrap();
    for mode in [Passthrough::Never, Passthrough::Auto, Passthrough::Never, Passthrough::Auto] {
        let out = dir.path().join("out.parquet");
        let _ = std::fs::remove_file(&out);
        let t = std::time::Instant::now();
        let s = merge_files(&plan, &out, &MergeFilesOptions { passthrough: mode, ..Default::default() }, &|_| {}).unwrap();
        let elapsed = t.elapsed();
        println!(
            "{mode:>6}: {:.3} s, {} rows copied in {} of {} row groups, output {:.1} MiB (read {:.2?}, merge {:.2?}, write {:.2?})",
            elapsed.as_secs_f64(),
            s.passthrough_rows,
            s.passthrough_row_groups,
            s.output_row_groups,
            s.output_bytes as f64 / 1048576.0,
            s.read_time,
            s.merge_time,
            s.write_time
        );
    }
}

mod read_plan;

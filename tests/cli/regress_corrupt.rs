//! Hostile and unusual files (issue 62): each test reproduces one observed defect of `corank
//! merge` or `corank sort` on a damaged or unusual input — a panic (exit 101, or an abort
//! leaving the temporary output behind), an "internal error", a corrupt page merged into
//! the output — and checks the fixed behaviour: the rows merged as the oracle says, or one
//! line naming the file, row group, column (and page) with exit 1, and nothing left behind.

use crate::cli_common::{corank, files_in, read_file, text, write_file_with};
use crate::corrupt_common::*;
use arrow::array::*;
use arrow::datatypes::*;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;

/// `k` (Int64, required) and `v` (Utf8, required, a few distinct values) for `keys`.
fn k_v(keys: impl IntoIterator<Item = i64>) -> RecordBatch {
    let k: Vec<i64> = keys.into_iter().collect();
    let v: Vec<String> = k.iter().map(|x| format!("value-{}", x.rem_euclid(7))).collect();
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(k)), Arc::new(StringArray::from(v))]).unwrap()
}

/// Writes `groups` (one row group each) with `props`.
fn write(path: &Path, groups: &[RecordBatch], props: parquet::file::properties::WriterPropertiesBuilder) {
    write_file_with(path, groups[0].schema(), groups, None, props);
}

/// The `k` column of a file.
fn keys_of(path: &Path) -> Vec<i64> {
    let (batches, _) = read_file(path);
    batches.iter().flat_map(|b| b.column_by_name("k").unwrap().as_primitive::<Int64Type>().values().to_vec()).collect()
}

/// Runs corank expecting exit 1 with one line on stderr holding every one of `needles`,
/// and only `left` in `dir` afterwards.
fn expect_corrupt(dir: &Path, args: &[&str], needles: &[&str], left: &[&str]) {
    let out = corank(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: stderr {stderr}");
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("corank: error:")).collect();
    assert_eq!(error.len(), 1, "{args:?}: {stderr}");
    for needle in needles {
        assert!(error[0].contains(needle), "{args:?}: '{needle}' not in: {stderr}");
    }
    assert!(!stderr.contains("panicked at") && !stderr.contains("internal error"), "{args:?}: {stderr}");
    assert_eq!(files_in(dir), left, "{args:?}: files left behind");
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

/// A malformed `ARROW:schema` entry made arrow-ipc panic ("Int type with bit width of 7 not
/// supported"): exit 101, even with `--dry-run`. Such a file is read by its Parquet schema,
/// with a warning: merged, sorted and planned like the file it was.
#[test]
fn an_arrow_schema_that_cannot_be_decoded_reads_by_the_parquet_schema() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    write(&dir.join("good.parquet"), &[k_v((0..3000).map(|i| 2 * i))], WriterProperties::builder());
    write(&dir.join("src.parquet"), &[k_v((0..3000).map(|i| 2 * i + 1))], WriterProperties::builder());
    let good = std::fs::read(dir.join("src.parquet")).unwrap();
    let (start, end) = arrow_schema_range(&good).expect("arrow-rs writes its schema");
    // The Int64 column's bit width (64, a little-endian int32 of the flatbuffer) made 7.
    let decoded = base64_decode(&good[start..end]);
    let bad = (0..decoded.len().saturating_sub(3))
        .filter(|&i| decoded[i..i + 4] == [64, 0, 0, 0])
        .map(|i| {
            let mut schema = decoded.clone();
            schema[i] = 7;
            let mut file = good.clone();
            file[start..end].copy_from_slice(&base64_encode(&schema));
            file
        })
        .find(|file| parquet_panics(file).is_some_and(|m| m.contains("bit width")))
        .expect("a bit width of 7 makes arrow-ipc panic");
    std::fs::write(dir.join("bad.parquet"), &bad).unwrap();
    std::fs::remove_file(dir.join("src.parquet")).unwrap();
    let p = |name: &str| dir.join(name).display().to_string();
    for args in [
        vec!["merge", &p("good.parquet"), &p("bad.parquet"), "-o", &p("out.parquet"), "--by", "k"],
        vec!["merge", &p("bad.parquet"), &p("good.parquet"), "-o", &p("out.parquet"), "--by", "k", "--dry-run"],
        vec!["sort", &p("bad.parquet"), &p("good.parquet"), "-o", &p("out.parquet"), "--by", "k"],
        vec!["sort", &p("bad.parquet"), &p("good.parquet"), "-o", &p("out.parquet"), "--by", "k", "--strategy", "runs"],
    ] {
        let _ = std::fs::remove_file(dir.join("out.parquet"));
        let out = corank(&args);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains("bad.parquet") && stderr.contains("ARROW:schema"), "{args:?}: no warning: {stderr}");
        if !args.contains(&"--dry-run") {
            assert_eq!(keys_of(&dir.join("out.parquet")), (0..6000).collect::<Vec<_>>(), "{args:?}");
        }
    }
    // The DataFusion table of sorted row groups opens it too.
    let keys = vec![corank::SortKey::asc("k")];
    corank::datafusion::SortedRowGroupsTable::try_new(&[dir.join("bad.parquet")], Some(keys)).expect("read by its Parquet schema");
}

/// The first data page of column `column` of row group `group` (its payload uncompressed,
/// v1: a required column's first byte is the RLE/bit-packed bit width of its dictionary
/// indices), made to hold each bit width of `widths` in turn until the parquet crate panics
/// on it.
fn panicking_bit_width(bytes: &[u8], group: usize, column: usize) -> Vec<u8> {
    let page = *pages(bytes)[group][column].iter().find(|p| p.kind == 0).expect("a data page");
    [33u8, 40, 48, 57, 64, 65, 100, 128, 200, 255]
        .into_iter()
        .map(|w| {
            let mut bad = bytes.to_vec();
            bad[page.data] = w;
            bad
        })
        .find(|bad| parquet_panics(bad).is_some())
        .expect("a bit width out of range makes the parquet crate panic")
}

/// A corrupt data page (an RLE/bit-packed bit width out of range) made the decoder panic in
/// `sort` and sometimes `merge` (exit 101). Every decode failure is an error naming file,
/// row group and column, exit 1, nothing left behind.
#[test]
fn a_bit_width_out_of_range_is_an_error_naming_the_column() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let groups: Vec<RecordBatch> = (0..3).map(|g| k_v((g * 1000..(g + 1) * 1000).map(|i| 2 * i))).collect();
    write(&dir.join("src.parquet"), &groups, WriterProperties::builder().set_compression(Compression::UNCOMPRESSED));
    write(&dir.join("b.parquet"), &[k_v((0..3000).map(|i| 2 * i + 1))], WriterProperties::builder());
    let bad = panicking_bit_width(&std::fs::read(dir.join("src.parquet")).unwrap(), 1, 1);
    std::fs::write(dir.join("a.parquet"), bad).unwrap();
    std::fs::remove_file(dir.join("src.parquet")).unwrap();
    let p = |name: &str| dir.join(name).display().to_string();
    let (a, b, out) = (p("a.parquet"), p("b.parquet"), p("out.parquet"));
    let needles = ["a.parquet", "row group 1", "column 'v'"];
    let left = ["a.parquet", "b.parquet"];
    expect_corrupt(dir, &["merge", &a, &b, "-o", &out, "--by", "k"], &needles, &left);
    expect_corrupt(dir, &["merge", &a, &b, "-o", &out, "--by", "k", "--memory-limit", "16MiB"], &needles, &left);
    expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k"], &needles, &left);
    expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k", "--strategy", "columns"], &needles, &left);
    expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k", "--strategy", "runs"], &needles, &left);
}

/// Another corruption, of a snappy page, panicked `merge`: a byte of the compressed page
/// changed so that snappy decompresses it into something the decoder panics on.
#[test]
fn a_corrupt_snappy_page_is_an_error_naming_the_column() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let groups: Vec<RecordBatch> = (0..2).map(|g| k_v((g * 2000..(g + 1) * 2000).map(|i| 2 * i))).collect();
    write(&dir.join("src.parquet"), &groups, WriterProperties::builder().set_compression(Compression::SNAPPY));
    write(&dir.join("b.parquet"), &[k_v((0..4000).map(|i| 2 * i + 1))], WriterProperties::builder());
    let good = std::fs::read(dir.join("src.parquet")).unwrap();
    let page = *pages(&good)[1][1].iter().find(|p| p.kind == 0).expect("a data page");
    let bad = (page.data..page.end)
        .flat_map(|at| [0x01u8, 0x80, 0xff].map(|x| (at, x)))
        .map(|(at, x)| {
            let mut bad = good.clone();
            bad[at] ^= x;
            bad
        })
        .find(|bad| parquet_panics(bad).is_some())
        .expect("a changed byte of a snappy page makes the parquet crate panic");
    std::fs::write(dir.join("a.parquet"), bad).unwrap();
    std::fs::remove_file(dir.join("src.parquet")).unwrap();
    let p = |name: &str| dir.join(name).display().to_string();
    let (a, b, out) = (p("a.parquet"), p("b.parquet"), p("out.parquet"));
    let needles = ["a.parquet", "row group 1", "column 'v'"];
    let left = ["a.parquet", "b.parquet"];
    expect_corrupt(dir, &["merge", &a, &b, "-o", &out, "--by", "k"], &needles, &left);
    expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k"], &needles, &left);
    expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k", "--strategy", "runs"], &needles, &left);
}

/// A file of `k`, `v` in two row groups of several pages each, with page header statistics
/// (room for the checksums) and then a checksum in every data page's header.
fn crc_file(path: &Path, keys: impl Fn(i64) -> i64, compression: Compression) {
    let groups: Vec<RecordBatch> = (0..2).map(|g| k_v((g * 2000..(g + 1) * 2000).map(&keys))).collect();
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_write_page_header_statistics(true)
        .set_data_page_row_count_limit(500)
        .set_write_batch_size(500)
        .set_dictionary_enabled(false);
    write(path, &groups, props);
    let (bytes, given) = with_page_crcs(&std::fs::read(path).unwrap());
    assert!(given >= 8, "only {given} pages given a checksum");
    std::fs::write(path, bytes).unwrap();
}

/// A payload byte changed in a page written with a checksum was merged into the output
/// (pyarrow, verifying, refuses the file). The checksum is verified: the error names file,
/// row group, column and page, exit 1.
#[test]
fn page_checksums_are_verified() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    crc_file(&dir.join("a.parquet"), |i| 2 * i, Compression::UNCOMPRESSED);
    crc_file(&dir.join("b.parquet"), |i| 2 * i + 1, Compression::SNAPPY);
    let p = |name: &str| dir.join(name).display().to_string();
    let (a, b, out) = (p("a.parquet"), p("b.parquet"), p("out.parquet"));
    // Intact checksums pass.
    let ok = corank(&["merge", &a, &b, "-o", &out, "--by", "k"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert_eq!(keys_of(&dir.join("out.parquet")), (0..8000).collect::<Vec<_>>());
    std::fs::remove_file(dir.join("out.parquet")).unwrap();
    // A byte of the third data page of `v` in row group 1, changed.
    for file in ["a.parquet", "b.parquet"] {
        let good = std::fs::read(dir.join(file)).unwrap();
        let page = pages(&good)[1][1][2];
        assert!(page.crc && page.kind == 0);
        let mut bad = good.clone();
        bad[(page.data + page.end) / 2] ^= 0x10;
        std::fs::write(dir.join(file), &bad).unwrap();
        let needles = [file, "row group 1", "column 'v'", "page 2", "CRC"];
        let left = ["a.parquet", "b.parquet"];
        expect_corrupt(dir, &["merge", &a, &b, "-o", &out, "--by", "k"], &needles, &left);
        expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k"], &needles, &left);
        expect_corrupt(dir, &["sort", &a, &b, "-o", &out, "--by", "k", "--strategy", "runs"], &needles, &left);
        std::fs::write(dir.join(file), &good).unwrap();
    }
}

/// A row group copied unchanged (passthrough) is not decoded but for its key columns: a
/// page of another column whose checksum fails was copied into the output. Copied chunks
/// have their pages' checksums verified (without decompressing them).
#[test]
fn copied_row_groups_have_their_page_checksums_verified() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // Apart: a's rows all come before b's, so both row groups of each are copied.
    crc_file(&dir.join("a.parquet"), |i| i, Compression::ZSTD(Default::default()));
    crc_file(&dir.join("b.parquet"), |i| 10_000 + i, Compression::ZSTD(Default::default()));
    let p = |name: &str| dir.join(name).display().to_string();
    let (a, b, out) = (p("a.parquet"), p("b.parquet"), p("out.parquet"));
    let ok = corank(&["merge", &a, &b, "-o", &out, "--by", "k", "--json"]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    assert!(text(&ok.stdout).contains("\"passthrough_row_groups\":4"), "{}", text(&ok.stdout));
    std::fs::remove_file(dir.join("out.parquet")).unwrap();
    let good = std::fs::read(dir.join("b.parquet")).unwrap();
    let page = pages(&good)[0][1][3];
    assert!(page.crc && page.kind == 0);
    let mut bad = good.clone();
    bad[page.data + 3] ^= 0x01;
    std::fs::write(dir.join("b.parquet"), &bad).unwrap();
    let needles = ["b.parquet", "row group 0", "column 'v'", "page 3", "CRC"];
    expect_corrupt(dir, &["merge", &a, &b, "-o", &out, "--by", "k"], &needles, &["a.parquet", "b.parquet"]);
}

/// A footer whose row count lies was reported as "internal error (a bug in corank)": it is
/// a corrupt input (exit 1, naming the file). Counts that disagree within the footer are
/// refused when the file is opened; counts that agree with each other but not with the
/// pages, when the row group is read.
#[test]
fn a_footer_whose_row_count_lies_is_a_corrupt_input() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let groups: Vec<RecordBatch> = (0..2).map(|g| k_v((g * 1000..(g + 1) * 1000).map(|i| 2 * i))).collect();
    write(&dir.join("src.parquet"), &groups, WriterProperties::builder());
    write(&dir.join("b.parquet"), &[k_v((0..2000).map(|i| 2 * i + 1))], WriterProperties::builder());
    let good = std::fs::read(dir.join("src.parquet")).unwrap();
    std::fs::remove_file(dir.join("src.parquet")).unwrap();
    let counts = row_counts(&good);
    assert_eq!(counts.file.2, 2000);
    type Lie = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Lie, &[&str])> = vec![
        (
            "a row group counts fewer",
            Box::new(|f| {
                let c = row_counts(f);
                assert!(set_int(f, c.row_groups[1], 990) && set_int(f, c.file, 1990));
            }),
            &["corrupt footer", "row group 1"],
        ),
        (
            "the file counts fewer",
            Box::new(|f| {
                let c = row_counts(f);
                assert!(set_int(f, c.file, 1990));
            }),
            &["corrupt footer", "1990"],
        ),
        (
            "every count says fewer",
            Box::new(|f| {
                let c = row_counts(f);
                assert!(set_int(f, c.row_groups[0], 990) && set_int(f, c.file, 1990));
                for col in &c.columns[0] {
                    assert!(set_int(f, *col, 990));
                }
            }),
            &["corrupt"],
        ),
        (
            "every count says more",
            Box::new(|f| {
                let c = row_counts(f);
                assert!(set_int(f, c.row_groups[0], 1010) && set_int(f, c.file, 2010));
                for col in &c.columns[0] {
                    assert!(set_int(f, *col, 1010));
                }
            }),
            &["corrupt"],
        ),
    ];
    let p = |name: &str| dir.join(name).display().to_string();
    let (a, b, out) = (p("a.parquet"), p("b.parquet"), p("out.parquet"));
    for (_case, lie, words) in cases {
        let mut bad = good.clone();
        lie(&mut bad);
        std::fs::write(dir.join("a.parquet"), &bad).unwrap();
        let needles: Vec<&str> = ["a.parquet"].iter().chain(words).copied().collect();
        let left = ["a.parquet", "b.parquet"];
        for args in [
            vec!["merge", &a, &b, "-o", &out, "--by", "k"],
            vec!["merge", &a, &b, "-o", &out, "--by", "k", "--memory-limit", "16MiB"],
            vec!["sort", &a, &b, "-o", &out, "--by", "k"],
            vec!["sort", &a, &b, "-o", &out, "--by", "k", "--strategy", "runs"],
        ] {
            expect_corrupt(dir, &args, &needles, &left);
        }
    }
}

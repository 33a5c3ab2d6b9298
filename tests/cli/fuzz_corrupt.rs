//! Corrupt-input fuzzing (issue 62): small Parquet files — several column types, with and
//! without dictionary encoding, uncompressed, snappy or zstd, some with page checksums —
//! damaged at random in their footer, their embedded Arrow schema (`ARROW:schema`) or their
//! pages (headers and payloads; the first payload byte too, a dictionary page's or an RLE
//! run's bit width), each case through `corank merge`, `corank merge --dry-run` and `corank
//! sort`. Seeded and deterministic, a bounded number of cases.
//!
//! What every outcome must be: no panic, no abort, no "internal error"; an exit code of 0
//! to 3; a failure is one error line naming the damaged file, and leaves nothing behind
//! (no output, no temporary file, no spill directory); a success writes a readable output
//! sorted by the key with as many rows as the files' footers count. Where the damage cannot
//! change a row (the embedded Arrow schema: the file is then read by its Parquet schema) a
//! success is the oracle exactly (the stable sort of the undamaged inputs); where a page
//! whose header carries a checksum has its payload changed, success is wrong: the checksum
//! must catch it.

use crate::cli_common::{corank, files_in, text, write_file_with};
use crate::common::{random_array, Rng};
use crate::corrupt_common::*;
use arrow::array::*;
use arrow::datatypes::*;
use arrow::row::{RowConverter, SortField};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use std::path::Path;
use std::sync::Arc;

/// Cases run (each: a merge, a dry run, a sort): about 15 s on 2 cores. For a longer hunt
/// by hand, `CORANK_FUZZ_CASES` sets another number, `CORANK_FUZZ_SEED` the first seed, and
/// `CORANK_FUZZ_VERBOSE` prints every error.
const CASES: u64 = 200;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Payload column types the cases draw from (besides the key `k` and the row id `id`).
fn payload_types() -> Vec<DataType> {
    use DataType::*;
    vec![
        Int32,
        Float64,
        Utf8,
        Binary,
        Boolean,
        Date32,
        Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Decimal128(20, 3),
        Dictionary(Box::new(Int32), Box::new(Utf8)),
        FixedSizeBinary(16),
        DataType::new_list(Int32, true),
    ]
}

/// What a case damages.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    /// Bytes of the footer (its Thrift metadata and its length).
    Footer,
    /// Characters of the embedded Arrow schema's base64 text.
    ArrowSchema,
    /// A byte of a page's header.
    PageHeader,
    /// A byte of a page's payload (a page with a checksum: it must be caught).
    PagePayload { checked: bool },
    /// A page's first payload byte (a dictionary page's first value, a data page's
    /// levels or bit width).
    FirstPayloadByte,
}

/// One case's inputs: the damaged file `a.parquet` and an intact `b.parquet`, and what a
/// success must produce.
struct Case {
    damage: Damage,
    /// The ids of the stable sort of the undamaged `a` and `b` by `k`.
    oracle: Vec<u64>,
}

/// A file's rows: `k` (Int64, sorted ascending, nulls last where nullable), `id` (UInt64,
/// from `first_id`), then `payload` columns of random values.
fn rows(rng: &mut Rng, n: usize, payload: &[DataType], first_id: u64, start: i64, nullable_key: bool) -> RecordBatch {
    let mut k: Vec<Option<i64>> = (0..n).map(|_| Some(start + rng.below(3 * n as u64 + 1) as i64)).collect();
    if nullable_key {
        for v in k.iter_mut() {
            if rng.chance(0.05) {
                *v = None;
            }
        }
    }
    k.sort_by_key(|v| (v.is_none(), *v));
    let mut fields = vec![Field::new("k", DataType::Int64, nullable_key), Field::new("id", DataType::UInt64, false)];
    let mut columns: Vec<ArrayRef> =
        vec![Arc::new(Int64Array::from(k)), Arc::new(UInt64Array::from_iter_values(first_id..first_id + n as u64))];
    for (i, t) in payload.iter().enumerate() {
        fields.push(Field::new(format!("p{i}"), t.clone(), true));
        columns.push(random_array(rng, t, n, 50, 0.1));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// Writes `batch` into `groups` row groups with the case's properties.
fn write(path: &Path, batch: &RecordBatch, groups: usize, props: &WriterProperties) {
    let per = batch.num_rows().div_ceil(groups).max(1);
    let parts: Vec<RecordBatch> = (0..batch.num_rows()).step_by(per).map(|s| batch.slice(s, per.min(batch.num_rows() - s))).collect();
    let builder = props.clone().into_builder();
    write_file_with(path, batch.schema(), &parts, None, builder);
}

/// The ids of the stable sort of `a` then `b` by `k` (ascending, nulls last).
fn oracle(a: &RecordBatch, b: &RecordBatch) -> Vec<u64> {
    let both = arrow::compute::concat_batches(&a.schema(), [a, b]).unwrap();
    let k = both.column(0).as_primitive::<Int64Type>();
    let id = both.column(1).as_primitive::<UInt64Type>();
    let mut order: Vec<usize> = (0..both.num_rows()).collect();
    order.sort_by_key(|&i| (k.is_null(i), k.is_valid(i).then(|| k.value(i))));
    order.into_iter().map(|i| id.value(i)).collect()
}

/// Builds case `seed` in `dir`.
fn make_case(seed: u64, dir: &Path) -> Case {
    let mut rng = Rng::new(seed + 1000);
    let all = payload_types();
    let payload: Vec<DataType> = (0..1 + rng.below(3)).map(|_| all[rng.below(all.len() as u64) as usize].clone()).collect();
    let nullable_key = rng.chance(0.5);
    let n_a = 150 + rng.below(700) as usize;
    let n_b = 100 + rng.below(400) as usize;
    // Keys of b overlap a's, or lie after them (so that a's row groups may be copied).
    let b_start = if rng.chance(0.5) { 0 } else { 10 * n_a as i64 };
    let a = rows(&mut rng, n_a, &payload, 0, 0, nullable_key);
    let b = rows(&mut rng, n_b, &payload, 1 << 32, b_start, nullable_key);
    let compression = match rng.below(3) {
        0 => Compression::UNCOMPRESSED,
        1 => Compression::SNAPPY,
        _ => Compression::ZSTD(Default::default()),
    };
    let crc = rng.chance(0.4);
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_dictionary_enabled(rng.chance(0.6))
        .set_data_page_row_count_limit(64 + rng.below(200) as usize)
        .set_write_batch_size(64)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_write_page_header_statistics(crc)
        .build();
    let groups = 1 + rng.below(3) as usize;
    write(&dir.join("a.parquet"), &a, groups, &props);
    write(&dir.join("b.parquet"), &b, 1 + rng.below(2) as usize, &props);
    let mut bytes = std::fs::read(dir.join("a.parquet")).unwrap();
    if crc {
        bytes = with_page_crcs(&bytes).0;
        let b_bytes = with_page_crcs(&std::fs::read(dir.join("b.parquet")).unwrap()).0;
        std::fs::write(dir.join("b.parquet"), b_bytes).unwrap();
    }
    let all_pages: Vec<Page> = pages(&bytes).into_iter().flatten().flatten().collect();
    let flip = |rng: &mut Rng| 1u8 << rng.below(8) | if rng.chance(0.3) { rng.below(256) as u8 } else { 0 };
    let damage = match rng.below(6) {
        0 => {
            let (start, end) = footer_range(&bytes);
            for _ in 0..1 + rng.below(3) {
                // Mostly the Thrift metadata, now and then its length.
                let at = if rng.chance(0.1) { end + rng.below(4) as usize } else { start + rng.below((end - start) as u64) as usize };
                bytes[at] ^= flip(&mut rng).max(1);
            }
            Damage::Footer
        }
        1 => {
            let (start, end) = arrow_schema_range(&bytes).expect("arrow-rs writes its schema");
            const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            if rng.chance(0.5) {
                // The flatbuffer's bytes changed six bits at a time (a character), now and
                // then a byte that is no base64 at all.
                for _ in 0..1 + rng.below(4) {
                    let at = start + rng.below((end - start) as u64) as usize;
                    bytes[at] = if rng.chance(0.05) { b'*' } else { BASE64[rng.below(64) as usize] };
                }
            } else {
                // Bytes of the flatbuffer set to small numbers (type ids, bit widths,
                // counts) or to any byte, the text encoded again (the same length).
                let mut schema = base64_decode(&bytes[start..end]);
                for _ in 0..1 + rng.below(2) {
                    let at = rng.below(schema.len() as u64) as usize;
                    schema[at] = if rng.chance(0.7) { rng.below(80) as u8 } else { rng.below(256) as u8 };
                }
                bytes[start..end].copy_from_slice(&base64_encode(&schema));
            }
            Damage::ArrowSchema
        }
        2 => {
            let page = all_pages[rng.below(all_pages.len() as u64) as usize];
            let at = page.header + rng.below((page.data - page.header) as u64) as usize;
            bytes[at] ^= flip(&mut rng).max(1);
            Damage::PageHeader
        }
        3 | 4 => {
            let page = all_pages[rng.below(all_pages.len() as u64) as usize];
            if page.end > page.data {
                let at = page.data + rng.below((page.end - page.data) as u64) as usize;
                bytes[at] ^= flip(&mut rng).max(1);
            }
            Damage::PagePayload { checked: page.crc && page.end > page.data }
        }
        _ => {
            // Half the time a data page of `id` (required: its first byte, where the page is
            // dictionary-encoded, is the bit width of the indices), often out of range.
            let by_column = pages(&bytes);
            let id_pages: Vec<Page> = by_column.iter().flat_map(|g| g[1].iter().copied()).filter(|p| p.kind == 0).collect();
            let page = match rng.chance(0.5) && !id_pages.is_empty() {
                true => id_pages[rng.below(id_pages.len() as u64) as usize],
                false => all_pages[rng.below(all_pages.len() as u64) as usize],
            };
            if page.end > page.data {
                bytes[page.data] = if rng.chance(0.5) { 33 + rng.below(223) as u8 } else { rng.below(256) as u8 };
            }
            Damage::FirstPayloadByte
        }
    };
    std::fs::write(dir.join("a.parquet"), &bytes).unwrap();
    Case { damage, oracle: oracle(&a, &b) }
}

/// The rows the footers of `paths` count (`None` where the parquet crate cannot read one).
fn footer_rows(paths: &[&Path]) -> Option<i64> {
    let mut total = 0;
    for path in paths {
        let bytes = std::fs::read(path).ok()?;
        let mut rows = None;
        panic_of(|| {
            rows = parquet::file::metadata::ParquetMetaDataReader::new()
                .parse_and_finish(&bytes::Bytes::from(bytes))
                .ok()
                .map(|m| m.file_metadata().num_rows());
        });
        total += rows?;
    }
    Some(total)
}

/// The file's batches, `None` where the parquet crate cannot read it (an error or a panic).
fn readable(path: &Path) -> Option<Vec<RecordBatch>> {
    let mut read = None;
    panic_of(|| {
        let Ok(builder) = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap()) else { return };
        let Ok(reader) = builder.build() else { return };
        read = reader.collect::<Result<Vec<_>, _>>().ok();
    });
    read
}

/// Checks a successful output: readable (where `copied_damage`, a row group copied
/// unchanged may carry the damage of an input that is itself unreadable: then nothing more
/// is checked), sorted by `k` (ascending, nulls last), `rows` rows where known, and the
/// oracle's ids where `exact`.
fn check_output(path: &Path, rows: Option<i64>, exact: Option<&[u64]>, copied_damage: bool, context: &str) {
    let Some(batches) = readable(path) else {
        assert!(copied_damage, "{context}: the output is not readable");
        return;
    };
    let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if let Some(rows) = rows {
        assert_eq!(n as i64, rows, "{context}: rows written");
    }
    let last = arrow::compute::SortOptions { descending: false, nulls_first: false };
    let converter = RowConverter::new(vec![SortField::new_with_options(DataType::Int64, last)]).unwrap();
    let mut keys = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for b in &batches {
        let k = b.column_by_name("k").unwrap();
        let k = arrow::compute::cast(k, &DataType::Int64).unwrap();
        keys.push(k);
        if let Some(id) = b.column_by_name("id") {
            let id = arrow::compute::cast(id, &DataType::UInt64).unwrap();
            ids.extend(id.as_primitive::<UInt64Type>().iter().map(|v| v.unwrap_or(u64::MAX)));
        }
    }
    let all: Vec<&dyn Array> = keys.iter().map(|k| k.as_ref()).collect();
    if !all.is_empty() {
        let rows = converter.convert_columns(&[arrow::compute::concat(&all).unwrap()]).unwrap();
        assert!(rows.iter().zip(rows.iter().skip(1)).all(|(a, b)| a <= b), "{context}: the output is not sorted");
    }
    if let Some(want) = exact {
        assert!(ids == want, "{context}: the output is not the oracle");
    }
}

#[test]
fn corrupt_inputs_never_crash_and_never_give_a_wrong_answer() {
    let started = std::time::Instant::now();
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    let (first, cases) = (env_u64("CORANK_FUZZ_SEED", 0), env_u64("CORANK_FUZZ_CASES", CASES));
    // Cases whose damaged file makes the parquet crate itself panic (the fuzz must reach them).
    let mut panicking = std::collections::BTreeMap::<String, usize>::new();
    for seed in first..first + cases {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let case = make_case(seed, dir);
        if let Some(message) = parquet_panics(&std::fs::read(dir.join("a.parquet")).unwrap()) {
            *panicking.entry(format!("{:?}: {}", case.damage, message.chars().take(90).collect::<String>())).or_default() += 1;
        }
        let p = |name: &str| dir.join(name).display().to_string();
        let (a, b, out) = (p("a.parquet"), p("b.parquet"), p("out.parquet"));
        let mut rng = Rng::new(seed + 7);
        let passthrough = ["auto", "never", "always"][rng.below(3) as usize];
        let strategy = ["auto", "runs", "columns"][rng.below(3) as usize];
        let commands: [Vec<&str>; 3] = [
            vec!["merge", &a, &b, "-o", &out, "--by", "k ASC NULLS LAST", "--passthrough", passthrough, "--json"],
            vec!["merge", &a, &b, "-o", &out, "--by", "k ASC NULLS LAST", "--dry-run"],
            vec!["sort", &a, &b, "-o", &out, "--by", "k ASC NULLS LAST", "--strategy", strategy],
        ];
        let rows = footer_rows(&[&dir.join("a.parquet"), &dir.join("b.parquet")]);
        for args in commands {
            let context = format!("seed {seed}, {:?}, {}", case.damage, args.join(" "));
            let o = corank(&args);
            let stderr = text(&o.stderr);
            let code = o.status.code();
            assert!(matches!(code, Some(0..=3)), "{context}: exit {:?}: {stderr}", o.status);
            assert!(!stderr.contains("panicked at") && !stderr.contains("internal error"), "{context}: {stderr}");
            let dry = args.contains(&"--dry-run");
            if code == Some(0) {
                if !dry {
                    assert!(
                        !matches!(case.damage, Damage::PagePayload { checked: true }),
                        "{context}: a page whose checksum fails was accepted"
                    );
                    let exact = (case.damage == Damage::ArrowSchema).then_some(case.oracle.as_slice());
                    // Copied row groups' pages are not decoded (but for the key columns):
                    // a damaged page there stays as damaged as the input is.
                    let copied = !text(&o.stdout).contains("\"passthrough_row_groups\":0")
                        && args[0] == "merge"
                        && readable(&dir.join("a.parquet")).is_none();
                    check_output(&dir.join("out.parquet"), rows, exact, copied, &context);
                    std::fs::remove_file(dir.join("out.parquet")).unwrap();
                }
            } else {
                let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("corank: error:")).collect();
                assert_eq!(errors.len(), 1, "{context}: {stderr}");
                assert!(errors[0].contains("a.parquet"), "{context}: the error does not name the damaged file: {stderr}");
                if std::env::var_os("CORANK_FUZZ_VERBOSE").is_some() {
                    eprintln!("{context}: {}", errors[0]);
                }
            }
            assert_eq!(files_in(dir), ["a.parquet", "b.parquet"], "{context}: files left behind");
            let outcome = format!("{:?} {} exit {}", case.damage, args[0], code.unwrap_or(-1));
            *outcomes.entry(outcome).or_default() += 1;
        }
    }
    let panics: usize = panicking.values().sum();
    eprintln!("{cases} cases in {:.1?}: {outcomes:#?}", started.elapsed());
    eprintln!("{panics} cases panic the parquet crate, {} ways: {panicking:#?}", panicking.len());
    assert!(cases < CASES || panics > 0, "no case reached a panic of the parquet crate");
}

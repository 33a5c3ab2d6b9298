//! The device-resident round (`round.rs`): what it declines (on the CPU, in CI), and on a
//! GPU its merges equal to the CPU merge of the same files.

use super::round::{merge_files_on_device, RoundOutcome};
use super::tests::nvcomp_or_skip;
use crate::options::{Engine, EngineOptions};
use crate::sort_key::SortKey;
use crate::{MergeOptions, SortBatchesOptions};
use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float32Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, StructArray,
};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Whether to make this value null, at `share` nulls in 4 (0: none, 4: all).
    fn null(&mut self, share: u64) -> bool {
        self.next() % 4 < share
    }
}

/// Rows of every covered key type and some payload: few distinct key values, so ties are
/// everywhere; `share` of 4 values null in the nullable columns.
fn batch(rows: usize, share: u64, rng: &mut Rng) -> RecordBatch {
    let small = |rng: &mut Rng| (rng.next() % 7) as i64 - 3;
    let i64s: Int64Array = (0..rows).map(|_| (!rng.null(share)).then(|| small(rng))).collect();
    let i32s: Int32Array = (0..rows).map(|_| Some(small(rng) as i32)).collect();
    let specials = [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, 1.5, -2.25];
    let f64s: Float64Array = (0..rows).map(|_| (!rng.null(share)).then(|| specials[(rng.next() % 7) as usize])).collect();
    let f32s: Float32Array = (0..rows).map(|_| Some(specials[(rng.next() % 7) as usize] as f32)).collect();
    let decs = (0..rows)
        .map(|_| (!rng.null(share)).then(|| (rng.next() % 5) as i128 * 10i128.pow(18) - 2 * 10i128.pow(18)))
        .collect::<Decimal128Array>()
        .with_precision_and_scale(30, 2)
        .unwrap();
    let dates: Date32Array = (0..rows).map(|_| Some(19_000 + small(rng) as i32)).collect();
    let strs: StringArray = (0..rows).map(|i| (!rng.null(share)).then(|| format!("s{}-{}", rng.next() % 50, "x".repeat(i % 17)))).collect();
    let flags: BooleanArray = (0..rows).map(|_| Some(rng.next().is_multiple_of(2))).collect();
    let fsb = FixedSizeBinaryArray::try_from_iter(
        (0..rows).map(|_| (rng.next() as u32).to_le_bytes().to_vec().into_iter().chain([7]).collect::<Vec<u8>>()),
    )
    .unwrap();
    let payload: Int64Array = (0..rows).map(|_| Some(rng.next() as i64)).collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("k64", Arc::new(i64s)),
        ("k32", Arc::new(i32s)),
        ("kf64", Arc::new(f64s)),
        ("kf32", Arc::new(f32s)),
        ("kdec", Arc::new(decs)),
        ("kdate", Arc::new(dates)),
        ("s", Arc::new(strs)),
        ("flag", Arc::new(flags)),
        ("fsb", Arc::new(fsb)),
        ("payload", Arc::new(payload)),
    ];
    let nullable = |n: &str| matches!(n, "k64" | "kf64" | "kdec" | "s");
    let schema = Schema::new(cols.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), nullable(n))).collect::<Vec<_>>());
    RecordBatch::try_new(Arc::new(schema), cols.into_iter().map(|(_, a)| a).collect()).unwrap()
}

/// `rows` rows sorted by `keys` written to `path` with small row groups and pages.
fn write_sorted(path: &Path, b: &RecordBatch, keys: &[SortKey], variant: usize) {
    let sorted = crate::sort_batches(std::slice::from_ref(b), keys, &SortBatchesOptions::default()).unwrap();
    let codec = [Compression::ZSTD(ZstdLevel::default()), Compression::SNAPPY, Compression::UNCOMPRESSED][variant % 3];
    let props = WriterProperties::builder()
        .set_compression(codec)
        .set_max_row_group_row_count(Some(700 + 300 * (variant % 3)))
        .set_data_page_row_count_limit(256)
        .set_write_batch_size(128)
        .set_dictionary_enabled(variant.is_multiple_of(2))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, b.schema(), Some(props)).unwrap();
    for part in &sorted {
        w.write(part).unwrap();
    }
    w.close().unwrap();
}

fn read_all(path: &Path) -> RecordBatch {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let schema = arrow::array::RecordBatchReader::schema(&reader);
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&schema, &batches).unwrap()
}

fn key(name: &str, descending: bool, nulls_first: bool) -> SortKey {
    SortKey::new(name, SortOptions { descending, nulls_first })
}

/// The CPU merge of `files` (each one run) by `keys`, in one batch.
fn cpu_merge(files: &[PathBuf], keys: &[SortKey]) -> RecordBatch {
    let runs: Vec<RecordBatch> = files.iter().map(|p| read_all(p)).collect();
    let merged = crate::merge(&runs, keys, &MergeOptions::default().with_engine(Engine::Cpu)).unwrap();
    arrow::compute::concat_batches(&runs[0].schema(), &merged).unwrap()
}

/// The key sets of the GPU test: every covered type, both directions, both null placements,
/// one to four columns.
fn key_sets() -> Vec<Vec<SortKey>> {
    vec![
        vec![key("k64", false, true)],
        vec![key("k64", true, false)],
        vec![key("k32", true, false), key("kf64", false, false)],
        vec![key("kdec", true, true), key("kdate", false, false)],
        vec![key("kf32", false, false), key("k64", false, true), key("kdate", true, false), key("k32", false, false)],
        vec![key("kdec", false, false), key("kf32", true, true)],
    ]
}

/// On a GPU with nvCOMP: every key set, null share and file count merged on the device equal
/// to the CPU merge, and the columns placed where the module doc says.
#[test]
fn device_round_matches_the_cpu_merge() {
    if !nvcomp_or_skip("device_round_matches_the_cpu_merge") {
        return;
    }
    let small = std::env::var("CORANK_GPU_SMALL").as_deref() == Ok("1");
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut checked = 0;
    for (s, keys) in key_sets().iter().enumerate() {
        for share in [0, 1, 4] {
            for nfiles in [1, 3, 6] {
                if small && nfiles > 3 {
                    continue;
                }
                let files: Vec<PathBuf> = (0..nfiles)
                    .map(|f| {
                        let rows = if f == 1 { 1 } else { 500 + (rng.next() % 3000) as usize };
                        let path = dir.path().join(format!("k{s}-n{share}-f{f}.parquet"));
                        write_sorted(&path, &batch(rows, share, &mut rng), keys, f + s);
                        path
                    })
                    .collect();
                let at = format!("keys {keys:?}, null share {share}/4, {nfiles} files");
                let round = match merge_files_on_device(0, &files, keys, &EngineOptions::default()) {
                    Ok(RoundOutcome::Merged(r)) => r,
                    Ok(RoundOutcome::Declined(why)) => panic!("{at}: declined: {why}"),
                    Err(e) => panic!("{at}: {e}"),
                };
                let want = cpu_merge(&files, keys);
                assert_eq!(round.batch.num_rows(), want.num_rows(), "{at}");
                for (c, field) in want.schema().fields().iter().enumerate() {
                    assert_eq!(round.batch.column(c).to_data(), want.column(c).to_data(), "{at}: column {}", field.name());
                }
                for name in ["k64", "k32", "kf64", "kf32", "kdec", "kdate", "s", "fsb", "payload"] {
                    assert!(round.gathered_on_device.iter().any(|n| n == name), "{at}: {name} not gathered on the device");
                }
                assert!(round.on_cpu.iter().any(|n| n == "flag"), "{at}: booleans are read by parquet-rs");
                checked += 1;
            }
        }
    }
    eprintln!("device_round_matches_the_cpu_merge: {checked} merges equal");
}

/// What the device does not take, declined with a reason before any device work (no GPU
/// needed).
#[test]
fn device_round_declines() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let b = batch(300, 1, &mut rng);
    let by_string = vec![key("s", false, true)];
    let p = dir.path().join("s.parquet");
    write_sorted(&p, &b, &by_string, 0);
    let declined = |files: &[PathBuf], keys: &[SortKey]| match merge_files_on_device(0, files, keys, &EngineOptions::default()) {
        Ok(RoundOutcome::Declined(why)) => why,
        Ok(RoundOutcome::Merged(_)) => panic!("merged"),
        Err(e) => panic!("an error, not a decline: {e}"),
    };
    assert!(declined(std::slice::from_ref(&p), &by_string).contains("sort column s"));
    let by_flag = vec![key("flag", false, true)];
    let q = dir.path().join("flag.parquet");
    write_sorted(&q, &b, &by_flag, 1);
    assert!(declined(std::slice::from_ref(&q), &by_flag).contains("sort column flag"));
    // Three nullable Decimal128 columns: 3 x 129 bits, past the 256-bit key.
    let wide = vec![key("kdec", false, true), key("kdec", true, true), key("kdec", false, false)];
    let r = dir.path().join("wide.parquet");
    write_sorted(&r, &b, &wide, 2);
    assert!(declined(std::slice::from_ref(&r), &wide).contains("bits"));
    // Another schema.
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k64", DataType::Int64, true)])),
        vec![Arc::new((0..10).map(Some).collect::<Int64Array>())],
    )
    .unwrap();
    let o = dir.path().join("other.parquet");
    write_sorted(&o, &other, &[key("k64", false, true)], 0);
    let a = dir.path().join("a.parquet");
    write_sorted(&a, &b, &[key("k64", false, true)], 0);
    assert!(declined(&[a.clone(), o], &[key("k64", false, true)]).contains("another schema"));
    // Nested columns.
    let inner: ArrayRef = Arc::new((0..10).map(Some).collect::<Int64Array>());
    let st = StructArray::from(vec![(Arc::new(Field::new("x", DataType::Int64, true)), inner.clone())]);
    let nested = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("k64", DataType::Int64, true),
            Field::new("st", arrow::array::Array::data_type(&st).clone(), true),
        ])),
        vec![inner, Arc::new(st)],
    )
    .unwrap();
    let n = dir.path().join("nested.parquet");
    write_sorted(&n, &nested, &[key("k64", false, true)], 0);
    assert!(declined(std::slice::from_ref(&n), &[key("k64", false, true)]).contains("nested"));
    // A missing sort column is the caller's error, not a decline.
    assert!(merge_files_on_device(0, std::slice::from_ref(&a), &[key("nope", false, true)], &EngineOptions::default()).is_err());
}

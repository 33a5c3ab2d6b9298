//! Synthetic sorted runs for the demo and bench commands, and for the tests, benchmarks and
//! examples: deterministic from a seed, each run sorted ascending by its key columns.
//!
//! Not part of the library: the binary declares it as a module, and tests, benches and
//! examples include it with `#[path = "../src/cli/datagen.rs"] mod datagen;`. It
//! therefore names the library `corank::`, never `crate::`. The Parquet writers need the
//! `parquet` feature.
// Each includer uses part of it.
#![allow(dead_code)]

use arrow::array::{
    ArrayRef, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
#[cfg(feature = "parquet")]
use corank::{Error, Result, SortKey};
#[cfg(feature = "parquet")]
use parquet::arrow::ArrowWriter;
#[cfg(feature = "parquet")]
use parquet::basic::Compression;
#[cfg(feature = "parquet")]
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;
#[cfg(feature = "parquet")]
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// splitmix64: a fast deterministic generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// The key shape of generated runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyShape {
    /// One `UInt64` column `k`.
    U64,
    /// One `Utf8` column `k`, 12–28 bytes with a shared 9-byte prefix (like TPC-H names).
    Utf8,
    /// Two columns: `k` (`UInt32`, 1000 distinct values) then `k2` (`UInt64`).
    TwoColumns,
}

/// `runs` sorted runs of `rows` rows each: the key column(s) and three payload columns
/// (`p_i64`, `p_f64`, `p_u64`). `duplicates` draws keys from only that many values.
pub fn sorted_runs(shape: KeyShape, runs: usize, rows: usize, duplicates: Option<u64>, seed: u64) -> Vec<RecordBatch> {
    (0..runs)
        .into_par_iter()
        .map(|r| {
            let base = mix(seed ^ (r as u64) << 32);
            let draw = |i: usize| {
                let x = mix(base.wrapping_add(i as u64));
                match duplicates {
                    Some(d) => x % d.max(1),
                    None => x,
                }
            };
            let mut keys: Vec<u64> = (0..rows).map(draw).collect();
            keys.sort_unstable();
            let mut cols: Vec<(&str, ArrayRef)> = match shape {
                KeyShape::U64 => vec![("k", Arc::new(UInt64Array::from(keys.clone())))],
                KeyShape::Utf8 => {
                    // Zero-padded decimal keeps string order equal to numeric order.
                    let names: Vec<String> =
                        keys.iter().map(|k| format!("Customer#{:0w$}", k % 10u64.pow(19), w = 3 + (k % 17) as usize)).collect();
                    let mut names = names;
                    names.sort_unstable();
                    vec![("k", Arc::new(StringArray::from(names)))]
                }
                KeyShape::TwoColumns => {
                    let mut pairs: Vec<(u32, u64)> = keys.iter().map(|&k| ((mix(k) % 1000) as u32, k)).collect();
                    pairs.sort_unstable();
                    vec![
                        ("k", Arc::new(UInt32Array::from_iter_values(pairs.iter().map(|p| p.0)))),
                        ("k2", Arc::new(UInt64Array::from_iter_values(pairs.iter().map(|p| p.1)))),
                    ]
                }
            };
            cols.push(("p_i64", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| (r * rows + i) as i64)))));
            cols.push(("p_f64", Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.5)))));
            cols.push(("p_u64", Arc::new(UInt64Array::from_iter_values((0..rows).map(|i| mix(i as u64))))));
            RecordBatch::try_from_iter(cols).expect("generated columns have equal lengths")
        })
        .collect()
}

/// The merge key of [`lineitem`] data.
pub const LINEITEM_KEY: &str = "l_orderkey";

const SHIP_INSTRUCT: [&str; 4] = ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"];
const SHIP_MODE: [&str; 7] = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"];
const WORDS: [&str; 16] = [
    "furiously",
    "quickly",
    "carefully",
    "blithely",
    "slyly",
    "express",
    "regular",
    "final",
    "pending",
    "ironic",
    "deposits",
    "requests",
    "packages",
    "accounts",
    "theodolites",
    "foxes",
];

/// `rows` rows shaped like TPC-H `lineitem` (16 columns: keys, decimals, dates, short and
/// free-text strings), sorted by `l_orderkey` (drawn from `0..key_range`, so runs overlap).
pub fn lineitem(rows: usize, key_range: u64, seed: u64) -> RecordBatch {
    lineitem_in(rows, 0, key_range, seed)
}

/// [`lineitem`] with `l_orderkey` drawn from `lo..lo + width` (sorted).
pub fn lineitem_in(rows: usize, lo: u64, width: u64, seed: u64) -> RecordBatch {
    let base = mix(seed);
    let r = |i: usize, salt: u64| mix(base ^ mix(i as u64 ^ (salt << 56)));
    let mut orderkeys: Vec<i64> = (0..rows).map(|i| (lo + r(i, 1) % width.max(1)) as i64).collect();
    orderkeys.sort_unstable();
    let dec = |salt: u64, hi: u64| -> ArrayRef {
        Arc::new(
            Decimal128Array::from_iter_values((0..rows).map(|i| (r(i, salt) % hi) as i128))
                .with_precision_and_scale(15, 2)
                .expect("valid decimal"),
        )
    };
    let ship: Vec<i32> = (0..rows).map(|i| 8036 + (r(i, 9) % 2526) as i32).collect();
    let comment = |i: usize| {
        let x = r(i, 15);
        let n = 2 + (x % 5) as usize;
        (0..n).map(|w| WORDS[((x >> (8 + 4 * w)) & 15) as usize]).collect::<Vec<_>>().join(" ")
    };
    let cols: Vec<(&str, ArrayRef)> = vec![
        (LINEITEM_KEY, Arc::new(Int64Array::from(orderkeys))),
        ("l_partkey", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| (r(i, 2) % 200_000) as i64)))),
        ("l_suppkey", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| (r(i, 3) % 10_000) as i64)))),
        ("l_linenumber", Arc::new(Int32Array::from_iter_values((0..rows).map(|i| 1 + (r(i, 4) % 7) as i32)))),
        ("l_quantity", dec(5, 5_000)),
        ("l_extendedprice", dec(6, 10_000_000)),
        ("l_discount", dec(7, 11)),
        ("l_tax", dec(8, 9)),
        ("l_returnflag", Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["R", "A", "N"][(r(i, 10) % 3) as usize])))),
        ("l_linestatus", Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["O", "F"][(r(i, 11) % 2) as usize])))),
        ("l_shipdate", Arc::new(Date32Array::from(ship.clone()))),
        ("l_commitdate", Arc::new(Date32Array::from_iter_values(ship.iter().enumerate().map(|(i, d)| d + (r(i, 12) % 60) as i32 - 30)))),
        ("l_receiptdate", Arc::new(Date32Array::from_iter_values(ship.iter().enumerate().map(|(i, d)| d + 1 + (r(i, 13) % 30) as i32)))),
        ("l_shipinstruct", Arc::new(StringArray::from_iter_values((0..rows).map(|i| SHIP_INSTRUCT[(r(i, 14) % 4) as usize])))),
        ("l_shipmode", Arc::new(StringArray::from_iter_values((0..rows).map(|i| SHIP_MODE[(r(i, 16) % 7) as usize])))),
        ("l_comment", Arc::new(StringArray::from_iter_values((0..rows).map(comment)))),
    ];
    RecordBatch::try_from_iter(cols).expect("generated columns have equal lengths")
}

/// How a generated Parquet file is sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileLayout {
    /// The whole file is sorted, and its row groups say so in `sorting_columns`.
    Sorted,
    /// Each row group is sorted on its own (overlapping the others), with `sorting_columns`.
    RowGroupsSorted,
}

/// Writes `batch` (sorted by `keys`, or per row group for [`FileLayout::RowGroupsSorted`])
/// as a Parquet file with `sorting_columns` set.
#[cfg(feature = "parquet")]
pub fn write_sorted_parquet(
    path: &Path,
    batches: &[RecordBatch],
    keys: &[SortKey],
    row_group_rows: usize,
    compression: Compression,
) -> Result<()> {
    let err = |e| Error::parquet(path, "writing", e);
    let schema = batches.first().ok_or_else(|| Error::InvalidArgument("no batches to write".into()))?.schema();
    let sorting = corank::parquet::sorting_columns(&schema, keys)?;
    let props = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_sorting_columns(Some(sorting))
        .build();
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, "creating", e))?;
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(err)?;
    for b in batches {
        writer.write(b).map_err(err)?;
        // Each batch of a row-group-sorted file is its own row group.
        writer.flush().map_err(err)?;
    }
    writer.close().map_err(err)?;
    Ok(())
}

/// Writes `files` lineitem files of `rows_per_file` rows into `dir` (`part-00.parquet`, ...),
/// zstd-compressed, row groups of `row_group_rows`. Returns their paths.
#[cfg(feature = "parquet")]
pub fn write_lineitem_files(
    dir: &Path,
    files: usize,
    rows_per_file: usize,
    row_group_rows: usize,
    layout: FileLayout,
    seed: u64,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "creating the directory", e))?;
    let key_range = (files * rows_per_file) as u64 / 4 + 1;
    let keys = [SortKey::asc(LINEITEM_KEY)];
    (0..files)
        .into_par_iter()
        .map(|f| {
            let path = dir.join(format!("part-{f:02}.parquet"));
            let seed = seed ^ (f as u64 + 1) << 40;
            let batches: Vec<RecordBatch> = match layout {
                FileLayout::Sorted => vec![lineitem(rows_per_file, key_range, seed)],
                FileLayout::RowGroupsSorted => (0..rows_per_file.div_ceil(row_group_rows.max(1)))
                    .map(|g| lineitem(row_group_rows.min(rows_per_file - g * row_group_rows), key_range, seed ^ g as u64))
                    .collect(),
            };
            write_sorted_parquet(&path, &batches, &keys, row_group_rows, Compression::ZSTD(Default::default()))?;
            Ok(path)
        })
        .collect()
}

/// The datasets of `corank bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Dataset {
    /// Every file spans the whole key range (`l_orderkey` drawn from `0..rows / 4`): every
    /// row takes part in the merge.
    Lineitem,
    /// Time-partitioned, like daily files sorted by timestamp: file `f` covers a contiguous
    /// key range, and consecutive files' ranges overlap by [`TIME_OVERLAP_PERCENT`] of a file's range.
    Time,
}

impl Dataset {
    pub fn name(self) -> &'static str {
        match self {
            Dataset::Lineitem => "lineitem",
            Dataset::Time => "time",
        }
    }
}

/// How much consecutive files of [`Dataset::Time`] overlap: 3% of a file's key range.
pub const TIME_OVERLAP_PERCENT: u64 = 3;

/// The key range `(lo, width)` file `f` of `files` (of `rows_per_file` rows each) draws
/// `l_orderkey` from: `lo..lo + width`.
pub fn dataset_key_range(dataset: Dataset, files: usize, rows_per_file: usize, f: usize) -> (u64, u64) {
    match dataset {
        Dataset::Lineitem => (0, (files * rows_per_file) as u64 / 4 + 1),
        Dataset::Time => {
            // About one key per row; the next file starts `overlap` before this one's end.
            let width = (rows_per_file as u64).max(100);
            let overlap = width * TIME_OVERLAP_PERCENT / 100;
            (f as u64 * (width - overlap), width)
        }
    }
}

/// Writes the `files` files of `dataset` (`rows_per_file` rows each, lineitem columns) into
/// `dir` as `part-00.parquet`, ...: each sorted by `l_orderkey` (`sorting_columns` set),
/// zstd (level 1; passthrough compares codecs, not levels), row groups of `row_group_rows`.
///
/// Streams: a file is written one row group at a time, row group `g` drawing its keys from
/// the `g`-th slice of the file's key range (so the file is sorted without sorting it
/// whole), the files in parallel. Memory is a row group per thread, whatever the size.
#[cfg(feature = "parquet")]
pub fn write_dataset(
    dir: &Path,
    dataset: Dataset,
    files: usize,
    rows_per_file: usize,
    row_group_rows: usize,
    seed: u64,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "creating the directory", e))?;
    let row_group_rows = row_group_rows.max(1);
    (0..files)
        .into_par_iter()
        .map(|f| {
            let path = dir.join(format!("part-{f:02}.parquet"));
            let err = |e| Error::parquet(&path, "writing", e);
            let (lo, width) = dataset_key_range(dataset, files, rows_per_file, f);
            let seed = seed ^ (f as u64 + 1) << 40;
            let slice = |row: usize| lo + (width as u128 * row as u128 / rows_per_file.max(1) as u128) as u64;
            let mut writer: Option<ArrowWriter<std::fs::File>> = None;
            for g in 0..rows_per_file.div_ceil(row_group_rows).max(1) {
                let start = g * row_group_rows;
                let rows = row_group_rows.min(rows_per_file - start);
                let (a, b) = (slice(start), slice(start + rows));
                let batch = lineitem_in(rows, a, (b - a).max(1), seed ^ g as u64);
                if writer.is_none() {
                    let schema = batch.schema();
                    let sorting = corank::parquet::sorting_columns(&schema, &[SortKey::asc(LINEITEM_KEY)])?;
                    let props = WriterProperties::builder()
                        .set_compression(Compression::ZSTD(Default::default()))
                        .set_max_row_group_row_count(Some(row_group_rows))
                        .set_sorting_columns(Some(sorting))
                        .build();
                    let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, "creating", e))?;
                    writer = Some(ArrowWriter::try_new(file, schema, Some(props)).map_err(err)?);
                }
                let w = writer.as_mut().expect("created above");
                w.write(&batch).map_err(err)?;
                w.flush().map_err(err)?;
            }
            writer.expect("at least one row group").close().map_err(err)?;
            Ok(path)
        })
        .collect()
}

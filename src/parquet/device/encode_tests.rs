//! The device page encoder's CPU reference (issue 69, stage 4) against parquet-rs: files it
//! writes read back by parquet-rs's arrow reader equal to their input; its pages and
//! statistics against those parquet-rs's own writer writes for the same data and page
//! cuts; damaged page tables refused in words.

use super::encode_cpu::{encode_chunk, ColumnIn, TILE};
use super::encode_file::{write_file, write_file_with_pages};
use super::encode_plan::{plan_pages, EncodeType, PageLimits, PagePlan};
use arrow::array::{Array, ArrayRef, Date32Array, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::properties::{EnabledStatistics, ReaderProperties, WriterProperties};
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::{ReadOptionsBuilder, SerializedFileReader};
use parquet::file::statistics::Statistics;
use std::sync::Arc;

fn r(i: usize, salt: u64) -> u64 {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

/// How a column's rows are null.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Nulls {
    /// A column declared without nulls.
    Required,
    None,
    Some,
    All,
}

const NULLS: [Nulls; 4] = [Nulls::Required, Nulls::None, Nulls::Some, Nulls::All];

fn valid(n: Nulls, i: usize) -> bool {
    match n {
        Nulls::Required | Nulls::None => true,
        // Runs of nulls and of values as well as scattered ones.
        Nulls::Some => !((i / 700) % 3 == 1 || r(i, 7).is_multiple_of(5)),
        Nulls::All => false,
    }
}

/// A column of `rows` rows of `dt` whose values include each type's edges (extremes; for
/// floats NaN, both zeros, infinities).
fn column(dt: &DataType, rows: usize, n: Nulls, salt: u64) -> ArrayRef {
    let v = |i: usize| valid(n, i);
    let pick = |i: usize| r(i, salt);
    match dt {
        DataType::Int32 => Arc::new(Int32Array::from_iter((0..rows).map(|i| {
            v(i).then(|| match pick(i) % 16 {
                0 => i32::MIN,
                1 => i32::MAX,
                _ => pick(i) as i32 % 1000,
            })
        }))),
        DataType::Date32 => Arc::new(Date32Array::from_iter((0..rows).map(|i| v(i).then(|| (pick(i) % 40_000) as i32 - 10_000)))),
        DataType::Int64 => Arc::new(Int64Array::from_iter((0..rows).map(|i| {
            v(i).then(|| match pick(i) % 16 {
                0 => i64::MIN,
                1 => i64::MAX,
                _ => pick(i) as i64,
            })
        }))),
        DataType::Float32 => Arc::new(Float32Array::from_iter((0..rows).map(|i| {
            v(i).then(|| match pick(i) % 16 {
                0 => f32::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => f32::INFINITY,
                4 => f32::NEG_INFINITY,
                _ => (pick(i) % 2000) as f32 / 7.0 - 100.0,
            })
        }))),
        DataType::Float64 => Arc::new(Float64Array::from_iter((0..rows).map(|i| {
            v(i).then(|| match pick(i) % 16 {
                0 => f64::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => f64::INFINITY,
                4 => f64::NEG_INFINITY,
                _ => (pick(i) % 2000) as f64 / 7.0 - 100.0,
            })
        }))),
        _ => unreachable!("not a covered type"),
    }
}

const TYPES: [DataType; 5] = [DataType::Int32, DataType::Date32, DataType::Int64, DataType::Float32, DataType::Float64];

/// A batch of one column per covered type, all null in the same way.
fn batch(rows: usize, n: Nulls) -> RecordBatch {
    let fields: Vec<Field> = TYPES.iter().enumerate().map(|(i, t)| Field::new(format!("c{i}"), t.clone(), n != Nulls::Required)).collect();
    let columns = TYPES.iter().enumerate().map(|(i, t)| column(t, rows, n, i as u64 + rows as u64)).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

fn read_back(file: Vec<u8>) -> Vec<RecordBatch> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file)).unwrap().build().unwrap();
    reader.collect::<Result<Vec<_>, _>>().unwrap()
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&batches[0].schema(), batches).unwrap()
}

/// The row counts around the page size `p` and the tile.
fn row_counts(p: usize) -> Vec<usize> {
    let mut v = vec![1, 7, 8, 9, p - 1, p, p + 1, 2 * p, 7 * p + 3, TILE - 1, TILE, TILE + 1];
    v.sort_unstable();
    v.dedup();
    v
}

const LIMITS: [PageLimits; 3] = [
    PageLimits { rows: 8, bytes: 1 << 20 },
    PageLimits { rows: 1500, bytes: 1 << 20 },
    // A byte limit that ends pages before the row limit: 100 4-byte or 50 8-byte values.
    PageLimits { rows: 20_000, bytes: 400 },
];

#[test]
fn files_read_back_equal() {
    let mut files = 0;
    for limits in LIMITS {
        for rows in row_counts(limits.rows.min(100)) {
            for n in NULLS {
                let input = batch(rows, n);
                let file = write_file(std::slice::from_ref(&input), limits, false).unwrap();
                let back = concat(&read_back(file));
                assert_eq!(back.schema(), input.schema(), "{limits:?} rows {rows} {n:?}");
                for c in 0..input.num_columns() {
                    assert_eq!(back.column(c).as_ref(), input.column(c).as_ref(), "column {c}, {limits:?}, rows {rows}, {n:?}");
                }
                files += 1;
            }
        }
    }
    assert!(files > 100);
}

#[test]
fn many_row_groups_and_many_pages() {
    let batches = [batch(20_001, Nulls::Some), batch(3, Nulls::Some), batch(45_000, Nulls::Some)];
    let file = write_file(&batches, PageLimits::writer(), true).unwrap();
    let meta = SerializedFileReader::new(Bytes::from(file.clone())).unwrap().metadata().clone();
    assert_eq!(meta.num_row_groups(), 3);
    assert_eq!(meta.row_group(2).num_rows(), 45_000);
    assert_eq!(concat(&read_back(file)), concat(&batches));
}

/// Min, max, null count and whether the deprecated fields are set.
type StatBytes = (Option<Vec<u8>>, Option<Vec<u8>>, Option<u64>, bool);

/// Statistics as their bytes: `Statistics`' own equality compares floats by value, where
/// -0.0 equals 0.0 and NaN equals nothing.
fn stat_bytes(s: Option<&Statistics>) -> Option<StatBytes> {
    s.map(|s| {
        (
            s.min_bytes_opt().map(<[u8]>::to_vec),
            s.max_bytes_opt().map(<[u8]>::to_vec),
            s.null_count_opt(),
            s.is_min_max_backwards_compatible(),
        )
    })
}

/// Each page's statistics in column `c` of row group 0 as parquet-rs's page reader reads
/// them from the page headers.
fn page_stats(file: &[u8], c: usize) -> Vec<Option<StatBytes>> {
    let props = ReaderProperties::builder().set_read_page_statistics(true).build();
    let opts = ReadOptionsBuilder::new().with_reader_properties(props).build();
    let r = SerializedFileReader::new_with_options(Bytes::from(file.to_vec()), opts).unwrap();
    let mut pr = r.get_row_group(0).unwrap().get_column_page_reader(c).unwrap();
    let mut out = Vec::new();
    while let Some(p) = pr.get_next_page().unwrap() {
        out.push(stat_bytes(p.statistics()));
    }
    out
}

/// parquet-rs's writer, set to cut pages as the plan does, PLAIN, uncompressed.
fn parquet_rs_file(input: &RecordBatch, limits: PageLimits, header_stats: bool) -> Vec<u8> {
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_dictionary_enabled(false)
        .set_data_page_row_count_limit(limits.rows)
        .set_write_batch_size(limits.rows)
        .set_data_page_size_limit(limits.bytes)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_write_page_header_statistics(header_stats)
        .build();
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, input.schema(), Some(props)).unwrap();
    w.write(input).unwrap();
    w.close().unwrap();
    out
}

/// Each page's bytes (header and body) of column `c` of row group 0, by the offset index.
fn pages_of(file: &[u8], c: usize) -> Vec<Vec<u8>> {
    let opts = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
    let b = ParquetRecordBatchReaderBuilder::try_new_with_options(Bytes::from(file.to_vec()), opts).unwrap();
    let oi = b.metadata().offset_index().expect("an offset index");
    oi[0][c]
        .page_locations()
        .iter()
        .map(|l| file[l.offset as usize..l.offset as usize + l.compressed_page_size as usize].to_vec())
        .collect()
}

/// Where a page v1's PLAIN values start: after its header and, in a nullable column, its
/// levels' length prefix and levels.
fn values_of(page: &[u8], nullable: bool) -> &[u8] {
    let (_, h) = super::thrift::read_page_header(page).unwrap();
    let body = &page[h..];
    if !nullable {
        return body;
    }
    let len = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
    &body[4 + len..]
}

#[test]
fn pages_and_statistics_match_parquet_rs() {
    let limits = PageLimits { rows: 1500, bytes: 1 << 20 };
    let mut same_pages = 0;
    let mut checked = 0;
    let mut with_stats = 0;
    for rows in [1, 1499, 1500, 1501, 4 * 1500 + 77] {
        for n in NULLS {
            for header_stats in [false, true] {
                let input = batch(rows, n);
                let ours = write_file(std::slice::from_ref(&input), limits, header_stats).unwrap();
                let theirs = parquet_rs_file(&input, limits, header_stats);
                let mo = SerializedFileReader::new(Bytes::from(ours.clone())).unwrap().metadata().clone();
                let mt = SerializedFileReader::new(Bytes::from(theirs.clone())).unwrap().metadata().clone();
                for c in 0..input.num_columns() {
                    let what = format!("column {c}, rows {rows}, {n:?}, header statistics {header_stats}");
                    // The chunk's statistics, as parquet-rs reads them from each footer.
                    assert_eq!(mo.row_group(0).column(c).statistics(), mt.row_group(0).column(c).statistics(), "{what}");
                    assert!(mo.row_group(0).column(c).statistics().is_some(), "{what}");
                    let (so, st) = (mo.row_group(0).column(c).statistics(), mt.row_group(0).column(c).statistics());
                    assert_eq!(stat_bytes(so), stat_bytes(st), "{what}");
                    let (po, pt) = (pages_of(&ours, c), pages_of(&theirs, c));
                    assert_eq!(po.len(), pt.len(), "{what}: pages");
                    let array = input.column(c);
                    for (i, (a, b)) in po.iter().zip(&pt).enumerate() {
                        let nullable = n != Nulls::Required;
                        assert_eq!(values_of(a, nullable), values_of(b, nullable), "{what}, page {i}: values");
                        let first = i * limits.rows;
                        let len = limits.rows.min(rows - first);
                        let nulls = array.slice(first, len).null_count();
                        // A page of one kind of level: the same bytes, header included.
                        if nulls == 0 || nulls == len {
                            assert_eq!(a, b, "{what}, page {i}: bytes");
                            same_pages += 1;
                        }
                        checked += 1;
                    }
                    // The pages' statistics as parquet-rs's page reader reads them.
                    if header_stats {
                        let (so, st) = (page_stats(&ours, c), page_stats(&theirs, c));
                        assert_eq!(so, st, "{what}: page statistics");
                        with_stats += so.iter().flatten().count();
                    }
                }
            }
        }
    }
    assert!(same_pages > 100 && checked > same_pages && with_stats > 100, "{same_pages} of {checked}, {with_stats}");
}

/// Statistics' edge cases one at a time, against parquet-rs's writer: NaN only, zeros of
/// both signs, NaN around the extremes.
#[test]
fn float_statistics_edges_match_parquet_rs() {
    let cases: Vec<Vec<Option<f64>>> = vec![
        vec![Some(f64::NAN)],
        vec![Some(f64::NAN), None, Some(f64::NAN)],
        vec![Some(0.0)],
        vec![Some(-0.0)],
        vec![Some(0.0), Some(-0.0), Some(1.0)],
        vec![Some(-0.0), Some(0.0), Some(-1.0)],
        vec![Some(f64::NAN), Some(3.0), Some(f64::NAN), Some(-2.0)],
        vec![Some(f64::INFINITY), Some(f64::NEG_INFINITY)],
        vec![None],
    ];
    for limits in [PageLimits { rows: 1, bytes: 1 << 20 }, PageLimits { rows: 1000, bytes: 1 << 20 }] {
        for values in &cases {
            let f64s: ArrayRef = Arc::new(Float64Array::from(values.clone()));
            let f32s: ArrayRef = Arc::new(Float32Array::from_iter(values.iter().map(|v| v.map(|v| v as f32))));
            let schema = Schema::new(vec![Field::new("d", DataType::Float64, true), Field::new("f", DataType::Float32, true)]);
            let input = RecordBatch::try_new(Arc::new(schema), vec![f64s, f32s]).unwrap();
            let ours = write_file(std::slice::from_ref(&input), limits, true).unwrap();
            let theirs = parquet_rs_file(&input, limits, true);
            let mo = SerializedFileReader::new(Bytes::from(ours.clone())).unwrap().metadata().clone();
            let mt = SerializedFileReader::new(Bytes::from(theirs.clone())).unwrap().metadata().clone();
            for c in 0..2 {
                let (so, st) = (mo.row_group(0).column(c).statistics(), mt.row_group(0).column(c).statistics());
                assert_eq!(so, st, "{values:?} column {c}");
                assert_eq!(stat_bytes(so), stat_bytes(st), "{values:?} column {c}");
                assert_eq!(page_stats(&ours, c), page_stats(&theirs, c), "{values:?} column {c}: pages");
            }
            assert_eq!(concat(&read_back(ours)), input);
        }
    }
}

#[test]
fn damaged_page_tables_are_errors() {
    let input = batch(100, Nulls::Some);
    let limits = PageLimits { rows: 30, bytes: 1 << 20 };
    let good: Vec<Vec<PagePlan>> =
        input.columns().iter().map(|c| plan_pages(c.as_ref(), EncodeType::of(c.data_type()).unwrap().width(), limits)).collect();
    assert!(write_file_with_pages(std::slice::from_ref(&input), std::slice::from_ref(&good), false).is_ok());
    type Damage = Box<dyn Fn(&mut Vec<PagePlan>)>;
    let damage: Vec<(&str, Damage)> = vec![
        (
            "cover 90 of the column's 100 rows",
            Box::new(|t| {
                t.pop();
            }),
        ),
        ("starts at row 31", Box::new(|t| t[1].first_row = 31)),
        ("runs past", Box::new(|t| t[3].rows = 11)),
        ("holds no rows", Box::new(|t| t.insert(0, PagePlan { first_row: 0, rows: 0, nulls: 0 }))),
        ("nulls", Box::new(|t| t[0].nulls += 1)),
        ("starts at row 0, not at row 30", Box::new(|t| t[1].first_row = 0)),
    ];
    for (want, f) in &damage {
        let mut tables = good.clone();
        f(&mut tables[2]);
        let e = write_file_with_pages(std::slice::from_ref(&input), std::slice::from_ref(&tables), false).unwrap_err();
        assert!(e.contains("row group 0, column c2") && e.contains(want), "{want}: {e}");
    }
    // Tables that do not match the row groups or columns.
    assert!(write_file_with_pages(std::slice::from_ref(&input), &[], false).unwrap_err().contains("0 page tables for 1 row groups"));
    let short = vec![good[..4].to_vec()];
    assert!(write_file_with_pages(std::slice::from_ref(&input), &short, false).unwrap_err().contains("4 page tables for 5 columns"));
    assert!(write_file_with_pages(&[], &[], false).is_err());
    // A column declared without nulls that holds some, and a type not covered.
    let nulls: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None]));
    let required = RecordBatch::try_new(Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)])), vec![nulls.clone()]);
    // Arrow itself refuses that batch; the encoder refuses the column too.
    assert!(required.is_err());
    assert!(ColumnIn::of(nulls.as_ref(), false).unwrap_err().contains("without nulls"));
    let strings = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, true)])),
        vec![Arc::new(StringArray::from(vec!["a"])) as ArrayRef],
    )
    .unwrap();
    assert!(write_file(&[strings], limits, false).unwrap_err().contains("not covered"));
    // The encoder checks the table itself, not only the file writer.
    let col = input.column(0);
    let ci = ColumnIn::of(col.as_ref(), true).unwrap();
    assert!(encode_chunk(col.as_ref(), &ci, &good[0][1..], false).is_err());
}

/// A sliced array (an offset into its buffers) encodes its own rows.
#[test]
fn sliced_arrays_encode_their_rows() {
    let full = batch(5000, Nulls::Some);
    let input = full.slice(1234, 2000);
    let file = write_file(std::slice::from_ref(&input), PageLimits { rows: 700, bytes: 1 << 20 }, true).unwrap();
    assert_eq!(concat(&read_back(file)), input);
}

/// One job of many columns (the launch's unit) gives each column the chunk a job of its
/// own gives: the job's pages, tiles and slots of one column do not touch another's.
#[test]
fn jobs_of_many_columns_encode_each_as_alone() {
    use super::encode_cpu::{finish_chunk, ranges, run_on_cpu};
    use crate::engine::encode_job::plan_job;
    let limits = PageLimits { rows: 1500, bytes: 1 << 20 };
    for n in NULLS {
        let input = batch(3 * TILE + 17, n);
        let cols: Vec<ColumnIn> = input.columns().iter().map(|c| ColumnIn::of(c.as_ref(), n != Nulls::Required).unwrap()).collect();
        let tables: Vec<Vec<PagePlan>> =
            input.columns().iter().zip(&cols).map(|(c, ci)| plan_pages(c.as_ref(), ci.ty.width(), limits)).collect();
        let job =
            plan_job(&cols.iter().map(ColumnIn::arg).collect::<Vec<_>>(), &tables.iter().map(|t| ranges(t)).collect::<Vec<_>>()).unwrap();
        let out = run_on_cpu(&job, &cols.iter().map(ColumnIn::host).collect::<Vec<_>>()).unwrap();
        for (c, (col, table)) in cols.iter().zip(&tables).enumerate() {
            let alone = encode_chunk(input.column(c).as_ref(), col, table, true).unwrap();
            assert_eq!(finish_chunk(&job, &out, c, true).unwrap(), alone, "column {c}, {n:?}");
        }
    }
}

/// The device encoder (`cuda/parquet_encode.cu`, launched by `engine/gpu/parquet_encode.rs`)
/// against its CPU reference: the same records and bytes for the same job; chunks, files.
/// Skipped without a GPU (a failure with `CORANK_REQUIRE_GPU=1`).
#[cfg(feature = "gpu")]
mod on_device {
    use super::super::encode_cpu::{finish_chunk, ranges, run_on_cpu, EncodedChunk};
    use super::*;
    use crate::engine::encode_job::{plan_job, EncodeColumnArg, COLUMN_NULLABLE};
    use crate::engine::gpu::parquet_encode::{encode_chunk_on_device, encode_pages, ColumnOnDevice};

    use crate::engine::tests::support::{gpu_or_skip, small_only as small};

    /// `cols` uploaded, their records with the device addresses.
    fn upload(cols: &[ColumnIn<'_>]) -> (Vec<ColumnOnDevice>, Vec<EncodeColumnArg>) {
        let on: Vec<ColumnOnDevice> = cols.iter().map(|c| ColumnOnDevice::upload(0, c.values, c.host().validity).unwrap()).collect();
        let args = on.iter().zip(cols).map(|(d, c)| d.arg(c.arg())).collect();
        (on, args)
    }

    /// Runs one job of `input`'s columns cut by `limits` on the device and on the CPU:
    /// the same records (tiles' counts, places and statistics; pages' layouts and
    /// statistics) and the same output bytes; then each column's chunk equal to the CPU
    /// reference's own (`encode_chunk`). Returns the pages checked.
    fn same_on_both(input: &RecordBatch, nullable: bool, limits: PageLimits, what: &str) -> usize {
        let cols: Vec<ColumnIn> = input.columns().iter().map(|c| ColumnIn::of(c.as_ref(), nullable).unwrap()).collect();
        let tables: Vec<Vec<PagePlan>> =
            input.columns().iter().zip(&cols).map(|(c, ci)| plan_pages(c.as_ref(), ci.ty.width(), limits)).collect();
        let (on, args) = upload(&cols);
        let job = plan_job(&args, &tables.iter().map(|t| ranges(t)).collect::<Vec<_>>()).unwrap();
        let device = encode_pages(0, &job).unwrap();
        let cpu = run_on_cpu(&job, &cols.iter().map(ColumnIn::host).collect::<Vec<_>>()).unwrap();
        assert_eq!(device.tiles, cpu.tiles, "{what}: tiles");
        assert_eq!(device.pages, cpu.pages, "{what}: pages");
        assert!(device.output == cpu.output, "{what}: the output bytes differ");
        for (c, (col, table)) in cols.iter().zip(&tables).enumerate() {
            let want = encode_chunk(input.column(c).as_ref(), col, table, true).unwrap();
            assert_eq!(finish_chunk(&job, &device, c, true).unwrap(), want, "{what}, column {c}");
        }
        drop(on);
        job.pages.len()
    }

    /// Every covered type, REQUIRED and OPTIONAL with no, some and all nulls, 1 row, row
    /// counts around the tile and the page (pages of 8 rows: many a tile; of 1500: two
    /// tiles, the second short; of 20,000: twenty), the byte limit's cut.
    #[test]
    fn device_pages_match_the_reference() {
        if !gpu_or_skip("device_pages_match_the_reference") {
            return;
        }
        let mut pages = 0;
        let limits: &[PageLimits] = if small() { &LIMITS[..2] } else { &LIMITS };
        for &limits in limits {
            // Around the page of 4-byte values (the byte limit's cut: 100 rows).
            let page = limits.rows_per_page(4);
            let counts = if small() { vec![1, 9, TILE + 1, page + 1] } else { row_counts(page) };
            for rows in counts {
                for n in NULLS {
                    pages += same_on_both(&batch(rows, n), n != Nulls::Required, limits, &format!("{limits:?}, {rows} rows, {n:?}"));
                }
            }
        }
        if !small() {
            for n in NULLS {
                pages += same_on_both(&batch(45_000, n), n != Nulls::Required, PageLimits::writer(), &format!("45,000 rows, {n:?}"));
            }
        }
        assert!(pages > 100, "{pages}");
    }

    /// Float statistics' edges, a column at a time and across tiles: NaN only, NaN around
    /// the extremes, zeros of both signs in either order, infinities, subnormals, NaNs of
    /// both signs and other payloads.
    #[test]
    fn device_float_edges_match_the_reference() {
        if !gpu_or_skip("device_float_edges_match_the_reference") {
            return;
        }
        let nan2 = f64::from_bits(0x7ff8_0000_0000_0001);
        let cases: Vec<Vec<Option<f64>>> = vec![
            vec![Some(f64::NAN)],
            vec![Some(f64::NAN), None, Some(-f64::NAN), Some(nan2)],
            vec![Some(0.0)],
            vec![Some(-0.0)],
            vec![Some(0.0), Some(-0.0), Some(1.0)],
            vec![Some(-0.0), Some(0.0), Some(-1.0)],
            vec![Some(f64::NAN), Some(3.0), Some(f64::NAN), Some(-2.0)],
            vec![Some(f64::INFINITY), Some(f64::NEG_INFINITY)],
            vec![Some(f64::MIN_POSITIVE / 4.0), Some(-f64::MIN_POSITIVE / 8.0), Some(0.0)],
            vec![Some(f32::MIN_POSITIVE as f64 / 4.0), Some(-0.0)],
            vec![None],
        ];
        // Each case alone, then repeated past a tile with NaNs and zeros between (the
        // device's tree meets ties the in-order fold meets in another order).
        let mut inputs: Vec<Vec<Option<f64>>> = cases.clone();
        for case in &cases {
            let mut long: Vec<Option<f64>> = Vec::new();
            for i in 0..(2 * TILE + 3) {
                long.push(match i % 7 {
                    0 => Some(f64::NAN),
                    1 => Some(if i % 2 == 0 { 0.0 } else { -0.0 }),
                    _ => case[i % case.len()],
                });
            }
            inputs.push(long);
        }
        for values in &inputs {
            let f64s: ArrayRef = Arc::new(Float64Array::from(values.clone()));
            let f32s: ArrayRef = Arc::new(Float32Array::from_iter(values.iter().map(|v| v.map(|v| v as f32))));
            let schema = Schema::new(vec![Field::new("d", DataType::Float64, true), Field::new("f", DataType::Float32, true)]);
            let input = RecordBatch::try_new(Arc::new(schema), vec![f64s, f32s]).unwrap();
            for limits in [PageLimits { rows: 1, bytes: 1 << 20 }, PageLimits { rows: 1500, bytes: 1 << 20 }] {
                if small() && limits.rows == 1 && values.len() > 100 {
                    continue;
                }
                same_on_both(
                    &input,
                    true,
                    limits,
                    &format!("{} values from {:?}, {limits:?}", values.len(), &values[..values.len().min(4)]),
                );
            }
        }
    }

    /// A chunk of the device's (`encode_chunk_on_device`), in files of many row groups:
    /// the same bytes as the CPU reference's file, read back by parquet-rs equal to the
    /// input.
    #[test]
    fn device_encoded_files_read_back_equal() {
        if !gpu_or_skip("device_encoded_files_read_back_equal") {
            return;
        }
        let on_device = |array: &dyn Array, col: &ColumnIn<'_>, table: &[PagePlan]| -> Result<EncodedChunk, String> {
            super::super::encode_plan::check_pages(array, table)?;
            let (on, args) = upload(std::slice::from_ref(col));
            let chunk = encode_chunk_on_device(0, args[0], &ranges(table), true).map_err(|e| e.to_string());
            drop(on);
            chunk
        };
        let sizes: &[usize] = if small() { &[1, TILE + 1, 3000] } else { &[1, 20_001, 3, 45_000] };
        for n in NULLS {
            for limits in [PageLimits::writer(), PageLimits { rows: 700, bytes: 1 << 20 }, PageLimits { rows: 20_000, bytes: 400 }] {
                let batches: Vec<RecordBatch> = sizes.iter().map(|&rows| batch(rows, n)).collect();
                let tables: Vec<Vec<Vec<PagePlan>>> = batches
                    .iter()
                    .map(|b| {
                        b.columns().iter().map(|c| plan_pages(c.as_ref(), EncodeType::of(c.data_type()).unwrap().width(), limits)).collect()
                    })
                    .collect();
                let file = super::super::encode_file::write_file_encoded_by(&batches, &tables, &[], on_device).unwrap();
                assert!(file == write_file_with_pages(&batches, &tables, true).unwrap(), "{n:?} {limits:?}: the CPU's file differs");
                assert_eq!(concat(&read_back(file)), concat(&batches), "{n:?} {limits:?}");
            }
        }
        // A sliced input (its bitmap at a bit offset, moved to bit 0 before the upload).
        let input = batch(5000, Nulls::Some).slice(1234, 2000);
        let tables: Vec<Vec<Vec<PagePlan>>> = vec![input
            .columns()
            .iter()
            .map(|c| plan_pages(c.as_ref(), EncodeType::of(c.data_type()).unwrap().width(), PageLimits { rows: 700, bytes: 1 << 20 }))
            .collect()];
        let file = super::super::encode_file::write_file_encoded_by(std::slice::from_ref(&input), &tables, &[], on_device).unwrap();
        assert_eq!(concat(&read_back(file)), input);
    }

    /// A column declared REQUIRED whose bitmap holds nulls: the device and the CPU write
    /// the same records, and the chunk is refused in words.
    #[test]
    fn device_refuses_nulls_in_a_required_column() {
        if !gpu_or_skip("device_refuses_nulls_in_a_required_column") {
            return;
        }
        let array = Int64Array::from_iter((0..3000).map(|i| (i % 5 != 0).then_some(i as i64)));
        let col = ColumnIn::of(&array, true).unwrap();
        let (on, args) = upload(std::slice::from_ref(&col));
        let required = EncodeColumnArg { flags: args[0].flags & !COLUMN_NULLABLE, ..args[0] };
        let cuts = vec![0..1000, 1000..3000];
        let job = plan_job(&[required], std::slice::from_ref(&cuts)).unwrap();
        let device = encode_pages(0, &job).unwrap();
        let host = col.host();
        assert_eq!(device, run_on_cpu(&job, &[host]).unwrap());
        assert!(finish_chunk(&job, &device, 0, false).unwrap_err().contains("holds nulls in a column without nulls"));
        let e = encode_chunk_on_device(0, required, &cuts, false).unwrap_err();
        assert!(e.to_string().contains("without nulls"), "{e}");
        drop(on);
    }
}

/// The footer says what corank's CPU writer says: every row group's `sorting_columns` are
/// the merge key's (as `parquet::sorting_columns` derives them for the writer), and the
/// Arrow schema is stored, so a reader gets the input's schema back, field metadata and
/// all; without a key, no `sorting_columns`.
#[test]
fn footers_carry_the_key_and_the_arrow_schema() {
    use super::encode_file::write_file_encoded_by;
    use arrow::compute::SortOptions;
    let plain = batch(3000, Nulls::Some);
    // A field with metadata, which only the stored Arrow schema carries.
    let fields: Vec<Field> = plain
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = f.as_ref().clone();
            if i == 1 {
                f.with_metadata([("unit".to_string(), "cents".to_string())].into())
            } else {
                f
            }
        })
        .collect();
    let input = RecordBatch::try_new(Arc::new(Schema::new(fields)), plain.columns().to_vec()).unwrap();
    let keys = vec![
        crate::SortKey::new("c1", SortOptions { descending: false, nulls_first: true }),
        crate::SortKey::new("c0", SortOptions { descending: true, nulls_first: false }),
    ];
    let tables: Vec<Vec<PagePlan>> = input
        .columns()
        .iter()
        .map(|c| plan_pages(c.as_ref(), EncodeType::of(c.data_type()).unwrap().width(), PageLimits::writer()))
        .collect();
    let batches = [input.clone(), input.clone()];
    let pages = [tables.clone(), tables.clone()];
    let file = write_file_encoded_by(&batches, &pages, &keys, |a, col, t| encode_chunk(a, col, t, true)).unwrap();
    let meta = SerializedFileReader::new(Bytes::from(file.clone())).unwrap().metadata().clone();
    let want = crate::parquet::sorting_columns(&input.schema(), &keys).unwrap();
    assert_eq!(want.len(), 2);
    for g in 0..meta.num_row_groups() {
        assert_eq!(meta.row_group(g).sorting_columns(), Some(&want), "row group {g}");
    }
    let back = read_back(file);
    assert_eq!(back[0].schema(), input.schema(), "the stored Arrow schema, field metadata included");
    assert_eq!(back[0].schema().field(1).metadata().get("unit").map(String::as_str), Some("cents"));
    assert_eq!(concat(&back), concat(&batches));
    // No key: no sorting_columns, the Arrow schema still stored.
    let file = write_file_encoded_by(std::slice::from_ref(&input), &[tables], &[], |a, col, t| encode_chunk(a, col, t, true)).unwrap();
    let meta = SerializedFileReader::new(Bytes::from(file.clone())).unwrap().metadata().clone();
    assert_eq!(meta.row_group(0).sorting_columns(), None);
    assert_eq!(read_back(file)[0].schema(), input.schema());
    // A key naming no column is an error, not a file.
    let e = write_file_encoded_by(
        std::slice::from_ref(&input),
        &[vec![]],
        &[crate::SortKey::new("nope", SortOptions::default())],
        |a, col, t| encode_chunk(a, col, t, true),
    );
    assert!(e.is_err());
}

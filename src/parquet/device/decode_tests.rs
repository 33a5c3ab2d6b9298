//! Stage 2's decode against parquet-rs's arrow reader, column by column (`ArrayData`
//! equality, validity included): the plan and the kernels' CPU reference on files arrow-rs
//! writes (every covered type, nulls none / some / all, dictionary on and off, a dictionary
//! that falls back to PLAIN mid-chunk, small and large pages, data page v1 and v2, zstd /
//! snappy / uncompressed), what is not covered, damaged pages; and (on the GPU machine) the
//! same files decoded on the device. The GPU cases skip as stage 1's do (`tests.rs`).

use super::bench::arrow_read;
use super::decode::{decode_on_cpu, decode_on_device, layout, plan_chunk};
use super::decode_cpu::{decode_chunk, offsets_of, utf8_ok, Slot, CHUNK};
use super::decode_fault::Fault;
use super::decode_plan::{arrow_types, DecodePlan, Levels, Physical, Planned, Values};
use super::decompress::{decompress_on_cpu, plan as layout_pages, ColumnChunk};
use super::page_table::PageKind;
use super::tests::{chunks, metadata, nvcomp_or_skip};
use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float32Array, Float64Array, Int32Array,
    Int64Array, LargeBinaryArray, LargeStringArray, ListArray, RecordBatch, StringArray, StringViewArray,
};
use arrow::datatypes::{DataType, Int32Type};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterVersion};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn r(i: usize, salt: u64) -> u64 {
    let mut x = (i as u64 ^ (salt << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x.wrapping_mul(0xD1B5_4A32_D192_ED03) >> 7
}

/// Every covered type, required and nullable (nulls some / all), low and high cardinality;
/// then columns that are not covered.
fn batch(rows: usize) -> RecordBatch {
    let some = |i: usize, s: u64| !r(i, s).is_multiple_of(3);
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("i32", Arc::new(Int32Array::from_iter_values((0..rows).map(|i| r(i, 1) as i32)))),
        ("i32_low", Arc::new(Int32Array::from_iter_values((0..rows).map(|i| (r(i, 2) % 7) as i32 - 3)))),
        ("i64", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| r(i, 3) as i64 - (1 << 55))))),
        ("i64_null", Arc::new(Int64Array::from_iter((0..rows).map(|i| some(i, 4).then_some((r(i, 5) % 1000) as i64))))),
        ("i32_all_null", Arc::new(Int32Array::from_iter((0..rows).map(|_| None::<i32>)))),
        ("f32", Arc::new(Float32Array::from_iter((0..rows).map(|i| some(i, 6).then_some(r(i, 7) as f32 / 7.0))))),
        ("f64", Arc::new(Float64Array::from_iter_values((0..rows).map(|i| (r(i, 8) % 100) as f64 * -0.25)))),
        ("date", Arc::new(Date32Array::from_iter((0..rows).map(|i| some(i, 9).then_some(8036 + (r(i, 10) % 2526) as i32))))),
        (
            "dec_i64",
            Arc::new(
                Decimal128Array::from_iter((0..rows).map(|i| some(i, 11).then_some((r(i, 12) % 10_000_000) as i128 - 5_000_000)))
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
        ),
        (
            "dec_i32",
            Arc::new(
                Decimal128Array::from_iter_values((0..rows).map(|i| (r(i, 13) % 100_000) as i128 - 50_000))
                    .with_precision_and_scale(7, 2)
                    .unwrap(),
            ),
        ),
        ("text", Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["AIR", "RAIL", "SHIP"][(r(i, 14) % 3) as usize])))),
        ("flag", Arc::new(BooleanArray::from_iter((0..rows).map(|i| Some(r(i, 15).is_multiple_of(2)))))),
        ("list", Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>((0..rows).map(|i| Some(vec![Some(i as i32); i % 3]))))),
        // Byte arrays: high cardinality, non-ASCII, nulls; bytes that are not UTF-8, empty
        // values; empty strings; all null; values over 64 KiB; i64 offsets; a view.
        (
            "name",
            Arc::new(StringArray::from_iter(
                (0..rows).map(|i| some(i, 16).then(|| format!("näme-{}-€{}", r(i, 17) % 5000, "ü".repeat(i % 4)))),
            )),
        ),
        (
            "blob",
            Arc::new(BinaryArray::from_iter_values((0..rows).map(|i| {
                let n = (r(i, 18) % 12) as usize;
                (0..n).map(|k| (r(i * 16 + k, 19) as u8) | 0x80).collect::<Vec<u8>>()
            }))),
        ),
        ("empty", Arc::new(StringArray::from_iter_values((0..rows).map(|i| if r(i, 20).is_multiple_of(5) { "x" } else { "" })))),
        ("str_all_null", Arc::new(StringArray::from_iter((0..rows).map(|_| None::<&str>)))),
        (
            "long",
            Arc::new(StringArray::from_iter((0..rows).map(|i| match i % 1000 {
                7 => Some(format!("{i}:").repeat(70_000 / 5)),
                k if k % 3 == 0 => None,
                _ => Some(format!("s{}", r(i, 21) % 50)),
            }))),
        ),
        (
            "large",
            Arc::new(LargeStringArray::from_iter(
                (0..rows).map(|i| some(i, 22).then(|| ["AIR", "REG AIR", "TRUCK", "MAIL"][(r(i, 23) % 4) as usize])),
            )),
        ),
        ("large_bin", Arc::new(LargeBinaryArray::from_iter_values((0..rows).map(|i| r(i, 24).to_le_bytes()[..(i % 9)].to_vec())))),
        ("view", Arc::new(StringViewArray::from_iter_values((0..rows).map(|i| format!("v{}", r(i, 25) % 100))))),
        // FIXED_LEN_BYTE_ARRAY: a FixedSizeBinary, Decimal128 of 16 and of 9 bytes (negative
        // values too: the sign extension).
        (
            "fsb",
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    (0..rows).map(|i| some(i, 26).then(|| r(i, 27).to_be_bytes()[..5].to_vec())),
                    5,
                )
                .unwrap(),
            ),
        ),
        (
            "dec38",
            Arc::new(
                Decimal128Array::from_iter(
                    (0..rows).map(|i| {
                        some(i, 28).then(|| (i128::from(r(i, 29)) << 60 | i128::from(r(i, 30))) * if i % 2 == 0 { 1 } else { -1 })
                    }),
                )
                .with_precision_and_scale(38, 4)
                .unwrap(),
            ),
        ),
        (
            "dec20",
            Arc::new(
                Decimal128Array::from_iter_values((0..rows).map(|i| (r(i, 31) % 1000) as i128 * 1_000_000_000_007 - 500_000_000_000_000))
                    .with_precision_and_scale(20, 3)
                    .unwrap(),
            ),
        ),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

/// Leaves that are not covered, by name, and why in a word the reason holds.
const NOT_COVERED: [(&str, &str); 3] = [("view", "Utf8View"), ("flag", "BOOLEAN"), ("list.list.item", "repeated")];

#[derive(Debug, Clone, Copy)]
struct Shape {
    codec: Compression,
    v2: bool,
    dictionary: bool,
    page_bytes: usize,
    dict_bytes: usize,
    /// PLAIN named as the columns' encoding: the fallback from a dictionary (arrow-rs's own
    /// for v2 pages is DELTA_BINARY_PACKED for integers, DELTA_BYTE_ARRAY for byte arrays,
    /// which is not covered).
    plain: bool,
    rows: usize,
}

fn write(dir: &Path, s: Shape) -> PathBuf {
    let name = format!("{:?}-{}-{}-{}-{}-{}-{}.parquet", s.codec, s.v2, s.dictionary, s.page_bytes, s.dict_bytes, s.plain, s.rows);
    let path = dir.join(name.replace(['(', ')', ' '], ""));
    let mut props = WriterProperties::builder();
    if s.plain {
        props = props.set_encoding(Encoding::PLAIN);
    }
    let props = props
        .set_compression(s.codec)
        .set_writer_version(if s.v2 { WriterVersion::PARQUET_2_0 } else { WriterVersion::PARQUET_1_0 })
        .set_dictionary_enabled(s.dictionary)
        .set_data_page_size_limit(s.page_bytes)
        .set_dictionary_page_size_limit(s.dict_bytes)
        .set_write_batch_size(256.min(s.page_bytes))
        .set_max_row_group_row_count(Some(s.rows.div_ceil(2).max(1)))
        .build();
    let b = batch(s.rows);
    let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), b.schema(), Some(props)).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    path
}

fn shapes(rows: usize) -> Vec<Shape> {
    let mut v = Vec::new();
    for codec in [Compression::ZSTD(ZstdLevel::default()), Compression::SNAPPY, Compression::UNCOMPRESSED] {
        for v2 in [false, true] {
            for dictionary in [true, false] {
                for (page_bytes, dict_bytes) in [(512, 1 << 20), (1 << 20, 1 << 20), (1024, 256)] {
                    if !dictionary && dict_bytes < 1024 {
                        continue;
                    }
                    for plain in [false, true] {
                        if plain && !v2 {
                            continue; // v1's fallback is PLAIN already
                        }
                        v.push(Shape { codec, v2, dictionary, page_bytes, dict_bytes, plain, rows });
                    }
                }
            }
        }
    }
    v
}

/// Each chunk of `path` with its plan (`None`: not covered, with the reason checked) and
/// parquet-rs's array for it.
struct Case<'a> {
    chunk: ColumnChunk<'a>,
    plan: Option<DecodePlan>,
    want: ArrayRef,
}

fn cases<'a>(path: &Path, meta: &'a parquet::file::metadata::ParquetMetaData) -> Vec<Case<'a>> {
    let schema = meta.file_metadata().schema_descr();
    let types = arrow_types(schema, meta.file_metadata().key_value_metadata());
    let n = schema.num_columns();
    let mut out = Vec::new();
    for (k, chunk) in chunks(path, meta).into_iter().enumerate() {
        let leaf = k % n;
        let want = arrow_read(path, chunk.row_group, &[leaf]).unwrap().remove(0);
        let name = schema.column(leaf).path().string();
        let plan = match plan_chunk(&chunk, types[leaf].as_ref()).unwrap() {
            Planned::Covered(p) => {
                assert!(!NOT_COVERED.iter().any(|(c, _)| *c == name), "{name} was planned");
                assert_eq!(&p.data_type, want.data_type(), "{name}");
                Some(p)
            }
            Planned::NotCovered(why) => {
                let expected = NOT_COVERED.iter().find(|(c, _)| *c == name);
                // arrow-rs's v2 pages of byte arrays without a dictionary (or past it):
                // DELTA_BYTE_ARRAY.
                let delta = why.contains("DELTA_BYTE_ARRAY") && chunk.table.pages.iter().any(|p| p.kind == PageKind::DataV2);
                assert!(delta || expected.is_some_and(|(_, w)| why.contains(w)), "{name} not covered: {why}");
                None
            }
        };
        out.push(Case { chunk, plan, want });
    }
    out
}

/// The kernels' CPU reference against parquet-rs's arrow reader on every shape: every
/// covered chunk equal, nulls' slots zero; every kind of page seen.
#[test]
fn cpu_reference_matches_parquet_rs() {
    let dir = tempfile::tempdir().unwrap();
    // [v1 pages, v2 pages, dictionary pages, PLAIN pages after a dictionary (fallback), nulls,
    //  byte array chunks, ... with a PLAIN value over 64 KiB, ... with i64 offsets,
    //  FIXED_LEN_BYTE_ARRAY chunks, DELTA_BINARY_PACKED pages]
    let mut seen = [0usize; 10];
    for s in shapes(3000) {
        let path = write(dir.path(), s);
        let meta = metadata(&path);
        for case in cases(&path, &meta) {
            let Some(plan) = case.plan else { continue };
            let at = format!("{s:?}, row group {}, {}", case.chunk.row_group, case.chunk.meta.column_path().string());
            let got = decode_on_cpu(&case.chunk, &plan).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(got.to_array_data(&plan).unwrap(), case.want.to_data(), "{at}");
            if let Some(bits) = &got.validity {
                let w = plan.out_width;
                for row in 0..got.rows {
                    if bits[row / 8] >> (row % 8) & 1 == 0 {
                        seen[4] += 1;
                        if got.data.is_some() {
                            // A null byte array: a zero-length slot.
                            assert_eq!(got.values[row * w..(row + 1) * w], got.values[(row + 1) * w..(row + 2) * w], "{at}: row {row}");
                        } else {
                            assert!(got.values[row * w..(row + 1) * w].iter().all(|&b| b == 0), "{at}: row {row}");
                        }
                    }
                }
            }
            seen[8] += usize::from(matches!(plan.physical, Physical::FixedLen(_)));
            seen[9] += plan.pages.iter().filter(|p| p.encoding == Values::Delta).count();
            if let Some(data) = &got.data {
                seen[5] += 1;
                seen[6] += usize::from(data.len() > 64 << 10 && plan.pages.iter().any(|p| p.encoding == Values::Plain));
                seen[7] += usize::from(plan.out_width == 8);
            }
            for p in &plan.pages {
                seen[usize::from(case.chunk.table.pages[p.page].kind == PageKind::DataV2)] += 1;
                if plan.dictionary.is_some() && p.encoding == Values::Plain {
                    seen[3] += 1;
                }
            }
            seen[2] += usize::from(plan.dictionary.is_some());
        }
    }
    assert!(seen.iter().all(|&n| n > 10), "{seen:?}");
}

/// Damaged page bodies are faults, never panics or reads out of bounds: every cut of each
/// page and random byte flips, and the specific faults of specific damage.
#[test]
fn damaged_pages_are_faults() {
    let dir = tempfile::tempdir().unwrap();
    let mut faults = std::collections::HashSet::new();
    let mut delta_counts = 0;
    // The last: arrow-rs's v2 fallback, DELTA_BINARY_PACKED for integers.
    for (v2, dictionary, plain) in
        [(false, true, true), (true, true, true), (false, false, true), (true, false, true), (true, false, false)]
    {
        let s = Shape { codec: Compression::UNCOMPRESSED, v2, dictionary, page_bytes: 1024, dict_bytes: 4096, plain, rows: 2000 };
        let path = write(dir.path(), s);
        let meta = metadata(&path);
        for case in cases(&path, &meta).into_iter().filter(|c| c.plan.is_some() && c.chunk.row_group == 0) {
            let plan = case.plan.unwrap();
            let bodies = decompress_on_cpu(&case.chunk).unwrap();
            let page_bodies: Vec<Vec<u8>> = bodies.iter().map(|b| b.to_vec()).collect();
            let p = plan.pages[0];
            // Body index of the first data page (the dictionary comes first).
            let bi = usize::from(plan.dictionary.is_some());
            let run = |body: Vec<u8>, plan: &DecodePlan| {
                let mut b: Vec<Option<&[u8]>> = page_bodies.iter().map(|b| Some(&b[..])).collect();
                b[bi] = Some(&body[..]);
                decode_chunk(plan, &b)
            };
            // Every cut of the page (the plan told its new length): a fault or, where the cut
            // only drops padding, the same values.
            for cut in 0..page_bodies[bi].len() {
                let mut short = plan.clone();
                short.pages[0].body_len = cut;
                if let Levels::Stated { at, len } = p.levels {
                    if at + len > cut {
                        continue; // the page table refuses such a page before decoding
                    }
                }
                if let Err((page, f)) = run(page_bodies[bi][..cut].to_vec(), &short) {
                    assert_eq!(page, p.page);
                    faults.insert(f);
                }
            }
            // Random flips: never a panic.
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for _ in 0..300 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut body = page_bodies[bi].clone();
                let at = (x % body.len() as u64) as usize;
                body[at] ^= 1 << ((x >> 32) % 8);
                if let Err((_, f)) = run(body, &plan) {
                    faults.insert(f);
                }
            }
            // A v1 page's level length past the page.
            if plan.nullable && p.levels == Levels::Prefixed {
                let mut body = page_bodies[bi].clone();
                body[..4].copy_from_slice(&u32::MAX.to_le_bytes());
                assert_eq!(run(body, &plan).unwrap_err().1, Fault::LevelsLength);
            }
            // A dictionary page's bit width over 32.
            if p.encoding == Values::Dictionary && !plan.nullable {
                let mut body = page_bodies[bi].clone();
                body[p.values_at] = 40;
                assert_eq!(run(body, &plan).unwrap_err().1, Fault::BitWidth);
            }
            // Byte arrays: the first value's length prefix past the page; its first byte not
            // UTF-8 (a fault of the chunk); the dictionary's first entry past its page.
            if plan.physical == Physical::ByteArray {
                let body = &page_bodies[bi];
                let values_at = match p.levels {
                    Levels::Prefixed => 4 + u32::from_le_bytes(body[..4].try_into().unwrap()) as usize,
                    _ => p.values_at,
                };
                if p.encoding == Values::Plain && body.len() >= values_at + 4 {
                    let mut b = body.clone();
                    b[values_at..values_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                    assert_eq!(run(b, &plan).unwrap_err(), (p.page, Fault::ValuesEnd));
                    faults.insert(Fault::ValuesEnd);
                    let len = u32::from_le_bytes(body[values_at..values_at + 4].try_into().unwrap());
                    if plan.utf8 && len > 0 {
                        let mut b = body.clone();
                        b[values_at + 4] = 0xff;
                        assert_eq!(run(b, &plan).unwrap_err(), (CHUNK, Fault::Utf8));
                        faults.insert(Fault::Utf8);
                    }
                }
                if let Some(d) = plan.dictionary.filter(|d| d.entries > 0) {
                    let mut b: Vec<Option<&[u8]>> = page_bodies.iter().map(|b| Some(&b[..])).collect();
                    let mut dict = page_bodies[0].clone();
                    let past = dict.len() as u32 - 3;
                    dict[..4].copy_from_slice(&past.to_le_bytes());
                    b[0] = Some(&dict[..]);
                    assert_eq!(decode_chunk(&plan, &b).unwrap_err(), (d.page, Fault::DictionaryEnd));
                    faults.insert(Fault::DictionaryEnd);
                }
            }
            // A delta page's block size not a multiple of 128; its values' count short.
            if p.encoding == Values::Delta {
                let mut body = page_bodies[bi].clone();
                body[p.values_at] = 100;
                assert_eq!(run(body, &plan).map(|_| ()).unwrap_err(), (p.page, Fault::DeltaHeader));
                faults.insert(Fault::DeltaHeader);
                // Block size (2 bytes for 128), miniblocks (1), then the total count made one,
                // in as many bytes as it had, where the page has two values or more.
                if p.values - p.nulls.unwrap_or(0) >= 2 {
                    let mut body = page_bodies[bi].clone();
                    let at = p.values_at + 2 + 1;
                    let len = body[at..].iter().position(|b| b & 0x80 == 0).unwrap() + 1;
                    for (k, b) in body[at..at + len].iter_mut().enumerate() {
                        *b = match (k == 0, k + 1 == len) {
                            (true, true) => 1,
                            (true, false) => 0x81,
                            (false, true) => 0,
                            (false, false) => 0x80,
                        };
                    }
                    assert_eq!(run(body, &plan).map(|_| ()).unwrap_err(), (p.page, Fault::DeltaEnd));
                    delta_counts += 1;
                }
            }
            // A v2 page's null count off by one.
            if let Some(nulls) = p.nulls {
                let mut wrong = plan.clone();
                wrong.pages[0].nulls = Some(nulls + 1);
                let b: Vec<Option<&[u8]>> = page_bodies.iter().map(|b| Some(&b[..])).collect();
                assert_eq!(decode_chunk(&wrong, &b).unwrap_err().1, Fault::NullCount);
            }
        }
    }
    for f in [
        Fault::LevelsLength,
        Fault::LevelsEnd,
        Fault::ValuesEnd,
        Fault::BitWidth,
        Fault::IndicesEnd,
        Fault::NullCount,
        Fault::DictionaryEnd,
        Fault::Utf8,
        Fault::DeltaHeader,
        Fault::DeltaEnd,
    ] {
        assert!(faults.contains(&f), "{f:?} never seen: {faults:?}");
    }
    assert!(delta_counts > 0);
}

/// Contradictions of the table and the column are errors; what is not covered says why.
#[test]
fn plans_refuse_and_decline() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape { codec: Compression::SNAPPY, v2: true, dictionary: true, page_bytes: 4096, dict_bytes: 4096, plain: false, rows: 1000 };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let mut all = chunks(&path, &meta);
    let c = &mut all[3]; // i64_null
    let ty = DataType::Int64;
    assert!(matches!(plan_chunk(c, Some(&ty)).unwrap(), Planned::Covered(_)));
    assert!(matches!(plan_chunk(c, None).unwrap(), Planned::NotCovered(_)));
    assert!(matches!(plan_chunk(c, Some(&DataType::Int32)).unwrap(), Planned::NotCovered(_)));
    let d = c.table.pages.iter().position(|p| p.kind == PageKind::DataV2).unwrap();
    c.table.pages[d].def_levels_len -= 1;
    let e = plan_chunk(c, Some(&ty)).unwrap_err().to_string();
    assert!(e.contains("repetition levels") && e.contains(&format!("page {d}")), "{e}");
    c.table.pages[d].def_levels_len += 1;
    c.table.pages.remove(0); // the dictionary page
    let e = plan_chunk(c, Some(&ty)).unwrap_err().to_string();
    assert!(e.contains("no dictionary page"), "{e}");
}

/// The device layout of every covered chunk: each page's body where stage 1 put it, each
/// chunk's outputs apart, aligned and inside the buffer.
#[test]
fn device_layouts_are_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        codec: Compression::ZSTD(ZstdLevel::default()),
        v2: true,
        dictionary: true,
        page_bytes: 1024,
        dict_bytes: 256,
        plain: true,
        rows: 3000,
    };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let cs = cases(&path, &meta);
    let covered: Vec<&Case<'_>> = cs.iter().filter(|c| c.plan.is_some()).collect();
    let chunks: Vec<ColumnChunk<'_>> = covered.iter().map(|c| c.chunk.clone_chunk()).collect();
    let stage1 = layout_pages(&chunks).unwrap();
    let plans: Vec<&DecodePlan> = covered.iter().map(|c| c.plan.as_ref().unwrap()).collect();
    let (job, outs) = layout(&plans, &stage1.pages).unwrap();
    assert_eq!(job.pages.len(), plans.iter().map(|p| p.pages.len()).sum::<usize>());
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for (o, p) in outs.iter().zip(&plans) {
        assert_eq!(o.values % 16, 0);
        match o.bytes {
            // A byte array chunk: its offsets, and its slots and its dictionary's.
            Some(k) => {
                let c = &job.byte_chunks[k];
                assert_eq!(o.values_len, (p.rows as usize + 1) * p.out_width);
                assert_eq!((c.offsets as usize, c.rows, c.offset_width as usize), (o.values, p.rows, p.out_width));
                assert_eq!(c.slots % 16, 0);
                spans.push((c.slots as usize, c.slots as usize + o.rows * 16));
            }
            None => assert_eq!(o.values_len, p.rows as usize * p.out_width),
        }
        spans.push((o.values, o.values + o.values_len));
        if let Some(v) = o.validity {
            assert_eq!(v % 16, 0);
            spans.push((v, v + o.rows.div_ceil(32) * 4));
        }
    }
    assert_eq!(job.byte_chunks.len(), outs.iter().filter(|o| o.bytes.is_some()).count());
    assert!(!job.dicts.is_empty());
    for d in &job.dicts {
        assert_eq!(d.slots % 16, 0);
        spans.push((d.slots as usize, d.slots as usize + d.entries as usize * 16));
    }
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
    assert!(spans.last().unwrap().1 <= job.output_len);
    for a in &job.pages {
        assert!(a.body + u64::from(a.body_len) <= stage1.job.output_len as u64);
    }
}

/// Every covered chunk decoded on the device (stage 1, then the kernel) equal to
/// parquet-rs's arrow reader's and to the CPU reference's.
#[test]
fn device_decode_matches_parquet_rs() {
    if !nvcomp_or_skip("device_decode_matches_parquet_rs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = std::env::var("CORANK_GPU_SMALL").as_deref() == Ok("1");
    let mut checked = 0;
    for rows in [3000, 200_000] {
        if small && rows > 3000 {
            continue;
        }
        for s in shapes(rows) {
            let path = write(dir.path(), s);
            let meta = metadata(&path);
            let cs: Vec<Case<'_>> = cases(&path, &meta).into_iter().filter(|c| c.plan.is_some()).collect();
            let plans: Vec<&DecodePlan> = cs.iter().map(|c| c.plan.as_ref().unwrap()).collect();
            let chunks: Vec<ColumnChunk<'_>> = cs.iter().map(|c| c.chunk.clone_chunk()).collect();
            let done = decode_on_device(0, &chunks, &plans).unwrap_or_else(|e| panic!("{s:?}: {e}"));
            for ((got, c), plan) in done.to_host().unwrap().iter().zip(&cs).zip(&plans) {
                let at = format!("{s:?}, row group {}, {}", c.chunk.row_group, c.chunk.meta.column_path().string());
                assert_eq!(got.to_array_data(plan).unwrap(), c.want.to_data(), "{at}");
                assert_eq!(got, &decode_on_cpu(&c.chunk, plan).unwrap(), "{at}: the device's buffers and the reference's");
                checked += 1;
            }
            std::fs::remove_file(&path).unwrap();
        }
    }
    eprintln!("device_decode_matches_parquet_rs: {checked} chunks equal");
}

/// A damaged page on the device: an error naming the row group, column, page and fault
/// (the CPU reference names the same).
#[test]
fn device_names_a_damaged_page() {
    if !nvcomp_or_skip("device_names_a_damaged_page") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        codec: Compression::UNCOMPRESSED,
        v2: false,
        dictionary: true,
        page_bytes: 1024,
        dict_bytes: 1 << 20,
        plain: false,
        rows: 4000,
    };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let cs = cases(&path, &meta);
    let c = &cs[2]; // i64: required, dictionary-encoded
    let plan = c.plan.as_ref().unwrap();
    let p = plan.pages[1];
    assert_eq!(p.encoding, Values::Dictionary);
    let mut bytes = c.chunk.bytes.to_vec();
    bytes[c.chunk.table.pages[p.page].body_offset] = 40; // the bit width
    let damaged = ColumnChunk {
        file: c.chunk.file.clone(),
        row_group: c.chunk.row_group,
        rows: c.chunk.rows,
        meta: c.chunk.meta,
        bytes: Bytes::from(bytes),
        table: c.chunk.table.clone(),
    };
    let cpu = decode_on_cpu(&damaged, plan).unwrap_err().to_string();
    let Err(e) = decode_on_device(0, std::slice::from_ref(&damaged), &[plan]) else { panic!("a damaged page decoded") };
    let e = e.to_string();
    let name = format!("row group 0, column i64, page {}", p.page);
    for msg in [&cpu, &e] {
        assert!(msg.contains(&name) && msg.contains(&Fault::BitWidth.to_string()), "{msg}");
    }
}

/// Damaged byte arrays name their place: a length prefix past its page names the page, a
/// value that is not UTF-8 names the chunk (its offsets and copy are the chunk's steps). On
/// the CPU here; on the device too where there is one (the same place and fault).
#[test]
fn damaged_byte_arrays_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape {
        codec: Compression::UNCOMPRESSED,
        v2: false,
        dictionary: false,
        page_bytes: 1024,
        dict_bytes: 1 << 20,
        plain: false,
        rows: 4000,
    };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let cs = cases(&path, &meta);
    let c = cs.iter().find(|c| c.chunk.row_group == 0 && c.chunk.meta.column_path().string() == "name").unwrap();
    let plan = c.plan.as_ref().unwrap();
    let p = plan.pages[1];
    assert_eq!((p.encoding, p.levels), (Values::Plain, Levels::Prefixed));
    let body = c.chunk.table.pages[p.page].body_offset;
    let levels = u32::from_le_bytes(c.chunk.bytes[body..body + 4].try_into().unwrap()) as usize;
    let first = body + 4 + levels; // the page's first value's length prefix
    assert!(u32::from_le_bytes(c.chunk.bytes[first..first + 4].try_into().unwrap()) > 0);
    let damaged = |at: usize, with: &[u8]| {
        let mut bytes = c.chunk.bytes.to_vec();
        bytes[at..at + with.len()].copy_from_slice(with);
        ColumnChunk {
            file: c.chunk.file.clone(),
            row_group: c.chunk.row_group,
            rows: c.chunk.rows,
            meta: c.chunk.meta,
            bytes: Bytes::from(bytes),
            table: c.chunk.table.clone(),
        }
    };
    let cases = [
        (damaged(first, &u32::MAX.to_le_bytes()), format!("row group 0, column name, page {}: decoding it", p.page), Fault::ValuesEnd),
        (damaged(first + 4, &[0xff]), "row group 0, column name: decoding it".to_string(), Fault::Utf8),
    ];
    let device = nvcomp_or_skip("damaged_byte_arrays_are_named (its device part)");
    for (chunk, place, fault) in &cases {
        let mut msgs = vec![decode_on_cpu(chunk, plan).unwrap_err().to_string()];
        if device {
            let Err(e) = decode_on_device(0, std::slice::from_ref(chunk), &[plan]) else { panic!("a damaged chunk decoded") };
            msgs.push(e.to_string());
        }
        for msg in msgs {
            assert!(msg.contains(place.as_str()) && msg.contains(&fault.to_string()), "{msg}");
        }
    }
}

/// Files pyarrow writes (where `python3 -c "import pyarrow"` works; else skipped with a
/// line): the CPU reference against parquet-rs's arrow reader, and the device where there is
/// one. pyarrow's own choices: PLAIN_DICTIONARY / RLE_DICTIONARY, its page sizes, decimals
/// stored as integers when asked.
#[test]
fn pyarrow_files_decode() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys, datetime, decimal
import pyarrow as pa, pyarrow.parquet as pq
out = sys.argv[1]
n = 5000
def v(i, s): return ((i * 2654435761) ^ (s * 40503)) % 1000003
t = pa.table({
    "i32": pa.array([v(i, 1) - 500000 for i in range(n)], pa.int32()),
    "i64": pa.array([None if v(i, 2) % 4 == 0 else v(i, 3) * 1000003 for i in range(n)], pa.int64()),
    "f32": pa.array([v(i, 4) / 7 for i in range(n)], pa.float32()),
    "f64": pa.array([None if v(i, 5) % 3 == 0 else v(i, 6) % 50 / 4 for i in range(n)], pa.float64()),
    "date": pa.array([datetime.date(1995, 1, 1) + datetime.timedelta(days=v(i, 7) % 2000) for i in range(n)], pa.date32()),
    "dec32": pa.array([decimal.Decimal(v(i, 8) - 500000).scaleb(-2) for i in range(n)], pa.decimal128(7, 2)),
    "dec64": pa.array([None if v(i, 9) % 5 == 0 else decimal.Decimal(v(i, 10) * 997).scaleb(-2) for i in range(n)], pa.decimal128(15, 2)),
    "none": pa.array([None] * n, pa.int32()),
    "s": pa.array([None if v(i, 11) % 6 == 0 else f"str-{v(i, 12) % 300}-ü€" for i in range(n)], pa.string()),
    "b": pa.array([bytes([v(i, 13) % 256]) * (i % 5) for i in range(n)], pa.binary()),
    "ls": pa.array(["x" * 70000 if i == 17 else (None if i % 7 == 0 else f"l{v(i, 14) % 40}") for i in range(n)], pa.large_string()),
    "e": pa.array(["" if i % 3 else None for i in range(n)], pa.string()),
    "fd": pa.array([None if v(i, 15) % 4 == 0 else decimal.Decimal(v(i, 16) * 1000003 - 500000000000).scaleb(-5) for i in range(n)], pa.decimal128(30, 5)),
    "fb": pa.array([v(i, 17).to_bytes(6, "little") for i in range(n)], pa.binary(6)),
})
k = 0
for version in ["1.0", "2.0"]:
    for codec in ["zstd", "snappy", "none"]:
        for dictionary in [True, False]:
            pq.write_table(t, f"{out}/p{k}.parquet", data_page_version=version, compression=codec,
                           use_dictionary=dictionary, store_decimal_as_integer=True,
                           data_page_size=2048, dictionary_pagesize_limit=4096, row_group_size=3000)
            k += 1
# DELTA_BINARY_PACKED, asked for by name (pyarrow's default is PLAIN and dictionaries).
for version in ["1.0", "2.0"]:
    pq.write_table(t, f"{out}/p{k}.parquet", data_page_version=version, compression="zstd", use_dictionary=False,
                   column_encoding={c: "DELTA_BINARY_PACKED" for c in ["i32", "i64", "date", "dec32", "dec64", "none"]},
                   store_decimal_as_integer=True, data_page_size=2048, row_group_size=3000)
    k += 1
"#;
    let ran = std::process::Command::new("python3").arg("-c").arg(script).arg(dir.path()).output();
    match ran {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            if err.contains("No module named") {
                eprintln!("pyarrow_files_decode: skipped, no pyarrow: {}", err.lines().last().unwrap_or(""));
                return;
            }
            panic!("pyarrow failed: {err}");
        }
        Err(e) => {
            eprintln!("pyarrow_files_decode: skipped, no python3: {e}");
            return;
        }
    }
    let device = crate::engine::gpu_availability().is_ok() && crate::engine::device::nvcomp_availability().is_ok();
    let mut checked = 0;
    for k in 0..14 {
        let path = dir.path().join(format!("p{k}.parquet"));
        let meta = metadata(&path);
        let schema = meta.file_metadata().schema_descr();
        let types = arrow_types(schema, meta.file_metadata().key_value_metadata());
        let n = schema.num_columns();
        let mut covered = Vec::new();
        for (i, chunk) in chunks(&path, &meta).into_iter().enumerate() {
            let leaf = i % n;
            let at = format!("p{k}, row group {}, {}", chunk.row_group, schema.column(leaf).path().string());
            let plan = match plan_chunk(&chunk, types[leaf].as_ref()).unwrap() {
                Planned::Covered(p) => p,
                Planned::NotCovered(why) => {
                    // pyarrow's v2 pages without a dictionary are PLAIN: everything here is covered.
                    panic!("{at}: not covered: {why}");
                }
            };
            let want = arrow_read(&path, chunk.row_group, &[leaf]).unwrap().remove(0);
            let got = decode_on_cpu(&chunk, &plan).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(got.to_array_data(&plan).unwrap(), want.to_data(), "{at}");
            checked += 1;
            covered.push((chunk, plan, want));
        }
        if device {
            let plans: Vec<&DecodePlan> = covered.iter().map(|c| &c.1).collect();
            let chunks: Vec<ColumnChunk<'_>> = covered.iter().map(|c| c.0.clone_chunk()).collect();
            let done = decode_on_device(0, &chunks, &plans).unwrap_or_else(|e| panic!("p{k}: {e}"));
            for (got, (c, plan, want)) in done.to_host().unwrap().iter().zip(&covered) {
                assert_eq!(got.to_array_data(plan).unwrap(), want.to_data(), "p{k} on the device: {}", c.meta.column_path().string());
            }
        }
    }
    assert_eq!(checked, 14 * 2 * 14);
    eprintln!("pyarrow_files_decode: {checked} chunks equal{}", if device { ", on the device too" } else { "" });
}

/// A whole device job run on the CPU block by block from its launch arguments
/// (`decode_cpu::decode_arg`), over stage 1's buffer as the device lays it out (each page's
/// body, decompressed by parquet-rs, at its `PageOut`): every chunk's region of the output
/// equal to the CPU reference's buffers. This checks the layout and the arguments, which the
/// kernel reads and nothing else does, without a GPU.
#[test]
fn device_jobs_run_on_the_cpu() {
    use super::decode_cpu::{copy_arg, decode_arg, dict_arg, offsets_arg};
    let dir = tempfile::tempdir().unwrap();
    let mut pages = 0;
    let mut byte_pages = 0;
    for s in shapes(2000).into_iter().step_by(3) {
        let path = write(dir.path(), s);
        let meta = metadata(&path);
        let cs: Vec<Case<'_>> = cases(&path, &meta).into_iter().filter(|c| c.plan.is_some()).collect();
        let chunks: Vec<ColumnChunk<'_>> = cs.iter().map(|c| c.chunk.clone_chunk()).collect();
        let plans: Vec<&DecodePlan> = cs.iter().map(|c| c.plan.as_ref().unwrap()).collect();
        let stage1 = layout_pages(&chunks).unwrap();
        // Stage 1's output, as the device writes it.
        let mut input = vec![0u8; stage1.job.output_len];
        for (c, outs) in chunks.iter().zip(&stage1.pages) {
            let mut bodies = decompress_on_cpu(c).unwrap().into_iter();
            for (t, o) in c.table.pages.iter().zip(outs) {
                if t.kind != PageKind::Index {
                    input[o.offset..o.offset + o.len].copy_from_slice(&bodies.next().unwrap());
                }
            }
        }
        let (job, outs) = layout(&plans, &stage1.pages).unwrap();
        let mut output = vec![0u8; job.output_len];
        // The launches in the device's order: dictionaries, pages, offsets, then the values
        // buffer laid out from the totals (as engine/gpu/parquet_decode.rs does) and the copy.
        for d in &job.dicts {
            dict_arg(d, &input, &mut output).unwrap_or_else(|f| panic!("{s:?}: {f}"));
        }
        for a in &job.pages {
            decode_arg(a, &input, &mut output).unwrap_or_else(|f| panic!("{s:?}: {f}"));
            pages += 1;
        }
        let mut byte_chunks = job.byte_chunks.clone();
        let mut len = 0u64;
        let mut spans = Vec::new();
        for c in &mut byte_chunks {
            offsets_arg(c, &mut output).unwrap_or_else(|f| panic!("{s:?}: {f}"));
            c.values = len.div_ceil(16) * 16;
            spans.push((c.values as usize, c.total as usize));
            len = c.values + c.total;
        }
        let mut values = vec![0u8; len as usize];
        for c in &byte_chunks {
            copy_arg(c, &input, &output, &mut values).unwrap_or_else(|f| panic!("{s:?}: {f}"));
            byte_pages += 1;
        }
        for ((c, plan), o) in cs.iter().zip(&plans).zip(&outs) {
            let want = decode_on_cpu(&c.chunk, plan).unwrap();
            let at = format!("{s:?}, row group {}, {}", c.chunk.row_group, c.chunk.meta.column_path().string());
            assert_eq!(&output[o.values..o.values + o.values_len], &want.values[..], "{at}");
            if let Some(k) = o.bytes {
                let (v, n) = spans[k];
                assert_eq!(Some(&values[v..v + n]), want.data.as_deref(), "{at}");
            }
            match (o.validity, &want.validity) {
                (Some(v), Some(bits)) => {
                    assert_eq!(&output[v..v + bits.len()], &bits[..], "{at}");
                    assert!(output[v + bits.len()..v + o.rows.div_ceil(32) * 4].iter().all(|&b| b == 0), "{at}");
                }
                (None, None) => {}
                other => panic!("{at}: validity {other:?}"),
            }
        }
    }
    assert!(pages > 1000 && byte_pages > 50, "{pages} pages, {byte_pages} byte array chunks");
}

/// The kernel's UTF-8 check is the standard's: every sequence of one to four bytes (the
/// four-byte ones by their first two bytes and two continuation bytes), and random strings.
#[test]
fn utf8_check_is_std() {
    for a in 0..=255u8 {
        assert_eq!(utf8_ok(&[a]), std::str::from_utf8(&[a]).is_ok(), "{a:#x}");
        for b in 0..=255u8 {
            assert_eq!(utf8_ok(&[a, b]), std::str::from_utf8(&[a, b]).is_ok(), "{a:#x} {b:#x}");
            for c in [0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xff] {
                let s = [a, b, c];
                assert_eq!(utf8_ok(&s), std::str::from_utf8(&s).is_ok(), "{s:x?}");
                let s = [a, b, c, 0x80];
                assert_eq!(utf8_ok(&s), std::str::from_utf8(&s).is_ok(), "{s:x?}");
            }
        }
    }
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..20_000 {
        let n = (x % 9) as usize;
        let s: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                [0x41, 0x80, 0xbf, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xed, 0xa0, 0xf4, 0x90][(x % 16) as usize]
            })
            .collect();
        assert_eq!(utf8_ok(&s), std::str::from_utf8(&s).is_ok(), "{s:x?}");
    }
}

/// Offsets: i32 offsets past `i32::MAX` bytes are a fault, i64 ones are not; nulls'
/// zero-length slots repeat the offset.
#[test]
fn offsets_overflow_is_a_fault() {
    let slot = |len: u32| Slot { at: 0, len, pad: 0 };
    let big = [slot(1 << 30), slot(0), slot(1 << 30), slot(1)];
    assert_eq!(offsets_of(&big, 4), Err(Fault::OffsetOverflow));
    let (o, total) = offsets_of(&big, 8).unwrap();
    assert_eq!(total, (1 << 31) + 1);
    let words: Vec<u64> = o.chunks(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
    assert_eq!(words, [0, 1 << 30, 1 << 30, 1 << 31, (1 << 31) + 1]);
    let (o, total) = offsets_of(&[slot(1 << 30), slot((1 << 30) - 1)], 4).unwrap();
    assert_eq!((o.len(), total), (12, i32::MAX as u64));
}

//! The page table against parquet-rs on files arrow-rs writes (every codec, data page v1
//! and v2, dictionary on and off, small and default page sizes, nulls), corrupt headers, the
//! device layout, and (on the GPU machine) every page decompressed by nvCOMP against
//! parquet-rs's own decompression of the same page.
//!
//! The GPU cases skip (a line on stderr) without a GPU or without nvCOMP, unless
//! `CORANK_REQUIRE_GPU=1` and `CORANK_REQUIRE_NVCOMP=1` (the GPU machine sets both:
//! `docs/device/nvcomp.sh`), which make either absence a failure. `CORANK_GPU_SMALL=1` keeps
//! the small files only.

use super::decompress::{self, decompress_on_cpu, device_codec, plan, ColumnChunk, Pages};
use super::page_table::{read_page_table, PageKind};
use super::{chunk_bytes, page_table_of};
use arrow::array::{ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, RecordBatch, StringArray};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::column::page::Page;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::{ReadOptionsBuilder, SerializedFileReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Lineitem-like columns: keys, a small int, decimals, dates, a low-cardinality string
/// (dictionary-friendly), free text, and nullable int and string columns.
fn batch(rows: usize, seed: u64) -> RecordBatch {
    let r = |i: usize, salt: u64| {
        let mut x = (i as u64 ^ (salt << 40) ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 31;
        x.wrapping_mul(0xD1B5_4A32_D192_ED03) >> 7
    };
    let words = ["carefully", "final", "deposits", "quickly", "ironic", "packages", "furiously", "bold"];
    let text = |i: usize| (0..2 + r(i, 9) % 5).map(|w| words[((r(i, 10) >> (3 * w)) % 8) as usize]).collect::<Vec<_>>().join(" ");
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("orderkey", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| (i as i64) * 4 + (r(i, 1) % 4) as i64)))),
        ("linenumber", Arc::new(Int32Array::from_iter_values((0..rows).map(|i| 1 + (r(i, 2) % 7) as i32)))),
        (
            "price",
            Arc::new(
                Decimal128Array::from_iter_values((0..rows).map(|i| (r(i, 3) % 10_000_000) as i128))
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
        ),
        ("shipdate", Arc::new(Date32Array::from_iter_values((0..rows).map(|i| 8036 + (r(i, 4) % 2526) as i32)))),
        (
            "shipmode",
            Arc::new(StringArray::from_iter_values((0..rows).map(|i| ["AIR", "RAIL", "SHIP", "TRUCK", "MAIL"][(r(i, 5) % 5) as usize]))),
        ),
        ("comment", Arc::new(StringArray::from_iter_values((0..rows).map(text)))),
        ("maybe_int", Arc::new(Int64Array::from_iter((0..rows).map(|i| (r(i, 6) % 3 != 0).then_some(r(i, 7) as i64))))),
        ("maybe_text", Arc::new(StringArray::from_iter((0..rows).map(|i| (r(i, 8) % 4 == 0).then(|| text(i)))))),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    codec: Compression,
    v2: bool,
    dictionary: bool,
    page_bytes: usize,
    rows: usize,
}

fn write(dir: &Path, s: Shape) -> PathBuf {
    let path =
        dir.join(format!("{:?}-{}-{}-{}-{}.parquet", s.codec, s.v2, s.dictionary, s.page_bytes, s.rows).replace(['(', ')', ' '], ""));
    let props = WriterProperties::builder()
        .set_compression(s.codec)
        .set_writer_version(if s.v2 { WriterVersion::PARQUET_2_0 } else { WriterVersion::PARQUET_1_0 })
        .set_dictionary_enabled(s.dictionary)
        .set_data_page_size_limit(s.page_bytes)
        .set_dictionary_page_size_limit(s.page_bytes.max(4096))
        .set_write_batch_size(256.min(s.page_bytes))
        .set_max_row_group_row_count(Some(s.rows.div_ceil(2).max(1)))
        .build();
    let b = batch(s.rows, s.rows as u64);
    let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), b.schema(), Some(props)).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    path
}

pub(super) fn metadata(path: &Path) -> Arc<ParquetMetaData> {
    let options = ReadOptionsBuilder::new().with_page_index().build();
    let reader = SerializedFileReader::new_with_options(std::fs::File::open(path).unwrap(), options).unwrap();
    Arc::new(reader.metadata().clone())
}

/// Every column chunk of `path`, read and its page table made.
pub(super) fn chunks<'a>(path: &Path, meta: &'a ParquetMetaData) -> Vec<ColumnChunk<'a>> {
    let file = std::fs::File::open(path).unwrap();
    let mut out = Vec::new();
    for (g, rg) in meta.row_groups().iter().enumerate() {
        for c in rg.columns() {
            let bytes = chunk_bytes(&file, path, c).unwrap();
            let table = page_table_of(path, g, c, &bytes).unwrap();
            out.push(ColumnChunk {
                file: path.into(),
                row_group: g,
                rows: rg.num_rows() as usize,
                meta: c,
                bytes: Bytes::from(bytes),
                table,
            });
        }
    }
    out
}

fn shapes(rows: &[usize]) -> Vec<Shape> {
    let codecs = [
        Compression::UNCOMPRESSED,
        Compression::SNAPPY,
        Compression::ZSTD(ZstdLevel::default()),
        Compression::LZ4_RAW,
        Compression::LZ4,
        Compression::GZIP(Default::default()),
    ];
    let mut v = Vec::new();
    for &codec in &codecs {
        for v2 in [false, true] {
            for dictionary in [true, false] {
                for page_bytes in [512, 1 << 20] {
                    for &n in rows {
                        v.push(Shape { codec, v2, dictionary, page_bytes, rows: n });
                    }
                }
            }
        }
    }
    v
}

/// The page table of every chunk agrees with parquet-rs: the pages its reader returns (kind,
/// values, encodings, v2 counts and levels, decompressed length) and the offset index's page
/// locations (where the writer put the data pages, header included).
#[test]
fn page_tables_match_parquet_rs() {
    let dir = tempfile::tempdir().unwrap();
    let mut pages_seen = [0usize; 2];
    for s in shapes(&[1, 3000]) {
        let path = write(dir.path(), s);
        let meta = metadata(&path);
        let chunks = chunks(&path, &meta);
        for (k, c) in chunks.iter().enumerate() {
            let at = format!("{s:?}, chunk {k}");
            let start = super::chunk_range(c.meta).0 as usize;
            let cpu = decompress_on_cpu(c).unwrap();
            let data: Vec<_> = c.table.pages.iter().filter(|p| p.kind != PageKind::Index).collect();
            assert_eq!(data.len(), cpu.len(), "{at}");
            // parquet-rs's pages again, with their headers' fields.
            let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
            let mut pr = reader.get_row_group(c.row_group).unwrap().get_column_page_reader(k % meta.row_group(0).num_columns()).unwrap();
            for (i, p) in data.iter().enumerate() {
                let page = pr.get_next_page().unwrap().unwrap();
                assert_eq!(page.buffer().len(), p.uncompressed_size, "{at}, page {i}");
                assert_eq!(page.buffer(), &cpu[i], "{at}, page {i}");
                assert_eq!(page.num_values(), p.num_values, "{at}, page {i}");
                assert_eq!(Some(page.encoding()), p.encoding, "{at}, page {i}");
                match page {
                    Page::DictionaryPage { .. } => assert_eq!(p.kind, PageKind::Dictionary, "{at}, page {i}"),
                    Page::DataPage { def_level_encoding, rep_level_encoding, .. } => {
                        assert_eq!(p.kind, PageKind::DataV1, "{at}, page {i}");
                        assert_eq!(p.level_encodings, Some((def_level_encoding, rep_level_encoding)), "{at}, page {i}");
                        assert_eq!(p.levels_len, 0);
                        pages_seen[0] += 1;
                    }
                    Page::DataPageV2 { num_nulls, num_rows, def_levels_byte_len, rep_levels_byte_len, is_compressed, .. } => {
                        assert_eq!(p.kind, PageKind::DataV2, "{at}, page {i}");
                        assert_eq!(p.v2_counts, Some((num_nulls, num_rows)), "{at}, page {i}");
                        assert_eq!(p.levels_len, (def_levels_byte_len + rep_levels_byte_len) as usize, "{at}, page {i}");
                        assert_eq!(p.is_compressed, is_compressed && s.codec != Compression::UNCOMPRESSED, "{at}, page {i}");
                        pages_seen[1] += 1;
                    }
                }
            }
            assert!(pr.get_next_page().unwrap().is_none(), "{at}");
            // The offset index: each data page's header offset and size with its header.
            let locations = meta.offset_index().unwrap()[c.row_group][k % meta.row_group(0).num_columns()].page_locations();
            let data_pages: Vec<_> = c.table.pages.iter().filter(|p| matches!(p.kind, PageKind::DataV1 | PageKind::DataV2)).collect();
            assert_eq!(locations.len(), data_pages.len(), "{at}");
            for (l, p) in locations.iter().zip(&data_pages) {
                assert_eq!(l.offset as usize, start + p.header_offset, "{at}");
                assert_eq!(l.compressed_page_size as usize, p.header_len + p.compressed_size, "{at}");
            }
            // The pages tile the chunk.
            let mut end = 0;
            for p in &c.table.pages {
                assert_eq!(p.header_offset, end, "{at}");
                end = p.body_offset + p.compressed_size;
            }
            assert_eq!(end, c.bytes.len(), "{at}");
        }
    }
    assert!(pages_seen[0] > 1000 && pages_seen[1] > 1000, "{pages_seen:?}");
}

/// The device layout of every covered file: a valid job, each page's output as long as its
/// decompressed body and apart from the others; uncovered codecs (legacy LZ4, gzip) are
/// refused by name.
#[test]
fn layouts_cover_every_page() {
    let dir = tempfile::tempdir().unwrap();
    for s in shapes(&[2000]) {
        let path = write(dir.path(), s);
        let meta = metadata(&path);
        let chunks = chunks(&path, &meta);
        match device_codec(s.codec) {
            Err(why) => {
                assert!(matches!(s.codec, Compression::LZ4 | Compression::GZIP(_)), "{s:?}");
                let e = plan(&chunks).expect_err("not covered").to_string();
                assert!(e.contains(&why) && e.contains("row group 0, column orderkey"), "{e}");
                continue;
            }
            Ok(codec) => assert_eq!(codec.is_none(), s.codec == Compression::UNCOMPRESSED),
        }
        let p = plan(&chunks).unwrap();
        p.job.check().unwrap();
        let mut outs: Vec<(usize, usize)> = Vec::new();
        for (c, pages) in chunks.iter().zip(&p.pages) {
            let data: Vec<_> = c.table.pages.iter().collect();
            assert_eq!(data.len(), pages.len());
            for (t, o) in data.iter().zip(pages) {
                assert_eq!(o.len, t.uncompressed_size, "{s:?}");
                outs.push((o.offset, o.offset + o.len));
            }
        }
        outs.sort_unstable();
        assert!(outs.windows(2).all(|w| w[0].1 <= w[1].0), "{s:?}: pages overlap");
        assert!(outs.last().unwrap().1 <= p.job.output_len);
        // The image holds each piece of each chunk where the spans read it.
        let mut image = vec![0u8; p.job.image_len];
        p.fill(&chunks, &mut image);
        let total_in: usize = p.job.spans.iter().map(|s| s.input_len).sum();
        let bodies: usize = chunks.iter().flat_map(|c| c.table.pages.iter()).map(|p| p.compressed_size).sum();
        assert_eq!(total_in, bodies, "{s:?}: every body byte goes up once");
        if s.codec == Compression::UNCOMPRESSED {
            // Copied pages: the output is the image's bytes at the spans.
            let mut out = vec![0u8; p.job.output_len];
            for sp in &p.job.spans {
                out[sp.output..sp.output + sp.output_len].copy_from_slice(&image[sp.input..sp.input + sp.input_len]);
            }
            for (c, pages) in chunks.iter().zip(&p.pages) {
                for (o, cpu) in pages.iter().zip(decompress_on_cpu(c).unwrap()) {
                    assert_eq!(&out[o.offset..o.offset + o.len], &cpu[..], "{s:?}");
                }
            }
        }
    }
}

/// Truncated and damaged chunks are errors, never panics: every cut of a chunk's first two
/// pages, and bytes of its headers changed at random.
#[test]
fn corrupt_headers_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape { codec: Compression::ZSTD(ZstdLevel::default()), v2: true, dictionary: true, page_bytes: 512, rows: 3000 };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let c = meta.row_group(0).column(5);
    let bytes = chunk_bytes(&std::fs::File::open(&path).unwrap(), &path, c).unwrap();
    let values = Some(c.num_values() as u64);
    let good = read_page_table(&bytes, c.compression(), values).unwrap();
    assert!(good.pages.len() > 3);
    let second_end = good.pages[1].body_offset + good.pages[1].compressed_size;
    for cut in 0..second_end {
        let e = read_page_table(&bytes[..cut], c.compression(), values).expect_err("a truncated chunk");
        assert!(e.page <= 1, "cut at {cut}: {e}");
    }
    // A chunk that stops at a page boundary is caught by the value count.
    let e = read_page_table(&bytes[..second_end], c.compression(), values).unwrap_err();
    assert!(e.detail.contains("values"), "{e}");
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut errors = 0;
    for _ in 0..2000 {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let p = &good.pages[(x % 3) as usize];
        let at = p.header_offset + (x >> 8) as usize % p.header_len;
        let mut damaged = bytes.clone();
        damaged[at] ^= 1 << ((x >> 40) % 8);
        if let Err(e) = read_page_table(&damaged, c.compression(), values) {
            assert!(!e.to_string().is_empty());
            errors += 1;
        }
    }
    assert!(errors > 500, "{errors} of 2000 damaged headers were errors");
    // A v2 page whose levels are longer than its body.
    assert!(read_page_table(&[], c.compression(), Some(1)).is_err());
}

pub(super) fn nvcomp_or_skip(test: &str) -> bool {
    let require = |v: &str| std::env::var(v).as_deref() == Ok("1");
    if let Err(e) = crate::engine::gpu_availability() {
        assert!(!require("CORANK_REQUIRE_GPU"), "{test}: CORANK_REQUIRE_GPU=1 but no GPU: {e}");
        eprintln!("{test}: skipped, no GPU: {e}");
        return false;
    }
    if let Err(e) = crate::engine::device::nvcomp_availability() {
        assert!(!require("CORANK_REQUIRE_NVCOMP"), "{test}: CORANK_REQUIRE_NVCOMP=1 but no nvCOMP: {e}");
        eprintln!("{test}: skipped, no nvCOMP: {e}");
        return false;
    }
    true
}

/// The device's bytes of every page equal parquet-rs's decompression of the same page.
fn check_on_device(path: &Path, what: &str) -> usize {
    let meta = metadata(path);
    let chunks = chunks(path, &meta);
    let done = decompress::run(0, &chunks).unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = done.output.to_host().unwrap();
    let mut pages = 0;
    for (k, (c, outs)) in chunks.iter().zip(&done.pages).enumerate() {
        let cpu = decompress_on_cpu(c).unwrap();
        let outs: Vec<_> = outs.iter().zip(&c.table.pages).filter(|(_, t)| t.kind != PageKind::Index).map(|(o, _)| *o).collect();
        assert_eq!(outs.len(), cpu.len(), "{what}: chunk {k}");
        for (i, (o, want)) in outs.iter().zip(&cpu).enumerate() {
            assert!(out[o.offset..o.offset + o.len] == want[..], "{what}: chunk {k} ({}), page {i} differs", c.meta.column_path().string());
            pages += 1;
        }
    }
    pages
}

/// Every page of files arrow-rs writes with zstd, snappy, LZ4_RAW (and uncompressed: copied
/// through), decompressed on the device, against parquet-rs; 1k to 1M rows, v1 and v2
/// pages, dictionary on and off, small and default pages, nulls.
#[test]
fn device_pages_match_parquet_rs() {
    if !nvcomp_or_skip("device_pages_match_parquet_rs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = std::env::var("CORANK_GPU_SMALL").as_deref() == Ok("1");
    let mut pages = 0;
    for codec in [Compression::ZSTD(ZstdLevel::default()), Compression::SNAPPY, Compression::LZ4_RAW, Compression::UNCOMPRESSED] {
        for v2 in [false, true] {
            for dictionary in [true, false] {
                for (page_bytes, rows) in [(1024, 1000), (64 << 10, 100_000), (1 << 20, 1_000_000)] {
                    if small && rows > 1000 {
                        continue;
                    }
                    let s = Shape { codec, v2, dictionary, page_bytes, rows };
                    let path = write(dir.path(), s);
                    pages += check_on_device(&path, &format!("{s:?}"));
                    std::fs::remove_file(&path).unwrap();
                }
            }
        }
    }
    eprintln!("device_pages_match_parquet_rs: {pages} pages equal");
}

/// Chunks of several files and codecs in one call: one upload, one nvCOMP call per codec.
#[test]
fn mixed_codecs_in_one_call() {
    if !nvcomp_or_skip("mixed_codecs_in_one_call") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shapes = [
        Shape { codec: Compression::ZSTD(ZstdLevel::default()), v2: false, dictionary: true, page_bytes: 4096, rows: 20_000 },
        Shape { codec: Compression::SNAPPY, v2: true, dictionary: false, page_bytes: 4096, rows: 20_000 },
        Shape { codec: Compression::LZ4_RAW, v2: true, dictionary: true, page_bytes: 4096, rows: 20_000 },
        Shape { codec: Compression::UNCOMPRESSED, v2: false, dictionary: false, page_bytes: 4096, rows: 20_000 },
    ];
    let paths: Vec<PathBuf> = shapes.iter().map(|&s| write(dir.path(), s)).collect();
    let metas: Vec<_> = paths.iter().map(|p| metadata(p)).collect();
    let all: Vec<ColumnChunk<'_>> = paths.iter().zip(&metas).flat_map(|(p, m)| chunks(p, m)).collect();
    let done = decompress::run(0, &all).unwrap();
    let out = done.output.to_host().unwrap();
    for (c, outs) in all.iter().zip(&done.pages) {
        for (o, want) in outs.iter().zip(decompress_on_cpu(c).unwrap()) {
            assert!(out[o.offset..o.offset + o.len] == want[..], "{}: {}", c.file.display(), c.meta.column_path().string());
        }
    }
    // Through the entry that picks the path: the device here.
    let Pages::Device(_) = decompress::decompress(0, &all, decompress::device_ready()).unwrap() else {
        panic!("the device path was available");
    };
}

/// A page whose compressed stream states another size than its page header: an error
/// naming the row group, column, page and codec, found on the host before anything goes to
/// the device (nvCOMP does not survive a damaged stream: on the GPU machine this very page
/// ended in an illegal address that poisoned the process's CUDA context). No GPU needed.
#[test]
fn a_damaged_page_is_named_before_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape { codec: Compression::SNAPPY, v2: false, dictionary: false, page_bytes: 4096, rows: 20_000 };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let mut all = chunks(&path, &meta);
    assert!(decompress::plan(&all).is_ok(), "the undamaged file plans");
    let c = &mut all[0];
    let p = c.table.pages[2].clone();
    let mut bytes = c.bytes.to_vec();
    // Snappy's preamble (the uncompressed length, a varint) made larger than the page.
    bytes[p.body_offset] = 0xff;
    bytes[p.body_offset + 1] = 0xff;
    bytes[p.body_offset + 2] = 0x7f;
    c.bytes = Bytes::from(bytes);
    let e = decompress::plan(&all).expect_err("a damaged page").to_string();
    assert!(e.contains("row group 0, column orderkey, page 2") && e.contains("snappy") && e.contains("2097151"), "{e}");
}

/// Without the device path (nvCOMP absent, no GPU), the same call reads on the CPU.
#[test]
fn absent_device_reads_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let s = Shape { codec: Compression::ZSTD(ZstdLevel::default()), v2: false, dictionary: true, page_bytes: 4096, rows: 5000 };
    let path = write(dir.path(), s);
    let meta = metadata(&path);
    let all = chunks(&path, &meta);
    let Pages::Host(pages) = decompress::decompress(0, &all, Err("nvCOMP is not available".into())).unwrap() else {
        panic!("no device path was available");
    };
    for (c, got) in all.iter().zip(pages) {
        assert_eq!(got, decompress_on_cpu(c).unwrap());
        assert_eq!(got.len(), c.table.pages.len());
    }
}

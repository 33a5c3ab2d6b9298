//! Column chunks decompressed on the device: one or more chunks' pages go up in one copy
//! and come out in one device buffer, page after page, where the page decoders of stage 2
//! will read them.
//!
//! The layout ([`plan`], pure): the upload image holds each chunk's bytes in chunk order,
//! minus the page headers; the output holds every page's body once decompressed (a v2
//! page's level bytes first, then its values), in page order. Each page becomes spans of an
//! [`engine::decompress::DecompressJob`](crate::engine::decompress::DecompressJob):
//!
//! - a page the codec applies to: its compressed values are decompressed (one span; their
//!   image and output offsets aligned to [`SPAN_ALIGN`], as nvCOMP asks), and a v2 page's
//!   levels, which are never compressed, are copied to just before its values;
//! - a page the codec does not apply to (an uncompressed chunk, a v2 page written with
//!   `is_compressed = false`): its body is copied (consecutive pages of one chunk lie
//!   consecutively in both buffers, so the device copies such a chunk in one piece);
//! - an index page: nothing (an empty output).
//!
//! Codecs: zstd, snappy and LZ4_RAW are decompressed by nvCOMP; UNCOMPRESSED chunks are
//! copied; gzip, brotli, LZO and Parquet's legacy LZ4 (the Hadoop framing) are not covered
//! ([`device_codec`] says so; a caller decompresses those chunks on the CPU).
//!
//! Before the upload, every compressed stream that states its decompressed size (snappy,
//! zstd) is checked against its page header ([`super::stream_header`]); after the device
//! ran, every decompressed span's nvCOMP status and size is checked: the
//! first failure is an error naming the file, row group, column and page ([`run`]), never
//! garbage handed on.

use super::page_table::{PageKind, PageTable};
use super::stream_header::check_declared_size;
use crate::engine::decompress::{DecompressJob, DeviceCodec, Span, SPAN_ALIGN};
use crate::engine::device::{decompress_on_device, DeviceOutput};
use crate::error::{Error, Result};
use bytes::Bytes;
use parquet::basic::Compression;
use parquet::column::page::PageReader;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

/// The device codec of a chunk's codec: `Ok(None)` for an uncompressed chunk, `Err` (the
/// reason, in words) for a codec the device does not decompress.
pub(crate) fn device_codec(c: Compression) -> std::result::Result<Option<DeviceCodec>, String> {
    match c {
        Compression::UNCOMPRESSED => Ok(None),
        Compression::ZSTD(_) => Ok(Some(DeviceCodec::Zstd)),
        Compression::SNAPPY => Ok(Some(DeviceCodec::Snappy)),
        Compression::LZ4_RAW => Ok(Some(DeviceCodec::Lz4Raw)),
        Compression::LZ4 => Err("LZ4 (the Hadoop framing) is not decompressed on the device".into()),
        other => Err(format!("{other} is not decompressed on the device")),
    }
}

/// A column chunk to decompress: where it is from (for errors), its footer entry and row
/// count (the CPU path's reader needs them), its bytes (`chunk_bytes`), its page table.
pub(crate) struct ColumnChunk<'a> {
    pub file: PathBuf,
    pub row_group: usize,
    pub rows: usize,
    pub meta: &'a ColumnChunkMetaData,
    pub bytes: Bytes,
    pub table: PageTable,
}

impl ColumnChunk<'_> {
    /// A copy (its bytes shared).
    pub fn clone_chunk(&self) -> Self {
        ColumnChunk {
            file: self.file.clone(),
            row_group: self.row_group,
            rows: self.rows,
            meta: self.meta,
            bytes: self.bytes.clone(),
            table: self.table.clone(),
        }
    }
}

/// Where one page's decompressed body lies in the output buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageOut {
    pub offset: usize,
    pub len: usize,
}

/// A piece of a chunk's bytes placed in the image: (offset in the chunk, length, offset in
/// the image).
type Piece = (usize, usize, usize);

/// The layout of a batch of column chunks: the device job, each chunk's image region and
/// pieces, each page's output, and which chunk and page each span is of.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub job: DecompressJob,
    /// Per chunk: its image region (start, end) and the pieces filling it.
    regions: Vec<((usize, usize), Vec<Piece>)>,
    /// Per chunk, per page.
    pub pages: Vec<Vec<PageOut>>,
    /// Per span: (chunk, page).
    owners: Vec<(usize, usize)>,
}

fn align(v: usize) -> usize {
    v.div_ceil(SPAN_ALIGN) * SPAN_ALIGN
}

fn place(c: &ColumnChunk<'_>, page: Option<usize>) -> String {
    let page = page.map(|p| format!(", page {p}")).unwrap_or_default();
    format!("row group {}, column {}{page}", c.row_group, c.meta.column_path().string())
}

/// Lays `chunks` out (the module doc's rules). A codec not covered, or a page whose sizes
/// cannot be decompressed (compressed values of no bytes that should give some), is an
/// error naming the chunk.
pub(crate) fn plan(chunks: &[ColumnChunk<'_>]) -> Result<Plan> {
    let mut job = DecompressJob::default();
    let (mut image, mut out) = (0usize, 0usize);
    let mut regions = Vec::with_capacity(chunks.len());
    let mut pages = Vec::with_capacity(chunks.len());
    let mut owners = Vec::new();
    for (ci, c) in chunks.iter().enumerate() {
        let codec = device_codec(c.table.codec)
            .map_err(|detail| Error::File { path: c.file.clone(), detail: format!("{}: {detail}", place(c, None)) })?;
        image = align(image);
        let start = image;
        let mut pieces = Vec::new();
        let mut outs = Vec::with_capacity(c.table.pages.len());
        for (pi, p) in c.table.pages.iter().enumerate() {
            if p.kind == PageKind::Index {
                outs.push(PageOut { offset: out, len: 0 });
                continue;
            }
            let mut span = |job: &mut DecompressJob, s: Span| {
                job.spans.push(s);
                owners.push((ci, pi));
            };
            match (codec, p.compressed_values()) {
                (Some(codec), Some((values_at, clen, ulen))) => {
                    let levels = p.levels_len;
                    let values_out = align(out + levels);
                    if levels > 0 {
                        pieces.push((p.body_offset, levels, image));
                        span(
                            &mut job,
                            Span { codec: None, input: image, input_len: levels, output: values_out - levels, output_len: levels },
                        );
                        image += levels;
                    }
                    if ulen > 0 {
                        if clen == 0 {
                            return Err(Error::File {
                                path: c.file.clone(),
                                detail: format!("{}: no compressed bytes for {ulen} uncompressed bytes", place(c, Some(pi))),
                            });
                        }
                        let stream = c.bytes.get(values_at..values_at + clen).unwrap_or_default();
                        check_declared_size(codec, stream, ulen).map_err(|detail| Error::File {
                            path: c.file.clone(),
                            detail: format!("{} ({}): {detail}", place(c, Some(pi)), codec.name()),
                        })?;
                        image = align(image);
                        pieces.push((values_at, clen, image));
                        span(&mut job, Span { codec: Some(codec), input: image, input_len: clen, output: values_out, output_len: ulen });
                        image += clen;
                    }
                    outs.push(PageOut { offset: values_out - levels, len: levels + ulen });
                    out = values_out + ulen;
                }
                _ => {
                    let len = p.compressed_size;
                    pieces.push((p.body_offset, len, image));
                    span(&mut job, Span { codec: None, input: image, input_len: len, output: out, output_len: len });
                    outs.push(PageOut { offset: out, len });
                    image += len;
                    out += len;
                }
            }
        }
        regions.push(((start, image), pieces));
        pages.push(outs);
    }
    job.image_len = image;
    job.output_len = out;
    Ok(Plan { job, regions, pages, owners })
}

impl Plan {
    /// Writes the image: each chunk's pieces into its region, chunks in parallel.
    pub fn fill(&self, chunks: &[ColumnChunk<'_>], image: &mut [u8]) {
        let mut rest = &mut image[..];
        let mut at = 0;
        let mut parts = Vec::with_capacity(self.regions.len());
        for ((start, end), pieces) in &self.regions {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(start - at);
            let (region, tail) = tail.split_at_mut(end - start);
            parts.push((*start, region, pieces));
            rest = tail;
            at = *end;
        }
        parts.into_par_iter().zip(chunks.par_iter()).for_each(|((start, region, pieces), c)| {
            for &(from, len, to) in pieces.iter() {
                region[to - start..to - start + len].copy_from_slice(&c.bytes[from..from + len]);
            }
        });
    }
}

/// Column chunks decompressed on the device.
pub(crate) struct DeviceChunks {
    /// Every page's body, decompressed, in one buffer.
    pub output: DeviceOutput,
    /// Per chunk, per page: where its body lies in `output`.
    pub pages: Vec<Vec<PageOut>>,
    /// The device's times (CUDA events): the upload, then decompression and copies.
    pub upload_ms: f32,
    pub device_ms: f32,
    /// The whole call's wall time (layout, image, upload, device, statuses).
    pub wall: std::time::Duration,
}

/// Decompresses `chunks` on CUDA device `device` ([`plan`], one upload, one nvCOMP call per
/// codec). A page nvCOMP fails on is an error naming its file, row group, column and page
/// (the count of other failed pages with it). Call it off rayon's workers.
pub(crate) fn run(device: usize, chunks: &[ColumnChunk<'_>]) -> Result<DeviceChunks> {
    let t = std::time::Instant::now();
    let plan = plan(chunks)?;
    let done = decompress_on_device(device, &plan.job, &mut |image| plan.fill(chunks, image))?;
    let failed: Vec<(usize, &String)> = done.statuses.iter().enumerate().filter_map(|(i, s)| s.as_ref().err().map(|e| (i, e))).collect();
    if let Some(&(span, why)) = failed.first() {
        let (ci, pi) = plan.owners[span];
        let c = &chunks[ci];
        let codec = plan.job.spans[span].codec.map_or("copy", DeviceCodec::name);
        let more = match failed.len() - 1 {
            0 => String::new(),
            n => format!(" ({n} more page{} failed)", if n == 1 { "" } else { "s" }),
        };
        return Err(Error::File {
            path: c.file.clone(),
            detail: format!("{}: {codec} decompression on the device failed: {why}{more}", place(c, Some(pi))),
        });
    }
    Ok(DeviceChunks { output: done.output, pages: plan.pages, upload_ms: done.upload_ms, device_ms: done.device_ms, wall: t.elapsed() })
}

/// A column chunk's bytes where its footer says they lie in the file (the CPU path's
/// reader asks for file offsets).
struct ChunkAt {
    start: u64,
    bytes: Bytes,
}

impl ChunkAt {
    fn range(&self, start: u64, len: usize) -> parquet::errors::Result<std::ops::Range<usize>> {
        let from = start.checked_sub(self.start).and_then(|f| usize::try_from(f).ok());
        match from.and_then(|f| f.checked_add(len).filter(|&e| e <= self.bytes.len()).map(|e| f..e)) {
            Some(r) => Ok(r),
            None => Err(parquet::errors::ParquetError::EOF(format!("{len} bytes at {start} lie outside the column chunk"))),
        }
    }
}

impl Length for ChunkAt {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for ChunkAt {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        let r = self.range(start, 0)?;
        Ok(self.bytes.slice(r.start..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        Ok(self.bytes.slice(self.range(start, length)?))
    }
}

/// The CPU path: a chunk's pages decompressed by parquet-rs (its page reader, which also
/// verifies checksums where the writer stored them), one body per dictionary or data page,
/// in the layout the device writes (a v2 page's levels, then its values).
pub(crate) fn decompress_on_cpu(c: &ColumnChunk<'_>) -> Result<Vec<Bytes>> {
    let at = Arc::new(ChunkAt { start: super::chunk_range(c.meta).0, bytes: c.bytes.clone() });
    let err = |e: parquet::errors::ParquetError| Error::Parquet { path: Some(c.file.clone()), context: place(c, None), source: e };
    let mut reader = SerializedPageReader::new(at, c.meta, c.rows, None).map_err(err)?;
    let mut pages = Vec::with_capacity(c.table.pages.len());
    while let Some(page) = reader.get_next_page().map_err(err)? {
        pages.push(page.buffer().clone());
    }
    Ok(pages)
}

/// Column chunks' pages, decompressed where they could be.
pub(crate) enum Pages {
    /// On the device ([`run`]).
    Device(DeviceChunks),
    /// On the CPU ([`decompress_on_cpu`]): per chunk, per dictionary or data page.
    // Read by the tests only until a reader of the merge takes this path (issue 69).
    #[cfg_attr(not(test), allow(dead_code))]
    Host(Vec<Vec<Bytes>>),
}

/// `chunks` decompressed on device `device` where nvCOMP and the GPU are there and every
/// chunk's codec is covered, else on the CPU (every core, a chunk a task); `device_ready`
/// is whether the device path may run (`engine::device::nvcomp_availability` and
/// `gpu_availability` where both answered: the first absence is logged there, once).
pub(crate) fn decompress(device: usize, chunks: &[ColumnChunk<'_>], device_ready: std::result::Result<(), String>) -> Result<Pages> {
    let covered = chunks.iter().all(|c| device_codec(c.table.codec).is_ok());
    match device_ready {
        Ok(()) if covered => run(device, chunks).map(Pages::Device),
        _ => chunks.par_iter().map(decompress_on_cpu).collect::<Result<Vec<_>>>().map(Pages::Host),
    }
}

/// Whether the device path may run here: nvCOMP loads and a GPU answers.
pub(crate) fn device_ready() -> std::result::Result<(), String> {
    crate::engine::device::nvcomp_availability()?;
    crate::engine::gpu_availability()
}

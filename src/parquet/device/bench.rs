//! Not API: the decode-alone measurement of `benches/gpu.rs` (section `nvcomp`), reached
//! through `corank::__bench::nvcomp`. Every column chunk of the given files is read into
//! memory, then decompressed again and again on the device (one call for all chunks: upload
//! included, and the device's own time) and on every CPU core (parquet-rs's page reader and
//! codecs, rayon over the column chunks); the device's output is checked equal to the
//! CPU's, page for page, before any time counts.

use super::decompress::{self, decompress_on_cpu, ColumnChunk};
use super::page_table::PageKind;
use super::{chunk_bytes, page_table_of};
use crate::error::{Error, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What one measurement saw.
#[derive(Debug, Clone, Default)]
pub struct DecodeAlone {
    /// Column chunks and their pages (dictionary and data).
    pub chunks: usize,
    pub pages: usize,
    /// The column chunks' bytes (headers included), and their bodies once decompressed.
    pub chunk_bytes: usize,
    pub uncompressed_bytes: usize,
    /// Per repetition: the device call's wall time (layout, image, upload, nvCOMP, copies,
    /// statuses), its upload and its device work (CUDA events), and the CPU's wall time.
    pub device_wall: Vec<Duration>,
    pub device_upload_ms: Vec<f32>,
    pub device_ms: Vec<f32>,
    pub cpu_wall: Vec<Duration>,
}

/// Measures `files` (`reps` timed runs after one checked run) on CUDA device `device`.
pub fn decode_alone(files: &[PathBuf], device: usize, reps: usize) -> Result<DecodeAlone> {
    let metas: Vec<ParquetMetaData> = files
        .iter()
        .map(|p| {
            let f = std::fs::File::open(p).map_err(|e| Error::Io { path: Some(p.clone()), context: "opening".into(), source: e })?;
            ParquetMetaDataReader::new().parse_and_finish(&f).map_err(|e| Error::Parquet {
                path: Some(p.clone()),
                context: "reading the footer".into(),
                source: e,
            })
        })
        .collect::<Result<_>>()?;
    let mut chunks: Vec<ColumnChunk<'_>> = Vec::new();
    for (path, meta) in files.iter().zip(&metas) {
        let f = std::fs::File::open(path).map_err(|e| Error::Io { path: Some(path.clone()), context: "opening".into(), source: e })?;
        for (g, rg) in meta.row_groups().iter().enumerate() {
            for c in rg.columns() {
                let bytes = chunk_bytes(&f, path, c)?;
                let table = page_table_of(path, g, c, &bytes)?;
                chunks.push(ColumnChunk {
                    file: path.clone(),
                    row_group: g,
                    rows: rg.num_rows() as usize,
                    meta: c,
                    bytes: bytes.into(),
                    table,
                });
            }
        }
    }
    let mut m = DecodeAlone {
        chunks: chunks.len(),
        pages: chunks.iter().map(|c| c.table.pages.iter().filter(|p| p.kind != PageKind::Index).count()).sum(),
        chunk_bytes: chunks.iter().map(|c| c.bytes.len()).sum(),
        uncompressed_bytes: chunks.iter().map(|c| c.table.uncompressed_bytes()).sum(),
        ..DecodeAlone::default()
    };

    // The checked run: every page of the device's output equal to the CPU's.
    let cpu: Vec<Vec<bytes::Bytes>> = chunks.par_iter().map(decompress_on_cpu).collect::<Result<_>>()?;
    // Through the entry that picks the device or the CPU: the device must be there.
    let done = match decompress::decompress(device, &chunks, decompress::device_ready())? {
        decompress::Pages::Device(d) => d,
        decompress::Pages::Host(_) => {
            let why = decompress::device_ready().err().unwrap_or_else(|| "a codec is not covered".into());
            return Err(Error::GpuUnavailable(format!("the device path is not available: {why}")));
        }
    };
    let out = done.output.to_host()?;
    if out.len() != done.output.len() {
        return Err(Error::Internal("the device output's length".into()));
    }
    for ((c, outs), want) in chunks.iter().zip(&done.pages).zip(&cpu) {
        let outs = outs.iter().zip(&c.table.pages).filter(|(_, t)| t.kind != PageKind::Index).map(|(o, _)| o);
        for (i, (o, w)) in outs.zip(want).enumerate() {
            if out[o.offset..o.offset + o.len] != w[..] {
                return Err(Error::Internal(format!(
                    "{}: row group {}, column {}, page {i}: the device's bytes differ from parquet-rs's",
                    c.file.display(),
                    c.row_group,
                    c.meta.column_path().string()
                )));
            }
        }
    }
    drop((done, out, cpu));

    for _ in 0..reps {
        let done = decompress::run(device, &chunks)?;
        m.device_wall.push(done.wall);
        m.device_upload_ms.push(done.upload_ms);
        m.device_ms.push(done.device_ms);
        drop(done);
        let t = Instant::now();
        let cpu: Vec<Vec<bytes::Bytes>> = chunks.par_iter().map(decompress_on_cpu).collect::<Result<_>>()?;
        m.cpu_wall.push(t.elapsed());
        drop(cpu);
    }
    Ok(m)
}

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

/// What the "decompress + decode" measurement saw.
#[derive(Debug, Clone, Default)]
pub struct DecompressDecode {
    /// The columns decoded (those every chunk of which the device path covers).
    pub columns: Vec<String>,
    pub chunks: usize,
    pub rows: usize,
    /// The covered chunks' bytes as stored.
    pub chunk_bytes: usize,
    /// Per repetition: the device's wall time (stage 1's call, then the decode launches and
    /// their fault checks), the decode launches alone, and parquet-rs's arrow reader on every
    /// core (rayon over the files' row groups, the same columns, the files in memory).
    pub device_wall: Vec<Duration>,
    pub device_decode: Vec<Duration>,
    /// Stage 1's call alone (upload and decompression).
    pub device_decompress: Vec<Duration>,
    pub cpu_wall: Vec<Duration>,
}

/// A file held in memory for parquet-rs's arrow reader, its footer read once.
pub(crate) struct InMemory {
    path: PathBuf,
    bytes: bytes::Bytes,
    meta: parquet::arrow::arrow_reader::ArrowReaderMetadata,
}

impl InMemory {
    pub fn load(path: &std::path::Path) -> Result<InMemory> {
        let bytes = std::fs::read(path).map_err(|e| Error::Io { path: Some(path.into()), context: "reading".into(), source: e })?;
        let bytes = bytes::Bytes::from(bytes);
        let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&bytes, Default::default()).map_err(|e| Error::Parquet {
            path: Some(path.into()),
            context: "reading the footer".into(),
            source: e,
        })?;
        Ok(InMemory { path: path.into(), bytes, meta })
    }

    /// parquet-rs's arrow reader over row group `g`, leaves `leaves`: one array a leaf.
    pub fn read(&self, g: usize, leaves: &[usize]) -> Result<Vec<arrow::array::ArrayRef>> {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::arrow::ProjectionMask;
        let path = &self.path;
        let err =
            |e: parquet::errors::ParquetError| Error::Parquet { path: Some(path.clone()), context: format!("row group {g}"), source: e };
        let b = ParquetRecordBatchReaderBuilder::new_with_metadata(self.bytes.clone(), self.meta.clone());
        let rows = b.metadata().row_group(g).num_rows() as usize;
        let mask = ProjectionMask::leaves(b.parquet_schema(), leaves.iter().copied());
        let reader = b.with_row_groups(vec![g]).with_projection(mask).with_batch_size(rows.max(1)).build().map_err(err)?;
        let mut columns: Vec<Vec<arrow::array::ArrayRef>> = vec![Vec::new(); leaves.len()];
        for batch in reader {
            let batch = batch.map_err(|e| Error::Internal(format!("{}: {e}", path.display())))?;
            for (k, c) in batch.columns().iter().enumerate() {
                columns[k].push(c.clone());
            }
        }
        columns
            .into_iter()
            .map(|parts| {
                let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
                arrow::compute::concat(&refs).map_err(|e| Error::Internal(format!("{}: {e}", path.display())))
            })
            .collect()
    }
}

/// parquet-rs's arrow reader over row group `g` of `path`, leaves `leaves` (the tests').
#[cfg(test)]
pub(crate) fn arrow_read(path: &std::path::Path, g: usize, leaves: &[usize]) -> Result<Vec<arrow::array::ArrayRef>> {
    InMemory::load(path)?.read(g, leaves)
}

/// Measures "decompress + decode" of the columns of `files` the device path covers
/// (`reps` timed runs after one checked run: every chunk's decoded array equal to
/// parquet-rs's arrow reader's, validity included) on CUDA device `device`.
pub fn decompress_and_decode(files: &[PathBuf], device: usize, reps: usize) -> Result<DecompressDecode> {
    use super::decode::{decode_on_cpu, decode_on_device, plan_chunk};
    use super::decode_plan::{arrow_types, Planned};
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
    let mut plans = Vec::new();
    // Per file: the leaves decoded; per chunk: (file, row group, position among the leaves).
    let mut leaves_of: Vec<Vec<usize>> = Vec::new();
    let mut at: Vec<(usize, usize, usize)> = Vec::new();
    let mut m = DecompressDecode::default();
    for (fi, (path, meta)) in files.iter().zip(&metas).enumerate() {
        let schema = meta.file_metadata().schema_descr();
        let types = arrow_types(schema, meta.file_metadata().key_value_metadata());
        let f = std::fs::File::open(path).map_err(|e| Error::Io { path: Some(path.clone()), context: "opening".into(), source: e })?;
        let mut file_chunks = Vec::new();
        let mut covered = vec![true; schema.num_columns()];
        for (g, rg) in meta.row_groups().iter().enumerate() {
            for (leaf, c) in rg.columns().iter().enumerate() {
                let bytes = chunk_bytes(&f, path, c)?;
                let table = page_table_of(path, g, c, &bytes)?;
                let chunk =
                    ColumnChunk { file: path.clone(), row_group: g, rows: rg.num_rows() as usize, meta: c, bytes: bytes.into(), table };
                match plan_chunk(&chunk, types[leaf].as_ref())? {
                    Planned::Covered(p) => file_chunks.push((g, leaf, chunk, p)),
                    Planned::NotCovered(_) => covered[leaf] = false,
                }
            }
        }
        let leaves: Vec<usize> = (0..schema.num_columns()).filter(|&l| covered[l]).collect();
        if fi == 0 {
            m.columns = leaves.iter().map(|&l| schema.column(l).path().string()).collect();
        }
        for (g, leaf, chunk, p) in file_chunks.into_iter().filter(|(_, l, ..)| covered[*l]) {
            at.push((fi, g, leaves.iter().position(|&l| l == leaf).expect("a covered leaf")));
            m.rows += if at.last().map(|a| a.2) == Some(0) { chunk.rows } else { 0 };
            chunks.push(chunk);
            plans.push(p);
        }
        leaves_of.push(leaves);
    }
    m.chunks = chunks.len();
    m.chunk_bytes = chunks.iter().map(|c| c.bytes.len()).sum();
    let plan_refs: Vec<_> = plans.iter().collect();

    // The checked run.
    let groups: Vec<(usize, usize)> =
        files.iter().enumerate().flat_map(|(fi, _)| (0..metas[fi].num_row_groups()).map(move |g| (fi, g))).collect();
    // The CPU's files in memory too, as the device's chunks are, footers read once.
    let in_memory: Vec<InMemory> = files.iter().map(|p| InMemory::load(p)).collect::<Result<_>>()?;
    let cpu_read = || -> Result<Vec<Vec<arrow::array::ArrayRef>>> {
        groups.par_iter().map(|&(fi, g)| in_memory[fi].read(g, &leaves_of[fi])).collect()
    };
    let cpu = cpu_read()?;
    let done = decode_on_device(device, &chunks, &plan_refs)?;
    let got = done.to_host()?;
    for (k, ((fi, g, col), d)) in at.iter().zip(&got).enumerate() {
        let gi = groups.iter().position(|x| *x == (*fi, *g)).expect("a row group");
        let want = cpu[gi][*col].to_data();
        let have = d.to_array_data(&plans[k]).map_err(|e| Error::Internal(format!("chunk {k}: {e}")))?;
        // The kernels' CPU reference too, on the same chunk.
        let reference =
            decode_on_cpu(&chunks[k], &plans[k])?.to_array_data(&plans[k]).map_err(|e| Error::Internal(format!("chunk {k}: {e}")))?;
        if want != have || want != reference {
            return Err(Error::Internal(format!(
                "{}: row group {g}, column {}: the device's decode differs from parquet-rs's",
                files[*fi].display(),
                chunks[k].meta.column_path().string()
            )));
        }
    }
    drop((done, got, cpu));

    for _ in 0..reps {
        let t = Instant::now();
        let done = decode_on_device(device, &chunks, &plan_refs)?;
        m.device_wall.push(t.elapsed());
        m.device_decode.push(done.decode);
        m.device_decompress.push(done.decompress);
        drop(done);
        let t = Instant::now();
        let cpu = cpu_read()?;
        m.cpu_wall.push(t.elapsed());
        drop(cpu);
    }
    Ok(m)
}

/// What the device-resident round's measurement saw (`benches/gpu.rs`, section `nvcomp`).
#[derive(Debug, Clone, Default)]
pub struct MergeRound {
    pub rows: usize,
    /// Where the round put each column.
    pub gathered_on_device: Vec<String>,
    pub on_cpu: Vec<String>,
    /// Per repetition: the device round's wall time and its steps (read, decompress, decode,
    /// keys, merge, gather, the CPU's columns).
    pub device_wall: Vec<Duration>,
    pub device_steps: Vec<[Duration; 7]>,
    /// Per repetition: the CPU's wall time (parquet-rs's arrow reader, a file a core, then
    /// `corank::merge` on the CPU engine), and its read alone.
    pub cpu_wall: Vec<Duration>,
    pub cpu_read: Vec<Duration>,
}

/// Measures the merge of sorted `files` by column `key` into Arrow batches in host memory:
/// on CUDA device `device` through the device-resident round (`round.rs`), and on every CPU
/// core (parquet-rs's arrow reader over the files in parallel, then `corank::merge` with the
/// CPU engine). One checked run first (every column equal), then `reps` timed ones.
pub fn merge_round(files: &[PathBuf], key: &str, device: usize, reps: usize) -> Result<MergeRound> {
    use super::round::{merge_files_on_device, RoundOutcome};
    use crate::options::{Engine, EngineOptions};
    let keys = [crate::SortKey::new(key, arrow::compute::SortOptions::default())];
    let device_round = || match merge_files_on_device(device, files, &keys, &EngineOptions::default())? {
        RoundOutcome::Merged(r) => Ok(r),
        RoundOutcome::Declined(why) => Err(Error::GpuUnavailable(format!("the device round declined: {why}"))),
    };
    let read_file = |p: &PathBuf| -> Result<arrow::array::RecordBatch> {
        let f = std::fs::File::open(p).map_err(|e| Error::Io { path: Some(p.clone()), context: "opening".into(), source: e })?;
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .and_then(|b| b.with_batch_size(1 << 20).build())
            .map_err(|e| Error::Parquet { path: Some(p.clone()), context: "reading".into(), source: e })?;
        let schema = arrow::array::RecordBatchReader::schema(&reader);
        let batches: Vec<_> = reader.collect::<std::result::Result<_, _>>()?;
        Ok(arrow::compute::concat_batches(&schema, &batches)?)
    };
    let cpu_round = || -> Result<(Vec<arrow::array::RecordBatch>, Duration)> {
        let t = Instant::now();
        let runs: Vec<_> = files.par_iter().map(read_file).collect::<Result<_>>()?;
        let read = t.elapsed();
        let rows = runs.iter().map(|r| r.num_rows()).sum::<usize>().max(1);
        let options = crate::MergeOptions::default().with_engine(Engine::Cpu).with_batch_size(rows);
        Ok((crate::merge(&runs, &keys, &options)?, read))
    };
    let r = device_round()?;
    let (cpu, _) = cpu_round()?;
    let want = arrow::compute::concat_batches(&r.batch.schema(), &cpu)?;
    if want.num_rows() != r.batch.num_rows() || (0..want.num_columns()).any(|c| want.column(c).to_data() != r.batch.column(c).to_data()) {
        return Err(Error::Internal("the device round's merge differs from the CPU's".into()));
    }
    let mut m = MergeRound {
        rows: want.num_rows(),
        gathered_on_device: r.gathered_on_device.clone(),
        on_cpu: r.on_cpu.clone(),
        ..MergeRound::default()
    };
    drop((r, cpu, want));
    for _ in 0..reps {
        let t = Instant::now();
        let r = device_round()?;
        m.device_wall.push(t.elapsed());
        let s = r.timings;
        m.device_steps.push([s.read, s.decompress, s.decode, s.keys, s.merge, s.gather, s.cpu_columns]);
        drop(r);
        let t = Instant::now();
        let (out, read) = cpu_round()?;
        m.cpu_wall.push(t.elapsed());
        m.cpu_read.push(read);
        drop(out);
    }
    Ok(m)
}

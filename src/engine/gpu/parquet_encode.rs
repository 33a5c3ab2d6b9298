//! The launch of the Parquet page encoder (`cuda/parquet_encode.cu`, issue 69 stage 4):
//! flat fixed-width columns already on the device (values and validity bitmaps, as stage 2's
//! decode or a gather leaves them) encoded into data page bodies and each page's
//! statistics, downloaded to host memory. The job (which page reads which rows, where its
//! body goes) is `engine/encode_job.rs`'s, planned on the host; this checks it, uploads its
//! records, runs the three kernels on one stream and downloads the records and the bodies
//! ([`encode_pages`]). [`encode_chunk_on_device`] makes a column chunk's pages of that
//! output through the same function as the CPU reference (`encode_cpu::finish_chunk`):
//! the host writes only the page headers.

// Its callers are the GPU tests and the device path under construction.
#![cfg_attr(not(test), allow(dead_code))]

use super::context::{gpu, gpu_err, DevBuf};
use super::launch::{Args, Launcher};
use super::manifest::{Entry, Family};
use super::nvrtc::ModuleSpec;
use crate::engine::encode_job::{kind_width, EncodeColumnArg, EncodeJob, EncodeOutput, EncodePageArg, EncodeTileArg};
use crate::{Error, Result};
use cudarc::driver::result;
use std::mem::size_of;

/// `v` as the bytes of a plain-old-data slice.
///
/// SAFETY: the caller's `T` is repr(C), integers only, without padding.
unsafe fn pod_bytes<T>(v: &[T]) -> &[u8] {
    // SAFETY: the caller's promise; the slice covers exactly `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// `v` as the mutable bytes of a plain-old-data slice (every bit pattern a value).
///
/// SAFETY: as [`pod_bytes`].
unsafe fn pod_bytes_mut<T>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: the caller's promise; the slice covers exactly `v`.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

/// Runs `job` on CUDA device `device`, whose columns' `values` and `validity` are device
/// addresses on that device (alive for the call; values aligned to their width), and
/// downloads what it wrote: the same [`EncodeOutput`] the CPU reference gives for the same
/// job (`encode_cpu::run_on_cpu`). The output is zeroed first.
pub(crate) fn encode_pages(device: usize, job: &EncodeJob) -> Result<EncodeOutput> {
    job.check().map_err(|e| Error::Internal(format!("an encode job: {e}")))?;
    for (c, col) in job.columns.iter().enumerate() {
        let width = kind_width(col.kind).expect("checked") as u64;
        if col.rows > 0 && (col.values == 0 || col.values % width != 0) {
            return Err(Error::Internal(format!("an encode job's column {c} has no aligned values address")));
        }
    }
    let (np, nt) = (job.pages.len(), job.tiles.len());
    let count = |k: usize| u32::try_from(k).map_err(|_| Error::Gpu(format!("{k} pages or tiles in one encode launch")));
    let (npages, ntiles) = (count(np)?, count(nt)?);
    let mut out = EncodeOutput { pages: job.pages.clone(), tiles: job.tiles.clone(), output: vec![0u8; job.output_len] };
    if np == 0 {
        return Ok(out);
    }
    let g = gpu(device)?;
    g.bind()?;
    let module = g.lock()?.module(g, ModuleSpec { family: Family::Decode, key_bytes: 8, index_bits: 32 })?;
    let stream = g.ctx.new_stream().map_err(gpu_err("creating the encode stream"))?;
    let s = stream.cu_stream();
    let output = DevBuf::new(job.output_len.max(16))?;
    let columns = DevBuf::new(std::mem::size_of_val(&job.columns[..]).max(8))?;
    let pages = DevBuf::new(np * size_of::<EncodePageArg>())?;
    let tiles = DevBuf::new(nt * size_of::<EncodeTileArg>())?;
    // SAFETY: the three record types are repr(C), integers only, without padding (their
    // sizes are asserted in encode_job.rs to be the sums of their fields').
    let (column_bytes, page_bytes, tile_bytes) = unsafe { (pod_bytes(&job.columns), pod_bytes(&job.pages), pod_bytes(&job.tiles)) };
    // SAFETY: the buffers were allocated above with at least these sizes; the host slices
    // outlive the synchronize below; the memset and copies run on `s` before the launches.
    unsafe {
        result::memset_d8_async(output.ptr, 0, job.output_len.max(16), s).map_err(gpu_err("clearing the encode output"))?;
        if !column_bytes.is_empty() {
            result::memcpy_htod_async(columns.ptr, column_bytes, s).map_err(gpu_err("uploading the encode columns"))?;
        }
        result::memcpy_htod_async(pages.ptr, page_bytes, s).map_err(gpu_err("uploading the encode pages"))?;
        result::memcpy_htod_async(tiles.ptr, tile_bytes, s).map_err(gpu_err("uploading the encode tiles"))?;
    }
    let args = Args::EncodePages { columns: columns.ptr, pages: pages.ptr, npages, tiles: tiles.ptr, ntiles, out: output.ptr };
    let launcher = Launcher { module: &module, stream: s };
    let threads = u64::from(module.policy.threads);
    launcher.launch(Entry::ParquetEncodeSummarize, nt as u64, args)?;
    launcher.launch(Entry::ParquetEncodeScan, (np as u64).div_ceil(threads), args)?;
    launcher.launch(Entry::ParquetEncodeWrite, nt as u64, args)?;
    stream.synchronize().map_err(gpu_err("encoding pages"))?;
    // SAFETY: each buffer holds what is copied, written by the finished launches; the
    // records are pod (as above), so every byte pattern the kernels wrote is a value.
    unsafe {
        result::memcpy_dtoh_sync(pod_bytes_mut(&mut out.pages), pages.ptr).map_err(gpu_err("downloading the encoded pages"))?;
        result::memcpy_dtoh_sync(pod_bytes_mut(&mut out.tiles), tiles.ptr).map_err(gpu_err("downloading the encoded tiles"))?;
        if job.output_len > 0 {
            result::memcpy_dtoh_sync(&mut out.output, output.ptr).map_err(gpu_err("downloading the page bodies"))?;
        }
    }
    drop((output, columns, pages, tiles));
    Ok(out)
}

/// A column's buffers uploaded to the device (the tests' input: on the device path they
/// are stage 2's or a gather's output). Dropped with its context bound.
pub(crate) struct ColumnOnDevice {
    values: Option<DevBuf>,
    validity: Option<DevBuf>,
    device: usize,
}

impl ColumnOnDevice {
    /// `values` and `validity` (a bitmap from row 0) copied to device `device`.
    pub fn upload(device: usize, values: &[u8], validity: Option<&[u8]>) -> Result<ColumnOnDevice> {
        gpu(device)?.bind()?;
        let copy = |bytes: &[u8]| -> Result<DevBuf> {
            let buf = DevBuf::new(bytes.len().max(16))?;
            if !bytes.is_empty() {
                // SAFETY: the buffer holds at least `bytes.len()` bytes.
                unsafe { result::memcpy_htod_sync(buf.ptr, bytes) }.map_err(gpu_err("uploading a column"))?;
            }
            Ok(buf)
        };
        let values = copy(values)?;
        let validity = validity.map(copy).transpose()?;
        Ok(ColumnOnDevice { values: Some(values), validity, device })
    }

    /// `arg` with this column's addresses.
    pub fn arg(&self, arg: EncodeColumnArg) -> EncodeColumnArg {
        EncodeColumnArg {
            values: self.values.as_ref().expect("held until drop").ptr,
            validity: self.validity.as_ref().map_or(0, |b| b.ptr),
            ..arg
        }
    }
}

impl Drop for ColumnOnDevice {
    fn drop(&mut self) {
        if let Ok(g) = gpu(self.device) {
            let _ = g.bind();
        }
        drop(self.values.take());
        drop(self.validity.take());
    }
}

/// The column chunk of `column`, a column on device `device` (its record's `values` and
/// `validity` device addresses), cut into the row ranges `pages`, encoded on the device:
/// the same pages and statistics as the CPU reference's (`encode_cpu::encode_chunk`) for
/// the same rows and cuts. A page with nulls in a column declared without them is an error.
#[cfg(feature = "parquet")]
pub(crate) fn encode_chunk_on_device(
    device: usize,
    column: EncodeColumnArg,
    pages: &[std::ops::Range<usize>],
    header_stats: bool,
) -> Result<crate::parquet::device::encode_cpu::EncodedChunk> {
    use crate::engine::encode_job::plan_job;
    use crate::parquet::device::encode_cpu::finish_chunk;
    let job = plan_job(&[column], &[pages.to_vec()]).map_err(|e| Error::Internal(format!("an encode job: {e}")))?;
    let out = encode_pages(device, &job)?;
    finish_chunk(&job, &out, 0, header_stats).map_err(|e| Error::Internal(format!("encoding a column chunk on the device: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::encode_job::{plan_job, KIND_INT32};
    use std::ops::Range;

    /// One page's cut (a `vec!` of one range reads as a mistake to clippy).
    fn one(rows: Range<usize>) -> Vec<Range<usize>> {
        vec![rows]
    }

    /// A job whose records do not fit is refused before anything runs (no GPU needed:
    /// the check comes first).
    #[test]
    fn damaged_jobs_are_refused() {
        let arg = EncodeColumnArg { values: 16, rows: 10, kind: KIND_INT32, ..Default::default() };
        let mut job = plan_job(&[arg], &[one(0..10)]).unwrap();
        job.pages[0].rows = 11;
        assert!(encode_pages(0, &job).unwrap_err().to_string().contains("rows 0+11"));
        let mut job = plan_job(&[arg], &[one(0..10)]).unwrap();
        job.columns[0].values = 0;
        assert!(encode_pages(0, &job).unwrap_err().to_string().contains("no aligned values address"));
        job.columns[0].values = 18;
        assert!(encode_pages(0, &job).unwrap_err().to_string().contains("no aligned values address"));
    }
}

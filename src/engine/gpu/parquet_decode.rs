//! The launch of the Parquet page decode kernel (`cuda/parquet_decode.cu`, issue 69 stage
//! 2): one block per data page, reading stage 1's decompressed pages on the device and
//! writing Arrow-layout buffers into one zeroed output buffer. The layout (which page
//! writes where) is the Parquet side's (`parquet/device/decode.rs`, pure); this only
//! allocates, uploads the page table, launches, and reads back each page's fault code.

use super::context::{gpu, gpu_err, DevBuf};
use super::launch::{Args, Launcher};
use super::manifest::{Entry, Family};
use super::nvrtc::ModuleSpec;
use crate::engine::decode_job::{DecodeJob, DecodePageArg, NO_VALIDITY};
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::mem::size_of;

/// The decoded buffers on the device, and each page's fault code (0: none).
pub(crate) struct DecodedOnDevice {
    buf: Option<DevBuf>,
    device: usize,
    len: usize,
    pub faults: Vec<u32>,
}

impl DecodedOnDevice {
    /// The output copied to host memory (tests and the benchmark's checks).
    pub fn to_host(&self) -> Result<Vec<u8>> {
        gpu(self.device)?.bind()?;
        let mut host = vec![0u8; self.len];
        if self.len > 0 {
            let ptr = self.buf.as_ref().expect("held until drop").ptr;
            // SAFETY: the buffer holds at least `len` bytes, written by a finished launch.
            unsafe { result::memcpy_dtoh_sync(&mut host, ptr) }.map_err(gpu_err("downloading decoded pages"))?;
        }
        Ok(host)
    }
}

impl Drop for DecodedOnDevice {
    fn drop(&mut self) {
        if let Ok(g) = gpu(self.device) {
            let _ = g.bind();
        }
        drop(self.buf.take());
    }
}

/// Runs `job` on CUDA device `device` over `input_len` bytes at device address `input`
/// (stage 1's output, on the same device, alive for the call). The output is zeroed first,
/// so nulls' slots and bits are zero.
pub(crate) fn decode_pages(device: usize, input: sys::CUdeviceptr, input_len: usize, job: &DecodeJob) -> Result<DecodedOnDevice> {
    for (i, p) in job.pages.iter().enumerate() {
        let values_end = p.out_values.checked_add(p.chunk_rows * u64::from((p.widths >> 8) & 0xff));
        let valid_end = p.out_valid.checked_add(p.chunk_rows.div_ceil(32) * 4);
        let inside = |end: Option<u64>| end.is_some_and(|e| e <= job.output_len as u64);
        if !inside(values_end) || (p.out_valid != NO_VALIDITY && !inside(valid_end)) || p.out_values % 16 != 0 {
            return Err(Error::Internal(format!("a decode job's page {i} writes outside its output")));
        }
    }
    let g = gpu(device)?;
    g.bind()?;
    let module = g.lock()?.module(g, ModuleSpec { family: Family::Decode, key_bytes: 8, index_bits: 32 })?;
    let stream = g.ctx.new_stream().map_err(gpu_err("creating the decode stream"))?;
    let s = stream.cu_stream();
    let n = job.pages.len();
    let out = DevBuf::new(job.output_len.max(16))?;
    let descs = DevBuf::new((n * size_of::<DecodePageArg>()).max(8))?;
    let errors = DevBuf::new((n * 4).max(4))?;
    let pages: Vec<DecodePageArg> = job
        .pages
        .iter()
        .map(|p| DecodePageArg {
            out_values: out.ptr + p.out_values,
            out_valid: if p.out_valid == NO_VALIDITY { 0 } else { out.ptr + p.out_valid },
            ..*p
        })
        .collect();
    // SAFETY: `DecodePageArg` is plain old data (repr(C), integers only, no padding: its
    // size is the sum of its fields'); the slice covers exactly the vector.
    let bytes = unsafe { std::slice::from_raw_parts(pages.as_ptr() as *const u8, n * size_of::<DecodePageArg>()) };
    // SAFETY: the buffers were allocated above with at least these sizes; `pages` and
    // `bytes` outlive the synchronize below; the memsets and copies run on `s` before the
    // launch.
    unsafe {
        if job.output_len > 0 {
            result::memset_d8_async(out.ptr, 0, job.output_len, s).map_err(gpu_err("clearing the decode output"))?;
        }
        if n > 0 {
            result::memset_d8_async(errors.ptr, 0, n * 4, s).map_err(gpu_err("clearing the decode faults"))?;
            result::memcpy_htod_async(descs.ptr, bytes, s).map_err(gpu_err("uploading the decode pages"))?;
        }
    }
    let npages = u32::try_from(n).map_err(|_| Error::Gpu(format!("{n} pages in one decode launch")))?;
    Launcher { module: &module, stream: s }.launch(
        Entry::ParquetDecodePages,
        n as u64,
        Args::DecodePages { input, input_len: input_len as u64, pages: descs.ptr, npages, errors: errors.ptr },
    )?;
    stream.synchronize().map_err(gpu_err("decoding pages"))?;
    let mut faults = vec![0u32; n];
    if n > 0 {
        // SAFETY: `errors` holds n words, written by the finished launch.
        unsafe { result::memcpy_dtoh_sync(&mut faults, errors.ptr) }.map_err(gpu_err("reading the decode faults"))?;
    }
    drop((descs, errors, pages));
    Ok(DecodedOnDevice { buf: Some(out), device, len: job.output_len, faults })
}

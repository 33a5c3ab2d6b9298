//! The launch of the Parquet page decode kernel (`cuda/parquet_decode.cu`, issue 69 stage
//! 2): one block per data page, reading stage 1's decompressed pages on the device and
//! writing Arrow-layout buffers into one zeroed output buffer. The layout (which page
//! writes where) is the Parquet side's (`parquet/device/decode.rs`, pure); this only
//! allocates, uploads the page table, launches, and reads back each page's fault code.
//!
//! Byte array chunks take four launches on one stream: their dictionaries walked into slot
//! tables (`parquet_bytes_dictionary`), the pages (the same `parquet_decode_pages`, writing
//! each row's slot), each chunk's offsets scanned (`parquet_bytes_offsets`, its total
//! written back); then one synchronize and the totals read back, the values buffer
//! allocated at their sum (each chunk's part 16-byte aligned), and each value copied
//! (`parquet_bytes_copy`). A fault before the copy skips it.

use super::context::{gpu, gpu_err, DevBuf};
use super::launch::{Args, Launcher};
use super::manifest::{Entry, Family};
use super::nvrtc::ModuleSpec;
use crate::engine::decode_job::{BytesChunkArg, BytesDictArg, DecodeJob, DecodePageArg, FLAG_BYTES, NO_VALIDITY};
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::mem::size_of;

/// The decoded buffers on the device, and each page's fault code (0: none).
pub(crate) struct DecodedOnDevice {
    buf: Option<DevBuf>,
    device: usize,
    len: usize,
    pub faults: Vec<u32>,
    /// Each byte array dictionary's fault code (`DecodeJob::dicts` order), then each byte
    /// array chunk's (`DecodeJob::byte_chunks` order).
    pub dict_faults: Vec<u32>,
    pub chunk_faults: Vec<u32>,
    /// The byte array chunks' values: the buffer, and each chunk's (offset, bytes) in it.
    data: Option<DevBuf>,
    pub data_spans: Vec<(usize, usize)>,
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

    /// The byte array values buffer copied to host memory (empty without byte array chunks).
    pub fn data_to_host(&self) -> Result<Vec<u8>> {
        let len = self.data_spans.iter().map(|&(at, n)| at + n).max().unwrap_or(0);
        let mut host = vec![0u8; len];
        if let (Some(buf), true) = (&self.data, len > 0) {
            gpu(self.device)?.bind()?;
            // SAFETY: the buffer holds at least `len` bytes (the spans lie inside it), written
            // by a finished launch.
            unsafe { result::memcpy_dtoh_sync(&mut host, buf.ptr) }.map_err(gpu_err("downloading decoded values"))?;
        }
        Ok(host)
    }
}

impl DecodedOnDevice {
    /// The output buffer's device address (a device-resident round reads the chunks there).
    pub fn ptr(&self) -> u64 {
        self.buf.as_ref().expect("held until drop").ptr
    }

    /// The byte array values buffer's device address, where there is one.
    pub fn data_ptr(&self) -> Option<u64> {
        self.data.as_ref().map(|d| d.ptr)
    }
}

impl Drop for DecodedOnDevice {
    fn drop(&mut self) {
        if let Ok(g) = gpu(self.device) {
            let _ = g.bind();
        }
        drop(self.buf.take());
        drop(self.data.take());
    }
}

/// `v` as the bytes of a plain-old-data slice.
///
/// SAFETY: the caller's `T` is repr(C), integers only, without padding.
unsafe fn pod_bytes<T>(v: &[T]) -> &[u8] {
    // SAFETY: the caller's promise; the slice covers exactly `v`.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// Runs `job` on CUDA device `device` over `input_len` bytes at device address `input`
/// (stage 1's output, on the same device, alive for the call). The output is zeroed first,
/// so nulls' slots and bits are zero.
pub(crate) fn decode_pages(device: usize, input: sys::CUdeviceptr, input_len: usize, job: &DecodeJob) -> Result<DecodedOnDevice> {
    let inside = |at: u64, len: Option<u64>| len.and_then(|l| at.checked_add(l)).is_some_and(|e| e <= job.output_len as u64);
    for (i, p) in job.pages.iter().enumerate() {
        let values = inside(p.out_values, p.chunk_rows.checked_mul(u64::from((p.widths >> 8) & 0xff)));
        let valid = p.out_valid == NO_VALIDITY || inside(p.out_valid, Some(p.chunk_rows.div_ceil(32) * 4));
        let dict = p.flags & FLAG_BYTES == 0 || inside(p.dict, Some(u64::from(p.dict_entries) * 16));
        if !values || !valid || !dict || p.out_values % 16 != 0 {
            return Err(Error::Internal(format!("a decode job's page {i} writes outside its output")));
        }
    }
    for d in &job.dicts {
        if !inside(d.slots, Some(u64::from(d.entries) * 16)) {
            return Err(Error::Internal("a decode job's dictionary writes outside its output".into()));
        }
    }
    for c in &job.byte_chunks {
        let offsets = c.rows.checked_add(1).and_then(|r| r.checked_mul(u64::from(c.offset_width)));
        if !inside(c.slots, c.rows.checked_mul(16)) || !inside(c.offsets, offsets) || !matches!(c.offset_width, 4 | 8) {
            return Err(Error::Internal("a decode job's byte array chunk lies outside its output".into()));
        }
    }
    let g = gpu(device)?;
    g.bind()?;
    let module = g.lock()?.module(g, ModuleSpec { family: Family::Decode, key_bytes: 8, index_bits: 32 })?;
    let stream = g.ctx.new_stream().map_err(gpu_err("creating the decode stream"))?;
    let s = stream.cu_stream();
    let n = job.pages.len();
    let (nd, nc) = (job.dicts.len(), job.byte_chunks.len());
    let out = DevBuf::new(job.output_len.max(16))?;
    let descs = DevBuf::new((n * size_of::<DecodePageArg>()).max(8))?;
    let dict_descs = DevBuf::new((nd * size_of::<BytesDictArg>()).max(8))?;
    let chunk_descs = DevBuf::new((nc * size_of::<BytesChunkArg>()).max(8))?;
    // Fault words: the pages', then the dictionaries', then the byte array chunks'.
    let nerr = n + nd + nc;
    let errors = DevBuf::new((nerr * 4).max(4))?;
    let pages: Vec<DecodePageArg> = job
        .pages
        .iter()
        .map(|p| DecodePageArg {
            out_values: out.ptr + p.out_values,
            out_valid: if p.out_valid == NO_VALIDITY { 0 } else { out.ptr + p.out_valid },
            // A byte array page's dictionary is its slot table in the output.
            dict: if p.flags & FLAG_BYTES != 0 { out.ptr + p.dict } else { p.dict },
            ..*p
        })
        .collect();
    let dicts: Vec<BytesDictArg> = job.dicts.iter().map(|d| BytesDictArg { slots: out.ptr + d.slots, ..*d }).collect();
    let mut chunks: Vec<BytesChunkArg> = job
        .byte_chunks
        .iter()
        .map(|c| BytesChunkArg { slots: out.ptr + c.slots, offsets: out.ptr + c.offsets, values: 0, total: 0, ..*c })
        .collect();
    // SAFETY: the three argument types are repr(C), integers only, without padding (their
    // sizes are asserted in decode_job.rs to be the sums of their fields').
    let (page_bytes, dict_bytes) = unsafe { (pod_bytes(&pages), pod_bytes(&dicts)) };
    // SAFETY: the buffers were allocated above with at least these sizes; the host slices
    // outlive the synchronize below; the memsets and copies run on `s` before the launches.
    unsafe {
        if job.output_len > 0 {
            result::memset_d8_async(out.ptr, 0, job.output_len, s).map_err(gpu_err("clearing the decode output"))?;
        }
        if nerr > 0 {
            result::memset_d8_async(errors.ptr, 0, nerr * 4, s).map_err(gpu_err("clearing the decode faults"))?;
        }
        if n > 0 {
            result::memcpy_htod_async(descs.ptr, page_bytes, s).map_err(gpu_err("uploading the decode pages"))?;
        }
        if nd > 0 {
            result::memcpy_htod_async(dict_descs.ptr, dict_bytes, s).map_err(gpu_err("uploading the decode dictionaries"))?;
        }
        if nc > 0 {
            result::memcpy_htod_async(chunk_descs.ptr, pod_bytes(&chunks), s).map_err(gpu_err("uploading the byte array chunks"))?;
        }
    }
    let count = |k: usize| u32::try_from(k).map_err(|_| Error::Gpu(format!("{k} pages or chunks in one decode launch")));
    let launcher = Launcher { module: &module, stream: s };
    let args = |pages: sys::CUdeviceptr, npages: u32, errors: sys::CUdeviceptr| Args::DecodePages {
        input,
        input_len: input_len as u64,
        pages,
        npages,
        errors,
    };
    let (page_errors, dict_errors, chunk_errors) = (errors.ptr, errors.ptr + (n * 4) as u64, errors.ptr + ((n + nd) * 4) as u64);
    launcher.launch(Entry::ParquetBytesDictionary, nd as u64, args(dict_descs.ptr, count(nd)?, dict_errors))?;
    launcher.launch(Entry::ParquetDecodePages, n as u64, args(descs.ptr, count(n)?, page_errors))?;
    launcher.launch(Entry::ParquetBytesOffsets, nc as u64, args(chunk_descs.ptr, count(nc)?, chunk_errors))?;
    stream.synchronize().map_err(gpu_err("decoding pages"))?;
    let mut faults = vec![0u32; nerr];
    let read_faults = |faults: &mut Vec<u32>| -> Result<()> {
        if nerr > 0 {
            // SAFETY: `errors` holds nerr words, written by the finished launches.
            unsafe { result::memcpy_dtoh_sync(faults, errors.ptr) }.map_err(gpu_err("reading the decode faults"))?;
        }
        Ok(())
    };
    read_faults(&mut faults)?;
    let mut data = None;
    let mut data_spans = Vec::new();
    if nc > 0 && faults.iter().all(|&f| f == 0) {
        // The totals, then the values buffer at their sum, then the copy.
        // SAFETY: `chunk_descs` holds nc BytesChunkArg records (pod), written by the scan.
        unsafe {
            let host = std::slice::from_raw_parts_mut(chunks.as_mut_ptr() as *mut u8, nc * size_of::<BytesChunkArg>());
            result::memcpy_dtoh_sync(host, chunk_descs.ptr).map_err(gpu_err("reading the byte array totals"))?;
        }
        let mut len = 0usize;
        for c in &chunks {
            let at = len.div_ceil(16) * 16;
            let total = usize::try_from(c.total).map_err(|_| Error::Gpu("a byte array chunk's total".into()))?;
            data_spans.push((at, total));
            len = at + total;
        }
        let buf = DevBuf::new(len.max(16))?;
        for (c, &(at, _)) in chunks.iter_mut().zip(&data_spans) {
            c.values = buf.ptr + at as u64;
        }
        // SAFETY: as above: the records are pod; `chunks` outlives the synchronize below.
        unsafe { result::memcpy_htod_async(chunk_descs.ptr, pod_bytes(&chunks), s) }.map_err(gpu_err("uploading the byte array chunks"))?;
        launcher.launch(Entry::ParquetBytesCopy, nc as u64, args(chunk_descs.ptr, count(nc)?, chunk_errors))?;
        stream.synchronize().map_err(gpu_err("copying byte array values"))?;
        read_faults(&mut faults)?;
        data = Some(buf);
    }
    drop((descs, dict_descs, chunk_descs, errors, pages, dicts, chunks));
    let chunk_faults = faults.split_off(n + nd);
    let dict_faults = faults.split_off(n);
    Ok(DecodedOnDevice { buf: Some(out), device, len: job.output_len, faults, dict_faults, chunk_faults, data, data_spans })
}

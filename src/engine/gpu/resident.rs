//! A merge round on columns that already live on the device (issue 69, stage 3; the job and
//! its invariants: `engine/resident_job.rs`): keys encoded there, merged there, payload
//! gathered there; the permutation and the gathered columns come down.
//!
//! Everything runs on the device's engine stream under its state lock, in order: the key
//! programs up (one buffer, a segment's after the previous one's) and one
//! `encode_fixed_keys` launch a non-empty segment, writing into the pool's input key slot
//! at the segment's first row; the merge's levels (`merge::run_levels`, the same plan and
//! kernels as a merge of host keys, reading that slot); the indices down; then a column at
//! a time: its segments' values copied device to device into one buffer where they are not
//! one stretch already, `gather_values` (and `gather_validity` from the segments' bitmaps
//! where any has one) into a fresh buffer, an error word read, the result down.
//!
//! Invariants, enforced here: the job is checked before anything is launched; the merge
//! must fit the device's free memory whole (no pieces: the caller merges on the CPU
//! instead); an index past the input, which the gather kernels flag, is an error and no
//! output.

// Its callers are the tests and the device path under construction (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use super::context::{gpu, gpu_err, DevBuf, Gpu, Slot, State};
use super::launch::{Args, Launcher};
use super::manifest::{Entry, Family};
use super::merge::{available_bytes, prepare, run_levels};
use super::nvrtc::ModuleSpec;
use super::plan::{device_bytes, nonempty_bounds};
use super::transfer::{download, upload_now, DownloadOrder, Output, Staging};
use super::GpuOptions;
use crate::engine::key_job::{key_words, KeyFieldArg};
use crate::engine::resident_job::{scan_levels, GatheredBytes, ResidentJob, ResidentOutput};
use crate::{Error, Result};
use cudarc::driver::result;
use std::time::Instant;

/// The blocks of a grid-stride launch of `work` threads' worth (the gather's kernels).
fn grid(work: u64, threads: u32) -> u64 {
    work.div_ceil(threads as u64).clamp(1, 1 << 16)
}

/// Runs `job` on its device (see the module doc). Call it off rayon's workers.
pub(crate) fn merge_resident(job: &ResidentJob, options: &GpuOptions) -> Result<ResidentOutput> {
    job.check()?;
    let g = gpu(job.device)?;
    g.with_state(|st| {
        let out = run(g, st, job, options);
        st.trim(); // everything is down: the device is idle
        out
    })
}

fn run(g: &Gpu, st: &mut State, job: &ResidentJob, options: &GpuOptions) -> Result<ResidentOutput> {
    let n = job.rows();
    let wide = n > u32::MAX as usize || options.force_u64_indices;
    let words = key_words(job.bits);
    let kb = if words == 0 { 4 } else { 8 * words as usize };
    let stream = g.cu_stream();
    // SAFETY: the engine stream of the device bound to this thread (`with_state`).
    let sync = |what: &'static str| unsafe { result::stream::synchronize(stream) }.map_err(gpu_err(what));

    // Keys: every segment's at its first row of one buffer.
    let t = Instant::now();
    let keys0 = st.buffer(Slot::Keys0, n * kb)?;
    let program: Vec<KeyFieldArg> = job.segments.iter().flat_map(|s| s.keys.iter().copied()).collect();
    let descs = DevBuf::new(std::mem::size_of_val(&program[..]).max(8))?;
    upload_now(stream, &program, descs.ptr)?;
    let decode = st.module(g, ModuleSpec { family: Family::Decode, key_bytes: 8, index_bits: 32 })?;
    let launcher = Launcher { module: &decode, stream };
    let starts = job.segment_starts();
    let mut field = 0usize;
    for (s, &start) in job.segments.iter().zip(&starts) {
        let nf = s.keys.len();
        if s.rows > 0 {
            let args = Args::EncodeKeys {
                fields: descs.ptr + (field * std::mem::size_of::<KeyFieldArg>()) as u64,
                nfields: nf as u32,
                rows: s.rows as u64,
                out: keys0 + (start * kb) as u64,
                words,
            };
            launcher.launch(Entry::EncodeFixedKeys, (s.rows as u64).div_ceil(decode.policy.threads as u64), args)?;
        }
        field += nf;
    }
    sync("encoding keys")?;
    drop(descs);
    let keys = t.elapsed();

    // The merge: its indices stay on the device for the gather.
    let t = Instant::now();
    let ib = if wide { 8 } else { 4 };
    let bounds = nonempty_bounds(n, &job.run_offsets())?;
    let identity;
    let idx = if bounds.len() <= 2 {
        // Zero or one non-empty run: the order is the rows' own.
        identity = DevBuf::new((n * ib).max(16))?;
        if wide {
            upload_now(stream, &(0..n as u64).collect::<Vec<u64>>(), identity.ptr)?;
        } else {
            upload_now(stream, &(0..n as u32).collect::<Vec<u32>>(), identity.ptr)?;
        }
        identity.ptr
    } else {
        let planned = prepare(g, st, kb, bounds, options.kernel, wide)?;
        let need = device_bytes(kb, ib, n, &planned.levels);
        let have = available_bytes(st, options)?;
        if need > have {
            return Err(Error::Gpu(format!(
                "a device-resident merge of {n} keys needs {need} bytes of device memory, {have} are available; merge on the CPU"
            )));
        }
        run_levels(g, st, &planned, n, keys0, 0, &[], None)?.idx
    };
    // Down as a merge's indices come down (`merge::merge_into`): straight into the output
    // vector through the staging buffers, once the stream's levels are done.
    let dl = g.ctx.new_stream().map_err(gpu_err("creating a stream"))?;
    let mut out = Output::with_capacity(n, ib);
    let order = DownloadOrder { main: stream, chunk_events: &[], chunk_ends: &[] };
    download(dl.cu_stream(), st.staging()?, idx, out.bytes(), ib, &order)?;
    // SAFETY: download returned Ok, so it wrote every byte of `out.bytes()`.
    let indices = unsafe { out.assume_init() };
    let merge = t.elapsed();

    // The gather, a column at a time.
    let t = Instant::now();
    let gather_module = st.module(g, ModuleSpec { family: Family::Gather, key_bytes: 8, index_bits: 32 })?;
    let lane = Lane {
        launcher: Launcher { module: &gather_module, stream },
        threads: gather_module.policy.threads,
        idx,
        n,
        wide,
        error: DevBuf::new(16)?,
        dl,
    };
    let mut columns = Vec::with_capacity(job.widths.len());
    for (c, &w) in job.widths.iter().enumerate() {
        lane.clear_error()?;
        let concat;
        let src = match job.contiguous(c) {
            Some(at) => at,
            None => {
                concat = DevBuf::new((n * w).max(16))?;
                for (s, &start) in job.segments.iter().zip(&starts) {
                    if s.rows > 0 {
                        // SAFETY: the segment's values are `rows * w` bytes on this device
                        // (the job's promise), copied into their place in `concat`.
                        unsafe { result::memcpy_dtod_async(concat.ptr + (start * w) as u64, s.columns[c].values, s.rows * w, stream) }
                            .map_err(gpu_err("gathering a column's segments"))?;
                    }
                }
                concat.ptr
            }
        };
        let values = DevBuf::new((n * w).max(16))?;
        let per_thread = if w <= 2 { 4 } else { 1 };
        let args =
            Args::GatherValues { src, dst: values.ptr, idx, n: n as u64, total: n as u64, width: w as u32, error: lane.error.ptr, wide };
        let entry = if wide { Entry::GatherValues64 } else { Entry::GatherValues32 };
        lane.launcher.launch(entry, grid((n as u64).div_ceil(per_thread), lane.threads), args)?;
        let bits = lane.validity(job, job.validity_table(c))?;
        lane.finish("gathering a column")?;
        let staging = st.staging()?;
        let values = lane.down(staging, &values, n * w)?;
        columns.push((values, bits.map(|b| lane.down(staging, &b.out, n.div_ceil(8))).transpose()?));
    }
    let mut bytes = Vec::with_capacity(job.offset_widths.len());
    for (c, &ow) in job.offset_widths.iter().enumerate() {
        lane.clear_error()?;
        bytes.push(lane.gather_bytes(job, c, ow, &starts, st.staging()?)?);
    }
    let gather = t.elapsed();
    Ok(ResidentOutput { indices, columns, bytes, keys, merge, gather })
}

/// A gathered validity bitmap on the device, with the run table its kernel read.
struct Bits {
    out: DevBuf,
    _table: DevBuf,
}

/// The gather's launches on the engine stream: the merge's indices, the error word.
struct Lane<'a> {
    launcher: Launcher<'a>,
    threads: u32,
    idx: u64,
    n: usize,
    wide: bool,
    error: DevBuf,
    /// The downloads' stream (`transfer::download` drains the staging buffers on it).
    dl: std::sync::Arc<cudarc::driver::CudaStream>,
}

impl Lane<'_> {
    /// `len` bytes of `buf` into a fresh vector, once the engine stream's work is done,
    /// through the staging buffers (the merge's download path: pinned buffers, the host
    /// draining one while the other fills), not a copy into pageable memory.
    fn down(&self, staging: &mut Staging, buf: &DevBuf, len: usize) -> Result<Vec<u8>> {
        let mut host: Vec<u8> = Vec::with_capacity(len);
        if len > 0 {
            let order = DownloadOrder { main: self.launcher.stream, chunk_events: &[], chunk_ends: &[] };
            download(self.dl.cu_stream(), staging, buf.ptr, &mut host.spare_capacity_mut()[..len], 1, &order)?;
            // SAFETY: download returned Ok, so it wrote every one of the first `len` bytes.
            unsafe { host.set_len(len) };
        }
        Ok(host)
    }

    fn clear_error(&self) -> Result<()> {
        // SAFETY: the error word is the first 4 bytes of `error`, on this stream.
        unsafe { result::memset_d8_async(self.error.ptr, 0, 4, self.launcher.stream) }.map_err(gpu_err("clearing the error word"))
    }

    fn sync(&self, what: &'static str) -> Result<()> {
        // SAFETY: the engine stream of the device bound to this thread.
        unsafe { result::stream::synchronize(self.launcher.stream) }.map_err(gpu_err(what))
    }

    /// Waits for the column's kernels and reads the error word: an index past the input is
    /// an error, never an output.
    fn finish(&self, what: &'static str) -> Result<()> {
        self.sync(what)?;
        let mut word = [0u32; 1];
        // SAFETY: 4 bytes of the error word, written by the finished stream.
        unsafe { result::memcpy_dtoh_sync(&mut word, self.error.ptr) }.map_err(gpu_err("reading the error word"))?;
        if word[0] != 0 {
            return Err(Error::Internal(format!("the device gather of a resident round read past its input (error word {})", word[0])));
        }
        Ok(())
    }

    /// Queues the validity gather of a column whose segments' bitmaps `table` describes
    /// (`ResidentJob::validity_table`); `None` where no segment has one.
    fn validity(&self, job: &ResidentJob, table: Option<(u64, Vec<u64>)>) -> Result<Option<Bits>> {
        let Some((base, table)) = table else { return Ok(None) };
        let n = self.n;
        let table_buf = DevBuf::new(table.len() * 8)?;
        upload_now(self.launcher.stream, &table, table_buf.ptr)?;
        let words32 = n.div_ceil(32);
        let out = DevBuf::new((words32 * 4).max(16))?;
        let args = Args::GatherValidity {
            bits: base,
            runs: table_buf.ptr,
            nruns: job.segments.len() as u32,
            out: out.ptr,
            idx: self.idx,
            n: n as u64,
            total: n as u64,
            error: self.error.ptr,
            wide: self.wide,
        };
        let entry = if self.wide { Entry::GatherValidity64 } else { Entry::GatherValidity32 };
        self.launcher.launch(entry, grid(words32.div_ceil(32) as u64 * 32, self.threads), args)?;
        Ok(Some(Bits { out, _table: table_buf }))
    }

    /// Byte array column `c` gathered: lengths, their scan into output starts (level by
    /// level, `resident_job::scan_levels`), the copy; then offsets, values and bitmap down.
    fn gather_bytes(
        &self,
        job: &ResidentJob,
        c: usize,
        offset_width: u32,
        starts: &[usize],
        staging: &mut Staging,
    ) -> Result<GatheredBytes> {
        let (n, stream, wide) = (self.n, self.launcher.stream, self.wide);
        let segs = job.byte_segments(c);
        let segs_buf = DevBuf::new(std::mem::size_of_val(&segs[..]).max(8))?;
        upload_now(stream, &segs, segs_buf.ptr)?;
        let starts64: Vec<u64> = starts.iter().map(|&s| s as u64).collect();
        let starts_buf = DevBuf::new(starts64.len() * 8)?;
        upload_now(stream, &starts64, starts_buf.ptr)?;
        let nsegs = job.segments.len() as u32;
        // Lengths, scanned in place into each output row's first byte.
        let levels = scan_levels(n, self.threads as usize * SCAN_ITEMS);
        let bufs: Vec<DevBuf> = levels.iter().map(|&k| DevBuf::new((k * 8).max(16))).collect::<Result<_>>()?;
        let total_buf = DevBuf::new(16)?;
        let args = Args::GatherByteLengths {
            segs: segs_buf.ptr,
            starts: starts_buf.ptr,
            nsegs,
            idx: self.idx,
            n: n as u64,
            total: n as u64,
            lens: bufs[0].ptr,
            error: self.error.ptr,
            wide,
        };
        let entry = if wide { Entry::GatherByteLengths64 } else { Entry::GatherByteLengths32 };
        self.launcher.launch(entry, grid(n as u64, self.threads), args)?;
        let tile = self.threads as usize * SCAN_ITEMS;
        for (l, &k) in levels.iter().enumerate() {
            // Each level's tile totals go to the next level's buffer; the last level's one
            // tile total is the values' size.
            let sums = bufs.get(l + 1).map_or(total_buf.ptr, |b| b.ptr);
            self.launcher.launch(
                Entry::ScanBlocks,
                k.div_ceil(tile).max(1) as u64,
                Args::ScanBlocks { data: bufs[l].ptr, n: k as u64, sums },
            )?;
        }
        for l in (0..levels.len().saturating_sub(1)).rev() {
            let k = levels[l];
            self.launcher.launch(
                Entry::ScanAdd,
                k.div_ceil(tile) as u64,
                Args::ScanAdd { data: bufs[l].ptr, n: k as u64, sums: bufs[l + 1].ptr },
            )?;
        }
        self.sync("scanning a byte array column's lengths")?;
        let mut total = [0u64; 1];
        // SAFETY: the first 8 bytes of `total_buf`, written by the finished stream.
        unsafe { result::memcpy_dtoh_sync(&mut total, total_buf.ptr) }.map_err(gpu_err("reading a byte array column's size"))?;
        let total = if n == 0 { 0 } else { total[0] };
        if offset_width == 4 && total > i32::MAX as u64 {
            return Err(Error::Gpu(format!(
                "a byte array column of {total} bytes does not fit 32-bit offsets in one array; merge on the CPU"
            )));
        }
        let values = DevBuf::new((total as usize).max(16))?;
        let offsets = DevBuf::new(((n + 1) * offset_width as usize).max(16))?;
        let args = Args::GatherByteCopy {
            segs: segs_buf.ptr,
            starts: starts_buf.ptr,
            nsegs,
            idx: self.idx,
            n: n as u64,
            total: n as u64,
            out_starts: bufs[0].ptr,
            grand_total: total,
            values: values.ptr,
            offsets: offsets.ptr,
            offset_width,
            wide,
        };
        let entry = if wide { Entry::GatherByteCopy64 } else { Entry::GatherByteCopy32 };
        // A warp a row; at least one block, which writes the last offset.
        self.launcher.launch(entry, grid(n as u64 * 32, self.threads), args)?;
        let bits = self.validity(job, job.bytes_validity_table(c))?;
        self.finish("gathering a byte array column")?;
        Ok(GatheredBytes {
            offsets: self.down(staging, &offsets, (n + 1) * offset_width as usize)?,
            values: self.down(staging, &values, total as usize)?,
            validity: bits.map(|b| self.down(staging, &b.out, n.div_ceil(8))).transpose()?,
        })
    }
}

/// Items a thread of `scan_blocks_u64` scans (cuda/gather_bytes.cu's SCAN_ITEMS).
const SCAN_ITEMS: usize = 8;

//! The merge on the device: level planning (grid-level tiles per group of runs), kernel
//! launches, and the host transfers around them.
//!
//! Device memory per call (pooled, reused across calls): the input keys (never written,
//! so a device-resident input can be merged again), two intermediate key buffers when the
//! tree has more than one level (one when it has two), one or two index buffers, the k-way
//! splits and a small metadata buffer. The last level writes indices only.

use super::build::ModuleSpec;
use super::context::{gpu_err, Gpu, Module, Slot, State};
use super::tuning::{tuning, KWAY_COARSE, STAGE_BYTES, THREADS};
use super::Kernel;
use crate::{Error, Result};
use cudarc::driver::{result, sys, DeviceRepr};
use rayon::prelude::*;
use std::ffi::c_void;

/// The kernels' `Level` (cuda/common.cuh), field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct LevelArg {
    in_keys: u64,
    in_idx: u64,
    out_keys: u64,
    out_idx: u64,
    bounds: u64,
    tile_start: u64,
    block_offset: u64,
    nruns: u32,
    group: u32,
    ngroups: u32,
    _pad: u32,
}
unsafe impl DeviceRepr for LevelArg {}

/// One level of the merge: runs `bounds` merged in groups of `group`, each group cut into
/// tiles of `tile` outputs (one block each).
#[derive(Debug, Clone)]
pub(crate) struct LevelPlan {
    pub bounds: Vec<u64>,
    pub group: u32,
    pub tile: u64,
    pub tile_start: Vec<u64>,
}

impl LevelPlan {
    pub fn total_tiles(&self) -> u64 {
        *self.tile_start.last().unwrap()
    }
    fn ngroups(&self) -> usize {
        self.tile_start.len() - 1
    }
    /// Output position of the first output of block `b` (tile order is output order).
    fn block_output(&self, b: u64) -> u64 {
        let n = *self.bounds.last().unwrap();
        if b >= self.total_tiles() {
            return n;
        }
        let g = self.tile_start.partition_point(|&t| t <= b) - 1;
        let nruns = self.bounds.len() - 1;
        let start = self.bounds[g * self.group as usize];
        let end = self.bounds[((g + 1) * self.group as usize).min(nruns)];
        (start + (b - self.tile_start[g]) * self.tile).min(end)
    }
}

/// Tile size (outputs per block) and group size of `kernel` for keys of `key_bytes`.
fn geometry(kernel: Kernel, key_bytes: usize, nruns: usize) -> (u64, u32) {
    let t = tuning(key_bytes);
    let th = THREADS as u64;
    match kernel {
        Kernel::Basic => (th * t.ipt_basic as u64, 2),
        Kernel::Tiled => (th * t.ipt_tiled as u64, 2),
        Kernel::Circular => (th * t.ipt_circ as u64 * t.circ_tiles as u64, 2),
        // Auto is resolved before planning; were it not, it plans as the k-way kernel.
        Kernel::KWay | Kernel::Auto => (th * t.ipt_kway as u64, nruns.clamp(2, 64) as u32),
    }
}

/// The levels that merge the non-empty runs `bounds` (at least two) with `kernel`.
pub(crate) fn plan(kernel: Kernel, key_bytes: usize, mut bounds: Vec<u64>) -> Vec<LevelPlan> {
    let mut levels = Vec::new();
    while bounds.len() > 2 {
        let nruns = bounds.len() - 1;
        let (tile, group) = geometry(kernel, key_bytes, nruns);
        let g = group as usize;
        let ngroups = nruns.div_ceil(g);
        let mut tile_start = vec![0u64];
        let mut next = Vec::with_capacity(ngroups + 1);
        for gi in 0..ngroups {
            let (s, e) = (bounds[gi * g], bounds[((gi + 1) * g).min(nruns)]);
            next.push(s);
            tile_start.push(tile_start[gi] + (e - s).div_ceil(tile));
        }
        next.push(*bounds.last().unwrap());
        levels.push(LevelPlan { bounds, group, tile, tile_start });
        bounds = next;
    }
    levels
}

/// Device bytes a merge of `n` keys over `levels` needs.
pub(crate) fn device_bytes(spec: ModuleSpec, n: usize, levels: &[LevelPlan]) -> usize {
    let (kb, ib) = (spec.key_bytes, spec.index_bytes());
    let inter_keys = levels.len().saturating_sub(1).min(2);
    let idx = if levels.len() > 1 { 2 } else { 1 };
    let splits: usize = levels.iter().map(|l| (l.total_tiles() as usize + l.ngroups()) * l.group as usize * 8).max().unwrap_or(0);
    n * kb * (1 + inter_keys) + n * ib * idx + splits + (1 << 20)
}

unsafe fn launch(f: sys::CUfunction, grid: u64, shmem: u32, stream: sys::CUstream, args: &mut [*mut c_void]) -> Result<()> {
    if grid == 0 {
        return Ok(());
    }
    if grid > i32::MAX as u64 {
        return Err(Error::Gpu(format!("grid of {grid} blocks is too large")));
    }
    result::launch_kernel(f, (grid as u32, 1, 1), (THREADS, 1, 1), shmem, stream, args).map_err(gpu_err("launching a kernel"))
}

/// The entry point that runs a level with `kernel`; the tiled kernel has one per place in
/// the tree (first and/or last level), each with only the registers that place needs.
pub(crate) fn kernel_name(kernel: Kernel, first: bool, last: bool) -> &'static str {
    match (kernel, first, last) {
        (Kernel::Basic, ..) => "merge_basic",
        (Kernel::Tiled, true, true) => "merge_tiled_only",
        (Kernel::Tiled, true, false) => "merge_tiled_first",
        (Kernel::Tiled, false, false) => "merge_tiled_inner",
        (Kernel::Tiled, false, true) => "merge_tiled_last",
        (Kernel::Circular, ..) => "merge_circular",
        (Kernel::KWay | Kernel::Auto, ..) => "merge_kway",
    }
}

/// Dynamic shared memory of `kernel`'s blocks: padded tiles (TILE + TILE / IPT slots) of
/// keys and indices, two of each for the k-way kernel's ping-pong (cuda/merge_kway.cu), one
/// for the tiled kernel; the others use static shared memory.
pub(crate) fn dynamic_shmem(kernel: Kernel, key_bytes: usize, index_bytes: usize) -> u32 {
    let t = tuning(key_bytes);
    let slot = (key_bytes + index_bytes) as u32;
    match kernel {
        Kernel::KWay | Kernel::Auto => 2 * (t.ipt_kway * THREADS + THREADS) * slot,
        Kernel::Tiled => (t.ipt_tiled * THREADS + THREADS) * slot,
        Kernel::Basic | Kernel::Circular => 0,
    }
}

/// Runs every level on the device: input keys at `keys0` (read only), `n` keys. Returns the
/// device pointer of the final indices. When `chunk_events` is given, the last level is
/// launched in that many chunks of blocks, each followed by its event, and the output
/// position each chunk completes is returned alongside (for overlapping the download).
pub(crate) fn run_levels(
    gpu: &Gpu,
    st: &mut State,
    module: &Module,
    spec: ModuleSpec,
    kernel: Kernel,
    n: usize,
    levels: &[LevelPlan],
    keys0: sys::CUdeviceptr,
    chunk_events: &[sys::CUevent],
) -> Result<(sys::CUdeviceptr, Vec<u64>)> {
    let stream = gpu.cu_stream();
    let (kb, ib) = (spec.key_bytes, spec.index_bytes());
    // Metadata of every level, uploaded at once: bounds then tile_start per level.
    // For the k-way partition's coarse pass, per group the first coarse boundary
    // (cstart, like tile_start but counting ceil(tiles / KWAY_COARSE)).
    let mut meta: Vec<u64> = Vec::new();
    let mut offs = Vec::new();
    for l in levels {
        offs.push((meta.len(), meta.len() + l.bounds.len(), meta.len() + l.bounds.len() + l.tile_start.len()));
        meta.extend_from_slice(&l.bounds);
        meta.extend_from_slice(&l.tile_start);
        let mut c = 0u64;
        meta.push(0);
        for w in l.tile_start.windows(2) {
            c += (w[1] - w[0]).div_ceil(KWAY_COARSE as u64);
            meta.push(c);
        }
    }
    let meta_ptr = st.buffer(Slot::Meta, meta.len() * 8)?;
    // On the merge stream, then waited for: a plain synchronous copy runs on the legacy
    // stream, which the (non-blocking) merge stream does not wait for, and from pageable
    // memory it returns before its DMA lands. With ~2000 runs (11 levels, ~260 KB of
    // metadata) the kernels read bounds and tile tables before they arrived: illegal
    // addresses and instructions on the H200, never under compute-sanitizer's serialization.
    unsafe {
        result::memcpy_htod_async(meta_ptr, &meta, stream).map_err(gpu_err("uploading level metadata"))?;
        result::stream::synchronize(stream).map_err(gpu_err("uploading level metadata"))?;
    }
    let keys1 = if levels.len() > 1 { st.buffer(Slot::Keys1, n * kb)? } else { 0 };
    let keys2 = if levels.len() > 2 { st_keys2(st, n * kb)? } else { 0 };
    let idx0 = st.buffer(Slot::Idx0, n * ib)?;
    let idx1 = if levels.len() > 1 { st.buffer(Slot::Idx1, n * ib)? } else { 0 };
    let shmem = dynamic_shmem(kernel, kb, ib);
    // Kernels that read the grid-level partition (`splits`) instead of searching themselves.
    let partitioned = matches!(kernel, Kernel::KWay | Kernel::Auto | Kernel::Tiled);
    let (mut in_keys, mut in_idx) = (keys0, 0u64);
    let mut chunk_ends = Vec::new();
    for (li, l) in levels.iter().enumerate() {
        let last = li + 1 == levels.len();
        let out_keys = if last { 0 } else if li % 2 == 0 { keys1 } else { keys2 };
        let out_idx = if li % 2 == 0 { idx0 } else { idx1 };
        let name = kernel_name(kernel, li == 0, last);
        let f = module.functions[name].cu_function();
        if shmem > 0 {
            module.functions[name]
                .set_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shmem as i32)
                .map_err(gpu_err("raising the shared-memory limit"))?;
        }
        let mut arg = LevelArg {
            in_keys,
            in_idx,
            out_keys,
            out_idx,
            bounds: meta_ptr + offs[li].0 as u64 * 8,
            tile_start: meta_ptr + offs[li].1 as u64 * 8,
            block_offset: 0,
            nruns: (l.bounds.len() - 1) as u32,
            group: l.group,
            ngroups: l.ngroups() as u32,
            _pad: 0,
        };
        let tiles = l.total_tiles();
        let mut splits = 0u64;
        if partitioned {
            // Grid-level partition: the split of every tile boundary.
            let mut nb = tiles + l.ngroups() as u64;
            splits = st.buffer(Slot::Splits, nb as usize * l.group as usize * 8)?;
            // Groups of two runs: one thread per boundary with the 2-way co-rank; more runs:
            // one warp per boundary with the k-way co-rank.
            let a = &mut arg as *mut LevelArg as *mut c_void;
            if l.group == 2 {
                let pf = module.functions["partition_2way"].cu_function();
                let mut tile = l.tile;
                let mut args = [a, &mut splits as *mut u64 as *mut c_void, &mut nb as *mut u64 as *mut c_void, &mut tile as *mut u64 as *mut c_void];
                unsafe { launch(pf, nb.div_ceil(THREADS as u64), 0, stream, &mut args)? };
            } else {
                // Coarse pass (every KWAY_COARSE tiles, whole runs), then the fine pass.
                let mut cstart = meta_ptr + offs[li].2 as u64 * 8;
                let cs = &meta[offs[li].2..offs[li].2 + l.ngroups() + 1];
                let mut ncoarse = cs[l.ngroups()] + l.ngroups() as u64;
                let mut coarse = st.buffer(Slot::Coarse, ncoarse as usize * l.group as usize * 8)?;
                let cf = module.functions["partition_kway_coarse"].cu_function();
                let mut args = [a, &mut coarse as *mut u64 as *mut c_void, &mut ncoarse as *mut u64 as *mut c_void, &mut cstart as *mut u64 as *mut c_void];
                unsafe { launch(cf, (ncoarse * 32).div_ceil(THREADS as u64), 0, stream, &mut args)? };
                let pf = module.functions["partition_kway"].cu_function();
                let mut args = [
                    a,
                    &mut splits as *mut u64 as *mut c_void,
                    &mut nb as *mut u64 as *mut c_void,
                    &mut coarse as *mut u64 as *mut c_void,
                    &mut cstart as *mut u64 as *mut c_void,
                ];
                unsafe { launch(pf, (nb * 32).div_ceil(THREADS as u64), 0, stream, &mut args)? };
            }
        }
        // Block-level merge, in chunks of blocks on the last level when asked.
        let chunks = if last && !chunk_events.is_empty() { chunk_events.len() as u64 } else { 1 };
        for c in 0..chunks {
            let (b0, b1) = (tiles * c / chunks, tiles * (c + 1) / chunks);
            arg.block_offset = b0;
            let mut args: Vec<*mut c_void> = vec![&mut arg as *mut LevelArg as *mut c_void];
            if partitioned {
                args.push(&mut splits as *mut u64 as *mut c_void);
            }
            unsafe { launch(f, b1 - b0, shmem, stream, &mut args)? };
            if last && !chunk_events.is_empty() {
                unsafe { result::event::record(chunk_events[c as usize], stream) }.map_err(gpu_err("recording an event"))?;
                chunk_ends.push(l.block_output(b1));
            }
        }
        in_keys = out_keys;
        in_idx = out_idx;
    }
    Ok((in_idx, chunk_ends))
}

/// The second intermediate key buffer (a tree of three or more levels ping-pongs between
/// two). It lives in its own pool slot.
fn st_keys2(st: &mut State, bytes: usize) -> Result<sys::CUdeviceptr> {
    st.buffer(Slot::Keys0Alt, bytes)
}

/// Copies `src` (host, any memory) to the device at `dst` through the two pinned staging
/// buffers: while one piece is in flight the host fills the other.
pub(crate) fn upload(gpu: &Gpu, st: &mut State, src: &[u8], dst: sys::CUdeviceptr) -> Result<()> {
    st.staging()?;
    let stream = gpu.cu_stream();
    for (p, piece) in src.chunks(STAGE_BYTES).enumerate() {
        let s = p % 2;
        // The DMA that last read this staging buffer must be done before it is refilled.
        unsafe { result::event::synchronize(st.events[s]) }.map_err(gpu_err("waiting for an upload"))?;
        let stage = unsafe { std::slice::from_raw_parts_mut(st.stage[s].ptr, piece.len()) };
        par_copy(piece, stage);
        unsafe {
            result::memcpy_htod_async(dst + (p * STAGE_BYTES) as u64, &*stage, stream).map_err(gpu_err("copying to the device"))?;
            result::event::record(st.events[s], stream).map_err(gpu_err("recording an event"))?;
        }
    }
    Ok(())
}

/// Copies `dst.len()` bytes from the device at `src` into `dst` through the pinned
/// staging buffers, on `dl_stream`. Piece p may start once the event of the chunk that
/// completes its last byte (`chunk_ends`, in elements of `elem` bytes) has fired; with no
/// chunks it waits for the main stream. The host drains one buffer while the other fills.
pub(crate) fn download(
    gpu: &Gpu,
    st: &mut State,
    src: sys::CUdeviceptr,
    dst: &mut [u8],
    elem: usize,
    dl_stream: sys::CUstream,
    chunk_events: &[sys::CUevent],
    chunk_ends: &[u64],
) -> Result<()> {
    st.staging()?;
    let total = dst.len();
    let pieces: Vec<(usize, usize)> = (0..total).step_by(STAGE_BYTES).map(|s| (s, (s + STAGE_BYTES).min(total))).collect();
    if chunk_events.is_empty() {
        unsafe { result::stream::synchronize(gpu.cu_stream()) }.map_err(gpu_err("running the merge"))?;
    }
    let mut pending: Option<(usize, usize, usize)> = None; // (stage, start, end) to drain
    for (p, &(s0, s1)) in pieces.iter().enumerate() {
        let s = p % 2;
        if !chunk_events.is_empty() {
            let last_elem = ((s1 - 1) / elem) as u64;
            let c = chunk_ends.partition_point(|&e| e <= last_elem).min(chunk_events.len() - 1);
            unsafe { result::stream::wait_event(dl_stream, chunk_events[c], sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
                .map_err(gpu_err("ordering the download"))?;
        }
        unsafe {
            let stage = std::slice::from_raw_parts_mut(st.stage[s].ptr, s1 - s0);
            result::memcpy_dtoh_async(stage, src + s0 as u64, dl_stream).map_err(gpu_err("copying from the device"))?;
            result::event::record(st.events[s], dl_stream).map_err(gpu_err("recording an event"))?;
        }
        if let Some((ps, a, b)) = pending.take() {
            drain(st, ps, &mut dst[a..b])?;
        }
        pending = Some((s, s0, s1));
    }
    if let Some((ps, a, b)) = pending.take() {
        drain(st, ps, &mut dst[a..b])?;
    }
    Ok(())
}

fn drain(st: &State, s: usize, dst: &mut [u8]) -> Result<()> {
    unsafe { result::event::synchronize(st.events[s]) }.map_err(gpu_err("copying from the device"))?;
    let stage = unsafe { std::slice::from_raw_parts(st.stage[s].ptr, dst.len()) };
    par_copy(stage, dst);
    Ok(())
}

/// Host memcpy on all cores (one thread copies about 10 GB/s, less than PCIe).
fn par_copy(src: &[u8], dst: &mut [u8]) {
    const C: usize = 1 << 20;
    dst.par_chunks_mut(C).zip(src.par_chunks(C)).for_each(|(d, s)| d.copy_from_slice(s));
}

//! One merge on the device: plan it, upload the keys, run the levels (a grid-level
//! partition where the kernel reads one, then the block-level merge), download the
//! indices.
//!
//! A part of a merge split across devices ([`super::multi`]) goes the same way, with its
//! indices made global on the device after each chunk of the last level (cuda/rebase.cu).
//!
//! Device memory per call (pooled, reused across calls): the input keys (never written,
//! so a device-resident input can be merged again), two intermediate key buffers when the
//! tree has more than two levels (one when it has two), one or two index buffers, the
//! partition's splits and a small metadata buffer. The last level writes indices only.

use super::context::{gpu, gpu_err, Gpu, Slot, State};
use super::launch::{Args, DevPtr, Launcher, LevelArg};
use super::manifest::{merge_entry, Entry};
use super::nvrtc::{Module, ModuleSpec};
use super::plan::{
    blocks_for_threads, blocks_for_warps, chunk_blocks, device_bytes, metadata, nonempty_bounds, plan, resolve, KernelKind, LevelPlan,
    METADATA_BYTES,
};
use super::transfer::{download, prefault, upload_now, upload_slices, DownloadOrder, Output};
use super::tuning::{DOWNLOAD_CHUNKS, REBASE_MAX_BLOCKS};
use super::GpuOptions;
use crate::keys::KeyColumn;
use crate::options::Kernel;
use crate::permutation::Indices;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::mem::MaybeUninit;
use std::sync::Arc;

/// The raw bytes of the keys (what goes up).
pub(crate) fn key_bytes(keys: &KeyColumn) -> &[u8] {
    fn bytes<T>(v: &[T]) -> &[u8] {
        // SAFETY: keys are plain integers or arrays of them (no padding, every byte
        // initialized); the view covers exactly `v`, borrowed for the result's lifetime.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    match keys {
        KeyColumn::U32(v) => bytes(v),
        KeyColumn::U64(v) => bytes(v),
        KeyColumn::U64x2(v) => bytes(v),
        KeyColumn::U64x3(v) => bytes(v),
        KeyColumn::U64x4(v) => bytes(v),
    }
}

/// A merge planned on a device: the module that runs it and its levels.
pub(crate) struct Planned {
    pub module: Arc<Module>,
    pub kind: KernelKind,
    pub levels: Vec<LevelPlan>,
    /// The last level writes the merged keys too (a piece of a split sort, whose sorted keys
    /// the merge of the pieces reads); otherwise it writes indices only.
    pub keep_keys: bool,
    /// The first level's runs are a sort's sorted tiles: the levels whose tiles cannot pack
    /// such keys merge on keys and indices (`merge_entry`, `LevelPlan::random_tiles_pack`).
    pub sort_tiles: bool,
}

/// What [`run_levels`] queued: where the final indices (and with `keep_keys` the merged
/// keys) will be, and the output position each chunk event completes.
pub(crate) struct Queued {
    pub idx: DevPtr,
    pub keys: DevPtr,
    pub chunk_ends: Vec<u64>,
}

/// Plans the merge of the non-empty runs `bounds` (at least two) of keys of `key_bytes`
/// bytes with `kernel`, building the module it needs. The plan takes its tile sizes from
/// the module's policy, so the two always agree.
pub(crate) fn prepare(
    gpu: &Gpu,
    st: &mut State,
    key_bytes: usize,
    bounds: Vec<u64>,
    kernel: Kernel,
    wide_indices: bool,
) -> Result<Planned> {
    let kind = resolve(kernel, bounds.len() - 1);
    let spec = ModuleSpec { family: kind.family(), key_bytes, index_bits: if wide_indices { 64 } else { 32 } };
    let module = st.module(gpu, spec)?;
    let levels = plan(kind, &module.policy, bounds);
    Ok(Planned { module, kind, levels, keep_keys: false, sort_tiles: false })
}

/// Stable merge on the GPU (see [`super::merge_gpu`]): on one device, or split across
/// several ([`super::multi`]).
pub(crate) fn merge(keys: &KeyColumn, run_offsets: &[usize], options: &GpuOptions) -> Result<Indices> {
    let n = keys.len();
    let wide = n > u32::MAX as usize || options.force_u64_indices;
    let mut out = Output::with_capacity(n, if wide { 8 } else { 4 });
    merge_into(keys, run_offsets, options, out.bytes(), wide)?;
    // SAFETY: merge_into returned Ok, so it wrote every byte of `out.bytes()`.
    Ok(unsafe { out.assume_init() })
}

/// The merge's indices (u64 where `wide`, else u32) into `dst`, the bytes of `keys.len()`
/// of them: written whole when this returns Ok.
pub(crate) fn merge_into(
    keys: &KeyColumn,
    run_offsets: &[usize],
    options: &GpuOptions,
    dst: &mut [MaybeUninit<u8>],
    wide: bool,
) -> Result<()> {
    let n = keys.len();
    let bounds = nonempty_bounds(n, run_offsets)?;
    let devices = super::multi::resolve_devices(options.devices)?;
    if devices.len() > 1 {
        return super::multi::merge_split(keys, run_offsets, &devices, options, dst, wide);
    }
    let gpu = gpu(devices[0])?;
    if bounds.len() <= 2 {
        super::multi::write_consecutive(dst, 0, wide); // zero or one non-empty run: already in order
        return Ok(());
    }
    let part = Part { srcs: &[key_bytes(keys)], key_bytes: keys.key_bytes(), n, bounds, wide_indices: wide, rebase: None };
    // One plan: the merge runs whole where it fits, else in the pieces the plan says.
    let pieces = gpu.with_state(|st| {
        let planned = prepare(gpu, st, part.key_bytes, part.bounds.clone(), options.kernel, part.wide_indices)?;
        let pieces = pieces_to_fit(st, &planned, &part, options)?;
        if pieces == 1 {
            merge_planned(gpu, st, &planned, &part, dst, options)?;
            st.trim(); // the indices are down: the device is idle
        }
        Ok(pieces)
    })?;
    match pieces {
        1 => Ok(()),
        pieces => super::multi::merge_in_pieces(keys, run_offsets, devices[0], pieces, options, dst, wide),
    }
}

/// Most pieces [`pieces_to_fit`] cuts a merge into: a device that needs more is too small
/// for the merge, which is then refused (the caller merges on the CPU).
const MAX_PIECES: usize = 1024;

/// Into how many output ranges the merge of `part` is cut so that each fits the device
/// memory it may use: 1 when the whole merge fits. Past the fixed metadata room
/// ([`METADATA_BYTES`]) a merge's device bytes grow linearly with its keys, so that part
/// over what is left of `have` pieces would each fit; an eighth more leaves room for the
/// splits and the uneven cuts of the levels.
fn pieces_to_fit(st: &State, planned: &Planned, part: &Part, options: &GpuOptions) -> Result<usize> {
    let need = device_bytes(part.key_bytes, planned.module.spec.index_bytes(), part.n, &planned.levels);
    let have = available_bytes(st, options)?;
    if need <= have {
        return Ok(1);
    }
    let grows = need - METADATA_BYTES;
    let pieces = (grows + grows / 8).div_ceil(have.saturating_sub(METADATA_BYTES).max(1));
    if pieces > MAX_PIECES.min(part.n) {
        return Err(Error::Gpu(format!(
            "the merge of {} keys needs {need} bytes of device memory, {have} are available (more than {MAX_PIECES} pieces); \
             merge on the CPU",
            part.n
        )));
    }
    log::info!("corank: the merge of {} keys needs {need} bytes of device memory, {have} are available: {pieces} pieces", part.n);
    Ok(pieces)
}

/// Device bytes a merge may use now: what is free plus the pool's own buffers (reused),
/// within [`GpuOptions::device_memory_limit`].
pub(crate) fn available_bytes(st: &State, options: &GpuOptions) -> Result<usize> {
    let (free, _) = result::mem_get_info().map_err(gpu_err("reading free device memory"))?;
    let have = free + st.pooled_bytes();
    Ok(options.device_memory_limit.map_or(have, |limit| have.min(limit)))
}

/// What one device merges: the keys of its runs (the concatenation of `srcs`, `n` keys), the
/// non-empty runs' bounds in that concatenation (at least two runs), and for a part of a
/// split merge the table that makes its indices global.
pub(crate) struct Part<'a> {
    pub srcs: &'a [&'a [u8]],
    pub key_bytes: usize,
    pub n: usize,
    pub bounds: Vec<u64>,
    /// u64 indices (the whole merge's width: its total is past u32, or they were asked for).
    pub wide_indices: bool,
    /// For each non-empty run, the global index of its first row minus its local start
    /// (cuda/rebase.cu); `None` when the local positions are the global indices.
    pub rebase: Option<Vec<u64>>,
}

/// Merges `part` on `gpu` into `dst` (the bytes of `part.n` indices of the part's width).
/// On an error the device is left clean for the next call.
pub(crate) fn merge_part(gpu: &Gpu, part: &Part, dst: &mut [MaybeUninit<u8>], options: &GpuOptions) -> Result<()> {
    gpu.with_state(|st| {
        let planned = prepare(gpu, st, part.key_bytes, part.bounds.clone(), options.kernel, part.wide_indices)?;
        merge_planned(gpu, st, &planned, part, dst, options)?;
        st.trim(); // the indices are down: the device is idle
        Ok(())
    })
}

/// The chunk events of an overlapped download, destroyed on drop.
pub(crate) struct ChunkEvents(pub Vec<sys::CUevent>);

impl ChunkEvents {
    pub fn new(n: usize) -> Result<ChunkEvents> {
        let mut events = ChunkEvents(Vec::with_capacity(n));
        for _ in 0..n {
            let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(gpu_err("creating events"))?;
            events.0.push(e);
        }
        Ok(events)
    }
}

impl Drop for ChunkEvents {
    fn drop(&mut self) {
        for &e in &self.0 {
            // SAFETY: created by ChunkEvents::new, destroyed once; destroying an event whose
            // work is pending is allowed (its resources go once that work is done).
            unsafe {
                let _ = result::event::destroy(e);
            }
        }
    }
}

fn merge_planned(
    gpu: &Gpu,
    st: &mut State,
    planned: &Planned,
    part: &Part,
    dst: &mut [MaybeUninit<u8>],
    options: &GpuOptions,
) -> Result<()> {
    let n = part.n;
    let spec = planned.module.spec;
    let (kb, ib) = (spec.key_bytes, spec.index_bytes());
    debug_assert_eq!(dst.len(), n * ib);
    // Refuse what cannot fit (the pool's own buffers count as free: they are reused).
    let need = device_bytes(kb, ib, n, &planned.levels);
    let have = available_bytes(st, options)?;
    let free = have.saturating_sub(st.pooled_bytes());
    if need > have {
        return Err(Error::Gpu(format!(
            "the merge of {n} keys needs {need} bytes of device memory, {have} are available; merge on the CPU"
        )));
    }
    if need > free + st.slot_bytes(Slot::Keys0) && st.pooled_bytes() > 0 {
        st.release(); // start over rather than fragment
    }
    let keys0 = st.buffer(Slot::Keys0, n * kb)?;
    // The rebase table of a split merge: the runs' local bounds, then their deltas.
    let rebase = match &part.rebase {
        Some(delta) => {
            let table: Vec<u64> = part.bounds.iter().chain(delta).copied().collect();
            let ptr = st.buffer(Slot::Rebase, table.len() * 8)?;
            upload_now(gpu.cu_stream(), &table, ptr)?;
            Some(RebaseTable { bounds: ptr, delta: ptr + part.bounds.len() as u64 * 8, nruns: delta.len() as u32 })
        }
        None => None,
    };
    // The output is a fresh allocation: its first touch costs a page fault per 4 KiB, which
    // slows the download's drain copies measurably. Other threads map it with huge pages
    // while the keys go up and the merge runs.
    let dl = gpu.ctx.new_stream().map_err(gpu_err("creating a stream"))?;
    let events = ChunkEvents::new(if options.overlap_download { DOWNLOAD_CHUNKS } else { 0 })?;
    let queued = std::thread::scope(|scope| {
        prefault(scope, &mut *dst);
        upload_slices(gpu.cu_stream(), st.staging()?, part.srcs, keys0)?;
        run_levels(gpu, st, planned, n, keys0, 0, &events.0, rebase.as_ref())
    })?;
    let order = DownloadOrder { main: gpu.cu_stream(), chunk_events: &events.0, chunk_ends: &queued.chunk_ends };
    download(dl.cu_stream(), st.staging()?, queued.idx, dst, ib, &order)?;
    dl.synchronize().map_err(gpu_err("finishing the download"))
}

/// Where a split merge's rebase table sits on the device (see cuda/rebase.cu).
pub(crate) struct RebaseTable {
    bounds: DevPtr,
    delta: DevPtr,
    nruns: u32,
}

/// Queues every level on the device: input keys at `keys0` (read only), `n` keys, and their
/// indices at `in_idx0`, or 0 when an index is the key's position (a merge; the sort passes
/// its tiles' positions, and its first level then loads them). Returns the device address
/// of the final indices (and of the merged keys, with `keep_keys`). When `chunk_events` is
/// given, the last level is launched in that many chunks of blocks, each followed by its
/// event, and the output position each chunk completes is returned alongside (for
/// overlapping the download).
/// With `rebase`, each chunk's indices (or the last level's) are made global right after
/// it, before its event.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_levels(
    gpu: &Gpu,
    st: &mut State,
    planned: &Planned,
    n: usize,
    keys0: DevPtr,
    in_idx0: DevPtr,
    chunk_events: &[sys::CUevent],
    rebase: Option<&RebaseTable>,
) -> Result<Queued> {
    let Planned { module, kind, levels, keep_keys, sort_tiles } = planned;
    let stream = gpu.cu_stream();
    let (kb, ib) = (module.spec.key_bytes, module.spec.index_bytes());
    let (meta, offsets) = metadata(levels);
    let meta_ptr = st.buffer(Slot::Meta, meta.len() * 8)?;
    upload_now(stream, &meta, meta_ptr)?;
    let at = |element: usize| meta_ptr + element as u64 * 8;
    // Levels that write keys: all but the last, and the last too with keep_keys.
    let keyed = (levels.len() + *keep_keys as usize).saturating_sub(1);
    let keys1 = if keyed >= 1 { st.buffer(Slot::Keys1, n * kb)? } else { 0 };
    let keys2 = if keyed >= 2 { st.buffer(Slot::Keys2, n * kb)? } else { 0 };
    let idx0 = st.buffer(Slot::Idx0, n * ib)?;
    let idx1 = if levels.len() > 1 { st.buffer(Slot::Idx1, n * ib)? } else { 0 };
    let launcher = Launcher { module, stream };
    let (mut in_keys, mut in_idx) = (keys0, in_idx0);
    let mut chunk_ends = Vec::new();
    for (li, (l, off)) in levels.iter().zip(&offsets).enumerate() {
        let last = li + 1 == levels.len();
        let out_keys = if last && !keep_keys {
            0
        } else if li % 2 == 0 {
            keys1
        } else {
            keys2
        };
        let out_idx = if li % 2 == 0 { idx0 } else { idx1 };
        let mut level = LevelArg {
            in_keys,
            in_idx,
            out_keys,
            out_idx,
            bounds: at(off.bounds),
            tile_start: at(off.tile_start),
            block_offset: 0,
            nruns: l.nruns() as u32,
            group: l.group,
            ngroups: l.ngroups() as u32,
            _pad: 0,
        };
        // Grid level: the split of every tile boundary, for the kernels that read one.
        let splits = if kind.partitioned() { partition(&launcher, st, l, level, at(off.coarse_start))? } else { 0 };
        // Block level: the merge, in chunks of blocks on the last level when asked.
        let entry = merge_entry(*kind, li == 0 && in_idx0 == 0, last && !keep_keys, *sort_tiles && !l.random_tiles_pack());
        let chunked = last && !chunk_events.is_empty();
        for (c, (b0, b1)) in chunk_blocks(l.total_tiles(), if chunked { chunk_events.len() } else { 1 }).into_iter().enumerate() {
            level.block_offset = b0;
            let args = if kind.partitioned() { Args::LevelSplits(level, splits) } else { Args::Level(level) };
            launcher.launch(entry, b1 - b0, args)?;
            if let (true, Some(t)) = (last, rebase) {
                // The last level writes its output in order, one group: this launch's blocks
                // completed outputs [block_output(b0), block_output(b1)).
                let (begin, end) = (l.block_output(b0), l.block_output(b1));
                let blocks = blocks_for_threads(end - begin, module.policy.threads).min(REBASE_MAX_BLOCKS);
                let args = Args::RebaseIndices { idx: out_idx, begin, end, bounds: t.bounds, delta: t.delta, nruns: t.nruns };
                launcher.launch(Entry::RebaseIndices, blocks, args)?;
            }
            if chunked {
                // SAFETY: an event of this context (ChunkEvents) recorded on the engine's stream.
                unsafe { result::event::record(chunk_events[c], stream) }.map_err(gpu_err("recording an event"))?;
                chunk_ends.push(l.block_output(b1));
            }
        }
        in_keys = out_keys;
        in_idx = out_idx;
    }
    Ok(Queued { idx: in_idx, keys: in_keys, chunk_ends })
}

/// Queues the grid-level partition of level `l`: the split of every tile boundary, into
/// the pool's splits buffer (returned). Groups of two runs: one thread per boundary with
/// the 2-way co-rank. More runs: one warp per boundary with the k-way co-rank, a coarse
/// pass (every `kway_coarse` tiles, whole runs) then the fine pass.
fn partition(launcher: &Launcher, st: &mut State, l: &LevelPlan, level: LevelArg, coarse_start: DevPtr) -> Result<DevPtr> {
    let threads = launcher.module.policy.threads;
    let group = l.group as usize;
    let boundaries = l.boundaries();
    let splits = st.buffer(Slot::Splits, boundaries as usize * group * 8)?;
    if l.group == 2 {
        let args = Args::Partition2Way { level, splits, boundaries, tile: l.tile };
        launcher.launch(Entry::Partition2Way, blocks_for_threads(boundaries, threads), args)?;
    } else {
        let count = l.coarse_boundaries();
        let coarse = st.buffer(Slot::Coarse, count as usize * group * 8)?;
        let args = Args::PartitionKWayCoarse { level, coarse, count, coarse_start };
        launcher.launch(Entry::PartitionKWayCoarse, blocks_for_warps(count, threads), args)?;
        let args = Args::PartitionKWay { level, splits, boundaries, coarse, coarse_start };
        launcher.launch(Entry::PartitionKWay, blocks_for_warps(boundaries, threads), args)?;
    }
    Ok(splits)
}

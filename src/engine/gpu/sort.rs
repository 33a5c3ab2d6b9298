//! The stable sort on one device: the keys go up, the tile level sorts tiles of
//! `Policy::sort_tile` keys in place (cuda/sort_tiles.cu: thread-level transposition,
//! block-level co-rank merge rounds in shared memory), then the merge levels of
//! [`super::merge`] merge the sorted tiles (by default the single-pass k-way kernel, up to
//! 64 tiles a group: three passes for 65,536 tiles), the first level loading the tiles'
//! positions instead of computing them, the levels whose groups are too small for random
//! keys to pack (`LevelPlan::random_tiles_pack`) merging on keys and indices, and the
//! indices come down while the last level runs.
//!
//! The result is the stable sort: for every output row the input position of its key,
//! equal keys in input order, identical to [`crate::engine::sort::sort_cpu`] (a stable sort
//! is unique; the tile sizes of the two engines need not agree).
//!
//! Device memory: the merge's (keys, intermediate keys, two index buffers, splits), the
//! keys sorted in place in the input slot. A sort that does not fit in free device memory
//! is refused with [`Error::Gpu`], as a merge is.

use super::context::{gpu, gpu_err, Gpu, Slot, State};
use super::launch::{Args, DevPtr, Launcher};
use super::manifest::{Entry, Family};
use super::merge::{key_bytes, run_levels, ChunkEvents, Planned, Queued};
use super::nvrtc::{Module, ModuleSpec};
use super::plan::{device_bytes, plan, resolve};
use super::transfer::{download, prefault, upload_slices, DownloadOrder, Output};
use super::tuning::DOWNLOAD_CHUNKS;
use super::GpuOptions;
use crate::keys::KeyColumn;
use crate::options::Kernel;
use crate::permutation::Indices;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::mem::MaybeUninit;
use std::sync::Arc;

/// Stable sort of `keys` on the device of `options.devices`, or split across them where
/// there are several ([`super::split_sort`]); see [`super::sort_gpu`].
pub(crate) fn sort(keys: &KeyColumn, options: &GpuOptions) -> Result<Indices> {
    let n = keys.len();
    let wide = n > u32::MAX as usize || options.force_u64_indices;
    let mut out = Output::with_capacity(n, if wide { 8 } else { 4 });
    sort_into(keys, options, out.bytes(), wide)?;
    // SAFETY: sort_into returned Ok, so it wrote every byte of `out.bytes()`.
    Ok(unsafe { out.assume_init() })
}

/// The sort's indices (u64 where `wide`, else u32) into `dst`, the bytes of `keys.len()` of
/// them: written whole when this returns Ok.
pub(crate) fn sort_into(keys: &KeyColumn, options: &GpuOptions, dst: &mut [MaybeUninit<u8>], wide: bool) -> Result<()> {
    let devices = super::multi::resolve_devices(options.devices)?;
    if keys.is_empty() {
        return Ok(());
    }
    if devices.len() > 1 {
        super::split_sort::sort_split(keys, &devices, options, dst, wide)
    } else {
        sort_on_device(gpu(devices[0])?, keys, options, dst, wide)
    }
}

/// The stable sort of `keys` (at least one) on `gpu`, its indices into `dst` as
/// [`sort_into`]. On an error the device is left clean for the next call.
pub(crate) fn sort_on_device(gpu: &Gpu, keys: &KeyColumn, options: &GpuOptions, dst: &mut [MaybeUninit<u8>], wide: bool) -> Result<()> {
    gpu.with_state(|st| {
        sort_on(gpu, st, key_bytes(keys), keys.key_bytes(), keys.len(), wide, dst, options)?;
        st.trim(); // the indices are down: the device is idle
        Ok(())
    })
}

/// A sort planned on a device: the tile module and the merge tree over its tiles.
pub(crate) struct SortPlan {
    pub tiles_module: Arc<Module>,
    pub tree: Planned,
    pub n: usize,
}

/// Plans the sort of `n` keys of `kb` bytes (`n` > 0) with `kernel` for the merge levels,
/// building the modules it needs, and checks that it fits in device memory. With
/// `keep_keys` the sorted keys stay on the device too (a piece of a split sort).
pub(crate) fn prepare_sort(
    gpu: &Gpu,
    st: &mut State,
    kb: usize,
    n: usize,
    wide: bool,
    kernel: Kernel,
    keep_keys: bool,
) -> Result<SortPlan> {
    let index_bits = if wide { 64 } else { 32 };
    let tiles_module = st.module(gpu, ModuleSpec { family: Family::Sort, key_bytes: kb, index_bits })?;
    let tile = tiles_module.policy.sort_tile();
    // The sorted tiles are the runs of the merge tree (none when one tile holds every key).
    let bounds: Vec<u64> = (0..n as u64).step_by(tile as usize).chain(std::iter::once(n as u64)).collect();
    let kind = resolve(kernel, bounds.len() - 1);
    let module = st.module(gpu, ModuleSpec { family: kind.family(), key_bytes: kb, index_bits })?;
    let tree = Planned { levels: plan(kind, &module.policy, bounds), module, kind, keep_keys, sort_tiles: true };
    // Refuse what cannot fit (pooled buffers count as free: they are reused). The tile
    // level's indices take the second index buffer, which a tree of one level lacks; kept
    // keys take an intermediate key buffer more where the tree has fewer than three levels.
    let ib = index_bits as usize / 8;
    let levels = tree.levels.len();
    let need = device_bytes(kb, ib, n, &tree.levels)
        + if levels <= 1 { n * ib } else { 0 }
        + if keep_keys && (1..=2).contains(&levels) { n * kb } else { 0 };
    let (free, _) = result::mem_get_info().map_err(gpu_err("reading free device memory"))?;
    let have = free + st.pooled_bytes();
    if need > have {
        return Err(Error::Gpu(format!("the sort of {n} keys needs {need} bytes of device memory, {have} are available; sort on the CPU")));
    }
    if need > free + st.slot_bytes(Slot::Keys0) && st.pooled_bytes() > 0 {
        st.release(); // start over rather than fragment
    }
    Ok(SortPlan { tiles_module, tree, n })
}

/// Queues the sort of the keys at `keys0` (sorted in place): the tile level into the Idx1
/// slot, then the merge levels (see [`run_levels`] for `chunk_events`). Returns where the
/// sorted indices (and, where the plan keeps them, the sorted keys) will be and the chunk
/// ends of the last level.
pub(crate) fn queue_sort(gpu: &Gpu, st: &mut State, plan: &SortPlan, keys0: DevPtr, chunk_events: &[sys::CUevent]) -> Result<Queued> {
    let n = plan.n;
    let tile_idx = st.buffer(Slot::Idx1, n * plan.tiles_module.spec.index_bytes())?;
    // Tile level: one block per tile.
    let launcher = Launcher { module: &plan.tiles_module, stream: gpu.cu_stream() };
    let tiles = (n as u64).div_ceil(plan.tiles_module.policy.sort_tile());
    launcher.launch(Entry::SortTiles, tiles, Args::SortTiles { keys: keys0, idx: tile_idx, n: n as u64 })?;
    if plan.tree.levels.is_empty() {
        // One tile: sorted in place.
        return Ok(Queued { idx: tile_idx, keys: keys0, chunk_ends: Vec::new() });
    }
    // The merge levels over the sorted tiles, starting from their positions: the first
    // reads Idx1 and writes Idx0.
    run_levels(gpu, st, &plan.tree, n, keys0, tile_idx, chunk_events, None)
}

#[allow(clippy::too_many_arguments)]
fn sort_on(
    gpu: &Gpu,
    st: &mut State,
    src: &[u8],
    kb: usize,
    n: usize,
    wide: bool,
    dst: &mut [MaybeUninit<u8>],
    options: &GpuOptions,
) -> Result<()> {
    let plan = prepare_sort(gpu, st, kb, n, wide, options.kernel, false)?;
    let keys0 = st.buffer(Slot::Keys0, n * kb)?;
    let dl = gpu.ctx.new_stream().map_err(gpu_err("creating a stream"))?;
    let overlap = options.overlap_download && !plan.tree.levels.is_empty();
    let events = ChunkEvents::new(if overlap { DOWNLOAD_CHUNKS } else { 0 })?;
    let queued = std::thread::scope(|scope| {
        prefault(scope, &mut *dst);
        upload_slices(gpu.cu_stream(), st.staging()?, &[src], keys0)?;
        queue_sort(gpu, st, &plan, keys0, &events.0)
    })?;
    let order = DownloadOrder { main: gpu.cu_stream(), chunk_events: &events.0, chunk_ends: &queued.chunk_ends };
    download(dl.cu_stream(), st.staging()?, queued.idx, dst, plan.tiles_module.spec.index_bytes(), &order)?;
    dl.synchronize().map_err(gpu_err("finishing the download"))
}

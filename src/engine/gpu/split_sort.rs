//! A sort split across several GPUs.
//!
//! 1. **Pieces.** The input is cut into one contiguous piece per device, of equal sizes.
//! 2. **Per device**, on its own host thread: its piece goes up over its own PCIe link and is
//!    sorted there by the one-device sort ([`super::sort`]), whose last level keeps the
//!    sorted keys; the sorted keys and the indices (positions in the piece) then go to the
//!    first device, peer to peer (NVLink or PCIe, where the devices allow it; the driver
//!    stages the copy otherwise), into one concatenation of sorted runs there.
//! 3. **On the first device**: each piece's indices made global (+ the piece's first row,
//!    cuda/rebase.cu), then the merge of the sorted pieces loading those indices (the levels
//!    of [`super::merge`], as for any merge of that many runs: one level for two pieces).
//! 4. **Download over every link**: the output is cut into one range per distinct device;
//!    the first device downloads its range, each other device pulls its range over the peer
//!    link and downloads it over its own PCIe link, on its own host thread.
//!
//! Every step holds at most one device's lock at a time (the call's own buffers on the
//! first device are not the pool's), so concurrent sorts and merges cannot deadlock; the
//! output's pages are mapped by other threads while the pieces sort.
//!
//! The stable merge of the sorted pieces in piece order is the stable sort (equal keys: the
//! earlier piece first, i.e. the earlier input row), identical to the one-device and CPU
//! sorts. More devices add PCIe links and sort throughput, not memory: the first device
//! holds the concatenation and the merge's buffers (a sort that does not fit there is an
//! allocation error, [`Error::Gpu`]).
//!
//! A device that fails makes the sort an error naming it; the other devices finish their
//! pieces first, so nothing is left running.

use super::context::{gpu, gpu_err, DevBuf, Gpu, Slot};
use super::launch::{Args, DevPtr, Launcher};
use super::manifest::{Entry, Family};
use super::merge::{key_bytes, prepare, run_levels};
use super::multi::on_device;
use super::nvrtc::ModuleSpec;
use super::plan::blocks_for_threads;
use super::runtime::{lock, runtime};
use super::sort::{prepare_sort, queue_sort};
use super::transfer::{download, prefault, upload_now, upload_slices, DownloadOrder};
use super::tuning::REBASE_MAX_BLOCKS;
use super::GpuOptions;
use crate::keys::KeyColumn;
use crate::options::Kernel;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::mem::MaybeUninit;

/// Stable sort of `keys` split across `devices` (at least two ordinals; one may repeat),
/// identical to the one-device and CPU sorts. The indices (u64 where `wide`, else u32) go
/// into `dst`, the bytes of `keys.len()` of them, written whole when this returns Ok.
pub(crate) fn sort_split(keys: &KeyColumn, devices: &[usize], options: &GpuOptions, dst: &mut [MaybeUninit<u8>], wide: bool) -> Result<()> {
    let n = keys.len();
    let (kb, ib) = (keys.key_bytes(), if wide { 8 } else { 4 });
    // 1. The non-empty pieces: (device, first row, end row).
    let d = devices.len();
    let pieces: Vec<(usize, usize, usize)> = (0..d)
        .map(|p| (devices[p], (n as u128 * p as u128 / d as u128) as usize, (n as u128 * (p + 1) as u128 / d as u128) as usize))
        .filter(|&(_, lo, hi)| hi > lo)
        .collect();
    let target = gpu(devices[0]).map_err(|e| on_device(devices[0], e))?;
    if pieces.len() < 2 {
        // Fewer keys than devices, at most one: nothing to split.
        return super::sort::sort_on_device(target, keys, options, dst, wide).map_err(|e| on_device(devices[0], e));
    }
    // The concatenation of the sorted pieces on the first device, owned by this call (not
    // by the device's pool, which the first device's own piece uses meanwhile).
    target.bind()?;
    let gathered = (DevBuf::new(n * kb), DevBuf::new(n * ib));
    let (gathered_keys, gathered_idx) = match gathered {
        (Ok(k), Ok(i)) => (k, i),
        (Err(e), _) | (_, Err(e)) => return Err(on_device(devices[0], e)),
    };
    let bytes = key_bytes(keys);
    let bounds: Vec<u64> = pieces.iter().map(|p| p.1 as u64).chain(std::iter::once(n as u64)).collect();
    let res = (|| {
        // 2. Every piece on its own thread; other threads map the output meanwhile.
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            prefault(scope, &mut *dst);
            let handles: Vec<_> = pieces
                .iter()
                .map(|&(device, lo, hi)| {
                    let src = &bytes[lo * kb..hi * kb];
                    let to = (gathered_keys.ptr + (lo * kb) as u64, gathered_idx.ptr + (lo * ib) as u64);
                    scope.spawn(move || sort_piece(device, src, kb, wide, options.kernel, target, to).map_err(|e| on_device(device, e)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::Internal("a device thread panicked".into())))).collect()
        });
        results.into_iter().collect::<Result<()>>()?;
        // 3. The merge of the pieces, its indices left in the call's own buffer.
        merge_pieces(target, kb, wide, &bounds, gathered_keys.ptr, gathered_idx.ptr, options.kernel)
            .map_err(|e| on_device(devices[0], e))?;
        // 4. The download over every distinct device's link.
        let mut links: Vec<usize> = Vec::with_capacity(devices.len());
        for &d in devices {
            if !links.contains(&d) {
                links.push(d);
            }
        }
        download_split(target, gathered_idx.ptr, &links, dst, ib)
    })();
    // Every thread waited for its device's work on these buffers (or abandoned it on an
    // error): free them with the first device's context bound.
    target.bind()?;
    drop((gathered_keys, gathered_idx));
    res
}

/// Sorts the keys `src` (whole keys of `kb` bytes) on `device`, then copies the sorted keys
/// and their indices (positions in `src`) to `to` on `target`, and waits for the copies.
fn sort_piece(device: usize, src: &[u8], kb: usize, wide: bool, kernel: Kernel, target: &Gpu, to: (DevPtr, DevPtr)) -> Result<()> {
    let gpu = gpu(device)?;
    let n = src.len() / kb;
    let ib = if wide { 8 } else { 4 };
    gpu.with_state(|st| {
        let plan = prepare_sort(gpu, st, kb, n, wide, kernel, true)?;
        let keys0 = st.buffer(Slot::Keys0, n * kb)?;
        upload_slices(gpu.cu_stream(), st.staging()?, &[src], keys0)?;
        let sorted = queue_sort(gpu, st, &plan, keys0, &[])?;
        copy_to(gpu, target, to.0, sorted.keys, n * kb)?;
        copy_to(gpu, target, to.1, sorted.idx, n * ib)?;
        gpu.stream.synchronize().map_err(gpu_err("sorting a piece"))
    })
}

/// Queues on `from`'s stream the copy of `bytes` bytes at `src` (on `from`) to `dst` (on
/// `to`): device to device on one device, else peer to peer.
fn copy_to(from: &Gpu, to: &Gpu, dst: DevPtr, src: DevPtr, bytes: usize) -> Result<()> {
    if std::ptr::eq(from, to) {
        // SAFETY: both ranges lie in live allocations of this context (the pool's buffer of
        // the sorted piece, the caller's concatenation), which outlive the copy: the caller
        // waits for the stream before either is freed or reused.
        return unsafe { result::memcpy_dtod_async(dst, src, bytes, from.cu_stream()) }.map_err(gpu_err("copying a sorted piece"));
    }
    enable_peer_access(from, to);
    // SAFETY: as above, the source in `from`'s context and the destination in `to`'s.
    unsafe { result::memcpy_peer_async(to.ctx.cu_ctx(), dst, from.ctx.cu_ctx(), src, bytes, from.cu_stream()) }
        .map_err(gpu_err("copying a sorted piece to the first device"))
}

/// Lets `from`'s context reach `to`'s memory directly where the devices allow it (NVLink or
/// PCIe peer to peer), once a pair, with `from`'s context bound. Where they do not, or the
/// call fails, peer copies still work: the driver stages them through the host.
fn enable_peer_access(from: &Gpu, to: &Gpu) {
    let pair = (from.ctx.cu_device(), to.ctx.cu_device());
    let mut enabled = lock(&runtime().peer_access);
    if enabled.contains(&pair) {
        return;
    }
    enabled.push(pair);
    let mut can = 0;
    // SAFETY: plain queries and a context setting, with `from`'s context bound (Gpu::lock).
    let res = unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, pair.0, pair.1).result().and_then(|()| {
            if can == 1 {
                sys::cuCtxEnablePeerAccess(to.ctx.cu_ctx(), 0).result()
            } else {
                Ok(())
            }
        })
    };
    match res {
        Ok(()) => {
            log::debug!("corank: peer access from CUDA device {} to {}: {}", pair.0, pair.1, if can == 1 { "on" } else { "not supported" })
        }
        Err(e) => log::debug!("corank: peer access from CUDA device {} to {}: {e:?} (copies are staged)", pair.0, pair.1),
    }
}

/// Step 3 on the first device: the pieces' indices at `idx` made global, then the merge of
/// the sorted pieces `bounds` (at least two) at `keys`, loading those indices; the merged
/// indices are copied back over `idx` (the call's own buffer: the pool's may be reused once
/// the lock is let go) and the device is idle when this returns Ok.
fn merge_pieces(gpu: &Gpu, kb: usize, wide: bool, bounds: &[u64], keys: DevPtr, idx: DevPtr, kernel: Kernel) -> Result<()> {
    gpu.with_state(|st| {
        let n = *bounds.last().expect("bounds end with the count") as usize;
        let pieces = bounds.len() - 1;
        let ib = if wide { 8 } else { 4 };
        // a. Piece r's indices are positions in the piece: + bounds[r], its first row, with
        // the rebase kernel of a single run (the table: a zero bound, then each piece's delta).
        let rebase = st.module(gpu, ModuleSpec { family: Family::Production, key_bytes: kb, index_bits: ib as u32 * 8 })?;
        let table: Vec<u64> = std::iter::once(0).chain(bounds[..pieces].iter().copied()).collect();
        let t = st.buffer(Slot::Rebase, table.len() * 8)?;
        upload_now(gpu.cu_stream(), &table, t)?;
        let launcher = Launcher { module: &rebase, stream: gpu.cu_stream() };
        for r in 0..pieces {
            let (begin, end) = (bounds[r], bounds[r + 1]);
            let blocks = blocks_for_threads(end - begin, rebase.policy.threads).min(REBASE_MAX_BLOCKS);
            let args = Args::RebaseIndices { idx, begin, end, bounds: t, delta: t + 8 * (r as u64 + 1), nruns: 1 };
            launcher.launch(Entry::RebaseIndices, blocks, args)?;
        }
        // b. The merge of the pieces, its first level loading their indices.
        let planned = prepare(gpu, st, kb, bounds.to_vec(), kernel, wide)?;
        let queued = run_levels(gpu, st, &planned, n, keys, idx, &[], None)?;
        // Back into the call's own buffer (a device-to-device copy, small beside the merge):
        // the pool's buffer may be reused by another call once the lock is let go,
        // before step 4 reads it.
        // SAFETY: both are device allocations of at least n indices in this context; the copy
        // is queued after the merge that reads `idx` and writes `queued.idx`.
        unsafe { result::memcpy_dtod_async(idx, queued.idx, n * ib, gpu.cu_stream()) }.map_err(gpu_err("copying the indices"))?;
        gpu.stream.synchronize().map_err(gpu_err("merging the sorted pieces"))
    })
}

/// Step 4: the indices at `idx` on `first` into `dst` (`ib` bytes each), one contiguous
/// range per device of `links` (distinct ordinals, `first`'s first), all at once.
fn download_split(first: &Gpu, idx: DevPtr, links: &[usize], dst: &mut [MaybeUninit<u8>], ib: usize) -> Result<()> {
    let n = dst.len() / ib;
    let mut ranges = Vec::with_capacity(links.len());
    let mut rest = dst;
    for l in 0..links.len() {
        let (lo, hi) = (n * l / links.len(), n * (l + 1) / links.len());
        let (range, tail) = rest.split_at_mut((hi - lo) * ib);
        ranges.push((links[l], lo, range));
        rest = tail;
    }
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .into_iter()
            .filter(|(_, _, range)| !range.is_empty())
            .map(|(device, lo, range)| {
                let src = idx + (lo * ib) as u64;
                scope.spawn(move || download_range(device, first, src, range, ib).map_err(|e| on_device(device, e)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::Internal("a device thread panicked".into())))).collect()
    });
    results.into_iter().collect()
}

/// Downloads `dst.len()` bytes at `src` on `first` into `dst` through `device`: directly
/// where it is `first`, else pulled over the peer link into its pool first.
fn download_range(device: usize, first: &Gpu, src: DevPtr, dst: &mut [MaybeUninit<u8>], ib: usize) -> Result<()> {
    let gpu = gpu(device)?;
    gpu.with_state(|st| {
        let from = if std::ptr::eq(gpu, first) {
            src
        } else {
            let buf = st.buffer(Slot::Idx0, dst.len())?;
            enable_peer_access(gpu, first);
            // SAFETY: `src` lies in the caller's buffer on `first` (idle, freed only after this
            // thread returns), `buf` in this device's pool; the download below waits for the
            // stream first.
            unsafe { result::memcpy_peer_async(gpu.ctx.cu_ctx(), buf, first.ctx.cu_ctx(), src, dst.len(), gpu.cu_stream()) }
                .map_err(gpu_err("copying indices from the first device"))?;
            buf
        };
        let order = DownloadOrder { main: gpu.cu_stream(), chunk_events: &[], chunk_ends: &[] };
        download(gpu.cu_stream(), st.staging()?, from, dst, ib, &order)?;
        gpu.stream.synchronize().map_err(gpu_err("downloading indices"))
    })
}

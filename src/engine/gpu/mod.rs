//! The GPU engine: the co-rank (merge path) kernels of `cuda/`, compiled at run time by
//! NVRTC for the device's compute capability, once per process and device.
//!
//! Levels of the work, named as in the kernels:
//! - **grid level**: the output of a merge level is cut into tiles, one per block; a
//!   partition kernel finds every tile boundary's split before the merge kernel starts (the
//!   tiled kernel: 2-way co-rank, one thread per boundary; k-way: k-way co-rank, one warp per
//!   boundary); the basic and circular kernels search inside the merge kernel, as in the book;
//! - **block level**: the tile's pieces are loaded coalesced into shared memory and merged
//!   there (the k-way kernel by a tree of pairwise merges in shared memory);
//! - **thread level**: each thread co-ranks its few outputs inside the tile and merges them
//!   serially (the tiled kernel keeps the current key of each side in registers).
//!
//! k runs are merged by a tree of stable pairwise merges of adjacent runs with the basic,
//! tiled or circular-buffer kernel (ceil(log2 k) passes over device memory), or in a single
//! pass by the k-way kernel (groups of up to 64 runs; more runs take more passes). Results
//! are identical to [`crate::engine::cpu::merge_cpu`]: equal keys keep run order, then row order.
//!
//! Host side, split as CUB's is:
//! - `manifest`: every entry point, its module family, parameters and shared memory;
//! - `tuning`: the kernels' policy per (architecture, key bytes, index bytes);
//! - `nvrtc`: builds and loads a module (one family, key width, index width);
//! - `kernel_cache`: NVRTC to a cubin for the device's architecture, and the cubins' disk
//!   cache (`$CORANK_CACHE_DIR`, else `$XDG_CACHE_HOME/corank`, else `~/.cache/corank`);
//! - `plan`: pure planning (kernel resolution, levels, tiles, grids, device bytes);
//! - `launch`: the typed launcher, the one kernel launch;
//! - `transfer`: keys up and indices down through two pinned staging buffers (the host
//!   fills one while the other is in flight), the output mapped with huge pages by other
//!   threads while the keys go up;
//! - `context`: a context per device ordinal, created lazily, with its modules and a pool
//!   of device buffers reused across calls, and [`warm_up`] to start that early on a
//!   background thread;
//! - `merge`: one merge, level by level; the last level runs in chunks so the download of
//!   each chunk overlaps the merge of the next;
//! - `sort`: the stable sort: tiles sorted in shared memory (cuda/sort_tiles.cu), then
//!   merged by the tree of `merge`;
//! - `multi`: a merge split across several devices: one output range per device by
//!   co-rank, each device merging only its slices of the runs (`GpuOptions::devices`);
//! - `split_sort`: a sort split across several devices: one piece of the input per device,
//!   sorted there, the sorted pieces merged on the first device (peer-to-peer copies);
//! - `pinned`: host memory registered with the driver ([`Registered`]): keys and outputs
//!   there are copied by DMA, with no staging copy ([`merge_gpu_into`]);
//! - `gather`: the payload gather on the device (plan, launch sequence, drain, cost rule);
//! - `nvcomp`: NVIDIA nvCOMP loaded at run time, and the batched decompression of Parquet
//!   pages with it (a `DecompressJob` of `engine/decompress.rs`);
//! - `runtime`: all process-wide GPU state in one value (contexts, warm-ups, the gather's
//!   pinned pool and device buffers, registered ranges, peer access, tuning overrides).
//!
//! A merge on one device that does not fit in free device memory (or
//! [`GpuOptions::device_memory_limit`]) is cut into output ranges that fit, merged one after
//! another (`multi::merge_in_pieces`); a sort, or a merge whose pieces would not fit either,
//! is refused with [`Error::Gpu`] (the caller merges on the CPU). GPU failures are returned,
//! never panics.

mod context;
mod event;
pub mod gather;
mod kernel_cache;
pub(crate) mod key_encode;
mod launch;
mod manifest;
mod merge;
mod multi;
pub(crate) mod nvcomp;
mod nvrtc;
pub(crate) mod parquet_decode;
pub(crate) mod parquet_encode;
mod pinned;
mod plan;
pub(crate) mod resident;
mod runtime;
mod sort;
mod split_sort;
mod transfer;
pub mod tuning;

#[doc(hidden)]
pub mod bench;

use crate::keys::KeyColumn;
pub use crate::options::{Devices, Kernel};
use crate::permutation::Indices;
use crate::{Error, Result};
pub use gather::{
    device_bytes_available, gather_fixed_gpu, gather_fixed_gpu_into, gather_on_gpu_pays, whole_sort_device_bytes, GatherOutput,
};
pub use pinned::{GpuIndex, HostMemory, Registered};

/// Options of the GPU engine. [`merge_gpu`] has an example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuOptions {
    /// The kernel; `Auto` takes the tiled tree below [`tuning::AUTO_KWAY_MIN_RUNS`] runs and
    /// the single-pass k-way kernel from there on (the rule and its measurements:
    /// `docs/gpu.md`, `docs/performance.md`).
    pub kernel: Kernel,
    /// Overlap the download of the indices with the last merge level (chunked launches).
    pub overlap_download: bool,
    /// Use the u64-index kernels even when the total fits u32 (tests the path that inputs
    /// of more than u32::MAX keys take, at sizes a test can afford).
    pub force_u64_indices: bool,
    /// The CUDA devices: one ordinal (the default, device 0), a set, or all of them. With
    /// more than one the merge is split across them (`multi`), and so is the sort
    /// (`split_sort`); the payload gather uses the first.
    pub devices: Devices,
    /// Most bytes of device memory a merge may use (`None`: what the device has free). A
    /// merge on one device that needs more is cut by co-rank into output ranges that fit,
    /// merged one after another (the same result); one whose pieces would still not fit, a
    /// merge split across devices and a sort are refused past it, as past free memory.
    pub device_memory_limit: Option<usize>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            kernel: Kernel::Auto,
            overlap_download: true,
            force_u64_indices: false,
            devices: Devices::One(0),
            device_memory_limit: None,
        }
    }
}

/// Whether the CUDA driver library and NVRTC load (`dlopen` only, no driver call): the
/// part of [`availability`] that does not wait for `cuInit` (which takes a while).
pub fn libraries_present() -> std::result::Result<(), String> {
    // SAFETY: only tries to load the library (dlopen), which reports absence as false.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("the CUDA driver library (libcuda) is not present".into());
    }
    // SAFETY: as above, for libnvrtc.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("the NVRTC library (libnvrtc) is not present; put it on LD_LIBRARY_PATH".into());
    }
    Ok(())
}

/// Whether the GPU engine can run here: libcuda and libnvrtc loadable, at least one device.
/// Never panics (cudarc panics when a library is missing, so presence is checked first).
/// [`merge_gpu`] has an example.
pub fn availability() -> std::result::Result<(), String> {
    libraries_present()?;
    use cudarc::driver::result;
    match std::panic::catch_unwind(|| result::init().and_then(|_| result::device::get_count())) {
        Ok(Ok(c)) if c > 0 => Ok(()),
        Ok(Ok(_)) => Err("no CUDA device".into()),
        Ok(Err(e)) => Err(format!("CUDA driver: {e:?}")),
        Err(_) => Err("the CUDA driver could not be loaded".into()),
    }
}

/// Compiles every kernel module (both families, every key width and index width) through
/// NVRTC, for `compute_90` and for the fallback policy of smaller devices, with no GPU
/// needed (CI runs this to catch kernels that do not compile).
pub fn compile_all_kernels() -> Result<()> {
    // SAFETY: only tries to load libnvrtc.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::GpuUnavailable("the NVRTC library (libnvrtc) is not present".into()));
    }
    nvrtc::compile_all()
}

/// Starts the GPU engine's start-up for CUDA device `device` on a background thread and
/// returns at once: the CUDA context is created, the production kernels whose cubins the
/// disk cache holds are loaded, and pinned staging buffers for transfers of
/// `staging_bytes` are allocated (none for 0: they then grow with the first transfers)
/// while the caller does other work (reads Parquet footers). The first merge on the device
/// waits for what is still under way; nothing is done twice. Errors are not returned here:
/// a missing GPU or a failure is reported by the first merge, exactly as without a
/// warm-up.
pub fn warm_up(device: usize, staging_bytes: usize) {
    context::warm_up(device, staging_bytes)
}

#[cfg(test)]
pub(crate) use context::{WarmUpInFlight, WARM_UP_TESTS};

/// Whether a [`warm_up`] is still under way (a GPU merge started now would wait for it).
pub fn warm_up_in_flight() -> bool {
    context::warm_up_in_flight()
}

/// [`warm_up`] for every device of `devices` (`All`: the count is read on the background
/// thread too).
pub fn warm_up_devices(devices: Devices, staging_bytes: usize) {
    match devices {
        Devices::All => {
            let in_flight = context::WarmUpInFlight::new();
            let spawned = std::thread::Builder::new().name("corank-gpu-warm-up".into()).spawn(move || {
                let _in_flight = in_flight; // until every device's warm-up has started
                if let Ok(count) = context::device_count() {
                    (0..count).for_each(|d| context::warm_up(d, staging_bytes));
                }
            });
            if let Err(e) = spawned {
                log::debug!("corank: no warm-up thread: {e}");
            }
        }
        d => d.ordinals(0).into_iter().for_each(|d| context::warm_up(d, staging_bytes)),
    }
}

/// The devices `devices` names, each as "ORDINAL NAME", joined with ", "; an absent or
/// unusable device is `Error::GpuUnavailable` naming it. `examples/registered_merge.rs`
/// prints it.
pub fn devices_shown(devices: Devices) -> Result<String> {
    let shown: Vec<String> =
        multi::resolve_devices(devices)?.into_iter().map(|d| Ok(format!("{d} {}", context::gpu(d)?.name))).collect::<Result<_>>()?;
    Ok(shown.join(", "))
}

/// The name of CUDA device `device`; an ordinal with no device is `Error::GpuUnavailable`.
pub fn device_name(device: usize) -> Result<String> {
    Ok(context::gpu(device)?.name.clone())
}

/// Stable merge of the sorted runs `keys[run_offsets[r]..run_offsets[r + 1]]` on the GPU
/// `options.devices` (split across them where there are several), returning the global
/// index of every output row, identical to [`crate::engine::cpu::merge_cpu`] (u32 indices
/// while the total fits, u64 beyond).
///
/// ```no_run
/// use corank::gpu::{availability, merge_gpu, GpuOptions};
/// use corank::{Devices, KeyColumn};
///
/// if availability().is_ok() {
///     // Two sorted runs of key words: [1, 3, 5] and [2, 4, 6].
///     let keys = KeyColumn::U64(vec![1, 3, 5, 2, 4, 6]);
///     let options = GpuOptions { devices: Devices::All, ..GpuOptions::default() };
///     let indices = merge_gpu(&keys, &[0, 3, 6], &options)?;
///     assert_eq!(indices.to_vec(), [0, 3, 1, 4, 2, 5]);
/// }
/// # Ok::<(), corank::Error>(())
/// ```
pub fn merge_gpu(keys: &KeyColumn, run_offsets: &[usize], options: &GpuOptions) -> Result<Indices> {
    merge::merge(keys, run_offsets, options)
}

/// [`merge_gpu`] into caller memory: `out` (one index per key, u32 or u64) receives the
/// merge's indices. Where `keys` and `out` are [`Registered`], the keys go up and the indices
/// come down by DMA, with no staging copy and no page faults: the host path for memory a
/// pipeline reuses. u32 indices for more than `u32::MAX` keys, or with
/// `force_u64_indices`, are refused with [`Error::InvalidArgument`], as is an `out` of the
/// wrong length. [`Registered`] has an example; `examples/registered_merge.rs` compares it
/// with [`merge_gpu`].
pub fn merge_gpu_into<I: GpuIndex>(keys: &KeyColumn, run_offsets: &[usize], options: &GpuOptions, out: &mut [I]) -> Result<()> {
    let n = keys.len();
    pinned::check_output_len(out.len(), n)?;
    if !I::WIDE && (n > u32::MAX as usize || options.force_u64_indices) {
        return Err(Error::InvalidArgument(format!("u32 indices for a merge of {n} keys that needs u64 indices")));
    }
    merge::merge_into(keys, run_offsets, options, pinned::index_bytes(out), I::WIDE)
}

/// Stable sort of `keys` on the GPU `options.devices` (split across them where there are
/// several): for every output row the input position of its key, equal keys in input order,
/// identical to [`crate::engine::sort::sort_cpu`] (u32 indices while the count fits, u64
/// beyond). Tiles sorted in shared memory, then merged by the co-rank tree (`sort`); with
/// several devices each sorts a piece and the first merges the sorted pieces (`split_sort`).
pub fn sort_gpu(keys: &KeyColumn, options: &GpuOptions) -> Result<Indices> {
    sort::sort(keys, options)
}

/// [`sort_gpu`] into caller memory, as [`merge_gpu_into`] for the merge: where `keys` and
/// `out` are [`Registered`], the keys go up and the indices come down by DMA (each device of
/// a split sort its own piece and output range). u32 indices for more than `u32::MAX` keys,
/// or with `force_u64_indices`, are refused with [`Error::InvalidArgument`], as is an `out`
/// of the wrong length.
pub fn sort_gpu_into<I: GpuIndex>(keys: &KeyColumn, options: &GpuOptions, out: &mut [I]) -> Result<()> {
    let n = keys.len();
    pinned::check_output_len(out.len(), n)?;
    if !I::WIDE && (n > u32::MAX as usize || options.force_u64_indices) {
        return Err(Error::InvalidArgument(format!("u32 indices for a sort of {n} keys that needs u64 indices")));
    }
    sort::sort_into(keys, options, pinned::index_bytes(out), I::WIDE)
}

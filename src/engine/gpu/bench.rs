//! Timings for benches/gpu.rs (device-resident data, CUDA events), kept out of the merge's
//! path. Not a stable API. Everything runs on device 0 unless it takes devices.

use super::context::{gpu, gpu_err, DevBuf};
use super::event::Event;
use super::manifest::{Family, MANIFEST};
use super::merge::{key_bytes, prepare, run_levels};
use super::nvrtc::ModuleSpec;
use super::plan::{nonempty_bounds, resolve};
use super::transfer::upload;
use crate::keys::KeyColumn;
use crate::options::Kernel;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::collections::HashMap;

/// The device the timings run on.
const DEVICE: usize = 0;

/// The kernel `kernel` runs as for `nruns` non-empty runs (`Auto` resolved).
pub fn resolved(kernel: Kernel, nruns: usize) -> Kernel {
    resolve(kernel, nruns).kernel()
}

/// Milliseconds of each of `reps` merges of `keys` already on the device (uploaded once;
/// timed from the first kernel to the last, with events), after one warm-up merge.
pub fn time_device_merge(keys: &KeyColumn, run_offsets: &[usize], kernel: Kernel, reps: usize) -> Result<Vec<f32>> {
    let n = keys.len();
    let bounds = nonempty_bounds(n, run_offsets)?;
    if bounds.len() <= 2 {
        return Err(Error::InvalidArgument("time_device_merge needs at least two non-empty runs".into()));
    }
    let gpu = gpu(DEVICE)?;
    let mut st = gpu.lock()?;
    let st = &mut *st;
    let planned = prepare(gpu, st, keys.key_bytes(), bounds, kernel, n > u32::MAX as usize)?;
    let src = key_bytes(keys);
    let keys0 = st.buffer(super::context::Slot::Keys0, src.len())?;
    upload(gpu.cu_stream(), st.staging()?, src, keys0)?;
    let (e0, e1) = (Event::new()?, Event::new()?);
    let mut times = Vec::new();
    for r in 0..=reps {
        e0.record(gpu.cu_stream())?;
        run_levels(gpu, st, &planned, n, keys0, 0, &[], None)?;
        e1.record(gpu.cu_stream())?;
        let ms = e0.until(&e1)?;
        if r > 0 {
            times.push(ms);
        }
    }
    Ok(times)
}

/// Milliseconds of each of `reps` sorts of `keys` on the device (uploaded once, restored by
/// a device copy before each sort, which sorts in place; timed from the first kernel to the
/// last, with events), after one warm-up sort. Returns the times and the indices of the
/// last sort, for checking.
pub fn time_device_sort(keys: &KeyColumn, kernel: Kernel, reps: usize) -> Result<(Vec<f32>, crate::Indices)> {
    use super::sort::{prepare_sort, queue_sort};
    let n = keys.len();
    if n == 0 {
        return Err(Error::InvalidArgument("time_device_sort needs keys".into()));
    }
    let gpu = gpu(DEVICE)?;
    let mut st = gpu.lock()?;
    let st = &mut *st;
    let wide = n > u32::MAX as usize;
    let plan = prepare_sort(gpu, st, keys.key_bytes(), n, wide, kernel, false)?;
    let src = key_bytes(keys);
    let pristine = DevBuf::new(src.len())?;
    upload(gpu.cu_stream(), st.staging()?, src, pristine.ptr)?;
    let keys0 = st.buffer(super::context::Slot::Keys0, src.len())?;
    let (e0, e1) = (Event::new()?, Event::new()?);
    let mut times = Vec::new();
    let mut last = 0;
    for r in 0..=reps {
        // SAFETY: both allocations hold src.len() bytes and outlive the copy (the event wait
        // below finishes it, on the same stream).
        unsafe { result::memcpy_dtod_async(keys0, pristine.ptr, src.len(), gpu.cu_stream()) }.map_err(gpu_err("copy"))?;
        e0.record(gpu.cu_stream())?;
        last = queue_sort(gpu, st, &plan, keys0, &[])?.idx;
        e1.record(gpu.cu_stream())?;
        let ms = e0.until(&e1)?;
        if r > 0 {
            times.push(ms);
        }
    }
    let ib = if wide { 8 } else { 4 };
    let mut host = vec![0u8; n * ib];
    // SAFETY: `last` holds n indices of `ib` bytes (the sort's output, finished: the event
    // wait above), `host` n * ib writable bytes.
    unsafe { result::memcpy_dtoh_sync(&mut host, last) }.map_err(gpu_err("reading the indices"))?;
    let indices = if wide {
        crate::Indices::U64(host.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect())
    } else {
        crate::Indices::U32(host.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect())
    };
    Ok((times, indices))
}

/// Per entry point of the manifest, for `key_bytes`-byte keys and u32 indices: its name,
/// registers per thread, dynamic shared bytes per block and resident blocks per
/// multiprocessor.
pub fn kernel_report(key_bytes: usize) -> Result<Vec<(&'static str, i32, u32, u32)>> {
    let gpu = gpu(DEVICE)?;
    let mut st = gpu.lock()?;
    let mut modules = HashMap::new();
    for family in Family::ALL {
        modules.insert(family, st.module(gpu, ModuleSpec { family, key_bytes, index_bits: 32 })?);
    }
    let mut out = Vec::new();
    for e in &MANIFEST {
        let module = &modules[&e.family];
        let f = module.cuda_function(e.entry)?;
        let shared = module.dynamic_shared_bytes(e.entry);
        let regs = f.num_regs().map_err(gpu_err("reading registers"))?;
        let blocks = f
            .occupancy_max_active_blocks_per_multiprocessor(module.policy.threads, shared as usize, None)
            .map_err(gpu_err("reading occupancy"))?;
        out.push((e.name, regs, shared, blocks));
    }
    Ok(out)
}

/// Milliseconds of each of `reps` device-to-device copies of `bytes` (after a warm-up).
pub fn time_copy(bytes: usize, reps: usize) -> Result<Vec<f32>> {
    let gpu = gpu(DEVICE)?;
    let _st = gpu.lock()?;
    let s = gpu.cu_stream();
    let (a, b) = (DevBuf::new(bytes)?, DevBuf::new(bytes)?);
    let (e0, e1) = (Event::new()?, Event::new()?);
    // SAFETY: `a` holds `bytes` bytes of this context; the stream is the engine's.
    unsafe { result::memset_d8_async(a.ptr, 0x5a, bytes, s) }.map_err(gpu_err("memset"))?;
    let mut times = Vec::new();
    for r in 0..=reps {
        e0.record(s)?;
        // SAFETY: both allocations hold `bytes` bytes and outlive the copy (the event wait
        // below finishes it).
        unsafe { result::memcpy_dtod_async(b.ptr, a.ptr, bytes, s) }.map_err(gpu_err("copy"))?;
        e1.record(s)?;
        let ms = e0.until(&e1)?;
        if r > 0 {
            times.push(ms);
        }
    }
    Ok(times)
}

/// A pinned host allocation, freed on drop.
struct PinnedBytes(*mut u8);

impl PinnedBytes {
    fn new(bytes: usize) -> Result<PinnedBytes> {
        // SAFETY: a plain pinned allocation in the context bound to this thread.
        let p = unsafe { result::malloc_host(bytes, 0) }.map_err(gpu_err("allocating pinned memory"))?;
        // SAFETY: `p` holds `bytes` writable bytes; filling them makes every byte initialized.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0x5a, bytes) };
        Ok(PinnedBytes(p as *mut u8))
    }
}

impl Drop for PinnedBytes {
    fn drop(&mut self) {
        // SAFETY: allocated by PinnedBytes::new, freed once, after its copies finished.
        unsafe {
            let _ = result::free_host(self.0 as *mut std::ffi::c_void);
        }
    }
}

/// Milliseconds of host-to-device and device-to-host copies of `bytes` from/to pinned
/// memory (the PCIe floor's bandwidth), `reps` each after a warm-up.
pub fn time_pinned(bytes: usize, reps: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    let gpu = gpu(DEVICE)?;
    let _st = gpu.lock()?;
    let s = gpu.cu_stream();
    let d = DevBuf::new(bytes)?;
    let h = PinnedBytes::new(bytes)?;
    let (e0, e1) = (Event::new()?, Event::new()?);
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for r in 0..=reps {
        e0.record(s)?;
        // SAFETY: `h` and `d` both hold `bytes` bytes and outlive the copy (finished by the
        // event wait below); no host reference to `h` exists while it runs.
        unsafe { sys::cuMemcpyHtoDAsync_v2(d.ptr, h.0 as *const _, bytes, s).result() }.map_err(gpu_err("h2d"))?;
        e1.record(s)?;
        let ms = e0.until(&e1)?;
        if r > 0 {
            up.push(ms);
        }
        e0.record(s)?;
        // SAFETY: as above, device to host.
        unsafe { sys::cuMemcpyDtoHAsync_v2(h.0 as *mut _, d.ptr, bytes, s).result() }.map_err(gpu_err("d2h"))?;
        e1.record(s)?;
        let ms = e0.until(&e1)?;
        if r > 0 {
            down.push(ms);
        }
    }
    Ok((up, down))
}

/// [`super::gather_fixed_gpu`] on device 0, also returning the kernels' time in ms (CUDA
/// events around each column's kernels; the host waits for them, so the call itself is
/// slower than an untimed one: time the end to end separately).
pub fn gather_fixed_timed(
    runs: &[arrow::array::RecordBatch],
    perm: &crate::permutation::Permutation,
    columns: &[usize],
) -> Result<(Vec<arrow::array::ArrayRef>, f32)> {
    let mut ms = 0.0;
    let options = super::GpuOptions { devices: crate::Devices::One(DEVICE), ..super::GpuOptions::default() };
    let out = super::gather::gather_timed(runs, perm, columns, &options, super::gather::GatherOutput::Pinned, Some(&mut ms))?;
    Ok((out, ms))
}

/// Milliseconds of each of `reps` uploads of `src` (pageable host memory) to the device
/// through the engine's pinned staging buffers (as the gather and the merge send data up),
/// after a warm-up.
pub fn time_staged_upload(src: &[u8], reps: usize) -> Result<Vec<f32>> {
    let gpu = gpu(DEVICE)?;
    let mut st = gpu.lock()?;
    let s = gpu.cu_stream();
    let d = DevBuf::new(src.len().max(1))?;
    let mut times = Vec::new();
    for r in 0..=reps {
        let t = std::time::Instant::now();
        upload(s, st.staging()?, src, d.ptr)?;
        // SAFETY: the engine's stream.
        unsafe { result::stream::synchronize(s) }.map_err(gpu_err("uploading"))?;
        if r > 0 {
            times.push(t.elapsed().as_secs_f32() * 1000.0);
        }
    }
    Ok(times)
}

/// Milliseconds to allocate (cuMemHostAlloc) and free `bytes` of pinned host memory, the cost
/// the gather's output pool saves after the first call.
pub fn time_pinned_alloc(bytes: usize) -> Result<(f32, f32)> {
    let gpu = gpu(DEVICE)?;
    let _st = gpu.lock()?;
    let t = std::time::Instant::now();
    // SAFETY: a plain pinned allocation in the context bound to this thread, freed below.
    let p = unsafe { result::malloc_host(bytes, 0) }.map_err(gpu_err("allocating pinned memory"))?;
    let alloc = t.elapsed().as_secs_f32() * 1000.0;
    let t = std::time::Instant::now();
    // SAFETY: allocated just above, never used, freed once.
    unsafe { result::free_host(p) }.map_err(gpu_err("freeing pinned memory"))?;
    Ok((alloc, t.elapsed().as_secs_f32() * 1000.0))
}

/// Milliseconds of pinned host-to-device and of device-to-host copies of `bytes` on every
/// device of `devices` at once (threads released together by a barrier; each time is the
/// slowest device's), `reps` each after a warm-up: the PCIe floor of a multi-GPU
/// configuration, each device over its own link.
pub fn time_pinned_on(devices: &[usize], bytes: usize, reps: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    let barrier = std::sync::Barrier::new(devices.len());
    let per_device: Vec<Result<Vec<[f32; 2]>>> = std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .iter()
            .map(|&device| {
                let barrier = &barrier;
                s.spawn(move || {
                    // Every thread takes part in every barrier, also after an error, so none
                    // waits for ever.
                    let setup = (|| -> Result<_> {
                        let gpu = gpu(device)?;
                        let st = gpu.lock()?;
                        Ok((gpu, st, DevBuf::new(bytes)?, PinnedBytes::new(bytes)?))
                    })();
                    let mut times = Vec::new();
                    let mut failure = None;
                    for r in 0..=reps {
                        let mut rep = [0f32; 2];
                        for (dir, t) in rep.iter_mut().enumerate() {
                            barrier.wait();
                            let Ok((gpu, _lock, d, h)) = &setup else { continue };
                            let stream = gpu.cu_stream();
                            let start = std::time::Instant::now();
                            // SAFETY: `h` and `d` both hold `bytes` bytes of this device's
                            // context (bound by the lock held in `setup`) and outlive the copy,
                            // which the synchronize below finishes.
                            let copied = unsafe {
                                if dir == 0 {
                                    sys::cuMemcpyHtoDAsync_v2(d.ptr, h.0 as *const _, bytes, stream).result()
                                } else {
                                    sys::cuMemcpyDtoHAsync_v2(h.0 as *mut _, d.ptr, bytes, stream).result()
                                }
                                .and_then(|()| result::stream::synchronize(stream))
                            };
                            if let Err(e) = copied {
                                failure.get_or_insert(Error::Gpu(format!("CUDA device {device}: copy: {e:?}")));
                            }
                            *t = start.elapsed().as_secs_f32() * 1000.0;
                        }
                        if r > 0 {
                            times.push(rep);
                        }
                    }
                    match (setup, failure) {
                        (Err(e), _) | (Ok(_), Some(e)) => Err(e),
                        (Ok(_), None) => Ok(times),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::Internal("a timing thread panicked".into())))).collect()
    });
    let per_device = per_device.into_iter().collect::<Result<Vec<_>>>()?;
    let slowest = |dir: usize| (0..reps).map(|r| per_device.iter().map(|t| t[r][dir]).fold(0f32, f32::max)).collect();
    Ok((slowest(0), slowest(1)))
}

/// [`super::merge_gpu`] split across `devices`, where an ordinal may repeat (its parts then
/// run one after the other): the split merge on a machine with one GPU, for the tests.
pub fn merge_split_on(keys: &KeyColumn, run_offsets: &[usize], devices: &[usize], options: &super::GpuOptions) -> Result<crate::Indices> {
    nonempty_bounds(keys.len(), run_offsets)?; // the offsets' checks, as merge_gpu makes them
    if devices.is_empty() {
        return Err(Error::InvalidArgument("no device to split the merge across".into()));
    }
    let n = keys.len();
    let wide = n > u32::MAX as usize || options.force_u64_indices;
    let mut out = super::transfer::Output::with_capacity(n, if wide { 8 } else { 4 });
    super::multi::merge_split(keys, run_offsets, devices, options, out.bytes(), wide)?;
    // SAFETY: merge_split returned Ok, so it wrote every byte of `out.bytes()`.
    Ok(unsafe { out.assume_init() })
}

/// [`super::merge_gpu_into`] split across `devices` (an ordinal may repeat, as for
/// [`merge_split_on`]): the registered-memory path of a split merge on one GPU, for the
/// tests.
pub fn merge_split_on_into<I: super::GpuIndex>(
    keys: &KeyColumn,
    run_offsets: &[usize],
    devices: &[usize],
    options: &super::GpuOptions,
    out: &mut [I],
) -> Result<()> {
    nonempty_bounds(keys.len(), run_offsets)?;
    if devices.is_empty() {
        return Err(Error::InvalidArgument("no device to split the merge across".into()));
    }
    super::pinned::check_output_len(out.len(), keys.len())?;
    super::multi::merge_split(keys, run_offsets, devices, options, super::pinned::index_bytes(out), I::WIDE)
}

/// [`super::sort_gpu`] split across `devices` (an ordinal may repeat: one piece a device
/// listed, so the split sort runs on a machine with one GPU too), for the tests.
pub fn sort_split_on(keys: &KeyColumn, devices: &[usize], options: &super::GpuOptions) -> Result<crate::Indices> {
    let n = keys.len();
    let wide = n > u32::MAX as usize || options.force_u64_indices;
    let mut out = super::transfer::Output::with_capacity(n, if wide { 8 } else { 4 });
    sort_split_bytes(keys, devices, options, out.bytes(), wide)?;
    // SAFETY: sort_split_bytes returned Ok, so it wrote every byte of `out.bytes()`.
    Ok(unsafe { out.assume_init() })
}

/// [`super::sort_gpu_into`] split across `devices` (an ordinal may repeat, as for
/// [`sort_split_on`]): the registered-memory path of a split sort on one GPU, for the tests.
pub fn sort_split_on_into<I: super::GpuIndex>(
    keys: &KeyColumn,
    devices: &[usize],
    options: &super::GpuOptions,
    out: &mut [I],
) -> Result<()> {
    super::pinned::check_output_len(out.len(), keys.len())?;
    sort_split_bytes(keys, devices, options, super::pinned::index_bytes(out), I::WIDE)
}

fn sort_split_bytes(
    keys: &KeyColumn,
    devices: &[usize],
    options: &super::GpuOptions,
    dst: &mut [std::mem::MaybeUninit<u8>],
    wide: bool,
) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::InvalidArgument("no device to split the sort across".into()));
    }
    if keys.is_empty() {
        return Ok(());
    }
    super::split_sort::sort_split(keys, devices, options, dst, wide)
}

//! The GPU engine: the co-rank (merge path) kernels of `cuda/`, compiled at run time by
//! NVRTC for the device's compute capability, once per process.
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
//! Host side: keys go up and indices come down through two pinned staging buffers (the host
//! fills one while the other is in flight); the last merge level runs in chunks so the
//! download of each chunk overlaps the merge of the next; the output is mapped (huge pages,
//! other threads) while the keys go up; device buffers are pooled and reused across calls.
//! An input that does not fit in free device memory is refused with [`Error::Gpu`] (the
//! caller merges on the CPU). GPU failures are returned, never panics.

mod build;
mod context;
mod engine;
pub mod tuning;

use crate::keys::KeyColumn;
pub use crate::options::Kernel;
use crate::permutation::Indices;
use crate::{Error, Result};
use build::ModuleSpec;
use context::{gpu, gpu_err};
use cudarc::driver::{result, sys};

impl Kernel {
    /// The concrete kernel for `_nruns` non-empty runs (today the same for every count).
    pub fn resolve(self, _nruns: usize) -> Kernel {
        match self {
            Kernel::Auto => Kernel::Tiled,
            k => k,
        }
    }
}

/// Options of the GPU engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuOptions {
    /// The kernel; the default is the fastest measured (docs/PERFORMANCE.md).
    pub kernel: Kernel,
    /// Overlap the download of the indices with the last merge level (chunked launches).
    pub overlap_download: bool,
    /// Use the u64-index kernels even when the total fits u32 (tests the path that inputs
    /// of more than u32::MAX keys take, at sizes a test can afford).
    pub force_u64_indices: bool,
    /// The CUDA device ordinal.
    pub device: usize,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions { kernel: Kernel::Auto, overlap_download: true, force_u64_indices: false, device: 0 }
    }
}

/// Whether the GPU engine can run here: libcuda and libnvrtc loadable, at least one device.
/// Never panics (cudarc panics when a library is missing, so presence is checked first).
pub fn availability() -> std::result::Result<(), String> {
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("the CUDA driver library (libcuda) is not present".into());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("the NVRTC library (libnvrtc) is not present; put it on LD_LIBRARY_PATH".into());
    }
    match std::panic::catch_unwind(|| {
        result::init().and_then(|_| result::device::get_count())
    }) {
        Ok(Ok(c)) if c > 0 => Ok(()),
        Ok(Ok(_)) => Err("no CUDA device".into()),
        Ok(Err(e)) => Err(format!("CUDA driver: {e:?}")),
        Err(_) => Err("the CUDA driver could not be loaded".into()),
    }
}

/// Compiles every kernel variant for every key width and index width through NVRTC, for
/// `compute_90`, with no GPU needed (CI runs this to catch kernels that do not compile).
pub fn compile_all_kernels() -> Result<()> {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(Error::GpuUnavailable("the NVRTC library (libnvrtc) is not present".into()));
    }
    for spec in ModuleSpec::all() {
        spec.compile("compute_90")?;
    }
    Ok(())
}

/// The name of the GPU the engine uses.
pub fn device_name(device: usize) -> Result<String> {
    let _ = device; // one context today (the GPU host split makes it per device)
    availability().map_err(Error::GpuUnavailable)?;
    Ok(gpu()?.name.clone())
}

/// Checks `run_offsets` against `n` keys and returns the bounds of the non-empty runs.
fn nonempty_bounds(n: usize, run_offsets: &[usize]) -> Result<Vec<u64>> {
    if run_offsets.is_empty() || *run_offsets.last().unwrap() != n || run_offsets[0] != 0 {
        return Err(Error::InvalidArgument(format!(
            "run offsets must start at 0 and end at the key count {n}, got {:?}..{:?}",
            run_offsets.first(),
            run_offsets.last()
        )));
    }
    let mut b = vec![0u64];
    for w in run_offsets.windows(2) {
        if w[1] < w[0] {
            return Err(Error::InvalidArgument("run offsets must not decrease".into()));
        }
        if w[1] > w[0] {
            b.push(w[1] as u64);
        }
    }
    Ok(b)
}

/// Raw bytes of the keys, with the module for their width.
fn key_bytes(keys: &KeyColumn) -> &[u8] {
    fn bytes<T>(v: &[T]) -> &[u8] {
        // Keys are plain integers (or arrays of them): any byte view of them is valid.
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

fn identity(n: usize) -> Indices {
    if n <= u32::MAX as usize {
        Indices::U32((0..n as u32).collect())
    } else {
        Indices::U64((0..n as u64).collect())
    }
}

/// Stable merge of the sorted runs `keys[run_offsets[r]..run_offsets[r + 1]]` on the GPU,
/// returning the global index of every output row, identical to
/// [`crate::engine::cpu::merge_cpu`] (u32 indices while the total fits, u64 beyond).
pub fn merge_gpu(keys: &KeyColumn, run_offsets: &[usize], options: &GpuOptions) -> Result<Indices> {
    let n = keys.len();
    let bounds = nonempty_bounds(n, run_offsets)?;
    availability().map_err(Error::GpuUnavailable)?;
    if bounds.len() <= 2 {
        return Ok(identity(n)); // zero or one non-empty run: already in order
    }
    let wide = n > u32::MAX as usize || options.force_u64_indices;
    let spec = ModuleSpec { key_bytes: keys.key_bytes(), index_bits: if wide { 64 } else { 32 } };
    let gpu = gpu()?;
    gpu.bind()?;
    let mut st = gpu.state.lock().unwrap_or_else(|p| p.into_inner());
    let kernel = options.kernel.resolve(bounds.len() - 1);
    let levels = engine::plan(kernel, spec.key_bytes, bounds);
    let options = &GpuOptions { kernel, ..options.clone() };
    let res = merge_with_state(gpu, &mut st, spec, options, n, keys, &levels);
    if res.is_err() {
        // Leave a clean state for the next call: finish or abandon what was queued.
        unsafe {
            let _ = result::stream::synchronize(gpu.cu_stream());
        }
        st.release();
    }
    res
}

fn merge_with_state(
    gpu: &context::Gpu,
    st: &mut context::State,
    spec: ModuleSpec,
    options: &GpuOptions,
    n: usize,
    keys: &KeyColumn,
    levels: &[engine::LevelPlan],
) -> Result<Indices> {
    let module = st.module(gpu, spec)?;
    // Refuse what cannot fit (the pool's own buffers count as free: they are reused).
    let need = engine::device_bytes(spec, n, levels);
    let (free, _) = result::mem_get_info().map_err(gpu_err("reading free device memory"))?;
    let have = free + st.pooled_bytes();
    if need > have {
        return Err(Error::Gpu(format!(
            "the merge of {n} keys needs {need} bytes of device memory, {have} are available; merge on the CPU"
        )));
    }
    if need > free + st.slot_bytes(context::Slot::Keys0) && st.pooled_bytes() > 0 {
        st.release(); // start over rather than fragment
    }
    let src = key_bytes(keys);
    let keys0 = st.buffer(context::Slot::Keys0, src.len())?;
    // The output is a fresh allocation: its first touch costs a page fault per 4 KiB, which
    // slowed the download's drain copies (2^28 indices: 95 ms for the whole host path with
    // them, 77 ms without, on the H200 host). Other threads map it with huge pages while the
    // keys go up and the merge runs.
    let ib = spec.index_bytes();
    let mut out = Output::with_capacity(n, ib);
    let dl = gpu.ctx.new_stream().map_err(gpu_err("creating a stream"))?;
    let nchunks = if options.overlap_download { tuning::DOWNLOAD_CHUNKS } else { 0 };
    let events: Vec<sys::CUevent> = (0..nchunks)
        .map(|_| result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .collect::<std::result::Result<_, _>>()
        .map_err(gpu_err("creating events"))?;
    let res = (|| -> Result<()> {
        let dst = out.bytes_mut();
        let (idx, ends) = std::thread::scope(|scope| {
            prefault(scope, &mut *dst);
            engine::upload(gpu, st, src, keys0)?;
            engine::run_levels(gpu, st, &module, spec, options.kernel, n, levels, keys0, &events)
        })?;
        engine::download(gpu, st, idx, dst, ib, dl.cu_stream(), &events, &ends)?;
        dl.synchronize().map_err(gpu_err("finishing the download"))?;
        Ok(())
    })();
    for e in events {
        unsafe {
            let _ = result::event::destroy(e);
        }
    }
    res?;
    // Every byte was written by the download.
    Ok(unsafe { out.assume_filled() })
}

/// The `n` indices the download fills: u32 or u64, allocated but not yet initialized.
enum Output {
    U32(Vec<u32>, usize),
    U64(Vec<u64>, usize),
}

impl Output {
    fn with_capacity(n: usize, index_bytes: usize) -> Output {
        if index_bytes == 4 {
            Output::U32(Vec::with_capacity(n), n)
        } else {
            Output::U64(Vec::with_capacity(n), n)
        }
    }

    /// The `n` elements as bytes. Their contents are unspecified until written (only
    /// written here, never read before the download fills them).
    fn bytes_mut(&mut self) -> &mut [u8] {
        unsafe {
            match self {
                Output::U32(v, n) => std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, *n * 4),
                Output::U64(v, n) => std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, *n * 8),
            }
        }
    }

    /// Safety: all `n` elements have been written.
    unsafe fn assume_filled(self) -> Indices {
        match self {
            Output::U32(mut v, n) => {
                v.set_len(n);
                Indices::U32(v)
            }
            Output::U64(mut v, n) => {
                v.set_len(n);
                Indices::U64(v)
            }
        }
    }
}

/// Maps `buf` with transparent huge pages and touches one byte per page on a few threads of
/// `scope` (joined when the scope ends), so its page faults are taken there and then rather
/// than during the download. Does nothing where THP is off or for small buffers.
fn prefault<'s>(scope: &'s std::thread::Scope<'s, '_>, buf: &'s mut [u8]) {
    const PAGE: usize = 4096;
    const PREFAULT_THREADS: usize = 4;
    const HUGE: usize = 2 << 20;
    if buf.len() < (64 << 20) {
        return; // small outputs: not worth a thread
    }
    // Only with transparent huge pages: 4 threads taking 4 KiB faults slow the upload down
    // more than they save (measured on the H200 host: 142 ms against 95 ms without).
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !(thp.contains("[always]") || thp.contains("[madvise]")) {
        return;
    }
    // 2 MiB pages for the 2 MiB-aligned interior: 512 times fewer faults.
    let start = (buf.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (buf.as_ptr() as usize + buf.len()) / HUGE * HUGE;
    if end <= start || unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) } != 0 {
        return;
    }
    let per = buf.len().div_ceil(PREFAULT_THREADS).next_multiple_of(PAGE);
    for part in buf.chunks_mut(per) {
        scope.spawn(move || {
            for off in (0..part.len()).step_by(PAGE) {
                // Volatile: a plain store of a value nobody reads could be dropped.
                unsafe { std::ptr::write_volatile(part.as_mut_ptr().add(off), 0) };
            }
        });
    }
}

/// Timings for the benchmark (device-resident data, CUDA events). Not a stable API.
#[doc(hidden)]
pub mod bench {
    use super::*;

    /// Milliseconds of each of `reps` merges of `keys` already on the device (uploaded once;
    /// timed from the first kernel to the last, with events), after one warm-up merge.
    pub fn time_device_merge(keys: &KeyColumn, run_offsets: &[usize], kernel: Kernel, reps: usize) -> Result<Vec<f32>> {
        let n = keys.len();
        let bounds = nonempty_bounds(n, run_offsets)?;
        availability().map_err(Error::GpuUnavailable)?;
        let spec = ModuleSpec { key_bytes: keys.key_bytes(), index_bits: if n <= u32::MAX as usize { 32 } else { 64 } };
        let gpu = gpu()?;
        gpu.bind()?;
        let mut st = gpu.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *st;
        let module = st.module(gpu, spec)?;
        let kernel = kernel.resolve(bounds.len() - 1);
        let levels = engine::plan(kernel, spec.key_bytes, bounds);
        let src = key_bytes(keys);
        let keys0 = st.buffer(context::Slot::Keys0, src.len())?;
        engine::upload(gpu, st, src, keys0)?;
        let (e0, e1) = (timing_event()?, timing_event()?);
        let mut times = Vec::new();
        for r in 0..=reps {
            unsafe { result::event::record(e0, gpu.cu_stream()) }.map_err(gpu_err("event"))?;
            engine::run_levels(gpu, st, &module, spec, kernel, n, &levels, keys0, &[])?;
            unsafe { result::event::record(e1, gpu.cu_stream()) }.map_err(gpu_err("event"))?;
            unsafe { result::event::synchronize(e1) }.map_err(gpu_err("running the merge"))?;
            if r > 0 {
                times.push(unsafe { result::event::elapsed(e0, e1) }.map_err(gpu_err("event"))?);
            }
        }
        Ok(times)
    }

    /// Per entry point of the module for `key_bytes`-byte keys and u32 indices: registers
    /// per thread, dynamic shared bytes per block and resident blocks per multiprocessor.
    pub fn kernel_report(key_bytes: usize) -> Result<Vec<(&'static str, i32, u32, u32)>> {
        availability().map_err(Error::GpuUnavailable)?;
        let spec = ModuleSpec { key_bytes, index_bits: 32 };
        let gpu = gpu()?;
        gpu.bind()?;
        let mut st = gpu.state.lock().unwrap_or_else(|p| p.into_inner());
        let module = st.module(gpu, spec)?;
        let mut out = Vec::new();
        for name in build::FUNCTIONS {
            let f = &module.functions[name];
            let shmem = if name.starts_with("merge_tiled") {
                engine::dynamic_shmem(Kernel::Tiled, key_bytes, 4)
            } else if name == "merge_kway" {
                engine::dynamic_shmem(Kernel::KWay, key_bytes, 4)
            } else {
                0
            };
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shmem as i32,
            )
            .map_err(gpu_err("raising the shared-memory limit"))?;
            let regs = f.num_regs().map_err(gpu_err("reading registers"))?;
            let blocks = f
                .occupancy_max_active_blocks_per_multiprocessor(
                    tuning::THREADS,
                    shmem as usize,
                    None,
                )
                .map_err(gpu_err("reading occupancy"))?;
            out.push((name, regs, shmem, blocks));
        }
        Ok(out)
    }

    fn timing_event() -> Result<sys::CUevent> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(gpu_err("creating an event"))
    }

    /// Milliseconds of each of `reps` device-to-device copies of `bytes` (after a warm-up).
    pub fn time_copy(bytes: usize, reps: usize) -> Result<Vec<f32>> {
        availability().map_err(Error::GpuUnavailable)?;
        let gpu = gpu()?;
        gpu.bind()?;
        let s = gpu.cu_stream();
        unsafe {
            let a = result::malloc_sync(bytes).map_err(gpu_err("alloc"))?;
            let b = result::malloc_sync(bytes).map_err(gpu_err("alloc"))?;
            result::memset_d8_async(a, 0x5a, bytes, s).map_err(gpu_err("memset"))?;
            let (e0, e1) = (timing_event()?, timing_event()?);
            let mut times = Vec::new();
            for r in 0..=reps {
                result::event::record(e0, s).map_err(gpu_err("event"))?;
                result::memcpy_dtod_async(b, a, bytes, s).map_err(gpu_err("copy"))?;
                result::event::record(e1, s).map_err(gpu_err("event"))?;
                result::event::synchronize(e1).map_err(gpu_err("copy"))?;
                if r > 0 {
                    times.push(result::event::elapsed(e0, e1).map_err(gpu_err("event"))?);
                }
            }
            let _ = result::free_sync(a);
            let _ = result::free_sync(b);
            Ok(times)
        }
    }

    /// Milliseconds of host-to-device and device-to-host copies of `bytes` from/to pinned
    /// memory (the PCIe floor's bandwidth), `reps` each after a warm-up.
    pub fn time_pinned(bytes: usize, reps: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        availability().map_err(Error::GpuUnavailable)?;
        let gpu = gpu()?;
        gpu.bind()?;
        let s = gpu.cu_stream();
        unsafe {
            let d = result::malloc_sync(bytes).map_err(gpu_err("alloc"))?;
            let h = result::malloc_host(bytes, 0).map_err(gpu_err("alloc pinned"))? as *mut u8;
            std::ptr::write_bytes(h, 0x5a, bytes);
            let hs = std::slice::from_raw_parts_mut(h, bytes);
            let (e0, e1) = (timing_event()?, timing_event()?);
            let (mut up, mut down) = (Vec::new(), Vec::new());
            for r in 0..=reps {
                result::event::record(e0, s).map_err(gpu_err("event"))?;
                result::memcpy_htod_async(d, &*hs, s).map_err(gpu_err("h2d"))?;
                result::event::record(e1, s).map_err(gpu_err("event"))?;
                result::event::synchronize(e1).map_err(gpu_err("h2d"))?;
                if r > 0 {
                    up.push(result::event::elapsed(e0, e1).map_err(gpu_err("event"))?);
                }
                result::event::record(e0, s).map_err(gpu_err("event"))?;
                result::memcpy_dtoh_async(&mut *hs, d, s).map_err(gpu_err("d2h"))?;
                result::event::record(e1, s).map_err(gpu_err("event"))?;
                result::event::synchronize(e1).map_err(gpu_err("d2h"))?;
                if r > 0 {
                    down.push(result::event::elapsed(e0, e1).map_err(gpu_err("event"))?);
                }
            }
            let _ = result::free_host(h as *mut _);
            let _ = result::free_sync(d);
            Ok((up, down))
        }
    }
}

//! The GPU engine's process-wide state, all of it here: one [`Runtime`] value ([`runtime`])
//! whose fields are every context, pool, cache and registry that outlives a call, each with
//! its invariant. The code that reads and writes a field stays with its concept (`context`
//! creates the contexts and runs the warm-ups, `pinned` registers host memory, `split_sort`
//! enables peer access, `tuning` owns the overrides); the gather's two pools, which no other
//! module uses, are implemented here ([`PinnedBlock`], [`Runtime::gather_buffer`]).
//!
//! Not here, because they hold no GPU state: `kernel_cache::write_entry`'s sequence number
//! (it only names temporary files) and the flag that logs a kernel cache that cannot be
//! written at warn level once a process; `transfer::advise_huge_pages`'s read of the
//! kernel's transparent huge page setting, cached; and the tests' lock of the warm-up count
//! (`context::WARM_UP_TESTS`).

use super::context::{gpu, gpu_err, Gpu};
use super::launch::DevPtr;
use super::tuning::{Overrides, PINNED_POOL_BYTES};
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, OnceLock};

/// The process's GPU state. Every field is created empty at start-up (the value is a
/// `static`, built by a `const fn`: nothing to initialize lazily but the device list) and
/// lives for the process; no field is ever reset.
pub(crate) struct Runtime {
    /// Per CUDA device ordinal, its context once created (or why it could not be), the
    /// device count read once, on first use (`context::gpu`). A created context is never
    /// destroyed: pinned blocks and registered memory of any device may be freed at any time
    /// by binding it.
    pub(super) devices: OnceLock<std::result::Result<DeviceSlots, String>>,
    /// The warm-ups' bookkeeping (`context::warm_up`).
    pub(super) warm_ups: WarmUps,
    /// Freed pinned output blocks of the device gather kept for reuse ([`PinnedBlock`]):
    /// at most [`PINNED_POOL_BYTES`], the rest freed.
    pinned_pool: Mutex<PinnedPool>,
    /// The device gather's device buffer, at most one per device: grown when a call needs
    /// more, kept across calls. Used only by the holder of the device's gather lane
    /// (`Gpu::lock_gather_lane`), so no two gathers share it.
    gather_buffers: Mutex<Vec<DevHeld>>,
    /// Host ranges registered with the driver: (start address, length in bytes). A range is
    /// here exactly while its memory is registered (`pinned::Registered`).
    pub(super) registry: Mutex<Vec<(usize, usize)>>,
    /// Pairs of devices (from, to) whose peer access was asked for once already
    /// (`split_sort::enable_peer_access`): granted, refused or unsupported, never asked again.
    pub(super) peer_access: Mutex<Vec<(sys::CUdevice, sys::CUdevice)>>,
    /// The policy overrides in force (`tuning::set_overrides`), fixed once a module was
    /// built with them.
    pub(super) overrides: Mutex<Overrides>,
    /// Kernel sources replacing the built-in ones (`tuning::set_kernel_source_dir`): (file
    /// name, text); set only before the first module is built.
    pub(super) kernel_sources: Mutex<Option<Vec<(&'static str, String)>>>,
}

/// Per device ordinal, the context once created (or why it could not be).
pub(super) type DeviceSlots = Vec<OnceLock<std::result::Result<Gpu, String>>>;

/// What the warm-ups (`context::warm_up`) have started, so that nothing is done twice.
pub(super) struct WarmUps {
    /// Warm-up threads not yet finished, of every device (`context::WarmUpInFlight` counts
    /// one from before its thread is spawned until the thread ends).
    pub(super) in_flight: AtomicUsize,
    /// The devices whose warm-up (context and cached modules) was started: once a process.
    pub(super) started: Mutex<Vec<usize>>,
    /// The devices whose staging buffers a warm-up pinned: once a process.
    pub(super) staged: Mutex<Vec<usize>>,
}

static RUNTIME: Runtime = Runtime {
    devices: OnceLock::new(),
    warm_ups: WarmUps { in_flight: AtomicUsize::new(0), started: Mutex::new(Vec::new()), staged: Mutex::new(Vec::new()) },
    pinned_pool: Mutex::new(PinnedPool { free: Vec::new(), bytes: 0 }),
    gather_buffers: Mutex::new(Vec::new()),
    registry: Mutex::new(Vec::new()),
    peer_access: Mutex::new(Vec::new()),
    overrides: Mutex::new(Overrides::NONE),
    kernel_sources: Mutex::new(None),
};

/// The process's GPU state.
pub(crate) fn runtime() -> &'static Runtime {
    &RUNTIME
}

/// Locks `m`, taking the value over from a thread that panicked holding it (every field's
/// invariant holds between statements that change it).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------
// Pinned output memory of the device gather.

/// Freed pinned blocks kept for reuse: (device, size class, address).
struct PinnedPool {
    free: Vec<(usize, usize, usize)>,
    bytes: usize,
}

/// The size a request of `bytes` is allocated as: a multiple of 2 MiB, then of an eighth of
/// its power of two (at most 1/8 wasted), so similar requests share blocks.
fn size_class(bytes: usize) -> usize {
    let b = bytes.max(1).next_multiple_of(2 << 20);
    let step = (b.next_power_of_two() / 8).max(2 << 20);
    b.next_multiple_of(step)
}

/// A pinned host block owning its memory: the owner of the Arrow buffers made from it.
pub(super) struct PinnedBlock {
    pub(super) ptr: NonNull<u8>,
    /// Its size class (what was allocated).
    bytes: usize,
    device: usize,
}

// SAFETY: the block is plain host memory (page-locked) that this value owns alone; no
// thread-affine state is attached to it, and after construction it is only read (through
// the Arrow buffers, which are immutable), so sharing and sending it across threads is
// sound. Dropping it on any thread only returns it to the pool or frees it (see Drop).
unsafe impl Send for PinnedBlock {}
// SAFETY: as above: shared access is read-only.
unsafe impl Sync for PinnedBlock {}

impl PinnedBlock {
    /// A block of at least `bytes` for device `device`'s context (bound to this thread):
    /// from the pool when it holds one of the size class, else newly allocated.
    pub(super) fn new(device: usize, bytes: usize) -> Result<PinnedBlock> {
        let class = size_class(bytes);
        {
            let mut pool = lock(&RUNTIME.pinned_pool);
            // The smallest free block that fits, up to twice the size class: rounds of
            // similar sizes reuse each other's blocks instead of allocating (a cold pinned
            // allocation is slow: the driver locks and maps every page).
            let fits = pool.free.iter().enumerate().filter(|(_, &(d, b, _))| d == device && b >= class && b <= 2 * class);
            if let Some(i) = fits.min_by_key(|(_, &(_, b, _))| b).map(|(i, _)| i) {
                let (_, bytes, addr) = pool.free.swap_remove(i);
                pool.bytes -= bytes;
                if let Some(ptr) = NonNull::new(addr as *mut u8) {
                    return Ok(PinnedBlock { ptr, bytes, device });
                }
            }
        }
        // SAFETY: a plain pinned allocation (portable: valid in every context) in the context
        // bound to this thread; owned by the returned block, which frees or pools it.
        let p = unsafe { result::malloc_host(class, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .map_err(|e| Error::Gpu(format!("allocating {class} bytes of pinned memory: {e:?}")))?;
        let ptr = NonNull::new(p as *mut u8).ok_or_else(|| Error::Gpu("cuMemHostAlloc returned null".into()))?;
        Ok(PinnedBlock { ptr, bytes: class, device })
    }

    pub(super) fn addr(&self, offset: usize) -> *mut c_void {
        debug_assert!(offset <= self.bytes);
        // SAFETY: within the block (callers place their ranges inside it).
        unsafe { self.ptr.as_ptr().add(offset) as *mut c_void }
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        {
            let mut pool = lock(&RUNTIME.pinned_pool);
            if pool.bytes + self.bytes <= PINNED_POOL_BYTES {
                pool.bytes += self.bytes;
                pool.free.push((self.device, self.bytes, self.ptr.as_ptr() as usize));
                return;
            }
        }
        // SAFETY: the block came from cuMemHostAlloc and is freed once, here; no copy writes
        // it any more (a block reaches its owners only after its download finished, and the
        // error path finishes every copy before dropping blocks). The driver wants a current
        // context: the device's, bound first (the context lives for the process).
        unsafe {
            if let Ok(g) = gpu(self.device) {
                let _ = g.bind();
            }
            let _ = result::free_host(self.ptr.as_ptr() as *mut c_void);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Device memory of the device gather: one buffer per device, grown when a call needs more,
// kept across calls.

struct DevHeld {
    device: usize,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Runtime {
    /// A device buffer of at least `bytes` on `device`, whose context is bound to this
    /// thread and whose gather lane the caller holds locked (so no other gather uses the
    /// buffer meanwhile).
    pub(super) fn gather_buffer(&self, device: usize, bytes: usize) -> Result<DevPtr> {
        let mut held = lock(&self.gather_buffers);
        if let Some(h) = held.iter().find(|h| h.device == device && h.bytes >= bytes) {
            return Ok(h.ptr);
        }
        if let Some(i) = held.iter().position(|h| h.device == device) {
            // Queued work of an earlier call may still read it: finish, then free.
            result::ctx::synchronize().map_err(gpu_err("waiting for the device"))?;
            let h = held.swap_remove(i);
            // SAFETY: allocated below in this context, freed once; the device is idle.
            unsafe {
                let _ = result::free_sync(h.ptr);
            }
        }
        let (free, _) = result::mem_get_info().map_err(gpu_err("reading free device memory"))?;
        if bytes > free {
            return Err(Error::Gpu(format!("the gather needs {bytes} bytes of device memory, {free} are free; gather on the CPU")));
        }
        // SAFETY: a plain allocation in the context bound to this thread, kept in
        // `gather_buffers`.
        let ptr =
            unsafe { result::malloc_sync(bytes) }.map_err(|e| Error::Gpu(format!("allocating {bytes} bytes of device memory: {e:?}")))?;
        held.push(DevHeld { device, ptr, bytes });
        Ok(ptr)
    }

    /// Frees `device`'s gather buffer (the caller holds the gather lane, the device is idle).
    pub(super) fn release_gather_buffer(&self, device: usize) {
        let mut held = lock(&self.gather_buffers);
        if let Some(i) = held.iter().position(|h| h.device == device) {
            let _ = result::ctx::synchronize();
            let h = held.swap_remove(i);
            // SAFETY: allocated by gather_buffer in this context (bound: the caller holds the
            // lane), freed once; the device is idle.
            unsafe {
                let _ = result::free_sync(h.ptr);
            }
        }
    }

    /// Bytes of `device`'s gather buffer (0 without one).
    pub(super) fn gather_buffer_bytes(&self, device: usize) -> usize {
        lock(&self.gather_buffers).iter().filter(|h| h.device == device).map(|h| h.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_cover_and_waste_little() {
        for bytes in [0, 1, 4096, 2 << 20, (2 << 20) + 1, 100 << 20, 1 << 30, (1 << 30) + 1, 3_000_000_000] {
            let c = size_class(bytes);
            assert!(c >= bytes && c.is_multiple_of(2 << 20), "{bytes} -> {c}");
            assert!(c as f64 <= (bytes.max(2 << 20) as f64) * 1.25 + (2 << 20) as f64, "{bytes} -> {c}");
        }
    }
}

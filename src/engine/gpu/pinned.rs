//! Host memory registered with the CUDA driver (page-locked) for as long as a
//! [`Registered`] owns it, so that the engine's transfers copy straight from or into it
//! (DMA) instead of through the pinned staging buffers.
//!
//! Through the staging buffers every key crosses host memory three times on its way up
//! (read by the host's copy, written into the buffer, read by the DMA) and every index
//! three times on its way down, and a fresh output's pages are faulted in, so host memory
//! bandwidth, not PCIe, bounds the host path, most of all with several GPUs (measured in
//! `docs/performance.md`). Registered keys and a registered output cross it once each.
//!
//! Registering costs about what pinning does (the driver locks and maps every page), so it
//! pays for memory that is reused across merges: a pipeline's key buffer and output, not a
//! one-off merge's. Invariants, enforced here:
//! - a registered range is in the runtime's registry
//!   ([`Runtime::registry`](super::runtime::Runtime)) exactly while its memory is registered, and its
//!   owner ([`Registered`]) never lets the memory move or be freed meanwhile: it hands out
//!   shared references to the value and mutable ones to its elements only (no `Vec`
//!   method that could reallocate);
//! - the transfers ([`super::transfer`]) copy directly only from and into memory that
//!   [`is_registered`] covers entirely, and every copy is finished before the merge
//!   returns, successfully or not (`merge::merge_part` synchronizes the context on errors),
//!   so a `Registered` cannot be dropped while a DMA uses it: the merge borrows it.

use super::context::{gpu, gpu_err};
use super::runtime::{lock, runtime};
use crate::keys::KeyColumn;
use crate::{Error, Result};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::ops::Deref;

/// Whether `len` bytes from `ptr` lie inside one registered range (an empty range never
/// does: it has nothing to copy).
pub(crate) fn is_registered(ptr: *const u8, len: usize) -> bool {
    let (start, end) = (ptr as usize, ptr as usize + len);
    len > 0 && lock(&runtime().registry).iter().any(|&(s, l)| s <= start && end <= s + l)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for Vec<u32> {}
    impl Sealed for Vec<u64> {}
    impl Sealed for crate::keys::KeyColumn {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A value whose data lives in one heap allocation that does not move while the value is
/// only read: the key words of a merge, or an output of indices.
pub trait HostMemory: sealed::Sealed {
    /// The data's address and length in bytes.
    fn host_bytes(&self) -> (*const u8, usize);
}

impl HostMemory for Vec<u32> {
    fn host_bytes(&self) -> (*const u8, usize) {
        (self.as_ptr() as *const u8, std::mem::size_of_val(self.as_slice()))
    }
}

impl HostMemory for Vec<u64> {
    fn host_bytes(&self) -> (*const u8, usize) {
        (self.as_ptr() as *const u8, std::mem::size_of_val(self.as_slice()))
    }
}

impl HostMemory for KeyColumn {
    fn host_bytes(&self) -> (*const u8, usize) {
        let bytes = super::merge::key_bytes(self);
        (bytes.as_ptr(), bytes.len())
    }
}

/// An index the GPU engine can write into caller memory ([`super::merge_gpu_into`]): `u32`,
/// or `u64` (wide indices). [`Registered`] has an example.
pub trait GpuIndex: sealed::Sealed + Copy + Send + Sync + 'static {
    /// Whether this is the 64-bit index.
    const WIDE: bool;
}

impl GpuIndex for u32 {
    const WIDE: bool = false;
}

impl GpuIndex for u64 {
    const WIDE: bool = true;
}

/// `value`'s data registered with the CUDA driver (page-locked, for every device's
/// context) until this is dropped or [`Registered::into_inner`] is called. Merges read
/// registered keys and write registered outputs by DMA, with no staging copy.
///
/// ```no_run
/// # fn main() -> corank::Result<()> {
/// use corank::gpu::{merge_gpu_into, GpuOptions, Registered};
/// use corank::KeyColumn;
/// let keys = Registered::new(KeyColumn::U64(vec![1, 3, 5, 2, 4, 6]))?;
/// let mut out = Registered::new(vec![0u32; 6])?;
/// merge_gpu_into(&keys, &[0, 3, 6], &GpuOptions::default(), out.as_mut_slice())?;
/// assert_eq!(&out[..], &[0, 3, 1, 4, 2, 5]);
/// # Ok(())
/// # }
/// ```
pub struct Registered<T: HostMemory> {
    value: T,
    /// The registered range; `None` for empty data (nothing registered).
    range: Option<(usize, usize)>,
}

impl<T: HostMemory> Registered<T> {
    /// Registers `value`'s data (with the context of device 0 bound to this thread: the
    /// registration is portable, valid in every device's context). Takes about as long as
    /// pinning as much memory: the driver locks and maps every page.
    pub fn new(value: T) -> Result<Self> {
        let (ptr, len) = value.host_bytes();
        if len == 0 {
            return Ok(Registered { value, range: None });
        }
        gpu(0)?.bind()?;
        // SAFETY: [ptr, ptr + len) is the live data of `value`, which this struct owns and
        // never lets move or be freed until it is unregistered (Drop, into_inner).
        unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, len, sys::CU_MEMHOSTREGISTER_PORTABLE) }
            .result()
            .map_err(gpu_err("registering host memory"))?;
        lock(&runtime().registry).push((ptr as usize, len));
        Ok(Registered { value, range: Some((ptr as usize, len)) })
    }

    /// Unregisters the data and returns the value.
    pub fn into_inner(mut self) -> T {
        self.unregister();
        // SAFETY: `self` is not used after this read, and it is forgotten, so `value` is
        // neither dropped twice nor unregistered twice.
        let value = unsafe { std::ptr::read(&self.value) };
        std::mem::forget(self);
        value
    }

    fn unregister(&mut self) {
        let Some((ptr, len)) = self.range.take() else { return };
        lock(&runtime().registry).retain(|&r| r != (ptr, len));
        // The context that registered it may not be bound on this thread: any will do (the
        // registration is portable), and a failure to bind leaves the pages locked until the
        // process ends rather than panicking in a destructor.
        if gpu(0).and_then(|g| g.bind()).is_ok() {
            // SAFETY: `ptr` was registered by `new` and is unregistered once, here; no copy
            // uses it (every merge that borrowed it has returned).
            let r = unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) };
            if r != sys::CUresult::CUDA_SUCCESS {
                log::warn!("corank: unregistering {len} bytes of host memory: {r:?}");
            }
        }
    }
}

impl<I: GpuIndex> Registered<Vec<I>>
where
    Vec<I>: HostMemory,
{
    /// The elements, to write (the `Vec` itself stays out of reach: growing it would move
    /// the registered data).
    pub fn as_mut_slice(&mut self) -> &mut [I] {
        self.value.as_mut_slice()
    }
}

impl<T: HostMemory> Deref for Registered<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: HostMemory> Drop for Registered<T> {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl<T: HostMemory + std::fmt::Debug> std::fmt::Debug for Registered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered").field("bytes", &self.range.map_or(0, |(_, l)| l)).finish_non_exhaustive()
    }
}

/// `out`'s memory as the bytes a merge writes its indices into.
pub(crate) fn index_bytes<I: GpuIndex>(out: &mut [I]) -> &mut [std::mem::MaybeUninit<u8>] {
    // SAFETY: I is u32 or u64 (sealed): any bytes the merge writes make valid values, and
    // the view covers exactly `out`, borrowed mutably for the result's lifetime.
    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>, std::mem::size_of_val(out)) }
}

/// `out.len()` must be `n`: the caller's output of a merge or sort into caller memory.
pub(crate) fn check_output_len(out: usize, n: usize) -> Result<()> {
    if out != n {
        return Err(Error::InvalidArgument(format!("the output holds {out} indices for {n} keys")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range is covered only inside one registered range, and never when empty.
    #[test]
    fn registered_ranges_cover_only_what_they_hold() {
        let data = vec![0u8; 4096];
        let p = data.as_ptr();
        runtime().registry.lock().unwrap().push((p as usize + 1024, 2048));
        let at = |o: usize| p.wrapping_add(o); // addresses only, never read
        assert!(is_registered(at(1024), 2048));
        assert!(is_registered(at(2000), 10));
        assert!(!is_registered(at(1023), 10), "starts before the range");
        assert!(!is_registered(at(3000), 100), "ends past the range");
        assert!(!is_registered(at(2000), 0), "empty");
        assert!(!is_registered(at(0), 4096), "larger than the range");
        runtime().registry.lock().unwrap().retain(|&(s, _)| s != p as usize + 1024);
        assert!(!is_registered(at(1024), 2048));
    }
}

//! Host transfers: keys up, indices down, through two pinned staging buffers (the host
//! fills or drains one while the other is in flight), and the output the download fills.
//! Host memory registered with the driver ([`super::pinned`]) skips the staging buffers:
//! the DMA reads the keys and writes the indices there directly.
//!
//! Invariants, enforced here:
//! - a staging buffer is handed to the host ([`Staging::host_buffer`]) only after the
//!   last copy that used it has finished (its event), and every copy queued from or into it
//!   records that event right after;
//! - the output's memory is never viewed as initialized before the download wrote it: it is
//!   `MaybeUninit` until [`Output::assume_init`], which the caller may call only once every
//!   element has been written.

use super::context::gpu_err;
use super::launch::DevPtr;
use super::pinned::is_registered;
use super::plan::chunk_of;
use super::tuning::STAGE_BYTES;
use crate::permutation::Indices;
use crate::Result;
use cudarc::driver::{result, sys};
use rayon::prelude::*;
use std::ffi::c_void;
use std::mem::{size_of_val, MaybeUninit};

/// A pinned host allocation of `bytes` (none while 0), freed on drop.
struct Pinned {
    ptr: *mut u8,
    bytes: usize,
}

impl Pinned {
    const NONE: Pinned = Pinned { ptr: std::ptr::null_mut(), bytes: 0 };

    fn new(bytes: usize) -> Result<Pinned> {
        // SAFETY: a plain pinned allocation in the context bound to this thread; owned by the
        // returned value, which frees it.
        let ptr = unsafe { result::malloc_host(bytes, 0) }.map_err(gpu_err("allocating pinned memory"))?;
        Ok(Pinned { ptr: ptr as *mut u8, bytes })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        // SAFETY: `ptr` came from malloc_host and is freed once; Staging drops (or replaces)
        // its buffers only when no copy uses them (it waits for their events first; its
        // owner is the device state, kept for the process, and every merge waits for its
        // copies before returning).
        unsafe {
            let _ = result::free_host(self.ptr as *mut c_void);
        }
    }
}

/// The two pinned staging buffers and, per buffer, the event of the last copy that used it.
/// They start empty and grow to what a transfer needs, up to `STAGE_BYTES` each
/// ([`Staging::reserve`]): pinning and unpinning are slow (the driver locks and maps every
/// page), so a small merge pins a few MiB, not 128.
pub(crate) struct Staging {
    bufs: [Pinned; 2],
    events: [sys::CUevent; 2],
}

/// Smallest size a staging buffer grows to.
const MIN_STAGE_BYTES: usize = 1 << 20;

impl Staging {
    pub fn new() -> Result<Staging> {
        let event = || result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(gpu_err("creating an event"));
        let first = event()?;
        let second = match event() {
            Ok(e) => e,
            Err(err) => {
                // SAFETY: created just above, never recorded or shared.
                unsafe {
                    let _ = result::event::destroy(first);
                }
                return Err(err);
            }
        };
        Ok(Staging { bufs: [Pinned::NONE, Pinned::NONE], events: [first, second] })
    }

    /// Grows both buffers to hold the pieces of a transfer of `total` bytes
    /// (`min(total, STAGE_BYTES)`, rounded up to a power of two, at least 1 MiB), once
    /// the copies that used them have finished. Every transfer calls it first, so its
    /// pieces (at most `STAGE_BYTES`, at most `total`) always fit.
    pub fn reserve(&mut self, total: usize) -> Result<()> {
        if total == 0 {
            return Ok(());
        }
        let want = total.min(STAGE_BYTES).next_power_of_two().clamp(MIN_STAGE_BYTES, STAGE_BYTES);
        for s in 0..2 {
            if self.bufs[s].bytes >= want {
                continue;
            }
            // SAFETY: a valid event of this context (an unrecorded event counts as complete).
            unsafe { result::event::synchronize(self.events[s]) }.map_err(gpu_err("waiting for a copy"))?;
            // The old buffer is freed (no copy uses it any more) before the new one is pinned.
            self.bufs[s] = Pinned::NONE;
            self.bufs[s] = Pinned::new(want)?;
        }
        Ok(())
    }

    /// Buffer `s` for the host to fill or drain, its first `len` bytes, once the last copy
    /// that used it has finished.
    fn host_buffer(&mut self, s: usize, len: usize) -> Result<&mut [MaybeUninit<u8>]> {
        assert!(len <= self.bufs[s].bytes, "a transfer piece larger than its staging buffer (reserve first)");
        // SAFETY: a valid event of this context (recorded or not: an unrecorded event counts
        // as complete).
        unsafe { result::event::synchronize(self.events[s]) }.map_err(gpu_err("waiting for a copy"))?;
        // SAFETY: the buffer is a live pinned allocation of at least len bytes; no copy
        // uses it any more (its event has completed) and `&mut self` keeps the host from
        // queueing another while the view lives. MaybeUninit<u8> makes no claim about the
        // contents.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.bufs[s].ptr as *mut MaybeUninit<u8>, len) })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        for e in self.events {
            // SAFETY: events created by Staging::new, destroyed once, here.
            unsafe {
                let _ = result::event::destroy(e);
            }
        }
    }
}

/// `bytes` viewed as maybe-uninitialized bytes (the type `par_copy` moves).
fn as_uninit(bytes: &[u8]) -> &[MaybeUninit<u8>] {
    // SAFETY: MaybeUninit<u8> has the size and alignment of u8 and accepts any byte; the
    // shared borrow keeps the bytes unchanged and alive for the result's lifetime.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const MaybeUninit<u8>, bytes.len()) }
}

/// Bytes one thread copies without handing work to rayon (one thread copies more slowly than
/// PCIe moves, so larger copies go to all cores).
const COPY_CHUNK: usize = 1 << 20;

/// Host memcpy on all cores ([`par_copy_slices`] of one slice).
fn par_copy(src: &[MaybeUninit<u8>], dst: &mut [MaybeUninit<u8>]) {
    par_copy_slices(&[src], dst)
}

/// Host memcpy of the concatenation of `srcs` into `dst` (as long as their total), on all
/// cores in `COPY_CHUNK` pieces, in one parallel pass however many slices there are: the
/// runs of a streaming round's payload column are thousands of batches of a few KB, and a
/// parallel call per slice costs more in rayon hand-offs than the copy.
fn par_copy_slices(srcs: &[&[MaybeUninit<u8>]], dst: &mut [MaybeUninit<u8>]) {
    if dst.len() <= COPY_CHUNK {
        let mut at = 0;
        for s in srcs {
            dst[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        }
        return;
    }
    // Where each slice starts in `dst`.
    let starts: Vec<usize> = srcs
        .iter()
        .scan(0, |at, s| {
            let start = *at;
            *at += s.len();
            Some(start)
        })
        .collect();
    dst.par_chunks_mut(COPY_CHUNK).enumerate().for_each(|(c, d)| {
        let begin = c * COPY_CHUNK;
        // The slice holding byte `begin`, then the following ones until `d` is full.
        let mut i = starts.partition_point(|&st| st <= begin) - 1;
        let mut filled = 0;
        while filled < d.len() {
            let within = begin + filled - starts[i];
            let take = (srcs[i].len() - within).min(d.len() - filled);
            d[filled..filled + take].copy_from_slice(&srcs[i][within..within + take]);
            filled += take;
            i += 1;
        }
    });
}

/// Copies `src` (host, any memory) to the device at `dst` on `stream`, through the staging
/// buffers: while one piece is in flight the host fills the other. The copies are queued,
/// not waited for: work queued after them on `stream` sees the keys.
pub(crate) fn upload(stream: sys::CUstream, staging: &mut Staging, src: &[u8], dst: DevPtr) -> Result<()> {
    upload_slices(stream, staging, &[src], dst)
}

/// Copies the concatenation of `srcs` (host, any memory) to the device at `dst` on
/// `stream`, as [`upload`] does one slice: a staging buffer is filled from as many slices
/// as it holds, so many small slices (the runs of a payload column) still go up in
/// `STAGE_BYTES` pieces with the host filling one buffer while the other is in flight.
pub(crate) fn upload_slices(stream: sys::CUstream, staging: &mut Staging, srcs: &[&[u8]], dst: DevPtr) -> Result<()> {
    let total: usize = srcs.iter().map(|s| s.len()).sum();
    if total > 0 && srcs.iter().all(|s| s.is_empty() || is_registered(s.as_ptr(), s.len())) {
        // Registered memory: one DMA per slice, straight from it.
        let mut at = 0;
        for s in srcs.iter().filter(|s| !s.is_empty()) {
            // SAFETY: `s` lies in registered (page-locked) host memory and stays borrowed,
            // unchanged, until the merge that queued this copy has finished every copy
            // (merge_part synchronizes on success and on error); `dst` is a device
            // allocation of at least `total` bytes, of which this slice covers [at, at + len).
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(dst + at as u64, s.as_ptr() as *const c_void, s.len(), stream)
                    .result()
                    .map_err(gpu_err("copying to the device"))?;
            }
            at += s.len();
        }
        return Ok(());
    }
    staging.reserve(total)?;
    let (mut slice, mut within) = (0, 0); // where the next piece's bytes start
    for (p, start) in (0..total).step_by(STAGE_BYTES).enumerate() {
        let len = STAGE_BYTES.min(total - start);
        let s = p % 2;
        let buf = staging.host_buffer(s, len)?;
        // The pieces of the slices that fill this staging buffer, copied in one pass.
        let mut pieces: Vec<&[MaybeUninit<u8>]> = Vec::new();
        let mut filled = 0;
        while filled < len {
            let src = &srcs[slice][within..];
            let take = src.len().min(len - filled);
            pieces.push(as_uninit(&src[..take]));
            filled += take;
            within += take;
            if within == srcs[slice].len() {
                (slice, within) = (slice + 1, 0);
            }
        }
        par_copy_slices(&pieces, &mut buf[..len]);
        // SAFETY: the staging buffer holds `len` bytes the host has just written and stays
        // untouched until the event recorded next completes (host_buffer waits for it);
        // `dst` is a device allocation of at least `total` bytes, of which this piece covers
        // [start, start + len).
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst + start as u64, staging.bufs[s].ptr as *const c_void, len, stream)
                .result()
                .map_err(gpu_err("copying to the device"))?;
            result::event::record(staging.events[s], stream).map_err(gpu_err("recording an event"))?;
        }
    }
    Ok(())
}

/// Copies `src` (host memory, pageable) to the device at `dst` and waits until it has
/// landed: for the small level metadata, which the kernels read.
pub(crate) fn upload_now<T: Copy>(stream: sys::CUstream, src: &[T], dst: DevPtr) -> Result<()> {
    // On `stream`, then waited for: a plain synchronous copy runs on the legacy stream,
    // which the (non-blocking) merge stream does not wait for, and from pageable memory it
    // returns before its DMA lands. With ~2000 runs (11 levels, ~260 KB of metadata) the
    // kernels read bounds and tile tables before they arrived: illegal addresses and
    // instructions on the H200, never under compute-sanitizer's serialization.
    // SAFETY: `dst` is a device allocation of at least size_of_val(src) bytes (the caller's
    // pool buffer); `src` stays borrowed until the stream has finished the copy.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, size_of_val(src), stream)
            .result()
            .map_err(gpu_err("uploading level metadata"))?;
        result::stream::synchronize(stream).map_err(gpu_err("uploading level metadata"))
    }
}

/// Where the download's pieces may start: after the main stream has finished everything
/// (no chunks), or per piece after the event of the chunk of the last level that completes
/// its last element.
pub(crate) struct DownloadOrder<'a> {
    pub main: sys::CUstream,
    pub chunk_events: &'a [sys::CUevent],
    /// The output end of each chunk, in elements.
    pub chunk_ends: &'a [u64],
}

/// Copies `dst.len()` bytes from the device at `src` into `dst` through the staging
/// buffers, on `dl_stream`, as `order` allows; elements are `elem` bytes. The host drains
/// one buffer while the other fills. Returns once every byte of `dst` is written.
pub(crate) fn download(
    dl_stream: sys::CUstream,
    staging: &mut Staging,
    src: DevPtr,
    dst: &mut [MaybeUninit<u8>],
    elem: usize,
    order: &DownloadOrder,
) -> Result<()> {
    let total = dst.len();
    let direct = is_registered(dst.as_ptr() as *const u8, total);
    if !direct {
        staging.reserve(total)?;
    }
    let chunked = !order.chunk_events.is_empty();
    if !chunked {
        // SAFETY: the engine's own stream handle.
        unsafe { result::stream::synchronize(order.main) }.map_err(gpu_err("running the merge"))?;
    }
    if direct {
        // Registered memory: the DMA writes the output itself, piece by piece as the
        // chunks complete.
        for s0 in (0..total).step_by(STAGE_BYTES) {
            let s1 = (s0 + STAGE_BYTES).min(total);
            if chunked {
                let c = chunk_of(order.chunk_ends, ((s1 - 1) / elem) as u64);
                // SAFETY: valid stream and event of this context; the event was recorded on
                // the main stream after the chunk's launch.
                unsafe { result::stream::wait_event(dl_stream, order.chunk_events[c], sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
                    .map_err(gpu_err("ordering the download"))?;
            }
            // SAFETY: dst[s0..s1] lies in registered host memory, borrowed mutably for this
            // call, which waits below for the copy to land; `src` is a device allocation of at
            // least `total` bytes.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(dst[s0..].as_mut_ptr() as *mut c_void, src + s0 as u64, s1 - s0, dl_stream)
                    .result()
                    .map_err(gpu_err("copying from the device"))?;
            }
        }
        // SAFETY: the download's own stream.
        return unsafe { result::stream::synchronize(dl_stream) }.map_err(gpu_err("copying from the device"));
    }
    let mut pending: Option<(usize, usize, usize)> = None; // (buffer, start, end) to drain
    for (p, s0) in (0..total).step_by(STAGE_BYTES).enumerate() {
        let s1 = (s0 + STAGE_BYTES).min(total);
        let s = p % 2;
        if chunked {
            let c = chunk_of(order.chunk_ends, ((s1 - 1) / elem) as u64);
            // SAFETY: valid stream and event of this context; the event was recorded on the
            // main stream after the chunk's launch.
            unsafe { result::stream::wait_event(dl_stream, order.chunk_events[c], sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
                .map_err(gpu_err("ordering the download"))?;
        }
        // SAFETY: buffer `s` was last used by piece p - 2, whose drain (below, in the
        // previous iteration) waited for its copy and finished reading it, and no host view
        // of it is alive; the copy writes s1 - s0 <= STAGE_BYTES bytes (reserved above) into it and records its
        // event right after. `src` is a device allocation of at least `total` bytes.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(staging.bufs[s].ptr as *mut c_void, src + s0 as u64, s1 - s0, dl_stream)
                .result()
                .map_err(gpu_err("copying from the device"))?;
            result::event::record(staging.events[s], dl_stream).map_err(gpu_err("recording an event"))?;
        }
        if let Some((ps, a, b)) = pending.take() {
            par_copy(staging.host_buffer(ps, b - a)?, &mut dst[a..b]);
        }
        pending = Some((s, s0, s1));
    }
    if let Some((ps, a, b)) = pending.take() {
        par_copy(staging.host_buffer(ps, b - a)?, &mut dst[a..b]);
    }
    Ok(())
}

/// The `n` indices the download fills: u32 or u64, allocated, not initialized.
pub(crate) struct Output {
    indices: Indices,
    n: usize,
}

impl Output {
    pub fn with_capacity(n: usize, index_bytes: usize) -> Output {
        let indices = if index_bytes == 4 { Indices::U32(Vec::with_capacity(n)) } else { Indices::U64(Vec::with_capacity(n)) };
        Output { indices, n }
    }

    /// The `n` elements' memory as bytes, uninitialized until the download writes them.
    pub fn bytes(&mut self) -> &mut [MaybeUninit<u8>] {
        fn bytes<T>(v: &mut Vec<T>, n: usize) -> &mut [MaybeUninit<u8>] {
            let spare = &mut v.spare_capacity_mut()[..n];
            // SAFETY: the view covers exactly the memory of `spare` (n allocated elements),
            // borrowed mutably for the result's lifetime; MaybeUninit<u8> has alignment 1 and
            // accepts any byte, so byte writes leave the elements valid u32/u64 once all are
            // written.
            unsafe { std::slice::from_raw_parts_mut(spare.as_mut_ptr() as *mut MaybeUninit<u8>, size_of_val(spare)) }
        }
        match &mut self.indices {
            Indices::U32(v) => bytes(v, self.n),
            Indices::U64(v) => bytes(v, self.n),
        }
    }

    /// The indices.
    ///
    /// # Safety
    ///
    /// Every byte of [`Output::bytes`] has been written.
    pub unsafe fn assume_init(self) -> Indices {
        let n = self.n;
        match self.indices {
            Indices::U32(mut v) => {
                // SAFETY: capacity n (with_capacity), all n elements written (the caller's
                // contract).
                unsafe { v.set_len(n) };
                Indices::U32(v)
            }
            Indices::U64(mut v) => {
                // SAFETY: as above.
                unsafe { v.set_len(n) };
                Indices::U64(v)
            }
        }
    }
}

/// Maps `buf` with transparent huge pages and touches one byte per page on a few threads of
/// `scope` (joined when the scope ends), so its page faults are taken there and then rather
/// than during the download. Does nothing where THP is off, for small buffers, for
/// registered memory, and off Linux.
pub(crate) fn prefault<'s>(scope: &'s std::thread::Scope<'s, '_>, buf: &'s mut [MaybeUninit<u8>]) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        if is_registered(buf.as_ptr() as *const u8, buf.len()) {
            return; // page-locked: every page is resident already
        }
        const PREFAULT_THREADS: usize = 4;
        if buf.len() < (64 << 20) {
            return; // small outputs: not worth a thread
        }
        // Only with transparent huge pages: 4 threads taking 4 KiB faults slow the upload down
        // more than they save (measured on the H200 host).
        if !advise_huge_pages(buf) {
            return;
        }
        let per = buf.len().div_ceil(PREFAULT_THREADS).next_multiple_of(PAGE);
        for part in buf.chunks_mut(per) {
            scope.spawn(move || {
                for byte in part.iter_mut().step_by(PAGE) {
                    // Volatile: a plain store of a value nobody reads could be dropped.
                    // SAFETY: `byte` is a valid, exclusively borrowed byte of `part`.
                    unsafe { std::ptr::write_volatile(byte, MaybeUninit::new(0)) };
                }
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (scope, buf);
}

/// Asks the kernel to back the 2 MiB-aligned interior of `buf` with transparent huge pages,
/// where THP is on (`always` or `madvise`): 512 times fewer page faults when the memory is
/// first written, and fewer pages to free. True if the advice was taken (false off Linux).
pub(crate) fn advise_huge_pages(buf: &mut [MaybeUninit<u8>]) -> bool {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        static THP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *THP.get_or_init(|| {
            let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
            thp.contains("[always]") || thp.contains("[madvise]")
        });
        let start = (buf.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (buf.as_ptr() as usize + buf.len()) / HUGE * HUGE;
        if !on || end <= start {
            return false;
        }
        // SAFETY: [start, end) lies inside `buf`, an allocation this process owns; the advice
        // changes how its pages are backed, never their contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = buf;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slices of every length (empty ones included, across `COPY_CHUNK` boundaries) land
    /// concatenated, in order, as one slice's copy would.
    #[test]
    fn copying_many_slices_concatenates_them() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for count in [0usize, 1, 7, 300, 3000] {
            let bytes: Vec<Vec<u8>> = (0..count)
                .map(|i| {
                    let len = match next() % 5 {
                        0 => 0,
                        1 => COPY_CHUNK + (next() % 9) as usize,
                        _ => (next() % 70_000) as usize,
                    };
                    (0..len).map(|b| (b as u64 ^ i as u64) as u8).collect()
                })
                .collect();
            let want: Vec<u8> = bytes.concat();
            let srcs: Vec<&[MaybeUninit<u8>]> = bytes.iter().map(|b| as_uninit(b)).collect();
            let mut got = vec![MaybeUninit::new(0xAAu8); want.len()];
            par_copy_slices(&srcs, &mut got);
            // SAFETY: every byte was initialized (by the fill above, then the copy).
            let got: Vec<u8> = got.iter().map(|b| unsafe { b.assume_init() }).collect();
            assert!(got == want, "{count} slices, {} bytes", want.len());
        }
    }
}

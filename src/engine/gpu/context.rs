//! The GPU contexts: one per CUDA device ordinal, created lazily on its first use, each
//! with one stream, its compiled modules (built once per process, lazily, per family, key
//! width and index width), a pool of device buffers kept and reused across calls (grown
//! when a call needs more, freed after a call that leaves it over [`KEEP_POOL_BYTES`]) and
//! the pinned staging buffers (grown to what the transfers need, up to `STAGE_BYTES` each:
//! a small merge does not pin 128 MiB).
//!
//! One merge runs at a time on a device (its state sits behind a mutex): the buffers are
//! sized for the largest call so far and a second concurrent merge would need its own.
//! The payload gather has a lane of its own ([`GatherLane`]: a stream and staging buffers
//! behind a second mutex), so one round's gather runs on the device while the next round's
//! keys go up and merge.
//!
//! [`warm_up`] creates a device's context and loads the modules whose cubins are in the disk
//! cache on a background thread, so the caller overlaps that with its own work (reading
//! Parquet footers): the first merge finds the context made (or waits for it: the context
//! sits in a `OnceLock`, created once whoever asks first) and the modules loaded; where the
//! caller expects a large merge, the staging buffers are pinned there too.
//!
//! The contexts and the warm-ups' bookkeeping are fields of the process's
//! [`Runtime`](super::runtime::Runtime); this module creates and reads them.

use super::manifest::Family;
use super::nvrtc::{Module, ModuleSpec};
use super::runtime::{lock, runtime, DeviceSlots};
use super::transfer::Staging;
use super::tuning::{Arch, KEEP_POOL_BYTES};
use crate::{Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

pub(crate) fn gpu_err(what: &str) -> impl Fn(result::DriverError) -> Error + '_ {
    move |e| Error::Gpu(format!("{what}: {e:?}"))
}

/// A device allocation in the context bound to the calling thread, freed on drop: the
/// pool's buffers, and buffers a call owns outside the pool. Its owner drops it with its
/// context bound and only once no queued work uses it.
pub(crate) struct DevBuf {
    pub ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DevBuf {
    pub fn new(bytes: usize) -> Result<DevBuf> {
        // SAFETY: a plain allocation in the context bound to this thread; the DevBuf owns the
        // pointer and frees it once.
        let ptr =
            unsafe { result::malloc_sync(bytes) }.map_err(|e| Error::Gpu(format!("allocating {bytes} bytes of device memory: {e:?}")))?;
        Ok(DevBuf { ptr, bytes })
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from malloc_sync in this buffer's context and is freed once,
        // here; the pool drops a buffer only after the work that used it has finished
        // (State::buffer synchronizes first, State::release runs after a synchronize), as
        // other owners do.
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}

/// Buffer slots of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    /// The input keys (never written by a merge; the sort sorts its tiles there in place).
    Keys0,
    /// Intermediate keys of the tree's levels, ping-ponged.
    Keys1,
    Keys2,
    /// Indices, ping-ponged between levels.
    Idx0,
    Idx1,
    /// The grid-level partition of a level.
    Splits,
    /// The k-way partition's coarse splits.
    Coarse,
    /// Level metadata (bounds and tile tables).
    Meta,
    /// A split merge's rebase table (cuda/rebase.cu).
    Rebase,
}

/// A device's mutable state: modules, buffer pool, staging buffers.
pub(crate) struct State {
    modules: HashMap<ModuleSpec, Arc<Module>>,
    pool: HashMap<Slot, DevBuf>,
    staging: Option<Staging>,
}

// SAFETY: the raw handles State holds (device pointers, pinned host memory, events) belong
// to a context, not to a thread: the CUDA driver allows their use from any thread that binds
// the context, which every user of State does, one at a time behind Gpu's mutex.
unsafe impl Send for State {}

/// One CUDA device, its context and stream, and its state.
pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: Arch,
    pub name: String,
    state: Mutex<State>,
    gather_lane: Mutex<GatherLane>,
}

/// The payload gather's stream and pinned staging buffers on one device, created on first
/// use: the gather queues its copies and kernels here, beside the merges on the device's
/// stream.
#[derive(Default)]
pub(crate) struct GatherLane {
    stream: Option<Arc<CudaStream>>,
    staging: Option<Staging>,
    /// A second pair for downloads into pageable memory, drained while `staging` fills.
    download_staging: Option<Staging>,
}

// SAFETY: as for State: the stream and the pinned memory belong to the context, and every
// user binds it and holds the lane's mutex.
unsafe impl Send for GatherLane {}

impl GatherLane {
    /// The lane's stream (created on first use in `gpu`'s context).
    pub fn stream(&mut self, gpu: &Gpu) -> Result<sys::CUstream> {
        if self.stream.is_none() {
            self.stream = Some(gpu.ctx.new_stream().map_err(gpu_err("creating the gather's stream"))?);
        }
        Ok(self.stream.as_ref().expect("created above").cu_stream())
    }

    /// The lane's staging buffers (allocated on first use).
    pub fn staging(&mut self) -> Result<&mut Staging> {
        if self.staging.is_none() {
            self.staging = Some(Staging::new()?);
        }
        Ok(self.staging.as_mut().expect("allocated above"))
    }

    /// The upload staging buffers and the download's (both allocated on first use): a gather
    /// into pageable memory fills the one while another thread drains the other.
    pub fn both_stagings(&mut self) -> Result<(&mut Staging, &mut Staging)> {
        self.staging()?;
        if self.download_staging.is_none() {
            self.download_staging = Some(Staging::new()?);
        }
        Ok((self.staging.as_mut().expect("allocated above"), self.download_staging.as_mut().expect("allocated above")))
    }
}

/// The per-ordinal slots, the device count read once.
fn devices() -> Result<&'static DeviceSlots> {
    // Never panics: the driver's presence is checked before any call into it.
    super::availability().map_err(Error::GpuUnavailable)?;
    runtime()
        .devices
        .get_or_init(|| {
            let count = result::device::get_count().map_err(|e| format!("counting CUDA devices: {e:?}"))?;
            Ok((0..count.max(0)).map(|_| OnceLock::new()).collect())
        })
        .as_ref()
        .map_err(|e| Error::GpuUnavailable(e.clone()))
}

/// How many CUDA devices there are (`Error::GpuUnavailable` without a driver).
pub(crate) fn device_count() -> Result<usize> {
    Ok(devices()?.len())
}

/// The context of CUDA device `device`, created on first use. An ordinal past the device
/// count, or a device whose context cannot be created, is `Error::GpuUnavailable`.
pub(crate) fn gpu(device: usize) -> Result<&'static Gpu> {
    let devices = devices()?;
    let Some(slot) = devices.get(device) else {
        return Err(Error::GpuUnavailable(format!(
            "CUDA device {device} does not exist ({} device{} here, ordinals from 0)",
            devices.len(),
            if devices.len() == 1 { "" } else { "s" }
        )));
    };
    slot.get_or_init(|| Gpu::new(device).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::GpuUnavailable(format!("CUDA device {device}: {e}")))
}

impl Gpu {
    fn new(ordinal: usize) -> Result<Gpu> {
        let t = Instant::now();
        let ctx = CudaContext::new(ordinal).map_err(gpu_err("creating the CUDA context"))?;
        let created = t.elapsed();
        // SAFETY: the engine orders its work on its own streams and events and synchronizes
        // explicitly; it uses no cudarc safe buffer whose tracking this turns off.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(gpu_err("creating a stream"))?;
        let (major, minor) = ctx.compute_capability().map_err(gpu_err("reading the compute capability"))?;
        let shared = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(gpu_err("reading the shared memory per block"))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        log::debug!(
            "corank: CUDA device {ordinal} ({name}, sm_{major}{minor}): context created in {created:.1?}, ready in {:.1?}",
            t.elapsed()
        );
        Ok(Gpu {
            ctx,
            stream,
            arch: Arch { major: major as u32, minor: minor as u32, max_shared_per_block: shared as u32 },
            name,
            state: Mutex::new(State { modules: HashMap::new(), pool: HashMap::new(), staging: None }),
            gather_lane: Mutex::new(GatherLane::default()),
        })
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(gpu_err("binding the CUDA context"))
    }

    /// The context bound to this thread and the device's state, locked.
    ///
    /// Never from a rayon worker thread: the holder fills staging buffers with rayon's
    /// parallel copies, and a worker that waits for those runs other queued jobs meanwhile.
    /// A job of another GPU call (two node rounds run at once) then waits on this lock
    /// under its own holder, which never lets go. Called from any other thread, the wait
    /// blocks and the copies run on the pool.
    pub fn lock(&self) -> Result<MutexGuard<'_, State>> {
        debug_assert!(rayon::current_thread_index().is_none(), "a GPU device locked from a rayon worker thread");
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.bind()?;
        Ok(st)
    }

    /// Runs `work` on the device's state, locked (as [`Gpu::lock`]), and leaves the device
    /// clean for the next call where it fails: whatever it queued on any stream is finished
    /// or abandoned (the whole context synchronized) before the pool frees what it used, so
    /// no queued kernel or copy is left reading a freed buffer.
    pub fn with_state<T>(&self, work: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let mut st = self.lock()?;
        let res = work(&mut st);
        if res.is_err() {
            let _ = result::ctx::synchronize();
            st.release();
        }
        res
    }

    /// The context bound to this thread and the gather's lane, locked (never from a rayon
    /// worker thread, as [`Gpu::lock`]).
    pub fn lock_gather_lane(&self) -> Result<MutexGuard<'_, GatherLane>> {
        debug_assert!(rayon::current_thread_index().is_none(), "a GPU gather lane locked from a rayon worker thread");
        let lane = self.gather_lane.lock().unwrap_or_else(|p| p.into_inner());
        self.bind()?;
        Ok(lane)
    }

    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }
}

/// The modules [`warm_up`] loads when their cubins are cached: the production kernels with
/// u32 indices, the most common key widths first.
fn warm_up_specs() -> impl Iterator<Item = ModuleSpec> {
    [8, 16, 4, 24, 32].into_iter().map(|key_bytes| ModuleSpec { family: Family::Production, key_bytes, index_bits: 32 })
}

/// One warm-up counted in the runtime's `warm_ups.in_flight` ([`warm_up_in_flight`]) from its creation until it drops: created
/// before its thread is spawned (so a caller that asks right after [`warm_up`] returns sees
/// it), moved into the thread, dropped when the thread ends or was never spawned.
pub(crate) struct WarmUpInFlight(());

impl WarmUpInFlight {
    pub(crate) fn new() -> WarmUpInFlight {
        runtime().warm_ups.in_flight.fetch_add(1, Ordering::SeqCst);
        WarmUpInFlight(())
    }
}

impl Drop for WarmUpInFlight {
    fn drop(&mut self) {
        runtime().warm_ups.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Held by the tests that start warm-ups or read the count, so that none sees another's.
#[cfg(test)]
pub(crate) static WARM_UP_TESTS: Mutex<()> = Mutex::new(());

/// Whether a warm-up ([`warm_up`]) of some device is still under way: its context, modules
/// or staging buffers not ready yet, or its failure not known yet. A GPU merge started now
/// would wait for it.
pub(crate) fn warm_up_in_flight() -> bool {
    runtime().warm_ups.in_flight.load(Ordering::SeqCst) > 0
}

/// Starts creating device `device`'s context, then loading the modules of
/// [`warm_up_specs`] whose cubins the disk cache holds, and pinning staging buffers for
/// transfers of `staging_bytes` (none for 0: a small merge pins only what its transfers
/// need, when they need it), on a background thread; returns at once. Once a process a
/// device, and once more to pin staging buffers where an earlier call pinned none. Errors
/// are not reported here: the context's (or its absence's) stays where the first merge
/// finds and reports it, as without a warm-up; a module that does not load from the cache
/// is built by the merge.
pub(crate) fn warm_up(device: usize, staging_bytes: usize) {
    let in_flight = WarmUpInFlight::new();
    let first = {
        let mut started = lock(&runtime().warm_ups.started);
        let first = !started.contains(&device);
        if first {
            started.push(device);
        }
        first
    };
    let stage = staging_bytes > 0 && {
        let mut staged = lock(&runtime().warm_ups.staged);
        let stage = !staged.contains(&device);
        if stage {
            staged.push(device);
        }
        stage
    };
    if !first && !stage {
        return;
    }
    let spawned = std::thread::Builder::new().name(format!("corank-gpu{device}-warm-up")).spawn(move || {
        let _in_flight = in_flight; // counted until this thread ends, whichever way
        let t = Instant::now();
        let Ok(gpu) = gpu(device) else { return };
        let mut loaded = 0;
        for spec in warm_up_specs().filter(|_| first) {
            let Ok(mut st) = gpu.lock() else { return };
            if st.modules.contains_key(&spec) {
                continue;
            }
            match Module::from_cache(&gpu.ctx, gpu.arch, spec) {
                Ok(Some(m)) => {
                    st.modules.insert(spec, Arc::new(m));
                    loaded += 1;
                }
                Ok(None) => {}
                Err(e) => log::debug!("corank: warm-up of device {device}: {e}"),
            }
        }
        if stage {
            if let Ok(mut st) = gpu.lock() {
                let s = Instant::now();
                match st.staging().and_then(|staging| staging.reserve(staging_bytes)) {
                    Ok(()) => log::debug!("corank: pinned staging buffers for {staging_bytes} bytes in {:.1?}", s.elapsed()),
                    Err(e) => log::debug!("corank: warm-up of device {device}: {e}"),
                }
            }
        }
        log::debug!("corank: warm-up of device {device} done in {:.1?} ({loaded} cached modules loaded)", t.elapsed());
    });
    if let Err(e) = spawned {
        log::debug!("corank: no warm-up thread for device {device}: {e}");
    }
}

impl State {
    /// The module for `spec`, compiled and loaded on first use.
    pub fn module(&mut self, gpu: &Gpu, spec: ModuleSpec) -> Result<Arc<Module>> {
        if let Some(m) = self.modules.get(&spec) {
            return Ok(m.clone());
        }
        let m = Arc::new(Module::build(&gpu.ctx, gpu.arch, spec)?);
        self.modules.insert(spec, m.clone());
        Ok(m)
    }

    /// Bytes the pool holds now.
    pub fn pooled_bytes(&self) -> usize {
        self.pool.values().map(|b| b.bytes).sum()
    }

    /// Bytes the pool holds in `slot`.
    pub fn slot_bytes(&self, slot: Slot) -> usize {
        self.pool.get(&slot).map_or(0, |b| b.bytes)
    }

    /// A device buffer of at least `bytes` in `slot`, reusing the one held when large enough.
    pub fn buffer(&mut self, slot: Slot, bytes: usize) -> Result<sys::CUdeviceptr> {
        let bytes = bytes.max(256);
        if let Some(b) = self.pool.get(&slot) {
            if b.bytes >= bytes {
                return Ok(b.ptr);
            }
        }
        if self.pool.contains_key(&slot) {
            // Queued kernels may still use the old buffer: let them finish, then free it
            // before allocating the larger one.
            result::ctx::synchronize().map_err(gpu_err("waiting for the device"))?;
            self.pool.remove(&slot);
        }
        // The context is bound to this thread (Gpu::lock).
        let buf = DevBuf::new(bytes)?;
        let ptr = buf.ptr;
        self.pool.insert(slot, buf);
        Ok(ptr)
    }

    /// Frees every pooled buffer (after an error, once the stream is idle, so a later call
    /// starts clean).
    pub fn release(&mut self) {
        self.pool.clear();
    }

    /// Frees the pooled buffers if they hold more than [`KEEP_POOL_BYTES`] (after a call, the
    /// stream idle): a whole sort's gigabytes are not kept for the life of the process,
    /// where the merges' rounds, which reuse the pool call after call, need far less.
    pub fn trim(&mut self) {
        if self.pooled_bytes() > KEEP_POOL_BYTES {
            self.release();
        }
    }

    /// The staging buffers and their events (created on first use; the buffers grow with
    /// the transfers, [`Staging::reserve`]).
    pub fn staging(&mut self) -> Result<&mut Staging> {
        let staging = match self.staging.take() {
            Some(s) => s,
            None => Staging::new()?,
        };
        Ok(self.staging.insert(staging))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A warm-up counts as under way from the call until its thread ends, also where the
    /// device does not exist or there is no GPU at all (the thread ends at its first error),
    /// so `Engine::Auto` never waits on a start-up that will not come.
    #[test]
    fn a_warm_up_is_in_flight_until_its_thread_ends_even_without_a_device() {
        let _alone = WARM_UP_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let counted = WarmUpInFlight::new();
        assert!(warm_up_in_flight());
        drop(counted);
        warm_up(63, 1 << 20); // no machine has a device 63
        let t = Instant::now();
        while warm_up_in_flight() {
            assert!(t.elapsed() < std::time::Duration::from_secs(60), "the warm-up of a missing device never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        warm_up(63, 0); // started once a process: nothing more to do, nothing left in flight
        assert!(!warm_up_in_flight());
    }
}

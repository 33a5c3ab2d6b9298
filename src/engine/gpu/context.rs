//! The process-wide GPU context: device 0, one stream, the compiled modules (built once per
//! process, lazily, per key width and index width), device buffers kept and reused across
//! calls (grown when a call needs more), and two pinned staging buffers.
//!
//! One merge runs at a time (the state sits behind a mutex): the buffers are sized for the
//! largest call so far and a second concurrent merge would need its own.

use super::build::{arch_for, ModuleSpec, FUNCTIONS};
use super::tuning::STAGE_BYTES;
use crate::{Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaModule, CudaStream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub(crate) fn gpu_err(what: &str) -> impl Fn(result::DriverError) -> Error + '_ {
    move |e| Error::Gpu(format!("{what}: {e:?}"))
}

/// A device allocation, freed on drop.
pub(crate) struct DevBuf {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.bytes > 0 {
            unsafe {
                let _ = result::free_sync(self.ptr);
            }
        }
    }
}

/// A pinned host allocation, freed on drop.
pub(crate) struct Pinned {
    pub ptr: *mut u8,
}

unsafe impl Send for Pinned {}

impl Drop for Pinned {
    fn drop(&mut self) {
        unsafe {
            let _ = result::free_host(self.ptr as *mut _);
        }
    }
}

/// A compiled module and its kernels.
pub(crate) struct Module {
    _module: Arc<CudaModule>,
    pub functions: HashMap<&'static str, CudaFunction>,
}

/// Buffer slots of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    Keys0,
    Keys1,
    Keys0Alt,
    Idx0,
    Idx1,
    Splits,
    Coarse,
    Meta,
}

pub(crate) struct State {
    modules: HashMap<ModuleSpec, Arc<Module>>,
    pool: HashMap<Slot, DevBuf>,
    pub stage: Vec<Pinned>,
    pub events: Vec<sys::CUevent>,
}

unsafe impl Send for State {}

pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: &'static str,
    pub name: String,
    pub state: Mutex<State>,
}

static GPU: OnceLock<std::result::Result<Gpu, String>> = OnceLock::new();

/// The process's GPU, created on first use. Callers have checked `availability()`.
pub(crate) fn gpu() -> Result<&'static Gpu> {
    GPU.get_or_init(|| Gpu::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Error::GpuUnavailable(e.clone()))
}

impl Gpu {
    fn new() -> Result<Gpu> {
        let ctx = CudaContext::new(0).map_err(gpu_err("creating the CUDA context"))?;
        // The engine orders its work on one stream and synchronizes explicitly.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(gpu_err("creating a stream"))?;
        let (major, minor) = ctx.compute_capability().map_err(gpu_err("reading the compute capability"))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        Ok(Gpu {
            ctx,
            stream,
            arch: arch_for(major, minor),
            name,
            state: Mutex::new(State { modules: HashMap::new(), pool: HashMap::new(), stage: Vec::new(), events: Vec::new() }),
        })
    }

    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(gpu_err("binding the CUDA context"))
    }

    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }
}

impl State {
    /// The module for `spec`, compiled and loaded on first use.
    pub fn module(&mut self, gpu: &Gpu, spec: ModuleSpec) -> Result<Arc<Module>> {
        if let Some(m) = self.modules.get(&spec) {
            return Ok(m.clone());
        }
        let ptx = spec.compile(gpu.arch)?;
        let module = gpu.ctx.load_module(ptx).map_err(gpu_err("loading the kernels"))?;
        let mut functions = HashMap::new();
        for f in FUNCTIONS {
            let func = module.load_function(f).map_err(gpu_err("finding a kernel"))?;
            functions.insert(f, func);
        }
        let m = Arc::new(Module { _module: module, functions });
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
        let ptr = unsafe { result::malloc_sync(bytes) }
            .map_err(|e| Error::Gpu(format!("allocating {bytes} bytes of device memory: {e:?}")))?;
        self.pool.insert(slot, DevBuf { ptr, bytes });
        Ok(ptr)
    }

    /// Frees every pooled buffer (after an error, so a later call starts clean).
    pub fn release(&mut self) {
        self.pool.clear();
    }

    /// The two pinned staging buffers and their events, allocated on first use.
    pub fn staging(&mut self) -> Result<()> {
        while self.stage.len() < 2 {
            let ptr = unsafe { result::malloc_host(STAGE_BYTES, 0) }.map_err(gpu_err("allocating pinned memory"))?;
            self.stage.push(Pinned { ptr: ptr as *mut u8 });
        }
        while self.events.len() < 2 {
            let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(gpu_err("creating an event"))?;
            self.events.push(ev);
        }
        Ok(())
    }
}

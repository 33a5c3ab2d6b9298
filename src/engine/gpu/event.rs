//! CUDA events for the device's own timings (the benches' kernels, nvCOMP's decompression).

use super::context::gpu_err;
use crate::Result;
use cudarc::driver::{result, sys};

/// A timing event, destroyed on drop.
pub(super) struct Event(sys::CUevent);

impl Event {
    pub(super) fn new() -> Result<Event> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map(Event).map_err(gpu_err("creating an event"))
    }

    pub(super) fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: a live event and a stream of the context bound to this thread.
        unsafe { result::event::record(self.0, stream) }.map_err(gpu_err("recording an event"))
    }

    /// Milliseconds from `self` to `end`, once `end` has completed (waits for it).
    pub(super) fn until(&self, end: &Event) -> Result<f32> {
        // SAFETY: live events, both recorded on one stream.
        unsafe {
            result::event::synchronize(end.0).map_err(gpu_err("waiting for an event"))?;
            result::event::elapsed(self.0, end.0).map_err(gpu_err("timing events"))
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by Event::new, destroyed once.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}

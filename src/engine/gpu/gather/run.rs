//! The gather's launch sequence on the device's gather lane, in this order: the error word
//! cleared, the run tables up (synchronously), the indices up; then per column its values
//! (and bitmaps) up, its kernels, an event recorded after them, and its result down (pinned:
//! copies on a second stream that waits for the event; pageable: the drain's thread,
//! [`Drain`]), while the next column goes up; finally the lane's stream finished and the
//! error word read.

use super::super::context::{gpu_err, GatherLane, Gpu};
use super::super::launch::{Args, DevPtr, Launcher};
use super::super::manifest::Entry;
use super::super::nvrtc::Module;
use super::super::runtime::PinnedBlock;
use super::super::transfer::{upload, upload_now, upload_slices, Staging};
use super::drain::{Drain, Piece};
use super::output::Dest;
use super::plan::{index_bytes, ColumnPlan, Plan};
use crate::permutation::Permutation;
use crate::Result;
use arrow::buffer::MutableBuffer;
use cudarc::driver::{result, sys};
use std::mem::MaybeUninit;

/// A CUDA event for timing, destroyed on drop.
struct TimingEvent(sys::CUevent);

impl TimingEvent {
    fn new() -> Result<TimingEvent> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map(TimingEvent).map_err(gpu_err("creating an event"))
    }

    fn record(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: a live event and a stream of the context bound to this thread.
        unsafe { result::event::record(self.0, stream) }.map_err(gpu_err("recording an event"))
    }
}

impl Drop for TimingEvent {
    fn drop(&mut self) {
        // SAFETY: created by TimingEvent::new, destroyed once.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}

/// Blocks of `threads` threads for `work` threads' worth of grid-stride work.
fn grid(work: u64, threads: u32) -> u64 {
    work.div_ceil(threads as u64).clamp(1, 1 << 16)
}

/// Queues everything of `plan` and waits for it: indices up, per column values (and
/// bitmaps) up, the kernels, the result down into `dest` (pinned: copies on a second stream;
/// pageable: a thread of its own drains each column through the download staging buffers
/// once its kernels are done, while this thread sends the next column up); then returns the
/// error word (not 0: an index past the input). `base` is the device buffer of `plan.bytes`;
/// the kernels' time is added to `kernel_ms` when given.
pub(super) fn run(
    gpu: &Gpu,
    lane: &mut GatherLane,
    module: &Module,
    plan: &Plan,
    dest: &mut Dest,
    base: DevPtr,
    kernel_ms: Option<&mut f32>,
) -> Result<u32> {
    let perm = plan.perm;
    let stream = lane.stream(gpu)?;
    let at = |off: usize| base + off as u64;
    let dl = gpu.ctx.new_stream().map_err(gpu_err("creating a stream"))?;
    upload_tables(stream, plan, base)?;
    let (up, down) = match dest {
        Dest::Pinned(_) => (lane.staging()?, None),
        Dest::Pageable(_) => {
            let (up, down) = lane.both_stagings()?;
            (up, Some(down))
        }
    };
    upload(stream, up, index_bytes(&perm.indices), at(plan.dev_idx))?;
    let mut queue = ColumnQueue::new(module, stream, plan, perm, base, kernel_ms)?;
    let done: Vec<TimingEvent> = (0..plan.columns.len()).map(|_| TimingEvent::new()).collect::<Result<_>>()?;
    match dest {
        Dest::Pinned(blocks) => {
            for ((p, block), ev) in plan.columns.iter().zip(blocks.iter()).zip(&done) {
                queue.column(p, ev, up)?;
                download_pinned(&queue, p, block, ev, dl.cu_stream())?;
            }
            dl.synchronize().map_err(gpu_err("finishing the download"))?;
        }
        Dest::Pageable(bufs) => {
            let down = down.expect("pageable outputs have download staging");
            let drain = Drain {
                gpu,
                main: stream,
                dl: dl.cu_stream(),
                staging: down,
                events: done.iter().map(|e| e.0).collect(),
                columns: pageable_columns(&queue, &plan.columns, bufs),
            };
            queue_with_drain(&mut queue, &plan.columns, &done, up, drain)?;
        }
    }
    read_error_word(stream, at(plan.dev_error))
}

/// The error word cleared, then the small run tables up (synchronously): the validity run
/// tables of nullable columns, then the byte views' rebase tables.
fn upload_tables(stream: sys::CUstream, plan: &Plan, base: DevPtr) -> Result<()> {
    let at = |off: usize| base + off as u64;
    // SAFETY: the error word lies in the device buffer (4 bytes at dev_error).
    unsafe { result::memset_d8_async(at(plan.dev_error), 0, 4, stream) }.map_err(gpu_err("clearing the error word"))?;
    for p in plan.columns.iter().filter(|p| p.nullable()) {
        upload_now(stream, &p.table, at(p.dev_table))?;
    }
    for p in plan.columns.iter().filter(|p| !p.view_table.is_empty()) {
        upload_now(stream, &p.view_table, at(p.dev_view_table))?;
    }
    Ok(())
}

/// Queues column `p`'s download into its pinned block on `dl`, after its kernels (`ev`):
/// the next column goes up meanwhile.
fn download_pinned(queue: &ColumnQueue, p: &ColumnPlan, block: &PinnedBlock, ev: &TimingEvent, dl: sys::CUstream) -> Result<()> {
    // SAFETY: `dl` and the event belong to this context; the block holds out_values +
    // out_bits bytes and stays alive (the caller drops it only after the download stream
    // finished: synchronized by `run`, or after a context synchronize on error); the device
    // ranges lie in the device buffer.
    unsafe {
        result::stream::wait_event(dl, ev.0, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).map_err(gpu_err("ordering the download"))?;
        sys::cuMemcpyDtoHAsync_v2(block.addr(0), queue.at(p.dev_out), (queue.n as usize) * p.width, dl)
            .result()
            .map_err(gpu_err("copying from the device"))?;
        if p.nullable() {
            sys::cuMemcpyDtoHAsync_v2(block.addr(p.out_values), queue.at(p.dev_out_bits), p.out_bits, dl)
                .result()
                .map_err(gpu_err("copying from the device"))?;
        }
    }
    Ok(())
}

/// Per column, its pageable output as bytes the drain fills (the padding between the values
/// and the bitmap zeroed here: never downloaded) and the device pieces that fill them.
fn pageable_columns<'b>(
    queue: &ColumnQueue,
    plans: &[ColumnPlan],
    bufs: &'b mut [MutableBuffer],
) -> Vec<(&'b mut [MaybeUninit<u8>], Vec<Piece>)> {
    let mut columns = Vec::with_capacity(plans.len());
    for (p, buf) in plans.iter().zip(bufs.iter_mut()) {
        let bytes = p.out_values + p.out_bits;
        // SAFETY: the buffer was allocated with capacity `bytes`; the view covers exactly
        // that memory, borrowed mutably while the drain fills it, and MaybeUninit<u8> makes
        // no claim about its contents.
        let view = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut MaybeUninit<u8>, bytes) };
        let values = (queue.n as usize) * p.width;
        // The padding between the values and the bitmap is never downloaded: zeros.
        view[values..p.out_values].fill(MaybeUninit::new(0));
        let mut pieces = vec![(queue.at(p.dev_out), 0, values)];
        if p.nullable() {
            pieces.push((queue.at(p.dev_out_bits), p.out_values, p.out_bits));
        }
        columns.push((view, pieces));
    }
    columns
}

/// Queues every column while `drain` drains them on a thread of its own, each column's
/// number sent once its event is recorded; returns once both are done.
fn queue_with_drain(queue: &mut ColumnQueue, plans: &[ColumnPlan], done: &[TimingEvent], up: &mut Staging, drain: Drain) -> Result<()> {
    std::thread::scope(|scope| -> Result<()> {
        let (tx, rx) = std::sync::mpsc::channel::<usize>();
        let drained = scope.spawn(move || drain.run(rx));
        let mut queued = Ok(());
        for (c, (p, ev)) in plans.iter().zip(done).enumerate() {
            queued = queue.column(p, ev, up);
            // A send fails only once the drain stopped on an error of its own.
            if queued.is_err() || tx.send(c).is_err() {
                break;
            }
        }
        drop(tx);
        let drained = drained.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        queued.and(drained)
    })
}

/// Finishes the lane's stream and reads the error word the kernels wrote.
fn read_error_word(stream: sys::CUstream, error: DevPtr) -> Result<u32> {
    // SAFETY: the lane's stream; then a 4-byte read of the error word the kernels wrote.
    unsafe {
        result::stream::synchronize(stream).map_err(gpu_err("running the gather"))?;
        let mut word = [0u32; 1];
        result::memcpy_dtoh_sync(&mut word, error).map_err(gpu_err("reading the error word"))?;
        Ok(word[0])
    }
}

/// What queueing one column needs: the launcher on the lane's stream, where the call's
/// shared pieces lie, and the optional kernel timing.
struct ColumnQueue<'a> {
    launcher: Launcher<'a>,
    stream: sys::CUstream,
    base: DevPtr,
    dev_idx: usize,
    dev_error: usize,
    /// Output rows.
    n: u64,
    /// Input rows.
    total: u64,
    nruns: u32,
    wide: bool,
    threads: u32,
    /// Events around each column's kernels, where the kernels are timed.
    timing: Option<(TimingEvent, TimingEvent)>,
    kernel_ms: Option<&'a mut f32>,
}

impl<'a> ColumnQueue<'a> {
    fn new(
        module: &'a Module,
        stream: sys::CUstream,
        plan: &Plan,
        perm: &Permutation,
        base: DevPtr,
        kernel_ms: Option<&'a mut f32>,
    ) -> Result<ColumnQueue<'a>> {
        let timing = match kernel_ms {
            Some(_) => Some((TimingEvent::new()?, TimingEvent::new()?)),
            None => None,
        };
        Ok(ColumnQueue {
            launcher: Launcher { module, stream },
            stream,
            base,
            dev_idx: plan.dev_idx,
            dev_error: plan.dev_error,
            n: perm.len() as u64,
            total: plan.total as u64,
            nruns: (perm.run_offsets.len() - 1) as u32,
            wide: plan.wide,
            threads: module.policy.threads,
            timing,
            kernel_ms,
        })
    }

    fn at(&self, off: usize) -> DevPtr {
        self.base + off as u64
    }

    /// Column `p` up through `up`, its kernels, and `ev` recorded after them.
    fn column(&mut self, p: &ColumnPlan, ev: &TimingEvent, up: &mut Staging) -> Result<()> {
        upload_slices(self.stream, up, &p.values, self.at(p.dev_in))?;
        if p.nullable() {
            upload_slices(self.stream, up, &p.bits, self.at(p.dev_bits))?;
        }
        if let Some((t0, _)) = &self.timing {
            t0.record(self.stream)?;
        }
        self.gather_values(p)?;
        if !p.view_table.is_empty() {
            self.rebase_views(p)?;
        }
        if p.nullable() {
            self.gather_validity(p)?;
        }
        self.add_kernel_time()?;
        ev.record(self.stream)
    }

    fn gather_values(&self, p: &ColumnPlan) -> Result<()> {
        let per_thread = if p.width <= 2 { 4 } else { 1 };
        let args = Args::GatherValues {
            src: self.at(p.dev_in),
            dst: self.at(p.dev_out),
            idx: self.at(self.dev_idx),
            n: self.n,
            total: self.total,
            width: p.width as u32,
            error: self.at(self.dev_error),
            wide: self.wide,
        };
        let entry = if self.wide { Entry::GatherValues64 } else { Entry::GatherValues32 };
        self.launcher.launch(entry, grid(self.n.div_ceil(per_thread), self.threads), args)
    }

    fn rebase_views(&self, p: &ColumnPlan) -> Result<()> {
        let args = Args::RebaseViews {
            views: self.at(p.dev_out),
            runs: self.at(p.dev_view_table),
            nruns: self.nruns,
            idx: self.at(self.dev_idx),
            n: self.n,
            total: self.total,
            wide: self.wide,
        };
        let entry = if self.wide { Entry::RebaseViews64 } else { Entry::RebaseViews32 };
        self.launcher.launch(entry, grid(self.n, self.threads), args)
    }

    fn gather_validity(&self, p: &ColumnPlan) -> Result<()> {
        let chunks = self.n.div_ceil(32 * 32);
        let args = Args::GatherValidity {
            bits: self.at(p.dev_bits),
            runs: self.at(p.dev_table),
            nruns: self.nruns,
            out: self.at(p.dev_out_bits),
            idx: self.at(self.dev_idx),
            n: self.n,
            total: self.total,
            error: self.at(self.dev_error),
            wide: self.wide,
        };
        let entry = if self.wide { Entry::GatherValidity64 } else { Entry::GatherValidity32 };
        self.launcher.launch(entry, grid(chunks * 32, self.threads), args)
    }

    /// Where timed: the column's kernels waited for and their time added to `kernel_ms`.
    fn add_kernel_time(&mut self) -> Result<()> {
        if let (Some((t0, t1)), Some(ms)) = (&self.timing, self.kernel_ms.as_deref_mut()) {
            t1.record(self.stream)?;
            // SAFETY: live events recorded on one stream; waiting for the second first.
            unsafe {
                result::event::synchronize(t1.0).map_err(gpu_err("waiting for an event"))?;
                *ms += result::event::elapsed(t0.0, t1.0).map_err(gpu_err("timing events"))?;
            }
        }
        Ok(())
    }
}

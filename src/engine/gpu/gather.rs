//! The payload gather on the device: a merge's permutation applied to fixed-width payload
//! columns and to byte views (`cuda/gather.cu`), with results in pinned host memory wrapped
//! as Arrow buffers without another copy, and the measured rule for when that pays
//! ([`gather_on_gpu_pays`]). A byte view column's views are gathered as 16-byte values and
//! their buffer indices rebased onto the output's data buffers, which are every run's, in run
//! order: the strings themselves are neither moved nor copied.
//!
//! One call, per column: the runs' values go up concatenated in run order (so a global index
//! of the permutation is a position in the concatenation), through the pinned staging
//! buffers of [`transfer`](super::transfer) (the host fills one while the other is in
//! flight); the column's kernels run (values, and the validity bitmap where any run has
//! nulls); the result comes down on a second stream straight into a pinned allocation that
//! becomes the output array's buffers, while the next column goes up (PCIe is full duplex).
//! The indices go up once, first. Where the output is larger than the pinned pool keeps (a
//! whole sort's, [`GatherOutput::Pageable`]), it lands in ordinary memory instead: a thread
//! of its own maps the outputs' pages (huge pages where the kernel has them) while the
//! indices go up, then drains each column through a second pair of staging buffers while
//! the next column goes up, since pinning gigabytes afresh (~0.4 s a GiB) costs more than
//! that copy.
//!
//! Invariants, enforced here:
//! - an output buffer is wrapped as an Arrow buffer only after the download stream that
//!   writes it has finished; on any error every queued copy is finished before the pinned
//!   memory is given back;
//! - an index past the input is never followed: the kernels flag it and the call returns
//!   [`Error::InvalidArgument`], never an array;
//! - the pinned memory of an output is owned by its buffers (an `Arc` shared by the values
//!   and the bitmap of one column) and goes back to a process-wide pool when the last of
//!   them drops; the pool keeps at most [`PINNED_POOL_BYTES`], freeing the rest.

use super::context::{gpu, gpu_err, GatherLane, Gpu};
use super::launch::{Args, DevPtr, Launcher};
use super::manifest::{Entry, Family};
use super::nvrtc::{Module, ModuleSpec};
use super::transfer::{download, prefault, upload, upload_now, upload_slices, DownloadOrder, Staging};
use super::GpuOptions;
use crate::permutation::{Indices, Permutation};
use crate::{Error, Result};
use arrow::array::{make_array, new_empty_array, Array, ArrayData, ArrayRef, RecordBatch};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use arrow::datatypes::DataType;
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Bytes of pinned output memory the pool keeps for reuse once its arrays are dropped.
pub const PINNED_POOL_BYTES: usize = 4 << 30;

/// Every device buffer the gather places starts at a multiple of this (vector accesses of
/// up to 16 bytes, and Arrow's alignment of every native type, hold with it).
const ALIGN: usize = 256;

/// The bytes per value of a column type the device gather takes: primitive types (integers,
/// floats, dates, times, timestamps, durations, intervals, decimals) and fixed-size binary;
/// `None` for the rest (booleans are bit-packed, variable-width types have offsets).
pub fn fixed_width(data_type: &DataType) -> Option<usize> {
    match data_type {
        DataType::FixedSizeBinary(w) if *w > 0 => Some(*w as usize),
        DataType::Boolean => None,
        t if t.is_primitive() => t.primitive_width(),
        _ => None,
    }
}

/// Whether `data_type` is a byte view type (`Utf8View`, `BinaryView`): its 16-byte views are
/// gathered like fixed-width values, then the buffer index of every view longer than 12
/// bytes is rebased onto the output's buffers (every run's, in run order).
fn is_view(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8View | DataType::BinaryView)
}

/// The bytes per row [`gather_fixed_gpu`] moves for a column of `data_type`: the
/// [`fixed_width`] types' width, 16 for the byte view types (the views; their strings stay
/// in the input's buffers, which the output shares); `None` for the rest.
pub fn device_width(data_type: &DataType) -> Option<usize> {
    if is_view(data_type) {
        Some(16)
    } else {
        fixed_width(data_type)
    }
}

// ---------------------------------------------------------------------------------------
// The decision rule.

/// What the device gather and the CPU gather cost on one host, for [`gather_on_gpu_pays`].
///
/// The device's time is a fixed cost plus the bytes that cross PCIe (up and down together:
/// the download of one column overlaps the upload of the next, so one combined rate fits
/// better than two); the CPU's is the output payload bytes over its gather rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatherCosts {
    /// Fixed cost of one device gather (launches, synchronization, the pipeline's first
    /// staging fill, array wrapping), ms.
    pub fixed_ms: f64,
    /// Bytes up plus bytes down per second, end to end (pageable payload through the pinned
    /// staging buffers, indices, results into pooled pinned memory), GB/s.
    pub moved_gbps: f64,
    /// The CPU gather's rate ([`crate::gather::gather`], arrow's `interleave` on
    /// `cpu_threads` threads), in output payload bytes per second, GB/s.
    pub cpu_gbps: f64,
    /// The threads `cpu_gbps` was measured with.
    pub cpu_threads: usize,
}

/// Measured on the H100 host (NVIDIA H100 80GB HBM3, 16 cores) on 2026-11-22 with
/// `CORANK_BENCH_SECTIONS=gather cargo bench --bench gpu` (docs/PERFORMANCE.md, "Device
/// gather of fixed-width payload columns"): 16 runs of 3 x u64 + nullable i32 permuted by
/// their merge, u32 indices. `fixed_ms` and `moved_gbps` are the line through the end-to-end
/// device times at 1M rows (4.4 ms, 63 MB moved) and 16M rows (25.6 ms, 1007 MB moved), the
/// sizes around the crossover; at 64M rows the device was faster than this line (69.8 ms
/// against 93.5), so the rule errs toward the CPU there, where the GPU wins anyway.
/// `cpu_gbps`: the CPU gather's 11.3 GB/s at 16M and 64M rows (12.0 at 1M). The device
/// figures assume a warm pinned pool: the first call's cold pinned allocation of a 64M-row
/// output (1.8 GiB) took 747 ms.
pub const H100_HOST: GatherCosts = GatherCosts { fixed_ms: 3.0, moved_gbps: 44.5, cpu_gbps: 11.3, cpu_threads: 16 };

impl GatherCosts {
    /// Milliseconds the device gather of `rows` output rows of `payload_bytes_per_row`
    /// fixed-width bytes takes from host memory: the payload up (as many input rows as output
    /// rows: a merge's permutation), `index_bytes` per row of indices up (0 where the indices
    /// are already on the device), the payload down.
    pub fn gpu_ms(&self, rows: usize, payload_bytes_per_row: usize, index_bytes: usize) -> f64 {
        let moved = (rows * (2 * payload_bytes_per_row + index_bytes)) as f64;
        self.fixed_ms + moved / (self.moved_gbps * 1e6)
    }

    /// Milliseconds the CPU gather of the same rows takes on `threads` threads (its rate
    /// scaled linearly below the measured thread count, not above: memory bandwidth, not
    /// cores, bounds it there).
    pub fn cpu_ms(&self, rows: usize, payload_bytes_per_row: usize, threads: usize) -> f64 {
        let scale = threads.clamp(1, self.cpu_threads) as f64 / self.cpu_threads as f64;
        (rows * payload_bytes_per_row) as f64 / (self.cpu_gbps * scale * 1e6)
    }
}

/// Whether gathering `rows` rows of `payload_bytes_per_row` fixed-width payload bytes (the
/// sum of the columns' [`fixed_width`]s; validity bitmaps add an eighth of a byte a column
/// and may be left out) on the GPU from host memory is faster than the CPU gather on
/// `cpu_threads` threads, by the costs measured on the H100 host ([`H100_HOST`]).
/// `index_bytes` is 4 or 8 for indices that must go up, 0 where the merge left them on the
/// device.
pub fn gather_on_gpu_pays(rows: usize, payload_bytes_per_row: usize, index_bytes: usize, cpu_threads: usize) -> bool {
    let c = &H100_HOST;
    rows > 0
        && payload_bytes_per_row > 0
        && c.gpu_ms(rows, payload_bytes_per_row, index_bytes) < c.cpu_ms(rows, payload_bytes_per_row, cpu_threads)
}

// ---------------------------------------------------------------------------------------
// Pinned output memory.

/// Freed pinned blocks kept for reuse: (device, size class, address).
struct PinnedPool {
    free: Vec<(usize, usize, usize)>,
    bytes: usize,
}

static PINNED_POOL: Mutex<PinnedPool> = Mutex::new(PinnedPool { free: Vec::new(), bytes: 0 });

/// The size a request of `bytes` is allocated as: a multiple of 2 MiB, then of an eighth of
/// its power of two (at most 1/8 wasted), so similar requests share blocks.
fn size_class(bytes: usize) -> usize {
    let b = bytes.max(1).next_multiple_of(2 << 20);
    let step = (b.next_power_of_two() / 8).max(2 << 20);
    b.next_multiple_of(step)
}

/// A pinned host block owning its memory: the owner of the Arrow buffers made from it.
struct PinnedBlock {
    ptr: NonNull<u8>,
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
    fn new(device: usize, bytes: usize) -> Result<PinnedBlock> {
        let class = size_class(bytes);
        {
            let mut pool = PINNED_POOL.lock().unwrap_or_else(|p| p.into_inner());
            // The smallest free block that fits, up to twice the size class: rounds of
            // similar sizes reuse each other's blocks instead of allocating (a cold pinned
            // allocation costs about 0.4 ms a MiB on the H100 host).
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

    fn addr(&self, offset: usize) -> *mut c_void {
        debug_assert!(offset <= self.bytes);
        // SAFETY: within the block (callers place their ranges inside it).
        unsafe { self.ptr.as_ptr().add(offset) as *mut c_void }
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        {
            let mut pool = PINNED_POOL.lock().unwrap_or_else(|p| p.into_inner());
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
// Device memory: one buffer per device, grown when a call needs more, kept across calls.

struct DevHeld {
    device: usize,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

static DEVICE_BUFFERS: Mutex<Vec<DevHeld>> = Mutex::new(Vec::new());

/// A device buffer of at least `bytes` on `device`, whose context is bound to this thread
/// and whose gather lane the caller holds locked (so no other gather uses the buffer
/// meanwhile).
fn device_buffer(device: usize, bytes: usize) -> Result<DevPtr> {
    let mut held = DEVICE_BUFFERS.lock().unwrap_or_else(|p| p.into_inner());
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
    // SAFETY: a plain allocation in the context bound to this thread, kept in DEVICE_BUFFERS.
    let ptr = unsafe { result::malloc_sync(bytes) }.map_err(|e| Error::Gpu(format!("allocating {bytes} bytes of device memory: {e:?}")))?;
    held.push(DevHeld { device, ptr, bytes });
    Ok(ptr)
}

// ---------------------------------------------------------------------------------------
// The gather.

/// One column of the call: its runs' bytes and where its pieces lie on the device.
struct ColumnPlan<'a> {
    data_type: DataType,
    width: usize,
    /// Per run, its values' bytes.
    values: Vec<&'a [u8]>,
    /// Per run with nulls, the bytes of its bitmap covering its rows; empty without nulls.
    bits: Vec<&'a [u8]>,
    /// The run table of cuda/gather.cu (starts, then bit positions), where nullable.
    table: Vec<u64>,
    /// Byte views: every run's data buffers, in run order (the output's buffers).
    data_buffers: Vec<Buffer>,
    /// Byte views whose buffer indices change: the rebase table of cuda/gather.cu (starts,
    /// then each run's first buffer number); empty otherwise.
    view_table: Vec<u64>,
    dev_view_table: usize,
    dev_in: usize,
    dev_bits: usize,
    dev_table: usize,
    dev_out: usize,
    dev_out_bits: usize,
    /// Bytes of the pinned output: the values (padded to ALIGN), then the bitmap words.
    out_values: usize,
    out_bits: usize,
}

impl ColumnPlan<'_> {
    fn nullable(&self) -> bool {
        !self.bits.is_empty()
    }
}

/// Device byte offsets, each piece at a multiple of [`ALIGN`].
struct Layout(usize);

impl Layout {
    fn place(&mut self, bytes: usize) -> usize {
        let at = self.0;
        self.0 += bytes.max(1).next_multiple_of(ALIGN);
        at
    }
}

/// Bytes of a slice of u32/u64 indices.
fn index_bytes(indices: &Indices) -> &[u8] {
    fn bytes<T>(v: &[T]) -> &[u8] {
        // SAFETY: plain integers (no padding); the view covers exactly `v`, borrowed for the
        // result's lifetime.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    match indices {
        Indices::U32(v) => bytes(v),
        Indices::U64(v) => bytes(v),
    }
}

/// Device bytes a whole sort on the device needs ([`GatherOutput::Pageable`]'s use: the
/// sort, then the gather of every column): the sort's key words three times (input and the
/// merge tree's two intermediate buffers) and its indices twice, then the gather's indices
/// and every column's values in and out, plus 64 MiB of slack. `key_bytes` is the key
/// words' width (at most 32), `row_bytes` the columns' bytes per row (bitmaps included).
pub fn whole_sort_device_bytes(rows: usize, key_bytes: usize, row_bytes: usize) -> usize {
    let index_bytes = if rows > u32::MAX as usize { 8 } else { 4 };
    rows.saturating_mul(3 * key_bytes + 3 * index_bytes + 2 * row_bytes).saturating_add(64 << 20)
}

/// Bytes of device memory a sort and a gather on `device` may use now: the free memory, the
/// buffers the device's pool keeps for its sorts and merges (they reuse or release them),
/// and the gather's own buffer (replaced when too small).
pub fn device_bytes_available(device: usize) -> Result<usize> {
    let g = gpu(device)?;
    // The device's lock binds its context to this thread for the query below.
    let pooled = g.lock()?.pooled_bytes();
    let held: usize = DEVICE_BUFFERS.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|h| h.device == device).map(|h| h.bytes).sum();
    let (free, _) = result::mem_get_info().map_err(gpu_err("reading free device memory"))?;
    Ok(free + pooled + held)
}

/// Where [`gather_fixed_gpu_into`]'s arrays live on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherOutput {
    /// Pooled pinned blocks that become the arrays' buffers, written by the DMA itself: for
    /// outputs the pool holds ([`PINNED_POOL_BYTES`]), such as a merge round's.
    Pinned,
    /// Ordinary (pageable) allocations, filled from staging buffers by the host: for outputs
    /// larger than the pool, such as a whole sort's, where pinning fresh memory would cost
    /// more than the copy (747 ms for 1.8 GiB, cold, on the H100 host).
    Pageable,
}

/// [`gather_fixed_gpu`] with the output's host memory chosen by the caller.
pub fn gather_fixed_gpu_into(
    runs: &[RecordBatch],
    perm: &Permutation,
    columns: &[usize],
    options: &GpuOptions,
    output: GatherOutput,
) -> Result<Vec<ArrayRef>> {
    gather_timed(runs, perm, columns, options, output, None)
}

/// Gathers the fixed-width columns `columns` (indices into the runs' schema) of `runs` in
/// the order of `perm` on the first GPU of `options.devices`: one array per column, `perm.len()` rows,
/// identical to what [`crate::gather::gather`] produces for those columns (values and
/// validity), the arrays' buffers in pinned host memory.
///
/// Byte view columns (`Utf8View`, `BinaryView`) are gathered too: their views, the output
/// sharing every run's data buffers (in run order), the strings not copied.
///
/// The columns must have the same [`device_width`] type in every run; `perm` must be a
/// permutation of these runs (its run offsets their row counts). Bad arguments are
/// [`Error::InvalidArgument`] (an index past the input included), GPU failures
/// [`Error::Gpu`] or [`Error::GpuUnavailable`]; never a panic, never a partial result.
/// Whether this pays against the CPU gather: [`gather_on_gpu_pays`].
pub fn gather_fixed_gpu(runs: &[RecordBatch], perm: &Permutation, columns: &[usize], options: &GpuOptions) -> Result<Vec<ArrayRef>> {
    gather_timed(runs, perm, columns, options, GatherOutput::Pinned, None)
}

/// [`gather_fixed_gpu`], adding the kernels' time (CUDA events, ms) to `kernel_ms` when
/// given (for the bench).
pub(crate) fn gather_timed(
    runs: &[RecordBatch],
    perm: &Permutation,
    columns: &[usize],
    options: &GpuOptions,
    output: GatherOutput,
    kernel_ms: Option<&mut f32>,
) -> Result<Vec<ArrayRef>> {
    if columns.is_empty() {
        return Ok(Vec::new());
    }
    let Some(first) = runs.first() else {
        return Err(Error::InvalidArgument("gather_fixed_gpu: no runs (the columns' types are unknown)".into()));
    };
    if perm.run_offsets.len() != runs.len() + 1 {
        return Err(Error::InvalidArgument(format!(
            "gather_fixed_gpu: the permutation is of {} runs, {} were given",
            perm.run_offsets.len().saturating_sub(1),
            runs.len()
        )));
    }
    for (r, b) in runs.iter().enumerate() {
        if perm.run_offsets[r + 1].checked_sub(perm.run_offsets[r]) != Some(b.num_rows()) {
            return Err(Error::InvalidArgument(format!(
                "gather_fixed_gpu: run {r} has {} rows, the permutation's run offsets say {}",
                b.num_rows(),
                perm.run_offsets[r + 1] as i128 - perm.run_offsets[r] as i128
            )));
        }
    }
    let mut types = Vec::with_capacity(columns.len());
    for &c in columns {
        if c >= first.num_columns() {
            return Err(Error::InvalidArgument(format!("gather_fixed_gpu: column {c} does not exist ({} columns)", first.num_columns())));
        }
        let t = first.column(c).data_type().clone();
        let Some(width) = device_width(&t) else {
            return Err(Error::UnsupportedType { column: first.schema().field(c).name().clone(), data_type: t });
        };
        for (r, b) in runs.iter().enumerate() {
            if c >= b.num_columns() || b.column(c).data_type() != &t {
                return Err(Error::SchemaMismatch { run: r, detail: format!("column {c} is not {t} as in run 0") });
            }
        }
        types.push((t, width));
    }
    let n = perm.len();
    if n == 0 {
        return Ok(types.iter().map(|(t, _)| new_empty_array(t)).collect());
    }
    let total = *perm.run_offsets.last().unwrap_or(&0);
    // The runs' arrays, kept alive for the byte views below.
    let datas: Vec<Vec<ArrayData>> = columns.iter().map(|&c| runs.iter().map(|b| b.column(c).to_data()).collect()).collect();
    let arrays: Vec<Vec<&dyn Array>> = columns.iter().map(|&c| runs.iter().map(|b| b.column(c).as_ref()).collect()).collect();
    let wide = matches!(perm.indices, Indices::U64(_));
    let ib = if wide { 8 } else { 4 };
    let mut layout = Layout(0);
    let dev_idx = layout.place(n * ib);
    let dev_error = layout.place(4);
    let words = n.div_ceil(32);
    let mut plans = Vec::with_capacity(columns.len());
    for (ci, (t, width)) in types.iter().enumerate() {
        let width = *width;
        let mut values = Vec::with_capacity(runs.len());
        for (r, d) in datas[ci].iter().enumerate() {
            let (off, len) = (d.offset(), d.len());
            let bytes = d.buffers().first().map(|b| b.as_slice()).unwrap_or(&[]);
            let range = off * width..(off + len) * width;
            let Some(v) = bytes.get(range) else {
                return Err(Error::InvalidArgument(format!("gather_fixed_gpu: run {r}, column {}: values buffer too short", columns[ci])));
            };
            values.push(v);
        }
        let nullable = arrays[ci].iter().any(|a| a.null_count() > 0);
        let (mut bits, mut table) = (Vec::new(), Vec::new());
        if nullable {
            table.extend(perm.run_offsets.iter().map(|&o| o as u64));
            let mut at = 0u64; // byte position in the concatenated bitmaps
            for a in &arrays[ci] {
                match a.nulls().filter(|nb| nb.null_count() > 0) {
                    Some(nb) => {
                        let (off, len) = (nb.offset(), nb.len());
                        let bytes = nb.buffer().as_slice();
                        let Some(b) = bytes.get(off / 8..(off + len).div_ceil(8)) else {
                            return Err(Error::InvalidArgument("gather_fixed_gpu: validity buffer too short".into()));
                        };
                        table.push(at * 8 + (off % 8) as u64);
                        at += b.len() as u64;
                        bits.push(b);
                    }
                    None => table.push(u64::MAX),
                }
            }
        }
        let (mut data_buffers, mut view_table) = (Vec::new(), Vec::new());
        if is_view(t) {
            // Run r's buffer i is the output's buffer bases[r] + i.
            let mut bases = Vec::with_capacity(runs.len());
            for d in &datas[ci] {
                bases.push(data_buffers.len() as u64);
                data_buffers.extend(d.buffers().iter().skip(1).cloned());
            }
            if data_buffers.len() > u32::MAX as usize {
                return Err(Error::InvalidArgument(format!("gather_fixed_gpu: column {}: more than 2^32 data buffers", columns[ci])));
            }
            if bases.iter().any(|&b| b > 0) {
                view_table.extend(perm.run_offsets.iter().map(|&o| o as u64));
                view_table.extend(bases);
            }
        }
        let bits_len: usize = bits.iter().map(|b| b.len()).sum();
        let dev_view_table = if view_table.is_empty() { 0 } else { layout.place(view_table.len() * 8) };
        let dev_in = layout.place(total * width);
        let (dev_bits, dev_table) = if nullable { (layout.place(bits_len), layout.place(table.len() * 8)) } else { (0, 0) };
        let dev_out = layout.place(n * width);
        let dev_out_bits = if nullable { layout.place(words * 4) } else { 0 };
        plans.push(ColumnPlan {
            data_type: t.clone(),
            width,
            values,
            bits,
            table,
            data_buffers,
            view_table,
            dev_view_table,
            dev_in,
            dev_bits,
            dev_table,
            dev_out,
            dev_out_bits,
            out_values: (n * width).next_multiple_of(ALIGN),
            out_bits: if nullable { words * 4 } else { 0 },
        });
    }
    let device = options.devices.first();
    let gpu = gpu(device)?;
    // The module under the device's lock (held only for that), the rest in the gather's
    // lane: a merge may run on the device meanwhile.
    let module = gpu.lock()?.module(gpu, ModuleSpec { family: Family::Gather, key_bytes: 8, index_bits: 32 })?;
    let mut lane = gpu.lock_gather_lane()?;
    let base = device_buffer(device, layout.0)?;
    // The outputs live here, outside the queued work, so that on error the copies into them
    // are finished (below) before they are dropped.
    let mut dest = match output {
        GatherOutput::Pinned => {
            Dest::Pinned(plans.iter().map(|p| PinnedBlock::new(device, p.out_values + p.out_bits)).collect::<Result<_>>()?)
        }
        GatherOutput::Pageable => Dest::Pageable(plans.iter().map(|p| MutableBuffer::with_capacity(p.out_values + p.out_bits)).collect()),
    };
    let mut error = 0u32;
    let res = run(gpu, &mut lane, &module, &plans, &mut dest, perm, total, base, dev_idx, dev_error, wide, kernel_ms, &mut error);
    if res.is_err() {
        let _ = result::ctx::synchronize();
    }
    if output == GatherOutput::Pageable && layout.0 > KEEP_DEVICE_BYTES {
        // A whole sort's buffer: not kept for the process (the merges' rounds need far less).
        release_device_buffer(device);
    }
    drop(lane);
    res?;
    if error != 0 {
        return Err(Error::InvalidArgument(format!("gather_fixed_gpu: a permutation index is past the {total} input rows")));
    }
    // (values, bitmap) buffers per column.
    let buffers: Vec<(Buffer, Option<Buffer>)> = match dest {
        Dest::Pinned(blocks) => plans
            .iter()
            .zip(blocks)
            .map(|(p, block)| {
                let block: Arc<PinnedBlock> = Arc::new(block);
                // SAFETY: the block holds out_values + out_bits bytes, all written by the
                // finished download (`run` returned Ok after synchronizing the download
                // stream) and never written again; the Arc keeps it alive (and out of the
                // pool) while a buffer uses it. Both ranges start at multiples of ALIGN from a
                // page-aligned block, so they are aligned for every native type.
                let values = unsafe { Buffer::from_custom_allocation(block.ptr, n * p.width, block.clone()) };
                let bits = p.nullable().then(|| {
                    // SAFETY: as above, the bitmap's words follow the padded values.
                    let ptr = unsafe { NonNull::new_unchecked(block.ptr.as_ptr().add(p.out_values)) };
                    // SAFETY: as above.
                    unsafe { Buffer::from_custom_allocation(ptr, n.div_ceil(8), block.clone()) }
                });
                (values, bits)
            })
            .collect(),
        Dest::Pageable(bufs) => plans
            .iter()
            .zip(bufs)
            .map(|(p, mut buf)| {
                // SAFETY: `run` returned Ok: the drain wrote all out_values + out_bits bytes
                // (the capacity asked for) before returning.
                unsafe { buf.set_len(p.out_values + p.out_bits) };
                let whole: Buffer = buf.into();
                let bits = p.nullable().then(|| whole.slice_with_length(p.out_values, n.div_ceil(8)));
                (whole.slice_with_length(0, n * p.width), bits)
            })
            .collect(),
    };
    let mut out = Vec::with_capacity(plans.len());
    for (p, (values, bits)) in plans.iter().zip(buffers) {
        let nulls = bits.map(|bits| NullBuffer::new(BooleanBuffer::new(bits, 0, n))).filter(|nb| nb.null_count() > 0);
        let builder = ArrayData::builder(p.data_type.clone()).len(n).add_buffer(values).nulls(nulls);
        let data = if is_view(&p.data_type) {
            // SAFETY: every view is an input view (valid for its run's buffers: the input
            // arrays are valid Arrow data) copied unchanged but for its buffer index, which
            // the rebase kernel moved by its run's first buffer number among `data_buffers`,
            // every run's buffers in run order; an index past the input was refused above.
            // The full validation would read every string again (UTF-8) for nothing.
            unsafe { builder.add_buffers(p.data_buffers.iter().cloned()).build_unchecked() }
        } else {
            builder.build()?
        };
        out.push(make_array(data));
    }
    Ok(out)
}

/// The gather's host outputs, one per column: out_values + out_bits bytes each.
enum Dest {
    Pinned(Vec<PinnedBlock>),
    /// Allocated, not initialized, until the drain fills them.
    Pageable(Vec<MutableBuffer>),
}

/// Bytes of device buffer a pageable (whole-sort) gather keeps for the next call; a larger
/// one is freed when the call ends.
const KEEP_DEVICE_BYTES: usize = 4 << 30;

/// Frees `device`'s gather buffer (the caller holds the gather lane, the device is idle).
fn release_device_buffer(device: usize) {
    let mut held = DEVICE_BUFFERS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = held.iter().position(|h| h.device == device) {
        let _ = result::ctx::synchronize();
        let h = held.swap_remove(i);
        // SAFETY: allocated by device_buffer in this context (bound: the caller holds the
        // lane), freed once; the device is idle.
        unsafe {
            let _ = result::free_sync(h.ptr);
        }
    }
}

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

/// Queues everything and waits for it: indices up, per column values (and bitmaps) up, the
/// kernels, the result down into `dest` (pinned: copies on a second stream; pageable: a
/// thread of its own drains each column through the download staging buffers once its
/// kernels are done, while this thread sends the next column up); then reads the error word
/// into `error`.
#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    lane: &mut GatherLane,
    module: &Module,
    plans: &[ColumnPlan],
    dest: &mut Dest,
    perm: &Permutation,
    total: usize,
    base: DevPtr,
    dev_idx: usize,
    dev_error: usize,
    wide: bool,
    mut kernel_ms: Option<&mut f32>,
    error: &mut u32,
) -> Result<()> {
    let n = perm.len() as u64;
    let stream = lane.stream(gpu)?;
    let at = |off: usize| base + off as u64;
    let dl = gpu.ctx.new_stream().map_err(gpu_err("creating a stream"))?;
    // SAFETY: the error word lies in the device buffer (4 bytes at dev_error).
    unsafe { result::memset_d8_async(at(dev_error), 0, 4, stream) }.map_err(gpu_err("clearing the error word"))?;
    // The small run tables first (synchronous), then the indices.
    for p in plans.iter().filter(|p| p.nullable()) {
        upload_now(stream, &p.table, at(p.dev_table))?;
    }
    for p in plans.iter().filter(|p| !p.view_table.is_empty()) {
        upload_now(stream, &p.view_table, at(p.dev_view_table))?;
    }
    let (up, down) = match dest {
        Dest::Pinned(_) => (lane.staging()?, None),
        Dest::Pageable(_) => {
            let (up, down) = lane.both_stagings()?;
            (up, Some(down))
        }
    };
    upload(stream, up, index_bytes(&perm.indices), at(dev_idx))?;
    let launcher = Launcher { module, stream };
    let threads = module.policy.threads;
    let timing = match kernel_ms {
        Some(_) => Some((TimingEvent::new()?, TimingEvent::new()?)),
        None => None,
    };
    let done: Vec<TimingEvent> = (0..plans.len()).map(|_| TimingEvent::new()).collect::<Result<_>>()?;
    // Column `p` up, its kernels, and its event recorded after them.
    let mut queue = |p: &ColumnPlan, ev: &TimingEvent, up: &mut Staging| -> Result<()> {
        upload_slices(stream, up, &p.values, at(p.dev_in))?;
        if p.nullable() {
            upload_slices(stream, up, &p.bits, at(p.dev_bits))?;
        }
        if let Some((t0, _)) = &timing {
            t0.record(stream)?;
        }
        let per_thread = if p.width <= 2 { 4 } else { 1 };
        let args = Args::GatherValues {
            src: at(p.dev_in),
            dst: at(p.dev_out),
            idx: at(dev_idx),
            n,
            total: total as u64,
            width: p.width as u32,
            error: at(dev_error),
            wide,
        };
        let entry = if wide { Entry::GatherValues64 } else { Entry::GatherValues32 };
        launcher.launch(entry, grid(n.div_ceil(per_thread), threads), args)?;
        if !p.view_table.is_empty() {
            let args = Args::RebaseViews {
                views: at(p.dev_out),
                runs: at(p.dev_view_table),
                nruns: (perm.run_offsets.len() - 1) as u32,
                idx: at(dev_idx),
                n,
                total: total as u64,
                wide,
            };
            let entry = if wide { Entry::RebaseViews64 } else { Entry::RebaseViews32 };
            launcher.launch(entry, grid(n, threads), args)?;
        }
        if p.nullable() {
            let chunks = n.div_ceil(32 * 32);
            let args = Args::GatherValidity {
                bits: at(p.dev_bits),
                runs: at(p.dev_table),
                nruns: (perm.run_offsets.len() - 1) as u32,
                out: at(p.dev_out_bits),
                idx: at(dev_idx),
                n,
                total: total as u64,
                error: at(dev_error),
                wide,
            };
            let entry = if wide { Entry::GatherValidity64 } else { Entry::GatherValidity32 };
            launcher.launch(entry, grid(chunks * 32, threads), args)?;
        }
        if let (Some((t0, t1)), Some(ms)) = (&timing, kernel_ms.as_deref_mut()) {
            t1.record(stream)?;
            // SAFETY: live events recorded on one stream; waiting for the second first.
            unsafe {
                result::event::synchronize(t1.0).map_err(gpu_err("waiting for an event"))?;
                *ms += result::event::elapsed(t0.0, t1.0).map_err(gpu_err("timing events"))?;
            }
        }
        ev.record(stream)
    };
    match dest {
        Dest::Pinned(blocks) => {
            for ((p, block), ev) in plans.iter().zip(blocks.iter()).zip(&done) {
                queue(p, ev, up)?;
                // The download waits for this column's kernels only; the next column goes up
                // meanwhile.
                // SAFETY: `dl` and the event belong to this context; the block holds
                // out_values + out_bits bytes and stays alive (the caller drops it only after
                // the download stream finished: synchronized below, or after a context
                // synchronize on error); the device ranges lie in the device buffer.
                unsafe {
                    result::stream::wait_event(dl.cu_stream(), ev.0, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                        .map_err(gpu_err("ordering the download"))?;
                    sys::cuMemcpyDtoHAsync_v2(block.addr(0), at(p.dev_out), (n as usize) * p.width, dl.cu_stream())
                        .result()
                        .map_err(gpu_err("copying from the device"))?;
                    if p.nullable() {
                        sys::cuMemcpyDtoHAsync_v2(block.addr(p.out_values), at(p.dev_out_bits), p.out_bits, dl.cu_stream())
                            .result()
                            .map_err(gpu_err("copying from the device"))?;
                    }
                }
            }
            dl.synchronize().map_err(gpu_err("finishing the download"))?;
        }
        Dest::Pageable(bufs) => {
            let mut columns = Vec::with_capacity(plans.len());
            for (p, buf) in plans.iter().zip(bufs.iter_mut()) {
                let bytes = p.out_values + p.out_bits;
                // SAFETY: the buffer was allocated with capacity `bytes`; the view covers
                // exactly that memory, borrowed mutably while the drain fills it, and
                // MaybeUninit<u8> makes no claim about its contents.
                let view = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut MaybeUninit<u8>, bytes) };
                let values = (n as usize) * p.width;
                // The padding between the values and the bitmap is never downloaded: zeros.
                view[values..p.out_values].fill(MaybeUninit::new(0));
                let mut pieces = vec![(at(p.dev_out), 0, values)];
                if p.nullable() {
                    pieces.push((at(p.dev_out_bits), p.out_values, p.out_bits));
                }
                columns.push((view, pieces));
            }
            let down = down.expect("pageable outputs have download staging");
            let drain = Drain { gpu, main: stream, dl: dl.cu_stream(), staging: down, events: done.iter().map(|e| e.0).collect(), columns };
            std::thread::scope(|scope| -> Result<()> {
                let (tx, rx) = std::sync::mpsc::channel::<usize>();
                let drained = scope.spawn(move || drain.run(rx));
                let mut queued = Ok(());
                for (c, (p, ev)) in plans.iter().zip(&done).enumerate() {
                    queued = queue(p, ev, up);
                    // A send fails only once the drain stopped on an error of its own.
                    if queued.is_err() || tx.send(c).is_err() {
                        break;
                    }
                }
                drop(tx);
                let drained = drained.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                queued.and(drained)
            })?;
        }
    }
    // SAFETY: the lane's stream; then a 4-byte read of the error word the kernels wrote.
    unsafe {
        result::stream::synchronize(stream).map_err(gpu_err("running the gather"))?;
        let mut word = [0u32; 1];
        result::memcpy_dtoh_sync(&mut word, at(dev_error)).map_err(gpu_err("reading the error word"))?;
        *error = word[0];
    }
    Ok(())
}

/// The drain of a pageable gather, on a thread of its own: each column, once its kernels
/// are done (its event), down through the download staging buffers into its output.
struct Drain<'a> {
    gpu: &'a Gpu,
    /// The stream the kernels run on (the events' stream).
    main: sys::CUstream,
    /// The download's stream.
    dl: sys::CUstream,
    staging: &'a mut Staging,
    /// Per column, recorded after its kernels.
    events: Vec<sys::CUevent>,
    /// Per column: its output bytes, and the pieces that fill them.
    columns: Vec<(&'a mut [MaybeUninit<u8>], Vec<Piece>)>,
}

/// A piece of a column's output: (device address, offset in the output, bytes).
type Piece = (DevPtr, usize, usize);

// SAFETY: the raw handles (streams, events, the staging buffers' pinned memory) belong to
// the device's context, not to a thread: the driver API lets any thread that binds the
// context use them, and the drain binds it first. The caller holds the gather lane's lock
// for the whole scope of the drain's thread, so no other gather uses the stagings or
// streams meanwhile, and it records a column's event before sending the column's number.
unsafe impl Send for Drain<'_> {}

impl Drain<'_> {
    /// Drains the columns whose numbers arrive, until the sender is dropped.
    fn run(mut self, columns: std::sync::mpsc::Receiver<usize>) -> Result<()> {
        self.gpu.bind()?;
        // The outputs' pages mapped first (huge pages where THP is on), while the indices and
        // the first columns go up: first writes into fresh memory would slow the drain.
        std::thread::scope(|scope| {
            for (view, _) in self.columns.iter_mut() {
                prefault(scope, view);
            }
        });
        for c in columns {
            let (view, pieces) = &mut self.columns[c];
            for &(src, offset, bytes) in pieces.iter() {
                if bytes == 0 {
                    continue;
                }
                let order = DownloadOrder { main: self.main, chunk_events: &self.events[c..c + 1], chunk_ends: &[bytes as u64] };
                download(self.dl, self.staging, src, &mut view[offset..offset + bytes], 1, &order)?;
            }
        }
        Ok(())
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

    #[test]
    fn widths() {
        use arrow::datatypes::TimeUnit;
        assert_eq!(fixed_width(&DataType::Int8), Some(1));
        assert_eq!(fixed_width(&DataType::Float16), Some(2));
        assert_eq!(fixed_width(&DataType::Date32), Some(4));
        assert_eq!(fixed_width(&DataType::Timestamp(TimeUnit::Microsecond, None)), Some(8));
        assert_eq!(fixed_width(&DataType::Decimal128(38, 2)), Some(16));
        assert_eq!(fixed_width(&DataType::FixedSizeBinary(3)), Some(3));
        assert_eq!(fixed_width(&DataType::Boolean), None);
        assert_eq!(fixed_width(&DataType::Utf8), None);
        assert_eq!(fixed_width(&DataType::Utf8View), None);
        assert_eq!(device_width(&DataType::Utf8View), Some(16));
        assert_eq!(device_width(&DataType::BinaryView), Some(16));
        assert_eq!(device_width(&DataType::Int64), Some(8));
        assert_eq!(device_width(&DataType::Utf8), None);
    }

    #[test]
    fn the_rule_follows_the_costs() {
        assert!(!gather_on_gpu_pays(0, 8, 4, 16));
        let c = H100_HOST;
        for rows in [1 << 10, 1 << 20, 1 << 26] {
            let pays = gather_on_gpu_pays(rows, 28, 4, 16);
            assert_eq!(pays, c.gpu_ms(rows, 28, 4) < c.cpu_ms(rows, 28, 16));
        }
        // Fewer CPU threads never make the GPU less attractive.
        assert!(c.cpu_ms(1 << 20, 28, 2) > c.cpu_ms(1 << 20, 28, 16));
    }
}

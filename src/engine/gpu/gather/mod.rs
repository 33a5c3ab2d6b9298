//! The payload gather on the device: a merge's permutation applied to fixed-width payload
//! columns and to byte views (`cuda/gather.cu`), with results in pinned host memory wrapped
//! as Arrow buffers without another copy, and the rule, fitted to measurements, for when
//! that pays ([`gather_on_gpu_pays`]). A byte view column's views are gathered as 16-byte values and
//! their buffer indices rebased onto the output's data buffers, which are every run's, in run
//! order: the strings themselves are neither moved nor copied.
//!
//! One call, per column: the runs' values go up concatenated in run order (so a global index
//! of the permutation is a position in the concatenation), through the pinned staging
//! buffers of `transfer` (the host fills one while the other is in
//! flight); the column's kernels run (values, and the validity bitmap where any run has
//! nulls); the result comes down on a second stream straight into a pinned allocation that
//! becomes the output array's buffers, while the next column goes up (PCIe is full duplex).
//! The indices go up once, first. Where the output is larger than the pinned pool keeps (a
//! whole sort's, [`GatherOutput::Pageable`]), it lands in ordinary memory instead: a thread
//! of its own maps the outputs' pages (huge pages where the kernel has them) while the
//! indices go up, then drains each column through a second pair of staging buffers while
//! the next column goes up, since pinning gigabytes afresh costs more than that copy.
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
//!
//! The files, in the order of a call: `plan` (arguments checked, columns read, the device
//! buffer's layout), `output` (the host outputs, and their wrapping as arrays), `run` (the
//! launch sequence), `drain` (the pageable outputs' drain thread); `cost` holds the rule and
//! the device memory budgets. The pinned pool and the device buffer are the process's
//! (`engine/gpu/runtime.rs`).

mod cost;
mod drain;
mod output;
mod plan;
mod run;

use super::context::gpu;
use super::manifest::Family;
use super::nvrtc::ModuleSpec;
use super::runtime::runtime;
use super::tuning::GATHER_KEEP_DEVICE_BYTES;
use super::GpuOptions;
use crate::permutation::Permutation;
use crate::{Error, Result};
use arrow::array::{new_empty_array, Array, ArrayData, ArrayRef, RecordBatch};
use arrow::datatypes::DataType;
use cudarc::driver::result;
use output::Dest;

pub use super::tuning::PINNED_POOL_BYTES;
pub use cost::{device_bytes_available, gather_on_gpu_pays, whole_sort_device_bytes, GatherCosts, H100_HOST};

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

/// Where [`gather_fixed_gpu_into`]'s arrays live on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherOutput {
    /// Pooled pinned blocks that become the arrays' buffers, written by the DMA itself: for
    /// outputs the pool holds ([`PINNED_POOL_BYTES`]), such as a merge round's.
    Pinned,
    /// Ordinary (pageable) allocations, filled from staging buffers by the host: for outputs
    /// larger than the pool, such as a whole sort's, where pinning fresh memory would cost
    /// more than the copy.
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
    let types = plan::check(runs, perm, columns)?;
    let n = perm.len();
    if n == 0 {
        return Ok(types.iter().map(|(t, _)| new_empty_array(t)).collect());
    }
    // The runs' arrays, kept alive for the byte views below.
    let datas: Vec<Vec<ArrayData>> = columns.iter().map(|&c| runs.iter().map(|b| b.column(c).to_data()).collect()).collect();
    let arrays: Vec<Vec<&dyn Array>> = columns.iter().map(|&c| runs.iter().map(|b| b.column(c).as_ref()).collect()).collect();
    let plan = plan::plan(perm, columns, &types, &datas, &arrays)?;
    let device = options.devices.first();
    let gpu = gpu(device)?;
    // The module under the device's lock (held only for that), the rest in the gather's
    // lane: a merge may run on the device meanwhile.
    let module = gpu.lock()?.module(gpu, ModuleSpec { family: Family::Gather, key_bytes: 8, index_bits: 32 })?;
    let mut lane = gpu.lock_gather_lane()?;
    let base = runtime().gather_buffer(device, plan.bytes)?;
    // The outputs live here, outside the queued work, so that on error the copies into them
    // are finished (below) before they are dropped.
    let mut dest = Dest::new(output, device, &plan.columns)?;
    let res = run::run(gpu, &mut lane, &module, &plan, &mut dest, base, kernel_ms);
    if res.is_err() {
        let _ = result::ctx::synchronize();
    }
    if output == GatherOutput::Pageable && plan.bytes > GATHER_KEEP_DEVICE_BYTES {
        // A whole sort's buffer: not kept for the process (the merges' rounds need far less).
        runtime().release_gather_buffer(device);
    }
    drop(lane);
    if res? != 0 {
        return Err(Error::InvalidArgument(format!("gather_fixed_gpu: a permutation index is past the {} input rows", plan.total)));
    }
    dest.into_arrays(&plan.columns, n)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

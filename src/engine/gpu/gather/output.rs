//! The gather's host outputs ([`Dest`]): pooled pinned blocks the download writes by DMA,
//! or pageable allocations the drain fills; and, once the call has finished, their wrapping
//! as the output arrays without another copy.
//!
//! An output is wrapped only after `run` returned Ok: every byte of it written by a
//! finished download (pinned) or drain (pageable), and never written again.

use super::super::runtime::PinnedBlock;
use super::plan::ColumnPlan;
use super::{is_view, GatherOutput};
use crate::Result;
use arrow::array::{make_array, ArrayData, ArrayRef};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use std::ptr::NonNull;
use std::sync::Arc;

/// The gather's host outputs, one per column: out_values + out_bits bytes each.
pub(super) enum Dest {
    Pinned(Vec<PinnedBlock>),
    /// Allocated, not initialized, until the drain fills them.
    Pageable(Vec<MutableBuffer>),
}

impl Dest {
    /// The outputs of `plans` in host memory of kind `output` (pinned: for `device`'s context,
    /// bound to this thread).
    pub(super) fn new(output: GatherOutput, device: usize, plans: &[ColumnPlan]) -> Result<Dest> {
        Ok(match output {
            GatherOutput::Pinned => {
                Dest::Pinned(plans.iter().map(|p| PinnedBlock::new(device, p.out_values + p.out_bits)).collect::<Result<_>>()?)
            }
            GatherOutput::Pageable => {
                Dest::Pageable(plans.iter().map(|p| MutableBuffer::with_capacity(p.out_values + p.out_bits)).collect())
            }
        })
    }

    /// The output arrays of `n` rows, one per column of `plans`. Only after `run` returned Ok
    /// (see the module doc).
    pub(super) fn into_arrays(self, plans: &[ColumnPlan], n: usize) -> Result<Vec<ArrayRef>> {
        let buffers = self.into_buffers(plans, n);
        let mut out = Vec::with_capacity(plans.len());
        for (p, (values, bits)) in plans.iter().zip(buffers) {
            let nulls = bits.map(|bits| NullBuffer::new(BooleanBuffer::new(bits, 0, n))).filter(|nb| nb.null_count() > 0);
            let builder = ArrayData::builder(p.data_type.clone()).len(n).add_buffer(values).nulls(nulls);
            let data = if is_view(&p.data_type) {
                // SAFETY: every view is an input view (valid for its run's buffers: the input
                // arrays are valid Arrow data) copied unchanged but for its buffer index, which
                // the rebase kernel moved by its run's first buffer number among `data_buffers`,
                // every run's buffers in run order; an index past the input was refused by the
                // caller (the error word). The full validation would read every string again
                // (UTF-8) for nothing.
                unsafe { builder.add_buffers(p.data_buffers.iter().cloned()).build_unchecked() }
            } else {
                builder.build()?
            };
            out.push(make_array(data));
        }
        Ok(out)
    }

    /// (values, bitmap) buffers per column.
    fn into_buffers(self, plans: &[ColumnPlan], n: usize) -> Vec<(Buffer, Option<Buffer>)> {
        match self {
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
        }
    }
}

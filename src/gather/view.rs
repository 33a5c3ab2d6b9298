//! String and binary view columns (`Utf8View`, `BinaryView`) read as fixed-width 16-byte
//! values, their long values' buffer numbers renumbered per output batch ([`ViewColumn`]).

use super::fixed::{gathered_nulls, read_at, run_nulls};
use super::Source;
use arrow::array::{ArrayRef, AsArray, BinaryViewArray, StringViewArray};
use arrow::buffer::{Buffer, NullBuffer, ScalarBuffer};
use arrow::datatypes::DataType;
use std::sync::Arc;

/// A string or binary view column (`Utf8View`, `BinaryView`), its 16-byte views read as
/// `FixedColumn` reads values. A view of more than 12 bytes points into one of its run's
/// data buffers: its buffer index is renumbered over the buffers the output batch
/// references (in order of first reference, as arrow's `interleave` does), so that a batch
/// holds only the buffers it uses.
pub(super) struct ViewColumn {
    data_type: DataType,
    /// Per run, the address of its first view.
    view_start: Vec<usize>,
    /// Per run, its data buffers.
    buffers: Vec<Vec<Buffer>>,
    /// Per run, the number of its first data buffer among all runs' buffers.
    first_buffer: Vec<usize>,
    /// The data buffers of all runs.
    total_buffers: usize,
    /// Per run, its validity, where some run's column holds a null.
    nulls: Option<Vec<Option<NullBuffer>>>,
}

/// The bits of a view's buffer index (`ByteView::buffer_index`: bits 64..96 of the view).
const VIEW_BUFFER_SHIFT: u32 = 64;

impl ViewColumn {
    /// A column of `arrays` (one per run), or `None` where it is not a view column.
    pub(super) fn new(arrays: &[ArrayRef], data_type: &DataType) -> Option<Self> {
        let (mut view_start, mut buffers, mut first_buffer) = (Vec::new(), Vec::new(), Vec::new());
        let mut next_buffer = 0;
        for column in arrays {
            let (views, data) = match data_type {
                DataType::Utf8View => {
                    let a = column.as_string_view();
                    (a.views(), a.data_buffers())
                }
                DataType::BinaryView => {
                    let a = column.as_binary_view();
                    (a.views(), a.data_buffers())
                }
                _ => return None,
            };
            view_start.push(views.as_ptr() as usize);
            first_buffer.push(next_buffer);
            next_buffer += data.len();
            buffers.push(data.to_vec());
        }
        Some(ViewColumn {
            data_type: data_type.clone(),
            view_start,
            buffers,
            first_buffer,
            total_buffers: next_buffer,
            nulls: run_nulls(arrays),
        })
    }

    /// The views of the rows `idx` as one array.
    pub(super) fn gather(&self, idx: &[Source]) -> ArrayRef {
        // SAFETY: `view_start` holds each run's first view (`ViewColumn::new`).
        let mut views: Vec<u128> = unsafe { read_at::<u128>(&self.view_start, idx) };
        let mut out_buffers: Vec<Buffer> = Vec::new();
        // Per buffer of all runs, its index in `out_buffers` or `u32::MAX` (made at the first
        // long value: a batch of short strings needs none).
        let mut renumbered: Vec<u32> = Vec::new();
        for (view, &(run, _)) in views.iter_mut().zip(idx) {
            if (*view as u32) <= 12 {
                continue; // inline: the bytes are in the view
            }
            if renumbered.is_empty() {
                renumbered = vec![u32::MAX; self.total_buffers];
            }
            let index = (*view >> VIEW_BUFFER_SHIFT) as u32 as usize;
            let Some(buffer) = self.buffers[run].get(index) else {
                // Only a null slot's view can point past its run's buffers (valid views are
                // checked when their array is built): an empty view, not a panic.
                *view = 0;
                continue;
            };
            let new_index = &mut renumbered[self.first_buffer[run] + index];
            if *new_index == u32::MAX {
                *new_index = out_buffers.len() as u32;
                out_buffers.push(buffer.clone());
            }
            *view = (*view & !((u32::MAX as u128) << VIEW_BUFFER_SHIFT)) | ((*new_index as u128) << VIEW_BUFFER_SHIFT);
        }
        let nulls = gathered_nulls(self.nulls.as_ref(), idx);
        let views = ScalarBuffer::from(views);
        // Every view is one of a valid view array of this type (or the empty view), its
        // buffer index renumbered to the same buffer's place in `out_buffers`: what
        // `try_new` checks (lengths, offsets within the buffer, UTF-8 for strings) held in
        // the runs' arrays.
        match self.data_type {
            // SAFETY: as said above.
            DataType::Utf8View => Arc::new(unsafe { StringViewArray::new_unchecked(views, out_buffers, nulls) }),
            // SAFETY: as said above.
            _ => Arc::new(unsafe { BinaryViewArray::new_unchecked(views, out_buffers, nulls) }),
        }
    }
}

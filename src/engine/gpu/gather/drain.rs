//! The drain of a gather into pageable memory ([`GatherOutput::Pageable`](super::GatherOutput::Pageable)),
//! on a thread of its own: the outputs' pages mapped first, then each column, once its
//! kernels are done, down through the lane's download staging buffers while the launching
//! thread sends the next column up.

use super::super::context::Gpu;
use super::super::launch::DevPtr;
use super::super::transfer::{download, prefault, DownloadOrder, Staging};
use crate::Result;
use cudarc::driver::sys;
use std::mem::MaybeUninit;

/// The drain of a pageable gather, on a thread of its own: each column, once its kernels
/// are done (its event), down through the download staging buffers into its output.
pub(super) struct Drain<'a> {
    pub(super) gpu: &'a Gpu,
    /// The stream the kernels run on (the events' stream).
    pub(super) main: sys::CUstream,
    /// The download's stream.
    pub(super) dl: sys::CUstream,
    pub(super) staging: &'a mut Staging,
    /// Per column, recorded after its kernels.
    pub(super) events: Vec<sys::CUevent>,
    /// Per column: its output bytes, and the pieces that fill them.
    pub(super) columns: Vec<(&'a mut [MaybeUninit<u8>], Vec<Piece>)>,
}

/// A piece of a column's output: (device address, offset in the output, bytes).
pub(super) type Piece = (DevPtr, usize, usize);

// SAFETY: the raw handles (streams, events, the staging buffers' pinned memory) belong to
// the device's context, not to a thread: the driver API lets any thread that binds the
// context use them, and the drain binds it first. The caller holds the gather lane's lock
// for the whole scope of the drain's thread, so no other gather uses the stagings or
// streams meanwhile, and it records a column's event before sending the column's number.
unsafe impl Send for Drain<'_> {}

impl Drain<'_> {
    /// Drains the columns whose numbers arrive, until the sender is dropped.
    pub(super) fn run(mut self, columns: std::sync::mpsc::Receiver<usize>) -> Result<()> {
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

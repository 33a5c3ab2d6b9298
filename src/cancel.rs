//! Cancelling work from another thread: a shared flag ([`Cancel`]) that the work checks
//! wherever it loops, and returns [`Error::Cancelled`] once it is set.
//!
//! A leaf, as `error` is: the engines check it between sort passes, the Parquet merge and
//! sort between batches, rounds, pieces, column chunks and spill runs
//! ([`crate::parquet::MergeFilesOptions::cancel`], [`crate::parquet::SortFilesOptions::cancel`]).
//! Threads that wait on each other wait with a timeout of [`POLL`] and look at the flag
//! in between ([`recv`]), so a blocked thread notices too.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A cancellation token: clone it, hand a clone to the work (a Parquet merge's or sort's
/// options), and call [`cancel`](Self::cancel) from any thread. The work stops at its next
/// check (within about 100 ms) with [`Error::Cancelled`], having removed its temporary
/// output and spill files as on any error. Clones share one flag; once set it stays set.
///
/// ```
/// use corank::Cancel;
///
/// let cancel = Cancel::new();
/// let theirs = cancel.clone(); // e.g. in `MergeFilesOptions { cancel: Some(theirs), .. }`
/// std::thread::spawn(move || theirs.cancel()).join().unwrap();
/// assert!(cancel.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A token not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the work to stop (from any thread; more calls change nothing).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or a clone of it.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// How long a thread that waits on another waits before it looks at the flag again.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// [`Error::Cancelled`] where `cancel` is set.
pub(crate) fn check(cancel: Option<&Cancel>) -> Result<()> {
    match cancel {
        Some(c) if c.is_cancelled() => Err(Error::Cancelled),
        _ => Ok(()),
    }
}

/// Whether `cancel` is set (`false` without a token).
pub(crate) fn is_set(cancel: Option<&Cancel>) -> bool {
    cancel.is_some_and(Cancel::is_cancelled)
}

/// [`mpsc::Receiver::recv`] that gives up with [`Error::Cancelled`] once `cancel` is set
/// (looking every [`POLL`]); `Ok(None)` when the sender is gone.
pub(crate) fn recv<T>(receiver: &mpsc::Receiver<T>, cancel: Option<&Cancel>) -> Result<Option<T>> {
    let Some(c) = cancel else { return Ok(receiver.recv().ok()) };
    loop {
        check(Some(c))?;
        match receiver.recv_timeout(POLL) {
            Ok(v) => return Ok(Some(v)),
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_receiver_notices_the_cancel() {
        let cancel = Cancel::new();
        let (_send, receive) = mpsc::channel::<()>();
        let theirs = cancel.clone();
        let t = std::time::Instant::now();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            theirs.cancel();
        });
        assert!(matches!(recv(&receive, Some(&cancel)), Err(Error::Cancelled)));
        assert!(t.elapsed() < Duration::from_secs(2));
        canceller.join().unwrap();
        assert!(check(None).is_ok() && check(Some(&cancel)).is_err() && is_set(Some(&cancel)) && !is_set(None));
    }
}

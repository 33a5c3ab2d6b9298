//! The output in a store: written as a multipart upload, streamed from the writer part by
//! part, that appears only when completed; aborted otherwise.
//!
//! Parts of `part_size` bytes (a storage option, 8 MiB by default; doubled every 1,000
//! parts, so S3's 10,000 parts hold any file) go out as soon as they are full, up to
//! `max_concurrency` at once: the writer waits for the oldest beyond that, so the output
//! holds `(max_concurrency + 1) × part_size` bytes of memory at most. The upload is created
//! with the first full part; an output smaller than one part is sent in one request at the
//! end. Nothing of it is visible under its name before [`Upload::complete`].
//!
//! **Abort.** An upload not completed (an error anywhere, the writer dropped) is aborted as
//! it is dropped: its parts sent or in flight are discarded, the store keeps neither an
//! object nor parts. The abort is tried again for 10 s (a store that failed a part may be
//! back by then); a store unreachable all that time keeps the parts (never an object).
//! Where the program installed corank's signal handlers
//! ([`crate::parquet::remove_temp_file_on_signal`]), a signal (Ctrl-C) while an upload is
//! open is handed to a thread of this module, which aborts the open uploads (10 s at most
//! each), removes the local temporary files as the handler would, and ends the process with
//! that signal; a second signal ends it at once. A process killed outright (SIGKILL) leaves
//! the parts of an open upload until the bucket's lifecycle rule removes them (S3's
//! `AbortIncompleteMultipartUpload`).
//!
//! **A completion whose answer is lost** (the store completed the object, the connection
//! dropped before its answer) is sent again by object_store; S3 may answer that retry with
//! `NoSuchUpload`. An object at the location then, of the upload's size and not the one there
//! before the completion (another ETag, or last modified at another time), is the completed
//! upload: success. An overwrite with the same bytes within the store's timestamp resolution
//! cannot be told apart, and is reported as the error.

use super::config::{settings, store_for};
use super::location::ObjectUrl;
use super::object::store_error;
use super::runtime::{block_on, runtime};
use crate::error::{Error, Result};
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutPayload};
use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;

/// An upload, shared with the signal thread (`None` once completed or aborted).
type Shared = Arc<Mutex<Option<Box<dyn MultipartUpload>>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Parts after which the part size doubles.
const PARTS_PER_SIZE: usize = 1000;

/// How long an abort may take (on an error or a signal), tried again, before corank gives
/// up on it.
const ABORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first pause before an abort that failed is sent again.
const ABORT_PAUSE: Duration = Duration::from_millis(200);

/// The output in a store, being written (the module doc).
pub(crate) struct Upload {
    url: ObjectUrl,
    store: Arc<dyn ObjectStore>,
    part: Vec<u8>,
    part_size: usize,
    concurrency: usize,
    parts: usize,
    upload: Option<Shared>,
    /// The parts in flight, oldest first.
    tasks: VecDeque<JoinHandle<object_store::Result<()>>>,
    bytes: u64,
    /// Completed: nothing to abort.
    done: bool,
    /// Its entry among the uploads a signal aborts.
    registration: Option<u64>,
}

/// Refuses an output at `target` that exists unless `overwrite`, an HTTP(S) output (read
/// only), and one whose bucket is not there.
pub(crate) fn check_output(target: &Path, overwrite: bool) -> Result<()> {
    let url = ObjectUrl::parse(target)?;
    if url.scheme == ObjectStoreScheme::Http {
        return Err(Error::InvalidArgument(format!("output {}: http(s) URLs are read-only; write to s3://, gs:// or az://", url.text)));
    }
    let store = store_for(&url)?;
    let (s, location) = (store.clone(), url.location.clone());
    match block_on(async move { s.head(&location).await }) {
        Ok(_) if !overwrite => Err(Error::OutputExists { path: target.to_path_buf() }),
        Ok(_) => Ok(()),
        Err(object_store::Error::NotFound { .. }) => {
            // No such object: is the bucket there? (A missing bucket answers a HEAD as a
            // missing object does.)
            let parent: object_store::path::Path = url.location.parts().take(url.location.parts().count().saturating_sub(1)).collect();
            let listed = block_on(async move { store.list_with_delimiter(Some(&parent)).await.map(drop) });
            match listed {
                Ok(()) | Err(object_store::Error::PermissionDenied { .. }) => Ok(()),
                // S3 answers a listing of a missing bucket with its own code, which object_store
                // reports as a generic error.
                Err(e) if matches!(e, object_store::Error::NotFound { .. }) || e.to_string().contains("NoSuchBucket") => {
                    Err(Error::File { path: target.to_path_buf(), detail: "no such bucket (or container)".into() })
                }
                Err(e) => Err(store_error(&url.text, "checking the output's bucket", e)),
            }
        }
        Err(e) => Err(store_error(&url.text, "checking the output", e)),
    }
}

impl Upload {
    pub(crate) fn new(target: &Path) -> Result<Upload> {
        let url = ObjectUrl::parse(target)?;
        let store = store_for(&url)?;
        let s = settings();
        Ok(Upload {
            url,
            store,
            part: Vec::new(),
            part_size: s.part_size,
            concurrency: s.max_concurrency,
            parts: 0,
            upload: None,
            tasks: VecDeque::new(),
            bytes: 0,
            done: false,
            registration: None,
        })
    }

    /// `e` for the writer, which names the output itself.
    fn io_error(&self, e: Error) -> std::io::Error {
        match e {
            Error::File { detail, .. } => std::io::Error::other(detail),
            other => std::io::Error::other(other.to_string()),
        }
    }

    /// The error of an upload aborted by someone else: a signal's thread (which ends the
    /// process: this thread waits for it, so no other outcome is reported first).
    fn aborted(&self) -> Error {
        signal::wait_if_ending();
        Error::File { path: self.url.text.clone().into(), detail: "the upload was aborted".into() }
    }

    /// Sends the part buffered (creating the upload with the first), after waiting for
    /// room among the parts in flight.
    fn send_part(&mut self) -> Result<()> {
        let shared = match &self.upload {
            Some(shared) => shared.clone(),
            None => {
                let (store, location) = (self.store.clone(), self.url.location.clone());
                let created = block_on(async move { store.put_multipart(&location).await })
                    .map_err(|e| store_error(&self.url.text, "starting the upload", e))?;
                let shared: Shared = Arc::new(Mutex::new(Some(created)));
                self.registration = Some(signal::register(&self.url.text, shared.clone()));
                self.upload = Some(shared.clone());
                shared
            }
        };
        while self.tasks.len() >= self.concurrency {
            self.wait_oldest()?;
        }
        let payload = PutPayload::from(std::mem::take(&mut self.part));
        // Parts are numbered in the order `put_part` is called: here, in file order.
        let part = lock(&shared).as_mut().map(|u| u.put_part(payload));
        let Some(part) = part else { return Err(self.aborted()) };
        self.tasks.push_back(runtime().spawn(part));
        self.parts += 1;
        if self.parts.is_multiple_of(PARTS_PER_SIZE) {
            self.part_size *= 2;
        }
        Ok(())
    }

    /// Waits for the oldest part in flight.
    fn wait_oldest(&mut self) -> Result<()> {
        let Some(task) = self.tasks.pop_front() else { return Ok(()) };
        let done = futures::executor::block_on(task);
        if done.as_ref().is_ok_and(|r| r.is_err()) {
            signal::wait_if_ending(); // a part refused because a signal aborted the upload
        }
        match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(store_error(&self.url.text, "uploading a part", e)),
            Err(e) => Err(Error::File { path: self.url.text.clone().into(), detail: format!("uploading a part: {e}") }),
        }
    }

    /// Sends what is buffered as the last part (starting the multipart upload if none was)
    /// and waits for every part: the object then only waits for [`complete`](Upload::complete),
    /// and holds no memory here meanwhile. Returns the object's bytes.
    pub(crate) fn stage(&mut self) -> Result<u64> {
        if !self.part.is_empty() {
            self.send_part()?;
        }
        while !self.tasks.is_empty() {
            self.wait_oldest()?;
        }
        Ok(self.bytes)
    }

    /// Completes the upload: every part sent, the object checked to be still absent unless
    /// `overwrite`, then made to appear whole. Returns the object's bytes. On an error the
    /// upload is aborted (as the dropped `Upload` goes).
    pub(crate) fn complete(mut self, overwrite: bool) -> Result<u64> {
        if self.upload.is_none() {
            // Smaller than a part: one request.
            if !overwrite && self.object_now()?.is_some() {
                return Err(Error::OutputExists { path: self.url.text.clone().into() });
            }
            let (store, location, payload) =
                (self.store.clone(), self.url.location.clone(), PutPayload::from(std::mem::take(&mut self.part)));
            block_on(async move { store.put(&location, payload).await }).map_err(|e| store_error(&self.url.text, "writing", e))?;
            self.done = true;
            return Ok(self.bytes);
        }
        if !self.part.is_empty() {
            self.send_part()?;
        }
        while !self.tasks.is_empty() {
            self.wait_oldest()?;
        }
        // What is there before the completion: an error of the completion is then told
        // from a completion whose answer was lost (below).
        let before = self.object_now()?;
        if !overwrite && before.is_some() {
            return Err(Error::OutputExists { path: self.url.text.clone().into() });
        }
        let shared = self.upload.clone().expect("an upload was created");
        let Some(mut upload) = lock(&shared).take() else { return Err(self.aborted()) };
        let completed = block_on(async move { upload.complete().await.map(drop).map_err(|e| (e, upload)) });
        self.done = true;
        if let Err((e, upload)) = completed {
            // The store may have completed the object and its answer been lost: object_store
            // sent the completion again, and S3 answers that with `NoSuchUpload`. An object
            // of this upload's size that was not there before (another ETag) is this one.
            if let Ok(Some(now)) = self.object_now() {
                let new = before.as_ref().is_none_or(|b| match (&b.e_tag, &now.e_tag) {
                    (Some(_), Some(_)) => b.e_tag != now.e_tag,
                    _ => b.last_modified != now.last_modified,
                });
                if new && now.size == self.bytes {
                    log::info!("{}: the store completed the upload but its answer was lost ({e}); the object is there", self.url.text);
                    drop(upload); // complete: nothing to abort
                    return Ok(self.bytes);
                }
            }
            if let Err(why) = abort(upload) {
                log::warn!(
                    "{}: the upload could not be aborted ({why}); its parts stay until the bucket's lifecycle rule removes them",
                    self.url.text
                );
            }
            if matches!(e, object_store::Error::NotFound { .. }) {
                let detail = "completing the upload: the store has no such upload (NoSuchUpload); nothing written".to_string();
                return Err(Error::File { path: self.url.text.clone().into(), detail });
            }
            return Err(store_error(&self.url.text, "completing the upload", e));
        }
        log::debug!("{}: {} bytes uploaded in {} parts", self.url.text, self.bytes, self.parts);
        Ok(self.bytes)
    }
}

impl Upload {
    /// The object at the output's location now, if there is one.
    fn object_now(&self) -> Result<Option<object_store::ObjectMeta>> {
        let (store, location) = (self.store.clone(), self.url.location.clone());
        match block_on(async move { store.head(&location).await }) {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error(&self.url.text, "checking the output", e)),
        }
    }
}

impl Write for Upload {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while !rest.is_empty() {
            if self.part.capacity() == 0 {
                self.part.reserve_exact(self.part_size);
            }
            let n = (self.part_size - self.part.len()).min(rest.len());
            self.part.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.part.len() >= self.part_size {
                self.send_part().map_err(|e| self.io_error(e))?;
            }
        }
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if let Some(id) = self.registration.take() {
            signal::unregister(id);
        }
        if self.done {
            return;
        }
        for task in self.tasks.drain(..) {
            task.abort();
        }
        let Some(shared) = self.upload.take() else { return };
        let Some(upload) = lock(&shared).take() else { return };
        match abort(upload) {
            Ok(()) => log::info!("{}: upload aborted, nothing written", self.url.text),
            Err(e) => log::warn!(
                "{}: the upload could not be aborted ({e}); its parts stay until the bucket's lifecycle rule removes them",
                self.url.text
            ),
        }
    }
}

/// Aborts `upload`, trying again for [`ABORT_TIMEOUT`] in all.
///
/// An abort often follows a failure of the store itself (a part that failed beyond its
/// retries, a lost connection): object_store's own retries of the abort (the storage
/// options' budget, which may be small) are not all it gets. Until the deadline it is sent
/// again after a pause ([`ABORT_PAUSE`], doubling), so a server back within it still drops
/// the parts. A missing upload is aborted already (an earlier attempt whose answer was lost).
fn abort(mut upload: Box<dyn MultipartUpload>) -> std::result::Result<(), String> {
    block_on(async move {
        let deadline = tokio::time::Instant::now() + ABORT_TIMEOUT;
        let mut pause = ABORT_PAUSE;
        loop {
            let error = match tokio::time::timeout_at(deadline, upload.abort()).await {
                Ok(Ok(())) | Ok(Err(object_store::Error::NotFound { .. })) => return Ok(()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer in {ABORT_TIMEOUT:?}"),
            };
            if tokio::time::Instant::now() + pause >= deadline {
                return Err(error);
            }
            log::debug!("aborting the upload failed ({error}); trying again in {pause:?}");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    })
}

/// The uploads a signal aborts, and the thread that does it (the module doc).
mod signal {
    use super::{abort, lock, Shared};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{LazyLock, Mutex, OnceLock};

    struct Open {
        id: u64,
        url: String,
        upload: Shared,
    }

    static OPEN: LazyLock<Mutex<Vec<Open>>> = LazyLock::new(Default::default);

    /// A signal is ending the process (its uploads being aborted).
    static ENDING: AtomicBool = AtomicBool::new(false);

    /// Waits for the end of the process where a signal is ending it: an upload aborted
    /// under a writer is not the run's outcome, the signal is.
    pub(super) fn wait_if_ending() {
        while ENDING.load(Ordering::SeqCst) {
            std::thread::park();
        }
    }

    /// Adds an upload; while any is open, signals go to the aborting thread.
    pub(super) fn register(url: &str, upload: Shared) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut open = lock(&OPEN);
        open.push(Open { id, url: url.to_string(), upload });
        if let Some(fd) = pipe() {
            crate::parquet::interrupt::defer_signals_to(fd);
        }
        id
    }

    pub(super) fn unregister(id: u64) {
        let mut open = lock(&OPEN);
        open.retain(|o| o.id != id);
        if open.is_empty() {
            crate::parquet::interrupt::defer_signals_to(-1);
        }
    }

    /// The pipe's write end, the aborting thread started with it (once); `None` where the
    /// program did not install corank's signal handlers (or the pipe cannot be made).
    #[cfg(unix)]
    fn pipe() -> Option<i32> {
        if !crate::parquet::interrupt::handlers_installed() {
            return None;
        }
        static WRITE_END: OnceLock<Option<i32>> = OnceLock::new();
        *WRITE_END.get_or_init(|| {
            let mut fds = [0i32; 2];
            // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
                return None;
            }
            let read_end = fds[0];
            let spawned = std::thread::Builder::new().name("corank-abort".into()).spawn(move || loop {
                let mut sig = 0u8;
                // SAFETY: reads one byte into `sig`, from the pipe's read end we own.
                let n = unsafe { libc::read(read_end, (&mut sig as *mut u8).cast(), 1) };
                if n == 1 {
                    ENDING.store(true, Ordering::SeqCst);
                    abort_open();
                    crate::parquet::interrupt::end_by_signal(sig as libc::c_int);
                } else if n == 0 {
                    return;
                }
            });
            spawned.ok().map(|_| fds[1])
        })
    }

    #[cfg(not(unix))]
    fn pipe() -> Option<i32> {
        None
    }

    /// Aborts every open upload (a signal came).
    fn abort_open() {
        let open: Vec<(String, Shared)> = lock(&OPEN).iter().map(|o| (o.url.clone(), o.upload.clone())).collect();
        for (url, shared) in open {
            let Some(upload) = lock(&shared).take() else { continue };
            match abort(upload) {
                Ok(()) => log::warn!("{url}: upload aborted (signal)"),
                Err(e) => log::warn!("{url}: the upload could not be aborted ({e})"),
            }
        }
    }
}

//! The encoded pages of the column-at-a-time sort: in memory up to a budget, beyond it in a
//! file of the spill directory, each page read back once when its row group is written.

use bytes::Bytes;
use parquet::column::page_store::{PageKey, PageStore, PageStoreArgs, PageStoreFactory};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Encoded pages of the column chunks: in memory while the pool holds less than its budget,
/// else appended to a file (the spill directory's), each read back once when its chunk is
/// written. Shared by every column writer of the sort.
pub(super) struct PagePool {
    /// Where pages past the budget go; `None` keeps them all in memory.
    pub(super) file: Option<File>,
    pub(super) path: Option<PathBuf>,
    /// The file's length so far.
    pub(super) end: Mutex<u64>,
    /// Bytes of pages held in memory.
    pub(super) resident: AtomicUsize,
    pub(super) budget: usize,
    /// Bytes of pages written to the file.
    pub(super) spilled: AtomicUsize,
}

#[derive(Debug)]
pub(super) struct PagePoolFactory(pub(super) Arc<PagePool>);

impl std::fmt::Debug for PagePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagePool").field("budget", &self.budget).finish_non_exhaustive()
    }
}

/// Where a page is.
enum Page {
    Memory(Bytes),
    File { at: u64, len: usize },
    Taken,
}

/// One column chunk's pages in the pool.
struct PoolStore {
    pool: Arc<PagePool>,
    pages: Vec<Page>,
}

impl PageStoreFactory for PagePoolFactory {
    fn create(&self, _args: &PageStoreArgs<'_>) -> parquet::errors::Result<Box<dyn PageStore>> {
        Ok(Box::new(PoolStore { pool: Arc::clone(&self.0), pages: Vec::new() }))
    }
}

impl PagePool {
    /// Appends `page` to the file; its offset.
    #[cfg(unix)]
    fn write(&self, file: &File, page: &[u8]) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let at = {
            let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
            let at = *end;
            *end += page.len() as u64;
            at
        };
        file.write_all_at(page, at)?;
        self.spilled.fetch_add(page.len(), Ordering::Relaxed);
        Ok(at)
    }

    #[cfg(unix)]
    fn read(&self, file: &File, at: u64, len: usize) -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let mut page = vec![0u8; len];
        file.read_exact_at(&mut page, at)?;
        Ok(Bytes::from(page))
    }
}

impl PageStore for PoolStore {
    fn put(&mut self, value: Bytes) -> parquet::errors::Result<PageKey> {
        let key = PageKey::new(self.pages.len() as u64);
        let len = value.len();
        let pool = &self.pool;
        let in_memory = pool.resident.fetch_add(len, Ordering::Relaxed) + len <= pool.budget;
        #[cfg(unix)]
        if let (false, Some(file)) = (in_memory, &pool.file) {
            pool.resident.fetch_sub(len, Ordering::Relaxed);
            let at = pool.write(file, &value).map_err(|e| spill_error(pool, e))?;
            self.pages.push(Page::File { at, len });
            return Ok(key);
        }
        let _ = in_memory;
        self.pages.push(Page::Memory(value));
        Ok(key)
    }

    fn take(&mut self, key: PageKey) -> parquet::errors::Result<Bytes> {
        let slot = self.pages.get_mut(key.get() as usize).ok_or_else(|| general(format!("no page {}", key.get())))?;
        match std::mem::replace(slot, Page::Taken) {
            Page::Memory(b) => {
                self.pool.resident.fetch_sub(b.len(), Ordering::Relaxed);
                Ok(b)
            }
            #[cfg(unix)]
            Page::File { at, len } => {
                let file = self.pool.file.as_ref().ok_or_else(|| general("a spilled page without a file".into()))?;
                self.pool.read(file, at, len).map_err(|e| spill_error(&self.pool, e))
            }
            #[cfg(not(unix))]
            Page::File { .. } => Err(general("a spilled page without a file".into())),
            Page::Taken => Err(general(format!("page {} taken twice", key.get()))),
        }
    }

    fn memory_size(&self) -> usize {
        self.pages.iter().map(|p| if let Page::Memory(b) = p { b.len() } else { 0 }).sum()
    }
}

impl Drop for PoolStore {
    fn drop(&mut self) {
        // Pages never taken (a failed sort) leave the pool's count.
        let held = self.memory_size();
        self.pool.resident.fetch_sub(held, Ordering::Relaxed);
    }
}

fn general(message: String) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::General(message)
}

fn spill_error(pool: &PagePool, e: std::io::Error) -> parquet::errors::ParquetError {
    general(format!("encoded pages in {}: {e}", pool.path.as_deref().map_or("the spill directory".into(), |p| p.display().to_string())))
}

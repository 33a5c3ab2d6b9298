//! Parquet footers of files in object stores, read through a DataFusion session's
//! `RuntimeEnv`: its object store registry (where `SessionContext::register_object_store`
//! puts stores) and its file metadata cache.
//!
//! A footer is read by range requests (by DataFusion's own `DFParquetMetadata`: the last
//! 64 KiB, then whatever more the footer needs), put in the runtime's file metadata cache,
//! where DataFusion's Parquet reader finds it (keyed by location, valid while the object's
//! size and modification time are those listed), and checked as a local file's is
//! (`corank::parquet::corrupt`). A footer found there is not read again: a `ListingTable`
//! reads its files' footers while it plans (to collect statistics), so the optimizer rule
//! usually finds them there.
//!
//! The optimizer rule is synchronous and runs inside the session's tokio runtime, whose
//! tasks may be what a request waits on (the store's pooled connections are driven by the
//! runtime that opened them). So it blocks only where that is safe: on a multi-thread
//! runtime it leaves its worker (`block_in_place`) and waits there; outside any runtime it
//! waits on corank's own (`corank::parquet::store::runtime`); on a current-thread runtime
//! it does not wait at all (the one thread that would serve the request is the one
//! waiting), and the file counts as unread.

use crate::error::{Error, Result};
use crate::parquet::corrupt::arrow_metadata;
use datafusion::datasource::physical_plan::parquet::metadata::{CachedParquetMetaData, DFParquetMetadata};
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::object_store::{ObjectMeta, ObjectStore};
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::runtime::{Handle, RuntimeFlavor};

/// Bytes of a footer's first request: most footers fit, so one request reads one.
const FOOTER_HINT: usize = 64 * 1024;

/// The URL of `location` in the store at `url`, as errors and logs name the object.
pub(crate) fn object_name(url: &ObjectStoreUrl, meta: &ObjectMeta) -> PathBuf {
    PathBuf::from(format!("{}{}", url.as_str(), meta.location))
}

/// The footer of the object `meta` in `store` (`name`: its URL, for errors), from the
/// runtime's file metadata cache or read now (and put there), by DataFusion's own reader of
/// Parquet metadata: the footer's range requests, without the page index.
pub(crate) async fn fetch(
    cache: Arc<FileMetadataCache>,
    store: &dyn ObjectStore,
    meta: &ObjectMeta,
    name: &Path,
) -> Result<ArrowReaderMetadata> {
    let parquet = DFParquetMetadata::new(store, meta)
        .with_metadata_size_hint(Some(FOOTER_HINT))
        .with_page_index_policy(Some(PageIndexPolicy::Skip))
        .with_file_metadata_cache(Some(cache))
        .fetch_metadata()
        .await
        .map_err(|e| Error::File { path: name.to_path_buf(), detail: format!("cannot read its footer: {}", e.strip_backtrace()) })?;
    arrow_metadata(name, parquet, meta.size)
}

/// The footer of `meta` in the runtime's file metadata cache, if it is there for this
/// version of the object.
pub(crate) fn cached(runtime: &RuntimeEnv, meta: &ObjectMeta) -> Option<Arc<ParquetMetaData>> {
    let entry = runtime.cache_manager.get_file_metadata_cache().get(&meta.location)?;
    if !entry.is_valid_for(meta) {
        return None;
    }
    entry.file_metadata.as_any().downcast_ref::<CachedParquetMetaData>().map(|c| Arc::clone(c.parquet_metadata()))
}

/// The footer of the object `meta` in the store registered for `url` on `runtime`, for the
/// optimizer rule (synchronous; see the module doc): from the runtime's file metadata
/// cache, or read now where waiting is safe. The error says why it could not be had.
pub(crate) fn footer_blocking(
    runtime: &RuntimeEnv,
    url: &ObjectStoreUrl,
    meta: &ObjectMeta,
) -> std::result::Result<ArrowReaderMetadata, String> {
    let name = object_name(url, meta);
    if let Some(parquet) = cached(runtime, meta) {
        return arrow_metadata(&name, parquet, meta.size).map_err(|e| e.to_string());
    }
    let store = runtime.object_store(url).map_err(|e| e.strip_backtrace())?;
    let (cache, object) = (runtime.cache_manager.get_file_metadata_cache(), meta.clone());
    wait(async move { fetch(cache, store.as_ref(), &object, &name).await })?.map_err(|e| e.to_string())
}

/// Runs `future` to its end where this thread may wait for it (see the module doc).
fn wait<F>(future: F) -> std::result::Result<F::Output, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match Handle::try_current() {
        Err(_) => Ok(crate::parquet::store::runtime::block_on(future)),
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            // `block_in_place` refuses (panics) inside a `LocalSet`: then the file is unread.
            crate::parquet::corrupt::catch(|| tokio::task::block_in_place(|| handle.block_on(future)))
                .map_err(|panic| format!("cannot wait for the object store here: {panic}"))
        }
        Ok(_) => Err("not read while planning on a current-thread tokio runtime (its one thread would serve the request), and not in the session's file metadata cache".into()),
    }
}

//! A table provider that exposes every row group of a set of Parquet files as one sorted
//! partition, for files whose row groups are each sorted but not the file as a whole (or
//! whose files overlap). `SELECT .. ORDER BY` over it then merges row groups with
//! `CoRankMergeExec` instead of re-sorting.
//!
//! The order is read from the row groups' `sorting_columns` metadata (every row group of
//! every file must carry the same) or declared by the caller, who then vouches for it as
//! with `CREATE EXTERNAL TABLE .. WITH ORDER`.
//!
//! The files are local ([`SortedRowGroupsTable::try_new`]: read with `std::fs`, scanned
//! through DataFusion's local file system store) or objects of one store registered on a
//! session's runtime ([`SortedRowGroupsTable::try_new_in_store`]: footers read by range
//! requests through that store, and the scan names the store's URL, so DataFusion reads the
//! row groups through the same registry).

use super::file_order::{row_group_range, row_group_start};
use crate::error::{Error, Result};
use crate::parquet::sorting_columns::{declared_order, DeclaredOrder};
use crate::sort_key::SortKey;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::TableProvider;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::object_store::{ObjectMeta, ObjectStoreExt};
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::ExecutionPlan;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone)]
struct FileInfo {
    /// The local path, or the object's URL (as [`SortedRowGroupsTable::paths`] gives it).
    path: PathBuf,
    size: u64,
    /// The object as its store listed it (`None`: a local file).
    object: Option<ObjectMeta>,
    /// Row counts of the file's row groups.
    row_groups: Vec<usize>,
    /// Where each row group starts (`file_order::row_group_start`).
    starts: Vec<Option<i64>>,
}

/// Sorted row groups of Parquet files as sorted partitions.
///
/// ```no_run
/// use std::path::PathBuf;
/// use std::sync::Arc;
/// use corank::datafusion::{session_context, SortedRowGroupsTable};
/// use datafusion::prelude::SessionConfig;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // Files whose row groups are each sorted (their sorting_columns say by what).
/// let table = SortedRowGroupsTable::try_new(&[PathBuf::from("a.parquet"), PathBuf::from("b.parquet")], None)?;
/// let ctx = session_context(SessionConfig::new());
/// ctx.register_table("t", Arc::new(table))?;
/// let batches = ctx.sql("SELECT * FROM t ORDER BY k").await?.collect().await?;
/// # Ok(()) }
/// ```
///
/// Files in an object store are read through the session's stores
/// ([`try_new_in_store`](Self::try_new_in_store)):
///
/// ```no_run
/// use std::sync::Arc;
/// use corank::datafusion::{session_context, SortedRowGroupsTable};
/// use datafusion::execution::object_store::ObjectStoreUrl;
/// use datafusion::prelude::SessionConfig;
///
/// # async fn run(s3: Arc<dyn datafusion::object_store::ObjectStore>) -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = session_context(SessionConfig::new());
/// ctx.register_object_store(ObjectStoreUrl::parse("s3://bucket")?.as_ref(), s3);
/// let urls = ["s3://bucket/a.parquet", "s3://bucket/b.parquet"];
/// let table = SortedRowGroupsTable::try_new_in_store(&ctx.runtime_env(), &urls, None).await?;
/// ctx.register_table("t", Arc::new(table))?;
/// let batches = ctx.sql("SELECT * FROM t ORDER BY k").await?.collect().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SortedRowGroupsTable {
    schema: SchemaRef,
    files: Vec<FileInfo>,
    order: Vec<SortKey>,
    /// The store the scan reads the files from (the local file system for [`Self::try_new`]).
    store: ObjectStoreUrl,
}

fn file_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{}: {what}", path.display()))
}

/// The files' schema, row groups and order as their footers come in.
struct Footers {
    declared: Option<Vec<SortKey>>,
    schema: Option<SchemaRef>,
    order: Option<Vec<SortKey>>,
    files: Vec<FileInfo>,
}

impl Footers {
    fn new(declared: Option<Vec<SortKey>>) -> Self {
        Self { order: declared.clone(), declared, schema: None, files: vec![] }
    }

    /// Takes the footer `builder` of the file at `path`.
    fn add(&mut self, path: &Path, size: u64, object: Option<ObjectMeta>, builder: &ArrowReaderMetadata) -> Result<()> {
        let file_schema = builder.schema().clone();
        match &self.schema {
            None => self.schema = Some(file_schema.clone()),
            Some(s) if s.fields() != file_schema.fields() => {
                return Err(file_error(path, format!("schema differs from {}'s", self.files[0].path.display())))
            }
            Some(_) => {}
        }
        let meta = builder.metadata();
        let parquet_schema = meta.file_metadata().schema_descr();
        let mut row_groups = Vec::with_capacity(meta.num_row_groups());
        let mut starts = Vec::with_capacity(meta.num_row_groups());
        for (g, rg) in meta.row_groups().iter().enumerate() {
            row_groups.push(rg.num_rows() as usize);
            starts.push(row_group_start(rg));
            if self.declared.is_some() {
                continue;
            }
            let keys = match declared_order(parquet_schema, rg) {
                DeclaredOrder::Keys(keys) => keys,
                DeclaredOrder::Undeclared => {
                    return Err(file_error(path, format!("row group {g} has no sorting_columns metadata; declare the sort order")))
                }
                DeclaredOrder::Unusable => {
                    return Err(file_error(path, format!("row group {g} declares its order by a nested or missing column")))
                }
            };
            match &self.order {
                None => self.order = Some(keys),
                Some(o) if *o != keys => {
                    return Err(file_error(path, format!("row group {g} is sorted by {keys:?}, other row groups by {o:?}")))
                }
                Some(_) => {}
            }
        }
        self.files.push(FileInfo { path: path.to_path_buf(), size, object, row_groups, starts });
        Ok(())
    }

    fn finish(self, store: ObjectStoreUrl) -> Result<SortedRowGroupsTable> {
        let schema = self.schema.ok_or_else(|| Error::InvalidArgument("no Parquet files given".into()))?;
        let order = self.order.ok_or_else(|| Error::InvalidArgument("the files have no row groups and no declared order".into()))?;
        for k in &order {
            if schema.field_with_name(&k.column).is_err() {
                return Err(Error::MissingColumn { run: 0, column: k.column.clone() });
            }
        }
        Ok(SortedRowGroupsTable { schema, files: self.files, order, store })
    }
}

/// `url` taken apart: its store's URL (scheme and authority) and the object's location.
fn split_url(url: &str) -> Result<(ObjectStoreUrl, ObjectPath)> {
    let bad = |why: &str| Error::InvalidArgument(format!("{url}: {why}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("not a URL (scheme://store/key); local files go to try_new"))?;
    let slash = rest.find('/').ok_or_else(|| bad("names no object"))?;
    let store = ObjectStoreUrl::parse(format!("{scheme}://{}", &rest[..slash])).map_err(|e| bad(&e.strip_backtrace()))?;
    let location = ObjectPath::from_url_path(&rest[slash + 1..]).map_err(|e| bad(&e.to_string()))?;
    if location.as_ref().is_empty() {
        return Err(bad("names no object"));
    }
    Ok((store, location))
}

impl SortedRowGroupsTable {
    /// Opens `paths`. With `declared = None` the order comes from the row groups'
    /// `sorting_columns`; a row group without them, or files that disagree, is an error.
    pub fn try_new(paths: &[PathBuf], declared: Option<Vec<SortKey>>) -> Result<Self> {
        if paths.is_empty() {
            return Err(Error::InvalidArgument("no Parquet files given".into()));
        }
        let mut footers = Footers::new(declared);
        for path in paths {
            let file = std::fs::File::open(path).map_err(|e| Error::io(path, "", e))?;
            let size = file.metadata().map_err(|e| Error::io(path, "", e))?.len();
            // An embedded Arrow schema that cannot be decoded is left aside, not a panic.
            let builder = crate::parquet::corrupt::load_metadata(path, &file)?;
            footers.add(path, size, None, &builder)?;
        }
        footers.finish(ObjectStoreUrl::local_filesystem())
    }

    /// Opens the objects at `urls` (`s3://bucket/key.parquet`; any scheme whose store is
    /// registered on `runtime`, `file:///path` too), all in one store, through `runtime`'s
    /// object store registry: the session's (`SessionContext::runtime_env`), where
    /// `register_object_store` put the store, so that its scans read the row groups through
    /// the same store. Each footer is read by range requests (or found in the runtime's
    /// file metadata cache, where it is put for the scans). The order is as
    /// [`try_new`](Self::try_new) takes it.
    pub async fn try_new_in_store<S: AsRef<str>>(runtime: &RuntimeEnv, urls: &[S], declared: Option<Vec<SortKey>>) -> Result<Self> {
        let mut footers = Footers::new(declared);
        let mut store_url: Option<ObjectStoreUrl> = None;
        for url in urls {
            let url = url.as_ref();
            let (store, location) = split_url(url)?;
            match &store_url {
                None => store_url = Some(store.clone()),
                Some(first) if first != &store => {
                    return Err(Error::InvalidArgument(format!(
                        "{url}: not in the store of the first file ({}); a table reads from one store",
                        first.as_str()
                    )))
                }
                Some(_) => {}
            }
            let name = PathBuf::from(url);
            let object_store = runtime.object_store(&store).map_err(|e| file_error(&name, e.strip_backtrace()))?;
            let meta = object_store.head(&location).await.map_err(|e| file_error(&name, e))?;
            let builder =
                super::footers::fetch(runtime.cache_manager.get_file_metadata_cache(), object_store.as_ref(), &meta, &name).await?;
            footers.add(&name, meta.size, Some(meta), &builder)?;
        }
        footers.finish(store_url.ok_or_else(|| Error::InvalidArgument("no Parquet files given".into()))?)
    }

    /// The sort order of every row group.
    pub fn order(&self) -> &[SortKey] {
        &self.order
    }

    /// The Parquet files, in the order given: local paths, or the objects' URLs as given to
    /// [`try_new_in_store`](Self::try_new_in_store) (a plan codec that ships the table, as
    /// Ballista's logical codec must, sends these and [`Self::order`], and rebuilds the
    /// table with the constructor that takes them: URLs, `corank::parquet::store::is_url`,
    /// with [`try_new_in_store`](Self::try_new_in_store)).
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|f| f.path.as_path())
    }

    /// Non-empty row groups, hence partitions of a scan.
    pub fn num_row_groups(&self) -> usize {
        self.files.iter().map(|f| f.row_groups.iter().filter(|&&n| n > 0).count()).sum()
    }
}

#[async_trait]
impl TableProvider for SortedRowGroupsTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let options = state.table_options().parquet.clone();
        let source = Arc::new(ParquetSource::new(Arc::clone(&self.schema)).with_table_parquet_options(options));
        // One file group (partition) per non-empty row group: the file, with an access
        // plan that reads only that row group. The access plan does not survive a plan
        // codec (datafusion-proto drops a file's extensions, so a Ballista executor would
        // read the whole file in every partition); the byte range from this row group's
        // first page up to the next row group's does, and selects the same row group.
        let mut groups = Vec::new();
        for f in &self.files {
            let whole = match &f.object {
                Some(meta) => PartitionedFile::from(meta.clone()),
                None => {
                    let path = f.path.canonicalize().map_err(datafusion::common::DataFusionError::IoError)?;
                    PartitionedFile::new(path.to_string_lossy().to_string(), f.size)
                }
            };
            for (g, &rows) in f.row_groups.iter().enumerate() {
                if rows == 0 {
                    continue;
                }
                let mut plan = ParquetAccessPlan::new_none(f.row_groups.len());
                plan.scan(g);
                let mut file = whole.clone().with_extension(plan);
                if let Some((start, end)) = row_group_range(&f.starts, g, g, f.size) {
                    file = file.with_range(start, end);
                }
                groups.push(FileGroup::new(vec![file]));
            }
        }
        let ordering = LexOrdering::new(
            self.order
                .iter()
                .map(|k| Ok(PhysicalSortExpr::new(col(&k.column, &self.schema)?, k.options)))
                .collect::<datafusion::common::Result<Vec<_>>>()?,
        );
        let mut builder = FileScanConfigBuilder::new(self.store.clone(), source)
            .with_file_groups(groups)
            .with_limit(limit)
            .with_projection_indices(projection.cloned())?;
        if let Some(ordering) = ordering {
            builder = builder.with_output_ordering(vec![ordering]);
        }
        Ok(DataSourceExec::from_data_source(builder.build()))
    }
}

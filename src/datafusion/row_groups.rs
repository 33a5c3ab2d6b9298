//! A table provider that exposes every row group of a set of Parquet files as one sorted
//! partition, for files whose row groups are each sorted but not the file as a whole (or
//! whose files overlap). `SELECT .. ORDER BY` over it then merges row groups with
//! `CoRankMergeExec` instead of re-sorting.
//!
//! The order is read from the row groups' `sorting_columns` metadata (every row group of
//! every file must carry the same) or declared by the caller, who then vouches for it as
//! with `CREATE EXTERNAL TABLE .. WITH ORDER`.

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
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::ExecutionPlan;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone)]
struct FileInfo {
    path: PathBuf,
    size: u64,
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
#[derive(Debug, Clone)]
pub struct SortedRowGroupsTable {
    schema: SchemaRef,
    files: Vec<FileInfo>,
    order: Vec<SortKey>,
}

fn file_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{}: {what}", path.display()))
}

impl SortedRowGroupsTable {
    /// Opens `paths`. With `declared = None` the order comes from the row groups'
    /// `sorting_columns`; a row group without them, or files that disagree, is an error.
    pub fn try_new(paths: &[PathBuf], declared: Option<Vec<SortKey>>) -> Result<Self> {
        if paths.is_empty() {
            return Err(Error::InvalidArgument("no Parquet files given".into()));
        }
        let mut schema: Option<SchemaRef> = None;
        let mut files = Vec::with_capacity(paths.len());
        let mut order = declared.clone();
        for path in paths {
            let file = std::fs::File::open(path).map_err(|e| Error::io(path, "", e))?;
            let size = file.metadata().map_err(|e| Error::io(path, "", e))?.len();
            // An embedded Arrow schema that cannot be decoded is left aside, not a panic.
            let builder = crate::parquet::corrupt::load_metadata(path, &file)?;
            let file_schema = builder.schema().clone();
            match &schema {
                None => schema = Some(file_schema.clone()),
                Some(s) if s.fields() != file_schema.fields() => {
                    return Err(file_error(path, format!("schema differs from {}'s", paths[0].display())))
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
                if declared.is_some() {
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
                match &order {
                    None => order = Some(keys),
                    Some(o) if *o != keys => {
                        return Err(file_error(path, format!("row group {g} is sorted by {keys:?}, other row groups by {o:?}")))
                    }
                    Some(_) => {}
                }
            }
            files.push(FileInfo { path: path.clone(), size, row_groups, starts });
        }
        let schema = schema.expect("at least one file");
        let order = order.ok_or_else(|| Error::InvalidArgument("the files have no row groups and no declared order".into()))?;
        for k in &order {
            if schema.field_with_name(&k.column).is_err() {
                return Err(Error::MissingColumn { run: 0, column: k.column.clone() });
            }
        }
        Ok(Self { schema, files, order })
    }

    /// The sort order of every row group.
    pub fn order(&self) -> &[SortKey] {
        &self.order
    }

    /// The Parquet files, in the order given (a plan codec that ships the table, as
    /// Ballista's logical codec must, sends these and [`Self::order`]).
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
            let path = f.path.canonicalize().map_err(datafusion::common::DataFusionError::IoError)?;
            for (g, &rows) in f.row_groups.iter().enumerate() {
                if rows == 0 {
                    continue;
                }
                let mut plan = ParquetAccessPlan::new_none(f.row_groups.len());
                plan.scan(g);
                let mut file = PartitionedFile::new(path.to_string_lossy().to_string(), f.size).with_extension(plan);
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
        let mut builder = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
            .with_file_groups(groups)
            .with_limit(limit)
            .with_projection_indices(projection.cloned())?;
        if let Some(ordering) = ordering {
            builder = builder.with_output_ordering(vec![ordering]);
        }
        Ok(DataSourceExec::from_data_source(builder.build()))
    }
}

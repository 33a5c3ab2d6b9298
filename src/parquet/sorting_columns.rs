//! A row group's `sorting_columns`, read and written in one place. The one reader (the order
//! its writer declared): the CLI's run detection, the row-group table provider and the
//! DataFusion rule's file check all read it here, so they agree on what a declaration means.
//! The one writer: every output row group declares the merge key ([`sorting_columns`]).

use crate::error::{Error, Result};
use crate::sort_key::SortKey;
use arrow::compute::SortOptions;
use arrow::datatypes::Schema;
use parquet::arrow::ArrowSchemaConverter;
use parquet::file::metadata::{RowGroupMetaData, SortingColumn};
use parquet::schema::types::SchemaDescriptor;

/// What a row group declares about its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredOrder {
    /// No `sorting_columns`, or an empty list.
    Undeclared,
    /// The sort keys, by top-level column name.
    Keys(Vec<SortKey>),
    /// A column index out of range or a nested column: a declaration no merge key can
    /// match (it agrees with no order).
    Unusable,
}

/// The order row group `rg` of a file with Parquet schema `schema` declares.
pub fn declared_order(schema: &SchemaDescriptor, rg: &RowGroupMetaData) -> DeclaredOrder {
    let Some(cols) = rg.sorting_columns().filter(|c| !c.is_empty()) else {
        return DeclaredOrder::Undeclared;
    };
    let keys: Option<Vec<SortKey>> = cols
        .iter()
        .map(|c| {
            let idx = usize::try_from(c.column_idx).ok().filter(|&i| i < schema.num_columns())?;
            let path = schema.column(idx).path().parts().to_vec();
            // Only top-level columns can be merge keys.
            let [name] = <[String; 1]>::try_from(path).ok()?;
            Some(SortKey::new(name, SortOptions { descending: c.descending, nulls_first: c.nulls_first }))
        })
        .collect();
    keys.map_or(DeclaredOrder::Unusable, DeclaredOrder::Keys)
}

/// `keys` as Parquet `sorting_columns`: they name leaf columns, and keys are top-level
/// primitive columns.
///
/// ```
/// use arrow::datatypes::{DataType, Field, Schema};
/// use corank::SortKey;
///
/// let schema = Schema::new(vec![Field::new("a", DataType::Int64, false), Field::new("b", DataType::Utf8, true)]);
/// let columns = corank::parquet::sorting_columns(&schema, &[SortKey::desc("b")])?;
/// assert_eq!((columns[0].column_idx, columns[0].descending, columns[0].nulls_first), (1, true, true));
/// # Ok::<(), corank::Error>(())
/// ```
pub fn sorting_columns(schema: &Schema, keys: &[SortKey]) -> Result<Vec<SortingColumn>> {
    let leaves = ArrowSchemaConverter::new().convert(schema).map_err(|source| Error::Parquet {
        path: None,
        context: "deriving the Parquet schema".into(),
        source,
    })?;
    sorting_columns_in(&leaves, keys)
}

/// `keys` as `sorting_columns` of the Parquet schema `leaves`.
pub fn sorting_columns_in(leaves: &SchemaDescriptor, keys: &[SortKey]) -> Result<Vec<SortingColumn>> {
    keys.iter()
        .map(|k| {
            let idx = leaves
                .columns()
                .iter()
                .position(|c| c.path().parts() == [k.column.clone()])
                .ok_or_else(|| Error::InvalidArgument(format!("sort column '{}' is not a top-level primitive column", k.column)))?;
            Ok(SortingColumn { column_idx: idx as i32, descending: k.options.descending, nulls_first: k.options.nulls_first })
        })
        .collect()
}

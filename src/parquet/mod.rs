//! Parquet inputs: sorted row groups as merge runs.

pub mod row_groups;

pub use row_groups::SortedRowGroupsTable;

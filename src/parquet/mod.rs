//! Parquet: sorted files and row groups as merge runs, and the sorted output file.
//!
//! - [`inputs`]: expand the inputs, settle the key, split files into sorted runs;
//! - [`merge_files`](mod@merge_files): stream the runs through the frontier merge;
//! - [`writer`]: the output (temporary file, parallel column encoding, rename);
//! - [`order_by`]: the `--by` syntax;
//! - [`row_groups`]: sorted row groups as DataFusion partitions.

pub mod inputs;
pub mod interrupt;
pub mod merge_files;
pub mod order_by;
pub mod row_groups;
pub mod sorting_columns;
pub mod writer;

pub use inputs::{expand_inputs, plan_merge, MergePlan};
pub use merge_files::{merge_files, MergeFilesOptions, MergeSummary};
pub use order_by::parse_order_by;
pub use row_groups::SortedRowGroupsTable;
pub use writer::{parse_compression, WriterSettings};

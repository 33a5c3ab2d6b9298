//! Parquet: sorted files and row groups as merge runs, and the sorted output file.
//!
//! - [`inputs`]: expand the inputs, settle the key, split files into sorted runs;
//! - [`input_types`]: Parquet types arrow-rs reads with a loss by default (INT96, INTERVAL,
//!   DATE as Date64), read exactly or refused;
//! - [`merge_files`](mod@merge_files): stream the runs through the frontier merge;
//! - [`sort_files`](mod@sort_files): unsorted files sorted into one (an external merge sort);
//! - [`sort_by_columns`]: the same sort one column at a time, where memory allows it;
//! - [`passthrough`]: row groups that need no merge, copied unchanged;
//! - [`offset_index`]: offset indexes for copied chunks whose files have none;
//! - [`row_group_reader`]: row groups decoded in parallel, handed out in order;
//! - [`corrupt`]: decoder panics caught, decode failures named by file, row group, column and page;
//! - [`writer`]: the output (temporary file, parallel column encoding, rename);
//! - [`leftovers`]: what a killed run leaves (temporary file, spill directory), cleared by the next;
//! - [`dictionary`]: which output columns keep Parquet's dictionary encoding;
//! - [`order_by`]: sort keys as a SQL `ORDER BY` list;
//! - [`sorting_columns`]: the order a row group's metadata declares.
//!
//! Sorted row groups as DataFusion partitions are `corank::datafusion::SortedRowGroupsTable`.

pub mod corrupt;
pub mod inputs;
pub mod interrupt;
pub mod leftovers;
pub mod memory;
pub mod merge;
pub mod order_by;
pub mod os;
pub mod read;
pub mod sort;
pub mod sorting_columns;
pub mod writer;

pub use inputs::types as input_types;
pub use merge as merge_files;
pub use merge::passthrough;
pub use read::row_groups as row_group_reader;
pub use sort as sort_files;
pub use sort::columns as sort_by_columns;
pub use writer::{dictionary, offset_index};

pub use inputs::{expand_inputs, plan_merge, MergePlan};
pub use merge::{merge_files, MergeFilesOptions, MergeSummary};
pub use order_by::parse_order_by;
pub use passthrough::Passthrough;
pub use sort::{plan_sort, sort_files, SortFilesOptions, SortPhase, SortPlan, SortStrategy, SortSummary};
pub use writer::{parse_compression, WriterSettings};

pub(crate) use os::name_this_thread;

//! Parquet files in, one sorted Parquet file out (feature `parquet`).
//!
//! The entry points:
//! - [`merge_files`]: sorted files (or files whose row groups are each sorted) merged into
//!   one sorted file; [`plan_merge`] settles the inputs, the key and the runs first, and
//!   [`dry_run`] says what a merge of that plan would do without doing it;
//! - [`sort_files`]: files in any order sorted into one (an external merge sort in bounded
//!   memory); [`plan_sort`] picks its strategy;
//! - [`SortedParquetWriter`]: sorted batches written to a file atomically (a temporary file
//!   renamed when complete), every row group carrying its [`sorting_columns`];
//! - [`SplitFiles`] ([`WriterSettings::split`]): the output of [`merge_files`] or
//!   [`sort_files`] split into a directory of files of bounded rows or bytes, cut between
//!   keys, listed as [`OutputFile`]s in the summary;
//! - [`parse_order_by`] and [`parse_compression`]: the command line's `--by` and
//!   `--compression` texts as library values;
//! - [`remove_temp_file_on_signal`]: Ctrl-C (SIGINT, SIGTERM, SIGHUP) during a merge or a
//!   sort removes its temporary output and spill files before the process ends;
//! - [`Cancel`] (the options' `cancel`): a merge or sort stopped from another thread within
//!   about 100 ms, returning [`Error::Cancelled`](crate::Error::Cancelled), its temporary
//!   files removed, while the process goes on;
//! - [`expand_inputs`] and [`expand_inputs_excluding`]: the command line's input arguments
//!   (files, directories, globs) as paths, the output and corank's temporary files left out
//!   by the second.
//!
//! ```no_run
//! use corank::parquet::{merge_files, parse_order_by, plan_merge, MergeFilesOptions};
//! use std::path::PathBuf;
//!
//! let inputs = [PathBuf::from("day1.parquet"), PathBuf::from("day2.parquet")];
//! // The key from the files' sorting_columns metadata when `None`.
//! let plan = plan_merge(&inputs, Some(parse_order_by("ts, id DESC")?))?;
//! let summary = merge_files(&plan, "merged.parquet".as_ref(), &MergeFilesOptions::default(), &|_rows| {})?;
//! println!("{} rows", summary.rows);
//! # Ok::<(), corank::Error>(())
//! ```
//!
//! Inside (private): `inputs` (paths, globs, file identity, schema unification, runs, the
//! plan), `read` (the adaptive batch reader, row groups decoded in parallel and handed out
//! in order), `memory` (the one memory budget of merge, sort and dry run), `merge` (the
//! entry, its phases, passthrough of row groups that need no merge), `sort` (strategy, runs
//! and spill, the sort by columns), `writer` (the row-group pipeline, schema, temporary file
//! and rename, copied chunks, dictionary choice), `sorting_columns`, `order_by`, `corrupt`
//! (decoder panics caught, failures named by file, row group, column and page), `leftovers`
//! (what a killed run leaves, cleared by the next), `interrupt` and `os`. Paths may be URLs of
//! object stores ([`store`]: `s3://`, `gs://`, `az://`, `https://`).
//!
//! Sorted row groups as DataFusion partitions are `corank::datafusion::SortedRowGroupsTable`.

#[cfg(test)]
mod cancel_tests;
pub(crate) mod corrupt;
pub(crate) mod device;
pub(crate) mod inputs;
pub(crate) mod interrupt;
pub(crate) mod leftovers;
pub(crate) mod memory;
pub(crate) mod merge;
pub(crate) mod order_by;
pub(crate) mod os;
pub(crate) mod read;
pub(crate) mod sort;
pub(crate) mod sorting_columns;
pub mod store;
pub(crate) mod writer;

// The entry points. Everything else in this folder is the crate's own.
pub use crate::cancel::Cancel;
pub use inputs::show_keys;
pub use inputs::{
    expand_inputs, expand_inputs_excluding, plan_merge, plan_merge_with, HivePartitioning, HiveTypes, InputFile, MergePlan, PlanOptions,
    Run,
};
pub use interrupt::remove_temp_file_on_signal;
pub use memory::{default_memory_limit, DEFAULT_MEMORY_SHARE};
pub use merge::passthrough::Passthrough;
pub use merge::{dry_run, merge_files, DryRun, MergeFilesOptions, MergeSummary};
pub use order_by::parse_order_by;
pub use os::{available_memory, AvailableMemory, MemorySource};
pub use sort::columns::ColumnsPlan;
pub use sort::{plan_sort, sort_files, SortFilesOptions, SortPhase, SortPlan, SortStrategy, SortSummary};
pub use sorting_columns::sorting_columns;
pub use writer::{parse_compression, show_compression, OutputFile, SortedParquetWriter, SplitFiles, WriterSettings, Written};

pub(crate) use os::name_this_thread;

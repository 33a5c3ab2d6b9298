//! Parquet inputs of a file merge: which files, which key, and which runs.
//!
//! A **run** is a sequence of consecutive row groups of one file that is sorted as a whole.
//! Every row group of an input must be sorted by the key; whether neighbouring row groups
//! also continue each other is read from the statistics of the key columns: row groups
//! `g` and `g + 1` join one run when `g`'s last key sorts before or equal to `g + 1`'s
//! first, as the per-column bounds prove it (min/max per the direction, NULL where the nulls
//! sort and the row group holds any, statistics present, not a float column where NaN and
//! -0 escape statistics): the first column decides where its bounds differ, a tie there
//! hands the decision to the next column, and so on (`continues`). Equal
//! boundary keys may join because both row groups belong to one file: stability puts the
//! earlier row group's rows first either way. A globally sorted file then reads as one run,
//! even with a low-cardinality key and small row groups; a file with overlapping row groups
//! as one run per row group. Either way the merged output is the same: equal keys go to the
//! earlier file, then the earlier row group, then the earlier row.
//!
//! **Every run is checked** row by row while it streams (the keys are encoded for the merge
//! anyway), including runs whose `sorting_columns` declare the key: writers declare orders
//! corank does not share (pyarrow and pandas put NaN last even for DESC and treat -0.0 as
//! +0.0), and a merge must never write unsorted rows under a sorted declaration.
//!
//! **Schemas** must match (names, order, types; field metadata is merged, the first file's
//! value kept on conflicts; a column is nullable where any input's is: writers such as
//! DuckDB mark a column required in a file that happens to hold no nulls, so files of one
//! table differ in nullability alone), unless [`PlanOptions::union_by_name`]:
//! then columns match by name, a column missing from a file reads as nulls, a column is
//! nullable where any input's is, and numeric types widen where every value fits
//! ([`unify_types`]).
//!
//! The output path never reads as an input ([`expand_inputs_excluding`]): a file found by a
//! directory or glob that is the output (same device and inode) is skipped, and an output
//! named as an input is an error.

//!
//! Files: [`paths`] (which files: globs, directories, the output left out), [`identity`]
//! (a file as planned, checked again at every open), [`types`] (Parquet types read exactly
//! or refused), [`schema`] (schemas matched or unified), [`cast`] (a batch fitted to the
//! merge's schema), [`hive`] (`key=value` directories of the paths as columns), [`runs`] (declared orders, row groups joined into runs), [`sizes`]
//! (decoded and decoder bytes estimated from the footers), [`plan`] (all of it: the
//! [`MergePlan`]).

pub mod cast;
pub mod hive;
pub mod identity;
pub mod paths;
pub mod plan;
pub mod runs;
pub mod schema;
pub mod sizes;
pub mod types;

pub use cast::{cast_checked, conform};
pub use hive::{HivePartitioning, HiveTypes};
pub use identity::FileIdentity;
pub use paths::{expand_inputs, expand_inputs_excluding, open_input};
pub use plan::{plan_merge, plan_merge_with, show_keys};
pub use sizes::{chunk_decoded_bytes, decoded_bytes, decoder_bytes, DECODER_BYTES_PER_COLUMN};

use crate::sort_key::SortKey;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::schema::types::SchemaDescPtr;
use std::path::PathBuf;

/// One input file, opened (footer read). [`MergePlan::files`] holds them; the
/// [`corank::parquet`](crate::parquet) example makes a plan.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// The file's path, as given or as expanded from a directory or glob.
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// How the file is read: its footer, and the Arrow schema it reads as. Its Parquet schema
    /// may differ from the file's (INTERVAL columns read as their bytes, see
    /// `types`).
    pub metadata: ArrowReaderMetadata,
    /// The file's Parquet schema as stored (what the output keeps of it).
    pub stored_schema: SchemaDescPtr,
    /// What the file was when its footer was read: a later open checks it
    /// ([`InputFile::reopen`]).
    pub(crate) identity: FileIdentity,
    /// Its Hive partition values, set every batch read from it ([`hive`]); `None` without.
    pub(crate) partition: Option<std::sync::Arc<hive::FilePartition>>,
}

/// Consecutive row groups of one file, sorted as a whole. [`MergePlan::runs`] holds them;
/// [`dry_run`](crate::parquet::dry_run)'s example counts them.
#[derive(Debug, Clone)]
pub struct Run {
    /// Index into [`MergePlan::files`].
    pub file: usize,
    /// Row group indices in file order (consecutive, none empty).
    pub row_groups: Vec<usize>,
    /// Rows per row group, in the same order.
    pub row_group_rows: Vec<usize>,
    /// Whether the row groups' `sorting_columns` declare the key (the merge checks the
    /// order of every run all the same; see the module doc).
    pub declared: bool,
    /// Estimated bytes of the run's rows once decoded into Arrow (`decoded_bytes`).
    pub decoded_bytes: u64,
    /// Estimated memory of the run's Parquet decoders while it is read (`decoder_bytes`).
    pub decoder_bytes: u64,
}

impl Run {
    /// The run's rows: the sum of [`row_group_rows`](Self::row_group_rows).
    pub fn rows(&self) -> usize {
        self.row_group_rows.iter().sum()
    }

    /// Which row group and which row within it the run's row `row` is.
    pub(crate) fn locate(&self, mut row: usize) -> (usize, usize) {
        for (g, &n) in self.row_groups.iter().zip(&self.row_group_rows) {
            if row < n {
                return (*g, row);
            }
            row -= n;
        }
        (*self.row_groups.last().unwrap_or(&0), row)
    }
}

/// Everything known before the first row is read. [`plan_merge`] makes it (the
/// [`corank::parquet`](crate::parquet) example); [`merge_files`](crate::parquet::merge_files)
/// and [`dry_run`](crate::parquet::dry_run) take it.
#[derive(Debug, Clone)]
pub struct MergePlan {
    /// The input files, in the merge's tie order (equal keys go to the earlier file).
    pub files: Vec<InputFile>,
    /// The common Arrow schema (the first file's, with its metadata).
    pub schema: SchemaRef,
    /// The merge key: the one given, else the inputs' common `sorting_columns`.
    pub keys: Vec<SortKey>,
    /// The runs of all files, in file order, then row-group order.
    pub runs: Vec<Run>,
    /// Rows of all inputs.
    pub total_rows: usize,
    /// Sum of input file sizes.
    pub total_bytes: u64,
    /// Estimated decoded (Arrow) bytes per row over all inputs (at least 1); the merge
    /// measures the real size of every batch and uses this only to size the first reads.
    pub row_bytes: usize,
    /// Whether the files' schemas were unified by name ([`PlanOptions::union_by_name`]).
    pub union_by_name: bool,
    /// The Hive partition columns taken from the paths ([`PlanOptions::hive_partitioning`]),
    /// in the schema's order; empty where there are none.
    pub hive_partitions: Vec<String>,
}

/// How `plan_merge_with` reads the inputs ([`plan_sort`](crate::parquet::plan_sort) takes
/// it; [`sort_files`](crate::parquet::sort_files) has an example).
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// Match columns by name across files (see the module doc); otherwise schemas must be
    /// the same.
    pub union_by_name: bool,
    /// Whether `key=value` directories of the paths become columns
    /// ([`HivePartitioning`]): by default where every path has the same keys, as DuckDB
    /// detects them.
    pub hive_partitioning: HivePartitioning,
    /// Partition keys' types chosen by hand ([`HiveTypes`], DuckDB's `hive_types`); the
    /// keys not named are inferred.
    pub hive_types: HiveTypes,
}

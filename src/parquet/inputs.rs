//! Parquet inputs of a file merge: which files, which key, and which runs.
//!
//! A **run** is a sequence of consecutive row groups of one file that is sorted as a whole.
//! Every row group of an input must be sorted by the key; whether neighbouring row groups
//! also continue each other is read from the statistics of the first key column: row groups
//! `g` and `g + 1` join one run only when `g`'s last value sorts strictly before `g + 1`'s
//! first (min/max per the direction, no nulls on the side where nulls would break it,
//! statistics present, not a float column where NaN and -0 escape statistics). A globally
//! sorted file then reads as one run; a file with overlapping row groups as one run per row
//! group. Either way the merged output is the same: equal keys go to the earlier file,
//! then the earlier row group, then the earlier row.
//!
//! The key's order is **vouched for** by a row group's `sorting_columns` metadata when the
//! key is a prefix of it. Runs without that are checked row by row during the merge (so an
//! unsorted file is an error, never a wrong output); `check_sorted` checks every run.

use crate::api::SortKey;
use crate::error::{Error, Result};
use arrow::array::{Array, ArrayRef};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::file::metadata::RowGroupMetaData;
use std::path::{Path, PathBuf};

/// One input file, opened (footer read).
#[derive(Debug, Clone)]
pub struct InputFile {
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    pub metadata: ArrowReaderMetadata,
}

/// Consecutive row groups of one file, sorted as a whole.
#[derive(Debug, Clone)]
pub struct Run {
    /// Index into [`MergePlan::files`].
    pub file: usize,
    /// Row group indices in file order (consecutive, none empty).
    pub row_groups: Vec<usize>,
    /// Rows per row group, in the same order.
    pub row_group_rows: Vec<usize>,
    /// Whether the merge checks this run's order row by row.
    pub check_sorted: bool,
}

impl Run {
    pub fn rows(&self) -> usize {
        self.row_group_rows.iter().sum()
    }

    /// Which row group and which row within it the run's row `row` is.
    pub fn locate(&self, mut row: usize) -> (usize, usize) {
        for (g, &n) in self.row_groups.iter().zip(&self.row_group_rows) {
            if row < n {
                return (*g, row);
            }
            row -= n;
        }
        (*self.row_groups.last().unwrap_or(&0), row)
    }
}

/// Everything known before the first row is read.
#[derive(Debug, Clone)]
pub struct MergePlan {
    pub files: Vec<InputFile>,
    /// The common Arrow schema (the first file's, with its metadata).
    pub schema: SchemaRef,
    pub keys: Vec<SortKey>,
    pub runs: Vec<Run>,
    pub total_rows: usize,
    /// Sum of input file sizes.
    pub total_bytes: u64,
    /// Uncompressed bytes per row, from the row groups' metadata (at least 1).
    pub row_bytes: usize,
}

fn file_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), detail: what.to_string() }
}

/// Expands the command line's inputs: a file as given, a directory to its `*.parquet`
/// files (sorted by name), a glob pattern to its matches (sorted by name). The order of the
/// result is the merge's tie order. A name that is none of these is an error.
pub fn expand_inputs(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for arg in args {
        let path = Path::new(arg);
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| file_error(path, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x.eq_ignore_ascii_case("parquet")))
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(file_error(path, "directory holds no .parquet files"));
            }
            paths.extend(found);
        } else if path.exists() {
            paths.push(path.to_path_buf());
        } else if arg.contains(['*', '?', '[']) {
            let pattern = glob::glob(arg).map_err(|e| Error::InvalidArgument(format!("bad glob pattern '{arg}': {e}")))?;
            let mut found: Vec<PathBuf> = pattern.filter_map(|p| p.ok()).filter(|p| p.is_file()).collect();
            found.sort();
            if found.is_empty() {
                return Err(file_error(path, "no file matches this pattern"));
            }
            paths.extend(found);
        } else {
            return Err(file_error(path, "no such file or directory"));
        }
    }
    if paths.is_empty() {
        return Err(Error::InvalidArgument("no input files".into()));
    }
    Ok(paths)
}

/// Opens one file: reads and decodes its footer.
pub fn open_input(path: &Path) -> Result<InputFile> {
    let file = std::fs::File::open(path).map_err(|e| file_error(path, e))?;
    let size = file.metadata().map_err(|e| file_error(path, e))?.len();
    let metadata = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
        .map_err(|e| file_error(path, format!("not a readable Parquet file: {e}")))?;
    Ok(InputFile { path: path.to_path_buf(), size, metadata })
}

/// The sort keys a row group's `sorting_columns` declare, or `None`.
fn declared_order(input: &InputFile, rg: &RowGroupMetaData) -> Option<Vec<SortKey>> {
    let cols = rg.sorting_columns().filter(|c| !c.is_empty())?;
    let parquet_schema = input.metadata.parquet_schema();
    cols.iter()
        .map(|c| {
            let idx = usize::try_from(c.column_idx).ok().filter(|&i| i < parquet_schema.num_columns())?;
            let path = parquet_schema.column(idx).path().parts().to_vec();
            // Only top-level columns can be merge keys.
            (path.len() == 1).then(|| SortKey::new(path[0].clone(), SortOptions { descending: c.descending, nulls_first: c.nulls_first }))
        })
        .collect()
}

/// The order every non-empty row group of every file declares, if they all agree.
fn common_declared_order(files: &[InputFile]) -> Result<Vec<SortKey>> {
    let mut common: Option<(Vec<SortKey>, &Path)> = None;
    for f in files {
        for (g, rg) in f.metadata.metadata().row_groups().iter().enumerate() {
            if rg.num_rows() == 0 {
                continue;
            }
            let Some(order) = declared_order(f, rg) else {
                return Err(Error::InvalidArgument(format!(
                    "{}: row group {g} has no sorting_columns metadata; give the sort key with --by",
                    f.path.display()
                )));
            };
            match &common {
                None => common = Some((order, &f.path)),
                Some((c, first)) if *c != order => {
                    return Err(Error::InvalidArgument(format!(
                        "{} is sorted by {} but {} by {}; give the sort key with --by",
                        first.display(),
                        show_keys(c),
                        f.path.display(),
                        show_keys(&order)
                    )))
                }
                Some(_) => {}
            }
        }
    }
    common
        .map(|(c, _)| c)
        .ok_or_else(|| Error::InvalidArgument("the inputs hold no rows to read a sort order from; give the sort key with --by".into()))
}

/// `k DESC NULLS LAST, j ASC NULLS LAST`: keys as `--by` would take them.
pub fn show_keys(keys: &[SortKey]) -> String {
    keys.iter()
        .map(|k| {
            let dir = if k.options.descending { "DESC" } else { "ASC" };
            let nulls = if k.options.nulls_first { "NULLS FIRST" } else { "NULLS LAST" };
            let plain = !k.column.is_empty() && !k.column.contains(|c: char| c.is_whitespace() || c == ',' || c == '"');
            let name = if plain { k.column.clone() } else { format!("\"{}\"", k.column.replace('"', "\"\"")) };
            format!("{name} {dir} {nulls}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether statistics of `key` show row group `g + 1` starting strictly after `g` ends,
/// for every `g` (see the module doc). Any doubt is `false`: a false `false` only costs a run.
fn continues(input: &InputFile, schema: &SchemaRef, key: &SortKey) -> Vec<bool> {
    let row_groups = input.metadata.metadata().row_groups();
    let pairs = row_groups.len().saturating_sub(1);
    let answer = || -> Option<Vec<bool>> {
        let field = schema.field_with_name(&key.column).ok()?;
        if matches!(field.data_type(), DataType::Float16 | DataType::Float32 | DataType::Float64) {
            return None;
        }
        let conv = StatisticsConverter::try_new(&key.column, schema, input.metadata.parquet_schema()).ok()?;
        let mins = conv.row_group_mins(row_groups.iter()).ok()?;
        let maxes = conv.row_group_maxes(row_groups.iter()).ok()?;
        let nulls = conv.row_group_null_counts(row_groups.iter()).ok()?;
        let desc = key.options.descending;
        // In sort order a row group starts at its min (max when descending) and ends at
        // its max (min when descending).
        let (starts, ends): (&ArrayRef, &ArrayRef) = if desc { (&maxes, &mins) } else { (&mins, &maxes) };
        let converter = RowConverter::new(vec![SortField::new_with_options(starts.data_type().clone(), key.options)]).ok()?;
        let start_rows = converter.convert_columns(&[starts.clone()]).ok()?;
        let end_rows = converter.convert_columns(&[ends.clone()]).ok()?;
        Some(
            (0..pairs)
                .map(|g| {
                    let known = starts.is_valid(g + 1) && ends.is_valid(g) && nulls.is_valid(g) && nulls.is_valid(g + 1);
                    // Nulls sit at a row group's start (nulls first) or end (nulls last).
                    let null_free = if key.options.nulls_first { nulls.value(g + 1) == 0 } else { nulls.value(g) == 0 };
                    known && null_free && end_rows.row(g) < start_rows.row(g + 1)
                })
                .collect(),
        )
    };
    answer().unwrap_or_else(|| vec![false; pairs])
}

/// Opens `paths`, checks that their schemas agree, settles the key (`by`, else the common
/// `sorting_columns`) and splits the files into runs.
pub fn plan_merge(paths: &[PathBuf], by: Option<Vec<SortKey>>, check_sorted: bool) -> Result<MergePlan> {
    let files: Vec<InputFile> = paths.iter().map(|p| open_input(p)).collect::<Result<_>>()?;
    let schema = files[0].metadata.schema().clone();
    for f in &files[1..] {
        let other = f.metadata.schema();
        if other.fields().len() != schema.fields().len() {
            return Err(file_error(
                &f.path,
                format!("schema differs from {}: {} columns here, {} there", files[0].path.display(), other.fields().len(), schema.fields().len()),
            ));
        }
        for (a, b) in schema.fields().iter().zip(other.fields()) {
            if a.name() != b.name() || a.data_type() != b.data_type() || a.is_nullable() != b.is_nullable() {
                return Err(file_error(
                    &f.path,
                    format!(
                        "schema differs from {}: column '{}' {}{} there, '{}' {}{} here",
                        files[0].path.display(),
                        a.name(),
                        a.data_type(),
                        if a.is_nullable() { "" } else { " NOT NULL" },
                        b.name(),
                        b.data_type(),
                        if b.is_nullable() { "" } else { " NOT NULL" },
                    ),
                ));
            }
        }
    }
    let keys = match by {
        Some(keys) => keys,
        None => common_declared_order(&files)?,
    };
    for k in &keys {
        let Ok(field) = schema.field_with_name(&k.column) else {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(Error::InvalidArgument(format!("sort column '{}' is not in the inputs (columns: {})", k.column, names.join(", "))));
        };
        if !crate::keys::is_supported(field.data_type()) {
            return Err(Error::UnsupportedType { column: k.column.clone(), data_type: field.data_type().clone() });
        }
    }

    let mut runs = Vec::new();
    let mut total_rows = 0;
    let mut uncompressed: u64 = 0;
    for (fi, f) in files.iter().enumerate() {
        let row_groups = f.metadata.metadata().row_groups();
        let joins = continues(f, &schema, &keys[0]);
        let mut current: Option<Run> = None;
        for (g, rg) in row_groups.iter().enumerate() {
            let rows = rg.num_rows() as usize;
            total_rows += rows;
            uncompressed += rg.total_byte_size().max(0) as u64;
            if rows == 0 {
                continue;
            }
            let vouched = declared_order(f, rg).is_some_and(|d| d.len() >= keys.len() && d[..keys.len()] == keys[..]);
            let check = check_sorted || !vouched;
            match &mut current {
                Some(run) if *run.row_groups.last().unwrap() + 1 == g && joins[g - 1] => {
                    run.row_groups.push(g);
                    run.row_group_rows.push(rows);
                    run.check_sorted |= check;
                }
                _ => {
                    runs.extend(current.take());
                    current = Some(Run { file: fi, row_groups: vec![g], row_group_rows: vec![rows], check_sorted: check });
                }
            }
        }
        runs.extend(current);
    }
    let total_bytes = files.iter().map(|f| f.size).sum();
    let row_bytes = (uncompressed / total_rows.max(1) as u64).max(1) as usize;
    Ok(MergePlan { files, schema, keys, runs, total_rows, total_bytes, row_bytes })
}

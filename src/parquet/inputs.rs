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

use super::sorting_columns::DeclaredOrder;
use crate::error::{Error, Result};
use crate::sort_key::SortKey;
use arrow::array::{new_null_array, Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef, TimeUnit};
use arrow::row::{RowConverter, SortField};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::basic::Type as PhysicalType;
use parquet::file::metadata::RowGroupMetaData;
use parquet::schema::types::SchemaDescPtr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One input file, opened (footer read).
#[derive(Debug, Clone)]
pub struct InputFile {
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// How the file is read: its footer, and the Arrow schema it reads as. Its Parquet schema
    /// may differ from the file's (INTERVAL columns read as their bytes, see
    /// [`super::input_types`]).
    pub metadata: ArrowReaderMetadata,
    /// The file's Parquet schema as stored (what the output keeps of it).
    pub stored_schema: SchemaDescPtr,
    /// What the file was when its footer was read: a later open checks it
    /// ([`InputFile::reopen`]).
    pub identity: FileIdentity,
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
    /// Whether the row groups' `sorting_columns` declare the key (the merge checks the
    /// order of every run all the same; see the module doc).
    pub declared: bool,
    /// Estimated bytes of the run's rows once decoded into Arrow ([`decoded_bytes`]).
    pub decoded_bytes: u64,
    /// Estimated memory of the run's Parquet decoders while it is read ([`decoder_bytes`]).
    pub decoder_bytes: u64,
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
    /// Estimated decoded (Arrow) bytes per row over all inputs (at least 1); the merge
    /// measures the real size of every batch and uses this only to size the first reads.
    pub row_bytes: usize,
    /// Whether the files' schemas were unified by name ([`PlanOptions::union_by_name`]).
    pub union_by_name: bool,
}

/// How [`plan_merge_with`] reads the inputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanOptions {
    /// Match columns by name across files (see the module doc); otherwise schemas must be
    /// the same.
    pub union_by_name: bool,
}

fn file_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), detail: what.to_string() }
}

/// Expands a list of inputs: a file as given, a directory to its `*.parquet`
/// files (sorted by name), a glob pattern to its matches (sorted by name). The order of the
/// result is the merge's tie order. A name that is none of these is an error.
pub fn expand_inputs(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for arg in args {
        let path = Path::new(arg);
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| Error::io(path, "reading the directory", e))?
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

/// A file's identity: device and inode where the platform has them, else its canonical path.
#[derive(Debug, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

fn file_id(path: &Path) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| FileId::Inode(m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        path.canonicalize().ok().map(FileId::Path)
    }
}

/// [`expand_inputs`], never yielding the output: a file that a directory or a glob pattern
/// found and that is `output` (same device and inode, so hard links and symbolic links
/// count), or a temporary file of a corank run (a temporary output, or a spill file in a
/// sort's spill directory, of a run going on or killed: [`super::leftovers`]), is left out;
/// an input named explicitly that is `output` is an error. Without this a second merge over
/// a directory that replaces its output (`overwrite`) would read its own previous output.
pub fn expand_inputs_excluding(args: &[String], output: &Path) -> Result<Vec<PathBuf>> {
    let out_id = file_id(output);
    let mut paths = Vec::new();
    for arg in args {
        let explicit = Path::new(arg).is_file();
        for path in expand_inputs(std::slice::from_ref(arg))? {
            let is_output = out_id.is_some() && file_id(&path) == out_id;
            if explicit && is_output {
                return Err(Error::InvalidArgument(format!("output {} is also an input ({arg})", output.display())));
            }
            if is_output {
                log::info!("skipping {}: it is the output", path.display());
                continue;
            }
            if !explicit && super::leftovers::is_leftover(&path) {
                log::warn!("skipping {}: a temporary file of a corank merge or sort (running, or killed)", path.display());
                continue;
            }
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(Error::InvalidArgument(format!("no input files besides the output {}", output.display())));
    }
    Ok(paths)
}

/// Opens one file: reads and decodes its footer ([`super::corrupt::load_metadata`]: an
/// embedded Arrow schema that cannot be decoded is left aside, row counts that disagree are
/// refused).
pub fn open_input(path: &Path) -> Result<InputFile> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, "", e))?;
    let size = file.metadata().map_err(|e| Error::io(path, "", e))?.len();
    let metadata = super::corrupt::load_metadata(path, &file)?;
    let identity = FileIdentity::of(&file, true).map_err(|e| Error::io(path, "", e))?;
    let stored_schema = metadata.metadata().file_metadata().schema_descr_ptr();
    let metadata = super::input_types::read_exactly(path, metadata)?;
    Ok(InputFile { path: path.to_path_buf(), size, metadata, stored_schema, identity })
}

/// Bytes at a file's end whose hash is its footer's fingerprint ([`FileIdentity`]): all
/// of a small footer, the end of a large one (its last row groups and key-value metadata).
const FINGERPRINT_BYTES: u64 = 64 << 10;

/// A file as it was when its footer was read: device and inode (Unix), size, modification
/// time, and a fingerprint of its footer. A reader that opens the file again (the sort by
/// columns reads its inputs once per column) compares them, so that a file replaced or
/// rewritten in between is an error rather than rows of two versions read through the
/// first version's footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    /// Device and inode: a file renamed over the input is another file.
    #[cfg(unix)]
    inode: (u64, u64),
    size: u64,
    modified: Option<std::time::SystemTime>,
    /// Hash of the file's last [`FINGERPRINT_BYTES`] (`None`: not read, see
    /// [`InputFile::reopen`]).
    footer: Option<u64>,
}

impl FileIdentity {
    /// The identity of the open `file`, its footer's fingerprint where `footer`.
    fn of(file: &std::fs::File, footer: bool) -> std::io::Result<FileIdentity> {
        use std::hash::Hasher;
        use std::io::{Read, Seek, SeekFrom};
        let meta = file.metadata()?;
        let fingerprint = match footer {
            false => None,
            true => {
                let n = meta.len().min(FINGERPRINT_BYTES);
                let mut tail = vec![0u8; n as usize];
                let mut reader = file;
                reader.seek(SeekFrom::End(-(n as i64)))?;
                reader.read_exact(&mut tail)?;
                let mut h = std::hash::DefaultHasher::new();
                h.write(&tail);
                Some(h.finish())
            }
        };
        Ok(FileIdentity {
            #[cfg(unix)]
            inode: {
                use std::os::unix::fs::MetadataExt;
                (meta.dev(), meta.ino())
            },
            size: meta.len(),
            modified: meta.modified().ok(),
            footer: fingerprint,
        })
    }

    /// How `now` differs from `self` (the identity planned), in words; `None`: the same.
    fn changed(&self, now: &FileIdentity) -> Option<String> {
        #[cfg(unix)]
        if now.inode != self.inode {
            return Some("replaced by another file".into());
        }
        if now.size != self.size {
            return Some(format!("its size changed from {} to {} bytes", self.size, now.size));
        }
        if now.modified != self.modified {
            return Some("modified".into());
        }
        match (self.footer, now.footer) {
            (Some(a), Some(b)) if a != b => Some("its footer changed".into()),
            _ => None,
        }
    }
}

impl InputFile {
    /// Opens the file again to read its rows, checking that it is still the file whose
    /// footer was read ([`FileIdentity`]; the footer's fingerprint where `footer`, the rest
    /// every time): a changed file is an error naming it.
    pub fn reopen(&self, footer: bool) -> Result<std::fs::File> {
        let file = std::fs::File::open(&self.path).map_err(|e| Error::io(&self.path, "", e))?;
        self.check_unchanged(&file, footer)?;
        Ok(file)
    }

    /// Checks that the open `file` (this input, opened again) is still the file whose footer
    /// was read, as [`InputFile::reopen`] does.
    pub fn check_unchanged(&self, file: &std::fs::File, footer: bool) -> Result<()> {
        let now = FileIdentity::of(file, footer).map_err(|e| Error::io(&self.path, "", e))?;
        match self.identity.changed(&now) {
            None => Ok(()),
            Some(how) => {
                Err(Error::File { path: self.path.clone(), detail: format!("changed since its footer was read ({how}); nothing written") })
            }
        }
    }
}

/// The sort keys a row group's `sorting_columns` declare, or `None`.
/// An unusable declaration (a nested column, an index out of range) counts as none.
fn declared_order(input: &InputFile, rg: &RowGroupMetaData) -> Option<Vec<SortKey>> {
    match super::sorting_columns::declared_order(input.metadata.parquet_schema(), rg) {
        DeclaredOrder::Keys(keys) => Some(keys),
        DeclaredOrder::Undeclared | DeclaredOrder::Unusable => None,
    }
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
                    "{}: row group {g} has no sorting_columns metadata; give the sort key",
                    f.path.display()
                )));
            };
            match &common {
                None => common = Some((order, &f.path)),
                Some((c, first)) if *c != order => {
                    return Err(Error::InvalidArgument(format!(
                        "{} is sorted by {} but {} by {}; give the sort key",
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
        .ok_or_else(|| Error::InvalidArgument("the inputs hold no rows to read a sort order from; give the sort key".into()))
}

/// `k DESC NULLS LAST, j ASC NULLS LAST`: keys as [`parse_order_by`](super::parse_order_by)
/// takes them.
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

/// Whether statistics show row group `g + 1` starting at or after the end of `g` in the
/// order of `keys`, for every `g` (see the module doc). Any doubt is `false`: a false
/// `false` only costs a run.
///
/// Per key column the statistics bound the column's values in a row group: in sort order
/// its values lie between a start (the min, the max when descending, or NULL where nulls
/// sort first and the row group holds any) and an end (likewise). So the last row of `g`,
/// `L`, and the first of `g + 1`, `F`, satisfy `L_c <= end_c(g)` and `start_c(g + 1) <= F_c`
/// for every column `c`, and comparing the tuples `end(g)` and `start(g + 1)` column by
/// column decides: the first column where `end_c(g) < start_c(g + 1)` gives `L < F`,
/// provided every column before it has `end = start` (then `L_c <= F_c` there, and either
/// some earlier column already has `L_c < F_c`, or all tie); all columns equal gives
/// `L <= F`; a column with `end > start`, or one whose statistics are missing, decides
/// nothing (`false`). Equal boundary keys may join: both row groups belong to one file,
/// and stability puts `g`'s rows first either way. Truncated string statistics stay bounds
/// (a truncated max only grows, a truncated min only shrinks). Float columns are unknown
/// (NaN and -0 escape statistics).
fn continues(input: &InputFile, keys: &[SortKey]) -> Vec<bool> {
    use std::cmp::Ordering;
    let row_groups = input.metadata.metadata().row_groups();
    let pairs = row_groups.len().saturating_sub(1);
    let schema = input.metadata.schema();
    // Per column and pair, `end_c(g)` against `start_c(g + 1)` (`None`: unknown).
    let column = |key: &SortKey| -> Option<Vec<Option<Ordering>>> {
        let field = schema.field_with_name(&key.column).ok()?;
        if matches!(field.data_type(), DataType::Float16 | DataType::Float32 | DataType::Float64) {
            return None;
        }
        let conv = StatisticsConverter::try_new(&key.column, schema, input.metadata.parquet_schema()).ok()?;
        let mins = conv.row_group_mins(row_groups.iter()).ok()?;
        let maxes = conv.row_group_maxes(row_groups.iter()).ok()?;
        let nulls = conv.row_group_null_counts(row_groups.iter()).ok()?;
        let (desc, nulls_first) = (key.options.descending, key.options.nulls_first);
        // In sort order a row group's values start at its min (max when descending) and end
        // at its max (min when descending).
        let (starts, ends): (&ArrayRef, &ArrayRef) = if desc { (&maxes, &mins) } else { (&mins, &maxes) };
        let converter = RowConverter::new(vec![SortField::new_with_options(starts.data_type().clone(), key.options)]).ok()?;
        let start_rows = converter.convert_columns(std::slice::from_ref(starts)).ok()?;
        let end_rows = converter.convert_columns(std::slice::from_ref(ends)).ok()?;
        /// A bound of a column's values in a row group: NULL, a value (its row), unknown.
        #[derive(Clone, Copy)]
        enum Bound {
            Null,
            Value(usize),
        }
        // The start (`at_start`) or end bound of row group `g`: NULL where the nulls sort
        // at that side and it holds any, or it holds nothing else.
        let bound = |g: usize, at_start: bool, values: &ArrayRef| -> Option<Bound> {
            if !nulls.is_valid(g) {
                return None;
            }
            let (n, rows) = (nulls.value(g), row_groups[g].num_rows().max(0) as u64);
            if (n > 0 && nulls_first == at_start) || n >= rows {
                Some(Bound::Null)
            } else {
                values.is_valid(g).then_some(Bound::Value(g))
            }
        };
        Some(
            (0..pairs)
                .map(|g| {
                    let (end, start) = (bound(g, false, ends)?, bound(g + 1, true, starts)?);
                    Some(match (end, start) {
                        (Bound::Null, Bound::Null) => Ordering::Equal,
                        (Bound::Null, Bound::Value(_)) => {
                            if nulls_first {
                                Ordering::Less
                            } else {
                                Ordering::Greater
                            }
                        }
                        (Bound::Value(_), Bound::Null) => {
                            if nulls_first {
                                Ordering::Greater
                            } else {
                                Ordering::Less
                            }
                        }
                        (Bound::Value(e), Bound::Value(s)) => end_rows.row(e).cmp(&start_rows.row(s)),
                    })
                })
                .collect(),
        )
    };
    let columns: Vec<Option<Vec<Option<Ordering>>>> = keys.iter().map(column).collect();
    (0..pairs)
        .map(|g| {
            for c in &columns {
                match c.as_ref().and_then(|c| c[g]) {
                    Some(Ordering::Less) => return true,
                    Some(Ordering::Equal) => continue,
                    Some(Ordering::Greater) | None => return false,
                }
            }
            true
        })
        .collect()
}

/// Estimated bytes of row group `g` of `input` once decoded into Arrow arrays: fixed-width
/// columns at their width, byte arrays at their unencoded size (Parquet's size statistics)
/// plus offsets. Parquet's own uncompressed size undercounts dictionary-encoded strings by
/// orders of magnitude, which is why the merge also measures every decoded batch.
pub fn decoded_bytes(input: &InputFile, g: usize) -> u64 {
    let rg = input.metadata.metadata().row_group(g);
    let rows = rg.num_rows().max(0) as u64;
    rg.columns().iter().map(|c| chunk_decoded_bytes(c, rows, 16)).sum()
}

/// Estimated bytes of one column chunk of `rows` rows once decoded, as [`decoded_bytes`]
/// counts them; a byte array costs `offset_bytes` a row besides its bytes (16: the size of
/// a view, the most any string or binary type takes).
pub fn chunk_decoded_bytes(c: &parquet::file::metadata::ColumnChunkMetaData, rows: u64, offset_bytes: u64) -> u64 {
    let width = match c.column_type() {
        PhysicalType::BOOLEAN => 1,
        PhysicalType::INT32 | PhysicalType::FLOAT => 4,
        PhysicalType::INT64 | PhysicalType::DOUBLE => 8,
        PhysicalType::INT96 => 12,
        PhysicalType::FIXED_LEN_BYTE_ARRAY => c.column_descr().type_length().max(1) as u64,
        // Offsets or views, plus the bytes themselves.
        PhysicalType::BYTE_ARRAY => {
            let data = c.unencoded_byte_array_data_bytes().map(|b| b.max(0) as u64).unwrap_or(c.uncompressed_size().max(0) as u64);
            return offset_bytes * rows + data + rows / 8;
        }
    };
    (width * rows).max(c.uncompressed_size().max(0) as u64) + rows / 8
}

/// Memory a Parquet decoder holds for each column it reads besides the pages: the
/// decompression context (zstd's is about 110 KiB) and buffers.
pub const DECODER_BYTES_PER_COLUMN: u64 = 128 << 10;

/// Estimated memory of the decoders reading row group `g` of `input`: per column the
/// current page and the dictionary (about half the column chunk, at most 512 KiB: writers
/// cut pages at 1 MiB or 20,000 rows) and [`DECODER_BYTES_PER_COLUMN`]. Measured on
/// lineitem-like files (docs/PERFORMANCE.md); it is what a run costs before any of its rows
/// is buffered, so many runs of wide files need a larger memory limit.
pub fn decoder_bytes(input: &InputFile, g: usize) -> u64 {
    let rg = input.metadata.metadata().row_group(g);
    rg.columns().iter().map(|c| (c.uncompressed_size().max(0) as u64).min(1 << 20) / 2 + DECODER_BYTES_PER_COLUMN).sum()
}

/// The finer of two time units.
fn finer_unit(a: &TimeUnit, b: &TimeUnit) -> TimeUnit {
    let rank = |u: &TimeUnit| match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    };
    if rank(a) >= rank(b) {
        *a
    } else {
        *b
    }
}

/// A time, timestamp or duration array in the finer unit `to` of its family: each value
/// multiplied by the ratio of the units, an error for a value the finer unit cannot hold
/// (arrow's cast multiplies times unchecked, and makes an overflowing timestamp null).
/// `None` when `to` is not such a widening of the array's type.
fn widen_time_unit(array: &ArrayRef, to: &DataType) -> Option<Result<ArrayRef>> {
    use DataType::*;
    let per_second = |u: &TimeUnit| -> i64 {
        match u {
            TimeUnit::Second => 1,
            TimeUnit::Millisecond => 1_000,
            TimeUnit::Microsecond => 1_000_000,
            TimeUnit::Nanosecond => 1_000_000_000,
        }
    };
    let (from_unit, to_unit) = match (array.data_type(), to) {
        (Time32(x) | Time64(x), Time32(y) | Time64(y)) | (Duration(x), Duration(y)) => (x, y),
        // One time zone, none, or two (the same instants, relabelled in UTC).
        (Timestamp(x, zx), Timestamp(y, zy)) if zx.is_some() == zy.is_some() => (x, y),
        _ => return None,
    };
    let factor = per_second(to_unit) / per_second(from_unit);
    if factor < 1 || per_second(to_unit) % per_second(from_unit) != 0 {
        return None;
    }
    Some((|| -> Result<ArrayRef> {
        // The values as plain integers: the same buffers under an integer type.
        let storage = |t: &DataType| if matches!(t, Time32(_)) { Int32 } else { Int64 };
        let retyped = |a: &ArrayRef, t: &DataType| -> Result<ArrayRef> {
            Ok(arrow::array::make_array(a.to_data().into_builder().data_type(t.clone()).build()?))
        };
        let ints = arrow::compute::cast(&retyped(array, &storage(array.data_type()))?, &Int64)?;
        let overflow =
            |v: i64| arrow::error::ArrowError::CastError(format!("{v} in {} does not fit {to} (it overflows 64 bits)", array.data_type()));
        let scaled: arrow::array::Int64Array =
            ints.as_primitive::<arrow::datatypes::Int64Type>().try_unary(|v| v.checked_mul(factor).ok_or_else(|| overflow(v)))?;
        let scaled: ArrayRef = Arc::new(scaled);
        let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
        let stored = arrow::compute::cast_with_options(&scaled, &storage(to), &options)?;
        retyped(&stored, to)
    })())
}

/// `array` cast to `to`, a value `to` cannot hold an error rather than a null or a wrapped
/// number (the union-by-name joins of [`unify_types`] lose no value otherwise).
pub fn cast_checked(array: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
    if let (DataType::Date64, DataType::Date32) = (array.data_type(), to) {
        // arrow's cast divides, dropping the time of day.
        const MS_PER_DAY: i64 = 86_400_000;
        let ms = array.as_primitive::<arrow::datatypes::Date64Type>();
        if let Some(v) = ms.iter().flatten().find(|v| v % MS_PER_DAY != 0) {
            return Err(Error::Arrow(arrow::error::ArrowError::CastError(format!(
                "{v} ms in Date64 is not a whole day, so Date32 cannot hold it"
            ))));
        }
    }
    if let Some(dict) = array.as_any_dictionary_opt() {
        if !matches!(to, DataType::Dictionary(..)) {
            // The values the rows reference, then those checked (an unused value that `to`
            // cannot hold is no error).
            let plain = arrow::compute::take(dict.values().as_ref(), dict.keys(), None)?;
            return if plain.data_type() == to { Ok(plain) } else { cast_checked(&plain, to) };
        }
    }
    if matches!(to, DataType::Float64) {
        if let Some(v) = inexact_in_float64(array) {
            return Err(Error::Arrow(arrow::error::ArrowError::CastError(format!(
                "{v} in {} has no exact Float64 (it would become {})",
                array.data_type(),
                v.as_f64()
            ))));
        }
    }
    widen_time_unit(array, to).unwrap_or_else(|| Ok(arrow::compute::cast_with_options(array, to, &options)?))
}

/// A 64-bit integer of `array` that Float64 holds only rounded (above 2^53 with low bits
/// set), or `None` (also for other types).
fn inexact_in_float64(array: &ArrayRef) -> Option<Int64Value> {
    match array.data_type() {
        DataType::Int64 => {
            let ints = array.as_primitive::<arrow::datatypes::Int64Type>();
            ints.iter().flatten().find(|&v| v as f64 as i128 != v as i128).map(Int64Value::Signed)
        }
        DataType::UInt64 => {
            let ints = array.as_primitive::<arrow::datatypes::UInt64Type>();
            ints.iter().flatten().find(|&v| v as f64 as u128 != v as u128).map(Int64Value::Unsigned)
        }
        _ => None,
    }
}

/// A value of a 64-bit integer column, for messages.
#[derive(Debug, Clone, Copy)]
enum Int64Value {
    Signed(i64),
    Unsigned(u64),
}

impl Int64Value {
    fn as_f64(self) -> f64 {
        match self {
            Int64Value::Signed(v) => v as f64,
            Int64Value::Unsigned(v) => v as f64,
        }
    }
}

impl std::fmt::Display for Int64Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Int64Value::Signed(v) => write!(f, "{v}"),
            Int64Value::Unsigned(v) => write!(f, "{v}"),
        }
    }
}

/// The widest type both `a` and `b` convert to without losing a value, for
/// [`PlanOptions::union_by_name`]: integers widen within their signedness (and signed with
/// unsigned to the next signed width up to 64 bits), floats widen, integers of up to 16
/// (32) bits join Float32 (Float64) and 64-bit integers Float64 (`cast_checked` refuses
/// one that Float64 holds only rounded), dictionaries join as their values (categoricals
/// of the same values and key signedness keep the wider key), strings and binaries join
/// their large or view form,
/// lists their large form, fixed-size binaries join binaries, times, timestamps and
/// durations their finer unit (timestamps of two time zones in UTC), Date64 with Date32 as
/// days, decimals the larger scale and integer digits
/// of either (up to 38 digits), lists and structs unify their fields (nested nullability as
/// in either). `None` where no such type exists.
pub fn unify_types(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    if a == b {
        return Some(a.clone());
    }
    let signed = |t: &DataType| match t {
        Int8 => Some(8),
        Int16 => Some(16),
        Int32 => Some(32),
        Int64 => Some(64),
        _ => None,
    };
    let unsigned = |t: &DataType| match t {
        UInt8 => Some(8),
        UInt16 => Some(16),
        UInt32 => Some(32),
        UInt64 => Some(64),
        _ => None,
    };
    let float = |t: &DataType| match t {
        Float16 => Some(16),
        Float32 => Some(32),
        Float64 => Some(64),
        _ => None,
    };
    let int_of = |bits: u32, is_signed: bool| match (bits, is_signed) {
        (8, true) => Int8,
        (16, true) => Int16,
        (32, true) => Int32,
        (64, true) => Int64,
        (8, false) => UInt8,
        (16, false) => UInt16,
        (32, false) => UInt32,
        _ => UInt64,
    };
    let float_of = |bits: u32| match bits {
        16 => Float16,
        32 => Float32,
        _ => Float64,
    };
    let int_bits = |t: &DataType| signed(t).or(unsigned(t));
    // A decimal's storage width, precision and scale (scales below 0 are left alone).
    let decimal = |t: &DataType| match *t {
        Decimal32(p, s) if s >= 0 => Some((32, p, s)),
        Decimal64(p, s) if s >= 0 => Some((64, p, s)),
        Decimal128(p, s) if s >= 0 => Some((128, p, s)),
        _ => None,
    };
    match (a, b) {
        // Categoricals (pandas, Polars) of key types of one signedness keep the wider key; a
        // dictionary beside other values (the same column written plain by another writer)
        // joins them as its values.
        (Dictionary(ka, va), Dictionary(kb, vb)) if va == vb && signed(ka).is_some() == signed(kb).is_some() => {
            Some(Dictionary(Box::new(unify_types(ka, kb)?), va.clone()))
        }
        (Dictionary(_, va), Dictionary(_, vb)) => unify_types(va, vb),
        (Dictionary(_, v), other) | (other, Dictionary(_, v)) => unify_types(v, other),
        _ if signed(a).is_some() && signed(b).is_some() => Some(int_of(signed(a)?.max(signed(b)?), true)),
        _ if unsigned(a).is_some() && unsigned(b).is_some() => Some(int_of(unsigned(a)?.max(unsigned(b)?), false)),
        _ if int_bits(a).is_some() && int_bits(b).is_some() => {
            // One signed, one unsigned: a signed type twice the unsigned one's width.
            let need = signed(a).or(signed(b))?.max(2 * unsigned(a).or(unsigned(b))?);
            (need <= 64).then(|| int_of(need, true))
        }
        _ if float(a).is_some() && float(b).is_some() => Some(float_of(float(a)?.max(float(b)?))),
        _ if float(a).is_some() || float(b).is_some() => {
            let (f, i) = if float(a).is_some() { (float(a)?, int_bits(b)?) } else { (float(b)?, int_bits(a)?) };
            // Float32 holds every integer of up to 16 bits, Float64 of up to 32, and 64-bit
            // integers up to 2^53 and beyond where their low bits are zero: `cast_checked`
            // refuses one Float64 does not hold exactly rather than round it.
            let need = if i <= 16 { 32 } else { 64 };
            Some(float_of(f.max(need)))
        }
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => {
            Some(if matches!((a, b), (LargeUtf8, _) | (_, LargeUtf8)) { LargeUtf8 } else { Utf8View })
        }
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => {
            Some(if matches!((a, b), (LargeBinary, _) | (_, LargeBinary)) { LargeBinary } else { BinaryView })
        }
        // A fixed-size binary (DuckDB's UUIDs) joins the binaries: Polars writes UUIDs as
        // large binaries, and the bytes order the same either way.
        (FixedSizeBinary(_), FixedSizeBinary(_) | Binary | LargeBinary | BinaryView)
        | (Binary | LargeBinary | BinaryView, FixedSizeBinary(_)) => {
            Some(if matches!((a, b), (LargeBinary, _) | (_, LargeBinary)) { LargeBinary } else { BinaryView })
        }
        // Times, timestamps (of one time zone) and durations join their finer unit (Polars
        // writes nanoseconds where DuckDB writes microseconds); `conform` fails on a value
        // the finer unit cannot hold rather than wrap it or make it null.
        (Time32(x) | Time64(x), Time32(y) | Time64(y)) => {
            let unit = finer_unit(x, y);
            Some(if matches!(unit, TimeUnit::Second | TimeUnit::Millisecond) { Time32(unit) } else { Time64(unit) })
        }
        (Timestamp(x, zx), Timestamp(y, zy)) if zx == zy => Some(Timestamp(finer_unit(x, y), zx.clone())),
        // Timestamps of two time zones hold instants since the epoch in UTC either way
        // (Parquet's isAdjustedToUTC): they join in UTC. A time zone and none (local
        // times) stay apart: no single instant is right for a local time.
        (Timestamp(x, Some(_)), Timestamp(y, Some(_))) => Some(Timestamp(finer_unit(x, y), Some("UTC".into()))),
        // Dates join as days, Parquet's DATE (arrow-rs writes a Date64 as a bare INT64
        // other readers take for a number); `cast_checked` refuses a Date64 that is not a
        // whole day rather than truncate it.
        (Date32, Date64) | (Date64, Date32) => Some(Date32),
        (Duration(x), Duration(y)) => Some(Duration(finer_unit(x, y))),
        // Decimals join the scale of either and the integer digits of either, when a
        // decimal of up to 38 digits holds both.
        _ if decimal(a).is_some() && decimal(b).is_some() => {
            let ((wa, pa, sa), (wb, pb, sb)) = (decimal(a)?, decimal(b)?);
            let scale = sa.max(sb);
            let digits = (pa as i16 - sa as i16).max(pb as i16 - sb as i16) + scale as i16;
            let precision = u8::try_from(digits).ok()?;
            match wa.max(wb) {
                32 if precision <= 9 => Some(Decimal32(precision, scale)),
                32 | 64 if precision <= 18 => Some(Decimal64(precision, scale)),
                _ if precision <= 38 => Some(Decimal128(precision, scale)),
                _ => None,
            }
        }
        (List(x), List(y)) => Some(List(unify_fields(x, y)?)),
        // Polars writes large lists where DuckDB and pyarrow write lists.
        (LargeList(x), LargeList(y)) | (List(x), LargeList(y)) | (LargeList(x), List(y)) => Some(LargeList(unify_fields(x, y)?)),
        (FixedSizeList(x, n), FixedSizeList(y, m)) if n == m => Some(FixedSizeList(unify_fields(x, y)?, *n)),
        (Struct(xs), Struct(ys)) if xs.len() == ys.len() => {
            let fields: Option<Vec<FieldRef>> =
                xs.iter().zip(ys.iter()).map(|(x, y)| (x.name() == y.name()).then(|| unify_fields(x, y)).flatten()).collect();
            Some(Struct(fields?.into()))
        }
        _ => None,
    }
}

/// `x` with the unified type of `x` and `y`, nullable where either is.
fn unify_fields(x: &FieldRef, y: &FieldRef) -> Option<FieldRef> {
    let t = unify_types(x.data_type(), y.data_type())?;
    Some(Arc::new(x.as_ref().clone().with_data_type(t).with_nullable(x.is_nullable() || y.is_nullable())))
}

/// Field metadata of every file merged into the first schema's fields (the first value kept
/// where files disagree), so a batch of any file fits the merge's schema.
fn merge_field_metadata(schema: &Schema, files: &[InputFile]) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut metadata = f.metadata().clone();
            for other in files {
                if let Ok(o) = other.metadata.schema().field_with_name(f.name()) {
                    for (k, v) in o.metadata() {
                        metadata.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
            }
            f.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// The schema of a union by name: the first file's columns, then each later file's new
/// columns in its order; types unified, nullable where any file's is or a file lacks it.
fn union_schema(files: &[InputFile]) -> Result<Schema> {
    let mut fields: Vec<Field> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    let mut seen_in: Vec<usize> = Vec::new();
    for f in files {
        for field in f.metadata.schema().fields() {
            match at.get(field.name()) {
                None => {
                    at.insert(field.name().clone(), fields.len());
                    fields.push(field.as_ref().clone());
                    seen_in.push(1);
                }
                Some(&i) => {
                    let t = unify_types(fields[i].data_type(), field.data_type()).ok_or_else(|| {
                        file_error(
                            &f.path,
                            format!(
                                "column '{}' is {} here but {} in an earlier input, and `union_by_name` has no type that holds both",
                                field.name(),
                                field.data_type(),
                                fields[i].data_type()
                            ),
                        )
                    })?;
                    let nullable = fields[i].is_nullable() || field.is_nullable();
                    fields[i] = fields[i].clone().with_data_type(t).with_nullable(nullable);
                    seen_in[i] += 1;
                }
            }
        }
    }
    for (field, seen) in fields.iter_mut().zip(seen_in) {
        if seen < files.len() {
            *field = field.clone().with_nullable(true);
        }
    }
    Ok(merge_field_metadata(&Schema::new_with_metadata(fields, files[0].metadata.schema().metadata().clone()), files))
}

/// The match check: every file has the first file's columns (names, order, types).
/// Nullability and field metadata may differ. Returns the first file's schema with every
/// column nullable where any file's is.
fn check_same_schema(files: &[InputFile]) -> Result<Schema> {
    let schema = files[0].metadata.schema();
    let mut nullable: Vec<bool> = schema.fields().iter().map(|f| f.is_nullable()).collect();
    for f in &files[1..] {
        let other = f.metadata.schema();
        let hint = "(`union_by_name` merges files whose columns differ in order, numeric width or presence)";
        if other.fields().len() != schema.fields().len() {
            return Err(file_error(
                &f.path,
                format!(
                    "schema differs from {}: {} columns here, {} there {hint}",
                    files[0].path.display(),
                    other.fields().len(),
                    schema.fields().len()
                ),
            ));
        }
        for ((a, b), nullable) in schema.fields().iter().zip(other.fields()).zip(&mut nullable) {
            if a.name() != b.name() || a.data_type() != b.data_type() {
                return Err(file_error(
                    &f.path,
                    format!(
                        "schema differs from {}: column '{}' {} there, '{}' {} here {hint}",
                        files[0].path.display(),
                        a.name(),
                        a.data_type(),
                        b.name(),
                        b.data_type(),
                    ),
                ));
            }
            *nullable |= b.is_nullable();
        }
    }
    let fields: Vec<Field> = schema.fields().iter().zip(nullable).map(|(f, n)| f.as_ref().clone().with_nullable(n)).collect();
    Ok(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `batch` (read from an input) as a batch of the merge's `schema`: columns taken by name
/// (in union-by-name mode a missing column becomes nulls and a narrower type is cast), the
/// schema's field metadata and nullability applied. A value the wider type cannot hold (a
/// time in a finer unit past 64 bits) is an error naming the column; callers add the file.
pub fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields().len() == schema.fields().len()
        && batch.schema().fields().iter().zip(schema.fields()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
    {
        let rows = batch.num_rows();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        return Ok(RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options)?);
    }
    let rows = batch.num_rows();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            None => Ok(new_null_array(f.data_type(), rows)),
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => cast_checked(c, f.data_type()).map_err(|e| {
                // The cause without arrow's own "Cast error: " (the detail wraps it in one).
                let e = match e {
                    Error::Arrow(arrow::error::ArrowError::CastError(m)) => m,
                    Error::Arrow(e) => e.to_string(),
                    e => e.to_string(),
                };
                let detail = format!("column '{}' as {} (its type in another input): {e}", f.name(), f.data_type());
                Error::Arrow(arrow::error::ArrowError::CastError(detail))
            }),
        })
        .collect::<Result<_>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &options)?)
}

/// The top-level leaf `name` of `schema`, if it has one.
fn top_level_leaf<'a>(schema: &'a SchemaDescPtr, name: &str) -> Option<&'a parquet::schema::types::Type> {
    schema.root_schema().get_fields().iter().map(|t| t.as_ref()).find(|t| t.name() == name && t.is_primitive())
}

/// Refuses inputs whose INTERVAL columns the output would not keep as INTERVAL (one where
/// `--union-by-name` joins it with another type, or with a column of its name that is not
/// an INTERVAL): their bytes would be written as an anonymous binary.
fn check_intervals_kept(files: &[InputFile], schema: &Schema) -> Result<()> {
    let intervals = |d: &SchemaDescPtr| -> Vec<String> {
        d.columns().iter().filter(|c| super::input_types::is_interval(c.self_type())).map(|c| c.path().string()).collect()
    };
    if files.iter().all(|f| intervals(&f.stored_schema).is_empty()) {
        return Ok(());
    }
    let output = match super::writer::common_parquet_schema(files, schema) {
        Some(d) => Arc::new(d),
        None => Arc::new(parquet::arrow::ArrowSchemaConverter::new().convert(schema).map_err(|source| Error::Parquet {
            path: None,
            context: "deriving the Parquet schema".into(),
            source,
        })?),
    };
    let kept = intervals(&output);
    for f in files {
        if let Some(lost) = intervals(&f.stored_schema).into_iter().find(|c| !kept.contains(c)) {
            return Err(file_error(
                &f.path,
                format!(
                    "column '{lost}' is a Parquet INTERVAL, which the output cannot keep: another input stores the column \
                     otherwise (another type, or bytes without the INTERVAL annotation), or it is nested in a column the \
                     inputs store differently; nothing is written rather than the intervals as bare bytes"
                ),
            ));
        }
    }
    Ok(())
}

/// Opens `paths`, checks that their schemas agree, settles the key (`by`, else the common
/// `sorting_columns`) and splits the files into runs. `check_sorted` is accepted for
/// compatibility: every run is checked (see the module doc).
pub fn plan_merge(paths: &[PathBuf], by: Option<Vec<SortKey>>, check_sorted: bool) -> Result<MergePlan> {
    let _ = check_sorted;
    plan_merge_with(paths, by, &PlanOptions::default())
}

/// [`plan_merge`] with options.
pub fn plan_merge_with(paths: &[PathBuf], by: Option<Vec<SortKey>>, options: &PlanOptions) -> Result<MergePlan> {
    if paths.is_empty() {
        return Err(Error::InvalidArgument("no input files".into()));
    }
    let mut files: Vec<InputFile> = paths.iter().map(|p| open_input(p)).collect::<Result<_>>()?;
    super::input_types::settle_int96(&mut files)?;
    let schema = if options.union_by_name { union_schema(&files)? } else { merge_field_metadata(&check_same_schema(&files)?, &files) };
    let schema: SchemaRef = Arc::new(schema);
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
        if let Some(f) = files.iter().find(|f| top_level_leaf(&f.stored_schema, &k.column).is_some_and(super::input_types::is_interval)) {
            return Err(Error::InvalidArgument(format!(
                "sort column '{}' is a Parquet INTERVAL (in {}): intervals have no order corank shares with other engines \
                 (a month has no fixed length in days), so corank cannot sort by one",
                k.column,
                f.path.display()
            )));
        }
        // The merge could order a nested key, but the output's `sorting_columns` name leaf
        // columns, and a list or struct is none.
        if field.data_type().is_nested() {
            return Err(Error::InvalidArgument(format!(
                "sort column '{}' has the nested type {}: Parquet's sorting_columns name leaf columns, so corank orders files \
                 by top-level primitive columns",
                k.column,
                field.data_type()
            )));
        }
    }

    let mut runs = Vec::new();
    let mut total_rows = 0;
    let mut decoded: u64 = 0;
    for (fi, f) in files.iter().enumerate() {
        let row_groups = f.metadata.metadata().row_groups();
        let joins = continues(f, &keys);
        let mut current: Option<Run> = None;
        for (g, rg) in row_groups.iter().enumerate() {
            let rows = rg.num_rows() as usize;
            total_rows += rows;
            if rows == 0 {
                continue;
            }
            let bytes = decoded_bytes(f, g);
            let decoder = decoder_bytes(f, g);
            decoded += bytes;
            let declared = declared_order(f, rg).is_some_and(|d| d.len() >= keys.len() && d[..keys.len()] == keys[..]);
            match &mut current {
                Some(run) if *run.row_groups.last().unwrap() + 1 == g && joins[g - 1] => {
                    run.row_groups.push(g);
                    run.row_group_rows.push(rows);
                    run.declared &= declared;
                    run.decoded_bytes += bytes;
                    run.decoder_bytes = run.decoder_bytes.max(decoder);
                }
                _ => {
                    runs.extend(current.take());
                    current = Some(Run {
                        file: fi,
                        row_groups: vec![g],
                        row_group_rows: vec![rows],
                        declared,
                        decoded_bytes: bytes,
                        decoder_bytes: decoder,
                    });
                }
            }
        }
        runs.extend(current);
    }
    check_intervals_kept(&files, &schema)?;
    let total_bytes = files.iter().map(|f| f.size).sum();
    let row_bytes = (decoded / total_rows.max(1) as u64).max(1) as usize;
    Ok(MergePlan { files, schema, keys, runs, total_rows, total_bytes, row_bytes, union_by_name: options.union_by_name })
}

#[cfg(test)]
mod tests {
    use super::{cast_checked, unify_types};
    use arrow::array::{Array, ArrayRef, AsArray, Time32SecondArray, Time64MicrosecondArray, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, Time64NanosecondType, TimeUnit, TimestampNanosecondType};
    use std::sync::Arc;

    #[test]
    fn times_timestamps_and_durations_join_their_finer_unit() {
        use DataType::*;
        use TimeUnit::*;
        assert_eq!(unify_types(&Time64(Microsecond), &Time64(Nanosecond)), Some(Time64(Nanosecond)));
        assert_eq!(unify_types(&Time32(Millisecond), &Time32(Second)), Some(Time32(Millisecond)));
        assert_eq!(unify_types(&Time32(Second), &Time64(Microsecond)), Some(Time64(Microsecond)));
        let utc = Some("UTC".into());
        assert_eq!(
            unify_types(&Timestamp(Nanosecond, utc.clone()), &Timestamp(Microsecond, utc.clone())),
            Some(Timestamp(Nanosecond, utc.clone()))
        );
        assert_eq!(unify_types(&Timestamp(Millisecond, None), &Timestamp(Microsecond, utc.clone())), None, "local and UTC");
        assert_eq!(
            unify_types(&Timestamp(Millisecond, Some("Europe/Paris".into())), &Timestamp(Microsecond, Some("+00:00".into()))),
            Some(Timestamp(Microsecond, utc)),
            "two time zones"
        );
        assert_eq!(unify_types(&Date64, &Date32), Some(Date32));
        assert_eq!(unify_types(&Duration(Second), &Duration(Millisecond)), Some(Duration(Millisecond)));
        assert_eq!(unify_types(&Time64(Microsecond), &Timestamp(Microsecond, None)), None);
    }

    #[test]
    fn finer_units_multiply_exactly_and_refuse_overflow() {
        let secs: ArrayRef = Arc::new(Time32SecondArray::from(vec![Some(0), None, Some(86_399)]));
        let ns = cast_checked(&secs, &DataType::Time64(TimeUnit::Nanosecond)).unwrap();
        let ns = ns.as_primitive::<Time64NanosecondType>();
        assert_eq!((ns.value(0), ns.is_null(1), ns.value(2)), (0, true, 86_399_000_000_000));
        let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![-1, 1_700_000_000_000]).with_timezone("UTC"));
        let to = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        let ts = cast_checked(&ms, &to).unwrap();
        assert_eq!(ts.data_type(), &to);
        assert_eq!(ts.as_primitive::<TimestampNanosecondType>().values().to_vec(), vec![-1_000_000, 1_700_000_000_000_000_000]);
        // arrow's own cast would wrap this product (times) or make it null (timestamps).
        let big: ArrayRef = Arc::new(Time64MicrosecondArray::from(vec![1, i64::MAX / 100]));
        let err = cast_checked(&big, &DataType::Time64(TimeUnit::Nanosecond)).unwrap_err().to_string();
        assert!(err.contains("does not fit"), "{err}");
        let big: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![i64::MIN / 10]));
        assert!(cast_checked(&big, &DataType::Timestamp(TimeUnit::Microsecond, None)).is_err());
        // Another time zone: the same instants, relabelled.
        let paris: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![-1, 5]).with_timezone("Europe/Paris"));
        let utc = cast_checked(&paris, &to).unwrap();
        assert_eq!(utc.as_primitive::<TimestampNanosecondType>().values().to_vec(), vec![-1_000_000, 5_000_000]);
        // Dates: whole days convert, a time of day is refused.
        let days: ArrayRef = Arc::new(arrow::array::Date64Array::from(vec![Some(-86_400_000), None, Some(19_000 * 86_400_000)]));
        let d32 = cast_checked(&days, &DataType::Date32).unwrap();
        assert_eq!(d32.as_primitive::<arrow::datatypes::Date32Type>().iter().collect::<Vec<_>>(), vec![Some(-1), None, Some(19_000)]);
        let noon: ArrayRef = Arc::new(arrow::array::Date64Array::from(vec![43_200_000]));
        let err = cast_checked(&noon, &DataType::Date32).unwrap_err().to_string();
        assert!(err.contains("not a whole day"), "{err}");
    }

    #[test]
    fn decimals_join_scale_and_integer_digits() {
        use DataType::*;
        assert_eq!(unify_types(&Decimal128(10, 2), &Decimal128(12, 4)), Some(Decimal128(12, 4)));
        assert_eq!(unify_types(&Decimal128(10, 2), &Decimal128(5, 4)), Some(Decimal128(12, 4)));
        assert_eq!(unify_types(&Decimal64(18, 0), &Decimal32(9, 3)), Some(Decimal128(21, 3)), "past Decimal64's 18 digits");
        assert_eq!(unify_types(&Decimal32(4, 2), &Decimal32(5, 1)), Some(Decimal32(6, 2)));
        assert_eq!(unify_types(&Decimal128(38, 0), &Decimal128(38, 10)), None, "48 digits");
        let a: ArrayRef = Arc::new(arrow::array::Decimal128Array::from(vec![Some(12345), None]).with_precision_and_scale(10, 2).unwrap());
        let b = cast_checked(&a, &Decimal128(12, 4)).unwrap();
        assert_eq!(b.as_primitive::<arrow::datatypes::Decimal128Type>().value(0), 1_234_500);
    }

    #[test]
    fn int64_joins_float64_where_every_value_is_exact() {
        use DataType::*;
        assert_eq!(unify_types(&Int64, &Float64), Some(Float64));
        assert_eq!(unify_types(&Float32, &UInt64), Some(Float64));
        assert_eq!(unify_types(&Int8, &Float16), Some(Float32));
        let exact: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![Some(-(1 << 53)), None, Some(1 << 60), Some(i64::MIN)]));
        let f = cast_checked(&exact, &Float64).unwrap();
        let f = f.as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![Some(-(2f64.powi(53))), None, Some(2f64.powi(60)), Some(-(2f64.powi(63)))]);
        for (v, shown) in [((1i64 << 53) + 1, "9007199254740993"), (i64::MAX, "9223372036854775807")] {
            let rounded: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![1, v]));
            let err = cast_checked(&rounded, &Float64).unwrap_err().to_string();
            assert!(err.contains(shown) && err.contains("no exact Float64"), "{err}");
        }
        let big: ArrayRef = Arc::new(arrow::array::UInt64Array::from(vec![u64::MAX]));
        assert!(cast_checked(&big, &Float64).is_err());
    }

    #[test]
    fn dictionaries_join_their_values_and_wider_keys() {
        use arrow::array::DictionaryArray;
        use arrow::datatypes::{Int16Type, Int8Type};
        use DataType::*;
        let dict = |k: DataType, v: DataType| Dictionary(Box::new(k), Box::new(v));
        assert_eq!(unify_types(&dict(Int8, Utf8), &Utf8), Some(Utf8));
        assert_eq!(unify_types(&LargeUtf8, &dict(Int32, Utf8)), Some(LargeUtf8));
        assert_eq!(unify_types(&dict(Int8, Utf8), &Utf8View), Some(Utf8View));
        assert_eq!(unify_types(&dict(Int8, Utf8), &dict(Int16, Utf8)), Some(dict(Int16, Utf8)));
        assert_eq!(unify_types(&dict(Int8, Utf8), &dict(UInt16, Utf8)), Some(Utf8), "keys of two signednesses: the values");
        assert_eq!(unify_types(&dict(Int8, Utf8), &dict(Int8, LargeUtf8)), Some(LargeUtf8));
        assert_eq!(unify_types(&dict(Int8, Utf8), &Int64), None);
        let a: DictionaryArray<Int8Type> = vec![Some("x"), None, Some("y"), Some("x")].into_iter().collect();
        let a: ArrayRef = Arc::new(a);
        let plain = cast_checked(&a, &Utf8).unwrap();
        assert_eq!(plain.as_string::<i32>().iter().collect::<Vec<_>>(), vec![Some("x"), None, Some("y"), Some("x")]);
        let wide = cast_checked(&a, &dict(Int16, Utf8)).unwrap();
        assert_eq!(wide.as_any_dictionary().keys().len(), 4);
        // Values of a dictionary are checked as the column's: only those the rows use.
        let values: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![(1 << 53) + 1, 7]));
        let keys = arrow::array::PrimitiveArray::<Int16Type>::from(vec![1, 1]);
        let unused_inexact: ArrayRef = Arc::new(DictionaryArray::new(keys, values));
        let f = cast_checked(&unused_inexact, &Float64).unwrap();
        assert_eq!(f.as_primitive::<arrow::datatypes::Float64Type>().values().to_vec(), vec![7.0, 7.0]);
    }

    #[test]
    fn fixed_size_binaries_join_binaries() {
        use DataType::*;
        assert_eq!(unify_types(&FixedSizeBinary(16), &LargeBinary), Some(LargeBinary));
        assert_eq!(unify_types(&Binary, &FixedSizeBinary(16)), Some(BinaryView));
        assert_eq!(unify_types(&FixedSizeBinary(16), &FixedSizeBinary(8)), Some(BinaryView));
        assert_eq!(unify_types(&FixedSizeBinary(16), &Utf8), None);
    }

    #[test]
    fn lists_join_their_large_form_with_their_items_unified() {
        let item = |t: DataType, nullable: bool| Arc::new(Field::new("element", t, nullable));
        let list = DataType::List(item(DataType::Int32, false));
        let large = DataType::LargeList(item(DataType::Int64, true));
        let want = DataType::LargeList(item(DataType::Int64, true));
        assert_eq!(unify_types(&list, &large), Some(want.clone()));
        assert_eq!(unify_types(&large, &list), Some(want));
        assert_eq!(unify_types(&list, &DataType::LargeList(item(DataType::Utf8, true))), None, "items no type holds both of");
    }
}

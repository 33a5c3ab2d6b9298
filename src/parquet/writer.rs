//! The merged output: one Parquet file, written to a temporary file beside the target and
//! renamed over it only when complete, so a failure (or an interrupted run) never leaves a
//! partial output under the target's name. The temporary file has a short name of its own
//! (`.corank-<16 hex digits>.tmp`, so any target name that fits fits it too), the mode
//! `File::create` gives (on Unix 0666 less the umask; a replaced file's mode when
//! [`WriterSettings::overwrite`] replaces one), and is registered for the signal handler ([`super::interrupt`]) before it
//! exists. It is removed when the writer is dropped, and also when a signal ends the process
//! if the program asked for that; it is locked while it exists, so that one left by a run
//! that was killed (SIGKILL) is told apart and removed by the next run ([`super::leftovers`]).
//! Only a regular file is ever replaced.
//!
//! The output keeps the inputs' Parquet schema where they share one (logical types such as
//! UUID, JSON or TIME adjusted to UTC, which the Arrow schema does not carry), see
//! [`common_parquet_schema`].
//!
//! Row groups are cut at `row_group_rows` rows or before `row_group_bytes` bytes of buffered
//! Arrow data (the bytes of the batches' slices), whichever comes first, a batch cut between
//! rows where it does not fit whole, and never into more than [`MAX_ROW_GROUPS`] (a row
//! group over `row_group_bytes`, where that or a single row forces one, is warned about).
//! Their columns are encoded and compressed in parallel
//! (one task per leaf column, arrow-rs's `ArrowRowGroupWriterFactory`), several row groups
//! at once ([`row_groups_in_flight`]), and appended in order. A row group that needs no
//! merge is copied from its input as it is ([`SortedParquetWriter::append_row_group`], see
//! [`super::passthrough`]): the row group being filled is cut first, short if need be, and
//! the copy waits in line behind the row groups still encoding (its bytes read in the
//! meantime, in one read per column chunk, unless it is larger than two row groups of the
//! output), so the writer never stops for an encode. Every
//! [`WRITEBACK_BYTES`] the kernel is asked to start writing the file out, so the `fsync`
//! before the rename does not wait for the whole file.
//! Every row group carries the merge key as `sorting_columns`; the inputs' key-value
//! metadata is kept.
//!
//! **Dictionary columns** keep their declared key type in the stored Arrow schema
//! (`ARROW:schema`, written at the end) unless a row group's column chunk holds more
//! distinct values than that key type can index: Parquet writes one dictionary per column
//! chunk, and readers (arrow-rs, pyarrow) refuse a dictionary page larger than the declared
//! key type. Such a column's key type is widened to the narrowest signed type that holds
//! the largest count seen ([`widened_dictionary_keys`]); a column that fits keeps its type.

use super::dictionary::{self, DictionaryChoice};
use super::interrupt::TempGuard;
use crate::error::{Error, Result};
use crate::sort_key::SortKey;
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use bytes::{Buf, Bytes};
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory, ArrowWriterOptions,
};
use parquet::arrow::{encode_arrow_schema, ArrowSchemaConverter, ArrowWriter, ARROW_SCHEMA_META_KEY as ARROW_SCHEMA_KEY};
use parquet::basic::Compression;
use parquet::bloom_filter::Sbbf;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{KeyValue, ParquetMetaData, SortingColumn};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::SchemaDescriptor;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::mpsc::Receiver;
use tempfile::TempPath;

/// How the output is written (the knobs of arrow-rs's `parquet-rewrite`).
#[derive(Debug, Clone)]
pub struct WriterSettings {
    pub compression: Compression,
    /// Most rows per row group.
    pub row_group_rows: usize,
    /// Most bytes of Arrow data buffered per row group (before encoding).
    pub row_group_bytes: usize,
    /// Replace an existing output file.
    pub overwrite: bool,
    /// Flush the file to disk (`fsync`, with writeback started along the way) before it is
    /// renamed into place, so that a completed output survives a crash. Off for a sort's
    /// spill runs: temporary files, read back from the page cache and removed, which the
    /// disk never needs to see (at 20M rows, ~1.5 GB written and flushed for nothing).
    pub sync: bool,
}

impl Default for WriterSettings {
    fn default() -> Self {
        Self {
            compression: Compression::ZSTD(Default::default()),
            row_group_rows: 1 << 20,
            row_group_bytes: 128 << 20,
            overwrite: false,
            sync: true,
        }
    }
}

/// Parses `none`, `snappy`, `lz4` (LZ4_RAW), `zstd` / `zstd(1..22)`, `gzip` / `gzip(0..9)`,
/// `brotli` / `brotli(0..11)` (the codecs this build carries; the parquet crate's default level
/// where none is given).
pub fn parse_compression(text: &str) -> Result<Compression> {
    let bad = |why: String| {
        Error::InvalidArgument(format!(
            "compression \"{text}\": {why} (use none, snappy, lz4, zstd or zstd(1..22), gzip or gzip(0..9), brotli or brotli(0..11))"
        ))
    };
    let lower = text.trim().to_ascii_lowercase();
    let c = match lower.as_str() {
        "none" | "uncompressed" => Compression::UNCOMPRESSED,
        "zstd" => Compression::ZSTD(Default::default()),
        "gzip" => Compression::GZIP(Default::default()),
        "brotli" => Compression::BROTLI(Default::default()),
        // Parquet's LZ4_RAW: the Hadoop-framed LZ4 is deprecated for writing.
        "lz4" | "lz4_raw" => Compression::LZ4_RAW,
        other => Compression::from_str(other).map_err(|e| bad(e.to_string()))?,
    };
    match c {
        Compression::UNCOMPRESSED
        | Compression::SNAPPY
        | Compression::ZSTD(_)
        | Compression::GZIP(_)
        | Compression::BROTLI(_)
        | Compression::LZ4_RAW => Ok(c),
        other => Err(bad(format!("{other} is not built into corank"))),
    }
}

/// Bytes written and rows, once the file is in place.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub rows: usize,
    pub row_groups: usize,
    pub bytes: u64,
    /// Rows and row groups copied unchanged ([`SortedParquetWriter::append_row_group`]).
    pub passthrough_rows: usize,
    pub passthrough_row_groups: usize,
    /// Of those, row groups whose codec differs from the output's.
    pub codec_kept_row_groups: usize,
}

/// Most row groups a Parquet file holds (its row group ordinal is an `i16`).
pub const MAX_ROW_GROUPS: usize = i16::MAX as usize;

/// A sorted Parquet output in progress.
pub struct SortedParquetWriter {
    target: PathBuf,
    overwrite: bool,
    /// Removed when dropped (declared before `_on_signal`, so dropped first).
    temp: TempPath,
    /// Removes `temp` if a signal ends the process (src/parquet/interrupt.rs).
    _on_signal: TempGuard,
    writer: SerializedFileWriter<BufWriter<File>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    settings: WriterSettings,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
    rows: usize,
    /// Rows the caller means to write: row groups are cut on bytes only while the rest
    /// still fits in [`MAX_ROW_GROUPS`].
    expected_rows: usize,
    row_groups: usize,
    row_groups_started: usize,
    /// Time spent waiting for the oldest row group's encoding, and appending row groups
    /// (`-vv`: which of the two holds the writer's thread).
    encode_wait: std::time::Duration,
    append_time: std::time::Duration,
    /// Row groups not yet in the file, oldest first: being encoded, or waiting to be
    /// copied after the ones before them.
    in_flight: VecDeque<InFlight>,
    /// Per top-level column, the most distinct values a narrow dictionary column held in
    /// one row group (see [`widened_dictionary_keys`]).
    max_distinct: Vec<usize>,
    /// Row groups still to come besides the merged rows' (copied ones, and the short ones
    /// cut before them): cuts on bytes leave room for them.
    reserved_row_groups: usize,
    passthrough_rows: usize,
    passthrough_row_groups: usize,
    codec_kept_row_groups: usize,
    /// Bytes of the file handed to the kernel's writeback so far ([`WRITEBACK_BYTES`]).
    written_back: usize,
    /// Compressed bytes of the row groups queued to be copied (held in memory once read).
    copy_bytes: usize,
    /// Which columns keep their dictionary ([`super::dictionary`]).
    dictionary: DictionaryChoice,
    /// Whether the warning that a row group passes `row_group_bytes` was given.
    warned_over_bytes: bool,
}

/// Fewest row groups in flight (encoding, or queued to be copied), each encoded as a task
/// per column: one heavy column (long strings) takes as long as the rest together, so
/// several row groups are needed to keep the cores busy.
pub const ROW_GROUPS_IN_FLIGHT: usize = 4;

/// Most row groups in flight.
pub const MAX_ROW_GROUPS_IN_FLIGHT: usize = 16;

/// Row groups in flight on this machine: one per rayon thread, within
/// [`ROW_GROUPS_IN_FLIGHT`]..=[`MAX_ROW_GROUPS_IN_FLIGHT`]. Four left a 16-core host 40%
/// idle (docs/PERFORMANCE.md, "The CLI's pipeline on 16 cores"). The memory plans divide
/// the writer's share by it, so more cores make smaller row groups, not more memory.
pub fn row_groups_in_flight() -> usize {
    rayon::current_num_threads().clamp(ROW_GROUPS_IN_FLIGHT, MAX_ROW_GROUPS_IN_FLIGHT)
}

/// Most bytes of Arrow data a row group buffers when the writer may hold `writer_bytes`:
/// the row groups in flight and the one filling, each held twice (Arrow data, encoded
/// pages); at least 1 MiB.
pub fn row_group_bytes_within(writer_bytes: usize) -> usize {
    (writer_bytes / (row_groups_in_flight() + 1) / 2).max(1 << 20)
}

/// Every this many bytes written, the kernel is asked to start writing the file to disk
/// (Linux `sync_file_range`), so that the `fsync` before the rename waits only for the
/// last of it instead of the whole file (2.9 GB: 5.5 s without, 3.1–4.0 s with, on the
/// 16-core host).
pub const WRITEBACK_BYTES: usize = 64 << 20;

/// A row group's encoded column chunks, per top-level column the number of distinct values
/// a narrow-keyed dictionary column holds in it (0 for other columns), and for the first
/// row group its chunks encoded without dictionaries too ([`super::dictionary`]).
type EncodedRowGroup = parquet::errors::Result<(Vec<ArrowColumnChunk>, Vec<usize>, Option<Vec<ArrowColumnChunk>>)>;

/// A row group on its way into the file, in output order.
enum InFlight {
    /// Being encoded (on rayon), with its rows.
    Encoding(Receiver<EncodedRowGroup>, usize),
    /// Copied unchanged from an input once every row group before it is written, so the
    /// writer never waits for an encode to finish before a copy (see
    /// [`SortedParquetWriter::append_row_group`]).
    Copy(CopiedRowGroup),
}

impl InFlight {
    fn rows(&self) -> usize {
        match self {
            InFlight::Encoding(_, rows) => *rows,
            InFlight::Copy(c) => c.rows,
        }
    }
}

/// A row group of an input, ready to be copied: its columns' metadata, page indexes and
/// bloom filters, read when it was queued, and their bytes, read in the background.
struct CopiedRowGroup {
    source: PathBuf,
    row_group: usize,
    rows: usize,
    /// Its compressed bytes.
    bytes: usize,
    columns: Vec<ColumnCloseResult>,
    /// Each column chunk's bytes, in column order, being read; `None` for a row group
    /// larger than the copies may hold ([`SortedParquetWriter::append_row_group`]),
    /// streamed from its file when its turn comes.
    chunks: Option<Receiver<parquet::errors::Result<Vec<ChunkAt>>>>,
    codec_kept: bool,
}

/// A column chunk's bytes, read from its file at `offset` in one read (`File`'s reader
/// reads 8 KiB at a time): what the writer copies the chunk from, addressed by the file
/// offsets its metadata names.
struct ChunkAt {
    offset: u64,
    bytes: Bytes,
}

impl Length for ChunkAt {
    fn len(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

impl ChunkReader for ChunkAt {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(self.get_bytes(start, (self.len().saturating_sub(start)) as usize)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let at = start.checked_sub(self.offset).map(|a| a as usize).filter(|a| a + length <= self.bytes.len());
        at.map(|a| self.bytes.slice(a..a + length)).ok_or_else(|| {
            parquet::errors::ParquetError::General(format!(
                "bytes {start}..{} are outside the column chunk read at {}..{}",
                start + length as u64,
                self.offset,
                self.len()
            ))
        })
    }
}

/// Reads the byte ranges `(offset, length)` of `source`, each in one read.
fn read_chunks(source: &Path, ranges: &[(u64, u64)]) -> parquet::errors::Result<Vec<ChunkAt>> {
    let file = File::open(source)?;
    ranges.iter().map(|&(offset, length)| Ok(ChunkAt { offset, bytes: file.get_bytes(offset, length as usize)? })).collect()
}

/// Whether `dt` is a dictionary whose key type is narrower than 32 bits (the only ones a
/// row group can outgrow in practice).
pub(super) fn narrow_dictionary(dt: &DataType) -> bool {
    matches!(dt, DataType::Dictionary(k, _) if matches!(k.as_ref(), DataType::Int8 | DataType::UInt8 | DataType::Int16 | DataType::UInt16))
}

/// Distinct values the rows of `column` (a dictionary array) reference across `batches`.
fn distinct_dictionary_values(batches: &[RecordBatch], column: usize) -> usize {
    distinct_values_of(batches.iter().map(|b| b.column(column)))
}

/// Distinct values the rows of dictionary `arrays` reference (0 for other arrays).
pub(super) fn distinct_values_of<'a>(arrays: impl Iterator<Item = &'a arrow::array::ArrayRef>) -> usize {
    let mut seen: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    for array in arrays {
        let Some(dict) = array.as_any_dictionary_opt() else { continue };
        let values = dict.values();
        // No values, so every row is null (and `normalized_keys` would panic).
        if values.is_empty() {
            continue;
        }
        let Ok(converter) = RowConverter::new(vec![SortField::new(values.data_type().clone())]) else { return 0 };
        let Ok(rows) = converter.convert_columns(std::slice::from_ref(values)) else { return 0 };
        let mut used = vec![false; values.len()];
        for (i, k) in dict.normalized_keys().into_iter().enumerate() {
            if dict.keys().is_valid(i) {
                used[k] = true;
            }
        }
        for (v, _) in used.iter().enumerate().filter(|(_, u)| **u) {
            seen.insert(rows.row(v).as_ref().to_vec());
        }
    }
    seen.len()
}

/// The schema to store: `schema` with each narrow dictionary key type widened where a row
/// group held more distinct values (`max_distinct`, per top-level column) than it indexes.
pub fn widened_dictionary_keys(schema: &Schema, max_distinct: &[usize]) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(max_distinct.iter().copied().chain(std::iter::repeat(0)))
        .map(|(f, n)| match f.data_type() {
            DataType::Dictionary(k, v) if n > 0 => {
                // Readers accept a dictionary of n values when n itself fits the key type.
                let fits = |t: &DataType| match t {
                    DataType::Int8 => n <= i8::MAX as usize,
                    DataType::UInt8 => n <= u8::MAX as usize,
                    DataType::Int16 => n <= i16::MAX as usize,
                    DataType::UInt16 => n <= u16::MAX as usize,
                    _ => true,
                };
                if fits(k) {
                    f.as_ref().clone()
                } else {
                    let key = [DataType::Int16, DataType::Int32].into_iter().find(|t| fits(t)).unwrap_or(DataType::Int32);
                    f.as_ref().clone().with_data_type(DataType::Dictionary(Box::new(key), v.clone()))
                }
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// Encodes and compresses one row group's columns in parallel; with `plain_writers` (the
/// first row group's trial) a second time alongside, from the same leaves.
fn encode_row_group(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    writers: Vec<ArrowColumnWriter>,
    plain_writers: Option<Vec<ArrowColumnWriter>>,
) -> EncodedRowGroup {
    // 0. Distinct values of narrow dictionary columns (see the module doc).
    let distinct: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| if narrow_dictionary(f.data_type()) { distinct_dictionary_values(&batches, c) } else { 0 })
        .collect();
    // 1. Leaves of every batch, grouped by leaf column (a nested field has several).
    let mut leaves: Vec<Vec<ArrowLeafColumn>> = (0..writers.len()).map(|_| Vec::with_capacity(batches.len())).collect();
    for batch in &batches {
        let mut next = 0;
        for (field, column) in schema.fields().iter().zip(batch.columns()) {
            for leaf in compute_leaves(field, column)? {
                leaves[next].push(leaf);
                next += 1;
            }
        }
    }
    drop(batches);
    // 2. One task per column (and per encoding).
    let encode = |writers: Vec<ArrowColumnWriter>| {
        writers
            .into_par_iter()
            .zip(&leaves)
            .map(|(mut writer, leaves)| {
                for leaf in leaves {
                    writer.write(leaf)?;
                }
                writer.close()
            })
            .collect::<parquet::errors::Result<Vec<_>>>()
    };
    match plain_writers {
        None => Ok((encode(writers)?, distinct, None)),
        Some(plain_writers) => {
            let (chunks, plain) = rayon::join(|| encode(writers), || encode(plain_writers));
            Ok((chunks?, distinct, Some(plain?)))
        }
    }
}

/// `keys` as Parquet `sorting_columns`: they name leaf columns, and keys are top-level
/// primitive columns.
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

/// The inputs' common Parquet schema, for the output to keep their logical types (UUID,
/// JSON, TIME adjusted to UTC, ...), which the Arrow schema does not carry: the first
/// file's, when every file has the same one but for the repetition of top-level leaves
/// (`OPTIONAL` where any file's is: files of one table may differ in nullability alone,
/// see [`super::inputs`]), `schema` (the merge's Arrow schema) is the first file's Arrow
/// schema column for column (names, types), and it stores the columns as the schema derived
/// from `schema` would (same leaves, physical types, lengths and levels: only annotations
/// differ, so the Arrow writer writes the columns as it writes its own). The files' schemas
/// as stored ([`InputFile::stored_schema`](super::inputs::InputFile::stored_schema)): an
/// INTERVAL, read as its 12 bytes, stays an INTERVAL. Otherwise the schema derived from
/// `schema` with the inputs' UUID, JSON, BSON, ENUM and INTERVAL annotations where
/// they agree ([`with_input_annotations`]), or `None`: the output's schema is derived from
/// `schema`. Files whose schema is this one keep their row groups eligible for passthrough.
pub fn common_parquet_schema(files: &[super::inputs::InputFile], schema: &Schema) -> Option<SchemaDescriptor> {
    let derived = ArrowSchemaConverter::new().convert(schema).ok()?;
    shared_parquet_schema(files, schema, &derived).or_else(|| with_input_annotations(files, schema, &derived))
}

/// The inputs' one Parquet schema (but for top-level repetition), when it stores the columns
/// as `derived` (the schema derived from `schema`) does: see [`common_parquet_schema`].
fn shared_parquet_schema(files: &[super::inputs::InputFile], schema: &Schema, derived: &SchemaDescriptor) -> Option<SchemaDescriptor> {
    use parquet::basic::Repetition;
    use parquet::schema::types::Type;
    use std::sync::Arc;
    let first = files.first()?;
    // The schemas as stored: an INTERVAL is read as bytes, and kept an INTERVAL.
    let first_descr = first.stored_schema.as_ref();
    let root = first_descr.root_schema();
    let mut fields: Vec<Arc<Type>> = root.get_fields().to_vec();
    // A top-level field (a leaf, or a list or struct) with its repetition set, the rest of
    // it as it is.
    let with_repetition = |t: &Type, repetition: Repetition| -> Option<Type> {
        let info = t.get_basic_info();
        let id = info.has_id().then(|| info.id());
        match t {
            Type::PrimitiveType { basic_info, .. } => {
                leaf_like(t, repetition, basic_info.converted_type(), basic_info.logical_type_ref().cloned())
            }
            Type::GroupType { basic_info, fields } => Type::group_type_builder(basic_info.name())
                .with_repetition(repetition)
                .with_converted_type(basic_info.converted_type())
                .with_logical_type(basic_info.logical_type_ref().cloned())
                .with_fields(fields.clone())
                .with_id(id)
                .build()
                .ok(),
        }
    };
    let mut widened = false;
    for f in &files[1..] {
        let other = f.stored_schema.root_schema().get_fields();
        if other.len() != fields.len() {
            return None;
        }
        for (mine, theirs) in fields.iter_mut().zip(other) {
            if mine == theirs {
                continue;
            }
            // Equal but for a top-level field's REQUIRED against OPTIONAL: OPTIONAL (DuckDB
            // writes a list or struct without nulls as REQUIRED too).
            let optional = |t: &Type| t.get_basic_info().has_repetition() && t.get_basic_info().repetition() != Repetition::REPEATED;
            if !(optional(mine) && optional(theirs)) {
                return None;
            }
            let (a, b) = (with_repetition(mine, Repetition::OPTIONAL)?, with_repetition(theirs, Repetition::OPTIONAL)?);
            if a != b {
                return None;
            }
            *mine = Arc::new(a);
            widened = true;
        }
    }
    let descr = if widened {
        let root = Type::group_type_builder(root.name()).with_fields(fields).build().ok()?;
        SchemaDescriptor::new(Arc::new(root))
    } else {
        first_descr.clone()
    };
    let arrow = first.metadata.schema();
    let same_arrow = arrow.fields().len() == schema.fields().len()
        && arrow.fields().iter().zip(schema.fields()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    let same_leaves = derived.num_columns() == descr.num_columns()
        && derived.columns().iter().zip(descr.columns()).all(|(d, c)| {
            d.path() == c.path()
                && d.physical_type() == c.physical_type()
                && (d.physical_type() != parquet::basic::Type::FIXED_LEN_BYTE_ARRAY || d.type_length() == c.type_length())
                && d.max_def_level() == c.max_def_level()
                && d.max_rep_level() == c.max_rep_level()
        });
    (same_arrow && same_leaves).then_some(descr)
}

/// The leaf `t` (a primitive type) with this repetition and these annotations, the rest of it
/// (name, physical type, length, precision, scale, id) as it is; `None` for a group.
fn leaf_like(
    t: &parquet::schema::types::Type,
    repetition: parquet::basic::Repetition,
    converted: parquet::basic::ConvertedType,
    logical: Option<parquet::basic::LogicalType>,
) -> Option<parquet::schema::types::Type> {
    use parquet::schema::types::Type;
    let Type::PrimitiveType { basic_info, physical_type, type_length, scale, precision } = t else { return None };
    Type::primitive_type_builder(basic_info.name(), *physical_type)
        .with_repetition(repetition)
        .with_converted_type(converted)
        .with_logical_type(logical)
        .with_length(*type_length)
        .with_precision(*precision)
        .with_scale(*scale)
        .with_id(basic_info.has_id().then(|| basic_info.id()))
        .build()
        .ok()
}

/// The schema derived from `schema` (`derived`) with the logical types of its top-level
/// leaves that the Arrow schema does not carry (UUID, JSON, BSON, ENUM, and the converted
/// type INTERVAL, read as its 12 bytes: see [`super::input_types`]) taken from the inputs,
/// for when they share no schema (`--union-by-name`, a list required in one file): a leaf is
/// annotated when every input that has a top-level column of its name stores it as a leaf of
/// the same physical type and length with that one annotation, and reads it as the output's
/// Arrow type. `None` when no leaf gains one (the writer derives the same).
fn with_input_annotations(files: &[super::inputs::InputFile], schema: &Schema, derived: &SchemaDescriptor) -> Option<SchemaDescriptor> {
    use parquet::basic::{ConvertedType, LogicalType};
    use parquet::schema::types::Type;
    use std::sync::Arc;
    let root = derived.root_schema();
    let mut fields: Vec<Arc<Type>> = root.get_fields().to_vec();
    let mut annotated = false;
    for (field, arrow_field) in fields.iter_mut().zip(schema.fields()) {
        let Type::PrimitiveType { basic_info, physical_type, type_length, .. } = field.as_ref() else { continue };
        if basic_info.logical_type_ref().is_some() && !matches!(basic_info.logical_type_ref(), Some(LogicalType::String)) {
            continue;
        }
        // The one annotation every input that has this column gives it.
        let agreed = || -> Option<(Option<LogicalType>, ConvertedType)> {
            let mut seen: Option<(Option<LogicalType>, ConvertedType)> = None;
            for f in files {
                let inputs = f.stored_schema.root_schema().get_fields();
                let Some(theirs) = inputs.iter().find(|t| t.name() == basic_info.name()) else { continue };
                let Type::PrimitiveType { basic_info: info, physical_type: p, type_length: len, .. } = theirs.as_ref() else {
                    return None;
                };
                let reads_as = f.metadata.schema().field_with_name(basic_info.name()).ok().map(|a| a.data_type());
                if p != physical_type || len != type_length || reads_as != Some(arrow_field.data_type()) {
                    return None;
                }
                let logical = info.logical_type_ref().cloned();
                let kept = match &logical {
                    Some(l) => matches!(l, LogicalType::Uuid | LogicalType::Json | LogicalType::Bson | LogicalType::Enum),
                    None => info.converted_type() == ConvertedType::INTERVAL,
                };
                // The same logical type (converted types may differ), or both INTERVAL.
                let differs = |(l, c): &(Option<LogicalType>, ConvertedType)| *l != logical || (l.is_none() && *c != info.converted_type());
                let annotation = (logical.clone(), info.converted_type());
                if !kept || seen.as_ref().is_some_and(differs) {
                    return None;
                }
                seen = Some(annotation);
            }
            seen
        };
        let Some((logical, converted)) = agreed() else { continue };
        let Some(t) = leaf_like(field, basic_info.repetition(), converted, logical) else { continue };
        *field = Arc::new(t);
        annotated = true;
    }
    if !annotated {
        return None;
    }
    let root = Type::group_type_builder(root.name()).with_fields(fields).build().ok()?;
    Some(SchemaDescriptor::new(Arc::new(root)))
}

/// Refuses an output that is not a regular file (a directory, device, FIFO, socket or
/// symbolic link: never replaced, even with `overwrite`), and an existing one unless
/// `overwrite`; the checks are repeated at the rename.
pub fn check_output(target: &Path, overwrite: bool) -> Result<()> {
    match std::fs::symlink_metadata(target) {
        Ok(meta) if !meta.file_type().is_file() => Err(not_regular(target, &meta)),
        Ok(_) if !overwrite => Err(Error::InvalidArgument(format!("output {} exists; set `overwrite` to replace it", target.display()))),
        // Not there (or not visible: creating the file beside it reports why).
        _ => Ok(()),
    }
}

fn not_regular(target: &Path, meta: &std::fs::Metadata) -> Error {
    let t = meta.file_type();
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                "a FIFO"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "something else"
            }
        }
        #[cfg(not(unix))]
        "something else"
    };
    Error::InvalidArgument(format!(
        "output {} is {what}, not a regular file; corank writes only regular files (and `overwrite` replaces only those)",
        target.display()
    ))
}

/// `.corank-<16 hex digits>.tmp`: short (a long output name still fits the file name limit)
/// and random (std's randomly keyed hasher over the time, the process and a counter).
fn temp_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    format!(".corank-{:016x}.tmp", h.finish())
}

/// Creates a new temporary file in `dir`, registered for the signal handler before it
/// exists (a signal at any moment leaves nothing behind), with `File::create`'s mode.
fn create_temp(dir: &Path) -> std::io::Result<(File, TempPath, TempGuard)> {
    for _ in 0..64 {
        let path = dir.join(temp_name());
        let mut on_signal = TempGuard::register(&path);
        match OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
            Ok(file) => {
                // Locked while it exists, so a later run leaves it alone (it removes only
                // the temporary files of runs that were killed: super::leftovers); one that
                // removed it before the lock was taken makes us draw another name.
                match file.try_clone().and_then(|dup| super::leftovers::hold(dup, &path)) {
                    Ok(Some(held)) => on_signal.hold(held),
                    Ok(None) => continue,
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        return Err(e);
                    }
                }
                match TempPath::try_from_path(&path) {
                    Ok(temp) => return Ok((file, temp, on_signal)),
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        return Err(e);
                    }
                }
            }
            // Taken (unlikely): unregister and draw another name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => drop(on_signal),
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free temporary file name"))
}

/// Bytes of a batch's rows: its columns' slices, not the buffers they slice (a merged
/// batch is often a slice of a large window).
fn slice_bytes(batch: &RecordBatch) -> usize {
    batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size())).sum()
}

/// The most leading rows of `batch`, up to `most`, whose [`slice_bytes`] less `fixed` stay
/// within `budget` (0 where not even one row does). The bytes grow with the rows.
fn rows_within(batch: &RecordBatch, most: usize, budget: usize, fixed: usize) -> usize {
    let fits = |rows: usize| slice_bytes(&batch.slice(0, rows)).saturating_sub(fixed) <= budget;
    if fits(most) {
        return most;
    }
    // The largest fitting count, by bisection: `lo` fits (or is 0), `hi` does not.
    let (mut lo, mut hi) = (0, most);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Refuses `settings` that cannot write `expected_rows` rows: a row or byte limit of 0, or
/// more than [`MAX_ROW_GROUPS`] row groups of `row_group_rows` (a usage error naming the
/// setting, which the command line words as its flag). [`SortedParquetWriter::create`]
/// checks it; a caller that decides its row groups itself checks it before reading a row.
pub fn check_row_groups(settings: &WriterSettings, expected_rows: usize) -> Result<()> {
    for (value, name) in [(settings.row_group_rows, "`row_group_rows`"), (settings.row_group_bytes, "`row_group_bytes`")] {
        if value == 0 {
            return Err(Error::InvalidArgument(format!("{name} 0: it must be at least 1")));
        }
    }
    let groups = expected_rows.div_ceil(settings.row_group_rows);
    if groups > MAX_ROW_GROUPS {
        return Err(Error::InvalidArgument(format!(
            "`row_group_rows` {} makes {groups} row groups of the {expected_rows} rows; a Parquet file holds at most {MAX_ROW_GROUPS}: use `row_group_rows` {} or more",
            settings.row_group_rows,
            expected_rows.div_ceil(MAX_ROW_GROUPS)
        )));
    }
    Ok(())
}

impl SortedParquetWriter {
    /// Creates the temporary file beside `target`. `parquet_schema` is the output's Parquet
    /// schema (see [`common_parquet_schema`]; `None`: derived from `schema`). `metadata` is
    /// kept in the footer; `keys` become every row group's `sorting_columns`.
    /// `expected_rows` is how many rows will be written: more than [`MAX_ROW_GROUPS`] row
    /// groups of `settings.row_group_rows` are refused here.
    pub fn create(
        target: &Path,
        schema: SchemaRef,
        parquet_schema: Option<SchemaDescriptor>,
        keys: &[SortKey],
        metadata: Vec<KeyValue>,
        expected_rows: usize,
        settings: WriterSettings,
    ) -> Result<Self> {
        check_output(target, settings.overwrite)?;
        check_row_groups(&settings, expected_rows)?;
        // Sorting columns name leaf columns; keys are top-level primitive columns.
        let sorting = match &parquet_schema {
            Some(leaves) => sorting_columns_in(leaves, keys),
            None => sorting_columns(&schema, keys),
        }
        .map_err(|e| match e {
            Error::Parquet { path: None, context, source } => Error::Parquet { path: Some(target.to_path_buf()), context, source },
            other => other,
        })?;
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let (file, temp, on_signal) =
            create_temp(&dir).map_err(|e| Error::io(target, format!("cannot create a file in {}", dir.display()), e))?;

        let props = WriterProperties::builder()
            .set_compression(settings.compression)
            .set_max_row_group_row_count(Some(settings.row_group_rows))
            .set_sorting_columns(Some(sorting))
            .set_key_value_metadata((!metadata.is_empty()).then_some(metadata))
            .build();
        // The Arrow schema is stored at the end, once dictionary key types are settled.
        let mut options = ArrowWriterOptions::new().with_properties(props).with_skip_arrow_metadata(true);
        if let Some(parquet_schema) = parquet_schema {
            options = options.with_parquet_schema(parquet_schema);
        }
        let arrow_writer = ArrowWriter::try_new_with_options(BufWriter::with_capacity(1 << 20, file), schema.clone(), options)
            .map_err(|e| Error::parquet(target, "", e))?;
        let (writer, factory) = arrow_writer.into_serialized_writer().map_err(|e| Error::parquet(target, "", e))?;
        Ok(Self {
            target: target.to_path_buf(),
            overwrite: settings.overwrite,
            temp,
            _on_signal: on_signal,
            writer,
            factory,
            settings,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            rows: 0,
            expected_rows,
            row_groups: 0,
            row_groups_started: 0,
            encode_wait: std::time::Duration::ZERO,
            append_time: std::time::Duration::ZERO,
            in_flight: VecDeque::new(),
            max_distinct: vec![0; schema.fields().len()],
            reserved_row_groups: 0,
            passthrough_rows: 0,
            passthrough_row_groups: 0,
            codec_kept_row_groups: 0,
            written_back: 0,
            copy_bytes: 0,
            dictionary: DictionaryChoice::Undecided,
            warned_over_bytes: false,
            schema,
        })
    }

    /// Buffers `batch`; writes a row group whenever one is full: at `row_group_rows` rows,
    /// or before its bytes would pass `row_group_bytes`, whatever the batches' size (a
    /// batch is cut between rows to fit). A row group passes `row_group_bytes` only where
    /// it cannot be helped, with a warning: a single row (or a batch's share of a
    /// dictionary) larger than the limit, or more row groups than a file may hold.
    pub fn write(&mut self, batch: RecordBatch) -> Result<()> {
        let mut batch = batch;
        while batch.num_rows() > 0 {
            let room = self.settings.row_group_rows - self.pending_rows;
            let mut take = room.min(batch.num_rows());
            let mut bytes = slice_bytes(&batch.slice(0, take));
            let limit = self.settings.row_group_bytes;
            if self.pending_bytes + bytes > limit {
                if !self.may_cut_on_bytes() {
                    self.warn_over_bytes("a Parquet file holds at most 32,767 row groups, so the rest are larger");
                } else {
                    take = rows_within(&batch, take, limit.saturating_sub(self.pending_bytes), 0);
                    if take == 0 && self.pending_rows > 0 {
                        self.flush_row_group()?; // the next rows start a row group of their own
                        continue;
                    }
                    if take == 0 {
                        // Not one row fits an empty row group: rows by their own bytes (a
                        // batch's dictionary counts with its every slice), at least one.
                        let fixed = slice_bytes(&batch.slice(0, 0));
                        take = rows_within(&batch, room.min(batch.num_rows()), limit, fixed).max(1);
                        self.warn_over_bytes("a row (or a batch's dictionary) is larger than that alone");
                    }
                    bytes = slice_bytes(&batch.slice(0, take));
                }
            }
            let head = batch.slice(0, take);
            batch = batch.slice(take, batch.num_rows() - take);
            self.pending_rows += take;
            self.pending_bytes += bytes;
            self.pending.push(head);
            if self.pending_rows >= self.settings.row_group_rows
                || (self.pending_bytes >= self.settings.row_group_bytes && self.may_cut_on_bytes())
            {
                self.flush_row_group()?;
            }
        }
        Ok(())
    }

    /// Says once per output that a row group passes `row_group_bytes`, and why.
    fn warn_over_bytes(&mut self, why: &str) {
        if !self.warned_over_bytes {
            self.warned_over_bytes = true;
            log::warn!(
                "{}: row groups of more than {} bytes (the row group byte limit): {why}",
                self.target.display(),
                self.settings.row_group_bytes
            );
        }
    }

    /// Whether cutting the buffered rows as a row group now, before it is full, still
    /// leaves room for the rest in full row groups within [`MAX_ROW_GROUPS`].
    fn may_cut_on_bytes(&self) -> bool {
        let rest = self.expected_rows.saturating_sub(self.rows());
        self.row_groups_started + 1 + rest.div_ceil(self.settings.row_group_rows) + self.reserved_row_groups <= MAX_ROW_GROUPS
    }

    /// The output's Parquet schema (what [`append_row_group`](Self::append_row_group)
    /// requires of a copied row group's columns).
    pub fn parquet_schema(&self) -> &SchemaDescriptor {
        self.writer.schema_descr()
    }

    /// Leaves room for `n` more row groups than the merged rows need (see
    /// [`append_row_group`](Self::append_row_group)).
    pub fn reserve_row_groups(&mut self, n: usize) {
        self.reserved_row_groups = n;
    }

    /// Cuts the rows buffered so far as a row group (short if need be), then queues row
    /// group `g` of the file at `source` (`footer` its metadata, with page indexes where it
    /// has them) to be copied as it is, right after the row groups before it are written
    /// (those still encoding are not waited for): its column chunks copied byte for byte,
    /// not decoded. Its columns must be the
    /// output's ([`parquet_schema`](Self::parquet_schema)). `codec_kept`: its codec is not
    /// the output's (counted for the summary).
    pub fn append_row_group(&mut self, source: &Path, footer: &ParquetMetaData, g: usize, codec_kept: bool) -> Result<()> {
        self.flush_row_group()?;
        if self.row_groups_started >= MAX_ROW_GROUPS {
            return Err(Error::InvalidArgument(format!(
                "{}: a Parquet file holds at most {MAX_ROW_GROUPS} row groups; merge without passthrough or with larger row groups",
                self.target.display()
            )));
        }
        let context = format!("copying row group {g} of {}", source.display());
        let rg = footer.row_group(g);
        let rows = rg.num_rows().max(0) as usize;
        // Opened here only for bloom filters; the copy opens the file again when its turn
        // comes, so queued copies hold no file handles.
        let file = match rg.columns().iter().any(|c| c.bloom_filter_offset().is_some()) {
            true => Some(File::open(source).map_err(|e| Error::io(source, context.clone(), e))?),
            false => None,
        };
        let mut columns = Vec::with_capacity(rg.columns().len());
        for (c, column) in rg.columns().iter().enumerate() {
            let bloom_filter = if let (Some(file), true) = (&file, column.bloom_filter_offset().is_some()) {
                Sbbf::read_from_column_chunk(column, file).map_err(|e| Error::parquet(source, context.clone(), e))?
            } else {
                None
            };
            columns.push(ColumnCloseResult {
                bytes_written: column.compressed_size().max(0) as u64,
                rows_written: rows as u64,
                metadata: column.clone(),
                bloom_filter,
                column_index: footer.column_index().and_then(|ci| ci.get(g)).and_then(|row| row.get(c)).cloned(),
                offset_index: footer.offset_index().and_then(|oi| oi.get(g)).and_then(|row| row.get(c)).cloned(),
            });
        }
        // The bytes are read on rayon while the row groups before this one are written,
        // unless the row group alone is more than the copies may hold.
        let (path, ranges): (PathBuf, Vec<(u64, u64)>) = (source.to_path_buf(), columns.iter().map(|c| c.metadata.byte_range()).collect());
        let bytes = ranges.iter().map(|&(_, length)| length as usize).sum::<usize>();
        let copy_limit = 2 * self.settings.row_group_bytes;
        let chunks = (bytes <= copy_limit).then(|| {
            let (done, chunks) = std::sync::mpsc::sync_channel(1);
            rayon::spawn(move || {
                let _ = done.send(read_chunks(&path, &ranges));
            });
            chunks
        });
        let bytes = if chunks.is_some() { bytes } else { 0 };
        self.in_flight.push_back(InFlight::Copy(CopiedRowGroup {
            source: source.to_path_buf(),
            row_group: g,
            rows,
            bytes,
            columns,
            chunks,
            codec_kept,
        }));
        self.copy_bytes += bytes;
        self.row_groups_started += 1;
        self.reserved_row_groups = self.reserved_row_groups.saturating_sub(2);
        // Copies read ahead hold their bytes: about two row groups' worth of the writer's
        // memory (`copy_limit`) besides the one copied next; a larger one is streamed.
        while self.in_flight.len() >= row_groups_in_flight() || (self.copy_bytes > copy_limit && self.in_flight.len() > 1) {
            self.append_oldest()?;
        }
        Ok(())
    }

    /// What column writers for this file are made from: its Parquet schema, Arrow schema
    /// and properties (see [`super::dictionary::factory_with`]), for row groups encoded
    /// elsewhere and appended with [`append_encoded_row_group`](Self::append_encoded_row_group).
    pub(super) fn encoding(&self) -> (&SchemaDescriptor, &SchemaRef, &parquet::file::properties::WriterPropertiesPtr) {
        (self.writer.schema_descr(), &self.schema, self.writer.properties())
    }

    /// Appends a row group encoded elsewhere: `chunks` are its column chunks in leaf order,
    /// from column writers made as [`encoding`](Self::encoding) says; `distinct` per
    /// top-level column the distinct values a narrow dictionary column holds in it (see
    /// [`widened_dictionary_keys`]). Rows buffered by [`write`](Self::write) are cut as a
    /// row group first, and the row groups in flight written.
    pub(super) fn append_encoded_row_group(&mut self, chunks: Vec<ArrowColumnChunk>, rows: usize, distinct: &[usize]) -> Result<()> {
        self.flush_row_group()?;
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        if self.row_groups_started >= MAX_ROW_GROUPS {
            return Err(Error::InvalidArgument(format!(
                "{}: a Parquet file holds at most {MAX_ROW_GROUPS} row groups",
                self.target.display()
            )));
        }
        let target = self.target.clone();
        let err = |e: parquet::errors::ParquetError| Error::parquet(&target, "", e);
        if chunks.len() != self.writer.schema_descr().num_columns() {
            return Err(Error::Internal(format!(
                "{}: a row group of {} column chunks for {} leaf columns",
                target.display(),
                chunks.len(),
                self.writer.schema_descr().num_columns()
            )));
        }
        for (max, &n) in self.max_distinct.iter_mut().zip(distinct) {
            *max = (*max).max(n);
        }
        let mut row_group = self.writer.next_row_group().map_err(err)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group).map_err(err)?;
        }
        row_group.close().map_err(err)?;
        self.row_groups_started += 1;
        self.rows += rows;
        self.row_groups += 1;
        self.start_writeback();
        Ok(())
    }

    /// Rows written so far (in finished row groups, in flight and buffered).
    pub fn rows(&self) -> usize {
        self.rows + self.in_flight.iter().map(InFlight::rows).sum::<usize>() + self.pending_rows
    }

    /// Starts encoding the buffered batches as one row group (a task per leaf column, on
    /// rayon), and appends finished row groups in order, keeping at most
    /// [`row_groups_in_flight`] in flight so that one heavy column (long strings) does not
    /// serialize the writer.
    fn flush_row_group(&mut self) -> Result<()> {
        if self.pending_rows == 0 {
            return Ok(());
        }
        let target = self.target.clone();
        let err = |e| Error::parquet(&target, "", e);
        // The row groups after the first encoded one wait for its choice of dictionaries.
        while matches!(self.dictionary, DictionaryChoice::Trial) {
            self.append_oldest()?;
        }
        let g = self.row_groups_started;
        let (writers, plain_writers) = match &self.dictionary {
            DictionaryChoice::Undecided if self.expected_rows > self.rows() => {
                let props = dictionary::without_dictionaries(self.writer.properties());
                let plain = dictionary::factory_with(self.writer.schema_descr(), &self.schema, props).map_err(err)?;
                let plain_writers = plain.create_column_writers(g).map_err(err)?;
                self.dictionary = DictionaryChoice::Trial;
                (self.factory.create_column_writers(g).map_err(err)?, Some(plain_writers))
            }
            DictionaryChoice::Undecided | DictionaryChoice::Trial => {
                // One row group is all that is expected: nothing later to choose for. (No
                // trial is in flight here: the loop above waited for it.)
                self.dictionary = DictionaryChoice::Decided(None);
                (self.factory.create_column_writers(g).map_err(err)?, None)
            }
            DictionaryChoice::Decided(factory) => (factory.as_ref().unwrap_or(&self.factory).create_column_writers(g).map_err(err)?, None),
        };
        let batches = std::mem::take(&mut self.pending);
        let schema = self.schema.clone();
        let (done, result) = std::sync::mpsc::sync_channel(1);
        rayon::spawn(move || {
            let _ = done.send(encode_row_group(&schema, batches, writers, plain_writers));
        });
        self.in_flight.push_back(InFlight::Encoding(result, self.pending_rows));
        self.row_groups_started += 1;
        self.pending_rows = 0;
        self.pending_bytes = 0;
        while self.in_flight.len() >= row_groups_in_flight() {
            self.append_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest row group in flight and appends it to the file.
    fn append_oldest(&mut self) -> Result<()> {
        let Some(oldest) = self.in_flight.pop_front() else { return Ok(()) };
        let target = self.target.clone();
        let (result, rows) = match oldest {
            InFlight::Encoding(result, rows) => (result, rows),
            InFlight::Copy(copy) => return self.append_copy(copy),
        };
        let err = |e: parquet::errors::ParquetError| Error::parquet(&target, "", e);
        let waiting = std::time::Instant::now();
        let received = result.recv();
        self.encode_wait += waiting.elapsed();
        let appending = std::time::Instant::now();
        let (chunks, distinct, plain) =
            received.map_err(|_| Error::Internal(format!("{}: a row group encoder stopped", target.display())))?.map_err(err)?;
        for (max, n) in self.max_distinct.iter_mut().zip(distinct) {
            *max = (*max).max(n);
        }
        let chunks = match plain {
            None => chunks,
            Some(plain) => {
                let (chunks, went_plain) = dictionary::smaller_chunks(chunks, plain);
                let schema = self.writer.schema_descr();
                let names: Vec<String> =
                    schema.columns().iter().zip(&went_plain).filter(|(_, &p)| p).map(|(c, _)| c.path().string()).collect();
                log::debug!("{}: columns written without a dictionary: {}", target.display(), names.join(", "));
                let factory = dictionary::decided_factory(schema, &self.schema, self.writer.properties(), &went_plain).map_err(err)?;
                self.dictionary = DictionaryChoice::Decided(factory);
                chunks
            }
        };
        let mut row_group = self.writer.next_row_group().map_err(err)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut row_group).map_err(err)?;
        }
        row_group.close().map_err(err)?;
        self.rows += rows;
        self.row_groups += 1;
        self.start_writeback();
        self.append_time += appending.elapsed();
        Ok(())
    }

    /// Copies a queued input row group's column chunks into the file, byte for byte.
    fn append_copy(&mut self, copy: CopiedRowGroup) -> Result<()> {
        let target = self.target.clone();
        let context = format!("copying row group {} of {}", copy.row_group, copy.source.display());
        let err = |e: parquet::errors::ParquetError| Error::parquet(&target, context.clone(), e);
        self.copy_bytes -= copy.bytes;
        let mut row_group;
        match copy.chunks {
            Some(chunks) => {
                let chunks = chunks.recv().map_err(|_| Error::Internal(format!("{context}: the reader stopped")))?.map_err(err)?;
                row_group = self.writer.next_row_group().map_err(err)?;
                for (close, chunk) in copy.columns.into_iter().zip(chunks) {
                    row_group.append_column(&chunk, close).map_err(err)?;
                }
            }
            None => {
                let file = File::open(&copy.source).map_err(|e| Error::io(&copy.source, context.clone(), e))?;
                row_group = self.writer.next_row_group().map_err(err)?;
                for close in copy.columns {
                    row_group.append_column(&file, close).map_err(err)?;
                }
            }
        }
        row_group.close().map_err(err)?;
        self.start_writeback();
        self.rows += copy.rows;
        self.row_groups += 1;
        self.passthrough_rows += copy.rows;
        self.passthrough_row_groups += 1;
        self.codec_kept_row_groups += usize::from(copy.codec_kept);
        Ok(())
    }

    /// Starts the kernel writing the file out once [`WRITEBACK_BYTES`] more were written
    /// (Linux; elsewhere the `fsync` at the end does it all). Best effort: a failure here
    /// shows again at that `fsync`.
    fn start_writeback(&mut self) {
        if !self.settings.sync {
            return;
        }
        let written = self.writer.bytes_written();
        if written < self.written_back + WRITEBACK_BYTES {
            return;
        }
        self.written_back = written;
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = self.writer.inner().get_ref().as_raw_fd();
            // SAFETY: `fd` is the open output file; the call only schedules writeback of
            // its dirty pages (offset 0, length 0: to the end of the file).
            unsafe {
                libc::sync_file_range(fd, 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
    }

    /// Writes the last row group and the footer, then renames the file into place.
    /// Dropping the writer without calling this removes the temporary file.
    pub fn finish(mut self) -> Result<Written> {
        self.flush_row_group()?;
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        let target = self.target.clone();
        log::debug!(
            "{}: {} row groups encoded; waited {:.1?} for their encoding, appended them in {:.1?}",
            target.display(),
            self.row_groups_started,
            self.encode_wait,
            self.append_time
        );
        let stored = widened_dictionary_keys(&self.schema, &self.max_distinct);
        self.writer.append_key_value_metadata(KeyValue::new(ARROW_SCHEMA_KEY.to_string(), encode_arrow_schema(&stored)));
        let inner = self.writer.into_inner().map_err(|e| Error::parquet(&target, "", e))?;
        let file = inner.into_inner().map_err(|e| Error::io(&target, "", e.into_error()))?;
        // The target again, as it is now: still not there, or a regular file to replace, whose
        // mode the new file takes.
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if !meta.file_type().is_file() => return Err(not_regular(&target, &meta)),
            Ok(meta) if self.overwrite => file.set_permissions(meta.permissions()).map_err(|e| Error::io(&target, "", e))?,
            _ => {}
        }
        if self.settings.sync {
            let t = std::time::Instant::now();
            file.sync_all().map_err(|e| Error::io(&target, "", e))?;
            log::debug!("{}: synced to disk in {:?}", target.display(), t.elapsed());
        }
        let bytes = file.metadata().map_err(|e| Error::io(&target, "", e))?.len();
        drop(file);
        let persisted = if self.overwrite { self.temp.persist(&target) } else { self.temp.persist_noclobber(&target) };
        persisted.map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                Error::InvalidArgument(format!("output {} exists; set `overwrite` to replace it", target.display()))
            } else {
                Error::io(&target, "", e.error)
            }
        })?;
        Ok(Written {
            rows: self.rows,
            row_groups: self.row_groups,
            bytes,
            passthrough_rows: self.passthrough_rows,
            passthrough_row_groups: self.passthrough_row_groups,
            codec_kept_row_groups: self.codec_kept_row_groups,
        })
    }
}

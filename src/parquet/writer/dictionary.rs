//! Which columns of the output keep Parquet's dictionary encoding, chosen on the file's
//! first encoded row group.
//!
//! arrow-rs dictionary-encodes every column by default: each value is hashed into the column
//! chunk's dictionary, and only once the dictionary passes its page limit (1 MiB) does the
//! chunk fall back to plain values, the rows before keeping their dictionary pages. For a
//! column of mostly distinct values (prices, comments, a foreign key) that is work for
//! nothing, and for one of a few repeats per value (a sorted key) a dictionary also costs
//! more than it saves once the chunk is compressed: the writer's dictionary interner and
//! its hash table are a visible share of a merge's time, and such columns written plain make
//! the merge faster and the file smaller (docs/performance.md has the measurements).
//!
//! **The rule.** The first row group the writer encodes (not a copied one) is encoded twice
//! when more rows are expected after it: once as the file's properties say (every
//! dictionary on) and once with every dictionary off. Each of its column chunks is written
//! in the smaller of the two encodings (compressed bytes, dictionary page included; a tie
//! goes to plain values, the faster to write and read), and every later encoded row group
//! writes a column without a dictionary if and only if its first chunk was written that
//! way. The choice follows from the first row group's rows alone, so the file's bytes do not
//! depend on timing; the row group after the first waits for it to be encoded (the next
//! row group's rows are gathered meanwhile). A column whose values change character later in
//! the file keeps the first row group's choice (a dictionary kept still falls back by
//! itself; a column written plain stays plain: larger, never wrong).
//!
//! An output expected to be one row group is encoded once, as the properties say: no later
//! row group could use the choice. The trial's second encoding is held until the first row
//! group is appended: one row group's encoded pages more than the writer's memory plan
//! counts (at most its Arrow bytes, `row_group_bytes`), once per file.

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::row::{RowConverter, SortField};
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::errors::Result;
use parquet::file::properties::{WriterProperties, WriterPropertiesPtr};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::SchemaDescriptor;
use std::sync::Arc;

/// Where the writer stands with the choice.
pub(super) enum DictionaryChoice {
    /// No row group encoded yet.
    Undecided,
    /// The first encoded row group is in flight in both encodings.
    Trial,
    /// Every later row group's column writers come from this factory (`None`: the file's
    /// own, every dictionary kept).
    Decided(Option<ArrowRowGroupWriterFactory>),
}

/// A factory of column writers with `props` for `schema`: made from a file writer that
/// writes nowhere, since arrow-rs takes a factory's properties from its file writer.
pub(crate) fn factory_with(
    schema: &SchemaDescriptor,
    arrow_schema: &arrow::datatypes::SchemaRef,
    props: WriterProperties,
) -> Result<ArrowRowGroupWriterFactory> {
    let nowhere = SerializedFileWriter::new(std::io::sink(), schema.root_schema_ptr(), Arc::new(props))?;
    Ok(ArrowRowGroupWriterFactory::new(&nowhere, Arc::clone(arrow_schema)))
}

/// `props` with every column's dictionary off: the trial's second encoding.
pub(crate) fn without_dictionaries(props: &WriterPropertiesPtr) -> WriterProperties {
    props.as_ref().clone().into_builder().set_dictionary_enabled(false).build()
}

/// The first row group's chunks: per leaf column, the smaller of its two encodings
/// (`with` the file's properties, `plain` without dictionaries; a tie goes to plain), and
/// whether the plain one was taken.
pub(crate) fn smaller_chunks(with: Vec<ArrowColumnChunk>, plain: Vec<ArrowColumnChunk>) -> (Vec<ArrowColumnChunk>, Vec<bool>) {
    with.into_iter()
        .zip(plain)
        .map(|(d, p)| {
            let take_plain = p.close().metadata.compressed_size() <= d.close().metadata.compressed_size();
            (if take_plain { p } else { d }, take_plain)
        })
        .unzip()
}

/// The factory for the row groups after the first, given which leaves (in the order of
/// `schema`'s columns) went plain; `None` when none did (the file's own factory serves).
pub(crate) fn decided_factory(
    schema: &SchemaDescriptor,
    arrow_schema: &arrow::datatypes::SchemaRef,
    props: &WriterPropertiesPtr,
    plain: &[bool],
) -> Result<Option<ArrowRowGroupWriterFactory>> {
    if !plain.iter().any(|&p| p) {
        return Ok(None);
    }
    let mut builder = props.as_ref().clone().into_builder();
    for (leaf, _) in schema.columns().iter().zip(plain).filter(|(_, &p)| p) {
        builder = builder.set_column_dictionary_enabled(leaf.path().clone(), false);
    }
    factory_with(schema, arrow_schema, builder.build()).map(Some)
}

/// Whether `dt` is a dictionary whose key type is narrower than 32 bits (the only ones a
/// row group can outgrow in practice).
pub(crate) fn narrow_dictionary(dt: &DataType) -> bool {
    matches!(dt, DataType::Dictionary(k, _) if matches!(k.as_ref(), DataType::Int8 | DataType::UInt8 | DataType::Int16 | DataType::UInt16))
}

/// Distinct values the rows of `column` (a dictionary array) reference across `batches`.
pub(super) fn distinct_dictionary_values(batches: &[RecordBatch], column: usize) -> usize {
    distinct_values_of(batches.iter().map(|b| b.column(column)))
}

/// Distinct values the rows of dictionary `arrays` reference (0 for other arrays).
pub(crate) fn distinct_values_of<'a>(arrays: impl Iterator<Item = &'a arrow::array::ArrayRef>) -> usize {
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

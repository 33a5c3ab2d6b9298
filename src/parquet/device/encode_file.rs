//! A Parquet file assembled from pages the device encoder wrote (the kernels of
//! `cuda/parquet_encode.cu`, or [`super::encode_cpu`]'s CPU reference of them): the host's
//! part of issue 69's stage 4, "the host writes the bytes and the footer".
//!
//! Each column chunk is its pages' headers and bodies back to back, handed to parquet-rs's
//! `SerializedRowGroupWriter::append_column` with the chunk's metadata (sizes, encodings,
//! statistics) and its offset index (each page's place, size and first row), which
//! parquet-rs moves to where the chunk lands and writes into the footer with the schema.
//! So the file's framing and footer are parquet-rs's own; only the pages are ours. The
//! footer says what corank's CPU writer says (`parquet/writer`): the Arrow schema
//! (`ARROW:schema`), and the merge key as every row group's `sorting_columns` where one is
//! given.
//!
//! Not yet: a column index (the pages' min and max are computed, not yet written there),
//! compression (every page is UNCOMPRESSED), dictionary pages.

// Only the tests call this yet (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use super::encode_cpu::{encode_chunk, ColumnIn, EncodedChunk};
use super::encode_plan::{plan_pages, EncodeType, PageLimits, PagePlan};
use arrow::array::{Array, RecordBatch};
use parquet::arrow::{encode_arrow_schema, ArrowSchemaConverter, ARROW_SCHEMA_META_KEY};
use parquet::basic::{Compression, Encoding};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{ColumnChunkMetaData, KeyValue};
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnDescPtr;
use std::sync::Arc;

/// Writes `batches` as a Parquet file, one row group each, every column cut into pages by
/// `limits` ([`plan_pages`]).
pub(crate) fn write_file(batches: &[RecordBatch], limits: PageLimits, header_stats: bool) -> Result<Vec<u8>, String> {
    let tables = batches
        .iter()
        .map(|b| {
            b.columns()
                .iter()
                .map(|c| {
                    let ty = EncodeType::of(c.data_type())
                        .ok_or_else(|| format!("a column of {} is not covered by the device encoder", c.data_type()))?;
                    Ok(plan_pages(c.as_ref(), ty.width(), limits))
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .collect::<Result<Vec<_>, String>>()?;
    write_file_with_pages(batches, &tables, header_stats)
}

/// Writes `batches` as a Parquet file, one row group each, column `c` of row group `g` cut
/// by the page table `pages[g][c]` (checked: a table that does not cover its rows is an
/// `Err`, and nothing is returned), encoded by the CPU reference.
pub(crate) fn write_file_with_pages(batches: &[RecordBatch], pages: &[Vec<Vec<PagePlan>>], header_stats: bool) -> Result<Vec<u8>, String> {
    write_file_encoded_by(batches, pages, &[], |array, col, table| encode_chunk(array, col, table, header_stats))
}

/// As [`write_file_with_pages`], each chunk encoded by `encode` (given the chunk's array,
/// its input and its page table: the device's encoder, or the CPU reference), which
/// checks the table; `keys` (none: no `sorting_columns`) become every row group's
/// `sorting_columns`, as `corank merge` and `corank sort` write them.
pub(crate) fn write_file_encoded_by(
    batches: &[RecordBatch],
    pages: &[Vec<Vec<PagePlan>>],
    keys: &[crate::SortKey],
    mut encode: impl FnMut(&dyn Array, &ColumnIn<'_>, &[PagePlan]) -> Result<EncodedChunk, String>,
) -> Result<Vec<u8>, String> {
    let Some(first) = batches.first() else { return Err("no batches to write".into()) };
    let schema = first.schema();
    if pages.len() != batches.len() {
        return Err(format!("{} page tables for {} row groups", pages.len(), batches.len()));
    }
    let descr = ArrowSchemaConverter::new().convert(&schema).map_err(|e| e.to_string())?;
    let sorting = if keys.is_empty() { None } else { Some(crate::parquet::sorting_columns(&schema, keys).map_err(|e| e.to_string())?) };
    let arrow_schema = KeyValue::new(ARROW_SCHEMA_META_KEY.to_string(), encode_arrow_schema(&schema));
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_sorting_columns(sorting)
            .set_key_value_metadata(Some(vec![arrow_schema]))
            .build(),
    );
    let err = |e: parquet::errors::ParquetError| e.to_string();
    let mut writer = SerializedFileWriter::new(Vec::new(), descr.root_schema_ptr(), props).map_err(err)?;
    for (g, (batch, tables)) in batches.iter().zip(pages).enumerate() {
        if batch.schema() != schema {
            return Err(format!("row group {g} has another schema"));
        }
        if tables.len() != batch.num_columns() {
            return Err(format!("row group {g}: {} page tables for {} columns", tables.len(), batch.num_columns()));
        }
        let mut row_group = writer.next_row_group().map_err(err)?;
        for (c, (array, table)) in batch.columns().iter().zip(tables).enumerate() {
            let field = schema.field(c);
            let col =
                ColumnIn::of(array.as_ref(), field.is_nullable()).map_err(|e| format!("row group {g}, column {}: {e}", field.name()))?;
            let chunk = encode(array.as_ref(), &col, table).map_err(|e| format!("row group {g}, column {}: {e}", field.name()))?;
            let (bytes, close) = close_chunk(descr.column(c), col.ty, &chunk, batch.num_rows())?;
            row_group.append_column(&bytes::Bytes::from(bytes), close).map_err(err)?;
        }
        row_group.close().map_err(err)?;
    }
    writer.into_inner().map_err(err)
}

/// Typed statistics of PLAIN min and max bytes, as parquet-rs's writer makes them (signed
/// sort order: the deprecated fields are written too).
macro_rules! stats {
    ($variant:ident, $t:ty, $mm:expr, $nulls:expr) => {{
        let from = |b: &[u8]| <$t>::from_le_bytes(b.try_into().expect("a value of its width"));
        Statistics::$variant(
            ValueStatistics::new($mm.min.as_deref().map(from), $mm.max.as_deref().map(from), None, Some($nulls), false)
                .with_backwards_compatible_min_max(true),
        )
    }};
}

/// The chunk's bytes (at offset 0) and what parquet-rs needs to append it.
fn close_chunk(descr: ColumnDescPtr, ty: EncodeType, chunk: &EncodedChunk, rows: usize) -> Result<(Vec<u8>, ColumnCloseResult), String> {
    let mut bytes = Vec::new();
    let mut locations = Vec::with_capacity(chunk.pages.len());
    let mut first_row = 0i64;
    for p in &chunk.pages {
        let size = p.header.len() + p.body.len();
        locations.push(PageLocation {
            offset: bytes.len() as i64,
            compressed_page_size: i32::try_from(size).map_err(|_| format!("a page of {size} bytes"))?,
            first_row_index: first_row,
        });
        bytes.extend_from_slice(&p.header);
        bytes.extend_from_slice(&p.body);
        first_row += p.rows as i64;
    }
    let nulls = chunk.nulls as u64;
    let statistics = match ty {
        EncodeType::Int32 => stats!(Int32, i32, chunk.min_max, nulls),
        EncodeType::Int64 => stats!(Int64, i64, chunk.min_max, nulls),
        EncodeType::Float => stats!(Float, f32, chunk.min_max, nulls),
        EncodeType::Double => stats!(Double, f64, chunk.min_max, nulls),
    };
    let metadata = ColumnChunkMetaData::builder(descr)
        .set_compression(Compression::UNCOMPRESSED)
        .set_encodings(vec![Encoding::PLAIN, Encoding::RLE])
        .set_total_compressed_size(bytes.len() as i64)
        .set_total_uncompressed_size(bytes.len() as i64)
        .set_num_values(rows as i64)
        .set_data_page_offset(0)
        .set_statistics(statistics)
        .build()
        .map_err(|e| e.to_string())?;
    let close = ColumnCloseResult {
        bytes_written: bytes.len() as u64,
        rows_written: rows as u64,
        metadata,
        bloom_filter: None,
        column_index: None,
        offset_index: Some(OffsetIndexMetaData { page_locations: locations, unencoded_byte_array_data_bytes: None }),
    };
    Ok((bytes, close))
}

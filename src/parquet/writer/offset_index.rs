//! Offset indexes for copied column chunks whose files have none.
//!
//! A row group copied unchanged (`super::passthrough`) brings its column chunks' page
//! indexes along. Many writers write none (DuckDB, parquet-mr before 1.11, arrow-rs with
//! `offset_index_disabled`), while every row group the writer encodes has an offset index;
//! and a Parquet file's offset index is all or nothing: the parquet crate's writer panics
//! in `finish` on a file whose row groups have it for some chunks and not for others
//! (`finalize_offset_indexes`, "this will panic if there's a missing index"). So a copied
//! chunk without one gets one built here from its page headers, read without decompressing
//! a page:
//!
//! - each page's location is where its header starts and its size runs to the next page's
//!   header (the last one to the chunk's end), the dictionary page left out, as the format
//!   asks;
//! - each data page's rows: a v2 page's header counts them; a v1 page's counts values, which
//!   are its rows when the column has no repetition. So only chunks of unrepeated columns
//!   get one ([`buildable`]); a row group with a repeated column and no offset index is
//!   merged, not copied.
//!
//! The pages are walked by the parquet crate's own `SerializedPageReader` (peek the next
//! header, skip the page), over a [`ChunkReader`] that records where each header read
//! starts. What comes out is checked against the chunk's metadata (pages inside the chunk,
//! sizes that add up to it, rows that add up to the row group's); anything else is an
//! error and the row group is merged instead.

use crate::parquet::store::{Source, SourceRead};
use parquet::column::page::PageReader;
use parquet::errors::{ParquetError, Result as ParquetResult};
use parquet::file::metadata::{ColumnChunkMetaData, RowGroupMetaData};
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::SchemaDescriptor;
use std::io::{BufReader, Seek, SeekFrom};
use std::sync::{Arc, Mutex};

/// Whether offset indexes can be built for every chunk of a row group of a file with this
/// schema: no column is repeated (see the module doc).
pub fn buildable(schema: &SchemaDescriptor) -> bool {
    schema.columns().iter().all(|c| c.max_rep_level() == 0)
}

/// The offset index of every column chunk of `row_group` (of the file `file`: local, or an
/// object whose row group's chunks are fetched together at the first header read), built
/// from their page headers. An error where the pages do not agree with the metadata.
pub fn build(file: &Source, row_group: &RowGroupMetaData) -> ParquetResult<Vec<OffsetIndexMetaData>> {
    let rows = row_group.num_rows();
    row_group.columns().iter().map(|c| build_column(file, c, rows)).collect()
}

/// A page header's reader: a small buffer, since a header is tens of bytes and the page
/// after it is skipped, not read.
const HEADER_BUFFER: usize = 512;

/// A [`ChunkReader`] over a file that records the offset of every `get_read` (the page
/// reader starts one at each page header it parses).
struct HeaderProbe {
    file: Source,
    len: u64,
    starts: Mutex<Vec<u64>>,
}

impl Length for HeaderProbe {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for HeaderProbe {
    type T = SourceRead;

    fn get_read(&self, start: u64) -> ParquetResult<Self::T> {
        self.starts.lock().unwrap_or_else(|e| e.into_inner()).push(start);
        match &self.file {
            Source::Local(f) => {
                let mut file = f.try_clone()?;
                file.seek(SeekFrom::Start(start))?;
                Ok(SourceRead::Local(BufReader::with_capacity(HEADER_BUFFER, file)))
            }
            // An object's: from the row group fetched at the first header.
            #[cfg(feature = "object-store")]
            remote => remote.get_read(start),
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> ParquetResult<bytes::Bytes> {
        // Only a page's data is read this way, which peeking and skipping never do.
        Err(ParquetError::General(format!("unexpected read of {length} bytes at {start} while walking page headers")))
    }
}

fn build_column(file: &Source, column: &ColumnChunkMetaData, rows: i64) -> ParquetResult<OffsetIndexMetaData> {
    let fail = |what: String| ParquetError::General(format!("column {}: {what}", column.column_path()));
    if column.column_descr().max_rep_level() > 0 {
        return Err(fail("a repeated column's v1 pages do not count their rows".into()));
    }
    let (start, length) = column.byte_range();
    let end = start + length;
    let probe = Arc::new(HeaderProbe { file: file.try_clone()?, len: file.len(), starts: Mutex::new(Vec::new()) });
    let mut pages = SerializedPageReader::new(probe.clone(), column, rows.max(0) as usize, None)?;
    let mut locations: Vec<PageLocation> = Vec::new();
    let mut next_row = 0i64;
    loop {
        // 1. The next page's header: read (and recorded) by the peek, at its offset.
        let before = probe.starts.lock().unwrap_or_else(|e| e.into_inner()).len();
        let Some(page) = pages.peek_next_page()? else { break };
        let starts = probe.starts.lock().unwrap_or_else(|e| e.into_inner())[before..].to_vec();
        let [offset] = starts[..] else {
            return Err(fail(format!("{} header reads for one page (an index page?)", starts.len())));
        };
        // 2. Skipped, not read.
        pages.skip_next_page()?;
        if page.is_dict {
            if !locations.is_empty() {
                return Err(fail("a dictionary page after a data page".into()));
            }
            continue;
        }
        // 3. Its rows: counted by a v2 header, or its values (no repetition: one a row).
        let page_rows = page.num_rows.or(page.num_levels).ok_or_else(|| fail("a data page without a value count".into()))?;
        locations.push(PageLocation { offset: offset as i64, compressed_page_size: 0, first_row_index: next_row });
        next_row += page_rows as i64;
    }
    // 4. Sizes from one header to the next, the last to the chunk's end; all checked.
    for i in 0..locations.len() {
        let from = locations[i].offset as u64;
        let to = locations.get(i + 1).map_or(end, |l| l.offset as u64);
        if from < start || to <= from || to > end {
            return Err(fail(format!("page at {from} outside the chunk [{start}, {end}) or out of order")));
        }
        locations[i].compressed_page_size = i32::try_from(to - from).map_err(|_| fail(format!("a page of {} bytes", to - from)))?;
    }
    if next_row != rows {
        return Err(fail(format!("pages hold {next_row} rows, the row group {rows}")));
    }
    Ok(OffsetIndexMetaData { page_locations: locations, unencoded_byte_array_data_bytes: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int64Type;
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
    use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
    use std::fs::File;
    use std::sync::Arc;

    fn batch(rows: usize) -> RecordBatch {
        let k: ArrayRef = Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| i * 3)));
        let s: ArrayRef = Arc::new(StringArray::from_iter((0..rows).map(|i| (i % 7 != 0).then(|| format!("value {}", i % 100)))));
        RecordBatch::try_from_iter([("k", k), ("s", s)]).unwrap()
    }

    /// Writes `batches` with small pages and the given page indexes.
    fn write(path: &std::path::Path, batches: &[RecordBatch], version: WriterVersion, with_index: bool) {
        let mut props = WriterProperties::builder()
            .set_writer_version(version)
            .set_data_page_row_count_limit(1000)
            .set_write_batch_size(500)
            .set_max_row_group_row_count(Some(20_000));
        if !with_index {
            props = props.set_statistics_enabled(EnabledStatistics::Chunk).set_offset_index_disabled(true);
        }
        let mut w = ArrowWriter::try_new(File::create(path).unwrap(), batches[0].schema(), Some(props.build())).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }

    fn footer(path: &std::path::Path) -> parquet::file::metadata::ParquetMetaData {
        ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Optional).parse_and_finish(&File::open(path).unwrap()).unwrap()
    }

    /// What the parquet crate's writer records is what is built from the page headers: the
    /// same files written with and without page indexes hold the same pages.
    #[test]
    fn built_offset_indexes_equal_the_writers() {
        let dir = tempfile::tempdir().unwrap();
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            let (with, without) = (dir.path().join("with.parquet"), dir.path().join("without.parquet"));
            let batches = [batch(45_000), batch(1), batch(0)];
            write(&with, &batches, version, true);
            write(&without, &batches, version, false);
            let (a, b) = (footer(&with), footer(&without));
            assert!(b.offset_index().is_none(), "written without an offset index");
            let expected = a.offset_index().expect("written with an offset index");
            assert_eq!(a.num_row_groups(), 3, "two full row groups and one of 5,001 rows");
            for g in 0..a.num_row_groups() {
                let built = build(&Source::Local(File::open(&without).unwrap()), b.row_group(g)).unwrap();
                for (c, (built, expected)) in built.iter().zip(&expected[g]).enumerate() {
                    // Page offsets differ between the files by the column index's absence
                    // (none is in the chunks), so compare them relative to the chunk.
                    let rebase = |l: &[PageLocation], start: i64| -> Vec<(i64, i32, i64)> {
                        l.iter().map(|p| (p.offset - start, p.compressed_page_size, p.first_row_index)).collect()
                    };
                    let (sa, sb) = (a.row_group(g).column(c).byte_range().0 as i64, b.row_group(g).column(c).byte_range().0 as i64);
                    assert_eq!(
                        rebase(&built.page_locations, sb),
                        rebase(&expected.page_locations, sa),
                        "{version:?} row group {g} column {c}"
                    );
                    assert!(built.page_locations.len() > 1 || a.row_group(g).num_rows() <= 1000, "several pages a chunk");
                }
            }
        }
    }

    #[test]
    fn repeated_columns_are_not_buildable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("list.parquet");
        let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>((0..100).map(|i| Some(vec![Some(i), None]))));
        let k: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        let b = RecordBatch::try_from_iter([("k", k), ("l", list)]).unwrap();
        write(&path, &[b], WriterVersion::PARQUET_1_0, false);
        let f = footer(&path);
        assert!(!buildable(f.file_metadata().schema_descr()));
        let err = build(&Source::Local(File::open(&path).unwrap()), f.row_group(0)).unwrap_err().to_string();
        assert!(err.contains("repeated"), "{err}");
    }

    /// A chunk's metadata that does not fit its pages is an error, not an index.
    #[test]
    fn pages_that_disagree_with_the_metadata_are_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        write(&path, &[batch(5000)], WriterVersion::PARQUET_1_0, false);
        let f = footer(&path);
        let rg = f.row_group(0);
        let file = Source::Local(File::open(&path).unwrap());
        assert_eq!(build_column(&file, rg.column(0), 5000).unwrap().page_locations.len(), 5);
        let err = build_column(&file, rg.column(0), 4999).unwrap_err().to_string();
        assert!(err.contains("pages hold 5000 rows, the row group 4999"), "{err}");
    }
}

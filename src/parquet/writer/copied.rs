//! Row groups copied unchanged from an input ([`crate::parquet::merge::passthrough`]): queued
//! behind the row groups still encoding, their bytes read in the background, appended
//! byte for byte.

use super::pipeline::{row_groups_in_flight, InFlight};
use super::{SortedParquetWriter, MAX_ROW_GROUPS};
use crate::error::{Error, Result};
use crate::parquet::store::{self, Source};
use bytes::{Buf, Bytes};
use parquet::bloom_filter::Sbbf;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// A row group of an input, ready to be copied: its columns' metadata, page indexes and
/// bloom filters, read when it was queued, and their bytes, read in the background.
pub(super) struct CopiedRowGroup {
    source: PathBuf,
    row_group: usize,
    pub(super) rows: usize,
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

/// Reads the byte ranges `(offset, length)` of `file`, each in one read (an object's row
/// group is fetched whole at the first, its spans at once).
fn read_chunks(file: &Source, ranges: &[(u64, u64)]) -> parquet::errors::Result<Vec<ChunkAt>> {
    ranges.iter().map(|&(offset, length)| Ok(ChunkAt { offset, bytes: file.get_bytes(offset, length as usize)? })).collect()
}

impl SortedParquetWriter {
    /// Cuts the rows buffered so far as a row group (short if need be), then queues row
    /// group `g` of the file at `source` (`footer` its metadata, with page indexes where it
    /// has them) to be copied as it is, right after the row groups before it are written
    /// (those still encoding are not waited for): its column chunks copied byte for byte,
    /// not decoded. Its columns must be the
    /// output's ([`parquet_schema`](Self::parquet_schema)). `codec_kept`: its codec is not
    /// the output's (counted for the summary).
    pub(crate) fn append_row_group(&mut self, source: &Path, footer: &Arc<ParquetMetaData>, g: usize, codec_kept: bool) -> Result<()> {
        crate::cancel::check(self.cancel.as_ref())?;
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
            true => Some(store::open_streamed(source).map_err(|e| Error::io(source, context.clone(), e))?),
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
        let ranges: Vec<(u64, u64)> = columns.iter().map(|c| c.metadata.byte_range()).collect();
        let bytes = ranges.iter().map(|&(_, length)| length as usize).sum::<usize>();
        let copy_limit = 2 * self.settings.row_group_bytes;
        let chunks = match bytes <= copy_limit {
            true => {
                let (done, chunks) = std::sync::mpsc::sync_channel(1);
                let (path, footer) = (source.to_path_buf(), footer.clone());
                rayon::spawn(move || {
                    let read = store::open_row_group(&path, &footer, g, false).map_err(parquet::errors::ParquetError::from);
                    let _ = done.send(read.and_then(|file| read_chunks(&file, &ranges)));
                });
                Some(chunks)
            }
            false => None,
        };
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

    /// Copies a queued input row group's column chunks into the file, byte for byte.
    pub(super) fn append_copy(&mut self, copy: CopiedRowGroup) -> Result<()> {
        let target = self.target.clone();
        let context = format!("copying row group {} of {}", copy.row_group, copy.source.display());
        let err = |e: parquet::errors::ParquetError| Error::parquet(&target, context.clone(), e);
        self.copy_bytes -= copy.bytes;
        let mut row_group;
        match copy.chunks {
            Some(chunks) => {
                let chunks = crate::cancel::recv(&chunks, self.cancel.as_ref())?;
                let chunks = chunks.ok_or_else(|| Error::Internal(format!("{context}: the reader stopped")))?.map_err(err)?;
                row_group = self.writer.next_row_group().map_err(err)?;
                for (close, chunk) in copy.columns.into_iter().zip(chunks) {
                    row_group.append_column(&chunk, close).map_err(err)?;
                }
            }
            None => {
                // Too large to hold: streamed, a column chunk at a time (an object's row group
                // kept since its check is let go: it would be held to the end).
                store::release_kept(&copy.source, copy.row_group);
                let file = store::open_streamed(&copy.source).map_err(|e| Error::io(&copy.source, context.clone(), e))?;
                row_group = self.writer.next_row_group().map_err(err)?;
                for close in copy.columns {
                    // A column chunk at a time, as large as it may be.
                    crate::cancel::check(self.cancel.as_ref())?;
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
}

//! The Parquet work of issue 69 moved onto the device, stage 1: column chunks' pages
//! decompressed by nvCOMP on the GPU.
//!
//! The data flow, for one or more column chunks of a file:
//!
//! 1. the chunk's bytes are read from its `ColumnChunkMetaData` byte range ([`chunk_bytes`]);
//! 2. its page table is read on the CPU ([`page_table`], the headers by [`thrift`]): each
//!    page's kind, header and body offsets, sizes, value count, encodings, a v2 page's level
//!    bytes and `is_compressed` flag;
//! 3. the chunks are laid out and decompressed on the device ([`decompress`]): one upload,
//!    one batched nvCOMP call per codec (zstd, snappy, LZ4_RAW; the engine's
//!    `engine/gpu/nvcomp.rs`), every page's body in one device buffer, each page's status
//!    checked; before that, each compressed stream's own stated size is checked against
//!    its page header on the host ([`stream_header`]: nvCOMP does not survive a damaged one).
//!
//! Stage 2, first slice: the pages of covered flat columns decoded into Arrow buffers
//! ([`decode_plan`]: what is covered; [`hybrid`], [`decode_cpu`]: the CPU reference of the
//! kernel `cuda/parquet_decode.cu`; [`decode`]: both paths, the device layout;
//! [`decode_fault`]: what a damaged page is).
//!
//! Second slice: BYTE_ARRAY columns (Utf8, Binary, LargeUtf8, LargeBinary) decoded into
//! offsets and values, FIXED_LEN_BYTE_ARRAY (FixedSizeBinary, Decimal128), and
//! DELTA_BINARY_PACKED integers ([`delta`]), in the same modules.
//!
//! Stage 3: sorted files merged with their columns decoded, keyed, merged and gathered on
//! the device ([`round`]; the device's part is `engine/resident_job.rs`).
//!
//! Stage 4: a page encoder for flat fixed-width columns, its kernels in
//! `cuda/parquet_encode.cu` (launch: `engine/gpu/parquet_encode.rs`, job:
//! `engine/encode_job.rs`) and their CPU reference ([`encode_plan`]: the pages;
//! [`encode_cpu`]: a page's levels, values, statistics; [`thrift_write`]: its header;
//! [`encode_file`]: chunks appended through parquet-rs's file writer).
//!
//! Not yet (issue 69's later stages): views, the byte array DELTA encodings, `corank merge` and
//! `corank sort` reading through this path, encoding byte arrays, dictionary pages and
//! compression on the device. Nothing outside the tests and the benchmark calls it yet, so
//! the CPU path is unchanged.

#[doc(hidden)]
pub mod bench;
pub(crate) mod decode;
pub(crate) mod decode_cpu;
pub(crate) mod decode_fault;
pub(crate) mod decode_plan;
pub(crate) mod decompress;
pub(crate) mod delta;
pub(crate) mod encode_cpu;
pub(crate) mod encode_file;
pub(crate) mod encode_plan;
pub(crate) mod hybrid;
pub(crate) mod page_table;
pub(crate) mod round;
pub(crate) mod stream_header;
pub(crate) mod thrift;
pub(crate) mod thrift_write;

#[cfg(test)]
mod decode_tests;
#[cfg(test)]
mod encode_tests;
#[cfg(test)]
mod round_tests;
#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use page_table::{read_page_table, PageTable};
use parquet::file::metadata::ColumnChunkMetaData;
use std::path::Path;

/// The byte range of a column chunk in its file: (start, length).
pub(crate) fn chunk_range(meta: &ColumnChunkMetaData) -> (u64, u64) {
    meta.byte_range()
}

/// Reads a column chunk's bytes from `file`.
pub(crate) fn chunk_bytes(file: &std::fs::File, path: &Path, meta: &ColumnChunkMetaData) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let (start, len) = chunk_range(meta);
    let len = usize::try_from(len).map_err(|_| Error::File { path: path.into(), detail: format!("a column chunk of {len} bytes") })?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, start).map_err(|e| Error::Io {
        path: Some(path.into()),
        context: format!("reading column chunk {} ({len} bytes at {start})", meta.column_path().string()),
        source: e,
    })?;
    Ok(bytes)
}

/// The page table of a column chunk's `bytes` (as [`chunk_bytes`] reads them), checked
/// against its footer entry; an error names the file, row group and column.
pub(crate) fn page_table_of(path: &Path, row_group: usize, meta: &ColumnChunkMetaData, bytes: &[u8]) -> Result<PageTable> {
    let values = u64::try_from(meta.num_values()).ok();
    read_page_table(bytes, meta.compression(), values).map_err(|e| Error::File {
        path: path.into(),
        detail: format!("row group {row_group}, column {}: {e}", meta.column_path().string()),
    })
}

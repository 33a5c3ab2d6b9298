//! What the footers say about memory: a row group's decoded bytes and its decoders'
//! bytes, the estimates the memory budget ([`crate::parquet::memory`]) is made of.

use super::InputFile;
use parquet::basic::Type as PhysicalType;

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
/// cut pages at 1 MiB or 20,000 rows) and [`DECODER_BYTES_PER_COLUMN`], an estimate checked
/// against measured runs (docs/performance.md); it is what a run costs before any of its rows
/// is buffered, so many runs of wide files need a larger memory limit.
///
/// An input in an object store adds [`REMOTE_ROW_GROUPS_HELD`] times the row group's
/// compressed bytes: its reader holds the row group it reads in memory, fetched whole, and
/// keeps the one before (a local file's pages stay in the page cache, not counted).
pub fn decoder_bytes(input: &InputFile, g: usize) -> u64 {
    let rg = input.metadata.metadata().row_group(g);
    let decoders: u64 =
        rg.columns().iter().map(|c| (c.uncompressed_size().max(0) as u64).min(1 << 20) / 2 + DECODER_BYTES_PER_COLUMN).sum();
    let fetched = match crate::parquet::store::is_url(&input.path) {
        true => REMOTE_ROW_GROUPS_HELD * rg.columns().iter().map(|c| c.byte_range().1).sum::<u64>(),
        false => 0,
    };
    decoders + fetched
}

/// Row groups an object's reader holds fetched while it decodes: the one it reads and the
/// one before (the reader's cache keeps two, `store::object`).
pub const REMOTE_ROW_GROUPS_HELD: u64 = 2;

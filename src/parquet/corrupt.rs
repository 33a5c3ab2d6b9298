//! Corrupt inputs: what the Parquet decoders do with bad bytes, made into errors that name
//! the place (file, row group, column, page), never a panic.
//!
//! The parquet crate returns an error for most corrupt input, but its decoders panic on
//! some: a bit width out of range in an RLE/bit-packed run, a page that a codec
//! decompressed into garbage, an Arrow schema in the footer's `ARROW:schema` entry that
//! decodes into something arrow-ipc cannot build ("Int type with bit width of 7 not
//! supported"). corank reads files from anywhere, so:
//!
//! - every decode of a file's rows runs under [`catch`], which turns a panic into an
//!   error: the process is not taken down (exit 101, or an abort when the panic leaves a
//!   thread pool) and nothing half-written is left (the output and spill files are removed
//!   as on any error). The panic's message is not printed by the panic hook on the thread
//!   that catches it: it becomes the error's cause, on one line, as every error;
//! - a row group that fails to decode is probed ([`decode_error`]): each column chunk's
//!   pages are read (decompressed, their checksums verified where the writer stored them),
//!   then each column decoded alone, so the error names the first column that fails and,
//!   where the pages themselves fail (a checksum, a codec), the page;
//! - a footer is read by [`load_metadata`], which falls back to the Parquet schema (with a
//!   warning) when the embedded Arrow schema cannot be decoded, and refuses a footer whose
//!   row counts disagree (the file's with its row groups', a row group's with its
//!   columns'), as other readers would read rows the footer does not count, or miss some,
//!   and one whose column chunks lie outside the file;
//! - a page's checksum (`crc` in its header, where the writer stored one) is verified by
//!   the decoder for every page it decodes (the parquet crate's `crc` feature), and by
//!   [`verify_page_checksums`] for the pages of row groups copied unchanged, which are not
//!   decoded (see [`super::passthrough`]).

use crate::error::{Error, Result};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::column::page::PageReader;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::serialized_reader::SerializedPageReader;
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Once};

thread_local! {
    /// Whether this thread is inside [`catch`] (its panics are caught and reported there).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

static QUIET_HOOK: Once = Once::new();

/// Installs, once, a panic hook that stays silent on threads inside [`catch`] and calls the
/// hook it replaced everywhere else.
fn install_quiet_hook() {
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, a panic in it returned as `Err` with the panic's message. For decoding
/// untrusted bytes: whatever `f` used is dropped after a panic, never used again (hence
/// the assertion of unwind safety).
pub fn catch<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    install_quiet_hook();
    let outer = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        format!("{} (the decoder panicked)", message.replace('\n', " "))
    })
}

/// `f`'s result, a panic in it becoming an error as [`catch`] says.
pub fn catch_result<T, E: std::fmt::Display>(f: impl FnOnce() -> std::result::Result<T, E>) -> std::result::Result<T, String> {
    match catch(f) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(panic),
    }
}

/// Reads the footer of `file` (at `path`) for Arrow. The embedded Arrow schema
/// (`ARROW:schema`) gives the columns' Arrow types where it decodes; where it does not (an
/// error, or a panic of arrow-ipc on a malformed one), the file is read by its Parquet
/// schema, with a warning. A footer whose row counts disagree is refused (see the module
/// doc).
pub fn load_metadata<R: ChunkReader + 'static>(path: &Path, file: &R) -> Result<ArrowReaderMetadata> {
    const UNREADABLE: &str = "not a readable Parquet file";
    // The footer, its Parquet schema converted without the embedded Arrow schema.
    let plain = match catch(|| ArrowReaderMetadata::load(file, ArrowReaderOptions::new().with_skip_arrow_metadata(true))) {
        Ok(Ok(plain)) => plain,
        Ok(Err(e)) => return Err(Error::parquet(path, UNREADABLE, e)),
        Err(panic) => return Err(Error::File { path: path.to_path_buf(), detail: format!("{UNREADABLE}: {panic}") }),
    };
    check_footer(path, plain.metadata(), file.len())?;
    Ok(with_arrow_schema(path, plain))
}

/// The footer `parquet` of the file at `path` (`file_len` bytes, read elsewhere: by range
/// requests from an object store) for Arrow, checked and with its Arrow schema as
/// [`load_metadata`] makes them.
#[cfg(feature = "datafusion")]
pub fn arrow_metadata(path: &Path, parquet: Arc<ParquetMetaData>, file_len: u64) -> Result<ArrowReaderMetadata> {
    check_footer(path, &parquet, file_len)?;
    let plain = catch_result(|| ArrowReaderMetadata::try_new(parquet, ArrowReaderOptions::new().with_skip_arrow_metadata(true)))
        .map_err(|e| Error::File { path: path.to_path_buf(), detail: format!("not a readable Parquet file: {e}") })?;
    Ok(with_arrow_schema(path, plain))
}

/// `plain` (a footer read without its embedded Arrow schema) with the Arrow schema where it
/// decodes; else as it is, with a warning.
fn with_arrow_schema(path: &Path, plain: ArrowReaderMetadata) -> ArrowReaderMetadata {
    let has_arrow_schema = (plain.metadata().file_metadata().key_value_metadata().into_iter().flatten())
        .any(|kv| kv.key == parquet::arrow::ARROW_SCHEMA_META_KEY);
    if !has_arrow_schema {
        return plain;
    }
    let parquet = Arc::clone(plain.metadata());
    match catch_result(|| ArrowReaderMetadata::try_new(parquet, ArrowReaderOptions::new())) {
        Ok(metadata) => metadata,
        Err(e) => {
            log::warn!(
                "{}: its embedded Arrow schema ({}) cannot be decoded, so its columns are read by their Parquet types: {e}",
                path.display(),
                parquet::arrow::ARROW_SCHEMA_META_KEY
            );
            plain
        }
    }
}

/// Refuses a footer whose row counts disagree: the file's total with the sum of its row
/// groups', or a row group's with the values of one of its unrepeated columns (a column
/// without repetition holds one value, null or not, a row); and one whose column chunks
/// lie outside the file (`file_len` bytes) or at a negative offset (the parquet crate
/// asserts, in `byte_range`, that they do not).
pub fn check_footer(path: &Path, metadata: &ParquetMetaData, file_len: u64) -> Result<()> {
    let corrupt = |detail: String| Error::File { path: path.to_path_buf(), detail: format!("corrupt footer: {detail}") };
    let groups = metadata.row_groups();
    let sum = groups.iter().try_fold(0i64, |sum, g| if g.num_rows() < 0 { None } else { sum.checked_add(g.num_rows()) });
    let total = metadata.file_metadata().num_rows();
    if sum != Some(total) {
        let counted = groups.iter().map(|g| g.num_rows() as i128).sum::<i128>();
        return Err(corrupt(format!("it counts {total} rows, its row groups {counted}")));
    }
    for (g, group) in groups.iter().enumerate() {
        for column in group.columns() {
            let start = column.dictionary_page_offset().unwrap_or(column.data_page_offset());
            let size = column.compressed_size();
            let end = start.checked_add(size).filter(|_| start >= 0 && size >= 0 && column.data_page_offset() >= 0);
            if end.is_none_or(|end| end as u64 > file_len) {
                return Err(corrupt(format!(
                    "row group {g}, column '{}': its {size} bytes at {start} lie outside the file of {file_len} bytes",
                    column.column_path().string()
                )));
            }
            if column.column_descr().max_rep_level() == 0 && column.num_values() != group.num_rows() {
                return Err(corrupt(format!(
                    "row group {g} counts {} rows but its column '{}' {} values",
                    group.num_rows(),
                    column.column_path().string(),
                    column.num_values()
                )));
            }
        }
    }
    Ok(())
}

/// Where a row group fails to decode: the first column that fails, and the page where the
/// pages themselves fail.
struct Place {
    column: String,
    /// Counted from 0 over the column chunk's pages, its dictionary page first.
    page: Option<usize>,
    dictionary: bool,
    message: String,
}

/// Reads row group `row_group` of the file at `path` column by column to find what fails
/// (see the module doc); `None` where every column reads alone.
fn locate(path: &Path, metadata: &ArrowReaderMetadata, row_group: usize) -> Option<Place> {
    let file = Arc::new(crate::parquet::store::open(path, metadata.metadata(), None).ok()?);
    let group = metadata.metadata().row_groups().get(row_group)?;
    let rows = group.num_rows().max(0) as usize;
    for (leaf, chunk) in group.columns().iter().enumerate() {
        let column = chunk.column_path().string();
        // 1. Its pages: headers read, pages decompressed and their checksums verified.
        let mut read = 0usize;
        let pages = catch_result(|| -> parquet::errors::Result<()> {
            let mut pages = SerializedPageReader::new(Arc::clone(&file), chunk, rows, None)?;
            while pages.get_next_page()?.is_some() {
                read += 1;
            }
            Ok(())
        });
        if let Err(message) = pages {
            let dictionary = read == 0 && chunk.dictionary_page_offset().is_some();
            return Some(Place { column, page: Some(read), dictionary, message });
        }
        // 2. Its values, decoded alone.
        let decoded = catch_result(|| -> parquet::errors::Result<()> {
            let mask = ProjectionMask::leaves(metadata.parquet_schema(), [leaf]);
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file.try_clone()?, metadata.clone())
                .with_row_groups(vec![row_group])
                .with_projection(mask)
                .with_batch_size(crate::DEFAULT_BATCH_SIZE)
                .build()?;
            for batch in reader {
                batch?;
            }
            Ok(())
        });
        if let Err(message) = decoded {
            return Some(Place { column, page: None, dictionary: false, message });
        }
    }
    None
}

/// The error for row groups `row_groups` of the file at `path` failing to decode with
/// `cause` (an error or a caught panic): the row group, column and page that fail where
/// probing finds them (`locate`), else the row groups and `cause`.
pub fn decode_error(path: &Path, metadata: &ArrowReaderMetadata, row_groups: &[usize], cause: &str) -> Error {
    let file = path.to_path_buf();
    // A request to an object store that failed (retried where transient): no decoding.
    if cause.contains(crate::parquet::store::READ_FAILED) {
        return Error::File { path: file, detail: format!("row groups {row_groups:?}: {cause}") };
    }
    for &g in row_groups {
        if let Some(p) = locate(path, metadata, g) {
            let page = match p.page {
                Some(_) if p.dictionary => ", its dictionary page".to_string(),
                Some(n) => format!(", page {n}"),
                None => String::new(),
            };
            let detail = format!("row group {g}, column '{}'{page}: cannot be decoded: {}", p.column, p.message);
            return Error::File { path: file, detail };
        }
    }
    let groups = match row_groups {
        [g] => format!("row group {g}"),
        _ => format!("row groups {row_groups:?}"),
    };
    Error::File { path: file, detail: format!("{groups}: cannot be decoded: {cause}") }
}

/// CRC-32 (IEEE 802.3, the checksum of Parquet's pages), slicing by 8: eight tables.
const CRC_TABLES: [[u32; 256]; 8] = crc_tables();

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut s = 1;
        while s < 8 {
            t[s][i] = (t[s - 1][i] >> 8) ^ t[0][(t[s - 1][i] & 0xff) as usize];
            s += 1;
        }
        i += 1;
    }
    t
}

/// The CRC-32 of `data`, as a Parquet page header's `crc` holds it.
pub fn crc32(data: &[u8]) -> u32 {
    let t = &CRC_TABLES;
    let mut crc = !0u32;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ crc;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        crc = t[7][(lo & 0xff) as usize]
            ^ t[6][(lo >> 8 & 0xff) as usize]
            ^ t[5][(lo >> 16 & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][(hi >> 8 & 0xff) as usize]
            ^ t[1][(hi >> 16 & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        crc = t[0][((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// What a page header says that the checksum needs: its type, the size of its bytes as
/// stored (compressed) and its checksum, and the header's own length.
struct PageHeaderFields {
    dictionary: bool,
    stored_size: u64,
    crc: Option<u32>,
    header_len: usize,
}

/// Why a page header could not be read from a buffer.
enum HeaderError {
    /// The buffer ended first: read more.
    Truncated,
    Malformed(&'static str),
}

/// A reader of Thrift's compact protocol, just enough to walk a page header.
struct Compact<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> std::result::Result<u8, HeaderError> {
        let b = *self.bytes.get(self.pos).ok_or(HeaderError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// An unsigned varint; bits past 64 are dropped (as the parquet crate reads them:
    /// writers may pad a varint with empty groups).
    fn varint(&mut self) -> std::result::Result<u64, HeaderError> {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64).checked_shl(shift).unwrap_or(0);
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift = shift.saturating_add(7);
        }
    }

    fn zigzag(&mut self) -> std::result::Result<i64, HeaderError> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn skip_bytes(&mut self, n: u64) -> std::result::Result<(), HeaderError> {
        let end = (self.pos as u64).checked_add(n).ok_or(HeaderError::Malformed("a length past any file"))?;
        if end > self.bytes.len() as u64 {
            return Err(HeaderError::Truncated);
        }
        self.pos = end as usize;
        Ok(())
    }

    /// Skips a value of compact type `kind` (`element`: inside a list, set or map, where a
    /// bool takes a byte), at most `depth` structs deep.
    fn skip(&mut self, kind: u8, element: bool, depth: usize) -> std::result::Result<(), HeaderError> {
        if depth == 0 {
            return Err(HeaderError::Malformed("structs nested too deep"));
        }
        match kind {
            1 | 2 if !element => Ok(()),
            1..=3 => self.byte().map(drop),
            4..=6 => self.varint().map(drop),
            7 => self.skip_bytes(8),
            8 => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = if h >> 4 == 15 { self.varint()? } else { (h >> 4) as u64 };
                (0..n).try_for_each(|_| self.skip(h & 0xf, true, depth - 1))
            }
            11 => {
                let n = self.varint()?;
                let h = if n > 0 { self.byte()? } else { 0 };
                (0..n).try_for_each(|_| self.skip(h >> 4, true, depth - 1).and_then(|()| self.skip(h & 0xf, true, depth - 1)))
            }
            12 => self.fields(depth - 1, |_, _, _| Ok(false)),
            _ => Err(HeaderError::Malformed("an unknown Thrift type")),
        }
    }

    /// Reads a struct's fields: `read(id, kind, self)` is given each one and reads its
    /// value (`true`) or leaves it to be skipped (`false`).
    fn fields(
        &mut self,
        depth: usize,
        mut read: impl FnMut(i16, u8, &mut Self) -> std::result::Result<bool, HeaderError>,
    ) -> std::result::Result<(), HeaderError> {
        let mut last = 0i16;
        loop {
            let h = self.byte()?;
            let kind = h & 0xf;
            if kind == 0 {
                return Ok(());
            }
            let id = match h >> 4 {
                0 => self.zigzag()? as i16,
                delta => last.wrapping_add(delta as i16),
            };
            if !read(id, kind, self)? {
                self.skip(kind, false, depth)?;
            }
            last = id;
        }
    }
}

/// Parses the page header at the start of `bytes`.
fn page_header(bytes: &[u8]) -> std::result::Result<PageHeaderFields, HeaderError> {
    let mut c = Compact { bytes, pos: 0 };
    let (mut page_type, mut size, mut crc) = (None, None, None);
    c.fields(64, |id, kind, c| {
        match (id, kind) {
            (1, 5) => page_type = Some(c.zigzag()?),
            (3, 5) => size = Some(c.zigzag()?),
            (4, 5) => crc = Some(c.zigzag()? as u32),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let (Some(page_type), Some(size)) = (page_type, size) else {
        return Err(HeaderError::Malformed("a page header without its type or size"));
    };
    let stored_size = u64::try_from(size).map_err(|_| HeaderError::Malformed("a negative page size"))?;
    Ok(PageHeaderFields { dictionary: page_type == 2, stored_size, crc, header_len: c.pos })
}

/// Verifies the checksums of the pages of column chunk `chunk` of `file` whose headers
/// carry one, without decompressing a page (the bytes of pages without one are not read).
/// For row groups copied unchanged: the decoder verifies the pages it decodes. The error
/// names the page (counted from 0, the dictionary page first).
pub fn verify_page_checksums(
    file: &impl parquet::file::reader::ChunkReader,
    chunk: &parquet::file::metadata::ColumnChunkMetaData,
) -> std::result::Result<(), String> {
    let (start, length) = chunk.byte_range();
    let end = start.checked_add(length).ok_or("a column chunk past any file")?;
    let (mut at, mut page) = (start, 0usize);
    while at < end {
        let name = |dictionary: bool| if dictionary { "its dictionary page".to_string() } else { format!("page {page}") };
        // A header is tens of bytes; statistics in it can make it longer.
        let mut want = 1024u64;
        let header = loop {
            let len = want.min(end - at);
            let bytes = file.get_bytes(at, len as usize).map_err(|e| format!("{}: {e}", name(false)))?;
            match page_header(&bytes) {
                Ok(h) => break h,
                Err(HeaderError::Truncated) if len < end - at => want *= 4,
                Err(HeaderError::Truncated) => return Err(format!("{}: its header runs past the end of its column chunk", name(false))),
                Err(HeaderError::Malformed(why)) => return Err(format!("{}: its header cannot be read ({why})", name(false))),
            }
        };
        let data = at + header.header_len as u64;
        let data_end = data.checked_add(header.stored_size).filter(|&e| e <= end);
        let Some(data_end) = data_end else {
            return Err(format!("{}: it runs past the end of its column chunk", name(header.dictionary)));
        };
        if let Some(expected) = header.crc {
            let bytes = file.get_bytes(data, header.stored_size as usize).map_err(|e| format!("{}: {e}", name(header.dictionary)))?;
            if crc32(&bytes) != expected {
                return Err(format!("{}: Page CRC checksum mismatch", name(header.dictionary)));
            }
        }
        at = data_end;
        page += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_is_ieee() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(super::crc32(b""), 0);
        let long: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let bitwise = |data: &[u8]| {
            let mut crc = !0u32;
            for &b in data {
                crc ^= b as u32;
                for _ in 0..8 {
                    crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
                }
            }
            !crc
        };
        for n in [1, 7, 8, 9, 100, 1000] {
            assert_eq!(super::crc32(&long[..n]), bitwise(&long[..n]), "{n} bytes");
        }
    }
}

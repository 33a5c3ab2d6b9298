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
//!   the decoder for every page it decodes (the parquet crate's `crc` feature).

use crate::error::{Error, Result};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::column::page::PageReader;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::serialized_reader::SerializedPageReader;
use std::cell::Cell;
use std::fs::File;
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
pub fn load_metadata(path: &Path, file: &File) -> Result<ArrowReaderMetadata> {
    const UNREADABLE: &str = "not a readable Parquet file";
    // The footer, its Parquet schema converted without the embedded Arrow schema.
    let plain = match catch(|| ArrowReaderMetadata::load(file, ArrowReaderOptions::new().with_skip_arrow_metadata(true))) {
        Ok(Ok(plain)) => plain,
        Ok(Err(e)) => return Err(Error::parquet(path, UNREADABLE, e)),
        Err(panic) => return Err(Error::File { path: path.to_path_buf(), detail: format!("{UNREADABLE}: {panic}") }),
    };
    let file_len = file.metadata().map_err(|e| Error::io(path, "", e))?.len();
    check_footer(path, plain.metadata(), file_len)?;
    let has_arrow_schema = (plain.metadata().file_metadata().key_value_metadata().into_iter().flatten())
        .any(|kv| kv.key == parquet::arrow::ARROW_SCHEMA_META_KEY);
    if !has_arrow_schema {
        return Ok(plain);
    }
    let parquet = Arc::clone(plain.metadata());
    match catch_result(|| ArrowReaderMetadata::try_new(parquet, ArrowReaderOptions::new())) {
        Ok(metadata) => Ok(metadata),
        Err(e) => {
            log::warn!(
                "{}: its embedded Arrow schema ({}) cannot be decoded, so its columns are read by their Parquet types: {e}",
                path.display(),
                parquet::arrow::ARROW_SCHEMA_META_KEY
            );
            Ok(plain)
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
    let file = Arc::new(File::open(path).ok()?);
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
                .with_batch_size(8192)
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
/// probing finds them ([`locate`]), else the row groups and `cause`.
pub fn decode_error(path: &Path, metadata: &ArrowReaderMetadata, row_groups: &[usize], cause: &str) -> Error {
    let file = path.to_path_buf();
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

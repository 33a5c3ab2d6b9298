//! The page table of a column chunk: where each page's header and body lie in the chunk's
//! bytes, and what decompressing the body gives. Pure (no I/O, no device): the device
//! decompression ([`super::decompress`]) lays its buffers out from it, and the page decoders
//! of issue 69's stage 2 will read it.
//!
//! A column chunk's bytes (from its `ColumnChunkMetaData` byte range: the dictionary page's
//! offset, else the first data page's, for `total_compressed_size` bytes) are a sequence of
//! pages, each a Thrift page header ([`super::thrift`]) and a body of
//! `compressed_page_size` bytes:
//!
//! - a dictionary page and a data page v1: the whole body is compressed by the chunk's codec
//!   (repetition and definition levels, then values, for v1);
//! - a data page v2: the repetition then definition levels come first, never compressed
//!   (`levels_len` bytes, counted in both sizes of the header), then the values, compressed
//!   by the codec unless the header says `is_compressed = false`;
//! - an index page (not written by today's writers): kept in the table, never decompressed.
//!
//! The table is checked as it is read: every header parses, every body lies inside the
//! chunk, sizes are not negative, a v2 page's levels fit in both its sizes, an uncompressed
//! body (no codec, or `is_compressed = false`) has equal sizes, at most one dictionary page
//! comes first, and the data pages' values add up to the chunk's value count when it is
//! given. A failure is a [`PageError`] naming the page and its offset, never a panic.

use super::thrift::{read_page_header, RawPageHeader};
use parquet::basic::{Compression, Encoding};
use std::fmt;

/// The kind of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageKind {
    Dictionary,
    DataV1,
    DataV2,
    Index,
}

/// One page of a column chunk. Offsets count from the chunk's first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page {
    pub kind: PageKind,
    pub header_offset: usize,
    pub header_len: usize,
    /// `header_offset + header_len`.
    pub body_offset: usize,
    /// Body bytes in the file (a v2 page's levels included).
    pub compressed_size: usize,
    /// Body bytes once decompressed (a v2 page's levels included).
    pub uncompressed_size: usize,
    /// Values (nulls included) of a data page, entries of a dictionary page; 0 for an index
    /// page.
    pub num_values: u32,
    /// The values' encoding (`None` for an index page).
    pub encoding: Option<Encoding>,
    /// A v1 page's definition and repetition level encodings.
    pub level_encodings: Option<(Encoding, Encoding)>,
    /// A v2 page's repetition and definition level bytes, before its values, never
    /// compressed; 0 for other pages.
    pub levels_len: usize,
    /// Of `levels_len`, a v2 page's definition level bytes (the repetition levels' come
    /// first); 0 for other pages.
    pub def_levels_len: usize,
    /// Whether the codec applies to the body (to a v2 page's values): `false` for an
    /// uncompressed chunk, a v2 page written with `is_compressed = false`, an index page.
    pub is_compressed: bool,
    /// A v2 page's null and row counts.
    pub v2_counts: Option<(u32, u32)>,
}

impl Page {
    /// The part of the body the codec decompresses: (offset in the chunk, compressed
    /// bytes, uncompressed bytes). `None` where nothing is decompressed.
    pub fn compressed_values(&self) -> Option<(usize, usize, usize)> {
        self.is_compressed
            .then(|| (self.body_offset + self.levels_len, self.compressed_size - self.levels_len, self.uncompressed_size - self.levels_len))
    }
}

/// The pages of one column chunk, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageTable {
    pub codec: Compression,
    pub pages: Vec<Page>,
}

impl PageTable {
    /// Body bytes of every page once decompressed.
    pub fn uncompressed_bytes(&self) -> usize {
        self.pages.iter().map(|p| p.uncompressed_size).sum()
    }
}

/// Why a column chunk's pages could not be read: the page (counted from 0) and its header's
/// offset in the chunk, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageError {
    pub page: usize,
    pub offset: usize,
    pub detail: String,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {} (header at byte {} of the column chunk): {}", self.page, self.offset, self.detail)
    }
}

/// Parquet's `Encoding` from its Thrift value.
fn encoding(v: i32) -> Option<Encoding> {
    #[allow(deprecated)]
    Some(match v {
        0 => Encoding::PLAIN,
        2 => Encoding::PLAIN_DICTIONARY,
        3 => Encoding::RLE,
        4 => Encoding::BIT_PACKED,
        5 => Encoding::DELTA_BINARY_PACKED,
        6 => Encoding::DELTA_LENGTH_BYTE_ARRAY,
        7 => Encoding::DELTA_BYTE_ARRAY,
        8 => Encoding::RLE_DICTIONARY,
        9 => Encoding::BYTE_STREAM_SPLIT,
        _ => return None,
    })
}

/// Reads the page table of a column chunk: `bytes` are the chunk's bytes, `codec` its
/// codec, `num_values` its value count from the footer (checked against the data pages'
/// sum where given).
pub(crate) fn read_page_table(bytes: &[u8], codec: Compression, num_values: Option<u64>) -> Result<PageTable, PageError> {
    let mut pages = Vec::new();
    let mut at = 0usize;
    let mut values = 0u64;
    while at < bytes.len() {
        let index = pages.len();
        let err = |detail: String| PageError { page: index, offset: at, detail };
        let (raw, header_len) = read_page_header(&bytes[at..]).map_err(|e| err(e.0))?;
        let page = page(&raw, at, header_len, codec).map_err(err)?;
        let end = page.body_offset.checked_add(page.compressed_size).filter(|&e| e <= bytes.len());
        let Some(end) = end else {
            return Err(err(format!(
                "its body of {} bytes at byte {} runs past the column chunk's {} bytes",
                page.compressed_size,
                page.body_offset,
                bytes.len()
            )));
        };
        if page.kind == PageKind::Dictionary && !pages.is_empty() {
            return Err(err("a dictionary page after the first page".into()));
        }
        if matches!(page.kind, PageKind::DataV1 | PageKind::DataV2) {
            values += u64::from(page.num_values);
        }
        pages.push(page);
        at = end;
    }
    if let Some(n) = num_values.filter(|&n| n != values) {
        return Err(PageError {
            page: pages.len(),
            offset: at,
            detail: format!("the data pages hold {values} values, the footer counts {n} for the column chunk"),
        });
    }
    Ok(PageTable { codec, pages })
}

fn size(v: Option<i32>, what: &str) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("the header has no {what}"))?;
    usize::try_from(v).map_err(|_| format!("{what} is negative ({v})"))
}

fn count(v: Option<i32>, what: &str) -> Result<u32, String> {
    let v = v.ok_or_else(|| format!("the header has no {what}"))?;
    u32::try_from(v).map_err(|_| format!("{what} is negative ({v})"))
}

fn enc(v: Option<i32>, what: &str) -> Result<Encoding, String> {
    let v = v.ok_or_else(|| format!("the header has no {what}"))?;
    encoding(v).ok_or_else(|| format!("{what} {v} is not a Parquet encoding"))
}

fn page(raw: &RawPageHeader, at: usize, header_len: usize, codec: Compression) -> Result<Page, String> {
    let compressed_size = size(raw.compressed_page_size, "compressed_page_size")?;
    let uncompressed_size = size(raw.uncompressed_page_size, "uncompressed_page_size")?;
    let codec_applies = codec != Compression::UNCOMPRESSED;
    let mut page = Page {
        kind: PageKind::Index,
        header_offset: at,
        header_len,
        body_offset: at + header_len,
        compressed_size,
        uncompressed_size,
        num_values: 0,
        encoding: None,
        level_encodings: None,
        levels_len: 0,
        def_levels_len: 0,
        is_compressed: codec_applies,
        v2_counts: None,
    };
    match raw.page_type {
        Some(0) => {
            let d = raw.data_page.as_ref().ok_or("a data page (v1) without its DataPageHeader")?;
            page.kind = PageKind::DataV1;
            page.num_values = count(d.num_values, "num_values")?;
            page.encoding = Some(enc(d.encoding, "encoding")?);
            page.level_encodings = Some((
                enc(d.definition_level_encoding, "definition_level_encoding")?,
                enc(d.repetition_level_encoding, "repetition_level_encoding")?,
            ));
        }
        Some(1) => {
            page.is_compressed = false;
        }
        Some(2) => {
            let d = raw.dictionary_page.as_ref().ok_or("a dictionary page without its DictionaryPageHeader")?;
            page.kind = PageKind::Dictionary;
            page.num_values = count(d.num_values, "num_values")?;
            page.encoding = Some(enc(d.encoding, "encoding")?);
        }
        Some(3) => {
            let d = raw.data_page_v2.as_ref().ok_or("a data page v2 without its DataPageHeaderV2")?;
            page.kind = PageKind::DataV2;
            page.num_values = count(d.num_values, "num_values")?;
            page.encoding = Some(enc(d.encoding, "encoding")?);
            page.v2_counts = Some((count(d.num_nulls, "num_nulls")?, count(d.num_rows, "num_rows")?));
            let def = size(d.definition_levels_byte_length, "definition_levels_byte_length")?;
            let rep = size(d.repetition_levels_byte_length, "repetition_levels_byte_length")?;
            page.levels_len = def.checked_add(rep).ok_or("its level byte lengths overflow")?;
            page.def_levels_len = def;
            if page.levels_len > compressed_size || page.levels_len > uncompressed_size {
                return Err(format!(
                    "its levels ({} bytes) are longer than its body ({compressed_size} bytes compressed, {uncompressed_size} uncompressed)",
                    page.levels_len
                ));
            }
            page.is_compressed = codec_applies && d.is_compressed.unwrap_or(true);
        }
        Some(t) => return Err(format!("page type {t} is not a Parquet page type")),
        None => return Err("the header has no page type".into()),
    }
    if !page.is_compressed && page.kind != PageKind::Index && compressed_size != uncompressed_size {
        return Err(format!("an uncompressed body of {compressed_size} bytes whose header says {uncompressed_size} uncompressed"));
    }
    Ok(page)
}

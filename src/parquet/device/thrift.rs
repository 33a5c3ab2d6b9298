//! A Parquet page header read from its Thrift compact-protocol bytes.
//!
//! The parquet crate parses page headers but keeps the type crate-private (parquet 59), so
//! the device path reads them itself. Only what the page table needs is kept; every other
//! field is skipped by its wire type.
//!
//! The spec (parquet-format's `parquet.thrift`, Thrift's compact protocol):
//!
//! ```text
//! struct PageHeader {              struct DataPageHeader {          struct DataPageHeaderV2 {
//!   1: i32 type (PageType)           1: i32 num_values                1: i32 num_values
//!   2: i32 uncompressed_page_size    2: i32 encoding                  2: i32 num_nulls
//!   3: i32 compressed_page_size      3: i32 definition_level_enc.     3: i32 num_rows
//!   4: optional i32 crc              4: i32 repetition_level_enc.     4: i32 encoding
//!   5: optional DataPageHeader       5: optional Statistics           5: i32 definition_levels_byte_length
//!   6: optional IndexPageHeader    }                                  6: i32 repetition_levels_byte_length
//!   7: optional DictionaryPageHeader struct DictionaryPageHeader {    7: optional bool is_compressed = true
//!   8: optional DataPageHeaderV2     1: i32 num_values                8: optional Statistics
//! }                                  2: i32 encoding                }
//! PageType: DATA_PAGE 0,             3: optional bool is_sorted
//!   INDEX_PAGE 1, DICTIONARY_PAGE 2, }
//!   DATA_PAGE_V2 3
//! ```
//!
//! Compact protocol: a struct is a sequence of fields ended by a 0 byte. A field starts
//! with a byte whose low nibble is its type and whose high nibble is the id's delta from
//! the previous field's id (1–15), or 0, then the id follows as a zigzag varint. Types:
//! 1 true, 2 false (a bool field carries its value in the type), 3 byte, 4 i16, 5 i32,
//! 6 i64 (zigzag varints, ULEB128), 7 double (8 bytes), 8 binary (varint length, bytes),
//! 9 list and 10 set (a byte: size in the high nibble, 15 = a varint size follows, element
//! type in the low nibble; bools one byte each), 11 map (varint size, then if non-zero a
//! byte of key and value types), 12 struct.
//!
//! Every read is bounds-checked and nesting is limited ([`MAX_DEPTH`]): corrupt bytes are an
//! error ([`ThriftError`]), never a panic or an unbounded recursion.

use std::fmt;

/// Deepest nesting of structs, lists and maps skipped (the page header nests 3 deep;
/// statistics 1 more): deeper is corrupt, and the limit keeps recursion bounded.
pub(crate) const MAX_DEPTH: usize = 16;

/// What is wrong with a page header's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThriftError(pub String);

impl fmt::Display for ThriftError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, ThriftError>;

fn bad<T>(what: impl Into<String>) -> Result<T> {
    Err(ThriftError(what.into()))
}

/// The page header's fields that the page table keeps (raw values as written).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawPageHeader {
    pub page_type: Option<i32>,
    pub uncompressed_page_size: Option<i32>,
    pub compressed_page_size: Option<i32>,
    pub crc: Option<i32>,
    pub data_page: Option<RawDataPage>,
    pub dictionary_page: Option<RawDictionaryPage>,
    pub data_page_v2: Option<RawDataPageV2>,
    pub index_page: bool,
}

/// `DataPageHeader`'s fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawDataPage {
    pub num_values: Option<i32>,
    pub encoding: Option<i32>,
    pub definition_level_encoding: Option<i32>,
    pub repetition_level_encoding: Option<i32>,
}

/// `DictionaryPageHeader`'s fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawDictionaryPage {
    pub num_values: Option<i32>,
    pub encoding: Option<i32>,
}

/// `DataPageHeaderV2`'s fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RawDataPageV2 {
    pub num_values: Option<i32>,
    pub num_nulls: Option<i32>,
    pub num_rows: Option<i32>,
    pub encoding: Option<i32>,
    pub definition_levels_byte_length: Option<i32>,
    pub repetition_levels_byte_length: Option<i32>,
    /// Absent means `true` (the spec's default).
    pub is_compressed: Option<bool>,
}

const T_STOP: u8 = 0;
const T_TRUE: u8 = 1;
const T_FALSE: u8 = 2;
const T_BYTE: u8 = 3;
const T_I16: u8 = 4;
const T_I32: u8 = 5;
const T_I64: u8 = 6;
const T_DOUBLE: u8 = 7;
const T_BINARY: u8 = 8;
const T_LIST: u8 = 9;
const T_SET: u8 = 10;
const T_MAP: u8 = 11;
const T_STRUCT: u8 = 12;

/// A cursor over compact-protocol bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8> {
        let Some(&b) = self.bytes.get(self.pos) else {
            return bad(format!("the header ends at byte {} inside a field", self.pos));
        };
        self.pos += 1;
        Ok(b)
    }

    fn skip_bytes(&mut self, n: u64) -> Result<()> {
        let left = (self.bytes.len() - self.pos) as u64;
        if n > left {
            return bad(format!("a field of {n} bytes at byte {} runs past the header's end", self.pos));
        }
        self.pos += n as usize;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            if shift == 63 && b > 1 {
                return bad(format!("a varint longer than 64 bits at byte {}", self.pos));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bad(format!("a varint longer than 10 bytes at byte {}", self.pos))
    }

    fn zigzag(&mut self) -> Result<i64> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn i32(&mut self, ty: u8, field: &str) -> Result<i32> {
        if ty != T_I32 {
            return bad(format!("{field} has wire type {ty}, not i32"));
        }
        let v = self.zigzag()?;
        i32::try_from(v).or_else(|_| bad(format!("{field} = {v} does not fit i32")))
    }

    fn bool(&mut self, ty: u8, field: &str) -> Result<bool> {
        match ty {
            T_TRUE => Ok(true),
            T_FALSE => Ok(false),
            _ => bad(format!("{field} has wire type {ty}, not bool")),
        }
    }

    /// The next field of a struct: `None` at its end, else (id, type).
    fn field(&mut self, last_id: &mut i16) -> Result<Option<(i16, u8)>> {
        let b = self.byte()?;
        let ty = b & 0x0f;
        if ty == T_STOP {
            return Ok(None);
        }
        let delta = (b >> 4) as i16;
        let id = if delta == 0 {
            let v = self.zigzag()?;
            i16::try_from(v).or_else(|_| bad(format!("a field id {v} out of range")))?
        } else {
            last_id.checked_add(delta).ok_or_else(|| ThriftError("a field id out of range".into()))?
        };
        *last_id = id;
        Ok(Some((id, ty)))
    }

    /// Skips a value of wire type `ty`.
    fn skip(&mut self, ty: u8, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return bad(format!("values nested more than {MAX_DEPTH} deep"));
        }
        match ty {
            T_TRUE | T_FALSE => Ok(()),
            T_BYTE => self.skip_bytes(1),
            T_I16 | T_I32 | T_I64 => self.varint().map(|_| ()),
            T_DOUBLE => self.skip_bytes(8),
            T_BINARY => {
                let n = self.varint()?;
                self.skip_bytes(n)
            }
            T_LIST | T_SET => {
                let b = self.byte()?;
                let elem = b & 0x0f;
                let n = if b >> 4 == 15 { self.varint()? } else { u64::from(b >> 4) };
                self.skip_elements(elem, n, depth)
            }
            T_MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.skip_element(kv >> 4, depth)?;
                    self.skip_element(kv & 0x0f, depth)?;
                }
                Ok(())
            }
            T_STRUCT => {
                let mut last = 0;
                while let Some((_, t)) = self.field(&mut last)? {
                    self.skip(t, depth + 1)?;
                }
                Ok(())
            }
            _ => bad(format!("unknown wire type {ty} at byte {}", self.pos)),
        }
    }

    fn skip_elements(&mut self, elem: u8, n: u64, depth: usize) -> Result<()> {
        // Every element takes at least one byte: a count past the bytes left is corrupt (and
        // would otherwise loop for a long time over nothing).
        if n > (self.bytes.len() - self.pos) as u64 {
            return bad(format!("a list of {n} elements at byte {} runs past the header's end", self.pos));
        }
        (0..n).try_for_each(|_| self.skip_element(elem, depth))
    }

    /// A list's, set's or map's element: bools take a byte each there.
    fn skip_element(&mut self, ty: u8, depth: usize) -> Result<()> {
        if ty == T_TRUE || ty == T_FALSE {
            return self.skip_bytes(1);
        }
        self.skip(ty, depth + 1)
    }
}

/// Reads one page header from the start of `bytes`: the header and how many bytes it took.
pub(crate) fn read_page_header(bytes: &[u8]) -> Result<(RawPageHeader, usize)> {
    let mut r = Reader { bytes, pos: 0 };
    let mut h = RawPageHeader::default();
    let mut last = 0;
    while let Some((id, ty)) = r.field(&mut last)? {
        match id {
            1 => h.page_type = Some(r.i32(ty, "PageHeader.type")?),
            2 => h.uncompressed_page_size = Some(r.i32(ty, "PageHeader.uncompressed_page_size")?),
            3 => h.compressed_page_size = Some(r.i32(ty, "PageHeader.compressed_page_size")?),
            4 => h.crc = Some(r.i32(ty, "PageHeader.crc")?),
            5 if ty == T_STRUCT => h.data_page = Some(data_page(&mut r)?),
            6 if ty == T_STRUCT => {
                r.skip(ty, 1)?;
                h.index_page = true;
            }
            7 if ty == T_STRUCT => h.dictionary_page = Some(dictionary_page(&mut r)?),
            8 if ty == T_STRUCT => h.data_page_v2 = Some(data_page_v2(&mut r)?),
            5..=8 => return bad(format!("PageHeader field {id} has wire type {ty}, not struct")),
            _ => r.skip(ty, 1)?,
        }
    }
    Ok((h, r.pos))
}

fn data_page(r: &mut Reader<'_>) -> Result<RawDataPage> {
    let mut p = RawDataPage::default();
    let mut last = 0;
    while let Some((id, ty)) = r.field(&mut last)? {
        match id {
            1 => p.num_values = Some(r.i32(ty, "DataPageHeader.num_values")?),
            2 => p.encoding = Some(r.i32(ty, "DataPageHeader.encoding")?),
            3 => p.definition_level_encoding = Some(r.i32(ty, "DataPageHeader.definition_level_encoding")?),
            4 => p.repetition_level_encoding = Some(r.i32(ty, "DataPageHeader.repetition_level_encoding")?),
            _ => r.skip(ty, 2)?,
        }
    }
    Ok(p)
}

fn dictionary_page(r: &mut Reader<'_>) -> Result<RawDictionaryPage> {
    let mut p = RawDictionaryPage::default();
    let mut last = 0;
    while let Some((id, ty)) = r.field(&mut last)? {
        match id {
            1 => p.num_values = Some(r.i32(ty, "DictionaryPageHeader.num_values")?),
            2 => p.encoding = Some(r.i32(ty, "DictionaryPageHeader.encoding")?),
            _ => r.skip(ty, 2)?,
        }
    }
    Ok(p)
}

fn data_page_v2(r: &mut Reader<'_>) -> Result<RawDataPageV2> {
    let mut p = RawDataPageV2::default();
    let mut last = 0;
    while let Some((id, ty)) = r.field(&mut last)? {
        match id {
            1 => p.num_values = Some(r.i32(ty, "DataPageHeaderV2.num_values")?),
            2 => p.num_nulls = Some(r.i32(ty, "DataPageHeaderV2.num_nulls")?),
            3 => p.num_rows = Some(r.i32(ty, "DataPageHeaderV2.num_rows")?),
            4 => p.encoding = Some(r.i32(ty, "DataPageHeaderV2.encoding")?),
            5 => p.definition_levels_byte_length = Some(r.i32(ty, "DataPageHeaderV2.definition_levels_byte_length")?),
            6 => p.repetition_levels_byte_length = Some(r.i32(ty, "DataPageHeaderV2.repetition_levels_byte_length")?),
            7 => p.is_compressed = Some(r.bool(ty, "DataPageHeaderV2.is_compressed")?),
            _ => r.skip(ty, 2)?,
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header written by hand: a v1 data page with statistics (skipped) and an unknown
    /// field (skipped).
    #[test]
    fn reads_a_hand_written_header() {
        let mut b = vec![
            0x15, 0x00, // 1: i32 type = 0 (zigzag 0)
            0x15, 0xc8, 0x01, // 2: i32 uncompressed = 100
            0x15, 0x64, // 3: i32 compressed = 50
            0x2c, // 5: struct DataPageHeader (delta 2)
            0x15, 0x14, // 1: num_values = 10
            0x15, 0x00, // 2: encoding PLAIN
            0x15, 0x06, // 3: RLE
            0x15, 0x06, // 4: RLE
            0x1c, // 5: Statistics struct
            0x18, 0x02, 0xab, 0xcd, // 1: binary of 2 bytes
            0x00, // end of Statistics
            0x00, // end of DataPageHeader
        ];
        // An unknown field, its id written out (delta 0): id 15 (zigzag 30), i32 = 1.
        b.extend_from_slice(&[0x05, 0x1e, 0x02]);
        b.push(0x00); // end of PageHeader
        let (h, n) = read_page_header(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(h.page_type, Some(0));
        assert_eq!(h.uncompressed_page_size, Some(100));
        assert_eq!(h.compressed_page_size, Some(50));
        let d = h.data_page.unwrap();
        assert_eq!((d.num_values, d.encoding, d.definition_level_encoding), (Some(10), Some(0), Some(3)));
    }

    #[test]
    fn corrupt_bytes_are_errors() {
        assert!(read_page_header(&[]).is_err());
        assert!(read_page_header(&[0x15]).is_err());
        assert!(read_page_header(&[0x15, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        assert!(read_page_header(&[0x1d]).is_err()); // wire type 13
        assert!(read_page_header(&[0x19, 0xf9, 0xff, 0xff, 0xff, 0x0f]).is_err()); // a huge list
                                                                                   // Structs nested deeper than the limit.
        let mut deep = vec![0x1c; MAX_DEPTH + 4];
        deep.extend(vec![0; MAX_DEPTH + 5]);
        deep[0] = 0x9c; // field 9 (unknown): skipped, recursing
        assert!(read_page_header(&deep).is_err());
        // A field of the wrong type.
        assert!(read_page_header(&[0x18, 0x00, 0x00]).is_err());
    }
}

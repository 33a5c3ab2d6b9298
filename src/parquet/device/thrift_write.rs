//! A data page v1 header written in Thrift's compact protocol: the inverse of
//! [`super::thrift`] (which says the format) for the pages the device encoder writes.
//!
//! Fields are written in id order, as parquet-rs writes them, so a header of the same page
//! is the same bytes as parquet-rs's (`encode_tests` checks it):
//!
//! ```text
//! PageHeader { 1: type = DATA_PAGE, 2: uncompressed_page_size, 3: compressed_page_size,
//!   5: DataPageHeader { 1: num_values, 2: encoding, 3: definition_level_encoding = RLE,
//!        4: repetition_level_encoding = RLE, 5: optional Statistics } }
//! Statistics { 1: max, 2: min (deprecated: only where `legacy` asks; parquet-rs writes
//!   none in page headers), 3: null_count (i64), 5: max_value, 6: min_value,
//!   7: is_max_value_exact, 8: is_min_value_exact }
//! ```

// Stage 4 has no kernel yet: only the tests call this reference (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

/// A page's statistics as its header carries them: PLAIN-encoded min and max (absent
/// where the page has no non-null, non-NaN value) and its null count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeaderStats {
    pub min: Option<Vec<u8>>,
    pub max: Option<Vec<u8>>,
    pub nulls: u64,
    /// The deprecated `min`/`max` fields are written too (a signed sort order).
    pub legacy: bool,
}

/// A data page v1 header's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DataPageHeaderOut {
    pub uncompressed_page_size: i32,
    pub compressed_page_size: i32,
    pub num_values: i32,
    /// The values' encoding (parquet-format's number: PLAIN 0).
    pub encoding: i32,
    pub statistics: Option<HeaderStats>,
}

const T_TRUE: u8 = 1;
const T_FALSE: u8 = 2;
const T_I32: u8 = 5;
const T_I64: u8 = 6;
const T_BINARY: u8 = 8;
const T_STRUCT: u8 = 12;

/// Encodings' numbers (parquet-format).
pub(crate) const PLAIN: i32 = 0;
const RLE: i32 = 3;

/// Writes one struct's fields in increasing id order.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    last: i16,
}

impl Writer<'_> {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    fn field(&mut self, id: i16, ty: u8) {
        debug_assert!(id > self.last);
        let delta = id - self.last;
        if delta <= 15 {
            self.out.push(((delta as u8) << 4) | ty);
        } else {
            self.out.push(ty);
            self.zigzag(i64::from(id));
        }
        self.last = id;
    }

    fn i32(&mut self, id: i16, v: i32) {
        self.field(id, T_I32);
        self.zigzag(i64::from(v));
    }

    fn i64(&mut self, id: i16, v: i64) {
        self.field(id, T_I64);
        self.zigzag(v);
    }

    fn binary(&mut self, id: i16, v: &[u8]) {
        self.field(id, T_BINARY);
        self.varint(v.len() as u64);
        self.out.extend_from_slice(v);
    }

    fn bool(&mut self, id: i16, v: bool) {
        self.field(id, if v { T_TRUE } else { T_FALSE });
    }

    /// A nested struct: its fields are written by `body`, then its stop byte.
    fn strukt(&mut self, id: i16, body: impl FnOnce(&mut Writer<'_>)) {
        self.field(id, T_STRUCT);
        let mut inner = Writer { out: self.out, last: 0 };
        body(&mut inner);
        inner.out.push(0);
    }
}

/// The header's bytes.
pub(crate) fn write_data_page_header(h: &DataPageHeaderOut) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let mut w = Writer { out: &mut out, last: 0 };
    w.i32(1, 0); // DATA_PAGE
    w.i32(2, h.uncompressed_page_size);
    w.i32(3, h.compressed_page_size);
    w.strukt(5, |d| {
        d.i32(1, h.num_values);
        d.i32(2, h.encoding);
        d.i32(3, RLE);
        d.i32(4, RLE);
        if let Some(s) = &h.statistics {
            d.strukt(5, |st| {
                if s.legacy {
                    if let Some(max) = &s.max {
                        st.binary(1, max);
                    }
                    if let Some(min) = &s.min {
                        st.binary(2, min);
                    }
                }
                st.i64(3, i64::try_from(s.nulls).unwrap_or(i64::MAX));
                if let Some(max) = &s.max {
                    st.binary(5, max);
                }
                if let Some(min) = &s.min {
                    st.binary(6, min);
                }
                st.bool(7, true);
                st.bool(8, true);
            });
        }
    });
    out.push(0);
    out
}

#[cfg(test)]
mod tests {
    use super::super::thrift::read_page_header;
    use super::*;

    /// What is written reads back through the crate's own header reader, a wide field id
    /// gap included.
    #[test]
    fn headers_read_back() {
        let stats = HeaderStats { min: Some(vec![1, 0, 0, 0]), max: Some(vec![9, 0, 0, 0]), nulls: 3, legacy: true };
        for statistics in [None, Some(stats)] {
            let h = DataPageHeaderOut {
                uncompressed_page_size: 1000,
                compressed_page_size: 1000,
                num_values: 500,
                encoding: PLAIN,
                statistics,
            };
            let bytes = write_data_page_header(&h);
            let (r, n) = read_page_header(&bytes).unwrap();
            assert_eq!(n, bytes.len());
            assert_eq!((r.page_type, r.uncompressed_page_size, r.compressed_page_size), (Some(0), Some(1000), Some(1000)));
            let d = r.data_page.unwrap();
            assert_eq!((d.num_values, d.encoding, d.definition_level_encoding), (Some(500), Some(0), Some(3)));
        }
        let mut out = Vec::new();
        let mut w = Writer { out: &mut out, last: 0 };
        w.i32(20, -2);
        assert_eq!(out, [0x05, 40, 3]);
    }
}

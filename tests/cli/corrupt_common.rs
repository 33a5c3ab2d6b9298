//! Test support for corrupt inputs: a Parquet file's page headers walked (a small reader of
//! Thrift's compact protocol), page checksums added to a file written by arrow-rs (which
//! writes none), the footer's fields and its embedded Arrow schema located, so that tests
//! can damage exactly the bytes they mean to.
#![allow(dead_code)]

use bytes::Bytes;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// An unsigned LEB128 varint at `pos` (moved past it).
pub fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let byte = *b.get(*pos)?;
        *pos += 1;
        if shift < 64 {
            v |= ((byte & 0x7f) as u64) << shift;
        }
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 140 {
            return None;
        }
    }
}

pub fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// `v` as a varint of exactly `n` bytes (padded with empty continuation groups, which
/// readers accept); `None` if it needs more.
pub fn varint_padded(v: u64, n: usize) -> Option<Vec<u8>> {
    let canonical = varint_bytes(v).len();
    if n < canonical {
        return None;
    }
    Some((0..n).map(|i| if i < 10 { ((v >> (7 * i)) & 0x7f) as u8 } else { 0 } | if i + 1 < n { 0x80 } else { 0 }).collect())
}

pub fn varint_bytes(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            return out;
        }
        out.push(low | 0x80);
    }
}

/// A field of a compact-protocol struct: its id and type, where its header starts, where
/// its value starts and where it ends.
#[derive(Debug, Clone, Copy)]
pub struct ThriftField {
    pub id: i16,
    pub kind: u8,
    pub start: usize,
    pub value: usize,
    pub end: usize,
}

fn skip_element(b: &[u8], pos: &mut usize, kind: u8) -> Option<()> {
    if kind == 1 || kind == 2 {
        *pos += 1; // a bool element is a byte
        return Some(());
    }
    skip(b, pos, kind)
}

/// Skips a value of compact type `kind` at `pos`.
fn skip(b: &[u8], pos: &mut usize, kind: u8) -> Option<()> {
    match kind {
        1 | 2 => {} // a bool field's value is in its header
        3 => *pos += 1,
        4..=6 => {
            varint(b, pos)?;
        }
        7 => *pos += 8,
        8 => {
            let n = varint(b, pos)? as usize;
            *pos = pos.checked_add(n)?;
        }
        9 | 10 => {
            let h = *b.get(*pos)?;
            *pos += 1;
            let n = if h >> 4 == 15 { varint(b, pos)? as usize } else { (h >> 4) as usize };
            for _ in 0..n {
                skip_element(b, pos, h & 0xf)?;
            }
        }
        11 => {
            let n = varint(b, pos)? as usize;
            if n > 0 {
                let h = *b.get(*pos)?;
                *pos += 1;
                for _ in 0..n {
                    skip_element(b, pos, h >> 4)?;
                    skip_element(b, pos, h & 0xf)?;
                }
            }
        }
        12 => {
            fields(b, pos)?;
        }
        _ => return None,
    }
    (*pos <= b.len()).then_some(())
}

/// The fields of the struct at `pos` (moved past its stop byte).
pub fn fields(b: &[u8], pos: &mut usize) -> Option<Vec<ThriftField>> {
    let mut out = Vec::new();
    let mut last = 0i16;
    loop {
        let start = *pos;
        let h = *b.get(*pos)?;
        *pos += 1;
        if h & 0xf == 0 {
            return Some(out);
        }
        let delta = (h >> 4) as i16;
        let id = if delta != 0 { last.checked_add(delta)? } else { unzigzag(varint(b, pos)?) as i16 };
        let value = *pos;
        skip(b, pos, h & 0xf)?;
        out.push(ThriftField { id, kind: h & 0xf, start, value, end: *pos });
        last = id;
    }
}

/// The elements of the list whose value starts at `pos`: where each starts and ends.
pub fn list_elements(b: &[u8], mut pos: usize) -> Option<Vec<(usize, usize)>> {
    let h = *b.get(pos)?;
    pos += 1;
    let n = if h >> 4 == 15 { varint(b, &mut pos)? as usize } else { (h >> 4) as usize };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = pos;
        skip_element(b, &mut pos, h & 0xf)?;
        out.push((start, pos));
    }
    Some(out)
}

pub fn field(fields: &[ThriftField], id: i16) -> Option<ThriftField> {
    fields.iter().copied().find(|f| f.id == id)
}

/// An integer field's value.
pub fn int(b: &[u8], f: ThriftField) -> i64 {
    let mut pos = f.value;
    unzigzag(varint(b, &mut pos).unwrap())
}

/// A page of a column chunk: where its header starts, where its bytes (as stored:
/// compressed) start and end, its type (0 data, 2 dictionary, 3 data v2) and whether its
/// header carries a checksum.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub header: usize,
    pub data: usize,
    pub end: usize,
    pub kind: i64,
    pub crc: bool,
}

/// The footer of the file `bytes`.
pub fn footer(bytes: &[u8]) -> ParquetMetaData {
    ParquetMetaDataReader::new().parse_and_finish(&Bytes::copy_from_slice(bytes)).unwrap()
}

/// The pages of every column chunk: per row group, per leaf column.
pub fn pages(bytes: &[u8]) -> Vec<Vec<Vec<Page>>> {
    let meta = footer(bytes);
    meta.row_groups()
        .iter()
        .map(|g| {
            g.columns()
                .iter()
                .map(|c| {
                    let (start, len) = c.byte_range();
                    let (mut pos, end) = (start as usize, (start + len) as usize);
                    let mut out = Vec::new();
                    while pos < end {
                        let header = pos;
                        let f = fields(bytes, &mut pos).expect("a page header");
                        let size = int(bytes, field(&f, 3).expect("compressed_page_size")) as usize;
                        let kind = int(bytes, field(&f, 1).expect("type"));
                        out.push(Page { header, data: pos, end: pos + size, kind, crc: field(&f, 4).is_some() });
                        pos += size;
                    }
                    out
                })
                .collect()
        })
        .collect()
}

/// CRC-32 (IEEE), as Parquet's page checksums.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// `bytes` (a file written by arrow-rs with page header statistics on, its data pages'
/// headers `1, 2, 3, 5 | 8`) with a checksum in every data page header whose statistics
/// make room for it: the statistics give way to field 4 (`crc`) and, for the bytes left, a
/// field the readers skip (id 15 of the page type's header, a binary), so no offset in the
/// file moves. Returns the file and the pages given one.
pub fn with_page_crcs(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut out = bytes.to_vec();
    let mut given = 0;
    for page in pages(bytes).into_iter().flatten().flatten() {
        let sub_id = match page.kind {
            0 => 5,
            3 => 8,
            _ => continue,
        };
        let mut pos = page.header;
        let top = fields(bytes, &mut pos).unwrap();
        if top.len() != 4 || top[0].id != 1 || top[1].id != 2 || top[2].id != 3 || top[3].id != sub_id || top[3].kind != 12 {
            continue;
        }
        let mut inner_pos = top[3].value;
        let inner = fields(bytes, &mut inner_pos).unwrap();
        let Some(stats) = inner.last().copied().filter(|f| f.id == sub_id && f.kind == 12) else { continue };
        let room = stats.end - stats.start;
        let crc = zigzag(crc32(&bytes[page.data..page.end]) as i32 as i64);
        let canonical = varint_bytes(crc).len();
        if room < 1 + canonical {
            continue;
        }
        // What the checksum's field leaves: none, one byte (the checksum's varint one byte
        // longer), or a skipped field (a header byte, its length, its bytes).
        let rest = room - 1 - canonical;
        let (crc_len, filler) = match rest {
            0 | 1 => (canonical + rest, Vec::new()),
            _ => {
                let n = if rest - 2 < 128 { 1 } else { 2 };
                let len = rest - 1 - n;
                // Id 15 (unknown: skipped), a binary, after the page type header's last
                // field but its statistics.
                let last = inner.len().checked_sub(2).map_or(0, |i| inner[i].id);
                let mut f = vec![((15 - last) as u8) << 4 | 8];
                f.extend(varint_padded(len as u64, n).unwrap());
                f.extend(std::iter::repeat_n(0u8, len));
                (canonical, f)
            }
        };
        let mut header = bytes[page.header..top[2].end].to_vec();
        header.push(0x15); // field 4 (delta 1), i32
        header.extend(varint_padded(crc, crc_len).unwrap());
        header.push(((sub_id - 4) as u8) << 4 | 12); // the page type's header, delta from 4
        header.extend(&bytes[top[3].value..stats.start]);
        header.extend(filler);
        header.extend(&bytes[stats.end..page.data]);
        assert_eq!(header.len(), page.data - page.header);
        out[page.header..page.data].copy_from_slice(&header);
        given += 1;
    }
    (out, given)
}

/// Where the footer (its Thrift `FileMetaData`) starts and ends.
pub fn footer_range(bytes: &[u8]) -> (usize, usize) {
    let n = bytes.len();
    let len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    (n - 8 - len, n - 8)
}

/// Where the value of the footer's `ARROW:schema` entry (base64 text) lies.
pub fn arrow_schema_range(bytes: &[u8]) -> Option<(usize, usize)> {
    let meta = footer(bytes);
    let kv = meta.file_metadata().key_value_metadata()?.iter().find(|kv| kv.key == "ARROW:schema")?;
    let value = kv.value.as_ref()?.as_bytes();
    let (start, end) = footer_range(bytes);
    let at = bytes[start..end].windows(value.len()).position(|w| w == value)? + start;
    Some((at, at + value.len()))
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for &c in text.iter().take_while(|&&c| c != b'=') {
        acc = acc << 6 | BASE64.iter().position(|&x| x == c).expect("base64") as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

pub fn base64_encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in data.chunks(3) {
        let v = chunk.iter().enumerate().fold(0u32, |v, (i, &b)| v | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { BASE64[(v >> (18 - 6 * i) & 63) as usize] } else { b'=' });
        }
    }
    out
}

/// The integer fields of the footer that count rows: the file's `num_rows`, each row
/// group's, and each column chunk's `num_values`, as (where the value starts, its varint
/// length, the value).
pub struct RowCounts {
    pub file: (usize, usize, i64),
    pub row_groups: Vec<(usize, usize, i64)>,
    pub columns: Vec<Vec<(usize, usize, i64)>>,
}

fn int_place(b: &[u8], f: ThriftField) -> (usize, usize, i64) {
    (f.value, f.end - f.value, int(b, f))
}

pub fn row_counts(bytes: &[u8]) -> RowCounts {
    let (start, _) = footer_range(bytes);
    let mut pos = start;
    let top = fields(bytes, &mut pos).unwrap();
    let file = int_place(bytes, field(&top, 3).unwrap());
    let mut row_groups = Vec::new();
    let mut columns = Vec::new();
    for (s, _) in list_elements(bytes, field(&top, 4).unwrap().value).unwrap() {
        let mut p = s;
        let rg = fields(bytes, &mut p).unwrap();
        row_groups.push(int_place(bytes, field(&rg, 3).unwrap()));
        let mut cols = Vec::new();
        for (cs, _) in list_elements(bytes, field(&rg, 1).unwrap().value).unwrap() {
            let mut p = cs;
            let chunk = fields(bytes, &mut p).unwrap();
            let mut p = field(&chunk, 3).expect("meta_data").value;
            let meta = fields(bytes, &mut p).unwrap();
            cols.push(int_place(bytes, field(&meta, 5).unwrap()));
        }
        columns.push(cols);
    }
    RowCounts { file, row_groups, columns }
}

/// Writes `value` over the varint at `place` (same length: padded, or `false` if it does
/// not fit).
pub fn set_int(bytes: &mut [u8], place: (usize, usize, i64), value: i64) -> bool {
    match varint_padded(zigzag(value), place.1) {
        Some(v) => {
            bytes[place.0..place.0 + place.1].copy_from_slice(&v);
            true
        }
        None => false,
    }
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, returning the message of a panic in it, the panic not printed (the hook is
/// silenced on this thread only: other tests keep theirs).
pub fn panic_of(f: impl FnOnce()) -> Option<String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info)
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    outcome
        .err()
        .map(|p| p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
}

/// Whether reading every row of the file `bytes` with the parquet crate (its embedded
/// Arrow schema decoded) panics (`Some` with the message), so that a test can show that it
/// exercises a panic.
pub fn parquet_panics(bytes: &[u8]) -> Option<String> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let bytes = Bytes::copy_from_slice(bytes);
    panic_of(move || {
        if let Ok(builder) = ParquetRecordBatchReaderBuilder::try_new(bytes) {
            if let Ok(reader) = builder.build() {
                for b in reader {
                    if b.is_err() {
                        break;
                    }
                }
            }
        }
    })
}

//! The CPU reference of a device page encoder (issue 69, stage 4, first slice): a data page
//! v1 of PLAIN values and RLE / bit-packed definition levels, its statistics and its
//! header, for a column of [`super::encode_plan`]. No kernel is built yet; this is the
//! shape one takes, so that it can be checked against this reference bit for bit.
//!
//! The shape: a page is worked on in tiles of [`TILE`] rows (a thread block's), in two
//! passes. The first pass gives each tile its non-null count and its min and max
//! ([`tile_summary`]); an exclusive scan of the counts gives each tile where its values
//! start in the page; the second pass has each tile write its level bytes (a tile is a
//! multiple of 8 rows, so its bits start on a byte) and its values at that place
//! ([`write_tile`]), with no tile reading another's output. The page's statistics are the
//! tiles' summaries folded in order; the chunk's, the pages' ([`fold`]).
//!
//! The page body (uncompressed: compression is nvCOMP's job, later):
//!
//! - a column without nulls allowed (maximum definition level 0): the PLAIN values;
//! - a nullable one (maximum definition level 1): a 4-byte little-endian length, then the
//!   definition levels as the RLE / bit-packed hybrid of bit width 1, then the PLAIN
//!   values of the non-null rows. The levels are one RLE run where the page has no null
//!   (all 1) or only nulls (all 0), as parquet-rs writes them, else one bit-packed run of
//!   `ceil(rows / 8)` groups, the last padded with zeros (parquet-rs mixes runs where it
//!   finds repeats; both are the format, and every reader reads both).
//!
//! Statistics follow parquet-rs's writer (`column/writer/encoder.rs`, `get_min_max`):
//! integers compare signed; a float NaN is skipped (a page of NaNs and nulls has no min or
//! max); floats compare by `>` (so -0.0 and 0.0 tie), then a min that is a zero is written
//! as -0.0 and a max that is a zero as +0.0. That is not Arrow's total order (which puts
//! -0.0 below 0.0 and NaN above everything); what matters is what parquet-rs and the
//! readers that prune by these statistics expect.

// Stage 4 has no kernel yet: only the tests call this reference (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use super::encode_plan::{check_pages, EncodeType, PagePlan};
use super::thrift_write::{write_data_page_header, DataPageHeaderOut, HeaderStats, PLAIN};
use arrow::array::{Array, AsArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Date32Type, Float32Type, Float64Type, Int32Type, Int64Type};

/// Rows a tile works on: a multiple of 8, so a tile's level bits start on a byte.
pub(crate) const TILE: usize = 1024;

/// A column's input, as a kernel would see it in device memory.
#[derive(Debug)]
pub(crate) struct ColumnIn<'a> {
    pub ty: EncodeType,
    /// Every row's value, PLAIN (little-endian, `ty.width()` bytes), nulls' slots included.
    pub values: &'a [u8],
    pub validity: Option<NullBuffer>,
    /// The column is OPTIONAL (maximum definition level 1).
    pub nullable: bool,
}

impl<'a> ColumnIn<'a> {
    /// The input of `array` (a covered type, see [`EncodeType::of`]) in a column that is
    /// nullable or not; a column declared not nullable that holds nulls is an `Err`.
    pub fn of(array: &'a dyn Array, nullable: bool) -> Result<ColumnIn<'a>, String> {
        let ty = EncodeType::of(array.data_type())
            .ok_or_else(|| format!("a column of {} is not covered by the device encoder", array.data_type()))?;
        let validity = array.logical_nulls().filter(|n| n.null_count() > 0);
        if validity.is_some() && !nullable {
            return Err("a column declared without nulls holds nulls".into());
        }
        // A primitive array's values, from its offset: the buffer its `ScalarBuffer` holds.
        let values = match array.data_type() {
            DataType::Int32 => array.as_primitive::<Int32Type>().values().inner().as_slice(),
            DataType::Date32 => array.as_primitive::<Date32Type>().values().inner().as_slice(),
            DataType::Int64 => array.as_primitive::<Int64Type>().values().inner().as_slice(),
            DataType::Float32 => array.as_primitive::<Float32Type>().values().inner().as_slice(),
            // Float64: `EncodeType::of` covers nothing else.
            _ => array.as_primitive::<Float64Type>().values().inner().as_slice(),
        };
        if values.len() != array.len() * ty.width() {
            return Err(format!("an array of {} rows with {} bytes of values", array.len(), values.len()));
        }
        Ok(ColumnIn { ty, values, validity, nullable })
    }

    fn valid(&self, row: usize) -> bool {
        self.validity.as_ref().is_none_or(|n| n.is_valid(row))
    }

    fn value(&self, row: usize) -> &[u8] {
        let w = self.ty.width();
        &self.values[row * w..(row + 1) * w]
    }
}

/// Min and max of some values, PLAIN bytes; `None` where there was no non-null, non-NaN
/// value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct MinMax {
    pub min: Option<Vec<u8>>,
    pub max: Option<Vec<u8>>,
}

/// `a > b` for PLAIN values of `ty`, as parquet-rs compares them (`compare_greater`).
pub(crate) fn greater(ty: EncodeType, a: &[u8], b: &[u8]) -> bool {
    match ty {
        EncodeType::Int32 => i32::from_le_bytes(a.try_into().unwrap()) > i32::from_le_bytes(b.try_into().unwrap()),
        EncodeType::Int64 => i64::from_le_bytes(a.try_into().unwrap()) > i64::from_le_bytes(b.try_into().unwrap()),
        EncodeType::Float => f32::from_le_bytes(a.try_into().unwrap()) > f32::from_le_bytes(b.try_into().unwrap()),
        EncodeType::Double => f64::from_le_bytes(a.try_into().unwrap()) > f64::from_le_bytes(b.try_into().unwrap()),
    }
}

fn is_nan(ty: EncodeType, v: &[u8]) -> bool {
    match ty {
        EncodeType::Float => f32::from_le_bytes(v.try_into().unwrap()).is_nan(),
        EncodeType::Double => f64::from_le_bytes(v.try_into().unwrap()).is_nan(),
        _ => false,
    }
}

/// A float zero as parquet-rs writes it in statistics: -0.0 for a min, +0.0 for a max.
fn zero_as(ty: EncodeType, v: Vec<u8>, negative: bool) -> Vec<u8> {
    match ty {
        EncodeType::Float if f32::from_le_bytes(v[..].try_into().unwrap()) == 0.0 => {
            (if negative { -0.0f32 } else { 0.0f32 }).to_le_bytes().to_vec()
        }
        EncodeType::Double if f64::from_le_bytes(v[..].try_into().unwrap()) == 0.0 => {
            (if negative { -0.0f64 } else { 0.0f64 }).to_le_bytes().to_vec()
        }
        _ => v,
    }
}

/// Folds `next` into `acc`: the smaller min and the larger max (the earlier on a tie, as
/// parquet-rs keeps it).
pub(crate) fn fold(ty: EncodeType, acc: &mut MinMax, next: &MinMax) {
    if let Some(m) = &next.min {
        if acc.min.as_ref().is_none_or(|a| greater(ty, a, m)) {
            acc.min = Some(m.clone());
        }
    }
    if let Some(m) = &next.max {
        if acc.max.as_ref().is_none_or(|a| greater(ty, m, a)) {
            acc.max = Some(m.clone());
        }
    }
}

/// Statistics as they are written: zeros signed as parquet-rs signs them.
fn finish(ty: EncodeType, mm: MinMax) -> MinMax {
    MinMax { min: mm.min.map(|v| zero_as(ty, v, true)), max: mm.max.map(|v| zero_as(ty, v, false)) }
}

/// What the first pass finds in a tile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TileSummary {
    pub non_null: usize,
    pub min_max: MinMax,
}

/// The first pass over rows `first..first + rows` of `col`.
pub(crate) fn tile_summary(col: &ColumnIn<'_>, first: usize, rows: usize) -> TileSummary {
    let mut s = TileSummary::default();
    for row in first..first + rows {
        if !col.valid(row) {
            continue;
        }
        s.non_null += 1;
        let v = col.value(row);
        if is_nan(col.ty, v) {
            continue;
        }
        let one = MinMax { min: Some(v.to_vec()), max: Some(v.to_vec()) };
        fold(col.ty, &mut s.min_max, &one);
    }
    s
}

/// The second pass over rows `first..first + rows` of `col` (`first` a multiple of 8 from
/// the page's start `page_first`): each row's definition level as a bit of `levels` (the
/// page's bit-packed bytes), each non-null value at `values[at..]` (the page's values),
/// `at` being the non-null values of the tiles before.
pub(crate) fn write_tile(
    col: &ColumnIn<'_>,
    page_first: usize,
    first: usize,
    rows: usize,
    levels: &mut [u8],
    values: &mut [u8],
    at: usize,
) {
    let w = col.ty.width();
    let mut at = at;
    for row in first..first + rows {
        let i = row - page_first;
        if col.valid(row) {
            levels[i / 8] |= 1 << (i % 8);
            values[at * w..(at + 1) * w].copy_from_slice(col.value(row));
            at += 1;
        }
    }
}

/// One encoded data page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedPage {
    /// Its header's bytes.
    pub header: Vec<u8>,
    /// Its body (levels and values), uncompressed.
    pub body: Vec<u8>,
    pub rows: usize,
    pub nulls: usize,
    /// Its min and max as written.
    pub min_max: MinMax,
}

fn uleb(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encodes the page `p` of `col`; `header_stats` puts its statistics in its header (as
/// parquet-rs's `write_page_header_statistics`).
pub(crate) fn encode_page(col: &ColumnIn<'_>, p: &PagePlan, header_stats: bool) -> Result<EncodedPage, String> {
    let w = col.ty.width();
    let tiles: Vec<(usize, usize)> =
        (p.first_row..p.first_row + p.rows).step_by(TILE).map(|t| (t, TILE.min(p.first_row + p.rows - t))).collect();
    // Pass 1, then the scan.
    let summaries: Vec<TileSummary> = tiles.iter().map(|&(t, n)| tile_summary(col, t, n)).collect();
    let mut starts = Vec::with_capacity(tiles.len());
    let mut non_null = 0usize;
    for s in &summaries {
        starts.push(non_null);
        non_null += s.non_null;
    }
    if p.rows - non_null != p.nulls {
        return Err(format!("the page at row {} states {} nulls, its rows hold {}", p.first_row, p.nulls, p.rows - non_null));
    }
    // Pass 2.
    let mut bits = vec![0u8; p.rows.div_ceil(8)];
    let mut values = vec![0u8; non_null * w];
    for (&(t, n), &at) in tiles.iter().zip(&starts) {
        write_tile(col, p.first_row, t, n, &mut bits, &mut values, at);
    }
    let mut body = Vec::with_capacity(values.len() + bits.len() + 16);
    if col.nullable {
        let mut levels = Vec::with_capacity(bits.len() + 6);
        if p.nulls == 0 || p.nulls == p.rows {
            uleb(&mut levels, (p.rows as u64) << 1);
            levels.push(u8::from(p.nulls == 0));
        } else {
            uleb(&mut levels, ((bits.len() as u64) << 1) | 1);
            levels.extend_from_slice(&bits);
        }
        let len = u32::try_from(levels.len()).map_err(|_| "definition levels over 4 GiB".to_string())?;
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(&levels);
    } else if p.nulls > 0 {
        return Err(format!("the page at row {} holds nulls in a column without nulls", p.first_row));
    }
    body.extend_from_slice(&values);

    let mut min_max = MinMax::default();
    for s in &summaries {
        fold(col.ty, &mut min_max, &s.min_max);
    }
    let min_max = finish(col.ty, min_max);
    let size = i32::try_from(body.len()).map_err(|_| format!("a page of {} bytes, more than a header states", body.len()))?;
    let rows = i32::try_from(p.rows).map_err(|_| format!("a page of {} rows, more than a header states", p.rows))?;
    let header = write_data_page_header(&DataPageHeaderOut {
        uncompressed_page_size: size,
        compressed_page_size: size,
        num_values: rows,
        encoding: PLAIN,
        // As parquet-rs: a page with no min and max (only nulls and NaNs) has no statistics.
        statistics: (header_stats && min_max.min.is_some() && min_max.max.is_some()).then(|| HeaderStats {
            min: min_max.min.clone(),
            max: min_max.max.clone(),
            nulls: p.nulls as u64,
            // parquet-rs copies a page's min and max to the deprecated fields only in the
            // footer's chunk statistics, not in page headers.
            legacy: false,
        }),
    });
    Ok(EncodedPage { header, body, rows: p.rows, nulls: p.nulls, min_max })
}

/// A column chunk's pages and statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedChunk {
    pub pages: Vec<EncodedPage>,
    pub nulls: usize,
    /// The chunk's min and max as written (the pages' folded).
    pub min_max: MinMax,
}

/// Encodes the column `col` of `array`'s rows by the page table `pages`, checked first
/// ([`check_pages`]).
pub(crate) fn encode_chunk(array: &dyn Array, col: &ColumnIn<'_>, pages: &[PagePlan], header_stats: bool) -> Result<EncodedChunk, String> {
    check_pages(array, pages)?;
    if col.values.len() != array.len() * col.ty.width() {
        return Err("the column's values do not match its array".into());
    }
    let pages = pages.iter().map(|p| encode_page(col, p, header_stats)).collect::<Result<Vec<_>, _>>()?;
    let mut min_max = MinMax::default();
    for p in &pages {
        fold(col.ty, &mut min_max, &p.min_max);
    }
    let nulls = pages.iter().map(|p| p.nulls).sum();
    Ok(EncodedChunk { pages, nulls, min_max: finish(col.ty, min_max) })
}

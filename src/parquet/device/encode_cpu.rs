//! The CPU reference of the device page encoder (issue 69, stage 4): a data page v1 of
//! PLAIN values and RLE / bit-packed definition levels, its statistics and its header, for
//! a column of [`super::encode_plan`]. The kernels are `cuda/parquet_encode.cu`; this runs
//! their three steps over the same records (`engine/encode_job.rs`, whose module doc says
//! the records and the launches) on host buffers ([`run_on_cpu`]), and both runs' output
//! becomes pages and chunk statistics through one function ([`finish_chunk`]), so the
//! device's pages are this reference's wherever the kernels write what these steps write
//! (the GPU tests hold them to it, record for record and byte for byte).
//!
//! The shape: a page is worked on in tiles of [`TILE`] rows (a thread block's), in two
//! passes. The first gives each tile its non-null count and its min and max
//! ([`summarize_tile`]); a scan of the counts gives each tile where its values start in the
//! page, and the page its statistics and its body's layout ([`scan_page`]); the second has
//! each tile write its level bytes (a tile is a multiple of 8 rows, so its bits start on a
//! byte) and its values at that place ([`write_tile`]), with no tile reading another's
//! output. The chunk's statistics are the pages' folded ([`fold`]).
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
//! readers that prune by these statistics expect. Zeros are signed as soon as a tile's min
//! and max are found, so their order of comparison (a kernel's tree) does not matter.

// Only the tests and the device encoder's launch call this yet (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use super::encode_plan::{check_pages, EncodeType, PagePlan};
use super::thrift_write::{write_data_page_header, DataPageHeaderOut, HeaderStats, PLAIN};
use crate::engine::encode_job::{
    kind_width, plan_job, EncodeColumnArg, EncodeJob, EncodeOutput, EncodePageArg, EncodeTileArg, COLUMN_NULLABLE, ENCODE_TILE,
    HAS_MIN_MAX, KIND_DOUBLE, KIND_FLOAT, KIND_INT32, KIND_INT64, PAGE_BIT_PACKED,
};
use arrow::array::{Array, AsArray};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Date32Type, Float32Type, Float64Type, Int32Type, Int64Type};
use std::ops::Range;

/// Rows a tile works on: a multiple of 8, so a tile's level bits start on a byte.
pub(crate) const TILE: usize = ENCODE_TILE as usize;

/// A column's input, as the kernels see it in device memory.
#[derive(Debug)]
pub(crate) struct ColumnIn<'a> {
    pub ty: EncodeType,
    /// Every row's value, PLAIN (little-endian, `ty.width()` bytes), nulls' slots included.
    pub values: &'a [u8],
    /// The validity bitmap in Arrow's bit order from row 0 (bit `r` of byte `r / 8`), where
    /// a row is null.
    pub validity: Option<Buffer>,
    /// The column is OPTIONAL (maximum definition level 1).
    pub nullable: bool,
}

impl<'a> ColumnIn<'a> {
    /// The input of `array` (a covered type, see [`EncodeType::of`]) in a column that is
    /// nullable or not; a column declared not nullable that holds nulls is an `Err`.
    pub fn of(array: &'a dyn Array, nullable: bool) -> Result<ColumnIn<'a>, String> {
        let ty = EncodeType::of(array.data_type())
            .ok_or_else(|| format!("a column of {} is not covered by the device encoder", array.data_type()))?;
        let nulls = array.logical_nulls().filter(|n| n.null_count() > 0);
        if nulls.is_some() && !nullable {
            return Err("a column declared without nulls holds nulls".into());
        }
        // A sliced array's bitmap starts at a bit offset: `sliced` moves it to bit 0.
        let validity = nulls.map(|n| n.inner().sliced());
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

    /// Its rows.
    pub fn rows(&self) -> usize {
        self.values.len() / self.ty.width()
    }

    /// Its record in an encode job, `values` and `validity` 0 (the caller's addresses, for
    /// the device; the CPU reads [`ColumnIn::host`]).
    pub fn arg(&self) -> EncodeColumnArg {
        EncodeColumnArg {
            rows: self.rows() as u64,
            kind: self.ty.kind(),
            flags: if self.nullable { COLUMN_NULLABLE } else { 0 },
            ..Default::default()
        }
    }

    /// Its buffers, as [`run_on_cpu`] reads them.
    pub fn host(&self) -> HostColumn<'_> {
        HostColumn { values: self.values, validity: self.validity.as_ref().map(|b| b.as_slice()) }
    }
}

/// A job column's buffers in host memory: what its `EncodeColumnArg`'s addresses hold on
/// the device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostColumn<'a> {
    pub values: &'a [u8],
    pub validity: Option<&'a [u8]>,
}

impl HostColumn<'_> {
    fn valid(&self, row: u64) -> bool {
        self.validity.is_none_or(|v| v[(row >> 3) as usize] >> (row & 7) & 1 == 1)
    }

    /// Row `row`'s value as PLAIN bits, zero-extended.
    fn load(&self, width: usize, row: u64) -> u64 {
        let at = row as usize * width;
        let mut b = [0u8; 8];
        b[..width].copy_from_slice(&self.values[at..at + width]);
        u64::from_le_bytes(b)
    }
}

/// `a > b` for PLAIN bits of `kind`, as parquet-rs compares them (`compare_greater`) and
/// the kernels' `enc_greater`.
fn greater_bits(kind: u32, a: u64, b: u64) -> bool {
    match kind {
        KIND_INT32 => (a as u32 as i32) > (b as u32 as i32),
        KIND_FLOAT => f32::from_bits(a as u32) > f32::from_bits(b as u32),
        KIND_DOUBLE => f64::from_bits(a) > f64::from_bits(b),
        _ => (a as i64) > (b as i64),
    }
}

fn is_nan_bits(kind: u32, v: u64) -> bool {
    match kind {
        KIND_FLOAT => f32::from_bits(v as u32).is_nan(),
        KIND_DOUBLE => f64::from_bits(v).is_nan(),
        _ => false,
    }
}

/// A float zero as parquet-rs writes it in statistics: -0.0 for a min (`negative`), +0.0
/// for a max.
fn signed_zero(kind: u32, v: u64, negative: bool) -> u64 {
    match kind {
        KIND_FLOAT if f32::from_bits(v as u32) == 0.0 => u64::from((if negative { -0.0f32 } else { 0.0f32 }).to_bits()),
        KIND_DOUBLE if f64::from_bits(v) == 0.0 => (if negative { -0.0f64 } else { 0.0f64 }).to_bits(),
        _ => v,
    }
}

/// Folds `next` (a min and max, where `Some`) into `acc`: the smaller min and the larger
/// max, the earlier on a tie (the kernels' `enc_fold`).
fn fold_bits(kind: u32, acc: &mut Option<(u64, u64)>, next: Option<(u64, u64)>) {
    let Some((mn, mx)) = next else { return };
    *acc = Some(match *acc {
        None => (mn, mx),
        Some((a, b)) => (if greater_bits(kind, a, mn) { mn } else { a }, if greater_bits(kind, mx, b) { mx } else { b }),
    });
}

/// Statistics' bits as written: zeros signed; 0 and no flag where there are none.
fn written(kind: u32, mm: Option<(u64, u64)>) -> (u32, u64, u64) {
    match mm {
        Some((mn, mx)) => (HAS_MIN_MAX, signed_zero(kind, mn, true), signed_zero(kind, mx, false)),
        None => (0, 0, 0),
    }
}

/// The first pass over tile `ti` of `job` (`parquet_encode_summarize`): its non-null
/// count, min and max into `tiles[ti]`.
pub(crate) fn summarize_tile(job: &EncodeJob, columns: &[HostColumn<'_>], tiles: &mut [EncodeTileArg], ti: usize) {
    let t = &mut tiles[ti];
    let p = &job.pages[t.page as usize];
    let (col, host) = (&job.columns[p.column as usize], &columns[p.column as usize]);
    let width = kind_width(col.kind).expect("a checked job");
    let row0 = p.first_row + u64::from(t.first);
    let mut count = 0u32;
    let mut mm = None;
    for row in row0..row0 + u64::from(t.rows) {
        if !host.valid(row) {
            continue;
        }
        count += 1;
        let v = host.load(width, row);
        if !is_nan_bits(col.kind, v) {
            fold_bits(col.kind, &mut mm, Some((v, v)));
        }
    }
    t.non_null = count;
    (t.flags, t.min, t.max) = written(col.kind, mm);
}

/// Appends `v` as an unsigned LEB128 varint.
fn uleb(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The scan of page `pi` (`parquet_encode_scan`): its tiles' `at`, its non-null count,
/// statistics and body layout into `pages[pi]`, and its length prefix and level run header
/// (and an RLE run's value) into its slot of `output`.
pub(crate) fn scan_page(job: &EncodeJob, pages: &mut [EncodePageArg], tiles: &mut [EncodeTileArg], output: &mut [u8], pi: usize) {
    let p = &mut pages[pi];
    let col = &job.columns[p.column as usize];
    let mut at = 0u32;
    let mut mm = None;
    for t in &mut tiles[p.first_tile as usize..(p.first_tile + p.tiles) as usize] {
        t.at = at;
        at += t.non_null;
        fold_bits(col.kind, &mut mm, (t.flags & HAS_MIN_MAX != 0).then_some((t.min, t.max)));
    }
    let nulls = p.rows - at;
    let (mut flags, min, max) = written(col.kind, mm);
    let (mut levels_at, mut values_at) = (0u32, 0u32);
    if col.flags & COLUMN_NULLABLE != 0 {
        let packed = nulls != 0 && nulls != p.rows;
        let mut head = Vec::with_capacity(16);
        if packed {
            let bytes = p.rows.div_ceil(8);
            uleb(&mut head, (u64::from(bytes) << 1) | 1);
            levels_at = 4 + head.len() as u32;
            values_at = levels_at + bytes;
            flags |= PAGE_BIT_PACKED;
        } else {
            uleb(&mut head, u64::from(p.rows) << 1);
            head.push(u8::from(nulls == 0));
            values_at = 4 + head.len() as u32;
        }
        let body = &mut output[p.out as usize..];
        body[..4].copy_from_slice(&(values_at - 4).to_le_bytes());
        body[4..4 + head.len()].copy_from_slice(&head);
    }
    p.non_null = at;
    p.levels_at = levels_at;
    p.values_at = values_at;
    p.body_len = values_at + at * kind_width(col.kind).expect("a checked job") as u32;
    (p.flags, p.min, p.max) = (flags, min, max);
}

/// The second pass over tile `ti` (`parquet_encode_write`): its level bits (a bit-packed
/// page) and its non-null values from the page's `at`-th on, into its page's body.
pub(crate) fn write_tile(job: &EncodeJob, columns: &[HostColumn<'_>], pages: &[EncodePageArg], tile: &EncodeTileArg, output: &mut [u8]) {
    let p = &pages[tile.page as usize];
    let (col, host) = (&job.columns[p.column as usize], &columns[p.column as usize]);
    let width = kind_width(col.kind).expect("a checked job");
    let row0 = p.first_row + u64::from(tile.first);
    let body = &mut output[p.out as usize..];
    if p.flags & PAGE_BIT_PACKED != 0 {
        let bits = &mut body[(p.levels_at + tile.first / 8) as usize..];
        for i in 0..tile.rows {
            if host.valid(row0 + u64::from(i)) {
                bits[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
    }
    let mut at = p.values_at as usize + tile.at as usize * width;
    for row in row0..row0 + u64::from(tile.rows) {
        if host.valid(row) {
            body[at..at + width].copy_from_slice(&host.load(width, row).to_le_bytes()[..width]);
            at += width;
        }
    }
}

/// Runs `job` over `columns` (column `c` of the job in `columns[c]`) as the kernels do:
/// every tile summarized, every page scanned, every tile written, into a zeroed output.
pub(crate) fn run_on_cpu(job: &EncodeJob, columns: &[HostColumn<'_>]) -> Result<EncodeOutput, String> {
    job.check()?;
    if columns.len() != job.columns.len() {
        return Err(format!("{} host columns for a job of {}", columns.len(), job.columns.len()));
    }
    for (c, (arg, host)) in job.columns.iter().zip(columns).enumerate() {
        let rows = usize::try_from(arg.rows).map_err(|_| format!("column {c}: {} rows", arg.rows))?;
        let width = kind_width(arg.kind).expect("checked");
        if rows.checked_mul(width).is_none_or(|n| host.values.len() < n) || host.validity.is_some_and(|v| v.len() < rows.div_ceil(8)) {
            return Err(format!("column {c}: its buffers are shorter than its {rows} rows"));
        }
    }
    let mut tiles = job.tiles.clone();
    let mut pages = job.pages.clone();
    let mut output = vec![0u8; job.output_len];
    for ti in 0..tiles.len() {
        summarize_tile(job, columns, &mut tiles, ti);
    }
    for pi in 0..pages.len() {
        scan_page(job, &mut pages, &mut tiles, &mut output, pi);
    }
    for tile in &tiles {
        write_tile(job, columns, &pages, tile, &mut output);
    }
    Ok(EncodeOutput { pages, tiles, output })
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
    let bits = |v: &[u8]| {
        let mut b = [0u8; 8];
        b[..v.len()].copy_from_slice(v);
        u64::from_le_bytes(b)
    };
    greater_bits(ty.kind(), bits(a), bits(b))
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
    let sign = |v: Vec<u8>, negative: bool| {
        let mut b = [0u8; 8];
        b[..v.len()].copy_from_slice(&v);
        signed_zero(ty.kind(), u64::from_le_bytes(b), negative).to_le_bytes()[..v.len()].to_vec()
    };
    MinMax { min: mm.min.map(|v| sign(v, true)), max: mm.max.map(|v| sign(v, false)) }
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

/// A column chunk's pages and statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedChunk {
    pub pages: Vec<EncodedPage>,
    pub nulls: usize,
    /// The chunk's min and max as written (the pages' folded).
    pub min_max: MinMax,
}

/// The chunk of column `column` of a run's `out` (on the device or the CPU) of `job`: its
/// pages' headers (`header_stats` puts each page's statistics in its header, as
/// parquet-rs's `write_page_header_statistics`) and bodies, and its statistics. A page with
/// nulls in a column declared without them is an `Err`.
pub(crate) fn finish_chunk(job: &EncodeJob, out: &EncodeOutput, column: usize, header_stats: bool) -> Result<EncodedChunk, String> {
    let col = job.columns.get(column).ok_or_else(|| format!("no column {column} in the job"))?;
    let ty = match col.kind {
        KIND_INT32 => EncodeType::Int32,
        KIND_INT64 => EncodeType::Int64,
        KIND_FLOAT => EncodeType::Float,
        KIND_DOUBLE => EncodeType::Double,
        k => return Err(format!("column {column}: kind {k} is not a covered type")),
    };
    let width = ty.width();
    if out.pages.len() != job.pages.len() || out.output.len() != job.output_len {
        return Err("a run's output is not its job's".into());
    }
    let mut pages = Vec::new();
    for (i, p) in out.pages.iter().enumerate().filter(|(_, p)| p.column as usize == column) {
        let planned = &job.pages[i];
        // What the run wrote must lie in the page's slot and count its rows.
        if (p.out, p.first_row, p.rows) != (planned.out, planned.first_row, planned.rows)
            || p.non_null > p.rows
            || p.body_len > planned.slot_len
            || (p.out as usize).checked_add(p.body_len as usize).is_none_or(|e| e > out.output.len())
        {
            return Err(format!("page {i}: the run's record does not fit its plan"));
        }
        let nulls = (p.rows - p.non_null) as usize;
        if nulls > 0 && col.flags & COLUMN_NULLABLE == 0 {
            return Err(format!("the page at row {} holds nulls in a column without nulls", p.first_row));
        }
        let min_max = if p.flags & HAS_MIN_MAX != 0 {
            MinMax { min: Some(p.min.to_le_bytes()[..width].to_vec()), max: Some(p.max.to_le_bytes()[..width].to_vec()) }
        } else {
            MinMax::default()
        };
        let body = out.body(i).to_vec();
        let size = i32::try_from(body.len()).map_err(|_| format!("a page of {} bytes, more than a header states", body.len()))?;
        let header = write_data_page_header(&DataPageHeaderOut {
            uncompressed_page_size: size,
            compressed_page_size: size,
            num_values: p.rows as i32,
            encoding: PLAIN,
            // As parquet-rs: a page with no min and max (only nulls and NaNs) has no statistics.
            statistics: (header_stats && min_max.min.is_some()).then(|| HeaderStats {
                min: min_max.min.clone(),
                max: min_max.max.clone(),
                nulls: nulls as u64,
                // parquet-rs copies a page's min and max to the deprecated fields only in the
                // footer's chunk statistics, not in page headers.
                legacy: false,
            }),
        });
        pages.push(EncodedPage { header, body, rows: p.rows as usize, nulls, min_max });
    }
    let mut min_max = MinMax::default();
    for p in &pages {
        fold(ty, &mut min_max, &p.min_max);
    }
    let nulls = pages.iter().map(|p| p.nulls).sum();
    Ok(EncodedChunk { pages, nulls, min_max: finish(ty, min_max) })
}

/// The row ranges of `pages`.
pub(crate) fn ranges(pages: &[PagePlan]) -> Vec<Range<usize>> {
    pages.iter().map(|p| p.first_row..p.first_row + p.rows).collect()
}

/// Encodes the column `col` of `array`'s rows by the page table `pages`, checked first
/// ([`check_pages`]), on the CPU.
pub(crate) fn encode_chunk(array: &dyn Array, col: &ColumnIn<'_>, pages: &[PagePlan], header_stats: bool) -> Result<EncodedChunk, String> {
    check_pages(array, pages)?;
    if col.values.len() != array.len() * col.ty.width() {
        return Err("the column's values do not match its array".into());
    }
    let job = plan_job(&[col.arg()], &[ranges(pages)])?;
    let out = run_on_cpu(&job, &[col.host()])?;
    let chunk = finish_chunk(&job, &out, 0, header_stats)?;
    for (p, e) in pages.iter().zip(&chunk.pages) {
        if p.nulls != e.nulls {
            return Err(format!("the page at row {} states {} nulls, its rows hold {}", p.first_row, p.nulls, e.nulls));
        }
    }
    Ok(chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One page's cut (a `vec!` of one range reads as a mistake to clippy).
    fn one(rows: Range<usize>) -> Vec<Range<usize>> {
        vec![rows]
    }

    /// The bits' order is parquet-rs's: signed integers, floats by value with NaN skipped
    /// before and zeros tying, then signed when written.
    #[test]
    fn bit_comparisons() {
        assert!(greater_bits(KIND_INT32, 1, u64::from(u32::MAX)), "1 > -1");
        assert!(!greater_bits(KIND_INT32, u64::from(i32::MIN as u32), 0));
        assert!(greater_bits(KIND_INT64, 0, u64::MAX));
        let f = |v: f32| u64::from(v.to_bits());
        assert!(!greater_bits(KIND_FLOAT, f(0.0), f(-0.0)) && !greater_bits(KIND_FLOAT, f(-0.0), f(0.0)));
        assert!(greater_bits(KIND_FLOAT, f(f32::MIN_POSITIVE / 4.0), f(0.0)), "subnormals are not zeros");
        assert!(is_nan_bits(KIND_FLOAT, f(f32::NAN)) && is_nan_bits(KIND_DOUBLE, (-f64::NAN).to_bits()));
        assert!(!is_nan_bits(KIND_INT32, f(f32::NAN)));
        assert_eq!(signed_zero(KIND_FLOAT, f(0.0), true), f(-0.0));
        assert_eq!(signed_zero(KIND_DOUBLE, (-0.0f64).to_bits(), false), 0);
        assert_eq!(signed_zero(KIND_INT32, 0, true), 0);
        // A tie keeps the earlier; a written zero is signed whichever came first.
        let mut acc = None;
        fold_bits(KIND_FLOAT, &mut acc, Some((f(0.0), f(-0.0))));
        fold_bits(KIND_FLOAT, &mut acc, Some((f(-0.0), f(0.0))));
        assert_eq!(acc, Some((f(0.0), f(-0.0))));
        assert_eq!(written(KIND_FLOAT, acc), (HAS_MIN_MAX, f(-0.0), f(0.0)));
    }

    /// The kernel's reduction order (a thread's rows in order, a butterfly within each
    /// warp, then the warps in order) gives the written min and max an in-order fold gives:
    /// values that tie are the same bits but for the zeros, which are signed when written.
    #[test]
    fn a_tree_folds_as_in_order() {
        const THREADS: usize = 256;
        let floats = [0.0f64, -0.0, 1.5, -1.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE / 4.0, -f64::MIN_POSITIVE];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for case in 0..200 {
            let kind = [KIND_FLOAT, KIND_DOUBLE, KIND_INT32, KIND_INT64][case % 4];
            let rows = [1, 31, 257, 1024][case / 4 % 4];
            let values: Vec<u64> = (0..rows)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Few distinct values, so ties are common.
                    let pick = x % if case % 3 == 0 { 3 } else { floats.len() as u64 };
                    match kind {
                        KIND_FLOAT => u64::from((floats[pick as usize] as f32).to_bits()),
                        KIND_DOUBLE => floats[pick as usize].to_bits(),
                        KIND_INT32 => u64::from((pick as i32 - 4) as u32),
                        _ => (pick as i64 - 4) as u64,
                    }
                })
                .collect();
            let one = |v: u64| (!is_nan_bits(kind, v)).then_some((v, v));
            let mut in_order = None;
            values.iter().for_each(|&v| fold_bits(kind, &mut in_order, one(v)));
            let mut lanes: Vec<Option<(u64, u64)>> = vec![None; THREADS];
            for (i, &v) in values.iter().enumerate() {
                fold_bits(kind, &mut lanes[i % THREADS], one(v));
            }
            for o in [16, 8, 4, 2, 1] {
                let before = lanes.clone();
                for (t, lane) in lanes.iter_mut().enumerate() {
                    fold_bits(kind, lane, before[t ^ o]);
                }
            }
            let mut tree = lanes[0];
            (1..THREADS / 32).for_each(|w| fold_bits(kind, &mut tree, lanes[32 * w]));
            assert_eq!(written(kind, tree), written(kind, in_order), "case {case}: {values:x?}");
        }
    }

    /// The run's records: tiles' places and counts, a page's layout, and the bytes around
    /// its levels, for a page with some nulls across three tiles.
    #[test]
    fn records_of_a_run() {
        let rows = 2 * TILE + 5;
        let values: Vec<u8> = (0..rows as i32).flat_map(|v| (v - 100).to_le_bytes()).collect();
        // Rows 0..10 null, then every third row null (and the bits past the rows set).
        let validity: Vec<u8> =
            (0..rows.div_ceil(8)).map(|b| (0..8).map(|k| u8::from(b * 8 + k >= 10 && !(b * 8 + k).is_multiple_of(3)) << k).sum()).collect();
        let arg = EncodeColumnArg { rows: rows as u64, kind: KIND_INT32, flags: COLUMN_NULLABLE, ..Default::default() };
        let job = plan_job(&[arg], &[one(0..rows)]).unwrap();
        let out = run_on_cpu(&job, &[HostColumn { values: &values, validity: Some(&validity) }]).unwrap();
        let valid = |r: usize| r >= 10 && !r.is_multiple_of(3);
        let counts: Vec<u32> = out.tiles.iter().map(|t| t.non_null).collect();
        let want: Vec<u32> =
            [0..TILE, TILE..2 * TILE, 2 * TILE..rows].iter().map(|r| r.clone().filter(|&i| valid(i)).count() as u32).collect();
        assert_eq!(counts, want);
        assert_eq!(out.tiles.iter().map(|t| t.at).collect::<Vec<_>>(), [0, want[0], want[0] + want[1]]);
        let p = &out.pages[0];
        let non_null: u32 = want.iter().sum();
        assert_eq!(p.non_null, non_null);
        assert_eq!(p.flags, HAS_MIN_MAX | PAGE_BIT_PACKED);
        // The smallest valid value is row 10's (-90), the largest the last valid row's.
        assert_eq!((p.min as u32 as i32, p.max as u32 as i32), (-90, (rows - 1 - usize::from(!valid(rows - 1))) as i32 - 100));
        let bytes = rows.div_ceil(8);
        let header = (bytes as u64) << 1 | 1;
        assert_eq!(p.levels_at as usize, 4 + crate::engine::encode_job::uleb_len(header));
        let body = out.body(0);
        assert_eq!(u32::from_le_bytes(body[..4].try_into().unwrap()) as usize, p.levels_at as usize - 4 + bytes);
        // The levels are the bitmap, its bits past the rows (set here) cleared.
        let mut levels = validity.clone();
        *levels.last_mut().unwrap() &= (1u8 << (rows % 8)) - 1;
        assert_ne!(levels, validity);
        assert_eq!(&body[p.levels_at as usize..p.values_at as usize], &levels[..]);
        assert_eq!(body.len(), p.values_at as usize + 4 * non_null as usize);
        let first = i32::from_le_bytes(body[p.values_at as usize..p.values_at as usize + 4].try_into().unwrap());
        assert_eq!(first, -90, "the first value is row 10's");
    }

    /// Host buffers shorter than the job's columns are errors, not reads past their ends.
    #[test]
    fn short_buffers_are_errors() {
        let arg = EncodeColumnArg { rows: 10, kind: KIND_DOUBLE, flags: COLUMN_NULLABLE, ..Default::default() };
        let job = plan_job(&[arg], &[one(0..10)]).unwrap();
        let v = [0u8; 80];
        assert!(run_on_cpu(&job, &[HostColumn { values: &v[..79], validity: None }]).is_err());
        assert!(run_on_cpu(&job, &[HostColumn { values: &v, validity: Some(&[0xff]) }]).is_err());
        assert!(run_on_cpu(&job, &[]).is_err());
        assert!(run_on_cpu(&job, &[HostColumn { values: &v, validity: Some(&[0xff, 3]) }]).is_ok());
    }
}

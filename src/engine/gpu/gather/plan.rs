//! The gather's plan, pure host work before any device call: the arguments checked, every
//! column's runs read as byte slices (values, validity bitmaps, byte views' data buffers)
//! and every piece of the call placed in one device buffer ([`Plan`]).
//!
//! Device layout, in this order, each piece at a multiple of [`ALIGN`]: the indices, the
//! error word, then per column its view rebase table (byte views whose buffer numbers
//! change), its values in, its bitmaps and run table (nullable columns), its values out and
//! its bitmap out (nullable columns).

use super::{device_width, is_view};
use crate::permutation::{Indices, Permutation};
use crate::{Error, Result};
use arrow::array::{Array, ArrayData, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::DataType;

/// Every device buffer the gather places starts at a multiple of this (vector accesses of
/// up to 16 bytes, and Arrow's alignment of every native type, hold with it).
pub(super) const ALIGN: usize = 256;

/// One column of the call: its runs' bytes and where its pieces lie on the device.
pub(super) struct ColumnPlan<'a> {
    pub(super) data_type: DataType,
    pub(super) width: usize,
    /// Per run, its values' bytes.
    pub(super) values: Vec<&'a [u8]>,
    /// Per run with nulls, the bytes of its bitmap covering its rows; empty without nulls.
    pub(super) bits: Vec<&'a [u8]>,
    /// The run table of cuda/gather.cu (starts, then bit positions), where nullable.
    pub(super) table: Vec<u64>,
    /// Byte views: every run's data buffers, in run order (the output's buffers).
    pub(super) data_buffers: Vec<Buffer>,
    /// Byte views whose buffer indices change: the rebase table of cuda/gather.cu (starts,
    /// then each run's first buffer number); empty otherwise.
    pub(super) view_table: Vec<u64>,
    pub(super) dev_view_table: usize,
    pub(super) dev_in: usize,
    pub(super) dev_bits: usize,
    pub(super) dev_table: usize,
    pub(super) dev_out: usize,
    pub(super) dev_out_bits: usize,
    /// Bytes of the pinned output: the values (padded to ALIGN), then the bitmap words.
    pub(super) out_values: usize,
    pub(super) out_bits: usize,
}

impl ColumnPlan<'_> {
    pub(super) fn nullable(&self) -> bool {
        !self.bits.is_empty()
    }
}

/// The whole call's plan: its columns, and the device buffer's layout.
pub(super) struct Plan<'a> {
    pub(super) perm: &'a Permutation,
    pub(super) columns: Vec<ColumnPlan<'a>>,
    /// Bytes of the device buffer.
    pub(super) bytes: usize,
    /// Offsets of the indices and of the error word the kernels set on an index past the
    /// input.
    pub(super) dev_idx: usize,
    pub(super) dev_error: usize,
    /// Input rows (every run's).
    pub(super) total: usize,
    /// u64 indices.
    pub(super) wide: bool,
}

/// Device byte offsets, each piece at a multiple of [`ALIGN`].
struct Layout(usize);

impl Layout {
    fn place(&mut self, bytes: usize) -> usize {
        let at = self.0;
        self.0 += bytes.max(1).next_multiple_of(ALIGN);
        at
    }
}

/// Bytes of a slice of u32/u64 indices.
pub(super) fn index_bytes(indices: &Indices) -> &[u8] {
    fn bytes<T>(v: &[T]) -> &[u8] {
        // SAFETY: plain integers (no padding); the view covers exactly `v`, borrowed for the
        // result's lifetime.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
    }
    match indices {
        Indices::U32(v) => bytes(v),
        Indices::U64(v) => bytes(v),
    }
}

/// Checks the call's arguments (see `gather_fixed_gpu`) and returns each column's type and
/// [`device_width`].
pub(super) fn check(runs: &[RecordBatch], perm: &Permutation, columns: &[usize]) -> Result<Vec<(DataType, usize)>> {
    let Some(first) = runs.first() else {
        return Err(Error::InvalidArgument("gather_fixed_gpu: no runs (the columns' types are unknown)".into()));
    };
    if perm.run_offsets.len() != runs.len() + 1 {
        return Err(Error::InvalidArgument(format!(
            "gather_fixed_gpu: the permutation is of {} runs, {} were given",
            perm.run_offsets.len().saturating_sub(1),
            runs.len()
        )));
    }
    for (r, b) in runs.iter().enumerate() {
        if perm.run_offsets[r + 1].checked_sub(perm.run_offsets[r]) != Some(b.num_rows()) {
            return Err(Error::InvalidArgument(format!(
                "gather_fixed_gpu: run {r} has {} rows, the permutation's run offsets say {}",
                b.num_rows(),
                perm.run_offsets[r + 1] as i128 - perm.run_offsets[r] as i128
            )));
        }
    }
    let mut types = Vec::with_capacity(columns.len());
    for &c in columns {
        if c >= first.num_columns() {
            return Err(Error::InvalidArgument(format!("gather_fixed_gpu: column {c} does not exist ({} columns)", first.num_columns())));
        }
        let t = first.column(c).data_type().clone();
        let Some(width) = device_width(&t) else {
            return Err(Error::UnsupportedType { column: first.schema().field(c).name().clone(), data_type: t });
        };
        for (r, b) in runs.iter().enumerate() {
            if c >= b.num_columns() || b.column(c).data_type() != &t {
                return Err(Error::SchemaMismatch { run: r, detail: format!("column {c} is not {t} as in run 0") });
            }
        }
        types.push((t, width));
    }
    Ok(types)
}

/// The plan of gathering `perm.len()` (> 0) rows of the columns `columns` of types `types`
/// (from [`check`]), whose runs' data are `datas[column][run]` and arrays
/// `arrays[column][run]`.
pub(super) fn plan<'a>(
    perm: &'a Permutation,
    columns: &[usize],
    types: &[(DataType, usize)],
    datas: &'a [Vec<ArrayData>],
    arrays: &[Vec<&'a dyn Array>],
) -> Result<Plan<'a>> {
    let n = perm.len();
    let total = *perm.run_offsets.last().unwrap_or(&0);
    let wide = matches!(perm.indices, Indices::U64(_));
    let ib = if wide { 8 } else { 4 };
    let mut layout = Layout(0);
    let dev_idx = layout.place(n * ib);
    let dev_error = layout.place(4);
    let mut plans = Vec::with_capacity(columns.len());
    for (ci, (t, width)) in types.iter().enumerate() {
        plans.push(plan_column(&mut layout, perm, columns[ci], t, *width, &datas[ci], &arrays[ci])?);
    }
    Ok(Plan { perm, columns: plans, bytes: layout.0, dev_idx, dev_error, total, wide })
}

/// Column `column` (of type `t`, `width` bytes a row) of the runs `datas` / `arrays`, its
/// pieces placed in `layout`.
fn plan_column<'a>(
    layout: &mut Layout,
    perm: &Permutation,
    column: usize,
    t: &DataType,
    width: usize,
    datas: &'a [ArrayData],
    arrays: &[&'a dyn Array],
) -> Result<ColumnPlan<'a>> {
    let n = perm.len();
    let total = *perm.run_offsets.last().unwrap_or(&0);
    let words = n.div_ceil(32);
    let values = run_values(datas, width, column)?;
    let nullable = arrays.iter().any(|a| a.null_count() > 0);
    let (bits, table) = if nullable { run_bitmaps(arrays, perm)? } else { (Vec::new(), Vec::new()) };
    let (data_buffers, view_table) = if is_view(t) { view_buffers(datas, perm, column)? } else { (Vec::new(), Vec::new()) };
    let bits_len: usize = bits.iter().map(|b| b.len()).sum();
    let dev_view_table = if view_table.is_empty() { 0 } else { layout.place(view_table.len() * 8) };
    let dev_in = layout.place(total * width);
    let (dev_bits, dev_table) = if nullable { (layout.place(bits_len), layout.place(table.len() * 8)) } else { (0, 0) };
    let dev_out = layout.place(n * width);
    let dev_out_bits = if nullable { layout.place(words * 4) } else { 0 };
    Ok(ColumnPlan {
        data_type: t.clone(),
        width,
        values,
        bits,
        table,
        data_buffers,
        view_table,
        dev_view_table,
        dev_in,
        dev_bits,
        dev_table,
        dev_out,
        dev_out_bits,
        out_values: (n * width).next_multiple_of(ALIGN),
        out_bits: if nullable { words * 4 } else { 0 },
    })
}

/// Per run, the bytes of its values (`width` a row).
fn run_values(datas: &[ArrayData], width: usize, column: usize) -> Result<Vec<&[u8]>> {
    let mut values = Vec::with_capacity(datas.len());
    for (r, d) in datas.iter().enumerate() {
        let (off, len) = (d.offset(), d.len());
        let bytes = d.buffers().first().map(|b| b.as_slice()).unwrap_or(&[]);
        let range = off * width..(off + len) * width;
        let Some(v) = bytes.get(range) else {
            return Err(Error::InvalidArgument(format!("gather_fixed_gpu: run {r}, column {column}: values buffer too short")));
        };
        values.push(v);
    }
    Ok(values)
}

/// A nullable column's bitmaps (per run with nulls, the bytes covering its rows) and run
/// table (the runs' starts, then per run its first bit in the concatenated bitmaps, or
/// `u64::MAX` for a run without nulls).
fn run_bitmaps<'a>(arrays: &[&'a dyn Array], perm: &Permutation) -> Result<(Vec<&'a [u8]>, Vec<u64>)> {
    let (mut bits, mut table) = (Vec::new(), Vec::new());
    table.extend(perm.run_offsets.iter().map(|&o| o as u64));
    let mut at = 0u64; // byte position in the concatenated bitmaps
    for a in arrays {
        match a.nulls().filter(|nb| nb.null_count() > 0) {
            Some(nb) => {
                let (off, len) = (nb.offset(), nb.len());
                let bytes = nb.buffer().as_slice();
                let Some(b) = bytes.get(off / 8..(off + len).div_ceil(8)) else {
                    return Err(Error::InvalidArgument("gather_fixed_gpu: validity buffer too short".into()));
                };
                table.push(at * 8 + (off % 8) as u64);
                at += b.len() as u64;
                bits.push(b);
            }
            None => table.push(u64::MAX),
        }
    }
    Ok((bits, table))
}

/// A byte view column's output data buffers (every run's, in run order) and its rebase
/// table (empty where no run's buffer numbers change).
fn view_buffers(datas: &[ArrayData], perm: &Permutation, column: usize) -> Result<(Vec<Buffer>, Vec<u64>)> {
    let (mut data_buffers, mut view_table) = (Vec::new(), Vec::new());
    // Run r's buffer i is the output's buffer bases[r] + i.
    let mut bases = Vec::with_capacity(datas.len());
    for d in datas {
        bases.push(data_buffers.len() as u64);
        data_buffers.extend(d.buffers().iter().skip(1).cloned());
    }
    if data_buffers.len() > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!("gather_fixed_gpu: column {column}: more than 2^32 data buffers")));
    }
    if bases.iter().any(|&b| b > 0) {
        view_table.extend(perm.run_offsets.iter().map(|&o| o as u64));
        view_table.extend(bases);
    }
    Ok((data_buffers, view_table))
}

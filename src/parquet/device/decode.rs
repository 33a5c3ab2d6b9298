//! Column chunks decoded: on the CPU by the kernels' reference ([`decode_on_cpu`]), or on
//! the device ([`decode_on_device`]: stage 1's decompression, then `cuda/parquet_decode.cu`
//! over its output). Both take the chunk's [`DecodePlan`] ([`plan_chunk`]) and give the
//! same [`DecodedChunk`]; a fault is an error naming the file, row group, column and page.
//!
//! The device layout ([`layout`], pure): one output buffer, each chunk's values
//! (`rows * out_width` bytes, 16-byte aligned), then its validity bitmap where nullable
//! (`rows` bits in whole 4-byte words, aligned too); one `DecodePageArg` per data page,
//! pointing at its body and its dictionary's in stage 1's buffer (its `PageOut`s).

use super::decode_cpu::{decode_chunk, DecodedChunk};
use super::decode_fault::Fault;
use super::decode_plan::{plan, DecodePlan, Levels, Planned, Values, Widen};
use super::decompress::{self, decompress_on_cpu, ColumnChunk, PageOut};
use super::page_table::PageKind;
use crate::engine::decode_job::{self as job, DecodeJob, DecodePageArg};
use crate::error::{Error, Result};
use arrow::datatypes::DataType;

fn place(c: &ColumnChunk<'_>, page: usize) -> String {
    format!("row group {}, column {}, page {page}", c.row_group, c.meta.column_path().string())
}

fn fault_error(c: &ColumnChunk<'_>, page: usize, fault: Fault, on: &str) -> Error {
    Error::File { path: c.file.clone(), detail: format!("{}: decoding it {on}: {fault}", place(c, page)) }
}

/// The decode plan of `c`, whose Arrow type parquet-rs gives as `data_type`
/// (`decode_plan::arrow_types`). A table that contradicts the column is an error naming
/// the chunk.
pub(crate) fn plan_chunk(c: &ColumnChunk<'_>, data_type: Option<&DataType>) -> Result<Planned> {
    plan(&c.table, c.meta.column_descr(), data_type).map_err(|detail| Error::File {
        path: c.file.clone(),
        detail: format!("row group {}, column {}, {detail}", c.row_group, c.meta.column_path().string()),
    })
}

/// `c` decoded on the CPU: its pages decompressed by parquet-rs, then the kernels' reference.
pub(crate) fn decode_on_cpu(c: &ColumnChunk<'_>, plan: &DecodePlan) -> Result<DecodedChunk> {
    let bodies = decompress_on_cpu(c)?;
    // decompress_on_cpu gives the dictionary and data pages, in table order.
    let mut by_page: Vec<Option<&[u8]>> = vec![None; c.table.pages.len()];
    let mut next = bodies.iter();
    for (i, p) in c.table.pages.iter().enumerate() {
        if p.kind != PageKind::Index {
            by_page[i] = next.next().map(|b| &b[..]);
        }
    }
    decode_chunk(plan, &by_page).map_err(|(page, fault)| fault_error(c, page, fault, "on the CPU"))
}

/// Where one chunk's output lies in the device's output buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkOut {
    pub values: usize,
    pub values_len: usize,
    /// The validity words' offset (`None`: not nullable).
    pub validity: Option<usize>,
    pub rows: usize,
}

fn align16(v: usize) -> usize {
    v.div_ceil(16) * 16
}

/// The device job of `plans` (one per chunk), whose pages stage 1 put at `pages` (per
/// chunk, per page of its table: `decompress::Plan::pages`). Pure.
pub(crate) fn layout(plans: &[&DecodePlan], pages: &[Vec<PageOut>]) -> Result<(DecodeJob, Vec<ChunkOut>)> {
    let mut out = 0usize;
    let mut args = Vec::new();
    let mut chunks = Vec::with_capacity(plans.len());
    let too_big = |what: &str| Error::Internal(format!("a decode layout: {what} over 32 bits"));
    for (plan, outs) in plans.iter().zip(pages) {
        let rows = usize::try_from(plan.rows).map_err(|_| too_big("rows"))?;
        let values = align16(out);
        let values_len = rows * plan.out_width;
        out = values + values_len;
        let validity = plan.nullable.then(|| {
            let at = align16(out);
            out = at + rows.div_ceil(32) * 4;
            at
        });
        let (dict, dict_len, dict_entries) = match plan.dictionary {
            Some(d) => {
                let o =
                    outs.get(d.page).ok_or_else(|| Error::Internal("a decode layout: a dictionary page stage 1 did not place".into()))?;
                (o.offset as u64, u32::try_from(o.len).map_err(|_| too_big("a dictionary page"))?, d.entries)
            }
            None => (0, 0, 0),
        };
        for p in &plan.pages {
            let o = outs.get(p.page).ok_or_else(|| Error::Internal("a decode layout: a data page stage 1 did not place".into()))?;
            let (levels, levels_at, levels_len) = match p.levels {
                Levels::None => (job::LEVELS_NONE, 0, 0),
                Levels::Prefixed => (job::LEVELS_PREFIXED, 0, 0),
                Levels::Stated { at, len } => (job::LEVELS_STATED, at, len),
            };
            let mut flags = levels;
            if p.encoding == Values::Dictionary {
                flags |= job::FLAG_DICTIONARY;
            }
            if plan.widen == Widen::SignExtend16 {
                flags |= job::FLAG_SIGN_EXTEND;
            }
            let u32_of = |v: usize| u32::try_from(v).map_err(|_| too_big("a page"));
            args.push(DecodePageArg {
                body: o.offset as u64,
                dict,
                out_values: values as u64,
                out_valid: validity.map_or(job::NO_VALIDITY, |v| v as u64),
                first_row: p.first_row,
                chunk_rows: plan.rows,
                body_len: u32_of(o.len)?,
                dict_len,
                dict_entries,
                num_values: p.values,
                levels_at: u32_of(levels_at)?,
                levels_len: u32_of(levels_len)?,
                values_at: u32_of(p.values_at)?,
                nulls: p.nulls.unwrap_or(job::NULLS_UNCHECKED),
                flags,
                widths: plan.physical.bytes() as u32 | (plan.out_width as u32) << 8,
            });
        }
        chunks.push(ChunkOut { values, values_len, validity, rows });
    }
    Ok((DecodeJob { pages: args, output_len: out }, chunks))
}

/// Chunks decoded on the device, with the device's output still there.
pub(crate) struct DeviceDecoded {
    pub output: crate::engine::device::DecodedOnDevice,
    pub chunks: Vec<ChunkOut>,
    /// Wall times: stage 1's call (decompression), then the decode launch.
    pub decompress: std::time::Duration,
    pub decode: std::time::Duration,
}

impl DeviceDecoded {
    /// Every chunk's buffers downloaded, in Arrow's layout.
    pub fn to_host(&self) -> Result<Vec<DecodedChunk>> {
        let out = self.output.to_host()?;
        Ok(self
            .chunks
            .iter()
            .map(|c| DecodedChunk {
                rows: c.rows,
                values: out[c.values..c.values + c.values_len].to_vec(),
                validity: c.validity.map(|v| out[v..v + c.rows.div_ceil(8)].to_vec()),
            })
            .collect())
    }
}

/// `chunks` (every one covered: `plans[i]` is chunk `i`'s) decompressed and decoded on CUDA
/// device `device`. The first page with a fault is an error naming it (with the count of
/// other faulty pages). Call it off rayon's workers.
pub(crate) fn decode_on_device(device: usize, chunks: &[ColumnChunk<'_>], plans: &[&DecodePlan]) -> Result<DeviceDecoded> {
    if chunks.len() != plans.len() {
        return Err(Error::Internal("decode_on_device: one plan a chunk".into()));
    }
    let done = decompress::run(device, chunks)?;
    let (job, outs) = layout(plans, &done.pages)?;
    let t = std::time::Instant::now();
    let decoded = crate::engine::device::decode_on_device(device, &done.output, &job)?;
    let decode = t.elapsed();
    let faulty: Vec<usize> = (0..decoded.faults.len()).filter(|&i| decoded.faults[i] != 0).collect();
    if let Some(&first) = faulty.first() {
        // Which chunk and page: the job lists the plans' pages in order.
        let mut k = first;
        let (ci, page) = plans
            .iter()
            .enumerate()
            .find_map(|(ci, p)| {
                if k < p.pages.len() {
                    Some((ci, p.pages[k].page))
                } else {
                    k -= p.pages.len();
                    None
                }
            })
            .ok_or_else(|| Error::Internal("a decode fault of no page".into()))?;
        let code = decoded.faults[first];
        let more = match faulty.len() - 1 {
            0 => String::new(),
            n => format!(" ({n} more page{} failed)", if n == 1 { "" } else { "s" }),
        };
        let c = &chunks[ci];
        return Err(match Fault::from_code(code) {
            Some(f) => Error::File { path: c.file.clone(), detail: format!("{}: decoding it on the device: {f}{more}", place(c, page)) },
            None => Error::Internal(format!("{}: the decode kernel wrote fault code {code}{more}", place(c, page))),
        });
    }
    Ok(DeviceDecoded { output: decoded, chunks: outs, decompress: done.wall, decode })
}

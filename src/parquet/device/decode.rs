//! Column chunks decoded: on the CPU by the kernels' reference ([`decode_on_cpu`]), or on
//! the device ([`decode_on_device`]: stage 1's decompression, then `cuda/parquet_decode.cu`
//! over its output). Both take the chunk's [`DecodePlan`] ([`plan_chunk`]) and give the
//! same [`DecodedChunk`]; a fault is an error naming the file, row group, column and page.
//!
//! The device layout ([`layout`], pure): one output buffer, each chunk's values
//! (`rows * out_width` bytes, 16-byte aligned), then its validity bitmap where nullable
//! (`rows` bits in whole 4-byte words, aligned too); one `DecodePageArg` per data page,
//! pointing at its body and its dictionary's in stage 1's buffer (its `PageOut`s).
//!
//! A byte array chunk's part of the output: its rows' slots (16 bytes a row, the pages'
//! "values"), its validity, its `rows + 1` offsets (4 or 8 bytes each), its dictionary's
//! slots; one `BytesDictArg` for its dictionary page and one `BytesChunkArg` for the scan
//! and the copy. Its value bytes go to a second buffer the launch sizes from the scan.

use super::decode_cpu::{decode_chunk, DecodedChunk, CHUNK};
use super::decode_fault::Fault;
use super::decode_plan::{plan, DecodePlan, Levels, Physical, Planned, Values, Widen};
use super::decompress::{self, decompress_on_cpu, ColumnChunk, PageOut};
use super::page_table::PageKind;
use crate::engine::decode_job::{self as job, BytesChunkArg, BytesDictArg, DecodeJob, DecodePageArg};
use crate::error::{Error, Result};
use arrow::datatypes::DataType;

/// Where a fault is: a page of the chunk, or the chunk itself ([`CHUNK`]: a byte array
/// chunk's offsets or values).
fn place(c: &ColumnChunk<'_>, page: usize) -> String {
    let at = format!("row group {}, column {}", c.row_group, c.meta.column_path().string());
    if page == CHUNK {
        at
    } else {
        format!("{at}, page {page}")
    }
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
    /// The values (a byte array chunk's offsets).
    pub values: usize,
    pub values_len: usize,
    /// The validity words' offset (`None`: not nullable).
    pub validity: Option<usize>,
    pub rows: usize,
    /// A byte array chunk's index among the job's `byte_chunks` (its values buffer's span).
    pub bytes: Option<usize>,
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
    let mut dicts = Vec::new();
    let mut byte_chunks = Vec::new();
    for (plan, outs) in plans.iter().zip(pages) {
        let rows = usize::try_from(plan.rows).map_err(|_| too_big("rows"))?;
        let bytes = plan.physical == Physical::ByteArray;
        // What the pages write: values, or a byte array chunk's slots.
        let page_width = if bytes { 16 } else { plan.out_width };
        let values = align16(out);
        out = values + rows * page_width;
        let validity = plan.nullable.then(|| {
            let at = align16(out);
            out = at + rows.div_ceil(32) * 4;
            at
        });
        let (dict, dict_len, dict_entries) = match plan.dictionary {
            Some(d) => {
                let o =
                    outs.get(d.page).ok_or_else(|| Error::Internal("a decode layout: a dictionary page stage 1 did not place".into()))?;
                let len = u32::try_from(o.len).map_err(|_| too_big("a dictionary page"))?;
                (o.offset as u64, len, d.entries)
            }
            None => (0, 0, 0),
        };
        let mut chunk = ChunkOut { values, values_len: rows * plan.out_width, validity, rows, bytes: None };
        // A byte array chunk: its offsets and its dictionary's slots; the pages' `dict` is
        // the slot table.
        let dict = if bytes {
            let offsets = align16(out);
            out = offsets + (rows + 1) * plan.out_width;
            let dict_slots = align16(out);
            out = dict_slots + dict_entries as usize * 16;
            if plan.dictionary.is_some() {
                dicts.push(BytesDictArg { body: dict, slots: dict_slots as u64, body_len: dict_len, entries: dict_entries });
            }
            byte_chunks.push(BytesChunkArg {
                slots: values as u64,
                offsets: offsets as u64,
                values: 0,
                rows: plan.rows,
                total: 0,
                offset_width: plan.out_width as u32,
                utf8: u32::from(plan.utf8),
            });
            chunk = ChunkOut { values: offsets, values_len: (rows + 1) * plan.out_width, bytes: Some(byte_chunks.len() - 1), ..chunk };
            dict_slots as u64
        } else {
            dict
        };
        for p in &plan.pages {
            let o = outs.get(p.page).ok_or_else(|| Error::Internal("a decode layout: a data page stage 1 did not place".into()))?;
            let (levels, levels_at, levels_len) = match p.levels {
                Levels::None => (job::LEVELS_NONE, 0, 0),
                Levels::Prefixed => (job::LEVELS_PREFIXED, 0, 0),
                Levels::Stated { at, len } => (job::LEVELS_STATED, at, len),
            };
            let mut flags = levels;
            match p.encoding {
                Values::Plain => {}
                Values::Dictionary => flags |= job::FLAG_DICTIONARY,
                Values::Delta => flags |= job::FLAG_DELTA,
            }
            match plan.widen {
                Widen::Copy => {}
                Widen::SignExtend16 => flags |= job::FLAG_SIGN_EXTEND,
                Widen::BigEndian16 => flags |= job::FLAG_BIG_ENDIAN,
            }
            if bytes {
                flags |= job::FLAG_BYTES;
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
                dict_len: if bytes { 0 } else { dict_len },
                dict_entries,
                num_values: p.values,
                levels_at: u32_of(levels_at)?,
                levels_len: u32_of(levels_len)?,
                values_at: u32_of(p.values_at)?,
                nulls: p.nulls.unwrap_or(job::NULLS_UNCHECKED),
                flags,
                widths: if bytes { 16 << 8 } else { plan.physical.bytes() as u32 | (plan.out_width as u32) << 8 },
            });
        }
        chunks.push(chunk);
    }
    Ok((DecodeJob { pages: args, output_len: out, dicts, byte_chunks }, chunks))
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
        let data = if self.chunks.iter().any(|c| c.bytes.is_some()) { self.output.data_to_host()? } else { Vec::new() };
        self.chunks
            .iter()
            .map(|c| {
                let data = match c.bytes {
                    Some(k) => {
                        let &(at, n) = self.output.data_spans.get(k).ok_or_else(|| Error::Internal("a byte array chunk's span".into()))?;
                        Some(data[at..at + n].to_vec())
                    }
                    None => None,
                };
                Ok(DecodedChunk {
                    rows: c.rows,
                    values: out[c.values..c.values + c.values_len].to_vec(),
                    validity: c.validity.map(|v| out[v..v + c.rows.div_ceil(8)].to_vec()),
                    data,
                })
            })
            .collect()
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
    // Every fault as (chunk, page, code): the dictionaries' first (they run first), then
    // the pages' (the job lists the plans' pages in order), then the byte array chunks'.
    let mut faulty: Vec<(usize, usize, u32)> = Vec::new();
    let bytes_chunks: Vec<usize> = (0..plans.len()).filter(|&i| plans[i].physical == Physical::ByteArray).collect();
    let dict_chunks: Vec<usize> = bytes_chunks.iter().copied().filter(|&i| plans[i].dictionary.is_some()).collect();
    for (k, &code) in decoded.dict_faults.iter().enumerate() {
        if code != 0 {
            let ci = *dict_chunks.get(k).ok_or_else(|| Error::Internal("a decode fault of no dictionary".into()))?;
            faulty.push((ci, plans[ci].dictionary.map_or(CHUNK, |d| d.page), code));
        }
    }
    let page_of: Vec<(usize, usize)> = plans.iter().enumerate().flat_map(|(ci, p)| p.pages.iter().map(move |d| (ci, d.page))).collect();
    for (k, &code) in decoded.faults.iter().enumerate() {
        if code != 0 {
            let &(ci, page) = page_of.get(k).ok_or_else(|| Error::Internal("a decode fault of no page".into()))?;
            faulty.push((ci, page, code));
        }
    }
    for (k, &code) in decoded.chunk_faults.iter().enumerate() {
        if code != 0 {
            let ci = *bytes_chunks.get(k).ok_or_else(|| Error::Internal("a decode fault of no chunk".into()))?;
            faulty.push((ci, CHUNK, code));
        }
    }
    if let Some(&(ci, page, code)) = faulty.first() {
        let more = match faulty.len() - 1 {
            0 => String::new(),
            n => format!(" ({n} more failed)"),
        };
        let c = &chunks[ci];
        return Err(match Fault::from_code(code) {
            Some(f) => Error::File { path: c.file.clone(), detail: format!("{}: decoding it on the device: {f}{more}", place(c, page)) },
            None => Error::Internal(format!("{}: the decode kernel wrote fault code {code}{more}", place(c, page))),
        });
    }
    Ok(DeviceDecoded { output: decoded, chunks: outs, decompress: done.wall, decode })
}

//! Sorted Parquet files merged with their columns decoded, keyed, merged and gathered on the
//! device (issue 69, stage 3): the first device-resident round.
//!
//! The flow, for sorted files (each one run, its row groups in order):
//!
//! 1. every column chunk of every row group is read and its page table made; each leaf
//!    column is *on the device* where stage 2 covers it in every chunk, else read by
//!    parquet-rs's arrow reader;
//! 2. the device columns' chunks are decompressed and decoded in one job
//!    ([`super::decode::decode_on_device`]);
//! 3. the key layout is planned from the sort columns' types and whether any chunk may hold
//!    a null (its statistics' null count, else its being OPTIONAL), and each row group's key
//!    program points at its decoded sort columns; a payload column's chunks (fixed-width
//!    values, or a byte array's offsets and values) are the segments' columns of one
//!    [`ResidentJob`] (`engine/resident_job.rs`), which the device keys, merges and gathers;
//! 4. the columns parquet-rs read are gathered on the CPU in the permutation the device
//!    merged.
//!
//! What this round declines (the caller merges on the CPU, as today), with the reason:
//! a sort column the device does not decode or key (a byte column, a type stage 2 does not
//! decode), a key past 256 bits or not exact, nested columns, files whose schemas differ;
//! and, after the merge, a sort column holding a null that its chunks' statistics denied
//! (the key left out its null bit, so the order is not used).
//! The output equals the CPU merge of the same files: the tests hold it to
//! [`crate::merge`] on every covered type, direction and null share.
//!
//! Not yet: the output's encoding on the device (stage 4): the gathered columns come down as
//! Arrow buffers; streaming rounds for inputs larger than the device (the whole input is one
//! round here); `corank merge` reading through this path.

// Its callers are the tests and the device path under construction (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use super::decode::{decode_on_device, plan_chunk};
use super::decode_plan::{arrow_types, DecodePlan, Physical, Planned};
use super::decompress::ColumnChunk;
use super::{chunk_bytes, page_table_of};
use crate::engine::key_job::{key_program, KeyFieldArg};
use crate::engine::resident_job::{gathers, ResidentJob, Segment, SegmentBytes, SegmentColumn};
use crate::error::{Error, Result};
use crate::keys::{plan_layout_of, ColumnSummary};
use crate::options::{Engine, EngineOptions};
use crate::permutation::Permutation;
use crate::sort_key::SortKey;
use arrow::array::{make_array, Array, ArrayData, ArrayRef, RecordBatch};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A round's result, or why the device does not take it.
#[derive(Debug)]
pub(crate) enum RoundOutcome {
    Merged(DeviceRound),
    Declined(String),
}

/// The merged rows and where each column was worked on.
#[derive(Debug)]
pub(crate) struct DeviceRound {
    pub batch: RecordBatch,
    /// Columns decoded, merged and gathered on the device.
    pub gathered_on_device: Vec<String>,
    /// Columns read by parquet-rs and gathered on the CPU.
    pub on_cpu: Vec<String>,
    pub timings: RoundTimings,
}

/// Wall times of a round's steps.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RoundTimings {
    /// Footers, chunk bytes and page tables read; plans made.
    pub read: Duration,
    /// Stage 1's call (decompression) and the decode launch.
    pub decompress: Duration,
    pub decode: Duration,
    /// Keys encoded, merged, gathered on the device (the gathered columns downloaded).
    pub keys: Duration,
    pub merge: Duration,
    pub gather: Duration,
    /// The Arrow arrays built from the device's buffers, and the columns parquet-rs reads
    /// gathered on the CPU.
    pub cpu_columns: Duration,
}

/// One file: its path and footer.
struct Input {
    path: PathBuf,
    meta: ParquetMetaData,
}

fn open(path: &Path) -> Result<(std::fs::File, ParquetMetaData)> {
    let file = std::fs::File::open(path).map_err(|e| Error::Io { path: Some(path.into()), context: "opening".into(), source: e })?;
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .map_err(|e| Error::File { path: path.into(), detail: format!("reading its footer: {e}") })?;
    Ok((file, meta))
}

/// Merges `files` (each sorted by `keys`, one run each, in this order) on CUDA device
/// `device`, or declines (see the module doc). Call it off rayon's workers.
pub(crate) fn merge_files_on_device(device: usize, files: &[PathBuf], keys: &[SortKey], options: &EngineOptions) -> Result<RoundOutcome> {
    let t = Instant::now();
    if files.is_empty() || keys.is_empty() {
        return Ok(RoundOutcome::Declined("no files or no sort key".into()));
    }
    let mut inputs = Vec::with_capacity(files.len());
    let mut handles = Vec::with_capacity(files.len());
    for path in files {
        let (file, meta) = open(path)?;
        handles.push(file);
        inputs.push(Input { path: path.clone(), meta });
    }
    let schema = arrow_schema(&inputs[0])?;
    for input in &inputs[1..] {
        if arrow_schema(input)?.fields() != schema.fields() {
            return Ok(RoundOutcome::Declined(format!("{} has another schema than {}", input.path.display(), files[0].display())));
        }
    }
    let descr = inputs[0].meta.file_metadata().schema_descr();
    let ncols = descr.num_columns();
    if ncols != schema.fields().len() || (0..ncols).any(|c| descr.column(c).max_rep_level() > 0 || descr.column(c).max_def_level() > 1) {
        return Ok(RoundOutcome::Declined("nested columns".into()));
    }
    let types = arrow_types(descr, inputs[0].meta.file_metadata().key_value_metadata());
    let sort_cols: Vec<usize> = match keys.iter().map(|k| schema.index_of(&k.column)).collect::<std::result::Result<_, _>>() {
        Ok(v) => v,
        Err(e) => return Err(Error::InvalidArgument(format!("a sort column: {e}"))),
    };

    // Every chunk, row group by row group, column by column (read and planned on every
    // core: a file of many row groups is many small reads); a column is on the device where
    // every chunk of it is covered.
    let places: Vec<(usize, usize, usize)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(f, input)| {
            input.meta.row_groups().iter().enumerate().flat_map(move |(g, rg)| (0..rg.columns().len()).map(move |c| (f, g, c)))
        })
        .collect();
    let read: Vec<(ColumnChunk<'_>, Option<DecodePlan>)> = places
        .par_iter()
        .map(|&(f, g, c)| {
            let (input, file) = (&inputs[f], &handles[f]);
            let rg = input.meta.row_group(g);
            let meta = rg.column(c);
            let bytes = chunk_bytes(file, &input.path, meta)?;
            let table = page_table_of(&input.path, g, meta, &bytes)?;
            let chunk = ColumnChunk {
                file: input.path.clone(),
                row_group: g,
                rows: rg.num_rows() as usize,
                meta,
                bytes: Bytes::from(bytes),
                table,
            };
            let plan = match plan_chunk(&chunk, types[c].as_ref())? {
                Planned::Covered(p) => Some(p),
                Planned::NotCovered(_) => None,
            };
            Ok((chunk, plan))
        })
        .collect::<Result<_>>()?;
    let (chunks, plans): (Vec<ColumnChunk<'_>>, Vec<Option<DecodePlan>>) = read.into_iter().unzip();
    let on_device: Vec<bool> = (0..ncols).map(|c| plans.iter().skip(c).step_by(ncols).all(Option::is_some)).collect();
    // Stage 2's fixed-width outputs are 4 to 255 bytes a value: all within what the gather copies.
    let fixed = |c: usize| plans[c].as_ref().is_some_and(|p| p.physical != Physical::ByteArray && gathers(p.out_width));
    let name = |c: usize| schema.field(c).name().clone();
    if let Some(&c) = sort_cols.iter().find(|&&c| !on_device[c] || !fixed(c)) {
        return Ok(RoundOutcome::Declined(format!("sort column {} is not decoded into fixed-width values on the device", name(c))));
    }

    // The key layout, from the sort columns' types and whether any chunk may hold a null.
    let summaries: Vec<ColumnSummary> = sort_cols
        .iter()
        .map(|&c| ColumnSummary {
            data_type: schema.field(c).data_type().clone(),
            nulls: chunks.iter().zip(&plans).skip(c).step_by(ncols).any(|(k, p)| may_hold_nulls(k, p.as_ref())),
            longest: 0,
        })
        .collect();
    let layout = plan_layout_of(&summaries, keys)?;
    let key_types: Vec<_> = summaries.iter().map(|s| s.data_type.clone()).collect();
    let program = match key_program(&layout, &key_types) {
        Some(p) if layout.exact => p,
        _ => return Ok(RoundOutcome::Declined(format!("a key of {} bits the device does not encode exactly", layout.bits))),
    };

    // Decode the device columns' chunks in one job.
    let device_chunks: Vec<usize> = (0..chunks.len()).filter(|&i| on_device[i % ncols]).collect();
    let job_chunks: Vec<ColumnChunk<'_>> = device_chunks.iter().map(|&i| chunks[i].clone_chunk()).collect();
    let job_plans: Vec<&DecodePlan> = device_chunks.iter().map(|&i| plans[i].as_ref().expect("on the device")).collect();
    let read = t.elapsed();
    let decoded = decode_on_device(device, &job_chunks, &job_plans)?;
    drop(job_chunks);
    let slot_of = |i: usize| device_chunks.binary_search(&i).expect("a device chunk");

    // The resident job: a segment a row group, a run a file.
    let base = decoded.output.ptr();
    // A chunk of empty values only has no values buffer: its address is never read.
    let data_base = decoded.output.data_ptr().unwrap_or(base);
    let payload: Vec<usize> = (0..ncols).filter(|&c| on_device[c] && fixed(c)).collect();
    let byte_cols: Vec<usize> =
        (0..ncols).filter(|&c| on_device[c] && plans[c].as_ref().is_some_and(|p| p.physical == Physical::ByteArray)).collect();
    let mut segments = Vec::new();
    let mut runs = vec![0];
    let mut k = 0; // the first chunk of the row group
    for input in &inputs {
        for rg in input.meta.row_groups() {
            let at = |c: usize| decoded.chunks[slot_of(k + c)];
            let keys: Vec<KeyFieldArg> = layout
                .fields
                .iter()
                .zip(&program)
                .map(|(f, d)| {
                    let out = at(sort_cols[f.column]);
                    let validity = if f.null_bit { out.validity.map_or(0, |v| base + v as u64) } else { 0 };
                    KeyFieldArg { values: base + out.values as u64, validity, ..*d }
                })
                .collect();
            let columns = payload
                .iter()
                .map(|&c| {
                    let out = at(c);
                    SegmentColumn { values: base + out.values as u64, validity: out.validity.map(|v| base + v as u64) }
                })
                .collect();
            let bytes = byte_cols
                .iter()
                .map(|&c| {
                    let out = at(c);
                    let k = out.bytes.ok_or_else(|| Error::Internal("a byte array chunk without its values".into()))?;
                    let &(values, _) =
                        decoded.output.data_spans.get(k).ok_or_else(|| Error::Internal("a byte array chunk's span".into()))?;
                    Ok(SegmentBytes {
                        offsets: base + out.values as u64,
                        values: data_base + values as u64,
                        validity: out.validity.map(|v| base + v as u64),
                    })
                })
                .collect::<Result<_>>()?;
            segments.push(Segment { rows: rg.num_rows() as usize, keys, columns, bytes });
            k += ncols;
        }
        runs.push(segments.len());
    }
    let job = ResidentJob {
        device,
        segments,
        runs,
        bits: layout.bits,
        widths: payload.iter().map(|&c| plans[c].as_ref().expect("on the device").out_width).collect(),
        offset_widths: byte_cols.iter().map(|&c| plans[c].as_ref().expect("on the device").out_width as u32).collect(),
    };
    let merged = crate::engine::device::merge_resident(&job, options)?;
    let n = job.rows();
    // A key laid out without a null bit trusted the chunks' statistics (a null count of 0);
    // a sort column that holds a null anyway was keyed wrong: this round's order is not to
    // be used (the caller merges on the CPU, which reads the nulls themselves).
    for (summary, &c) in summaries.iter().zip(&sort_cols) {
        let p = payload.iter().position(|&x| x == c).expect("a sort column is a payload column");
        if let (false, Some(bits)) = (summary.nulls, &merged.columns[p].1) {
            if BooleanBuffer::new(Buffer::from(bits.as_slice()), 0, n).count_set_bits() != n {
                return Ok(RoundOutcome::Declined(format!(
                    "sort column {} holds nulls its files' statistics deny (a null count of 0)",
                    name(c)
                )));
            }
        }
    }
    let perm =
        Permutation { run_offsets: job.run_offsets(), indices: merged.indices, engine: Engine::Gpu, key_bytes: key_bytes(layout.bits) };

    // The output's columns: the device's, then the rest gathered on the CPU.
    let t_cpu = Instant::now();
    let mut columns: Vec<Option<ArrayRef>> = vec![None; ncols];
    for (&c, (values, bitmap)) in payload.iter().zip(merged.columns) {
        let nulls = bitmap.map(|b| NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(b), 0, n)));
        let data = ArrayData::builder(schema.field(c).data_type().clone())
            .len(n)
            .add_buffer(Buffer::from_vec(values))
            .nulls(nulls)
            .build()
            .map_err(|e| Error::Internal(format!("column {} gathered on the device: {e}", name(c))))?;
        columns[c] = Some(make_array(data));
    }
    for (&c, gathered) in byte_cols.iter().zip(merged.bytes) {
        let (offsets, values) = (gathered.offsets, gathered.values);
        let nulls = gathered.validity.map(|b| NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(b), 0, n)));
        let data = ArrayData::builder(schema.field(c).data_type().clone())
            .len(n)
            .add_buffer(Buffer::from_vec(offsets))
            .add_buffer(Buffer::from_vec(values))
            .nulls(nulls)
            .build()
            .map_err(|e| Error::Internal(format!("column {} gathered on the device: {e}", name(c))))?;
        columns[c] = Some(make_array(data));
    }
    let rest: Vec<usize> = (0..ncols).filter(|&c| columns[c].is_none()).collect();
    if !rest.is_empty() {
        let rest_schema = std::sync::Arc::new(schema.project(&rest)?);
        // Every device column was gathered there: the rest are parquet-rs's to read.
        let run_batches = inputs
            .iter()
            .map(|input| Ok(RecordBatch::try_new(rest_schema.clone(), read_columns(&input.path, &rest)?)?))
            .collect::<Result<Vec<_>>>()?;
        let gathered = crate::gather::gather(&run_batches, &perm, n.max(1))?;
        for (j, &c) in rest.iter().enumerate() {
            let parts: Vec<ArrayRef> = gathered.iter().map(|b| b.column(j).clone()).collect();
            columns[c] = Some(concat(&parts, schema.field(c).data_type())?);
        }
    }
    let cpu_columns = t_cpu.elapsed();
    let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|c| c.expect("every column made")).collect())?;
    let names = |pick: &dyn Fn(usize) -> bool| (0..ncols).filter(|&c| pick(c)).map(name).collect::<Vec<_>>();
    Ok(RoundOutcome::Merged(DeviceRound {
        batch,
        gathered_on_device: names(&|c| payload.contains(&c) || byte_cols.contains(&c)),
        on_cpu: names(&|c| !on_device[c]),
        timings: RoundTimings {
            read,
            decompress: decoded.decompress,
            decode: decoded.decode,
            keys: merged.keys,
            merge: merged.merge,
            gather: merged.gather,
            cpu_columns,
        },
    }))
}

/// The Arrow schema parquet-rs's reader gives `input`.
fn arrow_schema(input: &Input) -> Result<SchemaRef> {
    let fm = input.meta.file_metadata();
    parquet::arrow::parquet_to_arrow_schema(fm.schema_descr(), fm.key_value_metadata())
        .map(std::sync::Arc::new)
        .map_err(|e| Error::File { path: input.path.clone(), detail: format!("its schema: {e}") })
}

/// Whether chunk `k` may hold a null: an OPTIONAL column whose statistics do not state a
/// null count of 0.
fn may_hold_nulls(k: &ColumnChunk<'_>, plan: Option<&DecodePlan>) -> bool {
    plan.is_some_and(|p| p.nullable) && k.meta.statistics().and_then(|s| s.null_count_opt()) != Some(0)
}

/// The bytes of a key of `bits` bits (`KeyColumn::key_bytes`'s widths).
fn key_bytes(bits: u32) -> usize {
    match crate::engine::key_job::key_words(bits) {
        0 => 4,
        w => 8 * w as usize,
    }
}

/// Columns `cols` of every row group of `path`, by parquet-rs's arrow reader, one array each.
fn read_columns(path: &Path, cols: &[usize]) -> Result<Vec<ArrayRef>> {
    let file = std::fs::File::open(path).map_err(|e| Error::Io { path: Some(path.into()), context: "opening".into(), source: e })?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| Error::File { path: path.into(), detail: format!("reading it: {e}") })?;
    let mask = ProjectionMask::leaves(builder.parquet_schema(), cols.iter().copied());
    let schema = std::sync::Arc::new(builder.schema().project(cols)?);
    let reader =
        builder.with_projection(mask).build().map_err(|e| Error::File { path: path.into(), detail: format!("reading it: {e}") })?;
    let batches: Vec<RecordBatch> =
        reader.collect::<std::result::Result<_, _>>().map_err(|e| Error::File { path: path.into(), detail: format!("reading it: {e}") })?;
    let whole = arrow::compute::concat_batches(&schema, &batches)?;
    Ok(whole.columns().to_vec())
}

/// `parts` as one array of `data_type` (an empty one where there are none).
fn concat(parts: &[ArrayRef], data_type: &arrow::datatypes::DataType) -> Result<ArrayRef> {
    match parts {
        [] => Ok(arrow::array::new_empty_array(data_type)),
        [one] => Ok(one.clone()),
        _ => {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            Ok(arrow::compute::concat(&refs)?)
        }
    }
}

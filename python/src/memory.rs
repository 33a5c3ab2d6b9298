//! The in-memory functions: `merge`, `merge_indices`, `sort`, `sort_indices`.
//!
//! A run may arrive in several chunks (a pyarrow table's record batches). Each chunk is
//! handed to corank as a run of its own, with no copy: the concatenation of the chunks in
//! order is the concatenation of the runs, so the stable merge is the same. What this
//! module adds for it: the order check where one chunk of a run meets the next
//! ([`check_junctions`]), and errors and indices told in the caller's runs and rows.

use crate::convert::{ArrowStream, common_schema, conform, import_batches};
use crate::options::{EngineArgs, parse_by};
use crate::run::{OnInterrupt, run};
use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use arrow::util::display::array_value_to_string;
use corank::{Error, MergeOptions, SortBatchesOptions, SortKey};
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::Arc;

/// The caller's runs as corank's: every chunk a run, and where each came from.
pub struct Chunks {
    pub batches: Vec<RecordBatch>,
    /// The caller's run of each chunk.
    pub run_of: Vec<usize>,
    /// The row, within its run, of each chunk's first row.
    pub first_row: Vec<usize>,
    /// The global index (over the concatenation of every run) of each run's first row; one
    /// more entry than runs, the last the total.
    pub run_starts: Vec<usize>,
    /// The first run's schema (none without runs).
    pub schema: Option<SchemaRef>,
}

impl Chunks {
    /// Imports each object of `runs` (anything with `__arrow_c_stream__` or
    /// `__arrow_c_array__`), a run that has no chunk getting an empty one.
    pub fn import(runs: &Bound<'_, PyList>) -> PyResult<Chunks> {
        let mut imported = Vec::with_capacity(runs.len());
        for obj in runs.iter() {
            let (schema, batches) = import_batches(&obj)?;
            let batches = if batches.is_empty() { vec![RecordBatch::new_empty(schema.clone())] } else { batches };
            imported.push((schema, batches));
        }
        let schemas: Vec<SchemaRef> = imported.iter().map(|(s, _)| s.clone()).collect();
        let common = common_schema(&schemas);
        let mut chunks =
            Chunks { batches: Vec::new(), run_of: Vec::new(), first_row: Vec::new(), run_starts: vec![0], schema: common.clone() };
        for (r, (_, batches)) in imported.into_iter().enumerate() {
            let mut row = 0;
            for b in batches {
                let b = match &common {
                    Some(common) => conform(b, common).map_err(crate::errors::arrow_error)?,
                    None => b,
                };
                chunks.run_of.push(r);
                chunks.first_row.push(row);
                row += b.num_rows();
                chunks.batches.push(b);
            }
            chunks.run_starts.push(chunks.run_starts[r] + row);
        }
        Ok(chunks)
    }

    /// An error about chunk runs told in the caller's runs and rows.
    pub fn remap(&self, e: Error) -> Error {
        match e {
            Error::NotSorted { run, row, detail } if run < self.run_of.len() => {
                Error::NotSorted { run: self.run_of[run], row: self.first_row[run] + row, detail }
            }
            Error::SchemaMismatch { run, detail } if run < self.run_of.len() => Error::SchemaMismatch { run: self.run_of[run], detail },
            Error::MissingColumn { run, column } if run < self.run_of.len() => Error::MissingColumn { run: self.run_of[run], column },
            other => other,
        }
    }

    fn runs(&self) -> usize {
        self.run_starts.len() - 1
    }
}

/// The key columns of a batch (a missing one is left for corank to report).
fn key_columns(batch: &RecordBatch, keys: &[SortKey]) -> Option<Vec<ArrayRef>> {
    keys.iter().map(|k| batch.column_by_name(&k.column).cloned()).collect()
}

/// The first row out of order where one chunk of a run meets the next, as corank's check
/// would name it; and then, where there is one, the first row out of order within the
/// chunks before it (corank names the first row of all, so an earlier one must win).
pub fn check_junctions(chunks: &Chunks, keys: &[SortKey]) -> corank::Result<()> {
    let Some(schema) = &chunks.schema else { return Ok(()) };
    let Some(fields) = keys
        .iter()
        .map(|k| schema.field_with_name(&k.column).ok().map(|f| SortField::new_with_options(f.data_type().clone(), k.options)))
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(()); // a missing column: corank's error
    };
    let converter = RowConverter::new(fields)?;
    let row_of = |c: usize, i: usize| -> corank::Result<Option<(arrow::row::OwnedRow, Vec<ArrayRef>)>> {
        let Some(cols) = key_columns(&chunks.batches[c], keys) else { return Ok(None) };
        let one: Vec<ArrayRef> = cols.iter().map(|a| a.slice(i, 1)).collect();
        let rows = converter.convert_columns(&one)?;
        Ok(Some((rows.row(0).owned(), one)))
    };
    let show =
        |cols: &[ArrayRef]| cols.iter().map(|c| array_value_to_string(c, 0).unwrap_or_else(|_| "?".into())).collect::<Vec<_>>().join(", ");
    // The last non-empty chunk seen in the current run.
    let mut last: Option<usize> = None;
    for c in 0..chunks.batches.len() {
        if c > 0 && chunks.run_of[c] != chunks.run_of[c - 1] {
            last = None;
        }
        if chunks.batches[c].num_rows() == 0 {
            continue;
        }
        if let Some(p) = last {
            let (Some((a, a_cols)), Some((b, b_cols))) = (row_of(p, chunks.batches[p].num_rows() - 1)?, row_of(c, 0)?) else {
                return Ok(());
            };
            if a > b {
                let bad = Error::NotSorted {
                    run: chunks.run_of[c],
                    row: chunks.first_row[c],
                    detail: format!("key ({}) follows ({})", show(&b_cols), show(&a_cols)),
                };
                return Err(earlier_within(chunks, keys, &converter, c).unwrap_or(bad));
            }
        }
        last = Some(c);
    }
    Ok(())
}

/// The first row out of order within chunks `0..end` (each checked on its own), if any.
fn earlier_within(chunks: &Chunks, keys: &[SortKey], converter: &RowConverter, end: usize) -> Option<Error> {
    for c in 0..end {
        let cols = key_columns(&chunks.batches[c], keys)?;
        let rows = converter.convert_columns(&cols).ok()?;
        if let Some(i) = (1..rows.num_rows()).find(|&i| rows.row(i - 1) > rows.row(i)) {
            let show =
                |i: usize| cols.iter().map(|a| array_value_to_string(a, i).unwrap_or_else(|_| "?".into())).collect::<Vec<_>>().join(", ");
            return Some(Error::NotSorted {
                run: chunks.run_of[c],
                row: chunks.first_row[c] + i,
                detail: format!("key ({}) follows ({})", show(i), show(i - 1)),
            });
        }
    }
    None
}

/// The (run, row) of every output row as a two-column batch.
fn run_rows(chunks_run_starts: &[usize], perm: &corank::Permutation) -> RecordBatch {
    let n = perm.len();
    let mut runs = Vec::with_capacity(n);
    let mut rows = Vec::with_capacity(n);
    let starts = chunks_run_starts;
    for i in 0..n {
        let g = perm.indices.get(i);
        // The last run starting at or before g (empty runs start where the next does).
        let r = starts.partition_point(|&s| s <= g) - 1;
        runs.push(r as i32);
        rows.push((g - starts[r]) as i64);
    }
    let schema = Arc::new(Schema::new(vec![Field::new("run", DataType::Int32, false), Field::new("row", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(runs)), Arc::new(Int64Array::from(rows))])
        .expect("two columns of one length")
}

/// `merge` and `merge_indices`: the merged rows, or where each comes from.
#[pyfunction]
#[pyo3(signature = (runs, by, engine, check_sorted, batch_size, indices))]
pub fn merge(
    py: Python<'_>,
    runs: &Bound<'_, PyList>,
    by: &str,
    engine: EngineArgs,
    check_sorted: bool,
    batch_size: usize,
    indices: bool,
) -> PyResult<ArrowStream> {
    let keys = parse_by(by).map_err(crate::errors::to_py)?;
    let options = MergeOptions::default()
        .with_engine_options(engine.options().map_err(crate::errors::to_py)?)
        .with_check_sorted(check_sorted)
        .with_batch_size(batch_size);
    let chunks = Chunks::import(runs)?;
    let schema = chunks.schema.clone().unwrap_or_else(|| Arc::new(Schema::empty()));
    let (out_schema, batches) = run(py, OnInterrupt::Abandon, None, move |_| {
        let run = || -> corank::Result<(SchemaRef, Vec<RecordBatch>)> {
            if chunks.runs() == 0 {
                return Ok((schema, Vec::new()));
            }
            if check_sorted {
                check_junctions(&chunks, &keys)?;
            }
            if indices {
                let perm = corank::merge_permutation(&chunks.batches, &keys, &options)?;
                let batch = run_rows(&chunks.run_starts, &perm);
                return Ok((batch.schema(), vec![batch]));
            }
            let batches = corank::merge(&chunks.batches, &keys, &options)?;
            Ok((schema, batches))
        };
        run().map_err(|e| chunks.remap(e))
    })?;
    Ok(ArrowStream::from_batches(out_schema, batches))
}

/// `sort` and `sort_indices`: the sorted rows, or the input position of each.
#[pyfunction]
#[pyo3(signature = (data, by, engine, batch_size, indices))]
pub fn sort(
    py: Python<'_>,
    data: &Bound<'_, PyList>,
    by: &str,
    engine: EngineArgs,
    batch_size: usize,
    indices: bool,
) -> PyResult<ArrowStream> {
    let keys = parse_by(by).map_err(crate::errors::to_py)?;
    let options =
        SortBatchesOptions::default().with_engine_options(engine.options().map_err(crate::errors::to_py)?).with_batch_size(batch_size);
    let chunks = Chunks::import(data)?;
    let schema = chunks.schema.clone().unwrap_or_else(|| Arc::new(Schema::empty()));
    let (out_schema, batches) = run(py, OnInterrupt::Abandon, None, move |_| {
        let run = || -> corank::Result<(SchemaRef, Vec<RecordBatch>)> {
            if indices {
                let perm = corank::sort_permutation(&chunks.batches, &keys, &options)?;
                let positions: Int64Array = (0..perm.len()).map(|i| perm.indices.get(i) as i64).collect();
                let schema = Arc::new(Schema::new(vec![Field::new("index", DataType::Int64, false)]));
                let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(positions)])?;
                return Ok((schema, vec![batch]));
            }
            if chunks.batches.is_empty() {
                return Ok((schema, Vec::new()));
            }
            Ok((schema, corank::sort_batches(&chunks.batches, &keys, &options)?))
        };
        run().map_err(|e| chunks.remap(e))
    })?;
    Ok(ArrowStream::from_batches(out_schema, batches))
}

//! The whole input of a sort node sorted at once on the device: where the GPU sorts and
//! every column is fixed-width or a byte view (`Utf8View`, `BinaryView`, DataFusion's
//! strings from Parquet: the device gathers the 16-byte views, the strings stay in the
//! input's buffers, which the output shares), no chunk is cut while the input is read
//! ([`placement::sorts_whole_on_device`]); once it is all in, it is sorted as one chunk and
//! every column gathered on the device ([`sort_on_device`]), and that is the output, with
//! no merge at all. Each row moves over PCIe up once and down once, instead of being
//! gathered at random on the CPU by a chunk sort and again by the merge.
//!
//! The pool must hold the output beside the input, and the device's memory the sort and the
//! gather ([`device::whole_sort_fits`]); where they do not, or the device fails and the
//! options allow the CPU, the caller sorts the chunks it deferred.

use super::error::to_datafusion;
use super::sort_chunk::key_columns;
use super::sort_runs::Runs;
use crate::engine::{device, placement};
use crate::sort::{sort_columns, SortBatchesOptions};
use crate::sort_key::SortKey;
use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr::LexOrdering;
use std::sync::Arc;
use std::time::Instant;

/// The bytes of `batch`'s byte view columns' data buffers (the strings the views point to).
fn view_data_bytes(batch: &RecordBatch) -> usize {
    use arrow::array::AsArray;
    let buffers = |b: &[arrow::buffer::Buffer]| b.iter().map(|b| b.capacity()).sum::<usize>();
    batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => buffers(c.as_string_view().data_buffers()),
            DataType::BinaryView => buffers(c.as_binary_view().data_buffers()),
            _ => 0,
        })
        .sum()
}

/// Sorts `batches` (the whole input, partitions in order) stably as one chunk on the GPU and
/// gathers every column on the device into ordinary memory: batches of
/// `options.batch_size` rows with `schema`, slices of one array per column. `None`, before
/// any work, where the device's memory cannot hold the sort and the gather
/// ([`device::whole_sort_fits`], with the key words' width bounded by the sort columns'
/// types): the caller sorts chunks instead.
fn sort_on_device(
    batches: &[RecordBatch],
    expr: &LexOrdering,
    specs: &[SortKey],
    options: &SortBatchesOptions,
    schema: &SchemaRef,
) -> Result<Option<Vec<RecordBatch>>> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let key_types = expr.iter().map(|e| Ok((e.expr.data_type(schema)?, e.expr.nullable(schema)?))).collect::<Result<Vec<_>>>()?;
    let column_types: Vec<DataType> = schema.fields().iter().map(|f| f.data_type().clone()).collect();
    if !device::whole_sort_fits(rows, &key_types, &column_types, options.engine.devices).map_err(to_datafusion)? {
        return Ok(None);
    }
    let perm = sort_columns(&key_columns(batches, expr)?, specs, options).map_err(to_datafusion)?;
    let arrays = device::gather_all_on_device(batches, &perm, &options.engine).map_err(to_datafusion)?;
    let rows = perm.len();
    let batch_size = options.batch_size.max(1);
    let out = (0..rows)
        .step_by(batch_size)
        .map(|start| {
            let len = batch_size.min(rows - start);
            let columns = arrays.iter().map(|a| a.slice(start, len)).collect();
            let options = RecordBatchOptions::new().with_row_count(Some(len));
            Ok(RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)?)
        })
        .collect::<Result<_>>()?;
    Ok(Some(out))
}

impl Runs {
    /// The whole input, deferred in the partitions' chunks, sorted at once on the device
    /// ([`sort_on_device`]): the output batches, counted in the reservation until the
    /// reservation drops, the input uncounted; `None` where the chunks are to be sorted
    /// instead (too few rows for the engine, no room in the pool for the output beside
    /// the input or on the device for the sort and the gather, or the device failed and the
    /// options allow the CPU).
    pub(super) async fn sort_whole(&mut self, schema: &SchemaRef) -> Result<Option<Vec<RecordBatch>>> {
        let batches: Vec<RecordBatch> = self.pending.iter().flat_map(|c| c.batches.iter().cloned()).collect();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if rows == 0 {
            return Ok(Some(Vec::new()));
        }
        if placement::chunk_on_cpu(&self.options.engine, rows) {
            return Ok(None);
        }
        // The output's own bytes, and the input's string buffers that byte view columns
        // share with it (they stay alive with the output once the input's count is dropped).
        let out_bytes = self.pending.iter().map(|c| c.row_bytes).sum::<usize>() + batches.iter().map(view_data_bytes).sum::<usize>();
        if self.reservation.try_grow(out_bytes).is_err() {
            return Ok(None);
        }
        let (expr, specs, options, out_schema) = (self.expr.clone(), self.specs.clone(), self.options.clone(), Arc::clone(schema));
        let started = Instant::now();
        let sorted = tokio::task::spawn_blocking(move || sort_on_device(&batches, &expr, &specs, &options, &out_schema))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        match sorted {
            Ok(None) => {
                // The device's memory cannot hold it: chunks.
                self.reservation.shrink(out_bytes.min(self.reservation.size()));
                Ok(None)
            }
            Ok(Some(out)) => {
                self.sort_time.add_duration(started.elapsed());
                self.elapsed_compute.add_duration(started.elapsed());
                self.runs_count.add(1);
                self.runs_gpu.add(1);
                let in_bytes: usize = self.pending.iter_mut().map(|c| std::mem::take(c).bytes).sum();
                self.reservation.shrink(in_bytes.min(self.reservation.size()));
                Ok(Some(out))
            }
            Err(e) if placement::cpu_after_gpu_failure(&self.options.engine) => {
                // The target the line had before this file was split out of sort_stream.rs.
                log::warn!(target: "corank::datafusion::sort_stream", "corank: sorting the whole input on the GPU failed ({e}); sorting it in chunks instead");
                self.reservation.shrink(out_bytes.min(self.reservation.size()));
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

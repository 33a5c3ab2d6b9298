//! Gathers whole rows in permutation order into RecordBatches (arrow's `interleave`),
//! one output batch per parallel task.

use crate::error::{Error, Result};
use crate::merge::Permutation;
use arrow::array::RecordBatch;
use arrow::compute::interleave_record_batch;
use arrow::datatypes::{Field, Schema};
use rayon::prelude::*;
use std::sync::Arc;

/// The output schema: run 0's, with a column nullable where any run's is.
fn merged_schema(runs: &[RecordBatch]) -> Arc<Schema> {
    let first = runs[0].schema();
    let fields: Vec<Field> = first
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| {
            let nullable = runs.iter().any(|b| b.schema().field(c).is_nullable());
            f.as_ref().clone().with_nullable(nullable)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, first.metadata().clone()))
}

/// Rows of `runs` in the order of `perm`, in batches of `batch_size` rows.
pub fn gather(runs: &[RecordBatch], perm: &Permutation, batch_size: usize) -> Result<Vec<RecordBatch>> {
    if batch_size == 0 {
        return Err(Error::InvalidArgument("batch size must be at least 1".into()));
    }
    if runs.is_empty() || perm.is_empty() {
        return Ok(vec![]);
    }
    let schema = merged_schema(runs);
    let runs: Vec<RecordBatch> = runs.iter().map(|b| b.clone().with_schema(schema.clone())).collect::<Result<_, _>>()?;
    if runs.len() == 1 {
        // One run: the merge is the identity; slice without copying.
        let n = runs[0].num_rows();
        return Ok((0..n).step_by(batch_size).map(|s| runs[0].slice(s, batch_size.min(n - s))).collect());
    }
    let refs: Vec<&RecordBatch> = runs.iter().collect();
    let starts: Vec<usize> = (0..perm.len()).step_by(batch_size).collect();
    starts
        .into_par_iter()
        .map(|s| {
            let e = (s + batch_size).min(perm.len());
            let idx: Vec<(usize, usize)> = (s..e).map(|i| perm.run_row(i)).collect();
            Ok(interleave_record_batch(&refs, &idx)?)
        })
        .collect()
}

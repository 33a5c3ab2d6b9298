//! What every contender's output must be: the inputs' rows, in key order, none changed.

use super::datagen::LINEITEM_KEY;
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use corank::{Error, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use std::path::PathBuf;

/// What [`check_output`] found in some files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    pub rows: usize,
    /// Whether the `key` column (Int64) is in ascending order across the files.
    pub sorted: bool,
    /// A checksum of the rows' (`key`, `l_orderkey`) pairs that does not depend on their order.
    pub checksum: u64,
}

/// Reads the `key` and `l_orderkey` columns of `paths`, in order, a batch at a time.
pub fn check_output(paths: &[PathBuf], key: &str) -> Result<Checked> {
    let (mut rows, mut last, mut sorted, mut sum) = (0, i64::MIN, true, 0u64);
    for path in paths {
        let err = |e| Error::parquet(path, "checking", e);
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "checking", e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(err)?;
        let (k, o) = (builder.schema().index_of(key)?, builder.schema().index_of(LINEITEM_KEY)?);
        let mask = ProjectionMask::roots(builder.parquet_schema(), [k, o]);
        for batch in builder.with_projection(mask).with_batch_size(1 << 16).build().map_err(err)? {
            let batch = batch?;
            let schema = batch.schema();
            let keys = batch.column(schema.index_of(key)?).as_primitive::<Int64Type>();
            let orderkeys = batch.column(schema.index_of(LINEITEM_KEY)?).as_primitive::<Int64Type>();
            for (&k, &o) in keys.values().iter().zip(orderkeys.values().iter()) {
                sorted &= k >= last;
                last = k;
                rows += 1;
                let mut h = (k as u64).wrapping_mul(0x9e3779b97f4a7c15) ^ (o as u64).rotate_left(29);
                h ^= h >> 31;
                sum = sum.wrapping_add(h.wrapping_mul(0xbf58476d1ce4e5b9));
            }
        }
    }
    Ok(Checked { rows, sorted, checksum: sum })
}

//! A query's output, digested so that two engines' outputs can be checked equal before a
//! time counts: the row count, a hash of the key column in output order, and an order-free
//! hash of every row's values. Shared by the `operator` and `cluster` benches (`#[path]`).

use arrow::array::RecordBatch;
use arrow::row::{RowConverter, SortField};

/// Rows, a hash of the key column in output order, and the wrapping sum of every row's
/// hash (equal for the same rows in any order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Digest {
    pub rows: usize,
    pub keys_in_order: u64,
    pub rows_any_order: u64,
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

impl Digest {
    /// Adds `batch`, whose key column is column `key`.
    pub fn add(&mut self, batch: &RecordBatch, key: usize) {
        self.add_keys(batch, key);
        self.rows_any_order = self.rows_any_order.wrapping_add(rows_hash(batch));
    }

    /// Adds `batch`'s row count and keys (column `key`) in order, not its rows' hash: that
    /// part, [`rows_hash`], is order-free and may be computed elsewhere (on other threads)
    /// and added to `rows_any_order` with `wrapping_add`.
    pub fn add_keys(&mut self, batch: &RecordBatch, key: usize) {
        let keys = RowConverter::new(vec![SortField::new(batch.column(key).data_type().clone())]).unwrap();
        let key_rows = keys.convert_columns(&batch.columns()[key..key + 1]).unwrap();
        for r in 0..batch.num_rows() {
            self.keys_in_order = fnv1a(self.keys_in_order, key_rows.row(r).as_ref());
        }
        self.rows += batch.num_rows();
    }
}

/// The wrapping sum of the hashes of `batch`'s rows (every column): equal for the same rows
/// in any order and any batches.
pub fn rows_hash(batch: &RecordBatch) -> u64 {
    let fields = batch.schema().fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    let converter = RowConverter::new(fields).unwrap();
    let rows = converter.convert_columns(batch.columns()).unwrap();
    (0..batch.num_rows()).fold(0u64, |sum, r| {
        // Mixed so that a sum of row hashes does not cancel out.
        let h = fnv1a(0xcbf2_9ce4_8422_2325, rows.row(r).as_ref());
        sum.wrapping_add(h.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (h >> 29))
    })
}

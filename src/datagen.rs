//! Synthetic sorted runs for the examples, benchmarks and the demo: deterministic from a
//! seed, each run sorted ascending by its key columns.

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use rayon::prelude::*;
use std::sync::Arc;

/// splitmix64: a fast deterministic generator.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// The key shape of generated runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyShape {
    /// One `UInt64` column `k`.
    U64,
    /// One `Utf8` column `k`, 12–28 bytes with a shared 9-byte prefix (like TPC-H names).
    Utf8,
    /// Two columns: `k` (`UInt32`, 1000 distinct values) then `k2` (`UInt64`).
    TwoColumns,
}

/// `runs` sorted runs of `rows` rows each: the key column(s) and three payload columns
/// (`p_i64`, `p_f64`, `p_u64`). `duplicates` draws keys from only that many values.
pub fn sorted_runs(shape: KeyShape, runs: usize, rows: usize, duplicates: Option<u64>, seed: u64) -> Vec<RecordBatch> {
    (0..runs)
        .into_par_iter()
        .map(|r| {
            let base = mix(seed ^ (r as u64) << 32);
            let draw = |i: usize| {
                let x = mix(base.wrapping_add(i as u64));
                match duplicates {
                    Some(d) => x % d.max(1),
                    None => x,
                }
            };
            let mut keys: Vec<u64> = (0..rows).map(draw).collect();
            keys.sort_unstable();
            let mut cols: Vec<(&str, ArrayRef)> = match shape {
                KeyShape::U64 => vec![("k", Arc::new(UInt64Array::from(keys.clone())))],
                KeyShape::Utf8 => {
                    // Zero-padded decimal keeps string order equal to numeric order.
                    let names: Vec<String> =
                        keys.iter().map(|k| format!("Customer#{:0w$}", k % 10u64.pow(19), w = 3 + (k % 17) as usize)).collect();
                    let mut names = names;
                    names.sort_unstable();
                    vec![("k", Arc::new(StringArray::from(names)))]
                }
                KeyShape::TwoColumns => {
                    let mut pairs: Vec<(u32, u64)> = keys.iter().map(|&k| ((mix(k) % 1000) as u32, k)).collect();
                    pairs.sort_unstable();
                    vec![
                        ("k", Arc::new(UInt32Array::from_iter_values(pairs.iter().map(|p| p.0)))),
                        ("k2", Arc::new(UInt64Array::from_iter_values(pairs.iter().map(|p| p.1)))),
                    ]
                }
            };
            cols.push(("p_i64", Arc::new(Int64Array::from_iter_values((0..rows).map(|i| (r * rows + i) as i64)))));
            cols.push(("p_f64", Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.5)))));
            cols.push(("p_u64", Arc::new(UInt64Array::from_iter_values((0..rows).map(|i| mix(i as u64))))));
            RecordBatch::try_from_iter(cols).expect("generated columns have equal lengths")
        })
        .collect()
}

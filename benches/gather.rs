//! The gather of rows from many runs (`corank::gather`) against arrow's
//! `interleave_record_batch` of the same rows (each output row located to its (run, row)
//! pair first, as a caller of arrow does), one run, one table. Both gather output batches
//! of 8192 rows on every core (rayon); their outputs are checked equal before either is
//! timed. Each figure is the median of RUNS runs after one warm-up.
//!
//! Cases (ROWS rows in all, four 8-byte columns: u64, i64, f64, u64):
//! - `random, 8192-row batches`: the rows of ROWS / 8192 batches in random order (a sort's
//!   chunk gathered from its input batches);
//! - `merged, 16 runs`: 16 runs of ROWS / 16 rows read front to back in turn (a merge's
//!   output gathered from its runs);
//! - `random, + a string column`: the first case with a Utf8 column beside;
//! - `random, + a string view column`: with a Utf8View column beside (as DataFusion reads
//!   Parquet strings), half its values longer than 12 bytes.
//!
//!   cargo bench --bench gather -- [ROWS [RUNS]]     (defaults: 16M rows, 5 runs)

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, StringViewArray, UInt64Array};
use arrow::compute::interleave_record_batch;
use corank::__bench::RunLocator;
use corank::{Engine, Indices, Permutation};
use rayon::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: usize = 8192;

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What goes beside the four 8-byte columns.
#[derive(Clone, Copy, PartialEq)]
enum Extra {
    None,
    /// A Utf8 column of short strings.
    Utf8,
    /// A Utf8View column, every other value longer than a view's 12 inline bytes.
    Utf8View,
}

/// `runs` batches of `rows` rows: four 8-byte columns, and `extra`.
fn batches(runs: usize, rows: usize, extra: Extra) -> Vec<RecordBatch> {
    (0..runs)
        .map(|r| {
            let base = (r * rows) as u64;
            let mut cols: Vec<(&str, ArrayRef)> = vec![
                ("k", Arc::new(UInt64Array::from_iter_values((0..rows as u64).map(|i| mix(base + i))))),
                ("a", Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| base as i64 + i)))),
                ("f", Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.5)))),
                ("u", Arc::new(UInt64Array::from_iter_values((0..rows as u64).map(|i| mix(i ^ 0x55))))),
            ];
            match extra {
                Extra::None => {}
                Extra::Utf8 => {
                    cols.push(("s", Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("row{}", base as usize + i))))))
                }
                Extra::Utf8View => cols.push((
                    "v",
                    Arc::new(StringViewArray::from_iter_values((0..rows).map(|i| {
                        if i % 2 == 0 {
                            format!("r{}", base as usize + i)
                        } else {
                            format!("a longer value, row {}", base as usize + i)
                        }
                    }))),
                )),
            }
            RecordBatch::try_from_iter(cols).unwrap()
        })
        .collect()
}

/// arrow's gather of the same rows: locate every output row, then `interleave_record_batch`.
fn arrow_gather(runs: &[RecordBatch], perm: &Permutation) -> Vec<RecordBatch> {
    let Indices::U32(indices) = &perm.indices else { unreachable!("the bench's indices are u32") };
    let locator = RunLocator::new(&perm.run_offsets);
    let refs: Vec<&RecordBatch> = runs.iter().collect();
    indices
        .par_chunks(BATCH)
        .map(|chunk| {
            let pairs: Vec<(usize, usize)> = chunk.iter().map(|&g| locator.locate(g as usize)).collect();
            interleave_record_batch(&refs, &pairs).unwrap()
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let rows: usize = args.first().map(|s| s.parse().expect("ROWS")).unwrap_or(16 << 20);
    let repeats: usize = args.get(1).map(|s| s.parse().expect("RUNS")).unwrap_or(5);
    println!("gather of {rows} rows, {} threads, median of {repeats} runs", rayon::current_num_threads());
    println!("| case | arrow interleave ms | corank gather ms | corank vs arrow |");
    println!("|---|---:|---:|---:|");
    let batches_of_8192 = rows.div_ceil(BATCH);
    let cases = [
        ("random, 8192-row batches", batches_of_8192, Extra::None),
        ("merged, 16 runs", 16, Extra::None),
        ("random, + a string column", batches_of_8192, Extra::Utf8),
        ("random, + a string view column", batches_of_8192, Extra::Utf8View),
    ];
    for (name, runs, extra) in cases {
        let per_run = rows / runs;
        let data = batches(runs, per_run, extra);
        let total = runs * per_run;
        let order: Vec<u32> = if runs == 16 {
            (0..total).map(|i| ((i % 16) * per_run + i / 16) as u32).collect()
        } else {
            let mut v: Vec<u32> = (0..total as u32).collect();
            for i in (1..total).rev() {
                v.swap(i, (mix(i as u64) % (i as u64 + 1)) as usize);
            }
            v
        };
        let run_offsets: Vec<usize> = (0..=runs).map(|r| r * per_run).collect();
        let perm = Permutation { run_offsets, indices: Indices::U32(order), engine: Engine::Cpu, key_bytes: 8 };
        let ours = corank::gather(&data, &perm, BATCH).unwrap();
        let theirs = arrow_gather(&data, &perm);
        assert_eq!(ours, theirs, "{name}: corank and arrow differ");
        drop((ours, theirs));
        let (mut a, mut c) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            let t = Instant::now();
            drop(arrow_gather(&data, &perm));
            a.push(t.elapsed());
            let t = Instant::now();
            drop(corank::gather(&data, &perm, BATCH).unwrap());
            c.push(t.elapsed());
        }
        let (a, c) = (median(a), median(c));
        println!("| {name} | {:.1} | {:.1} | {:.2}x |", a.as_secs_f64() * 1e3, c.as_secs_f64() * 1e3, a.as_secs_f64() / c.as_secs_f64());
    }
}

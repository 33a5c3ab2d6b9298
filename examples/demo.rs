//! The main job on built-in data: generates sorted runs, merges them, verifies the result
//! and prints rows, time and engine. No GPU needed (the CPU engine runs where there is none).
//!
//!   cargo run --release --example demo [-- RUNS ROWS_PER_RUN [auto|cpu|gpu]]

#[path = "../src/cli/datagen.rs"]
mod datagen;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::UInt64Type;
use corank::{merge, Engine, MergeOptions, SortKey};
use datagen::{sorted_runs, KeyShape};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args.first().map(|s| s.parse()).transpose()?.unwrap_or(16);
    let rows: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1 << 20);
    let engine: Engine = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(Engine::Auto);

    let t = Instant::now();
    let input = sorted_runs(KeyShape::U64, runs, rows, None, 7);
    println!("generated {runs} sorted runs x {rows} rows (u64 key + 3 payload columns) in {:.2?}", t.elapsed());

    let keys = [SortKey::asc("k")];
    let options = MergeOptions::default().with_engine(engine);
    let t = Instant::now();
    let perm = corank::merge_permutation(&input, &keys, &options)?;
    let t_perm = t.elapsed();
    let out: Vec<RecordBatch> = corank::gather(&input, &perm, options.batch_size)?;
    let elapsed = t.elapsed();
    let total: usize = out.iter().map(|b| b.num_rows()).sum();

    // Verify: every row kept, keys in order.
    let keys_out: Vec<u64> = out.iter().flat_map(|b| b.column(0).as_primitive::<UInt64Type>().values().to_vec()).collect();
    assert_eq!(total, runs * rows, "rows lost");
    assert!(keys_out.windows(2).all(|w| w[0] <= w[1]), "output not sorted");
    // The same merge through the one-call API gives the same batches.
    let again = merge(&input, &keys, &options)?;
    assert_eq!(again.len(), out.len());

    println!(
        "merged {total} rows in {:.2?} ({:.1} M rows/s; permutation {:.2?}, gather {:.2?}) on engine {} — output sorted, no row lost",
        elapsed,
        total as f64 / elapsed.as_secs_f64() / 1e6,
        t_perm,
        elapsed - t_perm,
        perm.engine
    );
    println!("first rows:\n{}", arrow::util::pretty::pretty_format_batches(&[out[0].slice(0, 5)])?);
    Ok(())
}

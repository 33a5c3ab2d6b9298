//! The public API on the GPU engine against the oracle (every key width through the
//! encoder: u32, u64, 2–4 words, strings with prefix ties). Skips without a GPU unless
//! `CORANK_REQUIRE_GPU=1`, which makes a missing GPU a failure.

use crate::common::{oracle, sorted_run, Rng};
use arrow::compute::SortOptions;
use arrow::datatypes::DataType;
use corank::{merge_permutation, Engine, EngineOptions, MergeOptions, OnGpuFailure, SortKey};

fn gpu_or_skip() -> bool {
    match corank::gpu_availability() {
        Ok(()) => true,
        Err(why) if std::env::var("CORANK_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("CORANK_REQUIRE_GPU=1 but no GPU: {why}")
        }
        Err(why) => {
            eprintln!("skipped: no GPU ({why})");
            false
        }
    }
}

#[test]
fn api_on_gpu_matches_the_oracle() {
    if !gpu_or_skip() {
        return;
    }
    use DataType::*;
    let shapes: Vec<Vec<DataType>> = vec![
        vec![Int16],                    // u32 keys
        vec![UInt64],                   // u64 keys (with a null bit: 2 words)
        vec![Int64, Float64],           // 2 words
        vec![Decimal128(38, 2), Int32], // 3 words
        vec![Utf8],                     // up to 4 words, prefix ties
        vec![Utf8View, Int8, Boolean],
        vec![FixedSizeBinary(16)],        // UUIDs: 129 bits with a null bit, 3 words
        vec![FixedSizeBinary(40), Int32], // past the key: prefix ties
    ];
    let mut rng = Rng::new(7);
    for (case, types) in shapes.iter().cycle().take(60).enumerate() {
        let options: Vec<SortOptions> = types.iter().map(|_| rng.sort_options()).collect();
        let k = 1 + rng.below(64) as usize;
        let domain = [3, 1000, 1 << 40][case % 3];
        let null_p = [0.0, 0.1][case % 2];
        let mut id = 0;
        let runs: Vec<_> = (0..k)
            .map(|_| {
                let n = rng.below(if case % 10 == 0 { 50_000 } else { 2_000 }) as usize;
                let b = sorted_run(&mut rng, types, &options, n, domain, null_p, id);
                id += n as u64;
                b
            })
            .collect();
        let keys: Vec<SortKey> = options.iter().enumerate().map(|(i, o)| SortKey::new(format!("k{i}"), *o)).collect();
        let expected = oracle(&runs, &keys.iter().map(|k| (k.column.clone(), k.options)).collect::<Vec<_>>());
        let opts = MergeOptions::default().with_engine(Engine::Gpu).with_check_sorted(true);
        let perm = merge_permutation(&runs, &keys, &opts).unwrap();
        assert_eq!(perm.engine, Engine::Gpu);
        assert_eq!(perm.indices.to_vec(), expected, "case {case}: {types:?} {options:?}");
        // With CORANK_REQUIRE_GPU=1 (read here: the library reads no environment variable),
        // Auto with OnGpuFailure::Error also runs on the GPU, even for small inputs.
        if std::env::var("CORANK_REQUIRE_GPU").as_deref() == Ok("1") {
            let strict = EngineOptions::default().with_on_gpu_failure(OnGpuFailure::Error);
            let auto = merge_permutation(&runs, &keys, &MergeOptions::default().with_engine_options(strict)).unwrap();
            assert_eq!(auto.engine, Engine::Gpu);
            assert_eq!(auto.indices, perm.indices);
        }
    }
}

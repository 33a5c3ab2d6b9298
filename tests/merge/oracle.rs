//! The oracle property suite: every merge equals, row for row, the stable sort of the
//! concatenated runs by arrow-row bytes. Over 10^4 cases per run in total.

use crate::common::{in_memory_key_types, oracle, random_key_columns_from, sorted_run, Rng};
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::UInt64Type;
use corank::{merge, merge_permutation, Engine, MergeOptions, SortKey};
use proptest::prelude::*;

/// Builds `k` sorted runs of random key columns and checks the permutation and the merged
/// batches against the oracle.
fn check_case(seed: u64, k: usize, max_run: usize, n_keys: usize, null_p: f64, gather: bool) {
    let mut rng = Rng::new(seed);
    let (types, options) = random_key_columns_from(&mut rng, n_keys, &in_memory_key_types());
    // Small domains make duplicate-heavy data.
    let domain = [1, 2, 5, 50, 1000, 1 << 40][rng.below(6) as usize];
    let mut runs: Vec<RecordBatch> = Vec::new();
    let mut id = 0;
    for _ in 0..k {
        // Sizes spread over 0..=max_run, many tiny and empty runs.
        let n = match rng.below(4) {
            0 => rng.below(3) as usize,
            _ => rng.below(max_run as u64 + 1) as usize,
        };
        runs.push(sorted_run(&mut rng, &types, &options, n, domain, null_p, id));
        id += n as u64;
    }
    let keys: Vec<SortKey> = options.iter().enumerate().map(|(i, o)| SortKey::new(format!("k{i}"), *o)).collect();
    let expected = oracle(&runs, &keys.iter().map(|k| (k.column.clone(), k.options)).collect::<Vec<_>>());
    let opts = MergeOptions::default().with_engine(Engine::Cpu).with_check_sorted(true).with_batch_size(1 + rng.below(5000) as usize);
    let perm = merge_permutation(&runs, &keys, &opts).unwrap_or_else(|e| panic!("types {types:?}: {e}"));
    assert_eq!(perm.indices.to_vec(), expected, "types {types:?} options {options:?} domain {domain}");
    if gather {
        let out = merge(&runs, &keys, &opts).unwrap();
        let ids: Vec<u64> =
            out.iter().flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect();
        assert_eq!(ids, expected.iter().map(|&i| i as u64).collect::<Vec<_>>());
        assert!(out.iter().all(|b| b.num_rows() <= opts.batch_size));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8000, ..ProptestConfig::default() })]
    /// Many runs (1..64), small runs: the bulk of the cases.
    #[test]
    fn many_small_runs(seed: u64, k in 1usize..=64, n_keys in 1usize..=3, null_p in prop::sample::select(vec![0.0, 0.1, 0.5, 1.0])) {
        check_case(seed, k, 40, n_keys, null_p, seed % 4 == 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1900, ..ProptestConfig::default() })]
    /// Few runs, sizes up to 10^3.
    #[test]
    fn few_medium_runs(seed: u64, k in 1usize..=6, n_keys in 1usize..=3, null_p in prop::sample::select(vec![0.0, 0.2])) {
        check_case(seed, k, 1000, n_keys, null_p, seed % 8 == 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]
    /// Large runs (up to 10^4 rows) and up to 64 of them.
    #[test]
    fn large_runs(seed: u64, k in 1usize..=64, n_keys in 1usize..=2) {
        check_case(seed, k, 10_000, n_keys, 0.05, seed % 2 == 0);
    }
}

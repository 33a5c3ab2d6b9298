//! The sort: every sort equals, row for row, the stable sort of the concatenated input
//! batches by arrow-row bytes (the merge's oracle, `common::oracle`: arrow's
//! `lexsort_to_indices` is not stable, a stable sort of the row bytes is).
//!
//! - the engine (`sort_cpu`) against a brute-force stable sort of (key, position), for
//!   every key width, with tiny tiles (many merge levels) and the real [`SORT_TILE`];
//! - the API (`sort_permutation`, `sort_batches`) over every key type of the merge's
//!   property tests, 1–3 columns, ASC/DESC, nulls first/last, sizes 0, 1, SORT_TILE ± 1,
//!   2·SORT_TILE ± 1 and random, input random, already sorted or reverse sorted, all equal
//!   or with many duplicates, split into random batches (empty ones included);
//! - the engine choice: `Engine::Gpu` sorts on the GPU where one is usable and is an error
//!   naming why where none is (CI); `Auto` falls back to the CPU (the GPU sort itself is
//!   tested against `sort_cpu` in tests/gpu/kernels.rs, on the GPU machine).

use crate::common::{oracle, random_array, random_key_columns, Rng};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt64Array};
use arrow::compute::{concat_batches, lexsort_to_indices, take, SortColumn, SortOptions};
use arrow::datatypes::{DataType, UInt64Type};
use corank::engine::sort::{sort_cpu, sort_cpu_with_tile, sort_keys, SORT_TILE};
use corank::keys::{KeyColumn, KeyWord};
use corank::{sort_batches, sort_permutation, Engine, EngineOptions, Error, OnGpuFailure, SortBatchesOptions, SortKey};
use proptest::prelude::*;
use std::sync::Arc;

// ---------------------------------------------------------------- the engine

/// The stable sort of `keys` by brute force.
fn brute<T: Ord + Copy>(keys: &[T]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    idx.sort_by_key(|&i| keys[i]); // stable
    idx
}

/// Random words with `distinct` values (small: many duplicates).
fn words(rng: &mut Rng, n: usize, distinct: u64) -> Vec<u64> {
    (0..n).map(|_| rng.below(distinct).wrapping_mul(0x9e3779b97f4a7c15)).collect()
}

fn check_engine<T: KeyWord>(keys: &[T], tiles: &[usize]) {
    let expected = brute(keys);
    for &tile in tiles {
        assert_eq!(sort_cpu_with_tile(keys, tile).to_vec(), expected, "tile {tile}, n {}", keys.len());
    }
}

/// The same random data in every key width (wider keys: the random word in a chosen word,
/// the others few-valued, so that ties across words happen).
fn check_all_widths(seed: u64, n: usize, distinct: u64, tiles: &[usize]) {
    let mut rng = Rng::new(seed);
    let w = words(&mut rng, n, distinct);
    let small = words(&mut rng, n, 3);
    check_engine(&w.iter().map(|&x| (x >> 32) as u32).collect::<Vec<u32>>(), tiles);
    check_engine(&w, tiles);
    check_engine(&w.iter().zip(&small).map(|(&a, &b)| [b, a]).collect::<Vec<[u64; 2]>>(), tiles);
    check_engine(&w.iter().zip(&small).map(|(&a, &b)| [b, b, a]).collect::<Vec<[u64; 3]>>(), tiles);
    check_engine(&w.iter().zip(&small).map(|(&a, &b)| [a, b, 0, b]).collect::<Vec<[u64; 4]>>(), tiles);
}

#[test]
fn engine_edge_sizes() {
    let t = SORT_TILE;
    for (s, n) in [0, 1, 2, 3, t - 1, t, t + 1, 2 * t - 1, 2 * t, 2 * t + 1, 3 * t + 7].into_iter().enumerate() {
        for distinct in [1, 2, 1000, u64::MAX] {
            check_all_widths(s as u64 * 31 + distinct, n, distinct, &[1, 2, 3, 64, SORT_TILE]);
        }
    }
}

#[test]
fn engine_sorted_and_reverse_input() {
    let n = 5 * SORT_TILE + 3;
    let mut rng = Rng::new(7);
    let mut w = words(&mut rng, n, 50);
    w.sort();
    check_engine(&w, &[1, 5, 100, SORT_TILE]);
    w.reverse();
    check_engine(&w, &[1, 5, 100, SORT_TILE]);
    // Many runs: more rows than the merge's parallel chunk, several tiles per chunk.
    let big = words(&mut rng, 40 * SORT_TILE + 11, 1 << 20);
    check_engine(&big, &[SORT_TILE, 256]);
}

#[test]
fn engine_is_sort_cpu_at_sort_tile() {
    let mut rng = Rng::new(3);
    let w = words(&mut rng, 3 * SORT_TILE, 100);
    assert_eq!(sort_cpu(&w), sort_cpu_with_tile(&w, SORT_TILE));
    assert!(SORT_TILE.is_power_of_two());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn engine_random(seed: u64, n in 0usize..3000, distinct in prop::sample::select(vec![1u64, 2, 7, 100, u64::MAX]), tile in 1usize..300) {
        check_all_widths(seed, n, distinct, &[tile]);
    }
}

// ---------------------------------------------------------------- the engine choice

#[test]
fn engine_choice_of_the_sort() {
    let keys = KeyColumn::U64(vec![3, 1, 2]);
    let gpu = corank::engine::gpu_availability();
    for options in [
        EngineOptions::default().with_engine(Engine::Gpu),
        EngineOptions::default().with_engine(Engine::Gpu).with_on_gpu_failure(OnGpuFailure::Error),
        EngineOptions::default().with_engine(Engine::Auto).with_on_gpu_failure(OnGpuFailure::Error),
    ] {
        match (sort_keys(&keys, &options, None), &gpu) {
            (Ok((indices, ran)), Ok(())) => assert_eq!((indices.to_vec(), ran), (vec![1, 2, 0], Engine::Gpu)),
            (Err(Error::GpuUnavailable(m)), Err(why)) => assert_eq!(&m, why),
            (other, _) => panic!("{options:?} with GPU availability {gpu:?}: got {other:?}"),
        }
    }
    // Auto below gpu_min_rows, and Cpu: the CPU sort.
    for engine in [Engine::Cpu, Engine::Auto] {
        let (indices, ran) = sort_keys(&keys, &EngineOptions::default().with_engine(engine), None).unwrap();
        assert_eq!((indices.to_vec(), ran), (vec![1, 2, 0], Engine::Cpu));
    }
    // Through the API: without a GPU the same error, nothing sorted.
    let batch = RecordBatch::try_from_iter([("k", Arc::new(UInt64Array::from(vec![2, 1])) as ArrayRef)]).unwrap();
    let sorted = sort_batches(&[batch], &[SortKey::asc("k")], &SortBatchesOptions::default().with_engine(Engine::Gpu));
    match (sorted, &gpu) {
        (Ok(out), Ok(())) => assert_eq!(out[0].column(0).as_primitive::<UInt64Type>().values().to_vec(), vec![1, 2]),
        (Err(e), Err(_)) => assert!(matches!(e, Error::GpuUnavailable(_)), "{e}"),
        (other, _) => panic!("GPU availability {gpu:?}: got {other:?}"),
    }
}

// ---------------------------------------------------------------- the API

/// How the input rows are arranged before the sort.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Random,
    Sorted,
    Reversed,
}

/// `n` rows of random key columns `k0..` plus `id` (the input position), arranged by
/// `shape`, split into random batches (some empty).
fn input(rng: &mut Rng, types: &[DataType], options: &[SortOptions], n: usize, domain: u64, null_p: f64, shape: Shape) -> Vec<RecordBatch> {
    let mut cols: Vec<ArrayRef> = types.iter().map(|t| random_array(rng, t, n, domain, null_p)).collect();
    if !matches!(shape, Shape::Random) && n > 0 {
        let sort_cols: Vec<SortColumn> =
            cols.iter().zip(options).map(|(c, o)| SortColumn { values: c.clone(), options: Some(*o) }).collect();
        let mut order: Vec<u32> = lexsort_to_indices(&sort_cols, None).unwrap().values().to_vec();
        if matches!(shape, Shape::Reversed) {
            order.reverse();
        }
        let order = arrow::array::UInt32Array::from(order);
        cols = cols.iter().map(|c| take(c.as_ref(), &order, None).unwrap()).collect();
    }
    let mut fields: Vec<(String, ArrayRef, bool)> = cols.into_iter().enumerate().map(|(i, c)| (format!("k{i}"), c, true)).collect();
    fields.push(("id".into(), Arc::new(UInt64Array::from_iter_values(0..n as u64)), false));
    let all = RecordBatch::try_from_iter_with_nullable(fields).unwrap();
    // Batches: one, or random cuts (empty batches included).
    let mut batches = Vec::new();
    let mut at = 0;
    let pieces = [1, 2, 5, 40][rng.below(4) as usize];
    while at < n || batches.is_empty() {
        let len = if pieces == 1 { n } else { (rng.below((2 * n / pieces + 2) as u64) as usize).min(n - at) };
        batches.push(all.slice(at, len));
        at += len;
    }
    if rng.chance(0.2) {
        batches.insert(rng.below(batches.len() as u64 + 1) as usize, all.slice(0, 0));
    }
    batches
}

fn check_case(seed: u64, n: usize, n_keys: usize, null_p: f64, gather: bool) {
    let mut rng = Rng::new(seed);
    let (types, options) = random_key_columns(&mut rng, n_keys);
    // Small domains make duplicate-heavy data; 1 makes every key equal (but for nulls).
    let domain = [1, 2, 5, 50, 1000, 1 << 40][rng.below(6) as usize];
    let shape = [Shape::Random, Shape::Random, Shape::Sorted, Shape::Reversed][rng.below(4) as usize];
    let batches = input(&mut rng, &types, &options, n, domain, null_p, shape);
    let keys: Vec<SortKey> = options.iter().enumerate().map(|(i, o)| SortKey::new(format!("k{i}"), *o)).collect();
    let expected = oracle(&batches, &keys.iter().map(|k| (k.column.clone(), k.options)).collect::<Vec<_>>());
    let opts = SortBatchesOptions::default().with_engine(Engine::Cpu).with_batch_size(1 + rng.below(5000) as usize);
    let why = format!("types {types:?} options {options:?} domain {domain} shape {shape:?} batches {}", batches.len());
    let perm = sort_permutation(&batches, &keys, &opts).unwrap_or_else(|e| panic!("{why}: {e}"));
    assert_eq!(perm.indices.to_vec(), expected, "{why}");
    assert_eq!(perm.engine, Engine::Cpu);
    if gather {
        let out = sort_batches(&batches, &keys, &opts).unwrap();
        let ids: Vec<u64> =
            out.iter().flat_map(|b| b.column_by_name("id").unwrap().as_primitive::<UInt64Type>().values().to_vec()).collect();
        // `id` is the input position (the batches are slices of one batch in order).
        assert_eq!(ids, expected.iter().map(|&i| i as u64).collect::<Vec<_>>(), "{why}");
        assert!(out.iter().all(|b| b.num_rows() <= opts.batch_size && b.schema() == batches[0].schema()));
        // The key columns, gathered, are the input's in the oracle's order.
        if !out.is_empty() {
            let got = concat_batches(&out[0].schema(), &out).unwrap();
            let input = concat_batches(&batches[0].schema(), &batches).unwrap();
            let order = arrow::array::UInt64Array::from(ids);
            for c in 0..n_keys {
                let want = take(input.column(c).as_ref(), &order, None).unwrap();
                let got = got.column(c);
                if !matches!(want.data_type(), DataType::Dictionary(..)) {
                    assert_eq!(got.to_data(), want.to_data(), "{why}: column k{c}");
                }
            }
        }
    }
}

#[test]
fn api_edge_sizes() {
    let t = SORT_TILE;
    let mut case = 0u64;
    for n in [0, 1, 2, t - 1, t, t + 1, 2 * t - 1, 2 * t + 1] {
        for n_keys in 1..=3 {
            for _ in 0..6 {
                case += 1;
                check_case(case * 1_000_003 + n as u64, n, n_keys, [0.0, 0.1, 0.5][case as usize % 3], case.is_multiple_of(2));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]
    /// Small inputs, every key type and option: the bulk of the cases.
    #[test]
    fn api_small(seed: u64, n in 0usize..200, n_keys in 1usize..=3, null_p in prop::sample::select(vec![0.0, 0.1, 0.5, 1.0])) {
        check_case(seed, n, n_keys, null_p, seed % 4 == 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 60, ..ProptestConfig::default() })]
    /// Several tiles.
    #[test]
    fn api_tiles(seed: u64, n in 0usize..(3 * SORT_TILE), n_keys in 1usize..=2) {
        check_case(seed, n, n_keys, 0.05, seed % 2 == 0);
    }
}

#[test]
fn api_inputs_and_errors() {
    let opts = SortBatchesOptions::default();
    // No batches, or only empty ones: nothing out.
    assert!(sort_batches(&[], &[SortKey::asc("k")], &opts).unwrap().is_empty());
    assert!(sort_permutation(&[], &[SortKey::asc("k")], &opts).unwrap().is_empty());
    let batch = |k: Vec<i64>| RecordBatch::try_from_iter([("k", Arc::new(arrow::array::Int64Array::from(k)) as ArrayRef)]).unwrap();
    assert!(sort_batches(&[batch(vec![]), batch(vec![])], &[SortKey::asc("k")], &opts).unwrap().is_empty());
    // One batch, not sorted: sorted (not passed through).
    let out = sort_batches(&[batch(vec![3, 1, 2])], &[SortKey::desc("k")], &opts).unwrap();
    assert_eq!(out[0].column(0).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec(), vec![3, 2, 1]);
    // No sort key, a missing column, schemas that differ, batch size 0: errors.
    assert!(matches!(sort_batches(&[batch(vec![1])], &[], &opts), Err(Error::InvalidArgument(_))));
    assert!(matches!(sort_batches(&[batch(vec![1])], &[SortKey::asc("x")], &opts), Err(Error::MissingColumn { .. })));
    let other = RecordBatch::try_from_iter([("k", Arc::new(arrow::array::Int32Array::from(vec![1])) as ArrayRef)]).unwrap();
    assert!(matches!(sort_batches(&[batch(vec![1]), other], &[SortKey::asc("k")], &opts), Err(Error::SchemaMismatch { run: 1, .. })));
    assert!(matches!(
        sort_batches(&[batch(vec![1])], &[SortKey::asc("k")], &opts.clone().with_batch_size(0)),
        Err(Error::InvalidArgument(_))
    ));
}

/// Strings longer than the key budget that share their prefix: the key words tie on
/// different values, and the full comparator orders them, stably.
#[test]
fn long_strings_tie_on_prefix() {
    let mut rng = Rng::new(11);
    let prefix = "p".repeat(100);
    let n = 2 * SORT_TILE + 1;
    let v: Vec<Option<String>> = (0..n).map(|_| (!rng.chance(0.05)).then(|| format!("{prefix}{}", rng.below(30)))).collect();
    let k: ArrayRef = Arc::new(arrow::array::StringArray::from(v));
    let all = RecordBatch::try_from_iter([("k", k), ("id", Arc::new(UInt64Array::from_iter_values(0..n as u64)) as ArrayRef)]).unwrap();
    let batches = [all.slice(0, 1000), all.slice(1000, n - 1000)];
    for key in [SortKey::asc("k"), SortKey::desc("k"), SortKey::asc("k").nulls_first(true)] {
        let expected = oracle(&batches, &[(key.column.clone(), key.options)]);
        let perm = sort_permutation(&batches, std::slice::from_ref(&key), &SortBatchesOptions::default()).unwrap();
        assert_eq!(perm.indices.to_vec(), expected, "{key:?}");
    }
}

// ---------------------------------------------------------------- measurement

/// Not a test: `cargo test --release --test gpu -- --ignored --nocapture sort::measure` prints
/// `sort_cpu` on 2^24 random u64 keys at several tile sizes against the standard library's
/// stable sort and rayon's stable `par_sort` of (key, position) pairs. No assertion on time.
#[test]
#[ignore]
fn measure_sort_cpu() {
    use rayon::prelude::*;
    use std::time::Instant;
    let n = 1usize << 24;
    let mut rng = Rng::new(1);
    let keys: Vec<u64> = (0..n).map(|_| rng.next()).collect();
    let best = |f: &mut dyn FnMut()| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let reference = sort_cpu(&keys);
    println!("{} threads, n = 2^24 random u64, best of 3", rayon::current_num_threads());
    for tile in [1024usize, 2048, 4096, 8192, 16384] {
        let t = best(&mut || assert!(sort_cpu_with_tile(&keys, tile) == reference));
        println!("sort_cpu tile {tile:5}: {t:.3} s");
    }
    // The levels alone: the tiles as (key, position) pairs sorted unstably (what sort_cpu
    // does) or stably by key only, then merge_cpu of the sorted tiles.
    let tile_pairs = || -> Vec<(u64, u32)> { keys.par_iter().enumerate().map(|(i, &k)| (k, i as u32)).collect() };
    let t = best(&mut || {
        let mut p = tile_pairs();
        p.par_chunks_mut(SORT_TILE).for_each(|c| c.sort_unstable());
        std::hint::black_box(&p);
    });
    let u = best(&mut || {
        let mut p = tile_pairs();
        p.par_chunks_mut(SORT_TILE).for_each(|c| c.sort_by_key(|p| p.0));
        std::hint::black_box(&p);
    });
    println!("tile level alone, tiles of {SORT_TILE} pairs: sort_unstable of (key, position) {t:.3} s, stable sort_by_key {u:.3} s");
    let mut tiled = keys.clone();
    tiled.par_chunks_mut(SORT_TILE).for_each(|c| c.sort_unstable());
    let offsets: Vec<usize> = (0..=n).step_by(SORT_TILE).collect();
    let t = best(&mut || {
        std::hint::black_box(corank::engine::cpu::merge_cpu(&tiled, &offsets));
    });
    println!("merge level alone (merge_cpu of the {} sorted tiles): {t:.3} s", offsets.len() - 1);
    let pairs = || -> Vec<(u64, u32)> { keys.par_iter().enumerate().map(|(i, &k)| (k, i as u32)).collect() };
    let t = best(&mut || {
        let mut p = pairs();
        p.sort_by_key(|p| p.0);
        std::hint::black_box(&p);
    });
    println!("slice::sort_by_key (stable) of pairs: {t:.3} s");
    let t = best(&mut || {
        let mut p = pairs();
        p.par_sort_by_key(|p| p.0);
        std::hint::black_box(&p);
    });
    println!("rayon par_sort_by_key (stable) of pairs: {t:.3} s");
    let t = best(&mut || {
        let mut p = pairs();
        p.par_sort_unstable();
        std::hint::black_box(&p);
    });
    println!("rayon par_sort_unstable of (key, position) pairs: {t:.3} s");
}

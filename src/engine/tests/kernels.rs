//! GPU engine tests: every kernel variant and key width against the CPU engine.
//!
//! Without a GPU they skip (a line on stderr), unless `CORANK_REQUIRE_GPU=1`, which makes
//! them fail. `CORANK_GPU_SMALL=1` keeps only small cases (for compute-sanitizer, which is
//! slow). The set-up and device tests are `devices.rs`.

use super::support::{gpu_or_skip, small_only, Rng};
use corank::engine::cpu::merge_cpu;
use corank::engine::gpu::{self, GpuOptions};
use corank::keys::{KeyColumn, KeyWord};
use corank::{Devices, Kernel};
use corank::{Error, Indices};

/// Key makers: a u64 "value" (whose range sets how many duplicates) to a key of each width.
pub(super) trait TestKey: KeyWord {
    fn make(v: u64, rng: &mut Rng, dup_low: bool) -> Self;
    fn column(v: Vec<Self>) -> KeyColumn;
}
impl TestKey for u32 {
    fn make(v: u64, _: &mut Rng, _: bool) -> Self {
        v as u32
    }
    fn column(v: Vec<Self>) -> KeyColumn {
        KeyColumn::U32(v)
    }
}
impl TestKey for u64 {
    fn make(v: u64, _: &mut Rng, _: bool) -> Self {
        v
    }
    fn column(v: Vec<Self>) -> KeyColumn {
        KeyColumn::U64(v)
    }
}
macro_rules! wide {
    ($n:expr, $variant:ident) => {
        impl TestKey for [u64; $n] {
            // The value goes in the most significant word; lower words are few-valued (so
            // ties on the first word are decided by later words, and full ties happen).
            fn make(v: u64, rng: &mut Rng, dup_low: bool) -> Self {
                let mut k = [0u64; $n];
                k[0] = v;
                for w in 1..$n {
                    k[w] = if dup_low { rng.below(2) } else { rng.next() };
                }
                k
            }
            fn column(v: Vec<Self>) -> KeyColumn {
                KeyColumn::$variant(v)
            }
        }
    };
}
wide!(2, U64x2);
wide!(3, U64x3);
wide!(4, U64x4);

/// Sorted runs of the given lengths with values below `range` (small range = many duplicates).
pub(super) fn runs<T: TestKey>(lens: &[usize], range: u64, seed: u64) -> (Vec<T>, Vec<usize>) {
    let mut rng = Rng(seed | 1);
    let mut keys = Vec::new();
    let mut offsets = vec![0];
    for &len in lens {
        let mut run: Vec<T> = (0..len)
            .map(|_| {
                let v = rng.below(range);
                T::make(v, &mut rng, range < 64)
            })
            .collect();
        run.sort();
        keys.extend(run);
        offsets.push(keys.len());
    }
    (keys, offsets)
}

fn check<T: TestKey>(keys: Vec<T>, offsets: &[usize], kernels: &[Kernel], what: &str) {
    let expect = merge_cpu(&keys, offsets);
    let col = T::column(keys);
    for &kernel in kernels {
        for overlap in [true, false] {
            let got = gpu::merge_gpu(&col, offsets, &GpuOptions { kernel, overlap_download: overlap, ..GpuOptions::default() })
                .unwrap_or_else(|e| panic!("{what}: {kernel:?}: {e}"));
            if got != expect {
                let first = (0..expect.len()).find(|&i| got.get(i) != expect.get(i));
                panic!("{what}: {kernel:?} (overlap {overlap}) differs from the CPU engine at output {first:?} (n = {})", expect.len());
            }
        }
    }
}

fn all_widths(lens: &[usize], range: u64, seed: u64, kernels: &[Kernel], what: &str) {
    let (k, o) = runs::<u32>(lens, range.min(1 << 32), seed);
    check(k, &o, kernels, &format!("{what} u32"));
    let (k, o) = runs::<u64>(lens, range, seed);
    check(k, &o, kernels, &format!("{what} u64"));
    let (k, o) = runs::<[u64; 2]>(lens, range, seed);
    check(k, &o, kernels, &format!("{what} u64x2"));
    let (k, o) = runs::<[u64; 3]>(lens, range, seed);
    check(k, &o, kernels, &format!("{what} u64x3"));
    let (k, o) = runs::<[u64; 4]>(lens, range, seed);
    check(k, &o, kernels, &format!("{what} u64x4"));
}

#[test]
fn small_cases_every_kernel_and_width() {
    if !gpu_or_skip("small_cases_every_kernel_and_width") {
        return;
    }
    let cases: Vec<Vec<usize>> = vec![
        vec![],
        vec![0],
        vec![0, 0],
        vec![1, 1],
        vec![5, 0],
        vec![0, 7],
        vec![3000, 0, 1],
        vec![1, 2, 3],
        vec![2048, 2048],
        vec![2047, 2049, 1],
        vec![4096 + 17, 3],
        // The tiled kernel's tiles on sm_90: 4864 u32 keys, 3840 u64 keys, 1280 wider ones.
        vec![1920, 1920],
        vec![3839, 3842, 1],
        vec![3840 * 2 + 1, 3839],
        vec![640, 640],
        vec![1279, 1282, 1],
        vec![2432, 2432],
        vec![4863, 4866, 1],
        vec![4864 * 2 + 1, 4863],
        // The k-way kernel's tiles on sm_90: 4352 u64 keys, 4864 u32 and u64x2 keys (the
        // tiled kernel's u32 tile, above).
        vec![2176, 2176],
        vec![4351, 4353, 1],
        vec![4352 * 2 + 1, 4351, 7, 4352],
        vec![4864 + 1, 4863, 7, 4864],
        vec![10_000, 9_000, 1, 0, 333],
    ];
    for (i, lens) in cases.iter().enumerate() {
        for range in [4, 1 << 40] {
            all_widths(lens, range, 7 + i as u64, &Kernel::ALL, &format!("case {lens:?} range {range}"));
        }
    }
}

#[test]
fn k_from_1_to_64() {
    if !gpu_or_skip("k_from_1_to_64") {
        return;
    }
    let mut rng = Rng(99);
    let ks: Vec<usize> = if small_only() { vec![1, 2, 3, 5, 17, 64] } else { (1..=64).collect() };
    for k in ks {
        let per = if small_only() { 300 } else { 5000 };
        let lens: Vec<usize> = (0..k).map(|_| rng.below(2 * per as u64) as usize).collect();
        let range = if k % 2 == 0 { 1 << 40 } else { 10 };
        let (keys, o) = runs::<u64>(&lens, range, k as u64);
        check(keys, &o, &Kernel::ALL, &format!("k = {k}"));
        if k % 8 == 1 || k == 64 {
            all_widths(&lens, range, k as u64 + 1000, &Kernel::ALL, &format!("k = {k}"));
        }
    }
    // More than 64 runs: the k-way kernel takes two passes.
    let lens: Vec<usize> = (0..100).map(|i| (i * 37) % 500).collect();
    let (keys, o) = runs::<u64>(&lens, 50, 5);
    check(keys, &o, &Kernel::ALL, "k = 100");
}

/// Many short runs (the DataFusion node's 8192-row batches): 2046 runs make an 11-level
/// tree whose metadata once reached the device after the kernels read it (a race: the
/// operator bench failed every time on the H200; compute-sanitizer hid it).
#[test]
fn many_short_runs() {
    if !gpu_or_skip("many_short_runs") {
        return;
    }
    let (nruns, per) = if small_only() { (300, 64) } else { (2046, 8192) };
    let lens = vec![per; nruns];
    let (keys, o) = runs::<u64>(&lens, 1 << 40, 77);
    check(keys, &o, &Kernel::ALL, &format!("{nruns} runs of {per}"));
}

#[test]
fn skewed_splits() {
    if !gpu_or_skip("skewed_splits") {
        return;
    }
    let n = if small_only() { 5000 } else { 300_000 };
    // All of A before all of B, and all of B before all of A.
    let a: Vec<u64> = (0..n as u64).collect();
    let b: Vec<u64> = (n as u64..2 * n as u64).collect();
    let ab: Vec<u64> = a.iter().chain(&b).copied().collect();
    check(ab, &[0, n, 2 * n], &Kernel::ALL, "A before B");
    let ba: Vec<u64> = b.iter().chain(&a).copied().collect();
    check(ba, &[0, n, 2 * n], &Kernel::ALL, "B before A");
    // All keys equal: the output is the identity (stability).
    check(vec![42u64; 2 * n + 3], &[0, n, 2 * n + 3], &Kernel::ALL, "all equal");
    check(vec![7u32; 3 * n], &[0, n, 2 * n, 3 * n], &Kernel::ALL, "all equal, 3 runs");
    // One run empty.
    check((0..n as u64).collect::<Vec<_>>(), &[0, 0, n], &Kernel::ALL, "first run empty");
    check((0..n as u64).collect::<Vec<_>>(), &[0, n, n], &Kernel::ALL, "second run empty");
    // A long stretch of A, then alternating: consumption per tile swings from all-A to
    // half/half, which is what breaks the published circular-buffer code (it reloads A from
    // the consumed count, so after a tile that took everything from one run the other
    // run's buffer is refilled from the wrong place).
    let mut a: Vec<u64> = (0..n as u64).map(|x| x * 2).collect();
    let mut b: Vec<u64> = (0..(n as u64 / 3)).map(|x| x * 6 + 1).collect();
    b.extend(std::iter::repeat_n(3 * n as u64, 777));
    a.extend(std::iter::repeat_n(3 * n as u64, 555));
    let (la, lb) = (a.len(), b.len());
    a.extend(b);
    check(a, &[0, la, la + lb], &Kernel::ALL, "circular-buffer breaker");
}

/// The u64-index kernels (what inputs of more than u32::MAX keys use), forced at small
/// sizes: every kernel and key width, several k, against the CPU engine's u32 indices.
#[test]
fn u64_indices_every_kernel_and_width() {
    if !gpu_or_skip("u64_indices_every_kernel_and_width") {
        return;
    }
    fn forced<T: TestKey>(lens: &[usize], range: u64, seed: u64) {
        let (keys, offsets) = runs::<T>(lens, range, seed);
        let expect = merge_cpu(&keys, &offsets);
        let col = T::column(keys);
        for kernel in Kernel::ALL {
            let got = gpu::merge_gpu(&col, &offsets, &GpuOptions { kernel, force_u64_indices: true, ..GpuOptions::default() })
                .unwrap_or_else(|e| panic!("{lens:?}: {kernel:?}: {e}"));
            assert!(matches!(got, Indices::U64(_)), "{kernel:?}: forced u64 indices came back as u32");
            assert_eq!(got.len(), expect.len());
            if let Some(i) = (0..expect.len()).find(|&i| got.get(i) != expect.get(i)) {
                panic!("{lens:?} range {range}: {kernel:?} with u64 indices differs from the CPU engine at output {i}");
            }
        }
    }
    for (i, (lens, range)) in
        [(vec![5000, 7000], 1u64 << 40), (vec![3000; 7], 20), (vec![900; 64], 1 << 20), (vec![0, 40_000, 1], 3)].into_iter().enumerate()
    {
        let seed = 9000 + i as u64;
        forced::<u32>(&lens, range.min(1 << 32), seed);
        forced::<u64>(&lens, range, seed);
        forced::<[u64; 2]>(&lens, range, seed);
        forced::<[u64; 3]>(&lens, range, seed);
        forced::<[u64; 4]>(&lens, range, seed);
    }
}

#[test]
fn circular_buffer_tile_edges() {
    if !gpu_or_skip("circular_buffer_tile_edges") {
        return;
    }
    // Sizes around the circular kernel's slot count (1024 / 512) and section (8 tiles).
    for (i, &(la, lb)) in [(1023, 1), (1024, 1024), (1025, 3), (8191, 8193), (512, 4000), (4000, 512), (9000, 100)].iter().enumerate() {
        for range in [3u64, 1 << 50] {
            all_widths(&[la, lb], range, 500 + i as u64, &[Kernel::Circular, Kernel::Tiled], &format!("circular edges {la}+{lb}"));
        }
    }
}

#[test]
fn large_and_duplicate_heavy() {
    if !gpu_or_skip("large_and_duplicate_heavy") || small_only() {
        return;
    }
    for (lens, range) in [(vec![5_000_000, 5_000_000], 1u64 << 60), (vec![6_000_000, 4_000_000], 1000), (vec![625_000; 16], 1 << 20)] {
        let (k, o) = runs::<u64>(&lens, range, 3);
        check(k, &o, &Kernel::ALL, &format!("{} runs, range {range}", lens.len()));
    }
    let (k, o) = runs::<[u64; 2]>(&[3_000_000, 3_000_000, 4_000_000], 100, 4);
    check(k, &o, &[Kernel::KWay, Kernel::Tiled], "u64x2, 10^7");
}

/// The tiled kernel's last level compares 32-bit narrow keys (cuda/cta_merge.cuh,
/// NarrowMap): keys a tile's range maps to the same narrow key must be decided by the full
/// keys. A few values spread over the whole u64 range, several of them 1 to 255 apart (the
/// shift drops 32 bits), with many duplicates of each; and two-word keys whose first word is
/// constant (the map is of the second word) or few-valued (the first word, never exact).
#[test]
fn narrow_keys_that_tie_are_decided_by_the_full_keys() {
    if !gpu_or_skip("narrow_keys_that_tie_are_decided_by_the_full_keys") {
        return;
    }
    const VALUES: [u64; 8] = [0, 1 << 40, (1 << 40) + 1, (1 << 40) + 255, 1 << 63, (1 << 63) + 2, u64::MAX - 1, u64::MAX];
    let mut rng = Rng(77);
    let n = if small_only() { 3 } else { 40 };
    for lens in [vec![5_000, 7_000], vec![4096 * 3 + 5, 1], vec![1, 4096 * 2 - 1], vec![900 * n, 1000 * n, 3, 700 * n]] {
        let make_runs = |rng: &mut Rng, values: &[u64]| -> (Vec<u64>, Vec<usize>) {
            let mut keys = Vec::new();
            let mut offsets = vec![0];
            for &len in &lens {
                let mut run: Vec<u64> = (0..len).map(|_| values[rng.below(values.len() as u64) as usize]).collect();
                run.sort();
                keys.extend(run);
                offsets.push(keys.len());
            }
            (keys, offsets)
        };
        let kernels = [Kernel::Tiled, Kernel::Auto];
        let (k, o) = make_runs(&mut rng, &VALUES);
        check(k.clone(), &o, &kernels, &format!("{lens:?} u64, wide values"));
        // The same values in the second word, under a constant and under a few-valued first word.
        let constant: Vec<[u64; 2]> = k.iter().map(|&v| [7, v]).collect();
        check(constant, &o, &kernels, &format!("{lens:?} u64x2, constant first word"));
        let (k2, o2) = make_runs(&mut rng, &VALUES[..4]);
        let few: Vec<[u64; 2]> = k2.iter().map(|&v| [v >> 40, v]).collect(); // nondecreasing in v: runs stay sorted
        check(few, &o2, &kernels, &format!("{lens:?} u64x2, few-valued first word"));
    }
}

/// The k-way kernel merges a tile of u64 keys spanning less than 2^(64 - b) - 1 (its
/// positions take the other b bits: 13 for sm_90's 4,352-key tile) as packed elements, key
/// offset and tile position in one word (cuda/merge_kway.cu), and any other tile on tile
/// positions. Tiles on both sides of the bound in one merge, tiles at the bound, and ties
/// across runs in both kinds.
#[test]
fn kway_packed_tiles_and_their_fallback() {
    if !gpu_or_skip("kway_packed_tiles_and_their_fallback") {
        return;
    }
    let kernels = [Kernel::KWay, Kernel::Auto];
    // The bound of the H100's and H200's policy (the tests' devices); the bound of a
    // 4096-key tile (2^52) is kept too.
    let policy = gpu::tuning::policy(gpu::tuning::Arch::SM90, 8, 4);
    let tile = (gpu::tuning::THREADS * policy.ipt_kway) as u64;
    let bound = 1u64 << (64 - (u64::BITS - (tile - 1).leading_zeros()));
    assert_eq!(bound, 1 << 51, "the sm_90 tile of {tile} keys");
    // Tiles whose keys span bound - 2 (packed: the largest element just below ~0), bound - 1
    // and bound (not packed); the base is far from 0 so offsets, not keys, must fit.
    let base = 3u64 << 60;
    for span in [bound - 2, bound - 1, bound, 2 * bound - 1, 2 * bound] {
        let a = [base, base + 1, base + span];
        let b = [base, base + span, base + span];
        let c = [base + 1, base + 2];
        let keys: Vec<u64> = a.iter().chain(&b).chain(&c).copied().collect();
        check(keys, &[0, 3, 6, 8], &kernels, &format!("span {span:#x}"));
    }
    // Sixteen runs of keys below 2^40 with many ties (packed tiles), one of keys over the
    // whole u64 range (the tiles it reaches are not packed), in one merge; then 100 such runs
    // (two k-way passes: the first keeps its keys, packed tiles rebuild them).
    let mut rng = Rng(4242);
    let per = if small_only() { 700 } else { 20_000 };
    for nruns in [17usize, 100] {
        let mut keys = Vec::new();
        let mut offsets = vec![0];
        for r in 0..nruns {
            let mut run: Vec<u64> = (0..per)
                .map(|_| match r % 17 {
                    5 => rng.next(),
                    _ if r % 2 == 0 => rng.below(1 << 40),
                    _ => rng.below(300) << 30,
                })
                .collect();
            run.sort();
            keys.extend(run);
            offsets.push(keys.len());
        }
        check(keys, &offsets, &kernels, &format!("{nruns} runs, packed and not"));
    }
}

#[test]
fn more_than_2_pow_31_keys() {
    if !gpu_or_skip("more_than_2_pow_31_keys") || small_only() {
        return;
    }
    // 2^31 + 2^20 u32 keys in two runs: positions pass i32::MAX and the engine must use
    // u64-safe offsets; checked against the CPU engine (which uses u32 indices here, as the
    // total still fits in u32, so the same Indices variant).
    let n = (1usize << 31) + (1 << 20);
    let half = n / 2 + 12345;
    let mut keys: Vec<u32> = Vec::with_capacity(n);
    keys.extend((0..half as u64).map(|i| ((i * 3) >> 1) as u32));
    keys.extend((0..(n - half) as u64).map(|i| ((i * 3 + 1) >> 1) as u32));
    let offsets = [0, half, n];
    let expect = merge_cpu(&keys, &offsets);
    let col = KeyColumn::U32(keys);
    for kernel in [Kernel::KWay, Kernel::Tiled] {
        let got = gpu::merge_gpu(&col, &offsets, &GpuOptions { kernel, overlap_download: true, ..GpuOptions::default() }).unwrap();
        assert!(got == expect, "{kernel:?}: 2^31 + 2^20 keys differ from the CPU engine");
    }
}

#[test]
fn more_than_u32_max_keys_u64_indices() {
    if !gpu_or_skip("more_than_u32_max_keys_u64_indices") || small_only() {
        return;
    }
    if std::env::var("CORANK_GPU_HUGE").as_deref() != Ok("1") {
        eprintln!("more_than_u32_max_keys_u64_indices: set CORANK_GPU_HUGE=1 (needs ~60 GB device and host memory)");
        return;
    }
    // 2^32 + 2^20 u32 keys: u64 indices.
    let n = (1usize << 32) + (1 << 20);
    let half = n / 2 - 999;
    let mut keys: Vec<u32> = Vec::with_capacity(n);
    keys.extend((0..half as u64).map(|i| (i >> 1) as u32));
    keys.extend((0..(n - half) as u64).map(|i| (i >> 1) as u32));
    let offsets = [0, half, n];
    let col = KeyColumn::U32(keys);
    let got = gpu::merge_gpu(&col, &offsets, &GpuOptions::default()).unwrap();
    let Indices::U64(v) = &got else { panic!("expected u64 indices") };
    let KeyColumn::U32(keys) = &col else { unreachable!() };
    assert_stable_permutation(keys, v);
}

/// `v` is a permutation of `keys`' positions (each index once) that sorts them, ties by
/// position (stability): what the huge cases check instead of a CPU result.
fn assert_stable_permutation(keys: &[u32], v: &[u64]) {
    let n = keys.len();
    assert_eq!(v.len(), n);
    for w in v.windows(2) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        assert!(keys[a] < keys[b] || (keys[a] == keys[b] && a < b));
    }
    let mut seen = vec![0u64; n.div_ceil(64)];
    for &i in v {
        let (word, bit) = (i as usize / 64, i % 64);
        assert!(seen[word] & (1 << bit) == 0, "index {i} twice");
        seen[word] |= 1 << bit;
    }
}

/// The GPU sort (tiles sorted in shared memory, then the co-rank merge tree): equal to the
/// CPU sort for every key width and index width; sizes 0, 1, the tile ± 1, two tiles ± 1
/// and random; random, few-valued, all-equal, sorted and reverse-sorted keys; every kernel
/// of the merge levels.
#[test]
fn sort_matches_the_cpu() {
    if !gpu_or_skip("sort_matches_the_cpu") {
        return;
    }
    // The GPU tile is 2048 or 4096 keys on sm_90 (fewer on smaller devices): cover both.
    let mut sizes = vec![0, 1, 2, 31, 2047, 2048, 2049, 4095, 4096, 4097, 8191, 8193, 12289, 40_000];
    if !small_only() {
        sizes.extend([300_000, 1 << 20]);
    }
    for &n in &sizes {
        for shape in [SortShape::Random, SortShape::FewValues, SortShape::AllEqual, SortShape::Sorted, SortShape::Reverse] {
            sort_case::<u32>(n, shape, &[Kernel::Auto]);
            sort_case::<u64>(n, shape, &[Kernel::Auto]);
            sort_case::<[u64; 2]>(n, shape, &[Kernel::Auto]);
            sort_case::<[u64; 3]>(n, shape, &[Kernel::Auto]);
            sort_case::<[u64; 4]>(n, shape, &[Kernel::Auto]);
        }
    }
    // Every kernel of the merge levels.
    for n in [9000, 70_000] {
        sort_case::<u64>(n, SortShape::FewValues, &[Kernel::Tiled, Kernel::KWay, Kernel::Basic, Kernel::Circular]);
        sort_case::<[u64; 2]>(n, SortShape::Random, &[Kernel::Tiled, Kernel::KWay, Kernel::Basic, Kernel::Circular]);
    }
}

/// A sort whose tree has two k-way levels, the second reading the first's indices, both
/// merging on keys and indices (`LevelPlan::random_tiles_pack`: groups too small for random
/// keys to pack): small enough for the sanitizer.
#[test]
fn sort_two_kway_levels_matches_the_cpu() {
    if !gpu_or_skip("sort_two_kway_levels_matches_the_cpu") {
        return;
    }
    for shape in [SortShape::Random, SortShape::FewValues] {
        sort_case::<u64>(300_000, shape, &[Kernel::Auto]);
    }
}

#[derive(Debug, Clone, Copy)]
enum SortShape {
    Random,
    FewValues,
    AllEqual,
    Sorted,
    Reverse,
}

fn sort_case<T: TestKey>(n: usize, shape: SortShape, kernels: &[Kernel]) {
    let mut rng = Rng(n as u64 * 7919 + shape as u64 + 1);
    let range = match shape {
        SortShape::FewValues => 5,
        SortShape::AllEqual => 1,
        _ => u64::MAX,
    };
    let mut keys: Vec<T> = (0..n).map(|_| T::make(rng.below(range), &mut rng, range < 64)).collect();
    match shape {
        SortShape::Sorted => keys.sort(),
        SortShape::Reverse => keys.sort_by(|a, b| b.cmp(a)),
        _ => {}
    }
    let expect = corank::engine::sort::sort_cpu(&keys).to_vec();
    let col = T::column(keys);
    for &kernel in kernels {
        for wide in [false, true] {
            let options = GpuOptions { kernel, force_u64_indices: wide, ..GpuOptions::default() };
            let got = gpu::sort_gpu(&col, &options).unwrap();
            assert!(matches!((&got, wide), (Indices::U64(_), true) | (Indices::U32(_), false)), "index width");
            assert!(
                got.to_vec() == expect,
                "{n} keys of {} bytes, {shape:?}, {kernel:?}, wide {wide}: differs from the CPU sort",
                col.key_bytes()
            );
        }
    }
}

/// The sort split across devices (one piece a device, sorted there, the sorted pieces
/// merged on the first device): equal to the CPU sort for every key width and index width,
/// 2 to 64 pieces, sizes below the piece count, at and around the sort tile, every shape
/// (ties across pieces), every kernel of the merge levels. The split runs over device 0
/// repeated (so any GPU machine tests it), and over all devices where there are two or more.
#[test]
fn split_sort_matches_the_cpu() {
    if !gpu_or_skip("split_sort_matches_the_cpu") {
        return;
    }
    let count = (0..).take_while(|&d| gpu::device_name(d).is_ok()).count();
    let mut splits: Vec<Vec<usize>> = vec![vec![0, 0], vec![0, 0, 0]];
    if count >= 2 {
        splits.push((0..count).collect());
        splits.push((0..count).rev().collect());
    } else {
        eprintln!("split_sort_matches_the_cpu: one GPU; the split runs over device 0 repeated only");
    }
    // The GPU tile is 2048 or 4096 keys on sm_90: pieces of a tile ± 1 for both, two pieces.
    let mut sizes = vec![0, 1, 2, 3, 5, 4095, 4096, 4097, 8191, 8192, 8193, 9000];
    if !small_only() {
        sizes.extend([70_000, 1 << 20]);
    }
    for &n in &sizes {
        for shape in [SortShape::Random, SortShape::FewValues, SortShape::AllEqual, SortShape::Reverse] {
            split_sort_case::<u32>(n, shape, &splits, count, &[Kernel::Auto]);
            split_sort_case::<u64>(n, shape, &splits, count, &[Kernel::Auto]);
            split_sort_case::<[u64; 2]>(n, shape, &splits, count, &[Kernel::Auto]);
            split_sort_case::<[u64; 3]>(n, shape, &splits, count, &[Kernel::Auto]);
            split_sort_case::<[u64; 4]>(n, shape, &splits, count, &[Kernel::Auto]);
        }
    }
    let every = [Kernel::Auto, Kernel::Tiled, Kernel::KWay, Kernel::Basic, Kernel::Circular];
    split_sort_case::<u64>(9000, SortShape::FewValues, &[vec![0; 64], vec![0; 17]], count, &every);
    split_sort_case::<[u64; 2]>(9000, SortShape::Random, &[vec![0; 5]], count, &every);
}

/// `sort_gpu_into`: registered keys and output (DMA both ways), and plain memory, on one
/// device and split (device 0 twice, and every device where there are two or more), equal to
/// the CPU sort for u32 and u64 indices; a wrong output length and u32 indices where u64 are
/// asked for are errors, not wrong results.
#[test]
fn sort_into_registered_memory_matches_the_cpu() {
    if !gpu_or_skip("sort_into_registered_memory_matches_the_cpu") {
        return;
    }
    let count = (0..).take_while(|&d| gpu::device_name(d).is_ok()).count();
    let n = if small_only() { 20_000 } else { 300_000 };
    let mut rng = Rng(17);
    let keys: Vec<u64> = (0..n).map(|_| rng.below(5000)).collect();
    let expect: Vec<u64> = corank::engine::sort::sort_cpu(&keys).to_vec().into_iter().map(|i| i as u64).collect();
    let plain = KeyColumn::U64(keys.clone());
    let registered = gpu::Registered::new(KeyColumn::U64(keys)).unwrap();
    for col in [&plain, &*registered] {
        let mut out32 = gpu::Registered::new(vec![u32::MAX; n]).unwrap();
        gpu::sort_gpu_into(col, &GpuOptions::default(), out32.as_mut_slice()).unwrap();
        assert!(out32.iter().map(|&i| i as u64).eq(expect.iter().copied()), "u32 into registered memory");
        let mut out64 = vec![u64::MAX; n];
        gpu::sort_gpu_into(col, &GpuOptions::default(), &mut out64).unwrap();
        assert!(out64 == expect, "u64 into plain memory");
        let mut split = gpu::Registered::new(vec![u32::MAX; n]).unwrap();
        gpu::bench::sort_split_on_into(col, &[0, 0], &GpuOptions::default(), split.as_mut_slice()).unwrap();
        assert!(split.iter().map(|&i| i as u64).eq(expect.iter().copied()), "split over device 0 twice, registered output");
        if count >= 2 {
            let mut all = gpu::Registered::new(vec![u64::MAX; n]).unwrap();
            gpu::sort_gpu_into(col, &GpuOptions { devices: Devices::All, ..GpuOptions::default() }, all.as_mut_slice()).unwrap();
            assert!(all.as_slice() == expect.as_slice(), "split over every device, registered output");
        }
    }
    let mut short = vec![0u32; n - 1];
    assert!(matches!(gpu::sort_gpu_into(&plain, &GpuOptions::default(), &mut short), Err(Error::InvalidArgument(_))));
    let mut narrow = vec![0u32; n];
    let wide = GpuOptions { force_u64_indices: true, ..GpuOptions::default() };
    assert!(matches!(gpu::sort_gpu_into(&plain, &wide, &mut narrow), Err(Error::InvalidArgument(_))));
}

fn split_sort_case<T: TestKey>(n: usize, shape: SortShape, splits: &[Vec<usize>], count: usize, kernels: &[Kernel]) {
    let mut rng = Rng(n as u64 * 104_729 + shape as u64 + 3);
    let range = match shape {
        SortShape::FewValues => 5,
        SortShape::AllEqual => 1,
        _ => u64::MAX,
    };
    let mut keys: Vec<T> = (0..n).map(|_| T::make(rng.below(range), &mut rng, range < 64)).collect();
    if let SortShape::Reverse = shape {
        keys.sort_by(|a, b| b.cmp(a));
    }
    let expect = corank::engine::sort::sort_cpu(&keys).to_vec();
    let col = T::column(keys);
    for &kernel in kernels {
        for wide in [false, true] {
            let options = GpuOptions { kernel, force_u64_indices: wide, ..GpuOptions::default() };
            for devices in splits {
                let got = gpu::bench::sort_split_on(&col, devices, &options).unwrap();
                assert!(matches!((&got, wide), (Indices::U64(_), true) | (Indices::U32(_), false)), "index width");
                assert!(
                    got.to_vec() == expect,
                    "{n} keys of {} bytes, {shape:?}, {kernel:?}, wide {wide}, devices {devices:?}: differs from the CPU sort",
                    col.key_bytes()
                );
            }
            if count >= 2 {
                let got = gpu::sort_gpu(&col, &GpuOptions { devices: Devices::All, ..options.clone() }).unwrap();
                assert!(got.to_vec() == expect, "sort_gpu on all devices, {n} keys, {shape:?}, {kernel:?}: differs from the CPU sort");
            }
        }
    }
}

/// The sort through the engine choice and the API: `Engine::Gpu` sorts batches on the GPU,
/// equal to the CPU engine's result.
#[test]
fn sort_batches_on_the_gpu() {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use corank::{sort_batches, SortBatchesOptions};
    use corank::{Engine, SortKey};
    use std::sync::Arc;
    if !gpu_or_skip("sort_batches_on_the_gpu") {
        return;
    }
    let mut rng = Rng(99);
    let batches: Vec<RecordBatch> = (0..5)
        .map(|b| {
            let n = 3000 + b * 1111;
            let k: Int64Array = (0..n).map(|_| if rng.below(10) == 0 { None } else { Some(rng.below(50) as i64 - 25) }).collect();
            let s: StringArray = (0..n).map(|_| Some(format!("s{}", rng.below(7)))).collect();
            // UUIDs (FixedSizeBinary(16) keys: 3 key words with the null bit), many equal.
            let u = arrow::array::FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                (0..n).map(|_| (rng.below(20) != 0).then(|| [[rng.below(256) as u8; 8], [rng.below(3) as u8; 8]].concat())),
                16,
            )
            .unwrap();
            RecordBatch::try_from_iter([("k", Arc::new(k) as ArrayRef), ("s", Arc::new(s) as ArrayRef), ("u", Arc::new(u) as ArrayRef)])
                .unwrap()
        })
        .collect();
    for keys in [vec![SortKey::desc("k"), SortKey::asc("s")], vec![SortKey::asc("u"), SortKey::desc("k")]] {
        let cpu = sort_batches(&batches, &keys, &SortBatchesOptions::default().with_engine(Engine::Cpu)).unwrap();
        let gpu = sort_batches(&batches, &keys, &SortBatchesOptions::default().with_engine(Engine::Gpu)).unwrap();
        assert_eq!(cpu, gpu);
    }
}

/// More than 2^31 keys with u64 indices (behind `CORANK_GPU_HUGE=1`, like the merge's).
#[test]
fn sort_more_than_2_pow_31_keys() {
    if !gpu_or_skip("sort_more_than_2_pow_31_keys") || small_only() {
        return;
    }
    if std::env::var("CORANK_GPU_HUGE").as_deref() != Ok("1") {
        eprintln!("sort_more_than_2_pow_31_keys: set CORANK_GPU_HUGE=1 (needs ~40 GB device and host memory)");
        return;
    }
    let n = (1usize << 31) + (1 << 20);
    let mut rng = Rng(5);
    let keys: Vec<u32> = (0..n).map(|_| rng.below(1 << 20) as u32).collect();
    let col = KeyColumn::U32(keys);
    let got = gpu::sort_gpu(&col, &GpuOptions { force_u64_indices: true, ..GpuOptions::default() }).unwrap();
    let Indices::U64(v) = &got else { panic!("expected u64 indices") };
    let KeyColumn::U32(keys) = &col else { unreachable!() };
    assert_stable_permutation(keys, v);
}

/// Keys and outputs in registered (page-locked) host memory go up and come down by DMA,
/// without the staging buffers: the results equal the CPU engine's for u32 and u64 indices,
/// one and two key words, on one device and split (device 0 twice), with registered keys and
/// a pageable output and the other way round; a wrong output length and u32 indices where
/// u64 are asked for are errors, not wrong results.
#[test]
fn registered_memory_merges_match_the_cpu() {
    if !gpu_or_skip("registered_memory_merges_match_the_cpu") {
        return;
    }
    fn case<T: TestKey>(lens: &[usize], range: u64, seed: u64) {
        let (keys, offsets) = runs::<T>(lens, range, seed);
        let expect: Vec<u64> = merge_cpu(&keys, &offsets).to_vec().into_iter().map(|i| i as u64).collect();
        let plain = T::column(keys.clone());
        let registered = gpu::Registered::new(T::column(keys)).unwrap();
        let n = expect.len();
        let what = format!("{lens:?}, range {range}, {} key bytes", plain.key_bytes());
        for col in [&plain, &*registered] {
            let mut out32 = gpu::Registered::new(vec![u32::MAX; n]).unwrap();
            gpu::merge_gpu_into(col, &offsets, &GpuOptions::default(), out32.as_mut_slice()).unwrap();
            assert!(out32.iter().map(|&i| i as u64).eq(expect.iter().copied()), "{what}: u32 into registered memory");
            let mut pageable = vec![u32::MAX; n];
            gpu::merge_gpu_into(col, &offsets, &GpuOptions::default(), &mut pageable).unwrap();
            assert!(pageable.iter().map(|&i| i as u64).eq(expect.iter().copied()), "{what}: u32 into pageable memory");
            let mut out64 = gpu::Registered::new(vec![u64::MAX; n]).unwrap();
            gpu::merge_gpu_into(col, &offsets, &GpuOptions { kernel: Kernel::KWay, ..GpuOptions::default() }, out64.as_mut_slice())
                .unwrap();
            assert!(out64[..] == expect[..], "{what}: u64 into registered memory");
            out32.as_mut_slice().fill(u32::MAX);
            gpu::bench::merge_split_on_into(col, &offsets, &[0, 0], &GpuOptions::default(), out32.as_mut_slice()).unwrap();
            assert!(out32.iter().map(|&i| i as u64).eq(expect.iter().copied()), "{what}: split over device 0 twice");
            let keys_back = out32.into_inner();
            assert_eq!(keys_back.len(), n);
        }
    }
    case::<u64>(&[5000, 7000, 0, 3000], u64::MAX, 71);
    case::<u64>(&[40_000; 16], 50, 72);
    case::<[u64; 2]>(&[3000, 1, 9000], 1 << 20, 73);
    case::<u64>(&[0, 20_000], 10, 74); // one run: the indices are written on the host
    if !small_only() {
        case::<u64>(&[1 << 20; 8], u64::MAX, 75); // several staging pieces' worth each way
    }
    let col = gpu::Registered::new(KeyColumn::U64(vec![1, 3, 2, 4])).unwrap();
    let mut short = vec![0u32; 3];
    assert!(matches!(gpu::merge_gpu_into(&col, &[0, 2, 4], &GpuOptions::default(), &mut short), Err(Error::InvalidArgument(_))));
    let mut narrow = vec![0u32; 4];
    let forced = GpuOptions { force_u64_indices: true, ..GpuOptions::default() };
    assert!(matches!(gpu::merge_gpu_into(&col, &[0, 2, 4], &forced, &mut narrow), Err(Error::InvalidArgument(_))));
    let mut wide = vec![0u64; 4];
    gpu::merge_gpu_into(&col, &[0, 2, 4], &forced, &mut wide).unwrap();
    assert_eq!(wide, [0, 2, 1, 3]);
    let empty = gpu::Registered::new(Vec::<u32>::new()).unwrap();
    assert!(empty.is_empty());
}

//! The co-rank reference on the book's examples and on the edge cases.

use corank::engine::co_rank::{co_rank, co_rank_k};

/// The stable merge of a then b, as (run, row) pairs, by brute force.
fn brute(a: &[u64], b: &[u64]) -> Vec<(usize, usize)> {
    let mut all: Vec<(u64, usize, usize)> =
        a.iter().enumerate().map(|(i, &x)| (x, 0, i)).chain(b.iter().enumerate().map(|(i, &x)| (x, 1, i))).collect();
    all.sort(); // (key, run, row): ties go to the earlier run, then the earlier row
    all.into_iter().map(|(_, r, i)| (r, i)).collect()
}

fn check_all_k(a: &[u64], b: &[u64]) {
    let order = brute(a, b);
    for k in 0..=a.len() + b.len() {
        let from_a = order[..k].iter().filter(|(r, _)| *r == 0).count();
        assert_eq!(co_rank(k, a, b), from_a, "k = {k}, a = {a:?}, b = {b:?}");
        let mut split = [0; 2];
        co_rank_k(k, &[a, b], &mut split);
        assert_eq!(split, [from_a, k - from_a], "k-way, k = {k}");
    }
}

#[test]
fn book_example() {
    // PMPP's merge chapter: A = 1,7,8,9,10 and B = 7,10,10,12 merge to 1,7,7,8,9,10,10,10,12.
    let a = [1, 7, 8, 9, 10];
    let b = [7, 10, 10, 12];
    // k = 3: the first three outputs are 1, 7 (A), 7 (B): i = 2, j = 1.
    assert_eq!(co_rank(3, &a, &b), 2);
    // k = 6: 1,7,7,8,9,10 — the 10 of A comes before both 10s of B: i = 5, j = 1.
    assert_eq!(co_rank(6, &a, &b), 5);
    // k = 8: i = 5, j = 3.
    assert_eq!(co_rank(8, &a, &b), 5);
    check_all_k(&a, &b);
}

#[test]
fn ties_go_to_the_earlier_run() {
    let a = [5, 5, 5];
    let b = [5, 5];
    for k in 0..=3 {
        assert_eq!(co_rank(k, &a, &b), k);
    }
    assert_eq!(co_rank(4, &a, &b), 3);
    assert_eq!(co_rank(5, &a, &b), 3);
    check_all_k(&a, &b);
}

#[test]
fn k_zero_and_k_total() {
    let a = [1, 2, 3];
    let b = [0, 4];
    assert_eq!(co_rank(0, &a, &b), 0);
    assert_eq!(co_rank(5, &a, &b), 3);
}

#[test]
fn one_side_empty() {
    let a: [u64; 0] = [];
    let b = [1, 2, 3];
    for k in 0..=3 {
        assert_eq!(co_rank(k, &a, &b), 0);
        assert_eq!(co_rank(k, &b, &a), k);
    }
    check_all_k(&a, &b);
    check_all_k(&b, &a);
    check_all_k(&[], &[]);
}

#[test]
fn skewed_runs() {
    // All of A before B, all of B before A.
    check_all_k(&[1, 2, 3, 4], &[5, 6, 7]);
    check_all_k(&[5, 6, 7], &[1, 2, 3, 4]);
}

/// xorshift64: deterministic test data without extra dependencies.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

#[test]
fn k_way_against_brute_force() {
    let mut next = xorshift(0x9e3779b97f4a7c15);
    for _ in 0..200 {
        let k = (next() % 9 + 1) as usize;
        let domain = next() % 20 + 1;
        let runs: Vec<Vec<u64>> = (0..k)
            .map(|_| {
                let mut r: Vec<u64> = (0..next() % 30).map(|_| next() % domain).collect();
                r.sort();
                r
            })
            .collect();
        let refs: Vec<&[u64]> = runs.iter().map(|r| r.as_slice()).collect();
        let mut all: Vec<(u64, usize)> = runs.iter().enumerate().flat_map(|(r, v)| v.iter().map(move |&x| (x, r))).collect();
        all.sort();
        let mut split = vec![0; k];
        for t in 0..=all.len() {
            co_rank_k(t, &refs, &mut split);
            for (r, &s) in split.iter().enumerate() {
                assert_eq!(s, all[..t].iter().filter(|x| x.1 == r).count(), "t = {t} run {r}");
            }
        }
    }
}

#[test]
fn k_way_wide_keys() {
    let a: Vec<[u64; 2]> = vec![[0, 5], [1, 0], [1, 0]];
    let b: Vec<[u64; 2]> = vec![[0, 5], [1, 0], [u64::MAX, 0]];
    let mut split = [0; 2];
    co_rank_k(2, &[&a, &b], &mut split);
    assert_eq!(split, [1, 1]);
    co_rank_k(4, &[&a, &b], &mut split);
    assert_eq!(split, [3, 1]);
}

/// What a split merge (one output range per device) computes with `split_output`: each
/// part merges its slices of the runs, its positions mapped back to global indices.
fn merge_by_parts<T: corank::keys::KeyWord>(keys: &[T], offsets: &[usize], parts: usize) -> Vec<usize> {
    use corank::engine::co_rank::split_output;
    let cuts = split_output(keys, offsets, parts);
    assert_eq!(cuts.len(), parts + 1);
    assert!(cuts[0].iter().all(|&c| c == 0));
    assert_eq!(cuts[parts], offsets.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>());
    let n = keys.len();
    let mut out = Vec::with_capacity(n);
    for p in 0..parts {
        // Range p has its share of the output, and every run's slice is in bounds.
        let len: usize = cuts[p + 1].iter().zip(&cuts[p]).map(|(hi, lo)| hi - lo).sum();
        assert_eq!(len, n * (p + 1) / parts - n * p / parts, "part {p} of {parts}");
        let (mut part_keys, mut part_offsets, mut global) = (Vec::new(), vec![0], Vec::new());
        for r in 0..offsets.len() - 1 {
            assert!(cuts[p][r] <= cuts[p + 1][r]);
            let (lo, hi) = (offsets[r] + cuts[p][r], offsets[r] + cuts[p + 1][r]);
            part_keys.extend_from_slice(&keys[lo..hi]);
            global.extend(lo..hi);
            part_offsets.push(part_keys.len());
        }
        let local = corank::engine::cpu::merge_cpu(&part_keys, &part_offsets).to_vec();
        out.extend(local.into_iter().map(|i| global[i]));
    }
    out
}

/// The co-rank split of the multi-GPU merge: for any number of parts (more parts than rows
/// included: empty ranges), cuts inside runs of equal keys, empty runs and k from 1 to 64,
/// the parts merged separately give exactly the whole merge.
#[test]
fn split_output_parts_merge_to_the_whole() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for case in 0..300 {
        let k = 1 + (next() % 64) as usize;
        // Few distinct values in most cases: cuts fall inside runs of equal keys.
        let range = [1, 2, 3, 10, u64::MAX][case % 5];
        let mut keys = Vec::new();
        let mut offsets = vec![0];
        for _ in 0..k {
            let len = match next() % 5 {
                0 => 0,
                1 => 1,
                _ => (next() % 200) as usize,
            };
            let mut run: Vec<u64> = (0..len).map(|_| next() % range.max(1)).collect();
            run.sort();
            keys.extend(run);
            offsets.push(keys.len());
        }
        let whole = corank::engine::cpu::merge_cpu(&keys, &offsets).to_vec();
        for parts in [1, 2, 3, 7, keys.len() + 2] {
            assert_eq!(merge_by_parts(&keys, &offsets, parts), whole, "case {case}: k = {k}, {parts} parts");
        }
    }
    // No runs, no rows.
    assert_eq!(merge_by_parts::<u64>(&[], &[0], 2), Vec::<usize>::new());
    assert_eq!(corank::engine::co_rank::split_output::<u64>(&[], &[0], 3), vec![Vec::<usize>::new(); 4]);
    // All equal keys in two runs, two parts: the first part is the whole first run.
    let cuts = corank::engine::co_rank::split_output(&[5u64; 10], &[0, 5, 10], 2);
    assert_eq!(cuts, vec![vec![0, 0], vec![5, 0], vec![5, 5]]);
}

/// Wide keys (two and four words) split as the one-word ones.
#[test]
fn split_output_wide_keys() {
    let keys: Vec<[u64; 2]> = (0..300u64).map(|i| [i % 3, i / 7]).collect();
    let mut runs: Vec<Vec<[u64; 2]>> = keys.chunks(70).map(|c| c.to_vec()).collect();
    for r in &mut runs {
        r.sort();
    }
    let mut offsets = vec![0];
    for r in &runs {
        offsets.push(offsets.last().unwrap() + r.len());
    }
    let flat: Vec<[u64; 2]> = runs.concat();
    let whole = corank::engine::cpu::merge_cpu(&flat, &offsets).to_vec();
    for parts in 1..6 {
        assert_eq!(merge_by_parts(&flat, &offsets, parts), whole, "{parts} parts");
    }
}

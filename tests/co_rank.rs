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

#[test]
fn k_way_against_brute_force() {
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
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

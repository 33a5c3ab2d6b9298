//! The CPU merge of sorted inputs (`merge_cpu`, whose pairwise merges copy whole blocks
//! that come from one side and merge the rest without a branch) against the stable merge by
//! brute force: inputs that interleave row by row, come in long stretches, both in turn, and
//! tie across inputs at block boundaries.

use corank::engine::cpu::merge_cpu;
use corank::Indices;

/// Sorted runs of `len` keys each from `key(run, i)`, concatenated, and their offsets.
fn runs(k: usize, len: usize, key: impl Fn(usize, usize) -> u64) -> (Vec<u64>, Vec<usize>) {
    let mut keys = Vec::new();
    let mut offsets = vec![0];
    for r in 0..k {
        let mut run: Vec<u64> = (0..len).map(|i| key(r, i)).collect();
        run.sort();
        keys.extend(run);
        offsets.push(keys.len());
    }
    (keys, offsets)
}

/// The stable merge by brute force: global indices ordered by (key, position).
fn brute(keys: &[u64]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| (keys[i], i));
    order.into_iter().map(|i| i as u64).collect()
}

fn check(k: usize, len: usize, key: impl Fn(usize, usize) -> u64) {
    let (keys, offsets) = runs(k, len, key);
    let got: Vec<u64> = match merge_cpu(&keys, &offsets) {
        Indices::U32(v) => v.into_iter().map(u64::from).collect(),
        Indices::U64(v) => v,
    };
    assert_eq!(got, brute(&keys), "{k} runs of {len}");
}

fn mix(x: u64) -> u64 {
    let x = x.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x ^ (x >> 31)).wrapping_mul(0x94d0_49bb_1331_11eb) ^ (x >> 29)
}

#[test]
fn merge_of_sorted_inputs_is_the_stable_merge() {
    for (k, len) in [(2, 1), (2, 31), (2, 33), (3, 100), (16, 5000), (5, 70_000)] {
        // Row by row at random, with many ties (few distinct keys).
        check(k, len, |r, i| mix((r * len + i) as u64) % 1000);
        // Long stretches: each run holds its own ranges of keys, 40 or 7 rows long.
        check(k, len, |r, i| ((i / 40) * k + r) as u64 * 40 + (i % 40) as u64);
        check(k, len, |r, i| ((i / 7) * k + r) as u64 * 7 + (i % 7) as u64);
        // Stretches of equal keys shared by every run (blocks tie with the other's head).
        check(k, len, |_, i| (i / 64) as u64);
        check(k, len, |r, i| (i / 33) as u64 * 2 + (r % 2) as u64);
        // Stretches and interleaving in turn.
        check(k, len, |r, i| if (i / 500) % 2 == 0 { mix((r * len + i) as u64) % 1_000_000 } else { (r * len + i) as u64 * 3 });
    }
}

//! The CPU merge of sorted inputs (`merge_cpu`: the one-pass loser tree of `engine::kway`
//! for up to 64 runs, the merge tree of pairwise merges beyond) against the stable merge by
//! brute force: inputs that interleave row by row, come in long stretches, both in turn, and
//! tie across inputs at block boundaries and at the parallel pieces' cuts.

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

/// `merge_cpu` of runs of the given lengths (empty ones included) against brute force, with
/// keys of any word type; `key(run, i)` before each run is sorted.
fn check_lengths<T: corank::keys::KeyWord>(lengths: &[usize], key: impl Fn(usize, usize) -> T) {
    let mut keys: Vec<T> = Vec::new();
    let mut offsets = vec![0];
    for (r, &len) in lengths.iter().enumerate() {
        let mut run: Vec<T> = (0..len).map(|i| key(r, i)).collect();
        run.sort();
        keys.extend(run);
        offsets.push(keys.len());
    }
    let mut expect: Vec<usize> = (0..keys.len()).collect();
    expect.sort_by_key(|&i| (keys[i], i));
    let got: Vec<usize> = match merge_cpu(&keys, &offsets) {
        Indices::U32(v) => v.into_iter().map(|i| i as usize).collect(),
        Indices::U64(v) => v.into_iter().map(|i| i as usize).collect(),
    };
    let first_wrong = got.iter().zip(&expect).position(|(a, b)| a != b);
    assert!(got.len() == expect.len() && first_wrong.is_none(), "runs of {lengths:?}: first wrong output row {first_wrong:?}");
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

/// The one-pass merge of 2..16 runs (and the tree beyond 64) against brute force: runs of
/// unequal and zero length; ties inside a run, across runs, and everywhere (every cut
/// between parallel pieces then falls on equal keys); long stretches that one run gives a
/// block at a time; row-by-row interleaving; key words of 32, 64 and 128 bits. A merge that
/// gave a tie to the later run, or cut pieces at the wrong rank, fails here.
#[test]
fn one_pass_merge_is_the_stable_merge() {
    let shapes: [&[usize]; 6] = [
        &[1, 1],
        &[3, 0, 5],
        &[40_000, 1, 0, 17, 9_000],
        &[12_000, 12_000, 12_000, 0, 12_000, 12_000, 12_000, 12_000, 12_000],
        &[5_000; 16],
        &[2_500; 13],
    ];
    for lengths in shapes {
        let len = lengths.iter().sum::<usize>().max(1);
        // Interleaved with many ties (few distinct keys), and with nearly none.
        check_lengths(lengths, |r, i| mix((r * len + i) as u64) % 97);
        check_lengths(lengths, |r, i| mix((r * len + i) as u64));
        // Every key equal: the order is the runs' order, every cut on a tie.
        check_lengths(lengths, |_, _| 7u64);
        // Long stretches per run (100 rows), whole blocks taken at once, and stretches of
        // equal keys shared by all runs (blocks that tie with the runner-up).
        check_lengths(lengths, |r, i| ((i / 100) * 16 + r) as u64 * 100 + (i % 100) as u64);
        check_lengths(lengths, |_, i| (i / 64) as u64);
        check_lengths(lengths, |r, i| (i / 33) as u32 * 2 + (r % 2) as u32);
        // Stretches and interleaving in turn; 128-bit keys equal in the first word.
        check_lengths(lengths, |r, i| if (i / 500) % 2 == 0 { mix((r * len + i) as u64) % 1000 } else { (r * len + i) as u64 * 3 });
        check_lengths(lengths, |r, i| [1u64, mix((r * len + i) as u64) % 50]);
    }
    // Beyond 64 runs: the merge tree.
    check_lengths(&[300; 70], |r, i| mix((r * 300 + i) as u64) % 1000);
}

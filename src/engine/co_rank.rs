//! The co-rank reference: which input positions produce output position `k`.
//!
//! This is the one implementation the CPU engine and the tests use; the CUDA kernels in
//! `cuda/co_rank.cuh` mirror it line for line, so it stays plain.
//!
//! Stability: ties go to the earlier run. For two runs A and B, the first `k` outputs are
//! `A[..i]` and `B[..k - i]` where `i` is the smallest index with
//! `i == min(k, |A|)` or `A[i] > B[k - i - 1]` (an A element equal to a B element comes first).

use crate::keys::KeyWord;

/// Two-run co-rank: the number `i` of elements of `a` among the first `k` outputs of the
/// stable merge of `a` then `b` (so `k - i` come from `b`).
///
/// Requires `k <= a.len() + b.len()` and both runs sorted.
pub fn co_rank<T: Ord>(k: usize, a: &[T], b: &[T]) -> usize {
    debug_assert!(k <= a.len() + b.len());
    // i lies in [k - |B|, min(k, |A|)].
    let mut lo = k.saturating_sub(b.len());
    let mut hi = k.min(a.len());
    while lo < hi {
        let i = lo + (hi - lo) / 2;
        // i < hi <= min(k, |A|) and i >= k - |B|, so a[i] and b[k - i - 1] exist.
        if a[i] <= b[k - i - 1] {
            // a[i] precedes b[k - i - 1] (ties go to A): more of A is needed.
            lo = i + 1;
        } else {
            hi = i;
        }
    }
    lo
}

/// k-way co-rank: for output position `k` of the stable merge of `runs` (in order), the
/// number of elements each run contributes to the first `k` outputs, written to `split`.
///
/// It bisects the key space bit by bit, most significant first, for the key `v` of output
/// `k` (the smallest `v` with at least `k + 1` keys `<= v`); every run then contributes its
/// keys `< v`, and the remaining outputs are keys equal to `v`, taken from the earliest runs
/// first. Cost: `BITS` rounds of one binary search per run.
pub fn co_rank_k<T: KeyWord>(k: usize, runs: &[&[T]], split: &mut [usize]) {
    assert_eq!(runs.len(), split.len());
    let total: usize = runs.iter().map(|r| r.len()).sum();
    assert!(k <= total);
    if k == total {
        for (s, r) in split.iter_mut().zip(runs) {
            *s = r.len();
        }
        return;
    }
    let count_le = |v: T| -> usize { runs.iter().map(|r| r.partition_point(|x| *x <= v)).sum() };
    // 1. Bisect: v starts at the largest key; clear each bit (MSB first) when that still
    //    leaves at least k + 1 keys <= v.
    let mut v = T::max_value();
    for bit in (0..T::BITS).rev() {
        let candidate = v.clear_bit(bit);
        if candidate != v && count_le(candidate) > k {
            v = candidate;
        }
    }
    // 2. Every key < v precedes output k.
    let mut taken = 0;
    for (s, r) in split.iter_mut().zip(runs) {
        *s = r.partition_point(|x| *x < v);
        taken += *s;
    }
    // 3. The remaining k - taken outputs are keys equal to v, earliest runs first.
    let mut remaining = k - taken;
    for (s, r) in split.iter_mut().zip(runs) {
        let equal = r[*s..].partition_point(|x| *x <= v);
        let take = equal.min(remaining);
        *s += take;
        remaining -= take;
    }
    debug_assert_eq!(remaining, 0);
}

/// The cut of a stable merge's output into `parts` contiguous ranges of (nearly) equal
/// length, as input bounds: `cuts[p][r]` is how many rows of run `r` the first `p` ranges
/// take (row offsets within the run), for `p` in `0..=parts`. Range `p` is output positions
/// `[n * p / parts, n * (p + 1) / parts)`, and its rows are exactly run `r`'s rows
/// `cuts[p][r]..cuts[p + 1][r]` for every run: merged stably in run order, they are that range
/// of the whole merge (ties go to the earlier run on both sides of a cut, so a cut inside a
/// run of equal keys splits it as the whole merge would). What the multi-GPU merge gives
/// each device; a range may be empty (`parts > n`).
///
/// `run_offsets` are the runs' starts in `keys` and then the total, as the engines take them.
pub fn split_output<T: KeyWord>(keys: &[T], run_offsets: &[usize], parts: usize) -> Vec<Vec<usize>> {
    assert!(parts >= 1, "at least one part");
    assert_eq!(run_offsets.last().copied().unwrap_or(0), keys.len(), "run offsets must end at the key count");
    let runs: Vec<&[T]> = run_offsets.windows(2).map(|w| &keys[w[0]..w[1]]).collect();
    let n = keys.len();
    (0..=parts)
        .map(|p| {
            let mut split = vec![0; runs.len()];
            co_rank_k(n * p / parts, &runs, &mut split);
            split
        })
        .collect()
}

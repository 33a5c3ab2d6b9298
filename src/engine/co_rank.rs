//! The co-rank reference: which input positions produce output position `k`.
//!
//! This is the one implementation the CPU engine and the tests use; the CUDA kernels in
//! `cuda/co_rank.cuh` mirror it step for step, so it stays plain.
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
/// The merge's order is (key, run, position): an element precedes every element of a later
/// run with the same key. The first `k` outputs are the `k` smallest elements in that order,
/// found by selection with pivots taken from the runs themselves (a multi-sequence
/// selection). Each run keeps a window `[lo, hi]` known to hold its answer (its first `lo`
/// elements are among the first `k` outputs, its elements from `hi` on are not); a round
///  1. takes as pivot the middle element of the widest window (the earliest run among
///     equally wide ones);
///  2. counts, in each run, the elements that precede the pivot or are the pivot (keys
///     `<= v` in earlier runs, keys `< v` in later runs, up to and including the pivot in its
///     own run), each count searched within the run's window (so clamped into it);
///  3. if these counts add up to at most `k`, the pivot and everything before it are among
///     the first `k` outputs: every `lo` rises to its count; otherwise none of them past
///     the `k`-th is: every `hi` falls to its count, and the pivot's run's to the pivot.
///
/// The clamped counts decide exactly as the true counts would: when the pivot is among the
/// first `k`, every true count is at most the run's answer (so at most `hi`); when it is
/// not, every true count is at least the answer (so at least `lo`), and the pivot's run's
/// count exceeds its answer. The widest window at least halves each round, and on random
/// keys every window does (about log2 of the window rounds, against one round per key bit
/// for a bisection of the key space). The split is unique, so any correct search gives
/// it; `cuda/co_rank.cuh` (`co_rank_k_warp`, one lane per run) mirrors this one.
pub fn co_rank_k<T: KeyWord>(k: usize, runs: &[&[T]], split: &mut [usize]) {
    assert_eq!(runs.len(), split.len());
    let total: usize = runs.iter().map(|r| r.len()).sum();
    assert!(k <= total);
    // split holds lo; hi the windows' ends; counts a round's counts.
    let mut hi: Vec<usize> = runs.iter().map(|r| r.len()).collect();
    let mut counts = vec![0; runs.len()];
    split.fill(0);
    if k == total {
        split.copy_from_slice(&hi);
        return;
    }
    loop {
        // 1. The pivot: the middle of the widest window, the earliest run among equals.
        let (r, width) = (0..runs.len()).fold((0, 0), |(br, bw), s| if hi[s] - split[s] > bw { (s, hi[s] - split[s]) } else { (br, bw) });
        if width == 0 {
            return;
        }
        let m = split[r] + width / 2;
        let v = runs[r][m];
        // 2. Each run's count of elements up to the pivot, within its window.
        let count = |s: usize| -> usize {
            let (lo, h) = (split[s], hi[s]);
            let window = &runs[s][lo..h];
            lo + match s.cmp(&r) {
                std::cmp::Ordering::Less => window.partition_point(|x| *x <= v),
                std::cmp::Ordering::Greater => window.partition_point(|x| *x < v),
                std::cmp::Ordering::Equal => m + 1 - lo,
            }
        };
        for (s, c) in counts.iter_mut().enumerate() {
            *c = count(s);
        }
        // 3. Raise every lo, or lower every hi (the pivot's run's to the pivot itself).
        if counts.iter().sum::<usize>() <= k {
            split.copy_from_slice(&counts);
        } else {
            hi.copy_from_slice(&counts);
            hi[r] = m;
        }
    }
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

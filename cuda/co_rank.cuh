// co_rank.cuh: the co-rank searches, mirroring src/engine/co_rank.rs line for line.
//
// Stability: ties go to the earlier run. For runs A then B, the first k outputs are
// A[..i] and B[..k - i] with i the smallest index such that i == min(k, |A|) or
// A[i] > B[k - i - 1].
//
// The 2-way search is templated over accessors (cta_merge.cuh: global memory, a padded
// shared tile; merge_circular.cu: a circular buffer) so one body serves every kernel:
// `a(i)` returns the i-th key of A. The k-way search runs on one warp (grid-level
// partition of the k-way kernel).

// The co-rank of k (below) searched within [lo, hi], a window known to hold it: the
// smallest i in it with i == hi or not le(i, k - i - 1). Every le(i, k - i - 1) it asks has
// lo <= i < hi.
// T: u64 for positions in global memory, u32 inside a shared tile (half the instructions a
// step: 64-bit adds and shifts take two).
template <class T, class Le>
__device__ __forceinline__ T co_rank_in(T k, T lo, T hi, Le le) {
    while (lo < hi) {
        T i = lo + (hi - lo) / 2;
        if (le(i, k - i - 1)) {
            lo = i + 1;  // A[i] precedes B[k - i - 1] (ties go to A): more of A is needed
        } else {
            hi = i;
        }
    }
    return lo;
}

// Two-run co-rank: how many of the first k outputs of the stable merge of A (length m)
// then B (length n) come from A. Requires k <= m + n. `le(i, j)`: whether A[i] <= B[j]
// (the tiled kernel's narrow keys compare through it, cuda/merge_tiled.cu).
template <class T, class Le>
__device__ __forceinline__ T co_rank_by(T k, T m, T n, Le le) {
    // i lies in [k - n, min(k, m)], so A[i] and B[k - i - 1] exist for every i searched.
    return co_rank_in(k, k > n ? k - n : (T)0, k < m ? k : m, le);
}

// The co-rank over accessors: `a(i)` and `b(j)` return the keys.
template <class A, class B>
__device__ __forceinline__ u64 co_rank(u64 k, A a, u64 m, B b, u64 n) {
    return co_rank_by(k, m, n, [&](u64 i, u64 j) { return key_le(a(i), b(j)); });
}

// The co-rank over accessors within [lo, hi], a window known to hold it (lo >= k - n, hi <=
// min(k, m)): partition.cu's searches between two splits already known.
template <class A, class B>
__device__ __forceinline__ u64 co_rank_window(u64 k, u64 lo, u64 hi, A a, B b) {
    return co_rank_in(k, lo, hi, [&](u64 i, u64 j) { return key_le(a(i), b(j)); });
}

__device__ __forceinline__ u64 warp_sum(u64 x) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// k-way co-rank for one warp: for output position k of the stable merge of nr <= 64 runs
// (run r = keys[base_r, base_r + len_r), in order), the number of elements each run
// contributes to the first k outputs. Lane l handles runs l and l + 32: base[s], len[s] and
// the result out[s] are those of run l + 32 s. Mirrors co_rank_k in src/engine/co_rank.rs
// (selection with pivots from the runs; the module doc there says why it is exact): each
// run keeps a window [lo, hi] known to hold its answer, and a round
//  1. takes as pivot the middle element of the widest window (the earliest run among
//     equally wide ones; one warp max over (width, run));
//  2. counts in each run the elements up to the pivot in the merge's (key, run) order,
//     searched within the run's window: keys <= v in earlier runs, < v in later ones;
//  3. raises every lo to its count if the counts add up to at most k, else lowers every hi
//     to its count (the pivot's run's to the pivot).
// On random keys every window halves each round: ~log2(window) rounds, against one round
// per key bit for a bisection of the key space.
__device__ void co_rank_k_warp(u64 k, const Key *keys, const u64 base[2], const u64 len[2], u32 nr, u64 out[2]) {
    const u32 lane = threadIdx.x & 31;
    u64 lo[2], hi[2];
    bool has[2];
    u64 total_local = 0;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        has[s] = lane + 32 * s < nr;
        lo[s] = 0;
        hi[s] = has[s] ? len[s] : 0;
        total_local += hi[s];
    }
    const u64 total = warp_sum(total_local);
    if (k >= total) {
#pragma unroll
        for (int s = 0; s < 2; ++s) out[s] = hi[s];
        return;
    }
    for (;;) {
        // 1. The widest window: a warp max over (width << 7 | 127 - run), so equal widths
        //    pick the earliest run (widths are below 2^57).
        u64 best = 0;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const u64 packed = ((hi[s] - lo[s]) << 7) | (127 - (lane + 32 * s));
            if (hi[s] > lo[s] && packed > best) best = packed;
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            const u64 other = __shfl_xor_sync(0xffffffffu, best, o);
            if (other > best) best = other;
        }
        if (best == 0) break;  // every window empty: lo is the answer (uniform)
        const u32 r = 127 - (u32)(best & 127);
        // The pivot's run's lane loads it (its slot picked by selects: a dynamic index
        // would put the arrays in local memory).
        const u32 owner = r & 31;
        const bool hi_slot = r >= 32;
        const u64 m = (hi_slot ? lo[1] : lo[0]) + ((hi_slot ? hi[1] : hi[0]) - (hi_slot ? lo[1] : lo[0])) / 2;
        Key v = {};
        if (lane == owner) v = keys[(hi_slot ? base[1] : base[0]) + m];
#pragma unroll
        for (int w = 0; w < KEY_WORDS; ++w) v.w[w] = __shfl_sync(0xffffffffu, v.w[w], owner);
        const u64 m_all = __shfl_sync(0xffffffffu, m, owner);
        // 2. Counts up to the pivot, within the windows.
        u64 c[2];
        u64 sum_local = 0;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const u32 run = lane + 32 * s;
            const KeyRun R{keys + base[s]};
            if (!has[s]) c[s] = 0;
            else if (run < r) c[s] = partition_point<BOUND_UPPER>(R, lo[s], hi[s], v);
            else if (run > r) c[s] = partition_point<BOUND_LOWER>(R, lo[s], hi[s], v);
            else c[s] = m_all + 1;
            sum_local += c[s];
        }
        // 3. Raise every lo, or lower every hi.
        if (warp_sum(sum_local) <= k) {
#pragma unroll
            for (int s = 0; s < 2; ++s) lo[s] = c[s];
        } else {
#pragma unroll
            for (int s = 0; s < 2; ++s) hi[s] = lane + 32 * s == r ? m_all : c[s];
        }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) out[s] = lo[s];
}

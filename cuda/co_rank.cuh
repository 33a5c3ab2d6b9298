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
template <class Le>
__device__ __forceinline__ u64 co_rank_in(u64 k, u64 lo, u64 hi, Le le) {
    while (lo < hi) {
        u64 i = lo + (hi - lo) / 2;
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
template <class Le>
__device__ __forceinline__ u64 co_rank_by(u64 k, u64 m, u64 n, Le le) {
    // i lies in [k - n, min(k, m)], so A[i] and B[k - i - 1] exist for every i searched.
    return co_rank_in(k, k > n ? k - n : 0, k < m ? k : m, le);
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
// the result out[s] are those of run l + 32 s. Mirrors co_rank_k in src/engine/co_rank.rs:
//  1. bisect the key space MSB first for v, the smallest key with more than k keys <= v;
//  2. every run contributes its keys < v;
//  3. the remaining outputs are keys equal to v, earliest runs first.
// Each run keeps a window [lo, hi) that holds count_le(candidate) for every candidate still
// possible (hi from the last accepted candidate, lo from the last rejected one), so the
// searches shrink as the bisection proceeds; the counts equal those of the reference.
__device__ void co_rank_k_warp(u64 k, const Key *keys, const u64 base[2], const u64 len[2], u32 nr, u64 out[2]) {
    const u32 lane = threadIdx.x & 31;
    u64 lo[2], hi[2];
    bool has[2];
    u64 total_local = 0;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u32 r = lane + 32 * s;
        has[s] = r < nr;
        lo[s] = 0;
        hi[s] = has[s] ? len[s] : 0;
        out[s] = hi[s];
        total_local += hi[s];
    }
    u64 total = warp_sum(total_local);
    if (k >= total) return;
    // 1. Bisect: v starts at the largest key; clear each bit (MSB first) when that still
    //    leaves at least k + 1 keys <= v.
    // The largest and smallest key of the group decide some rounds without a search: a
    // candidate >= every key leaves all keys <= it (accepted, as the reference would), one
    // below every key leaves none (rejected). Same decisions, fewer loads (duplicate-heavy
    // and narrow-range keys otherwise search whole runs for their leading bits).
    Key kmax, kmin;
    bool have_minmax = false;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        if (has[s] && hi[s] > 0) {
            Key first = keys[base[s]], last = keys[base[s] + hi[s] - 1];
            if (!have_minmax) { kmax = last; kmin = first; have_minmax = true; }
            else { if (key_lt(kmax, last)) kmax = last; if (key_lt(first, kmin)) kmin = first; }
        }
    }
    // Warp reduction of min and max (lanes without keys take another lane's).
    for (int o = 1; o < 32; o *= 2) {
        Key omax, omin;
#pragma unroll
        for (int w = 0; w < KEY_WORDS; ++w) {
            omax.w[w] = __shfl_xor_sync(0xffffffffu, kmax.w[w], o);
            omin.w[w] = __shfl_xor_sync(0xffffffffu, kmin.w[w], o);
        }
        bool oh = __shfl_xor_sync(0xffffffffu, have_minmax, o);
        if (oh) {
            if (!have_minmax) { kmax = omax; kmin = omin; have_minmax = true; }
            else { if (key_lt(kmax, omax)) kmax = omax; if (key_lt(omin, kmin)) kmin = omin; }
        }
    }
    Key v = key_max();
    for (int bit = KEY_BITS - 1; bit >= 0; --bit) {
        Key cand = key_clear_bit(v, (u32)bit);
        if (key_eq(cand, v)) continue;  // uniform across the warp: v is
        if (key_le(kmax, cand)) { v = cand; continue; }  // count_le(cand) = total > k
        if (key_lt(cand, kmin)) continue;                 // count_le(cand) = 0 <= k
        u64 c[2];
        u64 cnt = 0;
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            c[s] = has[s] ? partition_point<BOUND_UPPER>(KeyRun{keys + base[s]}, lo[s], hi[s], cand) : 0;
            cnt += c[s];
        }
        cnt = warp_sum(cnt);
        if (cnt > k) {
            v = cand;
#pragma unroll
            for (int s = 0; s < 2; ++s) hi[s] = c[s];
        } else {
#pragma unroll
            for (int s = 0; s < 2; ++s) lo[s] = c[s];
        }
    }
    // Now hi[s] = count of keys <= v in the run, and lo[s] <= count of keys < v.
    // 2. Every key < v precedes output k.
    u64 lt[2];
    u64 taken = 0;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        lt[s] = has[s] ? partition_point<BOUND_LOWER>(KeyRun{keys + base[s]}, lo[s], hi[s], v) : 0;
        taken += lt[s];
    }
    taken = warp_sum(taken);
    // 3. The remaining k - taken outputs are keys equal to v, earliest runs first: run r
    //    takes min(equal_r, remaining - equal of runs before r) (an exclusive scan).
    u64 eq[2] = {hi[0] - lt[0], hi[1] - lt[1]};
    u64 remaining = k - taken;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u64 x = eq[s];  // inclusive scan over lanes of this half
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            u64 y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= (u32)o) x += y;
        }
        u64 before = x - eq[s];
        u64 avail = remaining > before ? remaining - before : 0;
        u64 take = eq[s] < avail ? eq[s] : avail;
        out[s] = lt[s] + take;
        // The second half starts after everything the first half could take.
        u64 half_total = __shfl_sync(0xffffffffu, x, 31);
        remaining = remaining > half_total ? remaining - half_total : 0;
    }
}

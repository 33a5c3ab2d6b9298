// partition.cu: the grid-level partition of the tiled and k-way kernels.
//
// Before a level's merge kernel starts, every tile boundary gets its split: how many
// elements of each run of its group precede it. Boundary t of group g is output position
// min(t * tile, group length); boundaries are numbered by boundary_index (cta_merge.cuh),
// and `splits` holds `group` entries per boundary. The merge kernels read the splits at
// both ends of their tile.
// - partition_2way: groups of two runs, one thread per boundary, the 2-way co-rank (a
//   block's first and last boundaries over whole runs, the others in the window they leave).
// - partition_kway_coarse, then partition_kway: more runs, one warp per boundary, the k-way
//   co-rank (co_rank_k_warp): first every KWAY_COARSE tiles over whole runs, then every
//   tile boundary within the windows the coarse splits leave.
// KWAY_TILE comes from merge_kway.cu.

// The k-way co-rank of output position k of group P: out[s] for run lane + 32 s, over the
// pieces [lo0[s], lo0[s] + plen[s]) of the group's runs (windows of whole runs or of a
// coarse split's pieces), shifted back to whole-run counts.
__device__ __forceinline__ void warp_split(const Level &L, const GroupPos &P, u64 k, const u64 lo0[2], const u64 plen[2], u64 out[2]) {
    const u32 lane = threadIdx.x & 31;
    u64 base[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u32 r = lane + 32 * s;
        base[s] = r < P.nr ? L.bounds[P.r0 + r] + lo0[s] : 0;
    }
    co_rank_k_warp(k, L.in_keys, base, plen, P.nr, out);
#pragma unroll
    for (int s = 0; s < 2; ++s) out[s] += lo0[s];
}

// Writes this lane's entries of a k-way split.
__device__ __forceinline__ void store_split(u64 *dst, u32 nr, const u64 v[2]) {
    const u32 lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < 2; ++s)
        if (lane + 32 * s < nr) dst[lane + 32 * s] = v[s];
}

// Coarse pass: one warp per coarse boundary (every KWAY_COARSE tiles), the k-way co-rank
// over whole runs. Coarse boundaries are numbered by boundary_index over `cstart` (per
// group, the first coarse boundary, as tile_start counts tiles).
extern "C" __global__ void __launch_bounds__(THREADS) partition_kway_coarse(Level L, u64 *coarse, u64 ncoarse, const u64 *cstart) {
    const u64 b = ((u64)blockIdx.x * THREADS + threadIdx.x) / 32;
    if (b >= ncoarse) return;  // uniform per warp
    const u32 lane = threadIdx.x & 31;
    const GroupPos P = boundary_pos<0>(L, cstart, b);
    const u64 k = min(P.index * (u64)KWAY_TILE * KWAY_COARSE, P.end(L) - P.begin(L));
    u64 lo0[2], rlen[2], out[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u32 r = lane + 32 * s;
        lo0[s] = 0;
        rlen[s] = r < P.nr ? L.bounds[P.r0 + r + 1] - L.bounds[P.r0 + r] : 0;
    }
    warp_split(L, P, k, lo0, rlen, out);
    store_split(coarse + b * L.group, P.nr, out);
}

// Fine pass: one warp per tile boundary. Outputs [K0, K1) between two coarse boundaries are
// exactly the stable merge of the pieces [S0_r, S1_r) of the runs (S = the coarse splits),
// so the split at k is S0 + the k-way co-rank of k - K0 over those pieces: short windows,
// few loads, and the pieces' first and last keys decide most bisection rounds.
extern "C" __global__ void __launch_bounds__(THREADS) partition_kway(Level L, u64 *splits, u64 nboundaries, const u64 *coarse, const u64 *cstart) {
    const u64 b = ((u64)blockIdx.x * THREADS + threadIdx.x) / 32;
    if (b >= nboundaries) return;  // uniform per warp
    const u32 lane = threadIdx.x & 31;
    const GroupPos P = boundary_pos<0>(L, L.tile_start, b);
    const u64 t = P.index;
    const u64 c0 = t / KWAY_COARSE;
    const u64 *s0 = coarse + boundary_index(cstart, P.group, c0) * L.group;
    u64 lo0[2], plen[2], out[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) lo0[s] = lane + 32 * s < P.nr ? s0[lane + 32 * s] : 0;
    if (t % KWAY_COARSE == 0) {  // a coarse boundary: copy
        store_split(splits + b * L.group, P.nr, lo0);
        return;
    }
    const u64 *s1 = s0 + L.group;
    const u64 K0 = c0 * (u64)KWAY_TILE * KWAY_COARSE;
    const u64 k = min(t * (u64)KWAY_TILE, P.end(L) - P.begin(L));
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u32 r = lane + 32 * s;
        plen[s] = r < P.nr ? s1[r] - lo0[s] : 0;
    }
    warp_split(L, P, k - K0, lo0, plen, out);
    store_split(splits + b * L.group, P.nr, out);
}

// Groups of two runs (the tiled kernel, and the k-way kernel when a group has two runs):
// one thread per boundary of tiles of `tile` outputs, the 2-way co-rank (cheaper than the
// k-way bisection, same split). Same layout of `splits`; a lone last run gets no B entry.
// Two steps: the block's first and last boundaries are searched over their whole runs
// (threads 0 and THREADS - 1); then every boundary of the block in the same group as both
// searches only the window they leave (the co-rank grows with k, and so does k minus it).
// The windows' first probes are the same for the whole block (one load serves it), so the
// searches touch fewer DRAM sectors: the partition is bound by them, not by latency.
extern "C" __global__ void __launch_bounds__(THREADS) partition_2way(Level L, u64 *splits, u64 nboundaries, u64 tile) {
    __shared__ u64 edge_k[2], edge_i[2];
    __shared__ u32 edge_group[2];
    const u64 first = (u64)blockIdx.x * THREADS;
    const u64 last = min(first + THREADS, nboundaries) - 1;
    const u64 b = first + threadIdx.x;
    // 1. The block's first and last boundaries, over whole runs.
    if (threadIdx.x == 0 || threadIdx.x == THREADS - 1) {
        const u32 e = threadIdx.x == 0 ? 0 : 1;
        const GroupPos P = boundary_pos<2>(L, L.tile_start, e ? last : first);
        const MergeRange R = pair_range(L, P);
        const u64 k = min(P.index * tile, R.total());
        edge_k[e] = k;
        edge_i[e] = co_rank(k, KeyRun{L.in_keys + R.a_begin}, R.a_count, KeyRun{L.in_keys + R.b_begin}, R.b_count);
        edge_group[e] = P.group;
    }
    __syncthreads();
    if (b > last) return;
    const GroupPos P = boundary_pos<2>(L, L.tile_start, b);
    const MergeRange R = pair_range(L, P);
    const u64 k = min(P.index * tile, R.total());
    u64 i;
    if (P.group == edge_group[0] && P.group == edge_group[1]) {
        // 2. Between the edges (k0, i0) and (k1, i1): i0 <= i <= i1 and j0 <= k - i <= j1.
        const u64 i0 = edge_i[0], j0 = edge_k[0] - i0, i1 = edge_i[1], j1 = edge_k[1] - i1;
        const u64 lo = max(i0, k > j1 ? k - j1 : 0), hi = min(i1, k - j0);
        i = co_rank_window(k, lo, hi, KeyRun{L.in_keys + R.a_begin}, KeyRun{L.in_keys + R.b_begin});
    } else {
        i = co_rank(k, KeyRun{L.in_keys + R.a_begin}, R.a_count, KeyRun{L.in_keys + R.b_begin}, R.b_count);
    }
    splits[b * 2] = i;
    if (P.nr == 2) splits[b * 2 + 1] = k - i;
}

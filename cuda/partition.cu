// partition_kway.cu: grid-level partition for the single-pass k-way kernel.
//
// One warp per tile boundary: boundary t of group g is output position
// min(t * KWAY_TILE, group length), and its split (how many elements of each run of the
// group precede it) is the k-way co-rank (co_rank_k_warp, co_rank.cuh). Splits are stored
// per boundary, `group` entries each: boundary index of (g, t) = tile_start[g] + g + t.

#define KWAY_TILE (THREADS * IPT_KWAY)

// The group g with start[g] + g <= b < start[g + 1] + g + 1: boundaries of group g are
// numbered from start[g] + g (a group of T tiles has T + 1 boundaries).
__device__ __forceinline__ u32 boundary_group(const u64 *start, u32 ngroups, u64 b) {
    u32 lo = 0, hi = ngroups;
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (start[mid] + mid <= b) lo = mid; else hi = mid;
    }
    return lo;
}

// Coarse pass: one warp per coarse boundary (every KWAY_COARSE tiles), the k-way co-rank
// over whole runs. Coarse boundary (g, c) is number cstart[g] + g + c.
extern "C" __global__ void __launch_bounds__(THREADS) partition_kway_coarse(Level L, u64 *coarse, u64 ncoarse, const u64 *cstart) {
    const u64 b = ((u64)blockIdx.x * THREADS + threadIdx.x) / 32;
    if (b >= ncoarse) return;  // uniform per warp
    const u32 lane = threadIdx.x & 31;
    const u32 g = boundary_group(cstart, L.ngroups, b);
    const u64 c = b - cstart[g] - g;
    const u32 r0 = g * L.group;
    const u32 nr = min(L.group, L.nruns - r0);
    const u64 len = L.bounds[r0 + nr] - L.bounds[r0];
    const u64 k = min(c * (u64)KWAY_TILE * KWAY_COARSE, len);
    u64 base[2], rlen[2], out[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u32 r = lane + 32 * s;
        base[s] = r < nr ? L.bounds[r0 + r] : 0;
        rlen[s] = r < nr ? L.bounds[r0 + r + 1] - base[s] : 0;
    }
    co_rank_k_warp(k, L.in_keys, base, rlen, nr, out);
#pragma unroll
    for (int s = 0; s < 2; ++s)
        if (lane + 32 * s < nr) coarse[b * L.group + lane + 32 * s] = out[s];
}

// Fine pass: one warp per tile boundary. Outputs [K0, K1) between two coarse boundaries are
// exactly the stable merge of the pieces [S0_r, S1_r) of the runs (S = the coarse splits),
// so the split at k is S0 + the k-way co-rank of k - K0 over those pieces: short windows,
// few loads, and the pieces' first and last keys decide most bisection rounds.
extern "C" __global__ void __launch_bounds__(THREADS) partition_kway(Level L, u64 *splits, u64 nboundaries, const u64 *coarse, const u64 *cstart) {
    const u64 b = ((u64)blockIdx.x * THREADS + threadIdx.x) / 32;
    if (b >= nboundaries) return;  // uniform per warp
    const u32 lane = threadIdx.x & 31;
    const u32 g = boundary_group(L.tile_start, L.ngroups, b);
    const u64 t = b - L.tile_start[g] - g;
    const u32 r0 = g * L.group;
    const u32 nr = min(L.group, L.nruns - r0);
    const u64 len = L.bounds[r0 + nr] - L.bounds[r0];
    const u64 c0 = t / KWAY_COARSE;
    const u64 *s0 = coarse + (cstart[g] + g + c0) * L.group;
    if (t % KWAY_COARSE == 0) {  // a coarse boundary: copy
#pragma unroll
        for (int s = 0; s < 2; ++s)
            if (lane + 32 * s < nr) splits[b * L.group + lane + 32 * s] = s0[lane + 32 * s];
        return;
    }
    const u64 *s1 = s0 + L.group;
    const u64 K0 = c0 * (u64)KWAY_TILE * KWAY_COARSE;
    const u64 k = min(t * (u64)KWAY_TILE, len);
    u64 base[2], plen[2], out[2], lo0[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        u32 r = lane + 32 * s;
        lo0[s] = r < nr ? s0[r] : 0;
        base[s] = r < nr ? L.bounds[r0 + r] + lo0[s] : 0;
        plen[s] = r < nr ? s1[r] - lo0[s] : 0;
    }
    co_rank_k_warp(k - K0, L.in_keys, base, plen, nr, out);
#pragma unroll
    for (int s = 0; s < 2; ++s)
        if (lane + 32 * s < nr) splits[b * L.group + lane + 32 * s] = lo0[s] + out[s];
}

// Grid-level partition for groups of two runs (the tiled kernel, and the k-way kernel when
// a group has two runs): one thread per boundary of tiles of `tile` outputs, the 2-way
// co-rank (cheaper than the k-way bisection, same split). Same layout of `splits`.
extern "C" __global__ void __launch_bounds__(THREADS) partition_2way(Level L, u64 *splits, u64 nboundaries, u64 tile) {
    const u64 b = (u64)blockIdx.x * THREADS + threadIdx.x;
    if (b >= nboundaries) return;
    const u32 g = boundary_group(L.tile_start, L.ngroups, b);
    const u64 t = b - L.tile_start[g] - g;
    const u32 r0 = g * 2;
    const u64 a0 = L.bounds[r0];
    const u64 b0 = L.bounds[min(r0 + 1, L.nruns)];
    const u64 e = L.bounds[min(r0 + 2, L.nruns)];
    const u64 k = min(t * tile, e - a0);
    const u64 i = co_rank(k, KeyRun{L.in_keys + a0}, b0 - a0, KeyRun{L.in_keys + b0}, e - b0);
    splits[b * 2] = i;
    if (r0 + 1 < L.nruns) splits[b * 2 + 1] = k - i;
}

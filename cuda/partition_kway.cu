// partition_kway.cu: grid-level partition for the single-pass k-way kernel.
//
// One warp per tile boundary: boundary t of group g is output position
// min(t * KWAY_TILE, group length), and its split (how many elements of each run of the
// group precede it) is the k-way co-rank (co_rank_k_warp, co_rank.cuh). Splits are stored
// per boundary, `group` entries each: boundary index of (g, t) = tile_start[g] + g + t.

#define KWAY_TILE (THREADS * IPT_KWAY)

extern "C" __global__ void __launch_bounds__(THREADS) partition_kway(Level L, u64 *splits, u64 nboundaries) {
    const u64 b = ((u64)blockIdx.x * THREADS + threadIdx.x) / 32;
    if (b >= nboundaries) return;  // uniform per warp
    // The group g with tile_start[g] + g <= b < tile_start[g + 1] + g + 1.
    u32 lo = 0, hi = L.ngroups;
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (L.tile_start[mid] + mid <= b) lo = mid; else hi = mid;
    }
    const u32 g = lo;
    const u64 t = b - L.tile_start[g] - g;
    const u32 r0 = g * L.group;
    const u32 nr = min(L.group, L.nruns - r0);
    const u64 len = L.bounds[r0 + nr] - L.bounds[r0];
    const u64 k = min(t * (u64)KWAY_TILE, len);
    co_rank_k_warp(k, L.in_keys, L.bounds + r0, nr, splits + b * L.group);
}

// Grid-level partition for groups of two runs: one thread per tile boundary, the 2-way
// co-rank (cheaper than the k-way bisection, same split). Same layout of `splits`.
extern "C" __global__ void __launch_bounds__(THREADS) partition_2way(Level L, u64 *splits, u64 nboundaries) {
    const u64 b = (u64)blockIdx.x * THREADS + threadIdx.x;
    if (b >= nboundaries) return;
    u32 lo = 0, hi = L.ngroups;
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (L.tile_start[mid] + mid <= b) lo = mid; else hi = mid;
    }
    const u32 g = lo;
    const u64 t = b - L.tile_start[g] - g;
    const u32 r0 = g * 2;
    const u64 a0 = L.bounds[r0];
    const u64 b0 = L.bounds[min(r0 + 1, L.nruns)];
    const u64 e = L.bounds[min(r0 + 2, L.nruns)];
    const u64 k = min(t * (u64)KWAY_TILE, e - a0);
    const u64 i = co_rank(k, KeyRun{L.in_keys + a0}, b0 - a0, KeyRun{L.in_keys + b0}, e - b0);
    splits[b * 2] = i;
    if (r0 + 1 < L.nruns) splits[b * 2 + 1] = k - i;
}

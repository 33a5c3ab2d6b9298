// sort_tiles.cu: the tile level of the GPU sort (src/engine/gpu/sort.rs), a merge sort built
// from the co-rank merge.
//
// Block b sorts the tile keys[b * SORT_TILE_T, +SORT_TILE_T) (the last one shorter) stably
// and in place, and writes every sorted key's input position to idx. The sorted tiles are
// then the runs of the pairwise merge tree (merge_tiled.cu, indices loaded from the first
// level on), so the whole sort is: tiles here, then ceil(log2(tiles)) merge levels.
// - Thread level: each thread sorts its IPT_SORT consecutive elements in registers by
//   odd-even transposition; only adjacent keys strictly out of order swap, so equal keys
//   keep their order (stable).
// - Block level: log2(THREADS) rounds of pairwise merges in shared memory. In the round of
//   width w the sorted lists [2qw, 2qw + w) and [2qw + w, 2qw + 2w) are merged; each thread
//   finds its IPT_SORT outputs by co-rank and merges them serially keeping the current key
//   of each list in registers (as merge_tiled.cu does); ties go to the first list, whose
//   elements come first in the input (stable).
// A short tile is padded with key_max() past its end: a pad comes after every real key in
// the input, equal keys included, and the sort is stable, so the first `len` outputs are
// exactly the tile's keys.
// Shared memory (dynamic, sized by the host): one padded tile of keys, then one padded tile
// of u32 tile positions.

#define SORT_TILE_T (THREADS * IPT_SORT)
#define PS(p) padded<IPT_SORT>(p)
#define SORT_SLOTS PADDED_SLOTS(SORT_TILE_T, IPT_SORT)

extern "C" __global__ void __launch_bounds__(THREADS) sort_tiles(Key *keys, index_t *idx, u64 n) {
    extern __shared__ unsigned char smem_sort[];
    Key *sk = (Key *)smem_sort;
    u32 *sp = (u32 *)(sk + SORT_SLOTS);
    const u64 t0 = (u64)blockIdx.x * SORT_TILE_T;
    const u32 len = (u32)min((u64)SORT_TILE_T, n - t0);
    // Block level: coalesced loads (all of a thread's loads in flight at once), pads past
    // the end.
    Key rk[IPT_SORT];
    u32 rp[IPT_SORT];
#pragma unroll
    for (int u = 0; u < IPT_SORT; ++u) {
        const u32 p = threadIdx.x + u * THREADS;
        rk[u] = p < len ? keys[t0 + p] : key_max();
    }
#pragma unroll
    for (int u = 0; u < IPT_SORT; ++u) sk[PS(threadIdx.x + u * THREADS)] = rk[u];
    __syncthreads();
    // Thread level: the thread's consecutive elements, sorted stably in registers.
    const u32 o0 = threadIdx.x * IPT_SORT;
#pragma unroll
    for (int u = 0; u < IPT_SORT; ++u) {
        rk[u] = sk[PS(o0 + u)];
        rp[u] = o0 + u;
    }
#pragma unroll
    for (int round = 0; round < IPT_SORT; ++round) {
#pragma unroll
        for (int u = round & 1; u + 1 < IPT_SORT; u += 2) {
            if (key_lt(rk[u + 1], rk[u])) {
                const Key k = rk[u];
                rk[u] = rk[u + 1];
                rk[u + 1] = k;
                const u32 p = rp[u];
                rp[u] = rp[u + 1];
                rp[u + 1] = p;
            }
        }
    }
    // Every round reads the whole tile and writes it back: barriers on both sides.
    __syncthreads();
#pragma unroll
    for (int u = 0; u < IPT_SORT; ++u) {
        sk[PS(o0 + u)] = rk[u];
        sp[PS(o0 + u)] = rp[u];
    }
    __syncthreads();
    // Block level: the merge rounds.
#pragma unroll 1
    for (u32 w = IPT_SORT; w < SORT_TILE_T; w *= 2) {
        const u32 pa = o0 / (2 * w) * (2 * w), pb = pa + w;
        PadRun<IPT_SORT> A{sk, pa}, B{sk, pb};
        u32 i = (u32)co_rank((u64)(o0 - pa), A, (u64)w, B, (u64)w);
        u32 j = o0 - pa - i;
        // Positions are clamped into the tile: a key read past a list's end is never
        // compared (the bounds tests come first).
        Key ka = sk[PS(pa + i)];  // pa + i <= pb < SORT_TILE_T
        Key kb = sk[PS(min(pb + j, (u32)SORT_TILE_T - 1))];
#pragma unroll
        for (int o = 0; o < IPT_SORT; ++o) {
            const bool take_a = j >= w || (i < w && key_le(ka, kb));
            rk[o] = take_a ? ka : kb;
            rp[o] = sp[PS(take_a ? pa + i : pb + j)];
            if (take_a) {
                ++i;
                ka = sk[PS(pa + i)];  // pa + i <= pb
            } else {
                ++j;
                kb = sk[PS(min(pb + j, (u32)SORT_TILE_T - 1))];
            }
        }
        __syncthreads();
#pragma unroll
        for (int o = 0; o < IPT_SORT; ++o) {
            sk[PS(o0 + o)] = rk[o];
            sp[PS(o0 + o)] = rp[o];
        }
        __syncthreads();
    }
    // Coalesced stores of the tile's real elements.
#pragma unroll
    for (int u = 0; u < IPT_SORT; ++u) {
        const u32 p = threadIdx.x + u * THREADS;
        if (p < len) {
            keys[t0 + p] = sk[PS(p)];
            idx[t0 + p] = (index_t)(t0 + sp[PS(p)]);
        }
    }
}

// merge_tiled.cu: the tiled kernel, one level of the pairwise merge tree.
//
// Grid level: block b owns one tile of TILE = THREADS * IPT_TILED consecutive outputs of
// its group (a pair of runs A, B). Block level: one co-rank pair (tile start and end) on
// global memory gives the exact pieces A[i0, i1) and B[j0, j1) the tile consumes
// (i1 - i0 + j1 - j0 = tile length); they are loaded coalesced into shared memory, so every
// input is read once (this also avoids the book's A_consumed read past a short tile:
// lengths are exact, never assumed full). Thread level: per-thread co-rank inside the
// shared tile, a serial merge of IPT_TILED outputs into registers, which go back to shared
// memory in output order and are stored coalesced.

#define TILE_T (THREADS * IPT_TILED)
#define PT(p) padded<IPT_TILED>(p)

extern "C" __global__ void __launch_bounds__(THREADS) merge_tiled(Level L) {
    __shared__ Key sk[TILE_T + TILE_T / IPT_TILED];
    __shared__ index_t si[TILE_T + TILE_T / IPT_TILED];
    __shared__ u64 cr[2];
    const u64 blk = blockIdx.x + L.block_offset;
    const PairGroup P = pair_group(L, blk);
    const u64 a0 = P.a0, b0 = P.b0, m = P.m, n = P.n;
    const u64 k0 = P.tile * (u64)TILE_T;
    const u64 k1 = min(k0 + TILE_T, m + n);
    KeyRun A{L.in_keys + a0}, B{L.in_keys + b0};
    // Block level: the co-rank pair of the tile (two threads, in parallel).
    if (threadIdx.x < 2) cr[threadIdx.x] = co_rank(threadIdx.x == 0 ? k0 : k1, A, m, B, n);
    __syncthreads();
    const u64 i0 = cr[0], i1 = cr[1];
    const u64 j0 = k0 - i0, j1 = k1 - i1;
    const u32 alen = (u32)(i1 - i0), blen = (u32)(j1 - j0), len = alen + blen;
    // Coalesced loads: shared[0, alen) = A piece, shared[alen, len) = B piece.
    // All IPT loads of a thread are issued before the first store to shared memory
    // (registers, unrolled), so each thread has IPT loads in flight, not one.
    {
        Key lk[IPT_TILED];
        index_t li[IPT_TILED];
#pragma unroll
        for (int u = 0; u < IPT_TILED; ++u) {
            u32 t = threadIdx.x + u * THREADS;
            if (t < len) {
                u64 src = t < alen ? a0 + i0 + t : b0 + j0 + (t - alen);
                lk[u] = L.in_keys[src];
                li[u] = load_idx(L, src);
            }
        }
#pragma unroll
        for (int u = 0; u < IPT_TILED; ++u) {
            u32 t = threadIdx.x + u * THREADS;
            if (t < len) {
                sk[PT(t)] = lk[u];
                si[PT(t)] = li[u];
            }
        }
    }
    __syncthreads();
    // Thread level: co-rank inside the tile, then a serial merge into registers.
    const u32 o0 = threadIdx.x * IPT_TILED;
    Key rk[IPT_TILED];
    index_t ri[IPT_TILED];
    if (o0 < len) {
        PadRun<IPT_TILED> sa{sk, 0}, sb{sk, alen};
        u32 i = (u32)co_rank((u64)o0, sa, (u64)alen, sb, (u64)blen);
        u32 j = o0 - i;
#pragma unroll
        for (int o = 0; o < IPT_TILED; ++o) {
            // Outputs past the tile's end are computed from clamped positions and dropped.
            bool take_a = j >= blen || (i < alen && key_le(sa(i), sb(j)));
            u32 p = take_a ? min(i, (u32)TILE_T - 1) : min(alen + j, (u32)TILE_T - 1);
            rk[o] = sk[PT(p)];
            ri[o] = si[PT(p)];
            if (take_a) ++i; else ++j;
        }
    }
    __syncthreads();
    // Back to shared memory in output order, then coalesced stores.
#pragma unroll
    for (int o = 0; o < IPT_TILED; ++o) {
        if (o0 + o < len) {
            sk[PT(o0 + o)] = rk[o];
            si[PT(o0 + o)] = ri[o];
        }
    }
    __syncthreads();
    const u64 out = a0 + k0;
    for (u32 t = threadIdx.x; t < len; t += THREADS) {
        if (L.out_keys) L.out_keys[out + t] = sk[PT(t)];
        L.out_idx[out + t] = si[PT(t)];
    }
}

// merge_tiled.cu: the tiled kernel, one level of the pairwise merge tree.
//
// Grid level: block b owns one tile of TILE = THREADS * IPT_TILED consecutive outputs of
// its group (a pair of runs A, B). Its co-rank pair (tile start and end) comes from
// partition_2way (partition.cu), which runs the co-rank on global memory once per
// tile boundary for the whole level before this kernel starts: a block that searched for
// itself would wait out ~30 dependent global loads with every thread idle. The pair gives
// the exact pieces A[i0, i1) and B[j0, j1) the tile consumes (i1 - i0 + j1 - j0 = tile
// length), so every input is read once and a short tile is never read past (the book's
// A_consumed reads assume full tiles).
// Block level: the pieces are loaded coalesced into shared memory, A's then B's
// (cta_load_tile with the two-stream source).
// Thread level: per-thread co-rank inside the tile, then a serial merge of IPT_TILED
// outputs that keeps the current key of A and of B in registers (one shared load per
// output, not three). The outputs go back to shared memory in output order and are stored
// coalesced. On the first level an output's index is its input position (computed, not
// loaded); on the last level no keys are written.
//
// Shared memory (dynamic, sized by the host): TILE padded keys, then TILE padded indices.
// Four entry points (merge_tiled_only/first/inner/last) by the level's place in the tree.

#define TILE_T (THREADS * IPT_TILED)
#define PT(p) padded<IPT_TILED>(p)
#define TILE_SLOTS (TILE_T + TILE_T / IPT_TILED)

// One block of the tiled kernel. FIRST: the level's input indices are positions (not
// loaded). KEEP_KEYS: the merged keys are written too (every level but the last). Each
// combination is its own entry point so registers are allocated for what it uses.
template <bool FIRST, bool KEEP_KEYS>
__device__ __forceinline__ void merge_tiled_block(const Level &L, const u64 *splits) {
    extern __shared__ unsigned char smem_tiled[];
    Key *sk = (Key *)smem_tiled;
    index_t *si = (index_t *)(sk + TILE_SLOTS);
    const GroupPos P = block_pos<2>(L);
    const MergeRange R = pair_range(L, P);
    const u64 k0 = P.index * (u64)TILE_T;
    const u64 k1 = min(k0 + TILE_T, R.total());
    // The co-rank pair from the grid-level partition: this tile's boundary and the next.
    const u64 *sp = splits + boundary_index(L.tile_start, P.group, P.index) * 2;
    const MergeRange T = R.piece(k0, sp[0], k1, sp[2]);
    const u32 alen = (u32)T.a_count, blen = (u32)T.b_count, len = alen + blen;
    const u64 abase = T.a_begin, bbase = T.b_begin;  // level positions of the pieces
    // Block level: coalesced loads, shared[0, alen) = A piece, shared[alen, len) = B piece.
    cta_load_tile<IPT_TILED, FIRST ? INDEX_NONE : INDEX_LOADED>(L, len, TwoStreams{abase, bbase, alen}, sk, si);
    __syncthreads();
    // Thread level: co-rank inside the tile, then the serial merge.
    const u32 o0 = threadIdx.x * IPT_TILED;
    // Results wait in registers when writing them would overwrite shared input others still
    // read (keys, or loaded indices); on a first-and-last level the indices go straight to
    // shared memory, which holds no input indices.
    constexpr bool DIRECT = FIRST && !KEEP_KEYS;
    Key rk[KEEP_KEYS ? IPT_TILED : 1];
    index_t ri[DIRECT ? 1 : IPT_TILED];
    if (o0 < len) {
        PadRun<IPT_TILED> sa{sk, 0}, sb{sk, alen};
        u32 i = (u32)co_rank((u64)o0, sa, (u64)alen, sb, (u64)blen);
        u32 j = o0 - i;
        // The current candidates. Positions are clamped into the tile: a key read past a
        // piece's end is never compared (the bounds tests come first) and outputs past the
        // tile's end are dropped.
        Key ka = sk[PT(min(i, (u32)TILE_T - 1))];
        Key kb = sk[PT(min(alen + j, (u32)TILE_T - 1))];
#pragma unroll
        for (int o = 0; o < IPT_TILED; ++o) {
            const bool take_a = j >= blen || (i < alen && key_le(ka, kb));
            if (KEEP_KEYS) rk[o] = take_a ? ka : kb;
            if (DIRECT) {
                if (o0 + o < len) si[PT(o0 + o)] = (index_t)(take_a ? abase + i : bbase + j);
            } else if (FIRST) {
                ri[o] = (index_t)(take_a ? abase + i : bbase + j);
            } else {
                ri[o] = si[PT(min(take_a ? i : alen + j, (u32)TILE_T - 1))];
            }
            if (take_a) {
                ++i;
                ka = sk[PT(min(i, (u32)TILE_T - 1))];
            } else {
                ++j;
                kb = sk[PT(min(alen + j, (u32)TILE_T - 1))];
            }
        }
    }
    if (!DIRECT) {
        // Back to shared memory in output order once every thread is done reading.
        __syncthreads();
#pragma unroll
        for (int o = 0; o < IPT_TILED; ++o) {
            if (o0 + o < len) {
                if (KEEP_KEYS) sk[PT(o0 + o)] = rk[o];
                si[PT(o0 + o)] = ri[o];
            }
        }
    }
    __syncthreads();
    // Coalesced stores.
    cta_store_tile<IPT_TILED, true>(L, R.a_begin + k0, len, sk, si, KEEP_KEYS);
}

// Entry points by the level's place in the tree (the host picks one per level).
extern "C" __global__ void __launch_bounds__(THREADS, TILED_MIN_BLOCKS) merge_tiled_only(Level L, const u64 *splits) {
    merge_tiled_block<true, false>(L, splits);  // first and last level
}
extern "C" __global__ void __launch_bounds__(THREADS, TILED_MIN_BLOCKS) merge_tiled_first(Level L, const u64 *splits) {
    merge_tiled_block<true, true>(L, splits);
}
extern "C" __global__ void __launch_bounds__(THREADS, TILED_MIN_BLOCKS) merge_tiled_inner(Level L, const u64 *splits) {
    merge_tiled_block<false, true>(L, splits);
}
extern "C" __global__ void __launch_bounds__(THREADS, TILED_MIN_BLOCKS) merge_tiled_last(Level L, const u64 *splits) {
    merge_tiled_block<false, false>(L, splits);
}

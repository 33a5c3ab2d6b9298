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
// Block level: the pieces are loaded coalesced into shared memory, A's then B's: through
// registers (cta_load_regs with the two-stream source, then cta_store_shared) where the
// keys alone are loaded or narrow keys are made from them, by cp.async (cta_load_async)
// where keys and indices are.
// Thread level: per-thread co-rank inside the tile, then a serial merge of IPT_TILED
// outputs that keeps the current key of A and of B in registers (one shared load per
// output, not three). The outputs go back to shared memory in output order and are stored
// coalesced. On the first level an output's index is its input position (computed, not
// loaded); on the last level no keys are written, and the comparisons read 32-bit narrow
// keys (cta_merge.cuh, NarrowMap).
//
// Shared memory (dynamic, sized by the host): TILE padded keys (narrow keys on a level that
// writes no keys: the host's size fits both), then TILE padded indices.
// Four entry points (merge_tiled_only/first/inner/last) by the level's place in the tree.

#define TILE_T (THREADS * IPT_TILED)
#define PT(p) padded<IPT_TILED>(p)
#define TILE_SLOTS PADDED_SLOTS(TILE_T, IPT_TILED)

// The type of T if C, else F (NVRTC has no <type_traits>).
template <bool C, class T, class F> struct Pick { typedef T type; };
template <class T, class F> struct Pick<false, T, F> { typedef F type; };

// Block and thread level of one tile, its elements already in registers: shared memory
// holds the keys as they are, or (NARROW) their narrow keys under M. FIRST: the level's
// input indices are positions (not loaded). KEEP_KEYS: the merged keys are written too
// (every level but the last; never NARROW). `out`: the level position of the tile's first
// output.
// nk: the narrow keys of the thread's elements (NARROW). IN_SHARED: the caller loaded the
// tile into shared memory (r and nk are not read).
template <bool NARROW, bool FIRST, bool KEEP_KEYS, bool IN_SHARED = false>
__device__ __forceinline__ void merge_tile(const Level &L, const TileRegs<IPT_TILED> &r, const NarrowMap &M, const u32 (&nk)[IPT_TILED],
                                           u64 abase, u32 alen, u64 bbase, u32 blen, u64 out) {
    static_assert(!(NARROW && KEEP_KEYS), "narrow keys cannot be written out");
    typedef typename Pick<NARROW, u32, Key>::type SKey;  // a key as shared memory holds it
    static_assert(TILE_SLOTS * sizeof(SKey) % sizeof(index_t) == 0, "the index tile must be aligned");
    extern __shared__ __align__(16) unsigned char smem_tiled[];
    SKey *sk = (SKey *)smem_tiled;
    index_t *si = (index_t *)(sk + TILE_SLOTS);
    const u32 len = alen + blen;
    // Whether A[i] <= B[j] (piece positions; both exist), from the keys as shared memory
    // holds them: a comparison of registers, and a branch only where narrow keys tie (rare).
    auto le = [&](const SKey &a, const SKey &b, u32 i, u32 j) -> bool {
        if constexpr (NARROW) {
            return narrow_le(M, L, a, b, abase + i, bbase + j);
        } else {
            return key_le(a, b);
        }
    };
    // Block level: shared[0, alen) = A piece, shared[alen, len) = B piece.
    if constexpr (IN_SHARED) {
        // loaded there by the caller
    } else if constexpr (NARROW) {
        cta_store_shared<IPT_TILED, FIRST ? INDEX_NONE : INDEX_LOADED>(len, nk, r, sk, si);
    } else {
        cta_store_shared<IPT_TILED, FIRST ? INDEX_NONE : INDEX_LOADED>(len, r.k, r, sk, si);
    }
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
        u32 i = co_rank_by(o0, alen, blen, [&](u32 ia, u32 jb) { return le(sk[PT(ia)], sk[PT(alen + jb)], ia, jb); });
        u32 j = o0 - i;
        // The current candidates. Positions are clamped into the tile: a key read past a
        // piece's end is never compared (the bounds tests come first) and outputs past the
        // tile's end are dropped. (Without the clamps, reading two spare slots past the tile
        // instead, the kernel measured 6% slower on an H100.)
        SKey ka = sk[PT(min(i, (u32)TILE_T - 1))];
        SKey kb = sk[PT(min(alen + j, (u32)TILE_T - 1))];
#pragma unroll
        for (int o = 0; o < IPT_TILED; ++o) {
            // Written so the common case is predicated, not branched: the bounds and the
            // comparison of registers first, the tie of narrow keys apart.
            const bool a_left = i < alen, b_left = j < blen;
            bool take_a;
            if constexpr (NARROW) {
                take_a = !b_left || (a_left && ka <= kb);
                if (a_left && b_left && ka == kb && !M.exact) take_a = narrow_tie_le(L.in_keys, abase + i, bbase + j);
            } else {
                take_a = !b_left || (a_left && key_le(ka, kb));
            }
            if constexpr (KEEP_KEYS) rk[o] = take_a ? ka : kb;
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
                if constexpr (KEEP_KEYS) sk[PT(o0 + o)] = rk[o];
                si[PT(o0 + o)] = ri[o];
            }
        }
    }
    __syncthreads();
    // Coalesced stores (keys only where KEEP_KEYS: sk holds keys then).
    cta_store_tile<IPT_TILED>(L, out, len, (const Key *)sk, si, KEEP_KEYS);
}

// One block of the tiled kernel (see merge_tile for FIRST and KEEP_KEYS). Each combination
// is its own entry point so registers are allocated for what it uses. Where the policy says
// so (TILED_NARROW: keys of 16 bytes and more), a level that writes no keys compares narrow
// keys (NarrowMap, cta_merge.cuh) in the tiles that allow it: shared memory then holds
// 4-byte narrow keys instead of the keys, fewer bytes for every shared load.
template <bool FIRST, bool KEEP_KEYS>
__device__ __forceinline__ void merge_tiled_block(const Level &L, const u64 *splits) {
    const GroupPos P = block_pos<2>(L);
    const MergeRange R = pair_range(L, P);
    const u64 k0 = P.index * (u64)TILE_T;
    const u64 k1 = min(k0 + TILE_T, R.total());
    // The co-rank pair from the grid-level partition: this tile's boundary and the next.
    const u64 *sp = splits + boundary_index(L.tile_start, P.group, P.index) * 2;
    const MergeRange T = R.piece(k0, sp[0], k1, sp[2]);
    const u32 alen = (u32)T.a_count, blen = (u32)T.b_count, len = alen + blen;
    const u64 abase = T.a_begin, bbase = T.b_begin;  // level positions of the pieces
    if (len == 0) return;  // uniform across the block
    const u64 out = R.a_begin + k0;
    TileRegs<IPT_TILED> r;
    u32 nk[IPT_TILED];
    if constexpr (TILED_NARROW && !KEEP_KEYS && KEY_BITS > 32) {
        // Block level: coalesced loads into registers, tile position p = A piece then B piece.
        cta_load_regs<IPT_TILED, FIRST ? INDEX_NONE : INDEX_LOADED>(L, len, TwoStreams{abase, bbase, alen}, r);
        const NarrowMap M = tile_narrow_map(L, abase, alen, bbase, blen);
#pragma unroll
        for (int u = 0; u < IPT_TILED; ++u) nk[u] = narrow_key(M, r.k[u]);  // garbage past len, never stored
        if (narrow_pays<IPT_TILED, NARROW_TIE_THREADS>(M, nk, len, alen)) {  // uniform across the block
            merge_tile<true, FIRST, KEEP_KEYS>(L, r, M, nk, abase, alen, bbase, blen, out);
        } else {
            // The keys again (from L2): holding them across the narrow keys' test would take
            // the registers the narrow path needs.
            cta_load_regs<IPT_TILED, INDEX_NONE>(L, len, TwoStreams{abase, bbase, alen}, r);
            merge_tile<false, FIRST, KEEP_KEYS>(L, r, M, nk, abase, alen, bbase, blen, out);
        }
    } else if constexpr (FIRST) {
        // Block level: coalesced loads of the keys into registers, then to shared memory.
        cta_load_regs<IPT_TILED, INDEX_NONE>(L, len, TwoStreams{abase, bbase, alen}, r);
        merge_tile<false, FIRST, KEEP_KEYS>(L, r, NarrowMap{}, nk, abase, alen, bbase, blen, out);
    } else {
        // Keys and indices: coalesced copies straight into shared memory. Through registers
        // they take 3 of a thread's registers an element (u64 key, u32 index), and under the
        // 64 that 4 blocks a multiprocessor allow the loads do not all stay in flight; for
        // keys alone (the first level) the register path measured faster (docs/log/2026-12-performance-log.md).
        extern __shared__ __align__(16) unsigned char smem_tiled[];
        Key *sk = (Key *)smem_tiled;
        cta_load_async<IPT_TILED, INDEX_LOADED>(L, len, TwoStreams{abase, bbase, alen}, sk, (index_t *)(sk + TILE_SLOTS));
        merge_tile<false, FIRST, KEEP_KEYS, true>(L, r, NarrowMap{}, nk, abase, alen, bbase, blen, out);
    }
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

// cta_merge.cuh: the primitives every kernel is composed from, by level of the work.
//
// - Searches (thread level): `partition_point` with the side of equal keys as a template
//   parameter, `last_le` (the one group search), and accessors that let one search body
//   read global memory, a padded shared tile or a circular buffer.
// - Where a block or a partition boundary lies (grid level): `GroupPos` (its group of runs
//   and its tile or boundary number), `boundary_index` (the one formula numbering tile
//   boundaries), `MergeRange` (the pieces of A and B a tile consumes).
// - Tiles (block level): `cta_load_tile` (global to padded shared memory, coalesced; the
//   two-stream source of a pairwise merge is `TwoStreams`; in two phases, `cta_load_regs`
//   and `cta_store_shared`), `cta_store_tile`, and narrow comparison keys (`NarrowMap`).
//
// After moderngpu's cta_merge.hxx, for this crate's level layout (`Level`, common.cuh).

// ---------------------------------------------------------------------------------------
// Searches

// Which side of a run of keys equal to v a search lands on: BOUND_LOWER at the first key
// not < v (it counts the keys < v), BOUND_UPPER at the first key > v (it counts the keys
// <= v).
enum Bound { BOUND_LOWER, BOUND_UPPER };

// Whether x lies before the partition point of v under BOUND.
template <Bound BOUND>
__device__ __forceinline__ bool before_bound(const Key &x, const Key &v) {
    return BOUND == BOUND_UPPER ? key_le(x, v) : key_lt(x, v);
}

// The partition point of v in run[lo, hi), given that run[..lo] all lie before it and
// run[hi..] all after: the search restricted to a window known to contain it.
template <Bound BOUND, class Run>
__device__ __forceinline__ u64 partition_point(Run run, u64 lo, u64 hi, const Key &v) {
    while (lo < hi) {
        u64 mid = lo + (hi - lo) / 2;
        if (before_bound<BOUND>(run(mid), v)) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// The last i in [0, count) with at(i) <= x, for a nondecreasing at() with at(0) <= x. The
// one group search: a block's group (tile table), a boundary's group (boundary table),
// the piece holding a tile position and the pair of pieces of a k-way merge round.
template <class T, class At>
__device__ __forceinline__ u32 last_le(u32 count, T x, At at) {
    u32 lo = 0, hi = count;  // at(lo) <= x < at(hi), at(count) taken as +infinity
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (at(mid) <= x) lo = mid; else hi = mid;
    }
    return lo;
}

// A run as a plain array (global or shared memory).
struct KeyRun {
    const Key *p;
    __device__ __forceinline__ Key operator()(u64 i) const { return p[i]; }
};

// Shared-memory tiles are padded by one slot every PAD slots, PAD being the items a thread
// (IPT): a thread's PAD consecutive outputs then start PAD + 1 slots after its neighbour's,
// which spreads a warp's register-to-shared writes over the banks (unpadded, a stride of 8
// u64 keys puts 16 threads on the same bank). An odd PAD needs no padding: an odd stride
// already puts a warp's 4-byte accesses, a half-warp's 8-byte ones and a quarter-warp's
// 16-byte ones on distinct banks, so there padded() is the identity and every shared
// address is one instruction shorter (the division by PAD gone): the tiled kernel of u64
// keys 7% faster on random keys and 14% on duplicate-heavy ones at 15 items a thread than
// at 16 padded (H200, docs/log/2026-12-performance-log.md, issue 16). A tile of T slots takes
// PADDED_SLOTS(T, PAD); the host's Policy::padded_slots is the same.
template <int PAD>
__device__ __forceinline__ u32 padded(u32 p) { return (PAD & 1) ? p : p + p / PAD; }
#define PADDED_SLOTS(T, PAD) ((T) + ((PAD) & 1 ? 0 : (T) / (PAD)))

// A run inside a padded shared tile, starting at tile position `base`.
template <int PAD>
struct PadRun {
    const Key *p;
    u32 base;
    __device__ __forceinline__ Key operator()(u64 i) const { return p[padded<PAD>(base + (u32)i)]; }
};

// ---------------------------------------------------------------------------------------
// Grid level: where a block or a boundary lies

// A block's tile, or a partition boundary, located in its group of runs.
struct GroupPos {
    u32 group;   // g
    u32 r0;      // the group's first run
    u32 nr;      // runs in the group (the level's group size, fewer in the last group)
    u64 index;   // the tile (of a block) or the boundary (of a partition) within the group
    // Level positions of the group's first element (its output starts there too) and one
    // past its last, read where a kernel needs them: kept in a register from the prologue
    // across the k-way kernel's merge rounds, the start cost it 9% on duplicate-heavy keys
    // (H100).
    __device__ __forceinline__ u64 begin(const Level &L) const { return L.bounds[r0]; }
    __device__ __forceinline__ u64 end(const Level &L) const { return L.bounds[r0 + nr]; }
};

// Group g's runs. GROUP: the level's group size when the kernel knows it (2 for the
// pairwise kernels), 0 to read it from L.group.
template <u32 GROUP>
__device__ __forceinline__ GroupPos group_pos(const Level &L, u32 g, u64 index) {
    const u32 size = GROUP ? GROUP : L.group;
    GroupPos p;
    p.group = g;
    p.r0 = g * size;
    p.nr = min(p.r0 + size, L.nruns) - p.r0;
    p.index = index;
    return p;
}

// The tile of this block: group g owns blocks [tile_start[g], tile_start[g + 1]).
template <u32 GROUP>
__device__ __forceinline__ GroupPos block_pos(const Level &L) {
    const u64 blk = blockIdx.x + L.block_offset;
    const u32 g = last_le(L.ngroups, blk, [&](u32 i) { return L.tile_start[i]; });
    return group_pos<GROUP>(L, g, blk - L.tile_start[g]);
}

// Boundary numbering: a group of T tiles has T + 1 boundaries (its start, every tile end),
// so boundary t of group g is number start[g] + g + t, where start is the level's tile
// table (or the k-way partition's coarse table, numbered the same way). The one formula,
// here and in src/engine/gpu/plan.rs (boundary_index).
__device__ __forceinline__ u64 boundary_index(const u64 *start, u32 g, u64 t) {
    return start[g] + g + t;
}

// The group and the boundary within it of boundary number b (inverse of boundary_index).
template <u32 GROUP>
__device__ __forceinline__ GroupPos boundary_pos(const Level &L, const u64 *start, u64 b) {
    const u32 g = last_le(L.ngroups, b, [&](u32 i) { return boundary_index(start, i, 0); });
    return group_pos<GROUP>(L, g, b - boundary_index(start, g, 0));
}

// A piece of run A and a piece of run B, in level positions: a group's pair of runs, or the
// part of them one tile consumes.
struct MergeRange {
    u64 a_begin, a_count, b_begin, b_count;
    __device__ __forceinline__ u64 total() const { return a_count + b_count; }
    // The piece the merge's outputs [k0, k1) consume, given the co-ranks i0 of k0 and i1
    // of k1 (how many of those outputs come from A).
    __device__ __forceinline__ MergeRange piece(u64 k0, u64 i0, u64 k1, u64 i1) const {
        const u64 j0 = k0 - i0, j1 = k1 - i1;
        return MergeRange{a_begin + i0, i1 - i0, b_begin + j0, j1 - j0};
    }
};

// The pair of runs of a group of a pairwise level: A its first run, B its second (empty
// for a lone last run).
__device__ __forceinline__ MergeRange pair_range(const Level &L, const GroupPos &p) {
    const u64 begin = p.begin(L), end = p.end(L);
    const u64 mid = L.bounds[p.r0 + 1];  // r0 < nruns, so run r0 + 1's start exists
    return MergeRange{begin, mid - begin, mid, end - mid};
}

// ---------------------------------------------------------------------------------------
// Block level: tiles in shared memory

// Where a tile's indices come from when it is loaded.
enum IndexLoad {
    INDEX_NONE,         // not loaded (the first level: the merge computes them from positions)
    INDEX_LOADED,       // L.in_idx (not the first level)
};

// The source of a pairwise tile: position p of the tile is A's piece then B's piece.
struct TwoStreams {
    u64 a_begin, b_begin;
    u32 a_count;
    __device__ __forceinline__ u64 operator()(u32 p) const { return p < a_count ? a_begin + p : b_begin + (p - a_count); }
};

// A tile's elements in registers, thread t holding elements p = t, t + THREADS, ... (u-th
// at p = t + u * THREADS): the two phases of a tile load, so a kernel can look at the keys
// before it decides how shared memory holds them (merge_tiled.cu).
template <int IPT>
struct TileRegs {
    Key k[IPT];
    index_t i[IPT];
};

// Loads the tile's `len` (<= THREADS * IPT) elements, element p from level position src(p),
// into registers: keys and, per IDX, indices. Coalesced, and all IPT loads of a thread are
// issued before any is used (unrolled), so each thread has IPT loads in flight, not one.
template <int IPT, IndexLoad IDX, class Src>
__device__ __forceinline__ void cta_load_regs(const Level &L, u32 len, Src src, TileRegs<IPT> &r) {
#pragma unroll
    for (int u = 0; u < IPT; ++u) {
        u32 p = threadIdx.x + u * THREADS;
        if (p < len) {
            u64 pos = src(p);
            r.k[u] = L.in_keys[pos];
            if (IDX == INDEX_LOADED) r.i[u] = L.in_idx[pos];
        }
    }
}

// Stores a tile from registers into padded shared memory: keys[u] (the value shared memory
// holds for the thread's u-th element: r.k[u], or its narrow key) to sk and, unless IDX is
// INDEX_NONE, the indices r.i to si. The caller synchronizes before reading the tile.
template <int IPT, IndexLoad IDX, class T>
__device__ __forceinline__ void cta_store_shared(u32 len, const T (&keys)[IPT], const TileRegs<IPT> &r, T *sk, index_t *si) {
#pragma unroll
    for (int u = 0; u < IPT; ++u) {
        u32 p = threadIdx.x + u * THREADS;
        if (p < len) {
            sk[padded<IPT>(p)] = keys[u];
            if (IDX != INDEX_NONE) si[padded<IPT>(p)] = r.i[u];
        }
    }
}

// Copies *src (global memory) to *dst (shared memory) without passing through registers:
// cp.async (sm_80 and later) in 8-byte pieces (4-byte for 4-byte types), completed by
// copy_async_wait. Elsewhere a load and a store.
template <class T>
__device__ __forceinline__ void copy_async(T *dst, const T *src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int C = sizeof(T) % 8 == 0 ? 8 : 4;
    static_assert(sizeof(T) % C == 0, "copied in 4- or 8-byte pieces");
    const u32 s = (u32)__cvta_generic_to_shared(dst);
    const char *g = (const char *)src;
#pragma unroll
    for (int c = 0; c < (int)(sizeof(T) / C); ++c) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s + c * C), "l"(g + c * C), "n"(C) : "memory");
    }
#else
    *dst = *src;
#endif
}

// Waits for this thread's copy_async copies (the block then synchronizes before reading).
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Loads the tile's `len` (<= THREADS * IPT) elements, element p from level position src(p),
// into padded shared memory by copy_async (keys, and per IDX the indices): one instruction
// an element and no registers held, where a load into registers then a store take two.
// Coalesced. The caller synchronizes before reading the tile.
template <int IPT, IndexLoad IDX, class Src>
__device__ __forceinline__ void cta_load_async(const Level &L, u32 len, Src src, Key *sk, index_t *si) {
#pragma unroll
    for (int u = 0; u < IPT; ++u) {
        u32 p = threadIdx.x + u * THREADS;
        if (p < len) {
            u64 pos = src(p);
            copy_async(&sk[padded<IPT>(p)], &L.in_keys[pos]);
            if (IDX == INDEX_LOADED) copy_async(&si[padded<IPT>(p)], &L.in_idx[pos]);
        }
    }
    copy_async_wait();
}

// Loads the tile's `len` (<= THREADS * IPT) elements, element p from level position src(p),
// straight into padded shared memory: keys to sk, indices to si (load_idx: L.in_idx where it
// is set, else the position). Coalesced, BATCH elements of a thread in flight at a time: the
// k-way kernel's source costs a search per element, and all IPT loads at once, with their
// level positions, took more registers than its merge rounds and spilled.
template <int IPT, int BATCH, class Src>
__device__ __forceinline__ void cta_load_tile(const Level &L, u32 len, Src src, Key *sk, index_t *si) {
#pragma unroll
    for (int u0 = 0; u0 < IPT; u0 += BATCH) {
        Key k[BATCH];
        index_t x[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const u32 p = threadIdx.x + (u0 + u) * THREADS;
            if (u0 + u < IPT && p < len) {
                const u64 pos = src(p);
                k[u] = L.in_keys[pos];
                x[u] = load_idx(L, pos);
            }
        }
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            const u32 p = threadIdx.x + (u0 + u) * THREADS;
            if (u0 + u < IPT && p < len) {
                sk[padded<IPT>(p)] = k[u];
                si[padded<IPT>(p)] = x[u];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Block level: narrow comparison keys
//
// A tile's keys compared as 32-bit numbers (the tiled kernel's levels that write no keys,
// merge_tiled.cu). A key's narrow key is its offset from the tile's smallest key in the
// first word where the tile's smallest and largest keys differ, shifted right until the
// largest offset fits 32 bits. Every key of the tile agrees with the smallest one in the
// words before that word, so the map is nondecreasing: a smaller narrow key is a smaller
// key. Equal narrow keys are equal keys only where the map is `exact` (nothing shifted
// out, no word after it); otherwise the full keys decide. Random keys span about 2^48 in
// a 4096-key tile of 2^28 keys, so 16 bits are shifted out and ties are rare;
// duplicate-heavy keys of a small range are exact. A shared load then moves 4 bytes, not
// the key's 8 to 32: on an H100 that pays for keys of two words and more, not for one u64
// word, whose merge is bound by instruction issue more than by shared memory
// (docs/log/2026-12-performance-log.md, issue 16; the policy's `tiled_narrow` picks).
struct NarrowMap {
    Key lo;      // the tile's smallest key
    u32 word;    // the first word where the tile's keys differ (KEY_WORDS: all keys equal)
    u32 shift;   // bits shifted out of the offset
    bool exact;  // equal narrow keys are equal keys
};

// The map of a tile whose smallest key is lo and largest hi.
__device__ __forceinline__ NarrowMap narrow_map(const Key &lo, const Key &hi) {
    NarrowMap m;
    m.lo = lo;
    m.word = KEY_WORDS;
    word_t range = 0;  // picked by masks (see narrow_key)
    bool found = false;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) {
        const bool here = !found && lo.w[i] != hi.w[i];
        range |= (hi.w[i] - lo.w[i]) & ((word_t)0 - (word_t)here);
        m.word = here ? (u32)i : m.word;
        found = found || here;
    }
    const u32 bits = 64 - __clzll((u64)range);
    m.shift = bits > 32 ? bits - 32 : 0;
    m.exact = m.word + 1 >= KEY_WORDS && m.shift == 0;
    return m;
}

// The narrow key of k, a key of the tile (lo <= k <= the tile's largest).
__device__ __forceinline__ u32 narrow_key(const NarrowMap &m, const Key &k) {
    // The word is picked by masks, not by a branch per word: the compiler turns the branches
    // into an indexed access, which puts a wide key in local memory.
    word_t offset = 0;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) offset |= (k.w[i] - m.lo.w[i]) & ((word_t)0 - (word_t)((u32)i == m.word));
    const u64 o = (u64)offset;
    return __funnelshift_rc((u32)o, (u32)(o >> 32), m.shift);  // the low word of o >> shift (shift <= 32)
}

// Whether the key at level position pos_a is <= the one at pos_b, for two keys of the tile
// whose narrow keys tie under a map that is not exact: the full keys are read from global
// memory, where the tile was just loaded from.
// Not inlined: inlined, the compiler predicates its loads and address arithmetic into every
// step of the serial merge, where they cost issue slots though a tie is rare; a call is one
// predicated instruction.
__device__ __noinline__ bool narrow_tie_le(const Key *keys, u64 pos_a, u64 pos_b) {
    return key_le(keys[pos_a], keys[pos_b]);
}

// a <= b for keys of the tile given as narrow keys (positions as for narrow_tie_le).
__device__ __forceinline__ bool narrow_le(const NarrowMap &m, const Level &L, u32 a, u32 b, u64 pos_a, u64 pos_b) {
    bool le = a <= b;
    if (a == b && !m.exact) le = narrow_tie_le(L.in_keys, pos_a, pos_b);
    return le;
}

// The narrow map of a tile made of the pieces A[abase, abase + alen) and B[bbase, bbase +
// blen) (level positions, alen + blen > 0): its smallest and largest keys are the first and
// last keys of its pieces (every thread reads the same four keys).
__device__ __forceinline__ NarrowMap tile_narrow_map(const Level &L, u64 abase, u32 alen, u64 bbase, u32 blen) {
    const Key *K = L.in_keys;
    if (alen == 0 || blen == 0) {
        const u64 first = alen ? abase : bbase, last = first + alen + blen - 1;
        return narrow_map(K[first], K[last]);
    }
    const Key a0 = K[abase], b0 = K[bbase], a1 = K[abase + alen - 1], b1 = K[bbase + blen - 1];
    return narrow_map(key_select(key_le(a0, b0), a0, b0), key_select(key_le(a1, b1), b1, a1));
}

// Whether a tile should compare narrow keys, given the narrow keys nk of the thread's
// elements (element u at tile position threadIdx.x + u * THREADS; A's piece at [0, alen)):
// always where the map is exact; otherwise only where at most MAX_TIE_THREADS threads saw an
// element of a piece whose next element has the same narrow key (each such tie costs reads
// of the full keys from global memory in the merge; a tile of few distinct keys spread wide
// is merged on its full keys instead). A sample: every NARROW_SAMPLE_STRIDE-th element of a
// thread, whose next element is in the next lane (lane 31's pair is not looked at).
// Block-wide: every thread calls it.
#define NARROW_SAMPLE_STRIDE 4
template <int IPT, u32 MAX_TIE_THREADS>
__device__ __forceinline__ bool narrow_pays(const NarrowMap &m, const u32 (&nk)[IPT], u32 len, u32 alen) {
    if (m.exact) return true;  // uniform: the map is the block's
    const u32 lane = threadIdx.x & 31;
    bool tie = false;
#pragma unroll
    for (int u = 0; u < IPT; u += NARROW_SAMPLE_STRIDE) {
        const u32 p = threadIdx.x + u * THREADS;
        const u32 next = __shfl_down_sync(0xffffffffu, nk[u], 1);
        tie |= lane < 31 && p + 1 < len && p + 1 != alen && nk[u] == next;
    }
    return (u32)__syncthreads_count(tie) <= MAX_TIE_THREADS;
}

// Stores the merged tile (`len` <= THREADS * IPT elements in padded shared memory, in
// output order) to level positions [out, out + len), coalesced: the indices, and the keys
// where `keep_keys` (every level but the last); IPT predicated stores a thread. The caller
// synchronizes before.
template <int IPT>
__device__ __forceinline__ void cta_store_tile(const Level &L, u64 out, u32 len, const Key *sk, const index_t *si, bool keep_keys) {
#pragma unroll
    for (int u = 0; u < IPT; ++u) {
        u32 p = threadIdx.x + u * THREADS;
        if (p < len) {
            if (keep_keys) L.out_keys[out + p] = sk[padded<IPT>(p)];
            L.out_idx[out + p] = si[padded<IPT>(p)];
        }
    }
}

// common.cuh: key and index types shared by every kernel.
//
// The host (src/gpu/build.rs) compiles one module per (key width, index width) and
// prepends these defines (no #include: NVRTC gets the sources concatenated, so the
// binary carries them through include_str!):
//   KEY_WORDS      1..4   words per key, word 0 the most significant
//   KEY_WORD_BITS  32|64  bits per word (32 only with KEY_WORDS == 1)
//   INDEX_BITS     32|64  permutation index width
//   THREADS, IPT_BASIC, IPT_TILED, IPT_CIRC, IPT_KWAY, CIRC_SLOTS, CIRC_TILES, KWAY_COARSE,
//   TILED_MIN_BLOCKS   tuning (src/gpu/tuning.rs)
// The Rust side stores a key as [u64; N] (most significant word first) or a scalar, which
// has exactly the layout of `Key` below.

typedef unsigned int u32;
typedef unsigned long long u64;

#if KEY_WORD_BITS == 32
typedef u32 word_t;
#else
typedef u64 word_t;
#endif

#if INDEX_BITS == 32
typedef u32 index_t;
#else
typedef u64 index_t;
#endif

#define KEY_BITS (KEY_WORDS * KEY_WORD_BITS)

struct Key {
    word_t w[KEY_WORDS];
};

// a <= b as the big-endian integer the words spell (word 0 most significant).
__device__ __forceinline__ bool key_le(const Key &a, const Key &b) {
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) {
        if (a.w[i] != b.w[i]) return a.w[i] < b.w[i];
    }
    return true;
}

__device__ __forceinline__ bool key_lt(const Key &a, const Key &b) {
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) {
        if (a.w[i] != b.w[i]) return a.w[i] < b.w[i];
    }
    return false;
}

__device__ __forceinline__ bool key_eq(const Key &a, const Key &b) {
    bool eq = true;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) eq = eq && (a.w[i] == b.w[i]);
    return eq;
}

__device__ __forceinline__ Key key_max() {
    Key k;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) k.w[i] = ~(word_t)0;
    return k;
}

// `k` with bit `bit` cleared (bit 0 = least significant of the whole key), as
// KeyWord::clear_bit in src/keys/word.rs.
__device__ __forceinline__ Key key_clear_bit(Key k, u32 bit) {
    u32 word = KEY_WORDS - 1 - bit / KEY_WORD_BITS;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) {
        if ((u32)i == word) k.w[i] &= ~((word_t)1 << (bit % KEY_WORD_BITS));
    }
    return k;
}

// A level's layout, shared by every kernel. The runs of this level are
// [bounds[r], bounds[r + 1]) in global positions; runs are merged in groups of
// `group` adjacent runs (2 for the pairwise tree, up to 64 for the k-way kernel); group g
// writes exactly the output range of its inputs. Each group is cut into tiles of
// `tile` outputs; group g owns the blocks [tile_start[g], tile_start[g + 1]), so a block
// never straddles two groups.
struct Level {
    const Key *in_keys;      // this level's keys
    const index_t *in_idx;   // their global indices, or null: index = position (first level)
    Key *out_keys;           // merged keys, or null on the last level (only indices are kept)
    index_t *out_idx;        // merged indices
    const u64 *bounds;       // nruns + 1 run bounds
    const u64 *tile_start;   // ngroups + 1 block offsets
    u64 block_offset;        // added to blockIdx.x (the last level is launched in chunks)
    u32 nruns;
    u32 group;
    u32 ngroups;
};

__device__ __forceinline__ index_t load_idx(const Level &L, u64 pos) {
    return L.in_idx ? L.in_idx[pos] : (index_t)pos;
}

// The group owning block `blk`: the last g with tile_start[g] <= blk.
__device__ __forceinline__ u32 find_group(const Level &L, u64 blk) {
    u32 lo = 0, hi = L.ngroups;  // tile_start[lo] <= blk < tile_start[hi]
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (L.tile_start[mid] <= blk) lo = mid; else hi = mid;
    }
    return lo;
}

// The pair of adjacent runs a block of a pairwise-merge level works on: runs 2g and 2g+1 of
// its group g (B is empty for an odd last run), and the block's tile number in the group.
struct PairGroup {
    u64 a0, b0;  // global starts of A and B
    u64 m, n;    // lengths of A and B
    u64 tile;    // this block's tile within the group
};

__device__ __forceinline__ PairGroup pair_group(const Level &L, u64 blk) {
    const u32 g = find_group(L, blk);
    const u32 r0 = g * 2;
    PairGroup p;
    p.a0 = L.bounds[r0];
    p.b0 = L.bounds[min(r0 + 1, L.nruns)];
    const u64 e = L.bounds[min(r0 + 2, L.nruns)];
    p.m = p.b0 - p.a0;
    p.n = e - p.b0;
    p.tile = blk - L.tile_start[g];
    return p;
}

// common.cuh: key and index types, and the level layout every kernel reads.
//
// The host (src/engine/gpu/nvrtc.rs) compiles one module per (kernel family, key width,
// index width) and prepends these defines (no #include: NVRTC gets the sources
// concatenated, so the binary carries them through include_str!):
//   KEY_WORDS      1..4   words per key, word 0 the most significant
//   KEY_WORD_BITS  32|64  bits per word (32 only with KEY_WORDS == 1)
//   INDEX_BITS     32|64  permutation index width
//   THREADS, IPT_BASIC, IPT_TILED, IPT_CIRC, IPT_KWAY, KWAY_MIN_BLOCKS, CIRC_SLOTS, CIRC_TILES, KWAY_COARSE,
//   TILED_MIN_BLOCKS, IPT_SORT, TILED_NARROW, NARROW_TIE_THREADS
//                  the tuning policy (src/engine/gpu/tuning.rs)
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
static_assert(sizeof(Key) == KEY_WORDS * KEY_WORD_BITS / 8, "Key must have the layout of the host's key words");

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

// c ? a : b word by word (a conditional of whole keys goes through local memory).
__device__ __forceinline__ Key key_select(bool c, const Key &a, const Key &b) {
    Key k;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) k.w[i] = c ? a.w[i] : b.w[i];
    return k;
}

__device__ __forceinline__ Key key_max() {
    Key k;
#pragma unroll
    for (int i = 0; i < KEY_WORDS; ++i) k.w[i] = ~(word_t)0;
    return k;
}

// A level's layout, shared by every kernel. The runs of this level are
// [bounds[r], bounds[r + 1]) in level positions; runs are merged in groups of `group`
// adjacent runs (2 for the pairwise tree, up to 64 for the k-way kernel); group g writes
// exactly the output range of its inputs. Each group is cut into tiles (one block each);
// group g owns the blocks [tile_start[g], tile_start[g + 1]), so a block never straddles
// two groups.
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
// The host passes `LevelArg` (src/engine/gpu/launch.rs) by value as this struct; it asserts
// the same size, alignment and offsets on its side. NVRTC has no <cstddef> and no
// __builtin_offsetof; there FIELD_OFFSET is offsetof as its front end (EDG) defines it
// (nvcc, for tools that include these sources, has the builtin).
#ifdef __CUDACC_RTC__
#define FIELD_OFFSET(T, f) ((unsigned long long)__INTADDR__(&(((T *)0)->f)))
#else
#define FIELD_OFFSET(T, f) __builtin_offsetof(T, f)
#endif
static_assert(sizeof(Level) == 72, "Level: 72 bytes, as LevelArg");
static_assert(alignof(Level) == 8, "Level: aligned to 8, as LevelArg");
static_assert(FIELD_OFFSET(Level, in_keys) == 0, "Level::in_keys");
static_assert(FIELD_OFFSET(Level, in_idx) == 8, "Level::in_idx");
static_assert(FIELD_OFFSET(Level, out_keys) == 16, "Level::out_keys");
static_assert(FIELD_OFFSET(Level, out_idx) == 24, "Level::out_idx");
static_assert(FIELD_OFFSET(Level, bounds) == 32, "Level::bounds");
static_assert(FIELD_OFFSET(Level, tile_start) == 40, "Level::tile_start");
static_assert(FIELD_OFFSET(Level, block_offset) == 48, "Level::block_offset");
static_assert(FIELD_OFFSET(Level, nruns) == 56, "Level::nruns");
static_assert(FIELD_OFFSET(Level, group) == 60, "Level::group");
static_assert(FIELD_OFFSET(Level, ngroups) == 64, "Level::ngroups");

// The global index of the element at level position `pos`: loaded, or the position itself
// on the first level (whose input indices are not materialized).
__device__ __forceinline__ index_t load_idx(const Level &L, u64 pos) {
    return L.in_idx ? L.in_idx[pos] : (index_t)pos;
}

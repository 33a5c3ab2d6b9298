// merge_kway.cu: block-level merge of the single-pass k-way kernel (k <= 64 runs a group).
//
// Grid level: the partition (partition.cu) gave every tile boundary its split; block b
// owns tile t of group g and reads the splits at its two ends, which give the exact piece
// of each run the tile consumes (the pieces add up to the tile length). Block level: the
// pieces are loaded coalesced, side by side, into shared memory, then merged there by a
// tree of stable pairwise merges of adjacent pieces (ceil(log2 nr) rounds); only the final
// tile goes back to device memory, so the data crosses device memory once for any k.
// Thread level, each round: a thread owns IPT_KWAY consecutive outputs, finds the first by
// 2-way co-rank in shared memory and merges serially keeping the current key of each list
// in registers (one shared load of a key per output, as merge_tiled.cu); its outputs wait
// in registers until every thread has read the round's input, then overwrite it in place.
// So a block holds one tile of keys and one of indices (the tiled kernel's footprint), not
// two of each.
//
// Packed elements (keys of one u64 word): where a tile's keys span less than 2^(64 -
// KWAY_POS_BITS) - 1, its elements are rewritten after the load as one u64 each, (key - the
// tile's smallest key) << KWAY_POS_BITS | the element's tile position. The pieces lie in the
// tile in run order and each in its run's order, so among equal keys a smaller tile
// position is an earlier element of the stable merge: packed elements are distinct, and
// their order is the merge's. The rounds then move one word an element and no index (the
// indices stay where the load put them; the store reads them through the packed position):
// 4.5% faster at k = 16 and 6.7% at k = 64 on random u64 keys (H200, docs/log/2026-12-performance-log.md,
// issue 16). A tile spanning more (few keys spread over the u64 range) is merged on tile
// positions instead: they move (4 bytes), the keys stay and compare through them, and the
// store gathers each element's key and looks its index up again. The GPU sort's levels
// where no tile packs on random keys (groups of at most KWAY_TILE 2^KWAY_POS_BITS keys:
// the first two at 2^28 keys; LevelPlan::random_tiles_pack) take merge_kway_keys: keys and
// indices, as before packing.
//
// Shared memory (dynamic, sized by the host): one padded tile of keys (or packed elements,
// 8 bytes too), then one of indices.

#define KWAY_TILE (THREADS * IPT_KWAY)
#define PK(p) padded<IPT_KWAY>(p)
#define KWAY_SLOTS PADDED_SLOTS(KWAY_TILE, IPT_KWAY)
// v, as a value the compiler cannot see through. A round's first output (o0) goes through
// it: the rounds of two kinds in one kernel otherwise share the addresses computed from it,
// which the compiler hoisted above both and held in registers through either (200+ bytes
// of spills a thread; none with it).
__device__ __forceinline__ u32 opaque(u32 v) { asm volatile("mov.u32 %0, %0;" : "+r"(v)); return v; }
#define KWAY_LOAD_BATCH 4  // elements of a thread loaded at a time (cta_load_tile)

// Bits of a tile position: the smallest b with 2^b >= n.
__device__ constexpr u32 position_bits(u32 n) { return n <= 1 ? 0 : 1 + position_bits((n + 1) / 2); }
#define KWAY_POS_BITS position_bits(KWAY_TILE)
#if KEY_WORDS == 1 && KEY_WORD_BITS == 64
#define KWAY_PACKED 1  // a packed element fills a key's slot
#else
#define KWAY_PACKED 0
#endif

// Granules of the tile for the load's piece lookup: positions [32 g, 32 g + 32).
#define KWAY_GRANULE 32
#define KWAY_GRANULES (KWAY_TILE / KWAY_GRANULE)

// The source of a k-way tile: position p of the tile lies in the piece r, the last with
// seg[r] <= p (empty pieces are passed over), at level position shift[r] + p (shift[r]: the
// piece's first level position less seg[r], mod 2^64).
// first[g] is that piece for granule g's first position, searched once a block; a
// position's piece is then found by stepping past the piece starts inside its granule
// (rarely one: the pieces average KWAY_TILE / k positions), not by a search over all k
// pieces per element, which cost more shared loads than the merge rounds' own at k = 16.
struct KStreams {
    const u32 *seg;
    const u64 *shift;
    const unsigned char *first;
    u32 nr;
    __device__ __forceinline__ u64 operator()(u32 p) const {
        u32 r = first[p / KWAY_GRANULE];
        while (r + 1 < nr && seg[r + 1] <= p) ++r;
        return shift[r] + p;
    }
};

// Thread level, one round of the block's merge tree: the lists [seg[2qw], seg[2qw + w]) and
// [seg[2qw + w], seg[2qw + 2w]) of the tile (runs' pieces merged by the earlier rounds) are
// merged, pair q's outputs taking the positions of its two lists. One body for the three
// kinds of elements a tile is merged as (E, below: keys and indices, packed elements, tile
// positions): E says what the serial merge holds for a list's head (`Head`, read at a tile
// position by `head`), how two heads compare (`le`), what an output keeps until the write
// back (`Out`, from the head taken and its tile position: `take`) and how it is written
// back (`store`). Every thread calls it.
template <class E>
__device__ __forceinline__ void kway_round(E e, const u32 *seg, u32 nr, u32 w, u32 len) {
    const u32 o0 = opaque(threadIdx.x * IPT_KWAY);
    const u32 npairs = (nr + 2 * w - 1) / (2 * w);
    // Reads are clamped into the tile: a head read past a list is never compared (the
    // bounds tests come first), outputs past the tile's end are not stored.
    auto at = [&](u32 p) { return e.head(min(p, (u32)KWAY_TILE - 1)); };
    typename E::Out out[IPT_KWAY];
    if (o0 < len) {
        // The pair holding output o0: the last q with seg[2qw] <= o0 (an empty pair there is
        // skipped: the one after it starts at the same position). Its lists are [pa, pb) and
        // [pb, pe) of the tile; ap and bp are the tile positions of their current heads.
        u32 q = last_le(npairs, o0, [&](u32 i) { return seg[i * 2 * w]; });
        const u32 pa = seg[q * 2 * w];
        u32 pb = seg[min(q * 2 * w + w, nr)], pe = seg[min(q * 2 * w + 2 * w, nr)];
        const u32 kk = o0 - pa;
        const u32 i = co_rank_by(kk, pb - pa, pe - pb, [&](u32 ia, u32 jb) { return e.le(e.head(pa + ia), e.head(pb + jb)); });
        u32 ap = pa + i, bp = pb + (kk - i);
        typename E::Head ha = at(ap), hb = at(bp);
#pragma unroll
        for (int o = 0; o < IPT_KWAY; ++o) {
            // A thread's outputs may run past its pair into the next (rare: a pair is the
            // tile's pieces of 2w runs).
            while (o0 + o == pe && q + 1 < npairs) {
                ++q;
                ap = pe;
                pb = seg[min(q * 2 * w + w, nr)];
                pe = seg[min(q * 2 * w + 2 * w, nr)];
                bp = pb;
                ha = at(ap);
                hb = at(bp);
            }
            const bool take_a = bp >= pe || (ap < pb && e.le(ha, hb));
            out[o] = e.take(take_a, ha, hb, min(take_a ? ap : bp, (u32)KWAY_TILE - 1));
            if (take_a) {
                ++ap;
                ha = at(ap);
            } else {
                ++bp;
                hb = at(bp);
            }
        }
    }
    // In place, once every thread has read the round's input.
    __syncthreads();
#pragma unroll
    for (int o = 0; o < IPT_KWAY; ++o) {
        if (o0 + o < len) e.store(o0 + o, out[o]);
    }
    __syncthreads();
}

// Keys and indices (keys of any width): both move, the index of an output looked up by the
// tile position of the head taken.
struct KeyElements {
    Key *sk;
    index_t *si;
    typedef Key Head;
    struct Out {
        Key k;
        index_t i;
    };
    __device__ __forceinline__ Head head(u32 p) const { return sk[PK(p)]; }
    __device__ __forceinline__ bool le(const Head &a, const Head &b) const { return key_le(a, b); }
    __device__ __forceinline__ Out take(bool take_a, const Head &a, const Head &b, u32 p) const {
        return Out{key_select(take_a, a, b), si[PK(p)]};
    }
    __device__ __forceinline__ void store(u32 p, const Out &x) const {
        sk[PK(p)] = x.k;
        si[PK(p)] = x.i;
    }
};

#if KWAY_PACKED
// Packed elements (the head of this file): one word moves, and they are distinct, so <
// decides; no index moves.
struct PackedElements {
    u64 *se;
    typedef u64 Head;
    typedef u64 Out;
    __device__ __forceinline__ Head head(u32 p) const { return se[PK(p)]; }
    __device__ __forceinline__ bool le(Head a, Head b) const { return a < b; }
    __device__ __forceinline__ Out take(bool take_a, Head a, Head b, u32) const { return take_a ? a : b; }
    __device__ __forceinline__ void store(u32 p, Out x) const { se[PK(p)] = x; }
};

// Tile positions (a tile that does not pack): sp holds the tile positions of the elements in
// their current order, the keys stay where the load put them (sk, by tile position).
// Positions move, 4 bytes an element, and compare by their keys; no index moves (the store
// looks them up by position).
struct PositionElements {
    const Key *sk;
    u32 *sp;
    struct Head {
        u32 c;  // the element's tile position (where its key is)
        Key k;
    };
    typedef u32 Out;
    __device__ __forceinline__ Head head(u32 p) const {
        const u32 c = sp[PK(p)];
        return Head{c, sk[PK(c)]};
    }
    __device__ __forceinline__ bool le(const Head &a, const Head &b) const { return key_le(a.k, b.k); }
    __device__ __forceinline__ Out take(bool take_a, const Head &a, const Head &b, u32) const { return take_a ? a.c : b.c; }
    __device__ __forceinline__ void store(u32 p, Out x) const { sp[PK(p)] = x; }
};
#endif

// One block of the k-way kernel: the tile of block blockIdx.x + L.block_offset. PACK (keys
// of one u64 word): a tile that packs is merged as packed elements, any other on tile
// positions; otherwise on keys and indices.
template <bool PACK>
__device__ __forceinline__ void kway_block(const Level &L, const u64 *splits) {
    extern __shared__ __align__(16) unsigned char smem_kway[];
    Key *sk = (Key *)smem_kway;
    index_t *si = (index_t *)(sk + KWAY_SLOTS);
    static_assert(KWAY_SLOTS * sizeof(Key) % sizeof(index_t) == 0, "the index tile must be aligned");
    __shared__ u32 seg[65];  // piece r occupies [seg[r], seg[r + 1]) of the tile
    __shared__ u64 shift[64]; // level position of piece r's first element, less seg[r] (mod 2^64)
    __shared__ unsigned char first[KWAY_GRANULES];  // KStreams: the piece of each granule's start
    const GroupPos P = block_pos<0>(L);
    const u32 r0 = P.r0, nr = P.nr;
    const u64 *lo = splits + boundary_index(L.tile_start, P.group, P.index) * L.group;
    const u64 *hi = lo + L.group;
    if (threadIdx.x < 32) {
        // Exclusive scan of piece lengths over the (at most 64) runs, one warp.
        u32 len[2];
        u32 run_sum = 0;
        for (int s = 0; s < 2; ++s) {
            u32 r = threadIdx.x + 32 * s;
            len[s] = r < nr ? (u32)(hi[r] - lo[r]) : 0;
            u32 x = len[s];
            for (int o = 1; o < 32; o *= 2) {
                u32 y = __shfl_up_sync(0xffffffffu, x, o);
                if (threadIdx.x >= (u32)o) x += y;
            }
            if (r < nr) {
                seg[r] = run_sum + x - len[s];
                shift[r] = L.bounds[r0 + r] + lo[r] - seg[r];
            }
            run_sum += __shfl_sync(0xffffffffu, x, 31);
        }
        if (threadIdx.x == 0) seg[nr] = run_sum;  // the tile length
    }
    __syncthreads();
    const u32 len = seg[nr];
    for (u32 g = threadIdx.x; g < KWAY_GRANULES; g += THREADS) {
        first[g] = (unsigned char)last_le(nr, g * KWAY_GRANULE, [&](u32 i) { return seg[i]; });
    }
    __syncthreads();
    // Block level: coalesced loads of the pieces, side by side.
    const KStreams src{seg, shift, first, nr};
    cta_load_tile<IPT_KWAY, KWAY_LOAD_BATCH>(L, len, src, sk, si);
    __syncthreads();
#if KWAY_PACKED
  if constexpr (PACK) {
    // The tile's smallest and largest keys, its pieces' first and last (every warp finds
    // them itself), then a barrier before any element is rewritten.
    u64 klo = ~0ull, khi = 0;
    for (u32 r = threadIdx.x & 31; r < nr; r += 32) {
        if (seg[r + 1] > seg[r]) {
            klo = min(klo, sk[PK(seg[r])].w[0]);
            khi = max(khi, sk[PK(seg[r + 1] - 1)].w[0]);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        klo = min(klo, __shfl_xor_sync(0xffffffffu, klo, o));
        khi = max(khi, __shfl_xor_sync(0xffffffffu, khi, o));
    }
    // Past the bound an offset would not leave room for the position below ~0.
    const bool packs = len == 0 || khi - klo < (1ull << (64 - KWAY_POS_BITS)) - 1;  // uniform
    __syncthreads();
    // Each thread rewrites the elements it loaded: packed elements, or (a tile that does not
    // pack) the tile positions over the indices.
    u64 *se = (u64 *)sk;
    u32 *sp = (u32 *)si;
#pragma unroll
    for (int u = 0; u < IPT_KWAY; ++u) {
        const u32 p = threadIdx.x + u * THREADS;
        if (packs) {
            se[PK(p)] = ((se[PK(p)] - klo) << KWAY_POS_BITS) | p;  // garbage past len, never read
        } else {
            sp[PK(p)] = p;
        }
    }
    __syncthreads();
    const u64 out = P.begin(L) + P.index * (u64)KWAY_TILE;
    if (packs) {
        for (u32 w = 1; w < nr; w *= 2) kway_round(PackedElements{se}, seg, nr, w, len);
        // Coalesced stores: each element's index from its tile position, its key where the
        // level keeps keys.
#pragma unroll
        for (int u = 0; u < IPT_KWAY; ++u) {
            const u32 p = threadIdx.x + u * THREADS;
            if (p < len) {
                const u64 e = se[PK(p)];
                L.out_idx[out + p] = si[PK((u32)e & ((1u << KWAY_POS_BITS) - 1))];
                if (L.out_keys) L.out_keys[out + p].w[0] = klo + (e >> KWAY_POS_BITS);
            }
        }
    } else {
        for (u32 w = 1; w < nr; w *= 2) kway_round(PositionElements{sk, sp}, seg, nr, w, len);
        // Coalesced stores: each element's key by its tile position, its index looked up
        // again (the positions took the index tile's place). Few tiles come here in a merge
        // of many runs; most of the GPU sort's second level does (~2^53 a tile on random keys,
        // docs/log/2026-12-performance-log.md, "Packed elements in the k-way kernel").
#pragma unroll
        for (int u = 0; u < IPT_KWAY; ++u) {
            const u32 p = threadIdx.x + u * THREADS;
            if (p < len) {
                const u32 c = sp[PK(p)];
                L.out_idx[out + p] = load_idx(L, src(c));
                if (L.out_keys) L.out_keys[out + p] = sk[PK(c)];
            }
        }
    }
    return;
  }
#endif
    // Block-level merge tree in shared memory: in round w, pieces [j*w, j*w + w) have been
    // merged; pairs (j*2w .. +w) and (+w .. +2w) are merged.
    for (u32 w = 1; w < nr; w *= 2) kway_round(KeyElements{sk, si}, seg, nr, w, len);
    // Coalesced stores of the merged tile.
    cta_store_tile<IPT_KWAY>(L, P.begin(L) + P.index * (u64)KWAY_TILE, len, sk, si, L.out_keys != nullptr);
}

// The k-way merge of a level: packed where it can be (see the head of this file).
extern "C" __global__ void __launch_bounds__(THREADS, KWAY_MIN_BLOCKS) merge_kway(Level L, const u64 *splits) {
    kway_block<KWAY_PACKED == 1>(L, splits);
}

// The same merge on keys and indices only, for the GPU sort's early merge levels: the first
// level's runs are sorted tiles of 4096 keys that each span the key range, so a k-way tile
// of random u64 keys there spans ~2^58 (~2^53 on the second level) and does not pack (the
// bound is 2^51 for sm_90's 4,352-key tiles), and the merge on tile positions (what
// merge_kway does with such a tile) took the sort of 2^28 random keys 11% longer on an H200
// with every level on it, 6% with only the first level on this one (docs/log/2026-12-performance-log.md).
extern "C" __global__ void __launch_bounds__(THREADS, KWAY_MIN_BLOCKS) merge_kway_keys(Level L, const u64 *splits) {
    kway_block<false>(L, splits);
}

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
// Shared memory (dynamic, sized by the host): one padded tile of keys, then one of indices.

#define KWAY_TILE (THREADS * IPT_KWAY)
#define PK(p) padded<IPT_KWAY>(p)
#define KWAY_SLOTS (KWAY_TILE + KWAY_TILE / IPT_KWAY)
#define KWAY_LOAD_BATCH 4  // elements of a thread loaded at a time (cta_load_tile)

// Granules of the tile for the load's piece lookup: positions [32 g, 32 g + 32).
#define KWAY_GRANULE 32
#define KWAY_GRANULES (KWAY_TILE / KWAY_GRANULE)

// The source of a k-way tile: position p of the tile lies in the piece r, the last with
// seg[r] <= p (empty pieces are passed over), at level position shift[r] + p (shift[r]: the
// piece's first level position less seg[r], mod 2^64).
// first[g] is that piece for granule g's first position, searched once a block; a
// position's piece is then found by stepping past the piece starts inside its granule
// (rarely one: the pieces average 4096 / k positions), not by a search over all k pieces
// per element, which cost more shared loads than the merge rounds' own at k = 16.
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

// One round of the block's merge tree: the lists [seg[2qw], seg[2qw + w]) and
// [seg[2qw + w], seg[2qw + 2w]) of the tile (runs' pieces merged by the earlier rounds)
// are merged, pair q's outputs taking the positions of its two lists. Every thread calls it.
__device__ __forceinline__ void kway_round(Key *sk, index_t *si, const u32 *seg, u32 nr, u32 w, u32 len) {
    const u32 o0 = threadIdx.x * IPT_KWAY;
    const u32 npairs = (nr + 2 * w - 1) / (2 * w);
    Key rk[IPT_KWAY];
    index_t ri[IPT_KWAY];
    if (o0 < len) {
        // The pair holding output o0: the last q with seg[2qw] <= o0 (an empty pair there is
        // skipped: the one after it starts at the same position). Its lists are [pa, pb) and
        // [pb, pe) of the tile; ap and bp are the tile positions of their current heads.
        u32 q = last_le(npairs, o0, [&](u32 i) { return seg[i * 2 * w]; });
        const u32 pa = seg[q * 2 * w];
        u32 pb = seg[min(q * 2 * w + w, nr)], pe = seg[min(q * 2 * w + 2 * w, nr)];
        const u32 kk = o0 - pa;
        const u32 i = co_rank_by(kk, pb - pa, pe - pb, [&](u32 ia, u32 jb) { return key_le(sk[PK(pa + ia)], sk[PK(pb + jb)]); });
        u32 ap = pa + i, bp = pb + (kk - i);
        // Reads are clamped into the tile: a key read past a list is never compared (the
        // bounds tests come first), outputs past the tile's end are not stored.
        Key ka = sk[PK(min(ap, (u32)KWAY_TILE - 1))];
        Key kb = sk[PK(min(bp, (u32)KWAY_TILE - 1))];
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
                ka = sk[PK(min(ap, (u32)KWAY_TILE - 1))];
                kb = sk[PK(min(bp, (u32)KWAY_TILE - 1))];
            }
            const bool take_a = bp >= pe || (ap < pb && key_le(ka, kb));
            rk[o] = key_select(take_a, ka, kb);
            ri[o] = si[PK(min(take_a ? ap : bp, (u32)KWAY_TILE - 1))];
            if (take_a) {
                ++ap;
                ka = sk[PK(min(ap, (u32)KWAY_TILE - 1))];
            } else {
                ++bp;
                kb = sk[PK(min(bp, (u32)KWAY_TILE - 1))];
            }
        }
    }
    // In place, once every thread has read the round's input.
    __syncthreads();
#pragma unroll
    for (int o = 0; o < IPT_KWAY; ++o) {
        if (o0 + o < len) {
            sk[PK(o0 + o)] = rk[o];
            si[PK(o0 + o)] = ri[o];
        }
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(THREADS, KWAY_MIN_BLOCKS) merge_kway(Level L, const u64 *splits) {
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
    cta_load_tile<IPT_KWAY, KWAY_LOAD_BATCH>(L, len, KStreams{seg, shift, first, nr}, sk, si);
    __syncthreads();
    // Block-level merge tree in shared memory: in round w, pieces [j*w, j*w + w) have been
    // merged; pairs (j*2w .. +w) and (+w .. +2w) are merged.
    for (u32 w = 1; w < nr; w *= 2) kway_round(sk, si, seg, nr, w, len);
    // Coalesced stores of the merged tile.
    cta_store_tile<IPT_KWAY>(L, P.begin(L) + P.index * (u64)KWAY_TILE, len, sk, si, L.out_keys != nullptr);
}

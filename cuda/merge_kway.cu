// merge_kway.cu: block-level merge of the single-pass k-way kernel (k <= 64 runs a group).
//
// Grid level: the partition (partition.cu) gave every tile boundary its split; block b
// owns tile t of group g and reads the splits at its two ends, which give the exact piece
// of each run the tile consumes (the pieces add up to the tile length). Block level: the
// pieces are loaded coalesced, side by side, into shared memory, then merged there by a
// tree of stable pairwise merges of adjacent pieces (ceil(log2 nr) rounds, ping-pong
// between two shared buffers); only the final tile goes back to device memory, so the
// data crosses device memory once for any k. Thread level: each thread owns IPT_KWAY
// consecutive outputs of a round, finds them by 2-way co-rank in shared memory and merges
// serially.
//
// Shared memory (dynamic, sized by the host): two padded tiles of keys, then two of indices.

#define KWAY_TILE (THREADS * IPT_KWAY)
#define PK(p) padded<IPT_KWAY>(p)
#define KWAY_SLOTS (KWAY_TILE + KWAY_TILE / IPT_KWAY)

// The source of a k-way tile: position p of the tile lies in the piece r with
// seg[r] <= p < seg[r + 1], which starts at level position src0[r].
struct KStreams {
    const u32 *seg;
    const u64 *src0;
    u32 nr;
    __device__ __forceinline__ u64 operator()(u32 p) const {
        const u32 r = last_le(nr, p, [&](u32 i) { return seg[i]; });
        return src0[r] + (p - seg[r]);
    }
};

extern "C" __global__ void __launch_bounds__(THREADS) merge_kway(Level L, const u64 *splits) {
    extern __shared__ unsigned char smem[];
    Key *sk[2];
    index_t *si[2];
    sk[0] = (Key *)smem;
    sk[1] = sk[0] + KWAY_SLOTS;
    si[0] = (index_t *)(sk[1] + KWAY_SLOTS);
    si[1] = si[0] + KWAY_SLOTS;
    __shared__ u32 seg[65];  // piece r occupies [seg[r], seg[r + 1]) of the tile
    __shared__ u64 src0[64]; // level position of piece r's first element
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
            if (r < nr) src0[r] = L.bounds[r0 + r] + lo[r];
            u32 x = len[s];
            for (int o = 1; o < 32; o *= 2) {
                u32 y = __shfl_up_sync(0xffffffffu, x, o);
                if (threadIdx.x >= (u32)o) x += y;
            }
            if (r < nr) seg[r] = run_sum + x - len[s];
            run_sum += __shfl_sync(0xffffffffu, x, 31);
        }
        if (threadIdx.x == 0) seg[nr] = run_sum;  // the tile length
    }
    __syncthreads();
    const u32 len = seg[nr];
    // Block level: coalesced loads of the pieces, side by side.
    cta_load_tile<IPT_KWAY, INDEX_OR_POSITION>(L, len, KStreams{seg, src0, nr}, sk[0], si[0]);
    __syncthreads();
    // Block-level merge tree in shared memory: in round w, pieces [j*w, j*w + w) have been
    // merged; merge pairs (j*2w .. +w) with (+w .. +2w).
    int cur = 0;
    for (u32 w = 1; w < nr; w *= 2) {
        const u32 o0 = threadIdx.x * IPT_KWAY;
        const u32 o1 = min(o0 + IPT_KWAY, len);
        for (u32 pos = o0; pos < o1;) {
            // The pair holding output position pos: the largest q with seg[q * 2w] <= pos.
            const u32 q = last_le((nr + 2 * w - 1) / (2 * w), pos, [&](u32 i) { return seg[i * 2 * w]; });
            const u32 pa = seg[q * 2 * w], pb = seg[min(q * 2 * w + w, nr)], pe = seg[min(q * 2 * w + 2 * w, nr)];
            PadRun<IPT_KWAY> A{sk[cur], pa}, B{sk[cur], pb};
            const u32 m = pb - pa, n = pe - pb;
            const u32 kk = pos - pa;
            u32 i = (u32)co_rank((u64)kk, A, (u64)m, B, (u64)n);
            u32 j = kk - i;
            const u32 stop = min(o1, pe);
            for (; pos < stop; ++pos) {
                bool take_a = j >= n || (i < m && key_le(A(i), B(j)));
                u32 p = PK(take_a ? pa + i : pb + j);
                sk[cur ^ 1][PK(pos)] = sk[cur][p];
                si[cur ^ 1][PK(pos)] = si[cur][p];
                if (take_a) ++i; else ++j;
            }
        }
        cur ^= 1;
        __syncthreads();
    }
    // Coalesced stores of the merged tile.
    cta_store_tile<IPT_KWAY, false>(L, P.begin(L) + P.index * (u64)KWAY_TILE, len, sk[cur], si[cur], L.out_keys != nullptr);
}

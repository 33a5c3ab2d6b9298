// merge_kway.cu: block-level merge of the single-pass k-way kernel (k <= 64 runs a group).
//
// Grid level: partition_kway gave every tile boundary its split; block b owns tile t of
// group g and reads the splits at its two ends, which give the exact piece of each run the
// tile consumes (the pieces add up to the tile length). Block level: the pieces are loaded
// coalesced, side by side, into shared memory, then merged there by a tree of stable
// pairwise merges of adjacent pieces (ceil(log2 nr) rounds, ping-pong between two shared
// buffers); only the final tile goes back to device memory, so the data crosses device
// memory once for any k. Thread level: each thread owns IPT_KWAY consecutive outputs of a
// round, finds them by 2-way co-rank in shared memory and merges serially.

#define PK(p) padded<IPT_KWAY>(p)
#define KWAY_SLOTS (KWAY_TILE + KWAY_TILE / IPT_KWAY)

extern "C" __global__ void __launch_bounds__(THREADS) merge_kway(Level L, const u64 *splits) {
    extern __shared__ unsigned char smem[];
    Key *sk[2];
    index_t *si[2];
    sk[0] = (Key *)smem;
    sk[1] = sk[0] + KWAY_SLOTS;
    si[0] = (index_t *)(sk[1] + KWAY_SLOTS);
    si[1] = si[0] + KWAY_SLOTS;
    __shared__ u32 seg[65];  // piece r occupies [seg[r], seg[r + 1]) of the tile
    __shared__ u64 src0[64]; // global position of piece r's first element
    const u64 blk = blockIdx.x + L.block_offset;
    const u32 g = find_group(L, blk);
    const u64 t = blk - L.tile_start[g];
    const u32 r0 = g * L.group;
    const u32 nr = min(L.group, L.nruns - r0);
    const u64 *lo = splits + (L.tile_start[g] + g + t) * L.group;
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
    // Coalesced loads: element p of the tile belongs to the piece r with seg[r] <= p < seg[r + 1].
    // All IPT loads of a thread are issued before the first store to shared memory
    // (registers, unrolled), so each thread has IPT loads in flight, not one.
    {
        Key lk[IPT_KWAY];
        index_t li[IPT_KWAY];
#pragma unroll
        for (int u = 0; u < IPT_KWAY; ++u) {
            u32 p = threadIdx.x + u * THREADS;
            if (p < len) {
                u32 a = 0, b = nr;  // seg[a] <= p < seg[b]
                while (b - a > 1) {
                    u32 mid = (a + b) / 2;
                    if (seg[mid] <= p) a = mid; else b = mid;
                }
                u64 src = src0[a] + (p - seg[a]);
                lk[u] = L.in_keys[src];
                li[u] = load_idx(L, src);
            }
        }
#pragma unroll
        for (int u = 0; u < IPT_KWAY; ++u) {
            u32 p = threadIdx.x + u * THREADS;
            if (p < len) {
                sk[0][PK(p)] = lk[u];
                si[0][PK(p)] = li[u];
            }
        }
    }
    __syncthreads();
    // Block-level merge tree in shared memory: in round w, pieces [j*w, j*w + w) have been
    // merged; merge pairs (j*2w .. +w) with (+w .. +2w).
    int cur = 0;
    for (u32 w = 1; w < nr; w *= 2) {
        const u32 o0 = threadIdx.x * IPT_KWAY;
        const u32 o1 = min(o0 + IPT_KWAY, len);
        for (u32 pos = o0; pos < o1;) {
            // The pair holding output position pos: the largest q with seg[q * 2w] <= pos.
            u32 q = 0, qn = (nr + 2 * w - 1) / (2 * w);
            while (qn - q > 1) {
                u32 mid = (q + qn) / 2;
                if (seg[mid * 2 * w] <= pos) q = mid; else qn = mid;
            }
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
    const u64 out = L.bounds[r0] + t * (u64)KWAY_TILE;
    for (u32 p = threadIdx.x; p < len; p += THREADS) {
        if (L.out_keys) L.out_keys[out + p] = sk[cur][PK(p)];
        L.out_idx[out + p] = si[cur][PK(p)];
    }
}

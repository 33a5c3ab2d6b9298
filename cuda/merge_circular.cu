// merge_circular.cu: the circular-buffer kernel, one level of the pairwise merge tree (the
// "book" module, built only when Kernel::Basic or Kernel::Circular is asked for).
//
// Grid level: block b owns a section of CIRC_TILES tiles of CIRC_SLOTS outputs of its group;
// one co-rank pair on global memory gives the section's pieces of A and B. Block level: A's
// and B's pieces stream through two circular buffers of CIRC_SLOTS keys each; every
// iteration merges the next tile from what is buffered and refills only the slots that
// tile consumed. The published code reloads from the *consumed* counts; here each buffer
// tracks how much was *loaded* (a_loaded) separately from how much was consumed (a_cons),
// and the refill reads A from a_loaded: the buffer then always holds
// A[a_cons, min(a_cons + CIRC_SLOTS, alen)), which is all the next tile can need.
// Thread level: co-rank inside the circular window, serial merge of IPT_CIRC outputs,
// written straight to global memory.

// A run held in a circular buffer of CIRC_SLOTS slots whose first element sits at slot
// `head % CIRC_SLOTS`.
struct CircRun {
    const Key *p;
    u32 head;
    __device__ __forceinline__ Key operator()(u64 i) const { return p[(head + (u32)i) % CIRC_SLOTS]; }
};

extern "C" __global__ void __launch_bounds__(THREADS) merge_circular(Level L) {
    __shared__ Key ak[CIRC_SLOTS], bk[CIRC_SLOTS];
    __shared__ index_t ai[CIRC_SLOTS], bi[CIRC_SLOTS];
    __shared__ u64 cr[2];
    __shared__ u32 used_a;
    const GroupPos P = block_pos<2>(L);
    const MergeRange R = pair_range(L, P);
    const u64 section = (u64)CIRC_SLOTS * CIRC_TILES;
    const u64 k0 = P.index * section;
    const u64 k1 = min(k0 + section, R.total());
    // Block level: the section's co-rank pair.
    if (threadIdx.x < 2)
        cr[threadIdx.x] = co_rank(threadIdx.x == 0 ? k0 : k1, KeyRun{L.in_keys + R.a_begin}, R.a_count, KeyRun{L.in_keys + R.b_begin}, R.b_count);
    __syncthreads();
    const MergeRange S = R.piece(k0, cr[0], k1, cr[1]);
    const u32 alen = (u32)S.a_count, blen = (u32)S.b_count;
    const u64 abase = S.a_begin, bbase = S.b_begin;
    const u64 out = R.a_begin + k0;
    u32 a_loaded = 0, b_loaded = 0, a_cons = 0, b_cons = 0;
    const u32 total = alen + blen;
    for (u32 produced = 0; produced < total;) {
        // Refill: positions [loaded, min(cons + SLOTS, len)) into slots pos % SLOTS. These
        // slots held positions already consumed (or nothing, the first time).
        const u32 a_end = min(alen, a_cons + CIRC_SLOTS), b_end = min(blen, b_cons + CIRC_SLOTS);
        for (u32 p = a_loaded + threadIdx.x; p < a_end; p += THREADS) {
            ak[p % CIRC_SLOTS] = L.in_keys[abase + p];
            ai[p % CIRC_SLOTS] = load_idx(L, abase + p);
        }
        for (u32 p = b_loaded + threadIdx.x; p < b_end; p += THREADS) {
            bk[p % CIRC_SLOTS] = L.in_keys[bbase + p];
            bi[p % CIRC_SLOTS] = load_idx(L, bbase + p);
        }
        a_loaded = a_end;
        b_loaded = b_end;
        __syncthreads();
        // This tile: the next c outputs, all within the buffered windows (c <= SLOTS, and a
        // window shorter than SLOTS holds the rest of its piece).
        const u32 c = min((u32)CIRC_SLOTS, total - produced);
        const u32 a_avail = a_loaded - a_cons, b_avail = b_loaded - b_cons;
        CircRun CA{ak, a_cons}, CB{bk, b_cons};
        const u32 o0 = threadIdx.x * IPT_CIRC;
        if (o0 < c) {
            u32 i = (u32)co_rank((u64)o0, CA, (u64)a_avail, CB, (u64)b_avail);
            u32 j = o0 - i;
            const u32 cnt = min((u32)IPT_CIRC, c - o0);
            for (u32 o = 0; o < cnt; ++o) {
                bool take_a = j >= b_avail || (i < a_avail && key_le(CA(i), CB(j)));
                u32 slot = (take_a ? a_cons + i : b_cons + j) % CIRC_SLOTS;
                u64 dst = out + produced + o0 + o;
                if (L.out_keys) L.out_keys[dst] = take_a ? ak[slot] : bk[slot];
                L.out_idx[dst] = take_a ? ai[slot] : bi[slot];
                if (take_a) ++i; else ++j;
            }
        }
        // How much of A this tile consumed (co-rank at the tile's end, within the windows).
        if (threadIdx.x == 0) used_a = (u32)co_rank((u64)c, CA, (u64)a_avail, CB, (u64)b_avail);
        __syncthreads();
        const u32 ua = used_a;
        a_cons += ua;
        b_cons += c - ua;
        produced += c;
        __syncthreads();  // used_a is rewritten next iteration
    }
}

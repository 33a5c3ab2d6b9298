// merge_basic.cu: the book's basic kernel, one level of the pairwise merge tree.
//
// Grid level: block b belongs to group g (a pair of adjacent runs A, B; B may be empty)
// through the level's tile table. Thread level: each thread owns IPT_BASIC consecutive
// outputs, finds its start in A and B by co-rank on global memory, and merges serially
// from global memory into global memory. Simple and uncoalesced: the baseline.

extern "C" __global__ void __launch_bounds__(THREADS) merge_basic(Level L) {
    const u64 blk = blockIdx.x + L.block_offset;
    const PairGroup P = pair_group(L, blk);
    const u64 a0 = P.a0, b0 = P.b0, m = P.m, n = P.n;
    // Output position (relative to the group) of this thread's first output.
    const u64 k = P.tile * (u64)(THREADS * IPT_BASIC) + (u64)threadIdx.x * IPT_BASIC;
    if (k >= m + n) return;
    const u32 cnt = (u32)min((u64)IPT_BASIC, m + n - k);
    KeyRun A{L.in_keys + a0}, B{L.in_keys + b0};
    u64 i = co_rank(k, A, m, B, n);
    u64 j = k - i;
    // Thread level: serial stable merge of cnt outputs (ties take from A).
    for (u32 o = 0; o < cnt; ++o) {
        bool take_a = j >= n || (i < m && key_le(A(i), B(j)));
        u64 src = take_a ? a0 + i : b0 + j;
        u64 dst = a0 + k + o;
        if (L.out_keys) L.out_keys[dst] = L.in_keys[src];
        L.out_idx[dst] = load_idx(L, src);
        if (take_a) ++i; else ++j;
    }
}

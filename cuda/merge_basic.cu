// merge_basic.cu: the book's basic kernel, one level of the pairwise merge tree (the "book"
// module, built only when Kernel::Basic or Kernel::Circular is asked for).
//
// Grid level: block b belongs to group g (a pair of adjacent runs A, B; B may be empty)
// through the level's tile table (block_pos). Thread level: each thread owns IPT_BASIC
// consecutive outputs, finds its start in A and B by co-rank on global memory, and merges
// serially from global memory into global memory. Simple and uncoalesced: the baseline.

extern "C" __global__ void __launch_bounds__(THREADS) merge_basic(Level L) {
    const GroupPos P = block_pos<2>(L);
    const MergeRange R = pair_range(L, P);
    const u64 m = R.a_count, n = R.b_count;
    // Output position (relative to the group) of this thread's first output.
    const u64 k = P.index * (u64)(THREADS * IPT_BASIC) + (u64)threadIdx.x * IPT_BASIC;
    if (k >= m + n) return;
    const u32 cnt = (u32)min((u64)IPT_BASIC, m + n - k);
    KeyRun A{L.in_keys + R.a_begin}, B{L.in_keys + R.b_begin};
    u64 i = co_rank(k, A, m, B, n);
    u64 j = k - i;
    // Thread level: serial stable merge of cnt outputs (ties take from A).
    for (u32 o = 0; o < cnt; ++o) {
        bool take_a = j >= n || (i < m && key_le(A(i), B(j)));
        u64 src = take_a ? R.a_begin + i : R.b_begin + j;
        u64 dst = R.a_begin + k + o;
        if (L.out_keys) L.out_keys[dst] = L.in_keys[src];
        L.out_idx[dst] = load_idx(L, src);
        if (take_a) ++i; else ++j;
    }
}

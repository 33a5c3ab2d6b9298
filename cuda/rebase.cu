// rebase.cu: the indices of one device's part of a multi-GPU merge, made global.
//
// With several devices (src/engine/gpu/multi.rs) the output is cut into one contiguous
// range per device by co-rank, and a device merges only its slice of every run: the slices
// go up concatenated, so the merge's indices are positions in that concatenation. Here each
// becomes the global input index (its position in the concatenation of the whole runs,
// src/permutation.rs): the slices that hold rows are
//   bounds[0 .. nruns]   the local position of each slice's first row, then the total
//   delta[0 .. nruns)    the global index of each slice's first row minus bounds[r]
// and an index i of slice r (bounds[r] <= i < bounds[r + 1]) becomes i + delta[r] (delta is
// never negative: a slice starts no earlier in the whole input than in the concatenation).
//
// Indices [begin, end) are rebased in place: the host launches this after each chunk of the
// last merge level, so the download of a chunk still overlaps the merge of the next.
// Compiled with the production kernels (index_t from common.cuh).

extern "C" __global__ void rebase_indices(index_t *idx, u64 begin, u64 end, const u64 *bounds, const u64 *delta, u32 nruns) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = begin + blockIdx.x * (u64)blockDim.x + threadIdx.x; i < end; i += stride) {
        const u64 local = idx[i];
        // The slice holding `local`: the last r with bounds[r] <= local (bounds[0] == 0).
        u32 lo = 0, hi = nruns;
        while (hi - lo > 1) {
            const u32 mid = (lo + hi) / 2;
            if (bounds[mid] <= local) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        idx[i] = (index_t)(local + delta[lo]);
    }
}

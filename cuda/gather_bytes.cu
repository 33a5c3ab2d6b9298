// gather_bytes.cu: the byte array gather of a device-resident round (issue 69, stage 3;
// the host: src/engine/gpu/resident.rs). A byte array column lives on the device as its
// segments' decoded chunks (src/parquet/device/decode.rs): per segment, rows + 1 offsets (4
// or 8 bytes each, from the segment's first value byte) and its value bytes. The output, in
// the merge's order: offsets (4 or 8 bytes each, from 0) and the values, in three steps:
//
//   1. gather_byte_lengths: each output row's length, from its input row's two offsets;
//   2. scan_blocks_u64 / scan_add_u64: the lengths scanned in place into each row's first
//      output byte (exclusive), block by block, the blocks' totals scanned the same way by
//      the host level by level (the last level is one block: its total is the values' size);
//   3. gather_byte_copy: a warp a row copies its bytes, and writes the row's output offset
//      (thread 0 of the grid also writes the last one, the total).
//
// The segment table is one ByteSegment a segment (repr(C) on the host: ByteSegmentArg in
// src/engine/resident_job.rs), and `starts` each segment's first global row, then the total
// (gather.cu's run table; gather_run_of finds a row's segment). An index at or past `total`
// is flagged in *error as gather.cu does (GATHER_OUT_OF_RANGE) and gathers an empty value.
//
// Compiled after gather.cu in the Gather family (manifest.rs).

struct ByteSegment {
    u64 offsets;      // the segment's rows + 1 offsets
    u64 values;       // its first value byte
    u32 offset_width; // 4 or 8
    u32 pad;
};

static_assert(sizeof(ByteSegment) == 24, "ByteSegment must match ByteSegmentArg");

#define SCAN_ITEMS 8

__device__ __forceinline__ u64 byte_offset_at(const ByteSegment &s, u64 i) {
    return s.offset_width == 8 ? ((const u64 *)s.offsets)[i] : (u64)((const u32 *)s.offsets)[i];
}

// The source of output row i: its bytes' first address and its length (0 past the input).
template <typename I>
__device__ __forceinline__ u64 byte_source(const ByteSegment *segs, const u64 *starts, u32 nsegs, I g, u64 total, u32 *error,
                                           const u8 **src) {
    if ((u64)g >= total) { // flagged where `error` is given (the length kernel)
        if (error) atomicOr(error, GATHER_OUT_OF_RANGE);
        *src = 0;
        return 0;
    }
    const u32 s = gather_run_of(starts, nsegs, (u64)g);
    const u64 r = (u64)g - starts[s];
    const u64 begin = byte_offset_at(segs[s], r);
    *src = (const u8 *)segs[s].values + begin;
    return byte_offset_at(segs[s], r + 1) - begin;
}

template <typename I>
__device__ __forceinline__ void byte_lengths(const void *segs_arg, const u64 *starts, u32 nsegs, const I *idx, u64 n, u64 total, u64 *lens,
                                             u32 *error) {
    const ByteSegment *segs = (const ByteSegment *)segs_arg;
    const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += stride) {
        const u8 *src;
        lens[i] = byte_source(segs, starts, nsegs, idx[i], total, error, &src);
    }
}

extern "C" __global__ void gather_byte_lengths_i32(const void *segs, const u64 *starts, u32 nsegs, const u32 *idx, u64 n, u64 total, u64 *lens, u32 *error) {
    byte_lengths(segs, starts, nsegs, idx, n, total, lens, error);
}

extern "C" __global__ void gather_byte_lengths_i64(const void *segs, const u64 *starts, u32 nsegs, const u64 *idx, u64 n, u64 total, u64 *lens, u32 *error) {
    byte_lengths(segs, starts, nsegs, idx, n, total, lens, error);
}

// Block b scans its tile of blockDim.x * SCAN_ITEMS values in place (exclusive) and writes
// the tile's total to sums[b]. Thread t holds the tile's items t * SCAN_ITEMS .. + SCAN_ITEMS.
extern "C" __global__ void scan_blocks_u64(u64 *data, u64 n, u64 *sums) {
    __shared__ u64 warp_totals[32];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    const u64 first = (u64)blockIdx.x * blockDim.x * SCAN_ITEMS + (u64)threadIdx.x * SCAN_ITEMS;
    u64 v[SCAN_ITEMS];
    u64 mine = 0;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        v[k] = first + k < n ? data[first + k] : 0;
        mine += v[k];
    }
    // The thread's inclusive sum within its warp, then the warps' totals scanned by warp 0.
    u64 x = mine;
#pragma unroll
    for (u32 d = 1; d < 32; d <<= 1) {
        const u64 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_totals[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u64 w = lane < warps ? warp_totals[lane] : 0;
#pragma unroll
        for (u32 d = 1; d < 32; d <<= 1) {
            const u64 y = __shfl_up_sync(0xffffffffu, w, d);
            if (lane >= d) w += y;
        }
        if (lane < warps) warp_totals[lane] = w; // inclusive
    }
    __syncthreads();
    u64 at = (warp > 0 ? warp_totals[warp - 1] : 0) + x - mine; // exclusive: before this thread's items
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        if (first + k < n) data[first + k] = at;
        at += v[k];
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = warp_totals[warps - 1];
}

// Adds each tile's scanned total (its exclusive start) to its items.
extern "C" __global__ void scan_add_u64(u64 *data, u64 n, const u64 *sums) {
    const u64 tile = (u64)blockDim.x * SCAN_ITEMS;
    const u64 add = sums[blockIdx.x];
    for (u64 i = (u64)blockIdx.x * tile + threadIdx.x; i < n && i < ((u64)blockIdx.x + 1) * tile; i += blockDim.x) data[i] += add;
}

template <typename I>
__device__ __forceinline__ void byte_copy(const void *segs_arg, const u64 *starts, u32 nsegs, const I *idx, u64 n, u64 total,
                                          const u64 *out_starts, u64 grand_total, u8 *values, void *offsets, u32 offset_width) {
    const ByteSegment *segs = (const ByteSegment *)segs_arg;
    const u32 lane = threadIdx.x & 31;
    const u64 warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 i = warp; i < n; i += warps) {
        const u8 *src;
        // An index past the input was flagged by the length kernel: not again.
        const u64 len = byte_source(segs, starts, nsegs, idx[i], total, (u32 *)0, &src);
        const u64 at = out_starts[i];
        for (u64 b = lane; b < len; b += 32) values[at + b] = src[b];
        if (lane == 0) {
            if (offset_width == 8) ((u64 *)offsets)[i] = at;
            else ((u32 *)offsets)[i] = (u32)at;
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        if (offset_width == 8) ((u64 *)offsets)[n] = grand_total;
        else ((u32 *)offsets)[n] = (u32)grand_total;
    }
}

extern "C" __global__ void gather_byte_copy_i32(const void *segs, const u64 *starts, u32 nsegs, const u32 *idx, u64 n, u64 total, const u64 *out_starts, u64 grand_total, u8 *values, void *offsets, u32 offset_width) {
    byte_copy(segs, starts, nsegs, idx, n, total, out_starts, grand_total, values, offsets, offset_width);
}

extern "C" __global__ void gather_byte_copy_i64(const void *segs, const u64 *starts, u32 nsegs, const u64 *idx, u64 n, u64 total, const u64 *out_starts, u64 grand_total, u8 *values, void *offsets, u32 offset_width) {
    byte_copy(segs, starts, nsegs, idx, n, total, out_starts, grand_total, values, offsets, offset_width);
}

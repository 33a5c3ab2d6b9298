// gather.cu: the payload gather. Applies a merge's permutation to fixed-width payload
// columns on the device: out[i] = in[idx[i]] for values of any width, and the validity
// bitmap of the output built from the inputs' bitmaps (Arrow bit order: bit i of the
// bitmap is bit i % 8 of byte i / 8, least significant first).
//
// The host (src/engine/gpu/gather.rs) uploads, per column, the values of every run
// concatenated in run order, so a global index g (the position in the concatenation of the
// runs, src/permutation.rs) is the element at byte g * width. Bitmaps go up as each run's
// bytes as they are (a run's first row may start at any bit), with a table:
//   runs[0 .. nruns]            the global index of each run's first row, then the total
//   runs[nruns + 1 .. 2 nruns]  the bit position of each run's first row in `bits`, or
//                               ~0 for a run without nulls (every row valid)
// An index at or past `total` is not followed: the output element is left as zero and bit
// GATHER_OUT_OF_RANGE is set in *error (the host returns an error and no output).
//
// Byte views (Arrow's Utf8View / BinaryView) go through gather_values as 16-byte values.
// A view of more than 12 bytes names its data buffer by index in its own run's buffers;
// the output array holds every run's buffers in run order, so gather_rebase_views then adds
// the run's first buffer number to it, from a table of the same shape:
//   runs[0 .. nruns]            the global index of each run's first row, then the total
//   runs[nruns + 1 .. 2 nruns]  the number of the run's first data buffer in the output
//
// Compiled with common.cuh (u32, u64) in its own module family (manifest.rs, Family::Gather),
// one module for both index widths. Every buffer is 256-byte aligned (the host places them),
// so vector loads and stores of up to 16 bytes are aligned.

typedef unsigned char u8;
typedef unsigned short u16;

#define GATHER_OUT_OF_RANGE 1u

// The element index `g` when it lies in the input, else flags the error.
template <typename I>
__device__ __forceinline__ bool gather_in_range(I g, u64 total, u32 *error) {
    if ((u64)g < total) return true;
    atomicOr(error, GATHER_OUT_OF_RANGE);
    return false;
}

// One element of `units` units of type T (the widest unit that divides the width).
template <typename T>
__device__ __forceinline__ void gather_copy(const u8 *src, u8 *dst, u64 g, u64 i, u32 units) {
    const T *s = (const T *)src + g * units;
    T *d = (T *)dst + i * units;
    for (u32 u = 0; u < units; ++u) d[u] = s[u];
}

// Elements of 1 or 2 bytes: each thread gathers PACK consecutive outputs and writes them with
// one store of PACK * sizeof(T) bytes (4 bytes for 1-byte values, 8 for 2-byte ones); the
// tail (fewer than PACK outputs) one by one.
template <typename T, typename W, int PACK, typename I>
__device__ __forceinline__ void gather_packed(const u8 *src, u8 *dst, const I *idx, u64 n, u64 total, u32 *error) {
    const T *s = (const T *)src;
    const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 groups = n / PACK;
    for (u64 q = tid; q < groups; q += stride) {
        W w = 0;
#pragma unroll
        for (int j = 0; j < PACK; ++j) {
            I g = idx[q * PACK + j];
            W v = gather_in_range(g, total, error) ? (W)s[g] : (W)0;
            w |= v << (8 * sizeof(T) * j);
        }
        ((W *)dst)[q] = w;
    }
    for (u64 i = groups * PACK + tid; i < n; i += stride) {
        I g = idx[i];
        ((T *)dst)[i] = gather_in_range(g, total, error) ? s[g] : (T)0;
    }
}

// Elements whose width is a multiple of sizeof(T): one output a thread, copied in units of T
// (16-byte values: one 16-byte load and store).
template <typename T, typename I>
__device__ __forceinline__ void gather_units(const u8 *src, u8 *dst, const I *idx, u64 n, u64 total, u32 width, u32 *error) {
    const u32 units = width / sizeof(T);
    const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += stride) {
        I g = idx[i];
        if (gather_in_range(g, total, error)) {
            gather_copy<T>(src, dst, g, i, units);
        } else {
            for (u32 u = 0; u < units; ++u) ((T *)dst)[i * units + u] = (T)0;
        }
    }
}

struct alignas(16) gather_u128 {
    u64 lo, hi;
    __device__ gather_u128() {}
    __device__ gather_u128(u64 v) : lo(v), hi(0) {}
};

template <typename I>
__device__ __forceinline__ void gather_values(const u8 *src, u8 *dst, const I *idx, u64 n, u64 total, u32 width, u32 *error) {
    if (width == 1) {
        gather_packed<u8, u32, 4>(src, dst, idx, n, total, error);
    } else if (width == 2) {
        gather_packed<u16, u64, 4>(src, dst, idx, n, total, error);
    } else if (width % 16 == 0) {
        gather_units<gather_u128>(src, dst, idx, n, total, width, error);
    } else if (width % 8 == 0) {
        gather_units<u64>(src, dst, idx, n, total, width, error);
    } else if (width % 4 == 0) {
        gather_units<u32>(src, dst, idx, n, total, width, error);
    } else if (width % 2 == 0) {
        gather_units<u16>(src, dst, idx, n, total, width, error);
    } else {
        gather_units<u8>(src, dst, idx, n, total, width, error);
    }
}

// The validity of global row `g` (see the table above); false (with the error flagged) past
// the input.
// The run holding global row g < total: the last run whose first row is at or before g
// (empty runs share their start with the next run; the later one is the one holding g).
__device__ __forceinline__ u32 gather_run_of(const u64 *runs, u32 nruns, u64 g) {
    u32 lo = 0, hi = nruns - 1;
    while (lo < hi) {
        u32 mid = (lo + hi + 1) / 2;
        if (runs[mid] <= g) lo = mid; else hi = mid - 1;
    }
    return lo;
}

template <typename I>
__device__ __forceinline__ u32 gather_valid(const u8 *bits, const u64 *runs, u32 nruns, I g, u64 total, u32 *error) {
    if (!gather_in_range(g, total, error)) return 0;
    const u32 lo = gather_run_of(runs, nruns, (u64)g);
    const u64 base = runs[nruns + 1 + lo];
    if (base == ~0ull) return 1;
    const u64 pos = base + ((u64)g - runs[lo]);
    return (bits[pos >> 3] >> (pos & 7)) & 1u;
}

// One warp builds 32 output words at a time: for word w, lane l looks up output 32 w + l,
// and the warp's ballot is the word (bit l = lane l: Arrow's order); lane j keeps word j of
// the 32 and the warp stores them with one coalesced write.
template <typename I>
__device__ __forceinline__ void gather_validity(const u8 *bits, const u64 *runs, u32 nruns, u32 *out, const I *idx, u64 n, u64 total,
                                                u32 *error) {
    const u32 lane = threadIdx.x & 31;
    const u64 warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) >> 5;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    const u64 words = (n + 31) / 32;
    const u64 chunks = (words + 31) / 32;
    for (u64 c = warp; c < chunks; c += warps) {
        u32 mine = 0;
        for (u32 j = 0; j < 32; ++j) {
            const u64 w = c * 32 + j;
            if (w >= words) break; // the same for every lane
            const u64 i = w * 32 + lane;
            const u32 bit = i < n ? gather_valid(bits, runs, nruns, idx[i], total, error) : 0u;
            const u32 word = __ballot_sync(0xffffffffu, bit);
            if (lane == j) mine = word;
        }
        const u64 w = c * 32 + lane;
        if (w < words) out[w] = mine;
    }
}

// The gathered views at `views` (n of them, 16 bytes each: u32 length, then 12 inline bytes
// or a u32 prefix, a u32 buffer index and a u32 offset) made to name the output's buffers:
// a view longer than 12 bytes gets its run's first buffer number (table above) added to its
// buffer index. Indices past the input were flagged by gather_values (their views are
// zero: length 0, inline) and are skipped.
template <typename I>
__device__ __forceinline__ void rebase_views(u32 *views, const u64 *runs, u32 nruns, const I *idx, u64 n, u64 total) {
    const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = tid; i < n; i += stride) {
        const u64 g = (u64)idx[i];
        if (views[i * 4] <= 12u || g >= total) continue;
        views[i * 4 + 2] += (u32)runs[nruns + 1 + gather_run_of(runs, nruns, g)];
    }
}

extern "C" __global__ void gather_values_i32(const u8 *src, u8 *dst, const u32 *idx, u64 n, u64 total, u32 width, u32 *error) {
    gather_values(src, dst, idx, n, total, width, error);
}

extern "C" __global__ void gather_values_i64(const u8 *src, u8 *dst, const u64 *idx, u64 n, u64 total, u32 width, u32 *error) {
    gather_values(src, dst, idx, n, total, width, error);
}

extern "C" __global__ void gather_validity_i32(const u8 *bits, const u64 *runs, u32 nruns, u32 *out, const u32 *idx, u64 n, u64 total, u32 *error) {
    gather_validity(bits, runs, nruns, out, idx, n, total, error);
}

extern "C" __global__ void gather_validity_i64(const u8 *bits, const u64 *runs, u32 nruns, u32 *out, const u64 *idx, u64 n, u64 total, u32 *error) {
    gather_validity(bits, runs, nruns, out, idx, n, total, error);
}

extern "C" __global__ void gather_rebase_views_i32(u32 *views, const u64 *runs, u32 nruns, const u32 *idx, u64 n, u64 total) {
    rebase_views(views, runs, nruns, idx, n, total);
}

extern "C" __global__ void gather_rebase_views_i64(u32 *views, const u64 *runs, u32 nruns, const u64 *idx, u64 n, u64 total) {
    rebase_views(views, runs, nruns, idx, n, total);
}

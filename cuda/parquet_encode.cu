// parquet_encode.cu: Parquet data pages encoded on the device (issue 69, stage 4): flat
// fixed-width columns (INT32, INT64, FLOAT, DOUBLE; OPTIONAL or REQUIRED) from their
// device-resident values and validity bitmaps to data page v1 bodies (PLAIN values,
// RLE / bit-packed definition levels) and each page's statistics. The host
// (src/engine/gpu/parquet_encode.rs) uploads one job planned by src/engine/encode_job.rs
// (its module doc is the spec: the records, the body, the statistics' rules); the CPU
// reference of these kernels, the same three steps over the same records, is
// src/parquet/device/encode_cpu.rs. The host writes the page headers.
//
// Three launches on one stream:
//   parquet_encode_summarize  a block a tile of ENCODE_TILE rows: its non-null count, and
//                             its min and max (NaN skipped, zeros signed as written);
//   parquet_encode_scan       a thread a page: its tiles' places among its values (an
//                             exclusive scan of their counts, in order), its statistics
//                             (its tiles' folded in order), its levels' encoding, and the
//                             bytes of its body before the level bits;
//   parquet_encode_write      a block a tile: its level bits (a bit-packed page: a tile
//                             starts on a byte of its page's bits, each byte written by one
//                             thread) and its non-null values at their places (ranks in
//                             the tile by warp ballots, then the warps' counts).
// Every byte of a body is written by exactly one thread. The kernels trust the records
// (EncodeJob::check runs on the host before the launch).
//
// Compiled with common.cuh (u32, u64) into the decode family's module (manifest.rs,
// Family::Decode); the launch's block size is THREADS (the kernels trap on another).

typedef unsigned char u8;  // as parquet_decode.cu (the same typedef again is allowed)

#define ENCODE_TILE 1024u
#define KIND_INT32 0u
#define KIND_INT64 1u
#define KIND_FLOAT 2u
#define KIND_DOUBLE 3u
#define COLUMN_NULLABLE 1u
#define HAS_MIN_MAX 1u
#define PAGE_BIT_PACKED 2u
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 32 of them");
static_assert(ENCODE_TILE % 8 == 0, "a tile's level bits start on a byte");

// The host's EncodeColumnArg, EncodePageArg, EncodeTileArg (src/engine/encode_job.rs,
// which asserts the same sizes).
struct EncodeColumn {
    u64 values;    // rows values of the kind's width, little-endian, row 0 first
    u64 validity;  // bit r of byte r / 8 for row r; 0: every row valid
    u64 rows;
    u32 kind;      // KIND_*
    u32 flags;     // COLUMN_NULLABLE
};
struct EncodePage {
    u64 out;  // the slot's offset in the output
    u64 first_row;
    u32 column, rows, first_tile, tiles, slot_len;
    // Written by the scan.
    u32 non_null, body_len, levels_at, values_at, flags;
    u64 min, max;
};
struct EncodeTile {
    u32 page, first, rows;
    // Written by the summary (non_null, flags, min, max) and the scan (at).
    u32 non_null, at, flags;
    u64 min, max;
};
static_assert(sizeof(EncodeColumn) == 32, "EncodeColumn is 32 bytes (engine/encode_job.rs)");
static_assert(sizeof(EncodePage) == 72, "EncodePage is 72 bytes (engine/encode_job.rs)");
static_assert(sizeof(EncodeTile) == 40, "EncodeTile is 40 bytes (engine/encode_job.rs)");

__device__ __forceinline__ u32 enc_width(u32 kind) { return (kind == KIND_INT32 || kind == KIND_FLOAT) ? 4u : 8u; }

// a > b for PLAIN bits of `kind`, as parquet-rs compares them: signed integers, floats by
// IEEE `>` (so -0.0 and 0.0 tie; NaN never reaches here).
__device__ __forceinline__ bool enc_greater(u32 kind, u64 a, u64 b) {
    switch (kind) {
        case KIND_INT32: return (int)(u32)a > (int)(u32)b;
        case KIND_INT64: return (long long)a > (long long)b;
        case KIND_FLOAT: return __uint_as_float((u32)a) > __uint_as_float((u32)b);
        default: return __longlong_as_double((long long)a) > __longlong_as_double((long long)b);
    }
}

__device__ __forceinline__ bool enc_is_nan(u32 kind, u64 v) {
    if (kind == KIND_FLOAT) return (v & 0x7fffffffull) > 0x7f800000ull;
    if (kind == KIND_DOUBLE) return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    return false;
}

// A float zero as written: -0.0 for a min (`negative`), +0.0 for a max.
__device__ __forceinline__ u64 enc_signed_zero(u32 kind, u64 v, bool negative) {
    if (kind == KIND_FLOAT && (v & 0x7fffffffull) == 0) return negative ? 0x80000000ull : 0ull;
    if (kind == KIND_DOUBLE && (v & 0x7fffffffffffffffull) == 0) return negative ? 0x8000000000000000ull : 0ull;
    return v;
}

__device__ __forceinline__ bool enc_valid(const EncodeColumn &c, u64 row) {
    return c.validity == 0 || ((((const u8 *)c.validity)[row >> 3] >> (row & 7)) & 1) != 0;
}

__device__ __forceinline__ u64 enc_load(const EncodeColumn &c, u64 row) {
    return c.kind == KIND_INT32 || c.kind == KIND_FLOAT ? (u64)((const u32 *)c.values)[row] : ((const u64 *)c.values)[row];
}

// Folds (has_b, min_b, max_b) into (has, min, max): the smaller min, the larger max (the
// earlier on a tie).
__device__ __forceinline__ void enc_fold(u32 kind, bool &has, u64 &mn, u64 &mx, bool has_b, u64 mn_b, u64 mx_b) {
    if (!has_b) return;
    if (!has || enc_greater(kind, mn, mn_b)) mn = mn_b;
    if (!has || enc_greater(kind, mx_b, mx)) mx = mx_b;
    has = true;
}

extern "C" __global__ void parquet_encode_summarize(const void *columns, void *pages, u32 npages, void *tiles, u32 ntiles, u8 *out) {
    __shared__ u32 w_count[32];
    __shared__ u32 w_has[32];
    __shared__ u64 w_min[32], w_max[32];
    if (blockDim.x != THREADS) __trap();
    const u32 ti = blockIdx.x;
    if (ti >= ntiles) return;
    EncodeTile *T = (EncodeTile *)tiles + ti;
    const EncodePage P = ((const EncodePage *)pages)[T->page];
    const EncodeColumn C = ((const EncodeColumn *)columns)[P.column];
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const u64 row0 = P.first_row + T->first;
    u32 count = 0;
    bool has = false;
    u64 mn = 0, mx = 0;
    for (u32 i = t; i < T->rows; i += THREADS) {
        if (!enc_valid(C, row0 + i)) continue;
        ++count;
        const u64 v = enc_load(C, row0 + i);
        if (!enc_is_nan(C.kind, v)) enc_fold(C.kind, has, mn, mx, true, v, v);
    }
    for (u32 o = 16; o > 0; o >>= 1) {
        count += __shfl_xor_sync(0xffffffffu, count, o);
        const bool has_b = __shfl_xor_sync(0xffffffffu, (u32)has, o) != 0;
        const u64 mn_b = __shfl_xor_sync(0xffffffffu, mn, o), mx_b = __shfl_xor_sync(0xffffffffu, mx, o);
        enc_fold(C.kind, has, mn, mx, has_b, mn_b, mx_b);
    }
    if (lane == 0) {
        w_count[warp] = count;
        w_has[warp] = has;
        w_min[warp] = mn;
        w_max[warp] = mx;
    }
    __syncthreads();
    if (t == 0) {
        for (u32 w = 1; w < THREADS / 32; ++w) {
            count += w_count[w];
            enc_fold(C.kind, has, mn, mx, w_has[w] != 0, w_min[w], w_max[w]);
        }
        T->non_null = count;
        T->flags = has ? HAS_MIN_MAX : 0u;
        T->min = has ? enc_signed_zero(C.kind, mn, true) : 0;
        T->max = has ? enc_signed_zero(C.kind, mx, false) : 0;
    }
}

extern "C" __global__ void parquet_encode_scan(const void *columns, void *pages, u32 npages, void *tiles, u32 ntiles, u8 *out) {
    if (blockDim.x != THREADS) __trap();
    const u32 pi = blockIdx.x * THREADS + threadIdx.x;
    if (pi >= npages) return;
    EncodePage *P = (EncodePage *)pages + pi;
    const EncodeColumn C = ((const EncodeColumn *)columns)[P->column];
    EncodeTile *T = (EncodeTile *)tiles + P->first_tile;
    u32 at = 0;
    bool has = false;
    u64 mn = 0, mx = 0;
    for (u32 k = 0; k < P->tiles; ++k) {
        T[k].at = at;
        at += T[k].non_null;
        enc_fold(C.kind, has, mn, mx, (T[k].flags & HAS_MIN_MAX) != 0, T[k].min, T[k].max);
    }
    const u32 rows = P->rows, nulls = rows - at;
    u8 *body = out + P->out;
    u32 levels_at = 0, values_at = 0, flags = has ? HAS_MIN_MAX : 0u;
    if (C.flags & COLUMN_NULLABLE) {
        // One RLE run of the page's one level, or one bit-packed run of ceil(rows / 8)
        // groups of 8 (the bits follow, from parquet_encode_write); the run's header is
        // a ULEB128 varint after the 4-byte length.
        const bool packed = nulls != 0 && nulls != rows;
        u64 header = packed ? ((u64)((rows + 7) / 8) << 1) | 1 : (u64)rows << 1;
        u32 len = 4;
        do {
            const u8 b = (u8)(header & 0x7f);
            header >>= 7;
            body[len++] = header ? (u8)(b | 0x80) : b;
        } while (header);
        if (packed) {
            levels_at = len;
            len += (rows + 7) / 8;
            flags |= PAGE_BIT_PACKED;
        } else {
            body[len++] = nulls == 0 ? 1 : 0;
        }
        const u32 levels_len = len - 4;
        body[0] = (u8)levels_len;
        body[1] = (u8)(levels_len >> 8);
        body[2] = (u8)(levels_len >> 16);
        body[3] = (u8)(levels_len >> 24);
        values_at = len;
    }
    P->non_null = at;
    P->levels_at = levels_at;
    P->values_at = values_at;
    P->body_len = values_at + at * enc_width(C.kind);
    P->flags = flags;
    P->min = has ? enc_signed_zero(C.kind, mn, true) : 0;
    P->max = has ? enc_signed_zero(C.kind, mx, false) : 0;
}

extern "C" __global__ void parquet_encode_write(const void *columns, void *pages, u32 npages, void *tiles, u32 ntiles, u8 *out) {
    __shared__ u32 warp_count[32];
    __shared__ u32 round_count;
    if (blockDim.x != THREADS) __trap();
    const u32 ti = blockIdx.x;
    if (ti >= ntiles) return;
    const EncodeTile T = ((const EncodeTile *)tiles)[ti];
    const EncodePage P = ((const EncodePage *)pages)[T.page];
    const EncodeColumn C = ((const EncodeColumn *)columns)[P.column];
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const u64 row0 = P.first_row + T.first;
    u8 *body = out + P.out;
    if (P.flags & PAGE_BIT_PACKED) {
        // Byte j of the tile's bits: rows 8j..8j+7 of the tile, the first in bit 0; bits
        // past the page's rows stay 0 (the last group's padding).
        u8 *bits = body + P.levels_at + T.first / 8;
        for (u32 j = t; j < (T.rows + 7) / 8; j += THREADS) {
            u32 b = 0;
            for (u32 k = 0; k < 8 && 8 * j + k < T.rows; ++k) b |= (u32)enc_valid(C, row0 + 8 * j + k) << k;
            bits[j] = (u8)b;
        }
    }
    const u32 w = enc_width(C.kind);
    u8 *values = body + P.values_at;
    u32 base = T.at;  // values of the page before this round's
    for (u32 r = 0; r < T.rows; r += THREADS) {
        const u32 i = r + t;
        const bool d = i < T.rows && enc_valid(C, row0 + i);
        const u32 ballot = __ballot_sync(0xffffffffu, d);
        const u32 before = __popc(ballot & ((1u << lane) - 1));
        if (lane == 0) warp_count[warp] = __popc(ballot);
        __syncthreads();
        if (t == 0) {
            u32 sum = 0;
            for (u32 k = 0; k < THREADS / 32; ++k) {
                const u32 c = warp_count[k];
                warp_count[k] = sum;
                sum += c;
            }
            round_count = sum;
        }
        __syncthreads();
        if (d) {
            // The body's values are not aligned (they follow the levels): byte stores.
            u64 v = enc_load(C, row0 + i);
            u8 *dst = values + (u64)(base + warp_count[warp] + before) * w;
            for (u32 k = 0; k < w; ++k, v >>= 8) dst[k] = (u8)v;
        }
        base += round_count;
        __syncthreads();
    }
}

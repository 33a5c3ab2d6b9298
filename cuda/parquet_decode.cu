// parquet_decode.cu: Parquet data pages decoded on the device (issue 69, stage 2), block
// level: one thread block per data page. The host (src/engine/gpu/parquet_decode.rs) lays
// out one DecodePage per data page from the CPU's decode plan
// (src/parquet/device/decode_plan.rs); the pages' bodies are stage 1's decompressed buffer.
// The CPU reference of this kernel is src/parquet/device/decode_cpu.rs (same algorithm,
// same fault codes: src/parquet/device/decode_fault.rs).
//
// A page of n values (nulls included) is decoded in tiles of THREADS values:
//   1. thread 0 walks the run headers of the definition levels (the RLE / bit-packed
//      hybrid, bit width 1: serial by nature) until the window of runs in shared memory
//      covers the tile; every thread then reads its level from its run (a binary search of
//      the window);
//   2. a block scan (warp ballots, then the warps' counts) gives each defined value its
//      rank among the page's defined values;
//   3. dictionary pages: thread 0 walks the index stream's run headers until its window
//      covers the tile's ranks; each defined thread reads its index from its run. PLAIN
//      pages: the value of rank k is the k-th stored value;
//   4. each defined thread writes its value at row first_row + i (widened to a Decimal128
//      where the page says so) and sets its validity bit (atomicOr: pages share bitmap
//      words). Nulls are left as the host's zeroed buffers have them.
// A window holds at most THREADS + 1 runs: runs ending before the tile are dropped, and
// each run read covers at least one value of the tile.
//
// Every read is checked against the page's bytes (and the page's bytes against the input);
// a malformed stream sets the page's error word (the first fault wins) and stops the page.
// Threads leave a tile together: a fault is seen by all through __syncthreads_or.
//
// Compiled with common.cuh (u32, u64) in its own module family (manifest.rs,
// Family::Decode); the launch's block size is THREADS (the kernel checks it).

typedef unsigned char u8;

#define DECODE_WIN (THREADS + 1)
static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 32 of them");

#define FAULT_LEVELS_LENGTH 1u
#define FAULT_LEVELS_END 2u
#define FAULT_LEVEL_VALUE 3u
#define FAULT_RUN_HEADER 4u
#define FAULT_VALUES_END 5u
#define FAULT_BIT_WIDTH 6u
#define FAULT_INDICES_END 7u
#define FAULT_INDEX_RANGE 8u
#define FAULT_NULL_COUNT 9u
#define FAULT_LAUNCH 10u

#define LEVELS_NONE 0u
#define LEVELS_PREFIXED 1u
#define LEVELS_STATED 2u
#define LEVELS_MASK 3u
#define FLAG_DICTIONARY 4u
#define FLAG_SIGN_EXTEND 8u
#define NULLS_UNCHECKED 0xffffffffu

// One data page's work; the host's DecodePageArg has this layout (asserted on both sides).
struct DecodePage {
    u64 body;         // offset of the page's decompressed body in the input
    u64 dict;         // offset of the chunk's dictionary body (when FLAG_DICTIONARY)
    u64 out_values;   // device address of the chunk's values (row 0)
    u64 out_valid;    // device address of the chunk's validity words, 0 if not nullable
    u64 first_row;    // the page's first row in the chunk
    u64 chunk_rows;   // rows of the chunk (the outputs' size)
    u32 body_len;
    u32 dict_len;
    u32 dict_entries;
    u32 num_values;
    u32 levels_at;    // LEVELS_STATED: the levels' place and length in the body
    u32 levels_len;
    u32 values_at;    // where the values start (LEVELS_PREFIXED: found from the prefix)
    u32 nulls;        // a v2 page's null count, or NULLS_UNCHECKED
    u32 flags;        // LEVELS_*, FLAG_*
    u32 widths;       // stored bytes a value (bits 0-7), output bytes a value (bits 8-15)
};
static_assert(sizeof(DecodePage) == 88, "DecodePage must have the host's layout");

struct HRun {
    u64 start;   // index of its first value
    u64 count;
    u32 value;   // an RLE run's value
    u32 rle;
    u32 at;      // a bit-packed run's first byte in the stream, and its bytes present
    u32 bytes;
};

struct HStream {
    const u8 *s;
    u32 len;
    u32 pos;
    u64 next;    // the value index the next run starts at
    u32 bw;
    u32 nruns;
};

// Thread 0: drops the runs that end at or before `from` and reads run headers until the
// window covers [from, to). Returns a fault, or 0.
__device__ u32 hybrid_cover(HStream &st, HRun *win, u64 from, u64 to, u32 max_value, u32 end_fault, u32 value_fault) {
    u32 keep = 0;
    for (u32 r = 0; r < st.nruns; ++r) {
        if (win[r].start + win[r].count > from) win[keep++] = win[r];
    }
    st.nruns = keep;
    while (st.nruns == 0 || win[st.nruns - 1].start + win[st.nruns - 1].count < to) {
        if (st.pos >= st.len) return end_fault;
        u64 h = 0;
        u32 shift = 0;
        for (;;) {
            if (st.pos >= st.len) return end_fault;
            u8 b = st.s[st.pos++];
            h |= (u64)(b & 0x7f) << shift;
            if (!(b & 0x80)) break;
            shift += 7;
            if (shift >= 35) return FAULT_RUN_HEADER;
        }
        if (h > 0xffffffffull) return FAULT_RUN_HEADER;
        HRun run;
        run.start = st.next;
        if ((h & 1) == 0) {
            u32 nb = (st.bw + 7) / 8;
            if (st.len - st.pos < nb) return end_fault;
            u32 v = 0;
            for (u32 k = 0; k < nb; ++k) v |= (u32)st.s[st.pos + k] << (8 * k);
            st.pos += nb;
            if (v > max_value) return value_fault;
            if ((h >> 1) == 0) continue;
            run.count = h >> 1;
            run.value = v;
            run.rle = 1;
            run.at = 0;
            run.bytes = 0;
        } else {
            u64 groups = h >> 1;
            u64 want = groups * st.bw;
            u64 left = st.len - st.pos;
            u32 bytes = (u32)(want < left ? want : left);
            run.at = st.pos;
            st.pos += bytes;
            if (groups == 0) continue;
            run.count = groups * 8;
            run.value = 0;
            run.rle = 0;
            run.bytes = bytes;
        }
        if (st.nruns == DECODE_WIN) return FAULT_LAUNCH;  // cannot happen: see the header
        st.next += run.count;
        win[st.nruns++] = run;
    }
    return 0;
}

// Value i of a stream from the window that covers it; false where its bits are missing.
__device__ bool hybrid_value(const u8 *s, const HRun *win, u32 nruns, u64 i, u32 bw, u32 *out) {
    u32 lo = 0, hi = nruns;  // the last run whose start <= i
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (win[mid].start <= i) lo = mid; else hi = mid;
    }
    const HRun &run = win[lo];
    if (nruns == 0 || i < run.start || i >= run.start + run.count) return false;
    if (run.rle) { *out = run.value; return true; }
    if (bw == 0) { *out = 0; return true; }
    u64 bit = (i - run.start) * bw;
    u64 last = bit + bw;
    if ((last + 7) / 8 > run.bytes) return false;
    u32 first = (u32)(bit / 8);
    u32 n = (u32)((last + 7) / 8) - first;
    u64 w = 0;
    for (u32 k = 0; k < n && k < 5; ++k) w |= (u64)s[run.at + first + k] << (8 * k);
    *out = (u32)((w >> (bit % 8)) & ((1ull << bw) - 1));
    return true;
}

// A stored value (pw bytes, any alignment) to its output slot (ow bytes, aligned).
__device__ void put_value(const u8 *src, u32 pw, u32 ow, u8 *dst) {
    u64 v = 0;
    for (u32 k = 0; k < pw; ++k) v |= (u64)src[k] << (8 * k);
    if (ow == 4) {
        *(u32 *)dst = (u32)v;
    } else if (ow == 8) {
        *(u64 *)dst = v;
    } else {
        u64 lo = pw == 4 ? (u64)(long long)(int)(u32)v : v;
        ((u64 *)dst)[0] = lo;
        ((u64 *)dst)[1] = (long long)lo < 0 ? ~0ull : 0ull;
    }
}

extern "C" __global__ void parquet_decode_pages(const u8 *input, u64 input_len, const void *pages, u32 npages, u32 *errors) {
    __shared__ HRun lv_win[DECODE_WIN];
    __shared__ HRun ix_win[DECODE_WIN];
    __shared__ HStream lv, ix;
    __shared__ u32 fault;
    __shared__ u32 warp_count[32];
    __shared__ u64 rank_base;
    __shared__ u32 tile_defined;
    __shared__ const u8 *stored;
    __shared__ u32 stored_len;
    const u32 pi = blockIdx.x;
    if (pi >= npages) return;
    const DecodePage P = ((const DecodePage *)pages)[pi];
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const u32 levels = P.flags & LEVELS_MASK;
    const bool dictionary = (P.flags & FLAG_DICTIONARY) != 0;
    const u32 pw = P.widths & 0xff, ow = (P.widths >> 8) & 0xff;
    const u8 *body = input + P.body;
    const u8 *dict = input + P.dict;
    const u64 n = P.num_values;

    u32 bad = 0;
    if (t == 0) {
        fault = 0;
        rank_base = 0;
        lv.nruns = 0;
        ix.nruns = 0;
        bool widths_ok = (pw == 4 && (ow == 4 || ow == 16)) || (pw == 8 && (ow == 8 || ow == 16));
        widths_ok = widths_ok && ((ow == 16) == ((P.flags & FLAG_SIGN_EXTEND) != 0));
        if (blockDim.x != THREADS || !widths_ok || levels > LEVELS_STATED || P.body > input_len ||
            P.body_len > input_len - P.body || P.first_row > P.chunk_rows || n > P.chunk_rows - P.first_row ||
            (dictionary && (P.dict > input_len || P.dict_len > input_len - P.dict ||
                            (u64)P.dict_entries * pw > P.dict_len))) {
            bad = FAULT_LAUNCH;
        } else {
            u32 values_at = P.values_at;
            lv.s = body;
            lv.len = 0;
            lv.pos = 0;
            lv.next = 0;
            lv.bw = 1;
            if (levels == LEVELS_PREFIXED) {
                if (P.body_len < 4) {
                    bad = FAULT_LEVELS_LENGTH;
                } else {
                    u32 l = body[0] | (u32)body[1] << 8 | (u32)body[2] << 16 | (u32)body[3] << 24;
                    if (l > P.body_len - 4) bad = FAULT_LEVELS_LENGTH;
                    lv.s = body + 4;
                    lv.len = l;
                    values_at = 4 + l;
                }
            } else if (levels == LEVELS_STATED) {
                if ((u64)P.levels_at + P.levels_len > P.body_len) bad = FAULT_LEVELS_LENGTH;
                lv.s = body + P.levels_at;
                lv.len = P.levels_len;
            }
            if (!bad && values_at > P.body_len) bad = FAULT_VALUES_END;
            if (!bad) {
                stored = body + values_at;
                stored_len = P.body_len - values_at;
                ix.pos = 0;
                ix.next = 0;
                ix.bw = 0;
                if (dictionary) {
                    if (stored_len == 0 || stored[0] > 32) {
                        bad = FAULT_BIT_WIDTH;
                    } else {
                        ix.bw = stored[0];
                        ix.s = stored + 1;
                        ix.len = stored_len - 1;
                    }
                }
            }
        }
        if (bad) fault = bad;
    }
    if (!__syncthreads_or(bad)) {
        for (u64 from = 0; from < n; from += THREADS) {
            const u64 to = from + THREADS < n ? from + THREADS : n;
            const u64 i = from + t;
            // 1. The tile's definition levels.
            if (t == 0 && levels != LEVELS_NONE) {
                bad = hybrid_cover(lv, lv_win, from, to, 1, FAULT_LEVELS_END, FAULT_LEVEL_VALUE);
                if (bad) atomicCAS(&fault, 0u, bad);
            }
            if (__syncthreads_or(bad)) break;
            u32 d = 0;
            if (i < to) {
                if (levels == LEVELS_NONE) {
                    d = 1;
                } else if (!hybrid_value(lv.s, lv_win, lv.nruns, i, 1, &d)) {
                    bad = FAULT_LEVELS_END;
                    atomicCAS(&fault, 0u, bad);
                }
            }
            // 2. Ranks: ballots in each warp, then the warps' counts.
            const u32 ballot = __ballot_sync(0xffffffffu, d != 0);
            const u32 before = __popc(ballot & ((1u << lane) - 1));
            if (lane == 0) warp_count[warp] = __popc(ballot);
            if (__syncthreads_or(bad)) break;
            if (t == 0) {
                u32 sum = 0;
                for (u32 w = 0; w < THREADS / 32; ++w) {
                    u32 c = warp_count[w];
                    warp_count[w] = sum;
                    sum += c;
                }
                tile_defined = sum;
                // 3. The tile's dictionary indices.
                if (dictionary && sum > 0) {
                    bad = hybrid_cover(ix, ix_win, rank_base, rank_base + sum, 0xffffffffu, FAULT_INDICES_END, FAULT_INDEX_RANGE);
                    if (bad) atomicCAS(&fault, 0u, bad);
                }
            }
            if (__syncthreads_or(bad)) break;
            // 4. Each defined value to its row.
            if (d) {
                const u64 rank = rank_base + warp_count[warp] + before;
                const u8 *src = 0;
                if (!dictionary) {
                    if ((rank + 1) * pw > stored_len) bad = FAULT_VALUES_END;
                    else src = stored + rank * pw;
                } else {
                    u32 e = 0;
                    if (!hybrid_value(ix.s, ix_win, ix.nruns, rank, ix.bw, &e)) bad = FAULT_INDICES_END;
                    else if (e >= P.dict_entries) bad = FAULT_INDEX_RANGE;
                    else src = dict + (u64)e * pw;
                }
                if (bad) {
                    atomicCAS(&fault, 0u, bad);
                } else {
                    const u64 row = P.first_row + i;
                    put_value(src, pw, ow, (u8 *)P.out_values + row * ow);
                    if (P.out_valid) atomicOr((u32 *)P.out_valid + row / 32, 1u << (row % 32));
                }
            }
            if (__syncthreads_or(bad)) break;
            if (t == 0) rank_base += tile_defined;
        }
    }
    __syncthreads();
    if (t == 0) {
        u32 f = fault;
        if (!f && P.nulls != NULLS_UNCHECKED && n - rank_base != P.nulls) f = FAULT_NULL_COUNT;
        errors[pi] = f;
    }
}

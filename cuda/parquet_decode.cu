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
// BYTE_ARRAY pages (FLAG_BYTES) take the same steps, but step 4 writes each row's Slot (where
// its bytes are in the input, and their length; a null's stays zero) into the chunk's slot
// table; for a PLAIN page, thread 0 walks the tile's defined values' 4-byte length prefixes
// before step 4 (serial by nature, carried from tile to tile), for a dictionary page the
// slot is the entry's, from the dictionary's slot table that parquet_bytes_dictionary wrote
// (one block per dictionary page, thread 0 walking its prefixes). parquet_bytes_offsets (a
// block per chunk) scans the slots' lengths into the chunk's offsets and writes back its
// total; the host reads the totals, allocates the values buffer at their sum, and
// parquet_bytes_copy (a block per chunk, a thread per row) copies each value to its offset,
// checking UTF-8 for a string column. The CPU reference: decode_cpu.rs, the same steps.
//
// DELTA_BINARY_PACKED pages (FLAG_DELTA, INT32 and INT64): step 3 has thread 0 walk the
// block and miniblock headers until a window of miniblocks covers the deltas the tile's
// ranks need; step 4 reads each defined value's delta from its miniblock and a block scan of
// the terms (the first value, then the deltas), plus the tiles' before, gives its value.
//
// Every read is checked against the page's bytes (and the page's bytes against the input);
// a malformed stream sets the page's error word (the first fault wins) and stops the page.
// Threads leave a tile together: a fault is seen by all through __syncthreads_or.
//
// Compiled with common.cuh (u32, u64) in its own module family (manifest.rs,
// Family::Decode); the launch's block size is THREADS (the kernel checks it).

typedef unsigned char u8;

#define DECODE_WIN (THREADS + 1)
// A tile's deltas span at most THREADS / 32 + 1 miniblocks (of at least 32 values), plus
// the one kept: delta.rs's DELTA_WIN.
#define DELTA_WIN (THREADS / 32 + 2)
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
#define FAULT_DICTIONARY_END 11u
#define FAULT_OFFSET_OVERFLOW 12u
#define FAULT_UTF8 13u
#define FAULT_DELTA_HEADER 14u
#define FAULT_DELTA_END 15u

#define LEVELS_NONE 0u
#define LEVELS_PREFIXED 1u
#define LEVELS_STATED 2u
#define LEVELS_MASK 3u
#define FLAG_DICTIONARY 4u
#define FLAG_SIGN_EXTEND 8u
#define FLAG_BYTES 16u
#define FLAG_BIG_ENDIAN 32u
#define FLAG_DELTA 64u
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

// A byte array value: its place in the input and its length (decode_job.rs's Slot).
struct Slot {
    u64 at;
    u32 len;
    u32 pad;
};
static_assert(sizeof(Slot) == 16, "Slot must have the host's layout");

// A byte array dictionary page, walked into its slot table (decode_job.rs's BytesDictArg).
struct BytesDict {
    u64 body;      // offset of its body in the input
    u64 slots;     // device address of its slot table (entries slots)
    u32 body_len;
    u32 entries;
};
static_assert(sizeof(BytesDict) == 24, "BytesDict must have the host's layout");

// A byte array chunk: its slots scanned into offsets, its values copied (BytesChunkArg).
struct BytesChunk {
    u64 slots;         // device address: rows slots
    u64 offsets;       // device address: rows + 1 offsets of offset_width bytes
    u64 values;        // device address of its values (the copy; 0 for the scan)
    u64 rows;
    u64 total;         // its values' bytes: written by the scan, read by the copy
    u32 offset_width;  // 4 or 8
    u32 utf8;          // 1: check each value is UTF-8
};
static_assert(sizeof(BytesChunk) == 48, "BytesChunk must have the host's layout");

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

// DELTA_BINARY_PACKED (src/parquet/device/delta.rs: the same walk, the same faults): the
// header and each block's header walked by thread 0, miniblocks kept in a window that covers
// the tile's deltas, each delta read alone from its miniblock; the values are a block scan of
// the terms (the first value, then the deltas), carried from tile to tile.
struct DMini {
    u64 start;      // index of its first delta
    u64 min_delta;  // its block's minimum delta
    u32 bw;
    u32 at;         // its first byte in the stream, and its bytes present
    u32 bytes;
    u32 pad;
};

struct DStream {
    const u8 *s;
    u32 len;
    u32 pos;
    u64 per_mini, minis, total, first;
    u32 max_bits;
    u32 widths_at;  // the current block's bit widths
    u64 min_delta;
    u64 left;       // miniblocks left in the current block
    u64 next;       // the first delta index of the next miniblock
    u32 nmini;
};

// A ULEB128 of at most 10 bytes at *pos; false where it is cut or longer.
__device__ bool uleb64(const u8 *s, u32 len, u32 *pos, u64 *out) {
    u64 v = 0;
    for (u32 k = 0; k < 10; ++k) {
        if (*pos >= len) return false;
        u8 b = s[(*pos)++];
        v |= (u64)(b & 0x7f) << (7 * k);
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

__device__ u64 zigzag64(u64 v) { return (v >> 1) ^ (0ull - (v & 1)); }

// Thread 0: a page's DELTA_BINARY_PACKED header. Returns a fault, or 0.
__device__ u32 delta_header(DStream &d, const u8 *s, u32 len, u32 max_bits) {
    d.s = s;
    d.len = len;
    d.pos = 0;
    u64 block, minis, total, first;
    if (!uleb64(s, len, &d.pos, &block) || !uleb64(s, len, &d.pos, &minis) || !uleb64(s, len, &d.pos, &total) ||
        !uleb64(s, len, &d.pos, &first))
        return FAULT_DELTA_HEADER;
    // A block of at most 2^32 - 1 values keeps every size below in 64 bits.
    if (block == 0 || block > 0xffffffffull || block % 128 != 0 || minis == 0 || block % minis != 0 || (block / minis) % 32 != 0)
        return FAULT_DELTA_HEADER;
    d.per_mini = block / minis;
    d.minis = minis;
    d.total = total;
    d.first = zigzag64(first);
    d.max_bits = max_bits;
    d.widths_at = 0;
    d.min_delta = 0;
    d.left = 0;
    d.next = 0;
    d.nmini = 0;
    return 0;
}

// Thread 0: the next miniblock (a block's header read first where one starts).
__device__ u32 delta_next_mini(DStream &d, DMini &m) {
    if (d.left == 0) {
        u32 pos = d.pos;
        u64 min;
        if (!uleb64(d.s, d.len, &pos, &min)) return FAULT_DELTA_END;
        if ((u64)(d.len - pos) <= d.minis - 1) return FAULT_DELTA_END;
        d.min_delta = zigzag64(min);
        d.widths_at = pos;
        d.pos = pos + (u32)d.minis;
        d.left = d.minis;
    }
    const u32 bw = d.s[d.widths_at + (u32)(d.minis - d.left)];
    if (bw > d.max_bits) return FAULT_DELTA_HEADER;
    const u64 want = d.per_mini * bw / 8;
    const u64 left = d.len - d.pos;
    m.start = d.next;
    m.min_delta = d.min_delta;
    m.bw = bw;
    m.at = d.pos;
    m.bytes = (u32)(want < left ? want : left);
    m.pad = 0;
    d.pos += m.bytes;
    d.left -= 1;
    d.next += d.per_mini;
    return 0;
}

// Thread 0: drops the miniblocks that end at or before `from` and reads more until the
// window covers deltas [from, to). Returns a fault, or 0.
__device__ u32 delta_cover(DStream &d, DMini *win, u64 from, u64 to) {
    if (to > (d.total > 0 ? d.total - 1 : 0)) return FAULT_DELTA_END;
    u32 keep = 0;
    for (u32 r = 0; r < d.nmini; ++r) {
        if (win[r].start + d.per_mini > from) win[keep++] = win[r];
    }
    d.nmini = keep;
    while (d.nmini == 0 || win[d.nmini - 1].start + d.per_mini < to) {
        DMini m;
        u32 f = delta_next_mini(d, m);
        if (f) return f;
        if (d.nmini == DELTA_WIN) return FAULT_LAUNCH;  // cannot happen: see DELTA_WIN
        win[d.nmini++] = m;
    }
    return 0;
}

// The w-bit value (w <= 64) at bit `bit` of s[0..len), least significant bit first; false
// where its bits run past the end.
__device__ bool unpack64(const u8 *s, u32 len, u64 bit, u32 w, u64 *out) {
    if ((bit + w + 7) / 8 > len) return false;
    u64 v = 0;
    u32 k = 0;
    while (k < w) {
        const u64 at = bit + k;
        const u32 shift = (u32)(at % 8);
        const u32 take = (8 - shift) < (w - k) ? (8 - shift) : (w - k);
        const u64 part = ((u64)s[at / 8] >> shift) & ((1ull << take) - 1);
        v |= part << k;
        k += take;
    }
    *out = v;
    return true;
}

// Delta i (its miniblock's minimum added, wrapping) from the window; false where no
// miniblock holds it or its bits are missing.
__device__ bool delta_value(const DStream &d, const DMini *win, u64 i, u64 *out) {
    u32 lo = 0, hi = d.nmini;  // the last miniblock whose start <= i
    while (hi - lo > 1) {
        u32 mid = (lo + hi) / 2;
        if (win[mid].start <= i) lo = mid; else hi = mid;
    }
    if (d.nmini == 0) return false;
    const DMini &m = win[lo];
    if (i < m.start || i >= m.start + d.per_mini) return false;
    u64 bits;
    if (!unpack64(d.s + m.at, m.bytes, (i - m.start) * m.bw, m.bw, &bits)) return false;
    *out = m.min_delta + bits;
    return true;
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

// A stored value (pw bytes, any alignment) to its output slot (ow bytes, aligned where ow is
// 4, 8 or 16): copied, sign-extended (FLAG_SIGN_EXTEND: a 4- or 8-byte little-endian
// integer to 16 bytes) or, FLAG_BIG_ENDIAN, a FIXED_LEN_BYTE_ARRAY's big-endian integer of at
// most 16 bytes to a 16-byte little-endian one (Decimal128).
__device__ void put_value(const u8 *src, u32 pw, u32 ow, u32 flags, u8 *dst) {
    if (flags & FLAG_BIG_ENDIAN) {
        const u8 sign = (src[0] & 0x80) ? 0xff : 0;
        for (u32 k = 0; k < 16; ++k) dst[k] = k < pw ? src[pw - 1 - k] : sign;
        return;
    }
    if (pw != 4 && pw != 8) {  // a FIXED_LEN_BYTE_ARRAY copied (pw == ow)
        for (u32 k = 0; k < pw; ++k) dst[k] = src[k];
        return;
    }
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
    __shared__ u32 stored_at;           // where the values start in the body
    __shared__ u32 plain_pos;           // a byte array PLAIN page: the next length prefix
    __shared__ u32 pl_at[THREADS];      // ... and the tile's values (rank in the tile)
    __shared__ u32 pl_len[THREADS];
    __shared__ DStream dl;              // a DELTA_BINARY_PACKED page's stream
    __shared__ DMini dwin[DELTA_WIN];   // ... its window of miniblocks
    __shared__ u64 dsum[32];            // ... the warps' sums of the tile's terms
    __shared__ u64 dtile, carry;        // ... the tile's sum, the tiles' before
    const u32 pi = blockIdx.x;
    if (pi >= npages) return;
    const DecodePage P = ((const DecodePage *)pages)[pi];
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const u32 levels = P.flags & LEVELS_MASK;
    const bool dictionary = (P.flags & FLAG_DICTIONARY) != 0;
    const bool bytes = (P.flags & FLAG_BYTES) != 0;
    const bool delta = (P.flags & FLAG_DELTA) != 0;
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
        // Copied (pw == ow: INT32, INT64, FLOAT, DOUBLE, FIXED_LEN_BYTE_ARRAY), sign-extended
        // (4 or 8 bytes to 16), big-endian to 16 (at most 16 bytes); a byte array page writes
        // 16-byte slots (its dictionary is a slot table the host sized for dict_entries).
        const bool sx = (P.flags & FLAG_SIGN_EXTEND) != 0, be = (P.flags & FLAG_BIG_ENDIAN) != 0;
        bool widths_ok;
        if (bytes) widths_ok = pw == 0 && ow == 16 && !sx && !be;
        else if (sx) widths_ok = (pw == 4 || pw == 8) && ow == 16 && !be;
        else if (be) widths_ok = pw >= 1 && pw <= 16 && ow == 16;
        else widths_ok = pw >= 1 && pw == ow;
        // DELTA_BINARY_PACKED: INT32 or INT64, not a dictionary page.
        if (delta) widths_ok = widths_ok && !bytes && !dictionary && !be && (pw == 4 || pw == 8);
        carry = 0;
        plain_pos = 0;
        if (blockDim.x != THREADS || !widths_ok || levels > LEVELS_STATED || P.body > input_len ||
            P.body_len > input_len - P.body || P.first_row > P.chunk_rows || n > P.chunk_rows - P.first_row ||
            (dictionary && !bytes && (P.dict > input_len || P.dict_len > input_len - P.dict ||
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
                stored_at = values_at;
                ix.pos = 0;
                ix.next = 0;
                ix.bw = 0;
                if (delta) bad = delta_header(dl, stored, stored_len, pw * 8);
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
                // 3''. A delta page: the miniblocks of the deltas the tile's ranks need (rank
                // k > 0 needs delta k - 1).
                if (delta && sum > 0) {
                    if (rank_base + sum > dl.total) {
                        bad = FAULT_DELTA_END;
                    } else {
                        const u64 lo = (rank_base > 0 ? rank_base : 1) - 1, hi = rank_base + sum - 1;
                        if (lo < hi) bad = delta_cover(dl, dwin, lo, hi);
                    }
                    if (bad) atomicCAS(&fault, 0u, bad);
                }
                // 3'. A byte array PLAIN page: the tile's values' length prefixes, in order.
                if (bytes && !dictionary) {
                    u32 pos = plain_pos;
                    for (u32 k = 0; k < sum && !bad; ++k) {
                        if (stored_len < 4 || pos > stored_len - 4) {
                            bad = FAULT_VALUES_END;
                            break;
                        }
                        u32 len = stored[pos] | (u32)stored[pos + 1] << 8 | (u32)stored[pos + 2] << 16 | (u32)stored[pos + 3] << 24;
                        if (len > stored_len - pos - 4) {
                            bad = FAULT_VALUES_END;
                            break;
                        }
                        pl_at[k] = pos + 4;
                        pl_len[k] = len;
                        pos += 4 + len;
                    }
                    plain_pos = pos;
                    if (bad) atomicCAS(&fault, 0u, bad);
                }
            }
            if (__syncthreads_or(bad)) break;
            // 4. Each defined value to its row.
            if (delta) {
                // The terms (rank 0: the first value; rank k: delta k - 1), a block scan
                // (warp shuffles, then the warps' sums), plus the tiles' before.
                u64 term = 0;
                if (d) {
                    const u64 rank = rank_base + warp_count[warp] + before;
                    if (rank == 0) {
                        term = dl.first;
                    } else if (!delta_value(dl, dwin, rank - 1, &term)) {
                        bad = FAULT_DELTA_END;
                        atomicCAS(&fault, 0u, bad);
                    }
                }
                u64 incl = term;
                for (u32 o = 1; o < 32; o <<= 1) {
                    const u64 x = __shfl_up_sync(0xffffffffu, incl, o);
                    if (lane >= o) incl += x;
                }
                if (lane == 31) dsum[warp] = incl;
                if (__syncthreads_or(bad)) break;
                if (t == 0) {
                    u64 sum = 0;
                    for (u32 w = 0; w < THREADS / 32; ++w) {
                        const u64 c = dsum[w];
                        dsum[w] = sum;
                        sum += c;
                    }
                    dtile = sum;
                }
                __syncthreads();
                if (d) {
                    const u64 v = carry + dsum[warp] + incl;
                    u8 b[8];
                    for (u32 k = 0; k < 8; ++k) b[k] = (u8)(v >> (8 * k));
                    const u64 row = P.first_row + i;
                    put_value(b, pw, ow, P.flags, (u8 *)P.out_values + row * ow);
                    if (P.out_valid) atomicOr((u32 *)P.out_valid + row / 32, 1u << (row % 32));
                }
                __syncthreads();
                if (t == 0) carry += dtile;
            } else if (d && bytes) {
                const u32 k = warp_count[warp] + before;  // rank in the tile
                const u64 row = P.first_row + i;
                Slot slot;
                if (!dictionary) {
                    slot.at = P.body + stored_at + pl_at[k];
                    slot.len = pl_len[k];
                    slot.pad = 0;
                } else {
                    u32 e = 0;
                    if (!hybrid_value(ix.s, ix_win, ix.nruns, rank_base + k, ix.bw, &e)) bad = FAULT_INDICES_END;
                    else if (e >= P.dict_entries) bad = FAULT_INDEX_RANGE;
                    else slot = ((const Slot *)P.dict)[e];
                }
                if (bad) {
                    atomicCAS(&fault, 0u, bad);
                } else {
                    ((Slot *)P.out_values)[row] = slot;
                    if (P.out_valid) atomicOr((u32 *)P.out_valid + row / 32, 1u << (row % 32));
                }
            } else if (d) {
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
                    put_value(src, pw, ow, P.flags, (u8 *)P.out_values + row * ow);
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

// A byte array dictionary page walked into its slot table: one block a dictionary, thread 0
// walking the length prefixes in order (serial by nature). A fault stops the walk.
extern "C" __global__ void parquet_bytes_dictionary(const u8 *input, u64 input_len, const void *pages, u32 npages, u32 *errors) {
    const u32 di = blockIdx.x;
    if (di >= npages || threadIdx.x != 0) return;
    const BytesDict D = ((const BytesDict *)pages)[di];
    if (blockDim.x != THREADS || D.body > input_len || D.body_len > input_len - D.body) {
        errors[di] = FAULT_LAUNCH;
        return;
    }
    const u8 *body = input + D.body;
    Slot *slots = (Slot *)D.slots;
    u32 pos = 0;
    for (u32 e = 0; e < D.entries; ++e) {
        if (D.body_len < 4 || pos > D.body_len - 4) {
            errors[di] = FAULT_DICTIONARY_END;
            return;
        }
        u32 len = body[pos] | (u32)body[pos + 1] << 8 | (u32)body[pos + 2] << 16 | (u32)body[pos + 3] << 24;
        if (len > D.body_len - pos - 4) {
            errors[di] = FAULT_DICTIONARY_END;
            return;
        }
        Slot s;
        s.at = D.body + pos + 4;
        s.len = len;
        s.pad = 0;
        slots[e] = s;
        pos += 4 + len;
    }
}

// An offset of `w` bytes (4 or 8), little-endian as Arrow's.
__device__ u64 get_offset(const u8 *offsets, u32 w, u64 i) {
    return w == 4 ? (u64)((const u32 *)offsets)[i] : ((const u64 *)offsets)[i];
}

// A byte array chunk's offsets: one block a chunk, tiles of THREADS rows, each a block scan
// of the slots' lengths (warp shuffles, then the warps' sums); the total written back.
extern "C" __global__ void parquet_bytes_offsets(const u8 *input, u64 input_len, const void *pages, u32 npages, u32 *errors) {
    __shared__ u64 warp_sum[32];
    __shared__ u64 base;
    const u32 ci = blockIdx.x;
    if (ci >= npages) return;
    BytesChunk *C = (BytesChunk *)pages + ci;
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const u32 w = C->offset_width;
    if (blockDim.x != THREADS || (w != 4 && w != 8)) {
        if (t == 0) errors[ci] = FAULT_LAUNCH;
        return;
    }
    const Slot *slots = (const Slot *)C->slots;
    u8 *offsets = (u8 *)C->offsets;
    const u64 rows = C->rows;
    if (t == 0) {
        base = 0;
        if (w == 4) ((u32 *)offsets)[0] = 0;
        else ((u64 *)offsets)[0] = 0;
    }
    __syncthreads();
    for (u64 from = 0; from < rows; from += THREADS) {
        const u64 r = from + t;
        u64 v = r < rows ? slots[r].len : 0;
        for (u32 d = 1; d < 32; d <<= 1) {
            u64 o = __shfl_up_sync(0xffffffffu, v, d);
            if (lane >= d) v += o;
        }
        if (lane == 31) warp_sum[warp] = v;
        __syncthreads();
        if (t == 0) {
            u64 sum = 0;
            for (u32 k = 0; k < THREADS / 32; ++k) {
                u64 c = warp_sum[k];
                warp_sum[k] = sum;
                sum += c;
            }
        }
        __syncthreads();
        const u64 end = base + warp_sum[warp] + v;  // offset after row r
        if (r < rows) {
            if (w == 4) ((u32 *)offsets)[r + 1] = (u32)end;
            else ((u64 *)offsets)[r + 1] = end;
        }
        __syncthreads();
        if (t == THREADS - 1) base = end;  // rows past the chunk's end add nothing
        __syncthreads();
    }
    if (t == 0) {
        C->total = base;
        if (w == 4 && base > 0x7fffffffull) errors[ci] = FAULT_OFFSET_OVERFLOW;
    }
}

// Whether s[0..n) is UTF-8 (the Unicode standard's table 3-7; decode_cpu.rs's utf8_ok).
__device__ bool utf8_ok(const u8 *s, u32 n) {
    u32 i = 0;
    while (i < n) {
        const u8 c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        u32 need;
        u8 lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else return false;
        if (n - i - 1 < need) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (u32 k = 2; k <= need; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
        }
        i += need + 1;
    }
    return true;
}

// A byte array chunk's values copied to their offsets: one block a chunk, a thread a row
// (byte by byte: correct first), every read and write checked against the input and the
// chunk's total.
extern "C" __global__ void parquet_bytes_copy(const u8 *input, u64 input_len, const void *pages, u32 npages, u32 *errors) {
    const u32 ci = blockIdx.x;
    if (ci >= npages) return;
    const BytesChunk C = ((const BytesChunk *)pages)[ci];
    const u32 w = C.offset_width;
    if (blockDim.x != THREADS || (w != 4 && w != 8) || C.values == 0) {
        if (threadIdx.x == 0) errors[ci] = FAULT_LAUNCH;
        return;
    }
    const Slot *slots = (const Slot *)C.slots;
    const u8 *offsets = (const u8 *)C.offsets;
    u8 *values = (u8 *)C.values;
    for (u64 r = threadIdx.x; r < C.rows; r += THREADS) {
        const Slot s = slots[r];
        const u64 dst = get_offset(offsets, w, r);
        if (s.at > input_len || s.len > input_len - s.at || dst > C.total || s.len > C.total - dst) {
            atomicCAS(&errors[ci], 0u, FAULT_LAUNCH);
            continue;
        }
        const u8 *src = input + s.at;
        if (C.utf8 && !utf8_ok(src, s.len)) {
            atomicCAS(&errors[ci], 0u, FAULT_UTF8);
            continue;
        }
        for (u32 k = 0; k < s.len; ++k) values[dst + k] = src[k];
    }
}

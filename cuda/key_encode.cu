// key_encode.cu: sort keys encoded on the device from decoded fixed-width columns (issue 69,
// stage 3: the keys of a device-resident round come from the columns stage 2 decoded, so
// no key crosses PCIe). Thread level: one thread a row, every field of the key in turn.
// The host (src/engine/gpu/key_encode.rs) builds one KeyField a field from the key layout
// the CPU plans (src/keys/layout.rs); the CPU reference of this kernel, and the check
// against the CPU's own key encoding (src/keys/pack.rs), is src/engine/key_job.rs.
//
// A field is its null bit (where the layout has one), then its value bits: the stored
// little-endian value (4, 8 or 16 bytes) with its sign bit flipped for signed types, in
// IEEE total order for floats, inverted within its width when descending. Nulls' value bits
// stay zero. Fields are placed from the most significant bit of word 0 down, exactly as
// the CPU's put64 does; a key of at most 32 bits is written as a u32 (the top half of the
// one word), else as `words` u64s a key, most significant first.
//
// Compiled with common.cuh (u32, u64) into the decode family's module (manifest.rs).

#define KEY_NULL_BIT 1u
#define KEY_NULLS_FIRST 2u
#define KEY_DESCENDING 4u
#define KEY_SIGNED 8u
#define KEY_FLOAT 16u

// One field of the key; the host's KeyFieldArg has this layout (asserted on both sides).
struct KeyField {
    u64 values;    // device address of the column's values, row 0
    u64 validity;  // device address of its validity bitmap (bit r of byte r / 8), 0: none
    u32 offset;    // the field's first bit (its null bit, where it has one) from the top
    u32 bytes;     // 4, 8 or 16: the stored width, which is also the value's width in bits / 8
    u32 flags;     // KEY_*
    u32 pad;
};
static_assert(sizeof(KeyField) == 32, "KeyField is 32 bytes (engine/key_job.rs)");

// ORs the low `width` (1..64) bits of `v` into the key at bit `offset` from the top.
__device__ __forceinline__ void key_put64(u64 *key, u32 offset, u32 width, u64 v) {
    u32 w = offset / 64, s = offset % 64;
    if (s + width <= 64) {
        key[w] |= v << (64 - s - width);
    } else {
        u32 rest = s + width - 64;
        key[w] |= v >> rest;
        key[w + 1] |= v << (64 - rest);
    }
}

extern "C" __global__ void encode_fixed_keys(const void *fields_arg, u32 nfields, u64 rows, void *out, u32 words) {
    const KeyField *fields = (const KeyField *)fields_arg;
    u64 row = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    u64 key[4] = {0, 0, 0, 0};
    for (u32 f = 0; f < nfields; f++) {
        KeyField d = fields[f];
        bool null = d.validity != 0 && ((((const unsigned char *)d.validity)[row >> 3] >> (row & 7)) & 1) == 0;
        u32 at = d.offset;
        if (d.flags & KEY_NULL_BIT) {
            u64 valid_bit = (d.flags & KEY_NULLS_FIRST) ? 1 : 0;
            key_put64(key, at, 1, null ? 1 - valid_bit : valid_bit);
            at += 1;
        }
        if (null) continue;
        bool desc = (d.flags & KEY_DESCENDING) != 0;
        if (d.bytes == 16) {
            const u64 *p = (const u64 *)d.values + 2 * row;
            u64 lo = p[0], hi = p[1];
            if (d.flags & KEY_SIGNED) hi ^= 1ull << 63;
            if (desc) { lo = ~lo; hi = ~hi; }
            key_put64(key, at, 64, hi);
            key_put64(key, at + 64, 64, lo);
        } else {
            u32 width = 8 * d.bytes;
            u64 v = d.bytes == 8 ? ((const u64 *)d.values)[row] : (u64)((const u32 *)d.values)[row];
            u64 sign = 1ull << (width - 1);
            u64 mask = width == 64 ? ~0ull : (1ull << width) - 1;
            if (d.flags & KEY_FLOAT) v = (v & sign) ? (~v & mask) : (v | sign);
            else if (d.flags & KEY_SIGNED) v ^= sign;
            if (desc) v = ~v & mask;
            key_put64(key, at, width, v);
        }
    }
    if (words == 0) {
        ((u32 *)out)[row] = (u32)(key[0] >> 32);
    } else {
        u64 *o = (u64 *)out + row * words;
        for (u32 w = 0; w < words; w++) o[w] = key[w];
    }
}

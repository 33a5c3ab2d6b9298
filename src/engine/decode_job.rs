//! A batch of Parquet data pages to decode on the device, as the caller lays it out (in
//! builds with and without the `gpu` feature): one [`DecodePageArg`] a page, the kernel's
//! `DecodePage` of `cuda/parquet_decode.cu` field for field, and the size of the one output
//! buffer the pages write into. The Parquet side (`parquet/device/decode.rs`) makes it from
//! its decode plans; the device (`engine/gpu/parquet_decode.rs`) runs it.

// Its one caller is the Parquet reader (`parquet/device/`): unused in builds without it.
#![cfg_attr(not(feature = "parquet"), allow(dead_code))]

use std::mem::{align_of, offset_of, size_of};

/// No validity bitmap (`DecodePageArg::out_valid` in a [`DecodeJob`]).
pub(crate) const NO_VALIDITY: u64 = u64::MAX;

/// The kernel's `DecodePage`, field for field. In a [`DecodeJob`] `out_values` and
/// `out_valid` are offsets in the job's output buffer (`out_valid` [`NO_VALIDITY`] for a
/// column without nulls); the launch makes them device addresses.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DecodePageArg {
    pub body: u64,
    pub dict: u64,
    pub out_values: u64,
    pub out_valid: u64,
    pub first_row: u64,
    pub chunk_rows: u64,
    pub body_len: u32,
    pub dict_len: u32,
    pub dict_entries: u32,
    pub num_values: u32,
    pub levels_at: u32,
    pub levels_len: u32,
    pub values_at: u32,
    pub nulls: u32,
    pub flags: u32,
    pub widths: u32,
}

// The layout cuda/parquet_decode.cu asserts for `DecodePage` (its size there, the same).
const _: () = {
    assert!(size_of::<DecodePageArg>() == 88);
    assert!(align_of::<DecodePageArg>() == 8);
    assert!(offset_of!(DecodePageArg, chunk_rows) == 40);
    assert!(offset_of!(DecodePageArg, body_len) == 48);
    assert!(offset_of!(DecodePageArg, widths) == 84);
};

/// The kernel's flags and constants (cuda/parquet_decode.cu, the same values).
pub(crate) const LEVELS_NONE: u32 = 0;
pub(crate) const LEVELS_PREFIXED: u32 = 1;
pub(crate) const LEVELS_STATED: u32 = 2;
pub(crate) const FLAG_DICTIONARY: u32 = 4;
pub(crate) const FLAG_SIGN_EXTEND: u32 = 8;
/// A byte array page: `out_values` is the chunk's [`Slot`] table (one a row), `dict` its
/// dictionary's (an offset in the job's output too, where the dictionary kernel puts it),
/// `widths` 0 stored bytes and 16 output bytes (a slot).
pub(crate) const FLAG_BYTES: u32 = 16;
/// A FIXED_LEN_BYTE_ARRAY's big-endian integer widened to a 16-byte little-endian one.
pub(crate) const FLAG_BIG_ENDIAN: u32 = 32;
/// A DELTA_BINARY_PACKED page (INT32, INT64).
pub(crate) const FLAG_DELTA: u32 = 64;
pub(crate) const NULLS_UNCHECKED: u32 = u32::MAX;

/// Where a byte array value lies in the input, and its length: the kernel's `Slot`, one a
/// row of a byte array chunk (a null's stays zero: a zero-length value) and one a
/// dictionary entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Slot {
    pub at: u64,
    pub len: u32,
    pub pad: u32,
}

/// The kernel's `BytesDict`: a byte array dictionary page (`body`, an offset in the input,
/// `body_len` bytes, `entries` values) walked into its [`Slot`] table at `slots` (an offset
/// in the job's output; the launch makes it an address).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BytesDictArg {
    pub body: u64,
    pub slots: u64,
    pub body_len: u32,
    pub entries: u32,
}

/// The kernel's `BytesChunk`: a byte array chunk's `rows` slots (at `slots`) scanned into
/// its `rows + 1` offsets of `offset_width` bytes (at `offsets`; both offsets in the job's
/// output), its value bytes' `total` written back by the scan; then each value copied to
/// `values` (an offset in the values buffer, allocated once the totals are known), checked
/// as UTF-8 where `utf8` is 1.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BytesChunkArg {
    pub slots: u64,
    pub offsets: u64,
    pub values: u64,
    pub rows: u64,
    pub total: u64,
    pub offset_width: u32,
    pub utf8: u32,
}

// The layouts cuda/parquet_decode.cu asserts for `Slot`, `BytesDict` and `BytesChunk`.
const _: () = {
    assert!(size_of::<Slot>() == 16);
    assert!(size_of::<BytesDictArg>() == 24);
    assert!(size_of::<BytesChunkArg>() == 48);
    assert!(offset_of!(BytesChunkArg, total) == 32);
    assert!(offset_of!(BytesChunkArg, utf8) == 44);
};

/// One launch's work: the pages and the output buffer's size (every offset in the pages
/// lies inside it, values 16-byte aligned, validity 4-byte aligned); for byte array chunks,
/// their dictionaries (walked first) and the chunks (scanned, then copied).
#[derive(Debug, Clone, Default)]
pub(crate) struct DecodeJob {
    pub pages: Vec<DecodePageArg>,
    pub output_len: usize,
    pub dicts: Vec<BytesDictArg>,
    pub byte_chunks: Vec<BytesChunkArg>,
}

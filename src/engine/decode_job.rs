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
pub(crate) const NULLS_UNCHECKED: u32 = u32::MAX;

/// One launch's work: the pages and the output buffer's size (every offset in the pages
/// lies inside it, values 16-byte aligned, validity 4-byte aligned).
#[derive(Debug, Clone, Default)]
pub(crate) struct DecodeJob {
    pub pages: Vec<DecodePageArg>,
    pub output_len: usize,
}

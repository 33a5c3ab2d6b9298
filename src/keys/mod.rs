//! Sort-key encoding: Arrow sort columns + [`SortOptions`](arrow::compute::SortOptions) → fixed-width unsigned key words
//! whose unsigned order is the sort order.
//!
//! # The encoding
//!
//! Every row of every run gets the same bit layout: the sort columns in order, most
//! significant first, each column a *field* at a fixed bit offset, packed into one key of
//! at most [`MAX_KEY_BITS`] bits, stored as the narrowest of `u32`, `u64`, or 2–4 `u64`
//! words (word 0 most significant). Unused low bits are zero.
//!
//! A column's field is:
//!
//! 1. a **null bit**, only when some run has a null in the column: `0` for nulls and `1` for
//!    values with nulls first, the reverse with nulls last (`nulls_first` is absolute, it
//!    does not flip with `descending`, as in arrow); a null's value bits are all zero;
//! 2. the **value bits**, inverted (bitwise NOT within the field) when descending:
//!    - unsigned integers: the value; signed integers (Int8–64, Date32/64, Time32/64,
//!      Timestamp of every unit and zone, Duration, Decimal32/64/128): the two's complement
//!      value with its sign bit flipped; Boolean: one bit;
//!    - intervals (YearMonth, DayTime, MonthDayNano): their fields (months; days and
//!      milliseconds; months, days and nanoseconds), each sign-flipped as a signed integer
//!      of its width, side by side with the first most significant (32, 64 and 128 bits): the
//!      fields in turn, as arrow orders them;
//!    - floats (Float16/32/64): IEEE total order (`f64::total_cmp`): negative values (sign
//!      bit set) have all bits inverted, the others their sign bit set, so
//!      -NaN < -inf < … < -0 < +0 < … < +inf < +NaN;
//!    - Utf8, LargeUtf8, Utf8View, Binary, LargeBinary, BinaryView: the first `P` bytes,
//!      zero padded, then a length code `min(len, P + 1)` in `ceil(log2(P + 2))` bits. `P` is
//!      the longest value in any run when that fits in the bit budget (the field is then
//!      exact), else the most bytes that fit (the field is a *prefix*). Zero padding plus
//!      the length code keep `"ab" < "ab\0"`.
//!    - FixedSizeBinary(`w`) (UUIDs, hashes): the `w` bytes, or the first bytes that fit (a
//!      *prefix*); no length code, since every value has `w` bytes.
//!    - Decimal256: its 32 bytes as FixedSizeBinary(32) would hold them, the two's
//!      complement value big-endian with its sign bit flipped: exact alone without nulls
//!      (all 256 bits), else a prefix.
//!    - Dictionary of any of these: the field of its value type (dictionaries are decoded).
//!    - Any other type arrow-row orders (lists, structs, maps, unions, ...): its arrow-row
//!      bytes under the column's options, as a LargeBinary value of the byte family,
//!      ascending and with no null bit (the bytes already place nulls and direction); see
//!      the `rows` module.
//!
//! # Exactness
//!
//! The key order is always *consistent* with the sort order: `key(a) < key(b)` implies
//! `a < b`, and `a < b` implies `key(a) <= key(b)`. The encoding is *exact* (equal keys
//! imply equal sort values) unless a string field is a prefix or a column did not fit in
//! the budget; the encoding stops after the first inexact field. Then rows with equal keys
//! that may differ are resolved afterwards with the full comparator (arrow-row), see
//! `order::ties`: in the merged output such rows form contiguous segments, each
//! already in input order, so a stable sort of each segment finishes the merge.

mod bytes;
mod fixed;
mod layout;
mod pack;
mod rows;
mod word;

#[cfg(test)]
mod tests;

pub use layout::{is_supported, plan_layout};
// The device's key program (engine/key_job.rs) reads the planned layout.
pub(crate) use layout::{plan_layout_of, ColumnSummary, FieldKind, Layout};
pub use word::{KeyColumn, KeyWord};

use crate::error::{Error, Result};
use crate::sort_key::SortKey;
use arrow::array::ArrayRef;

/// The keys of all runs, concatenated in run order.
#[derive(Debug, Clone)]
pub struct EncodedKeys {
    pub keys: KeyColumn,
    /// `run_offsets[r]` is run `r`'s first row in `keys`; the last entry is the total.
    pub run_offsets: Vec<usize>,
    /// Whether equal keys imply equal sort values (else ties need the full comparator).
    pub exact: bool,
    /// Bits of the key actually used.
    pub bits: u32,
}

/// Encodes the sort columns of every run. `runs[r][c]` is run `r`'s array for sort
/// column `c`; every run must have the same column types.
pub fn encode_runs(runs: &[Vec<ArrayRef>], specs: &[SortKey]) -> Result<EncodedKeys> {
    if specs.is_empty() {
        return Err(Error::InvalidArgument("at least one sort column is required".into()));
    }
    // Dictionaries are decoded to their values, so the layout sees only plain types.
    let runs: Vec<Vec<ArrayRef>> =
        runs.iter().map(|cols| cols.iter().map(fixed::decode_dictionary).collect::<Result<Vec<_>>>()).collect::<Result<_>>()?;
    // Types of neither the fixed nor the byte family become their arrow-row bytes.
    let (runs, specs) = rows::as_row_bytes(runs, specs)?;
    let layout = plan_layout(&runs, &specs)?;
    let mut run_offsets = Vec::with_capacity(runs.len() + 1);
    run_offsets.push(0);
    for cols in &runs {
        let len = cols.first().map_or(0, |c| c.len());
        run_offsets.push(run_offsets.last().unwrap() + len);
    }
    let keys = pack::pack_runs(&runs, &layout, *run_offsets.last().unwrap());
    Ok(EncodedKeys { keys, run_offsets, exact: layout.exact, bits: layout.bits })
}

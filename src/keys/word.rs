//! The fixed-width key words the engines merge.
//!
//! A key is one `u32`, one `u64`, or 2–4 `u64` words compared most significant word first
//! (Rust's array order), so a key is an unsigned integer of 32 to 256 bits whose order is
//! the sort order (see the module doc of [`crate::keys`]).

/// A fixed-width unsigned key, ordered as the big-endian integer it spells.
pub trait KeyWord: Copy + Ord + Default + Send + Sync + std::fmt::Debug + 'static {}

impl KeyWord for u32 {}

impl KeyWord for u64 {}

impl<const N: usize> KeyWord for [u64; N] where [u64; N]: Default {}

/// The encoded keys of all runs, concatenated in run order, in the narrowest width that
/// holds them. Each key is an unsigned integer whose order is the sort order; the engines
/// merge it ([`merge_keys`](crate::merge_keys) has an example).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyColumn {
    /// Keys of up to 32 bits.
    U32(Vec<u32>),
    /// Keys of up to 64 bits.
    U64(Vec<u64>),
    /// Keys of up to 128 bits, the most significant word first.
    U64x2(Vec<[u64; 2]>),
    /// Keys of up to 192 bits, the most significant word first.
    U64x3(Vec<[u64; 3]>),
    /// Keys of up to 256 bits, the most significant word first.
    U64x4(Vec<[u64; 4]>),
}

impl KeyColumn {
    /// The number of keys (rows of all runs).
    pub fn len(&self) -> usize {
        match self {
            KeyColumn::U32(v) => v.len(),
            KeyColumn::U64(v) => v.len(),
            KeyColumn::U64x2(v) => v.len(),
            KeyColumn::U64x3(v) => v.len(),
            KeyColumn::U64x4(v) => v.len(),
        }
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per key.
    pub fn key_bytes(&self) -> usize {
        match self {
            KeyColumn::U32(_) => 4,
            KeyColumn::U64(_) => 8,
            KeyColumn::U64x2(_) => 16,
            KeyColumn::U64x3(_) => 24,
            KeyColumn::U64x4(_) => 32,
        }
    }

    /// Whether keys `i` and `j` are equal as words.
    pub fn words_equal(&self, i: usize, j: usize) -> bool {
        match self {
            KeyColumn::U32(v) => v[i] == v[j],
            KeyColumn::U64(v) => v[i] == v[j],
            KeyColumn::U64x2(v) => v[i] == v[j],
            KeyColumn::U64x3(v) => v[i] == v[j],
            KeyColumn::U64x4(v) => v[i] == v[j],
        }
    }

    /// Compares keys `i` and `j` as words.
    pub fn cmp_words(&self, i: usize, j: usize) -> std::cmp::Ordering {
        match self {
            KeyColumn::U32(v) => v[i].cmp(&v[j]),
            KeyColumn::U64(v) => v[i].cmp(&v[j]),
            KeyColumn::U64x2(v) => v[i].cmp(&v[j]),
            KeyColumn::U64x3(v) => v[i].cmp(&v[j]),
            KeyColumn::U64x4(v) => v[i].cmp(&v[j]),
        }
    }
}

/// Calls `$body` with `$v` bound to the typed key vector of a [`KeyColumn`].
#[macro_export]
#[doc(hidden)]
macro_rules! with_key_column {
    ($col:expr, $v:ident => $body:expr) => {
        match $col {
            $crate::keys::KeyColumn::U32($v) => $body,
            $crate::keys::KeyColumn::U64($v) => $body,
            $crate::keys::KeyColumn::U64x2($v) => $body,
            $crate::keys::KeyColumn::U64x3($v) => $body,
            $crate::keys::KeyColumn::U64x4($v) => $body,
        }
    };
}

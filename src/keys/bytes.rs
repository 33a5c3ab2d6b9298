//! Byte family: Utf8, LargeUtf8, Utf8View, Binary, LargeBinary, BinaryView,
//! FixedSizeBinary, and Decimal256 as 32 bytes. Each value is compared by its bytes; the key
//! holds a prefix and, for the variable-length types, a length code.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Decimal256Type};

/// Calls `f(row, bytes)` for every row in `rows` (bytes are meaningless for null rows).
pub fn for_each_bytes(array: &dyn Array, rows: std::ops::Range<usize>, mut f: impl FnMut(usize, &[u8])) {
    macro_rules! each {
        ($a:expr) => {{
            let a = $a;
            for i in rows {
                f(i, a.value(i).as_ref());
            }
        }};
    }
    match array.data_type() {
        DataType::Utf8 => each!(array.as_string::<i32>()),
        DataType::LargeUtf8 => each!(array.as_string::<i64>()),
        DataType::Utf8View => each!(array.as_string_view()),
        DataType::Binary => each!(array.as_binary::<i32>()),
        DataType::LargeBinary => each!(array.as_binary::<i64>()),
        DataType::BinaryView => each!(array.as_binary_view()),
        DataType::FixedSizeBinary(_) => each!(array.as_fixed_size_binary()),
        DataType::Decimal256(_, _) => {
            // An i256 in big-endian bytes with its sign bit flipped orders as unsigned bytes
            // (as the fixed family does for narrower integers). 256 value bits fill the
            // whole key, so beside a null bit or another column this is a prefix.
            let values = array.as_primitive::<Decimal256Type>().values();
            for i in rows {
                let mut b = values[i].to_be_bytes();
                b[0] ^= 0x80;
                f(i, &b);
            }
        }
        other => unreachable!("layout admitted a non-byte type {other}"),
    }
}

/// The `chunk`-th group of up to 8 prefix bytes of `bytes` (zero padded), as the low
/// `8 * n` bits of a `u64`, where `n = min(8, prefix - 8 * chunk)`.
#[inline]
pub fn prefix_chunk(bytes: &[u8], chunk: usize, n: usize) -> u64 {
    let start = 8 * chunk;
    let mut buf = [0u8; 8];
    if start < bytes.len() {
        let m = (bytes.len() - start).min(n);
        buf[..m].copy_from_slice(&bytes[start..start + m]);
    }
    u64::from_be_bytes(buf) >> (64 - 8 * n as u32)
}

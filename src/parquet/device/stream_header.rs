//! The size a compressed page's stream declares for itself, read on the host before the
//! stream goes to nvCOMP.
//!
//! nvCOMP documents a damaged stream as undefined behaviour, and on the GPU machine a
//! damaged snappy length sent to it ended in `CUDA_ERROR_ILLEGAL_ADDRESS`, which poisons the
//! process's CUDA context (every later GPU call of the process fails). So every stream whose
//! format states its decompressed size is checked against the page header's size first;
//! a mismatch is an error naming the page, and the stream never reaches the device.
//!
//! - **snappy** (raw blocks, as Parquet stores them): the block starts with its uncompressed
//!   length as a little-endian base-128 varint of at most 5 bytes (32 bits). It must equal
//!   the page's uncompressed size.
//! - **zstd**: a stream of frames. The first must be a zstd frame (magic `0xFD2FB528`) or a
//!   skippable one (`0x184D2A50..=0x184D2A5F`). A zstd frame's header may carry its
//!   `Frame_Content_Size` (RFC 8878, 3.1.1.1): 1, 2 (stored minus 256), 4 or 8 bytes after
//!   the descriptor, the window byte (absent in single-segment frames) and the dictionary
//!   id. Where present it cannot exceed the page's size (a stream of several frames adds
//!   up to it).
//! - **LZ4_RAW**: a raw block states no size; nothing is checked.
//!
//! What this cannot catch: a stream damaged past its header. Before the device path reads
//! real inputs (issue 69's later stages), a page's CRC, where the writer wrote one, is the
//! check for that.

use crate::engine::decompress::DeviceCodec;

/// Checks `stream` (one page's compressed values) against `expected`, the decompressed
/// size its page header gives: `Err` says what the stream declares instead.
pub(crate) fn check_declared_size(codec: DeviceCodec, stream: &[u8], expected: usize) -> Result<(), String> {
    match codec {
        DeviceCodec::Snappy => {
            let declared = snappy_length(stream)?;
            if declared != expected as u64 {
                return Err(format!("its snappy block declares {declared} uncompressed bytes, the page header {expected}"));
            }
            Ok(())
        }
        DeviceCodec::Zstd => match zstd_content_size(stream)? {
            Some(declared) if declared > expected as u64 => {
                Err(format!("its zstd frame declares {declared} uncompressed bytes, more than the page header's {expected}"))
            }
            _ => Ok(()),
        },
        DeviceCodec::Lz4Raw => Ok(()),
    }
}

/// The varint at the start of a raw snappy block.
fn snappy_length(stream: &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for (i, &b) in stream.iter().take(5).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return if value > u64::from(u32::MAX) {
                Err(format!("its snappy block declares {value} bytes, over 32 bits"))
            } else {
                Ok(value)
            };
        }
    }
    Err(if stream.len() < 5 {
        "its snappy block ends inside its length".into()
    } else {
        "its snappy block's length runs past 5 bytes".into()
    })
}

/// The first frame's `Frame_Content_Size`, where it states one.
fn zstd_content_size(stream: &[u8]) -> Result<Option<u64>, String> {
    let Some(magic) = stream.get(..4) else {
        return Err(format!("its zstd stream has {} bytes, less than a frame's magic number", stream.len()));
    };
    let magic = u32::from_le_bytes(magic.try_into().expect("4 bytes"));
    if (0x184D_2A50..=0x184D_2A5F).contains(&magic) {
        return Ok(None); // a skippable frame: the data frames follow
    }
    if magic != 0xFD2F_B528 {
        return Err(format!("its zstd stream starts with {magic:#010x}, not a frame's magic number"));
    }
    let Some(&descriptor) = stream.get(4) else {
        return Err("its zstd frame ends before its header".into());
    };
    let fcs_flag = descriptor >> 6;
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_bytes = [0usize, 1, 2, 4][usize::from(descriptor & 0x03)];
    let fcs_bytes = match fcs_flag {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    if fcs_bytes == 0 {
        return Ok(None);
    }
    let at = 5 + usize::from(!single_segment) + dictionary_bytes;
    let Some(field) = stream.get(at..at + fcs_bytes) else {
        return Err("its zstd frame ends inside its header".into());
    };
    let mut raw = [0u8; 8];
    raw[..fcs_bytes].copy_from_slice(field);
    let value = u64::from_le_bytes(raw);
    Ok(Some(if fcs_bytes == 2 { value + 256 } else { value }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snappy_lengths() {
        assert_eq!(snappy_length(&[0x00]), Ok(0));
        assert_eq!(snappy_length(&[0x7f, 0xaa]), Ok(127));
        assert_eq!(snappy_length(&[0x80, 0x01]), Ok(128));
        assert_eq!(snappy_length(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Ok(u64::from(u32::MAX)));
        assert!(snappy_length(&[0xff, 0xff, 0xff, 0xff, 0x1f]).is_err()); // over 32 bits
        assert!(snappy_length(&[0x80, 0x80]).is_err()); // ends inside the varint
        assert!(snappy_length(&[0x80; 6]).is_err());
        assert!(check_declared_size(DeviceCodec::Snappy, &[0x80, 0x01, 0], 128).is_ok());
        let e = check_declared_size(DeviceCodec::Snappy, &[0xff, 0xff, 0x7f], 4096).unwrap_err();
        assert!(e.contains("2097151") && e.contains("4096"), "{e}");
    }

    fn frame(descriptor: u8, rest: &[u8]) -> Vec<u8> {
        let mut v = 0xFD2F_B528u32.to_le_bytes().to_vec();
        v.push(descriptor);
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn zstd_content_sizes() {
        // Single segment, FCS of 1 byte.
        assert_eq!(zstd_content_size(&frame(0x20, &[200])), Ok(Some(200)));
        // FCS of 2 bytes (plus 256), a window byte before it.
        assert_eq!(zstd_content_size(&frame(0x40, &[0x58, 0x00, 0x01])), Ok(Some(256 + 256)));
        // FCS of 4 bytes after a 1-byte dictionary id, single segment.
        assert_eq!(zstd_content_size(&frame(0xA1, &[7, 0x00, 0x00, 0x01, 0x00])), Ok(Some(65536)));
        // FCS of 8 bytes.
        assert_eq!(zstd_content_size(&frame(0xE0, &[1, 0, 0, 0, 0, 0, 0, 0])), Ok(Some(1)));
        // No FCS (multi-segment, flag 0).
        assert_eq!(zstd_content_size(&frame(0x00, &[0x58])), Ok(None));
        // Skippable frame first.
        assert_eq!(zstd_content_size(&0x184D_2A53u32.to_le_bytes()), Ok(None));
        assert!(zstd_content_size(&[1, 2, 3, 4, 5]).is_err());
        assert!(zstd_content_size(&[0x28, 0xB5]).is_err());
        assert!(zstd_content_size(&frame(0xE0, &[1, 0])).is_err()); // ends inside the FCS
        assert!(check_declared_size(DeviceCodec::Zstd, &frame(0x20, &[200]), 200).is_ok());
        assert!(check_declared_size(DeviceCodec::Zstd, &frame(0x20, &[200]), 100).is_err());
        assert!(check_declared_size(DeviceCodec::Lz4Raw, &[], 100).is_ok());
    }
}

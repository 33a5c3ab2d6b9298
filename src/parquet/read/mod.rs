//! Reading Parquet row groups into Arrow batches: a run batch by batch ([`run`]), a list of
//! row groups decoded in parallel and handed out in order ([`row_groups`]), and the rules
//! both follow for the size of a batch.
//!
//! **Batch size.** A reader sizes its batches by what the rows it decoded measure, and
//! reopens its row groups where it stopped only when the size changes by a factor of 2 or
//! more (`resizes`). Values so large that a batch overflows its 32-bit offsets
//! (`is_offset_overflow`) are read again with a sixteenth of the rows
//! (`rows_after_overflow`), down to one row a batch.

pub mod row_groups;
pub mod run;

use arrow::error::ArrowError;

/// Whether decoding a batch failed because its values overflow the 32-bit offsets of a
/// string, binary or list array: the one failure that fewer rows a batch fixes.
///
/// Arrow's own offset overflow is a variant (`OffsetOverflowError`). The parquet crate's
/// decoders report theirs as a general error ("index overflow decoding byte array",
/// "offset of … would overflow list array"), which its record batch reader hands on as
/// `ArrowError::ParquetError` holding only the message: that text is all there is to tell
/// it by, so it is read here, and nowhere else.
pub(crate) fn is_offset_overflow(e: &ArrowError) -> bool {
    match e {
        ArrowError::OffsetOverflowError(_) => true,
        ArrowError::ParquetError(message) => message.contains("overflow"),
        _ => false,
    }
}

/// The rows of a batch read again after `rows` overflowed its offsets.
pub(crate) fn rows_after_overflow(rows: usize) -> usize {
    (rows / 16).max(1)
}

/// Whether a reader reading batches of `current` rows changes to `wanted` (a factor of 2
/// or more; a change reopens the row groups).
pub(crate) fn resizes(current: usize, wanted: usize) -> bool {
    wanted * 2 <= current || wanted >= current * 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_offset_overflows_shrink_a_batch() {
        assert!(is_offset_overflow(&ArrowError::OffsetOverflowError(1 << 31)));
        let parquet = ArrowError::from(parquet::errors::ParquetError::General("index overflow decoding byte array".into()));
        assert!(is_offset_overflow(&parquet));
        assert!(!is_offset_overflow(&ArrowError::ParquetError("EOF: unexpected end of page".into())));
        assert!(!is_offset_overflow(&ArrowError::ComputeError("overflow".into())));
        assert_eq!(rows_after_overflow(1024), 64);
        assert_eq!(rows_after_overflow(8), 1);
        assert!(resizes(100, 50) && resizes(100, 200) && !resizes(100, 51) && !resizes(100, 199));
    }
}

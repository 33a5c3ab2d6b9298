//! String and binary columns with offsets (`Utf8`, `LargeUtf8`, `Binary`, `LargeBinary`):
//! offsets read by address, bytes copied ([`BytesColumn`]).

use super::fixed::{gathered_nulls, read_eight_at_a_time, run_nulls};
use super::Source;
use arrow::array::{ArrayRef, AsArray, GenericBinaryArray, GenericStringArray, OffsetSizeTrait};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{ArrowNativeType, DataType};
use arrow::error::ArrowError;
use std::sync::Arc;

/// A string or binary column with offsets (`Utf8`, `LargeUtf8`, `Binary`, `LargeBinary`):
/// each row's start and end offsets read together (adjacent: one cache miss), then its
/// bytes copied from its run's value buffer.
pub(super) struct BytesColumn {
    data_type: DataType,
    /// Per run, the address of the offset of its first row.
    offsets: Vec<usize>,
    /// Per run, the address of its value bytes (what the offsets count from).
    values: Vec<usize>,
    /// Per run, its validity, where some run's column holds a null.
    nulls: Option<Vec<Option<NullBuffer>>>,
}

impl BytesColumn {
    /// A column of `arrays` (one per run), or `None` where it is not a string or binary
    /// column with offsets.
    pub(super) fn new(arrays: &[ArrayRef], data_type: &DataType) -> Option<Self> {
        fn addresses<O: ArrowNativeType>(offsets: &[O], values: &Buffer) -> (usize, usize) {
            (offsets.as_ptr() as usize, values.as_ptr() as usize)
        }
        let (mut offsets, mut values) = (Vec::new(), Vec::new());
        for column in arrays {
            let (o, v) = match data_type {
                DataType::Utf8 => addresses(column.as_string::<i32>().value_offsets(), column.as_string::<i32>().values()),
                DataType::LargeUtf8 => addresses(column.as_string::<i64>().value_offsets(), column.as_string::<i64>().values()),
                DataType::Binary => addresses(column.as_binary::<i32>().value_offsets(), column.as_binary::<i32>().values()),
                DataType::LargeBinary => addresses(column.as_binary::<i64>().value_offsets(), column.as_binary::<i64>().values()),
                _ => return None,
            };
            offsets.push(o);
            values.push(v);
        }
        Some(BytesColumn { data_type: data_type.clone(), offsets, values, nulls: run_nulls(arrays) })
    }

    /// The values of the rows `idx` as one array; `OffsetOverflowError` where their bytes
    /// do not fit the offset type (the batch is then halved).
    pub(super) fn gather(&self, idx: &[Source]) -> std::result::Result<ArrayRef, ArrowError> {
        match self.data_type {
            DataType::Utf8 | DataType::Binary => self.gather_with::<i32>(idx),
            _ => self.gather_with::<i64>(idx),
        }
    }

    fn gather_with<O: OffsetSizeTrait>(&self, idx: &[Source]) -> std::result::Result<ArrayRef, ArrowError> {
        // 1. Each row's byte range in its run's values.
        let ranges: Vec<(O, O)> = read_eight_at_a_time(idx, |&(run, row)| {
            // SAFETY: a run's offsets hold its length + 1 entries (`BytesColumn::new`; rows
            // as `read_at` requires): each row's start offset, and its end offset next.
            unsafe {
                let at = (self.offsets[run] as *const O).add(row);
                (at.read_unaligned(), at.add(1).read_unaligned())
            }
        });
        // 2. The output offsets.
        let mut offsets: Vec<O> = Vec::with_capacity(idx.len() + 1);
        offsets.push(O::usize_as(0));
        let mut total = 0usize;
        for (start, end) in &ranges {
            total += end.as_usize() - start.as_usize();
            offsets.push(O::from_usize(total).ok_or(ArrowError::OffsetOverflowError(total))?);
        }
        // 3. The bytes.
        let mut bytes: Vec<u8> = Vec::with_capacity(total);
        for (&(run, _), (start, end)) in idx.iter().zip(&ranges) {
            let (start, len) = (start.as_usize(), end.as_usize() - start.as_usize());
            // SAFETY: a valid array's offsets (null rows' too) lie within its value buffer.
            bytes.extend_from_slice(unsafe { std::slice::from_raw_parts((self.values[run] as *const u8).add(start), len) });
        }
        let nulls = gathered_nulls(self.nulls.as_ref(), idx);
        // SAFETY: the offsets start at 0 and grow by each row's length.
        let offsets = unsafe { OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)) };
        let bytes = Buffer::from_vec(bytes);
        // Whole values of valid arrays of this type, copied (UTF-8 stays UTF-8).
        Ok(match self.data_type {
            // SAFETY: as said above.
            DataType::Utf8 | DataType::LargeUtf8 => Arc::new(unsafe { GenericStringArray::<O>::new_unchecked(offsets, bytes, nulls) }),
            // SAFETY: as said above.
            _ => Arc::new(unsafe { GenericBinaryArray::<O>::new_unchecked(offsets, bytes, nulls) }),
        })
    }
}

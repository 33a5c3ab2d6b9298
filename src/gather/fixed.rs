//! Fixed-width columns read through a table of the runs' value addresses ([`FixedColumn`]),
//! and the reads the view and offset columns share: [`read_at`] (eight rows at a time) and
//! the runs' validity ([`run_nulls`], [`gathered_nulls`]).

use super::Source;
use arrow::array::{make_array, Array, ArrayData, ArrayRef};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{i256, ArrowNativeType, DataType};
use arrow::error::ArrowError;

/// A fixed-width column (every type with a `primitive_width`: integers, floats, decimals,
/// dates, times, timestamps, durations, intervals), gathered by reading each output row's
/// value at `value_start[run] + row * width`. arrow's `interleave` does the same through a
/// downcast array per run and a bounds-checked `value(row)`; this table of addresses, read
/// eight rows at a time, is faster on few cores and on many (`benches/gather.rs`: 4 u64
/// columns from 2048 batches in random order; the numbers: `docs/performance.md`).
pub(super) struct FixedColumn {
    data_type: DataType,
    /// Bytes per value: 1, 2, 4, 8, 16 or 32.
    width: usize,
    /// Per run, the address of the column's first value (its array offset applied). The
    /// `Gatherer` borrows the runs, so their buffers outlive it; held as integers so that
    /// the gatherer can be shared by the pool's threads.
    value_start: Vec<usize>,
    /// Per run, its validity, where some run's column holds a null.
    nulls: Option<Vec<Option<NullBuffer>>>,
}

impl FixedColumn {
    /// A column of `arrays` (one per run), or `None` where its type is not fixed-width.
    pub(super) fn new(arrays: &[ArrayRef], data_type: &DataType) -> Option<Self> {
        let width = data_type.primitive_width().filter(|w| [1, 2, 4, 8, 16, 32].contains(w))?;
        let mut value_start = Vec::with_capacity(arrays.len());
        for array in arrays {
            let data = array.to_data();
            let values = data.buffers().first()?;
            // The arrays were validated when built: the buffer holds offset + len values.
            value_start.push(values.as_ptr() as usize + data.offset() * width);
        }
        Some(FixedColumn { data_type: data_type.clone(), width, value_start, nulls: run_nulls(arrays) })
    }

    /// The values of the rows `idx` (run, row within the run) as one array.
    pub(super) fn gather(&self, idx: &[Source]) -> std::result::Result<ArrayRef, ArrowError> {
        let values = match self.width {
            1 => self.gather_values::<u8>(idx),
            2 => self.gather_values::<u16>(idx),
            4 => self.gather_values::<u32>(idx),
            8 => self.gather_values::<u64>(idx),
            16 => self.gather_values::<i128>(idx),
            _ => self.gather_values::<i256>(idx),
        };
        let nulls = gathered_nulls(self.nulls.as_ref(), idx);
        let data = ArrayData::builder(self.data_type.clone()).len(idx.len()).add_buffer(values).nulls(nulls).build()?;
        Ok(make_array(data))
    }

    /// The raw values (of `T`'s width) of the rows `idx`.
    fn gather_values<T: ArrowNativeType>(&self, idx: &[Source]) -> Buffer {
        debug_assert_eq!(std::mem::size_of::<T>(), self.width);
        // SAFETY: `value_start` holds each run's first value of width `T` (`FixedColumn::new`).
        Buffer::from_vec(unsafe { read_at::<T>(&self.value_start, idx) })
    }
}

/// The value of each row `idx` (run, row within the run) at `start[run] + row * size_of::<T>()`.
///
/// # Safety
///
/// `start[run]` is the address of a run's first value of type `T` in a buffer that outlives
/// the call and holds more than `row` values for every `(run, row)` of `idx`. The gatherer's
/// rows are so: the permutation's indices were checked against the runs' rows by
/// `check_fits`, and `RunLocator` maps them to a run and a row below its length
/// ([`PieceGather`] checks its locations). Reads are unaligned, as a sliced buffer may be.
pub(super) unsafe fn read_at<T: Copy>(start: &[usize], idx: &[Source]) -> Vec<T> {
    // SAFETY: the caller's contract (above).
    read_eight_at_a_time(idx, |&(run, row)| unsafe { (start[run] as *const T).add(row).read_unaligned() })
}

/// `read` of each row of `idx`, eight independent reads at a time (more cache misses in
/// flight; the reads of a random order miss the cache on nearly every row), written straight
/// into the output (as arrow's `interleave` does).
pub(super) fn read_eight_at_a_time<V: Copy>(idx: &[Source], read: impl Fn(&Source) -> V) -> Vec<V> {
    let mut values: Vec<V> = Vec::with_capacity(idx.len());
    let out = &mut values.spare_capacity_mut()[..idx.len()];
    let mut out_chunks = out.chunks_exact_mut(8);
    let chunks = idx.chunks_exact(8);
    let rest = chunks.remainder();
    for (o, c) in (&mut out_chunks).zip(chunks) {
        let v = [read(&c[0]), read(&c[1]), read(&c[2]), read(&c[3]), read(&c[4]), read(&c[5]), read(&c[6]), read(&c[7])];
        for (slot, value) in o.iter_mut().zip(v) {
            slot.write(value);
        }
    }
    for (slot, row) in out_chunks.into_remainder().iter_mut().zip(rest) {
        slot.write(read(row));
    }
    // SAFETY: the first `idx.len()` slots were all written above (eight a chunk, then the rest).
    unsafe { values.set_len(idx.len()) };
    values
}

/// Per run, its validity, where some run's array holds a null.
pub(super) fn run_nulls(arrays: &[ArrayRef]) -> Option<Vec<Option<NullBuffer>>> {
    let any_nulls = arrays.iter().any(|a| a.null_count() > 0);
    any_nulls.then(|| arrays.iter().map(|a| a.logical_nulls()).collect())
}

/// The validity of the rows `idx` from the runs' (`run_nulls`); `None` where none is null.
pub(super) fn gathered_nulls(nulls: Option<&Vec<Option<NullBuffer>>>, idx: &[Source]) -> Option<NullBuffer> {
    let nulls = nulls?;
    let valid = BooleanBuffer::collect_bool(idx.len(), |i| {
        let (run, row) = idx[i];
        nulls[run].as_ref().is_none_or(|n| n.is_valid(row))
    });
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

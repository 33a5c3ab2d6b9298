//! Gathers whole rows in permutation order into RecordBatches, one output batch range per
//! parallel task.
//!
//! Fixed-width columns (integers, floats, decimals, temporal types) are read through a
//! table of the runs' value addresses (`FixedColumn`), string and binary views the same way
//! (`ViewColumn`, long values' buffers renumbered per batch), strings and bytes with offsets
//! by their offsets (`BytesColumn`); other columns but dictionaries go through arrow's
//! `interleave`. Top-level dictionary columns (`Dictionary(K, V)`, every key type
//! Int8..UInt64, every value type) are gathered with their dictionaries merged exactly,
//! because arrow merges them only best effort (a hash table that overwrites on collisions,
//! and no merge at all for non-byte value types) and fails with "Dictionary key bigger than
//! the key type" as soon as the runs of a round
//! (several files, or several batches of one file: the Parquet reader gives every batch its
//! own dictionary) hold more values together than the key type can index, even when they
//! all hold the same few categories:
//!
//! - Once per gather, every dictionary value that a row of some run references gets a
//!   global id; values are compared by their `arrow::row` bytes (exact for every value
//!   type, nulls included), so equal values of different runs, or repeated in one
//!   dictionary, share one id. Unreferenced dictionary values are never looked at.
//! - Per output batch, the distinct ids of its rows, in order of first appearance, are the
//!   batch's dictionary (its values taken from the runs' dictionaries by `interleave`), and
//!   the keys are remapped to it. The column keeps its declared type (key and value type),
//!   so the output schema is the input's.
//!
//! **Split batches.** When the distinct values of one output batch do not fit its key type
//! (more than 128 for Int8 keys, 256 for UInt8, ...), the batch is cut greedily into the
//! longest consecutive pieces that fit. When arrow fails for a batch with an offset
//! overflow (string or list data of more than 2 GiB in one i32-offset column), the batch is
//! halved and each half retried, down to one row. Either way the output then holds batches
//! shorter than `batch_size` (all with the same schema): smaller batches are the only way to
//! keep the column's declared type.

use crate::error::{Error, Result};
use crate::permutation::{Indices, Permutation, RunLocator};
use arrow::array::{
    make_array, new_empty_array, Array, ArrayData, ArrayRef, AsArray, BinaryViewArray, DictionaryArray, GenericBinaryArray,
    GenericStringArray, OffsetSizeTrait, PrimitiveArray, RecordBatch, RecordBatchOptions, StringViewArray, UInt32Array, UInt64Array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::compute::{interleave, interleave_record_batch, take, take_record_batch};
use arrow::datatypes::{
    i256, ArrowDictionaryKeyType, ArrowNativeType, DataType, Field, Int16Type, Int32Type, Int64Type, Int8Type, Schema, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Calls `$f::<K>(args)` with `K` the arrow key type of the dictionary key type `$kt`.
macro_rules! by_key_type {
    ($kt:expr, $f:ident ( $($arg:expr),* )) => {
        match $kt {
            DataType::Int8 => $f::<Int8Type>($($arg),*),
            DataType::Int16 => $f::<Int16Type>($($arg),*),
            DataType::Int32 => $f::<Int32Type>($($arg),*),
            DataType::Int64 => $f::<Int64Type>($($arg),*),
            DataType::UInt8 => $f::<UInt8Type>($($arg),*),
            DataType::UInt16 => $f::<UInt16Type>($($arg),*),
            DataType::UInt32 => $f::<UInt32Type>($($arg),*),
            DataType::UInt64 => $f::<UInt64Type>($($arg),*),
            other => Err(ArrowError::InvalidArgumentError(format!("invalid dictionary key type {other}"))),
        }
    };
}

/// The output schema: run 0's, with a column nullable where any run's is.
fn merged_schema(runs: &[RecordBatch]) -> Arc<Schema> {
    let first = runs[0].schema();
    let fields: Vec<Field> = first
        .fields()
        .iter()
        .enumerate()
        .map(|(c, f)| {
            let nullable = runs.iter().any(|b| b.schema().field(c).is_nullable());
            f.as_ref().clone().with_nullable(nullable)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, first.metadata().clone()))
}

/// Rows of `runs` in the order of `perm`, in batches of `batch_size` rows (shorter where a
/// batch had to be split, see the module doc).
pub fn gather(runs: &[RecordBatch], perm: &Permutation, batch_size: usize) -> Result<Vec<RecordBatch>> {
    if batch_size == 0 {
        return Err(Error::InvalidArgument("batch size must be at least 1".into()));
    }
    if runs.is_empty() || perm.is_empty() {
        return Ok(vec![]);
    }
    check_fits(runs, perm)?;
    let schema = merged_schema(runs);
    let runs: Vec<RecordBatch> = runs.iter().map(|b| b.clone().with_schema(schema.clone())).collect::<Result<_, _>>()?;
    if runs.len() == 1 && perm.len() == runs[0].num_rows() && is_identity(&perm.indices) {
        // One run merged: the identity; slice without copying. (A sort of one batch is not.)
        let n = runs[0].num_rows();
        return Ok((0..n).step_by(batch_size).map(|s| runs[0].slice(s, batch_size.min(n - s))).collect());
    }
    let starts: Vec<usize> = (0..perm.len()).step_by(batch_size).collect();
    if runs.len() == 1 {
        return take_from_one_run(&runs[0], perm, &starts, batch_size);
    }
    let gatherer = Gatherer::new(&runs, perm)?;
    let piece = |slots: &mut RunSlots, s: usize| gatherer.gather_range(slots, s, (s + batch_size).min(perm.len()));
    // One output batch is gathered on the calling thread (no hand-off to the pool).
    let pieces: Vec<Vec<RecordBatch>> = if starts.len() == 1 {
        vec![piece(&mut RunSlots::new(runs.len()), 0)?]
    } else {
        starts.into_par_iter().map_init(|| RunSlots::new(runs.len()), piece).collect::<std::result::Result<_, ArrowError>>()?
    };
    Ok(pieces.into_iter().flatten().collect())
}

/// A permutation built for other runs (run offsets that are not the runs' row counts, an
/// index past the last row) is an error here, not a panic in arrow's gathers.
fn check_fits(runs: &[RecordBatch], perm: &Permutation) -> Result<()> {
    let offsets = &perm.run_offsets;
    let matches_runs = offsets.len() == runs.len() + 1
        && offsets[0] == 0
        && runs.iter().zip(offsets.windows(2)).all(|(run, w)| w[1].checked_sub(w[0]) == Some(run.num_rows()));
    if !matches_runs {
        let rows: Vec<usize> = runs.iter().map(RecordBatch::num_rows).collect();
        return Err(Error::InvalidArgument(format!(
            "the permutation's run offsets {offsets:?} do not match the runs' row counts {rows:?}"
        )));
    }
    let total = offsets[runs.len()];
    let largest = match &perm.indices {
        Indices::U32(v) => v.par_iter().max().map(|&i| i as usize),
        Indices::U64(v) => v.par_iter().max().map(|&i| usize::try_from(i).unwrap_or(usize::MAX)),
    };
    match largest {
        Some(i) if i >= total => Err(Error::InvalidArgument(format!("the permutation's index {i} is past the runs' {total} rows"))),
        _ => Ok(()),
    }
}

/// Rows of one run (a sort of one batch) through arrow's `take`: output row `i` reads its
/// view, offset or key from the one source array as it is, where `interleave` would remap
/// every string view's buffer index (it serves any number of arrays) at about twice the
/// cost per row. Nothing needs a split: a dictionary column keeps the run's dictionary
/// (its keys fit their type already), and a permutation never takes more bytes than the
/// run holds (no offset overflow).
fn take_from_one_run(run: &RecordBatch, perm: &Permutation, starts: &[usize], batch_size: usize) -> Result<Vec<RecordBatch>> {
    let piece = |s: usize| -> std::result::Result<RecordBatch, ArrowError> {
        let e = (s + batch_size).min(perm.len());
        match &perm.indices {
            Indices::U32(v) => take_record_batch(run, &UInt32Array::from(v[s..e].to_vec())),
            Indices::U64(v) => take_record_batch(run, &UInt64Array::from(v[s..e].to_vec())),
        }
    };
    let batches = if starts.len() == 1 {
        vec![piece(starts[0])?]
    } else {
        starts.par_iter().map(|&s| piece(s)).collect::<std::result::Result<_, ArrowError>>()?
    };
    Ok(batches)
}

/// Whether output row `i` is input row `i` for every `i`.
fn is_identity(indices: &Indices) -> bool {
    match indices {
        Indices::U32(v) => v.par_iter().enumerate().all(|(i, &x)| x as usize == i),
        Indices::U64(v) => v.par_iter().enumerate().all(|(i, &x)| x as usize == i),
    }
}

/// Where an output row comes from: (run, row within the run).
type Source = (usize, usize);

/// Runs up to which an output batch is gathered from every run's arrays as they are.
const FEW_RUNS: usize = 64;

/// Renumbers an output batch's rows over the runs it references. arrow's `interleave`
/// looks at every array it is given (its type, its nulls, its value buffer) for every
/// output batch, so a batch gathered from thousands of runs (a sort's sorted pieces) would
/// cost O(runs) however few rows it takes from each: quadratic over a whole sort. With the
/// runs renumbered, a batch costs O(its rows).
struct RunSlots {
    /// Per run, its number among the current batch's runs, or `u32::MAX`; every entry is
    /// `u32::MAX` between batches.
    slot: Vec<u32>,
}

impl RunSlots {
    fn new(runs: usize) -> Self {
        Self { slot: if runs > FEW_RUNS { vec![u32::MAX; runs] } else { Vec::new() } }
    }

    /// The runs `idx` references (in order of first reference) and `idx` over them; `None`
    /// for few runs (the batch takes every run's arrays).
    fn renumber(&mut self, idx: &[Source]) -> Option<(Vec<usize>, Vec<Source>)> {
        if self.slot.is_empty() {
            return None;
        }
        let mut used: Vec<usize> = Vec::new();
        let local = idx
            .iter()
            .map(|&(run, row)| {
                if self.slot[run] == u32::MAX {
                    self.slot[run] = used.len() as u32;
                    used.push(run);
                }
                (self.slot[run] as usize, row)
            })
            .collect();
        for &run in &used {
            self.slot[run] = u32::MAX;
        }
        Some((used, local))
    }
}

/// The id of a null key in [`DictColumn::ids`].
const NULL_ID: u32 = u32::MAX;

/// A dictionary column prepared for gathering (see the module doc).
struct DictColumn {
    /// The column's key type.
    key_type: DataType,
    /// The most distinct values one output batch can hold (the key type's maximum + 1).
    capacity: usize,
    /// Per run, its dictionary values.
    values: Vec<ArrayRef>,
    /// Per run and row, the global id of the row's value, or [`NULL_ID`] for a null key.
    ids: Vec<Vec<u32>>,
    /// Per global id, where one copy of the value lies: (run, index in its dictionary).
    reps: Vec<(usize, usize)>,
}

/// How a column is gathered.
enum Column {
    /// arrow's `interleave` of the runs' arrays.
    Interleave(Vec<ArrayRef>),
    /// With an exact dictionary merge.
    Dictionary(DictColumn),
    /// Fixed-width values read through the runs' value pointers.
    Fixed(FixedColumn),
    /// String or binary views read as fixed-width values.
    View(ViewColumn),
    /// Strings or bytes with offsets: offsets read as fixed-width values, bytes copied.
    Bytes(BytesColumn),
}

impl Column {
    /// The column of `arrays` (one per run, all of `data_type`) read through the runs'
    /// addresses where its type allows, else interleaved (dictionaries included).
    fn by_address(arrays: Vec<ArrayRef>, data_type: &DataType) -> Column {
        let column = match data_type {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                BytesColumn::new(&arrays, data_type).map(Column::Bytes)
            }
            DataType::Utf8View | DataType::BinaryView => ViewColumn::new(&arrays, data_type).map(Column::View),
            DataType::Dictionary(..) => None,
            _ => FixedColumn::new(&arrays, data_type).map(Column::Fixed),
        };
        column.unwrap_or(Column::Interleave(arrays))
    }
}

/// A fixed-width column (every type with a `primitive_width`: integers, floats, decimals,
/// dates, times, timestamps, durations, intervals), gathered by reading each output row's
/// value at `value_start[run] + row * width`. arrow's `interleave` does the same through a
/// downcast array per run and a bounds-checked `value(row)`; this table of addresses, read
/// eight rows at a time, gathered 2.0x faster on 2 cores and 1.3-1.4x on 16 threads
/// (`benches/gather.rs`: 4 u64 columns, 16M rows from 2048 batches in random order).
struct FixedColumn {
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
    fn new(arrays: &[ArrayRef], data_type: &DataType) -> Option<Self> {
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
    fn gather(&self, idx: &[Source]) -> std::result::Result<ArrayRef, ArrowError> {
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
unsafe fn read_at<T: Copy>(start: &[usize], idx: &[Source]) -> Vec<T> {
    // SAFETY: the caller's contract (above).
    read_eight_at_a_time(idx, |&(run, row)| unsafe { (start[run] as *const T).add(row).read_unaligned() })
}

/// `read` of each row of `idx`, eight independent reads at a time (more cache misses in
/// flight; the reads of a random order miss the cache on nearly every row), written straight
/// into the output (as arrow's `interleave` does).
fn read_eight_at_a_time<V: Copy>(idx: &[Source], read: impl Fn(&Source) -> V) -> Vec<V> {
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
fn run_nulls(arrays: &[ArrayRef]) -> Option<Vec<Option<NullBuffer>>> {
    let any_nulls = arrays.iter().any(|a| a.null_count() > 0);
    any_nulls.then(|| arrays.iter().map(|a| a.logical_nulls()).collect())
}

/// The validity of the rows `idx` from the runs' (`run_nulls`); `None` where none is null.
fn gathered_nulls(nulls: Option<&Vec<Option<NullBuffer>>>, idx: &[Source]) -> Option<NullBuffer> {
    let nulls = nulls?;
    let valid = BooleanBuffer::collect_bool(idx.len(), |i| {
        let (run, row) = idx[i];
        nulls[run].as_ref().is_none_or(|n| n.is_valid(row))
    });
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

/// A string or binary view column (`Utf8View`, `BinaryView`), its 16-byte views read as
/// `FixedColumn` reads values. A view of more than 12 bytes points into one of its run's
/// data buffers: its buffer index is renumbered over the buffers the output batch
/// references (in order of first reference, as arrow's `interleave` does), so that a batch
/// holds only the buffers it uses.
struct ViewColumn {
    data_type: DataType,
    /// Per run, the address of its first view.
    view_start: Vec<usize>,
    /// Per run, its data buffers.
    buffers: Vec<Vec<Buffer>>,
    /// Per run, the number of its first data buffer among all runs' buffers.
    first_buffer: Vec<usize>,
    /// The data buffers of all runs.
    total_buffers: usize,
    /// Per run, its validity, where some run's column holds a null.
    nulls: Option<Vec<Option<NullBuffer>>>,
}

/// The bits of a view's buffer index (`ByteView::buffer_index`: bits 64..96 of the view).
const VIEW_BUFFER_SHIFT: u32 = 64;

impl ViewColumn {
    /// A column of `arrays` (one per run), or `None` where it is not a view column.
    fn new(arrays: &[ArrayRef], data_type: &DataType) -> Option<Self> {
        let (mut view_start, mut buffers, mut first_buffer) = (Vec::new(), Vec::new(), Vec::new());
        let mut next_buffer = 0;
        for column in arrays {
            let (views, data) = match data_type {
                DataType::Utf8View => {
                    let a = column.as_string_view();
                    (a.views(), a.data_buffers())
                }
                DataType::BinaryView => {
                    let a = column.as_binary_view();
                    (a.views(), a.data_buffers())
                }
                _ => return None,
            };
            view_start.push(views.as_ptr() as usize);
            first_buffer.push(next_buffer);
            next_buffer += data.len();
            buffers.push(data.to_vec());
        }
        Some(ViewColumn {
            data_type: data_type.clone(),
            view_start,
            buffers,
            first_buffer,
            total_buffers: next_buffer,
            nulls: run_nulls(arrays),
        })
    }

    /// The views of the rows `idx` as one array.
    fn gather(&self, idx: &[Source]) -> ArrayRef {
        // SAFETY: `view_start` holds each run's first view (`ViewColumn::new`).
        let mut views: Vec<u128> = unsafe { read_at::<u128>(&self.view_start, idx) };
        let mut out_buffers: Vec<Buffer> = Vec::new();
        // Per buffer of all runs, its index in `out_buffers` or `u32::MAX` (made at the first
        // long value: a batch of short strings needs none).
        let mut renumbered: Vec<u32> = Vec::new();
        for (view, &(run, _)) in views.iter_mut().zip(idx) {
            if (*view as u32) <= 12 {
                continue; // inline: the bytes are in the view
            }
            if renumbered.is_empty() {
                renumbered = vec![u32::MAX; self.total_buffers];
            }
            let index = (*view >> VIEW_BUFFER_SHIFT) as u32 as usize;
            let Some(buffer) = self.buffers[run].get(index) else {
                // Only a null slot's view can point past its run's buffers (valid views are
                // checked when their array is built): an empty view, not a panic.
                *view = 0;
                continue;
            };
            let new_index = &mut renumbered[self.first_buffer[run] + index];
            if *new_index == u32::MAX {
                *new_index = out_buffers.len() as u32;
                out_buffers.push(buffer.clone());
            }
            *view = (*view & !((u32::MAX as u128) << VIEW_BUFFER_SHIFT)) | ((*new_index as u128) << VIEW_BUFFER_SHIFT);
        }
        let nulls = gathered_nulls(self.nulls.as_ref(), idx);
        let views = ScalarBuffer::from(views);
        // Every view is one of a valid view array of this type (or the empty view), its
        // buffer index renumbered to the same buffer's place in `out_buffers`: what
        // `try_new` checks (lengths, offsets within the buffer, UTF-8 for strings) held in
        // the runs' arrays.
        match self.data_type {
            // SAFETY: as said above.
            DataType::Utf8View => Arc::new(unsafe { StringViewArray::new_unchecked(views, out_buffers, nulls) }),
            // SAFETY: as said above.
            _ => Arc::new(unsafe { BinaryViewArray::new_unchecked(views, out_buffers, nulls) }),
        }
    }
}

/// A string or binary column with offsets (`Utf8`, `LargeUtf8`, `Binary`, `LargeBinary`):
/// each row's start and end offsets read together (adjacent: one cache miss), then its
/// bytes copied from its run's value buffer.
struct BytesColumn {
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
    fn new(arrays: &[ArrayRef], data_type: &DataType) -> Option<Self> {
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
    fn gather(&self, idx: &[Source]) -> std::result::Result<ArrayRef, ArrowError> {
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

/// One column of several arrays (pieces) gathered by (piece, row within the piece)
/// locations, read through the pieces' addresses as [`gather`] reads a column of its runs
/// (arrow's `interleave` for the types it does not read so: booleans, lists, structs,
/// dictionaries). Built once for many gathers: the column phase of `corank sort` gathers
/// each output row group's values from every input row group's piece.
#[cfg(feature = "parquet")]
pub(crate) struct PieceGather {
    /// The pieces: the column's addresses point into their buffers.
    _pieces: Vec<ArrayRef>,
    /// Each piece's length.
    lengths: Vec<usize>,
    column: Column,
}

#[cfg(feature = "parquet")]
impl PieceGather {
    /// The gather of `pieces` (all of one type; none gathers nothing).
    pub(crate) fn new(pieces: Vec<ArrayRef>) -> Result<Self> {
        let Some(data_type) = pieces.first().map(|p| p.data_type().clone()) else {
            return Ok(PieceGather { _pieces: pieces, lengths: vec![], column: Column::Interleave(vec![]) });
        };
        if let Some(other) = pieces.iter().find(|p| p.data_type() != &data_type) {
            return Err(Error::InvalidArgument(format!("arrays of {data_type} and {} gathered as one column", other.data_type())));
        }
        let column = Column::by_address(pieces.clone(), &data_type);
        let lengths = pieces.iter().map(|p| p.len()).collect();
        Ok(PieceGather { _pieces: pieces, lengths, column })
    }

    /// The values at `from` (piece, row within the piece) as one array.
    pub(crate) fn gather(&self, from: &[(usize, usize)]) -> Result<ArrayRef> {
        // The address reads need every location inside its piece.
        let outside = |&&(piece, row): &&(usize, usize)| self.lengths.get(piece).is_none_or(|&n| row >= n);
        if let Some((piece, row)) = from.iter().find(outside) {
            return Err(Error::InvalidArgument(format!("row {row} of piece {piece} gathered from {} pieces", self.lengths.len())));
        }
        Ok(match &self.column {
            Column::Fixed(fixed) => fixed.gather(from)?,
            Column::View(views) => views.gather(from),
            Column::Bytes(bytes) => bytes.gather(from)?,
            Column::Interleave(arrays) => {
                let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                interleave(&refs, from)?
            }
            Column::Dictionary(_) => return Err(Error::Internal("a dictionary column built for a piece gather".into())),
        })
    }
}

struct Gatherer<'a> {
    runs: &'a [RecordBatch],
    perm: &'a Permutation,
    locator: RunLocator<'a>,
    schema: Arc<Schema>,
    /// `None` when every column goes through `interleave` (arrow's `interleave_record_batch`
    /// then).
    columns: Option<Vec<Column>>,
    /// Whether some column goes through `interleave` (which takes the runs' arrays).
    interleaves: bool,
}

impl<'a> Gatherer<'a> {
    fn new(runs: &'a [RecordBatch], perm: &'a Permutation) -> Result<Self> {
        let schema = runs[0].schema();
        let columns = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(c, f)| {
                let arrays: Vec<ArrayRef> = runs.iter().map(|b| b.column(c).clone()).collect();
                Ok(match f.data_type() {
                    DataType::Dictionary(k, v) => match prepare_dictionary(runs, c, k, v)? {
                        Some(d) => Column::Dictionary(d),
                        None => Column::Interleave(arrays),
                    },
                    data_type => Column::by_address(arrays, data_type),
                })
            })
            .collect::<std::result::Result<Vec<_>, ArrowError>>()?;
        let all_interleaved = columns.iter().all(|c| matches!(c, Column::Interleave(_)));
        let interleaves = columns.iter().any(|c| matches!(c, Column::Interleave(_)));
        let columns = (!all_interleaved).then_some(columns);
        Ok(Gatherer { runs, perm, locator: RunLocator::new(&perm.run_offsets), schema, columns, interleaves })
    }

    /// The output rows `s..e`: one batch, or several where it had to be split.
    fn gather_range(&self, slots: &mut RunSlots, s: usize, e: usize) -> std::result::Result<Vec<RecordBatch>, ArrowError> {
        let mut out = Vec::new();
        for (a, b) in self.dictionary_cuts(s, e) {
            match self.build(slots, a, b) {
                Ok(batch) => out.push(batch),
                Err(err) if b - a > 1 && splittable(&err) => {
                    let mid = a + (b - a) / 2;
                    out.extend(self.gather_range(slots, a, mid)?);
                    out.extend(self.gather_range(slots, mid, b)?);
                }
                Err(err) => return Err(err),
            }
        }
        Ok(out)
    }

    /// `s..e` cut into the longest consecutive pieces whose distinct dictionary values fit
    /// every dictionary column's key type.
    fn dictionary_cuts(&self, s: usize, e: usize) -> Vec<(usize, usize)> {
        let dicts: Vec<&DictColumn> = match &self.columns {
            None => return vec![(s, e)],
            Some(columns) => columns
                .iter()
                .filter_map(|c| match c {
                    // (Fewer rows, or fewer values in all, than the key type holds: no cut.)
                    Column::Dictionary(d) if d.capacity < e - s && d.capacity < d.reps.len() => Some(d),
                    _ => None,
                })
                .collect(),
        };
        if dicts.is_empty() {
            return vec![(s, e)];
        }
        let mut cuts = Vec::new();
        let mut seen: Vec<HashSet<u32>> = vec![HashSet::new(); dicts.len()];
        let mut start = s;
        for i in s..e {
            let (run, row) = self.locator.locate(self.perm.indices.get(i));
            let full = dicts.iter().zip(&seen).any(|(d, set)| {
                let id = d.ids[run][row];
                id != NULL_ID && set.len() >= d.capacity && !set.contains(&id)
            });
            if full {
                cuts.push((start, i));
                start = i;
                seen.iter_mut().for_each(HashSet::clear);
            }
            for (d, set) in dicts.iter().zip(seen.iter_mut()) {
                let id = d.ids[run][row];
                if id != NULL_ID {
                    set.insert(id);
                }
            }
        }
        cuts.push((start, e));
        cuts
    }

    /// The output rows `a..b` as one batch.
    fn build(&self, slots: &mut RunSlots, a: usize, b: usize) -> std::result::Result<RecordBatch, ArrowError> {
        let idx: Vec<(usize, usize)> = match &self.perm.indices {
            Indices::U32(v) => v[a..b].iter().map(|&g| self.locator.locate(g as usize)).collect(),
            Indices::U64(v) => v[a..b].iter().map(|&g| self.locator.locate(g as usize)).collect(),
        };
        // The arrays to interleave: every run's, or those of the runs `idx` references (none
        // where no column is interleaved).
        let interleaves = self.interleaves;
        let renumbered = if interleaves { slots.renumber(&idx) } else { None };
        let every_run: Vec<usize>;
        let (runs, local_idx): (&[usize], &[(usize, usize)]) = match &renumbered {
            Some((used, local)) => (used, local),
            None if interleaves => {
                every_run = (0..self.runs.len()).collect();
                (&every_run, &idx)
            }
            None => (&[], &[]),
        };
        let Some(columns) = &self.columns else {
            let refs: Vec<&RecordBatch> = runs.iter().map(|&r| &self.runs[r]).collect();
            return interleave_record_batch(&refs, local_idx);
        };
        let arrays = columns
            .iter()
            .map(|c| match c {
                Column::Interleave(arrays) => {
                    let refs: Vec<&dyn Array> = runs.iter().map(|&r| arrays[r].as_ref()).collect();
                    interleave(&refs, local_idx)
                }
                Column::Dictionary(d) => by_key_type!(&d.key_type, gather_dictionary(d, &idx, slots)),
                Column::Fixed(fixed) => fixed.gather(&idx),
                Column::View(views) => Ok(views.gather(&idx)),
                Column::Bytes(bytes) => bytes.gather(&idx),
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &RecordBatchOptions::new().with_row_count(Some(idx.len())))
    }
}

/// Errors that a smaller batch avoids: offsets (or dictionary keys) out of range.
fn splittable(e: &ArrowError) -> bool {
    matches!(e, ArrowError::OffsetOverflowError(_) | ArrowError::DictionaryKeyOverflowError)
        || e.to_string().to_lowercase().contains("overflow")
}

/// Prepares dictionary column `c`: global ids of the referenced values. `None` where the
/// row format cannot encode the value type (arrow's interleave gathers the column then).
fn prepare_dictionary(
    runs: &[RecordBatch],
    c: usize,
    key_type: &DataType,
    value_type: &DataType,
) -> std::result::Result<Option<DictColumn>, ArrowError> {
    by_key_type!(key_type, prepare_dictionary_keys(runs, c, key_type, value_type))
}

/// A run's dictionary column, its referenced values found.
struct Referenced {
    /// Per dictionary index, its position in `indices`, or `NULL_ID` if no row references it.
    slot: Vec<u32>,
    /// The referenced dictionary indices, in order of first reference.
    indices: Vec<u32>,
    /// The referenced values' row-format bytes, in the order of `indices`.
    rows: Rows,
}

fn prepare_dictionary_keys<K: ArrowDictionaryKeyType>(
    runs: &[RecordBatch],
    c: usize,
    key_type: &DataType,
    value_type: &DataType,
) -> std::result::Result<Option<DictColumn>, ArrowError> {
    let fields = vec![SortField::new(value_type.clone())];
    if !RowConverter::supports_fields(&fields) {
        return Ok(None);
    }
    let converter = RowConverter::new(fields)?;
    let dicts: Vec<&DictionaryArray<K>> = runs.iter().map(|b| b.column(c).as_dictionary::<K>()).collect();
    // 1. Per run (in parallel): the referenced values and their row bytes.
    let referenced: Vec<Referenced> = dicts
        .par_iter()
        .map(|dict| {
            let values = dict.values();
            if values.len() >= NULL_ID as usize {
                return Err(ArrowError::InvalidArgumentError(format!("dictionary of {} values is too large", values.len())));
            }
            let mut slot = vec![NULL_ID; values.len()];
            let mut indices: Vec<u32> = Vec::new();
            let keys = dict.keys();
            for i in 0..keys.len() {
                if keys.is_valid(i) {
                    let k = keys.value(i).as_usize();
                    if slot[k] == NULL_ID {
                        slot[k] = indices.len() as u32;
                        indices.push(k as u32);
                    }
                }
            }
            let taken = take(values.as_ref(), &UInt32Array::from(indices.clone()), None)?;
            let rows = converter.convert_columns(&[taken])?;
            Ok(Referenced { slot, indices, rows })
        })
        .collect::<std::result::Result<_, ArrowError>>()?;
    // 2. Global ids, in run order.
    let mut global: HashMap<&[u8], u32> = HashMap::new();
    let mut reps: Vec<(usize, usize)> = Vec::new();
    let mut local_ids: Vec<Vec<u32>> = Vec::with_capacity(runs.len());
    for (r, re) in referenced.iter().enumerate() {
        let mut ids = Vec::with_capacity(re.indices.len());
        for (j, &k) in re.indices.iter().enumerate() {
            let next = reps.len() as u32;
            let id = *global.entry(re.rows.row(j).data()).or_insert(next);
            if id == next {
                if next == NULL_ID {
                    return Err(ArrowError::InvalidArgumentError("more than 2^32 - 1 distinct dictionary values".into()));
                }
                reps.push((r, k as usize));
            }
            ids.push(id);
        }
        local_ids.push(ids);
    }
    drop(global);
    // 3. Per run and row (in parallel): the global id.
    let ids: Vec<Vec<u32>> = dicts
        .par_iter()
        .zip(referenced.par_iter().zip(local_ids.par_iter()))
        .map(|(dict, (re, local))| {
            let keys = dict.keys();
            (0..keys.len()).map(|i| if keys.is_valid(i) { local[re.slot[keys.value(i).as_usize()] as usize] } else { NULL_ID }).collect()
        })
        .collect();
    let capacity = match key_type {
        DataType::Int8 => 1 << 7,
        DataType::UInt8 => 1 << 8,
        DataType::Int16 => 1 << 15,
        DataType::UInt16 => 1 << 16,
        DataType::Int32 => 1 << 31,
        DataType::UInt32 => usize::try_from(1u64 << 32).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    let values = dicts.iter().map(|d| d.values().clone()).collect();
    Ok(Some(DictColumn { key_type: key_type.clone(), capacity, values, ids, reps }))
}

/// The dictionary column `d` at the output rows `idx`: the rows' distinct values (in order
/// of first appearance) as the dictionary, keys remapped to it.
fn gather_dictionary<K: ArrowDictionaryKeyType>(
    d: &DictColumn,
    idx: &[(usize, usize)],
    slots: &mut RunSlots,
) -> std::result::Result<ArrayRef, ArrowError> {
    let mut reps: Vec<(usize, usize)> = Vec::new();
    let mut keys: Vec<K::Native> = Vec::with_capacity(idx.len());
    let mut valid: Vec<bool> = Vec::with_capacity(idx.len());
    let local_key = |id: u32, reps: &mut Vec<(usize, usize)>, slot: &mut u32| -> std::result::Result<K::Native, ArrowError> {
        if *slot == NULL_ID {
            *slot = reps.len() as u32;
            reps.push(d.reps[id as usize]);
        }
        K::Native::from_usize(*slot as usize).ok_or(ArrowError::DictionaryKeyOverflowError)
    };
    // The global id -> batch key table: dense where the global dictionary is small.
    if d.reps.len() <= 8 * idx.len() + 4096 {
        let mut table = vec![NULL_ID; d.reps.len()];
        for &(run, row) in idx {
            let id = d.ids[run][row];
            if id == NULL_ID {
                keys.push(K::Native::default());
                valid.push(false);
            } else {
                keys.push(local_key(id, &mut reps, &mut table[id as usize])?);
                valid.push(true);
            }
        }
    } else {
        let mut table: HashMap<u32, u32> = HashMap::with_capacity(idx.len());
        for &(run, row) in idx {
            let id = d.ids[run][row];
            if id == NULL_ID {
                keys.push(K::Native::default());
                valid.push(false);
            } else {
                keys.push(local_key(id, &mut reps, table.entry(id).or_insert(NULL_ID))?);
                valid.push(true);
            }
        }
    }
    let nulls = valid.iter().any(|v| !v).then(|| arrow::buffer::NullBuffer::from(valid));
    let keys = PrimitiveArray::<K>::new(keys.into(), nulls);
    let values = if reps.is_empty() {
        new_empty_array(d.values[0].data_type())
    } else {
        // Only the dictionaries the batch takes values from, where there are many (`RunSlots`).
        match slots.renumber(&reps) {
            Some((used, local)) => {
                let refs: Vec<&dyn Array> = used.iter().map(|&run| d.values[run].as_ref()).collect();
                interleave(&refs, &local)?
            }
            None => {
                let refs: Vec<&dyn Array> = d.values.iter().map(|a| a.as_ref()).collect();
                interleave(&refs, &reps)?
            }
        }
    };
    Ok(Arc::new(DictionaryArray::<K>::try_new(keys, values)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Int32Array, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int32Type;

    /// Pieces of one column each (sliced, some with nulls), of the types read by address and
    /// of those interleaved.
    #[cfg(feature = "parquet")]
    fn columns_of_pieces() -> Vec<Vec<ArrayRef>> {
        let piece = |p: usize| -> Vec<ArrayRef> {
            let n = 20 + p;
            let valid = |i: usize| p != 1 || i % 4 != 1;
            let cols: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from_iter((0..n).map(|i| valid(i).then_some((p * 1000 + i) as i64)))),
                Arc::new(StringArray::from_iter((0..n).map(|i| valid(i).then(|| format!("p{p}:{}", "s".repeat(i % 5)))))),
                Arc::new(StringViewArray::from_iter((0..n).map(|i| valid(i).then(|| format!("piece {p}, a long enough value {i}"))))),
                Arc::new(BooleanArray::from_iter((0..n).map(|i| valid(i).then_some(i % 3 == p % 2)))),
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>((0..n).map(|i| valid(i).then(|| vec![Some(i as i32); p])))),
                Arc::new((0..n).map(|i| ["x", "y", "z"][(i + p) % 3]).collect::<DictionaryArray<Int8Type>>()),
            ];
            cols.into_iter().map(|a| a.slice(1, n - 1)).collect()
        };
        let pieces: Vec<Vec<ArrayRef>> = (0..4).map(piece).collect();
        (0..pieces[0].len()).map(|c| pieces.iter().map(|p| p[c].clone()).collect()).collect()
    }

    #[cfg(feature = "parquet")]
    #[test]
    fn piece_gather_gives_interleave() {
        for column in columns_of_pieces() {
            let gather = PieceGather::new(column.clone()).unwrap();
            let from: Vec<(usize, usize)> = (0..200).map(|i| (i * 7 % 4, i * 13 % 19)).collect();
            let refs: Vec<&dyn Array> = column.iter().map(|a| a.as_ref()).collect();
            for rows in [&from[..], &from[..1], &[]] {
                let want = interleave(&refs, rows).unwrap();
                assert_eq!(gather.gather(rows).unwrap().to_data(), want.to_data(), "{}", column[0].data_type());
            }
        }
    }

    #[cfg(feature = "parquet")]
    #[test]
    fn piece_gather_refuses_rows_outside_and_mixed_types() {
        let column = columns_of_pieces().swap_remove(0);
        let gather = PieceGather::new(column.clone()).unwrap();
        let last = column[3].len();
        assert!(gather.gather(&[(3, last - 1)]).is_ok());
        for outside in [(3, last), (4, 0)] {
            assert!(matches!(gather.gather(&[(0, 0), outside]), Err(Error::InvalidArgument(_))), "{outside:?}");
        }
        let mixed = vec![column[0].clone(), Arc::new(Int32Array::from(vec![1])) as ArrayRef];
        assert!(matches!(PieceGather::new(mixed), Err(Error::InvalidArgument(_))));
        assert!(PieceGather::new(vec![]).unwrap().gather(&[(0, 0)]).is_err());
    }
}

//! The exact dictionary merge (see the module doc of `gather`): global ids of the values the
//! runs' rows reference, compared by their `arrow::row` bytes ([`DictColumn::prepare`]),
//! and per output batch its distinct values as the dictionary, keys remapped
//! ([`DictColumn::gather`]).

use super::{RunSlots, Source};
use arrow::array::{new_empty_array, Array, ArrayRef, AsArray, DictionaryArray, PrimitiveArray, RecordBatch, UInt32Array};
use arrow::compute::{interleave, take};
use arrow::datatypes::{
    ArrowDictionaryKeyType, ArrowNativeType, DataType, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};
use rayon::prelude::*;
use std::collections::HashMap;
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

/// The id of a null key in [`DictColumn::ids`].
pub(super) const NULL_ID: u32 = u32::MAX;

/// A dictionary column prepared for gathering (see the module doc).
pub(super) struct DictColumn {
    /// The column's key type.
    pub(super) key_type: DataType,
    /// The most distinct values one output batch can hold (the key type's maximum + 1).
    pub(super) capacity: usize,
    /// Per run, its dictionary values.
    values: Vec<ArrayRef>,
    /// Per run and row, the global id of the row's value, or [`NULL_ID`] for a null key.
    pub(super) ids: Vec<Vec<u32>>,
    /// Per global id, where one copy of the value lies: (run, index in its dictionary).
    pub(super) reps: Vec<(usize, usize)>,
}

impl DictColumn {
    /// Prepares dictionary column `c`: global ids of the referenced values. `None` where the
    /// row format cannot encode the value type (arrow's interleave gathers the column then).
    pub(super) fn prepare(
        runs: &[RecordBatch],
        c: usize,
        key_type: &DataType,
        value_type: &DataType,
    ) -> std::result::Result<Option<DictColumn>, ArrowError> {
        by_key_type!(key_type, prepare_dictionary_keys(runs, c, key_type, value_type))
    }

    /// The column at the output rows `idx` (see [`gather_dictionary`]).
    pub(super) fn gather(&self, idx: &[Source], slots: &mut RunSlots) -> std::result::Result<ArrayRef, ArrowError> {
        by_key_type!(&self.key_type, gather_dictionary(self, idx, slots))
    }
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

//! Row family: every type the fixed and byte families do not encode (lists, structs, maps,
//! unions, ...) whose order arrow-row defines. Such a column becomes its arrow-row bytes under
//! its own `SortOptions` (the null placement and the direction are in the bytes), and those
//! bytes a LargeBinary value that the byte family encodes, ascending and with no null bit: a
//! prefix and a length code, exact where every value fits, else resolved by arrow-row.

use super::layout::is_direct;
use crate::error::Result;
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, LargeBinaryArray};
use arrow::compute::SortOptions;
use arrow::row::{RowConverter, SortField};
use std::sync::Arc;

/// Whether arrow-row orders values of `dt` (what this family encodes).
pub fn orders(dt: &arrow::datatypes::DataType) -> bool {
    RowConverter::supports_fields(&[SortField::new(dt.clone())])
}

/// The runs with every key column that the other families do not encode replaced by its
/// arrow-row bytes, and the specs with those columns ascending (their options are in the
/// bytes). A column whose runs disagree on its type, or that arrow-row cannot order, is
/// left as it is, for the layout to name.
pub fn as_row_bytes(mut runs: Vec<Vec<ArrayRef>>, specs: &[SortKey]) -> Result<(Vec<Vec<ArrayRef>>, Vec<SortKey>)> {
    let mut specs = specs.to_vec();
    let Some(first) = runs.first() else { return Ok((runs, specs)) };
    let types: Vec<_> = first.iter().map(|a| a.data_type().clone()).collect();
    for (c, dt) in types.into_iter().enumerate().take(specs.len()) {
        if is_direct(&dt) || !orders(&dt) || runs.iter().any(|cols| cols.get(c).map(|a| a.data_type()) != Some(&dt)) {
            continue;
        }
        let converter = RowConverter::new(vec![SortField::new_with_options(dt, specs[c].options)])?;
        for cols in runs.iter_mut() {
            let rows = converter.convert_columns(std::slice::from_ref(&cols[c]))?;
            cols[c] = Arc::new(LargeBinaryArray::from_iter_values(rows.iter().map(|r| r.data())));
        }
        specs[c].options = SortOptions { descending: false, nulls_first: false };
    }
    Ok((runs, specs))
}

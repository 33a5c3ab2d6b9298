//! Runs: the order the row groups declare, and which neighbouring row groups continue each
//! other by their statistics (the module doc of [`super`]).

use super::plan::show_keys;
use super::InputFile;
use crate::error::{Error, Result, Setting};
use crate::parquet::sorting_columns::DeclaredOrder;
use crate::sort_key::SortKey;
use arrow::array::{Array, ArrayRef};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::RowGroupMetaData;
use std::path::Path;

/// The sort keys a row group's `sorting_columns` declare, or `None`.
/// An unusable declaration (a nested column, an index out of range) counts as none.
pub(super) fn declared_order(input: &InputFile, rg: &RowGroupMetaData) -> Option<Vec<SortKey>> {
    match crate::parquet::sorting_columns::declared_order(input.metadata.parquet_schema(), rg) {
        DeclaredOrder::Keys(keys) => Some(keys),
        DeclaredOrder::Undeclared | DeclaredOrder::Unusable => None,
    }
}

/// The order every non-empty row group of every file declares, if they all agree.
pub(super) fn common_declared_order(files: &[InputFile]) -> Result<Vec<SortKey>> {
    let mut common: Option<(Vec<SortKey>, &Path)> = None;
    for f in files {
        for (g, rg) in f.metadata.metadata().row_groups().iter().enumerate() {
            if rg.num_rows() == 0 {
                continue;
            }
            let Some(order) = declared_order(f, rg) else {
                return Err(Error::SettingNeeded {
                    setting: Setting::SortKey,
                    detail: format!("{}: row group {g} has no sorting_columns metadata", f.path.display()),
                });
            };
            match &common {
                None => common = Some((order, &f.path)),
                Some((c, first)) if *c != order => {
                    return Err(Error::SettingNeeded {
                        setting: Setting::SortKey,
                        detail: format!(
                            "{} is sorted by {} but {} by {}",
                            first.display(),
                            show_keys(c),
                            f.path.display(),
                            show_keys(&order)
                        ),
                    })
                }
                Some(_) => {}
            }
        }
    }
    common.map(|(c, _)| c).ok_or_else(|| Error::SettingNeeded {
        setting: Setting::SortKey,
        detail: "the inputs hold no rows to read a sort order from".into(),
    })
}

/// Whether statistics show row group `g + 1` starting at or after the end of `g` in the
/// order of `keys`, for every `g` (see the module doc). Any doubt is `false`: a false
/// `false` only costs a run.
///
/// Per key column the statistics bound the column's values in a row group: in sort order
/// its values lie between a start (the min, the max when descending, or NULL where nulls
/// sort first and the row group holds any) and an end (likewise). So the last row of `g`,
/// `L`, and the first of `g + 1`, `F`, satisfy `L_c <= end_c(g)` and `start_c(g + 1) <= F_c`
/// for every column `c`, and comparing the tuples `end(g)` and `start(g + 1)` column by
/// column decides: the first column where `end_c(g) < start_c(g + 1)` gives `L < F`,
/// provided every column before it has `end = start` (then `L_c <= F_c` there, and either
/// some earlier column already has `L_c < F_c`, or all tie); all columns equal gives
/// `L <= F`; a column with `end > start`, or one whose statistics are missing, decides
/// nothing (`false`). Equal boundary keys may join: both row groups belong to one file,
/// and stability puts `g`'s rows first either way. Truncated string statistics stay bounds
/// (a truncated max only grows, a truncated min only shrinks). Float columns are unknown
/// (NaN and -0 escape statistics). A Hive partition column ties everywhere (one value a file).
pub(super) fn continues(input: &InputFile, keys: &[SortKey]) -> Vec<bool> {
    use std::cmp::Ordering;
    let row_groups = input.metadata.metadata().row_groups();
    let pairs = row_groups.len().saturating_sub(1);
    let schema = input.metadata.schema();
    // Per column and pair, `end_c(g)` against `start_c(g + 1)` (`None`: unknown).
    let column = |key: &SortKey| -> Option<Vec<Option<Ordering>>> {
        // A Hive partition column holds one value in a whole file: every pair ties.
        if input.partition.as_ref().is_some_and(|p| p.has(&key.column)) {
            return Some(vec![Some(Ordering::Equal); pairs]);
        }
        let field = schema.field_with_name(&key.column).ok()?;
        if matches!(field.data_type(), DataType::Float16 | DataType::Float32 | DataType::Float64) {
            return None;
        }
        let conv = StatisticsConverter::try_new(&key.column, schema, input.metadata.parquet_schema()).ok()?;
        let mins = conv.row_group_mins(row_groups.iter()).ok()?;
        let maxes = conv.row_group_maxes(row_groups.iter()).ok()?;
        let nulls = conv.row_group_null_counts(row_groups.iter()).ok()?;
        let (desc, nulls_first) = (key.options.descending, key.options.nulls_first);
        // In sort order a row group's values start at its min (max when descending) and end
        // at its max (min when descending).
        let (starts, ends): (&ArrayRef, &ArrayRef) = if desc { (&maxes, &mins) } else { (&mins, &maxes) };
        let converter = RowConverter::new(vec![SortField::new_with_options(starts.data_type().clone(), key.options)]).ok()?;
        let start_rows = converter.convert_columns(std::slice::from_ref(starts)).ok()?;
        let end_rows = converter.convert_columns(std::slice::from_ref(ends)).ok()?;
        /// A bound of a column's values in a row group: NULL, a value (its row), unknown.
        #[derive(Clone, Copy)]
        enum Bound {
            Null,
            Value(usize),
        }
        // The start (`at_start`) or end bound of row group `g`: NULL where the nulls sort
        // at that side and it holds any, or it holds nothing else.
        let bound = |g: usize, at_start: bool, values: &ArrayRef| -> Option<Bound> {
            if !nulls.is_valid(g) {
                return None;
            }
            let (n, rows) = (nulls.value(g), row_groups[g].num_rows().max(0) as u64);
            if (n > 0 && nulls_first == at_start) || n >= rows {
                Some(Bound::Null)
            } else {
                values.is_valid(g).then_some(Bound::Value(g))
            }
        };
        Some(
            (0..pairs)
                .map(|g| {
                    let (end, start) = (bound(g, false, ends)?, bound(g + 1, true, starts)?);
                    Some(match (end, start) {
                        (Bound::Null, Bound::Null) => Ordering::Equal,
                        (Bound::Null, Bound::Value(_)) => {
                            if nulls_first {
                                Ordering::Less
                            } else {
                                Ordering::Greater
                            }
                        }
                        (Bound::Value(_), Bound::Null) => {
                            if nulls_first {
                                Ordering::Greater
                            } else {
                                Ordering::Less
                            }
                        }
                        (Bound::Value(e), Bound::Value(s)) => end_rows.row(e).cmp(&start_rows.row(s)),
                    })
                })
                .collect(),
        )
    };
    let columns: Vec<Option<Vec<Option<Ordering>>>> = keys.iter().map(column).collect();
    (0..pairs)
        .map(|g| {
            for c in &columns {
                match c.as_ref().and_then(|c| c[g]) {
                    Some(Ordering::Less) => return true,
                    Some(Ordering::Equal) => continue,
                    Some(Ordering::Greater) | None => return false,
                }
            }
            true
        })
        .collect()
}

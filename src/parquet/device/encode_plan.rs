//! The encode plan of a column chunk (issue 69, stage 4, first slice): a row group's flat
//! fixed-width column cut into data pages, and what each page holds, for a device encoder
//! and its CPU reference ([`super::encode_cpu`]) alike. Pure: no I/O, no device.
//!
//! Covered: a flat column (a top-level leaf, maximum definition level 0 or 1) of Arrow
//! Int32 or Date32 (stored INT32), Int64 (INT64), Float32 (FLOAT), Float64 (DOUBLE).
//! Anything else is `None` from [`EncodeType::of`]: the caller encodes it on the CPU
//! through parquet-rs as today.
//!
//! Pages are cut as corank's writer has parquet-rs cut them ([`PageLimits::writer`]): a
//! page ends once it holds the data page row count limit, or once its PLAIN values
//! reach the data page byte limit. parquet-rs checks its limits only between write batches
//! (1024 rows), so its pages may differ by up to a batch; the cut here is exact, which
//! every reader accepts (a page's size is a writer's choice, not part of the format).
//!
//! A page table that does not cover the rows of its column exactly once, in order, with
//! no empty page and null counts that match the validity, is an `Err` in words
//! ([`check_pages`]): the encoders never write a chunk from it.

// Only the tests and the device encoder's launch call this yet (issue 69).
#![cfg_attr(not(test), allow(dead_code))]

use crate::engine::encode_job::{KIND_DOUBLE, KIND_FLOAT, KIND_INT32, KIND_INT64};
use arrow::array::Array;
use arrow::datatypes::DataType;
use std::ops::Range;

/// The physical type a covered column is stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncodeType {
    /// INT32 (Arrow Int32, Date32).
    Int32,
    /// INT64 (Arrow Int64).
    Int64,
    /// FLOAT (Arrow Float32).
    Float,
    /// DOUBLE (Arrow Float64).
    Double,
}

impl EncodeType {
    /// The physical type an Arrow column of `data_type` is stored as, where covered.
    pub fn of(data_type: &DataType) -> Option<EncodeType> {
        match data_type {
            DataType::Int32 | DataType::Date32 => Some(EncodeType::Int32),
            DataType::Int64 => Some(EncodeType::Int64),
            DataType::Float32 => Some(EncodeType::Float),
            DataType::Float64 => Some(EncodeType::Double),
            _ => None,
        }
    }

    /// Bytes a PLAIN value takes.
    pub fn width(self) -> usize {
        match self {
            EncodeType::Int32 | EncodeType::Float => 4,
            EncodeType::Int64 | EncodeType::Double => 8,
        }
    }

    /// Its kind in an encode job (`engine/encode_job.rs`'s `KIND_*`).
    pub fn kind(self) -> u32 {
        match self {
            EncodeType::Int32 => KIND_INT32,
            EncodeType::Int64 => KIND_INT64,
            EncodeType::Float => KIND_FLOAT,
            EncodeType::Double => KIND_DOUBLE,
        }
    }
}

/// Where a page ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageLimits {
    /// At most this many rows a page (at least 1).
    pub rows: usize,
    /// A page ends once its encoded values reach this many bytes.
    pub bytes: usize,
}

impl PageLimits {
    /// The limits corank's writer (`src/parquet/writer/`) leaves at parquet-rs's defaults.
    pub fn writer() -> PageLimits {
        PageLimits {
            rows: parquet::file::properties::DEFAULT_DATA_PAGE_ROW_COUNT_LIMIT,
            bytes: parquet::file::properties::DEFAULT_PAGE_SIZE,
        }
    }

    /// Rows a page of values `width` bytes wide holds at most: the row limit, or as many
    /// values as reach the byte limit (at least one).
    pub fn rows_per_page(self, width: usize) -> usize {
        let by_bytes = self.bytes.div_ceil(width.max(1)).max(1);
        self.rows.max(1).min(by_bytes)
    }
}

/// One data page of a column chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PagePlan {
    /// Its first row in the row group.
    pub first_row: usize,
    /// Rows (values, nulls included) in it.
    pub rows: usize,
    /// Nulls among them.
    pub nulls: usize,
}

/// Nulls among `rows` rows of `array` from `first`.
fn nulls_in(array: &dyn Array, first: usize, rows: usize) -> usize {
    match array.logical_nulls() {
        Some(n) => n.slice(first, rows).null_count(),
        None => 0,
    }
}

/// The row ranges of the pages of a column of `rows` rows of values `width` bytes wide:
/// all the cut needs (a column on the device has no null counts on the host; the device
/// counts them).
pub(crate) fn cut_rows(rows: usize, width: usize, limits: PageLimits) -> Vec<Range<usize>> {
    let per = limits.rows_per_page(width);
    (0..rows).step_by(per).map(|first| first..rows.min(first + per)).collect()
}

/// The pages of a row group's column `array` of values `width` bytes wide.
pub(crate) fn plan_pages(array: &dyn Array, width: usize, limits: PageLimits) -> Vec<PagePlan> {
    cut_rows(array.len(), width, limits)
        .into_iter()
        .map(|r| PagePlan { first_row: r.start, rows: r.len(), nulls: nulls_in(array, r.start, r.len()) })
        .collect()
}

/// Checks that `pages` cover the rows of `array` exactly once, in order, none empty, each
/// page's null count its rows' and none larger than `i32::MAX` rows (a page header's
/// count). An `Err` says which page is wrong.
pub(crate) fn check_pages(array: &dyn Array, pages: &[PagePlan]) -> Result<(), String> {
    let mut next = 0usize;
    for (i, p) in pages.iter().enumerate() {
        if p.first_row != next {
            return Err(format!("page {i} starts at row {}, not at row {next}", p.first_row));
        }
        if p.rows == 0 {
            return Err(format!("page {i} holds no rows"));
        }
        if i32::try_from(p.rows).is_err() {
            return Err(format!("page {i} holds {} rows, more than a page header counts", p.rows));
        }
        let end = p.first_row.checked_add(p.rows).filter(|&e| e <= array.len());
        let Some(end) = end else {
            return Err(format!("page {i} (rows {}+{}) runs past the column's {} rows", p.first_row, p.rows, array.len()));
        };
        let nulls = nulls_in(array, p.first_row, p.rows);
        if p.nulls != nulls {
            return Err(format!("page {i} states {} nulls, its rows hold {nulls}", p.nulls));
        }
        next = end;
    }
    if next != array.len() {
        return Err(format!("the pages cover {next} of the column's {} rows", array.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    #[test]
    fn pages_follow_the_limits() {
        let a = Int32Array::from_iter((0..10).map(|i| (i % 3 != 0).then_some(i)));
        let p = plan_pages(&a, 4, PageLimits { rows: 4, bytes: 1 << 20 });
        let got: Vec<_> = p.iter().map(|p| (p.first_row, p.rows, p.nulls)).collect();
        assert_eq!(got, [(0, 4, 2), (4, 4, 1), (8, 2, 1)]);
        check_pages(&a, &p).unwrap();
        // The byte limit: 9 bytes of 4-byte values end a page at 3 values.
        assert_eq!(PageLimits { rows: 100, bytes: 9 }.rows_per_page(4), 3);
        assert_eq!(PageLimits { rows: 100, bytes: 8 }.rows_per_page(4), 2);
        assert_eq!(PageLimits { rows: 0, bytes: 0 }.rows_per_page(8), 1);
        assert_eq!(PageLimits::writer().rows_per_page(8), 20_000);
        assert_eq!(cut_rows(10, 4, PageLimits { rows: 4, bytes: 1 << 20 }), [0..4, 4..8, 8..10]);
        assert!(cut_rows(0, 4, PageLimits::writer()).is_empty());
        assert!(plan_pages(&Int32Array::from(Vec::<i32>::new()), 4, PageLimits::writer()).is_empty());
    }

    #[test]
    fn tables_that_miss_rows_are_errors() {
        let a = Int32Array::from_iter((0..10).map(|i| (i % 3 != 0).then_some(i)));
        let good = plan_pages(&a, 4, PageLimits { rows: 4, bytes: 1 << 20 });
        let mut gap = good.clone();
        gap[1].first_row = 5;
        assert!(check_pages(&a, &gap).unwrap_err().contains("page 1 starts at row 5"));
        let short = &good[..2];
        assert!(check_pages(&a, short).unwrap_err().contains("cover 8 of the column's 10 rows"));
        let mut long = good.clone();
        long[2].rows = 3;
        assert!(check_pages(&a, &long).unwrap_err().contains("runs past"));
        let mut empty = good.clone();
        empty.insert(1, PagePlan { first_row: 4, rows: 0, nulls: 0 });
        assert!(check_pages(&a, &empty).unwrap_err().contains("holds no rows"));
        let mut nulls = good.clone();
        nulls[0].nulls = 0;
        assert!(check_pages(&a, &nulls).unwrap_err().contains("states 0 nulls"));
        let mut huge = good;
        huge[2].rows = usize::MAX;
        assert!(check_pages(&a, &huge).is_err());
    }
}

//! The one sort-key type: a column name and arrow's [`SortOptions`].

use arrow::compute::SortOptions;

/// One sort column: its name and arrow's [`SortOptions`].
///
/// ```
/// use arrow::compute::SortOptions;
/// use corank::SortKey;
///
/// // ORDER BY ts, id DESC NULLS LAST
/// let keys = [SortKey::asc("ts"), SortKey::desc("id").nulls_first(false)];
/// assert_eq!(keys[1], SortKey::new("id", SortOptions { descending: true, nulls_first: false }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The column's name in the runs' (or files') schema.
    pub column: String,
    /// Descending or not, nulls first or last.
    pub options: SortOptions,
}

impl SortKey {
    /// Ascending, nulls last (SQL's default for ASC).
    pub fn asc(column: impl Into<String>) -> Self {
        Self { column: column.into(), options: SortOptions { descending: false, nulls_first: false } }
    }
    /// Descending, nulls first (SQL's default for DESC).
    pub fn desc(column: impl Into<String>) -> Self {
        Self { column: column.into(), options: SortOptions { descending: true, nulls_first: true } }
    }
    /// The column `column` with `options`.
    pub fn new(column: impl Into<String>, options: SortOptions) -> Self {
        Self { column: column.into(), options }
    }
    /// Puts nulls first (`true`) or last (`false`), keeping the direction.
    pub fn nulls_first(mut self, nulls_first: bool) -> Self {
        self.options.nulls_first = nulls_first;
        self
    }
}

//! The one sort-key type: a column name and arrow's [`SortOptions`].

use arrow::compute::SortOptions;

/// One sort column: its name and arrow's [`SortOptions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    pub column: String,
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
    pub fn new(column: impl Into<String>, options: SortOptions) -> Self {
        Self { column: column.into(), options }
    }
    pub fn nulls_first(mut self, nulls_first: bool) -> Self {
        self.options.nulls_first = nulls_first;
        self
    }
}

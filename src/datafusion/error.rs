//! corank's errors as DataFusion's, and the nodes' own error messages.

use datafusion::common::DataFusionError;
use datafusion::physical_expr::LexOrdering;

/// corank's error as DataFusion's (arrow errors stay arrow errors).
pub fn to_datafusion(e: crate::Error) -> DataFusionError {
    match e {
        crate::Error::Arrow(a) => DataFusionError::ArrowError(Box::new(a), None),
        other => DataFusionError::External(Box::new(other)),
    }
}

/// An input out of order as an error that names the input partition and the row (counted
/// from the partition's first row); other errors as [`to_datafusion`].
pub(super) fn not_sorted(e: crate::Error, expr: &LexOrdering) -> DataFusionError {
    match e {
        crate::Error::NotSorted { run, row, detail } => DataFusionError::Execution(format!(
            "CoRankMergeExec: input partition {run} is not sorted by [{expr}]: row {row} sorts before row {}: {detail}",
            row.saturating_sub(1)
        )),
        other => to_datafusion(other),
    }
}

/// The sort node's memory error: what it says when the pool refuses, by whether it could
/// spill.
pub(super) fn out_of_memory(e: DataFusionError, spilling: bool) -> DataFusionError {
    let why = if spilling {
        "CoRankSortExec: not enough memory to sort, even after spilling every sorted run to disk; \
         consider increasing 'datafusion.runtime.memory_limit'"
    } else {
        "CoRankSortExec: not enough memory to sort and the disk manager is disabled (no spilling); \
         consider increasing 'datafusion.runtime.memory_limit' or enabling the disk manager"
    };
    e.context(why)
}

//! Parquet: sorted files and row groups as merge runs, and the sorted output file.
//!
//! - [`inputs`]: expand the inputs, settle the key, split files into sorted runs;
//! - [`input_types`]: Parquet types arrow-rs reads with a loss by default (INT96, INTERVAL,
//!   DATE as Date64), read exactly or refused;
//! - [`merge_files`](mod@merge_files): stream the runs through the frontier merge;
//! - [`sort_files`](mod@sort_files): unsorted files sorted into one (an external merge sort);
//! - [`sort_by_columns`]: the same sort one column at a time, where memory allows it;
//! - [`passthrough`]: row groups that need no merge, copied unchanged;
//! - [`offset_index`]: offset indexes for copied chunks whose files have none;
//! - [`row_group_reader`]: row groups decoded in parallel, handed out in order;
//! - [`corrupt`]: decoder panics caught, decode failures named by file, row group, column and page;
//! - [`writer`]: the output (temporary file, parallel column encoding, rename);
//! - [`leftovers`]: what a killed run leaves (temporary file, spill directory), cleared by the next;
//! - [`dictionary`]: which output columns keep Parquet's dictionary encoding;
//! - [`order_by`]: sort keys as a SQL `ORDER BY` list;
//! - [`sorting_columns`]: the order a row group's metadata declares.
//!
//! Sorted row groups as DataFusion partitions are `corank::datafusion::SortedRowGroupsTable`.

pub mod corrupt;
pub mod dictionary;
pub mod input_types;
pub mod inputs;
pub mod interrupt;
pub mod leftovers;
pub mod merge_files;
pub mod offset_index;
pub mod order_by;
pub mod passthrough;
pub mod row_group_reader;
pub mod sort_by_columns;
pub mod sort_files;
pub mod sorting_columns;
pub mod writer;

pub use inputs::{expand_inputs, plan_merge, MergePlan};
pub use merge_files::{merge_files, MergeFilesOptions, MergeSummary};
pub use order_by::parse_order_by;
pub use passthrough::Passthrough;
pub use sort_files::{plan_sort, sort_files, SortFilesOptions, SortPhase, SortPlan, SortStrategy, SortSummary};
pub use writer::{parse_compression, WriterSettings};

/// Names the calling thread for the operating system (`top -H`, `perf`, /proc/…/comm; at
/// most 15 bytes kept), so a profile tells the merge's threads apart. Best effort, Linux
/// only.
pub(crate) fn name_this_thread(name: &str) {
    #[cfg(target_os = "linux")]
    if let Ok(name) = std::ffi::CString::new(name.bytes().take(15).collect::<Vec<u8>>()) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which
        // `name` is, and only renames the calling thread.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The kernel's name of the calling thread.
    fn comm() -> String {
        std::fs::read_to_string("/proc/thread-self/comm").unwrap().trim_end().to_string()
    }

    #[test]
    fn threads_are_named_for_the_os_up_to_15_bytes() {
        let names = std::thread::spawn(|| {
            super::name_this_thread("corank-writer");
            let short = comm();
            super::name_this_thread("corank-a-name-longer-than-fifteen");
            let long = comm();
            // An interior NUL cannot be a name: the thread keeps the one it had.
            super::name_this_thread("bad\0name");
            (short, long, comm())
        })
        .join()
        .unwrap();
        assert_eq!(names, ("corank-writer".into(), "corank-a-name-l".into(), "corank-a-name-l".into()));
    }
}

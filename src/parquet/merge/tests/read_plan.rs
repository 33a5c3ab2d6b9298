//! The merge's read plan: how many row groups of a run decode at once, and that the dry run
//! reports the plan the merge reads by.

use super::{plain, write_file};
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use corank::parquet::{plan_merge, MergeFilesOptions};
use corank::SortKey;
use std::sync::Arc;

/// How many row groups of a run decode at once (`read_plan`): cores / runs, capped by the
/// run's row groups, by 16, and by the decoders' memory (a quarter of the limit, the windows
/// still fitting); one a run when there are at least as many runs as cores. `dry_run`
/// reports the same plan.
#[test]
fn decoders_per_run_follow_cores_runs_and_memory() {
    use crate::parquet::dry_run;
    use crate::parquet::memory::read_plan;
    let d = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for f in 0..3i64 {
        // 6 sorted row groups of 200 rows: one run per file.
        let groups: Vec<RecordBatch> = (0..6i64)
            .map(|g| {
                let k: Vec<i64> = (0..200).map(|i| f + 3 * (g * 200 + i)).collect();
                let v: Vec<String> = k.iter().map(|x| format!("value {x}")).collect();
                RecordBatch::try_from_iter([
                    ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
                    ("v", Arc::new(StringArray::from(v)) as ArrayRef),
                ])
                .unwrap()
            })
            .collect();
        let path = d.path().join(format!("f{f}.parquet"));
        write_file(&path, &groups, plain());
        paths.push(path);
    }
    let decoders = |files: usize, threads: usize, limit: usize| {
        let plan = plan_merge(&paths[..files], Some(vec![SortKey::asc("k")])).unwrap();
        assert_eq!(plan.runs.len(), files);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let read = read_plan(&plan, limit).unwrap();
            let dry = dry_run(&plan, &MergeFilesOptions { memory_limit: limit, ..Default::default() }).unwrap();
            assert_eq!((dry.decoders_per_run, dry.decoder_bytes), (read.decoders_per_run, read.decoder_bytes));
            assert_eq!(dry.window_bytes, read.window_bytes);
            (read.decoders_per_run, read.decoder_bytes)
        })
    };
    let gib = 1 << 30;
    assert_eq!(decoders(2, 8, gib).0, 4);
    assert_eq!(decoders(3, 8, gib).0, 2);
    assert_eq!(decoders(1, 64, gib).0, 6, "capped by the run's row groups");
    assert_eq!(decoders(3, 3, gib).0, 1);
    assert_eq!(decoders(3, 2, gib).0, 1, "more runs than cores");
    // A limit whose quarter holds 3 decoders: 3 a run; one that holds 1: 1, never none.
    let one = decoders(1, 1, gib).1;
    assert_eq!(decoders(1, 64, 4 * 3 * one + 3), (3, 3 * one));
    assert_eq!(decoders(1, 64, 4 * one), (1, one));
}

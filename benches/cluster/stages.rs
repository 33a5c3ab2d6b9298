//! What Ballista tells of a job's stages, without its REST API (not built into
//! `corank-ballista`): each executor logs, at info, `Execute task  : [TID JOB/STAGE.A/TASK.A]`
//! when a task starts and `Finished task : [TID ...] in ...` when it ends, each line with
//! its millisecond timestamp (`[2026-12-07T13:33:56.110Z INFO ...]`). A stage's span is
//! from its first task's start to its last task's end, over every executor; the stages of
//! an `ORDER BY` run one after the other (the final merge waits for the shuffle), so the
//! job's time outside them is planning, scheduling and the client's fetch of the result.
//! The executed plan (the scheduler's stage plans with the metrics the executors reported,
//! `DistributedQueryExec::explain_executed_plan`) names each stage's operators.

use std::collections::BTreeMap;

/// A stage of one job: its span in ms, its tasks, and the executors that ran them.
#[derive(Debug, Clone, Default)]
pub struct Stage {
    pub span_ms: u64,
    pub tasks: usize,
    pub executors: usize,
    /// The stage's operators from the executed plan, top first, Ballista's shuffle writer
    /// and reader included, each with the time metric it reports, summed over the stage's
    /// tasks (`ShuffleWriterExec (write_time 1.1s) <- CoRankMergeExec (elapsed_compute
    /// 560ms) <- DataSourceExec`).
    pub operators: String,
}

/// Milliseconds since the day began of a log line's `[YYYY-MM-DDTHH:MM:SS.mmmZ` timestamp,
/// plus the day (as a count of the date's digits, enough to order two days).
fn timestamp_ms(line: &str) -> Option<u64> {
    let t = line.strip_prefix('[')?.get(..24)?;
    let (date, time) = t.split_once('T')?;
    let day: u64 = date.replace('-', "").parse().ok()?;
    let time = time.strip_suffix('Z')?;
    let (hms, ms) = time.split_once('.')?;
    let mut parts = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (parts.next()??, parts.next()??, parts.next()??);
    // Days as YYYYMMDD: the step at a month's end is larger than a day, which only widens
    // a span that crosses midnight at the end of a month (not in a bench's run).
    Some(day * 86_400_000 + ((h * 60 + m) * 60 + s) * 1000 + ms.parse::<u64>().ok()?)
}

/// `(stage, task)` of a `TID JOB/STAGE.A/TASK.A]` after `marker` in `line`, for `job`.
fn task_of(line: &str, marker: &str, job: &str) -> Option<(u32, String)> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix(job)?.strip_prefix('/')?;
    let (stage, task) = rest.split_once('/')?;
    let stage: u32 = stage.split('.').next()?.parse().ok()?;
    Some((stage, task.split(']').next()?.to_string()))
}

/// The stages of `job` from the executors' `logs` (one string each), with their operators
/// from `executed` (the executed plan; empty: not named).
pub fn stages(job: &str, logs: &[String], executed: &str) -> BTreeMap<u32, Stage> {
    // stage -> (first start, last end, tasks, executors)
    let mut spans: BTreeMap<u32, (u64, u64, usize, Vec<usize>)> = BTreeMap::new();
    for (e, log) in logs.iter().enumerate() {
        for line in log.lines() {
            let Some(ms) = timestamp_ms(line) else { continue };
            if let Some((stage, _)) = task_of(line, "Execute task  : [TID ", job) {
                let s = spans.entry(stage).or_insert((ms, ms, 0, vec![]));
                s.0 = s.0.min(ms);
                s.2 += 1;
                if !s.3.contains(&e) {
                    s.3.push(e);
                }
            } else if let Some((stage, _)) = task_of(line, "Finished task : [TID ", job) {
                let s = spans.entry(stage).or_insert((ms, ms, 0, vec![]));
                s.1 = s.1.max(ms);
            }
        }
    }
    let operators = operators_by_stage(executed);
    spans
        .into_iter()
        .map(|(id, (start, end, tasks, executors))| {
            let ops = operators.get(&id).cloned().unwrap_or_default();
            (id, Stage { span_ms: end.saturating_sub(start), tasks, executors: executors.len(), operators: ops })
        })
        .collect()
}

/// The value of metric `name` in an executed plan's operator line (`metrics=[a=1, name=2.5s]`).
fn metric<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let metrics = &line[line.find("metrics=[")? + "metrics=[".len()..];
    let metrics = metrics.rsplit_once(']').map_or(metrics, |(m, _)| m);
    metrics.split(", ").find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Each stage's operator names (with the time metric each reports) from the executed plan's
/// `=========SuccessfulStage[stage_id=N, partitions=P]=========` sections.
fn operators_by_stage(executed: &str) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(u32, Vec<String>)> = None;
    for line in executed.lines() {
        if let Some(rest) = line.trim().strip_prefix("=========SuccessfulStage[stage_id=") {
            if let Some((id, ops)) = current.take() {
                out.insert(id, ops.join(" <- "));
            }
            let id = rest.split(',').next().and_then(|s| s.trim().parse().ok()).unwrap_or(u32::MAX);
            current = Some((id, vec![]));
        } else if let Some((_, ops)) = current.as_mut() {
            let name = line.trim().split([':', ',']).next().unwrap_or("").trim();
            if name.is_empty() || name.starts_with("GlobalLimitExec") {
                continue;
            }
            // The time each operator says it spent on its own work, summed over the
            // stage's tasks (not a span): the shuffle's writes and fetches, the merge.
            let shown = ["write_time", "fetch_time", "elapsed_compute"]
                .iter()
                .filter(|m| name != "DataSourceExec" || **m != "elapsed_compute")
                .find_map(|m| metric(line, m).map(|v| format!("{name} ({m} {v})")));
            ops.push(shown.unwrap_or_else(|| name.to_string()));
        }
    }
    if let Some((id, ops)) = current {
        out.insert(id, ops.join(" <- "));
    }
    out
}

// Run by `tests/cli` (bench.rs). The bench target compiles this module with cfg(test) but
// never runs it (`harness = false`), hence the allow.
#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests {
    use super::*;

    const EXEC0: &str = "\
[2026-12-07T16:00:01.000Z INFO  ballista_executor::executor_server] Execute task  : [TID J1/1.0/0.0]
[2026-12-07T16:00:01.500Z INFO  ballista_executor::executor_server] Execute task  : [TID J2/1.0/0.0]
[2026-12-07T16:00:02.250Z INFO  ballista_executor::executor_server] Finished task : [TID J1/1.0/0.0] in 1.25s
[2026-12-07T16:00:02.300Z INFO  ballista_executor::executor_server] Execute task  : [TID J1/2.0/0.0]
[2026-12-07T16:00:03.000Z INFO  ballista_executor::executor_server] Finished task : [TID J1/2.0/0.0] in 700ms
";
    const EXEC1: &str = "\
[2026-12-07T16:00:01.100Z INFO  ballista_executor::executor_server] Execute task  : [TID J1/1.0/1.0]
[2026-12-07T16:00:02.280Z INFO  ballista_executor::executor_server] Finished task : [TID J1/1.0/1.0] in 1.18s
";
    const EXECUTED: &str = "\
=========SuccessfulStage[stage_id=1, partitions=2]=========
ShuffleWriterExec: partitioning: UnknownPartitioning(2), metrics=[output_rows=10, input_rows=10, write_time=1.11s]
  DataSourceExec: file_groups={2 groups: [[a.parquet], [b.parquet]]}, metrics=[output_rows=10, elapsed_compute=7.00µs]

=========SuccessfulStage[stage_id=2, partitions=1]=========
ShuffleWriterExec: partitioning: UnknownPartitioning(1), metrics=[output_rows=10, input_rows=10, write_time=631.10ms]
  GlobalLimitExec: skip=0, fetch=None, metrics=[output_rows=10]
    SortPreservingMergeExec: [k@0 ASC], metrics=[output_rows=10, elapsed_compute=363.24ms, output_bytes=1 KB]
      ShuffleReaderExec: upstream_stage: 1, metrics=[output_rows=10, elapsed_compute=1ms, fetch_time=435.69ms]";

    #[test]
    fn stages_of_a_job_from_the_executors_logs() {
        let got = stages("J1", &[EXEC0.to_string(), EXEC1.to_string()], EXECUTED);
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        // Stage 1: from 01.000 (exec 0's start) to 02.280 (exec 1's end); J2 is not counted.
        assert_eq!((got[&1].span_ms, got[&1].tasks, got[&1].executors), (1280, 2, 2));
        assert_eq!((got[&2].span_ms, got[&2].tasks, got[&2].executors), (700, 1, 1));
        assert_eq!(got[&1].operators, "ShuffleWriterExec (write_time 1.11s) <- DataSourceExec");
        assert_eq!(
            got[&2].operators,
            "ShuffleWriterExec (write_time 631.10ms) <- SortPreservingMergeExec (elapsed_compute 363.24ms) \
             <- ShuffleReaderExec (fetch_time 435.69ms)"
        );
        assert!(stages("J3", &[EXEC0.to_string()], "").is_empty(), "no task of another job");
    }

    #[test]
    fn a_span_across_midnight_is_not_negative() {
        let a = timestamp_ms("[2026-12-07T23:59:59.900Z INFO x] y").unwrap();
        let b = timestamp_ms("[2026-12-08T00:00:00.100Z INFO x] y").unwrap();
        assert!(b > a);
        assert_eq!(timestamp_ms("Execute task"), None);
    }
}

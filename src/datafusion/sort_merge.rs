//! The merges of a sort node's runs: the final merge's inputs and, where there are more
//! than [`MAX_MERGE_FAN_IN`] runs, the merges in between ([`RunMerges::merge_down`]), each of
//! a group of consecutive runs ([`level_groups`]) by the merge node's task, into a run in
//! memory or a spill file: O(n log k) in all.

use super::error::out_of_memory;
use super::exec::MergeSettings;
use super::metrics::{add_merge_work, MergeMetrics};
use super::sort_spill::{batch_bytes, compacted, memory_run_stream, spill_run, Run, Written};
use super::stream::MergeTask;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::utils::memory::RecordBatchMemoryCounter;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, Gauge};
use datafusion::physical_plan::{SendableRecordBatchStream, SpillManager};
use std::sync::Arc;

/// Inputs one merge of the node takes at most. The merge task's work per input batch and
/// per round grows with its inputs (every live input holds a row before each round; the
/// frontier is the least of their last keys), so a merge of all of thousands of tiny runs
/// was quadratic (`docs/performance.md`). More runs than this are merged down first, in
/// groups of consecutive runs (`level_groups`), each group's merge a run of the next level:
/// ceil(log_F k) levels of work O(n) each, and no more than this many spill files open at
/// once. Consecutive groups keep the order: the stable merge of runs `R1..Rk` is the stable
/// merge of the stable merges of `R1..Ri`, `Ri+1..Rj`, ... in that order.
pub const MAX_MERGE_FAN_IN: usize = 128;

/// Output batches a merge in between may send ahead of the code that keeps them.
const GROUP_BATCHES_AHEAD: usize = 4;

/// The batches of one spilled input that a merge of spill files holds at its peak: one
/// buffered in the window and one decoded ahead, and the same rows again in each round
/// alive at once (one cut and merging, one merged and waiting, one going out), each with
/// its merged output. Four, counting one round, let a loaded machine's timing (rounds
/// finishing while the windows refill) exceed the pool about one run in six.
const SPILLED_BATCHES_PER_INPUT: usize = 8;

/// Rows each input of a merge of the node buffers: `window_rows`, or, when the runs are
/// spill files, at most a batch (the windows are what the merge holds in memory).
pub(super) fn merge_window_rows(settings: &MergeSettings, batch_size: usize, spilled: bool) -> usize {
    if spilled {
        settings.window_rows.min(batch_size).max(1)
    } else {
        settings.window_rows
    }
}

/// The groups of consecutive runs (ranges of `rows`, each run's rows) that one level merges,
/// each into one run, so that at most `fan_in` runs remain, or, where one level cannot get
/// there, as few as it can; none if `rows` holds at most `fan_in` runs. Where a few groups
/// suffice, those of the fewest rows: the runs left alone are not copied again.
fn level_groups(rows: &[usize], fan_in: usize) -> Vec<std::ops::Range<usize>> {
    let (k, fan_in) = (rows.len(), fan_in.max(2));
    if k <= fan_in {
        return Vec::new();
    }
    let excess = k - fan_in;
    // A group of g runs takes away g - 1.
    let groups = excess.div_ceil(fan_in - 1);
    if groups == 1 {
        // One group of excess + 1 runs: the window of that many with the fewest rows.
        let len = excess + 1;
        let mut sum: usize = rows[..len].iter().sum();
        let (mut best, mut best_sum) = (0, sum);
        for start in 1..=k - len {
            sum = sum + rows[start + len - 1] - rows[start - 1];
            if sum < best_sum {
                (best, best_sum) = (start, sum);
            }
        }
        return std::iter::once(best..best + len).collect();
    }
    let blocks: Vec<std::ops::Range<usize>> = (0..k).step_by(fan_in).map(|s| s..(s + fan_in).min(k)).collect();
    let full = blocks.iter().filter(|b| b.len() == fan_in).count();
    if full < groups {
        // This level merges every block; the next goes on.
        return blocks.into_iter().filter(|b| b.len() > 1).collect();
    }
    // `groups` full blocks are enough: those of the fewest rows, in order.
    let mut chosen: Vec<std::ops::Range<usize>> = blocks.into_iter().filter(|b| b.len() == fan_in).collect();
    chosen.sort_by_key(|b| (rows[b.clone()].iter().sum::<usize>(), b.start));
    chosen.truncate(groups);
    chosen.sort_by_key(|b| b.start);
    chosen
}

/// What the merges of the node's runs share: the final merge and the merges in between
/// ([`MAX_MERGE_FAN_IN`]).
pub(super) struct RunMerges<'a> {
    pub(super) schema: &'a SchemaRef,
    pub(super) expr: &'a LexOrdering,
    pub(super) settings: &'a MergeSettings,
    pub(super) batch_size: usize,
    pub(super) spill: Option<&'a SpillManager>,
    /// The runs in memory, each counted at its bytes.
    pub(super) reservation: &'a MemoryReservation,
    /// The merge's consumer: a merge in between counts its windows in an empty reservation
    /// of it.
    pub(super) merge_reservation: &'a MemoryReservation,
    /// The node's: the merges in between add their compute time and rounds, not their
    /// output.
    pub(super) metrics: &'a MergeMetrics,
    pub(super) merge_fan_in: &'a Gauge,
    pub(super) merge_passes: &'a Count,
}

impl RunMerges<'_> {
    /// A run as a merge's input: a run in memory takes its bytes out of the reservation with
    /// it.
    pub(super) fn stream(&self, run: Run) -> Result<SendableRecordBatchStream> {
        Ok(match run {
            Run::Memory { batches, bytes } => {
                let run_reservation = self.reservation.split(bytes.min(self.reservation.size()));
                memory_run_stream(batches, run_reservation, Arc::clone(self.schema))
            }
            Run::Spilled { file, .. } => {
                let spill =
                    self.spill.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: a spilled run without a spill manager".into()))?;
                compacted(spill.read_spill_as_stream(file, None)?, Arc::clone(self.schema))
            }
        })
    }

    /// Merges `runs` (in tie order) down to at most [`fan_in`](Self::fan_in) runs, level by
    /// level ([`level_groups`]). A group of runs in memory merges into a run in memory, of
    /// spill files into a spill file; where the pool refuses a merged run in memory, every
    /// run spills (as when a sorted chunk does not fit), `spilled` turns true, and the next
    /// level goes on with the spill files.
    pub(super) async fn merge_down(&self, mut runs: Vec<Run>, spilled: &mut bool) -> Result<Vec<Run>> {
        loop {
            let fan_in = self.fan_in(&runs, *spilled);
            if runs.len() <= fan_in {
                return Ok(runs);
            }
            let rows: Vec<usize> = runs.iter().map(Run::rows).collect();
            self.merge_passes.add(1);
            let mut slots: Vec<Option<Run>> = runs.into_iter().map(Some).collect();
            let take = |slot: &mut Option<Run>| slot.take().expect("every run is taken once");
            let mut next: Vec<Run> = Vec::with_capacity(slots.len());
            let mut at = 0;
            for group in level_groups(&rows, fan_in) {
                next.extend(slots[at..group.start].iter_mut().map(take));
                let inputs: Vec<Run> = slots[group.clone()].iter_mut().map(take).collect();
                at = group.end;
                let (merged, fits) = self.merge_group(inputs, *spilled).await?;
                next.push(merged);
                if !fits {
                    let Some(spill) = self.spill else {
                        let e =
                            DataFusionError::ResourcesExhausted(format!("a merged run of {} bytes does not fit", self.reservation.size()));
                        return Err(out_of_memory(e, false));
                    };
                    for run in next.iter_mut().chain(slots[at..].iter_mut().flatten()) {
                        spill_run(run, spill, self.reservation).await?;
                    }
                    *spilled = true;
                    break; // the next level's groups fit the spill files' windows
                }
            }
            next.extend(slots[at..].iter_mut().map(take));
            runs = next;
        }
    }

    /// Inputs a merge of `runs` may take: [`MAX_MERGE_FAN_IN`], and, where the runs are
    /// spill files, no more than the pool holds the windows of (as stock DataFusion merges
    /// its spill files): [`SPILLED_BATCHES_PER_INPUT`] of the runs' largest batches an
    /// input; at least 2.
    fn fan_in(&self, runs: &[Run], spilled: bool) -> usize {
        if !spilled {
            return MAX_MERGE_FAN_IN;
        }
        let largest = runs.iter().map(|r| if let Run::Spilled { batch_bytes, .. } = r { *batch_bytes } else { 0 }).max().unwrap_or(0);
        let probe = self.merge_reservation.new_empty();
        let mut fits = 0;
        while fits < MAX_MERGE_FAN_IN.min(runs.len()) && probe.try_grow(SPILLED_BATCHES_PER_INPUT * largest).is_ok() {
            fits += 1;
        }
        fits.max(2)
    }

    /// Merges a group of consecutive runs into one (the merge task, as the final merge runs
    /// it): into memory (counted in the reservation; false with it where the pool refused:
    /// it is counted anyway, the caller spills), or, with `spilled`, into a spill file.
    async fn merge_group(&self, group: Vec<Run>, spilled: bool) -> Result<(Run, bool)> {
        self.merge_fan_in.set_max(group.len());
        let inputs = group.into_iter().map(|run| self.stream(run)).collect::<Result<Vec<_>>>()?;
        // The merge's own metrics, not the node's: its output is not the node's.
        let metrics_set = ExecutionPlanMetricsSet::new();
        let task = MergeTask {
            inputs,
            schema: Arc::clone(self.schema),
            expr: self.expr.clone(),
            fetch: None,
            settings: MergeSettings { window_rows: merge_window_rows(self.settings, self.batch_size, spilled), ..self.settings.clone() },
            check_sorted: false,
            batch_size: self.batch_size,
            reservation: self.merge_reservation.new_empty(),
            metrics: MergeMetrics::new(&metrics_set, 0),
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(GROUP_BATCHES_AHEAD);
        let merged = if spilled {
            let spill = self.spill.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: spilling without a spill manager".into()))?;
            let mut file = spill.create_in_progress_file("CoRankSortExec")?;
            // Written off the runtime as the batches come.
            let writer = tokio::task::spawn_blocking(move || -> Result<Written> {
                let (mut rows, mut largest) = (0, 0);
                while let Some(batch) = rx.blocking_recv() {
                    let batch = batch?;
                    rows += batch.num_rows();
                    largest = largest.max(batch_bytes(&batch));
                    file.append_batch(&batch)?;
                }
                Ok((file.finish()?, rows, largest))
            });
            // (A failed write drops the receiver: the merge then stops without an error.)
            let (done, written) = tokio::join!(task.run(tx), writer);
            done?;
            let (file, rows, batch_bytes) = written.map_err(|e| DataFusionError::External(Box::new(e)))??;
            let file = file.ok_or_else(|| DataFusionError::Internal("CoRankSortExec: a merge of runs with rows spilled no file".into()))?;
            (Run::Spilled { file, rows, batch_bytes }, true)
        } else {
            let keep = async {
                // Batches of a merged round may share buffers: each buffer counted once.
                let mut counter = RecordBatchMemoryCounter::new();
                let (mut batches, mut bytes, mut fits) = (Vec::new(), 0, true);
                while let Some(batch) = rx.recv().await {
                    let batch = batch?;
                    let more = counter.count_batch(&batch);
                    if self.reservation.try_grow(more).is_err() {
                        self.reservation.grow(more);
                        fits = false;
                    }
                    bytes += more;
                    batches.push(batch);
                }
                Ok::<_, DataFusionError>((batches, bytes, fits))
            };
            let (done, kept) = tokio::join!(task.run(tx), keep);
            done?;
            let (batches, bytes, fits) = kept?;
            (Run::Memory { batches, bytes }, fits)
        };
        add_merge_work(self.metrics, &metrics_set);
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::level_groups;

    /// Applies `level_groups` until at most `fan_in` runs remain: each level's groups are
    /// disjoint ranges of at least 2 and at most `fan_in` runs, every level shrinks the
    /// count, the levels are about log_fan_in(k), and the rows add up.
    #[test]
    fn levels_merge_down_to_the_fan_in() {
        for (k, fan_in) in [(1, 4), (4, 4), (5, 4), (7, 4), (8, 4), (16, 4), (17, 4), (100, 4), (129, 128), (300, 128), (40_000, 128)] {
            let mut rows: Vec<usize> = (0..k).map(|i| 1 + (i * 7919) % 13).collect();
            let total: usize = rows.iter().sum();
            let mut levels = 0;
            loop {
                let groups = level_groups(&rows, fan_in);
                if rows.len() <= fan_in {
                    assert!(groups.is_empty(), "{k} runs, fan-in {fan_in}");
                    break;
                }
                levels += 1;
                let mut next = Vec::new();
                let mut at = 0;
                for g in &groups {
                    assert!(g.start >= at && g.len() >= 2 && g.len() <= fan_in, "{k} runs, fan-in {fan_in}: {groups:?}");
                    next.extend_from_slice(&rows[at..g.start]);
                    next.push(rows[g.clone()].iter().sum());
                    at = g.end;
                }
                next.extend_from_slice(&rows[at..]);
                assert!(next.len() < rows.len());
                rows = next;
            }
            assert_eq!(rows.iter().sum::<usize>(), total);
            let bound = (k.max(2) as f64).log(fan_in as f64).ceil() as usize;
            assert!(levels < bound.max(1), "{k} runs, fan-in {fan_in}: {levels} levels");
        }
        // One group suffices: the window of the fewest rows (the first of equals).
        assert_eq!(level_groups(&[5, 1, 1, 9, 1], 4), std::iter::once(1..3).collect::<Vec<_>>());
        assert_eq!(level_groups(&[5, 1, 9, 1, 1], 3), std::iter::once(1..4).collect::<Vec<_>>());
        assert_eq!(level_groups(&[9, 9, 9, 1, 1, 1, 2, 2, 2], 5), std::iter::once(3..8).collect::<Vec<_>>());
    }
}

//! The sort's spill directory and its runs: the directory (locked while it exists, removed
//! when dropped or by the signal handler), and the merges of the spilled runs, in longer
//! runs first where the limit cannot hold a window of every run.

use super::{SortPhase, SortSummary};
use crate::error::{Error, Result};
use crate::parquet::inputs::{decoded_bytes, decoder_bytes, InputFile, MergePlan, Run};
use crate::parquet::interrupt::{spill_file_name, SpillDirGuard};
use crate::parquet::merge::{merge_files, MergeFilesOptions, MergeSummary};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The directory the spill directory goes into: `temp_dir`, else the output's directory.
pub(super) fn spill_parent(output: &Path, temp_dir: Option<&Path>) -> PathBuf {
    match temp_dir {
        Some(d) => d.to_path_buf(),
        // An output in an object store spills to the system's temporary directory.
        None if crate::parquet::store::is_url(output) => std::env::temp_dir(),
        None => match crate::parquet::store::local_path(output).parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    }
}

/// Checks that a spill directory can be made in `dir` (made and removed again): a
/// temporary directory that cannot be written is an error before the inputs are read.
pub fn check_temp_dir(dir: &Path) -> Result<()> {
    SpillDir::create(dir).map(drop)
}

/// A spill directory: created empty, registered for the signal handler before it exists,
/// removed with everything in it when dropped.
pub(crate) struct SpillDir {
    path: PathBuf,
    guard: SpillDirGuard,
    /// Spill files named so far (`run-000000.parquet` on).
    next: usize,
}

impl SpillDir {
    pub(crate) fn create(parent: &Path) -> Result<SpillDir> {
        use std::hash::{BuildHasher, Hasher};
        let context = "cannot create the spill directory (set the temporary directory with --temp-dir)";
        for attempt in 0..64u32 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.write_u32(attempt);
            h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
            let path = parent.join(format!(".corank-sort-{:016x}", h.finish()));
            let mut guard = SpillDirGuard::register(&path);
            match std::fs::create_dir(&path) {
                // Locked while it exists, so a later run leaves it alone (crate::parquet::leftovers);
                // one that removed it before the lock was taken makes us draw another name.
                Ok(()) => match std::fs::File::open(&path).and_then(|dir| crate::parquet::leftovers::hold(dir, &path)) {
                    Ok(Some(held)) => {
                        guard.hold(held);
                        return Ok(SpillDir { path, guard, next: 0 });
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        let _ = std::fs::remove_dir(&path);
                        return Err(Error::io(parent, context, e));
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(parent, context, e)),
            }
        }
        Err(Error::io(parent, context, std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free directory name")))
    }

    /// The path of the next spill file (announced to the signal handler first).
    pub(crate) fn next_file(&mut self) -> PathBuf {
        let i = self.next;
        self.next += 1;
        self.guard.announce(self.next);
        self.path.join(spill_file_name(i))
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            log::warn!("cannot remove the spill directory {}: {e}", self.path.display());
        }
    }
}

/// A sorted run written to the spill directory.
pub(super) struct SpilledRun {
    pub(super) path: PathBuf,
    pub(super) rows: usize,
}

/// Merges the spilled `runs` (in chunk order) into `output` with `options` (the merge of
/// the final pass writing as `output_options.writer` says): first neighbouring runs into
/// longer ones, a pass at a time, while the limit cannot hold a window of every run. The
/// final merge's summary.
#[allow(clippy::too_many_arguments)]
pub(super) fn merge_runs(
    runs: &[SpilledRun],
    dir: &mut SpillDir,
    inputs: &MergePlan,
    options: &MergeFilesOptions,
    output: &Path,
    output_options: &MergeFilesOptions,
    progress: &(dyn Fn(SortPhase, usize) + Sync),
    summary: &mut SortSummary,
) -> Result<MergeSummary> {
    let mut files: Vec<InputFile> = runs.iter().map(|r| crate::parquet::inputs::open_input(&r.path)).collect::<Result<_>>()?;
    loop {
        let fan_in = max_fan_in(&files, inputs, options)?;
        if fan_in >= files.len() {
            break;
        }
        summary.intermediate_passes += 1;
        // Where one merge of the first runs brings the rest within reach, only as many as
        // needed; otherwise a pass over all runs, `fan_in` at a time. Groups are runs next to
        // each other, so ties keep input order.
        let group = if files.len() - fan_in < fan_in { files.len() - fan_in + 1 } else { fan_in };
        log::info!("merge pass {}: {} runs, {} at a time", summary.intermediate_passes, files.len(), group);
        let mut next = Vec::new();
        let partial = files.len() - fan_in < fan_in;
        for (g, group) in files.chunks(group).enumerate() {
            crate::cancel::check(options.cancel.as_ref())?;
            if partial && g > 0 {
                next.extend(group.iter().cloned());
                continue;
            }
            if group.len() == 1 {
                next.push(group[0].clone());
                continue;
            }
            let path = dir.next_file();
            let t = Instant::now();
            let merged = merge_files(&runs_plan(group.to_vec(), inputs), &path, options, &|_| {})?;
            summary.merge_time += t.elapsed();
            super::add_rounds(summary, &merged);
            for f in group {
                let _ = std::fs::remove_file(&f.path);
            }
            next.push(crate::parquet::inputs::open_input(&path)?);
        }
        files = next;
    }
    summary.final_runs = files.len();
    let t = Instant::now();
    let merged = merge_files(&runs_plan(files, inputs), output, output_options, &|rows| progress(SortPhase::Merge, rows))?;
    summary.merge_time += t.elapsed();
    super::add_rounds(summary, &merged);
    Ok(merged)
}

/// The schema of the runs' merge: the inputs', with each dictionary column's key type the
/// widest any run stored (a run's writer widens a key type its row groups outgrew).
fn runs_schema(files: &[InputFile], schema: &SchemaRef) -> SchemaRef {
    let width = |t: &DataType| match t {
        DataType::Dictionary(k, _) => k.primitive_width().unwrap_or(0),
        _ => 0,
    };
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut t = f.data_type().clone();
            for file in files {
                if let Ok(g) = file.metadata.schema().field_with_name(f.name()) {
                    if matches!(g.data_type(), DataType::Dictionary(..)) && width(g.data_type()) > width(&t) {
                        t = g.data_type().clone();
                    }
                }
            }
            f.as_ref().clone().with_data_type(t)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A merge plan over sorted runs written by this module: one run per file (all its row
/// groups: each file is sorted as a whole), in the given order.
fn runs_plan(files: Vec<InputFile>, inputs: &MergePlan) -> MergePlan {
    let mut runs = Vec::new();
    let mut total_rows = 0;
    let mut decoded = 0;
    for (i, f) in files.iter().enumerate() {
        let groups: Vec<usize> =
            (0..f.metadata.metadata().num_row_groups()).filter(|&g| f.metadata.metadata().row_group(g).num_rows() > 0).collect();
        if groups.is_empty() {
            continue;
        }
        let row_group_rows: Vec<usize> = groups.iter().map(|&g| f.metadata.metadata().row_group(g).num_rows() as usize).collect();
        let decoded_run: u64 = groups.iter().map(|&g| decoded_bytes(f, g)).sum();
        total_rows += row_group_rows.iter().sum::<usize>();
        decoded += decoded_run;
        runs.push(Run {
            file: i,
            decoder_bytes: groups.iter().map(|&g| decoder_bytes(f, g)).max().unwrap_or(0),
            row_groups: groups,
            row_group_rows,
            declared: true,
            decoded_bytes: decoded_run,
        });
    }
    MergePlan {
        schema: runs_schema(&files, &inputs.schema),
        keys: inputs.keys.clone(),
        runs,
        total_rows,
        total_bytes: files.iter().map(|f| f.size).sum(),
        row_bytes: (decoded / total_rows.max(1) as u64).max(1) as usize,
        union_by_name: false,
        hive_partitions: Vec::new(),
        files,
    }
}

/// The most runs of `files` one merge can take within the memory limit (all of them when
/// they fit); an error when not even two fit.
fn max_fan_in(files: &[InputFile], inputs: &MergePlan, options: &MergeFilesOptions) -> Result<usize> {
    let fits = |n: usize| -> Result<()> {
        // The largest runs decide: take the n largest files.
        let mut by_size: Vec<&InputFile> = files.iter().collect();
        by_size.sort_by_key(|f| std::cmp::Reverse(f.size));
        let plan = runs_plan(by_size.into_iter().take(n).cloned().collect(), inputs);
        crate::parquet::memory::read_plan(&plan, options.memory_limit).map(|_| ())
    };
    if fits(files.len()).is_ok() {
        return Ok(files.len());
    }
    // At least two runs per merge, or the sort cannot finish.
    fits(2)?;
    let (mut lo, mut hi) = (2, files.len());
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if fits(mid).is_ok() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

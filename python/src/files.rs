//! `merge_files` and `sort_files`: the command line's `corank merge` and `corank sort`
//! through the library's Parquet API, with its defaults, checks and errors, returning the
//! summary that `--json` prints, as a dict.

use crate::options::{EngineArgs, parse_by};
use crate::run::{OnInterrupt, Shared, run};
use corank::parquet::{
    HiveTypes, MergeFilesOptions, MergeSummary, OutputFile, Passthrough, PlanOptions, SortFilesOptions, SortPhase, SortStrategy,
    SortSummary, SplitFiles, WriterSettings, expand_inputs_excluding, merge_files as merge_parquet, parse_compression, plan_merge_with,
    plan_sort, show_compression, show_keys, sort_files as sort_parquet,
};
use corank::{Error, Result, Setting, SortKey};
use parquet::basic::Compression;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};

/// The options `merge_files` and `sort_files` share, as the wrapper passes them.
#[derive(FromPyObject, Debug, Clone)]
#[pyo3(from_item_all)]
pub struct FileArgs {
    pub inputs: Vec<String>,
    pub output: PathBuf,
    pub by: Option<String>,
    pub overwrite: bool,
    pub memory_limit: Option<usize>,
    pub compression: String,
    pub row_group_rows: usize,
    pub row_group_bytes: usize,
    pub union_by_name: bool,
    pub hive_partitioning: String,
    /// `--hive-types`, as `(key, type name)` pairs.
    pub hive_types: Vec<(String, String)>,
    pub max_file_rows: Option<usize>,
    pub max_file_bytes: Option<u64>,
    /// `--storage-option`s, as `(key, value)` pairs.
    pub storage_options: Vec<(String, String)>,
}

impl FileArgs {
    /// The checks the command line makes before it opens a file.
    fn prepare(&self) -> Result<(Option<Vec<SortKey>>, Compression)> {
        let by = self.by.as_deref().map(parse_by).transpose()?;
        let compression = parse_compression(&self.compression)?;
        Ok((by, compression))
    }

    fn plan_options(&self) -> Result<PlanOptions> {
        let mut hive_types = HiveTypes::default();
        for (key, name) in &self.hive_types {
            hive_types.extend(format!("{key}={name}").parse()?);
        }
        Ok(PlanOptions { union_by_name: self.union_by_name, hive_partitioning: self.hive_partitioning.parse()?, hive_types })
    }

    fn writer(&self, compression: Compression) -> Result<WriterSettings> {
        let split = (self.max_file_rows.is_some() || self.max_file_bytes.is_some())
            .then_some(SplitFiles { max_rows: self.max_file_rows, max_bytes: self.max_file_bytes });
        if let Some(split) = &split {
            split.check()?;
        }
        Ok(WriterSettings {
            compression,
            row_group_rows: self.row_group_rows,
            row_group_bytes: self.row_group_bytes,
            overwrite: self.overwrite,
            sync: true,
            split,
        })
    }

    /// The input files, the output never among them (the command line's rules:
    /// `expand_inputs_excluding`).
    fn input_paths(&self) -> Result<Vec<PathBuf>> {
        expand_inputs_excluding(&self.inputs, &self.output)
    }
}

/// The library's storage options are the process's (`set_storage_options`), a call's are
/// its own: a call runs under its options, calls with the same ones at once, a call with
/// others waits until those running are done. Setting them drops the stores built under
/// other options; calls with the same options share theirs.
struct StorageLease;

/// The options set (`None`: none yet) and the calls running under them.
struct Storage {
    options: Option<Vec<(String, String)>>,
    calls: usize,
}

static STORAGE: Mutex<Storage> = Mutex::new(Storage { options: None, calls: 0 });
static STORAGE_FREE: Condvar = Condvar::new();

impl StorageLease {
    /// Waits until `options` are the process's (set here where no call runs under others).
    fn take(options: &[(String, String)]) -> Result<StorageLease> {
        let mut state = STORAGE.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if state.options.as_deref() == Some(options) {
                state.calls += 1;
                return Ok(StorageLease);
            }
            if state.calls == 0 {
                corank::parquet::store::set_storage_options(options.iter().map(|(k, v)| (k, v)))?;
                *state = Storage { options: Some(options.to_vec()), calls: 1 };
                return Ok(StorageLease);
            }
            state = STORAGE_FREE.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for StorageLease {
    fn drop(&mut self) {
        let mut state = STORAGE.lock().unwrap_or_else(|e| e.into_inner());
        state.calls -= 1;
        if state.calls == 0 {
            STORAGE_FREE.notify_all();
        }
    }
}

/// What a finished merge reports, beside the summary itself.
struct MergeDone {
    summary: MergeSummary,
    by: String,
    compression: Compression,
    hive_partitions: Vec<String>,
}

/// `merge_files`: sorted Parquet files merged into one, as `corank merge` does.
#[pyfunction]
#[pyo3(signature = (args, engine, passthrough, progress))]
pub fn merge_files<'py>(
    py: Python<'py>,
    args: FileArgs,
    engine: EngineArgs,
    passthrough: &str,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let prepared = || -> Result<(MergeFilesOptions, Option<Vec<SortKey>>)> {
        let (by, compression) = args.prepare()?;
        let passthrough = passthrough.parse::<Passthrough>()?;
        let options = MergeFilesOptions {
            engine: engine.options()?,
            memory_limit: args.memory_limit.unwrap_or_else(corank::parquet::default_memory_limit),
            writer: args.writer(compression)?,
            passthrough,
            cancel: None,
        };
        Ok((options, by))
    };
    let (options, by) = prepared().map_err(crate::errors::to_py)?;
    let memory_limit = options.memory_limit;
    let output = args.output.clone();
    let done = run(py, OnInterrupt::WaitForCancel, progress.as_ref(), move |shared: &Shared| {
        let options = MergeFilesOptions { cancel: Some(shared.cancel.clone()), ..options };
        let _storage = StorageLease::take(&args.storage_options)?;
        let paths = args.input_paths()?;
        let plan = plan_merge_with(&paths, by, &args.plan_options()?)?;
        shared.total.store(plan.total_rows, Ordering::Relaxed);
        let on_progress = |rows: usize| shared.done.store(rows, Ordering::Relaxed);
        let summary = merge_parquet(&plan, &args.output, &options, &on_progress)?;
        Ok(MergeDone {
            summary,
            by: show_keys(&plan.keys),
            compression: options.writer.compression,
            hive_partitions: plan.hive_partitions.clone(),
        })
    })?;
    let s = &done.summary;
    let seconds = s.elapsed.as_secs_f64();
    let d = PyDict::new(py);
    d.set_item("ok", true)?;
    d.set_item("output", output.to_string_lossy().into_owned())?;
    d.set_item("rows", s.rows)?;
    d.set_item("files", s.input_files)?;
    d.set_item("runs", s.runs)?;
    d.set_item("input_bytes", s.input_bytes)?;
    d.set_item("output_bytes", s.output_bytes)?;
    d.set_item("output_row_groups", s.output_row_groups)?;
    d.set_item("rounds", s.rounds_cpu + s.rounds_gpu)?;
    d.set_item("rounds_cpu", s.rounds_cpu)?;
    d.set_item("rounds_gpu", s.rounds_gpu)?;
    d.set_item("engine", s.engine())?;
    d.set_item("by", &done.by)?;
    d.set_item("hive_partitions", &done.hive_partitions)?;
    d.set_item("output_files", output_files(py, &s.output_files)?)?;
    d.set_item("compression", show_compression(done.compression))?;
    d.set_item("elapsed_s", seconds)?;
    d.set_item("read_s", s.read_time.as_secs_f64())?;
    d.set_item("merge_s", s.merge_time.as_secs_f64())?;
    d.set_item("write_s", s.write_time.as_secs_f64())?;
    d.set_item("rows_per_s", s.rows as f64 / seconds.max(1e-9))?;
    d.set_item("window_bytes", s.window_bytes)?;
    d.set_item("memory_limit", memory_limit)?;
    d.set_item("peak_memory_bytes", s.peak_memory)?;
    d.set_item("passthrough", passthrough.to_ascii_lowercase())?;
    d.set_item("passthrough_rows", s.passthrough_rows)?;
    d.set_item("passthrough_row_groups", s.passthrough_row_groups)?;
    d.set_item("passthrough_codec_kept_row_groups", s.passthrough_codec_kept_row_groups)?;
    Ok(d)
}

/// What a finished sort reports, beside the summary itself.
struct SortDone {
    summary: SortSummary,
    by: String,
    hive_partitions: Vec<String>,
}

/// `sort_files`: Parquet files in any order sorted into one, as `corank sort` does.
#[pyfunction]
#[pyo3(signature = (args, engine, temp_dir, spill_compression, strategy, progress))]
pub fn sort_files<'py>(
    py: Python<'py>,
    args: FileArgs,
    engine: EngineArgs,
    temp_dir: Option<PathBuf>,
    spill_compression: &str,
    strategy: &str,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let prepared = || -> Result<(SortFilesOptions, Option<Vec<SortKey>>)> {
        let (by, compression) = args.prepare()?;
        let spill_compression = parse_compression(spill_compression).map_err(|e| match e {
            Error::InvalidSetting { setting: Setting::Compression, detail } => {
                Error::InvalidSetting { setting: Setting::SpillCompression, detail }
            }
            other => other,
        })?;
        if let Some(dir) = temp_dir.as_ref().filter(|d| !d.is_dir()) {
            return Err(Error::File { path: dir.clone(), detail: "temp_dir is not a directory".into() });
        }
        let options = SortFilesOptions {
            engine: engine.options()?,
            memory_limit: args.memory_limit.unwrap_or_else(corank::parquet::default_memory_limit),
            writer: args.writer(compression)?,
            temp_dir: temp_dir.clone(),
            spill_compression,
            strategy: strategy.parse::<SortStrategy>()?,
            cancel: None,
        };
        Ok((options, by))
    };
    let (options, by) = prepared().map_err(crate::errors::to_py)?;
    let (memory_limit, compression, spill_compression) = (options.memory_limit, options.writer.compression, options.spill_compression);
    let output = args.output.clone();
    let done = run(py, OnInterrupt::WaitForCancel, progress.as_ref(), move |shared: &Shared| {
        let options = SortFilesOptions { cancel: Some(shared.cancel.clone()), ..options };
        let _storage = StorageLease::take(&args.storage_options)?;
        let paths = args.input_paths()?;
        let plan = plan_sort(&paths, by, &args.plan_options()?, &args.output, &options)?;
        let total = plan.inputs.total_rows;
        shared.total.store(2 * total, Ordering::Relaxed);
        let on_progress = |phase: SortPhase, rows: usize| {
            let done = match phase {
                SortPhase::Runs => rows,
                SortPhase::Merge => total + rows,
            };
            shared.done.store(done, Ordering::Relaxed);
        };
        let summary = sort_parquet(&plan, &args.output, &options, &on_progress)?;
        Ok(SortDone { summary, by: show_keys(&plan.inputs.keys), hive_partitions: plan.inputs.hive_partitions.clone() })
    })?;
    let s = &done.summary;
    let seconds = s.elapsed.as_secs_f64();
    let d = PyDict::new(py);
    d.set_item("ok", true)?;
    d.set_item("output", output.to_string_lossy().into_owned())?;
    d.set_item("strategy", s.strategy)?;
    d.set_item("rows", s.rows)?;
    d.set_item("files", s.input_files)?;
    d.set_item("input_bytes", s.input_bytes)?;
    d.set_item("output_bytes", s.output_bytes)?;
    d.set_item("output_row_groups", s.output_row_groups)?;
    d.set_item("spill_runs", s.spill_runs)?;
    d.set_item("spill_bytes", s.spill_bytes)?;
    d.set_item("intermediate_passes", s.intermediate_passes)?;
    d.set_item("final_runs", s.final_runs)?;
    d.set_item("sorts_cpu", s.sorts_cpu)?;
    d.set_item("sorts_gpu", s.sorts_gpu)?;
    d.set_item("rounds_cpu", s.rounds_cpu)?;
    d.set_item("rounds_gpu", s.rounds_gpu)?;
    d.set_item("engine", s.engine())?;
    d.set_item("by", &done.by)?;
    d.set_item("hive_partitions", &done.hive_partitions)?;
    d.set_item("output_files", output_files(py, &s.output_files)?)?;
    d.set_item("compression", show_compression(compression))?;
    d.set_item("spill_compression", show_compression(spill_compression))?;
    d.set_item("elapsed_s", seconds)?;
    d.set_item("read_s", s.read_time.as_secs_f64())?;
    d.set_item("sort_s", s.sort_time.as_secs_f64())?;
    d.set_item("spill_s", s.spill_time.as_secs_f64())?;
    d.set_item("merge_s", s.merge_time.as_secs_f64())?;
    d.set_item("rows_per_s", s.rows as f64 / seconds.max(1e-9))?;
    d.set_item("chunk_bytes", s.chunk_bytes)?;
    d.set_item("memory_limit", memory_limit)?;
    d.set_item("peak_memory_bytes", s.peak_memory)?;
    Ok(d)
}

/// A split output's files as `--json`'s `output_files` lists them (empty for one file).
fn output_files<'py>(py: Python<'py>, files: &[OutputFile]) -> PyResult<Vec<Bound<'py, PyDict>>> {
    files
        .iter()
        .map(|f| {
            let d = PyDict::new(py);
            d.set_item("path", f.path.to_string_lossy().into_owned())?;
            d.set_item("rows", f.rows)?;
            d.set_item("row_groups", f.row_groups)?;
            d.set_item("bytes", f.bytes)?;
            d.set_item("first_key", &f.first_key)?;
            d.set_item("last_key", &f.last_key)?;
            Ok(d)
        })
        .collect()
}

//! Merging sorted Parquet files into one sorted Parquet file, in bounded memory.
//!
//! The runs of a [`MergePlan`] stream through a [`FrontierMerge`]: each run buffers a
//! window of rows, a round merges everything the frontier rule lets out, and the merged
//! batches go to a writer thread that encodes row groups (columns in parallel). Each run
//! decodes on its own thread a batch ahead of the merge (up to [`MAX_READER_THREADS`] runs;
//! beyond, the merge loop reads the runs in parallel itself).
//!
//! Memory: half of `memory_limit` goes to the runs' windows and the batches decoded ahead,
//! a quarter to the round being merged and the one handed to the writer, a quarter to the
//! writer's row groups (those being encoded). Sizes are estimated from the
//! row groups' uncompressed sizes, so the cap is approximate.

use super::inputs::{MergePlan, Run};
use super::writer::{SortedParquetWriter, WriterSettings, Written};
use crate::error::{Error, Result};
use crate::keys::KeySpec;
use crate::merge::Engine;
use crate::stream::{FrontierMerge, StreamOptions};
use arrow::array::{ArrayRef, RecordBatch};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::KeyValue;
use rayon::prelude::*;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Settings of a file merge.
#[derive(Debug, Clone)]
pub struct MergeFilesOptions {
    pub engine: Engine,
    /// Approximate cap on the memory the merge holds, in bytes.
    pub memory_limit: usize,
    pub writer: WriterSettings,
    /// `Engine::Auto` uses the GPU for rounds of at least this many rows.
    pub gpu_min_keys: usize,
}

impl Default for MergeFilesOptions {
    fn default() -> Self {
        Self { engine: Engine::Auto, memory_limit: 2 << 30, writer: WriterSettings::default(), gpu_min_keys: crate::merge::engine::GPU_MIN_KEYS }
    }
}

/// Fewest rows a run's window may hold; a smaller memory limit is refused.
pub const MIN_WINDOW_ROWS: usize = 1024;
/// Most rows a run's window holds (larger windows only add memory).
pub const MAX_WINDOW_ROWS: usize = 1 << 20;

/// What a finished merge did.
#[derive(Debug, Clone)]
pub struct MergeSummary {
    pub rows: usize,
    pub input_files: usize,
    pub runs: usize,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub output_row_groups: usize,
    pub rounds_cpu: usize,
    pub rounds_gpu: usize,
    pub window_rows: usize,
    pub elapsed: Duration,
    /// Time the merge loop spent reading and decoding input windows.
    pub read_time: Duration,
    /// Time the merge loop spent in merge rounds (permutation and gather).
    pub merge_time: Duration,
    /// Time the writer thread spent encoding and writing row groups.
    pub write_time: Duration,
}

impl MergeSummary {
    /// `gpu`, `cpu`, or `gpu+cpu` when rounds ran on both.
    pub fn engine(&self) -> &'static str {
        match (self.rounds_gpu > 0, self.rounds_cpu > 0) {
            (true, true) => "gpu+cpu",
            (true, false) => "gpu",
            _ => "cpu",
        }
    }
}

/// Rows per run window for `memory_limit` (see the module doc).
pub fn window_rows(plan: &MergePlan, memory_limit: usize) -> Result<usize> {
    let runs = plan.runs.len().max(1);
    // Decoded Arrow data is larger than Parquet's uncompressed size (offsets, validity).
    let row_bytes = plan.row_bytes.saturating_mul(3) / 2 + 8;
    // Half the limit: per run a window and a batch decoded ahead (up to a window).
    let window = memory_limit / 4 / runs / row_bytes;
    if window < MIN_WINDOW_ROWS && plan.total_rows > 0 {
        let needed = 4 * runs * row_bytes * MIN_WINDOW_ROWS;
        return Err(Error::InvalidArgument(format!(
            "--memory-limit {} is too small for {runs} sorted runs of about {row_bytes} bytes a row; it needs at least {}",
            show_bytes(memory_limit as u64),
            show_bytes(needed as u64)
        )));
    }
    Ok(window.clamp(MIN_WINDOW_ROWS, MAX_WINDOW_ROWS))
}

/// `1.5 GiB`.
pub fn show_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Runs up to which each run is decoded on a thread of its own.
pub const MAX_READER_THREADS: usize = 256;

/// Where the merge loop takes each run's batches from.
enum Sources<'a> {
    /// A decoding thread per run, each a batch ahead.
    Threads(Vec<mpsc::Receiver<Result<Option<RecordBatch>>>>),
    /// Read in the merge loop (too many runs for a thread each).
    Inline(Vec<RunReader<'a>>),
}

impl Sources<'_> {
    fn len(&self) -> usize {
        match self {
            Sources::Threads(r) => r.len(),
            Sources::Inline(r) => r.len(),
        }
    }
}

/// A run being read: its reader, opened on first use.
struct RunReader<'a> {
    run: &'a Run,
    path: &'a Path,
    metadata: &'a parquet::arrow::arrow_reader::ArrowReaderMetadata,
    reader: Option<ParquetRecordBatchReader>,
}

impl RunReader<'_> {
    fn next_batch(&mut self, batch_rows: usize) -> Result<Option<RecordBatch>> {
        let err = |e: &dyn std::fmt::Display| Error::File { path: self.path.to_path_buf(), detail: format!("reading row groups {:?}: {e}", self.run.row_groups) };
        if self.reader.is_none() {
            let file = std::fs::File::open(self.path).map_err(|e| err(&e))?;
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.metadata.clone())
                .with_row_groups(self.run.row_groups.clone())
                .with_batch_size(batch_rows)
                .build()
                .map_err(|e| err(&e))?;
            self.reader = Some(reader);
        }
        match self.reader.as_mut().expect("opened above").next() {
            None => Ok(None),
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) => Err(err(&e)),
        }
    }
}

/// The footer metadata the output keeps: the inputs' key-value pairs, the first file's value
/// where they disagree (the Arrow schema is written anew).
fn kept_metadata(plan: &MergePlan) -> Vec<KeyValue> {
    let mut kept: Vec<KeyValue> = Vec::new();
    for f in &plan.files {
        for kv in f.metadata.metadata().file_metadata().key_value_metadata().into_iter().flatten() {
            if kv.key != "ARROW:schema" && !kept.iter().any(|k| k.key == kv.key) {
                kept.push(kv.clone());
            }
        }
    }
    kept
}

/// Merges the runs of `plan` into `output`. `progress` is called after every round with the
/// rows written so far. On any error the output is left as it was.
pub fn merge_files(plan: &MergePlan, output: &Path, options: &MergeFilesOptions, progress: &(dyn Fn(usize) + Sync)) -> Result<MergeSummary> {
    let start = Instant::now();
    let window = window_rows(plan, options.memory_limit)?;
    let mut writer_settings = options.writer.clone();
    let group_cap = (options.memory_limit / 4 / super::writer::ROW_GROUPS_IN_FLIGHT).max(1 << 20);
    writer_settings.row_group_bytes = writer_settings.row_group_bytes.min(group_cap);
    let writer = SortedParquetWriter::create(
        output, plan.schema.clone(), super::writer::common_parquet_schema(&plan.files, &plan.schema), &plan.keys, kept_metadata(plan), plan.total_rows, writer_settings,
    )?;

    let specs: Vec<KeySpec> = plan.keys.iter().map(|k| KeySpec { name: k.column.clone(), options: k.options }).collect();
    let key_index: Vec<usize> = plan.keys.iter().map(|k| plan.schema.index_of(&k.column)).collect::<Result<_, _>>()?;
    let key_types: Vec<_> = key_index.iter().map(|&i| plan.schema.field(i).data_type().clone()).collect();
    let stream_options = StreamOptions { window_rows: window, batch_size: 8192, engine: options.engine, check_sorted: false, gpu_min_keys: options.gpu_min_keys };
    let mut frontier = FrontierMerge::new(plan.schema.clone(), &key_types, specs, plan.runs.len(), stream_options)?;
    for (i, run) in plan.runs.iter().enumerate() {
        frontier.set_check_sorted(i, run.check_sorted);
    }
    let readers: Vec<RunReader> = plan
        .runs
        .iter()
        .map(|run| {
            let f = &plan.files[run.file];
            RunReader { run, path: &f.path, metadata: &f.metadata, reader: None }
        })
        .collect();

    // The writer thread: one round in flight between it and the merge. It renames the
    // output into place only on `Finish`; if the merge fails, the channel closes without
    // it and the temporary file is removed.
    enum ToWriter {
        Rows(Vec<RecordBatch>),
        Finish,
    }
    let (to_writer, from_merge) = mpsc::sync_channel::<ToWriter>(1);
    let (mut rounds_cpu, mut rounds_gpu) = (0, 0);
    let (mut read_time, mut merge_time) = (Duration::ZERO, Duration::ZERO);
    let expected_rows = plan.total_rows;
    let written: Result<(Written, Duration)> = std::thread::scope(|scope| {
        let writer_thread = scope.spawn(move || -> Result<Option<(Written, Duration)>> {
            let mut writer = writer;
            let mut busy = Duration::ZERO;
            for message in from_merge {
                match message {
                    ToWriter::Rows(batches) => {
                        let t = Instant::now();
                        for b in batches {
                            writer.write(b)?;
                        }
                        busy += t.elapsed();
                        progress(writer.rows());
                    }
                    ToWriter::Finish => {
                        // Fewer rows than the metadata counts would mean a reader lost some.
                        if writer.rows() != expected_rows {
                            return Err(Error::File {
                                path: output.to_path_buf(),
                                detail: format!("merged {} rows but the inputs' metadata counts {expected_rows}; nothing written", writer.rows()),
                            });
                        }
                        let t = Instant::now();
                        let written = writer.finish()?;
                        return Ok(Some((written, busy + t.elapsed())));
                    }
                }
            }
            Ok(None)
        });
        // The readers: with few runs, each decodes on its own thread, a batch ahead of the
        // merge (decoding overlaps merging and writing); with many, in the merge loop, in
        // parallel.
        let mut sources = if readers.len() <= MAX_READER_THREADS {
            let receivers = readers
                .into_iter()
                .map(|mut reader| {
                    let (send, receive) = mpsc::sync_channel::<Result<Option<RecordBatch>>>(1);
                    scope.spawn(move || loop {
                        let next = reader.next_batch(window);
                        let last = !matches!(next, Ok(Some(_)));
                        // A closed channel means the merge stopped (an error): stop too.
                        if send.send(next).is_err() || last {
                            break;
                        }
                    });
                    receive
                })
                .collect();
            Sources::Threads(receivers)
        } else {
            Sources::Inline(readers)
        };
        let merged = (|| -> Result<()> {
            while !frontier.is_finished() {
                // 1. Fill every window that wants rows.
                let t = Instant::now();
                loop {
                    let wanted: Vec<usize> = (0..sources.len()).filter(|&i| frontier.wants(i)).collect();
                    if wanted.is_empty() {
                        break;
                    }
                    let batches: Vec<(usize, Result<Option<RecordBatch>>)> = match &mut sources {
                        Sources::Threads(receivers) => wanted.iter().map(|&i| (i, receivers[i].recv().unwrap_or(Ok(None)))).collect(),
                        Sources::Inline(readers) => {
                            let mut slots: Vec<(usize, &mut RunReader)> =
                                readers.iter_mut().enumerate().filter(|(i, _)| wanted.binary_search(i).is_ok()).collect();
                            slots.par_iter_mut().map(|(i, r)| (*i, r.next_batch(window))).collect()
                        }
                    };
                    for (i, batch) in batches {
                        match batch? {
                            None => frontier.finish_input(i),
                            Some(b) => {
                                let keys: Vec<ArrayRef> = key_index.iter().map(|&c| b.column(c).clone()).collect();
                                let b = b.with_schema(plan.schema.clone()).map_err(Error::from)?;
                                frontier.push(i, b, keys).map_err(|e| not_sorted_in_file(e, plan, i))?;
                            }
                        }
                    }
                }
                read_time += t.elapsed();
                // 2. Merge what the frontier lets out; 3. hand it to the writer.
                let t = Instant::now();
                let chunk = frontier.merge_round()?;
                merge_time += t.elapsed();
                match chunk.engine {
                    Engine::Gpu => rounds_gpu += 1,
                    _ => rounds_cpu += 1,
                }
                if chunk.rows > 0 && to_writer.send(ToWriter::Rows(chunk.batches)).is_err() {
                    return Ok(()); // the writer failed; its error is reported below
                }
            }
            let _ = to_writer.send(ToWriter::Finish);
            Ok(())
        })();
        drop(to_writer);
        drop(sources); // reader threads still running see their channel close and stop
        let written = writer_thread.join().map_err(|_| Error::InvalidArgument("the writer thread panicked".into()))?;
        merged?;
        written?.ok_or_else(|| Error::InvalidArgument("the writer stopped before the end".into()))
    });
    let (written, write_time) = written?;
    Ok(MergeSummary {
        rows: written.rows,
        input_files: plan.files.len(),
        runs: plan.runs.len(),
        input_bytes: plan.total_bytes,
        output_bytes: written.bytes,
        output_row_groups: written.row_groups,
        rounds_cpu,
        rounds_gpu,
        window_rows: window,
        elapsed: start.elapsed(),
        read_time,
        merge_time,
        write_time,
    })
}

/// Names the file, row group and row of an order violation in run `i`.
fn not_sorted_in_file(e: Error, plan: &MergePlan, i: usize) -> Error {
    match e {
        Error::NotSorted { row, detail, .. } => {
            let run = &plan.runs[i];
            let (row_group, row) = run.locate(row);
            Error::FileNotSorted { path: plan.files[run.file].path.clone(), row_group, row, detail }
        }
        other => other,
    }
}

//! The merged output: one Parquet file, written to a temporary file beside the target and
//! renamed over it only when complete, so a failure (or an interrupted run) never leaves a
//! partial output under the target's name. The temporary file has a short name of its own
//! (`.corank-<16 hex digits>.tmp`, so any target name that fits fits it too), the mode
//! `File::create` gives (on Unix 0666 less the umask; a replaced file's mode when
//! [`WriterSettings::overwrite`] replaces one), and is registered for the signal handler ([`crate::parquet::interrupt`]) before it
//! exists. It is removed when the writer is dropped, and also when a signal ends the process
//! if the program asked for that; it is locked while it exists, so that one left by a run
//! that was killed (SIGKILL) is told apart and removed by the next run ([`crate::parquet::leftovers`]).
//! Only a regular file is ever replaced.
//!
//! The output keeps the inputs' Parquet schema where they share one (logical types such as
//! UUID, JSON or TIME adjusted to UTC, which the Arrow schema does not carry), see
//! [`common_parquet_schema`].
//!
//! Row groups are cut at `row_group_rows` rows or before `row_group_bytes` bytes of buffered
//! Arrow data (the bytes of the batches' slices), whichever comes first, a batch cut between
//! rows where it does not fit whole, and never into more than [`MAX_ROW_GROUPS`] (a row
//! group over `row_group_bytes`, where that or a single row forces one, is warned about).
//! Their columns are encoded and compressed in parallel
//! (one task per leaf column, arrow-rs's `ArrowRowGroupWriterFactory`), several row groups
//! at once ([`row_groups_in_flight`]), and appended in order. A row group that needs no
//! merge is copied from its input as it is ([`SortedParquetWriter::append_row_group`], see
//! [`crate::parquet::merge::passthrough`]): the row group being filled is cut first, short if need be, and
//! the copy waits in line behind the row groups still encoding (its bytes read in the
//! meantime, in one read per column chunk, unless it is larger than two row groups of the
//! output), so the writer never stops for an encode. Every
//! [`WRITEBACK_BYTES`] the kernel is asked to start writing the file out, so the `fsync`
//! before the rename does not wait for the whole file.
//! Every row group carries the merge key as `sorting_columns`; the inputs' key-value
//! metadata is kept.
//!
//! **Dictionary columns** keep their declared key type in the stored Arrow schema
//! (`ARROW:schema`, written at the end) unless a row group's column chunk holds more
//! distinct values than that key type can index: Parquet writes one dictionary per column
//! chunk, and readers (arrow-rs, pyarrow) refuse a dictionary page larger than the declared
//! key type. Such a column's key type is widened to the narrowest signed type that holds
//! the largest count seen ([`widened_dictionary_keys`]); a column that fits keeps its type.

//!
//! Files: `compression` (the codec names), `output` (output checks, the temporary file),
//! `schema` (the output's Parquet schema), `pipeline` (row groups encoded in parallel and
//! appended in order), `copied` (row groups copied unchanged), [`dictionary`] (which
//! columns keep dictionaries, and dictionary key widening), [`offset_index`] (offset indexes
//! built for copied chunks). `sorting_columns` are written and read in
//! [`crate::parquet::sorting_columns`].

mod compression;
mod copied;
pub mod dictionary;
pub mod offset_index;
mod output;
mod pipeline;
mod schema;
pub(crate) mod split;

pub use super::sorting_columns::{sorting_columns, sorting_columns_in};
pub use compression::{parse_compression, show_compression};
pub use dictionary::widened_dictionary_keys;
pub(crate) use dictionary::{distinct_values_of, narrow_dictionary};
pub use output::check_output;
pub use pipeline::row_group_bytes_within;
pub use schema::common_parquet_schema;
pub use split::{OutputFile, SplitFiles};

use super::interrupt::TempGuard;
use super::store::Sink;
use crate::cancel::Cancel;
use crate::error::{Error, Result, Setting};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use dictionary::DictionaryChoice;
use output::{create_temp, not_regular};
use parquet::arrow::arrow_writer::{ArrowRowGroupWriterFactory, ArrowWriterOptions};
use parquet::arrow::{encode_arrow_schema, ArrowWriter, ARROW_SCHEMA_META_KEY as ARROW_SCHEMA_KEY};
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::SchemaDescriptor;
use pipeline::InFlight;
use std::collections::VecDeque;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use tempfile::TempPath;

/// How the output is written (the knobs of arrow-rs's `parquet-rewrite`).
/// [`SortedParquetWriter`] has an example.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// The output's codec (zstd at its default level by default; [`parse_compression`]
    /// reads the command line's names).
    pub compression: Compression,
    /// Most rows per row group.
    pub row_group_rows: usize,
    /// Most bytes of Arrow data buffered per row group (before encoding).
    pub row_group_bytes: usize,
    /// Replace an existing output file.
    pub overwrite: bool,
    /// Flush the file to disk (`fsync`, with writeback started along the way) before it is
    /// renamed into place, so that a completed output survives a crash. Off for a sort's
    /// spill runs: temporary files, read back from the page cache and removed, which the
    /// disk never needs to see.
    pub sync: bool,
    /// Split the output of [`merge_files`](crate::parquet::merge_files()) and
    /// [`sort_files`](crate::parquet::sort_files()) into a directory of files of bounded
    /// size ([`SplitFiles`], which says how); `None` (the default): one file.
    /// [`SortedParquetWriter`] writes one file and refuses it.
    pub split: Option<SplitFiles>,
}

impl Default for WriterSettings {
    fn default() -> Self {
        Self {
            compression: Compression::ZSTD(Default::default()),
            row_group_rows: 1 << 20,
            row_group_bytes: 128 << 20,
            overwrite: false,
            sync: true,
            split: None,
        }
    }
}

/// Bytes written and rows, once the file is in place ([`SortedParquetWriter::finish`];
/// [`SortedParquetWriter`] has an example).
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// Rows in the file.
    pub rows: usize,
    /// Row groups in the file.
    pub row_groups: usize,
    /// Bytes of the file.
    pub bytes: u64,
    /// Rows and row groups copied unchanged from the inputs (passthrough).
    pub passthrough_rows: usize,
    /// Row groups copied unchanged (each one of `row_groups`).
    pub passthrough_row_groups: usize,
    /// Of those, row groups whose codec differs from the output's.
    pub codec_kept_row_groups: usize,
}

/// Most row groups a Parquet file holds (its row group ordinal is an `i16`).
pub const MAX_ROW_GROUPS: usize = i16::MAX as usize;

/// A sorted Parquet output in progress.
///
/// ```no_run
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use corank::parquet::{parse_compression, SortedParquetWriter, WriterSettings};
/// use corank::SortKey;
///
/// // Batches already sorted by `k`: the writer declares the order, it does not sort.
/// let batch = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)]).unwrap();
/// let settings = WriterSettings { compression: parse_compression("snappy")?, overwrite: true, ..Default::default() };
/// let keys = [SortKey::asc("k")];
/// let mut writer = SortedParquetWriter::create("sorted.parquet".as_ref(), batch.schema(), None, &keys, vec![], 3, settings)?;
/// writer.write(batch)?;
/// let written = writer.finish()?; // renamed into place only now
/// assert_eq!((written.rows, written.row_groups), (3, 1));
/// # Ok::<(), corank::Error>(())
/// ```
pub struct SortedParquetWriter {
    target: PathBuf,
    overwrite: bool,
    /// Removed when dropped (declared before `_on_signal`, so dropped first); `None` for an
    /// output in an object store (an upload, aborted when dropped: `Sink`).
    temp: Option<TempPath>,
    /// Removes `temp` if a signal ends the process (src/parquet/interrupt.rs).
    _on_signal: Option<TempGuard>,
    writer: SerializedFileWriter<BufWriter<Sink>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    settings: WriterSettings,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
    rows: usize,
    /// Rows the caller means to write: row groups are cut on bytes only while the rest
    /// still fits in [`MAX_ROW_GROUPS`].
    expected_rows: usize,
    row_groups: usize,
    row_groups_started: usize,
    /// Time spent waiting for the oldest row group's encoding, and appending row groups
    /// (`-vv`: which of the two holds the writer's thread).
    encode_wait: std::time::Duration,
    append_time: std::time::Duration,
    /// Row groups not yet in the file, oldest first: being encoded, or waiting to be
    /// copied after the ones before them.
    in_flight: VecDeque<InFlight>,
    /// Per top-level column, the most distinct values a narrow dictionary column held in
    /// one row group (see [`widened_dictionary_keys`]).
    max_distinct: Vec<usize>,
    /// Row groups still to come besides the merged rows' (copied ones, and the short ones
    /// cut before them): cuts on bytes leave room for them.
    reserved_row_groups: usize,
    passthrough_rows: usize,
    passthrough_row_groups: usize,
    codec_kept_row_groups: usize,
    /// Bytes of the file handed to the kernel's writeback so far ([`WRITEBACK_BYTES`]).
    written_back: usize,
    /// Compressed bytes of the row groups queued to be copied (held in memory once read).
    copy_bytes: usize,
    /// Which columns keep their dictionary ([`super::dictionary`]).
    dictionary: DictionaryChoice,
    /// Whether the warning that a row group passes `row_group_bytes` was given.
    warned_over_bytes: bool,
    /// Stops the writing with [`Error::Cancelled`] once set ([`Self::set_cancel`]).
    cancel: Option<Cancel>,
    /// Bytes of Arrow data of the row groups encoded and appended, and the bytes they took
    /// in the file: their compression ratio (a split output's size estimate).
    encoded: (usize, usize),
}

/// Bytes of a batch's rows: its columns' slices, not the buffers they slice (a merged
/// batch is often a slice of a large window).
fn slice_bytes(batch: &RecordBatch) -> usize {
    batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size())).sum()
}

/// The most leading rows of `batch`, up to `most`, whose [`slice_bytes`] less `fixed` stay
/// within `budget` (0 where not even one row does). The bytes grow with the rows.
fn rows_within(batch: &RecordBatch, most: usize, budget: usize, fixed: usize) -> usize {
    let fits = |rows: usize| slice_bytes(&batch.slice(0, rows)).saturating_sub(fixed) <= budget;
    if fits(most) {
        return most;
    }
    // The largest fitting count, by bisection: `lo` fits (or is 0), `hi` does not.
    let (mut lo, mut hi) = (0, most);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Refuses `settings` that cannot write `expected_rows` rows: a row or byte limit of 0, or
/// more than [`MAX_ROW_GROUPS`] row groups of `row_group_rows` (a usage error naming the
/// setting, which the command line words as its flag). [`SortedParquetWriter::create`]
/// checks it; a caller that decides its row groups itself checks it before reading a row.
pub fn check_row_groups(settings: &WriterSettings, expected_rows: usize) -> Result<()> {
    for (value, setting) in [(settings.row_group_rows, Setting::RowGroupRows), (settings.row_group_bytes, Setting::RowGroupBytes)] {
        if value == 0 {
            return Err(Error::InvalidSetting { setting, detail: "0: it must be at least 1".into() });
        }
    }
    let groups = expected_rows.div_ceil(settings.row_group_rows);
    if groups > MAX_ROW_GROUPS {
        return Err(Error::InvalidSetting {
            setting: Setting::RowGroupRows,
            detail: format!(
                "{} makes {groups} row groups of the {expected_rows} rows; a Parquet file holds at most {MAX_ROW_GROUPS}: use {} or more",
                settings.row_group_rows,
                expected_rows.div_ceil(MAX_ROW_GROUPS)
            ),
        });
    }
    Ok(())
}

impl SortedParquetWriter {
    /// Creates the temporary file beside `target`. `parquet_schema` is the output's Parquet
    /// schema (see `common_parquet_schema`; `None`: derived from `schema`). `metadata` is
    /// kept in the footer; `keys` become every row group's `sorting_columns`.
    /// `expected_rows` is how many rows will be written: more than `MAX_ROW_GROUPS` row
    /// groups of `settings.row_group_rows` are refused here.
    pub fn create(
        target: &Path,
        schema: SchemaRef,
        parquet_schema: Option<SchemaDescriptor>,
        keys: &[SortKey],
        metadata: Vec<KeyValue>,
        expected_rows: usize,
        settings: WriterSettings,
    ) -> Result<Self> {
        if settings.split.is_some() {
            return Err(Error::InvalidArgument(
                "SortedParquetWriter writes one file; a split output is written by merge_files and sort_files".into(),
            ));
        }
        check_output(target, settings.overwrite)?;
        check_row_groups(&settings, expected_rows)?;
        let local = crate::parquet::store::local_path(target);
        let target = local.as_ref();
        // Sorting columns name leaf columns; keys are top-level primitive columns.
        let sorting = match &parquet_schema {
            Some(leaves) => sorting_columns_in(leaves, keys),
            None => sorting_columns(&schema, keys),
        }
        .map_err(|e| match e {
            Error::Parquet { path: None, context, source } => Error::Parquet { path: Some(target.to_path_buf()), context, source },
            other => other,
        })?;
        let (sink, temp, on_signal) = if crate::parquet::store::is_url(target) {
            (Sink::upload(target)?, None, None)
        } else {
            let dir = match target.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let (file, temp, on_signal) =
                create_temp(&dir).map_err(|e| Error::io(target, format!("cannot create a file in {}", dir.display()), e))?;
            (Sink::File(file), Some(temp), Some(on_signal))
        };

        let props = WriterProperties::builder()
            .set_compression(settings.compression)
            .set_max_row_group_row_count(Some(settings.row_group_rows))
            .set_sorting_columns(Some(sorting))
            .set_key_value_metadata((!metadata.is_empty()).then_some(metadata))
            .build();
        // The Arrow schema is stored at the end, once dictionary key types are settled.
        let mut options = ArrowWriterOptions::new().with_properties(props).with_skip_arrow_metadata(true);
        if let Some(parquet_schema) = parquet_schema {
            options = options.with_parquet_schema(parquet_schema);
        }
        let arrow_writer = ArrowWriter::try_new_with_options(BufWriter::with_capacity(1 << 20, sink), schema.clone(), options)
            .map_err(|e| Error::parquet(target, "", e))?;
        let (writer, factory) = arrow_writer.into_serialized_writer().map_err(|e| Error::parquet(target, "", e))?;
        Ok(Self {
            target: target.to_path_buf(),
            overwrite: settings.overwrite,
            temp,
            _on_signal: on_signal,
            writer,
            factory,
            settings,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            rows: 0,
            expected_rows,
            row_groups: 0,
            row_groups_started: 0,
            encode_wait: std::time::Duration::ZERO,
            append_time: std::time::Duration::ZERO,
            in_flight: VecDeque::new(),
            max_distinct: vec![0; schema.fields().len()],
            reserved_row_groups: 0,
            passthrough_rows: 0,
            passthrough_row_groups: 0,
            codec_kept_row_groups: 0,
            written_back: 0,
            copy_bytes: 0,
            dictionary: DictionaryChoice::Undecided,
            warned_over_bytes: false,
            cancel: None,
            encoded: (0, 0),
            schema,
        })
    }

    /// Stops the writer once `cancel` is set: [`write`](Self::write),
    /// [`finish`](Self::finish) and the row groups encoding return [`Error::Cancelled`]
    /// (checked per batch, per leaf column of a batch being encoded, and before the rename),
    /// and the temporary file goes when the writer is dropped.
    pub(crate) fn set_cancel(&mut self, cancel: Option<Cancel>) {
        self.cancel = cancel;
    }

    /// Buffers `batch`; writes a row group whenever one is full: at `row_group_rows` rows,
    /// or before its bytes would pass `row_group_bytes`, whatever the batches' size (a
    /// batch is cut between rows to fit). A row group passes `row_group_bytes` only where
    /// it cannot be helped, with a warning: a single row (or a batch's share of a
    /// dictionary) larger than the limit, or more row groups than a file may hold.
    pub fn write(&mut self, batch: RecordBatch) -> Result<()> {
        crate::cancel::check(self.cancel.as_ref())?;
        let mut batch = batch;
        while batch.num_rows() > 0 {
            let room = self.settings.row_group_rows - self.pending_rows;
            let mut take = room.min(batch.num_rows());
            let mut bytes = slice_bytes(&batch.slice(0, take));
            let limit = self.settings.row_group_bytes;
            if self.pending_bytes + bytes > limit {
                if !self.may_cut_on_bytes() {
                    self.warn_over_bytes("a Parquet file holds at most 32,767 row groups, so the rest are larger");
                } else {
                    take = rows_within(&batch, take, limit.saturating_sub(self.pending_bytes), 0);
                    if take == 0 && self.pending_rows > 0 {
                        self.flush_row_group()?; // the next rows start a row group of their own
                        continue;
                    }
                    if take == 0 {
                        // Not one row fits an empty row group: rows by their own bytes (a
                        // batch's dictionary counts with its every slice), at least one.
                        let fixed = slice_bytes(&batch.slice(0, 0));
                        take = rows_within(&batch, room.min(batch.num_rows()), limit, fixed).max(1);
                        self.warn_over_bytes("a row (or a batch's dictionary) is larger than that alone");
                    }
                    bytes = slice_bytes(&batch.slice(0, take));
                }
            }
            let head = batch.slice(0, take);
            batch = batch.slice(take, batch.num_rows() - take);
            self.pending_rows += take;
            self.pending_bytes += bytes;
            self.pending.push(head);
            if self.pending_rows >= self.settings.row_group_rows
                || (self.pending_bytes >= self.settings.row_group_bytes && self.may_cut_on_bytes())
            {
                self.flush_row_group()?;
            }
        }
        Ok(())
    }

    /// Says once per output that a row group passes `row_group_bytes`, and why.
    fn warn_over_bytes(&mut self, why: &str) {
        if !self.warned_over_bytes {
            self.warned_over_bytes = true;
            log::warn!(
                "{}: row groups of more than {} bytes (the row group byte limit): {why}",
                self.target.display(),
                self.settings.row_group_bytes
            );
        }
    }

    /// Whether cutting the buffered rows as a row group now, before it is full, still
    /// leaves room for the rest in full row groups within [`MAX_ROW_GROUPS`].
    fn may_cut_on_bytes(&self) -> bool {
        let rest = self.expected_rows.saturating_sub(self.rows());
        self.row_groups_started + 1 + rest.div_ceil(self.settings.row_group_rows) + self.reserved_row_groups <= MAX_ROW_GROUPS
    }

    /// The output's Parquet schema (what [`append_row_group`](Self::append_row_group)
    /// requires of a copied row group's columns).
    pub(crate) fn parquet_schema(&self) -> &SchemaDescriptor {
        self.writer.schema_descr()
    }

    /// Leaves room for `n` more row groups than the merged rows need (see
    /// [`append_row_group`](Self::append_row_group)).
    pub(crate) fn reserve_row_groups(&mut self, n: usize) {
        self.reserved_row_groups = n;
    }

    /// Rows written so far (in finished row groups, in flight and buffered).
    pub fn rows(&self) -> usize {
        self.rows + self.in_flight.iter().map(InFlight::rows).sum::<usize>() + self.pending_rows
    }

    /// Writes the last row group and the footer, then renames the file into place.
    /// Dropping the writer without calling this removes the temporary file.
    pub fn finish(self) -> Result<Written> {
        self.stage(false)?.commit()
    }

    /// Writes the last row group and the footer, the file complete (synced, or every part of
    /// its upload sent where `defer_upload`) but not yet in place: [`Staged::commit`] puts it
    /// there; dropping the [`Staged`] removes it (or aborts the upload). Without
    /// `defer_upload` an upload completes here (a small one is then a single request).
    pub(crate) fn stage(mut self, defer_upload: bool) -> Result<Staged> {
        crate::cancel::check(self.cancel.as_ref())?;
        self.flush_row_group()?;
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        let target = self.target.clone();
        log::debug!(
            "{}: {} row groups encoded; waited {:.1?} for their encoding, appended them in {:.1?}",
            target.display(),
            self.row_groups_started,
            self.encode_wait,
            self.append_time
        );
        let stored = widened_dictionary_keys(&self.schema, &self.max_distinct);
        self.writer.append_key_value_metadata(KeyValue::new(ARROW_SCHEMA_KEY.to_string(), encode_arrow_schema(&stored)));
        let mut written = self.written(0);
        let inner = self.writer.into_inner().map_err(|e| Error::parquet(&target, "", e))?;
        let (overwrite, cancel) = (self.overwrite, self.cancel.clone());
        let file = match inner.into_inner().map_err(|e| Error::io(&target, "", e.into_error()))? {
            Sink::File(file) => file,
            // An object in a store: the upload completed, the object appears now.
            #[allow(unreachable_patterns)]
            mut upload => {
                if defer_upload {
                    written.bytes = upload.stage()?;
                    return Ok(Staged { target, overwrite, written, cancel, place: Place::Upload(upload) });
                }
                // The last moment a cancel leaves the output as it was (the upload aborted).
                crate::cancel::check(self.cancel.as_ref())?;
                written.bytes = upload.complete(self.overwrite)?;
                return Ok(Staged { target, overwrite, written, cancel, place: Place::Done });
            }
        };
        // The target again, as it is now: still not there, or a regular file to replace, whose
        // mode the new file takes.
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if !meta.file_type().is_file() => return Err(not_regular(&target, &meta)),
            Ok(meta) if self.overwrite => file.set_permissions(meta.permissions()).map_err(|e| Error::io(&target, "", e))?,
            _ => {}
        }
        if self.settings.sync {
            let t = std::time::Instant::now();
            file.sync_all().map_err(|e| Error::io(&target, "", e))?;
            log::debug!("{}: synced to disk in {:?}", target.display(), t.elapsed());
        }
        written.bytes = file.metadata().map_err(|e| Error::io(&target, "", e))?.len();
        drop(file);
        let temp = self.temp.take().ok_or_else(|| Error::Internal("a local output without its temporary file".into()))?;
        let on_signal = self._on_signal.take();
        Ok(Staged { target, overwrite, written, cancel, place: Place::Temp(temp, on_signal) })
    }

    /// Bytes in the file so far: its header and the row groups appended (not those still
    /// encoding, nor the rows buffered).
    pub(crate) fn bytes_written(&self) -> u64 {
        self.writer.bytes_written() as u64
    }

    /// Bytes of Arrow data not yet in the file: of the row groups encoding, and buffered.
    pub(crate) fn unwritten_arrow_bytes(&self) -> usize {
        let encoding: usize = self.in_flight.iter().map(|g| if let InFlight::Encoding(_, _, b) = g { *b } else { 0 }).sum();
        encoding + self.pending_bytes
    }

    /// Bytes of Arrow data of the row groups encoded and appended, and their bytes in the file.
    pub(crate) fn encoded_bytes(&self) -> (usize, usize) {
        self.encoded
    }

    /// Waits for the row groups being encoded and appends them: [`bytes_written`](Self::bytes_written)
    /// then counts them.
    pub(crate) fn drain(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        Ok(())
    }

    /// What was written, the file's `bytes` long.
    fn written(&self, bytes: u64) -> Written {
        Written {
            rows: self.rows,
            row_groups: self.row_groups,
            bytes,
            passthrough_rows: self.passthrough_rows,
            passthrough_row_groups: self.passthrough_row_groups,
            codec_kept_row_groups: self.codec_kept_row_groups,
        }
    }
}

/// A complete output not yet in place ([`SortedParquetWriter::stage`]): removed (or its
/// upload aborted) when dropped without [`commit`](Staged::commit).
pub(crate) struct Staged {
    target: PathBuf,
    overwrite: bool,
    written: Written,
    cancel: Option<Cancel>,
    place: Place,
}

/// Where a staged output waits.
enum Place {
    /// A local temporary file (declared before its signal guard, so dropped first).
    Temp(TempPath, Option<TempGuard>),
    /// An upload with every part sent, completed by the commit.
    Upload(Sink),
    /// Already in place (an upload not deferred).
    Done,
}

impl Staged {
    /// The output's path (or URL).
    pub(crate) fn target(&self) -> &Path {
        &self.target
    }

    /// Gives a local staged file the temporary name `to` (in its directory), which a signal
    /// handler can build ([`crate::parquet::interrupt::staged_name`]); an upload is left as it is.
    pub(crate) fn rename_temp(&mut self, to: &Path) -> Result<()> {
        if let Place::Temp(temp, _) = &mut self.place {
            std::fs::rename(&**temp, to).map_err(|e| Error::io(to, "naming a finished part", e))?;
            let renamed = TempPath::try_from_path(to).map_err(|e| {
                let _ = std::fs::remove_file(to);
                Error::io(to, "naming a finished part", e)
            })?;
            // Nothing is left under the old name to remove.
            let _ = std::mem::replace(temp, renamed).keep();
        }
        Ok(())
    }

    /// What the file holds.
    pub(crate) fn written(&self) -> Written {
        self.written
    }

    /// Puts the output in place: the temporary file renamed over the target (refused where
    /// it exists, unless `overwrite`), the upload completed.
    pub(crate) fn commit(mut self) -> Result<Written> {
        let target = self.target.clone();
        match std::mem::replace(&mut self.place, Place::Done) {
            Place::Done => Ok(self.written),
            Place::Upload(sink) => {
                crate::cancel::check(self.cancel.as_ref())?;
                sink.complete(self.overwrite)?;
                Ok(self.written)
            }
            Place::Temp(temp, on_signal) => {
                // The last moment a cancel leaves the output as it was.
                crate::cancel::check(self.cancel.as_ref())?;
                if let Ok(meta) = std::fs::symlink_metadata(&target) {
                    if !meta.file_type().is_file() {
                        return Err(not_regular(&target, &meta));
                    }
                }
                let persisted = if self.overwrite { temp.persist(&target) } else { temp.persist_noclobber(&target) };
                let result = persisted.map_err(|e| {
                    if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                        Error::OutputExists { path: target.to_path_buf() }
                    } else {
                        Error::io(&target, "", e.error)
                    }
                });
                drop(on_signal);
                result.map(|()| self.written)
            }
        }
    }
}

//! A split output: the sorted rows of a merge or a sort written as a sequence of files of
//! bounded size, what compaction jobs write ([`WriterSettings::split`], the command line's
//! `--max-file-rows` and `--max-file-bytes`).
//!
//! **Names.** The output names a directory (or a prefix of an object store, `s3://b/path/`,
//! the `/` at its end optional); the files are `part-00000.parquet`, `part-00001.parquet`,
//! … in key order (five digits, more past 99,999), as Spark and DuckDB write a directory of
//! parts: readers take the directory (`read_parquet('out/*.parquet')`) and list the files
//! in name order, which is the rows' order. A local directory is created (with its parents)
//! where missing.
//!
//! **Cuts.** A file ends only between two rows of different keys, so that each file holds a
//! contiguous key range and a file's last key is below the next file's first (in the key's
//! order): a run of equal keys is never split.
//! - `max_rows`: a file holds at most that many rows, ending at the last key change that
//!   fits. A run of equal keys that alone holds more rows fills a file of its own, which
//!   grows past the limit (the only file that does).
//! - `max_bytes` (approximate, as DuckDB's `FILE_SIZE_BYTES`): a file ends at the first key
//!   change after its size reaches the limit. The size is that of its row groups in the
//!   file, plus the Arrow bytes of those still encoding and of the rows buffered at the
//!   compression ratio of the row groups written so far (a byte a byte before the first);
//!   where that estimate reaches the limit, the row groups encoding are waited for and
//!   counted as they are (checked at least once a row group's rows). A file ends up larger
//!   than the limit by less than a row group (its last, written when the file ends), its
//!   footer, and a run of equal keys; only the last file is smaller.
//! - Both: whichever ends the file first.
//!
//! Each file is written as an unsplit output is ([`SortedParquetWriter`]): the same schema,
//! key-value metadata and `sorting_columns`, row groups cut by the same settings, its last
//! row group short where the file ends. An output with no rows is one file with none.
//!
//! **Memory.** The last run of equal keys is held back, unwritten, until the key changes:
//! whether it fits the current file is known only then. A run that starts a file is written
//! at once (it stays in that file whatever its length); a run that outgrows the row group
//! byte limit (`row_group_bytes`) while held starts the next file at once (with `max_rows`;
//! the file before ends short of its limit) and is written from then on.
//!
//! **All or nothing.** Every file goes through the usual path (a temporary file beside its
//! name, or a multipart upload), but none is put in place before all are written: each
//! finished file waits, complete (synced; its upload's parts all sent), and only at the end
//! are they renamed (uploads completed) in order. An error or a cancel before that leaves
//! none of them (temporary files removed, uploads aborted); one while they are put in place
//! removes those already in place. A signal (Ctrl-C, where the program installed corank's
//! handlers) does the same for a local output: the finished files wait under names the
//! handler can build (`crate::parquet::interrupt`), and it unlinks them and the parts already
//! in place. For an object store's, the signal aborts the uploads not completed; one during
//! the completions leaves those already completed.
//!
//! **Existing parts.** Without `overwrite` a directory that holds any `part-N.parquet` (five
//! digits or more) is refused, its other files not looked at. With `overwrite` the new files
//! replace those of the same names, and the older parts beyond the new last one are removed
//! once the new set is in place, so that the directory holds exactly the new set; other files
//! are left alone. (An error while the files are put in place can then leave the directory
//! without the older parts they replaced.)
//!
//! Passthrough (row groups copied unchanged) is off for a split output: a copied row group
//! cannot be cut, and the key change before it is not known where the cut is planned; the
//! merge re-encodes every row ([`crate::parquet::merge::passthrough`]).

use super::{slice_bytes, SortedParquetWriter, Staged, WriterSettings, Written};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::parquet::interrupt::{staged_name, StagedSetGuard};
use crate::sort_key::SortKey;
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use parquet::file::metadata::KeyValue;
use parquet::schema::types::SchemaDescriptor;
use std::path::{Path, PathBuf};

/// How an output is split into files ([`WriterSettings::split`]): `DIR/part-00000.parquet`,
/// `part-00001.parquet`, ..., each a contiguous key range (docs/cli.md, "Split outputs").
/// At least one limit, neither 0.
///
/// ```no_run
/// use corank::parquet::{merge_files, plan_merge, MergeFilesOptions, SplitFiles, WriterSettings};
/// use std::path::PathBuf;
///
/// let plan = plan_merge(&[PathBuf::from("a.parquet"), PathBuf::from("b.parquet")], None)?;
/// let split = SplitFiles { max_rows: Some(10_000_000), max_bytes: None };
/// let options = MergeFilesOptions { writer: WriterSettings { split: Some(split), ..Default::default() }, ..Default::default() };
/// // out/part-00000.parquet, out/part-00001.parquet, ...
/// let summary = merge_files(&plan, "out/".as_ref(), &options, &|_| {})?;
/// for f in &summary.output_files {
///     println!("{}: {} rows, keys {:?} to {:?}", f.path.display(), f.rows, f.first_key, f.last_key);
/// }
/// # Ok::<(), corank::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitFiles {
    /// Most rows a file holds (a run of equal keys longer than this fills a file of its own).
    pub max_rows: Option<usize>,
    /// Bytes after which a file ends, at the next key change (approximate: a file passes
    /// it by about a batch and a row group, see the module `writer::split`'s doc in the
    /// source, or docs/cli.md).
    pub max_bytes: Option<u64>,
}

impl SplitFiles {
    /// Refuses a split without a limit, or with a limit of 0.
    pub fn check(&self) -> Result<()> {
        match (self.max_rows, self.max_bytes) {
            (None, None) => {
                Err(Error::InvalidArgument("a split output needs max_rows or max_bytes (--max-file-rows, --max-file-bytes)".into()))
            }
            (Some(0), _) => Err(Error::InvalidArgument("--max-file-rows (max_rows) 0: a file holds at least one row".into())),
            (_, Some(0)) => Err(Error::InvalidArgument("--max-file-bytes (max_bytes) 0: a file holds at least one byte".into())),
            _ => Ok(()),
        }
    }
}

/// One file of a split output, once in place (`MergeSummary::output_files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    /// Its path, or URL.
    pub path: PathBuf,
    /// Rows in it.
    pub rows: usize,
    /// Its row groups.
    pub row_groups: usize,
    /// Its bytes.
    pub bytes: u64,
    /// The key of its first row: each key column's value as text (`null` for a null; the
    /// way Arrow displays values). Empty in a file with no rows.
    pub first_key: Vec<String>,
    /// The key of its last row, as `first_key`.
    pub last_key: Vec<String>,
}

/// The name of the `index`th file of a split output in `dir` (a path or a URL).
pub(crate) fn part_path(dir: &Path, index: usize) -> PathBuf {
    let name = format!("part-{index:05}.parquet");
    if crate::parquet::store::is_url(dir) {
        PathBuf::from(format!("{}/{name}", dir.to_string_lossy().trim_end_matches('/')))
    } else {
        crate::parquet::store::local_path(dir).join(name)
    }
}

/// The index of a part's file name (`part-00012.parquet` is 12), `None` for another name.
fn part_index(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("part-")?.strip_suffix(".parquet")?;
    (digits.len() >= 5 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// The parts in `dir` (path or URL), with their indices, in index order; none where the
/// directory is not there.
fn existing_parts(dir: &Path) -> Result<Vec<(usize, PathBuf)>> {
    let names: Vec<String> = if crate::parquet::store::is_url(dir) {
        crate::parquet::store::names_under(dir)?
    } else {
        let local = crate::parquet::store::local_path(dir);
        match std::fs::read_dir(&local) {
            Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io(local.as_ref(), "listing the output directory", e)),
        }
    };
    let mut parts: Vec<(usize, PathBuf)> = names.iter().filter_map(|n| part_index(n).map(|i| (i, part_path(dir, i)))).collect();
    parts.sort();
    Ok(parts)
}

/// Refuses a split output at `dir` that is not a directory, or that holds parts already
/// unless `overwrite` (see the module doc).
pub(crate) fn check_split_output(dir: &Path, overwrite: bool) -> Result<()> {
    if crate::parquet::store::is_url(dir) {
        if dir.to_string_lossy().to_ascii_lowercase().starts_with("http") {
            return crate::parquet::store::check_output(dir, overwrite); // read-only: refused there
        }
    } else {
        let local = crate::parquet::store::local_path(dir);
        if let Ok(meta) = std::fs::metadata(&local) {
            if !meta.is_dir() {
                return Err(Error::InvalidArgument(format!(
                    "output {} is a file: a split output (--max-file-rows, --max-file-bytes) is a directory of part-NNNNN.parquet files",
                    local.display()
                )));
            }
        }
    }
    if !overwrite {
        if let Some((_, path)) = existing_parts(dir)?.into_iter().next() {
            return Err(Error::OutputExists { path });
        }
    }
    Ok(())
}

/// Refuses inputs that are parts of the split output `dir` (compacting a directory into
/// itself): putting the new set in place replaces and removes them, and a failure then
/// would lose rows.
pub(crate) fn check_inputs_outside<'a>(dir: &Path, inputs: impl IntoIterator<Item = &'a Path>) -> Result<()> {
    let url = crate::parquet::store::is_url(dir);
    let same_dir = |parent: &Path| -> bool {
        if url {
            parent.to_string_lossy().trim_end_matches('/') == dir.to_string_lossy().trim_end_matches('/')
        } else {
            let local = crate::parquet::store::local_path(dir);
            match (parent.canonicalize(), local.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
        }
    };
    for input in inputs {
        let name = input.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let parent = match input.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if part_index(&name).is_some() && crate::parquet::store::is_url(input) == url && same_dir(parent) {
            return Err(Error::InvalidArgument(format!(
                "input {} is a part of the split output {}: write the new set to another directory",
                input.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Removes a part put in place (a file, or an object).
fn remove_part(path: &Path) -> Result<()> {
    if crate::parquet::store::is_url(path) {
        return crate::parquet::store::delete(path);
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, "removing a part", e)),
    }
}

/// The file being written, and the keys of its first and last rows.
struct Open {
    writer: SortedParquetWriter,
    first_key: Vec<String>,
    last_key: Vec<String>,
}

/// A split output being written (the module doc).
pub(crate) struct SplitWriter {
    dir: PathBuf,
    schema: SchemaRef,
    /// The Parquet schema each file is created with (`None`: derived from `schema`).
    given_schema: Option<SchemaDescriptor>,
    /// The files' Parquet schema, as the first file has it.
    parquet_schema: SchemaDescriptor,
    keys: Vec<SortKey>,
    metadata: Vec<KeyValue>,
    expected_rows: usize,
    /// Each file's settings (without `split`).
    settings: WriterSettings,
    limits: SplitFiles,
    cancel: Option<Cancel>,
    key_index: Vec<usize>,
    converter: RowConverter,
    current: Option<Open>,
    /// The last run of equal keys, held back until the key changes (unless `streaming`).
    held: Vec<RecordBatch>,
    held_rows: usize,
    held_bytes: usize,
    /// The last run is written as it comes: it starts the current file.
    streaming: bool,
    /// The key of the last row given to [`write`](Self::write).
    last_key: Option<OwnedRow>,
    /// The finished files, waiting to be put in place.
    staged: Vec<(Staged, OutputFile)>,
    /// The directory this writer created, removed (when empty) if it fails.
    created_dir: Option<PathBuf>,
    /// [`SortedParquetWriter::encoded_bytes`] of the files finished.
    encoded: (usize, usize),
    /// A local output's finished files, registered for the signal handler under the names
    /// `staged_name(base, i)`; `None` for an object store's (its uploads are aborted by the
    /// upload module's signal thread). Dropped after `staged` (declared after).
    on_signal: Option<(StagedSetGuard, u64)>,
}

impl SplitWriter {
    /// Checks `dir` ([`check_split_output`]), creates it where missing, and opens the first
    /// file. The arguments are [`SortedParquetWriter::create`]'s, `settings.split` set.
    pub(crate) fn create(
        dir: &Path,
        schema: SchemaRef,
        parquet_schema: Option<SchemaDescriptor>,
        keys: &[SortKey],
        metadata: Vec<KeyValue>,
        expected_rows: usize,
        mut settings: WriterSettings,
    ) -> Result<SplitWriter> {
        let limits = settings.split.take().ok_or_else(|| Error::Internal("a split output without its limits".into()))?;
        limits.check()?;
        check_split_output(dir, settings.overwrite)?;
        let mut created_dir = None;
        if !crate::parquet::store::is_url(dir) {
            let local = crate::parquet::store::local_path(dir).into_owned();
            if !local.exists() {
                std::fs::create_dir_all(&local).map_err(|e| Error::io(&local, "creating the output directory", e))?;
                created_dir = Some(local);
            }
        }
        let key_index: Vec<usize> = keys.iter().map(|k| schema.index_of(&k.column)).collect::<std::result::Result<_, _>>()?;
        let fields = key_index.iter().map(|&i| SortField::new(schema.field(i).data_type().clone())).collect();
        let converter = RowConverter::new(fields)?;
        let on_signal = (!crate::parquet::store::is_url(dir)).then(|| {
            let local = crate::parquet::store::local_path(dir);
            let base = random_u64();
            (StagedSetGuard::register(&local, base), base)
        });
        let first = open_file(&part_path(dir, 0), &schema, &parquet_schema, keys, &metadata, expected_rows, &settings, None);
        let first = match first {
            Ok(w) => w,
            Err(e) => {
                if let Some(d) = &created_dir {
                    let _ = std::fs::remove_dir(d);
                }
                return Err(e);
            }
        };
        Ok(SplitWriter {
            dir: dir.to_path_buf(),
            schema,
            parquet_schema: first.parquet_schema().clone(),
            given_schema: parquet_schema,
            keys: keys.to_vec(),
            metadata,
            expected_rows,
            settings,
            limits,
            cancel: None,
            key_index,
            converter,
            current: Some(Open { writer: first, first_key: Vec::new(), last_key: Vec::new() }),
            held: Vec::new(),
            held_rows: 0,
            held_bytes: 0,
            streaming: false,
            last_key: None,
            staged: Vec::new(),
            created_dir,
            encoded: (0, 0),
            on_signal,
        })
    }

    /// Stops the writing once `cancel` is set (as [`SortedParquetWriter::set_cancel`]).
    pub(crate) fn set_cancel(&mut self, cancel: Option<Cancel>) {
        if let Some(open) = &mut self.current {
            open.writer.set_cancel(cancel.clone());
        }
        self.cancel = cancel;
    }

    /// The files' Parquet schema.
    pub(crate) fn parquet_schema(&self) -> &SchemaDescriptor {
        &self.parquet_schema
    }

    /// Rows written so far (in files finished, the current one, and held back).
    pub(crate) fn rows(&self) -> usize {
        self.staged.iter().map(|(_, f)| f.rows).sum::<usize>() + self.file_rows() + self.held_rows
    }

    fn file_rows(&self) -> usize {
        self.current.as_ref().map_or(0, |o| o.writer.rows())
    }

    /// Whether the current file ends before a run of `run_rows` rows (complete or not).
    fn must_cut_before(&mut self, run_rows: usize) -> Result<bool> {
        let rows = self.file_rows();
        Ok(rows > 0 && (self.limits.max_rows.is_some_and(|most| rows + run_rows > most) || self.over_bytes()?))
    }

    /// Whether the current file's bytes reached `max_bytes`: its row groups in the file, and
    /// those encoding and the rows buffered at the compression ratio seen so far. Where the
    /// estimate says so, the row groups encoding are waited for and counted as they are.
    fn over_bytes(&mut self) -> Result<bool> {
        let (Some(limit), Some(open)) = (self.limits.max_bytes, self.current.as_mut()) else { return Ok(false) };
        if open.writer.rows() == 0 {
            return Ok(false);
        }
        let estimate = |w: &SortedParquetWriter, done: (usize, usize)| {
            let (arrow, encoded) = w.encoded_bytes();
            let (arrow, encoded) = (arrow + done.0, encoded + done.1);
            // Before any row group is encoded, a byte of Arrow data counts as a byte.
            let ratio = if arrow == 0 { 1.0 } else { encoded as f64 / arrow as f64 };
            w.bytes_written() + (w.unwritten_arrow_bytes() as f64 * ratio) as u64
        };
        if estimate(&open.writer, self.encoded) < limit {
            return Ok(false);
        }
        open.writer.drain()?;
        Ok(estimate(&open.writer, self.encoded) >= limit)
    }

    /// Writes sorted rows: the output is cut between runs of equal keys as the module doc
    /// says.
    pub(crate) fn write(&mut self, batch: RecordBatch) -> Result<()> {
        crate::cancel::check(self.cancel.as_ref())?;
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let columns: Vec<_> = self.key_index.iter().map(|&i| batch.column(i).clone()).collect();
        let keys = self.converter.convert_columns(&columns)?;
        // Where a run of equal keys starts.
        let mut starts: Vec<usize> = Vec::new();
        if self.last_key.as_ref().is_none_or(|k| k.row() != keys.row(0)) {
            starts.push(0);
        }
        starts.extend((1..n).filter(|&i| keys.row(i) != keys.row(i - 1)));
        self.last_key = Some(keys.row(n - 1).owned());
        let (Some(&first), Some(&last)) = (starts.first(), starts.last()) else {
            return self.extend_run(batch);
        };
        self.extend_run(batch.slice(0, first))?;
        self.end_run()?;
        if last > first {
            let bounds: Vec<usize> = starts.iter().map(|s| s - first).collect();
            self.place(batch.slice(first, last - first), &bounds)?;
        }
        self.extend_run(batch.slice(last, n - last))
    }

    /// Rows of the last run (its key the last row's).
    fn extend_run(&mut self, rows: RecordBatch) -> Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        if !self.streaming && self.held_rows == 0 && self.file_rows() == 0 {
            self.streaming = true; // it starts the file: it stays there whatever its length
        }
        if self.streaming {
            return self.write_rows(rows);
        }
        self.held_rows += rows.num_rows();
        self.held_bytes += slice_bytes(&rows);
        self.held.push(rows);
        let over_rows = self.limits.max_rows.is_some_and(|most| self.file_rows() + self.held_rows > most);
        if over_rows || self.held_bytes > self.settings.row_group_bytes {
            // The run cannot end in this file (or is too large to hold back): written from
            // now on, in the next file where the rows may not grow this one.
            if self.limits.max_rows.is_some() || self.must_cut_before(self.held_rows)? {
                self.cut()?;
            }
            self.streaming = true;
            self.write_held()?;
        }
        Ok(())
    }

    /// The last run ended (the key changed): written to the current file, or to the next.
    fn end_run(&mut self) -> Result<()> {
        if std::mem::take(&mut self.streaming) || self.held_rows == 0 {
            return Ok(());
        }
        if self.must_cut_before(self.held_rows)? {
            self.cut()?;
        }
        self.write_held()
    }

    fn write_held(&mut self) -> Result<()> {
        for b in std::mem::take(&mut self.held) {
            self.write_rows(b)?;
        }
        (self.held_rows, self.held_bytes) = (0, 0);
        Ok(())
    }

    /// Complete runs of equal keys, starting at `bounds` (`bounds[0]` is 0, the last is
    /// the rows' end): as many as fit each file.
    fn place(&mut self, rows: RecordBatch, bounds: &[usize]) -> Result<()> {
        let end = bounds.len() - 1;
        let mut at = 0;
        while at < end {
            if self.over_bytes()? {
                self.cut()?;
            }
            let p = bounds[at];
            // The furthest boundary within `reach` rows.
            let within = |reach: usize| bounds.partition_point(|&b| b <= p.saturating_add(reach)) - 1;
            let room = self.limits.max_rows.map_or(usize::MAX, |most| most.saturating_sub(self.file_rows()));
            let to = if within(room) > at {
                // At most a row group's rows at a time where bytes count: checked between.
                let step = if self.limits.max_bytes.is_some() { self.settings.row_group_rows } else { usize::MAX };
                within(room.min(step)).max(at + 1)
            } else if self.file_rows() > 0 {
                self.cut()?;
                continue;
            } else {
                at + 1 // one run, alone more than a file's rows: a file of its own
            };
            self.write_rows(rows.slice(p, bounds[to] - p))?;
            at = to;
        }
        Ok(())
    }

    /// Writes rows to the current file (opening the next one where none is open).
    fn write_rows(&mut self, rows: RecordBatch) -> Result<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        if self.current.is_none() {
            let path = part_path(&self.dir, self.staged.len());
            let writer = open_file(
                &path,
                &self.schema,
                &self.given_schema,
                &self.keys,
                &self.metadata,
                self.expected_rows,
                &self.settings,
                self.cancel.clone(),
            )?;
            self.current = Some(Open { writer, first_key: Vec::new(), last_key: Vec::new() });
        }
        let last = show_key(&rows, n - 1, &self.key_index);
        let open = self.current.as_mut().expect("opened above");
        if open.writer.rows() == 0 {
            open.first_key = show_key(&rows, 0, &self.key_index);
        }
        open.last_key = last;
        open.writer.write(rows)
    }

    /// Ends the current file: complete, waiting to be put in place.
    fn cut(&mut self) -> Result<()> {
        let Some(open) = self.current.take() else { return Ok(()) };
        let (arrow, encoded) = open.writer.encoded_bytes();
        let mut staged = open.writer.stage(true)?;
        if let Some((guard, base)) = &self.on_signal {
            let i = self.staged.len();
            guard.announce(i + 1);
            let name = crate::parquet::store::local_path(&self.dir).join(staged_name(*base, i));
            staged.rename_temp(&name)?;
        }
        self.encoded.0 += arrow;
        self.encoded.1 += encoded;
        let w = staged.written();
        log::info!("{}: {} rows, {} bytes (put in place at the end)", staged.target().display(), w.rows, w.bytes);
        let file = OutputFile {
            path: staged.target().to_path_buf(),
            rows: w.rows,
            row_groups: w.row_groups,
            bytes: w.bytes,
            first_key: open.first_key,
            last_key: open.last_key,
        };
        self.staged.push((staged, file));
        Ok(())
    }

    /// Writes the rows held back and ends the last file, then puts every file in place, in
    /// order; with `overwrite`, the older parts beyond the new last one are removed. Returns
    /// the totals and the files.
    pub(crate) fn finish(mut self) -> Result<Finished> {
        crate::cancel::check(self.cancel.as_ref())?;
        self.end_run()?;
        self.cut()?; // the first file stays open until here: an output without rows is one file
        crate::cancel::check(self.cancel.as_ref())?;
        let mut total =
            Written { rows: 0, row_groups: 0, bytes: 0, passthrough_rows: 0, passthrough_row_groups: 0, codec_kept_row_groups: 0 };
        let mut placed: Vec<PathBuf> = Vec::new();
        let mut files = Vec::new();
        for (staged, file) in std::mem::take(&mut self.staged) {
            match staged.commit() {
                Ok(w) => {
                    total.rows += w.rows;
                    total.row_groups += w.row_groups;
                    total.bytes += w.bytes;
                    placed.push(file.path.clone());
                    if let Some((guard, _)) = &self.on_signal {
                        guard.placed(placed.len());
                    }
                    files.push(file);
                }
                Err(e) => {
                    // The rest are dropped with the loop: removed, or their uploads aborted.
                    for p in &placed {
                        if let Err(removing) = remove_part(p) {
                            log::warn!("{}: could not be removed after the error: {removing}", p.display());
                        }
                    }
                    return Err(e);
                }
            }
        }
        self.created_dir = None;
        if self.settings.overwrite {
            for (index, path) in existing_parts(&self.dir)? {
                if index >= files.len() {
                    log::info!("{}: an older part, removed (overwrite)", path.display());
                    remove_part(&path)?;
                }
            }
        }
        Ok((total, files))
    }
}

impl Drop for SplitWriter {
    fn drop(&mut self) {
        // The files first (temporary files removed, uploads aborted), then the directory.
        self.current = None;
        self.staged.clear();
        if let Some(dir) = self.created_dir.take() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A random number (std's randomly keyed hasher over the time and the process).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// A file of the split output, created as an unsplit output would be.
#[allow(clippy::too_many_arguments)]
fn open_file(
    path: &Path,
    schema: &SchemaRef,
    parquet_schema: &Option<SchemaDescriptor>,
    keys: &[SortKey],
    metadata: &[KeyValue],
    expected_rows: usize,
    settings: &WriterSettings,
    cancel: Option<Cancel>,
) -> Result<SortedParquetWriter> {
    let mut writer = SortedParquetWriter::create(
        path,
        schema.clone(),
        parquet_schema.clone(),
        keys,
        metadata.to_vec(),
        expected_rows,
        settings.clone(),
    )?;
    writer.set_cancel(cancel);
    Ok(writer)
}

/// Row `row`'s key columns as text (`null` for a null).
fn show_key(batch: &RecordBatch, row: usize, key_index: &[usize]) -> Vec<String> {
    let options = FormatOptions::default().with_null("null");
    key_index
        .iter()
        .map(|&i| match ArrayFormatter::try_new(batch.column(i).as_ref(), &options) {
            Ok(f) => f.value(row).to_string(),
            Err(e) => format!("({e})"),
        })
        .collect()
}

/// What an output holds once in place: the totals, and a split output's files.
pub(crate) type Finished = (Written, Vec<OutputFile>);

/// The output of a merge: one file, or a split one.
pub(crate) enum OutputWriter {
    One(Box<SortedParquetWriter>),
    Split(Box<SplitWriter>),
}

impl OutputWriter {
    /// [`SortedParquetWriter::create`], or [`SplitWriter::create`] where `settings.split`.
    pub(crate) fn create(
        target: &Path,
        schema: SchemaRef,
        parquet_schema: Option<SchemaDescriptor>,
        keys: &[SortKey],
        metadata: Vec<KeyValue>,
        expected_rows: usize,
        settings: WriterSettings,
    ) -> Result<OutputWriter> {
        Ok(if settings.split.is_some() {
            OutputWriter::Split(Box::new(SplitWriter::create(target, schema, parquet_schema, keys, metadata, expected_rows, settings)?))
        } else {
            OutputWriter::One(Box::new(SortedParquetWriter::create(
                target,
                schema,
                parquet_schema,
                keys,
                metadata,
                expected_rows,
                settings,
            )?))
        })
    }

    pub(crate) fn set_cancel(&mut self, cancel: Option<Cancel>) {
        match self {
            OutputWriter::One(w) => w.set_cancel(cancel),
            OutputWriter::Split(w) => w.set_cancel(cancel),
        }
    }

    pub(crate) fn parquet_schema(&self) -> &SchemaDescriptor {
        match self {
            OutputWriter::One(w) => w.parquet_schema(),
            OutputWriter::Split(w) => w.parquet_schema(),
        }
    }

    pub(crate) fn reserve_row_groups(&mut self, n: usize) {
        if let OutputWriter::One(w) = self {
            w.reserve_row_groups(n);
        }
    }

    pub(crate) fn write(&mut self, batch: RecordBatch) -> Result<()> {
        match self {
            OutputWriter::One(w) => w.write(batch),
            OutputWriter::Split(w) => w.write(batch),
        }
    }

    pub(crate) fn rows(&self) -> usize {
        match self {
            OutputWriter::One(w) => w.rows(),
            OutputWriter::Split(w) => w.rows(),
        }
    }

    /// A row group copied unchanged: only into one file (passthrough is off for a split
    /// output).
    pub(crate) fn append_row_group(
        &mut self,
        path: &Path,
        footer: &std::sync::Arc<parquet::file::metadata::ParquetMetaData>,
        row_group: usize,
        codec_kept: bool,
    ) -> Result<()> {
        match self {
            OutputWriter::One(w) => w.append_row_group(path, footer, row_group, codec_kept),
            OutputWriter::Split(_) => Err(Error::Internal("a row group copied into a split output".into())),
        }
    }

    /// The file in place (no files listed), or the split output's files.
    pub(crate) fn finish(self) -> Result<Finished> {
        match self {
            OutputWriter::One(w) => Ok((w.finish()?, Vec::new())),
            OutputWriter::Split(w) => w.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_named_and_recognised() {
        assert_eq!(part_path(Path::new("out"), 3), Path::new("out/part-00003.parquet"));
        assert_eq!(part_path(Path::new("s3://b/out/"), 12), Path::new("s3://b/out/part-00012.parquet"));
        assert_eq!(part_path(Path::new("s3://b/out"), 123_456), Path::new("s3://b/out/part-123456.parquet"));
        assert_eq!(part_index("part-00012.parquet"), Some(12));
        assert_eq!(part_index("part-123456.parquet"), Some(123_456));
        for other in ["part-1.parquet", "part-0001a.parquet", "part-00001.parquet.tmp", "x-00001.parquet", "part-00001.PARQUET"] {
            assert_eq!(part_index(other), None, "{other}");
        }
    }

    /// Writes `keys` (column `k`, with `v` the row's index) as batches of `chunk` rows to
    /// a split output in `dir`; returns each file's keys.
    fn split(dir: &Path, keys: &[i64], chunk: usize, limits: SplitFiles, overwrite: bool) -> Result<Vec<Vec<i64>>> {
        use arrow::array::{Array, ArrayRef, Int64Array};
        use std::sync::Arc;
        let k = Int64Array::from(keys.to_vec());
        let v = Int64Array::from((0..keys.len() as i64).collect::<Vec<_>>());
        let batch = RecordBatch::try_from_iter([("k", Arc::new(k) as ArrayRef), ("v", Arc::new(v) as ArrayRef)]).unwrap();
        let settings = WriterSettings { row_group_rows: 3, split: Some(limits), overwrite, ..Default::default() };
        let mut w = SplitWriter::create(dir, batch.schema(), None, &[SortKey::asc("k")], vec![], keys.len(), settings)?;
        for start in (0..keys.len()).step_by(chunk) {
            w.write(batch.slice(start, chunk.min(keys.len() - start)))?;
        }
        let (written, files) = w.finish()?;
        assert_eq!(written.rows, keys.len());
        let mut out = Vec::new();
        for (i, f) in files.iter().enumerate() {
            assert_eq!(f.path, part_path(dir, i));
            let file = std::fs::File::open(&f.path).unwrap();
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
            assert!(reader.metadata().row_groups().iter().all(|g| g.sorting_columns().is_some_and(|s| s.len() == 1)));
            let mut ks = Vec::new();
            for b in reader.build().unwrap() {
                let b = b.unwrap();
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                ks.extend((0..col.len()).map(|i| col.value(i)));
            }
            assert_eq!(ks.len(), f.rows);
            if let (Some(first), Some(last)) = (ks.first(), ks.last()) {
                assert_eq!((f.first_key.clone(), f.last_key.clone()), (vec![first.to_string()], vec![last.to_string()]));
            }
            out.push(ks);
        }
        Ok(out)
    }

    #[test]
    fn files_end_between_keys_whatever_the_batches() {
        // Runs of 2, 3, 1, 6 and 1 rows; at most 4 rows a file.
        let keys = [1, 1, 2, 2, 2, 3, 4, 4, 4, 4, 4, 4, 5];
        let limits = SplitFiles { max_rows: Some(4), max_bytes: None };
        for chunk in [1, 2, 3, 5, 13] {
            let dir = tempfile::tempdir().unwrap();
            let files = split(dir.path(), &keys, chunk, limits, false).unwrap();
            let sizes: Vec<usize> = files.iter().map(Vec::len).collect();
            // [1 1] (2 2 2 would pass 4), [2 2 2 3], [4 x 6] alone past the limit, [5].
            assert_eq!(sizes, [2, 4, 6, 1], "batches of {chunk}");
            assert_eq!(files.concat(), keys, "batches of {chunk}");
        }
        // Every key its own run: files of exactly 4 rows.
        let dir = tempfile::tempdir().unwrap();
        let distinct: Vec<i64> = (0..10).collect();
        let files = split(dir.path(), &distinct, 3, limits, false).unwrap();
        assert_eq!(files.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
        // One byte a file: a file ends at every key change.
        let dir = tempfile::tempdir().unwrap();
        let files = split(dir.path(), &keys, 4, SplitFiles { max_rows: None, max_bytes: Some(1) }, false).unwrap();
        assert_eq!(files.iter().map(Vec::len).collect::<Vec<_>>(), [2, 3, 1, 6, 1]);
        // No rows: one file without any.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(split(dir.path(), &[], 1, limits, false).unwrap(), vec![Vec::<i64>::new()]);
    }

    #[test]
    fn nothing_appears_before_the_end_and_overwrite_replaces_the_set() {
        use arrow::array::{ArrayRef, Int64Array};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let limits = SplitFiles { max_rows: Some(2), max_bytes: None };
        // Files finished but the writer dropped (an error): nothing left, not even the
        // directory it made.
        let batch = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from((0..9).collect::<Vec<i64>>())) as ArrayRef)]).unwrap();
        let settings = WriterSettings { split: Some(limits), ..Default::default() };
        let mut w = SplitWriter::create(&out, batch.schema(), None, &[SortKey::asc("k")], vec![], 9, settings).unwrap();
        w.write(batch).unwrap();
        assert_eq!(w.staged.len(), 4);
        assert!(std::fs::read_dir(&out).unwrap().all(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));
        drop(w);
        assert!(!out.exists());
        // Five parts, then three with overwrite: the two older ones beyond go, another file stays.
        assert_eq!(split(&out, &(0..10).collect::<Vec<_>>(), 4, limits, false).unwrap().len(), 5);
        std::fs::write(out.join("notes.txt"), "kept").unwrap();
        assert!(matches!(split(&out, &[1], 1, limits, false), Err(Error::OutputExists { .. })));
        assert_eq!(split(&out, &(0..6).collect::<Vec<_>>(), 4, limits, true).unwrap().len(), 3);
        let mut names: Vec<String> =
            std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["notes.txt", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]);
        // A file where the directory should be.
        assert!(split(&out.join("notes.txt"), &[1], 1, limits, true).is_err());
    }

    #[test]
    fn limits_are_checked() {
        assert!(SplitFiles { max_rows: Some(1), max_bytes: None }.check().is_ok());
        assert!(SplitFiles { max_rows: None, max_bytes: Some(1) }.check().is_ok());
        assert!(SplitFiles::default().check().is_err());
        assert!(SplitFiles { max_rows: Some(0), max_bytes: None }.check().is_err());
        assert!(SplitFiles { max_rows: Some(5), max_bytes: Some(0) }.check().is_err());
    }
}

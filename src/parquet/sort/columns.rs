//! Sorting Parquet files one column at a time: every value decoded once and encoded once,
//! no sorted runs spilled, in memory for the key columns and one or two other columns of
//! all the rows (instead of all the columns of every row).
//!
//! The external merge sort of [`super`] writes every row twice more than the
//! output (a spill run encoded, then decoded by the merge), a large share of the sort's time
//! (docs/performance.md has the numbers). Parquet is a columnar format: the output can be built column by column once the order is known.
//!
//! 1. **Keys.** The key columns of every input row group are decoded (row groups in
//!    parallel, only the keys' leaves read) and sorted stably in input order (files as
//!    given, row groups, rows) by [`crate::sort_columns`] on the options' engine: the
//!    permutation, for every output row its position in the inputs' concatenation, turned
//!    into its `Location` (row group piece, row).
//! 2. **Row groups.** The output's row groups are fixed before any column is encoded:
//!    [`ColumnsPlan::row_group_rows`] rows each (the writer's row limit, and its byte limit
//!    over the footers' estimate of a row's decoded bytes).
//! 3. **Columns.** For each top-level column, in schema order: its leaves are decoded from
//!    every input row group (in parallel; strings and binaries as views into the decoded
//!    pages, see `viewed`), one piece per row group; then every output row group (in
//!    parallel) gathers its values from the pieces, [`GATHER_ROWS`] at a time, and encodes
//!    them into its column chunks. A column of fixed-width values without nulls is not
//!    gathered: its values move to their output chunks in one pass over the pieces, and
//!    to their rows within the chunk when it is encoded ([`ordered`], where its memory
//!    fits: [`ColumnsPlan::ordered`]), through the cache instead of a random read of the
//!    whole column per row. The pieces are not joined into one array first: that
//!    copy would run on one thread and hold the other cores back. While one
//!    column's row groups encode, the next column decodes ([`ColumnsPlan::depth`] columns
//!    decoded at most). The encoded pages go to a `PagePool`: in memory up to
//!    [`ColumnsPlan::page_budget`] bytes, beyond that in a file of the spill directory
//!    (read back once, when the row group is written).
//! 4. **File.** The row groups, their chunks in leaf order, are appended to the output
//!    (`SortedParquetWriter::append_encoded_row_group`) in order, each as soon as its last
//!    column is encoded (the columns encode on a thread of their own meanwhile): the file's
//!    writes overlap the last columns' encoding instead of following it (a tail on
//!    one core otherwise), and
//!    the pages of appended row groups leave memory early. A temporary file renamed into place
//!    when complete, `sorting_columns` on every row group, as every output of corank.
//!
//! **The inputs are read once per pass** (the keys, then each column), each time through
//! the footer read when the sort was planned: an input replaced or rewritten between two
//! passes would give rows mixing both versions (or keys no longer sorted under the
//! `sorting_columns` the output declares). Every open checks that the file is still the
//! one planned ([`crate::parquet::inputs::FileIdentity`]: device and inode, size, modification
//! time; once a pass its footer's fingerprint), and again once the row group is decoded;
//! a changed input is an error naming it, and nothing is written.
//!
//! **Dictionary encoding** follows the writer's rule ([`crate::parquet::writer::dictionary`]) per column, on a
//! sample: the first [`TRIAL_ROWS`] rows of the column's first output row group are encoded
//! both ways, and every row group of the column is encoded as the smaller sample was (a tie
//! goes to plain values; an output of one row group is encoded once, dictionaries on). The
//! writer encodes its whole first row group twice; here that would hold back the column's
//! other row groups (the other cores mostly idle meanwhile); the sample costs a fraction of it.
//! Deterministic: the choice, like every row group cut, depends on the rows only, so the
//! output's bytes do not depend on the engine, the cores or the timing.
//!
//! **Memory** (limit B; [`plan_columns`] refuses this path where it does not fit): while the
//! keys are sorted, their decoded columns plus [`SORT_BYTES_PER_ROW`] a row; then the
//! locations (8 bytes a row), up to `depth` decoded columns (strings and binaries as views
//! into their decoded pages), per thread [`GATHER_ROWS`] rows gathered twice (values and
//! leaves) and a column writer's buffers ([`WRITER_BYTES`]), and the pages held in memory
//! (the rest of B, at least [`MIN_PAGE_BUDGET`]); with [`ColumnsPlan::ordered`], 10 bytes a row
//! more and the largest column once more ([`ordered::ORDERED_BYTES_PER_ROW`]).

mod encode;
mod ordered;

use super::page_pool::PagePool;
use super::spill::SpillDir;
use super::{SortPhase, SortPlan, SortSummary, SORT_BYTES_PER_ROW};
use crate::cancel::{check, Cancel};
use crate::error::{Error, Result};
use crate::parquet::corrupt::{catch, decode_error};
use crate::parquet::inputs::{chunk_decoded_bytes, conform, MergePlan};
use crate::parquet::writer::{common_parquet_schema, narrow_dictionary, SortedParquetWriter, WriterSettings, MAX_ROW_GROUPS};
use crate::show_bytes::show_bytes;
use crate::sort::{sort_columns_until, SortBatchesOptions};
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use encode::{leaves_count, locations, Encoding, Event, Factories, SendOnDrop, Shared};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::KeyValue;
use rayon::prelude::*;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rows gathered and encoded at a time.
pub const GATHER_ROWS: usize = 64 << 10;
/// Bytes a column writer holds beyond the rows it is given: a data page being built, a
/// dictionary, the compressor's context.
pub const WRITER_BYTES: usize = 3 << 20;
/// Rows of a column's first row group its choice of dictionaries is made on.
pub const TRIAL_ROWS: usize = GATHER_ROWS;
/// Least memory left for encoded pages (the rest goes to the spill directory).
pub const MIN_PAGE_BUDGET: usize = 16 << 20;

/// How a column-at-a-time sort runs, worked out from the footers: a [`SortPlan`](crate::parquet::SortPlan)'s
/// `columns` when [`plan_sort`](crate::parquet::plan_sort) (its doc has an example) picks that strategy.
#[derive(Debug, Clone)]
pub struct ColumnsPlan {
    /// Rows of every output row group but the last.
    pub row_group_rows: usize,
    /// Output row groups.
    pub row_groups: usize,
    /// Columns decoded at once (2: the next one decodes while one encodes).
    pub depth: usize,
    /// Bytes of encoded pages held in memory; more go to the spill directory.
    pub page_budget: usize,
    /// Estimated peak memory of the key sort.
    pub key_phase_bytes: usize,
    /// Estimated peak memory of the column phase besides the pages held.
    pub column_phase_bytes: usize,
    /// Whether columns of fixed-width values without nulls are put in output order in two
    /// passes through the cache instead of gathered (where its memory fits).
    pub ordered: bool,
}

/// The bytes a row of a byte-array leaf of a top-level column of type `t` costs besides
/// its bytes once decoded for the column phase: a view (16) and the length prefix that
/// stays in the decoded page the view points into (4); a dictionary's key and offset.
fn offset_bytes(t: &DataType) -> u64 {
    match t {
        DataType::Dictionary(k, _) => k.primitive_width().unwrap_or(8) as u64 + 4,
        _ => 20,
    }
}

/// `t` as the column phase decodes it: strings and binaries as views, which point into the
/// decoded pages (no copy of the bytes when decoded, concatenated or gathered); a
/// dictionary with keys narrower than 32 bits with `Int32` keys, since the row groups'
/// dictionaries joined may hold more values than the narrow type indexes (the output's
/// key type is widened only as far as its row groups need, see
/// [`crate::parquet::writer::widened_dictionary_keys`]).
fn viewed(t: &DataType) -> DataType {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8View,
        DataType::Binary | DataType::LargeBinary => DataType::BinaryView,
        DataType::Dictionary(_, v) if narrow_dictionary(t) => DataType::Dictionary(Box::new(DataType::Int32), v.clone()),
        other => other.clone(),
    }
}

/// Whether the column phase decodes `t` as views.
fn is_viewed(t: &DataType) -> bool {
    matches!(viewed(t), DataType::Utf8View | DataType::BinaryView)
}

/// Whether every data page of `chunk` is dictionary-encoded (where its footer says).
fn all_dictionary_pages(chunk: &parquet::file::metadata::ColumnChunkMetaData) -> bool {
    use parquet::basic::Encoding;
    chunk.dictionary_page_offset().is_some()
        && chunk.page_encoding_stats_mask().is_some_and(|m| m.is_only(Encoding::PLAIN_DICTIONARY) || m.is_only(Encoding::RLE_DICTIONARY))
}

/// `schema` with its top-level strings and binaries as views ([`viewed`]).
fn viewed_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone().with_data_type(viewed(f.data_type()))).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether the inputs' rows sort one column at a time within `memory_limit`, and how;
/// `Err` says why not.
pub fn plan_columns(inputs: &MergePlan, memory_limit: usize, writer: &WriterSettings) -> std::result::Result<ColumnsPlan, String> {
    let n = inputs.total_rows;
    let schema = &inputs.schema;
    // 1. Every top-level column's decoded bytes, from each file's column chunks.
    let mut column_bytes = vec![0u64; schema.fields().len()];
    for file in &inputs.files {
        let meta = file.metadata.metadata();
        let leaves = meta.file_metadata().schema_descr();
        let file_fields = file.metadata.schema().fields();
        for rg in meta.row_groups() {
            let rows = rg.num_rows().max(0) as u64;
            for (leaf, chunk) in rg.columns().iter().enumerate() {
                let name = file_fields.get(leaves.get_column_root_idx(leaf)).map(|f| f.name());
                if let Some(c) = name.and_then(|name| schema.index_of(name).ok()) {
                    let bytes = match all_dictionary_pages(chunk) && is_viewed(schema.field(c).data_type()) {
                        // Views into the chunk's dictionary: no bytes of their own.
                        true => 16 * rows + chunk.uncompressed_size().max(0) as u64 + rows / 8,
                        false => chunk_decoded_bytes(chunk, rows, offset_bytes(schema.field(c).data_type())),
                    };
                    column_bytes[c] += bytes;
                }
            }
        }
        // A column a file lacks (union by name) reads as nulls: a validity bit and the
        // type's width a row.
        for (c, f) in schema.fields().iter().enumerate() {
            if file.metadata.schema().index_of(f.name()).is_err() {
                let rows = meta.file_metadata().num_rows().max(0) as u64;
                column_bytes[c] += rows * f.data_type().primitive_width().unwrap_or(16) as u64 + rows / 8;
            }
        }
    }
    // 2. The key sort: the key columns decoded, their words, permutation and scratch.
    let key_columns: u64 =
        (inputs.keys.iter()).map(|k| schema.index_of(&k.column).map(|c| column_bytes[c]).unwrap_or(0)).sum::<u64>().max(8 * n as u64);
    let key_phase_bytes = key_columns as usize + n * SORT_BYTES_PER_ROW;
    if key_phase_bytes > memory_limit {
        return Err(format!("the key sort needs about {}", show_bytes(key_phase_bytes as u64)));
    }
    // 3. The column phase: the permutation, the decoded columns, per thread the rows being
    //    gathered and a writer.
    // Where each output row is: its row group piece and row in it, 8 bytes.
    let index_bytes = 8;
    let widest_row = column_bytes.iter().map(|&b| b as usize / n.max(1)).max().unwrap_or(0);
    let threads = rayon::current_num_threads();
    let base = n * index_bytes + threads * (WRITER_BYTES + 2 * GATHER_ROWS.min(n.max(1)) * widest_row.max(1));
    let mut largest = column_bytes.clone();
    largest.sort_unstable_by(|a, b| b.cmp(a));
    let top = |d: usize| largest.iter().take(d).sum::<u64>() as usize;
    // Encoded pages take what is left, at least MIN_PAGE_BUDGET (the rest go to disk).
    let room = memory_limit.saturating_sub(MIN_PAGE_BUDGET);
    let Some(depth) = [2, 1].into_iter().find(|&d| base + top(d) <= room) else {
        return Err(format!(
            "one column of every row needs about {} of the {} the limit leaves it",
            show_bytes((base + top(1)) as u64),
            show_bytes(room as u64)
        ));
    };
    let mut column_phase_bytes = base + top(depth);
    // Fixed-width columns put in order in two passes (`ordered`): its bytes a row, and a
    // column's values twice while they move.
    let ordered_bytes = n * ordered::ORDERED_BYTES_PER_ROW + top(1);
    let ordered = column_phase_bytes + ordered_bytes <= room;
    if ordered {
        column_phase_bytes += ordered_bytes;
    }
    // 4. Row groups: the writer's limits, bytes over the estimate of a row.
    let by_bytes = (writer.row_group_bytes / inputs.row_bytes.max(1)).max(1);
    // Only the byte limit gives way to MAX_ROW_GROUPS: a row limit that makes more row
    // groups (or 0) is refused before this ([`crate::parquet::writer::check_row_groups`] in
    // [`super::plan_sort`]), so this never exceeds it.
    let mut row_group_rows = writer.row_group_rows.min(by_bytes).max(1);
    if n.div_ceil(row_group_rows) > MAX_ROW_GROUPS {
        row_group_rows = n.div_ceil(MAX_ROW_GROUPS);
    }
    Ok(ColumnsPlan {
        row_group_rows,
        row_groups: n.div_ceil(row_group_rows),
        depth,
        page_budget: memory_limit.saturating_sub(column_phase_bytes).max(MIN_PAGE_BUDGET),
        key_phase_bytes,
        column_phase_bytes,
        ordered,
    })
}

/// One input row group with rows.
#[derive(Clone)]
struct Source {
    file: usize,
    row_group: usize,
    rows: usize,
}

/// The columns `fields` (indices into the plan's schema) of one row group, as a batch of
/// `schema` (those fields): only their leaves read, conformed as the merge conforms a batch.
fn decode_row_group(
    inputs: &MergePlan,
    metadata: &[ArrowReaderMetadata],
    source: &Source,
    fields: &[usize],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let file = &inputs.files[source.file];
    let metadata = &metadata[source.file];
    let context = || format!("reading row group {}", source.row_group);
    let file_schema = metadata.schema();
    let roots: Vec<usize> = fields.iter().filter_map(|&c| file_schema.index_of(inputs.schema.field(c).name()).ok()).collect();
    if roots.is_empty() {
        // Every column missing from this file (union by name: nulls) or a Hive partition's.
        let empty = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(source.rows)),
        )?;
        let empty = match &file.partition {
            Some(partition) => partition.apply(empty)?,
            None => empty,
        };
        return conform(empty, schema);
    }
    // The file as planned (a file replaced or rewritten between the passes would mix two
    // versions' rows); checked again once its rows are decoded.
    let mask = ProjectionMask::roots(file.metadata.metadata().file_metadata().schema_descr(), roots);
    let handle = file.reopen_with(false, Some(&mask))?;
    let reader = handle.try_clone().map_err(|e| Error::io(&file.path, context(), e))?;
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, metadata.clone())
        .with_row_groups(vec![source.row_group])
        .with_projection(mask)
        .with_batch_size(source.rows);
    // A decoder's error or panic (corrupt pages) names the column and page that fail.
    let decoded = catch(|| -> std::result::Result<Vec<RecordBatch>, String> {
        builder.build().map_err(|e| e.to_string())?.map(|b| b.map_err(|e| e.to_string())).collect()
    });
    let batches = match decoded {
        Ok(Ok(batches)) => batches,
        Ok(Err(cause)) | Err(cause) => return Err(decode_error(&file.path, metadata, &[source.row_group], &cause)),
    };
    let batches = (batches.into_iter())
        .map(|b| match &file.partition {
            Some(partition) => partition.apply(b),
            None => Ok(b),
        })
        .map(|b| {
            b.and_then(|b| conform(b, schema)).map_err(|e| Error::File { path: file.path.clone(), detail: format!("{}: {e}", context()) })
        })
        .collect::<Result<Vec<_>>>()?;
    file.check_unchanged(&handle, false)?;
    let batch = match batches.len() {
        1 => batches.into_iter().next().expect("one batch"),
        _ => arrow::compute::concat_batches(schema, &batches)?,
    };
    if batch.num_rows() != source.rows {
        return Err(Error::parquet(
            &file.path,
            context(),
            parquet::errors::ParquetError::General(format!(
                "{} rows decoded, the footer counts {}: the file is corrupt",
                batch.num_rows(),
                source.rows
            )),
        ));
    }
    Ok(batch)
}

/// Sorts the inputs of `plan` (its [`SortPlan::columns`]) into `output` one column at a
/// time (see the module doc), the file of encoded pages in `spill_dir`.
pub(super) fn sort_by_columns(
    plan: &SortPlan,
    output: &Path,
    options: &super::SortFilesOptions,
    metadata: Vec<KeyValue>,
    spill_dir: SpillDir,
    progress: &(dyn Fn(SortPhase, usize) + Sync),
    summary: &mut SortSummary,
) -> Result<()> {
    let columns = plan.columns.as_ref().ok_or_else(|| Error::Internal("a sort by columns without its plan".into()))?;
    let cancel = options.cancel.as_ref();
    let sort = ColumnsSort::new(plan, columns, output, progress, cancel)?;
    // 1. Keys: decoded, sorted.
    let perm = sort.sort_keys(options, summary)?;

    // 2. The output and the encoding's factories.
    let t = Instant::now();
    let inputs = &plan.inputs;
    let parquet_schema = common_parquet_schema(&inputs.files, &inputs.schema);
    let mut writer_settings = options.writer.clone();
    writer_settings.row_group_rows = columns.row_group_rows;
    let mut writer = SortedParquetWriter::create(
        output,
        inputs.schema.clone(),
        parquet_schema,
        &inputs.keys,
        metadata,
        inputs.total_rows,
        writer_settings,
    )?;
    writer.set_cancel(options.cancel.clone());
    let Some(perm) = perm else {
        let written = writer.finish()?;
        summary.merge_time += t.elapsed();
        super::record_written(summary, &written);
        return Ok(());
    };
    let mut spill_dir = spill_dir;
    let pool = page_pool(&mut spill_dir, columns.page_budget)?;
    let factories = Factories::new(&writer, &pool, output)?;
    let mut starts = Vec::with_capacity(sort.sources.len());
    let mut at = 0;
    for s in &sort.sources {
        starts.push(at);
        at += s.rows;
    }
    let locations = locations(&perm.indices, &starts);
    drop(perm);
    let partitions = match columns.ordered {
        true => ordered::Partitions::new(&locations, &starts, inputs.total_rows, columns.row_group_rows)?,
        false => None,
    };

    // 3. Column by column, on the encoder thread: decode, then encode every row group (the
    //    next column decoding meanwhile, up to `depth` columns decoded at once). A row
    //    group whose last column is encoded is announced to step 4.
    let (events, announced) = std::sync::mpsc::channel::<Event>();
    let shared = Shared::new(columns.row_groups, inputs.schema.fields().len(), events, output);
    let mut read_time = Duration::ZERO;
    let encoding = Encoding { sort: &sort, shared: &shared, factories: &factories, locations: &locations, partitions: partitions.as_ref() };
    // 4. Meanwhile, on this thread, the row groups in order, each appended to the file as
    //    soon as it and every one before it are encoded: the file's writes overlap the
    //    last columns' encoding instead of following it (the output's bytes do not
    //    depend on when a row group is appended).
    let appended = std::thread::scope(|threads| {
        let encoder = threads.spawn(|| {
            crate::parquet::name_this_thread("corank-encode");
            // Sent also when the encoding panics, so that the appending loop ends.
            let _finished = SendOnDrop(&shared.events);
            encoding.encode_columns(&mut read_time);
        });
        let appended = sort.append_in_order(&shared, &factories.leaf_ranges, &announced, &mut writer);
        if let Err(panic) = encoder.join() {
            std::panic::resume_unwind(panic);
        }
        appended
    });
    summary.read_time += read_time;
    // Cancelled: whatever the tasks that saw it first recorded, or skipped.
    crate::cancel::check(cancel)?;
    if let Some(e) = shared.failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let row_groups = columns.row_groups;
    if appended != row_groups {
        return Err(Error::Internal(format!("{}: only {appended} of {row_groups} row groups were appended", output.display())));
    }
    log::debug!("sort by columns: row groups appended; finishing the file");
    let written = writer.finish()?;
    summary.merge_time += t.elapsed();
    summary.spill_bytes = pool.spilled.load(Ordering::Relaxed) as u64;
    log::debug!(
        "sorted by columns: {} row groups of {} rows, {} columns decoded at once, pages spilled {}",
        row_groups,
        columns.row_group_rows,
        columns.depth,
        show_bytes(summary.spill_bytes)
    );
    drop(spill_dir);
    super::record_written(summary, &written);
    Ok(())
}

/// The pool of encoded pages, its file (on Unix) the next file of `spill_dir`.
fn page_pool(spill_dir: &mut SpillDir, budget: usize) -> Result<Arc<PagePool>> {
    let pool_file = if cfg!(unix) {
        let path = spill_dir.next_file();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, "cannot create the file of encoded pages", e))?;
        Some((file, path))
    } else {
        None
    };
    let (pool_file, pool_path) = pool_file.map_or((None, None), |(f, p)| (Some(f), Some(p)));
    Ok(Arc::new(PagePool {
        file: pool_file,
        path: pool_path,
        end: Mutex::new(0),
        resident: AtomicUsize::new(0),
        budget,
        spilled: AtomicUsize::new(0),
    }))
}

/// A sort one column at a time: its plan, and the inputs' row groups with rows, read once
/// per pass.
struct ColumnsSort<'a> {
    plan: &'a SortPlan,
    columns: &'a ColumnsPlan,
    output: &'a Path,
    /// The input row groups with rows, in input order: the pieces every column is decoded in.
    sources: Vec<Source>,
    /// The inputs' reader metadata with strings and binaries as views ([`viewed`]).
    view_metadata: Vec<ArrowReaderMetadata>,
    progress: &'a (dyn Fn(SortPhase, usize) + Sync),
    /// Checked per row group decoded, per column, and per [`GATHER_ROWS`] encoded.
    cancel: Option<&'a Cancel>,
}

impl<'a> ColumnsSort<'a> {
    fn new(
        plan: &'a SortPlan,
        columns: &'a ColumnsPlan,
        output: &'a Path,
        progress: &'a (dyn Fn(SortPhase, usize) + Sync),
        cancel: Option<&'a Cancel>,
    ) -> Result<Self> {
        let inputs = &plan.inputs;
        let sources: Vec<Source> = (inputs.files.iter().enumerate())
            .flat_map(|(file, f)| {
                let meta = f.metadata.metadata();
                (0..meta.num_row_groups()).map(move |g| Source { file, row_group: g, rows: meta.row_group(g).num_rows().max(0) as usize })
            })
            .filter(|s| s.rows > 0)
            .collect();
        // The key columns decode as the merge decodes them; the others with strings and
        // binaries as views ([`viewed`]).
        let view_metadata: Vec<ArrowReaderMetadata> = (inputs.files.iter())
            .map(|f| {
                let options = ArrowReaderOptions::new().with_schema(viewed_schema(f.metadata.schema()));
                ArrowReaderMetadata::try_new(Arc::clone(f.metadata.metadata()), options).map_err(|e| Error::parquet(&f.path, "", e))
            })
            .collect::<Result<_>>()?;
        Ok(ColumnsSort { plan, columns, output, sources, view_metadata, progress, cancel })
    }

    /// The columns `fields` of every input row group, a batch each. Every pass reads the
    /// inputs again: each is checked to be the file planned, its footer's fingerprint once a
    /// pass, the rest at every open ([`crate::parquet::inputs::InputFile::reopen`]).
    fn decode_fields(&self, fields: &[usize], metadata: &[ArrowReaderMetadata], schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
        let inputs = &self.plan.inputs;
        inputs.files.par_iter().try_for_each(|f| f.reopen(true).map(drop))?;
        let decode = |s: &Source| check(self.cancel).and_then(|()| decode_row_group(inputs, metadata, s, fields, schema));
        let batches = self.sources.par_iter().map(decode).collect();
        check(self.cancel)?;
        batches
    }

    /// Step 1: the key columns decoded and sorted stably; `None` for no rows.
    fn sort_keys(&self, options: &super::SortFilesOptions, summary: &mut SortSummary) -> Result<Option<crate::permutation::Permutation>> {
        let inputs = &self.plan.inputs;
        let n = inputs.total_rows;
        let t = Instant::now();
        let key_fields: Vec<usize> = (inputs.keys.iter())
            .map(|k| inputs.schema.index_of(&k.column).map_err(|_| Error::InvalidArgument(format!("no column '{}'", k.column))))
            .collect::<Result<_>>()?;
        let key_schema: SchemaRef = Arc::new(Schema::new(key_fields.iter().map(|&c| inputs.schema.field(c).clone()).collect::<Vec<_>>()));
        let key_metadata: Vec<ArrowReaderMetadata> = inputs.files.iter().map(|f| f.metadata.clone()).collect();
        let key_batches = self.decode_fields(&key_fields, &key_metadata, &key_schema)?;
        let decoded_rows: usize = key_batches.iter().map(RecordBatch::num_rows).sum();
        if decoded_rows != n {
            return Err(Error::Internal(format!(
                "{}: read {decoded_rows} rows but the inputs' metadata counts {n}; nothing written",
                self.output.display()
            )));
        }
        summary.read_time += t.elapsed();
        let t = Instant::now();
        let key_columns: Vec<Vec<ArrayRef>> = key_batches.iter().map(|b| b.columns().to_vec()).collect();
        drop(key_batches);
        let sort_options = SortBatchesOptions::default().with_engine_options(options.engine);
        let perm = if n == 0 { None } else { Some(sort_columns_until(&key_columns, &inputs.keys, &sort_options, self.cancel)?) };
        drop(key_columns);
        summary.sort_time += t.elapsed();
        log::debug!("sort by columns: keys read in {:?}, sorted in {:?}", summary.read_time, summary.sort_time);
        match perm.as_ref().map(|p| p.engine) {
            Some(crate::options::Engine::Gpu) => summary.sorts_gpu += 1,
            Some(_) => summary.sorts_cpu += 1,
            None => {}
        }
        (self.progress)(SortPhase::Runs, n);
        Ok(perm)
    }

    /// The output rows of row group `r`.
    fn rows_of(&self, r: usize) -> std::ops::Range<usize> {
        r * self.columns.row_group_rows..((r + 1) * self.columns.row_group_rows).min(self.plan.inputs.total_rows)
    }

    /// Step 4: appends the row groups in order, each as soon as it and every one before it
    /// are encoded, until the encoding ends; the row groups appended.
    fn append_in_order(
        &self,
        shared: &Shared,
        leaf_ranges: &[(usize, usize)],
        announced: &std::sync::mpsc::Receiver<Event>,
        writer: &mut SortedParquetWriter,
    ) -> usize {
        let row_groups = self.columns.row_groups;
        let mut appended = 0;
        let mut encoded = vec![false; row_groups];
        for event in announced {
            match event {
                Event::RowGroupEncoded(r) => encoded[r] = true,
                Event::Finished => break,
            }
            while appended < row_groups && encoded[appended] && !shared.has_failed() {
                let r = appended;
                match shared
                    .take_row_group(r, leaves_count(leaf_ranges))
                    .and_then(|(chunks, distinct)| writer.append_encoded_row_group(chunks, self.rows_of(r).len(), &distinct))
                {
                    Ok(()) => appended += 1,
                    Err(e) => shared.fail(e),
                }
            }
        }
        appended
    }
}

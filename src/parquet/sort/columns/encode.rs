//! The column phase's encoding: every column decoded, then each output row group's chunk
//! of it gathered and encoded on rayon ([`Encoding`]), the row groups' chunks collected for
//! the thread that appends them in order ([`Shared`]), with the column writers' factories
//! ([`Factories`]: dictionaries chosen per column on a sample).

use super::ordered::{OrderedColumn, Partitions};
use super::{viewed, ColumnsSort, GATHER_ROWS, TRIAL_ROWS};
use crate::cancel::{is_set, Cancel};
use crate::error::{Error, Result};
use crate::gather::PieceGather;
use crate::parquet::sort::page_pool::{PagePool, PagePoolFactory};
use crate::parquet::sort::SortPhase;
use crate::parquet::writer::dictionary;
use crate::parquet::writer::{distinct_values_of, narrow_dictionary, SortedParquetWriter};
use crate::permutation::Indices;
use arrow::array::ArrayRef;
use arrow::datatypes::{Field, Schema, SchemaRef};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::file::properties::{WriterProperties, WriterPropertiesPtr};
use parquet::schema::types::SchemaDescriptor;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where an output row is in the decoded pieces: `piece << 32 | row`.
pub(super) type Location = u64;

/// The location of every output row, from the permutation (positions in the concatenation
/// of the pieces) and the pieces' `starts`.
pub(super) fn locations(perm: &Indices, starts: &[usize]) -> Vec<Location> {
    let locate = |p: usize| {
        let piece = starts.partition_point(|&s| s <= p) - 1;
        ((piece as u64) << 32) | (p - starts[piece]) as u64
    };
    match perm {
        Indices::U32(v) => v.par_iter().map(|&p| locate(p as usize)).collect(),
        Indices::U64(v) => v.par_iter().map(|&p| locate(p as usize)).collect(),
    }
}

pub(super) fn encoding_error(source: parquet::errors::ParquetError) -> Error {
    Error::Parquet { path: None, context: "encoding the output".into(), source }
}

/// What every encoding task of one column shares.
pub(super) struct ColumnJob {
    /// The column as decoded ([`viewed`]).
    field: Field,
    /// Its index in the schema.
    column: usize,
    /// The column's leaves: `first..first + count` of the file's.
    first_leaf: usize,
    leaf_count: usize,
    /// Its values.
    values: Values,
    /// Counted for widening a narrow dictionary's key type.
    narrow_dictionary: bool,
}

/// A column's values as the encoding tasks read them.
pub(super) enum Values {
    /// One piece per input row group with rows, in input order, gathered from.
    Pieces(PieceGather),
    /// Moved to their output chunks ([`super::ordered`]).
    Ordered(OrderedColumn),
}

/// The chunks and distinct values of one (row group, column), or the first error.
pub(super) type Encoded = std::result::Result<(Vec<ArrowColumnChunk>, usize), Error>;

/// Gathers rows `range` of the output of `job`'s column from its pieces (`locations` of
/// every output row) and encodes them with `writers` (the column's leaves). The pieces are
/// gathered from directly: joining them first would copy the column once more, on one thread.
/// [`Error::Cancelled`] once `cancel` is set (checked every [`GATHER_ROWS`] rows).
pub(super) fn encode_chunk(
    field: &Field,
    job: &ColumnJob,
    locations: &[Location],
    partitions: Option<&Partitions>,
    range: std::ops::Range<usize>,
    mut writers: Vec<ArrowColumnWriter>,
    cancel: Option<&Cancel>,
) -> Encoded {
    let mut kept: Vec<ArrayRef> = Vec::new();
    let mut at = range.start;
    while at < range.end {
        crate::cancel::check(cancel)?;
        let end = (at + GATHER_ROWS).min(range.end);
        let values = match (&job.values, partitions) {
            (Values::Ordered(column), Some(partitions)) => column.chunk(partitions, at..end)?,
            (Values::Pieces(pieces), _) => {
                let from: Vec<(usize, usize)> =
                    locations[at..end].iter().map(|&l| ((l >> 32) as usize, (l & 0xffff_ffff) as usize)).collect();
                pieces.gather(&from)?
            }
            (Values::Ordered(_), None) => return Err(Error::Internal("a column put in order without the order's chunks".into())),
        };
        for (writer, leaf) in writers.iter_mut().zip(compute_leaves(field, &values).map_err(encoding_error)?) {
            writer.write(&leaf).map_err(encoding_error)?;
        }
        if job.narrow_dictionary {
            kept.push(values);
        }
        at = end;
    }
    let chunks = writers.into_iter().map(|w| w.close()).collect::<parquet::errors::Result<Vec<_>>>().map_err(encoding_error)?;
    Ok((chunks, if job.narrow_dictionary { distinct_values_of(kept.iter()) } else { 0 }))
}

/// The column writers of `job`'s leaves for row group `r`.
pub(super) fn column_writers(
    factory: &ArrowRowGroupWriterFactory,
    job: &ColumnJob,
    r: usize,
) -> parquet::errors::Result<Vec<ArrowColumnWriter>> {
    Ok(factory.create_column_writers(r)?.into_iter().skip(job.first_leaf).take(job.leaf_count).collect())
}

/// The column writers' factories of the sort: every column with dictionaries, the two
/// trial encodings of a column's sample, and the column's decided one.
pub(super) struct Factories {
    leaves: SchemaDescriptor,
    arrow_schema: SchemaRef,
    props: WriterPropertiesPtr,
    pool: Arc<PagePool>,
    output: PathBuf,
    with_dictionaries: Arc<ArrowRowGroupWriterFactory>,
    trial_with: ArrowRowGroupWriterFactory,
    trial_plain: ArrowRowGroupWriterFactory,
    /// Per top-level column, its leaves: `(first, count)`.
    pub(super) leaf_ranges: Vec<(usize, usize)>,
}

impl Factories {
    pub(super) fn new(writer: &SortedParquetWriter, pool: &Arc<PagePool>, output: &Path) -> Result<Self> {
        // Owned: the writer appends row groups while the columns encode.
        let (leaves, arrow_schema, props) = writer.encoding();
        let (leaves, arrow_schema, props) = (leaves.clone(), Arc::clone(arrow_schema), Arc::clone(props));
        let unpooled = |props: WriterProperties| -> Result<ArrowRowGroupWriterFactory> {
            dictionary::factory_with(&leaves, &arrow_schema, props).map_err(|e| Error::parquet(output, "", e))
        };
        let with_dictionaries =
            Arc::new(unpooled(props.as_ref().clone())?.with_page_store_factory(Arc::new(PagePoolFactory(Arc::clone(pool)))));
        let (trial_with, trial_plain) = (unpooled(props.as_ref().clone())?, unpooled(dictionary::without_dictionaries(&props))?);
        let fields = arrow_schema.fields().len();
        let leaf_ranges: Vec<(usize, usize)> = (0..fields)
            .map(|c| {
                let of_c: Vec<usize> = (0..leaves.num_columns()).filter(|&l| leaves.get_column_root_idx(l) == c).collect();
                (of_c.first().copied().unwrap_or(0), of_c.len())
            })
            .collect();
        Ok(Factories {
            leaves,
            arrow_schema,
            props,
            pool: Arc::clone(pool),
            output: output.to_path_buf(),
            with_dictionaries,
            trial_with,
            trial_plain,
            leaf_ranges,
        })
    }

    /// The factory of a column's row groups after the first: a leaf whose first chunk went
    /// plain is written plain (the writer's own rule over every leaf: this column's as
    /// chosen, the others kept).
    fn decided(&self, plain: &[bool], first_leaf: usize) -> Result<Arc<ArrowRowGroupWriterFactory>> {
        let mut all = vec![false; self.leaves.num_columns()];
        all[first_leaf..first_leaf + plain.len()].copy_from_slice(plain);
        match dictionary::decided_factory(&self.leaves, &self.arrow_schema, &self.props, &all)
            .map_err(|e| Error::parquet(&self.output, "", e))?
        {
            None => Ok(Arc::clone(&self.with_dictionaries)),
            Some(factory) => Ok(Arc::new(factory.with_page_store_factory(Arc::new(PagePoolFactory(Arc::clone(&self.pool)))))),
        }
    }
}

/// What the encoding tasks and the appending thread share: per row group its encoded
/// columns and how many there are, the first error, and how many columns are decoded and
/// not yet encoded.
pub(super) struct Shared<'a> {
    results: Vec<Mutex<Vec<Option<Encoded>>>>,
    columns_encoded: Vec<AtomicUsize>,
    /// Tells the appending thread of every row group encoded whole.
    pub(super) events: std::sync::mpsc::Sender<Event>,
    pub(super) failed: Mutex<Option<Error>>,
    /// Columns decoded whose row groups are still encoding.
    alive: AtomicUsize,
    columns_done: AtomicUsize,
    fields: usize,
    output: &'a Path,
}

impl<'a> Shared<'a> {
    pub(super) fn new(row_groups: usize, fields: usize, events: std::sync::mpsc::Sender<Event>, output: &'a Path) -> Self {
        Shared {
            results: (0..row_groups).map(|_| Mutex::new((0..fields).map(|_| None).collect())).collect(),
            columns_encoded: (0..row_groups).map(|_| AtomicUsize::new(0)).collect(),
            events,
            failed: Mutex::new(None),
            alive: AtomicUsize::new(0),
            columns_done: AtomicUsize::new(0),
            fields,
            output,
        }
    }

    /// Keeps the first error.
    pub(super) fn fail(&self, e: Error) {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(e);
    }

    pub(super) fn has_failed(&self) -> bool {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Keeps column `c` of row group `r` (or its error); announces the row group once its
    /// every column is encoded.
    fn store(&self, r: usize, c: usize, encoded: Encoded) {
        let encoded = encoded.map_err(|e| match e {
            Error::Parquet { path: None, context, source } => Error::Parquet { path: Some(self.output.to_path_buf()), context, source },
            other => other,
        });
        match encoded {
            Err(e) => self.fail(e),
            Ok(e) => {
                self.results[r].lock().unwrap_or_else(|e| e.into_inner())[c] = Some(Ok(e));
                if self.columns_encoded[r].fetch_add(1, Ordering::AcqRel) + 1 == self.fields {
                    // Cannot fail: the receiver outlives the encoding.
                    let _ = self.events.send(Event::RowGroupEncoded(r));
                }
            }
        }
    }

    /// A column's every row group is encoded (or it failed): one fewer column alive, and
    /// the progress of the output.
    fn column_finished(&self, n: usize, progress: &(dyn Fn(SortPhase, usize) + Sync)) {
        self.alive.fetch_sub(1, Ordering::AcqRel);
        let done = self.columns_done.fetch_add(1, Ordering::AcqRel) + 1;
        progress(SortPhase::Merge, n * done / self.fields.max(1));
    }

    /// The chunks of row group `r`, in leaf order, and its distinct values per column.
    pub(super) fn take_row_group(&self, r: usize, leaves: usize) -> Result<(Vec<ArrowColumnChunk>, Vec<usize>)> {
        let mut chunks = Vec::with_capacity(leaves);
        let mut distinct = vec![0; self.fields];
        let row_group = std::mem::take(&mut *self.results[r].lock().unwrap_or_else(|e| e.into_inner()));
        for (c, encoded) in row_group.into_iter().enumerate() {
            let (column_chunks, d) = encoded
                .ok_or_else(|| Error::Internal(format!("{}: row group {r} column {c} was not encoded", self.output.display())))??;
            chunks.extend(column_chunks);
            distinct[c] = d;
        }
        Ok((chunks, distinct))
    }
}

/// Step 3, on the encoder thread: what its tasks read.
pub(super) struct Encoding<'a> {
    pub(super) sort: &'a ColumnsSort<'a>,
    pub(super) shared: &'a Shared<'a>,
    pub(super) factories: &'a Factories,
    /// Where every output row is in the pieces.
    pub(super) locations: &'a [Location],
    /// Where every input row goes, for the columns put in order ([`super::ordered`]).
    pub(super) partitions: Option<&'a Partitions>,
}

impl Encoding<'_> {
    /// Column by column: decoded (waiting while `depth` columns are alive), then every row
    /// group encoded on rayon; the next column decodes while the row groups encode.
    pub(super) fn encode_columns(&self, read_time: &mut Duration) {
        let (sort, shared) = (self.sort, self.shared);
        let inputs = &sort.plan.inputs;
        rayon::scope(|s| {
            for (c, &(first_leaf, leaf_count)) in self.factories.leaf_ranges.iter().enumerate() {
                // Wait (running other tasks meanwhile) until this column may be decoded.
                while shared.alive.load(Ordering::Acquire) >= sort.columns.depth && !shared.has_failed() && !is_set(sort.cancel) {
                    if !matches!(rayon::yield_now(), Some(rayon::Yield::Executed)) {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                if is_set(sort.cancel) {
                    shared.fail(Error::Cancelled);
                }
                if shared.has_failed() {
                    break;
                }
                let t = Instant::now();
                let field = inputs.schema.field(c).as_ref().clone();
                let field = field.clone().with_data_type(viewed(field.data_type()));
                // The column decoded from every row group, as the pieces the gather reads.
                // Fixed-width columns move to their chunks (then the pieces are dropped);
                // the others are gathered from the pieces.
                let pieces =
                    sort.decode_fields(&[c], &sort.view_metadata, &Arc::new(Schema::new(vec![field.clone()]))).and_then(|batches| {
                        let pieces: Vec<ArrayRef> = batches.into_iter().map(|b| b.column(0).clone()).collect();
                        let pieces = match self.partitions {
                            Some(partitions) => match OrderedColumn::new(partitions, field.data_type(), pieces)? {
                                Ok(column) => return Ok(Values::Ordered(column)),
                                Err(pieces) => pieces,
                            },
                            None => pieces,
                        };
                        PieceGather::new(pieces).map(Values::Pieces)
                    });
                let pieces = match pieces {
                    Ok(p) => p,
                    Err(e) => {
                        shared.fail(e);
                        break;
                    }
                };
                *read_time += t.elapsed();
                log::debug!("column {}: decoded in {:?}", inputs.schema.field(c).name(), t.elapsed());
                let job = Arc::new(ColumnJob {
                    field,
                    column: c,
                    first_leaf,
                    leaf_count,
                    values: pieces,
                    narrow_dictionary: narrow_dictionary(inputs.schema.field(c).data_type()),
                });
                shared.alive.fetch_add(1, Ordering::AcqRel);
                s.spawn(move |s| self.encode_column(s, job));
            }
        })
    }

    /// One column: its choice of dictionaries, on a sample of its first row group encoded
    /// both ways (pages kept off the pool: they are dropped), then every row group encoded
    /// as chosen, a task each.
    fn encode_column<'s>(&'s self, s: &rayon::Scope<'s>, job: Arc<ColumnJob>) {
        let (sort, shared) = (self.sort, self.shared);
        let n = sort.plan.inputs.total_rows;
        let row_groups = sort.columns.row_groups;
        let factory = match row_groups {
            1 => Ok(Arc::clone(&self.factories.with_dictionaries)),
            _ => self.choose_dictionaries(&job),
        };
        let factory = match factory {
            Ok(factory) => factory,
            Err(e) => {
                shared.store(0, job.column, Err(e));
                shared.column_finished(n, sort.progress);
                return;
            }
        };
        let remaining = Arc::new(AtomicUsize::new(row_groups));
        for r in 0..row_groups {
            let (job, factory, remaining) = (Arc::clone(&job), Arc::clone(&factory), Arc::clone(&remaining));
            s.spawn(move |_| {
                if !shared.has_failed() {
                    let encoded = column_writers(&factory, &job, r)
                        .map_err(encoding_error)
                        .and_then(|w| encode_chunk(&job.field, &job, self.locations, self.partitions, sort.rows_of(r), w, sort.cancel));
                    shared.store(r, job.column, encoded);
                }
                if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    log::debug!("column {}: encoded", job.field.name());
                    shared.column_finished(n, sort.progress);
                }
            });
        }
    }

    /// The factory of `job`'s column: the first [`TRIAL_ROWS`] of its first row group
    /// encoded with and without dictionaries, each leaf as the smaller went.
    fn choose_dictionaries(&self, job: &ColumnJob) -> Result<Arc<ArrowRowGroupWriterFactory>> {
        let first = self.sort.rows_of(0);
        let sample = first.start..first.end.min(first.start + TRIAL_ROWS);
        let encode = |factory: &ArrowRowGroupWriterFactory| {
            let writers = column_writers(factory, job, 0).map_err(encoding_error)?;
            encode_chunk(&job.field, job, self.locations, self.partitions, sample.clone(), writers, self.sort.cancel)
        };
        let (with, plain) = rayon::join(|| encode(&self.factories.trial_with), || encode(&self.factories.trial_plain));
        let ((with, _), (plain, _)) = (with?, plain?);
        let (_, went_plain) = dictionary::smaller_chunks(with, plain);
        self.factories.decided(&went_plain, job.first_leaf)
    }
}

/// What the encoder thread tells the thread appending row groups.
pub(super) enum Event {
    /// Every column of this row group is encoded.
    RowGroupEncoded(usize),
    /// The encoding ended (done, failed or panicked).
    Finished,
}

/// Sends [`Event::Finished`] when dropped.
pub(super) struct SendOnDrop<'a>(pub(super) &'a std::sync::mpsc::Sender<Event>);

impl Drop for SendOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.send(Event::Finished);
    }
}

pub(super) fn leaves_count(ranges: &[(usize, usize)]) -> usize {
    ranges.iter().map(|r| r.1).sum()
}

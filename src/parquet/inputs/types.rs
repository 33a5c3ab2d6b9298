//! Parquet types that arrow-rs reads with a loss by default, read exactly or refused.
//!
//! - **INT96 timestamps** (Spark, Impala, Hive) are a Julian day and the nanoseconds of that
//!   day. arrow-rs converts them to 64-bit nanoseconds by default, wrapping any instant
//!   outside 1677-09-21 .. 2262-04-11 into a different one (9999-12-31 came out as
//!   1816-03-29), and to the unit an `ARROW:schema` names (pyarrow's) by truncating finer
//!   digits. [`settle_int96`] reads every INT96 column of the inputs once, before the merge,
//!   and picks one unit per column for all files: the unit the files read it at where that
//!   holds every value exactly (so ordinary files read as before, at nanoseconds), else the
//!   finest unit of seconds, milliseconds, microseconds and nanoseconds at which every value
//!   fits 64 bits and has no finer digits; where no unit does (a value with nanosecond digits
//!   beside one outside the nanoseconds' range), the merge is refused, naming the column,
//!   the file and the values. The output stores the column as a Parquet INT64 timestamp of
//!   that unit (arrow-rs writes no INT96).
//! - **INTERVAL** (DuckDB: `FIXED_LEN_BYTE_ARRAY(12)`, converted type `INTERVAL`, months,
//!   days and milliseconds as little-endian u32) is read by arrow-rs as `Interval(DayTime)`,
//!   dropping the months (and as written back, a type Polars cannot read). [`read_exactly`]
//!   reads it as its 12 bytes (`FixedSizeBinary(12)`), and the writer annotates the output
//!   column `INTERVAL` again (see `writer::common_parquet_schema`), so the bytes, and the
//!   values other readers see, are the input's. An INTERVAL column cannot be a sort key
//!   (checked in `inputs::plan_merge_with`): intervals have no order corank could share
//!   with other engines (a month has no fixed length in days).
//! - **DATE** columns whose `ARROW:schema` asks for `Date64` (pyarrow's `date64`) are read as
//!   `Date32`, the days they store (exact: a Parquet DATE is days), so the output keeps the
//!   Parquet DATE type; read as `Date64` arrow-rs would write them back as bare INT64
//!   milliseconds, a number to every other reader. A `Date64` stored as INT64 (arrow-rs's
//!   own) is not a DATE and is read and written as it is.
//!
//! Nested columns (in lists, structs, maps) are handled as top-level ones: the Arrow type of
//! each INT96 and DATE leaf is found by converting the Parquet schema once more without
//! hints, with each INT96 leaf marked by a fixed-size binary of a width no file uses.

use super::InputFile;
use crate::error::{Error, Result};
use arrow::datatypes::{DataType, FieldRef, Fields, Schema, TimeUnit};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::basic::{ConvertedType, Repetition, Type as PhysicalType};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{Int96, Int96Type};
use parquet::file::metadata::{FileMetaData, ParquetMetaData, ParquetMetaDataBuilder};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::{SchemaDescriptor, Type, TypePtr};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Whether a Parquet leaf is an INTERVAL.
pub fn is_interval(t: &Type) -> bool {
    t.is_primitive()
        && t.get_physical_type() == PhysicalType::FIXED_LEN_BYTE_ARRAY
        && t.get_basic_info().converted_type() == ConvertedType::INTERVAL
}

/// `t` with every leaf `f` returns a replacement for replaced (`f` gets the leaf's index in
/// schema order); the groups above a replaced leaf rebuilt with their annotations, the rest
/// shared.
fn map_leaves(t: &TypePtr, leaf: &mut usize, f: &mut impl FnMut(usize, &Type) -> Option<Type>) -> parquet::errors::Result<TypePtr> {
    match t.as_ref() {
        Type::PrimitiveType { .. } => {
            let i = *leaf;
            *leaf += 1;
            Ok(f(i, t).map(Arc::new).unwrap_or_else(|| t.clone()))
        }
        Type::GroupType { basic_info, fields } => {
            let mut changed = false;
            let mut mapped = Vec::with_capacity(fields.len());
            for c in fields {
                let m = map_leaves(c, leaf, f)?;
                changed |= !Arc::ptr_eq(&m, c);
                mapped.push(m);
            }
            if !changed {
                return Ok(t.clone());
            }
            let mut b = Type::group_type_builder(basic_info.name())
                .with_converted_type(basic_info.converted_type())
                .with_logical_type(basic_info.logical_type_ref().cloned())
                .with_fields(mapped)
                .with_id(basic_info.has_id().then(|| basic_info.id()));
            if basic_info.has_repetition() {
                b = b.with_repetition(basic_info.repetition());
            }
            Ok(Arc::new(b.build()?))
        }
    }
}

/// A leaf like `t` (name, repetition, id) of another physical type and length, without
/// annotations.
fn bare_leaf(t: &Type, physical: PhysicalType, length: i32) -> Option<Type> {
    let info = t.get_basic_info();
    Type::primitive_type_builder(info.name(), physical)
        .with_repetition(if info.has_repetition() { info.repetition() } else { Repetition::REQUIRED })
        .with_length(length)
        .with_id(info.has_id().then(|| info.id()))
        .build()
        .ok()
}

/// The Arrow width that marks INT96 leaf `i` in [`plain_schema`] (no file has such a
/// fixed-size binary: 2 GiB less `i` bytes a value), for the first [`MARKED`] leaves.
fn int96_marker(i: usize) -> Option<i32> {
    (i < MARKED).then(|| i32::MAX - i as i32)
}

/// Leaves an INT96 marker can name.
const MARKED: usize = 1 << 20;

/// The INT96 leaf a width marks.
fn marked_leaf(width: i32) -> Option<usize> {
    let i = usize::try_from(width).ok().map(|w| i32::MAX as usize - w)?;
    (i < MARKED).then_some(i)
}

/// The Arrow schema of `descr` without hints (what the Parquet types alone read as), each
/// INT96 leaf `i` as `FixedSizeBinary(int96_marker(i))`.
fn plain_schema(descr: &SchemaDescriptor) -> parquet::errors::Result<Schema> {
    let mut leaf = 0;
    let root = map_leaves(&descr.root_schema_ptr(), &mut leaf, &mut |i, t| {
        let marker = int96_marker(i).filter(|_| t.get_physical_type() == PhysicalType::INT96)?;
        bare_leaf(t, PhysicalType::FIXED_LEN_BYTE_ARRAY, marker)
    })?;
    parquet::arrow::parquet_to_arrow_schema(&SchemaDescriptor::new(root), None)
}

/// `hinted` (a type the reader gives) rewritten against `plain` (the same position in
/// [`plain_schema`]): a DATE read as `Date64` becomes `Date32`, and INT96 leaf `i`'s unit
/// `units[i]` where given. Records the unit each INT96 leaf reads at in `found`.
fn rewrite(hinted: &DataType, plain: &DataType, units: &HashMap<usize, TimeUnit>, found: &mut HashMap<usize, TimeUnit>) -> DataType {
    use DataType::*;
    let field = |h: &FieldRef, p: &FieldRef, found: &mut HashMap<usize, TimeUnit>| -> FieldRef {
        let t = rewrite(h.data_type(), p.data_type(), units, found);
        if &t == h.data_type() {
            h.clone()
        } else {
            Arc::new(h.as_ref().clone().with_data_type(t))
        }
    };
    match (hinted, plain) {
        (List(h), List(p) | LargeList(p)) => List(field(h, p, found)),
        (LargeList(h), List(p) | LargeList(p)) => LargeList(field(h, p, found)),
        (ListView(h), List(p) | LargeList(p)) => ListView(field(h, p, found)),
        (LargeListView(h), List(p) | LargeList(p)) => LargeListView(field(h, p, found)),
        (FixedSizeList(h, n), List(p) | LargeList(p)) => FixedSizeList(field(h, p, found), *n),
        (Map(h, sorted), Map(p, _)) => Map(field(h, p, found), *sorted),
        (Struct(hs), Struct(ps)) if hs.len() == ps.len() => {
            Struct(hs.iter().zip(ps.iter()).map(|(h, p)| field(h, p, found)).collect::<Fields>())
        }
        (Dictionary(k, h), p) => Dictionary(k.clone(), Box::new(rewrite(h, p, units, found))),
        (Date64, Date32) => Date32,
        (Timestamp(unit, tz), FixedSizeBinary(w)) => match marked_leaf(*w) {
            Some(i) => {
                found.insert(i, *unit);
                Timestamp(units.get(&i).copied().unwrap_or(*unit), tz.clone())
            }
            None => hinted.clone(),
        },
        _ => hinted.clone(),
    }
}

/// `schema` rewritten field by field (see [`rewrite`]); `None` where nothing changes.
fn rewrite_schema(
    schema: &Schema,
    plain: &Schema,
    units: &HashMap<usize, TimeUnit>,
    found: &mut HashMap<usize, TimeUnit>,
) -> Option<Schema> {
    if schema.fields().len() != plain.fields().len() {
        return None;
    }
    let mut changed = false;
    let fields: Vec<FieldRef> = (schema.fields().iter().zip(plain.fields()))
        .map(|(h, p)| {
            let t = rewrite(h.data_type(), p.data_type(), units, found);
            if &t == h.data_type() {
                h.clone()
            } else {
                changed = true;
                Arc::new(h.as_ref().clone().with_data_type(t))
            }
        })
        .collect();
    changed.then(|| Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `metadata` read with `schema` (the same columns, other types the Parquet types allow).
fn read_with_schema(metadata: &ArrowReaderMetadata, schema: Schema) -> parquet::errors::Result<ArrowReaderMetadata> {
    ArrowReaderMetadata::try_new(Arc::clone(metadata.metadata()), ArrowReaderOptions::new().with_schema(Arc::new(schema)))
}

/// How the file at `path` is read (see the module doc): INTERVAL columns as their 12 bytes,
/// DATE columns as days. `metadata` is the footer as loaded with default options.
pub fn read_exactly(path: &Path, metadata: ArrowReaderMetadata) -> Result<ArrowReaderMetadata> {
    let err = |e| Error::parquet(path, "reading the schema", e);
    let descr = metadata.metadata().file_metadata().schema_descr();
    let mut metadata = if descr.columns().iter().any(|c| is_interval(c.self_type())) {
        // The file's metadata with the INTERVAL annotations left out of its schema: the
        // reader then reads the 12 bytes as they are.
        let mut leaf = 0;
        let root = map_leaves(&descr.root_schema_ptr(), &mut leaf, &mut |_, t| {
            is_interval(t).then(|| bare_leaf(t, PhysicalType::FIXED_LEN_BYTE_ARRAY, 12)).flatten()
        })
        .map_err(err)?;
        let footer = metadata.metadata();
        let file = footer.file_metadata();
        let file = FileMetaData::new(
            file.version(),
            file.num_rows(),
            file.created_by().map(str::to_string),
            file.key_value_metadata().cloned(),
            Arc::new(SchemaDescriptor::new(root)),
            file.column_orders().cloned(),
        );
        let footer: ParquetMetaData = ParquetMetaDataBuilder::new(file)
            .set_row_groups(footer.row_groups().to_vec())
            .set_column_index(footer.column_index().cloned())
            .set_offset_index(footer.offset_index().cloned())
            .build();
        // The embedded Arrow schema is decoded again here: where it cannot be (an error or
        // a panic of arrow-ipc, see `corrupt::load_metadata`), the Parquet schema is read.
        let footer = Arc::new(footer);
        match crate::parquet::corrupt::catch_result(|| ArrowReaderMetadata::try_new(Arc::clone(&footer), ArrowReaderOptions::new())) {
            Ok(metadata) => metadata,
            Err(_) => ArrowReaderMetadata::try_new(footer, ArrowReaderOptions::new().with_skip_arrow_metadata(true)).map_err(err)?,
        }
    } else {
        metadata
    };
    if metadata.schema().fields().iter().any(|f| has_date64(f.data_type())) {
        let plain = plain_schema(metadata.parquet_schema()).map_err(err)?;
        if let Some(schema) = rewrite_schema(metadata.schema(), &plain, &HashMap::new(), &mut HashMap::new()) {
            metadata = read_with_schema(&metadata, schema).map_err(err)?;
        }
    }
    Ok(metadata)
}

fn has_date64(t: &DataType) -> bool {
    use DataType::*;
    match t {
        Date64 => true,
        List(f) | LargeList(f) | ListView(f) | LargeListView(f) | FixedSizeList(f, _) | Map(f, _) => has_date64(f.data_type()),
        Struct(fs) => fs.iter().any(|f| has_date64(f.data_type())),
        Dictionary(_, v) => has_date64(v),
        _ => false,
    }
}

/// Units by rank, coarsest first, with their nanoseconds.
const UNITS: [(TimeUnit, i128); 4] =
    [(TimeUnit::Second, 1_000_000_000), (TimeUnit::Millisecond, 1_000_000), (TimeUnit::Microsecond, 1_000), (TimeUnit::Nanosecond, 1)];

fn rank(u: TimeUnit) -> usize {
    UNITS.iter().position(|(x, _)| *x == u).unwrap_or(3)
}

fn unit_name(r: usize) -> &'static str {
    ["second", "millisecond", "microsecond", "nanosecond"][r]
}

const NANOS_PER_DAY: i128 = 86_400_000_000_000;
/// The Julian day of 1970-01-01.
const JULIAN_EPOCH: i128 = 2_440_588;

/// An INT96 value's Julian day and nanoseconds of the day (arrow-rs's reading of the 12
/// bytes), and its nanoseconds since the epoch.
fn int96_parts(v: &Int96) -> (i32, i64, i128) {
    let d = v.data();
    let day = d[2] as i32;
    let nanos = ((d[1] as i64) << 32) + d[0] as i64;
    (day, nanos, (day as i128 - JULIAN_EPOCH) * NANOS_PER_DAY + nanos as i128)
}

/// An INT96 value as a date and time (UTC), or its parts where no calendar holds it.
fn show_int96(v: &Int96) -> String {
    let (day, nanos, total) = int96_parts(v);
    let (secs, sub) = (total.div_euclid(1_000_000_000), total.rem_euclid(1_000_000_000));
    match i64::try_from(secs).ok().and_then(arrow::temporal_conversions::timestamp_s_to_datetime) {
        Some(t) if sub == 0 => t.to_string(),
        Some(t) => format!("{t}.{sub:09}"),
        None => format!("Julian day {day} + {nanos} ns"),
    }
}

/// The units one INT96 leaf of one file holds exactly: every value fits 64 bits at units up
/// to `finest_fit` (by rank) and has no digits finer than `coarsest_exact`, with a value
/// that bounds each (`None`: no value does).
#[derive(Debug, Clone, Copy)]
struct Extent {
    finest_fit: usize,
    too_far: Option<Int96>,
    coarsest_exact: usize,
    fine_digits: Option<Int96>,
}

impl Default for Extent {
    fn default() -> Self {
        Self { finest_fit: 3, too_far: None, coarsest_exact: 0, fine_digits: None }
    }
}

impl Extent {
    fn add(&mut self, v: &Int96) {
        let (_, nanos, total) = int96_parts(v);
        // The reader computes `days * unit_per_day + nanos / ns_per_unit` in wrapping 64-bit
        // arithmetic: exact where `nanos` has no finer digits and the result fits 64 bits.
        let exact_from = UNITS.iter().position(|(_, k)| nanos as i128 % k == 0).unwrap_or(3);
        if exact_from > self.coarsest_exact {
            self.coarsest_exact = exact_from;
            self.fine_digits = Some(*v);
        }
        while self.finest_fit > 0 && i64::try_from(total / UNITS[self.finest_fit].1).is_err() {
            self.finest_fit -= 1;
            self.too_far = Some(*v);
        }
    }
}

/// The extent of INT96 leaf `leaf` of the file at `path` (every value read).
fn int96_extent(path: &Path, footer: &ParquetMetaData, leaf: usize) -> parquet::errors::Result<Extent> {
    let file = Arc::new(std::fs::File::open(path)?);
    let descr = footer.file_metadata().schema_descr().column(leaf);
    let mut extent = Extent::default();
    let (mut defs, mut reps, mut values): (Vec<i16>, Vec<i16>, Vec<Int96>) = (Vec::new(), Vec::new(), Vec::new());
    for rg in footer.row_groups() {
        let pages = SerializedPageReader::new(Arc::clone(&file), rg.column(leaf), rg.num_rows().max(0) as usize, None)?;
        let mut reader = ColumnReaderImpl::<Int96Type>::new(Arc::clone(&descr), Box::new(pages));
        loop {
            defs.clear();
            reps.clear();
            values.clear();
            let (records, _, levels) = reader.read_records(8192, Some(&mut defs), Some(&mut reps), &mut values)?;
            values.iter().for_each(|v| extent.add(v));
            if records == 0 && levels == 0 {
                break;
            }
        }
    }
    Ok(extent)
}

/// Per file: its INT96 leaves (index, path) and the unit each reads at now.
struct Int96Leaves {
    plain: Schema,
    read_at: HashMap<usize, TimeUnit>,
    paths: Vec<(usize, String)>,
}

/// Per column path: the units every file holds exactly (with the values and files that
/// bound them), and the unit each file reads it at (`None`: the schema walk missed it).
#[derive(Default)]
struct Joint {
    too_far: Option<(Int96, PathBuf)>,
    fine_digits: Option<(Int96, PathBuf)>,
    extent: Extent,
    read_at: Vec<Option<TimeUnit>>,
}

/// Reads every INT96 column of `files` and sets the unit each is read at, the same for all
/// files (see the module doc); an error where no unit holds every value exactly.
pub fn settle_int96(files: &mut [InputFile]) -> Result<()> {
    let per_file = int96_leaves(files)?;
    if per_file.iter().all(Option::is_none) {
        return Ok(());
    }
    let jobs = int96_jobs(&per_file);
    let extents = read_int96_extents(files, &jobs)?;
    let joint = join_extents(files, &per_file, &jobs, &extents);
    let settled = settle_units(&joint)?;
    read_at_settled_units(files, per_file, &settled)
}

/// Each file's INT96 leaves and the units they read at now (`None`: the file has none).
fn int96_leaves(files: &[InputFile]) -> Result<Vec<Option<Int96Leaves>>> {
    let mut per_file: Vec<Option<Int96Leaves>> = Vec::with_capacity(files.len());
    for f in files.iter() {
        let descr = f.metadata.parquet_schema();
        let paths: Vec<(usize, String)> = (descr.columns().iter().enumerate())
            .filter(|(_, c)| c.physical_type() == PhysicalType::INT96)
            .map(|(i, c)| (i, c.path().string()))
            .collect();
        if paths.is_empty() {
            per_file.push(None);
            continue;
        }
        let plain = plain_schema(descr).map_err(|e| Error::parquet(&f.path, "reading the schema", e))?;
        let mut read_at = HashMap::new();
        rewrite_schema(f.metadata.schema(), &plain, &HashMap::new(), &mut read_at);
        per_file.push(Some(Int96Leaves { plain, read_at, paths }));
    }
    Ok(per_file)
}

/// The INT96 leaves to read, as (file, leaf), files in order.
fn int96_jobs(per_file: &[Option<Int96Leaves>]) -> Vec<(usize, usize)> {
    (per_file.iter().enumerate()).flat_map(|(fi, l)| l.iter().flat_map(move |l| l.paths.iter().map(move |(i, _)| (fi, *i)))).collect()
}

/// Every INT96 value read once, files and columns in parallel: the extent of each job.
fn read_int96_extents(files: &[InputFile], jobs: &[(usize, usize)]) -> Result<Vec<Extent>> {
    let extents: Vec<Extent> = jobs
        .par_iter()
        .map(|&(fi, leaf)| {
            let f = &files[fi];
            int96_extent(&f.path, f.metadata.metadata(), leaf).map_err(|e| {
                let column = f.metadata.parquet_schema().column(leaf).path().string();
                Error::parquet(&f.path, format!("reading the INT96 column '{column}'"), e)
            })
        })
        .collect::<Result<_>>()?;
    log::debug!("INT96 columns read to settle their units: {}", jobs.len());
    Ok(extents)
}

/// The files' extents joined per column path, in the order the columns are first met.
fn join_extents(
    files: &[InputFile],
    per_file: &[Option<Int96Leaves>],
    jobs: &[(usize, usize)],
    extents: &[Extent],
) -> Vec<(String, Joint)> {
    let mut joint: Vec<(String, Joint)> = Vec::new();
    for (&(fi, leaf), e) in jobs.iter().zip(extents) {
        let Some(leaves) = per_file[fi].as_ref() else { continue };
        let column = leaves.paths.iter().find(|(i, _)| *i == leaf).map(|(_, p)| p.clone()).unwrap_or_default();
        let at = joint.iter().position(|(c, _)| *c == column).unwrap_or_else(|| {
            joint.push((column.clone(), Joint::default()));
            joint.len() - 1
        });
        let j = &mut joint[at].1;
        if e.finest_fit < j.extent.finest_fit {
            j.extent.finest_fit = e.finest_fit;
            j.too_far = e.too_far.map(|v| (v, files[fi].path.clone()));
        }
        if e.coarsest_exact > j.extent.coarsest_exact {
            j.extent.coarsest_exact = e.coarsest_exact;
            j.fine_digits = e.fine_digits.map(|v| (v, files[fi].path.clone()));
        }
        j.read_at.push(leaves.read_at.get(&leaf).copied());
    }
    joint
}

/// The unit per column path, or the error for the first column no unit holds exactly.
fn settle_units(joint: &[(String, Joint)]) -> Result<HashMap<String, TimeUnit>> {
    let mut settled: HashMap<String, TimeUnit> = HashMap::new();
    for (column, j) in joint {
        let (fit, exact) = (j.extent.finest_fit, j.extent.coarsest_exact);
        // The schema walk missed a leaf: it reads at arrow-rs's nanoseconds; refuse it where
        // they do not hold it.
        let missed = j.read_at.iter().any(Option::is_none);
        if exact > fit || (missed && fit < 3) {
            return Err(int96_error(column, j.too_far.as_ref(), j.fine_digits.as_ref().filter(|_| exact > fit), exact));
        }
        let units: Vec<usize> = j.read_at.iter().map(|u| u.map_or(3, rank)).collect();
        let unit = match units.first() {
            Some(&r) if units.iter().all(|&u| u == r) && exact <= r && r <= fit => r,
            _ => fit,
        };
        if units.iter().any(|&u| u != unit) {
            log::info!("INT96 column '{column}' is read in {}s, the finest unit that holds every value exactly", unit_name(unit));
        }
        settled.insert(column.clone(), UNITS[unit].0);
    }
    Ok(settled)
}

/// Each file read at the settled units (those already read at them left as they are).
fn read_at_settled_units(files: &mut [InputFile], per_file: Vec<Option<Int96Leaves>>, settled: &HashMap<String, TimeUnit>) -> Result<()> {
    for (f, leaves) in files.iter_mut().zip(per_file) {
        let Some(leaves) = leaves else { continue };
        let units: HashMap<usize, TimeUnit> = leaves.paths.iter().filter_map(|(i, p)| Some((*i, *settled.get(p)?))).collect();
        if units.iter().all(|(i, u)| leaves.read_at.get(i) == Some(u)) {
            continue;
        }
        if let Some(schema) = rewrite_schema(f.metadata.schema(), &leaves.plain, &units, &mut HashMap::new()) {
            f.metadata = read_with_schema(&f.metadata, schema).map_err(|e| Error::parquet(&f.path, "reading the schema", e))?;
        }
    }
    Ok(())
}

/// The error for INT96 column `column` that no unit holds exactly: `too_far` lies outside
/// what 64-bit units of rank `exact` hold, and `fine_digits` (if given) needs that rank.
fn int96_error(column: &str, too_far: Option<&(Int96, PathBuf)>, fine_digits: Option<&(Int96, PathBuf)>, exact: usize) -> Error {
    let Some((far, far_file)) = too_far else {
        return Error::Internal(format!("INT96 column '{column}': no unit holds it, and no value says why"));
    };
    let unit = unit_name(exact);
    let detail = match fine_digits {
        Some((fine, fine_file)) => {
            let fine_where = if fine_file == far_file { String::new() } else { format!(" in {}", fine_file.display()) };
            format!(
                "column '{column}' holds INT96 timestamps that no one unit holds exactly: {} lies outside what 64-bit {unit}s \
                 hold, and {}{fine_where} has {unit} digits that a coarser unit would drop; corank reads them exactly or not at all",
                show_int96(far),
                show_int96(fine),
            )
        }
        None => format!("column '{column}' holds the INT96 timestamp {}, outside what 64-bit nanoseconds hold", show_int96(far)),
    };
    Error::File { path: far_file.clone(), detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int96(days_since_epoch: i64, nanos: u64) -> Int96 {
        let mut v = Int96::new();
        v.set_data(nanos as u32, (nanos >> 32) as u32, (days_since_epoch + JULIAN_EPOCH as i64) as u32);
        v
    }

    #[test]
    fn extents_bound_the_units_that_hold_every_value() {
        let mut e = Extent::default();
        e.add(&int96(0, 0));
        assert_eq!((e.coarsest_exact, e.finest_fit), (0, 3), "the epoch: any unit");
        e.add(&int96(10_957, 1_000));
        assert_eq!((e.coarsest_exact, e.finest_fit), (2, 3), "microsecond digits");
        e.add(&int96(2_932_896, 0));
        assert_eq!((e.coarsest_exact, e.finest_fit), (2, 2), "9999-12-31: past nanoseconds");
        e.add(&int96(-135_140, 1));
        assert_eq!((e.coarsest_exact, e.finest_fit), (3, 2), "nanosecond digits too: no unit");
        // The largest Julian day (5.9 million years on): past microseconds, milliseconds
        // hold it.
        let mut e = Extent::default();
        let mut v = Int96::new();
        v.set_data(0, 0, u32::MAX >> 1);
        e.add(&v);
        assert_eq!(e.finest_fit, 1);
    }

    #[test]
    fn int96_values_show_as_dates() {
        assert_eq!(show_int96(&int96(2_932_896, 0)), "9999-12-31 00:00:00");
        assert_eq!(show_int96(&int96(10_957, 1)), "2000-01-01 00:00:00.000000001");
        assert_eq!(show_int96(&int96(-1, 86_399_999_999_999)), "1969-12-31 23:59:59.999999999");
        let mut v = Int96::new();
        v.set_data(5, 0, u32::MAX >> 1);
        assert_eq!(show_int96(&v), "Julian day 2147483647 + 5 ns", "past any calendar");
    }

    #[test]
    fn markers_name_leaves() {
        assert_eq!(int96_marker(0).and_then(marked_leaf), Some(0));
        assert_eq!(int96_marker(77).and_then(marked_leaf), Some(77));
        assert_eq!(int96_marker(MARKED), None);
        assert_eq!(marked_leaf(16), None);
        assert_eq!(marked_leaf(-3), None);
    }
}

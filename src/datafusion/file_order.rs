//! Whether the Parquet files under a merge are sorted as their scan declares, and the repair
//! where that is not proven.
//!
//! DataFusion 55.2 takes a Parquet file's order from its first row group's
//! `sorting_columns` (`ordering_from_parquet_metadata`). That metadata says the row group is
//! sorted, not the file: a file whose row groups are each sorted but overlap (what
//! `corank demo` writes) is declared sorted, and a merge over such partitions returns rows
//! out of order. `CREATE EXTERNAL TABLE .. WITH ORDER` declares a whole file sorted on the
//! user's word.
//!
//! What is trusted is what holds either way: each row group is sorted by the declared
//! order (unless its own `sorting_columns` contradict it). Whether a file is one sorted run
//! is proven from the row groups' statistics of each declared order's first column, as the
//! CLI's run detection (`corank::parquet::inputs`) does: the end of row group `g` (its max,
//! ascending; its min, descending) must sort at or before the start of the next one (`<`
//! when the order has more columns, whose values a tie could leave out of order), with no
//! nulls at the seam. Anything not proven is not trusted: float keys (statistics ignore NaN),
//! missing statistics, files whose footer cannot be read (each with a warning in the log).
//!
//! Footers of local files are read from the file system; those of files in object stores
//! through the session's runtime (`super::footers`): the store registered for the scan's
//! object store URL, and DataFusion's file metadata cache, so files in S3 get the same proof,
//! splits and plans as local ones. Without the session's runtime (a rule not registered by
//! [`register`](super::register) or its kin), or where the footer cannot be had (no store
//! registered, an error, planning on a current-thread tokio runtime with the footer not
//! cached), the file is not proven.
//!
//! The repair, below a merge: a file that is not one run becomes one partition per run of
//! row groups (each an access plan of those row groups, and the byte range that selects the
//! same row groups, which is what survives a plan codec: Ballista's executors), when the
//! path from the merge down to the scan passes only nodes that keep partitions and order
//! (projections, filters, unions, batch coalescing); otherwise, or where a row group itself
//! may be unsorted, a sort of each partition goes below the merge.

use super::footers;
use crate::parquet::sorting_columns::{declared_order, DeclaredOrder};
use arrow::array::{Array, ArrayRef};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::datasource::listing::{FileRange, PartitionedFile};
use datafusion::datasource::physical_plan::parquet::ParquetAccessPlan;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::ExecutionPlan;
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a merge's input needs so that every partition it reads is sorted.
pub(crate) enum Repair {
    /// Every Parquet scan below is proven sorted as declared (or there is none).
    Proven,
    /// The input with the unproven files split into row-group runs.
    Split(Arc<dyn ExecutionPlan>),
    /// A sort of each partition is needed below the merge.
    Sort,
}

/// What the proof reads footers through: the session's [`FileOrderCache`] and runtime (its
/// object stores and file metadata cache, `super::footers`), where it has them. Without a
/// runtime, only local files are read.
#[derive(Clone, Copy, Default)]
pub(crate) struct FileAccess<'a> {
    pub cache: Option<&'a FileOrderCache>,
    pub runtime: Option<&'a RuntimeEnv>,
}

/// Nodes that keep their children's partitions (one output partition per input partition,
/// unions concatenating them) and the order within each.
const PASS_THROUGH: [&str; 5] = ["ProjectionExec", "FilterExec", "CoalesceBatchesExec", "CooperativeExec", "UnionExec"];

/// Nodes whose output is sorted whatever their input's order.
fn sorts_itself(plan: &Arc<dyn ExecutionPlan>) -> bool {
    matches!(plan.name(), "SortExec" | "SortPreservingMergeExec" | "CoRankMergeExec")
}

/// Checks the Parquet scans below a merge's `input` and says what makes its partitions
/// sorted. A merge or sort below stops the search: its output is sorted on its own.
/// `access`: what the session gives to read footers by.
pub(crate) fn repair(input: &Arc<dyn ExecutionPlan>, access: &FileAccess) -> Result<Repair> {
    if sorts_itself(input) {
        return Ok(Repair::Proven);
    }
    if let Some(scan) = input.downcast_ref::<DataSourceExec>() {
        return Ok(repair_scan(scan, access));
    }
    if PASS_THROUGH.contains(&input.name()) {
        let mut children = Vec::with_capacity(input.children().len());
        let mut changed = false;
        for child in input.children() {
            match repair(child, access)? {
                Repair::Sort => return Ok(Repair::Sort),
                Repair::Proven => children.push(Arc::clone(child)),
                Repair::Split(c) => {
                    children.push(c);
                    changed = true;
                }
            }
        }
        return Ok(if changed { Repair::Split(replace_children_if_necessary(Arc::clone(input), children)?) } else { Repair::Proven });
    }
    // Any other node: its partitions are not the scan's; only a sort helps.
    Ok(if input.children().into_iter().any(|c| has_unproven_scan(c, access)) { Repair::Sort } else { Repair::Proven })
}

/// `plan` with the declared order of every unproven Parquet scan below it dropped (a merge
/// or sort below stops the search), for a sort that goes above them: DataFusion's `SortExec`
/// passes its input through unsorted when the input's equivalence properties claim the
/// order already, and an unproven scan claims it.
///
/// A node between that requires its input's order (a windowed aggregate, say) then fails
/// DataFusion's plan check: it would have read rows the scan only claimed to be sorted.
pub(crate) fn forget_unproven_order(plan: &Arc<dyn ExecutionPlan>, access: &FileAccess) -> Result<Arc<dyn ExecutionPlan>> {
    Arc::clone(plan)
        .transform_down(|node| {
            if sorts_itself(&node) {
                return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
            }
            let Some(scan) = node.downcast_ref::<DataSourceExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some((config, _)) = scan.downcast_to_file_source::<ParquetSource>() else {
                return Ok(Transformed::no(node));
            };
            if config.output_ordering.is_empty() || matches!(repair_scan(scan, access), Repair::Proven) {
                return Ok(Transformed::no(node));
            }
            let config = FileScanConfigBuilder::from(config.clone()).with_output_ordering(vec![]).build();
            Ok(Transformed::yes(Arc::new(scan.clone().with_data_source(Arc::new(config))) as Arc<dyn ExecutionPlan>))
        })
        .data()
}

fn has_unproven_scan(plan: &Arc<dyn ExecutionPlan>, access: &FileAccess) -> bool {
    if sorts_itself(plan) {
        return false;
    }
    if let Some(scan) = plan.downcast_ref::<DataSourceExec>() {
        return !matches!(repair_scan(scan, access), Repair::Proven);
    }
    plan.children().into_iter().any(|c| has_unproven_scan(c, access))
}

/// A declared order: column names and options (the scan's orderings are columns of its
/// table schema, named as in the files).
type Order = Vec<(String, SortOptions)>;

/// The selected row groups of one file (or one access-planned piece of it), cut where the
/// statistics do not prove that a row group continues the previous one. `None`: a row group
/// may not be sorted at all (its `sorting_columns` contradict the declared order), or the
/// file cannot be read here.
#[derive(Clone)]
struct Runs {
    row_groups: usize,
    runs: Vec<Vec<usize>>,
    /// Each run's byte range (see [`row_group_range`]), `None` where a row group has no
    /// columns to place it by.
    ranges: Vec<Option<(i64, i64)>>,
}

/// Where DataFusion's Parquet opener places a row group when it prunes by a byte range: the
/// first column's dictionary page, else its first data page (`None`: no columns).
pub(crate) fn row_group_start(rg: &RowGroupMetaData) -> Option<i64> {
    (rg.num_columns() > 0).then(|| {
        let c = rg.column(0);
        c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset())
    })
}

/// The byte range that selects row groups `first..=last` of a file (`starts`: every row
/// group's start, `file_size` its length): from `first`'s start up to the next row group's
/// start after `last`'s, or the end of the file. Row groups do not overlap, so exactly the
/// row groups that start in between are read: `first..=last`, and any row group between
/// them that another restriction (an access plan) leaves out.
pub(crate) fn row_group_range(starts: &[Option<i64>], first: usize, last: usize, file_size: u64) -> Option<(i64, i64)> {
    let (start, last_start) = (starts[first]?, starts[last]?);
    let end = starts.iter().flatten().copied().filter(|&s| s > last_start).min().unwrap_or(file_size as i64);
    Some((start, end.max(last_start + 1)))
}

fn repair_scan(scan: &DataSourceExec, access: &FileAccess) -> Repair {
    let Some((config, _)) = scan.downcast_to_file_source::<ParquetSource>() else {
        return Repair::Proven;
    };
    if config.output_ordering.is_empty() {
        return Repair::Proven;
    }
    let orders: Option<Vec<Order>> = config
        .output_ordering
        .iter()
        .map(|o| o.iter().map(|e| e.expr.downcast_ref::<Column>().map(|c| (c.name().to_string(), e.options))).collect())
        .collect();
    let Some(orders) = orders else {
        return Repair::Sort; // an order on an expression: no statistics to prove it by
    };
    let url = &config.object_store_url;
    // Each piece's runs; whole files (ranges of them, or all of them) once per path.
    let mut whole: HashMap<String, Option<Runs>> = HashMap::new();
    let mut pieces: Vec<Vec<Option<Runs>>> = vec![];
    let mut split = false;
    for group in &config.file_groups {
        let mut of_group = vec![];
        for file in group.iter() {
            let plan = file.extension::<ParquetAccessPlan>();
            let runs = match plan {
                Some(plan) => file_runs(file, url, Some(plan), &orders, access),
                None => {
                    let path = file.path().to_string();
                    whole.entry(path).or_insert_with(|| whole_file_runs(file, url, &orders, access)).clone()
                }
            };
            let Some(runs) = runs else {
                return Repair::Sort;
            };
            split |= runs.runs.len() > 1;
            of_group.push(Some(runs));
        }
        pieces.push(of_group);
    }
    if !split {
        return Repair::Proven;
    }
    if config.output_partitioning.is_some() {
        return Repair::Sort; // a declared partitioning (by partition columns) must stay
    }
    // The proven pieces stay in their groups; each unproven file (all its pieces) or
    // access-planned piece becomes one group per run, right after what is left of its own
    // group, so the partitions keep the files' order (a merge breaks ties by partition: where
    // each file is a partition, ties come out in file order, as from the files unsplit).
    let mut groups = vec![];
    let mut done: Vec<String> = vec![];
    for (group, runs) in config.file_groups.iter().zip(&pieces) {
        let mut kept = vec![];
        let mut run_groups = vec![];
        for (file, runs) in group.iter().zip(runs) {
            let runs = runs.as_ref().expect("every piece has runs");
            if runs.runs.len() <= 1 {
                kept.push(file.clone());
                continue;
            }
            let planned = file.extension::<ParquetAccessPlan>();
            if planned.is_none() {
                let path = file.path().to_string();
                if done.contains(&path) {
                    continue;
                }
                done.push(path);
            }
            for (run, range) in runs.runs.iter().zip(&runs.ranges) {
                run_groups.push(FileGroup::new(vec![run_file(file, planned, runs.row_groups, run, *range)]));
            }
        }
        if kept.len() == group.len() {
            groups.push(group.clone());
        } else if !kept.is_empty() {
            groups.push(FileGroup::new(kept));
        }
        groups.extend(run_groups);
    }
    let config = FileScanConfigBuilder::from(config.clone()).with_file_groups(groups).build();
    Repair::Split(Arc::new(scan.clone().with_data_source(Arc::new(config))))
}

/// One run of a file as a piece: the file with an access plan of the run's row groups
/// (keeping a row selection the piece had) and the byte range of the run, which selects the
/// same row groups where the access plan is lost (datafusion-proto does not encode it).
fn run_file(
    file: &PartitionedFile,
    planned: Option<&ParquetAccessPlan>,
    row_groups: usize,
    run: &[usize],
    range: Option<(i64, i64)>,
) -> PartitionedFile {
    let mut plan = ParquetAccessPlan::new_none(row_groups);
    for &g in run {
        match planned {
            Some(p) => plan.set(g, p.inner()[g].clone()),
            None => plan.scan(g),
        }
    }
    let mut piece = file.clone();
    piece.range = range.map(|(start, end)| FileRange { start, end });
    // The file's statistics still bound a run's values, but no longer count its rows.
    piece.statistics = piece.statistics.take().map(|s| Arc::new(s.as_ref().clone().to_inexact()));
    piece.with_extension(plan)
}

/// The footer of `file`, read from the local file system or (with the session's runtime)
/// from the store registered for `url`; the error says why it could not be read.
fn footer(file: &PartitionedFile, url: &ObjectStoreUrl, access: &FileAccess) -> std::result::Result<ArrowReaderMetadata, String> {
    if url.as_str() != ObjectStoreUrl::local_filesystem().as_str() {
        let runtime = access.runtime.ok_or("no session runtime to find its object store in")?;
        return footers::footer_blocking(runtime, url, &file.object_meta);
    }
    let path = local_path(file.path().as_ref());
    let handle = std::fs::File::open(&path).map_err(|e| e.to_string())?;
    let size = handle.metadata().map_err(|e| e.to_string())?.len();
    if size != file.object_meta.size {
        return Err(format!("{size} bytes, not the {} the scan listed", file.object_meta.size));
    }
    // An embedded Arrow schema that cannot be decoded is left aside, not a panic.
    crate::parquet::corrupt::load_metadata(&path, &handle).map_err(|e| e.to_string())
}

/// Local path of an object store location (`tmp/a%20b.parquet` → `/tmp/a b.parquet`).
fn local_path(location: &str) -> std::path::PathBuf {
    let decoded = crate::parquet::inputs::hive::percent_decode_bytes(location);
    std::path::PathBuf::from(format!("/{}", String::from_utf8_lossy(&decoded)))
}

/// Whole files' runs already found, by the file's identity as DataFusion's own file
/// metadata cache checks it (path, size, last modification, entity tag) and the orders:
/// planning a query again over the same files reads no footer. A file rewritten keeps its
/// path but changes its size or time, so its entry is not used. Held by the session (in
/// its `corank.*` config extension, [`super::config::CoRankConfig`]), so sessions do not
/// share entries and a dropped session frees them.
#[derive(Default)]
pub(crate) struct FileOrderCache {
    entries: Mutex<HashMap<RunsKey, Runs>>,
}

/// Entries a [`FileOrderCache`] holds at most (then it starts over).
const FILE_ORDER_CACHE_ENTRIES: usize = 4096;

#[derive(PartialEq, Eq, Hash)]
struct RunsKey {
    /// The store's URL (a location names an object within its store only).
    store: String,
    path: String,
    size: u64,
    modified: Option<i64>,
    e_tag: Option<String>,
    /// Each order's columns with (descending, nulls first).
    orders: Vec<Vec<(String, bool, bool)>>,
}

/// [`file_runs`] of a whole file (no access plan), through the session's cache where it
/// has one; what could not be proven is not kept (a file unreadable now may be readable
/// later).
fn whole_file_runs(file: &PartitionedFile, url: &ObjectStoreUrl, orders: &[Order], access: &FileAccess) -> Option<Runs> {
    let Some(cache) = access.cache else {
        return file_runs(file, url, None, orders, access);
    };
    let meta = &file.object_meta;
    let key = RunsKey {
        store: url.as_str().to_string(),
        path: meta.location.to_string(),
        size: meta.size,
        modified: meta.last_modified.timestamp_nanos_opt(),
        e_tag: meta.e_tag.clone(),
        orders: orders.iter().map(|o| o.iter().map(|(c, opt)| (c.clone(), opt.descending, opt.nulls_first)).collect()).collect(),
    };
    let cached = cache.entries.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
    if cached.is_some() {
        return cached;
    }
    let runs = file_runs(file, url, None, orders, access)?;
    let mut map = cache.entries.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= FILE_ORDER_CACHE_ENTRIES {
        map.clear();
    }
    map.insert(key, runs.clone());
    Some(runs)
}

/// The runs of `file`'s selected row groups (those of `plan` that start in the piece's byte
/// range if it has one, or all), `None` if the file cannot be read or a row group's
/// `sorting_columns` contradict an order. `url`: the store the scan reads `file` from.
fn file_runs(
    file: &PartitionedFile,
    url: &ObjectStoreUrl,
    plan: Option<&ParquetAccessPlan>,
    orders: &[Order],
    access: &FileAccess,
) -> Option<Runs> {
    let meta = match footer(file, url, access) {
        Ok(meta) => meta,
        Err(why) => {
            log::warn!(
                "{}: the order of its row groups is not proven ({why}), so its partitions are sorted before they are merged",
                footers::object_name(url, &file.object_meta).display()
            );
            return None;
        }
    };
    let parquet = meta.metadata();
    let n = parquet.num_row_groups();
    if plan.is_some_and(|p| p.len() != n) {
        return None;
    }
    let starts: Vec<Option<i64>> = parquet.row_groups().iter().map(row_group_start).collect();
    // A piece with an access plan reads the planned row groups that start in its range (as
    // DataFusion's opener prunes); without one, the whole file is taken (its byte-range
    // pieces are replaced together).
    let in_range = |g: usize| match (&file.range, plan) {
        (Some(r), Some(_)) => starts[g].is_none_or(|s| r.start <= s && s < r.end),
        _ => true,
    };
    let selected: Vec<usize> =
        (0..n).filter(|&g| plan.is_none_or(|p| p.should_scan(g)) && in_range(g) && parquet.row_group(g).num_rows() > 0).collect();
    if !row_groups_sorted(parquet, &selected, orders) {
        return None;
    }
    let seams: Vec<Vec<bool>> = orders.iter().map(|o| continues(parquet, meta.schema(), &selected, o)).collect();
    let mut runs: Vec<Vec<usize>> = vec![];
    for (i, &g) in selected.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if seams.iter().all(|s| s[i - 1]) => run.push(g),
            _ => runs.push(vec![g]),
        }
    }
    let size = file.object_meta.size;
    let ranges = runs.iter().map(|run| row_group_range(&starts, run[0], run[run.len() - 1], size)).collect();
    Some(Runs { row_groups: n, runs, ranges })
}

/// Whether every selected row group is sorted by the orders as far as metadata tells: where
/// any of them carries `sorting_columns`, all must, agreeing with each order on the columns
/// both name; where none does, the order was declared for the file (`WITH ORDER`).
fn row_groups_sorted(parquet: &ParquetMetaData, selected: &[usize], orders: &[Order]) -> bool {
    let schema = parquet.file_metadata().schema_descr();
    let declared: Vec<Option<Order>> = selected
        .iter()
        .map(|&g| match declared_order(schema, parquet.row_group(g)) {
            DeclaredOrder::Undeclared => None,
            DeclaredOrder::Keys(keys) => Some(keys.into_iter().map(|k| (k.column, k.options)).collect()),
            DeclaredOrder::Unusable => Some(vec![]), // agrees with nothing
        })
        .collect();
    if declared.iter().all(Option::is_none) {
        return true;
    }
    declared.iter().all(|d| d.as_ref().is_some_and(|d| !d.is_empty() && orders.iter().all(|o| o.iter().zip(d).all(|(a, b)| a == b))))
}

/// For each pair of consecutive selected row groups, whether the statistics of `order`'s
/// first column prove that the second starts at or after the end of the first. Any doubt is
/// `false` (a false `false` only costs a partition).
fn continues(parquet: &ParquetMetaData, schema: &SchemaRef, selected: &[usize], order: &Order) -> Vec<bool> {
    let pairs = selected.len().saturating_sub(1);
    let (column, options) = &order[0];
    let strict = order.len() > 1;
    let answer = || -> Option<Vec<bool>> {
        let field = schema.field_with_name(column).ok()?;
        if matches!(field.data_type(), DataType::Float16 | DataType::Float32 | DataType::Float64) {
            return None;
        }
        let conv = StatisticsConverter::try_new(column, schema, parquet.file_metadata().schema_descr()).ok()?;
        let row_groups = parquet.row_groups();
        let mins = conv.row_group_mins(row_groups.iter()).ok()?;
        let maxes = conv.row_group_maxes(row_groups.iter()).ok()?;
        let nulls = conv.row_group_null_counts(row_groups.iter()).ok()?;
        // In sort order a row group starts at its min (max when descending) and ends at its
        // max (min when descending).
        let (starts, ends): (&ArrayRef, &ArrayRef) = if options.descending { (&maxes, &mins) } else { (&mins, &maxes) };
        let converter = RowConverter::new(vec![SortField::new_with_options(starts.data_type().clone(), *options)]).ok()?;
        let start_rows = converter.convert_columns(std::slice::from_ref(starts)).ok()?;
        let end_rows = converter.convert_columns(std::slice::from_ref(ends)).ok()?;
        Some(
            selected
                .windows(2)
                .map(|w| {
                    let (g, h) = (w[0], w[1]);
                    let known = starts.is_valid(h) && ends.is_valid(g) && nulls.is_valid(g) && nulls.is_valid(h);
                    // Nulls sit at a row group's start (nulls first) or end (nulls last).
                    let null_free = known && if options.nulls_first { nulls.value(h) == 0 } else { nulls.value(g) == 0 };
                    let (end, start) = (end_rows.row(g), start_rows.row(h));
                    null_free && if strict { end < start } else { end <= start }
                })
                .collect(),
        )
    };
    answer().unwrap_or_else(|| vec![false; pairs])
}

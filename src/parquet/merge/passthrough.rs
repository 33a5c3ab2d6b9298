//! Row groups that need no merge: copied into the output as their compressed column chunks.
//!
//! A row group `G` of run `r` whose key range overlaps no other run's rows goes to the
//! output as one contiguous block: every row of another run sorts entirely before or
//! entirely after it. Such a row group is not decoded for the merge nor re-encoded: the
//! writer flushes the row group it is filling and appends `G`'s column chunks byte for byte
//! (parquet's `SerializedRowGroupWriter::append_column`, as `parquet-concat` does), with
//! their page indexes and bloom filters. A copied row group keeps its size, its encodings
//! and its codec.
//!
//! **Planning** ([`schedule`]), from the footers only. Every row group gets a key range in
//! the merge's order as a pair of points `(key, run)` (the run breaks ties: on equal keys the
//! earlier input's rows come first, which is the merge's stability): the low end is the
//! tuple of the key columns' lows, the high end the tuple of their highs, per column the min
//! or the max per the direction, NULL at the end where the nulls sort when the row group
//! holds any. A tuple of per-column bounds bounds the key tuple in lexicographic order, so
//! multi-column keys are compared conservatively. A row group whose statistics cannot bound
//! it (missing, legacy `min`/`max` fields, an undefined column order, an unknown null count)
//! spans everything. `G` passes through when
//! - its statistics are **exact** for every key column (min and max present and not
//!   truncated, `is_min_value_exact`/`is_max_value_exact`; or all nulls); other row groups'
//!   statistics are used only as bounds, which truncated ones still are;
//! - no key column is a float (NaN and -0.0 escape Parquet's statistics; corank orders floats
//!   by IEEE total order), and no column is a dictionary with a key type narrower than 32
//!   bits (the writer widens those by the distinct values it sees, which a copied chunk hides);
//! - its file has the output's Parquet schema, column for column (names, types, logical
//!   types, field ids, repetition); otherwise that file's row groups are merged;
//! - its codec is the output's ([`Passthrough::Auto`]), or any codec ([`Passthrough::Always`]);
//! - its chunks have offset indexes, or its file's columns are unrepeated, so that one can be
//!   built from its page headers ([`crate::parquet::writer::offset_index`]: a file's offset index is all or
//!   nothing, and the encoded row groups have one);
//! - its range `[lo, hi]` overlaps no other run's row group: each lies entirely before
//!   (`hi' < lo`) or entirely after (`hi < lo'`). So a row group of an earlier run whose max
//!   equals a later run's min passes; the reverse does not.
//!
//! The blocks then cut the merge into **phases**: phase `k` merges, as a k-way merge of its
//! own (the usual frontier merge, bounded memory), the row groups that sort after block
//! `k − 1` and before block `k`; each run contributes a contiguous range of row groups to a
//! phase, because its row groups are ordered. The output is phase 0, block 0, phase 1, ...
//! A plan whose phases would not keep every run's row groups in file order (statistics
//! that contradict the run's order) is dropped: the whole merge is then a plain merge.
//!
//! **Verification** (DESIGN: every run's order is verified while streaming). A copied row
//! group is **decoded, but only its key columns**, on a thread ahead of the merge: its rows
//! must be in order, and its first and last keys are kept; its other columns are copied
//! unread. Then the output order is checked where pieces meet: every phase's rows start at
//! or after `(key, run)` of the last row before the phase, and every block starts at or
//! after the last row before it. Each piece is sorted by `(key, run, row)` (a phase by the
//! stable merge of runs that the frontier checks, a block by the check above), the pieces
//! keep every run's rows in file order (the plan), and every junction is ordered: so the
//! whole output is the stable sort, the oracle, exactly. Statistics that lie (a row outside
//! its row group's min/max) are caught at a junction and reported (merge with
//! `Passthrough::Never`); they never produce a wrong file. Why decode the key columns rather
//! than check boundaries only: an unsorted row inside a copied row group would otherwise go
//! out unnoticed under a sorted `sorting_columns` declaration, a wrong answer; the key
//! columns are a small part of a row group's bytes, and decoding is the cheap half of the
//! Parquet work (encoding and compressing are the expensive half, and those are skipped).
//! What is not decoded: the copied chunks of non-key columns are not decompressed; their
//! pages' checksums are verified where the writer stored them
//! ([`crate::parquet::corrupt::verify_page_checksums`]: a page's header read, its stored bytes hashed),
//! so only a corrupt page without a checksum is copied as it is (as `parquet-concat` would).

use crate::error::{Error, Result};
use crate::parquet::inputs::{InputFile, MergePlan};
use arrow::array::{new_null_array, Array, ArrayRef};
use arrow::datatypes::DataType;
use arrow::row::{OwnedRow, RowConverter, SortField};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::basic::{ColumnOrder, Compression, SortOrder};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::schema::types::SchemaDescriptor;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

/// Whether row groups that need no merge are copied unchanged
/// ([`MergeFilesOptions::passthrough`](crate::parquet::MergeFilesOptions::passthrough)).
/// `FromStr` takes `auto`, `never` (or `off`) and `always`, in any case.
///
/// ```
/// use corank::parquet::{MergeFilesOptions, Passthrough};
///
/// let options = MergeFilesOptions { passthrough: "never".parse()?, ..Default::default() };
/// assert_eq!(options.passthrough, Passthrough::Never);
/// # Ok::<(), corank::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Passthrough {
    /// Copy them when their codec is the output's (otherwise the output would mix codecs).
    #[default]
    Auto,
    /// Never copy: every row is decoded and re-encoded (uniform row groups and codec).
    Never,
    /// Copy them whatever their codec; a copied row group keeps its codec.
    Always,
}

impl FromStr for Passthrough {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Passthrough::Auto),
            "never" | "off" => Ok(Passthrough::Never),
            "always" => Ok(Passthrough::Always),
            other => Err(Error::InvalidArgument(format!("passthrough \"{other}\": use auto, never or always"))),
        }
    }
}

impl fmt::Display for Passthrough {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Passthrough::Auto => "auto",
            Passthrough::Never => "never",
            Passthrough::Always => "always",
        })
    }
}

/// A row group copied unchanged.
#[derive(Debug, Clone)]
pub struct Block {
    /// Index into [`MergePlan::runs`].
    pub run: usize,
    /// Index into [`MergePlan::files`].
    pub file: usize,
    /// The row group's index in its file.
    pub row_group: usize,
    pub rows: usize,
    /// Its codec differs from the output's (kept under [`Passthrough::Always`]).
    pub codec_kept: bool,
}

/// The order of a merge with passthrough: `phases[0]`, `blocks[0]`, `phases[1]`, ...,
/// `blocks[n − 1]`, `phases[n]`.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// `phases[k]`: the runs with rows in phase `k`, in run order, each with its row
    /// groups merged there (indices into its `row_groups`, never empty); `phases.len() ==
    /// blocks.len() + 1`. Only the runs a phase holds are listed: thousands of copied row
    /// groups cut thousands of phases, most of them with few runs or none.
    pub phases: Vec<Vec<(usize, Range<usize>)>>,
    pub blocks: Vec<Block>,
    /// The footers of the files that have blocks, with their page indexes (copied along).
    pub footers: Vec<Option<Arc<ParquetMetaData>>>,
    /// Why nothing passes through, when the whole merge is off (for `-v`).
    pub off: Option<String>,
}

impl Schedule {
    /// One phase holding every run whole, no block.
    pub fn merge_all(plan: &MergePlan, why: impl Into<String>) -> Self {
        Schedule {
            phases: vec![plan.runs.iter().enumerate().map(|(i, r)| (i, 0..r.row_groups.len())).collect()],
            blocks: vec![],
            footers: vec![None; plan.files.len()],
            off: Some(why.into()),
        }
    }

    /// Rows copied unchanged.
    pub fn rows(&self) -> usize {
        self.blocks.iter().map(|b| b.rows).sum()
    }
}

/// A point of the merge's order: a key (arrow-row bytes) and the run it belongs to, or
/// below or above every key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Point {
    Below,
    At(Vec<u8>, usize),
    Above,
}

/// A row group's key range, and whether its statistics are exact for the key.
#[derive(Debug, Clone)]
struct Range2 {
    lo: Point,
    hi: Point,
    exact: bool,
}

/// The row converter of the merge's key (the order every bound and check uses).
pub fn key_converter(plan: &MergePlan) -> Result<RowConverter> {
    let fields = plan
        .keys
        .iter()
        .map(|k| Ok(SortField::new_with_options(plan.schema.field_with_name(&k.column)?.data_type().clone(), k.options)))
        .collect::<Result<Vec<_>>>()?;
    Ok(RowConverter::new(fields)?)
}

/// Whether `dt` is a dictionary whose key type is narrower than 32 bits.
fn narrow_dictionary(dt: &DataType) -> bool {
    matches!(dt, DataType::Dictionary(k, _) if matches!(k.as_ref(), DataType::Int8 | DataType::UInt8 | DataType::Int16 | DataType::UInt16))
}

/// Per key column the row groups' sort-order lows and highs, and per row group whether
/// its statistics bound it and are exact.
type Bounds = (Vec<ArrayRef>, Vec<ArrayRef>, Vec<bool>, Vec<bool>);

/// The highest high end so far with its run, and the highest of the other runs.
type Highest<'a> = (Option<(&'a Point, usize)>, Option<&'a Point>);

/// Key ranges of every row group of `file` (`None` where the statistics cannot bound it).
fn file_ranges(plan: &MergePlan, file: &InputFile, run_of: &dyn Fn(usize) -> usize, converter: &RowConverter) -> Vec<Range2> {
    let row_groups = file.metadata.metadata().row_groups();
    let n = row_groups.len();
    let unbounded = || Range2 { lo: Point::Below, hi: Point::Above, exact: false };
    let columns = || -> Option<Bounds> {
        // Per key column: the sort-order low and high of every row group, and exactness.
        let (mut lows, mut highs) = (Vec::new(), Vec::new());
        let mut exact = vec![true; n];
        let mut bounded = vec![true; n];
        let schema = file.metadata.schema();
        let descr = file.metadata.parquet_schema();
        for key in &plan.keys {
            let target = plan.schema.field_with_name(&key.column).ok()?.data_type().clone();
            let conv = StatisticsConverter::try_new(&key.column, schema, descr).ok()?;
            let idx = conv.parquet_column_index()?;
            let column = descr.column(idx);
            let sort_order = match file.metadata.metadata().file_metadata().column_order(idx) {
                ColumnOrder::TYPE_DEFINED_ORDER(o) => o,
                _ => return None,
            };
            if sort_order == SortOrder::UNDEFINED {
                return None;
            }
            let cast = |a: ArrayRef| -> Option<ArrayRef> {
                if a.data_type() == &target {
                    Some(a)
                } else {
                    crate::parquet::inputs::cast_checked(&a, &target).ok()
                }
            };
            let mins = cast(conv.row_group_mins(row_groups.iter()).ok()?)?;
            let maxes = cast(conv.row_group_maxes(row_groups.iter()).ok()?)?;
            let desc = key.options.descending;
            let nulls_first = key.options.nulls_first;
            let null = new_null_array(&target, 1);
            let (mut lo, mut hi): (Vec<ArrayRef>, Vec<ArrayRef>) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for (g, rg) in row_groups.iter().enumerate() {
                let rows = rg.num_rows().max(0) as u64;
                let stats = rg.column(idx).statistics();
                let nulls = if column.max_def_level() == 0 { Some(0) } else { stats.and_then(|s| s.null_count_opt()) };
                let Some(nulls) = nulls else {
                    bounded[g] = false;
                    lo.push(null.clone());
                    hi.push(null.clone());
                    continue;
                };
                if nulls >= rows {
                    // All nulls (or empty): the range is the null point.
                    lo.push(null.clone());
                    hi.push(null.clone());
                    continue;
                }
                // Legacy `min`/`max` fields (parquet reads statistics without `min_value` and
                // `max_value` as those) may be in signed order: not a bound.
                let deprecated = stats.is_some_and(|s| s.is_min_max_deprecated());
                let present = !deprecated && mins.is_valid(g) && maxes.is_valid(g);
                if !present {
                    bounded[g] = false;
                    lo.push(null.clone());
                    hi.push(null.clone());
                    continue;
                }
                exact[g] &= stats.is_some_and(|s| s.min_is_exact() && s.max_is_exact());
                let (first, last) = if desc { (maxes.slice(g, 1), mins.slice(g, 1)) } else { (mins.slice(g, 1), maxes.slice(g, 1)) };
                lo.push(if nulls > 0 && nulls_first { null.clone() } else { first });
                hi.push(if nulls > 0 && !nulls_first { null.clone() } else { last });
            }
            let concat = |parts: &[ArrayRef]| -> Option<ArrayRef> {
                let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                arrow::compute::concat(&refs).ok()
            };
            lows.push(concat(&lo)?);
            highs.push(concat(&hi)?);
        }
        Some((lows, highs, bounded, exact))
    };
    let Some((lows, highs, bounded, exact)) = columns() else { return (0..n).map(|_| unbounded()).collect() };
    let (Ok(lo_rows), Ok(hi_rows)) = (converter.convert_columns(&lows), converter.convert_columns(&highs)) else {
        return (0..n).map(|_| unbounded()).collect();
    };
    (0..n)
        .map(|g| {
            if !bounded[g] {
                return unbounded();
            }
            let run = run_of(g);
            Range2 {
                lo: Point::At(lo_rows.row(g).as_ref().to_vec(), run),
                hi: Point::At(hi_rows.row(g).as_ref().to_vec(), run),
                exact: exact[g],
            }
        })
        .collect()
}

/// Most row-group comparisons the planner makes (row groups times blocks) before it gives
/// up on passthrough for the merge.
const MAX_PLAN_WORK: usize = 64 << 20;

/// Plans which row groups of `plan` pass through (see the module doc). `output` is the
/// output's Parquet schema (what the writer writes), `codec` its compression,
/// `row_group_rows` its row group size. `Passthrough::Never`, or nothing to copy, gives one
/// phase of every run whole.
pub fn schedule(plan: &MergePlan, mode: Passthrough, codec: Compression, output: &SchemaDescriptor, row_group_rows: usize) -> Schedule {
    plan_passthrough(plan, mode, codec, output, row_group_rows).unwrap_or_else(|why| Schedule::merge_all(plan, why))
}

/// Why nothing passes through: the whole merge is then one phase ([`Schedule::merge_all`]).
type Off<T> = std::result::Result<T, String>;

/// [`Schedule::phases`]: per phase, the runs with rows there and their row groups merged there.
type Phases = Vec<Vec<(usize, Range<usize>)>>;

/// One row group of a run, as the planner sees it.
struct Group {
    run: usize,
    /// Position in its run's `row_groups`.
    pos: usize,
    range: Range2,
    candidate: bool,
    codec_kept: bool,
}

/// [`schedule`]'s steps in order; `Err` says why nothing passes through.
fn plan_passthrough(
    plan: &MergePlan,
    mode: Passthrough,
    codec: Compression,
    output: &SchemaDescriptor,
    row_group_rows: usize,
) -> Off<Schedule> {
    check_passthrough_allowed(plan, mode)?;
    let Ok(converter) = key_converter(plan) else { return Err("the key has no row encoding".into()) };
    // 1. Every row group's range, and whether it is a candidate.
    let groups = plan_groups(plan, mode, codec, output, &converter);
    // 2. Candidates that overlap no other run's row group.
    let mut blocks = apart_candidates(&groups);
    check_plan_size(plan, &groups, &blocks, row_group_rows)?;
    // 3. Blocks in output order; each other row group's phase.
    sort_blocks(&groups, &mut blocks);
    let slot_of = slots(&groups, &blocks)?;
    // 4. Every run's row groups in file order; each phase takes a contiguous range of them.
    let phases = phases(plan, &groups, &slot_of, blocks.len())?;
    let blocks = to_blocks(plan, &groups, &blocks);
    // 5. The footers of files with blocks, with their page indexes.
    let footers = block_footers(plan, &blocks)?;
    Ok(Schedule { phases, blocks, footers, off: None })
}

/// Whether the mode, the runs and the columns allow any passthrough at all.
fn check_passthrough_allowed(plan: &MergePlan, mode: Passthrough) -> Off<()> {
    if mode == Passthrough::Never {
        return Err("passthrough is off (never)".into());
    }
    if plan.runs.is_empty() {
        return Err("no rows".into());
    }
    if !plan.hive_partitions.is_empty() {
        return Err(format!("the Hive partition columns ({}) are not in the inputs' row groups", plan.hive_partitions.join(", ")));
    }
    for k in &plan.keys {
        match plan.schema.field_with_name(&k.column).map(|f| f.data_type().clone()) {
            Ok(DataType::Float16 | DataType::Float32 | DataType::Float64) => {
                return Err(format!("key column '{}' is a float (statistics do not carry NaN and -0.0)", k.column))
            }
            Ok(_) => {}
            Err(_) => return Err("key column not found".into()),
        }
    }
    if let Some(f) = plan.schema.fields().iter().find(|f| narrow_dictionary(f.data_type())) {
        return Err(format!("column '{}' is a dictionary with keys narrower than 32 bits", f.name()));
    }
    Ok(())
}

/// Every row group of every file with its key range, and whether it is a candidate to
/// pass through (same schema, codec allowed, offset index available, exact statistics).
fn plan_groups(plan: &MergePlan, mode: Passthrough, codec: Compression, output: &SchemaDescriptor, converter: &RowConverter) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (fi, f) in plan.files.iter().enumerate() {
        let mut run_of = vec![usize::MAX; f.metadata.metadata().num_row_groups()];
        let mut pos_of = vec![0; run_of.len()];
        for (ri, r) in plan.runs.iter().enumerate().filter(|(_, r)| r.file == fi) {
            for (p, &g) in r.row_groups.iter().enumerate() {
                run_of[g] = ri;
                pos_of[g] = p;
            }
        }
        let ranges = file_ranges(plan, f, &|g| run_of[g], converter);
        // As stored: an INTERVAL column is read as bytes but copied as it is.
        let fdescr = f.stored_schema.as_ref();
        let same_schema =
            fdescr.num_columns() == output.num_columns() && fdescr.columns().iter().zip(output.columns()).all(|(a, b)| a == b);
        let offset_index_buildable = crate::parquet::writer::offset_index::buildable(fdescr);
        for (g, range) in ranges.into_iter().enumerate() {
            if run_of[g] == usize::MAX {
                continue; // an empty row group: no rows, no place in the output
            }
            let rg = f.metadata.metadata().row_group(g);
            let same_codec = rg.columns().iter().all(|c| std::mem::discriminant(&c.compression()) == std::mem::discriminant(&codec));
            let codec_ok = same_codec || mode == Passthrough::Always;
            let offset_index = offset_index_buildable || rg.columns().iter().all(|c| c.offset_index_offset().is_some());
            let candidate = same_schema && codec_ok && offset_index && range.exact;
            groups.push(Group { run: run_of[g], pos: pos_of[g], range, candidate, codec_kept: !same_codec });
        }
    }
    groups
}

/// The candidates (indices into `groups`) that overlap no other run's row group: a sweep
/// over the row groups by their low ends, with the two highest high ends of distinct runs
/// so far.
fn apart_candidates(groups: &[Group]) -> Vec<usize> {
    let mut by_lo: Vec<usize> = (0..groups.len()).collect();
    by_lo.sort_by(|&a, &b| groups[a].range.lo.cmp(&groups[b].range.lo));
    let best = highest_so_far(groups, &by_lo);
    let mut blocks: Vec<usize> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        if !g.candidate {
            continue;
        }
        // Row groups starting at or before this one's end.
        let upto = by_lo.partition_point(|&j| groups[j].range.lo <= g.range.hi);
        let other_hi = match upto.checked_sub(1).map(|p| best[p]) {
            Some((Some((p, run)), second)) => {
                if run != g.run {
                    Some(p)
                } else {
                    second
                }
            }
            _ => None,
        };
        if other_hi.is_none_or(|h| *h < g.range.lo) {
            blocks.push(i);
        }
    }
    blocks
}

/// `best[i]`: the highest `hi` among `by_lo[..=i]`, and the highest of a run other than its.
fn highest_so_far<'a>(groups: &'a [Group], by_lo: &[usize]) -> Vec<Highest<'a>> {
    let mut best: Vec<Highest> = Vec::with_capacity(by_lo.len());
    let mut top: Option<(&Point, usize)> = None;
    let mut second: Option<&Point> = None;
    for &i in by_lo {
        let g = &groups[i];
        match top {
            Some((p, run)) if run == g.run => {
                if g.range.hi > *p {
                    top = Some((&g.range.hi, run));
                }
            }
            Some((p, run)) if g.range.hi > *p => {
                let _ = run;
                second = Some(p);
                top = Some((&g.range.hi, g.run));
            }
            Some(_) => {
                if second.is_none_or(|s| g.range.hi > *s) {
                    second = Some(&g.range.hi);
                }
            }
            None => top = Some((&g.range.hi, g.run)),
        }
        best.push((top, second));
    }
    best
}

/// Whether there are blocks, and few enough for one file and for the planner's work.
fn check_plan_size(plan: &MergePlan, groups: &[Group], blocks: &[usize], row_group_rows: usize) -> Off<()> {
    if blocks.is_empty() {
        return Err("no row group is apart from the other runs' rows".into());
    }
    // The file keeps at most MAX_ROW_GROUPS row groups; each block may also cut one short.
    if plan.total_rows.div_ceil(row_group_rows.max(1)) + 2 * blocks.len() > crate::parquet::writer::MAX_ROW_GROUPS {
        return Err("too many row groups for one file with passthrough".into());
    }
    if groups.len().saturating_mul(blocks.len()) > MAX_PLAN_WORK {
        return Err("too many row groups to plan passthrough".into());
    }
    Ok(())
}

/// The blocks in output order: by low end, then run, then position in the run.
fn sort_blocks(groups: &[Group], blocks: &mut [usize]) {
    blocks.sort_by(|&a, &b| {
        let (x, y) = (&groups[a], &groups[b]);
        x.range.lo.cmp(&y.range.lo).then(x.run.cmp(&y.run)).then(x.pos.cmp(&y.pos))
    });
}

/// Each row group's slot in the output: `2k + 1` for block `k`, `2k` for phase `k`, the
/// blocks before it (a prefix of the blocks, or the statistics contradict themselves).
fn slots(groups: &[Group], blocks: &[usize]) -> Off<Vec<usize>> {
    let mut slot_of: Vec<usize> = vec![0; groups.len()];
    for (k, &b) in blocks.iter().enumerate() {
        slot_of[b] = 2 * k + 1;
    }
    let is_block: Vec<bool> = {
        let mut v = vec![false; groups.len()];
        for &b in blocks {
            v[b] = true;
        }
        v
    };
    for (i, h) in groups.iter().enumerate() {
        if is_block[i] {
            continue;
        }
        let before = |g: &Group| if g.run == h.run { g.pos < h.pos } else { g.range.hi < h.range.lo };
        let phase = blocks.iter().take_while(|&&b| before(&groups[b])).count();
        if blocks[phase..].iter().any(|&b| before(&groups[b])) {
            return Err("row-group statistics contradict each other".into());
        }
        slot_of[i] = 2 * phase;
    }
    Ok(slot_of)
}

/// The phases: per phase, the runs with rows there and the contiguous range of row groups
/// each merges there (a run whose slots go back contradicts its order).
fn phases(plan: &MergePlan, groups: &[Group], slot_of: &[usize], blocks: usize) -> Off<Phases> {
    let mut phases: Phases = vec![Vec::new(); blocks + 1];
    let mut by_run: Vec<Vec<usize>> = vec![Vec::new(); plan.runs.len()];
    for (i, g) in groups.iter().enumerate() {
        by_run[g.run].push(i);
    }
    for (run, members) in by_run.iter_mut().enumerate() {
        members.sort_by_key(|&i| groups[i].pos);
        if members.windows(2).any(|w| slot_of[w[0]] > slot_of[w[1]]) {
            return Err("row-group statistics contradict a run's order".into());
        }
        let mut at = 0;
        while at < members.len() {
            let slot = slot_of[members[at]];
            let mut end = at + 1;
            while end < members.len() && slot_of[members[end]] == slot {
                end += 1;
            }
            if slot.is_multiple_of(2) {
                phases[slot / 2].push((run, groups[members[at]].pos..groups[members[end - 1]].pos + 1));
            }
            at = end;
        }
    }
    Ok(phases)
}

/// The [`Block`] of each block (indices into `groups`, in output order).
fn to_blocks(plan: &MergePlan, groups: &[Group], blocks: &[usize]) -> Vec<Block> {
    blocks
        .iter()
        .map(|&b| {
            let g = &groups[b];
            let run = &plan.runs[g.run];
            Block {
                run: g.run,
                file: run.file,
                row_group: run.row_groups[g.pos],
                rows: run.row_group_rows[g.pos],
                codec_kept: g.codec_kept,
            }
        })
        .collect()
}

/// The footers of files with blocks, with their page indexes; a block without an offset
/// index gets one built from its page headers. `Err` where one cannot be read.
fn block_footers(plan: &MergePlan, blocks: &[Block]) -> Off<Vec<Option<Arc<ParquetMetaData>>>> {
    let mut footers: Vec<Option<Arc<ParquetMetaData>>> = vec![None; plan.files.len()];
    for b in blocks {
        if footers[b.file].is_none() {
            let path = &plan.files[b.file].path;
            let groups: Vec<usize> = blocks.iter().filter(|o| o.file == b.file).map(|o| o.row_group).collect();
            match read_footer(path).and_then(|m| with_offset_indexes(path, m, &groups)) {
                Ok(m) => footers[b.file] = Some(Arc::new(m)),
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
    }
    Ok(footers)
}

/// `footer` with an offset index for each of `groups` (row groups to be copied) that has
/// none, built from its page headers ([`crate::parquet::writer::offset_index`]). The parquet crate reads a
/// file's offset index as all or nothing, so a file without one for some chunk has none at
/// all here: row groups that are not copied are left with none (an empty row).
fn with_offset_indexes(path: &Path, footer: ParquetMetaData, groups: &[usize]) -> Result<ParquetMetaData> {
    let complete =
        |g: usize| footer.offset_index().and_then(|oi| oi.get(g)).is_some_and(|row| row.len() == footer.row_group(g).num_columns());
    let missing: Vec<usize> = groups.iter().copied().filter(|&g| !complete(g)).collect();
    if missing.is_empty() {
        return Ok(footer);
    }
    let context = "building the offset index of a row group to copy";
    let file = crate::parquet::store::open(path, &footer, None).map_err(|e| Error::io(path, context, e))?;
    let mut index = footer.offset_index().cloned().unwrap_or_default();
    index.resize(footer.num_row_groups(), Vec::new());
    for g in missing {
        // Page headers are parsed: a corrupt one may panic.
        index[g] = match crate::parquet::corrupt::catch(|| crate::parquet::writer::offset_index::build(&file, footer.row_group(g))) {
            Ok(built) => built.map_err(|e| Error::parquet(path, format!("{context} ({g})"), e))?,
            Err(panic) => return Err(Error::File { path: path.to_path_buf(), detail: format!("{context} ({g}): {panic}") }),
        };
    }
    log::debug!("{}: offset indexes built for the row groups copied from it", path.display());
    Ok(footer.into_builder().set_offset_index(Some(index)).build())
}

/// [`schedule`] as [`merge_files`](super::merge_files()) plans it for `options`, without
/// creating the output (for a dry run): the output's Parquet schema is the inputs' common one
/// or the one derived from the merge's Arrow schema, as the writer takes it.
pub fn schedule_for(plan: &MergePlan, options: &super::MergeFilesOptions) -> Result<Schedule> {
    if options.writer.split.is_some() {
        return split_schedule(plan, options.passthrough);
    }
    let output = match crate::parquet::writer::common_parquet_schema(&plan.files, &plan.schema) {
        Some(d) => d,
        None => parquet::arrow::ArrowSchemaConverter::new().convert(&plan.schema).map_err(|source| Error::Parquet {
            path: None,
            context: "deriving the Parquet schema".into(),
            source,
        })?,
    };
    Ok(schedule(plan, options.passthrough, options.writer.compression, &output, options.writer.row_group_rows))
}

/// The schedule of a merge into a split output ([`crate::parquet::writer::split`]): nothing
/// copied, a copied row group being uncuttable; `always` is refused, as it cannot be kept.
pub fn split_schedule(plan: &MergePlan, mode: Passthrough) -> Result<Schedule> {
    if mode == Passthrough::Always {
        return Err(Error::InvalidArgument(
            "--passthrough always with a split output (--max-file-rows, --max-file-bytes): a split output re-encodes every row \
             group (a copied one could not be cut between keys); use --passthrough auto or never"
                .into(),
        ));
    }
    Ok(Schedule::merge_all(plan, "the output is split into files, which re-encodes every row group"))
}

/// A file's footer with its page indexes where it has them.
/// An object is read as the version opened with the plan (its ETag checked on every request).
fn read_footer(path: &Path) -> Result<ParquetMetaData> {
    let file = crate::parquet::store::open_streamed(path).map_err(|e| Error::io(path, "reading the footer", e))?;
    // Page indexes are read here, not when the file was opened: a corrupt one may panic.
    match crate::parquet::corrupt::catch(|| {
        ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Optional).parse_and_finish(&file)
    }) {
        Ok(footer) => footer.map_err(|e| Error::parquet(path, "reading the footer", e)),
        Err(panic) => Err(Error::File { path: path.to_path_buf(), detail: format!("reading the footer: {panic}") }),
    }
}

/// A copied row group's keys, decoded: its first and last rows in the merge's row format.
pub struct Verified {
    pub first: OwnedRow,
    pub last: OwnedRow,
}

/// Decodes the key columns of `block` and checks their order (see the module doc).
pub fn verify_block(plan: &MergePlan, block: &Block, converter: &RowConverter) -> Result<Verified> {
    let f = &plan.files[block.file];
    let path = &f.path;
    let context = || format!("checking the order of row group {}", block.row_group);
    // An object's row group is fetched whole at the first read (every column: the checksums
    // below read the others' pages), then read from memory, and kept for its copy.
    let file = crate::parquet::store::open_row_group(path, f.metadata.metadata(), block.row_group, true)
        .map_err(|e| Error::io(path, context(), e))?;
    let schema = f.metadata.schema();
    let roots: Vec<usize> = plan.keys.iter().map(|k| schema.index_of(&k.column)).collect::<std::result::Result<_, _>>()?;
    // The other columns are copied without being decoded: their pages' checksums, where
    // they carry one, are verified (the decoder verifies the key columns').
    let parquet_schema = f.metadata.parquet_schema();
    for (leaf, chunk) in f.metadata.metadata().row_group(block.row_group).columns().iter().enumerate() {
        if roots.contains(&parquet_schema.get_column_root_idx(leaf)) {
            continue;
        }
        if let Err(why) = crate::parquet::corrupt::verify_page_checksums(&file, chunk) {
            let detail = format!("row group {}, column '{}', {why}", block.row_group, chunk.column_path().string());
            return Err(Error::File { path: path.clone(), detail });
        }
    }
    let mask = ProjectionMask::roots(f.metadata.parquet_schema(), roots);
    let mut reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, f.metadata.clone())
        .with_row_groups(vec![block.row_group])
        .with_projection(mask)
        .with_batch_size(64 << 10)
        .build()
        .map_err(|e| Error::parquet(path, context(), e))?;
    let mut first: Option<OwnedRow> = None;
    let mut last: Option<OwnedRow> = None;
    let mut seen = 0usize;
    loop {
        // A decoder's error or panic (corrupt pages) names the column and page that fail.
        let batch = match crate::parquet::corrupt::catch(|| reader.next()) {
            Ok(None) => break,
            Ok(Some(Ok(batch))) => batch,
            Ok(Some(Err(e))) => return Err(crate::parquet::corrupt::decode_error(path, &f.metadata, &[block.row_group], &e.to_string())),
            Err(panic) => return Err(crate::parquet::corrupt::decode_error(path, &f.metadata, &[block.row_group], &panic)),
        };
        let columns: Vec<ArrayRef> = plan
            .keys
            .iter()
            .map(|k| {
                let c = batch.column_by_name(&k.column).ok_or_else(|| Error::Internal(format!("key column '{}' not read", k.column)))?;
                let target = plan.schema.field_with_name(&k.column)?.data_type();
                Ok(if c.data_type() == target { c.clone() } else { crate::parquet::inputs::cast_checked(c, target)? })
            })
            .collect::<Result<_>>()?;
        let rows = converter.convert_columns(&columns)?;
        if rows.num_rows() == 0 {
            continue;
        }
        let mut prev = last.as_ref().map(|r| r.row());
        for (i, row) in rows.iter().enumerate() {
            if prev.is_some_and(|p| p > row) {
                return Err(Error::FileNotSorted {
                    path: path.clone(),
                    row_group: block.row_group,
                    row: seen + i,
                    detail: "a row sorts before the row above it".into(),
                });
            }
            prev = Some(row);
        }
        if first.is_none() {
            first = Some(rows.row(0).owned());
        }
        last = Some(rows.row(rows.num_rows() - 1).owned());
        seen += rows.num_rows();
    }
    match (first, last) {
        (Some(first), Some(last)) if seen == block.rows => Ok(Verified { first, last }),
        _ => Err(Error::File {
            path: path.clone(),
            detail: format!("{}: read {seen} rows of the {} its metadata counts", context(), block.rows),
        }),
    }
}

//! `corank demo`: the main job on built-in data. Writes sorted lineitem Parquet files (most
//! sorted as a whole, some with only their row groups sorted), merges them with
//! `corank merge`'s code, reads the output back and verifies it.

use super::common::{CommonArgs, EngineArgs, ReportArgs};
use super::datagen::{write_lineitem_files, FileLayout, LINEITEM_KEY};
use super::merge::{execute, summary_line, MergeArgs};
use super::units::parse_count;
use crate::{Error, Result};
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use clap::Args;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Number of input files.
    #[arg(long, default_value_t = 8)]
    pub files: usize,
    /// Rows per input file.
    #[arg(long, default_value = "500k", value_parser = parse_count)]
    pub rows: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Keep the files in this directory instead of a temporary one.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(args: DemoArgs) -> Result<()> {
    if args.files == 0 {
        return Err(Error::InvalidArgument("--files must be at least 1".into()));
    }
    let temp = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), "creating a temporary directory", e))?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_path_buf());
    let input_dir = dir.join("input");

    // 1. Inputs: the first three quarters sorted as files, the rest by row group only.
    let t = Instant::now();
    let row_group = (args.rows / 4).max(1);
    let sorted_files = (args.files * 3).div_ceil(4);
    let mut paths = write_lineitem_files(&input_dir.join("sorted"), sorted_files, args.rows, row_group, FileLayout::Sorted, 1)?;
    paths.extend(write_lineitem_files(
        &input_dir.join("row-groups"),
        args.files - sorted_files,
        args.rows,
        row_group,
        FileLayout::RowGroupsSorted,
        2,
    )?);
    say!(
        "wrote {} lineitem files x {} rows ({} sorted whole, {} sorted per row group) to {} in {:.2?}",
        args.files,
        args.rows,
        sorted_files,
        args.files - sorted_files,
        input_dir.display(),
        t.elapsed()
    );

    // 2. The merge, as `corank merge` runs it (key from sorting_columns metadata).
    let output = dir.join("merged.parquet");
    let merge = MergeArgs {
        inputs: paths.iter().map(|p| p.display().to_string()).collect(),
        common: CommonArgs {
            output: output.clone(),
            storage_options: Vec::new(),
            by: None,
            engine: args.engine.clone(),
            union_by_name: false,
            hive_partitioning: Default::default(),
            no_hive_partitioning: false,
            hive_types: Vec::new(),
            force: true,
            compression: "zstd(3)".into(),
            row_group_size: 1 << 20,
            max_row_group_bytes: 128 << 20,
            max_file_rows: None,
            max_file_bytes: None,
            memory_limit: None,
        },
        check_sorted: true,
        passthrough: crate::parquet::Passthrough::Auto,
        report: ReportArgs { quiet: false, verbose: 0, json: false, dry_run: false },
    };
    let shown: Vec<String> = paths.iter().map(|p| p.strip_prefix(&dir).unwrap_or(p).display().to_string()).collect();
    say!("$ corank merge {} -o merged.parquet --check-sorted", shown.join(" "));
    let summary = execute(&merge)?;
    say!("{}", summary_line(&summary, &output));

    // 3. Verify: every row there, keys in order, the same multiset of a payload column.
    let t = Instant::now();
    let (rows, sums_in) = key_and_checksum(&paths)?;
    let (rows_out, sums_out) = key_and_checksum(std::slice::from_ref(&output))?;
    if rows_out != rows || sums_out != sums_in {
        return Err(Error::File {
            path: output,
            detail: format!("verification failed: {rows_out} rows out of {rows}, checksums {sums_out:?} vs {sums_in:?}"),
        });
    }
    check_output_sorted(&output)?;
    let file = std::fs::File::open(&output).map_err(|e| Error::io(&output, "", e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::parquet(&output, "", e))?;
    let sorting = builder.metadata().row_groups().first().and_then(|g| g.sorting_columns().cloned());
    say!(
        "verified in {:.2?}: {rows_out} rows, {LINEITEM_KEY} in order, l_partkey checksum equal, sorting_columns {sorting:?}",
        t.elapsed()
    );
    let head: Vec<RecordBatch> =
        builder.with_batch_size(5).build().map_err(|e| Error::parquet(&output, "", e))?.take(1).collect::<Result<_, _>>()?;
    say!("first rows:\n{}", arrow::util::pretty::pretty_format_batches(&head)?);
    if args.dir.is_some() {
        say!("files kept in {}", dir.display());
    }
    Ok(())
}

/// Rows of `paths` and (sum, xor) of `l_partkey`, read with only that column.
fn key_and_checksum(paths: &[PathBuf]) -> Result<(usize, (i64, i64))> {
    let mut rows = 0;
    let (mut sum, mut xor) = (0i64, 0i64);
    for batch in read_column(paths, "l_partkey")? {
        rows += batch.num_rows();
        for v in batch.column(0).as_primitive::<Int64Type>().values() {
            sum = sum.wrapping_add(*v);
            xor ^= v.wrapping_mul(0x9e3779b97f4a7c15u64 as i64);
        }
    }
    Ok((rows, (sum, xor)))
}

fn check_output_sorted(path: &Path) -> Result<()> {
    let mut last = i64::MIN;
    let mut row = 0;
    for batch in read_column(&[path.to_path_buf()], LINEITEM_KEY)? {
        for &k in batch.column(0).as_primitive::<Int64Type>().values() {
            if k < last {
                return Err(Error::File { path: path.to_path_buf(), detail: format!("verification failed: row {row} is out of order") });
            }
            last = k;
            row += 1;
        }
    }
    Ok(())
}

/// `column` of every file in `paths`, read alone.
pub fn read_column(paths: &[PathBuf], column: &str) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for path in paths {
        let err = |e| Error::parquet(path, "", e);
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "", e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(err)?;
        let idx = builder.schema().index_of(column)?;
        let mask = ProjectionMask::roots(builder.parquet_schema(), [idx]);
        for b in builder.with_projection(mask).with_batch_size(1 << 16).build().map_err(err)? {
            out.push(b?);
        }
    }
    Ok(out)
}

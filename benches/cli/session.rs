//! One comparison from its flags to its table and chart: the datasets generated (once, then
//! reused), every contender run on each and its output checked.

use super::args::BenchArgs;
use super::check::check_output;
use super::contenders::{available, command_for, Contender, Programs, FLOOR, FLOOR_CORANK};
use super::datagen::{write_dataset, Dataset, LINEITEM_KEY};
use super::measure::{run_measured, Measurement};
use super::store::{S3, STORE_FLOOR};
use super::units::group_digits;
use super::{chart, table};
use corank::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The comparison `args` asks for: the table on stdout, the chart drawn.
pub fn run(args: &BenchArgs, programs: &Programs) -> Result<()> {
    let (results, contenders) = measure_all(args, programs)?;
    if args.sort {
        println!("sort by {} (corank sort, --memory-limit {})", args.sort_key, table::memory_limit_shown(args));
    }
    if args.equal_memory {
        println!("DuckDB's memory_limit: corank's --memory-limit {}", table::memory_limit_shown(args));
    }
    print!("{}", table::render(&results, &contenders));
    if let Some(line) = table::memory_bound(&results, args) {
        println!("{line}");
    }
    let chart =
        args.chart.clone().unwrap_or_else(|| PathBuf::from(if args.sort { "docs/cli_sort_bench.png" } else { "docs/cli_bench.png" }));
    let title = match args.sort {
        true => format!("Sorting {} Parquet files by {} into one", args.files, args.sort_key),
        false => format!("Merging {} sorted Parquet files into one", args.files),
    };
    chart::draw(&chart, &title, &results)?;
    println!("chart: {}", chart.display());
    Ok(())
}

/// Every available contender on every dataset and size of `args`: the measurements, and the
/// contenders with their versions.
pub fn measure_all(args: &BenchArgs, programs: &Programs) -> Result<(Vec<Measurement>, Vec<Contender>)> {
    if args.datasets.is_empty() || args.files == 0 {
        return Err(Error::InvalidArgument("the bench needs a dataset and at least one file".into()));
    }
    let contenders = available(args);
    if contenders.iter().any(|(name, _)| name == "corank-gpu") {
        warm_gpu_kernel_cache(args, programs)?;
    }
    let s3 = args.s3_endpoint.as_deref().map(|endpoint| S3::connect(endpoint, &args.s3_bucket)).transpose()?;
    let mut results: Vec<Measurement> = Vec::new();
    let mut datasets = args.datasets.clone();
    datasets.dedup();
    for &dataset in &datasets {
        for &rows in &args.sizes {
            let files = generate(args, dataset, rows)?;
            results.extend(bench_one(args, programs, &contenders, dataset, &files, s3.as_ref())?);
        }
    }
    Ok((results, contenders))
}

/// Runs corank-gpu's command once, untimed, on a small lineitem dataset, so the kernels it
/// needs are compiled into the disk cache before a timed run: the first GPU run on a
/// machine compiles them (once per machine and corank version), which no later run pays and
/// no other contender has.
fn warm_gpu_kernel_cache(args: &BenchArgs, programs: &Programs) -> Result<()> {
    let data = args.dir.join(format!("warm-up-{}x256", args.files));
    let files = generate_once(&data, Dataset::Lineitem, args.files, 256, 7)?;
    let output = args.dir.join("out-warm-up.parquet");
    let t = Instant::now();
    let ran = run_measured(command_for("corank-gpu", args, programs, &files, &output));
    let _ = std::fs::remove_file(&output);
    match ran {
        Ok((true, _)) => eprintln!("corank-gpu: kernel cache warmed by a small run ({:.2} s, not counted)", t.elapsed().as_secs_f64()),
        other => eprintln!("corank-gpu: the warm-up run failed ({other:?}); the first timed run may compile the kernels"),
    }
    Ok(())
}

/// The files of `dataset` at `rows` rows in all, generated unless an earlier run left them.
fn generate(args: &BenchArgs, dataset: Dataset, rows: usize) -> Result<Vec<PathBuf>> {
    let data = args.dir.join(format!("{}-{}x{}", dataset.name(), args.files, rows));
    let files = generate_once(&data, dataset, args.files, rows / args.files, 42)?;
    let bytes: u64 = files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    let (name, total, mib) = (dataset.name(), group_digits(rows / args.files * args.files), bytes as f64 / (1 << 20) as f64);
    eprintln!("dataset {name}: {} files, {total} rows, {mib:.1} MiB", args.files);
    Ok(files)
}

/// `files` files of `dataset` in `dir`, written unless its `.complete` marker says they are.
fn generate_once(dir: &Path, dataset: Dataset, files: usize, per_file: usize, seed: u64) -> Result<Vec<PathBuf>> {
    let done = dir.join(".complete");
    if !done.exists() {
        let t = Instant::now();
        write_dataset(dir, dataset, files, per_file, 1 << 17, seed)?;
        std::fs::write(&done, b"").map_err(|e| Error::io(&done, "", e))?;
        eprintln!("generated {} in {:.1?}", dir.display(), t.elapsed());
    }
    Ok((0..files).map(|f| dir.join(format!("part-{f:02}.parquet"))).collect())
}

/// Every contender on `files`, one run each, its output checked. The first corank output is
/// kept as floor-corank's one sorted input (and gives the size store-floor uploads). With
/// `s3`, the files are uploaded first and the `-s3` contenders read and write objects.
fn bench_one(
    args: &BenchArgs,
    programs: &Programs,
    contenders: &[Contender],
    dataset: Dataset,
    files: &[PathBuf],
    s3: Option<&S3>,
) -> Result<Vec<Measurement>> {
    let key = if args.sort { args.sort_key.as_str() } else { LINEITEM_KEY };
    let input = check_output(files, key)?;
    let urls = match s3 {
        Some(s3) => s3.upload(&format!("{}-{}x{}", dataset.name(), files.len(), input.rows), files)?,
        None => Vec::new(),
    };
    let sorted_input = args.dir.join("sorted-input.parquet");
    let _ = std::fs::remove_file(&sorted_input);
    let mut have_sorted_input = false;
    let mut results = Vec::new();
    for (name, _) in contenders {
        let remote = s3.filter(|_| name.ends_with("-s3") || name == STORE_FLOOR);
        if let (Some(s3), true) = (remote, name == STORE_FLOOR) {
            let Ok(output_bytes) = sorted_input.metadata().map(|m| m.len()) else {
                eprintln!("{name} skipped: it uploads the size of a corank contender's output");
                continue;
            };
            let (get_s, put_s) = s3.floor(&urls, output_bytes)?;
            let m = Measurement {
                dataset: dataset.name().into(),
                rows: input.rows,
                contender: name.clone(),
                seconds: get_s + put_s,
                peak_rss: None,
            };
            results.push(m);
            continue;
        }
        let inputs = match name.as_str() {
            FLOOR_CORANK if !have_sorted_input => {
                eprintln!("{name} skipped: it needs a corank contender's output as its input");
                continue;
            }
            FLOOR_CORANK => vec![sorted_input.clone()],
            _ if remote.is_some() => urls.clone(),
            _ => files.to_vec(),
        };
        let output = args.dir.join(format!("out-{name}.parquet"));
        let _ = std::fs::remove_file(&output);
        let target = match remote {
            Some(s3) => {
                let url = s3.url(&format!("out/{name}.parquet"));
                s3.delete(&url);
                url
            }
            None => output.clone(),
        };
        let mut command = command_for(name, args, programs, &inputs, &target);
        if let Some(s3) = remote {
            s3.set_env(&mut command);
        }
        let t = Instant::now();
        let run = run_measured(command);
        let seconds = t.elapsed().as_secs_f64();
        let peak_rss = match run {
            Ok((true, rss)) => rss,
            other => {
                eprintln!("{name} failed on {} {} rows: {other:?}", dataset.name(), input.rows);
                continue;
            }
        };
        // An object's output is checked as a local copy (fetched after the clock stopped).
        if let Some(s3) = remote {
            s3.fetch_and_delete(&target, &output)?;
        }
        let out = check_output(std::slice::from_ref(&output), key)?;
        // The floor writes the rows in scan order: its order is not checked.
        let sorted = out.sorted || name == FLOOR;
        if out.rows != input.rows || !sorted || out.checksum != input.checksum {
            let (rows, total, same) = (out.rows, input.rows, out.checksum == input.checksum);
            let detail = format!("{name}: {rows} rows of {total}, sorted by {key}: {sorted}, rows as the inputs': {same}");
            return Err(Error::File { path: output, detail });
        }
        if name.starts_with("corank") && !have_sorted_input {
            std::fs::rename(&output, &sorted_input).map_err(|e| Error::io(&output, "keeping the output", e))?;
            have_sorted_input = true;
        }
        let _ = std::fs::remove_file(&output);
        eprintln!("{name:>12}: {seconds:.2} s, peak RSS {}", table::show_rss(peak_rss));
        results.push(Measurement { dataset: dataset.name().into(), rows: input.rows, contender: name.clone(), seconds, peak_rss });
    }
    let _ = std::fs::remove_file(&sorted_input);
    Ok(results)
}

//! GPU engine benchmark: one table, every number measured in this run.
//!
//! Ceiling: a device-to-device copy of the same bytes (CUDA events). 2-way merge of 2^28
//! u64 keys (two runs, u32 indices) on device-resident data: random and duplicate-heavy
//! keys, every kernel; few values spread over the whole range, u32 keys and two-word keys
//! with the tiled kernel and the default (each width counting its own bytes). k-way (k = 2, 4, 16, 64): single pass against the pairwise tree.
//! From host memory: H2D + merge + D2H (wall clock) against the PCIe floor (bytes moved over
//! pinned bandwidth measured in the same run). Medians after a warm-up.
//!
//! Last, on the host: the same 2-way data as two RecordBatches merged into 8192-row batches by
//! `corank::merge` (GPU and CPU engines) and by DataFusion's `SortPreservingMergeExec` (round
//! robin off), outputs compared.
//!
//! Then the payload gather (`gather`): 16 runs of 3 x u64 + a nullable i32, permuted by their
//! merge, gathered by the CPU (`corank::gather`, every core) and by the device
//! (`gather_fixed_gpu`: payload and indices up, kernels, results down into pinned memory),
//! the kernels alone and a device-to-device copy of the output bytes for scale; outputs
//! checked equal before a time counts. It also measures the constants of the decision rule
//! (`corank::__bench::gpu::gather::H100_HOST`) and prints what the rule says for each size.
//!
//! The sort (`sort`, issue 14): 2^28 u64 keys in one unsorted run, random and duplicate-heavy,
//! sorted on the device (tiles in shared memory, then the merge tree with the tiled or the
//! k-way kernel), against the copy; run `bash .gpu/remote cub` in the same call for CUB's
//! radix sort of the same kind of keys. Indices checked equal to the CPU sort. And the sort
//! from host memory (`sort_gpu`: keys up, sort, indices down) against the PCIe floor.
//!
//! Multi-GPU (`multi`, issue 15): the merge host path on one GPU and on every GPU here, and the
//! sort from host memory split across them (one piece a device, the sorted pieces merged on
//! the first), each against one GPU in the same run.
//!
//! Parquet pages decompressed on the device (`nvcomp`, issue 69 stage 1; not in the default
//! sections, and the only one run when named alone: `CORANK_BENCH_SECTIONS=nvcomp`): every
//! column chunk of lineitem files written by arrow-rs with zstd (`CORANK_NVCOMP_FILES` files
//! of `CORANK_NVCOMP_ROWS` rows, default 16 x 1M, row groups of 1M rows; or the `*.parquet`
//! files of `CORANK_NVCOMP_DIR`) read into memory, then decompressed by nvCOMP in one call
//! (upload included, and the device's time alone) and by parquet-rs's page reader on every
//! core (rayon over the column chunks). GB/s count the column chunks' bytes as stored
//! (compressed, headers included). The device's pages are checked equal to the CPU's before
//! a time counts. Then (issue 69 stage 2) the columns the device decode covers (lineitem's
//! fixed-width and, since the second slice, its string columns), decompressed and decoded
//! into Arrow buffers on the device against parquet-rs's arrow reader on every core (rayon
//! over row groups, the same columns), each array checked equal first. Needs
//! nvCOMP (`CORANK_NVCOMP`, docs/gpu.md).
//!
//! `CORANK_KERNEL_SOURCES=DIR` compiles the kernels from DIR's copies of `cuda/` (kernel
//! variants measured without a Rust build).
//!
//! `CORANK_BENCH_SECTIONS` (comma-separated: `2way`, `kway`, `host`, `spm`, `gather`, `multi`,
//! `sort`; all by default) picks
//! the parts to run, for tuning sweeps with `CORANK_GPU_TUNING` (`name=value,...`, passed to
//! `corank::__bench::gpu::tuning::set_overrides`; names in src/engine/gpu/tuning.rs). Runs on
//! device 0.
//!
//! Bytes counted per key for a merge: the key read once (8) and the index written once (4),
//! the fewest any engine must move; the tree's extra passes show as a lower ratio.

use corank::__bench::gpu::{self, bench, GpuOptions};
use corank::__bench::merge_cpu;
use corank::Kernel;
use corank::KeyColumn;
use rayon::prelude::*;
use std::time::Instant;

#[path = "common/spm.rs"]
mod spm;

#[path = "../src/cli/datagen.rs"]
mod datagen;

fn median(mut v: Vec<f32>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2] as f64
}

/// k sorted runs of n/k keys each; keys below `range`.
fn data(n: usize, k: usize, range: u64, seed: u64) -> (Vec<u64>, Vec<usize>) {
    let per = n / k;
    let mut keys = vec![0u64; per * k];
    keys.par_chunks_mut(per).enumerate().for_each(|(r, run)| {
        let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) ^ (r as u64 + 1).wrapping_mul(0xD1B54A32D192ED03) | 1;
        for v in run.iter_mut() {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            *v = x.wrapping_mul(0x2545F4914F6CDD1D) % range;
        }
        run.sort_unstable();
    });
    let offsets = (0..=k).map(|r| r * per).collect();
    (keys, offsets)
}

fn main() {
    if let Err(e) = gpu::availability() {
        eprintln!("bench gpu: no GPU ({e}); nothing to measure");
        return;
    }
    if let Ok(dir) = std::env::var("CORANK_KERNEL_SOURCES") {
        gpu::tuning::set_kernel_source_dir(std::path::Path::new(&dir)).expect("CORANK_KERNEL_SOURCES");
        println!("kernel sources from {dir}");
    }
    if let Ok(overrides) = std::env::var("CORANK_GPU_TUNING") {
        gpu::tuning::set_overrides(&overrides).expect("CORANK_GPU_TUNING");
        println!("tuning overrides: {overrides}");
    }
    let warning = corank::__bench::opt_level_warning();
    if !warning.is_empty() {
        println!("{warning}");
    }
    let sections = std::env::var("CORANK_BENCH_SECTIONS").unwrap_or_else(|_| "2way,kway,host,spm,gather,multi,sort".into());
    let run = |s: &str| sections.split(',').any(|x| x.trim() == s);
    if run("nvcomp") {
        nvcomp_section();
        if sections.split(',').all(|x| x.trim() == "nvcomp") {
            return;
        }
    }
    let reps = 7;
    let n = 1usize << 28;
    let device = gpu::device_name(0).unwrap();
    let bytes = n * 12; // 8-byte key read + 4-byte index written
    let copy_ms = median(bench::time_copy(bytes / 2, reps).unwrap()); // a copy of B/2 bytes moves B
    let copy_gbs = bytes as f64 / copy_ms / 1e6;
    let mut rows: Vec<(String, f64, String, String)> = Vec::new();
    rows.push((format!("D2D copy, {} MB moved (ceiling)", bytes / 1_000_000), copy_ms, format!("{copy_gbs:.0}"), "1.00".into()));
    let gbs = |ms: f64| bytes as f64 / ms / 1e6;
    if run("2way") {
        two_way_section(n, reps, &mut rows, copy_gbs);
    }
    for k in [2usize, 4, 8, 16, 64].into_iter().filter(|_| run("kway")) {
        let (keys, offsets) = data(n, k, u64::MAX, k as u64);
        let col = KeyColumn::U64(keys);
        let single = median(bench::time_device_merge(&col, &offsets, Kernel::KWay, reps).unwrap());
        let tree = median(bench::time_device_merge(&col, &offsets, Kernel::Tiled, reps).unwrap());
        let circ = median(bench::time_device_merge(&col, &offsets, Kernel::Circular, reps).unwrap());
        let auto = median(bench::time_device_merge(&col, &offsets, Kernel::Auto, reps).unwrap());
        rows.push((format!("k = {k}: default (auto)"), auto, format!("{:.0}", gbs(auto)), format!("{:.2}", gbs(auto) / copy_gbs)));
        rows.push((format!("k = {k}: single-pass k-way"), single, format!("{:.0}", gbs(single)), format!("{:.2}", gbs(single) / copy_gbs)));
        rows.push((
            format!("k = {k}: pairwise tree (tiled)"),
            tree,
            format!("{:.0}", gbs(tree)),
            format!("{:.2}  (single-pass {:.2}x faster)", gbs(tree) / copy_gbs, tree / single),
        ));
        rows.push((
            format!("k = {k}: pairwise tree (circular)"),
            circ,
            format!("{:.0}", gbs(circ)),
            format!("{:.2}  (single-pass {:.2}x faster)", gbs(circ) / copy_gbs, circ / single),
        ));
    }
    if run("kway") {
        kway_widths_section(n, reps, &mut rows, copy_gbs);
    }
    if run("sort") {
        sort_section(n, reps, &mut rows, &gbs, copy_gbs);
    }
    if run("host") {
        host_path(n, &mut rows, &gbs);
    }
    if run("spm") {
        record_batches(n, &mut rows);
    }
    let gather_table = if run("gather") { gather_section(reps) } else { Vec::new() };
    let multi_table = if run("multi") { multi_gpu_section() } else { Vec::new() };
    println!("\nKernels for u64 keys, u32 indices, {} threads a block:", gpu::tuning::THREADS);
    println!("| kernel | registers | dynamic shared bytes | blocks per SM |");
    println!("|---|---:|---:|---:|");
    for (name, regs, shmem, blocks) in bench::kernel_report(8).unwrap() {
        println!("| {name} | {regs} | {shmem} | {blocks} |");
    }
    println!("\nGPU engine benchmark on {device}, 2^28 keys (u64 key + u32 index), median of {reps}");
    println!("| case | ms | GB/s | ratio to copy |");
    println!("|---|---:|---:|---|");
    for (c, ms, g, r) in rows {
        println!("| {c} | {ms:.3} | {g} | {r} |");
    }
    for line in gather_table.into_iter().chain(multi_table) {
        println!("{line}");
    }
}

/// The decode-alone table (the file's header says what it measures).
fn nvcomp_section() {
    let env = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let reps = env("CORANK_NVCOMP_REPS", 5);
    let note = corank::__bench::opt_level_warning();
    let _keep;
    let files: Vec<std::path::PathBuf> = match std::env::var("CORANK_NVCOMP_DIR") {
        Ok(dir) => {
            let mut v: Vec<_> = std::fs::read_dir(&dir)
                .expect("CORANK_NVCOMP_DIR")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
                .collect();
            v.sort();
            v
        }
        Err(_) => {
            let (n, rows) = (env("CORANK_NVCOMP_FILES", 16), env("CORANK_NVCOMP_ROWS", 1_000_000));
            let dir = tempfile::tempdir().expect("a temporary directory");
            let t = Instant::now();
            let files = datagen::write_lineitem_files(dir.path(), n, rows, 1 << 20, datagen::FileLayout::Sorted, 69)
                .expect("writing lineitem files");
            println!("wrote {n} lineitem zstd files of {rows} rows in {:.1?}", t.elapsed());
            _keep = dir;
            files
        }
    };
    let m = corank::__bench::nvcomp::decode_alone(&files, 0, reps).unwrap_or_else(|e| panic!("nvcomp: {e}"));
    let ms = |v: Vec<f64>| median(v.into_iter().map(|x| x as f32).collect());
    let wall = ms(m.device_wall.iter().map(|d| d.as_secs_f64() * 1e3).collect());
    let upload = ms(m.device_upload_ms.iter().map(|&x| x as f64).collect());
    let device = ms(m.device_ms.iter().map(|&x| x as f64).collect());
    let cpu = ms(m.cpu_wall.iter().map(|d| d.as_secs_f64() * 1e3).collect());
    let gbs = |ms: f64| m.chunk_bytes as f64 / ms / 1e6;
    println!(
        "\nParquet pages decompressed (decode alone), {} files, {} column chunks, {} pages: {:.1} MB stored, {:.1} MB decompressed; \
         median of {reps}, outputs checked equal; {} CPU threads",
        files.len(),
        m.chunks,
        m.pages,
        m.chunk_bytes as f64 / 1e6,
        m.uncompressed_bytes as f64 / 1e6,
        rayon::current_num_threads()
    );
    if !note.is_empty() {
        println!("{note}");
    }
    println!("| path | ms | GB/s of stored chunk bytes | ratio to the CPU |");
    println!("|---|---:|---:|---:|");
    for (name, t) in [
        ("device: nvCOMP, upload included (wall: layout, image, upload, decompress, statuses)", wall),
        ("device: upload alone (CUDA events)", upload),
        ("device: decompression and copies alone (CUDA events)", device),
        ("CPU: parquet-rs page reader, every core (rayon over column chunks)", cpu),
    ] {
        println!("| {name} | {t:.2} | {:.2} | {:.2} |", gbs(t), cpu / t);
    }

    // Issue 69 stage 2: the covered columns decompressed and decoded into Arrow buffers.
    let d = corank::__bench::nvcomp::decompress_and_decode(&files, 0, reps).unwrap_or_else(|e| panic!("nvcomp decode: {e}"));
    let ms_of = |v: &[std::time::Duration]| ms(v.iter().map(|d| d.as_secs_f64() * 1e3).collect());
    let (wall, decompress, decode, cpu) = (ms_of(&d.device_wall), ms_of(&d.device_decompress), ms_of(&d.device_decode), ms_of(&d.cpu_wall));
    let gbs = |ms: f64| d.chunk_bytes as f64 / ms / 1e6;
    println!(
        "\nDecompress + decode of the covered columns ({}), {} column chunks, {} rows, {:.1} MB stored; median of {reps}, \
         every array checked equal to parquet-rs's (and the CPU reference's) first; {} CPU threads",
        d.columns.join(", "),
        d.chunks,
        d.rows,
        d.chunk_bytes as f64 / 1e6,
        rayon::current_num_threads()
    );
    if !note.is_empty() {
        println!("{note}");
    }
    println!("| path | ms | GB/s of stored chunk bytes | ratio to the CPU |");
    println!("|---|---:|---:|---:|");
    for (name, t) in [
        ("device: decompress + decode, upload included (wall; buffers stay on the device)", wall),
        ("device: of which stage 1's decompression call (wall)", decompress),
        ("device: of which the decode launches and their fault checks (wall; byte arrays: 4 launches, a read-back between)", decode),
        ("CPU: parquet-rs arrow reader, same columns, every core (rayon over row groups)", cpu),
    ] {
        println!("| {name} | {t:.2} | {:.2} | {:.2} |", gbs(t), cpu / t);
    }

    // Issue 69 stage 3: the files merged by their sort key with the columns decoded, keyed,
    // merged and gathered on the device, into Arrow batches in host memory.
    let key = datagen::LINEITEM_KEY;
    let r = corank::__bench::nvcomp::merge_round(&files, key, 0, reps).unwrap_or_else(|e| panic!("nvcomp round: {e}"));
    let steps = |k: usize| ms(r.device_steps.iter().map(|s| s[k].as_secs_f64() * 1e3).collect());
    let (wall, cpu, cpu_read) = (ms_of(&r.device_wall), ms_of(&r.cpu_wall), ms_of(&r.cpu_read));
    println!(
        "\nSorted files merged by {key} into Arrow batches in host memory, {} rows; median of {reps}, every column checked equal to \
         the CPU's first; {} CPU threads. Decoded and gathered on the device: {}; read by parquet-rs, gathered on the CPU: {}",
        r.rows,
        rayon::current_num_threads(),
        r.gathered_on_device.join(", "),
        r.on_cpu.join(", ")
    );
    if !note.is_empty() {
        println!("{note}");
    }
    println!("| path | ms | Mrows/s | ratio to the CPU |");
    println!("|---|---:|---:|---:|");
    let mrows = |ms: f64| r.rows as f64 / ms / 1e3;
    for (name, t) in [
        ("device round (wall)", wall),
        ("device: of which reading chunks and planning", steps(0)),
        ("device: of which stage 1's decompression call", steps(1)),
        ("device: of which decoding", steps(2)),
        ("device: of which keys encoded", steps(3)),
        ("device: of which merged, indices down", steps(4)),
        ("device: of which gathered, columns down", steps(5)),
        ("device: of which the arrays built, and parquet-rs's columns read and gathered on the CPU", steps(6)),
        ("CPU: parquet-rs arrow reader (a file a core) + corank::merge, CPU engine (wall)", cpu),
        ("CPU: of which reading", cpu_read),
    ] {
        println!("| {name} | {t:.2} | {:.1} | {:.2} |", mrows(t), cpu / t);
    }
}

/// A 2-way case: its label, its keys, the kernels measured (name, kernel).
type TwoWayCase<'a> = (&'a str, KeyColumn, &'a [(&'a str, Kernel)]);

/// The 2-way merge on device-resident data: u64 keys (random, duplicate-heavy, and few
/// values spread over the whole range, where the tiled kernel's narrow keys tie) with every
/// kernel; u32 and two-word (u64 + u64) keys with the tiled kernel and the default. Each
/// key width counts its own bytes (key read + 4-byte index written). The default's indices
/// are checked against the CPU engine before its time counts.
fn two_way_section(n: usize, reps: usize, rows: &mut Vec<(String, f64, String, String)>, copy_gbs: f64) {
    let every_kernel = [
        ("basic", Kernel::Basic),
        ("tiled", Kernel::Tiled),
        ("circular", Kernel::Circular),
        ("k-way", Kernel::KWay),
        ("default", Kernel::Auto),
    ];
    let tiled_and_default = [("tiled", Kernel::Tiled), ("default", Kernel::Auto)];
    let spread = u64::MAX / 1000; // 1000 values, multiples of this
    let (random, dup) = (data(n, 2, u64::MAX, 1).0, data(n, 2, 1000, 1).0);
    // Derived keys keep each run sorted: the maps are nondecreasing.
    let spread_dup = KeyColumn::U64(dup.iter().map(|v| v * spread).collect());
    let two_words = KeyColumn::U64x2(random.iter().map(|&v| [v, v.rotate_left(17)]).collect());
    let cases: Vec<TwoWayCase> = vec![
        ("u64 random", KeyColumn::U64(random), &every_kernel),
        ("u64 dup-heavy (1000 values)", KeyColumn::U64(dup), &every_kernel),
        ("u64 dup-heavy (1000 values spread over u64)", spread_dup, &tiled_and_default),
        ("u32 random", KeyColumn::U32(data(n, 2, 1 << 32, 1).0.into_iter().map(|v| v as u32).collect()), &tiled_and_default),
        ("u64x2 random", two_words, &tiled_and_default),
    ];
    let offsets = [0, n / 2, n];
    for (label, col, kernels) in cases {
        let bytes = n * (col.key_bytes() + 4);
        let expect = merge_cpu_column(&col, &offsets);
        let got = gpu::merge_gpu(&col, &offsets, &GpuOptions::default()).unwrap();
        assert!(got == expect, "2-way {label}: the GPU default differs from the CPU engine");
        for &(name, kernel) in kernels {
            let name =
                if kernel == Kernel::Auto { format!("default (auto: {:?})", bench::resolved(Kernel::Auto, 2)) } else { name.to_string() };
            let ms = median(bench::time_device_merge(&col, &offsets, kernel, reps).unwrap());
            let gbs = bytes as f64 / ms / 1e6;
            rows.push((format!("2-way {label}: {name}"), ms, format!("{gbs:.0}"), format!("{:.2}", gbs / copy_gbs)));
        }
    }
}

/// k = 16 with u32 and two-word (u64 + u64) keys: the single-pass k-way kernel against the
/// tiled tree, each width counting its own bytes (key read + 4-byte index written); the
/// default's indices are checked against the CPU engine before its time counts.
fn kway_widths_section(n: usize, reps: usize, rows: &mut Vec<(String, f64, String, String)>, copy_gbs: f64) {
    let k = 16;
    let (random, offsets) = data(n, k, u64::MAX, 16);
    // Derived keys keep each run sorted: the maps are nondecreasing.
    let cases = [
        ("u32", KeyColumn::U32(random.iter().map(|&v| (v >> 32) as u32).collect())),
        ("u64x2", KeyColumn::U64x2(random.iter().map(|&v| [v, v.rotate_left(17)]).collect())),
    ];
    for (label, col) in cases {
        let bytes = n * (col.key_bytes() + 4);
        let expect = merge_cpu_column(&col, &offsets);
        let got = gpu::merge_gpu(&col, &offsets, &GpuOptions::default()).unwrap();
        assert!(got == expect, "k = {k} {label}: the GPU default differs from the CPU engine");
        let name = |kernel| {
            if kernel == Kernel::Auto {
                format!("default (auto: {:?})", bench::resolved(Kernel::Auto, k))
            } else {
                format!("{kernel:?}")
            }
        };
        for kernel in [Kernel::KWay, Kernel::Tiled, Kernel::Auto] {
            let ms = median(bench::time_device_merge(&col, &offsets, kernel, reps).unwrap());
            let gbs = bytes as f64 / ms / 1e6;
            rows.push((format!("k = {k} {label} random: {}", name(kernel)), ms, format!("{gbs:.0}"), format!("{:.2}", gbs / copy_gbs)));
        }
    }
}

/// The CPU engine's merge of a key column (the oracle of the bench's checks).
fn merge_cpu_column(col: &KeyColumn, offsets: &[usize]) -> corank::Indices {
    match col {
        KeyColumn::U32(v) => merge_cpu(v, offsets),
        KeyColumn::U64(v) => merge_cpu(v, offsets),
        KeyColumn::U64x2(v) => merge_cpu(v, offsets),
        KeyColumn::U64x3(v) => merge_cpu(v, offsets),
        KeyColumn::U64x4(v) => merge_cpu(v, offsets),
    }
}

/// Issue 14: the stable sort of `n` u64 keys (one unsorted run) on the device, every merge
/// kernel that suits the tree, then from host memory; indices checked against the CPU sort.
fn sort_section(n: usize, reps: usize, rows: &mut Vec<(String, f64, String, String)>, gbs: &dyn Fn(f64) -> f64, copy_gbs: f64) {
    for (label, range) in [("random", u64::MAX), ("dup-heavy (1000 values)", 1000)] {
        let mut rng = 0x9e3779b97f4a7c15u64 ^ range;
        let keys: Vec<u64> = (0..n)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if range == u64::MAX {
                    rng
                } else {
                    rng % range
                }
            })
            .collect();
        let expect = corank::__bench::sort_cpu(&keys);
        let col = KeyColumn::U64(keys);
        for (name, kernel) in [("tiles + default (auto: k-way tree)", Kernel::Auto), ("tiles + tiled tree", Kernel::Tiled)] {
            let (times, got) = bench::time_device_sort(&col, kernel, reps).unwrap();
            assert!(got == expect, "sort {label} {name}: differs from the CPU sort");
            let ms = median(times);
            rows.push((format!("sort {label}: {name}"), ms, format!("{:.0}", gbs(ms)), format!("{:.2}", gbs(ms) / copy_gbs)));
        }
        // From host memory: keys up, sort, indices down (wall clock), against the pinned floor.
        let (up, down) = bench::time_pinned(n * 8, reps).unwrap();
        let floor = median(up) + median(down) / 2.0;
        let options = GpuOptions::default();
        let _ = gpu::sort_gpu(&col, &options).unwrap();
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let got = gpu::sort_gpu(&col, &options).unwrap();
            times.push(t.elapsed().as_secs_f32() * 1e3);
            assert!(got == expect, "sort_gpu {label}: differs from the CPU sort");
        }
        let ms = median(times);
        rows.push((
            format!("sort {label}: from host memory (sort_gpu)"),
            ms,
            format!("{:.0}", gbs(ms)),
            format!("PCIe floor {floor:.1} ms: {:.2} of it", floor / ms),
        ));
    }
}

/// Issue 15: the host path for 2^29 u64 keys in 16 runs on one GPU and on every GPU here
/// (two or more), each against the PCIe floor of its configuration measured in the same run
/// (pinned copies on all its devices at once: 8 bytes a key up, 4 down). "Host path" is
/// `merge_gpu` from keys in ordinary (pageable) memory, through the staging buffers;
/// "registered" is `merge_gpu_into` from keys and into an output registered with the
/// driver (`Registered`, done once before the timed runs, as a pipeline reusing its buffers
/// would), copied by DMA. "Encode + host path" starts from Arrow UInt64 arrays (key encoding
/// on the CPU, then the merge).
fn multi_gpu_section() -> Vec<String> {
    use arrow::array::{ArrayRef, UInt64Array};
    use corank::{Devices, SortKey};
    use std::sync::Arc;
    const REPS: usize = 3;
    let count = (0..).take_while(|&d| gpu::device_name(d).is_ok()).count();
    let (n, k) = (1usize << 29, 16);
    let mut lines = vec![
        format!("\nMulti-GPU host path, 2^29 u64 keys in {k} runs -> u32 indices, median of {REPS} ({count} device(s) here)"),
        "| GPUs | PCIe floor ms | host path ms | of floor | registered ms | of floor | encode + host path ms | host path vs 1 GPU | registered vs 1 GPU | encode + host vs 1 GPU |".into(),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    ];
    let (keys, offsets) = data(n, k, u64::MAX, 29);
    let runs: Vec<Vec<ArrayRef>> =
        offsets.windows(2).map(|w| vec![Arc::new(UInt64Array::from(keys[w[0]..w[1]].to_vec())) as ArrayRef]).collect();
    let t = Instant::now();
    let registered_keys = gpu::Registered::new(KeyColumn::U64(keys.clone())).unwrap();
    let mut registered_out = gpu::Registered::new(vec![0u32; n]).unwrap();
    let registering = t.elapsed().as_secs_f64() * 1000.0;
    let col = KeyColumn::U64(keys);
    let expect = gpu::merge_gpu(&col, &offsets, &GpuOptions::default()).unwrap().to_vec();
    let mut base: Option<(f64, f64, f64)> = None;
    for d in configs_of(count) {
        let ordinals: Vec<usize> = (0..d).collect();
        let (up, down) = bench::time_pinned_on(&ordinals, n * 8 / d, REPS).unwrap();
        let floor = median(up) + median(down) * 0.5;
        let options = GpuOptions { devices: Devices::from_ordinals(&ordinals).unwrap(), ..GpuOptions::default() };
        let got = gpu::merge_gpu(&col, &offsets, &options).unwrap(); // warm-up, and the check
        assert!(got.to_vec() == expect, "{d} GPUs: the result differs from one GPU's");
        drop(got);
        registered_out.as_mut_slice().fill(0);
        gpu::merge_gpu_into(&registered_keys, &offsets, &options, registered_out.as_mut_slice()).unwrap();
        assert!(
            registered_out.iter().map(|&i| i as usize).eq(expect.iter().copied()),
            "{d} GPUs, registered memory: the result differs from one GPU's"
        );
        let (mut host, mut registered, mut full) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..REPS {
            let t = Instant::now();
            let out = gpu::merge_gpu(&col, &offsets, &options).unwrap();
            host.push(t.elapsed().as_secs_f32() * 1000.0);
            drop(out);
            let t = Instant::now();
            gpu::merge_gpu_into(&registered_keys, &offsets, &options, registered_out.as_mut_slice()).unwrap();
            registered.push(t.elapsed().as_secs_f32() * 1000.0);
            let t = Instant::now();
            let encoded = corank::__bench::encode_runs(&runs, &[SortKey::asc("k")]).unwrap();
            let out = gpu::merge_gpu(&encoded.keys, &encoded.run_offsets, &options).unwrap();
            full.push(t.elapsed().as_secs_f32() * 1000.0);
            assert_eq!(out.len(), n);
        }
        let (host, registered, full) = (median(host), median(registered), median(full));
        let (h1, r1, f1) = *base.get_or_insert((host, registered, full));
        lines.push(format!(
            "| {d} | {floor:.1} | {host:.1} | {:.2} | {registered:.1} | {:.2} | {full:.1} | {:.2}x | {:.2}x | {:.2}x |",
            floor / host,
            floor / registered,
            h1 / host,
            r1 / registered,
            f1 / full
        ));
    }
    lines.push(format!("(registering the keys and the output, {} MiB, once: {registering:.0} ms)", (n * 12) >> 20));
    drop((registered_keys, registered_out, col, runs));
    lines.extend(multi_gpu_sort(&configs_of(count)));
    lines
}

fn configs_of(count: usize) -> Vec<usize> {
    if count >= 2 {
        vec![1, count]
    } else {
        vec![1]
    }
}

/// The sort split across GPUs (`sort_gpu` with several devices: one piece a device, the
/// sorted pieces merged on the first, the download over every link), 2^28 random u64 keys,
/// from ordinary memory (`sort_gpu`) and from and into registered memory (`sort_gpu_into`),
/// against one GPU in the same run; results checked equal to one GPU's.
fn multi_gpu_sort(configs: &[usize]) -> Vec<String> {
    use corank::Devices;
    const REPS: usize = 3;
    let n = 1usize << 28;
    let mut rng = 0x9e3779b97f4a7c15u64;
    let keys: Vec<u64> = (0..n)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        })
        .collect();
    let col = KeyColumn::U64(keys);
    let registered_keys = gpu::Registered::new(col.clone()).unwrap();
    let mut registered_out = gpu::Registered::new(vec![0u32; n]).unwrap();
    let mut lines = vec![
        format!("\nMulti-GPU sort, 2^28 random u64 keys -> u32 indices, median of {REPS}"),
        "| GPUs | PCIe floor ms | sort_gpu ms | of floor | registered ms | of floor | sort_gpu vs 1 GPU | registered vs 1 GPU |".into(),
        "|---:|---:|---:|---:|---:|---:|---:|---:|".into(),
    ];
    let mut expect: Option<Vec<usize>> = None;
    let mut base = None;
    for &d in configs {
        let ordinals: Vec<usize> = (0..d).collect();
        let (up, down) = bench::time_pinned_on(&ordinals, n * 8 / d, REPS).unwrap();
        let floor = median(up) + median(down) * 0.5;
        let options = GpuOptions { devices: Devices::from_ordinals(&ordinals).unwrap(), ..GpuOptions::default() };
        let got = gpu::sort_gpu(&col, &options).unwrap().to_vec(); // warm-up, and the check
        match &expect {
            None => expect = Some(got),
            Some(e) => assert!(got == *e, "{d} GPUs: the sort differs from one GPU's"),
        }
        registered_out.as_mut_slice().fill(0);
        gpu::sort_gpu_into(&registered_keys, &options, registered_out.as_mut_slice()).unwrap();
        assert!(
            registered_out.iter().map(|&i| i as usize).eq(expect.as_ref().unwrap().iter().copied()),
            "{d} GPUs, registered memory: the sort differs from one GPU's"
        );
        let (mut plain, mut registered) = (Vec::new(), Vec::new());
        for _ in 0..REPS {
            let t = Instant::now();
            let out = gpu::sort_gpu(&col, &options).unwrap();
            plain.push(t.elapsed().as_secs_f32() * 1000.0);
            drop(out);
            let t = Instant::now();
            gpu::sort_gpu_into(&registered_keys, &options, registered_out.as_mut_slice()).unwrap();
            registered.push(t.elapsed().as_secs_f32() * 1000.0);
        }
        let (plain, registered) = (median(plain), median(registered));
        let (p1, r1) = *base.get_or_insert((plain, registered));
        lines.push(format!(
            "| {d} | {floor:.1} | {plain:.1} | {:.2} | {registered:.1} | {:.2} | {:.2}x | {:.2}x |",
            floor / plain,
            floor / registered,
            p1 / plain,
            r1 / registered
        ));
    }
    lines
}

/// k runs of `n / k` rows: three u64 columns and an i32 column with 10% nulls, and the
/// permutation of their merge by the first column (what a merge round gathers with).
fn gather_data(n: usize, k: usize) -> (Vec<arrow::array::RecordBatch>, corank::Permutation) {
    use arrow::array::{ArrayRef, Int32Array, RecordBatch, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let (keys, offsets) = data(n, k, u64::MAX, 21);
    let indices = merge_cpu(&keys, &offsets);
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::UInt64, false),
        Field::new("b", DataType::UInt64, false),
        Field::new("c", DataType::UInt64, false),
        Field::new("d", DataType::Int32, true),
    ]));
    let runs: Vec<RecordBatch> = offsets
        .par_windows(2)
        .map(|w| {
            let a = &keys[w[0]..w[1]];
            let b: Vec<u64> = a.iter().map(|x| x.rotate_left(17)).collect();
            let c: Vec<u64> = a.iter().map(|x| x ^ 0x5555_5555_5555_5555).collect();
            let d: Int32Array = a.iter().map(|&x| (x % 10 != 0).then_some(x as i32)).collect();
            let cols: Vec<ArrayRef> =
                vec![Arc::new(UInt64Array::from(a.to_vec())), Arc::new(UInt64Array::from(b)), Arc::new(UInt64Array::from(c)), Arc::new(d)];
            RecordBatch::try_new(schema.clone(), cols).unwrap()
        })
        .collect();
    (runs, corank::Permutation { run_offsets: offsets, indices, engine: corank::Engine::Cpu, key_bytes: 8 })
}

/// The gather table (markdown lines): CPU against device for 1M, 16M and 64M rows, and the
/// decision rule's constants measured in this run.
fn gather_section(reps: usize) -> Vec<String> {
    use gpu::gather::{gather_on_gpu_pays, H100_HOST};
    const K: usize = 16;
    const ROW_BYTES: usize = 3 * 8 + 4; // fixed-width payload bytes a row (the bitmap aside)
    let columns = [0, 1, 2, 3];
    let threads = rayon::current_num_threads();
    let mut lines = vec![
        String::new(),
        format!("Payload gather, {K} runs of 3 x u64 + nullable i32 (10% nulls), permuted by their merge (u32 indices); median of 3, {threads} CPU threads"),
        "| rows | payload MB | CPU gather ms (GB/s) | GPU end to end ms (GB/s) | CPU / GPU | GPU kernels ms | D2D copy of the output ms | model GPU ms | model CPU ms | rule says |".into(),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|".into(),
    ];
    let median3 = |f: &mut dyn FnMut() -> f32| median((0..3).map(|_| f()).collect());
    for n in [1usize << 20, 16 << 20, 64 << 20] {
        let (runs, perm) = gather_data(n, K);
        let bytes = n * ROW_BYTES;
        // Outputs first, checked equal.
        let cpu = corank::gather(&runs, &perm, 8192).unwrap();
        let ours = gpu::gather_fixed_gpu(&runs, &perm, &columns, &GpuOptions::default()).unwrap();
        for (c, got) in ours.iter().enumerate() {
            let parts: Vec<&dyn arrow::array::Array> = cpu.iter().map(|b| b.column(c).as_ref()).collect();
            let want = arrow::compute::concat(&parts).unwrap();
            assert_eq!(want.to_data(), got.to_data(), "column {c}: the device gather differs from the CPU gather at {n} rows");
            assert_eq!(want.null_count(), got.null_count());
        }
        drop((cpu, ours));
        let cpu_ms = median3(&mut || {
            let s = Instant::now();
            let out = corank::gather(&runs, &perm, 8192).unwrap();
            let ms = s.elapsed().as_secs_f32() * 1000.0;
            drop(out);
            ms
        });
        let gpu_ms = median3(&mut || {
            let s = Instant::now();
            let out = gpu::gather_fixed_gpu(&runs, &perm, &columns, &GpuOptions::default()).unwrap();
            let ms = s.elapsed().as_secs_f32() * 1000.0;
            drop(out);
            ms
        });
        let kernel_ms = median3(&mut || bench::gather_fixed_timed(&runs, &perm, &columns).unwrap().1);
        let copy_ms = median(bench::time_copy(bytes + n / 8, reps).unwrap());
        let gbs = |ms: f64| bytes as f64 / ms / 1e6;
        lines.push(format!(
            "| {}M | {} | {cpu_ms:.1} ({:.1}) | {gpu_ms:.1} ({:.1}) | {:.2} | {kernel_ms:.2} | {copy_ms:.2} | {:.1} | {:.1} | {} |",
            n >> 20,
            bytes / 1_000_000,
            gbs(cpu_ms),
            gbs(gpu_ms),
            cpu_ms / gpu_ms,
            H100_HOST.gpu_ms(n, ROW_BYTES, 4),
            H100_HOST.cpu_ms(n, ROW_BYTES, threads),
            if gather_on_gpu_pays(n, ROW_BYTES, 4, threads) { "GPU" } else { "CPU" },
        ));
    }
    // The rule's constants, measured here.
    let probe = 512usize << 20;
    let src = vec![0x5au8; probe];
    let up_ms = median(bench::time_staged_upload(&src, 3).unwrap()) as f64;
    drop(src);
    let (_, down) = bench::time_pinned(probe, 3).unwrap();
    let down_ms = median(down);
    let (alloc_ms, free_ms) = bench::time_pinned_alloc((64 * ROW_BYTES) << 20).unwrap();
    lines.push(String::new());
    lines.push(format!(
        "Constants: pageable upload through the pinned staging buffers {:.1} GB/s; pinned D2H {:.1} GB/s (512 MiB); a cold pinned allocation of the 64M-row output ({} MiB) {alloc_ms:.0} ms, its free {free_ms:.0} ms (the gather's pool reuses it after the first call); in use (gather.rs H100_HOST): {:?}",
        probe as f64 / up_ms / 1e6,
        probe as f64 / down_ms / 1e6,
        64 * ROW_BYTES,
        H100_HOST
    ));
    lines
}

/// From host memory: 2^28 u64 keys up, 2^28 u32 indices down, against the PCIe floor; then
/// the CPU engine on the same data.
fn host_path(n: usize, rows: &mut Vec<(String, f64, String, String)>, gbs: &dyn Fn(f64) -> f64) {
    let (up, down) = bench::time_pinned(n * 8, 3).unwrap();
    let (up_ms, down_ms) = (median(up), median(down));
    let floor_ms = up_ms * 1.0 + down_ms * 0.5; // 8n bytes up, 4n bytes down
    rows.push((format!("pinned H2D {} MB", n * 8 / 1_000_000), up_ms, format!("{:.1}", n as f64 * 8.0 / up_ms / 1e6), "".into()));
    rows.push((format!("pinned D2H {} MB", n * 8 / 1_000_000), down_ms, format!("{:.1}", n as f64 * 8.0 / down_ms / 1e6), "".into()));
    rows.push(("PCIe floor (8n up + 4n down)".into(), floor_ms, "".into(), "1.00".into()));
    let (keys, offsets) = data(n, 2, u64::MAX, 9);
    let col = KeyColumn::U64(keys);
    let _ = gpu::merge_gpu(&col, &offsets, &GpuOptions::default()).unwrap(); // warm-up
    for (label, overlap) in [("host path H2D+merge+D2H, overlapped download", true), ("host path, no overlap", false)] {
        let mut t = Vec::new();
        for _ in 0..3 {
            let s = Instant::now();
            let out = gpu::merge_gpu(&col, &offsets, &GpuOptions { overlap_download: overlap, ..GpuOptions::default() }).unwrap();
            t.push(s.elapsed().as_secs_f32() * 1000.0);
            assert_eq!(out.len(), n);
        }
        let ms = median(t);
        rows.push((label.into(), ms, "".into(), format!("{:.2} of floor", floor_ms / ms)));
    }
    let KeyColumn::U64(keys) = &col else { unreachable!() };
    let s = Instant::now();
    let _ = merge_cpu(keys, &offsets);
    let cpu_ms = s.elapsed().as_secs_f64() * 1000.0;
    rows.push((
        format!("CPU engine, {} threads, same 2-way data", rayon::current_num_threads()),
        cpu_ms,
        format!("{:.0}", gbs(cpu_ms)),
        "".into(),
    ));
}

/// The 2-way data as two RecordBatches (one u64 column), merged into 8192-row batches by
/// corank (GPU, CPU) and by SortPreservingMergeExec; wall clock, one run each after the
/// outputs are checked equal.
fn record_batches(n: usize, rows: &mut Vec<(String, f64, String, String)>) {
    use arrow::array::{RecordBatch, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use corank::{Engine, MergeOptions, SortKey};
    use datafusion::physical_plan::collect;
    use std::sync::Arc;
    const BATCH: usize = 8192;
    let (keys, offsets) = data(n, 2, u64::MAX, 9);
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::UInt64, false)]));
    let runs: Vec<RecordBatch> = offsets
        .windows(2)
        .map(|w| RecordBatch::try_new(schema.clone(), vec![Arc::new(UInt64Array::from(keys[w[0]..w[1]].to_vec()))]).unwrap())
        .collect();
    drop(keys);
    let plan = spm::spm_plan(&runs, &["k"], BATCH);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let ctx = spm::task_context(BATCH);
    let sort = [SortKey::asc("k")];
    let time = |f: &mut dyn FnMut() -> Vec<RecordBatch>| {
        let s = Instant::now();
        let out = f();
        (s.elapsed().as_secs_f64() * 1000.0, out)
    };
    let mut results = Vec::new();
    for (label, engine) in [("corank::merge, GPU engine", Engine::Gpu), ("corank::merge, CPU engine", Engine::Cpu)] {
        let opts = MergeOptions::default().with_engine(engine).with_batch_size(BATCH);
        let _ = corank::merge(&runs, &sort, &opts).unwrap(); // warm-up (CUDA context, kernels)
        let (ms, out) = time(&mut || corank::merge(&runs, &sort, &opts).unwrap());
        results.push((label, ms, out));
    }
    let (spm_ms, theirs) = time(&mut || rt.block_on(collect(plan.clone(), ctx.clone())).unwrap());
    let concat = |b: &[RecordBatch]| arrow::compute::concat_batches(&schema, b).unwrap();
    let theirs = concat(&theirs);
    rows.push((
        format!("SortPreservingMergeExec, 2 x {} rows -> 8192-row batches", n / 2),
        spm_ms,
        "".into(),
        "1.00 (SPM time / this)".into(),
    ));
    for (label, ms, out) in results {
        assert_eq!(concat(&out), theirs, "{label} and SortPreservingMergeExec differ");
        rows.push((format!("{label}, same batches"), ms, "".into(), format!("{:.2}x faster than SPM", spm_ms / ms)));
    }
}

//! GPU start-up: `warm_up_gpu` (the CUDA context and the cached kernels on a background
//! thread) and the kernels' disk cache as the engine uses it. The cache itself (cold, warm,
//! truncated, corrupt and foreign entries) is tested without a GPU by the unit tests of
//! `src/engine/gpu/kernel_cache.rs`.
//!
//! GPU tests skip without a GPU unless `CORANK_REQUIRE_GPU=1`. `startup_breakdown` is
//! ignored by default: run it alone, in its own process, to print where start-up goes
//! (`--ignored --exact cache::startup_breakdown --nocapture`; `CORANK_CACHE_DIR` picks the cache,
//! `CORANK_BREAKDOWN_NO_WARM_UP=1` leaves the warm-up out, `CORANK_BREAKDOWN_BUSY_MS=N`
//! keeps the caller busy N ms between the warm-up and the first merge).

use super::support::gpu_or_skip;
use corank::engine::cpu::merge_cpu;
use corank::engine::{gpu_availability, gpu_device_name, merge_keys, warm_up_gpu};
use corank::keys::KeyColumn;
use corank::{Engine, EngineOptions, Error, OnGpuFailure};
use std::time::Instant;

fn strict_gpu() -> EngineOptions {
    EngineOptions { engine: Engine::Gpu, on_gpu_failure: OnGpuFailure::Error, ..EngineOptions::default() }
}

/// `runs` sorted runs of `len` keys each, drawn from a small domain (many ties).
fn sorted_runs(runs: usize, len: usize, seed: u64) -> (Vec<u64>, Vec<usize>) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut keys = Vec::with_capacity(runs * len);
    let mut offsets = vec![0];
    for _ in 0..runs {
        let mut run: Vec<u64> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % 1000
            })
            .collect();
        run.sort_unstable();
        keys.extend(run);
        offsets.push(keys.len());
    }
    (keys, offsets)
}

/// A merge after a warm-up (called twice: the second does nothing) is the CPU engine's,
/// for the widths the warm-up loads and one it does not.
#[test]
fn warm_up_then_merge_matches_the_cpu() {
    if !gpu_or_skip("warm_up_then_merge_matches_the_cpu") {
        return;
    }
    let options = strict_gpu();
    warm_up_gpu(&options, 0);
    warm_up_gpu(&options, 0);
    let (keys, offsets) = sorted_runs(7, 3_000, 1);
    let expected = merge_cpu(&keys, &offsets);
    let (got, engine) = merge_keys(&KeyColumn::U64(keys.clone()), &offsets, &options).unwrap();
    assert_eq!((got.to_vec(), engine), (expected.to_vec(), Engine::Gpu));
    let wide: Vec<[u64; 3]> = keys.iter().map(|&k| [k, 0, !k]).collect();
    let expected = merge_cpu(&wide, &offsets);
    let (got, _) = merge_keys(&KeyColumn::U64x3(wide), &offsets, &options).unwrap();
    assert_eq!(got.to_vec(), expected.to_vec());
}

/// A warm-up never reports: a device that does not exist is reported by the first use of
/// it, as without a warm-up; `Engine::Cpu` starts nothing.
#[test]
fn errors_are_reported_by_the_merge_as_before() {
    let missing = EngineOptions { devices: corank::Devices::One(999), ..strict_gpu() };
    warm_up_gpu(&missing, 0);
    warm_up_gpu(&EngineOptions { engine: Engine::Cpu, ..EngineOptions::default() }, 0);
    match gpu_device_name(999) {
        Err(Error::GpuUnavailable(why)) => assert!(why.contains("999") || gpu_availability().is_err(), "{why}"),
        other => panic!("device 999: {other:?}"),
    }
    let (keys, offsets) = sorted_runs(3, 10, 2);
    assert!(matches!(merge_keys(&KeyColumn::U64(keys), &offsets, &missing), Err(Error::GpuUnavailable(_))));
}

const CHILD: &str = "CORANK_TEST_WARM_UP_CHILD";

/// Run in a child process by `exit_during_warm_up_is_clean` (a no-op otherwise): starts a
/// warm-up and returns at once, so the process exits while the context is being created.
#[test]
fn child_exits_during_warm_up() {
    if std::env::var_os(CHILD).is_some() {
        warm_up_gpu(&EngineOptions::default(), 0);
    }
}

/// A process that exits while its warm-up thread is still creating the context exits
/// cleanly (status 0), with or without a GPU.
#[test]
fn exit_during_warm_up_is_clean() {
    let exe = std::env::current_exe().unwrap();
    // The test's name in this binary: its module path without the crate's name.
    let child = concat!(module_path!(), "::child_exits_during_warm_up");
    let child = child.split_once("::").map_or(child, |(_, name)| name);
    for attempt in 0..3 {
        let out = std::process::Command::new(&exe).args(["--exact", child, "--test-threads=1"]).env(CHILD, "1").output().unwrap();
        assert!(
            out.status.success(),
            "attempt {attempt}: {:?}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Prints corank's debug lines (context, module loads, compiles) with the time since start.
struct StderrLogger(Instant);

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target().starts_with("corank") && m.level() <= log::Level::Debug
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{:>8.1?}] {} {}", self.0.elapsed(), r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

/// Where a process's GPU start-up goes: prints the warm-up call, the wait for the context,
/// the first merge (module from the cache or compiled) and a second merge.
#[test]
#[ignore = "a measurement: run alone, see the file's header"]
fn startup_breakdown() {
    let start = Instant::now();
    let logger: &'static StderrLogger = Box::leak(Box::new(StderrLogger(start)));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
    // The process-wide one-time costs the first GPU use pays before the context, timed
    // one by one (the engine pays them in `gpu_availability`, on the warm-up thread when
    // there is one).
    let t = Instant::now();
    // SAFETY: only loads libcuda (dlopen).
    let cuda = unsafe { cudarc::driver::sys::is_culib_present() };
    let dl_cuda = t.elapsed();
    let t = Instant::now();
    // SAFETY: only loads libnvrtc (dlopen).
    let _ = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let dl_nvrtc = t.elapsed();
    let t = Instant::now();
    let _ = cuda && cudarc::driver::result::init().is_ok();
    let cu_init = t.elapsed();
    if !gpu_or_skip("startup_breakdown") {
        return;
    }
    eprintln!("startup_breakdown: dlopen libcuda {dl_cuda:.1?}, dlopen libnvrtc {dl_nvrtc:.1?}, cuInit {cu_init:.1?}");
    let options = strict_gpu();
    let warm = std::env::var("CORANK_BREAKDOWN_NO_WARM_UP").as_deref() != Ok("1");
    let t = Instant::now();
    if warm {
        warm_up_gpu(&options, 0);
    }
    let call = t.elapsed();
    // The caller's own work the warm-up overlaps (reading Parquet footers), simulated.
    let busy_ms: u64 = std::env::var("CORANK_BREAKDOWN_BUSY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    std::thread::sleep(std::time::Duration::from_millis(busy_ms));
    let (keys, offsets) = sorted_runs(8, 250, 3); // 2,000 rows
    let keys = KeyColumn::U64(keys);
    let t = Instant::now();
    let name = gpu_device_name(0).unwrap();
    let context = t.elapsed();
    let t = Instant::now();
    merge_keys(&keys, &offsets, &options).unwrap();
    let first = t.elapsed();
    let t = Instant::now();
    merge_keys(&keys, &offsets, &options).unwrap();
    let second = t.elapsed();
    eprintln!(
        "startup_breakdown on {name}: warm-up {} (call {call:.2?}), then {busy_ms} ms busy; context ready after {context:.1?}; \
         first merge {first:.1?}; second merge {second:.2?}; total {:.1?}",
        if warm { "on" } else { "off" },
        start.elapsed()
    );
}

/// What a process's exit costs once it holds a context, staging buffers and a module:
/// merges once, prints its own time, then returns from the test (the normal exit, through
/// the driver's teardown) or, with `CORANK_EXIT_PROBE=fast`, leaves by `_exit`. The caller
/// times the process from outside; the difference is the exit.
#[test]
#[ignore = "a measurement: run alone, see the file's header"]
fn exit_probe() {
    let start = Instant::now();
    if !gpu_or_skip("exit_probe") {
        return;
    }
    let (keys, offsets) = sorted_runs(8, 250, 4);
    merge_keys(&KeyColumn::U64(keys), &offsets, &strict_gpu()).unwrap();
    eprintln!("exit_probe: in-process {:.1?}", start.elapsed());
    if std::env::var("CORANK_EXIT_PROBE").as_deref() == Ok("fast") {
        // SAFETY: ends the process at once, skipping atexit handlers (nothing of this
        // process needs them: its output is written by eprintln, unbuffered).
        unsafe { libc::_exit(0) };
    }
}

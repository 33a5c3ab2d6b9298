//! The engine choice, above both engines: the CPU merge path ([`cpu`], with the co-rank
//! reference [`co_rank`] beside it) or the GPU co-rank kernels ([`gpu`]), and what happens
//! when the GPU is missing or fails ([`OnGpuFailure`]).
//!
//! - `Cpu`: the merge path on rayon threads.
//! - `Gpu`: the co-rank kernels; an error where no GPU is usable, or where the GPU fails.
//! - `Auto`: the GPU for inputs of at least `gpu_min_rows` keys when one is usable, else the
//!   CPU; while the GPU's start-up begun by [`warm_up_gpu`] is still under way (the driver,
//!   the contexts, the cached kernels: ~0.2–0.35 s), the CPU rather than a wait for it for
//!   jobs the CPU does in about that time ([`CPU_ROWS_PER_THREAD_WHILE_STARTING`] keys a
//!   thread; the same result: the command line's first rounds are ready before the driver
//!   is). With `OnGpuFailure::UseCpu` a missing GPU and a GPU failure (out of memory, launch
//!   failure) fall back to the CPU with one log line, so no data is lost; with
//!   `OnGpuFailure::Error` both are errors and every size goes to the GPU (the GPU tests).
//!
//! Both engines return the same indices for the same keys; neither imports this module.

pub mod auto;
pub mod co_rank;
pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod sort;

use crate::error::{Error, Result};
use crate::keys::KeyColumn;
use crate::options::{Devices, Engine, EngineOptions, OnGpuFailure};
use crate::permutation::Indices;
use crate::with_key_column;

fn merge_on_cpu(keys: &KeyColumn, run_offsets: &[usize]) -> (Indices, Engine) {
    (with_key_column!(keys, v => cpu::merge_cpu(v, run_offsets)), Engine::Cpu)
}

/// Whether the GPU engine can run here (built with the `gpu` feature, a driver, NVRTC and a
/// device), or why not.
pub fn gpu_availability() -> std::result::Result<(), String> {
    #[cfg(feature = "gpu")]
    return gpu::availability();
    #[cfg(not(feature = "gpu"))]
    Err("corank was built without the `gpu` feature".into())
}

/// Whether the GPU engine's libraries (the CUDA driver library, NVRTC) load, without
/// calling the driver: a check that does not wait ~0.1–0.2 s for `cuInit`, for callers that
/// start the GPU in the background ([`warm_up_gpu`]) and let the first merge report a
/// device that cannot be used. `Err` says why not.
pub fn gpu_libraries_present() -> std::result::Result<(), String> {
    #[cfg(feature = "gpu")]
    return gpu::libraries_present();
    #[cfg(not(feature = "gpu"))]
    Err("corank was built without the `gpu` feature".into())
}

/// Starts the GPU engine's start-up (the CUDA contexts of `options.devices`, the cached
/// kernels) on a background thread and returns at once, so that it overlaps the caller's
/// own work, e.g. reading Parquet footers; the first GPU merge waits for what is still
/// under way. `rows`: the rows the caller expects to merge or sort (0 if not known yet);
/// from a few hundred thousand, the pinned staging buffers their transfers need are
/// allocated then too (a later call with the rows known does that part only). Does nothing
/// for `Engine::Cpu` or without the `gpu` feature. Errors are not reported here but by the
/// merge, as without a warm-up (see `gpu::warm_up`).
pub fn warm_up_gpu(options: &EngineOptions, rows: usize) {
    #[cfg(feature = "gpu")]
    if options.engine != Engine::Cpu {
        // Key words and indices: at least 12 bytes a row go up or down.
        let staging_bytes = if rows >= 1 << 18 { rows.saturating_mul(12) } else { 0 };
        gpu::warm_up_devices(options.devices, staging_bytes);
    }
    #[cfg(not(feature = "gpu"))]
    let _ = (options, rows);
}

/// Whether the GPU's start-up begun by [`warm_up_gpu`] is still under way (a context, the
/// cached kernels or the staging buffers not ready, or a missing GPU not found out yet): a
/// GPU merge started now would wait for it. `false` without the `gpu` feature.
pub fn gpu_warming_up() -> bool {
    #[cfg(feature = "gpu")]
    return gpu::warm_up_in_flight();
    #[cfg(not(feature = "gpu"))]
    false
}

/// Keys a CPU thread sorts or merges in about the time left of the GPU's start-up once a
/// job is ready (~0.2 s; the CPU sorts ~5M keys a second a thread): `Auto` takes the CPU
/// during the start-up only for jobs up to this many keys a thread, and waits for the GPU
/// with larger ones. Measured on the H200 host (16 threads, docs/PERFORMANCE.md, "`--engine
/// auto` no longer waits"): the command line's merge rounds of ~2.3M keys gain 0.1–0.3 s on
/// the CPU; `corank sort`'s 100M keys took 1.2–1.3 s on the CPU against 0.28 s on the GPU.
pub const CPU_ROWS_PER_THREAD_WHILE_STARTING: usize = 1 << 20;

/// The largest job `Auto` gives the CPU while the GPU starts: [`CPU_ROWS_PER_THREAD_WHILE_STARTING`]
/// per thread of the rayon pool.
fn cpu_rows_while_starting() -> usize {
    CPU_ROWS_PER_THREAD_WHILE_STARTING.saturating_mul(rayon::current_num_threads())
}

/// Whether a job now would wait for the GPU's start-up: a warm-up in flight
/// ([`gpu_warming_up`]) where the GPU libraries are present (without them no start-up is
/// waited for, and the job's own check says why the GPU is not used).
fn gpu_starting() -> bool {
    gpu_warming_up() && gpu_libraries_present().is_ok()
}

/// The name of the GPU device `device`, where one is usable.
pub fn gpu_device_name(device: usize) -> Result<String> {
    #[cfg(feature = "gpu")]
    return gpu::device_name(device);
    #[cfg(not(feature = "gpu"))]
    Err(Error::GpuUnavailable(gpu_availability().unwrap_err() + &format!(" (device {device})")))
}

/// The devices `devices` names (`All`: every one present), each as "ORDINAL NAME", joined
/// with ", ": what reports print. An absent or unusable device is an error naming it.
pub fn gpu_devices_shown(devices: Devices) -> Result<String> {
    #[cfg(feature = "gpu")]
    return gpu::devices_shown(devices);
    #[cfg(not(feature = "gpu"))]
    Err(Error::GpuUnavailable(gpu_availability().unwrap_err() + &format!(" (devices {devices})")))
}

#[cfg(feature = "gpu")]
fn merge_on_gpu(keys: &KeyColumn, run_offsets: &[usize], options: &EngineOptions) -> Result<Indices> {
    let gpu_options = gpu::GpuOptions { kernel: options.kernel, devices: options.devices, ..gpu::GpuOptions::default() };
    gpu::merge_gpu(keys, run_offsets, &gpu_options)
}

#[cfg(not(feature = "gpu"))]
fn merge_on_gpu(_: &KeyColumn, _: &[usize], _: &EngineOptions) -> Result<Indices> {
    Err(Error::GpuUnavailable(gpu_availability().unwrap_err()))
}

#[cfg(feature = "gpu")]
pub(crate) fn sort_on_gpu(keys: &KeyColumn, options: &EngineOptions) -> Result<Indices> {
    let gpu_options = gpu::GpuOptions { kernel: options.kernel, devices: options.devices, ..gpu::GpuOptions::default() };
    gpu::sort_gpu(keys, &gpu_options)
}

#[cfg(not(feature = "gpu"))]
pub(crate) fn sort_on_gpu(_: &KeyColumn, _: &EngineOptions) -> Result<Indices> {
    Err(Error::GpuUnavailable(gpu_availability().unwrap_err()))
}

/// Merges sorted runs of keys with the chosen engine; returns the indices and the engine
/// that ran (`Cpu` or `Gpu`).
pub fn merge_keys(keys: &KeyColumn, run_offsets: &[usize], options: &EngineOptions) -> Result<(Indices, Engine)> {
    let cpu = || merge_on_cpu(keys, run_offsets).0;
    choose_engine(options, keys.len(), "merging", cpu, || merge_on_gpu(keys, run_offsets, options))
}

/// Merges sorted runs of keys whose rows carry the indices `idx` (one per key, same order)
/// with the chosen engine; returns `idx` in merged order (stable: ties to the earlier run)
/// and the engine that ran. The CPU carries `idx` through its merge tree; the GPU merges
/// positions, which then pick from `idx`.
pub(crate) fn merge_keys_carrying(
    keys: KeyColumn,
    idx: Indices,
    run_offsets: &[usize],
    options: &EngineOptions,
) -> Result<(Indices, Engine)> {
    use std::borrow::Cow;
    use std::cell::RefCell;
    let rows = keys.len();
    // The CPU merge takes the keys and the carried indices over (no copy of either); the GPU
    // merge only reads them, so they are still here when a failed GPU merge falls back.
    let owned = RefCell::new(Some((keys, idx)));
    let cpu = || {
        let (keys, idx) = owned.borrow_mut().take().expect("choose_engine runs the CPU merge at most once");
        match idx {
            Indices::U32(i) => Indices::U32(with_key_column!(keys, v => cpu::merge_runs::<_, _, true>(Cow::Owned(v), i, run_offsets))),
            Indices::U64(i) => Indices::U64(with_key_column!(keys, v => cpu::merge_runs::<_, _, true>(Cow::Owned(v), i, run_offsets))),
        }
    };
    let gpu = || -> Result<Indices> {
        let held = owned.borrow();
        let (keys, idx) = held.as_ref().expect("the GPU merge runs before any CPU merge");
        let merged = merge_on_gpu(keys, run_offsets, options)?;
        let n = merged.len();
        Ok(match idx {
            Indices::U32(i) => Indices::U32((0..n).map(|p| i[merged.get(p)]).collect()),
            Indices::U64(i) => Indices::U64((0..n).map(|p| i[merged.get(p)]).collect()),
        })
    };
    choose_engine(options, rows, "merging", cpu, gpu)
}

/// Runs one job of `rows` keys on the engine the options choose (the module doc): `cpu` and
/// `gpu` run it on each engine, `doing` names it in the log lines ("merging", "sorting").
pub(crate) fn choose_engine(
    options: &EngineOptions,
    rows: usize,
    doing: &str,
    cpu: impl FnOnce() -> Indices,
    gpu: impl FnOnce() -> Result<Indices>,
) -> Result<(Indices, Engine)> {
    static NO_GPU: std::sync::Once = std::sync::Once::new();
    let strict = options.on_gpu_failure == OnGpuFailure::Error;
    match options.engine {
        Engine::Cpu => Ok((cpu(), Engine::Cpu)),
        Engine::Gpu => {
            gpu_availability().map_err(Error::GpuUnavailable)?;
            Ok((gpu()?, Engine::Gpu))
        }
        Engine::Auto => {
            // Before asking the driver (which would wait for the start-up's `cuInit`).
            if !strict && rows <= cpu_rows_while_starting() && gpu_starting() {
                return Ok((cpu(), Engine::Cpu));
            }
            if let Err(why) = gpu_availability() {
                if strict {
                    return Err(Error::GpuUnavailable(why));
                }
                NO_GPU.call_once(|| log::info!("corank: no usable GPU ({why}); {doing} on the CPU"));
                return Ok((cpu(), Engine::Cpu));
            }
            if rows < options.gpu_min_rows && !strict {
                return Ok((cpu(), Engine::Cpu));
            }
            match gpu() {
                Ok(indices) => Ok((indices, Engine::Gpu)),
                Err(e) if !strict => {
                    log::warn!("corank: GPU {doing} failed ({e}); {doing} on the CPU instead");
                    Ok((cpu(), Engine::Cpu))
                }
                Err(e) => Err(e),
            }
        }
    }
}

#[cfg(all(test, feature = "gpu"))]
mod tests {
    use super::*;

    /// While a warm-up is in flight, `Auto` gives a job of up to the bound to the CPU and
    /// never asks the GPU (which would wait for the start-up), and asks the GPU for a larger
    /// one. Without the GPU libraries (CI) both go to the CPU anyway; on a GPU machine only
    /// the start-up rule keeps the GPU out of the first.
    #[test]
    fn auto_takes_the_cpu_while_the_gpu_starts_for_jobs_the_cpu_does_in_that_time() {
        let _alone = gpu::WARM_UP_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let options = EngineOptions::default().with_engine(Engine::Auto);
        let in_flight = gpu::WarmUpInFlight::new();
        let small = options.gpu_min_rows.max(1).min(cpu_rows_while_starting());
        let ask_gpu = || -> Result<Indices> { panic!("the GPU was asked while it was starting") };
        let (indices, engine) = choose_engine(&options, small, "merging", || Indices::U32(vec![7]), ask_gpu).unwrap();
        assert_eq!((indices, engine), (Indices::U32(vec![7]), Engine::Cpu));
        // A larger job waits for the GPU where there is one (it is asked); without one it
        // takes the CPU, as it would have anyway.
        let asked = std::cell::Cell::new(false);
        let ask_gpu = || -> Result<Indices> {
            asked.set(true);
            Ok(Indices::U32(vec![8]))
        };
        let (_, engine) = choose_engine(&options, cpu_rows_while_starting() + 1, "merging", || Indices::U32(vec![7]), ask_gpu).unwrap();
        assert_eq!(asked.get(), gpu_availability().is_ok());
        assert_eq!(engine, if asked.get() { Engine::Gpu } else { Engine::Cpu });
        drop(in_flight);
    }
}

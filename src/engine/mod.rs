//! The engine layer: the CPU merge path ([`cpu`], with the co-rank reference [`co_rank`]
//! beside it), the stable sort built on it ([`sort`]), the GPU co-rank kernels ([`gpu`],
//! feature `gpu`), and above them the one place that decides between them
//! ([`placement`]: every CPU-or-GPU rule, [`auto`]'s choice per round among them) and the
//! device work callers above the engine may ask for ([`device`]: a round's device gather,
//! a whole sort's pieces, a batched decompression described by [`decompress`]; "not on
//! this build" without the `gpu` feature).
//!
//! [`merge_keys`] and [`sort::sort_keys`] run one job on the engine
//! `placement::choose_engine` picks, with the fallback of [`OnGpuFailure`]. Both engines
//! return the same indices for the same keys; neither imports this module.

pub mod auto;
pub mod co_rank;
pub mod cpu;
pub(crate) mod decode_job;
pub mod decompress;
pub mod device;
pub(crate) mod encode_job;
#[cfg(feature = "gpu")]
pub mod gpu;
pub(crate) mod key_job;
pub(crate) mod kway;
pub mod placement;
pub(crate) mod resident_job;
pub mod sort;

#[cfg(test)]
pub(crate) mod tests;

pub(crate) use placement::choose_engine;

use crate::cancel::Cancel;
#[cfg(not(feature = "gpu"))]
use crate::error::Error;
use crate::error::Result;
use crate::keys::KeyColumn;
#[cfg(doc)]
use crate::options::OnGpuFailure;
use crate::options::{Devices, Engine, EngineOptions};
use crate::permutation::Indices;
use crate::with_key_column;

fn merge_on_cpu(keys: &KeyColumn, run_offsets: &[usize], cancel: Option<&Cancel>) -> (Indices, Engine) {
    (with_key_column!(keys, v => cpu::merge_cpu_until(v, run_offsets, cancel)), Engine::Cpu)
}

/// Whether the GPU engine can run here (built with the `gpu` feature, a driver, NVRTC and a
/// device), or why not.
///
/// ```
/// match corank::gpu_availability() {
///     Ok(()) => println!("GPU: {}", corank::gpu_device_name(0).unwrap()),
///     Err(why) => println!("CPU only: {why}"),
/// }
/// ```
pub fn gpu_availability() -> std::result::Result<(), String> {
    #[cfg(feature = "gpu")]
    return gpu::availability();
    #[cfg(not(feature = "gpu"))]
    Err("corank was built without the `gpu` feature".into())
}

/// Whether the GPU engine's libraries (the CUDA driver library, NVRTC) load, without
/// calling the driver: a check that does not wait for `cuInit`, for callers that
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
///
/// ```no_run
/// use corank::{warm_up_gpu, EngineOptions};
///
/// let options = EngineOptions::default();
/// warm_up_gpu(&options, 0); // returns at once; without a GPU the merges run on the CPU
/// // ... read the inputs, then merge with `options`
/// ```
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

/// The name of the GPU device `device`, where one is usable. [`gpu_availability`] has an
/// example.
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
    gpu::merge_gpu(keys, run_offsets, &placement::gpu_options(options))
}

#[cfg(not(feature = "gpu"))]
fn merge_on_gpu(_: &KeyColumn, _: &[usize], _: &EngineOptions) -> Result<Indices> {
    Err(Error::GpuUnavailable(gpu_availability().unwrap_err()))
}

#[cfg(feature = "gpu")]
pub(crate) fn sort_on_gpu(keys: &KeyColumn, options: &EngineOptions) -> Result<Indices> {
    gpu::sort_gpu(keys, &placement::gpu_options(options))
}

#[cfg(not(feature = "gpu"))]
pub(crate) fn sort_on_gpu(_: &KeyColumn, _: &EngineOptions) -> Result<Indices> {
    Err(Error::GpuUnavailable(gpu_availability().unwrap_err()))
}

/// Merges sorted runs of keys with the chosen engine; returns the indices and the engine
/// that ran (`Cpu` or `Gpu`). `run_offsets[r]` is where run `r` starts in `keys`, the last
/// entry `keys.len()`.
///
/// ```
/// use corank::{merge_keys, Engine, EngineOptions, KeyColumn};
///
/// // Two runs of key words: [1, 3, 5] and [2, 3].
/// let keys = KeyColumn::U32(vec![1, 3, 5, 2, 3]);
/// let (indices, engine) = merge_keys(&keys, &[0, 3, 5], &EngineOptions::default().with_engine(Engine::Cpu))?;
/// assert_eq!(indices.to_vec(), [0, 3, 1, 4, 2]); // the 3 of run 0 first
/// assert_eq!(engine, Engine::Cpu);
/// # Ok::<(), corank::Error>(())
/// ```
pub fn merge_keys(keys: &KeyColumn, run_offsets: &[usize], options: &EngineOptions) -> Result<(Indices, Engine)> {
    merge_keys_until(keys, run_offsets, options, None)
}

/// [`merge_keys`] that stops with [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is set: the CPU merge
/// looks at it between merge levels and between the pieces of a level; the GPU merge, short,
/// runs to its end.
pub(crate) fn merge_keys_until(
    keys: &KeyColumn,
    run_offsets: &[usize],
    options: &EngineOptions,
    cancel: Option<&Cancel>,
) -> Result<(Indices, Engine)> {
    crate::cancel::check(cancel)?;
    let cpu = || merge_on_cpu(keys, run_offsets, cancel).0;
    let merged = choose_engine(options, keys.len(), "merging", cpu, || merge_on_gpu(keys, run_offsets, options))?;
    // A merge cut short returned indices out of order: they never leave.
    crate::cancel::check(cancel)?;
    Ok(merged)
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
            Indices::U32(i) => {
                Indices::U32(with_key_column!(keys, v => cpu::merge_runs::<_, _, true>(Cow::Owned(v), i, run_offsets, None)))
            }
            Indices::U64(i) => {
                Indices::U64(with_key_column!(keys, v => cpu::merge_runs::<_, _, true>(Cow::Owned(v), i, run_offsets, None)))
            }
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

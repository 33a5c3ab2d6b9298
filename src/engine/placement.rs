//! Placement: every rule that decides whether work runs on the CPU or on the GPU, in one
//! place. Each rule is a small named function whose doc states it; the callers (the
//! engine's dispatch, the frontier's gather, the DataFusion nodes, the Parquet commands,
//! the binary's dry run) ask here instead of matching on [`Engine`] themselves.
//!
//! | rule | function | asked by |
//! | --- | --- | --- |
//! | one job (a merge, a sort) | `choose_engine` | `engine::merge_keys`, `engine::sort::sort_keys` |
//! | per round, by measured speed | [`AutoChoice`] (in `engine/auto.rs`) | the Parquet merge |
//! | may rounds go to a GPU | [`rounds_on_gpu`], [`gpu_usable`] | the merge node |
//! | the merge node's first round | [`first_round_on_cpu`] | the merge node |
//! | a sort chunk | [`chunk_on_cpu`] | the sort node |
//! | the whole input on the device | [`sorts_whole_on_device`] | the sort node |
//! | a round's device gather | [`device_gather_pays`] | the frontier's gather |
//! | after a device failure | [`cpu_after_gpu_failure`] | the device gather, the whole sort |
//! | starting the GPU early | [`warm_up_pays`] | the Parquet commands |
//! | the dry run's engine | [`planned_engine`] | the binary's `--dry-run` |
//!
//! The rules of `choose_engine` (the engine choice for one job):
//!
//! - `Cpu`: the merge path on rayon threads.
//! - `Gpu`: the co-rank kernels; an error where no GPU is usable, or where the GPU fails.
//! - `Auto`: the GPU for inputs of at least `gpu_min_rows` keys when one is usable, else the
//!   CPU; while the GPU's start-up begun by [`super::warm_up_gpu`] is still under way (the
//!   driver, the contexts, the cached kernels), the CPU rather than a wait for it for jobs
//!   the CPU does in about that time ([`CPU_ROWS_PER_THREAD_WHILE_STARTING`] keys a thread;
//!   the same result). With `OnGpuFailure::UseCpu` a missing GPU and a GPU failure (out of
//!   memory, launch failure) fall back to the CPU with one log line, so no data is lost;
//!   with `OnGpuFailure::Error` both are errors and every size goes to the GPU (the GPU
//!   tests).

use super::{gpu_availability, gpu_devices_shown, gpu_libraries_present, gpu_warming_up};
use crate::error::{Error, Result};
use crate::options::{Engine, EngineOptions, OnGpuFailure};
use crate::permutation::Indices;
use arrow::datatypes::DataType;

/// Keys a CPU thread sorts or merges in about the time left of the GPU's start-up once a
/// job is ready: `Auto` takes the CPU during the start-up only for jobs up to this many keys
/// a thread, and waits for the GPU with larger ones (a job the CPU does in about the
/// start-up's time gains nothing by waiting; a larger one loses more on the CPU than the
/// wait costs). The measurements behind it are in `docs/performance.md`.
pub const CPU_ROWS_PER_THREAD_WHILE_STARTING: usize = 1 << 20;

/// The largest job `Auto` gives the CPU while the GPU starts: [`CPU_ROWS_PER_THREAD_WHILE_STARTING`]
/// per thread of the rayon pool.
pub(crate) fn cpu_rows_while_starting() -> usize {
    CPU_ROWS_PER_THREAD_WHILE_STARTING.saturating_mul(rayon::current_num_threads())
}

/// Whether a job now would wait for the GPU's start-up: a warm-up in flight
/// ([`gpu_warming_up`]) where the GPU libraries are present (without them no start-up is
/// waited for, and the job's own check says why the GPU is not used).
fn gpu_starting() -> bool {
    gpu_warming_up() && gpu_libraries_present().is_ok()
}

/// Whether a GPU is required: `OnGpuFailure::Error` makes a missing or failing GPU an error
/// and sends every job `Auto` places to the GPU, whatever its size.
pub fn gpu_required(options: &EngineOptions) -> bool {
    options.on_gpu_failure == OnGpuFailure::Error
}

/// Whether work whose device part failed is done again on the CPU (`OnGpuFailure::UseCpu`,
/// with one log line) rather than the failure being the caller's error.
pub fn cpu_after_gpu_failure(options: &EngineOptions) -> bool {
    !gpu_required(options)
}

/// Whether a GPU engine is usable here (the `gpu` feature, a driver, NVRTC, a device).
pub fn gpu_usable() -> bool {
    gpu_availability().is_ok()
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
    // The log lines keep the target they had before the rules moved here: filters and
    // readers name `corank::engine`.
    const TARGET: &str = "corank::engine";
    let strict = gpu_required(options);
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
                NO_GPU.call_once(|| log::info!(target: TARGET, "corank: no usable GPU ({why}); {doing} on the CPU"));
                return Ok((cpu(), Engine::Cpu));
            }
            if rows < options.gpu_min_rows && !strict {
                return Ok((cpu(), Engine::Cpu));
            }
            match gpu() {
                Ok(indices) => Ok((indices, Engine::Gpu)),
                Err(e) if !strict => {
                    log::warn!(target: TARGET, "corank: GPU {doing} failed ({e}); {doing} on the CPU instead");
                    Ok((cpu(), Engine::Cpu))
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// Whether the rounds of a streaming merge may go to a GPU, as far as the options tell:
/// `Some(false)` for `Cpu`, `Some(true)` for `Gpu` or a required GPU, `None` for `Auto`,
/// where it depends on whether a GPU is usable ([`gpu_usable`], which waits for the driver:
/// ask it off the async runtime).
pub fn rounds_on_gpu(options: &EngineOptions) -> Option<bool> {
    match options.engine {
        Engine::Cpu => Some(false),
        Engine::Gpu => Some(true),
        Engine::Auto if gpu_required(options) => Some(true),
        Engine::Auto => None,
    }
}

/// Whether a round of `rows` rows merges on the CPU by the options alone (`Cpu`; `Auto`
/// below `gpu_min_rows` without a required GPU). The merge node merges its first round
/// (about one output batch) on its own task when this holds or the rounds do not go to a
/// GPU: a GPU's launch and transfer latency would delay the first batch.
pub fn first_round_on_cpu(options: &EngineOptions, rows: usize) -> bool {
    match options.engine {
        Engine::Cpu => true,
        Engine::Auto => rows < options.gpu_min_rows && !gpu_required(options),
        Engine::Gpu => false,
    }
}

/// Whether a sort chunk of `rows` rows is sorted on the CPU (else on the GPU, as a whole):
/// `Cpu`; `Auto` without a required GPU below `gpu_min_rows` or where no GPU is usable.
pub fn chunk_on_cpu(options: &EngineOptions, rows: usize) -> bool {
    match options.engine {
        Engine::Cpu => true,
        Engine::Gpu => false,
        Engine::Auto if gpu_required(options) => false,
        Engine::Auto => rows < options.gpu_min_rows || !gpu_usable(),
    }
}

/// Whether a sort whose output has columns of `column_types` waits for its whole input to
/// sort it on the device at once: the engine may use the GPU, one is usable, and every
/// column is of a type the device gathers (fixed-width types and byte views,
/// [`super::device::gathers_on_device`]). Always false without the `gpu` feature. Whether
/// the rows are enough and the memory suffices is decided once the input is in
/// ([`chunk_on_cpu`], [`super::device::whole_sort_fits`]).
pub fn sorts_whole_on_device<'a>(options: &EngineOptions, column_types: impl IntoIterator<Item = &'a DataType>) -> bool {
    let mut types = column_types.into_iter().peekable();
    options.engine != Engine::Cpu
        && types.peek().is_some()
        && types.all(super::device::gathers_on_device)
        && cfg!(feature = "gpu")
        && gpu_usable()
}

/// Whether a round of `rows` rows merged on the GPU gathers its fixed-width columns
/// (`payload_bytes_per_row` bytes a row, `index_bytes` an index) on the device: where the
/// GPU module's cost model (payload and indices over PCIe against the CPU's gather on
/// `cpu_threads` threads) says it is faster. Always false without the `gpu` feature.
pub fn device_gather_pays(rows: usize, payload_bytes_per_row: usize, index_bytes: usize, cpu_threads: usize) -> bool {
    #[cfg(feature = "gpu")]
    return super::gpu::gather_on_gpu_pays(rows, payload_bytes_per_row, index_bytes, cpu_threads);
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (rows, payload_bytes_per_row, index_bytes, cpu_threads);
        false
    }
}

/// Whether a command about to merge or sort `rows` rows in all starts the GPU now
/// ([`super::warm_up_gpu`]), so that its start-up overlaps reading the inputs: `Gpu`, or
/// `Auto` with at least `gpu_min_rows` rows (fewer never reach the GPU).
pub fn warm_up_pays(options: &EngineOptions, rows: usize) -> bool {
    options.engine == Engine::Gpu || (options.engine == Engine::Auto && rows >= options.gpu_min_rows)
}

/// Why a planned merge runs on the CPU alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuBecause {
    /// `Engine::Cpu`.
    Chosen,
    /// `Auto` and no usable GPU (the reason).
    NoUsableGpu(String),
    /// `Auto` and fewer rows in all than `gpu_min_rows`.
    BelowGpuMinRows,
}

/// The engine a merge or sort of `rows` rows in all would use, as far as it is known before
/// its first round (what a dry run prints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedEngine {
    /// Every round on the CPU.
    Cpu(CpuBecause),
    /// Every round on the GPU (`Gpu`, or `Auto` with a required GPU): the devices shown
    /// ([`super::gpu_devices_shown`]) and whether a GPU is required.
    Gpu { devices: String, required: bool },
    /// `Auto` with a usable GPU: rounds of `gpu_min_rows` rows and more on the GPU, smaller
    /// ones on the CPU; once both are timed, each round on the faster ([`AutoChoice`]).
    GpuAndCpu { devices: String },
}

/// [`PlannedEngine`] of `options` over `rows` rows. `Gpu` with an unusable device, and
/// `Auto` with a required GPU and none usable, are errors (as the merge itself would be).
pub fn planned_engine(options: &EngineOptions, rows: usize) -> Result<PlannedEngine> {
    let strict = gpu_required(options);
    Ok(match options.engine {
        Engine::Cpu => PlannedEngine::Cpu(CpuBecause::Chosen),
        Engine::Gpu => PlannedEngine::Gpu { devices: gpu_devices_shown(options.devices)?, required: false },
        Engine::Auto => match gpu_availability().and_then(|()| gpu_devices_shown(options.devices).map_err(|e| e.to_string())) {
            Err(why) if strict => return Err(Error::GpuUnavailable(why)),
            Err(why) => PlannedEngine::Cpu(CpuBecause::NoUsableGpu(why)),
            Ok(devices) if strict => PlannedEngine::Gpu { devices, required: true },
            Ok(_) if rows < options.gpu_min_rows => PlannedEngine::Cpu(CpuBecause::BelowGpuMinRows),
            Ok(devices) => PlannedEngine::GpuAndCpu { devices },
        },
    })
}

/// The GPU engine's options for `options`: its kernel and devices, the rest the GPU
/// engine's defaults. Every GPU merge, sort and gather corank runs is configured here.
#[cfg(feature = "gpu")]
pub(crate) fn gpu_options(options: &EngineOptions) -> super::gpu::GpuOptions {
    super::gpu::GpuOptions { kernel: options.kernel, devices: options.devices, ..super::gpu::GpuOptions::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_rules_agree_with_the_engine() {
        let auto = EngineOptions { gpu_min_rows: 100, ..EngineOptions::default().with_engine(Engine::Auto) };
        let required = EngineOptions { on_gpu_failure: OnGpuFailure::Error, ..auto };
        let cpu = auto.with_engine(Engine::Cpu);
        let gpu = auto.with_engine(Engine::Gpu);
        assert_eq!(
            (rounds_on_gpu(&cpu), rounds_on_gpu(&gpu), rounds_on_gpu(&auto), rounds_on_gpu(&required)),
            (Some(false), Some(true), None, Some(true))
        );
        assert!(first_round_on_cpu(&cpu, 1_000) && !first_round_on_cpu(&gpu, 1));
        assert!(first_round_on_cpu(&auto, 99) && !first_round_on_cpu(&auto, 100) && !first_round_on_cpu(&required, 1));
        assert!(chunk_on_cpu(&cpu, 1_000) && !chunk_on_cpu(&gpu, 1) && !chunk_on_cpu(&required, 1) && chunk_on_cpu(&auto, 99));
        assert!(warm_up_pays(&gpu, 0) && warm_up_pays(&auto, 100) && !warm_up_pays(&auto, 99) && !warm_up_pays(&cpu, 1_000));
        assert!(cpu_after_gpu_failure(&auto) && !cpu_after_gpu_failure(&required));
        assert!(!sorts_whole_on_device(&cpu, [&DataType::Int64]));
        assert!(!sorts_whole_on_device(&auto, [&DataType::Utf8]), "offset strings are not gathered on the device");
        assert!(!sorts_whole_on_device(&auto, []), "no columns");
        assert_eq!(planned_engine(&cpu, 5).unwrap(), PlannedEngine::Cpu(CpuBecause::Chosen));
    }
}

#[cfg(all(test, feature = "gpu"))]
mod gpu_tests {
    use super::super::gpu;
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

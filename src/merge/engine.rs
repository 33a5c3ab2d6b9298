//! The engine choice: CPU or GPU, and what happens when the GPU is missing or fails.
//!
//! - `Cpu`: the merge path on rayon threads.
//! - `Gpu`: the co-rank kernels; an error where no GPU is usable, or where the GPU fails.
//! - `Auto`: the GPU for inputs of at least [`GPU_MIN_KEYS`] keys when one is usable,
//!   else the CPU. A missing GPU and a GPU failure (out of memory, launch failure) fall back
//!   to the CPU with one log line, so no data is lost; `CORANK_REQUIRE_GPU=1` makes both an
//!   error instead (the GPU tests use it).

use super::cpu::merge_cpu;
use super::permutation::Indices;
use crate::error::{Error, Result};
use crate::gpu::{self, GpuOptions};
use crate::keys::KeyColumn;
use crate::with_key_column;
use std::sync::Once;

/// Below this many keys `Auto` stays on the CPU: the transfer and launch overheads are
/// not repaid (measured on the H200 machine, docs/PERFORMANCE.md).
pub const GPU_MIN_KEYS: usize = 1 << 20;

/// Which engine merges the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// The GPU where one is usable and the input is large enough, else the CPU.
    #[default]
    Auto,
    /// The merge path on rayon threads.
    Cpu,
    /// The co-rank kernels on the GPU; an error where no GPU is usable.
    Gpu,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::Auto => "auto",
            Engine::Cpu => "cpu",
            Engine::Gpu => "gpu",
        })
    }
}

impl std::str::FromStr for Engine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Engine::Auto),
            "cpu" => Ok(Engine::Cpu),
            "gpu" => Ok(Engine::Gpu),
            other => Err(Error::InvalidArgument(format!("unknown engine '{other}' (auto, cpu or gpu)"))),
        }
    }
}

/// Whether `CORANK_REQUIRE_GPU=1` forbids falling back to the CPU.
pub fn gpu_required() -> bool {
    std::env::var("CORANK_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

fn cpu(keys: &KeyColumn, run_offsets: &[usize]) -> (Indices, Engine) {
    (with_key_column!(keys, v => merge_cpu(v, run_offsets)), Engine::Cpu)
}

/// Merges sorted runs of keys with the chosen engine; returns the indices and the engine
/// that ran (`Cpu` or `Gpu`).
/// `gpu_min_keys`: below this many keys `Auto` stays on the CPU ([`GPU_MIN_KEYS`] by default).
pub fn merge_keys(keys: &KeyColumn, run_offsets: &[usize], engine: Engine, gpu_min_keys: usize) -> Result<(Indices, Engine)> {
    static NO_GPU: Once = Once::new();
    match engine {
        Engine::Cpu => Ok(cpu(keys, run_offsets)),
        Engine::Gpu => {
            gpu::availability().map_err(Error::GpuUnavailable)?;
            Ok((gpu::merge_keys(keys, run_offsets, &GpuOptions::default())?, Engine::Gpu))
        }
        Engine::Auto => {
            if let Err(why) = gpu::availability() {
                if gpu_required() {
                    return Err(Error::GpuUnavailable(format!("{why} (CORANK_REQUIRE_GPU=1)")));
                }
                NO_GPU.call_once(|| log::info!("corank: no usable GPU ({why}); merging on the CPU"));
                return Ok(cpu(keys, run_offsets));
            }
            if keys.len() < gpu_min_keys && !gpu_required() {
                return Ok(cpu(keys, run_offsets));
            }
            match gpu::merge_keys(keys, run_offsets, &GpuOptions::default()) {
                Ok(indices) => Ok((indices, Engine::Gpu)),
                Err(e) if !gpu_required() => {
                    log::warn!("corank: GPU merge failed ({e}); merging on the CPU instead");
                    Ok(cpu(keys, run_offsets))
                }
                Err(e) => Err(e),
            }
        }
    }
}

//! The engine choice.

use super::cpu::merge_cpu;
use super::permutation::Indices;
use crate::error::{Error, Result};
use crate::keys::KeyColumn;
use crate::with_key_column;

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

/// Merges sorted runs of keys with the chosen engine; returns the indices and the engine
/// that ran (`Cpu` or `Gpu`).
pub fn merge_keys(keys: &KeyColumn, run_offsets: &[usize], engine: Engine) -> Result<(Indices, Engine)> {
    match engine {
        Engine::Gpu => Err(Error::GpuUnavailable("this build of corank has no GPU engine yet".into())),
        Engine::Auto | Engine::Cpu => {
            Ok((with_key_column!(keys, v => merge_cpu(v, run_offsets)), Engine::Cpu))
        }
    }
}

//! Options as Python passes them (strings and numbers) into the library's types, parsed by
//! the library itself, so names and errors are the command line's.

use corank::{Devices, Engine, EngineOptions, Error, Kernel, OnGpuFailure, SortKey};
use pyo3::prelude::*;

/// The engine options every function takes: `engine`, `kernel`, `devices`,
/// `gpu_min_rows`, `on_gpu_failure`.
#[derive(FromPyObject, Debug, Clone)]
#[pyo3(from_item_all)]
pub struct EngineArgs {
    pub engine: String,
    pub kernel: String,
    pub devices: String,
    pub gpu_min_rows: usize,
    pub on_gpu_failure: String,
}

impl EngineArgs {
    pub fn options(&self) -> corank::Result<EngineOptions> {
        let on_gpu_failure = match self.on_gpu_failure.to_ascii_lowercase().as_str() {
            "cpu" | "use_cpu" => OnGpuFailure::UseCpu,
            "error" | "raise" => OnGpuFailure::Error,
            other => {
                return Err(Error::InvalidArgument(format!("unknown on_gpu_failure '{other}' (cpu, error)")));
            }
        };
        Ok(EngineOptions {
            engine: self.engine.parse::<Engine>()?,
            kernel: self.kernel.parse::<Kernel>()?,
            devices: self.devices.parse::<Devices>()?,
            gpu_min_rows: self.gpu_min_rows,
            on_gpu_failure,
        })
    }
}

/// The sort key from `by` (SQL `ORDER BY` syntax, as the command line's `--by`).
pub fn parse_by(by: &str) -> corank::Result<Vec<SortKey>> {
    corank::parquet::parse_order_by(by)
}

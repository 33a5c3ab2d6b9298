//! When the device gather pays, and what device memory it and a whole sort need: the cost
//! model of [`gather_on_gpu_pays`] (a line through measured device times against the CPU
//! gather's rate, [`H100_HOST`]) and the device byte budgets the engine's placement reads.

use super::super::context::{gpu, gpu_err};
use super::super::runtime::runtime;
use crate::Result;
use cudarc::driver::result;

/// What the device gather and the CPU gather cost on one host, for [`gather_on_gpu_pays`].
///
/// The device's time is a fixed cost plus the bytes that cross PCIe (up and down together:
/// the download of one column overlaps the upload of the next, so one combined rate fits
/// better than two); the CPU's is the output payload bytes over its gather rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatherCosts {
    /// Fixed cost of one device gather (launches, synchronization, the pipeline's first
    /// staging fill, array wrapping), ms.
    pub fixed_ms: f64,
    /// Bytes up plus bytes down per second, end to end (pageable payload through the pinned
    /// staging buffers, indices, results into pooled pinned memory), GB/s.
    pub moved_gbps: f64,
    /// The CPU gather's rate ([`crate::gather::gather`], arrow's `interleave` on
    /// `cpu_threads` threads), in output payload bytes per second, GB/s.
    pub cpu_gbps: f64,
    /// The threads `cpu_gbps` was measured with.
    pub cpu_threads: usize,
}

/// Measured on the H100 host (NVIDIA H100 80GB HBM3, 16 cores) with
/// `CORANK_BENCH_SECTIONS=gather cargo bench --bench gpu` (the measurements and how the
/// line was fitted: `docs/performance.md` and the performance log, "Device gather of
/// fixed-width payload columns"): 16 runs of 3 x u64 + nullable i32 permuted by their merge,
/// u32 indices. `fixed_ms` and `moved_gbps` are the line through the end-to-end device
/// times at the sizes around the crossover (1M and 16M rows); at larger sizes the device is
/// faster than this line, so the rule errs toward the CPU there, where the GPU wins anyway.
/// `cpu_gbps`: the CPU gather's rate at 16M and 64M rows. The device figures assume a warm
/// pinned pool: the first call's cold pinned allocation of a large output costs far more.
pub const H100_HOST: GatherCosts = GatherCosts { fixed_ms: 3.0, moved_gbps: 44.5, cpu_gbps: 11.3, cpu_threads: 16 };

impl GatherCosts {
    /// Milliseconds the device gather of `rows` output rows of `payload_bytes_per_row`
    /// fixed-width bytes takes from host memory: the payload up (as many input rows as output
    /// rows: a merge's permutation), `index_bytes` per row of indices up (0 where the indices
    /// are already on the device), the payload down.
    pub fn gpu_ms(&self, rows: usize, payload_bytes_per_row: usize, index_bytes: usize) -> f64 {
        let moved = (rows * (2 * payload_bytes_per_row + index_bytes)) as f64;
        self.fixed_ms + moved / (self.moved_gbps * 1e6)
    }

    /// Milliseconds the CPU gather of the same rows takes on `threads` threads (its rate
    /// scaled linearly below the measured thread count, not above: memory bandwidth, not
    /// cores, bounds it there).
    pub fn cpu_ms(&self, rows: usize, payload_bytes_per_row: usize, threads: usize) -> f64 {
        let scale = threads.clamp(1, self.cpu_threads) as f64 / self.cpu_threads as f64;
        (rows * payload_bytes_per_row) as f64 / (self.cpu_gbps * scale * 1e6)
    }
}

/// Whether gathering `rows` rows of `payload_bytes_per_row` fixed-width payload bytes (the
/// sum of the columns' `fixed_width`s; validity bitmaps add an eighth of a byte a column
/// and may be left out) on the GPU from host memory is faster than the CPU gather on
/// `cpu_threads` threads, by the costs measured on the H100 host ([`H100_HOST`]).
/// `index_bytes` is 4 or 8 for indices that must go up, 0 where the merge left them on the
/// device.
pub fn gather_on_gpu_pays(rows: usize, payload_bytes_per_row: usize, index_bytes: usize, cpu_threads: usize) -> bool {
    let c = &H100_HOST;
    rows > 0
        && payload_bytes_per_row > 0
        && c.gpu_ms(rows, payload_bytes_per_row, index_bytes) < c.cpu_ms(rows, payload_bytes_per_row, cpu_threads)
}

/// Device bytes a whole sort on the device needs ([`GatherOutput::Pageable`](super::GatherOutput::Pageable)'s use: the
/// sort, then the gather of every column): the sort's key words three times (input and the
/// merge tree's two intermediate buffers) and its indices twice, then the gather's indices
/// and every column's values in and out, plus 64 MiB of slack. `key_bytes` is the key
/// words' width (at most 32), `row_bytes` the columns' bytes per row (bitmaps included).
pub fn whole_sort_device_bytes(rows: usize, key_bytes: usize, row_bytes: usize) -> usize {
    let index_bytes = if rows > u32::MAX as usize { 8 } else { 4 };
    rows.saturating_mul(3 * key_bytes + 3 * index_bytes + 2 * row_bytes).saturating_add(64 << 20)
}

/// Bytes of device memory a sort and a gather on `device` may use now: the free memory, the
/// buffers the device's pool keeps for its sorts and merges (they reuse or release them),
/// and the gather's own buffer (replaced when too small).
pub fn device_bytes_available(device: usize) -> Result<usize> {
    let g = gpu(device)?;
    // The device's lock binds its context to this thread for the query below.
    let pooled = g.lock()?.pooled_bytes();
    let held = runtime().gather_buffer_bytes(device);
    let (free, _) = result::mem_get_info().map_err(gpu_err("reading free device memory"))?;
    Ok(free + pooled + held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_follows_the_costs() {
        assert!(!gather_on_gpu_pays(0, 8, 4, 16));
        let c = H100_HOST;
        for rows in [1 << 10, 1 << 20, 1 << 26] {
            let pays = gather_on_gpu_pays(rows, 28, 4, 16);
            assert_eq!(pays, c.gpu_ms(rows, 28, 4) < c.cpu_ms(rows, 28, 16));
        }
        // Fewer CPU threads never make the GPU less attractive.
        assert!(c.cpu_ms(1 << 20, 28, 2) > c.cpu_ms(1 << 20, 28, 16));
    }
}

//! `Engine::Auto`'s choice per round by measured speed: in a merge of many rounds (the
//! command line's), a round goes to the GPU only while the GPU's measured merge time per row
//! beats the CPU's.
//!
//! The policy, by round:
//! 0. While the GPU is still starting, a round left to `Auto` merges on the CPU
//!    ([`crate::engine::gpu_warming_up`]; the engine choice does that, not this policy) and
//!    counts as the CPU's.
//! 1. Until two rounds have merged on the GPU, `Auto` decides as for one merge
//!    (`gpu_min_rows`, a usable device). The first GPU round is not timed: it pays the
//!    device's first use (its staging buffers). The second is.
//! 2. Then one round merges on the CPU, timed.
//! 3. From then on each round goes to the engine with the lower time per row, and every
//!    [`PROBE_EVERY`]th round to the other one, so that a change in the rounds (their size,
//!    the machine's load) is seen. An engine's time per row is the mean of its last timed
//!    round and its earlier mean.
//!
//! What is timed is the round's merge (keys encoded, merged, indices back on the host); the
//! gather after it is the same on either engine. A round forced to the CPU only means
//! [`crate::frontier::RoundInput::on_cpu`]; a round left to `Auto` may still merge on the CPU
//! (below `gpu_min_rows`, no usable GPU), and is counted as the CPU's.

use crate::options::{Engine, EngineOptions, OnGpuFailure};
use std::time::Duration;

/// Every this many rounds, one goes to the engine that measured slower.
pub const PROBE_EVERY: usize = 16;

/// The measured times and the choice of [`Engine::Auto`] across the rounds of one merge.
#[derive(Debug, Default)]
pub struct AutoChoice {
    /// Whether the choice applies (see [`AutoChoice::new`]).
    active: bool,
    /// Rounds merged so far, and those on the GPU.
    rounds: usize,
    gpu_rounds: usize,
    /// Nanoseconds per row of each engine's merges (see the module doc).
    cpu_ns_per_row: Option<f64>,
    gpu_ns_per_row: Option<f64>,
    /// The engine the last choice preferred (for one log line per change).
    preferred: Option<Engine>,
}

impl AutoChoice {
    /// The choice for a merge with `options`: it steers `Auto` only, and not where a GPU is
    /// required (`OnGpuFailure::Error`: every round then goes to the GPU, as `Auto` does).
    pub fn new(options: &EngineOptions) -> Self {
        Self { active: options.engine == Engine::Auto && options.on_gpu_failure != OnGpuFailure::Error, ..Self::default() }
    }

    /// Whether the next round must merge on the CPU; otherwise it merges as the merge's
    /// options say.
    pub fn cpu_next(&mut self) -> bool {
        if !self.active || self.gpu_rounds < 2 {
            return false;
        }
        let (Some(cpu), Some(gpu)) = (self.cpu_ns_per_row, self.gpu_ns_per_row) else {
            return true; // the CPU not timed yet
        };
        let preferred = if cpu <= gpu { Engine::Cpu } else { Engine::Gpu };
        if self.preferred != Some(preferred) {
            let name = preferred.name().to_uppercase();
            log::info!("corank: engine auto: rounds go to the {name} ({cpu:.2} ns a row merged on the CPU, {gpu:.2} on the GPU)");
            self.preferred = Some(preferred);
        }
        let probe = self.rounds % PROBE_EVERY == PROBE_EVERY - 1;
        (preferred == Engine::Cpu) != probe
    }

    /// Records a merged round: the engine that merged it, its rows and its merge time.
    pub fn record(&mut self, engine: Engine, rows: usize, took: Duration) {
        self.rounds += 1;
        if !self.active || rows == 0 {
            return;
        }
        let ns = took.as_nanos() as f64 / rows as f64;
        let mean = match engine {
            Engine::Gpu => {
                self.gpu_rounds += 1;
                if self.gpu_rounds == 1 {
                    return; // the device's first use
                }
                &mut self.gpu_ns_per_row
            }
            _ => &mut self.cpu_ns_per_row,
        };
        *mean = Some(mean.map_or(ns, |m| (m + ns) / 2.0));
    }

    /// Nanoseconds per row of the CPU's and the GPU's merges so far (`None`: not timed).
    #[cfg(test)]
    pub fn ns_per_row(&self) -> (Option<f64>, Option<f64>) {
        (self.cpu_ns_per_row, self.gpu_ns_per_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> AutoChoice {
        AutoChoice::new(&EngineOptions::default().with_engine(Engine::Auto))
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Runs `rounds` rounds of 1M rows, each merged on the engine the choice gives (a GPU
    /// merge taking `gpu_ms`, a CPU one `cpu_ms`); the engines in order.
    fn drive(choice: &mut AutoChoice, rounds: usize, cpu_ms: u64, gpu_ms: u64) -> Vec<Engine> {
        (0..rounds)
            .map(|_| {
                let engine = if choice.cpu_next() { Engine::Cpu } else { Engine::Gpu };
                choice.record(engine, 1 << 20, ms(if engine == Engine::Cpu { cpu_ms } else { gpu_ms }));
                engine
            })
            .collect()
    }

    #[test]
    fn a_faster_gpu_gets_the_rounds_but_every_sixteenth() {
        let mut choice = auto();
        let engines = drive(&mut choice, 40, 30, 10);
        // Two GPU rounds (one untimed), one CPU round, then the GPU but for the probes.
        assert_eq!(&engines[..3], [Engine::Gpu, Engine::Gpu, Engine::Cpu]);
        let cpu_rounds: Vec<usize> = (3..40).filter(|&r| engines[r] == Engine::Cpu).collect();
        assert_eq!(cpu_rounds, [15, 31]);
    }

    #[test]
    fn a_slower_gpu_gets_only_the_probes() {
        let mut choice = auto();
        let engines = drive(&mut choice, 40, 10, 30);
        let gpu_rounds: Vec<usize> = (0..40).filter(|&r| engines[r] == Engine::Gpu).collect();
        assert_eq!(gpu_rounds, [0, 1, 15, 31]);
        let (cpu, gpu) = choice.ns_per_row();
        assert!(cpu.unwrap() < gpu.unwrap());
    }

    #[test]
    fn the_first_gpu_round_is_not_timed() {
        let mut choice = auto();
        choice.record(Engine::Gpu, 1000, ms(500)); // the device's first use
        choice.record(Engine::Gpu, 1000, ms(1));
        assert!(choice.cpu_next(), "the CPU is timed once");
        choice.record(Engine::Cpu, 1000, ms(2));
        assert!(!choice.cpu_next(), "the GPU measured faster, its first round aside");
        assert_eq!(choice.ns_per_row(), (Some(2000.0), Some(1000.0)));
    }

    #[test]
    fn the_choice_follows_a_change_seen_by_a_probe() {
        let mut choice = auto();
        drive(&mut choice, 20, 30, 10);
        // The GPU gets slow (a shared device): its next round (20) shows it, the CPU takes
        // over, the GPU keeps only its probe (round 31).
        let engines = drive(&mut choice, 20, 30, 200);
        let gpu: Vec<usize> = (0..20).filter(|&r| engines[r] == Engine::Gpu).map(|r| r + 20).collect();
        assert_eq!(gpu, [20, 31]);
    }

    #[test]
    fn only_auto_without_a_required_gpu_is_steered() {
        let required = EngineOptions { on_gpu_failure: OnGpuFailure::Error, ..EngineOptions::default() };
        for options in [EngineOptions::default().with_engine(Engine::Cpu), EngineOptions::default().with_engine(Engine::Gpu), required] {
            let mut choice = AutoChoice::new(&options);
            assert!(drive(&mut choice, 20, 10, 30).iter().all(|&e| e == Engine::Gpu), "{options}: cpu_next is never true");
        }
        // No usable GPU: every round merges on the CPU as Auto decides, none is forced.
        let mut choice = auto();
        for _ in 0..20 {
            assert!(!choice.cpu_next());
            choice.record(Engine::Cpu, 100, ms(1));
        }
    }
}

//! The values of Ballista's policy flags, as its binaries spell them. Ballista's own enums
//! parse from the command line only when Ballista is built with its `build-binary` feature,
//! which this crate does not turn on (it would rebuild Ballista with its binaries' logging
//! and allocator crates).

use ballista_core::config::TaskSchedulingPolicy;
use ballista_scheduler::config::TaskDistributionPolicy;
use clap::ValueEnum;

/// `--scheduler-policy` / `--task-scheduling-policy`: scheduler and executors must agree.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum SchedulingPolicy {
    /// Executors poll the scheduler for tasks.
    PullStaged,
    /// The scheduler sends tasks to executors (Ballista's default).
    #[default]
    PushStaged,
}

impl From<SchedulingPolicy> for TaskSchedulingPolicy {
    fn from(p: SchedulingPolicy) -> Self {
        match p {
            SchedulingPolicy::PullStaged => TaskSchedulingPolicy::PullStaged,
            SchedulingPolicy::PushStaged => TaskSchedulingPolicy::PushStaged,
        }
    }
}

/// `--task-distribution`: how the scheduler hands tasks to executors' free slots.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum TaskDistribution {
    /// Fill one executor's slots before the next one's (Ballista's default).
    #[default]
    Bias,
    /// One task to each executor in turn.
    RoundRobin,
}

impl From<TaskDistribution> for TaskDistributionPolicy {
    fn from(d: TaskDistribution) -> Self {
        match d {
            TaskDistribution::Bias => TaskDistributionPolicy::Bias,
            TaskDistribution::RoundRobin => TaskDistributionPolicy::RoundRobin,
        }
    }
}

//! Engines: the co-rank reference, the CPU engine, and the choice between CPU and GPU.

pub mod co_rank;
pub mod cpu;
pub mod permutation;

pub use co_rank::{co_rank, co_rank_k};
pub use cpu::merge_cpu;
pub use permutation::{Indices, Permutation};

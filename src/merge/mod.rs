//! Engines: the co-rank reference, the CPU engine, the engine choice, and the exact
//! resolution of key ties.

pub mod check;
pub mod co_rank;
pub mod cpu;
pub mod engine;
pub mod permutation;
pub mod ties;

pub use co_rank::{co_rank, co_rank_k};
pub use cpu::merge_cpu;
pub use engine::{merge_keys, Engine};
pub use permutation::{Indices, Permutation};

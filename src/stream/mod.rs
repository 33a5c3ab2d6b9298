//! Bounded-memory streaming merge of sorted inputs that arrive batch by batch.

mod frontier;

pub use frontier::{FrontierMerge, MergedChunk, MergedRound, StreamOptions};

//! Sort-key encoding (spec to follow).
mod word;
pub use word::{KeyColumn, KeyWord};

//! The order beyond the key words: the optional check that every run is sorted, and the
//! exact resolution of rows whose key words tie but whose sort values may differ.

pub mod check;
pub mod ties;

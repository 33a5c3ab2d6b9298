//! The `corank` binary end to end (`merge`, `sort`, what pipelines need), and the
//! regressions of real-world input files. One test binary of three (see `tests/merge/main.rs`).

mod bench;
mod cli_common;
#[path = "../common/mod.rs"]
mod common;
mod corrupt_common;
#[path = "../../src/cli/datagen.rs"]
mod datagen;

mod fault_proxy;
mod fuzz_corrupt;
mod hive;
mod merge;
mod pipeline;
mod regress;
mod regress_corrupt;
mod regress_dictionary;
mod regress_files;
mod regress_hostile;
mod regress_types;
#[path = "../../src/show_bytes.rs"]
mod show_bytes;
mod sort;
mod sort_hostile;
pub mod split;
mod store;
mod store_faults;
mod store_passthrough;

//! The DataFusion nodes (`CoRankMergeExec`, `CoRankSortExec`): on in-memory partitions, over
//! sorted Parquet files and row groups, through SQL, the proto codec and registration, and
//! in Ballista (with the `ballista` feature). One test binary of four (see
//! `tests/merge/main.rs`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../../src/cli/datagen.rs"]
mod datagen;

#[cfg(feature = "ballista")]
mod ballista;
#[cfg(feature = "ballista")]
mod ballista_cluster;
#[cfg(feature = "distributed")]
mod distributed;
mod exec;
mod foreign_rule;
mod many_runs;
mod misordered;
mod pipeline;
mod proto;
mod registration;
mod row_groups;
mod sort;
mod sql;
mod store;

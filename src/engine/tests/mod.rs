//! The engine from the inside: the co-rank reference on the book's examples, the GPU kernels
//! against the CPU engine (every kernel, key width and shape), the CPU merge of sorted
//! inputs against brute force, the sort, the device gather,
//! start-up and the kernel cache, and GPU rounds in the DataFusion nodes. The GPU cases skip
//! without a GPU (a line on stderr) unless `CORANK_REQUIRE_GPU=1` (the GPU machine sets it:
//! `bash .gpu/remote test`); `CORANK_GPU_SMALL=1` keeps only the small cases (the
//! compute-sanitizer runs).

#[cfg(feature = "gpu")]
mod cache;
mod co_rank;
#[cfg(feature = "gpu")]
mod devices;
#[cfg(feature = "gpu")]
mod gather;
#[cfg(feature = "gpu")]
mod kernels;
mod merge;
#[cfg(all(feature = "gpu", feature = "datafusion"))]
mod rounds;
mod sort;
#[cfg(feature = "gpu")]
#[allow(dead_code)] // each module uses a part
pub(crate) mod support;

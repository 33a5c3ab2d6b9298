//! What the GPU machine runs (`bash .gpu/remote test`, with `CORANK_REQUIRE_GPU=1`): the
//! kernels against the CPU engine, the public API, start-up and the kernel cache, the device
//! gather, GPU rounds in the DataFusion nodes, and the sort. Without a GPU the GPU cases skip
//! (a line on stderr) and the CPU ones run. One test binary of four (see
//! `tests/merge/main.rs`).

#[path = "../common/mod.rs"]
mod common;
#[cfg(feature = "gpu")]
#[path = "../common/gpu.rs"]
#[allow(dead_code)] // each module uses a part
mod gpu_common;

mod api;
#[cfg(feature = "gpu")]
mod cache;
#[cfg(feature = "gpu")]
mod gather;
#[cfg(feature = "gpu")]
mod kernels;
#[cfg(all(feature = "gpu", feature = "datafusion"))]
mod rounds;
mod sort;

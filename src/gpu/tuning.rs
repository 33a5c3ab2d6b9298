//! Every tuning constant of the GPU engine, in one place.
//!
//! Threads per block and items per thread (thread coarsening) per kernel and key width. A
//! tile is `THREADS * IPT` outputs; shared memory per block is a tile (or two) of keys plus
//! indices, so wider keys get fewer items per thread to stay within the per-block limit and
//! leave room for several blocks per multiprocessor.

/// Threads per block, every kernel.
pub const THREADS: u32 = 256;

/// Items per thread (and circular-buffer geometry) for one key width.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    pub ipt_basic: u32,
    pub ipt_tiled: u32,
    /// Items per thread of the circular kernel; its buffers hold `THREADS * ipt_circ` slots
    /// (a power of two) each for A and B.
    pub ipt_circ: u32,
    /// Tiles per block of the circular kernel (the section it streams through its buffers).
    pub circ_tiles: u32,
    pub ipt_kway: u32,
}

/// The tuning for keys of `key_bytes` bytes.
pub fn tuning(key_bytes: usize) -> Tuning {
    match key_bytes {
        4 | 8 => Tuning { ipt_basic: 4, ipt_tiled: 8, ipt_circ: 4, circ_tiles: 8, ipt_kway: 4 },
        _ => Tuning { ipt_basic: 4, ipt_tiled: 4, ipt_circ: 2, circ_tiles: 8, ipt_kway: 4 },
    }
}

/// The k-way partition runs in two passes: a coarse one every `KWAY_COARSE` tiles over
/// whole runs, then every tile boundary within the windows the coarse splits leave.
pub const KWAY_COARSE: u32 = 32;

/// Bytes of each pinned staging buffer (two of them, used alternately) for host transfers.
pub const STAGE_BYTES: usize = 64 << 20;

/// Chunks the last level is cut into so the download of one overlaps the merge of the next.
pub const DOWNLOAD_CHUNKS: usize = 8;

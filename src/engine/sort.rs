//! The sort engine: a stable sort of key words built from the co-rank merge, in two levels.
//!
//! 1. **Tiles.** The keys are cut into tiles of [`SORT_TILE`] consecutive rows (the last one
//!    shorter) and every tile is sorted on its own, in parallel on rayon threads: the pairs
//!    (key, input position) are sorted by key, then position, so equal keys keep their input
//!    order within the tile. The GPU sort ([`super::gpu`], cuda/sort_tiles.cu) sorts tiles
//!    one per thread block in shared memory, then merges them with the same tree on the
//!    device.
//! 2. **Merge tree.** The sorted tiles are runs: the merge tree of the CPU engine
//!    ([`super::cpu`], stable pairwise merges of adjacent runs found by co-rank) merges them,
//!    starting from the tiles' positions instead of identity indices.
//!
//! **Stability.** Within a tile ties are ordered by input position; the merge gives ties to
//! the earlier run, and every row of an earlier tile precedes every row of a later one in the
//! input. So the result is the stable sort: for every output row the input position, equal
//! keys in input order. The tile size changes only the speed, never the result.

use super::cpu::{merge_runs, RowIndex};
use crate::cancel::{is_set, Cancel};
use crate::error::Result;
use crate::keys::{KeyColumn, KeyWord};
use crate::options::{Engine, EngineOptions};
use crate::permutation::Indices;
use crate::with_key_column;
use rayon::prelude::*;
use std::borrow::Cow;

/// Rows per tile of the CPU tile level, a power of two (the GPU's tile is its policy's,
/// `Policy::sort_tile`). The tile size changes only the speed: tiles from 1024 to 16384
/// rows measured close to each other (`docs/performance.md`). 4096 is the largest tile whose
/// keys and `u32` positions fit one block's shared memory for every key width (32-byte
/// keys: 4096 x 36 B = 144 KiB, under the 227 KiB of an H100/H200 block; 8192 would need
/// 288 KiB).
pub const SORT_TILE: usize = 4096;

/// The stable sort of `keys`: for every output row, the input position of its key (equal
/// keys in input order). `u32` indices while the count fits, `u64` beyond.
pub fn sort_cpu<T: KeyWord>(keys: &[T]) -> Indices {
    sort_cpu_with_tile(keys, SORT_TILE)
}

/// [`sort_cpu`] with tiles of `tile` rows (at least 1) instead of [`SORT_TILE`]: the same
/// result, at another speed. For measurements, and for tests that want many merge levels
/// on few keys.
#[doc(hidden)]
pub fn sort_cpu_with_tile<T: KeyWord>(keys: &[T], tile: usize) -> Indices {
    sort_cpu_until(keys, tile, None)
}

/// [`sort_cpu_with_tile`] that stops early once `cancel` is set (tiles not yet sorted are
/// skipped, no further merge level starts): its indices are then not in order, and the
/// caller checks the token after.
fn sort_cpu_until<T: KeyWord>(keys: &[T], tile: usize, cancel: Option<&Cancel>) -> Indices {
    if keys.len() <= u32::MAX as usize {
        Indices::U32(sort_tiles::<T, u32>(keys, tile.max(1), cancel))
    } else {
        Indices::U64(sort_tiles::<T, u64>(keys, tile.max(1), cancel))
    }
}

fn sort_tiles<T: KeyWord, I: RowIndex>(keys: &[T], tile: usize, cancel: Option<&Cancel>) -> Vec<I> {
    let n = keys.len();
    let mut sorted: Vec<T> = vec![T::default(); n];
    let mut idx: Vec<I> = vec![I::default(); n];
    // 1. Every tile sorted as (key, position) pairs in a scratch buffer per task. The
    //    positions are distinct, so the unstable sort of the pairs is the stable sort by key
    //    (and faster than a stable sort of the pairs by key alone).
    sorted.par_chunks_mut(tile).zip(idx.par_chunks_mut(tile)).enumerate().for_each_init(
        || Vec::with_capacity(tile),
        |pairs: &mut Vec<(T, I)>, (t, (out_k, out_i))| {
            if is_set(cancel) {
                return;
            }
            let base = t * tile;
            pairs.clear();
            pairs.extend(keys[base..base + out_k.len()].iter().enumerate().map(|(i, &k)| (k, I::from_usize(base + i))));
            pairs.sort_unstable();
            for ((k, i), &(pk, pi)) in out_k.iter_mut().zip(out_i.iter_mut()).zip(pairs.iter()) {
                *k = pk;
                *i = pi;
            }
        },
    );
    // 2. The tiles are sorted runs: merge them, carrying their positions.
    let offsets: Vec<usize> = (0..n).step_by(tile).chain(std::iter::once(n)).collect();
    merge_runs::<T, I, true>(Cow::Owned(sorted), idx, &offsets, cancel)
}

/// Sorts keys with the chosen engine (the choice of `super::placement::choose_engine`: `gpu_min_rows`,
/// the fallback to the CPU by `OnGpuFailure`); returns the indices (for every output row its
/// input position, stable) and the engine that ran. Both engines return the same indices.
///
/// Stops with [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is set: the CPU
/// sort looks at it between tiles and between merge levels (a level of 10M keys takes tens
/// of milliseconds); the GPU sort, short, runs to its end.
pub fn sort_keys(keys: &KeyColumn, options: &EngineOptions, cancel: Option<&Cancel>) -> Result<(Indices, Engine)> {
    crate::cancel::check(cancel)?;
    let cpu = || with_key_column!(keys, v => sort_cpu_until(v, SORT_TILE, cancel));
    let sorted = super::placement::choose_engine(options, keys.len(), "sorting", cpu, || super::sort_on_gpu(keys, options))?;
    // A sort cut short returned indices out of order: they never leave.
    crate::cancel::check(cancel)?;
    Ok(sorted)
}

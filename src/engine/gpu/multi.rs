//! A merge split across several GPUs.
//!
//! 1. **Grid of devices.** The output is cut into one contiguous range per device by k-way
//!    co-rank on the host's keys ([`split_output`]): range `d` takes run `r`'s rows
//!    `cuts[d][r]..cuts[d + 1][r]`, and their stable merge in run order is exactly that range
//!    of the whole merge (ties go to the earlier run on both sides of a cut).
//! 2. **Per device**, on its own host thread: only its slices go up (over its own PCIe link,
//!    so the host path scales with the number of links), concatenated; the same kernels merge
//!    them ([`merge::merge_part`]); the indices, positions in that concatenation, are made
//!    global on the device after each chunk of the last level (cuda/rebase.cu); the download
//!    writes the device's range of the one output.
//! 3. A range whose rows all come from one run needs no device: its indices are consecutive
//!    and the host writes them.
//!
//! The same cut serves a merge too large for one device's memory: its ranges are merged one
//! after another on that device ([`merge_in_pieces`]).
//!
//! A device that fails makes the whole merge an error naming that device (the engine choice
//! above falls back to the CPU where the options ask for it); the other devices finish their
//! parts first, so nothing is left running.

use super::context::{device_count, gpu};
use super::merge::{self, key_bytes, Part};
use super::GpuOptions;
use crate::engine::co_rank::split_output;
use crate::keys::KeyColumn;
use crate::options::Devices;
use crate::{with_key_column, Error, Result};
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// The device ordinals `devices` names, each present (an absent one is
/// `Error::GpuUnavailable` naming it).
pub(crate) fn resolve_devices(devices: Devices) -> Result<Vec<usize>> {
    let present = match devices {
        Devices::All => device_count()?,
        _ => 0,
    };
    let ordinals = devices.ordinals(present);
    if ordinals.is_empty() {
        return Err(Error::GpuUnavailable("no CUDA device".into()));
    }
    for &d in &ordinals {
        gpu(d)?; // creates the context, or says why the device is unusable
    }
    Ok(ordinals)
}

/// `e` with the device named, where its message does not name one yet.
pub(crate) fn on_device(device: usize, e: Error) -> Error {
    let name = |m: String| if m.starts_with("CUDA device") { m } else { format!("CUDA device {device}: {m}") };
    match e {
        Error::Gpu(m) => Error::Gpu(name(m)),
        Error::GpuUnavailable(m) => Error::GpuUnavailable(name(m)),
        other => other,
    }
}

/// Stable merge of the runs split across `devices` (at least two), identical to the
/// single-device and CPU merges.
/// The indices (u64 where `wide`, else u32) go into `dst`, the bytes of `keys.len()` of them,
/// written whole when this returns Ok.
pub(crate) fn merge_split(
    keys: &KeyColumn,
    run_offsets: &[usize],
    devices: &[usize],
    options: &GpuOptions,
    dst: &mut [MaybeUninit<u8>],
    wide: bool,
) -> Result<()> {
    let ib = if wide { 8 } else { 4 };
    let kb = keys.key_bytes();
    let cuts = with_key_column!(keys, v => split_output(v, run_offsets, devices.len()));
    let bytes = key_bytes(keys);
    // 1. Each device's range of the output, as disjoint byte slices.
    let ranges = output_ranges(dst, &cuts, ib);
    // 2. Every device on its own thread; the host ranges meanwhile.
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .into_iter()
            .enumerate()
            .map(|(d, dst)| {
                let (lo, hi) = (&cuts[d], &cuts[d + 1]);
                let device = devices[d];
                scope.spawn(move || {
                    merge_range(device, bytes, kb, run_offsets, lo, hi, wide, dst, options).map_err(|e| on_device(device, e))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::Internal("a device thread panicked".into())))).collect()
    });
    // Every range returned Ok, so each wrote all of its bytes, and the ranges tile `dst`
    // (their lengths sum to n elements: the cuts' last entry is every row).
    results.into_iter().collect()
}

/// The merge cut by co-rank into `pieces` output ranges, merged one after another on
/// `device`: a merge that needs more device memory than it may use (`merge::merge_into`).
/// Each piece is a part as a device of a split merge gets it (its slices up, its indices
/// made global on the device), and reuses the pooled buffers of the piece before.
pub(crate) fn merge_in_pieces(
    keys: &KeyColumn,
    run_offsets: &[usize],
    device: usize,
    pieces: usize,
    options: &GpuOptions,
    dst: &mut [MaybeUninit<u8>],
    wide: bool,
) -> Result<()> {
    let kb = keys.key_bytes();
    let cuts = with_key_column!(keys, v => split_output(v, run_offsets, pieces));
    let bytes = key_bytes(keys);
    for (p, range) in output_ranges(dst, &cuts, if wide { 8 } else { 4 }).into_iter().enumerate() {
        merge_range(device, bytes, kb, run_offsets, &cuts[p], &cuts[p + 1], wide, range, options)?;
    }
    Ok(())
}

/// `dst` cut into the output ranges of `cuts` (as [`split_output`] makes them) as disjoint
/// byte slices, for indices of `ib` bytes.
fn output_ranges<'a>(dst: &'a mut [MaybeUninit<u8>], cuts: &[Vec<usize>], ib: usize) -> Vec<&'a mut [MaybeUninit<u8>]> {
    let mut ranges = Vec::with_capacity(cuts.len().saturating_sub(1));
    let mut rest = dst;
    for w in cuts.windows(2) {
        let len: usize = w[1].iter().zip(&w[0]).map(|(hi, lo)| hi - lo).sum();
        let (range, tail) = rest.split_at_mut(len * ib);
        ranges.push(range);
        rest = tail;
    }
    ranges
}

/// Merges run `r`'s rows `lo[r]..hi[r]` for every run into `dst` (global indices of width
/// `wide`) on `device`, or on the host where they come from one run.
#[allow(clippy::too_many_arguments)]
fn merge_range(
    device: usize,
    bytes: &[u8],
    kb: usize,
    run_offsets: &[usize],
    lo: &[usize],
    hi: &[usize],
    wide: bool,
    dst: &mut [MaybeUninit<u8>],
    options: &GpuOptions,
) -> Result<()> {
    // The non-empty slices: their bytes, local bounds and rebase deltas.
    let (mut srcs, mut bounds, mut delta) = (Vec::new(), vec![0u64], Vec::new());
    for r in 0..lo.len() {
        if hi[r] > lo[r] {
            let global = run_offsets[r] + lo[r];
            srcs.push(&bytes[global * kb..(run_offsets[r] + hi[r]) * kb]);
            delta.push(global as u64 - bounds.last().unwrap());
            bounds.push(bounds.last().unwrap() + (hi[r] - lo[r]) as u64);
        }
    }
    let n = *bounds.last().unwrap() as usize;
    if srcs.len() <= 1 {
        // 3. Zero or one run: consecutive global indices from the run's first row.
        write_consecutive(dst, delta.first().copied().unwrap_or(0), wide);
        return Ok(());
    }
    let part = Part { srcs: &srcs, key_bytes: kb, n, bounds, wide_indices: wide, rebase: Some(delta) };
    merge::merge_part(gpu(device)?, &part, dst, options)
}

/// Writes `first, first + 1, ..` into `dst` (indices of 8 bytes when `wide`, else 4), on
/// all cores.
pub(crate) fn write_consecutive(dst: &mut [MaybeUninit<u8>], first: u64, wide: bool) {
    const CHUNK: usize = 1 << 16; // indices per task
    let ib = if wide { 8 } else { 4 };
    dst.par_chunks_mut(CHUNK * ib).enumerate().for_each(|(c, chunk)| {
        let base = first + (c * CHUNK) as u64;
        for (i, el) in chunk.chunks_exact_mut(ib).enumerate() {
            let v = base + i as u64;
            if wide {
                el.copy_from_slice(&v.to_ne_bytes().map(MaybeUninit::new));
            } else {
                el.copy_from_slice(&(v as u32).to_ne_bytes().map(MaybeUninit::new));
            }
        }
    });
}

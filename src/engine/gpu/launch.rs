//! The typed launcher: the only kernel launch in the crate. An entry point's arguments are
//! an [`Args`] variant, checked against the manifest's parameter list for that entry point
//! before the launch, so a launch can never hand a kernel the wrong parameters. Block size
//! and dynamic shared memory come from the module (its policy, the manifest).

use super::context::gpu_err;
use super::manifest::{Entry, Params};
use super::nvrtc::Module;
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::mem::{align_of, offset_of, size_of};

/// A device address as the kernels take it (`const Key *`, `u64 *`, ...).
pub(crate) type DevPtr = sys::CUdeviceptr;

/// The kernels' `Level` (cuda/common.cuh), field for field: passed by value to every
/// entry point.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct LevelArg {
    pub in_keys: DevPtr,
    /// 0 on the first level: an element's index is its position.
    pub in_idx: DevPtr,
    /// 0 on the last level: only indices are written.
    pub out_keys: DevPtr,
    pub out_idx: DevPtr,
    pub bounds: DevPtr,
    pub tile_start: DevPtr,
    /// Added to `blockIdx.x` (the last level is launched in chunks).
    pub block_offset: u64,
    pub nruns: u32,
    pub group: u32,
    pub ngroups: u32,
    /// The CUDA struct's tail padding (its size is a multiple of its 8-byte alignment).
    pub _pad: u32,
}

// The layout cuda/common.cuh asserts for `Level` (static_assert there, the same numbers).
const _: () = {
    assert!(size_of::<LevelArg>() == 72);
    assert!(align_of::<LevelArg>() == 8);
    assert!(offset_of!(LevelArg, in_keys) == 0);
    assert!(offset_of!(LevelArg, in_idx) == 8);
    assert!(offset_of!(LevelArg, out_keys) == 16);
    assert!(offset_of!(LevelArg, out_idx) == 24);
    assert!(offset_of!(LevelArg, bounds) == 32);
    assert!(offset_of!(LevelArg, tile_start) == 40);
    assert!(offset_of!(LevelArg, block_offset) == 48);
    assert!(offset_of!(LevelArg, nruns) == 56);
    assert!(offset_of!(LevelArg, group) == 60);
    assert!(offset_of!(LevelArg, ngroups) == 64);
};

/// The arguments of one launch, one variant per parameter list of the manifest
/// ([`Params`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Args {
    /// `merge_basic`, `merge_circular`.
    Level(LevelArg),
    /// `merge_tiled_*`, `merge_kway`: the level and the partition's splits.
    LevelSplits(LevelArg, DevPtr),
    /// `partition_2way`: splits out, boundary count, tile size.
    Partition2Way { level: LevelArg, splits: DevPtr, boundaries: u64, tile: u64 },
    /// `partition_kway_coarse`: coarse splits out, their count, the coarse table.
    PartitionKWayCoarse { level: LevelArg, coarse: DevPtr, count: u64, coarse_start: DevPtr },
    /// `partition_kway`: splits out, boundary count, the coarse splits and table.
    PartitionKWay { level: LevelArg, splits: DevPtr, boundaries: u64, coarse: DevPtr, coarse_start: DevPtr },
    /// `gather_values_i32/i64`: `n` values of `width` bytes from `src` to `dst` by the
    /// indices at `idx` (u64 when `wide`), `total` input values, the error word.
    GatherValues { src: DevPtr, dst: DevPtr, idx: DevPtr, n: u64, total: u64, width: u32, error: DevPtr, wide: bool },
    /// `gather_validity_i32/i64`: the bitmap of `n` outputs into `out` (u32 words) from
    /// `bits` and the run table `runs` of `nruns` runs (cuda/gather.cu).
    GatherValidity { bits: DevPtr, runs: DevPtr, nruns: u32, out: DevPtr, idx: DevPtr, n: u64, total: u64, error: DevPtr, wide: bool },
    /// `gather_rebase_views_i32/i64`: the `n` gathered views at `views` made to name the
    /// output's buffers, by the run table `runs` of `nruns` runs (cuda/gather.cu).
    RebaseViews { views: DevPtr, runs: DevPtr, nruns: u32, idx: DevPtr, n: u64, total: u64, wide: bool },
    /// `rebase_indices`: indices `[begin, end)` at `idx` made global by the slice table
    /// `bounds` / `delta` of `nruns` slices (cuda/rebase.cu).
    RebaseIndices { idx: DevPtr, begin: u64, end: u64, bounds: DevPtr, delta: DevPtr, nruns: u32 },
    /// `sort_tiles`: the `n` keys at `keys` sorted in place tile by tile, their input
    /// positions to `idx` (cuda/sort_tiles.cu).
    SortTiles { keys: DevPtr, idx: DevPtr, n: u64 },
    /// `parquet_decode_pages`: the `npages` data pages described at `pages` (an array of
    /// `parquet_decode::DecodePageArg`) decoded from the `input_len` bytes at `input`, a
    /// fault code a page to `errors` (cuda/parquet_decode.cu).
    DecodePages { input: DevPtr, input_len: u64, pages: DevPtr, npages: u32, errors: DevPtr },
    /// `encode_fixed_keys`: the keys of `rows` rows from the `nfields` fields at `fields`
    /// (an array of `key_job::KeyFieldArg`), `words` u64s a key to `out` (a u32 a key when
    /// `words` is 0) (cuda/key_encode.cu).
    EncodeKeys { fields: DevPtr, nfields: u32, rows: u64, out: DevPtr, words: u32 },
    /// `gather_byte_lengths_i32/i64`: each of the `n` outputs' length to `lens` (u64s), from
    /// the segment table `segs` (an array of `resident_job::ByteSegmentArg`) and its
    /// `starts` (cuda/gather_bytes.cu).
    GatherByteLengths { segs: DevPtr, starts: DevPtr, nsegs: u32, idx: DevPtr, n: u64, total: u64, lens: DevPtr, error: DevPtr, wide: bool },
    /// `scan_blocks_u64`: the `n` u64s at `data` scanned in place a tile a block, each
    /// tile's total to `sums`.
    ScanBlocks { data: DevPtr, n: u64, sums: DevPtr },
    /// `scan_add_u64`: each tile's start in `sums` added to its items.
    ScanAdd { data: DevPtr, n: u64, sums: DevPtr },
    /// `gather_byte_copy_i32/i64`: each output's bytes to `values` at its start in
    /// `out_starts`, its offset (`offset_width` bytes) to `offsets`, and the total last.
    GatherByteCopy {
        segs: DevPtr,
        starts: DevPtr,
        nsegs: u32,
        idx: DevPtr,
        n: u64,
        total: u64,
        out_starts: DevPtr,
        grand_total: u64,
        values: DevPtr,
        offsets: DevPtr,
        offset_width: u32,
        wide: bool,
    },
    /// `parquet_encode_summarize/scan/write`: one step of encoding the `npages` data pages
    /// at `pages` in `ntiles` tiles at `tiles` (arrays of `encode_job::EncodePageArg` and
    /// `EncodeTileArg`) from the columns at `columns` (`EncodeColumnArg`s), their bodies
    /// into `out` (cuda/parquet_encode.cu).
    EncodePages { columns: DevPtr, pages: DevPtr, npages: u32, tiles: DevPtr, ntiles: u32, out: DevPtr },
}

impl Args {
    fn params(&self) -> Params {
        match self {
            Args::Level(..) => Params::Level,
            Args::LevelSplits(..) => Params::LevelSplits,
            Args::Partition2Way { .. } => Params::Partition2Way,
            Args::PartitionKWayCoarse { .. } => Params::PartitionKWayCoarse,
            Args::PartitionKWay { .. } => Params::PartitionKWay,
            Args::GatherValues { wide, .. } => Params::GatherValues { wide: *wide },
            Args::GatherValidity { wide, .. } => Params::GatherValidity { wide: *wide },
            Args::RebaseViews { wide, .. } => Params::RebaseViews { wide: *wide },
            Args::RebaseIndices { .. } => Params::RebaseIndices,
            Args::SortTiles { .. } => Params::SortTiles,
            Args::DecodePages { .. } => Params::DecodePages,
            Args::EncodeKeys { .. } => Params::EncodeKeys,
            Args::GatherByteLengths { wide, .. } => Params::GatherByteLengths { wide: *wide },
            Args::ScanBlocks { .. } => Params::ScanBlocks,
            Args::ScanAdd { .. } => Params::ScanAdd,
            Args::GatherByteCopy { wide, .. } => Params::GatherByteCopy { wide: *wide },
            Args::EncodePages { .. } => Params::EncodePages,
        }
    }
}

/// Pointer to one argument as `cuLaunchKernel` takes it.
fn arg<T>(x: &mut T) -> *mut c_void {
    x as *mut T as *mut c_void
}

/// Launches the entries of one module on one stream.
pub(crate) struct Launcher<'a> {
    pub module: &'a Module,
    pub stream: sys::CUstream,
}

impl Launcher<'_> {
    /// Queues `entry` on `grid` blocks with `args`. A grid of 0 blocks launches nothing.
    pub fn launch(&self, entry: Entry, grid: u64, mut args: Args) -> Result<()> {
        let info = entry.info();
        if args.params() != info.params {
            return Err(Error::Gpu(format!("internal: {} takes {:?}, was given {:?}", info.name, info.params, args.params())));
        }
        if grid == 0 {
            return Ok(());
        }
        if grid > i32::MAX as u64 {
            return Err(Error::Gpu(format!("{}: a grid of {grid} blocks is too large", info.name)));
        }
        let f = self.module.function(entry)?;
        let shared = self.module.dynamic_shared_bytes(entry);
        // One pointer per kernel parameter, in the order of the CUDA signature (the manifest
        // test checks the signatures; `params` above checks the variant).
        let mut ptrs: Vec<*mut c_void> = match &mut args {
            Args::Level(l) => vec![arg(l)],
            Args::LevelSplits(l, s) => vec![arg(l), arg(s)],
            Args::Partition2Way { level, splits, boundaries, tile } => vec![arg(level), arg(splits), arg(boundaries), arg(tile)],
            Args::PartitionKWayCoarse { level, coarse, count, coarse_start } => {
                vec![arg(level), arg(coarse), arg(count), arg(coarse_start)]
            }
            Args::PartitionKWay { level, splits, boundaries, coarse, coarse_start } => {
                vec![arg(level), arg(splits), arg(boundaries), arg(coarse), arg(coarse_start)]
            }
            Args::GatherValues { src, dst, idx, n, total, width, error, wide: _ } => {
                vec![arg(src), arg(dst), arg(idx), arg(n), arg(total), arg(width), arg(error)]
            }
            Args::GatherValidity { bits, runs, nruns, out, idx, n, total, error, wide: _ } => {
                vec![arg(bits), arg(runs), arg(nruns), arg(out), arg(idx), arg(n), arg(total), arg(error)]
            }
            Args::RebaseViews { views, runs, nruns, idx, n, total, wide: _ } => {
                vec![arg(views), arg(runs), arg(nruns), arg(idx), arg(n), arg(total)]
            }
            Args::RebaseIndices { idx, begin, end, bounds, delta, nruns } => {
                vec![arg(idx), arg(begin), arg(end), arg(bounds), arg(delta), arg(nruns)]
            }
            Args::SortTiles { keys, idx, n } => vec![arg(keys), arg(idx), arg(n)],
            Args::DecodePages { input, input_len, pages, npages, errors } => {
                vec![arg(input), arg(input_len), arg(pages), arg(npages), arg(errors)]
            }
            Args::EncodeKeys { fields, nfields, rows, out, words } => vec![arg(fields), arg(nfields), arg(rows), arg(out), arg(words)],
            Args::GatherByteLengths { segs, starts, nsegs, idx, n, total, lens, error, wide: _ } => {
                vec![arg(segs), arg(starts), arg(nsegs), arg(idx), arg(n), arg(total), arg(lens), arg(error)]
            }
            Args::ScanBlocks { data, n, sums } | Args::ScanAdd { data, n, sums } => vec![arg(data), arg(n), arg(sums)],
            Args::GatherByteCopy {
                segs,
                starts,
                nsegs,
                idx,
                n,
                total,
                out_starts,
                grand_total,
                values,
                offsets,
                offset_width,
                wide: _,
            } => {
                vec![
                    arg(segs),
                    arg(starts),
                    arg(nsegs),
                    arg(idx),
                    arg(n),
                    arg(total),
                    arg(out_starts),
                    arg(grand_total),
                    arg(values),
                    arg(offsets),
                    arg(offset_width),
                ]
            }
            Args::EncodePages { columns, pages, npages, tiles, ntiles, out } => {
                vec![arg(columns), arg(pages), arg(npages), arg(tiles), arg(ntiles), arg(out)]
            }
        };
        // SAFETY: `f` is a function of the loaded `module`, which outlives this call. `ptrs`
        // holds one pointer per parameter of `entry`'s CUDA signature, each to a live local
        // of the type the kernel declares (LevelArg has the layout of `Level`, asserted on
        // both sides; device pointers and counts are u64, the gather's width and run counts
        // u32); cuLaunchKernel copies the values
        // before it returns. The device addresses in them are allocations of this context
        // that the caller keeps alive until the stream has run the kernel. `shared` is the
        // manifest's size, which the module allowed for this entry at load time.
        unsafe { result::launch_kernel(f, (grid as u32, 1, 1), (self.module.policy.threads, 1, 1), shared, self.stream, &mut ptrs) }
            .map_err(gpu_err("launching a kernel"))
    }
}

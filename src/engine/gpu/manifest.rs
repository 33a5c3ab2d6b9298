//! The kernel manifest: every entry point of `cuda/`, the module that holds it, its
//! parameter list and its shared memory, in one list ([`MANIFEST`]). The NVRTC build
//! (which sources, which functions to load), the shared-memory attribute, the typed
//! launcher (which arguments an entry point takes) and the bench's kernel report all read
//! it; nothing else names a kernel.
//!
//! Two module families: the production kernels (tiled, k-way, their partitions), built
//! for every merge, and the book's kernels (basic, circular-buffer), built lazily only when
//! [`Kernel::Basic`](crate::Kernel::Basic) or [`Kernel::Circular`](crate::Kernel::Circular)
//! is asked for. Each family is one NVRTC module per key width and index width.

use super::plan::KernelKind;
use super::tuning::Policy;

const COMMON: &str = include_str!("../../../cuda/common.cuh");
const CTA_MERGE: &str = include_str!("../../../cuda/cta_merge.cuh");
const CO_RANK: &str = include_str!("../../../cuda/co_rank.cuh");
const MERGE_BASIC: &str = include_str!("../../../cuda/merge_basic.cu");
const MERGE_CIRCULAR: &str = include_str!("../../../cuda/merge_circular.cu");
const MERGE_TILED: &str = include_str!("../../../cuda/merge_tiled.cu");
const MERGE_KWAY: &str = include_str!("../../../cuda/merge_kway.cu");
const PARTITION: &str = include_str!("../../../cuda/partition.cu");
const GATHER: &str = include_str!("../../../cuda/gather.cu");
const GATHER_BYTES: &str = include_str!("../../../cuda/gather_bytes.cu");
const REBASE: &str = include_str!("../../../cuda/rebase.cu");
const SORT_TILES: &str = include_str!("../../../cuda/sort_tiles.cu");
const PARQUET_DECODE: &str = include_str!("../../../cuda/parquet_decode.cu");
const KEY_ENCODE: &str = include_str!("../../../cuda/key_encode.cu");
const PARQUET_ENCODE: &str = include_str!("../../../cuda/parquet_encode.cu");

/// A module family: the kernels compiled together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// Tiled and k-way merges, their grid-level partitions, and the rebase of a device's
    /// indices in a multi-GPU merge.
    Production,
    /// The book's basic and circular-buffer kernels.
    Book,
    /// The payload gather (values and validity bitmaps, and a device-resident round's byte
    /// arrays; both index widths in one module; built with key_bytes 8 and index_bits 32,
    /// which it does not read).
    Gather,
    /// The tile level of the sort (its merge levels are the production module's).
    Sort,
    /// Parquet data pages decoded (issue 69, stage 2), sort keys encoded from decoded
    /// columns (stage 3), data pages encoded (stage 4); built with key_bytes 8 and
    /// index_bits 32, which it does not read.
    Decode,
}

impl Family {
    pub const ALL: [Family; 5] = [Family::Production, Family::Book, Family::Gather, Family::Sort, Family::Decode];

    pub fn name(self) -> &'static str {
        match self {
            Family::Production => "production",
            Family::Book => "book",
            Family::Gather => "gather",
            Family::Sort => "sort",
            Family::Decode => "decode",
        }
    }

    /// The family's sources, in the order NVRTC gets them concatenated (the block-level
    /// primitives first; partition.cu uses merge_kway.cu's KWAY_TILE).
    pub fn sources(self) -> &'static [&'static str] {
        match self {
            Family::Production => &[COMMON, CTA_MERGE, CO_RANK, MERGE_TILED, MERGE_KWAY, PARTITION, REBASE],
            Family::Book => &[COMMON, CTA_MERGE, CO_RANK, MERGE_BASIC, MERGE_CIRCULAR],
            Family::Gather => &[COMMON, GATHER, GATHER_BYTES],
            Family::Sort => &[COMMON, CTA_MERGE, CO_RANK, SORT_TILES],
            Family::Decode => &[COMMON, PARQUET_DECODE, KEY_ENCODE, PARQUET_ENCODE],
        }
    }

    /// The file names (in `cuda/`) of [`Family::sources`], in the same order.
    pub fn source_files(self) -> &'static [&'static str] {
        match self {
            Family::Production => {
                &["common.cuh", "cta_merge.cuh", "co_rank.cuh", "merge_tiled.cu", "merge_kway.cu", "partition.cu", "rebase.cu"]
            }
            Family::Book => &["common.cuh", "cta_merge.cuh", "co_rank.cuh", "merge_basic.cu", "merge_circular.cu"],
            Family::Gather => &["common.cuh", "gather.cu", "gather_bytes.cu"],
            Family::Sort => &["common.cuh", "cta_merge.cuh", "co_rank.cuh", "sort_tiles.cu"],
            Family::Decode => &["common.cuh", "parquet_decode.cu", "key_encode.cu", "parquet_encode.cu"],
        }
    }

    /// The entry points this family's module holds.
    pub fn entries(self) -> impl Iterator<Item = &'static EntryPoint> {
        MANIFEST.iter().filter(move |e| e.family == self)
    }
}

/// An entry point's parameter list (the CUDA signature after `extern "C" __global__`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Params {
    /// `(Level L)`
    Level,
    /// `(Level L, const u64 *splits)`
    LevelSplits,
    /// `(Level L, u64 *splits, u64 nboundaries, u64 tile)`
    Partition2Way,
    /// `(Level L, u64 *coarse, u64 ncoarse, const u64 *cstart)`
    PartitionKWayCoarse,
    /// `(Level L, u64 *splits, u64 nboundaries, const u64 *coarse, const u64 *cstart)`
    PartitionKWay,
    /// `(const u8 *src, u8 *dst, const u32 *idx, u64 n, u64 total, u32 width, u32 *error)`
    /// (`const u64 *idx` when `wide`)
    GatherValues { wide: bool },
    /// `(const u8 *bits, const u64 *runs, u32 nruns, u32 *out, const u32 *idx, u64 n,
    /// u64 total, u32 *error)` (`const u64 *idx` when `wide`)
    GatherValidity { wide: bool },
    /// `(u32 *views, const u64 *runs, u32 nruns, const u32 *idx, u64 n, u64 total)`
    /// (`const u64 *idx` when `wide`)
    RebaseViews { wide: bool },
    /// `(index_t *idx, u64 begin, u64 end, const u64 *bounds, const u64 *delta, u32 nruns)`
    RebaseIndices,
    /// `(Key *keys, index_t *idx, u64 n)`
    SortTiles,
    /// `(const u8 *input, u64 input_len, const void *pages, u32 npages, u32 *errors)` (the
    /// byte array kernels' `pages` are their dictionaries' or chunks' records)
    DecodePages,
    /// `(const void *fields_arg, u32 nfields, u64 rows, void *out, u32 words)`
    EncodeKeys,
    /// `(const void *segs, const u64 *starts, u32 nsegs, const u32 *idx, u64 n, u64 total,
    /// u64 *lens, u32 *error)` (`const u64 *idx` when `wide`)
    GatherByteLengths { wide: bool },
    /// `(u64 *data, u64 n, u64 *sums)`
    ScanBlocks,
    /// `(u64 *data, u64 n, const u64 *sums)`
    ScanAdd,
    /// `(const void *segs, const u64 *starts, u32 nsegs, const u32 *idx, u64 n, u64 total,
    /// const u64 *out_starts, u64 grand_total, u8 *values, void *offsets, u32 offset_width)`
    /// (`const u64 *idx` when `wide`)
    GatherByteCopy { wide: bool },
    /// `(const void *columns, void *pages, u32 npages, void *tiles, u32 ntiles, u8 *out)`
    EncodePages,
}

/// An entry point's shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shared {
    /// Static only (or none): no dynamic shared memory at launch.
    Static,
    /// One padded tile of keys and indices (merge_tiled.cu).
    TiledTile,
    /// One padded tile of keys and one of indices (merge_kway.cu, merged in place).
    KWayTiles,
    /// One padded tile of keys and one of u32 positions (sort_tiles.cu).
    SortTile,
}

/// The entry points, one per `extern "C" __global__` function in `cuda/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Entry {
    MergeBasic,
    MergeTiledOnly,
    MergeTiledFirst,
    MergeTiledInner,
    MergeTiledLast,
    MergeCircular,
    PartitionKWayCoarse,
    PartitionKWay,
    Partition2Way,
    MergeKWay,
    MergeKWayKeys,
    GatherValues32,
    GatherValues64,
    GatherValidity32,
    GatherValidity64,
    RebaseViews32,
    RebaseViews64,
    RebaseIndices,
    SortTiles,
    ParquetDecodePages,
    ParquetBytesDictionary,
    ParquetBytesOffsets,
    ParquetBytesCopy,
    EncodeFixedKeys,
    GatherByteLengths32,
    GatherByteLengths64,
    ScanBlocks,
    ScanAdd,
    GatherByteCopy32,
    GatherByteCopy64,
    ParquetEncodeSummarize,
    ParquetEncodeScan,
    ParquetEncodeWrite,
}

/// What the host knows about one entry point.
#[derive(Debug)]
pub(crate) struct EntryPoint {
    pub entry: Entry,
    /// The CUDA function name.
    pub name: &'static str,
    pub family: Family,
    pub params: Params,
    pub shared: Shared,
}

const fn entry_point(entry: Entry, name: &'static str, family: Family, params: Params, shared: Shared) -> EntryPoint {
    EntryPoint { entry, name, family, params, shared }
}

/// Every entry point, in [`Entry`] order (the bench's kernel report lists them so).
#[rustfmt::skip]
pub(crate) const MANIFEST: [EntryPoint; 33] = {
    use Family::{Book, Decode, Gather, Production, Sort};
    [
        entry_point(Entry::MergeBasic, "merge_basic", Book, Params::Level, Shared::Static),
        entry_point(Entry::MergeTiledOnly, "merge_tiled_only", Production, Params::LevelSplits, Shared::TiledTile),
        entry_point(Entry::MergeTiledFirst, "merge_tiled_first", Production, Params::LevelSplits, Shared::TiledTile),
        entry_point(Entry::MergeTiledInner, "merge_tiled_inner", Production, Params::LevelSplits, Shared::TiledTile),
        entry_point(Entry::MergeTiledLast, "merge_tiled_last", Production, Params::LevelSplits, Shared::TiledTile),
        entry_point(Entry::MergeCircular, "merge_circular", Book, Params::Level, Shared::Static),
        entry_point(Entry::PartitionKWayCoarse, "partition_kway_coarse", Production, Params::PartitionKWayCoarse, Shared::Static),
        entry_point(Entry::PartitionKWay, "partition_kway", Production, Params::PartitionKWay, Shared::Static),
        entry_point(Entry::Partition2Way, "partition_2way", Production, Params::Partition2Way, Shared::Static),
        entry_point(Entry::MergeKWay, "merge_kway", Production, Params::LevelSplits, Shared::KWayTiles),
        entry_point(Entry::MergeKWayKeys, "merge_kway_keys", Production, Params::LevelSplits, Shared::KWayTiles),
        entry_point(Entry::GatherValues32, "gather_values_i32", Gather, Params::GatherValues { wide: false }, Shared::Static),
        entry_point(Entry::GatherValues64, "gather_values_i64", Gather, Params::GatherValues { wide: true }, Shared::Static),
        entry_point(Entry::GatherValidity32, "gather_validity_i32", Gather, Params::GatherValidity { wide: false }, Shared::Static),
        entry_point(Entry::GatherValidity64, "gather_validity_i64", Gather, Params::GatherValidity { wide: true }, Shared::Static),
        entry_point(Entry::RebaseViews32, "gather_rebase_views_i32", Gather, Params::RebaseViews { wide: false }, Shared::Static),
        entry_point(Entry::RebaseViews64, "gather_rebase_views_i64", Gather, Params::RebaseViews { wide: true }, Shared::Static),
        entry_point(Entry::RebaseIndices, "rebase_indices", Production, Params::RebaseIndices, Shared::Static),
        entry_point(Entry::SortTiles, "sort_tiles", Sort, Params::SortTiles, Shared::SortTile),
        entry_point(Entry::ParquetDecodePages, "parquet_decode_pages", Decode, Params::DecodePages, Shared::Static),
        entry_point(Entry::ParquetBytesDictionary, "parquet_bytes_dictionary", Decode, Params::DecodePages, Shared::Static),
        entry_point(Entry::ParquetBytesOffsets, "parquet_bytes_offsets", Decode, Params::DecodePages, Shared::Static),
        entry_point(Entry::ParquetBytesCopy, "parquet_bytes_copy", Decode, Params::DecodePages, Shared::Static),
        entry_point(Entry::EncodeFixedKeys, "encode_fixed_keys", Decode, Params::EncodeKeys, Shared::Static),
        entry_point(Entry::GatherByteLengths32, "gather_byte_lengths_i32", Gather, Params::GatherByteLengths { wide: false }, Shared::Static),
        entry_point(Entry::GatherByteLengths64, "gather_byte_lengths_i64", Gather, Params::GatherByteLengths { wide: true }, Shared::Static),
        entry_point(Entry::ScanBlocks, "scan_blocks_u64", Gather, Params::ScanBlocks, Shared::Static),
        entry_point(Entry::ScanAdd, "scan_add_u64", Gather, Params::ScanAdd, Shared::Static),
        entry_point(Entry::GatherByteCopy32, "gather_byte_copy_i32", Gather, Params::GatherByteCopy { wide: false }, Shared::Static),
        entry_point(Entry::GatherByteCopy64, "gather_byte_copy_i64", Gather, Params::GatherByteCopy { wide: true }, Shared::Static),
        entry_point(Entry::ParquetEncodeSummarize, "parquet_encode_summarize", Decode, Params::EncodePages, Shared::Static),
        entry_point(Entry::ParquetEncodeScan, "parquet_encode_scan", Decode, Params::EncodePages, Shared::Static),
        entry_point(Entry::ParquetEncodeWrite, "parquet_encode_write", Decode, Params::EncodePages, Shared::Static),
    ]
};

// MANIFEST[e as usize] is entry e.
const _: () = {
    let mut i = 0;
    while i < MANIFEST.len() {
        assert!(MANIFEST[i].entry as usize == i, "MANIFEST must list the entries in Entry order");
        i += 1;
    }
};

impl Entry {
    pub fn info(self) -> &'static EntryPoint {
        &MANIFEST[self as usize]
    }
}

impl EntryPoint {
    /// Dynamic shared bytes a block of this entry point gets at launch, for keys of
    /// `key_bytes` and indices of `index_bytes` under `policy`.
    pub fn dynamic_shared_bytes(&self, policy: &Policy, key_bytes: usize, index_bytes: usize) -> u32 {
        match self.shared {
            Shared::Static => 0,
            Shared::TiledTile => policy.tiled_shared_bytes(key_bytes, index_bytes),
            Shared::KWayTiles => policy.kway_shared_bytes(key_bytes, index_bytes),
            Shared::SortTile => policy.sort_shared_bytes(key_bytes),
        }
    }
}

/// The merge entry point that runs a level of `kind`: the tiled kernel has one per place
/// in the tree (first and/or last level), each with only the registers that place needs;
/// the k-way kernel merges on keys and indices (`merge_kway_keys`) where `sort_tiles`: a
/// level of a sort's tree whose k-way tiles span too wide a key range to pack
/// (cuda/merge_kway.cu, `LevelPlan::random_tiles_pack`).
pub(crate) fn merge_entry(kind: KernelKind, first: bool, last: bool, sort_tiles: bool) -> Entry {
    match (kind, first, last) {
        (KernelKind::KWay, ..) if sort_tiles => Entry::MergeKWayKeys,
        (KernelKind::Basic, ..) => Entry::MergeBasic,
        (KernelKind::Tiled, true, true) => Entry::MergeTiledOnly,
        (KernelKind::Tiled, true, false) => Entry::MergeTiledFirst,
        (KernelKind::Tiled, false, false) => Entry::MergeTiledInner,
        (KernelKind::Tiled, false, true) => Entry::MergeTiledLast,
        (KernelKind::Circular, ..) => Entry::MergeCircular,
        (KernelKind::KWay, ..) => Entry::MergeKWay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels a family's sources define: (name, parameter list) of each
    /// `extern "C" __global__ ... name(params) {`.
    fn kernels(f: Family) -> Vec<(String, String)> {
        let src = f.sources().concat();
        src.split("extern \"C\" __global__")
            .skip(1)
            .map(|decl| {
                let header = decl.split('{').next().unwrap();
                let (open, close) = (header.rfind('(').unwrap(), header.rfind(')').unwrap());
                let name = header[..open].split_whitespace().last().unwrap();
                (name.to_string(), header[open + 1..close].to_string())
            })
            .collect()
    }

    /// source_files names the files whose text sources() carries.
    #[test]
    fn source_files_name_the_sources() {
        // Relative to the working directory, which cargo sets to the package root (as the
        // GPU machine's runner does): the build's own path may not exist where it runs.
        let dir = std::path::Path::new("cuda");
        for f in Family::ALL {
            assert_eq!(f.sources().len(), f.source_files().len());
            for (text, name) in f.sources().iter().zip(f.source_files()) {
                assert_eq!(*text, std::fs::read_to_string(dir.join(name)).unwrap(), "{name}");
            }
        }
    }

    /// The manifest and the sources agree: every entry point is defined by its family's
    /// sources with the parameters the manifest says, and every kernel is listed.
    #[test]
    fn manifest_matches_the_sources() {
        for f in Family::ALL {
            let defined = kernels(f);
            for e in f.entries() {
                let expected = match e.params {
                    Params::Level => "Level L",
                    Params::LevelSplits => "Level L, const u64 *splits",
                    Params::Partition2Way => "Level L, u64 *splits, u64 nboundaries, u64 tile",
                    Params::PartitionKWayCoarse => "Level L, u64 *coarse, u64 ncoarse, const u64 *cstart",
                    Params::PartitionKWay => "Level L, u64 *splits, u64 nboundaries, const u64 *coarse, const u64 *cstart",
                    Params::GatherValues { wide: false } => {
                        "const u8 *src, u8 *dst, const u32 *idx, u64 n, u64 total, u32 width, u32 *error"
                    }
                    Params::GatherValues { wide: true } => {
                        "const u8 *src, u8 *dst, const u64 *idx, u64 n, u64 total, u32 width, u32 *error"
                    }
                    Params::GatherValidity { wide: false } => {
                        "const u8 *bits, const u64 *runs, u32 nruns, u32 *out, const u32 *idx, u64 n, u64 total, u32 *error"
                    }
                    Params::GatherValidity { wide: true } => {
                        "const u8 *bits, const u64 *runs, u32 nruns, u32 *out, const u64 *idx, u64 n, u64 total, u32 *error"
                    }
                    Params::RebaseViews { wide: false } => "u32 *views, const u64 *runs, u32 nruns, const u32 *idx, u64 n, u64 total",
                    Params::RebaseViews { wide: true } => "u32 *views, const u64 *runs, u32 nruns, const u64 *idx, u64 n, u64 total",
                    Params::RebaseIndices => "index_t *idx, u64 begin, u64 end, const u64 *bounds, const u64 *delta, u32 nruns",
                    Params::SortTiles => "Key *keys, index_t *idx, u64 n",
                    Params::DecodePages => "const u8 *input, u64 input_len, const void *pages, u32 npages, u32 *errors",
                    Params::EncodeKeys => "const void *fields_arg, u32 nfields, u64 rows, void *out, u32 words",
                    Params::GatherByteLengths { wide: false } => {
                        "const void *segs, const u64 *starts, u32 nsegs, const u32 *idx, u64 n, u64 total, u64 *lens, u32 *error"
                    }
                    Params::GatherByteLengths { wide: true } => {
                        "const void *segs, const u64 *starts, u32 nsegs, const u64 *idx, u64 n, u64 total, u64 *lens, u32 *error"
                    }
                    Params::ScanBlocks => "u64 *data, u64 n, u64 *sums",
                    Params::ScanAdd => "u64 *data, u64 n, const u64 *sums",
                    Params::GatherByteCopy { wide: false } => "const void *segs, const u64 *starts, u32 nsegs, const u32 *idx, u64 n, u64 total, const u64 *out_starts, u64 grand_total, u8 *values, void *offsets, u32 offset_width",
                    Params::GatherByteCopy { wide: true } => "const void *segs, const u64 *starts, u32 nsegs, const u64 *idx, u64 n, u64 total, const u64 *out_starts, u64 grand_total, u8 *values, void *offsets, u32 offset_width",
                    Params::EncodePages => "const void *columns, void *pages, u32 npages, void *tiles, u32 ntiles, u8 *out",
                };
                let found = defined.iter().find(|(n, _)| n == e.name);
                assert_eq!(found.map(|(_, p)| p.as_str()), Some(expected), "{} in the {} sources", e.name, f.name());
            }
            for (name, _) in &defined {
                assert!(f.entries().any(|e| e.name == name), "{name} ({}) is missing from MANIFEST", f.name());
            }
        }
    }

    #[test]
    fn merge_entries_by_level_role() {
        assert_eq!(merge_entry(KernelKind::Tiled, true, true, false), Entry::MergeTiledOnly);
        assert_eq!(merge_entry(KernelKind::Tiled, false, true, true), Entry::MergeTiledLast);
        assert_eq!(merge_entry(KernelKind::KWay, false, false, false), Entry::MergeKWay);
        assert_eq!(merge_entry(KernelKind::KWay, false, false, true), Entry::MergeKWayKeys);
        for kind in KernelKind::ALL {
            for (first, last, sort_tiles) in [(true, true, false), (true, false, false), (false, false, true), (false, true, false)] {
                let e = merge_entry(kind, first, last, sort_tiles).info();
                assert_eq!(e.family, kind.family(), "{kind:?}");
                let takes_splits = e.params == Params::LevelSplits;
                assert_eq!(takes_splits, kind.partitioned(), "{kind:?}");
            }
        }
    }
}

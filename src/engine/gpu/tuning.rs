//! The tuning of the GPU engine: the kernels' policy, chosen per (architecture, key bytes,
//! index bytes) the way CUB's policy selectors choose, the host transfer constants, and what
//! the pools keep between calls. Every tuned constant of the engine is here.
//!
//! A [`Policy`] fixes threads per block and items per thread (thread coarsening) of every
//! kernel. A tile is `threads * ipt` outputs; shared memory per block is a padded tile (or
//! two) of keys plus indices, so wider keys get fewer items per thread to stay within the
//! per-block limit and leave room for several blocks per multiprocessor.
//!
//! - **sm_90** (H100, H200): the values measured fastest on the H200 and H100
//!   (`docs/performance.md`; the sweeps: `docs/log/2026-12-performance-log.md`).
//! - **any other architecture**: the sm_90 values, with items per thread halved where a
//!   tile would not fit the device's shared memory per block (nothing there is measured;
//!   it only has to be correct and launchable).
//!
//! [`set_overrides`] replaces values for tuning sweeps (benches/gpu.rs passes it
//! `CORANK_GPU_TUNING`); the library itself reads no environment variable. The overrides
//! and replaced sources in force are fields of the process's `Runtime`
//! (`engine/gpu/runtime.rs`).

use super::runtime::{lock, runtime};
use crate::{Error, Result};

/// Threads per block of every kernel in every policy today.
pub const THREADS: u32 = 256;

/// Most bytes of each pinned staging buffer (two of them, used alternately) for host
/// transfers; they grow to this from 1 MiB as transfers need.
pub const STAGE_BYTES: usize = 64 << 20;

/// Chunks the last level is cut into so the download of one overlaps the merge of the next.
pub const DOWNLOAD_CHUNKS: usize = 8;

/// From this many runs `Kernel::Auto` merges with the single-pass k-way kernel instead of
/// the tiled tree: the tree's extra passes over device memory cost less than the k-way
/// kernel's co-rank searches below it (issue 16 item 4, measured on an H200).
pub const AUTO_KWAY_MIN_RUNS: usize = 8;

/// Bytes of device buffers a device's pool keeps between calls (`context::State::trim`): a
/// whole sort's gigabytes are freed, the merges' rounds (far smaller) reuse theirs.
pub const KEEP_POOL_BYTES: usize = 4 << 30;

/// Bytes of pinned output memory the device gather's pool keeps for reuse once its arrays
/// are dropped (`runtime::PinnedBlock`); the rest is freed.
pub const PINNED_POOL_BYTES: usize = 4 << 30;

/// Bytes of device buffer a pageable (whole-sort) device gather keeps for the next call; a
/// larger one is freed when the call ends.
pub const GATHER_KEEP_DEVICE_BYTES: usize = 4 << 30;

/// Most blocks of a rebase launch (cuda/rebase.cu loops over the rest).
pub const REBASE_MAX_BLOCKS: u64 = 4096;

/// Static shared memory any block may use without opting in (CUDA's limit on every
/// architecture so far); the circular kernel's buffers are static.
pub const STATIC_SHARED_LIMIT: u32 = 48 << 10;

/// What a policy depends on in the device: its compute capability and how much shared
/// memory one block may use (with the opt-in attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arch {
    /// The compute capability's major version (9 for sm_90).
    pub major: u32,
    /// The compute capability's minor version (0 for sm_90).
    pub minor: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, bytes.
    pub max_shared_per_block: u32,
}

impl Arch {
    /// sm_90 (H100, H200): 227 KiB of shared memory per block.
    pub const SM90: Arch = Arch { major: 9, minor: 0, max_shared_per_block: 227 << 10 };

    /// The NVRTC architecture option, e.g. `compute_90`.
    pub fn compute(&self) -> String {
        format!("compute_{}{}", self.major, self.minor)
    }
}

/// The kernels' compile-time configuration for one module (cuda/common.cuh lists how each
/// value reaches the sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// Threads per block, every kernel (a multiple of 32: the k-way partition runs a warp
    /// per boundary).
    pub threads: u32,
    /// Items per thread of the basic kernel: a tile is `threads * ipt_basic` outputs.
    pub ipt_basic: u32,
    /// Items per thread of the tiled kernel: a tile is `threads * ipt_tiled` outputs.
    pub ipt_tiled: u32,
    /// Items per thread of the circular kernel; its buffers hold `threads * ipt_circ` slots
    /// each for A and B.
    pub ipt_circ: u32,
    /// Tiles per block of the circular kernel (the section it streams through its buffers).
    pub circ_tiles: u32,
    /// Items per thread of the k-way kernel: a tile is `threads * ipt_kway` outputs.
    pub ipt_kway: u32,
    /// The k-way kernel's `__launch_bounds__` minimum of resident blocks per multiprocessor
    /// (as `tiled_min_blocks`).
    pub kway_min_blocks: u32,
    /// The k-way partition runs in two passes: a coarse one every `kway_coarse` tiles over
    /// whole runs, then every tile boundary within the windows the coarse splits leave.
    pub kway_coarse: u32,
    /// The tiled kernel's `__launch_bounds__` minimum of resident blocks per multiprocessor
    /// (1: let the compiler choose the registers; more caps them, maybe with spills).
    pub tiled_min_blocks: u32,
    /// Items per thread of the sort's tile level (cuda/sort_tiles.cu): a sorted tile is
    /// `threads * ipt_sort` keys.
    pub ipt_sort: u32,
    /// 1: the tiled kernel's levels that write no keys compare 32-bit narrow keys where a
    /// tile allows (cuda/cta_merge.cuh, `NarrowMap`); 0: always the full keys.
    pub tiled_narrow: u32,
    /// A tile whose narrow keys are not exact is merged on them only if at most this many
    /// threads of its block saw two neighbouring keys with equal narrow keys (each such tie
    /// is decided by reading the full keys from global memory).
    pub narrow_tie_threads: u32,
}

impl Policy {
    /// Slots of a padded tile of `ipt` items per thread: one pad slot every `ipt` slots,
    /// none for an odd `ipt` (cta_merge.cuh, `padded` and `PADDED_SLOTS`).
    fn padded_slots(&self, ipt: u32) -> u32 {
        ipt * self.threads + if ipt % 2 == 1 { 0 } else { self.threads }
    }

    /// Dynamic shared bytes of a tiled-kernel block: one padded tile of keys and indices
    /// (cuda/merge_tiled.cu, `TILE_SLOTS`; a level of narrow keys uses less).
    pub fn tiled_shared_bytes(&self, key_bytes: usize, index_bytes: usize) -> u32 {
        self.padded_slots(self.ipt_tiled) * (key_bytes + index_bytes) as u32
    }

    /// Dynamic shared bytes of a k-way block: one padded tile of keys and indices (its
    /// shared-memory merge rounds merge in place, cuda/merge_kway.cu).
    pub fn kway_shared_bytes(&self, key_bytes: usize, index_bytes: usize) -> u32 {
        self.padded_slots(self.ipt_kway) * (key_bytes + index_bytes) as u32
    }

    /// Dynamic shared bytes of a sort-tile block: one padded tile of keys and one of u32
    /// tile positions.
    pub fn sort_shared_bytes(&self, key_bytes: usize) -> u32 {
        self.padded_slots(self.ipt_sort) * (key_bytes + 4) as u32
    }

    /// Keys per sorted tile of the sort's tile level.
    pub fn sort_tile(&self) -> u64 {
        (self.threads * self.ipt_sort) as u64
    }

    /// Static shared bytes of the circular kernel's buffers (keys and indices, A and B).
    pub fn circular_shared_bytes(&self, key_bytes: usize, index_bytes: usize) -> u32 {
        2 * self.threads * self.ipt_circ * (key_bytes + index_bytes) as u32
    }
}

/// The measured sm_90 policy (H200). Keys of 8 bytes take 15 items per thread in the tiled
/// kernel with at least 4 resident blocks, u32 keys 19; wider keys take 5 (a tile of 32-byte
/// keys would not leave room for a second block). Odd counts, so the tiles are not padded
/// (cuda/cta_merge.cuh, `padded`): each odd count measured faster than the padded power of
/// two beside it, on random and duplicate-heavy keys; 19 is slower than 15 on u64 keys (more
/// registers a thread). The sweeps: `docs/log/2026-12-performance-log.md`, stops 54 and 55.
fn sm90(key_bytes: usize) -> Policy {
    let narrow = key_bytes <= 8;
    Policy {
        threads: THREADS,
        ipt_basic: 4,
        ipt_tiled: if key_bytes <= 4 {
            19
        } else if narrow {
            15
        } else {
            5
        },
        ipt_circ: if narrow { 4 } else { 2 },
        circ_tiles: 8,
        // Odd, so unpadded: 17 for u64 keys (4,352-key tiles), faster than 16 padded for the
        // k-way merges and for the GPU sort, whose merge levels take this kernel; 19 for u32
        // and u64x2 keys (4,864), faster there than 17 and than the padded counts, slower
        // for u64 keys (stops 54 and 55). Wider keys keep 8 (not measured at an odd count).
        ipt_kway: match key_bytes {
            8 => 17,
            0..=16 => 19,
            _ => 8,
        },
        kway_min_blocks: if narrow { 4 } else { 1 },
        // 16 measured faster than 32 at k = 8, 16 and 64 on an H100 (stop 37): shorter fine
        // windows for more coarse searches.
        kway_coarse: 16,
        tiled_min_blocks: if narrow { 4 } else { 1 },
        // Not tuned yet: 4096-key tiles of keys up to 8 bytes, the CPU sort's tile; 2048 for
        // wider keys (registers: a thread holds its keys).
        ipt_sort: if narrow { 16 } else { 8 },
        // Narrow keys pay for keys of two words and more (measured on u64x2 keys on an H100);
        // for one u64 word they cost more instructions than the shared loads they save, and
        // a u32 key is narrow already.
        tiled_narrow: u32::from(key_bytes >= 16),
        narrow_tie_threads: THREADS / 8,
    }
}

/// The policy for an architecture without measurements: sm_90's, with items per thread
/// halved (down to 1) until each kernel's shared memory fits the device.
fn fallback(arch: Arch, key_bytes: usize, index_bytes: usize) -> Policy {
    let mut p = sm90(key_bytes);
    let limit = arch.max_shared_per_block.max(STATIC_SHARED_LIMIT);
    while p.ipt_tiled > 1 && p.tiled_shared_bytes(key_bytes, index_bytes) > limit {
        p.ipt_tiled /= 2;
    }
    while p.ipt_kway > 1 && p.kway_shared_bytes(key_bytes, index_bytes) > limit {
        p.ipt_kway /= 2;
    }
    while p.ipt_sort > 1 && p.sort_shared_bytes(key_bytes) > limit {
        p.ipt_sort /= 2;
    }
    while p.ipt_circ > 1 && p.circular_shared_bytes(key_bytes, index_bytes) > STATIC_SHARED_LIMIT {
        p.ipt_circ /= 2;
    }
    p
}

/// The policy for keys of `key_bytes` and indices of `index_bytes` on `arch`, before any
/// overrides: the table's entry for the architecture, or the fallback.
pub fn policy(arch: Arch, key_bytes: usize, index_bytes: usize) -> Policy {
    match (arch.major, arch.minor) {
        (9, 0) => sm90(key_bytes),
        _ => fallback(arch, key_bytes, index_bytes),
    }
}

/// The names [`set_overrides`] accepts.
const OVERRIDABLE: [&str; 11] = [
    "ipt_basic",
    "ipt_tiled",
    "ipt_circ",
    "circ_tiles",
    "ipt_kway",
    "kway_min_blocks",
    "kway_coarse",
    "tiled_min_blocks",
    "ipt_sort",
    "tiled_narrow",
    "narrow_tie_threads",
];

/// The values an override may take: switches 0 or 1, a count of threads up to a block, the
/// tiles between two coarse k-way splits up to 1024, everything else 1..=32.
fn override_range(name: &str) -> std::ops::RangeInclusive<u32> {
    match name {
        "tiled_narrow" => 0..=1,
        "narrow_tie_threads" => 0..=THREADS,
        "kway_coarse" => 1..=1024,
        _ => 1..=32,
    }
}

/// The overrides in force, and whether a module was built with them (then they are fixed:
/// a module and the plans of its merges must agree on the tile sizes). The process's are
/// the runtime's `overrides`.
pub(super) struct Overrides {
    values: Vec<(&'static str, u32)>,
    frozen: bool,
}

impl Overrides {
    /// No overrides, none fixed yet: the process's at start-up.
    pub(super) const NONE: Overrides = Overrides { values: Vec::new(), frozen: false };
}

/// Replaces policy values for every architecture and key width, for tuning sweeps:
/// `name=value,...` with names `ipt_basic`, `ipt_tiled`, `ipt_circ`, `circ_tiles`,
/// `ipt_kway`, `kway_min_blocks`, `tiled_min_blocks`, `ipt_sort` (values 1..=32), `tiled_narrow` (0 or 1) and
/// `narrow_tie_threads` (0..=THREADS); an empty string: no overrides.
/// Call it before the first GPU merge of the process; afterwards (kernels compiled) it is
/// an error, as is a malformed string.
pub fn set_overrides(spec: &str) -> Result<()> {
    let values = parse_overrides(spec).map_err(Error::InvalidArgument)?;
    let mut o = lock(&runtime().overrides);
    if o.frozen {
        return Err(Error::InvalidArgument(
            "GPU tuning overrides must be set before the first GPU merge (its kernels are compiled)".into(),
        ));
    }
    o.values = values;
    Ok(())
}

/// Kernel sources read from a directory instead of the ones built into the binary, for
/// kernel development: A/B runs of kernel variants on the GPU machine without a Rust build
/// (benches/gpu.rs passes it `CORANK_KERNEL_SOURCES`). Every file of `cuda/` is read now;
/// like [`set_overrides`], it must come before the first GPU merge of the process.
pub fn set_kernel_source_dir(dir: &std::path::Path) -> Result<()> {
    let mut files = Vec::new();
    for f in super::manifest::Family::ALL {
        for name in f.source_files() {
            if !files.iter().any(|(n, _)| n == name) {
                let text = std::fs::read_to_string(dir.join(name))
                    .map_err(|e| Error::InvalidArgument(format!("kernel sources: reading {}: {e}", dir.join(name).display())))?;
                files.push((*name, text));
            }
        }
    }
    let o = lock(&runtime().overrides);
    if o.frozen {
        return Err(Error::InvalidArgument("kernel sources must be set before the first GPU merge (its kernels are compiled)".into()));
    }
    *lock(&runtime().kernel_sources) = Some(files);
    Ok(())
}

/// The text of the kernel source file `name`, where [`set_kernel_source_dir`] replaced it.
pub(crate) fn replaced_source(name: &str) -> Option<String> {
    let s = lock(&runtime().kernel_sources);
    s.as_ref().and_then(|files| files.iter().find(|(n, _)| *n == name).map(|(_, t)| t.clone()))
}

/// The policy a module is built with: [`policy`] with the overrides applied, which are
/// fixed from now on.
pub(crate) fn module_policy(arch: Arch, key_bytes: usize, index_bytes: usize) -> Policy {
    let mut o = lock(&runtime().overrides);
    o.frozen = true;
    apply(policy(arch, key_bytes, index_bytes), &o.values)
}

fn apply(mut p: Policy, overrides: &[(&'static str, u32)]) -> Policy {
    for &(name, v) in overrides {
        match name {
            "ipt_basic" => p.ipt_basic = v,
            "ipt_tiled" => p.ipt_tiled = v,
            "ipt_circ" => p.ipt_circ = v,
            "circ_tiles" => p.circ_tiles = v,
            "ipt_kway" => p.ipt_kway = v,
            "kway_min_blocks" => p.kway_min_blocks = v,
            "kway_coarse" => p.kway_coarse = v,
            "tiled_min_blocks" => p.tiled_min_blocks = v,
            "ipt_sort" => p.ipt_sort = v,
            "tiled_narrow" => p.tiled_narrow = v,
            "narrow_tie_threads" => p.narrow_tie_threads = v,
            _ => unreachable!("parse_overrides accepts only OVERRIDABLE names"),
        }
    }
    p
}

/// Parses `name=value,...` (see [`set_overrides`]).
fn parse_overrides(s: &str) -> std::result::Result<Vec<(&'static str, u32)>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, value) = item.split_once('=').ok_or_else(|| format!("tuning override `{item}` is not name=value"))?;
        let name = name.trim();
        let Some(&name) = OVERRIDABLE.iter().find(|&&n| n == name) else {
            return Err(format!("unknown tuning `{name}` (known: {})", OVERRIDABLE.join(", ")));
        };
        let v: u32 = value.trim().parse().map_err(|_| format!("tuning `{name}`: `{value}` is not a number"))?;
        let range = override_range(name);
        if !range.contains(&v) {
            return Err(format!("tuning {name}={v} is outside {}..={}", range.start(), range.end()));
        }
        out.push((name, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_and_reject() {
        assert_eq!(parse_overrides("ipt_tiled=12, ipt_kway=6").unwrap(), vec![("ipt_tiled", 12), ("ipt_kway", 6)]);
        assert_eq!(parse_overrides("").unwrap(), vec![]);
        assert!(parse_overrides("ipt_tiled").is_err());
        assert!(parse_overrides("threads=3").is_err());
        assert!(parse_overrides("ipt_tiled=0").is_err());
        assert!(parse_overrides("ipt_tiled=x").is_err());
        assert_eq!(parse_overrides("tiled_narrow=0").unwrap(), vec![("tiled_narrow", 0)]);
        assert_eq!(parse_overrides("kway_coarse=128").unwrap(), vec![("kway_coarse", 128)]);
        assert!(parse_overrides("kway_coarse=0").is_err() && parse_overrides("kway_coarse=1025").is_err());
        assert!(parse_overrides("tiled_narrow=2").is_err());
        assert!(parse_overrides("narrow_tie_threads=256").is_ok() && parse_overrides("narrow_tie_threads=257").is_err());
        let p = apply(sm90(8), &parse_overrides("ipt_tiled=12,tiled_min_blocks=6").unwrap());
        assert_eq!((p.ipt_tiled, p.tiled_min_blocks, p.ipt_kway), (12, 6, 17));
    }

    /// The sm_90 numbers are the measured ones (`docs/performance.md`); they must not move,
    /// whatever the index width.
    #[test]
    fn sm90_policy_is_the_measured_one() {
        for ib in [4, 8] {
            for kb in [4, 8] {
                let p = policy(Arch::SM90, kb, ib);
                assert_eq!(
                    (p.threads, p.ipt_basic, p.ipt_tiled, p.ipt_circ, p.circ_tiles, p.ipt_kway, p.kway_coarse, p.tiled_min_blocks),
                    (256, 4, if kb == 4 { 19 } else { 15 }, 4, 8, if kb == 4 { 19 } else { 17 }, 16, 4)
                );
            }
            for kb in [16, 24, 32] {
                let p = policy(Arch::SM90, kb, ib);
                assert_eq!(
                    (p.threads, p.ipt_basic, p.ipt_tiled, p.ipt_circ, p.circ_tiles, p.ipt_kway, p.kway_coarse, p.tiled_min_blocks),
                    (256, 4, 5, 2, 8, if kb == 16 { 19 } else { 8 }, 16, 1)
                );
            }
        }
        // The shared memory the kernel table of the performance log lists (u64 keys, u32
        // indices): the tiled and k-way kernels' odd tiles unpadded, the sort's padded.
        let p = policy(Arch::SM90, 8, 4);
        assert_eq!(p.tiled_shared_bytes(8, 4), 3840 * 12);
        assert_eq!(p.kway_shared_bytes(8, 4), 4352 * 12);
        assert_eq!((p.sort_tile(), p.sort_shared_bytes(8)), (4096, 52224));
        assert_eq!(policy(Arch::SM90, 32, 8).sort_tile(), 2048);
        assert_eq!(policy(Arch::SM90, 4, 4).tiled_shared_bytes(4, 4), 4864 * 8);
    }

    /// Any other architecture gets a policy whose tiles fit its shared memory.
    #[test]
    fn fallback_fits_the_device() {
        for limit in [48 << 10, 64 << 10, 99 << 10, 163 << 10, 227 << 10] {
            for (major, minor) in [(7, 5), (8, 0), (8, 6), (10, 0), (12, 0)] {
                let arch = Arch { major, minor, max_shared_per_block: limit };
                for kb in [4, 8, 16, 24, 32] {
                    for ib in [4, 8] {
                        let p = policy(arch, kb, ib);
                        assert!(p.tiled_shared_bytes(kb, ib) <= limit, "{arch:?} {kb} {ib}: {p:?}");
                        assert!(p.kway_shared_bytes(kb, ib) <= limit, "{arch:?} {kb} {ib}: {p:?}");
                        assert!(p.sort_shared_bytes(kb) <= limit, "{arch:?} {kb}: {p:?}");
                        assert!(p.circular_shared_bytes(kb, ib) <= STATIC_SHARED_LIMIT);
                        assert!(p.ipt_tiled >= 1 && p.ipt_kway >= 1 && p.ipt_circ >= 1);
                        assert_eq!(p.threads % 32, 0);
                    }
                }
            }
        }
        // With sm_90's shared memory the fallback is sm_90's policy.
        let big = Arch { major: 10, minor: 0, max_shared_per_block: 227 << 10 };
        assert_eq!(policy(big, 8, 8), policy(Arch::SM90, 8, 8));
    }
}

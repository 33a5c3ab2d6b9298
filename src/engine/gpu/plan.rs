//! Pure planning of a GPU merge: which kernel, the levels of the merge tree, their tile
//! geometry (grid level: tiles per group, one block each), the boundary numbering the
//! partitions use, the level metadata the kernels read, launch grid sizes, the chunks of
//! the last level, and the device memory it all takes. No CUDA call here: everything is
//! unit-tested without a GPU.

use super::manifest::Family;
use super::tuning::{Policy, AUTO_KWAY_MIN_RUNS};
use crate::options::Kernel;
use crate::{Error, Result};

/// A GPU kernel as the engine runs it: [`Kernel`] with `Auto` resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KernelKind {
    /// Tree of pairwise merges; per-thread co-rank and serial merge on global memory.
    Basic,
    /// Tree of pairwise merges; co-rank pairs from a grid-level partition, tiles in shared
    /// memory.
    Tiled,
    /// Tree of pairwise merges; circular buffers that reload only what was consumed.
    Circular,
    /// Up to [`MAX_GROUP`] runs a pass: k-way co-rank per tile, merge in shared memory.
    KWay,
}

impl KernelKind {
    #[cfg(test)]
    pub const ALL: [KernelKind; 4] = [KernelKind::Basic, KernelKind::Tiled, KernelKind::Circular, KernelKind::KWay];

    /// The module family that holds its kernels.
    pub fn family(self) -> Family {
        match self {
            KernelKind::Basic | KernelKind::Circular => Family::Book,
            KernelKind::Tiled | KernelKind::KWay => Family::Production,
        }
    }

    /// Whether its merge kernel reads a grid-level partition (`splits`) computed before it,
    /// instead of searching for its own co-ranks (the book's kernels).
    pub fn partitioned(self) -> bool {
        matches!(self, KernelKind::Tiled | KernelKind::KWay)
    }

    /// The user-facing kernel it is.
    pub fn kernel(self) -> Kernel {
        match self {
            KernelKind::Basic => Kernel::Basic,
            KernelKind::Tiled => Kernel::Tiled,
            KernelKind::Circular => Kernel::Circular,
            KernelKind::KWay => Kernel::KWay,
        }
    }
}

/// The kernel that merges `nruns` non-empty runs when `kernel` is asked for. `Auto` is the
/// rule of `docs/gpu.md` (measured on u32, u64 and two-word keys, issue 16 item 4): the
/// single-pass k-way kernel from [`AUTO_KWAY_MIN_RUNS`] runs on (a sort's tiles included),
/// the tiled tree below.
pub(crate) fn resolve(kernel: Kernel, nruns: usize) -> KernelKind {
    match kernel {
        Kernel::Auto if nruns >= AUTO_KWAY_MIN_RUNS => KernelKind::KWay,
        Kernel::Auto | Kernel::Tiled => KernelKind::Tiled,
        Kernel::Basic => KernelKind::Basic,
        Kernel::Circular => KernelKind::Circular,
        Kernel::KWay => KernelKind::KWay,
    }
}

/// Most runs one k-way group merges (cuda/merge_kway.cu: 64 pieces a tile, two per lane of
/// one warp in the partition).
pub(crate) const MAX_GROUP: usize = 64;

/// Checks `run_offsets` against `n` keys and returns the bounds of the non-empty runs
/// (`[0, ..., n]`, strictly increasing).
pub(crate) fn nonempty_bounds(n: usize, run_offsets: &[usize]) -> Result<Vec<u64>> {
    if run_offsets.first() != Some(&0) || run_offsets.last() != Some(&n) {
        return Err(Error::InvalidArgument(format!(
            "run offsets must start at 0 and end at the key count {n}, got {:?}..{:?}",
            run_offsets.first(),
            run_offsets.last()
        )));
    }
    let mut b = vec![0u64];
    for w in run_offsets.windows(2) {
        if w[1] < w[0] {
            return Err(Error::InvalidArgument("run offsets must not decrease".into()));
        }
        if w[1] > w[0] {
            b.push(w[1] as u64);
        }
    }
    Ok(b)
}

/// Tile and group size of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Outputs per tile (one block each; the circular kernel's block streams a section of
    /// `circ_tiles` tiles).
    pub tile: u64,
    /// Adjacent runs merged together (2 for the pairwise tree).
    pub group: u32,
}

/// The geometry of `kind` under `policy` for a level of `nruns` runs.
pub(crate) fn geometry(kind: KernelKind, policy: &Policy, nruns: usize) -> Geometry {
    let th = policy.threads as u64;
    let (tile, group) = match kind {
        KernelKind::Basic => (th * policy.ipt_basic as u64, 2),
        KernelKind::Tiled => (th * policy.ipt_tiled as u64, 2),
        KernelKind::Circular => (th * policy.ipt_circ as u64 * policy.circ_tiles as u64, 2),
        KernelKind::KWay => (th * policy.ipt_kway as u64, kway_group(nruns)),
    };
    Geometry { tile, group }
}

/// The k-way kernel's group size for a level of `nruns` runs: all of them where one level
/// can take them (at most [`MAX_GROUP`]); otherwise the fewest levels that can, with the
/// power of two that spreads the rounds evenly over them (100 runs: groups of 16, then one
/// of 7, not 64 then a 2-way level; 65,536 sorted tiles: 64, 32, 32). A block merges its
/// group in ceil(log2 group) rounds in shared memory.
fn kway_group(nruns: usize) -> u32 {
    let bits = usize::BITS - nruns.saturating_sub(1).leading_zeros(); // ceil(log2 nruns)
    let max_bits = MAX_GROUP.trailing_zeros();
    let levels = bits.div_ceil(max_bits).max(1);
    if levels == 1 {
        return nruns.clamp(2, MAX_GROUP) as u32;
    }
    1 << bits.div_ceil(levels)
}

/// One level of the merge: runs `bounds` merged in groups of `group`, each group cut into
/// tiles of `tile` outputs (one block each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LevelPlan {
    /// The level's run bounds (nruns + 1, level positions).
    pub bounds: Vec<u64>,
    pub group: u32,
    pub tile: u64,
    /// Group g owns blocks [tile_start[g], tile_start[g + 1]) (ngroups + 1 entries).
    pub tile_start: Vec<u64>,
    /// The k-way partition's coarse boundaries: group g's first is number
    /// coarse_start[g] + g, as tile_start numbers tiles (every `kway_coarse` tiles).
    pub coarse_start: Vec<u64>,
}

impl LevelPlan {
    pub fn nruns(&self) -> usize {
        self.bounds.len() - 1
    }

    pub fn ngroups(&self) -> usize {
        self.tile_start.len() - 1
    }

    /// Blocks of the level's merge launch.
    pub fn total_tiles(&self) -> u64 {
        *self.tile_start.last().unwrap()
    }

    /// Tile boundaries of the level (each group's start and every tile end).
    pub fn boundaries(&self) -> u64 {
        boundary_index(&self.tile_start, self.ngroups(), 0)
    }

    /// Level positions of group `g`'s first key and one past its last.
    pub fn group_range(&self, g: usize) -> (u64, u64) {
        group_range(&self.bounds, self.group as usize, g)
    }

    /// Keys in the level's largest group.
    pub fn widest_group(&self) -> u64 {
        (0..self.ngroups()).map(|g| self.group_range(g)).map(|(start, end)| end - start).max().unwrap_or(0)
    }

    /// Whether this level's k-way tiles can pack (cuda/merge_kway.cu) when its runs are
    /// random keys spread over the whole u64 range, as a sort's sorted tiles are: a tile of
    /// T outputs drawn from a group of G such keys spans about 2^64 T / G, and packs only
    /// below 2^64 / P (its positions take log2 P bits of the word, P: T rounded up to a power
    /// of two), so not where G <= T P (2^25 keys for T = 4352: the first two levels of a sort
    /// of 2^28 keys). The sort takes
    /// `merge_kway_keys` on those levels: `merge_kway`'s fallback for a tile that does not
    /// pack (the merge on tile positions) is slower than the merge on keys and indices
    /// (`docs/log/2026-12-performance-log.md`, stop 53: faster on random keys, about even on
    /// duplicate-heavy ones).
    pub fn random_tiles_pack(&self) -> bool {
        self.widest_group() > self.tile.saturating_mul(self.tile.next_power_of_two())
    }

    /// Coarse boundaries of the k-way partition's first pass.
    pub fn coarse_boundaries(&self) -> u64 {
        boundary_index(&self.coarse_start, self.ngroups(), 0)
    }

    /// Output position of the first output of block `b` (tile order is output order), or
    /// the level's length for `b` past the last block.
    pub fn block_output(&self, b: u64) -> u64 {
        let n = *self.bounds.last().unwrap();
        if b >= self.total_tiles() {
            return n;
        }
        let (g, t) = locate(&self.tile_start, b);
        let (start, end) = self.group_range(g);
        (start + t * self.tile).min(end)
    }
}

/// Level positions of group `g`'s first key and one past its last, for runs `bounds` merged
/// in groups of `group` (the last group may hold fewer runs; as `GroupPos::begin`/`end` in
/// cuda/cta_merge.cuh).
fn group_range(bounds: &[u64], group: usize, g: usize) -> (u64, u64) {
    let nruns = bounds.len() - 1;
    (bounds[g * group], bounds[((g + 1) * group).min(nruns)])
}

/// Boundary numbering: a group of T tiles has T + 1 boundaries (its start, every tile end),
/// so boundary `t` of group `g` is number `start[g] + g + t`, where `start` is a tile
/// table (or the coarse table). The one formula on the host; `boundary_index` in
/// cuda/cta_merge.cuh is the same on the device. With `g = ngroups`, `t = 0` it is the
/// number of boundaries.
pub(crate) fn boundary_index(start: &[u64], g: usize, t: u64) -> u64 {
    start[g] + g as u64 + t
}

/// The group of block `b` and its tile within the group: the last `g` with
/// `tile_start[g] <= b` (as `block_pos` in cuda/cta_merge.cuh).
pub(crate) fn locate(tile_start: &[u64], b: u64) -> (usize, u64) {
    let g = tile_start.partition_point(|&t| t <= b) - 1;
    (g, b - tile_start[g])
}

/// The levels that merge the non-empty runs `bounds` (at least two) with `kind`.
pub(crate) fn plan(kind: KernelKind, policy: &Policy, mut bounds: Vec<u64>) -> Vec<LevelPlan> {
    let mut levels = Vec::new();
    while bounds.len() > 2 {
        let nruns = bounds.len() - 1;
        let Geometry { tile, group } = geometry(kind, policy, nruns);
        let g = group as usize;
        let ngroups = nruns.div_ceil(g);
        let mut tile_start = vec![0u64];
        let mut next = Vec::with_capacity(ngroups + 1);
        for gi in 0..ngroups {
            let (s, e) = group_range(&bounds, g, gi);
            next.push(s);
            tile_start.push(tile_start[gi] + (e - s).div_ceil(tile));
        }
        next.push(*bounds.last().unwrap());
        let mut coarse_start = vec![0u64];
        for w in tile_start.windows(2) {
            coarse_start.push(coarse_start.last().unwrap() + (w[1] - w[0]).div_ceil(policy.kway_coarse as u64));
        }
        levels.push(LevelPlan { bounds, group, tile, tile_start, coarse_start });
        bounds = next;
    }
    levels
}

/// Where each level's tables sit in the metadata buffer, in u64 elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MetaOffsets {
    pub bounds: usize,
    pub tile_start: usize,
    pub coarse_start: usize,
}

/// The metadata of every level, uploaded at once: per level its bounds, tile table and
/// coarse table, one after the other.
pub(crate) fn metadata(levels: &[LevelPlan]) -> (Vec<u64>, Vec<MetaOffsets>) {
    let mut meta = Vec::new();
    let mut offsets = Vec::with_capacity(levels.len());
    for l in levels {
        let bounds = meta.len();
        meta.extend_from_slice(&l.bounds);
        let tile_start = meta.len();
        meta.extend_from_slice(&l.tile_start);
        let coarse_start = meta.len();
        meta.extend_from_slice(&l.coarse_start);
        offsets.push(MetaOffsets { bounds, tile_start, coarse_start });
    }
    (meta, offsets)
}

/// Blocks of `threads` threads for one thread per item.
pub(crate) fn blocks_for_threads(items: u64, threads: u32) -> u64 {
    items.div_ceil(threads as u64)
}

/// Blocks of `threads` threads for one warp per item.
pub(crate) fn blocks_for_warps(items: u64, threads: u32) -> u64 {
    (items * 32).div_ceil(threads as u64)
}

/// The block ranges `[b0, b1)` of a launch of `tiles` blocks cut into `chunks` launches
/// (one launch of everything when `chunks` is 0 or 1).
pub(crate) fn chunk_blocks(tiles: u64, chunks: usize) -> Vec<(u64, u64)> {
    let c = chunks.max(1) as u64;
    (0..c).map(|i| (tiles * i / c, tiles * (i + 1) / c)).collect()
}

/// The chunk whose completion makes output element `elem` final: the first chunk whose
/// end lies past it (`ends` are the chunks' output ends, nondecreasing, the last one the
/// level's length).
pub(crate) fn chunk_of(ends: &[u64], elem: u64) -> usize {
    ends.partition_point(|&e| e <= elem).min(ends.len() - 1)
}

/// Device bytes a merge of `n` keys over `levels` needs: the input keys, up to two
/// intermediate key buffers, one or two index buffers, the largest level's splits and
/// coarse splits, and [`METADATA_BYTES`] for the metadata.
pub(crate) fn device_bytes(key_bytes: usize, index_bytes: usize, n: usize, levels: &[LevelPlan]) -> usize {
    let inter_keys = levels.len().saturating_sub(1).min(2);
    let idx = if levels.len() > 1 { 2 } else { 1 };
    let splits: usize = levels.iter().map(|l| (l.total_tiles() as usize + l.ngroups()) * l.group as usize * 8).max().unwrap_or(0);
    n * key_bytes * (1 + inter_keys) + n * index_bytes * idx + splits + METADATA_BYTES
}

/// The part of [`device_bytes`] that does not grow with the keys: room for the levels'
/// metadata.
pub(crate) const METADATA_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gpu::tuning::{policy, Arch};

    fn sm90(kb: usize) -> Policy {
        policy(Arch::SM90, kb, 4)
    }

    /// Bounds of runs of the given lengths (empty runs dropped, as nonempty_bounds does).
    fn bounds_of(lens: &[u64]) -> Vec<u64> {
        let mut offsets = vec![0usize];
        for &l in lens {
            offsets.push(offsets.last().unwrap() + l as usize);
        }
        nonempty_bounds(*offsets.last().unwrap(), &offsets).unwrap()
    }

    #[test]
    fn auto_resolves_by_run_count() {
        for nruns in 2..AUTO_KWAY_MIN_RUNS {
            assert_eq!(resolve(Kernel::Auto, nruns), KernelKind::Tiled);
        }
        for nruns in [AUTO_KWAY_MIN_RUNS, 64, 1000, 65536] {
            assert_eq!(resolve(Kernel::Auto, nruns), KernelKind::KWay);
        }
        for k in Kernel::ALL.into_iter().filter(|&k| k != Kernel::Auto) {
            assert_eq!(resolve(k, 5).kernel(), k);
            assert_eq!(resolve(k, 500).kernel(), k);
        }
    }

    /// The GPU sort's levels on keys (sort.rs): a sort of 2^28 keys in 4096-key tiles
    /// merges groups of 2^18, 2^23 and 2^28 keys, and only the last level's tiles (4352
    /// outputs, 13 position bits) pack.
    #[test]
    fn random_tiles_pack_in_groups_past_a_tile_squared() {
        let p = sm90(8);
        let tile = p.sort_tile();
        let n = 1u64 << 28;
        let bounds: Vec<u64> = (0..n).step_by(tile as usize).chain(std::iter::once(n)).collect();
        let levels = plan(KernelKind::KWay, &p, bounds);
        let widest: Vec<u64> = levels.iter().map(|l| l.widest_group()).collect();
        assert_eq!(widest, vec![1 << 18, 1 << 23, 1 << 28]);
        assert_eq!(levels.iter().map(|l| l.random_tiles_pack()).collect::<Vec<_>>(), vec![false, false, true]);
        // A group of exactly T P keys does not pack, one key more does.
        let t = levels[0].tile;
        assert_eq!((t, t.next_power_of_two()), (4352, 8192));
        for (total, packs) in [(t * t, false), (t * 8192, false), (t * 8192 + 1, true)] {
            let l = &plan(KernelKind::KWay, &p, vec![0, total / 2, total])[0];
            assert_eq!((l.widest_group(), l.random_tiles_pack()), (total, packs));
        }
        // The widest group counts every run of it, whatever their lengths.
        let l = &plan(KernelKind::KWay, &p, bounds_of(&[t * t, t * t, t * t, 5]))[0];
        assert_eq!(l.widest_group(), 3 * t * t + 5);
        // Several groups (65 runs: groups of 16, the last of one run): the widest, not the last.
        let l = &plan(KernelKind::KWay, &p, bounds_of(&[10; 65]))[0];
        assert_eq!((l.ngroups(), l.widest_group()), (5, 160));
    }

    #[test]
    fn kway_groups_spread_the_rounds() {
        let groups = |mut nruns: usize| {
            let mut v = Vec::new();
            while nruns > 1 {
                let g = kway_group(nruns) as usize;
                v.push(g.min(nruns));
                nruns = nruns.div_ceil(g);
            }
            v
        };
        assert_eq!(groups(2), vec![2]);
        assert_eq!(groups(7), vec![7]);
        assert_eq!(groups(64), vec![64]);
        assert_eq!(groups(65), vec![16, 5]);
        assert_eq!(groups(100), vec![16, 7]);
        assert_eq!(groups(4096), vec![64, 64]);
        assert_eq!(groups(65536), vec![64, 32, 32]);
        for n in 2..5000 {
            let g = groups(n);
            assert!(g.iter().all(|&x| (2..=MAX_GROUP).contains(&x)), "{n}: {g:?}");
            assert_eq!(g.len() as u32, (usize::BITS - (n - 1).leading_zeros()).div_ceil(6), "{n}: {g:?}");
        }
    }

    #[test]
    fn bounds_are_checked() {
        assert_eq!(nonempty_bounds(5, &[0, 0, 2, 2, 5]).unwrap(), vec![0, 2, 5]);
        assert_eq!(nonempty_bounds(0, &[0]).unwrap(), vec![0]);
        assert!(nonempty_bounds(5, &[0, 4]).is_err());
        assert!(nonempty_bounds(5, &[1, 5]).is_err());
        assert!(nonempty_bounds(5, &[0, 3, 2, 5]).is_err());
        assert!(nonempty_bounds(0, &[]).is_err());
    }

    #[test]
    fn geometry_is_the_policy() {
        let p = sm90(8);
        assert_eq!(geometry(KernelKind::Tiled, &p, 2), Geometry { tile: 3840, group: 2 });
        assert_eq!(geometry(KernelKind::Basic, &p, 9), Geometry { tile: 1024, group: 2 });
        assert_eq!(geometry(KernelKind::Circular, &p, 2), Geometry { tile: 8192, group: 2 });
        assert_eq!(geometry(KernelKind::KWay, &p, 2), Geometry { tile: 4352, group: 2 });
        assert_eq!(geometry(KernelKind::KWay, &p, 17), Geometry { tile: 4352, group: 17 });
        assert_eq!(geometry(KernelKind::KWay, &p, 100), Geometry { tile: 4352, group: 16 });
        assert_eq!(geometry(KernelKind::Tiled, &sm90(32), 2).tile, 1280);
        assert_eq!(geometry(KernelKind::Tiled, &sm90(4), 2).tile, 4864);
    }

    /// Levels: pairwise kinds take ceil(log2 k) levels, the k-way kernel ceil(log64 k);
    /// every level's groups cover its runs and their tiles cover each group's outputs.
    #[test]
    fn levels_cover_the_runs() {
        let lens: Vec<u64> = (0..100).map(|i| (i * 37) % 500 + 1).collect();
        let n: u64 = lens.iter().sum();
        for kind in KernelKind::ALL {
            let p = sm90(8);
            let levels = plan(kind, &p, bounds_of(&lens));
            let expect = if kind == KernelKind::KWay { 2 } else { 7 };
            assert_eq!(levels.len(), expect, "{kind:?}");
            for (li, l) in levels.iter().enumerate() {
                assert_eq!(*l.bounds.last().unwrap(), n);
                assert_eq!(l.ngroups(), l.nruns().div_ceil(l.group as usize));
                for g in 0..l.ngroups() {
                    let s = l.bounds[g * l.group as usize];
                    let e = l.bounds[((g + 1) * l.group as usize).min(l.nruns())];
                    assert_eq!(l.tile_start[g + 1] - l.tile_start[g], (e - s).div_ceil(l.tile));
                    let tiles = l.tile_start[g + 1] - l.tile_start[g];
                    assert_eq!(l.coarse_start[g + 1] - l.coarse_start[g], tiles.div_ceil(p.kway_coarse as u64));
                }
                if li + 1 < levels.len() {
                    assert_eq!(levels[li + 1].nruns(), l.ngroups());
                }
            }
            assert_eq!(levels.last().unwrap().ngroups(), 1);
        }
        // Two runs: one level; one run: none.
        assert_eq!(plan(KernelKind::Tiled, &sm90(8), bounds_of(&[5, 7])).len(), 1);
        assert!(plan(KernelKind::Tiled, &sm90(8), bounds_of(&[5])).is_empty());
    }

    /// block_output walks the tiles in output order: from 0 to n, never back, each block
    /// starting where its group's outputs say.
    #[test]
    fn block_outputs_and_boundaries() {
        let levels = plan(KernelKind::KWay, &sm90(8), bounds_of(&[5000, 1, 0, 3000, 70, 9000, 4096]));
        let l = &levels[0];
        assert_eq!(l.group, 6);
        let n = *l.bounds.last().unwrap();
        assert_eq!(l.block_output(0), 0);
        assert_eq!(l.block_output(l.total_tiles()), n);
        let mut prev = 0;
        for b in 0..=l.total_tiles() {
            let o = l.block_output(b);
            assert!(o >= prev);
            prev = o;
        }
        // Boundary numbers: group g's are [index(g, 0), index(g, tiles_g)], consecutive
        // across groups, and their count is total tiles + groups.
        let pairs = plan(KernelKind::Tiled, &sm90(8), bounds_of(&[5000, 1, 3000, 70, 9000]));
        let l = &pairs[0];
        let mut next = 0;
        for g in 0..l.ngroups() {
            let tiles = l.tile_start[g + 1] - l.tile_start[g];
            for t in 0..=tiles {
                assert_eq!(boundary_index(&l.tile_start, g, t), next);
                next += 1;
            }
        }
        assert_eq!(next, l.boundaries());
        assert_eq!(l.boundaries(), l.total_tiles() + l.ngroups() as u64);
        for b in 0..l.total_tiles() {
            let (g, t) = locate(&l.tile_start, b);
            assert!(t < l.tile_start[g + 1] - l.tile_start[g]);
            assert_eq!(l.tile_start[g] + t, b);
        }
    }

    #[test]
    fn metadata_layout() {
        let levels = plan(KernelKind::Tiled, &sm90(8), bounds_of(&[10, 20, 30]));
        let (meta, offs) = metadata(&levels);
        assert_eq!(offs.len(), levels.len());
        for (l, o) in levels.iter().zip(&offs) {
            assert_eq!(&meta[o.bounds..o.bounds + l.bounds.len()], &l.bounds[..]);
            assert_eq!(&meta[o.tile_start..o.tile_start + l.tile_start.len()], &l.tile_start[..]);
            assert_eq!(&meta[o.coarse_start..o.coarse_start + l.coarse_start.len()], &l.coarse_start[..]);
        }
        let last = levels.last().unwrap();
        assert_eq!(meta.len(), offs.last().unwrap().coarse_start + last.coarse_start.len());
    }

    #[test]
    fn grids_and_chunks() {
        assert_eq!(blocks_for_threads(0, 256), 0);
        assert_eq!(blocks_for_threads(257, 256), 2);
        assert_eq!(blocks_for_warps(8, 256), 1);
        assert_eq!(blocks_for_warps(9, 256), 2);
        assert_eq!(chunk_blocks(10, 0), vec![(0, 10)]);
        assert_eq!(chunk_blocks(10, 1), vec![(0, 10)]);
        let c = chunk_blocks(10, 8);
        assert_eq!(c.len(), 8);
        assert_eq!(c[0].0, 0);
        assert_eq!(c[7].1, 10);
        assert!(c.windows(2).all(|w| w[0].1 == w[1].0));
        // Fewer blocks than chunks: some chunks are empty, still in order.
        assert!(chunk_blocks(3, 8).windows(2).all(|w| w[0].1 == w[1].0));
        let ends = [100, 100, 250, 400];
        assert_eq!(chunk_of(&ends, 0), 0);
        assert_eq!(chunk_of(&ends, 99), 0);
        assert_eq!(chunk_of(&ends, 100), 2);
        assert_eq!(chunk_of(&ends, 399), 3);
        assert_eq!(chunk_of(&ends, 400), 3);
    }

    /// The device memory formula (unchanged from the engine's first version): 2^28 u64 keys
    /// in two runs with u32 indices, one level.
    #[test]
    fn device_bytes_formula() {
        let n = 1usize << 28;
        let levels = plan(KernelKind::Tiled, &sm90(8), vec![0, n as u64 / 2, n as u64]);
        let tiles = n.div_ceil(3840); // the tiled kernel's tile of u64 keys on sm_90
        assert_eq!(device_bytes(8, 4, n, &levels), n * 8 + n * 4 + (tiles + 1) * 2 * 8 + (1 << 20));
        let three = plan(KernelKind::Tiled, &sm90(8), bounds_of(&[1000; 5]));
        assert_eq!(three.len(), 3);
        let splits = three.iter().map(|l| (l.total_tiles() as usize + l.ngroups()) * 16).max().unwrap();
        assert_eq!(device_bytes(8, 8, 5000, &three), 5000 * 8 * 3 + 5000 * 8 * 2 + splits + (1 << 20));
    }
}

//! The CPU engine: merge path on rayon threads.
//!
//! A merge of up to [`MAX_RUNS`](super::kway::MAX_RUNS) sorted runs (the inputs of a
//! round, the files of `corank merge`) is one pass of a loser tree ([`super::kway`]). More
//! runs, and the sort's tiles and chunks ([`merge_runs`]), are merged by a tree of stable
//! pairwise merges of adjacent runs (run 2p with run 2p+1, then the results, ...),
//! ceil(log2 k) levels. Within a level every pair's output
//! occupies exactly the global range of its two inputs, so the whole level's output is cut
//! into equal chunks; each chunk finds, for every pair it overlaps, its input bounds by
//! [`co_rank`] and merges that piece independently. The GPU kernels do the same per block.

use super::co_rank::co_rank;
use crate::cancel::{is_set, Cancel};
use crate::keys::KeyWord;
use crate::permutation::Indices;
use rayon::prelude::*;
use std::borrow::Cow;

/// Output rows per parallel task (at least): large enough that the two co-rank searches
/// per task are noise, small enough that 2–16 threads get balanced work.
const MIN_CHUNK: usize = 1 << 14;

/// A permutation index type: `u32` while the total fits, `u64` beyond.
pub trait RowIndex: Copy + Ord + Send + Sync + Default + 'static {
    fn from_usize(i: usize) -> Self;
}
impl RowIndex for u32 {
    #[inline]
    fn from_usize(i: usize) -> Self {
        i as u32
    }
}
impl RowIndex for u64 {
    #[inline]
    fn from_usize(i: usize) -> Self {
        i as u64
    }
}

/// Stable merge of the sorted runs `keys[run_offsets[r]..run_offsets[r + 1]]`, returning the
/// global index of every output row.
pub fn merge_cpu<T: KeyWord>(keys: &[T], run_offsets: &[usize]) -> Indices {
    merge_cpu_until(keys, run_offsets, None)
}

/// [`merge_cpu`] that stops early once `cancel` is set ([`merge_runs`]: its indices are
/// then not in order, and the caller checks the token after).
pub(crate) fn merge_cpu_until<T: KeyWord>(keys: &[T], run_offsets: &[usize], cancel: Option<&Cancel>) -> Indices {
    if keys.len() <= u32::MAX as usize {
        Indices::U32(merge_tree::<T, u32>(keys, run_offsets, cancel))
    } else {
        Indices::U64(merge_tree::<T, u64>(keys, run_offsets, cancel))
    }
}

fn merge_tree<T: KeyWord, I: RowIndex>(keys: &[T], run_offsets: &[usize], cancel: Option<&Cancel>) -> Vec<I> {
    // A few runs (the inputs of a round, the files of `corank merge`) merge in one pass.
    let runs = run_offsets.windows(2).filter(|w| w[1] > w[0]).count();
    if runs <= super::kway::MAX_RUNS {
        return super::kway::merge_kway(keys, run_offsets, MIN_CHUNK, cancel);
    }
    let idx: Vec<I> = if keys.len() <= MIN_CHUNK {
        (0..keys.len()).map(I::from_usize).collect()
    } else {
        (0..keys.len()).into_par_iter().map(I::from_usize).collect()
    };
    merge_runs::<T, I, false>(Cow::Borrowed(keys), idx, run_offsets, cancel)
}

/// The merge tree from given start indices: stable merge of the sorted runs
/// `keys[run_offsets[r]..run_offsets[r + 1]]` whose rows carry `idx` (same length as
/// `keys`); returns `idx` in merged order. Ties go to the earlier run, so the result is
/// stable with respect to the runs' order whatever `idx` holds. Borrowed keys are only read;
/// owned keys' buffer becomes the second level's output (one allocation fewer). The sort
/// ([`super::sort`]) starts it from its sorted tiles and their positions.
///
/// `BRANCHLESS`: each step of the sequential merges picks its side without a branch (see
/// [`merge_serial_branchless`]), for runs whose keys interleave at random (the sort's tiles
/// and chunks), where a branch mispredicts every other row; the merge of more sorted inputs
/// than the one-pass merge takes uses [`merge_serial_blocks`], which copies the long stretches that come from one run a block at
/// a time and merges the rest without a branch (its rows may interleave as finely).
///
/// Once `cancel` is set, no further level starts and the indices returned are not in
/// order: the caller, which passed the token, checks it after ([`crate::cancel`]).
pub(crate) fn merge_runs<T: KeyWord, I: RowIndex, const BRANCHLESS: bool>(
    keys: Cow<[T]>,
    mut idx: Vec<I>,
    run_offsets: &[usize],
    cancel: Option<&Cancel>,
) -> Vec<I> {
    let n = keys.len();
    assert_eq!(*run_offsets.last().unwrap_or(&0), n, "run offsets must end at the key count");
    assert_eq!(idx.len(), n, "one start index per key");
    // Drop empty runs: they contribute nothing and only add levels.
    let mut bounds: Vec<usize> = Vec::with_capacity(run_offsets.len());
    bounds.push(0);
    for w in run_offsets.windows(2) {
        if w[1] > w[0] {
            bounds.push(w[1]);
        }
    }
    if bounds.len() <= 2 {
        return idx; // zero or one non-empty run: already in order
    }
    // The first level reads the input keys in place; later levels ping-pong between two
    // buffers (the input's own when owned, else a second one allocated only if there is a
    // second level).
    let mut src_keys: Cow<[T]> = keys;
    let mut dst_keys: Vec<T> = vec![T::default(); n];
    let mut dst_idx: Vec<I> = vec![I::default(); n];
    let chunk = (n / (rayon::current_num_threads() * 8)).max(MIN_CHUNK);
    // Each level halves the number of runs; `bounds` holds run starts plus the end.
    while bounds.len() > 2 && !is_set(cancel) {
        // Pairs of adjacent runs: [bounds[2p], bounds[2p+1]) and [bounds[2p+1], bounds[2p+2]);
        // an odd last run is copied through as a pair with an empty second run.
        let pairs: Vec<(usize, usize, usize)> = (0..bounds.len() - 1)
            .step_by(2)
            .map(|p| {
                let end = bounds[(p + 2).min(bounds.len() - 1)];
                (bounds[p], bounds[(p + 1).min(bounds.len() - 1)], end)
            })
            .collect();
        let (sk, si) = (&src_keys, &idx);
        if n <= chunk {
            // One chunk: merged on the calling thread (the pool's hand-off costs more).
            merge_chunk::<T, I, BRANCHLESS>(sk, si, &pairs, 0, &mut dst_keys, &mut dst_idx);
        } else {
            dst_keys.par_chunks_mut(chunk).zip(dst_idx.par_chunks_mut(chunk)).enumerate().for_each(|(c, (out_k, out_i))| {
                if is_set(cancel) {
                    return; // the level is abandoned (see above)
                }
                let start = c * chunk;
                merge_chunk::<T, I, BRANCHLESS>(sk, si, &pairs, start, out_k, out_i);
            });
        }
        let old = std::mem::replace(&mut src_keys, Cow::Owned(std::mem::take(&mut dst_keys)));
        dst_keys = match old {
            Cow::Owned(v) => v,
            Cow::Borrowed(_) => vec![T::default(); n],
        };
        std::mem::swap(&mut idx, &mut dst_idx);
        bounds = pairs.iter().map(|p| p.0).chain(std::iter::once(n)).collect();
    }
    idx
}

/// Writes output rows `[start, start + out_k.len())` of one level: for each pair of runs
/// that overlaps this range, co-rank both ends of the overlap and merge the pieces.
fn merge_chunk<T: KeyWord, I: RowIndex, const BRANCHLESS: bool>(
    keys: &[T],
    idx: &[I],
    pairs: &[(usize, usize, usize)],
    start: usize,
    out_k: &mut [T],
    out_i: &mut [I],
) {
    let end = start + out_k.len();
    // The first pair whose range ends after `start`.
    let first = pairs.partition_point(|p| p.2 <= start);
    for &(a0, b0, e) in &pairs[first..] {
        if a0 >= end {
            break;
        }
        let (a, b) = (&keys[a0..b0], &keys[b0..e]);
        // Output positions of this piece, relative to the pair.
        let k_lo = start.max(a0) - a0;
        let k_hi = end.min(e) - a0;
        let i_lo = co_rank(k_lo, a, b);
        let i_hi = co_rank(k_hi, a, b);
        let (j_lo, j_hi) = (k_lo - i_lo, k_hi - i_hi);
        let o = a0 + k_lo - start;
        let merge = if BRANCHLESS { merge_serial_branchless::<T, I> } else { merge_serial_blocks::<T, I> };
        merge(
            &a[i_lo..i_hi],
            &idx[a0 + i_lo..a0 + i_hi],
            &b[j_lo..j_hi],
            &idx[b0 + j_lo..b0 + j_hi],
            &mut out_k[o..o + (k_hi - k_lo)],
            &mut out_i[o..o + (k_hi - k_lo)],
        );
    }
}

/// The end of a sequential merge: one input is used up, the rest of the other (`a`'s rest
/// then `b`'s, one of them empty) fills the rest of the output.
#[inline]
fn copy_rests<T: Copy, I: Copy>(a: &[T], ai: &[I], b: &[T], bi: &[I], out_k: &mut [T], out_i: &mut [I]) {
    let (ka, kb) = out_k.split_at_mut(a.len());
    let (ia, ib) = out_i.split_at_mut(a.len());
    ka.copy_from_slice(a);
    ia.copy_from_slice(ai);
    kb.copy_from_slice(b);
    ib.copy_from_slice(bi);
}

/// Rows a step of [`merge_serial_blocks`] decides at once.
const BLOCK: usize = 32;

/// Sequential stable merge of two sorted pieces (ties take from `a`), keys with their
/// indices, for sorted inputs that come in long stretches from one side, or interleave row
/// by row, or both in turn (the merge of sorted inputs, whose rows may
/// interleave at random, as the lineitem files' order keys do, or come from one file for
/// long stretches): a block of [`BLOCK`] rows that all come from one side (its last row
/// sorts before the other side's head) is copied at once; elsewhere [`BLOCK`] steps of the
/// branch-free merge ([`merge_serial_branchless`]), where a branch would mispredict every
/// other row. A block is taken from `a` only where
/// its last key `<=` `b`'s head (ties go to `a`), from `b` only where its last key `<`
/// `a`'s head.
#[inline]
pub fn merge_serial_blocks<T: Ord + Copy, I: Copy>(a: &[T], ai: &[I], b: &[T], bi: &[I], out_k: &mut [T], out_i: &mut [I]) {
    debug_assert_eq!(a.len() + b.len(), out_k.len());
    let (ai, bi) = (&ai[..a.len()], &bi[..b.len()]);
    let (mut i, mut j, mut o) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        if i + BLOCK <= a.len() && a[i + BLOCK - 1] <= b[j] {
            out_k[o..o + BLOCK].copy_from_slice(&a[i..i + BLOCK]);
            out_i[o..o + BLOCK].copy_from_slice(&ai[i..i + BLOCK]);
            (i, o) = (i + BLOCK, o + BLOCK);
            continue;
        }
        if j + BLOCK <= b.len() && b[j + BLOCK - 1] < a[i] {
            out_k[o..o + BLOCK].copy_from_slice(&b[j..j + BLOCK]);
            out_i[o..o + BLOCK].copy_from_slice(&bi[j..j + BLOCK]);
            (j, o) = (j + BLOCK, o + BLOCK);
            continue;
        }
        // Neither side runs out within `steps` steps: each step takes one row of one side.
        let steps = BLOCK.min(a.len() - i).min(b.len() - j);
        for _ in 0..steps {
            branchless_step(a, ai, b, bi, out_k, out_i, (&mut i, &mut j, &mut o));
        }
    }
    copy_rests(&a[i..], &ai[i..], &b[j..], &bi[j..], &mut out_k[o..], &mut out_i[o..]);
}

/// One step of a stable merge without a data-dependent branch: both heads `a[i]`, `b[j]`
/// are read, the smaller (ties: `a`'s) is written at `o`, and the side taken advances by
/// the comparison's value. Both sides must have a row left.
#[inline(always)]
fn branchless_step<T: Ord + Copy, I: Copy>(
    a: &[T],
    ai: &[I],
    b: &[T],
    bi: &[I],
    out_k: &mut [T],
    out_i: &mut [I],
    (i, j, o): (&mut usize, &mut usize, &mut usize),
) {
    let (x, y) = (a[*i], b[*j]);
    let take_a = x <= y;
    // (A plain `if` compiles to a branch on the comparison; this to conditional moves.)
    out_k[*o] = std::hint::select_unpredictable(take_a, x, y);
    out_i[*o] = std::hint::select_unpredictable(take_a, ai[*i], bi[*j]);
    *i += take_a as usize;
    *j += !take_a as usize;
    *o += 1;
}

/// Sequential stable merge of two sorted pieces (ties take from `a`) without a
/// data-dependent branch per row: both heads are read, the
/// smaller (ties: `a`'s) is written, and the side taken advances by the comparison's value.
/// The same output as a merge that branches on the comparison, faster on random keys (no branch to mispredict;
/// `docs/performance.md`).
#[inline]
pub fn merge_serial_branchless<T: Ord + Copy, I: Copy>(a: &[T], ai: &[I], b: &[T], bi: &[I], out_k: &mut [T], out_i: &mut [I]) {
    debug_assert_eq!(a.len() + b.len(), out_k.len());
    let (ai, bi) = (&ai[..a.len()], &bi[..b.len()]);
    let (mut i, mut j, mut o) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        branchless_step(a, ai, b, bi, out_k, out_i, (&mut i, &mut j, &mut o));
    }
    copy_rests(&a[i..], &ai[i..], &b[j..], &bi[j..], &mut out_k[o..], &mut out_i[o..]);
}

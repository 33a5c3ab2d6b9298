//! The CPU merge of a few sorted runs in one pass: a loser tree over the runs' heads.
//!
//! The merge tree of [`super::cpu`] copies every row's key word and index once per level,
//! `ceil(log2 k)` times for `k` runs; a loser tree reads each key once and writes each index
//! once, and each output row costs `log2 k` comparisons that stay in the first-level cache
//! (the tree's nodes hold the losers' keys, not their positions).
//!
//! **Order.** Rows are ordered by (key, run, position in the run): the stable merge, ties to
//! the earlier run. A tree node compares (key, tag), where a live run's tag is its number and
//! a used-up run's is the tree's width plus its number with the largest key of the runs as
//! its key, so a used-up run loses to every live one and never wins while one is left.
//!
//! **Stretches.** Where the same run wins twice in a row, its next [`BLOCK`] rows are taken
//! at once if the last of them sorts before every loser on its path to the root (those
//! losers hold the runner-up): files split by key ranges merge a block at a time, while
//! inputs that interleave row by row (where a run seldom wins twice) pay no test.
//!
//! **In parallel.** The output is cut into pieces at splitter rows: a row `(key, r, p)` of
//! run `r` has, in every run `q`, the rows before it in the merge order: those with a key
//! `<=` key for `q < r`, the first `p` rows of run `r`, those with a key `<` key for `q > r`.
//! Its output position is their sum, so the pieces between consecutive splitters merge
//! independently into their own ranges of the output. Splitters are sampled rows, evenly
//! spaced over all rows; the piece ends are the samples whose positions come nearest to
//! equal shares.

use crate::cancel::{is_set, Cancel};
use crate::engine::cpu::RowIndex;
use crate::keys::KeyWord;
use rayon::prelude::*;

/// Rows the winning run gives at once where it wins twice in a row and its next rows all
/// sort before the runner-up.
const BLOCK: usize = 32;

/// Runs up to which the one-pass merge is used; beyond, the tree's nodes leave the first
/// cache levels and the merge tree of pairwise merges ([`super::cpu`]) streams instead.
pub(crate) const MAX_RUNS: usize = 64;

/// A tree node: a run's head key, and the run's tag (see the module doc).
#[derive(Clone, Copy)]
struct Node<T> {
    key: T,
    tag: u32,
}

/// Whether `a` comes before `b`: by key, ties by tag (the earlier run first). Both parts are
/// computed and combined without a branch (the order of interleaved runs is unpredictable).
#[inline(always)]
fn before<T: KeyWord>(a: &Node<T>, b: &Node<T>) -> bool {
    (a.key < b.key) | ((a.key == b.key) & (a.tag < b.tag))
}

/// The stable merge of the sorted runs `keys[run_offsets[r]..run_offsets[r + 1]]` (empty
/// runs allowed), returning the global index of every output row. At most [`MAX_RUNS`]
/// non-empty runs are expected (more are merged all the same, with a larger tree).
///
/// Once `cancel` is set no further piece starts and the indices returned are not in order:
/// the caller, which passed the token, checks it after ([`crate::cancel`]).
pub(crate) fn merge_kway<T: KeyWord, I: RowIndex>(keys: &[T], run_offsets: &[usize], min_chunk: usize, cancel: Option<&Cancel>) -> Vec<I> {
    let n = keys.len();
    assert_eq!(*run_offsets.last().unwrap_or(&0), n, "run offsets must end at the key count");
    let runs: Vec<(usize, usize)> = run_offsets.windows(2).filter(|w| w[1] > w[0]).map(|w| (w[0], w[1])).collect();
    let mut out: Vec<I> = vec![I::default(); n];
    if runs.len() <= 1 {
        out.iter_mut().enumerate().for_each(|(i, o)| *o = I::from_usize(i));
        return out;
    }
    let chunk = (n / (rayon::current_num_threads() * 8)).max(min_chunk);
    let pieces = n.div_ceil(chunk);
    if pieces <= 1 {
        merge_piece(keys, &runs, &mut out);
        return out;
    }
    let cuts = piece_cuts(keys, &runs, pieces);
    // Each piece's output range, split off `out` in order.
    let mut tasks: Vec<(&[usize], &[usize], &mut [I])> = Vec::with_capacity(cuts.len() - 1);
    let mut rest: &mut [I] = &mut out;
    for w in cuts.windows(2) {
        let (lo, hi) = (&w[0], &w[1]);
        let rows = hi.0 - lo.0;
        let (piece, tail) = std::mem::take(&mut rest).split_at_mut(rows);
        rest = tail;
        tasks.push((&lo.1, &hi.1, piece));
    }
    tasks.into_par_iter().for_each(|(lo, hi, piece)| {
        if is_set(cancel) {
            return; // abandoned (see above)
        }
        let bounds: Vec<(usize, usize)> = lo.iter().zip(hi).map(|(&a, &b)| (a, b)).collect();
        merge_piece(keys, &bounds, piece);
    });
    out
}

/// A cut of the output: its position, and the global row where each run's part after the
/// cut starts.
type Cut = (usize, Vec<usize>);

/// The cuts between `pieces` pieces of about equal size, the output's start and end
/// included (fewer where samples coincide).
fn piece_cuts<T: KeyWord>(keys: &[T], runs: &[(usize, usize)], pieces: usize) -> Vec<Cut> {
    let n = keys.len();
    let start: Cut = (0, runs.iter().map(|r| r.0).collect());
    let end: Cut = (n, runs.iter().map(|r| r.1).collect());
    // Samples evenly spaced over all rows (four a piece), each with its exact cut.
    let samples = 4 * pieces;
    let mut cuts: Vec<Cut> = (1..samples)
        .map(|s| {
            let g = s * n / samples;
            let r = runs.partition_point(|run| run.1 <= g);
            cut_at(keys, runs, r, g)
        })
        .collect();
    cuts.sort_unstable_by_key(|c| c.0);
    // The sample nearest to each equal share (positions grow with the samples' order).
    let mut chosen = vec![start];
    for p in 1..pieces {
        let target = p * n / pieces;
        let i = cuts.partition_point(|c| c.0 < target);
        let best = match (i.checked_sub(1).map(|j| &cuts[j]), cuts.get(i)) {
            (Some(a), Some(b)) => {
                if target - a.0 <= b.0 - target {
                    a
                } else {
                    b
                }
            }
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => continue,
        };
        if best.0 > chosen.last().expect("starts with the start").0 {
            chosen.push(best.clone());
        }
    }
    chosen.push(end);
    chosen
}

/// The cut before row `g` (global), which lies in run `r` (see the module doc).
fn cut_at<T: KeyWord>(keys: &[T], runs: &[(usize, usize)], r: usize, g: usize) -> Cut {
    let key = keys[g];
    let bounds: Vec<usize> = runs
        .iter()
        .enumerate()
        .map(|(q, &(a, b))| {
            let run = &keys[a..b];
            a + match q.cmp(&r) {
                std::cmp::Ordering::Less => run.partition_point(|x| *x <= key),
                std::cmp::Ordering::Equal => g - a,
                std::cmp::Ordering::Greater => run.partition_point(|x| *x < key),
            }
        })
        .collect();
    let position = bounds.iter().zip(runs).map(|(&b, run)| b - run.0).sum();
    (position, bounds)
}

/// Merges the rows `bounds[q].0..bounds[q].1` of every run `q` (global rows, runs in order)
/// into `out` (as long as they are together) with a loser tree.
fn merge_piece<T: KeyWord, I: RowIndex>(keys: &[T], bounds: &[(usize, usize)], out: &mut [I]) {
    let k = bounds.len();
    let width = k.next_power_of_two().max(2);
    let mut next: Vec<usize> = (0..width).map(|q| bounds.get(q).map_or(0, |b| b.0)).collect();
    let end: Vec<usize> = (0..width).map(|q| bounds.get(q).map_or(0, |b| b.1)).collect();
    // The largest key of the piece: a used-up run's key (its tag puts it last).
    let Some(largest) = bounds.iter().filter(|b| b.1 > b.0).map(|b| keys[b.1 - 1]).max() else {
        return; // an empty piece
    };
    let head = |q: usize, at: usize| -> Node<T> {
        if at < end[q] {
            Node { key: keys[at], tag: q as u32 }
        } else {
            Node { key: largest, tag: (width + q) as u32 }
        }
    };
    // Build: winners bottom up, each node keeping the loser of its two children.
    let mut losers: Vec<Node<T>> = vec![head(0, next[0]); width];
    let mut winners: Vec<Node<T>> = vec![head(0, next[0]); 2 * width];
    for q in 0..width {
        winners[width + q] = head(q, next[q]);
    }
    for v in (1..width).rev() {
        let (l, r) = (winners[2 * v], winners[2 * v + 1]);
        let right_first = before(&r, &l);
        winners[v] = if right_first { r } else { l };
        losers[v] = if right_first { l } else { r };
    }
    let mut winner = winners[1];
    let mask = (width - 1) as u32;
    let (mut o, mut previous) = (0, usize::MAX);
    while o < out.len() {
        let q = (winner.tag & mask) as usize;
        let at = next[q];
        let mut take = 1;
        // The same run won twice: maybe a stretch (see the module doc).
        if q == previous && at + BLOCK <= end[q] {
            let last = Node { key: keys[at + BLOCK - 1], tag: q as u32 };
            let mut v = (q + width) >> 1;
            let mut all_before = true;
            while v >= 1 {
                all_before &= before(&last, &losers[v]);
                v >>= 1;
            }
            if all_before {
                take = BLOCK;
            }
        }
        previous = q;
        for (j, slot) in out[o..o + take].iter_mut().enumerate() {
            *slot = I::from_usize(at + j);
        }
        o += take;
        next[q] = at + take;
        // Replay the run's new head from its leaf to the root.
        winner = head(q, at + take);
        let mut v = (q + width) >> 1;
        while v >= 1 {
            let loser = losers[v];
            let swap = before(&loser, &winner);
            losers[v] = std::hint::select_unpredictable(swap, winner, loser);
            winner = std::hint::select_unpredictable(swap, loser, winner);
            v >>= 1;
        }
    }
}

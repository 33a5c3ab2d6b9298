//! The merge's result: for every output row, the global index of the input row it comes
//! from (its position in the concatenation of the runs, in run order).

/// Splits a global index into (run, row within run), given the runs' start offsets (the last
/// entry the total).
#[inline]
pub fn locate(run_offsets: &[usize], global: usize) -> (usize, usize) {
    // The run is the last one whose offset is <= global (empty runs share offsets).
    let run = run_offsets.partition_point(|&o| o <= global) - 1;
    (run, global - run_offsets[run])
}

/// `locate` in constant time, for the gathers' per-row lookups: a table of the run that
/// holds the first index of each bucket of `2^shift` indices (about four buckets a run),
/// then a forward step over the runs that start inside the bucket (most often none). A
/// round's runs are its input batches (thousands in a GPU round), where a binary search
/// per row was a third of a small round's time.
pub struct RunLocator<'a> {
    offsets: &'a [usize],
    total: usize,
    shift: u32,
    first_run: Vec<u32>,
}

impl<'a> RunLocator<'a> {
    /// The locator of runs starting at `run_offsets` (the last entry the total).
    pub fn new(run_offsets: &'a [usize]) -> Self {
        let total = run_offsets.last().copied().unwrap_or(0);
        let runs = run_offsets.len().saturating_sub(1);
        let bucket = (total / (4 * runs.max(1))).max(1);
        let shift = usize::BITS - 1 - bucket.leading_zeros(); // floor(log2(bucket))
        let buckets = if total == 0 { 0 } else { ((total - 1) >> shift) + 1 };
        let mut first_run = Vec::with_capacity(buckets);
        let mut run = 0;
        for b in 0..buckets {
            let start = b << shift;
            while run_offsets[run + 1] <= start {
                run += 1;
            }
            first_run.push(run as u32);
        }
        RunLocator { offsets: run_offsets, total, shift, first_run }
    }

    /// (run, row within run) of global index `global`, as [`locate`].
    #[inline]
    pub fn locate(&self, global: usize) -> (usize, usize) {
        if global >= self.total {
            return locate(self.offsets, global); // past the end: as locate says
        }
        let mut run = self.first_run[global >> self.shift] as usize;
        while self.offsets[run + 1] <= global {
            run += 1;
        }
        (run, global - self.offsets[run])
    }
}

/// Global row indices, `u32` while the total fits (half the bytes to move and store).
/// [`Permutation::indices`] holds them; [`merge_keys`](crate::merge_keys) returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Indices {
    /// Indices of an input of at most `u32::MAX` rows.
    U32(Vec<u32>),
    /// Indices of a larger input.
    U64(Vec<u64>),
}

impl Indices {
    /// The number of indices (output rows).
    pub fn len(&self) -> usize {
        match self {
            Indices::U32(v) => v.len(),
            Indices::U64(v) => v.len(),
        }
    }

    /// Whether there are no indices.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The global index of output row `i`.
    #[inline]
    pub fn get(&self, i: usize) -> usize {
        match self {
            Indices::U32(v) => v[i] as usize,
            Indices::U64(v) => v[i] as usize,
        }
    }

    /// All indices as `usize`.
    pub fn to_vec(&self) -> Vec<usize> {
        match self {
            Indices::U32(v) => v.iter().map(|&x| x as usize).collect(),
            Indices::U64(v) => v.iter().map(|&x| x as usize).collect(),
        }
    }
}

/// The stable merge order of k runs.
///
/// [`merge_permutation`](crate::merge_permutation) has an example; [`gather()`](crate::gather())
/// turns it into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    /// `run_offsets[r]` is the global index of run `r`'s first row; the last entry is the
    /// total row count (so it has one entry more than there are runs).
    pub run_offsets: Vec<usize>,
    /// For every output row, its global input index.
    pub indices: Indices,
    /// The engine that merged (`Cpu` or `Gpu`).
    pub engine: crate::options::Engine,
    /// Bytes per encoded key the engine merged (4, 8, 16, 24 or 32; 0 with no rows).
    pub key_bytes: usize,
}

impl Permutation {
    /// The number of output rows (the total of the runs' rows).
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether there are no output rows.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The number of runs (`run_offsets.len() - 1`).
    pub fn num_runs(&self) -> usize {
        self.run_offsets.len() - 1
    }

    /// Splits a global index into (run, row within run).
    #[inline]
    pub fn locate(&self, global: usize) -> (usize, usize) {
        locate(&self.run_offsets, global)
    }

    /// (run, row) of output row `i`.
    pub fn run_row(&self, i: usize) -> (usize, usize) {
        self.locate(self.indices.get(i))
    }

    /// The same runs and engine with no indices (to attach a part of the indices to).
    pub(crate) fn clone_without_indices(&self) -> Permutation {
        Permutation {
            run_offsets: self.run_offsets.clone(),
            indices: Indices::U32(Vec::new()),
            engine: self.engine,
            key_bytes: self.key_bytes,
        }
    }

    /// (run, row) of every output row, in output order.
    pub fn to_run_rows(&self) -> Vec<(usize, usize)> {
        (0..self.len()).map(|i| self.run_row(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The locator agrees with the binary search for every index (and a few past the end),
    /// with empty runs anywhere, one run, and runs of every length.
    #[test]
    fn the_locator_finds_what_the_search_finds() {
        let mut x = 0x853c_49e6_748f_ea9bu64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for case in 0..300 {
            let runs = 1 + next(if case % 3 == 0 { 3 } else { 64 }) as usize;
            let mut offsets = vec![0usize];
            for _ in 0..runs {
                let len = match next(4) {
                    0 => 0,
                    1 => next(3) as usize,
                    _ => next(200) as usize,
                };
                offsets.push(offsets.last().unwrap() + len);
            }
            let locator = RunLocator::new(&offsets);
            let total = *offsets.last().unwrap();
            for g in 0..total + 3 {
                assert_eq!(locator.locate(g), locate(&offsets, g), "offsets {offsets:?}, index {g}");
            }
        }
    }
}

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

/// Global row indices, `u32` while the total fits (half the bytes to move and store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Indices {
    U32(Vec<u32>),
    U64(Vec<u64>),
}

impl Indices {
    pub fn len(&self) -> usize {
        match self {
            Indices::U32(v) => v.len(),
            Indices::U64(v) => v.len(),
        }
    }

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
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

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
    pub fn clone_without_indices(&self) -> Permutation {
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

//! The frontier rule: merge sorted inputs of any length in bounded memory.
//!
//! Each input buffers a window of rows. Let `L_j` be the key of input `j`'s last buffered
//! row and the **frontier** `F` the smallest `(L_j, j)` over the inputs not yet exhausted
//! (key first, then input index). A buffered row `(key, i)` can be emitted when
//! `(key, i) <= F`: no input can later produce a row that sorts before it, because input `j`'s
//! future rows have keys `>= L_j`, and rows with equal keys go to the earlier input.
//! The rows of the input that defines `F` are always all emittable, so every round frees at
//! least one input's buffer: memory stays within `window_rows` per input (plus one batch),
//! and duplicates of the frontier key never stall the merge.
//!
//! Windows are counted in rows (`window_rows`) and, where the caller sets a byte budget
//! ([`FrontierMerge::set_window_bytes`]), in the buffered batches' real memory as well, so
//! wide rows (long strings) hold fewer rows.
//!
//! One round: (1) every input not exhausted holds at least one row (the caller pushes);
//! (2) find `F`; (3) per input, the emittable prefix of its buffer (binary search);
//! (4) merge those prefixes with the engine — an input's buffered batches are consecutive
//! runs, inputs in order, so the merge's stability is the inputs' order; (5) gather, and
//! drop what was emitted.

use crate::api::{merge_columns, MergeOptions};
use crate::error::{Error, Result};
use crate::gather::gather;
use crate::options::{Engine, EngineOptions};
use crate::permutation::{Indices, Permutation};
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use std::cmp::Ordering;
use std::collections::VecDeque;

/// Rows buffered per input before a round, unless the caller says otherwise (the
/// DataFusion node's `corank.window_rows` and the Parquet merge's cap).
pub const DEFAULT_WINDOW_ROWS: usize = 1 << 20;

/// Settings of a streaming merge.
#[derive(Debug, Clone)]
pub struct FrontierOptions {
    /// Which engine, kernel and device merge each round.
    pub engine: EngineOptions,
    /// Rows buffered per input before a round (at least one batch is always buffered).
    pub window_rows: usize,
    /// Rows per output batch.
    pub batch_size: usize,
    /// Check every input's order across batch boundaries and within batches.
    pub check_sorted: bool,
}

impl Default for FrontierOptions {
    fn default() -> Self {
        Self { engine: EngineOptions::default(), window_rows: DEFAULT_WINDOW_ROWS, batch_size: 8192, check_sorted: false }
    }
}

/// A buffered batch and its evaluated sort key columns.
struct Buffered {
    batch: RecordBatch,
    keys: Vec<ArrayRef>,
    /// The memory this batch is counted at: a slice at its share of its buffers (which the
    /// slice keeps alive).
    bytes: usize,
}

impl Buffered {
    fn slice(&self, offset: usize, len: usize) -> Buffered {
        let bytes = self.bytes * len / self.batch.num_rows().max(1);
        Buffered { batch: self.batch.slice(offset, len), keys: self.keys.iter().map(|k| k.slice(offset, len)).collect(), bytes }
    }
}

#[derive(Default)]
struct Input {
    batches: VecDeque<Buffered>,
    rows: usize,
    /// Memory of the buffered rows (slices counted at their share of their buffers).
    bytes: usize,
    exhausted: bool,
    /// Rows of this input already pushed (for error messages).
    rows_seen: usize,
    /// The key of the last row pushed (for the order check across batches).
    last_key: Option<OwnedRow>,
    /// Whether pushed batches are checked for order.
    check_sorted: bool,
    /// Byte budget of the window and the bytes counted a buffered row on top of the
    /// batch's memory (the round's key words and permutation), if set.
    window_bytes: Option<(usize, usize)>,
}

/// One round merged but not yet gathered: the emitted rows of every input as runs, in
/// input order, and their stable merge order. [`MergedRound::gather`] builds output
/// batches from any range of it, so a caller can stream a large round in pieces.
pub struct MergedRound {
    pub runs: Vec<RecordBatch>,
    pub perm: Permutation,
    schema: SchemaRef,
}

impl MergedRound {
    pub fn rows(&self) -> usize {
        self.perm.len()
    }

    /// Output rows `start..end` as batches of at most `batch_size` rows with the merge's
    /// schema.
    pub fn gather(&self, start: usize, end: usize, batch_size: usize) -> Result<Vec<RecordBatch>> {
        let end = end.min(self.rows());
        if start >= end {
            return Ok(vec![]);
        }
        let batches = if self.runs.len() == 1 {
            // One run: the merge is the identity; slice without copying.
            (start..end).step_by(batch_size).map(|s| self.runs[0].slice(s, batch_size.min(end - s))).collect()
        } else if start == 0 && end == self.rows() {
            gather(&self.runs, &self.perm, batch_size)?
        } else {
            let indices = match &self.perm.indices {
                Indices::U32(v) => Indices::U32(v[start..end].to_vec()),
                Indices::U64(v) => Indices::U64(v[start..end].to_vec()),
            };
            let part = Permutation { indices, ..self.perm.clone_without_indices() };
            gather(&self.runs, &part, batch_size)?
        };
        // Output batches carry the declared schema (metadata and nullability included).
        batches.into_iter().map(|b| Ok(b.with_schema(self.schema.clone())?)).collect()
    }
}

/// The output of one round.
pub struct MergedChunk {
    pub batches: Vec<RecordBatch>,
    pub rows: usize,
    /// The engine that merged (`Cpu` or `Gpu`).
    pub engine: Engine,
    /// Bytes of key words the engine merged (what a GPU moves up).
    pub key_bytes: usize,
}

/// A streaming k-way merge driven by its caller: push batches, then take merged chunks.
pub struct FrontierMerge {
    schema: SchemaRef,
    specs: Vec<SortKey>,
    converter: RowConverter,
    inputs: Vec<Input>,
    options: FrontierOptions,
}

impl FrontierMerge {
    /// `specs` name the sort keys (for messages) and their options; the caller evaluates the
    /// key columns of each batch it pushes.
    pub fn new(
        schema: SchemaRef,
        key_types: &[arrow::datatypes::DataType],
        specs: Vec<SortKey>,
        num_inputs: usize,
        options: FrontierOptions,
    ) -> Result<Self> {
        if options.window_rows == 0 || options.batch_size == 0 {
            return Err(Error::InvalidArgument("window and batch size must be at least 1 row".into()));
        }
        let fields = key_types.iter().zip(&specs).map(|(t, s)| SortField::new_with_options(t.clone(), s.options)).collect();
        let converter = RowConverter::new(fields)?;
        let inputs = (0..num_inputs).map(|_| Input { check_sorted: options.check_sorted, ..Input::default() }).collect();
        Ok(Self { schema, specs, converter, inputs, options })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Whether input `i` should be given more rows before the next round: it is not
    /// exhausted, holds fewer than `window_rows` rows and, with a byte budget, fewer bytes
    /// than the budget. An input with no rows always wants some.
    pub fn wants(&self, i: usize) -> bool {
        let input = &self.inputs[i];
        if input.exhausted {
            return false;
        }
        if input.rows == 0 {
            return true;
        }
        input.rows < self.options.window_rows
            && input.window_bytes.is_none_or(|(budget, per_row)| input.bytes + input.rows * per_row < budget)
    }

    /// Bounds input `i`'s window by `budget` bytes of buffered memory, counting `per_row`
    /// bytes a row on top of the batches' own (what a round adds a row).
    pub fn set_window_bytes(&mut self, i: usize, budget: usize, per_row: usize) {
        self.inputs[i].window_bytes = Some((budget.max(1), per_row));
    }

    /// Whether a round can run: every input not exhausted holds at least one row.
    pub fn ready(&self) -> bool {
        self.inputs.iter().all(|i| i.exhausted || i.rows > 0)
    }

    /// Whether every input is exhausted and everything was emitted.
    pub fn is_finished(&self) -> bool {
        self.inputs.iter().all(|i| i.exhausted && i.rows == 0)
    }

    /// Memory held by buffered batches.
    pub fn buffered_bytes(&self) -> usize {
        self.inputs.iter().flat_map(|i| &i.batches).map(|b| b.batch.get_array_memory_size()).sum()
    }

    /// Turns the order check on or off for input `i` alone (the default is
    /// [`FrontierOptions::check_sorted`]), for inputs whose order is vouched for by metadata.
    pub fn set_check_sorted(&mut self, i: usize, check: bool) {
        self.inputs[i].check_sorted = check;
    }

    /// Input `i` has no more rows.
    pub fn finish_input(&mut self, i: usize) {
        self.inputs[i].exhausted = true;
    }

    fn row(&self, keys: &[ArrayRef], r: usize) -> Result<OwnedRow> {
        let cols: Vec<ArrayRef> = keys.iter().map(|k| k.slice(r, 1)).collect();
        Ok(self.converter.convert_columns(&cols)?.row(0).owned())
    }

    /// Buffers a batch of input `i` with its evaluated sort key columns.
    pub fn push(&mut self, i: usize, batch: RecordBatch, keys: Vec<ArrayRef>) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        if self.inputs[i].exhausted {
            return Err(Error::InvalidArgument(format!("input {i} was already finished")));
        }
        if self.inputs[i].check_sorted {
            let first = self.row(&keys, 0)?;
            if let Some(prev) = &self.inputs[i].last_key {
                if prev.row() > first.row() {
                    let at = self.inputs[i].rows_seen;
                    return Err(Error::NotSorted { run: i, row: at, detail: "a batch starts below the previous batch's last key".into() });
                }
            }
            let spec_runs = [keys.clone()];
            let encoded = crate::keys::encode_runs(&spec_runs, &self.specs)?;
            let full = if encoded.exact {
                None
            } else {
                Some(crate::order::ties::FullComparator::new(&spec_runs, &self.specs, &encoded.run_offsets)?)
            };
            crate::order::check::check_sorted(&encoded, full.as_ref(), &spec_runs).map_err(|e| match e {
                Error::NotSorted { row, detail, .. } => Error::NotSorted { run: i, row: self.inputs[i].rows_seen + row, detail },
                other => other,
            })?;
        }
        let last = self.row(&keys, n - 1)?;
        let input = &mut self.inputs[i];
        input.last_key = Some(last);
        input.rows_seen += n;
        input.rows += n;
        let bytes = batch.get_array_memory_size();
        input.bytes += bytes;
        input.batches.push_back(Buffered { batch, keys, bytes });
        Ok(())
    }

    /// Compares `(row r of input i's buffered batch b, i)` with the frontier `(f, fi)`.
    fn le_frontier(&self, buf: &Buffered, r: usize, i: usize, f: &OwnedRow, fi: usize) -> Result<bool> {
        let row = self.row(&buf.keys, r)?;
        Ok(match row.row().cmp(&f.row()) {
            Ordering::Less => true,
            Ordering::Equal => i <= fi,
            Ordering::Greater => false,
        })
    }

    /// Runs one round: merges and returns every buffered row that can be emitted now.
    /// Requires [`ready`](Self::ready).
    pub fn merge_round(&mut self) -> Result<MergedChunk> {
        let round = self.merge_round_ungathered()?;
        let rows = round.rows();
        if rows == 0 {
            return Ok(MergedChunk { batches: vec![], rows: 0, engine: Engine::Cpu, key_bytes: 0 });
        }
        let batches = round.gather(0, rows, self.options.batch_size)?;
        Ok(MergedChunk { batches, rows, engine: round.perm.engine, key_bytes: rows * round.perm.key_bytes })
    }

    /// [`merge_round`](Self::merge_round) without the gather: the caller gathers the
    /// round's rows in pieces ([`MergedRound::gather`]).
    pub fn merge_round_ungathered(&mut self) -> Result<MergedRound> {
        if !self.ready() {
            return Err(Error::InvalidArgument("an input that is not exhausted has no buffered rows".into()));
        }
        // 1. The frontier: the smallest (last key, input) over inputs not exhausted.
        let mut frontier: Option<(OwnedRow, usize)> = None;
        for (i, input) in self.inputs.iter().enumerate() {
            if input.exhausted {
                continue;
            }
            let last = input.last_key.clone().expect("a non-exhausted input with rows has a last key");
            if frontier.as_ref().is_none_or(|(f, _)| last.row() < f.row()) {
                frontier = Some((last, i));
            }
        }
        // 2. Per input, the emittable prefix: (batches taken whole, rows of the next batch).
        let mut cuts = Vec::with_capacity(self.inputs.len());
        for (i, input) in self.inputs.iter().enumerate() {
            let Some((f, fi)) = &frontier else {
                cuts.push((input.batches.len(), 0)); // all exhausted: everything goes
                continue;
            };
            let mut whole = 0;
            let mut part = 0;
            for buf in &input.batches {
                let n = buf.batch.num_rows();
                if self.le_frontier(buf, n - 1, i, f, *fi)? {
                    whole += 1;
                    continue;
                }
                // Binary search for the first row above the frontier in this batch.
                let (mut lo, mut hi) = (0, n - 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if self.le_frontier(buf, mid, i, f, *fi)? {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                part = lo;
                break;
            }
            cuts.push((whole, part));
        }
        // 3. The runs: each input's emittable batches in order, inputs in order.
        let mut runs: Vec<RecordBatch> = Vec::new();
        let mut run_keys: Vec<Vec<ArrayRef>> = Vec::new();
        for (input, &(whole, part)) in self.inputs.iter_mut().zip(&cuts) {
            for _ in 0..whole {
                let b = input.batches.pop_front().unwrap();
                input.rows -= b.batch.num_rows();
                input.bytes -= b.bytes;
                runs.push(b.batch);
                run_keys.push(b.keys);
            }
            if part > 0 {
                let front = input.batches.pop_front().unwrap();
                let n = front.batch.num_rows();
                let head = front.slice(0, part);
                let tail = front.slice(part, n - part);
                input.bytes = input.bytes - front.bytes + tail.bytes;
                input.batches.push_front(tail);
                input.rows -= part;
                runs.push(head.batch);
                run_keys.push(head.keys);
            }
        }
        let rows: usize = runs.iter().map(|b| b.num_rows()).sum();
        if rows == 0 {
            let perm = Permutation { run_offsets: vec![0], indices: Indices::U32(vec![]), engine: Engine::Cpu, key_bytes: 0 };
            return Ok(MergedRound { runs, perm, schema: self.schema.clone() });
        }
        // 4. Merge (the caller gathers).
        let options = MergeOptions { engine: self.options.engine, check_sorted: false, batch_size: self.options.batch_size };
        let perm = merge_columns(&run_keys, &self.specs, &options)?;
        Ok(MergedRound { runs, perm, schema: self.schema.clone() })
    }
}

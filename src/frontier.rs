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
//! One round: (1) every input not exhausted holds at least one row (the caller pushes; a
//! caller may wait for fuller windows, [`FrontierMerge::ready_for`]); (2) find `F`; (3) per
//! input, the emittable prefix of its buffer (binary search), moved out of the buffer into
//! an owned [`RoundInput`] ([`FrontierMerge::take_round`], cheap); (4) merge those prefixes
//! with the engine ([`RoundInput::merge`], the expensive part, on any thread) — an input's
//! buffered batches are consecutive runs, inputs in order, so the merge's stability is the
//! inputs' order; (5) gather.
//!
//! Pipelining: a caller may keep pushing batches while a taken round merges, and take the
//! next round once it has. Rounds are emitted in the order they were taken, and that is the
//! merge: after a take, every row still buffered or pushed later sorts after every row the
//! round took, by `(key, input)` then position in the input. (A row `(k, j)` left in input
//! `j`'s buffer is above `F` by (3). A row pushed later to input `j` has `k >= L_j` and
//! `(L_j, j) >= F`, so it is above `F` or equals `F` with `j` the frontier's input, whose
//! earlier rows the round took: it follows them in input order.) A take changes nothing a
//! later push depends on but the buffers, so a take followed by pushes is the sequential
//! rule with the merge deferred.

use crate::api::MergeOptions;
use crate::cancel::Cancel;
use crate::engine::{device, merge_keys_until, placement};
use crate::error::{Error, Result};
use crate::gather::gather;
use crate::keys::encode_runs;
use crate::options::{Engine, EngineOptions};
use crate::order::ties::{resolve_ties, FullComparator};
use crate::permutation::{Indices, Permutation};
use crate::sort_key::SortKey;
use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use arrow::row::{OwnedRow, RowConverter, SortField};
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::sync::Arc;

/// Rows buffered per input before a round, unless the caller says otherwise (the
/// DataFusion node's `corank.window_rows` and the Parquet merge's cap).
pub const DEFAULT_WINDOW_ROWS: usize = 1 << 20;

/// Settings of a streaming merge. [`FrontierMerge`] has an example.
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
        Self {
            engine: EngineOptions::default(),
            window_rows: DEFAULT_WINDOW_ROWS,
            batch_size: crate::DEFAULT_BATCH_SIZE,
            check_sorted: false,
        }
    }
}

/// A buffered batch and its evaluated sort key columns.
struct Buffered {
    batch: RecordBatch,
    keys: Vec<ArrayRef>,
    /// The memory this batch is counted at: a slice at its share of its buffers (which the
    /// slice keeps alive).
    bytes: usize,
    /// The memory its buffers hold (`get_array_memory_size` when pushed; a slice keeps all
    /// of its batch's buffers alive).
    memory: usize,
}

impl Buffered {
    fn slice(&self, offset: usize, len: usize) -> Buffered {
        let bytes = self.bytes * len / self.batch.num_rows().max(1);
        let (batch, keys) = (self.batch.slice(offset, len), self.keys.iter().map(|k| k.slice(offset, len)).collect());
        Buffered { batch, keys, bytes, memory: self.memory }
    }
}

#[derive(Default)]
struct Input {
    batches: VecDeque<Buffered>,
    rows: usize,
    /// Memory of the buffered rows (slices counted at their share of their buffers).
    bytes: usize,
    /// Memory the buffered batches hold (a slice at its whole batch's).
    memory: usize,
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
/// [`FrontierMerge::merge_round_ungathered`] and [`RoundInput::merge`] make it; the example
/// of a streaming merge is [`FrontierMerge`]'s.
pub struct MergedRound {
    /// The round's rows: every input's emitted batches (or parts of batches), inputs in
    /// order.
    pub runs: Vec<RecordBatch>,
    /// Their stable merge order (`run_offsets` are the offsets of `runs`' batches).
    pub perm: Permutation,
    schema: SchemaRef,
    /// The engine options the round merged with (the GPU gather's device and failure rule).
    engine: EngineOptions,
}

impl MergedRound {
    /// Rows the round emits.
    pub fn rows(&self) -> usize {
        self.perm.len()
    }

    /// Output rows `start..end` as batches of at most `batch_size` rows with the merge's
    /// schema.
    ///
    /// The whole round of a GPU merge may gather its fixed-width columns on the GPU
    /// (`MergedRound::gather_with_gpu`); a range of a round gathers on the CPU (each range
    /// would upload every run's payload again).
    pub fn gather(&self, start: usize, end: usize, batch_size: usize) -> Result<Vec<RecordBatch>> {
        let end = end.min(self.rows());
        if start >= end {
            return Ok(vec![]);
        }
        let batches = if self.runs.len() == 1 {
            // One run: the merge is the identity; slice without copying.
            (start..end).step_by(batch_size).map(|s| self.runs[0].slice(s, batch_size.min(end - s))).collect()
        } else if start == 0 && end == self.rows() {
            match self.gather_with_gpu(batch_size)? {
                Some(batches) => batches,
                None => gather(&self.runs, &self.perm, batch_size)?,
            }
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

    /// The round's rows as [`gather`] makes them, with the fixed-width columns gathered on
    /// the GPU while the CPU gathers the others, where the round merged on the GPU and the
    /// engine says the device gather pays ([`device::round_columns_on_device`]); `None` where
    /// it does not (the caller gathers on the CPU; always without the `gpu` feature), or
    /// where the device gather failed and the options allow the CPU
    /// ([`placement::cpu_after_gpu_failure`]).
    ///
    /// Batches end where the CPU's gather ends them (it splits a batch whose dictionary
    /// values overflow their key type), or every `batch_size` rows when the GPU gathers
    /// every column.
    fn gather_with_gpu(&self, batch_size: usize) -> Result<Option<Vec<RecordBatch>>> {
        let perm = &self.perm;
        let Some(fixed) = device::round_columns_on_device(&self.runs, perm) else {
            return Ok(None);
        };
        let columns = self.runs[0].num_columns();
        let rest: Vec<usize> = (0..columns).filter(|c| !fixed.contains(c)).collect();
        // The device gather on this thread, the CPU's on a thread of its own (not
        // `rayon::join`: a device's lock is never taken on a rayon worker).
        let (on_gpu, on_cpu) = std::thread::scope(|scope| {
            let on_cpu = scope.spawn(|| -> Result<Option<Vec<RecordBatch>>> {
                if rest.is_empty() {
                    return Ok(None);
                }
                let projected: Vec<RecordBatch> = self.runs.iter().map(|r| r.project(&rest)).collect::<std::result::Result<_, _>>()?;
                Ok(Some(gather(&projected, perm, batch_size)?))
            });
            let on_gpu = device::gather_round_on_device(&self.runs, perm, &fixed, &self.engine);
            (on_gpu, on_cpu.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        });
        let on_gpu = match on_gpu {
            Ok(arrays) => arrays,
            Err(e) if placement::cpu_after_gpu_failure(&self.engine) => {
                log::warn!("corank: GPU gather failed ({e}); gathering on the CPU instead");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let on_cpu = on_cpu?;
        let lens: Vec<usize> = match &on_cpu {
            Some(batches) => batches.iter().map(RecordBatch::num_rows).collect(),
            None => (0..perm.len()).step_by(batch_size).map(|s| batch_size.min(perm.len() - s)).collect(),
        };
        let mut out = Vec::with_capacity(lens.len());
        let mut offset = 0;
        for (b, &len) in lens.iter().enumerate() {
            let (mut g, mut r) = (0, 0);
            let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns);
            for c in 0..columns {
                if fixed.get(g) == Some(&c) {
                    arrays.push(on_gpu[g].slice(offset, len));
                    g += 1;
                } else {
                    let batch = &on_cpu.as_ref().expect("columns not gathered on the GPU were gathered on the CPU")[b];
                    arrays.push(Arc::clone(batch.column(r)));
                    r += 1;
                }
            }
            let options = RecordBatchOptions::new().with_row_count(Some(len));
            out.push(RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)?);
            offset += len;
        }
        Ok(Some(out))
    }
}

/// One round's rows taken out of the buffers ([`FrontierMerge::take_round`]) and not yet
/// merged: every input's emittable prefix as runs, inputs in order, with their key columns.
/// It owns its rows, so it can merge on another thread while the caller keeps pushing
/// batches into the buffers (the module doc says why that is safe). The example of a
/// streaming merge is [`FrontierMerge`]'s.
pub struct RoundInput {
    runs: Vec<RecordBatch>,
    keys: Vec<Vec<ArrayRef>>,
    specs: Vec<SortKey>,
    options: MergeOptions,
    schema: SchemaRef,
    /// Where each input's runs start in `runs`, then `runs.len()`.
    input_starts: Vec<usize>,
    rows: usize,
    bytes: usize,
}

impl RoundInput {
    /// The round merged on the CPU whatever the frontier's engine (a round too small for a
    /// GPU's launch and transfer latency to pay).
    pub fn on_cpu(mut self) -> Self {
        self.options.engine.engine = Engine::Cpu;
        self
    }

    /// Rows the round emits.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The memory of the round's rows: whole batches at their size, a batch cut at the
    /// frontier at the cut's share of it (the rest of it stays counted in the buffer).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Step (4): merges the runs with the engine; the caller gathers ([`MergedRound::gather`]).
    ///
    /// The keys are encoded per batch, but merged per input: an input's batches are
    /// consecutive pieces of one sorted run, so together they are one run of the merge
    /// (`ceil(log2 k)` merge levels for `k` inputs, not for all the batches of the round),
    /// and the result is the same (the stable merge of runs `A1, A2` with `A1 A2` sorted is
    /// `A1 A2`; indices are global, in the batches' order either way). Otherwise as
    /// [`crate::api::merge_columns`].
    pub fn merge(self) -> Result<MergedRound> {
        self.merge_until(None)
    }

    /// [`merge`](Self::merge) that stops with [`Error::Cancelled`](crate::Error::Cancelled)
    /// once `cancel` is set (the Parquet merge's).
    pub(crate) fn merge_until(self, cancel: Option<&Cancel>) -> Result<MergedRound> {
        let RoundInput { runs, keys, specs, options, schema, input_starts, rows, .. } = self;
        if rows == 0 {
            let perm = Permutation { run_offsets: vec![0], indices: Indices::U32(vec![]), engine: Engine::Cpu, key_bytes: 0 };
            return Ok(MergedRound { runs, perm, schema, engine: options.engine });
        }
        let encoded = encode_runs(&keys, &specs)?;
        crate::cancel::check(cancel)?;
        // The full comparator is only needed where keys may tie on different values.
        let full = if encoded.exact { None } else { Some(FullComparator::new(&keys, &specs, &encoded.run_offsets)?) };
        let mut input_offsets: Vec<usize> = input_starts.iter().map(|&r| encoded.run_offsets[r]).collect();
        input_offsets.dedup(); // inputs with no rows this round
        let (mut indices, engine) = merge_keys_until(&encoded.keys, &input_offsets, &options.engine, cancel)?;
        if let Some(full) = &full {
            resolve_ties(&mut indices, &encoded.keys, full);
        }
        let key_bytes = encoded.keys.key_bytes();
        let perm = Permutation { run_offsets: encoded.run_offsets, indices, engine, key_bytes };
        Ok(MergedRound { runs, perm, schema, engine: options.engine })
    }

    /// Steps (4) and (5): merges, then gathers the whole round into batches of the merge's
    /// `batch_size` rows.
    pub fn merge_gathered(self) -> Result<MergedChunk> {
        let batch_size = self.options.batch_size;
        let started = std::time::Instant::now();
        let round = self.merge()?;
        let rows = round.rows();
        if rows == 0 {
            return Ok(MergedChunk { batches: vec![], rows: 0, engine: Engine::Cpu, key_bytes: 0 });
        }
        let merged = started.elapsed();
        let batches = round.gather(0, rows, batch_size)?;
        log::debug!(
            "corank round: {rows} rows in {} runs, merged on the {:?} engine in {:.3} ms, gathered in {:.3} ms",
            round.runs.len(),
            round.perm.engine,
            merged.as_secs_f64() * 1e3,
            (started.elapsed() - merged).as_secs_f64() * 1e3
        );
        Ok(MergedChunk { batches, rows, engine: round.perm.engine, key_bytes: rows * round.perm.key_bytes })
    }
}

/// The output of one round ([`FrontierMerge::merge_round`], [`RoundInput::merge_gathered`];
/// the example is [`FrontierMerge`]'s).
pub struct MergedChunk {
    /// The round's rows in merged order, in batches of at most the merge's `batch_size`
    /// rows (none where the round emitted no rows).
    pub batches: Vec<RecordBatch>,
    /// Rows in `batches`.
    pub rows: usize,
    /// The engine that merged (`Cpu` or `Gpu`).
    pub engine: Engine,
    /// Bytes of key words the engine merged (what a GPU moves up).
    pub key_bytes: usize,
}

/// A streaming k-way merge driven by its caller: push batches, then take merged chunks.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Array, Int64Array, RecordBatch};
/// use arrow::datatypes::DataType;
/// use corank::{Engine, EngineOptions, FrontierMerge, FrontierOptions, SortKey};
///
/// let batch = |k: Vec<i64>| RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as _)]).unwrap();
/// let inputs = [vec![batch(vec![1, 4]), batch(vec![6, 9])], vec![batch(vec![2, 3, 7])]];
/// let options = FrontierOptions { engine: EngineOptions::default().with_engine(Engine::Cpu), ..Default::default() };
/// let schema = inputs[0][0].schema();
/// let mut merge = FrontierMerge::new(schema, &[DataType::Int64], vec![SortKey::asc("k")], inputs.len(), options)?;
/// for (i, batches) in inputs.iter().enumerate() {
///     for b in batches {
///         // The caller evaluates the key columns: here the column `k` itself.
///         merge.push(i, b.clone(), vec![b.column(0).clone()])?;
///     }
///     merge.finish_input(i);
/// }
/// let mut keys = Vec::new();
/// while !merge.is_finished() {
///     for b in merge.merge_round()?.batches {
///         let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
///         keys.extend(k.values().iter().copied());
///     }
/// }
/// assert_eq!(keys, [1, 2, 3, 4, 6, 7, 9]);
/// # Ok::<(), corank::Error>(())
/// ```
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

    /// The schema of the batches pushed and merged.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The number of inputs (`num_inputs` of [`new`](Self::new)), numbered from 0.
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

    /// Whether a round can run and every input not exhausted holds `target_rows` rows or
    /// has a full window (it [`wants`](Self::wants) no more): the condition of a caller that
    /// grows its rounds toward full windows. `ready_for(1)` is [`ready`](Self::ready).
    pub fn ready_for(&self, target_rows: usize) -> bool {
        (0..self.inputs.len()).all(|i| {
            let input = &self.inputs[i];
            input.exhausted || (input.rows > 0 && (input.rows >= target_rows || !self.wants(i)))
        })
    }

    /// Rows buffered by input `i`.
    pub fn buffered_rows(&self, i: usize) -> usize {
        self.inputs[i].rows
    }

    /// Whether every input is exhausted and everything was emitted.
    pub fn is_finished(&self) -> bool {
        self.inputs.iter().all(|i| i.exhausted && i.rows == 0)
    }

    /// Memory held by buffered batches (a batch cut by a round at its whole size: the cut
    /// keeps its buffers alive).
    pub fn buffered_bytes(&self) -> usize {
        self.inputs.iter().map(|i| i.memory).sum()
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
            let encoded = encode_runs(&spec_runs, &self.specs)?;
            let full = if encoded.exact { None } else { Some(FullComparator::new(&spec_runs, &self.specs, &encoded.run_offsets)?) };
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
        input.memory += bytes;
        input.batches.push_back(Buffered { batch, keys, bytes, memory: bytes });
        Ok(())
    }

    /// The frontier key as one-row arrays, for comparing buffered rows with it through
    /// arrow's comparators instead of encoding each row probed (an encoding per probe is
    /// costly next to a small round's merge). Only for key types whose
    /// comparator orders exactly as the row format does (numbers by total order, booleans,
    /// strings and binaries by bytes; nulls and descending by the same `SortOptions`);
    /// `None` for others (nested, intervals), which keep the row path, as do dictionaries
    /// (the row format decodes them to their values, which their comparator refuses).
    fn frontier_arrays(&self, f: &OwnedRow) -> Result<Option<Vec<ArrayRef>>> {
        use arrow::datatypes::DataType as T;
        let comparable = |t: &T| match t {
            T::Interval(_) => false,
            T::Boolean | T::Utf8 | T::LargeUtf8 | T::Utf8View | T::Binary | T::LargeBinary | T::BinaryView => true,
            T::FixedSizeBinary(_) => true,
            t => t.is_primitive(),
        };
        let arrays = self.converter.convert_rows([f.row()])?;
        Ok(arrays.iter().all(|a| comparable(a.data_type())).then_some(arrays))
    }

    /// Whether `(row r of buffered batch buf of input i, i) <= (f, fi)` for each `r` asked,
    /// with `f` given as rows ([`OwnedRow`]) and, where [`Self::frontier_arrays`] allows, as
    /// arrays: returns a function of `r`.
    fn le_frontier<'a>(
        &'a self,
        buf: &'a Buffered,
        i: usize,
        f: &'a OwnedRow,
        f_arrays: Option<&'a [ArrayRef]>,
        fi: usize,
    ) -> Result<Box<dyn Fn(usize) -> Result<bool> + 'a>> {
        let tie = move |ord: Ordering| match ord {
            Ordering::Less => true,
            Ordering::Equal => i <= fi,
            Ordering::Greater => false,
        };
        if let Some(fa) = f_arrays {
            let comparators = buf
                .keys
                .iter()
                .zip(fa)
                .zip(&self.specs)
                .map(|((k, f), spec)| arrow::array::make_comparator(k.as_ref(), f.as_ref(), spec.options))
                .collect::<std::result::Result<Vec<_>, _>>();
            if let Ok(comparators) = comparators {
                return Ok(Box::new(move |r| {
                    let ord = comparators.iter().map(|c| c(r, 0)).find(|o| o.is_ne()).unwrap_or(Ordering::Equal);
                    Ok(tie(ord))
                }));
            }
        }
        Ok(Box::new(move |r| Ok(tie(self.row(&buf.keys, r)?.row().cmp(&f.row())))))
    }

    /// Runs one round: merges and returns every buffered row that can be emitted now.
    /// Requires [`ready`](Self::ready).
    pub fn merge_round(&mut self) -> Result<MergedChunk> {
        self.take_round()?.merge_gathered()
    }

    /// [`merge_round`](Self::merge_round) without the gather: the caller gathers the
    /// round's rows in pieces ([`MergedRound::gather`]).
    pub fn merge_round_ungathered(&mut self) -> Result<MergedRound> {
        self.take_round()?.merge()
    }

    /// Steps (2) and (3) of a round: moves every buffered row that can be emitted now out of
    /// the buffers, for [`RoundInput::merge`]. Cheap (a binary search per input, no copy of
    /// the rows). Requires [`ready`](Self::ready); the caller may push more batches before
    /// the round merges.
    pub fn take_round(&mut self) -> Result<RoundInput> {
        self.take_round_at_most(usize::MAX)
    }

    /// [`take_round`](Self::take_round) emitting about `max_rows` rows at most (a round
    /// whose first output batch should come soon): at most `max_rows / inputs` rows of
    /// each input, more only where rows tie on the key at that position. At least one row.
    ///
    /// A smaller frontier is as valid as `F`: with `F' <= F`, every row left or pushed later
    /// is still above `F'` (or equals it, from `F'`'s input, after the rows taken). So `F'`
    /// is the smallest of `F` and, for every input holding more than `m = max(1, max_rows /
    /// inputs)` rows, `(key of its m-th row, input)`; each input then gives at most `m`
    /// rows (plus ties), and the input defining `F'` at least one.
    pub fn take_round_at_most(&mut self, max_rows: usize) -> Result<RoundInput> {
        // (1) Every input not exhausted holds a row, so each has a last key.
        if !self.ready() {
            return Err(Error::InvalidArgument("an input that is not exhausted has no buffered rows".into()));
        }
        let frontier = self.frontier_at_most(max_rows)?;
        let cuts = self.cuts(frontier.as_ref())?;
        let (runs, run_keys, input_starts, bytes) = self.take_prefixes(&cuts);
        let rows: usize = runs.iter().map(|b| b.num_rows()).sum();
        // Pushed batches were checked (where asked) as they came: the merge checks nothing.
        let options = MergeOptions { engine: self.options.engine, check_sorted: false, batch_size: self.options.batch_size };
        let (specs, schema) = (self.specs.clone(), self.schema.clone());
        Ok(RoundInput { runs, keys: run_keys, specs, options, schema, input_starts, rows, bytes })
    }

    /// Step (2) with the cap of [`take_round_at_most`](Self::take_round_at_most): the
    /// frontier `F'` as (key, input); `None` where every input is exhausted.
    fn frontier_at_most(&self, max_rows: usize) -> Result<Option<(OwnedRow, usize)>> {
        // (2) The frontier: the smallest (last key, input) over inputs not exhausted.
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
        // The cap lowers it to the m-th row of any input holding more than m rows.
        let m = (max_rows / self.inputs.len().max(1)).max(1);
        for (i, input) in self.inputs.iter().enumerate() {
            if input.rows <= m {
                continue;
            }
            let (mut b, mut r) = (0, m - 1);
            while r >= input.batches[b].batch.num_rows() {
                r -= input.batches[b].batch.num_rows();
                b += 1;
            }
            let key = self.row(&input.batches[b].keys, r)?;
            if frontier.as_ref().is_none_or(|(f, fi)| (key.row(), i) < (f.row(), *fi)) {
                frontier = Some((key, i));
            }
        }
        Ok(frontier)
    }

    /// Step (3): per input, the emittable prefix below `frontier`, as (batches taken whole,
    /// rows of the next batch); everything where every input is exhausted.
    fn cuts(&self, frontier: Option<&(OwnedRow, usize)>) -> Result<Vec<(usize, usize)>> {
        // (3) Per input, the emittable prefix: (batches taken whole, rows of the next batch).
        let f_arrays = match frontier {
            Some((f, _)) => self.frontier_arrays(f)?,
            None => None,
        };
        let mut cuts = Vec::with_capacity(self.inputs.len());
        for (i, input) in self.inputs.iter().enumerate() {
            let Some((f, fi)) = frontier else {
                cuts.push((input.batches.len(), 0)); // all exhausted: everything goes
                continue;
            };
            let mut whole = 0;
            let mut part = 0;
            for buf in &input.batches {
                let n = buf.batch.num_rows();
                let le = self.le_frontier(buf, i, f, f_arrays.as_deref(), *fi)?;
                if le(n - 1)? {
                    whole += 1;
                    continue;
                }
                // Binary search for the first row above the frontier in this batch.
                let (mut lo, mut hi) = (0, n - 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if le(mid)? {
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
        Ok(cuts)
    }

    /// Moves the prefixes `cuts` out of the buffers as runs: each input's emittable
    /// batches in order, inputs in order (the merge's stability). Returns the runs, their
    /// key columns, where each input's runs start (then the number of runs) and their bytes.
    fn take_prefixes(&mut self, cuts: &[(usize, usize)]) -> (Vec<RecordBatch>, Vec<Vec<ArrayRef>>, Vec<usize>, usize) {
        let mut runs: Vec<RecordBatch> = Vec::new();
        let mut run_keys: Vec<Vec<ArrayRef>> = Vec::new();
        let mut bytes = 0;
        let mut input_starts = Vec::with_capacity(self.inputs.len() + 1);
        for (input, &(whole, part)) in self.inputs.iter_mut().zip(cuts) {
            input_starts.push(runs.len());
            for _ in 0..whole {
                let b = input.batches.pop_front().unwrap();
                input.rows -= b.batch.num_rows();
                input.bytes -= b.bytes;
                input.memory -= b.memory;
                bytes += b.memory;
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
                bytes += head.bytes;
                runs.push(head.batch);
                run_keys.push(head.keys);
            }
        }
        input_starts.push(runs.len());
        (runs, run_keys, input_starts, bytes)
    }
}

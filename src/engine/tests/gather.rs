//! The device gather of fixed-width payload columns (`gather_fixed_gpu`, and
//! `gather_fixed_gpu_into` with pageable outputs) against the CPU
//! gather (`corank::gather::gather`): every value width (1, 2, 4, 8, 16 bytes and odd
//! fixed-size binaries), byte views (`Utf8View`, `BinaryView`: inline and long values, each
//! run with several data buffers, so that the views' buffer indices are rebased), nulls at
//! odd bit offsets, sliced arrays, u32 and u64 indices, empty
//! inputs and runs, k = 1..16 runs, random permutations; validity bitmaps compared bit for
//! bit and value buffers byte for byte.
//!
//! Without a GPU they skip (a line on stderr), unless `CORANK_REQUIRE_GPU=1`, which makes
//! them fail. `CORANK_GPU_SMALL=1` keeps only small cases (for compute-sanitizer).

use super::support::{gpu_or_skip, small_only, Rng};
use arrow::array::{
    Array, ArrayRef, BinaryViewBuilder, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float16Array, Float32Array, Float64Array,
    Int16Array, Int32Array, Int64Array, Int8Array, RecordBatch, StringArray, StringViewBuilder, TimestampMicrosecondArray, UInt64Array,
    UInt8Array,
};
use arrow::datatypes::{Field, Schema};
use corank::engine::gpu::{self, gather_fixed_gpu, gather_on_gpu_pays, GpuOptions};
use corank::{Engine, Error, Indices, Permutation};
use std::sync::Arc;

/// The column kinds of the test schema, one per width (and then some), then two byte views.
const KINDS: usize = 16;

/// Column `kind` of `len` rows; null with probability 1/`null_every` (0: no null buffer),
/// built `off` rows longer and sliced so values and bitmap start at offset `off`.
fn column(kind: usize, len: usize, off: usize, null_every: u64, rng: &mut Rng) -> ArrayRef {
    let m = len + off + 3; // a little past the slice too
    let valid: Vec<bool> = (0..m).map(|_| null_every == 0 || rng.below(null_every) != 0).collect();
    let vals: Vec<u64> = (0..m).map(|_| rng.next()).collect();
    let opt = |i: usize| valid[i].then_some(vals[i]);
    let block = if m > 10_000 { 8192 } else { 64 };
    let a: ArrayRef = match kind {
        0 => Arc::new((0..m).map(|i| opt(i).map(|v| v as i8)).collect::<Int8Array>()),
        1 => Arc::new((0..m).map(|i| opt(i).map(|v| v as u8)).collect::<UInt8Array>()),
        2 => Arc::new((0..m).map(|i| opt(i).map(|v| v as i16)).collect::<Int16Array>()),
        3 => Arc::new((0..m).map(|i| opt(i).map(|v| half::f16::from_bits(v as u16))).collect::<Float16Array>()),
        4 => Arc::new((0..m).map(|i| opt(i).map(|v| v as i32)).collect::<Int32Array>()),
        5 => Arc::new((0..m).map(|i| opt(i).map(|v| f32::from_bits(v as u32))).collect::<Float32Array>()),
        6 => Arc::new((0..m).map(|i| opt(i).map(|v| v as i32)).collect::<Date32Array>()),
        7 => Arc::new((0..m).map(|i| opt(i).map(|v| v as i64)).collect::<Int64Array>()),
        8 => Arc::new((0..m).map(|i| opt(i).map(f64::from_bits)).collect::<Float64Array>()),
        9 => Arc::new((0..m).map(|i| opt(i).map(|v| v as i64)).collect::<TimestampMicrosecondArray>()),
        10 => Arc::new(
            (0..m)
                .map(|i| opt(i).map(|v| ((v as i128) << 64 | vals[(i + 1) % m] as i128) % 10i128.pow(37)))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(38, 3)
                .unwrap(),
        ),
        11 => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size((0..m).map(|i| opt(i).map(|v| v.to_le_bytes()[..3].to_vec())), 3).unwrap(),
        ),
        12 => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                (0..m).map(|i| opt(i).map(|v| [v.to_le_bytes(), vals[(i + 7) % m].to_be_bytes()].concat())),
                16,
            )
            .unwrap(),
        ),
        13 => Arc::new((0..m).map(opt).collect::<UInt64Array>()),
        // Views of 0 to 40 bytes (inline up to 12), in data buffers of 64 bytes (8 KiB in
        // large runs): a run has several, and a view's buffer index is its own run's.
        14 => {
            let mut b = StringViewBuilder::new().with_fixed_block_size(block);
            for i in 0..m {
                b.append_option(opt(i).map(|v| format!("{v:016x}{v:022o}{v:016x}")[..(v % 41) as usize].to_string()));
            }
            Arc::new(b.finish())
        }
        15 => {
            let mut b = BinaryViewBuilder::new().with_fixed_block_size(block);
            for i in 0..m {
                b.append_option(
                    opt(i).map(|v| {
                        [v.to_le_bytes(), vals[(i + 3) % m].to_le_bytes(), v.to_be_bytes()].concat()[..(v % 25) as usize].to_vec()
                    }),
                );
            }
            Arc::new(b.finish())
        }
        _ => unreachable!(),
    };
    // Without nulls asked for: no null buffer at all (the builders above make none).
    a.slice(off, len)
}

fn schema(nullable: bool) -> Arc<Schema> {
    let mut rng = Rng(1);
    let fields: Vec<Field> =
        (0..KINDS).map(|k| Field::new(format!("c{k}"), column(k, 1, 0, 0, &mut rng).data_type().clone(), nullable)).collect();
    Arc::new(Schema::new(fields))
}

/// k runs of the given sizes, every kind of column; a run's nulls and slicing vary.
fn runs(sizes: &[usize], rng: &mut Rng) -> Vec<RecordBatch> {
    let schema = schema(true);
    sizes
        .iter()
        .map(|&len| {
            let off = rng.below(13) as usize; // odd offsets too, so bitmaps start mid-byte
            let null_every = [0, 2, 5, 97][rng.below(4) as usize];
            let cols: Vec<ArrayRef> = (0..KINDS).map(|k| column(k, len, off, null_every, rng)).collect();
            RecordBatch::try_new(schema.clone(), cols).unwrap()
        })
        .collect()
}

/// A random permutation of the runs' rows (any order: the gather does not care whether it
/// is a merge's).
fn permutation(runs: &[RecordBatch], wide: bool, rng: &mut Rng) -> Permutation {
    let mut run_offsets = vec![0];
    for b in runs {
        run_offsets.push(run_offsets.last().unwrap() + b.num_rows());
    }
    let n = *run_offsets.last().unwrap();
    let mut idx: Vec<u64> = (0..n as u64).collect();
    // One run: the identity (the only merge of one run, and what the CPU gather assumes: it
    // returns the run as it is); `one_run_shuffled` covers other orders of one run.
    if runs.len() > 1 {
        for i in (1..n).rev() {
            idx.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    let indices = if wide { Indices::U64(idx) } else { Indices::U32(idx.into_iter().map(|i| i as u32).collect()) };
    Permutation { run_offsets, indices, engine: Engine::Cpu, key_bytes: 8 }
}

/// The CPU gather's column `c`, whole.
fn cpu_column(runs: &[RecordBatch], perm: &Permutation, c: usize) -> ArrayRef {
    let batches = corank::gather::gather(runs, perm, 977).unwrap();
    let parts: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
    if parts.is_empty() {
        return arrow::array::new_empty_array(runs[0].column(c).data_type());
    }
    arrow::compute::concat(&parts).unwrap()
}

/// `gpu` equals `cpu`: type, length, validity bit for bit, and values (logically, and the
/// value bytes of every row, nulls included, for single-buffer layouts).
fn assert_same(cpu: &ArrayRef, gpu: &ArrayRef, what: &str) {
    assert_eq!(cpu.data_type(), gpu.data_type(), "{what}");
    assert_eq!(cpu.len(), gpu.len(), "{what}");
    let bits = |a: &ArrayRef| (0..a.len()).map(|i| a.is_valid(i)).collect::<Vec<_>>();
    assert_eq!(bits(cpu), bits(gpu), "{what}: validity");
    assert_eq!(cpu.null_count(), gpu.null_count(), "{what}: null count");
    assert_eq!(cpu.to_data(), gpu.to_data(), "{what}: values");
    // Byte views: equal values (above); their buffer indices are the device's own.
    let Some(w) = gpu::gather::fixed_width(cpu.data_type()) else {
        return;
    };
    let (c, g) = (cpu.to_data(), gpu.to_data());
    let bytes = |d: &arrow::array::ArrayData| d.buffers()[0].as_slice()[d.offset() * w..(d.offset() + d.len()) * w].to_vec();
    // Null slots: arrow's interleave copies the input's bytes, as the device does; where it
    // does not (a null slot it zeroes), compare valid slots only.
    let (cb, gb) = (bytes(&c), bytes(&g));
    for i in 0..cpu.len() {
        if cpu.is_valid(i) {
            assert_eq!(cb[i * w..(i + 1) * w], gb[i * w..(i + 1) * w], "{what}: row {i}");
        }
    }
}

fn check(runs: &[RecordBatch], perm: &Permutation, what: &str) {
    let columns: Vec<usize> = (0..KINDS).collect();
    let pinned = gather_fixed_gpu(runs, perm, &columns, &GpuOptions::default()).unwrap();
    // The whole sort's way: the output in pageable memory, drained by a thread of its own.
    let pageable = gpu::gather_fixed_gpu_into(runs, perm, &columns, &GpuOptions::default(), gpu::GatherOutput::Pageable).unwrap();
    for (got, memory) in [(pinned, "pinned"), (pageable, "pageable")] {
        assert_eq!(got.len(), KINDS);
        for &c in &columns {
            assert_same(&cpu_column(runs, perm, c), &got[c], &format!("{what}, {memory}, column {c} ({})", got[c].data_type()));
        }
    }
}

#[test]
fn every_width_against_the_cpu_gather() {
    if !gpu_or_skip("every_width_against_the_cpu_gather") {
        return;
    }
    let mut rng = Rng(0x5eed);
    for k in 1..=16usize {
        for wide in [false, true] {
            let sizes: Vec<usize> = (0..k).map(|_| [0, 1, 7, 33, 100, 1000, 1031][rng.below(7) as usize]).collect();
            let rs = runs(&sizes, &mut rng);
            let perm = permutation(&rs, wide, &mut rng);
            check(&rs, &perm, &format!("k = {k}, sizes {sizes:?}, u{} indices", if wide { 64 } else { 32 }));
        }
    }
}

#[test]
fn larger_inputs() {
    if !gpu_or_skip("larger_inputs") || small_only() {
        return;
    }
    let mut rng = Rng(77);
    for (sizes, wide) in [(vec![300_000, 1, 250_001], false), (vec![70_000; 16], true), (vec![1 << 20], false)] {
        let rs = runs(&sizes, &mut rng);
        let perm = permutation(&rs, wide, &mut rng);
        check(&rs, &perm, &format!("sizes {sizes:?}"));
    }
}

/// One run in a random order, against arrow's `take` (the CPU gather takes one run's
/// permutation to be the identity).
#[test]
fn one_run_shuffled() {
    if !gpu_or_skip("one_run_shuffled") {
        return;
    }
    let mut rng = Rng(23);
    for (len, wide) in [(1usize, false), (37, true), (5000, false)] {
        let rs = runs(&[len], &mut rng);
        let mut idx: Vec<u64> = (0..len as u64).collect();
        for i in (1..len).rev() {
            idx.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let take = arrow::array::UInt64Array::from(idx.clone());
        let indices = if wide { Indices::U64(idx) } else { Indices::U32(idx.into_iter().map(|i| i as u32).collect()) };
        let perm = Permutation { run_offsets: vec![0, len], indices, engine: Engine::Cpu, key_bytes: 8 };
        let columns: Vec<usize> = (0..KINDS).collect();
        let got = gather_fixed_gpu(&rs, &perm, &columns, &GpuOptions::default()).unwrap();
        for c in columns {
            let want = arrow::compute::take(rs[0].column(c).as_ref(), &take, None).unwrap();
            assert_same(&want, &got[c], &format!("one run of {len}, column {c}"));
        }
    }
}

/// No rows (empty runs, or no runs' rows at all) gives empty arrays of the columns' types;
/// no columns gives no arrays.
#[test]
fn empty_inputs() {
    if !gpu_or_skip("empty_inputs") {
        return;
    }
    let mut rng = Rng(3);
    let rs = runs(&[0, 0, 0], &mut rng);
    let perm = permutation(&rs, false, &mut rng);
    let got = gather_fixed_gpu(&rs, &perm, &[0, 10, 12], &GpuOptions::default()).unwrap();
    assert_eq!(got.len(), 3);
    for (a, c) in got.iter().zip([0, 10, 12]) {
        assert_eq!(a.len(), 0);
        assert_eq!(a.data_type(), rs[0].column(c).data_type());
    }
    assert!(gather_fixed_gpu(&rs, &perm, &[], &GpuOptions::default()).unwrap().is_empty());
}

/// One column, gathered alone, and the same column twice.
#[test]
fn column_subsets() {
    if !gpu_or_skip("column_subsets") {
        return;
    }
    let mut rng = Rng(11);
    let rs = runs(&[500, 3, 800], &mut rng);
    let perm = permutation(&rs, false, &mut rng);
    let got = gather_fixed_gpu(&rs, &perm, &[13, 4, 13], &GpuOptions::default()).unwrap();
    assert_same(&cpu_column(&rs, &perm, 13), &got[0], "c13");
    assert_same(&cpu_column(&rs, &perm, 4), &got[1], "c4");
    assert_same(&got[0], &got[2], "c13 twice");
}

/// Bad arguments are errors, never panics or arrays: unsupported types, a permutation of
/// other runs, an index past the input, a missing column.
#[test]
fn bad_arguments_are_errors() {
    if !gpu_or_skip("bad_arguments_are_errors") {
        return;
    }
    let mut rng = Rng(5);
    let rs = runs(&[10, 20], &mut rng);
    let perm = permutation(&rs, false, &mut rng);
    let opts = GpuOptions::default();
    assert!(matches!(gather_fixed_gpu(&rs, &perm, &[KINDS], &opts), Err(Error::InvalidArgument(_))));
    // A permutation of other runs.
    let mut other = perm.clone();
    other.run_offsets = vec![0, 11, 30];
    assert!(matches!(gather_fixed_gpu(&rs, &other, &[0], &opts), Err(Error::InvalidArgument(_))));
    assert!(matches!(gather_fixed_gpu(&rs[..1], &perm, &[0], &opts), Err(Error::InvalidArgument(_))));
    // An index past the input, u32 and u64.
    for wide in [false, true] {
        let mut bad = permutation(&rs, wide, &mut rng);
        bad.indices = match bad.indices {
            Indices::U32(mut v) => {
                v[17] = 30;
                Indices::U32(v)
            }
            Indices::U64(mut v) => {
                v[3] = u64::MAX;
                Indices::U64(v)
            }
        };
        match gather_fixed_gpu(&rs, &bad, &[0, 7, 12, 14], &opts) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("past"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    // The device works on after those.
    check(&rs, &perm, "after the errors");
    // A type the device gather does not take.
    let schema = Arc::new(Schema::new(vec![Field::new("s", arrow::datatypes::DataType::Utf8, true)]));
    let s = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["a", "b"]))]).unwrap();
    let p = Permutation { run_offsets: vec![0, 2], indices: Indices::U32(vec![1, 0]), engine: Engine::Cpu, key_bytes: 8 };
    assert!(matches!(gather_fixed_gpu(&[s], &p, &[0], &opts), Err(Error::UnsupportedType { .. })));
}

/// The arrays own their pinned memory: they outlive the call, cross threads, and dropping
/// them (on another thread) returns the memory for the next call.
#[test]
fn outputs_outlive_the_call_and_cross_threads() {
    if !gpu_or_skip("outputs_outlive_the_call_and_cross_threads") {
        return;
    }
    let mut rng = Rng(9);
    let rs = runs(&[4000, 5000], &mut rng);
    let perm = permutation(&rs, false, &mut rng);
    let first = gather_fixed_gpu(&rs, &perm, &[7, 13], &GpuOptions::default()).unwrap();
    let expect = cpu_column(&rs, &perm, 7);
    let second = gather_fixed_gpu(&rs, &perm, &[7], &GpuOptions::default()).unwrap();
    let handle = std::thread::spawn(move || {
        assert_same(&expect, &first[0], "first, on another thread");
        drop(first);
    });
    handle.join().unwrap();
    let third = gather_fixed_gpu(&rs, &perm, &[7], &GpuOptions::default()).unwrap();
    assert_same(&second[0], &third[0], "after the drop");
}

/// The decision rule needs no GPU: it is a pure function of the measured costs.
#[test]
fn decision_rule_is_consistent() {
    let c = gpu::gather::H100_HOST;
    assert!(!gather_on_gpu_pays(0, 28, 4, 16));
    assert!(!gather_on_gpu_pays(1 << 20, 0, 4, 16));
    for rows in [1usize << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26] {
        for bpr in [1usize, 8, 28, 64] {
            assert_eq!(gather_on_gpu_pays(rows, bpr, 4, 16), c.gpu_ms(rows, bpr, 4) < c.cpu_ms(rows, bpr, 16));
            // Indices already on the device, or fewer CPU threads, never make the GPU worse.
            if gather_on_gpu_pays(rows, bpr, 4, 16) {
                assert!(gather_on_gpu_pays(rows, bpr, 0, 16) && gather_on_gpu_pays(rows, bpr, 4, 2));
            }
        }
    }
}

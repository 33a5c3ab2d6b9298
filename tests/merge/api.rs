//! The public API on bad and degenerate input: clear errors or correct results, never a panic.

use crate::common::oracle;
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Int32Type, Int8Type, Schema};
use arrow::row::{RowConverter, SortField};
use corank::{gather, merge, merge_permutation, Engine, Error, Indices, MergeOptions, Permutation, SortKey};
use std::sync::Arc;

fn run(k: Vec<i64>, v: Vec<&str>) -> RecordBatch {
    RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
        .unwrap()
}

fn values(batches: &[RecordBatch]) -> Vec<String> {
    batches.iter().flat_map(|b| b.column(1).as_string::<i32>().iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>()).collect()
}

#[test]
fn stable_two_runs() {
    let runs = [run(vec![1, 3, 3], vec!["a", "b", "c"]), run(vec![3, 4], vec!["d", "e"])];
    let out = merge(&runs, &[SortKey::asc("k")], &MergeOptions::default().with_batch_size(2)).unwrap();
    assert_eq!(out.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), [2, 2, 1]);
    assert_eq!(values(&out), ["a", "b", "c", "d", "e"]);
    let perm = merge_permutation(&runs, &[SortKey::asc("k")], &MergeOptions::default()).unwrap();
    assert_eq!(perm.to_run_rows(), [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]);
    assert_eq!(perm.engine, Engine::Cpu);
}

#[test]
fn descending_runs() {
    let runs = [run(vec![9, 5, 1], vec!["a", "b", "c"]), run(vec![7, 5], vec!["d", "e"])];
    let out = merge(&runs, &[SortKey::desc("k")], &MergeOptions::default()).unwrap();
    assert_eq!(values(&out), ["a", "d", "b", "e", "c"]);
}

#[test]
fn zero_runs() {
    let perm = merge_permutation(&[], &[SortKey::asc("k")], &MergeOptions::default()).unwrap();
    assert!(perm.is_empty());
    assert!(merge(&[], &[SortKey::asc("k")], &MergeOptions::default()).unwrap().is_empty());
}

#[test]
fn empty_and_one_runs() {
    let empty = run(vec![], vec![]);
    let one = run(vec![1, 2], vec!["a", "b"]);
    let out = merge(&[empty.clone(), one.clone(), empty.clone()], &[SortKey::asc("k")], &MergeOptions::default()).unwrap();
    assert_eq!(values(&out), ["a", "b"]);
    let out = merge(std::slice::from_ref(&one), &[SortKey::asc("k")], &MergeOptions::default()).unwrap();
    assert_eq!(values(&out), ["a", "b"]);
    let out = merge(&[empty.clone(), empty], &[SortKey::asc("k")], &MergeOptions::default()).unwrap();
    assert!(out.is_empty());
}

#[test]
fn differing_schemas_are_an_error() {
    let other = RecordBatch::try_from_iter([("k", Arc::new(Int32Array::from(vec![1])) as ArrayRef)]).unwrap();
    let err = merge(&[run(vec![1], vec!["a"]), other], &[SortKey::asc("k")], &MergeOptions::default()).unwrap_err();
    assert!(matches!(err, Error::SchemaMismatch { run: 1, .. }), "{err}");
    let renamed = RecordBatch::try_from_iter([
        ("k", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("w", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
    ])
    .unwrap();
    let err = merge(&[run(vec![1], vec!["a"]), renamed], &[SortKey::asc("k")], &MergeOptions::default()).unwrap_err();
    assert!(err.to_string().contains("run 1"), "{err}");
}

#[test]
fn missing_sort_column_is_an_error() {
    let err = merge(&[run(vec![1], vec!["a"])], &[SortKey::asc("nope")], &MergeOptions::default()).unwrap_err();
    assert_eq!(err.to_string(), "sort column 'nope' is missing from run 0");
}

#[test]
fn no_sort_keys_is_an_error() {
    let err = merge(&[run(vec![1], vec!["a"])], &[], &MergeOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
}

#[test]
fn unsorted_run_names_run_and_row() {
    let runs = [run(vec![1, 2, 3], vec!["a", "b", "c"]), run(vec![1, 5, 4, 6], vec!["d", "e", "f", "g"])];
    let opts = MergeOptions::default().with_check_sorted(true);
    let err = merge(&runs, &[SortKey::asc("k")], &opts).unwrap_err();
    assert!(matches!(err, Error::NotSorted { run: 1, row: 2, .. }), "{err}");
    assert_eq!(err.to_string(), "run 1 is not sorted: row 2 sorts before row 1: key (4) follows (5)");
    // Descending order makes run 0 the unsorted one.
    let err = merge(&runs, &[SortKey::desc("k")], &opts).unwrap_err();
    assert!(matches!(err, Error::NotSorted { run: 0, row: 1, .. }), "{err}");
}

#[test]
fn unsorted_long_strings_are_found_past_the_prefix() {
    let long = "y".repeat(64);
    let b = RecordBatch::try_from_iter([(
        "s",
        Arc::new(StringArray::from(vec![format!("{long}a"), format!("{long}c"), format!("{long}b")])) as ArrayRef,
    )])
    .unwrap();
    let err = merge(&[b], &[SortKey::asc("s")], &MergeOptions::default().with_check_sorted(true)).unwrap_err();
    assert!(matches!(err, Error::NotSorted { run: 0, row: 2, .. }), "{err}");
}

/// Nested keys (here a list, then a struct beside an integer) merge in arrow-row's order,
/// stably, with either option set: their arrow-row bytes are the key (`keys::rows`).
#[test]
fn nested_key_columns_merge_in_arrow_row_order() {
    let list = |v: Vec<Option<Vec<Option<i32>>>>| -> ArrayRef { Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(v)) };
    for options in [SortOptions::default(), SortOptions { descending: true, nulls_first: false }] {
        // Each run sorted by arrow-row under `options` first.
        let sorted = |a: ArrayRef| -> ArrayRef {
            let conv = RowConverter::new(vec![SortField::new_with_options(a.data_type().clone(), options)]).unwrap();
            let rows = conv.convert_columns(std::slice::from_ref(&a)).unwrap();
            let mut idx: Vec<u32> = (0..a.len() as u32).collect();
            idx.sort_by(|&x, &y| rows.row(x as usize).cmp(&rows.row(y as usize)));
            arrow::compute::take(&a, &UInt32Array::from(idx), None).unwrap()
        };
        let a = sorted(list(vec![Some(vec![Some(1), None]), None, Some(vec![]), Some(vec![Some(1)]), Some(vec![Some(-3), Some(7)])]));
        let b = sorted(list(vec![Some(vec![Some(1)]), Some(vec![Some(1), None, Some(2)]), None, Some(vec![])]));
        let runs: Vec<RecordBatch> = [a, b]
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let ids = UInt64Array::from_iter_values((0..l.len() as u64).map(|i| r as u64 * 100 + i));
                RecordBatch::try_from_iter([("l", l), ("id", Arc::new(ids) as ArrayRef)]).unwrap()
            })
            .collect();
        let keys = [SortKey::new("l", options)];
        let expect = oracle(&runs, &[("l".to_string(), options)]);
        let perm = merge_permutation(&runs, &keys, &MergeOptions::default().with_check_sorted(true)).unwrap();
        assert_eq!(perm.indices.to_vec(), expect, "{options:?}");
    }
    // A struct behind an integer column (ascending, nulls last: a null field sorts after 3).
    let run = |k: Vec<i32>, a: Vec<Option<i32>>, s: Vec<&str>| -> RecordBatch {
        let st = StructArray::from(vec![
            (Arc::new(Field::new("a", DataType::Int32, true)), Arc::new(Int32Array::from(a)) as ArrayRef),
            (Arc::new(Field::new("s", DataType::Utf8, false)), Arc::new(StringArray::from(s)) as ArrayRef),
        ]);
        RecordBatch::try_from_iter([("k", Arc::new(Int32Array::from(k)) as ArrayRef), ("st", Arc::new(st) as ArrayRef)]).unwrap()
    };
    let runs = [
        run(vec![1, 1, 2], vec![Some(3), None, Some(0)], vec!["a", "x", "b"]),
        run(vec![1, 1, 1], vec![Some(3), None, None], vec!["a", "a", "x"]),
    ];
    let keys = [SortKey::asc("k"), SortKey::asc("st")];
    let expect = oracle(&runs, &[("k".to_string(), keys[0].options), ("st".to_string(), keys[1].options)]);
    let perm = merge_permutation(&runs, &keys, &MergeOptions::default().with_check_sorted(true)).unwrap();
    assert_eq!(perm.indices.to_vec(), expect);
    // A run out of order is still found.
    let bad = run(vec![1, 1], vec![None, Some(3)], vec!["a", "a"]);
    let err = merge_permutation(&[bad], &keys, &MergeOptions::default().with_check_sorted(true)).unwrap_err();
    assert!(matches!(err, Error::NotSorted { run: 0, row: 1, .. }), "{err}");
}

#[test]
fn zero_batch_size_is_an_error() {
    let err = merge(&[run(vec![1], vec!["a"])], &[SortKey::asc("k")], &MergeOptions::default().with_batch_size(0)).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
}

#[test]
fn nullability_is_the_union_of_the_runs() {
    let strict = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    let loose = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
    let a = RecordBatch::try_new(strict, vec![Arc::new(Int64Array::from(vec![1, 3]))]).unwrap();
    let b = RecordBatch::try_new(loose, vec![Arc::new(Int64Array::from(vec![None, Some(2)]))]).unwrap();
    let keys = [SortKey::asc("k").nulls_first(true)];
    let perm = merge_permutation(&[a.clone(), b.clone()], &keys, &MergeOptions::default()).unwrap();
    let out = gather(&[a, b], &perm, 10).unwrap();
    assert!(out[0].schema().field(0).is_nullable());
    let k = out[0].column(0).as_primitive::<arrow::datatypes::Int64Type>();
    assert_eq!(k.iter().collect::<Vec<_>>(), [None, Some(1), Some(2), Some(3)]);
}

/// pandas writes schema metadata of its own per data frame: runs whose columns agree merge
/// whatever their metadata (schema or field level) says, under the first run's.
#[test]
fn metadata_that_differs_is_the_first_runs() {
    use std::collections::HashMap;
    let with = |schema_meta: &str, field_meta: Option<&str>, k: Vec<i64>, v: Vec<&str>| {
        let mut k_field = Field::new("k", DataType::Int64, true);
        if let Some(m) = field_meta {
            k_field = k_field.with_metadata(HashMap::from([("unit".to_string(), m.to_string())]));
        }
        let fields = vec![k_field, Field::new("v", DataType::Utf8, true)];
        let schema = Schema::new_with_metadata(fields, HashMap::from([("pandas".to_string(), schema_meta.to_string())]));
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(Int64Array::from(k)), Arc::new(StringArray::from(v))]).unwrap()
    };
    let runs = [
        with("frame 0", Some("ms"), vec![1, 3], vec!["a", "b"]),
        with("frame 1", None, vec![2, 3], vec!["c", "d"]),
        with("frame 2", Some("s"), vec![0], vec!["e"]),
        run(vec![4], vec!["f"]),
    ];
    let keys = [SortKey::asc("k")];
    let out = merge(&runs, &keys, &MergeOptions::default().with_check_sorted(true)).unwrap();
    assert_eq!(values(&out), ["e", "a", "c", "b", "d", "f"]);
    let schema = out[0].schema();
    assert_eq!(schema.metadata().get("pandas").map(String::as_str), Some("frame 0"));
    assert_eq!(schema.field(0).metadata().get("unit").map(String::as_str), Some("ms"));
    // Through the sort too (the batches are the runs), and with a run that really differs.
    let sorted = corank::sort_batches(&runs, &keys, &Default::default()).unwrap();
    assert_eq!(values(&sorted), ["e", "a", "c", "b", "d", "f"]);
    assert_eq!(sorted[0].schema().metadata().get("pandas").map(String::as_str), Some("frame 0"));
    let other = RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![5])) as ArrayRef)]).unwrap();
    let err = merge(&[runs[1].clone(), runs[0].clone(), other], &keys, &MergeOptions::default()).unwrap_err();
    assert!(matches!(err, Error::SchemaMismatch { run: 2, .. }), "{err}");
    assert_eq!(err.to_string(), "run 2 has a schema that differs from run 0: 1 columns instead of 2");
}

#[test]
fn gpu_engine_without_a_gpu_is_a_clear_error() {
    if corank_has_gpu() {
        return;
    }
    let err = merge(&[run(vec![1], vec!["a"])], &[SortKey::asc("k")], &MergeOptions::default().with_engine(Engine::Gpu)).unwrap_err();
    assert!(matches!(err, Error::GpuUnavailable(_)), "{err}");
}

fn corank_has_gpu() -> bool {
    corank::gpu_availability().is_ok()
}

/// One run: nullable integers, short and long string views, a dictionary.
fn one_run_of_every_kind(n: usize) -> RecordBatch {
    let ints = Int64Array::from_iter((0..n).map(|i| (i % 7 != 3).then_some((i * 37 % 101) as i64)));
    let views = StringViewArray::from_iter((0..n).map(|i| {
        (i % 11 != 5).then(|| if i % 3 == 0 { format!("short{i}") } else { format!("a string longer than twelve bytes, row {i}") })
    }));
    let dict: DictionaryArray<Int8Type> = (0..n).map(|i| ["red", "green", "blue"][i * 7 % 3]).collect();
    RecordBatch::try_from_iter([("i", Arc::new(ints) as ArrayRef), ("v", Arc::new(views) as _), ("d", Arc::new(dict) as _)]).unwrap()
}

/// The one-run gather (arrow's `take`) gives what the many-run gather (`interleave`) gives
/// for the same rows: the run cut in two, the global indices unchanged.
#[test]
fn one_run_gathers_like_many_runs() {
    let n = 1000;
    let batch = one_run_of_every_kind(n);
    let order: Vec<usize> = (0..n).map(|i| i * 389 % n).collect(); // a permutation (389 is prime to 1000)
    let halves = [batch.slice(0, 400), batch.slice(400, n - 400)];
    for rows in [order.clone(), order[..333].to_vec(), vec![999, 0, 999, 0]] {
        for wide in [false, true] {
            let indices = match wide {
                false => Indices::U32(rows.iter().map(|&i| i as u32).collect()),
                true => Indices::U64(rows.iter().map(|&i| i as u64).collect()),
            };
            let one = Permutation { run_offsets: vec![0, n], indices: indices.clone(), engine: Engine::Cpu, key_bytes: 8 };
            let two = Permutation { run_offsets: vec![0, 400, n], ..one.clone() };
            for batch_size in [1, 7, rows.len(), rows.len() + 5] {
                let got = gather(std::slice::from_ref(&batch), &one, batch_size).unwrap();
                let want = gather(&halves, &two, batch_size).unwrap();
                let lengths = |b: &[RecordBatch]| b.iter().map(RecordBatch::num_rows).collect::<Vec<_>>();
                assert_eq!(lengths(&got), lengths(&want), "{} rows, wide {wide}, batch size {batch_size}", rows.len());
                let concat = |b: &[RecordBatch]| arrow::compute::concat_batches(&batch.schema(), b).unwrap();
                assert_eq!(concat(&got), concat(&want), "{} rows, wide {wide}, batch size {batch_size}", rows.len());
            }
        }
    }
}

/// Runs of every fixed-width type, string and binary views, and strings and bytes with
/// i32 and i64 offsets (all gathered through their value addresses), sliced so that the
/// arrays have offsets, some with nulls and some without: the gather gives arrow's
/// `interleave` of the same rows, for few runs and for more than the 64 past which the runs
/// are renumbered per batch.
#[test]
fn fixed_width_view_and_byte_columns_gather_like_interleave() {
    use arrow::datatypes::{i256, IntervalMonthDayNano};
    let fixed_run = |r: usize, n: usize| -> RecordBatch {
        let valid = |i: usize| !r.is_multiple_of(3) || i % 5 != 2; // every third run has nulls
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("i8", Arc::new(Int8Array::from_iter((0..n).map(|i| valid(i).then_some((r * 31 + i) as i8))))),
            ("u16", Arc::new(UInt16Array::from_iter((0..n).map(|i| valid(i).then_some((r * 1009 + i) as u16))))),
            ("f16", Arc::new(Float16Array::from_iter((0..n).map(|i| valid(i).then_some(half::f16::from_f32(i as f32 + r as f32 / 8.0)))))),
            ("f32", Arc::new(Float32Array::from_iter((0..n).map(|i| valid(i).then_some(i as f32 * 0.25 - r as f32))))),
            ("d32", Arc::new(Date32Array::from_iter((0..n).map(|i| valid(i).then_some((r * 100 + i) as i32))))),
            ("u64", Arc::new(UInt64Array::from_iter((0..n).map(|i| valid(i).then_some(((r as u64) << 40) | i as u64))))),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from_iter((0..n).map(|i| valid(i).then_some((r * 1_000_000 + i) as i64)))
                        .with_timezone("+02:00"),
                ),
            ),
            (
                "dec128",
                Arc::new(
                    Decimal128Array::from_iter((0..n).map(|i| valid(i).then_some(((r as i128) << 70) - i as i128)))
                        .with_precision_and_scale(38, 4)
                        .unwrap(),
                ),
            ),
            (
                "dec256",
                Arc::new(
                    Decimal256Array::from_iter((0..n).map(|i| valid(i).then_some(i256::from_parts(i as u128, r as i128 - 50))))
                        .with_precision_and_scale(76, 2)
                        .unwrap(),
                ),
            ),
            (
                "mdn",
                Arc::new(IntervalMonthDayNanoArray::from_iter(
                    (0..n).map(|i| valid(i).then_some(IntervalMonthDayNano::new(r as i32, i as i32, (r * i) as i64))),
                )),
            ),
            ("dur", Arc::new(DurationNanosecondArray::from_iter((0..n).map(|i| valid(i).then_some(-((r * n + i) as i64)))))),
            ("s", Arc::new(StringArray::from_iter((0..n).map(|i| valid(i).then(|| format!("r{r}i{i}")))))),
            ("ls", Arc::new(LargeStringArray::from_iter((0..n).map(|i| valid(i).then(|| "é".repeat((r + i) % 9)))))),
            ("b", Arc::new(BinaryArray::from_iter((0..n).map(|i| valid(i).then(|| vec![r as u8; i % 4]))))),
            ("lb", Arc::new(LargeBinaryArray::from_iter((0..n).map(|i| valid(i).then(|| vec![i as u8; r % 5]))))),
            ("sv", {
                // Short (inline) and long values, in data buffers of 64 bytes: several a run.
                let mut b = StringViewBuilder::new().with_fixed_block_size(64);
                for i in 0..n {
                    match (valid(i), i % 3) {
                        (false, _) => b.append_null(),
                        (true, 0) => b.append_value(format!("s{r}.{i}")),
                        (true, _) => b.append_value(format!("a longer string of run {r}, row {i}")),
                    }
                }
                Arc::new(b.finish())
            }),
            (
                "bv",
                Arc::new(BinaryViewArray::from_iter(
                    (0..n).map(|i| valid(i).then(|| format!("binary view {r} {i} {}", "x".repeat(i % 20)).into_bytes())),
                )),
            ),
        ];
        // Slice off two rows at the front: every array has an offset.
        RecordBatch::try_from_iter(cols).unwrap().slice(2, n - 2)
    };
    for runs in [3, 100] {
        let batches: Vec<RecordBatch> = (0..runs).map(|r| fixed_run(r, 12 + r % 7)).collect();
        let mut run_offsets = vec![0];
        for b in &batches {
            run_offsets.push(run_offsets.last().unwrap() + b.num_rows());
        }
        let total = *run_offsets.last().unwrap();
        // A permutation with repeats: every row, then some rows again.
        let rows: Vec<usize> = (0..total).map(|i| i * 7919 % total).chain((0..total / 3).map(|i| i * 13 % total)).collect();
        let perm = Permutation {
            run_offsets: run_offsets.clone(),
            indices: Indices::U32(rows.iter().map(|&i| i as u32).collect()),
            engine: Engine::Cpu,
            key_bytes: 8,
        };
        let pairs: Vec<(usize, usize)> = rows.iter().map(|&g| perm.locate(g)).collect();
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        let want = arrow::compute::interleave_record_batch(&refs, &pairs).unwrap();
        for batch_size in [1, 10, rows.len()] {
            let got = gather(&batches, &perm, batch_size).unwrap();
            let got = arrow::compute::concat_batches(&batches[0].schema(), &got).unwrap();
            assert_eq!(got.schema(), want.schema(), "{runs} runs, batch size {batch_size}");
            for c in 0..want.num_columns() {
                let name = want.schema().field(c).name().clone();
                assert_eq!(got.column(c).to_data(), want.column(c).to_data(), "{runs} runs, batch size {batch_size}, column {name}");
                assert_eq!(got.column(c).null_count(), want.column(c).null_count(), "{runs} runs, column {name}");
            }
        }
    }
}

/// A batch whose strings pass the 2 GiB that i32 offsets can count is halved, not an
/// error: one 1.5 GiB value taken twice comes out in two batches, every byte in place.
#[test]
fn strings_past_i32_offsets_come_out_in_smaller_batches() {
    let huge = "x".repeat(3 << 29);
    let a = RecordBatch::try_from_iter([("s", Arc::new(StringArray::from(vec![huge.as_str()])) as ArrayRef)]).unwrap();
    let b = RecordBatch::try_from_iter([("s", Arc::new(StringArray::from(vec!["y"])) as ArrayRef)]).unwrap();
    drop(huge);
    let perm = Permutation { run_offsets: vec![0, 1, 2], indices: Indices::U32(vec![0, 1, 0]), engine: Engine::Cpu, key_bytes: 8 };
    let out = gather(&[a, b], &perm, 3).unwrap();
    assert!(out.len() > 1, "one batch of {} rows", out[0].num_rows());
    let values: Vec<(usize, bool)> = out
        .iter()
        .flat_map(|batch| {
            let s = batch.column(0).as_string::<i32>().clone();
            (0..s.len()).map(move |i| (s.value(i).len(), s.value(i).bytes().all(|c| c == s.value(i).as_bytes()[0])))
        })
        .collect();
    assert_eq!(values, [(3 << 29, true), (1, true), (3 << 29, true)]);
}

#[test]
fn a_permutation_of_other_runs_is_an_error() {
    let batch = one_run_of_every_kind(10);
    let one = [batch.clone()];
    let two = [batch.slice(0, 5), batch.slice(5, 5)];
    let perm = |run_offsets: &[usize], indices: Indices| Permutation {
        run_offsets: run_offsets.to_vec(),
        indices,
        engine: Engine::Cpu,
        key_bytes: 8,
    };
    // Indices past the last row, through the one-run and the many-run gather.
    for indices in [Indices::U32(vec![3, 10]), Indices::U64(vec![u64::MAX])] {
        for (runs, offsets) in [(&one[..], &[0, 10][..]), (&two[..], &[0, 5, 10][..])] {
            let err = gather(runs, &perm(offsets, indices.clone()), 4).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        }
    }
    // Run offsets that are not the runs' row counts.
    for offsets in [&[0, 11][..], &[0, 5, 10][..], &[1, 10][..]] {
        let err = gather(&one, &perm(offsets, Indices::U32(vec![0])), 4).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}

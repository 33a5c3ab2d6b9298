"""merge, merge_indices, sort, sort_indices against the oracle: every key type, nulls,
NaN, ASC/DESC, several columns, 0/1/many runs, chunked runs, and the errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import corank
from conftest import KINDS, assert_same_rows, oracle_indices, oracle_sort, random_table, sorted_runs

ORDERS = ["k", "k DESC", "k ASC NULLS FIRST", "k DESC NULLS LAST"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("order", ORDERS)
def test_merge_every_key_type(kind, order, rng):
    runs = sorted_runs({"k": kind, "v": "int32"}, order, [rng.integers(0, 60) for _ in range(4)], rng)
    want = oracle_sort(pa.concat_tables(runs), order)
    got = corank.merge(runs, by=order, engine="cpu")
    assert got["id"].to_pylist() == want["id"].to_pylist()
    assert_same_rows(got, want)


@pytest.mark.parametrize("kind", KINDS)
def test_sort_every_key_type(kind, rng):
    for order in ORDERS:
        t = random_table({"k": kind, "v": "string"}, 300, rng).append_column("id", pa.array(np.arange(300)))
        want = oracle_sort(t, order)
        assert_same_rows(corank.sort(t, by=order, engine="cpu"), want)
        assert corank.sort_indices(t, by=order).to_pylist() == oracle_indices(t, order).to_pylist()


@pytest.mark.parametrize(
    "by",
    [
        "a, b",
        "a DESC, b ASC NULLS FIRST",
        "s NULLS FIRST, f DESC NULLS LAST, a",
        "d DESC, s, f",
        "b DESC NULLS LAST, d NULLS FIRST, s DESC, f, a DESC",
    ],
)
def test_multi_column(by, rng):
    kinds = {"a": "int32", "b": "bool", "s": "string", "f": "float64", "d": "dictionary"}
    runs = sorted_runs(kinds, by, [100, 0, 1, 250, 37], rng)
    want = oracle_sort(pa.concat_tables(runs), by)
    got = corank.merge(runs, by=by)
    assert_same_rows(got, want)
    idx = corank.merge_indices(runs, by=by)
    starts = np.cumsum([0] + [len(r) for r in runs])
    assert [starts[r] + w for r, w in zip(idx["run"].to_pylist(), idx["row"].to_pylist())] == want["id"].to_pylist()
    t = random_table(kinds, 500, rng)
    assert_same_rows(corank.sort(t, by=by), oracle_sort(t, by))


def test_the_readme_example():
    a = pa.table({"k": [1, 3, 5], "v": ["a", "b", "c"]})
    b = pa.table({"k": [2, 3, 4], "v": ["d", "e", "f"]})
    assert corank.merge([a, b], by="k")["v"].to_pylist() == ["a", "d", "b", "e", "f", "c"]
    idx = corank.merge_indices([a, b], by="k")
    assert idx.schema == pa.schema([pa.field("run", pa.int32(), False), pa.field("row", pa.int64(), False)])
    assert list(zip(idx["run"].to_pylist(), idx["row"].to_pylist())) == [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2)]
    t = pa.table({"k": [3, 1, 2, 1], "v": ["a", "b", "c", "d"]})
    assert corank.sort(t, by="k DESC")["v"].to_pylist() == ["a", "c", "b", "d"]
    assert corank.sort_indices(t, by="k").to_pylist() == [1, 3, 2, 0]


def test_zero_one_and_many_runs(rng):
    assert corank.merge([], by="k").num_rows == 0
    assert corank.merge_indices([], by="k").num_rows == 0
    (one,) = sorted_runs({"k": "int64"}, "k", [50], rng)
    assert_same_rows(corank.merge([one], by="k"), one)
    empty = one.slice(0, 0)
    got = corank.merge([empty, empty], by="k")
    assert got.num_rows == 0 and got.schema.names == one.schema.names
    many = sorted_runs({"k": "int32", "s": "string"}, "k, s", [int(rng.integers(0, 20)) for _ in range(100)], rng)
    assert_same_rows(corank.merge(many, by="k, s"), oracle_sort(pa.concat_tables(many), "k, s"))
    assert corank.sort(one.slice(0, 0), by="k").num_rows == 0
    assert corank.sort_indices(one.slice(0, 0), by="k").to_pylist() == []


def test_chunked_runs_merge_in_place(rng):
    # A run in several record batches: each chunk is a run of corank's, the result the same.
    runs = sorted_runs({"k": "int64", "s": "string"}, "k DESC, s", [400, 300, 0, 250], rng)
    chunked = [pa.Table.from_batches(r.to_batches(max_chunksize=37), schema=r.schema) for r in runs]
    assert chunked[0].column(0).num_chunks > 1
    want = oracle_sort(pa.concat_tables(runs), "k DESC, s")
    assert_same_rows(corank.merge(chunked, by="k DESC, s"), want)
    idx = corank.merge_indices(chunked, by="k DESC, s")
    starts = np.cumsum([0] + [len(r) for r in runs])
    assert [starts[r] + w for r, w in zip(idx["run"].to_pylist(), idx["row"].to_pylist())] == want["id"].to_pylist()
    # sort() of several chunks and of a list of tables: their concatenation, stably.
    t = pa.concat_tables(chunked)
    assert_same_rows(corank.sort(t, by="s"), oracle_sort(t, "s"))
    assert_same_rows(corank.sort(chunked, by="s"), oracle_sort(t, "s"))


def test_by_as_a_list_and_batch_size(rng):
    runs = sorted_runs({"a": "int32", "b": "string"}, "a DESC, b", [100, 100], rng)
    got = corank.merge(runs, by=["a DESC", "b"], batch_size=7)
    assert max(len(b) for b in got.to_batches()) <= 7
    assert_same_rows(got, oracle_sort(pa.concat_tables(runs), "a DESC, b"))


def test_record_batches_and_readers_as_runs(rng):
    runs = sorted_runs({"k": "int64"}, "k", [30, 40], rng)
    batches = [r.combine_chunks().to_batches()[0] for r in runs]
    readers = [pa.RecordBatchReader.from_batches(r.schema, r.to_batches()) for r in runs]
    want = oracle_sort(pa.concat_tables(runs), "k")
    assert_same_rows(corank.merge(batches, by="k"), want)
    assert_same_rows(corank.merge(readers, by="k"), want)
    struct = pa.StructArray.from_arrays([c.combine_chunks() for c in runs[0].columns], names=runs[0].column_names)
    assert_same_rows(corank.merge([struct], by="k"), runs[0])


# ---------------------------------------------------------------------------- errors ---


def test_unsorted_run_names_run_and_row():
    a = pa.table({"k": [1, 2, 3]})
    b = pa.table({"k": [1, 5, 4, 6]})
    with pytest.raises(corank.NotSortedError) as e:
        corank.merge([a, b], by="k")
    assert (e.value.run, e.value.row) == (1, 2)
    assert "run 1 is not sorted: row 2 sorts before row 1" in str(e.value)
    # Without the check, no error (the caller vouches for the order).
    assert corank.merge([a, b], by="k", check_sorted=False).num_rows == 7


def test_unsorted_where_two_chunks_of_a_run_meet():
    good = pa.table({"k": [1, 2, 3]})
    bad = pa.Table.from_batches([pa.record_batch({"k": [1, 2, 9]}), pa.record_batch({"k": [4, 10]})])
    with pytest.raises(corank.NotSortedError) as e:
        corank.merge([good, bad], by="k")
    assert (e.value.run, e.value.row) == (1, 3)
    # An earlier row out of order within a chunk wins over a later junction.
    worse = pa.Table.from_batches([pa.record_batch({"k": [2, 1, 9]}), pa.record_batch({"k": [4, 10]})])
    with pytest.raises(corank.NotSortedError) as e:
        corank.merge([good, worse], by="k")
    assert (e.value.run, e.value.row) == (1, 1)
    # Within a later chunk: the row counts from the start of the run.
    late = pa.Table.from_batches([pa.record_batch({"k": [1, 2]}), pa.record_batch({"k": [3, 5, 4]})])
    with pytest.raises(corank.NotSortedError) as e:
        corank.merge([good, late], by="k")
    assert (e.value.run, e.value.row) == (1, 4)


def test_schema_errors():
    a = pa.table({"k": [1], "v": ["x"]})
    with pytest.raises(corank.SchemaError) as e:
        corank.merge([a, pa.table({"k": [1], "v": [1.0]})], by="k")
    assert e.value.run == 1
    with pytest.raises(corank.SchemaError):
        corank.merge([a, pa.table({"k": [1]})], by="k")
    with pytest.raises(corank.ColumnNotFoundError) as e:
        corank.merge([a, a], by="nope")
    assert e.value.column == "nope"
    assert isinstance(e.value, corank.SchemaError) and isinstance(e.value, corank.Error)


def test_invalid_options():
    a = pa.table({"k": [1, 2]})
    cases = [
        dict(by="k SIDEWAYS"),
        dict(by=""),
        dict(by="k", engine="tpu"),
        dict(by="k", kernel="fast"),
        dict(by="k", devices="gpu0"),
        dict(by="k", on_gpu_failure="maybe"),
        dict(by="k", batch_size=0),
        dict(by=None),
        dict(by=3),
    ]
    for kw in cases:
        with pytest.raises(corank.InvalidOptionError):
            corank.merge([a], **kw)
        assert issubclass(corank.InvalidOptionError, ValueError)


def test_not_arrow_data():
    with pytest.raises(TypeError):
        corank.merge([[1, 2, 3]], by="k")
    with pytest.raises(TypeError):
        corank.merge(pa.table({"k": [1]}), by="k")  # a table, not a list of runs
    with pytest.raises(TypeError):
        corank.sort(object(), by="k")


def test_gpu_required_without_a_gpu():
    if corank.nvrtc_version() is not None and _has_gpu():
        pytest.skip("a GPU is present")
    a = pa.table({"k": [1, 2]})
    with pytest.raises(corank.GpuUnavailableError):
        corank.merge([a, a], by="k", engine="gpu")
    with pytest.raises(corank.GpuUnavailableError):
        corank.sort(a, by="k", engine="gpu")
    # auto falls back to the CPU unless the fallback is refused.
    assert corank.merge([a, a], by="k", engine="auto", gpu_min_rows=0).num_rows == 4
    with pytest.raises(corank.GpuUnavailableError):
        corank.merge([a, a], by="k", engine="auto", on_gpu_failure="error")


def _has_gpu() -> bool:
    try:
        corank.merge([pa.table({"k": [1]})], by="k", engine="gpu")
        return True
    except corank.GpuUnavailableError:
        return False


def test_unsupported_key_type():
    t = pa.table({"k": pa.array([None, None], pa.null())})
    try:
        corank.sort(t, by="k")
    except corank.UnsupportedTypeError as e:
        assert e.column == "k" and isinstance(e, TypeError)

"""merge_stream: readers in, a reader out, more data than its memory budget."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import corank
from conftest import assert_same_rows, oracle_sort, sorted_runs

BATCH = 8192


def lazy_run(keys: np.ndarray, first_id: int, produced: list, r: int) -> pa.RecordBatchReader:
    """A reader over sorted ``keys`` whose batches (key, id, a 40-byte payload) are made only
    when read; ``produced[r]`` counts them."""
    schema = pa.schema([("k", pa.int64()), ("id", pa.int64()), ("payload", pa.string())])

    def batches():
        for start in range(0, len(keys), BATCH):
            k = keys[start:start + BATCH]
            ids = np.arange(first_id + start, first_id + start + len(k))
            payload = pa.array([f"{i:040d}" for i in ids], pa.string())
            produced[r] += 1
            yield pa.record_batch([pa.array(k), pa.array(ids), payload], schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def test_more_data_than_the_budget(rng):
    runs, sizes = 4, [300_000, 240_000, 180_000, 280_000]
    keys = [np.sort(rng.integers(0, 50_000, n)) for n in sizes]
    starts = np.cumsum([0] + sizes)
    produced = [0] * runs
    readers = [lazy_run(k, int(starts[r]), produced, r) for r, k in enumerate(keys)]
    total_bytes = sum(sizes) * (8 + 8 + 4 + 40)  # about 60 MB of Arrow data
    limit = 16 << 20  # the windows, and the batches the inputs read ahead (7.7 MB seen)
    assert total_bytes > 3 * limit
    out = corank.merge_stream(readers, by="k", window_rows=BATCH, memory_limit=limit, batch_size=4096)
    assert isinstance(out, pa.RecordBatchReader)
    first = out.read_next_batch()
    # Streaming: the first output batch needs only the first windows of the inputs.
    assert sum(produced) <= 4 * runs, produced
    ids = [first.column("id")]
    for b in out:
        ids.append(b.column("id"))
    got = pa.chunked_array(ids).to_numpy()
    want = np.argsort(np.concatenate(keys), kind="stable")  # the stable merge, by id
    assert len(got) == len(want)
    assert (got == want).all()


def test_same_rows_as_merge(rng):
    by = "a DESC NULLS LAST, s"
    runs = sorted_runs({"a": "int32", "s": "string", "f": "float64"}, by, [500, 0, 37, 800], rng)
    readers = [pa.RecordBatchReader.from_batches(r.schema, r.to_batches(max_chunksize=100)) for r in runs]
    got = corank.merge_stream(readers, by=by, window_rows=64).read_all()
    assert_same_rows(got, oracle_sort(pa.concat_tables(runs), by))
    assert_same_rows(corank.merge_stream(runs, by=by).read_all(), oracle_sort(pa.concat_tables(runs), by))
    assert corank.merge_stream([], by="a").read_all().num_rows == 0


def test_unsorted_input_raises_when_reached():
    a = pa.table({"k": list(range(100))})
    b = pa.table({"k": [0, 1, 2, 7, 3, 8]})
    out = corank.merge_stream([a, b], by="k")
    with pytest.raises(corank.NotSortedError) as e:
        out.read_all()
    assert (e.value.run, e.value.row) == (1, 4)


def test_errors_before_reading():
    a = pa.table({"k": [1, 2], "v": ["x", "y"]})
    with pytest.raises(corank.SchemaError) as e:
        corank.merge_stream([a, pa.table({"k": [1], "v": [2]})], by="k")
    assert e.value.run == 1
    with pytest.raises(corank.ColumnNotFoundError):
        corank.merge_stream([a], by="nope")
    with pytest.raises(corank.InvalidOptionError):
        corank.merge_stream([a], by="k", window_rows=0)
    with pytest.raises(corank.InvalidOptionError):
        corank.merge_stream([a], by="k", memory_limit="lots")


def test_budget_too_small():
    runs = [pa.table({"k": np.arange(i, 200_000, 3), "s": [f"{j:030d}" for j in range(i, 200_000, 3)]}) for i in range(3)]
    with pytest.raises(corank.InvalidOptionError) as e:
        corank.merge_stream(runs, by="k", window_rows=1 << 16, memory_limit=64 << 10).read_all()
    assert e.value.setting == "memory_limit"

"""Inputs from Polars, DuckDB and pandas (through the Arrow PyCapsule interface), mixed
with pyarrow's, give what the same pyarrow tables give."""

from __future__ import annotations

import pyarrow as pa
import pytest

import corank
from conftest import assert_same_rows, oracle_sort, sorted_runs

BY = "k DESC, s NULLS FIRST"


@pytest.fixture
def runs(rng):
    return sorted_runs({"k": "int64", "s": "string", "f": "float64"}, BY, [120, 80, 0, 200], rng)


def _want(runs):
    return oracle_sort(pa.concat_tables(runs), BY)


def test_polars(runs):
    pl = pytest.importorskip("polars")
    frames = [pl.from_arrow(r) for r in runs]
    assert hasattr(frames[0], "__arrow_c_stream__")
    got = corank.merge(frames, by=BY)
    # Polars exports strings as string views and large strings; compare values.
    want = _want(runs)
    assert got["id"].to_pylist() == want["id"].to_pylist()
    assert got["s"].to_pylist() == want["s"].to_pylist()
    sorted_df = corank.sort(pl.concat(frames), by=BY)
    assert sorted_df["id"].to_pylist() == want["id"].to_pylist()
    # A LazyFrame's collected stream, as a reader, in the streaming merge.
    readers = [pl.from_arrow(r).lazy().collect() for r in runs]
    assert corank.merge_stream(readers, by=BY).read_all()["id"].to_pylist() == want["id"].to_pylist()


def test_duckdb(runs):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    rels = []
    for i, r in enumerate(runs):
        con.register(f"r{i}", r)
        rels.append(con.sql(f"SELECT * FROM r{i}"))
    got = corank.merge(rels, by=BY)
    want = _want(runs)
    assert got["id"].to_pylist() == want["id"].to_pylist()
    # Record batch readers of queries (one connection each: a connection has one open
    # result at a time) stream.
    readers = []
    for i in range(len(runs)):
        cur = con.cursor()
        cur.register(f"r{i}", runs[i])
        rel = cur.sql(f"SELECT * FROM r{i}")
        readers.append(rel.to_arrow_reader(50) if hasattr(rel, "to_arrow_reader") else rel.fetch_record_batch(50))
    assert corank.merge_stream(readers, by=BY).read_all()["id"].to_pylist() == want["id"].to_pylist()


def test_pandas(runs):
    pd = pytest.importorskip("pandas")
    # Arrow-backed dtypes keep the types (NumPy ones turn integers with nulls into floats).
    frames = [r.to_pandas(types_mapper=pd.ArrowDtype) for r in runs]
    got = corank.merge(frames, by=BY)
    want = _want(runs)
    assert got["id"].to_pylist() == want["id"].to_pylist()
    t = pa.Table.from_pandas(pd.concat(frames, ignore_index=True), preserve_index=False)
    assert corank.sort(frames, by=BY)["id"].to_pylist() == oracle_sort(t, BY)["id"].to_pylist()


def test_mixed_sources(runs):
    pl = pytest.importorskip("polars")
    mixed = [runs[0], pl.from_arrow(runs[1]).to_arrow(), runs[2].to_batches() or runs[2], runs[3].to_reader()]
    assert_same_rows(corank.merge(mixed, by=BY), _want(runs))


def test_metadata_that_differs_is_the_first_runs():
    # pandas writes schema metadata of its own per frame; field metadata may differ too.
    a = pa.table({"k": [1, 3], "v": ["a", "b"]}).replace_schema_metadata({"pandas": "frame 0"})
    b = pa.table({"k": [2], "v": ["c"]}).replace_schema_metadata({"pandas": "frame 1"})
    field = pa.field("k", pa.int64(), metadata={"unit": "s"})
    c = pa.table([pa.array([0]), pa.array(["d"])], schema=pa.schema([field, pa.field("v", pa.string())]))
    for fn in (corank.merge, corank.sort):
        got = fn([a, b, c], by="k")
        assert got["v"].to_pylist() == ["d", "a", "c", "b"]
        assert got.schema.metadata == {b"pandas": b"frame 0"}
        assert got.schema.field("k").metadata is None

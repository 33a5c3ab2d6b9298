"""Shared helpers: the oracle (pyarrow's stable ``sort_indices`` over keys rewritten into
corank's order), random sorted runs, and exact table comparison."""

from __future__ import annotations

import decimal
import re
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------

_KEY = re.compile(r"^\s*(\S+)(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\s*$", re.I)


def parse_by(by: str):
    """``"k DESC NULLS LAST, j"`` -> [(column, descending, nulls_first)] (SQL's defaults)."""
    keys = []
    for item in by.split(","):
        m = _KEY.match(item)
        assert m, item
        desc = (m.group(2) or "ASC").upper() == "DESC"
        nulls = m.group(3)
        nulls_first = desc if nulls is None else nulls.upper() == "FIRST"
        keys.append((m.group(1), desc, nulls_first))
    return keys


def _reinterpret(arr: pa.Array, to: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(to, len(arr), arr.buffers()[:2], null_count=arr.null_count, offset=arr.offset)


def _order_column(col: pa.ChunkedArray) -> pa.Array:
    """A column pyarrow sorts in corank's order: dictionaries decoded; floats as integers
    in IEEE total order (pyarrow puts NaN last for DESC too and ties -0.0 with +0.0)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return pc.cast(arr, pa.large_string() if pa.types.is_string_view(t) else pa.large_binary())
    if pa.types.is_floating(t):
        if pa.types.is_float16(t):
            arr, t = pc.cast(arr, pa.float32()), pa.float32()
        width = 64 if pa.types.is_float64(t) else 32
        itype, np_int = (pa.int64(), np.int64) if width == 64 else (pa.int32(), np.int32)
        bits = _reinterpret(arr, itype)
        values = bits.to_numpy(zero_copy_only=False).astype(np_int) if bits.null_count == 0 else np.asarray(bits.fill_null(0), dtype=np_int)
        mask = np_int(np.iinfo(np_int).max)  # all bits but the sign: flipped for negatives
        total = np.where(values < 0, values ^ mask, values)
        return pa.array(total, type=itype, mask=np.asarray(arr.is_null()))
    return arr


def oracle_indices(table: pa.Table, by: str) -> pa.Array:
    """The stable sort of ``table`` by ``by`` in corank's order, from
    ``pyarrow.compute.sort_indices`` (stable): per key a null flag (placed first or
    last), then the value."""
    cols, sort_keys = {}, []
    for i, (name, desc, nulls_first) in enumerate(parse_by(by)):
        col = table.column(name)
        arr = _order_column(col)
        nulls = np.asarray(arr.is_null())
        flag = np.where(nulls, 0 if nulls_first else 1, 1 if nulls_first else 0).astype(np.int8)
        cols[f"n{i}"] = pa.array(flag)
        cols[f"v{i}"] = arr
        sort_keys += [(f"n{i}", "ascending"), (f"v{i}", "descending" if desc else "ascending")]
    if not cols:
        return pa.array(np.arange(table.num_rows), pa.uint64())
    return pc.sort_indices(pa.table(cols), sort_keys=sort_keys)


def oracle_sort(table: pa.Table, by: str) -> pa.Table:
    # pyarrow cannot take from string or binary views: through the large types and back.
    views = {i: f.type for i, f in enumerate(table.schema) if pa.types.is_string_view(f.type) or pa.types.is_binary_view(f.type)}
    plain = table
    for i, t in views.items():
        plain = plain.set_column(i, table.field(i).with_type(pa.large_string() if pa.types.is_string_view(t) else pa.large_binary()),
                                 pc.cast(table.column(i), pa.large_string() if pa.types.is_string_view(t) else pa.large_binary()))
    out = plain.take(oracle_indices(table, by))
    for i, t in views.items():
        out = out.set_column(i, table.field(i), pc.cast(out.column(i), t))
    return out


# --------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------


def canonical(table: pa.Table) -> pa.Table:
    """``table`` with float columns as their bits (so NaN equals NaN), one chunk a column,
    no schema metadata: tables that hold the same rows compare equal."""
    cols = []
    for col in table.columns:
        arr = col.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()  # corank merges the runs' dictionaries
        if pa.types.is_floating(arr.type) and not pa.types.is_float16(arr.type):
            arr = _reinterpret(arr, pa.int64() if pa.types.is_float64(arr.type) else pa.int32())
        cols.append(arr)
    return pa.table(cols, names=table.column_names)


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    assert [f.type for f in got.schema] == [f.type for f in want.schema]
    assert got.num_rows == want.num_rows
    g, w = canonical(got), canonical(want)
    for name in got.column_names:
        assert g.column(name).equals(w.column(name)), f"column {name} differs"


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------


def random_column(kind: str, n: int, rng: np.random.Generator, null_frac: float = 0.1) -> pa.Array:
    """A column of ``kind`` with duplicates, nulls, and the type's edge values."""
    mask = rng.random(n) < null_frac if null_frac else None
    small = rng.integers(-5, 6, n)
    if kind in ("int8", "int16", "int32", "int64"):
        return pa.array(small, type=getattr(pa, kind)(), mask=mask)
    if kind in ("uint8", "uint16", "uint32", "uint64"):
        return pa.array(small + 5, type=getattr(pa, kind)(), mask=mask)
    if kind in ("float32", "float64"):
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5])
        values = np.where(rng.random(n) < 0.3, specials[rng.integers(0, len(specials), n)], small / 2)
        return pa.array(values.astype(kind), mask=mask)
    words = ["", "a", "ab", "abc", "b", "ba", "é", "zz", "a\x00b", "prefix-long-string-that-ties-0", "prefix-long-string-that-ties-1"]
    if kind in ("string", "large_string", "string_view"):
        values = [words[i] for i in rng.integers(0, len(words), n)]
        return pa.array(values, type=getattr(pa, kind)(), mask=mask)
    if kind in ("binary", "large_binary"):
        values = [w.encode() + bytes([i % 3]) for i, w in zip(rng.integers(0, 3, n), (words[i] for i in rng.integers(0, len(words), n)))]
        return pa.array(values, type=getattr(pa, kind)(), mask=mask)
    if kind == "bool":
        return pa.array(rng.random(n) < 0.5, mask=mask)
    if kind == "date32":
        return pa.array(small * 1000, type=pa.int32(), mask=mask).cast(pa.date32())
    if kind == "timestamp":
        return pa.array(small * 10**9, type=pa.int64(), mask=mask).cast(pa.timestamp("us", tz="UTC"))
    if kind == "decimal128":
        values = [decimal.Decimal(int(v)) / 100 for v in small]  # noqa: E501
        return pa.array(values, type=pa.decimal128(10, 2), mask=mask)
    if kind == "dictionary":
        values = pa.array([words[i] for i in rng.integers(0, len(words), n)], type=pa.string(), mask=mask)
        return values.dictionary_encode()
    raise ValueError(kind)


KINDS = ["int8", "int32", "int64", "uint16", "uint64", "float32", "float64", "string", "large_string", "string_view",
         "binary", "large_binary", "bool", "date32", "timestamp", "decimal128", "dictionary"]


def random_table(kinds: dict, n: int, rng: np.random.Generator, **kw) -> pa.Table:
    return pa.table({name: random_column(kind, n, rng, **kw) for name, kind in kinds.items()})


def sorted_runs(kinds: dict, by: str, sizes, rng: np.random.Generator, **kw):
    """Runs of the given sizes, each sorted by ``by`` (by the oracle), with an ``id`` column
    numbering every row of every run in input order."""
    runs, start = [], 0
    for size in sizes:
        t = random_table(kinds, size, rng, **kw)
        t = oracle_sort(t, by)
        t = t.append_column("id", pa.array(np.arange(start, start + size), pa.int64()))
        runs.append(t)
        start += size
    return runs


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name (reproducible, different per test)."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))

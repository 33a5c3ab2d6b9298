"""merge_files and sort_files end to end: the command line's semantics, the --json summary
as a dict, and each bad input as its own exception with nothing written."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corank
from conftest import assert_same_rows, oracle_sort, random_table, sorted_runs

KINDS = {"k": "int64", "s": "string", "f": "float64", "d": "date32"}


def write(path, table, declare=None, row_group_size=None):
    sorting = None
    if declare:
        sorting = [pq.SortingColumn(table.schema.get_field_index(c), descending=d, nulls_first=n) for c, d, n in declare]
    pq.write_table(table, path, sorting_columns=sorting, row_group_size=row_group_size)


def files_in(d):
    return sorted(os.listdir(d))


@pytest.fixture
def sorted_files(tmp_path, rng):
    by = "k DESC, s"
    runs = sorted_runs(KINDS, by, [3000, 2000, 2500], rng)
    paths = []
    for i, r in enumerate(runs):
        p = tmp_path / f"in-{i}.parquet"
        write(p, r, row_group_size=700)
        paths.append(str(p))
    return by, runs, paths


def test_merge_files(sorted_files, tmp_path):
    by, runs, paths = sorted_files
    out = tmp_path / "out" / "merged.parquet"
    out.parent.mkdir()
    seen = []
    s = corank.merge_files(paths, out, by=by, engine="cpu", compression="snappy", row_group_rows=1000, progress=lambda d, t: seen.append((d, t)))
    assert s["ok"] is True and s["rows"] == 7500 and s["files"] == 3 and s["engine"] == "cpu"
    assert s["by"] == "k DESC NULLS FIRST, s ASC NULLS LAST" and s["compression"] == "snappy"
    for key in ("runs", "input_bytes", "output_bytes", "output_row_groups", "rounds", "elapsed_s", "memory_limit", "passthrough"):
        assert key in s
    got = pq.read_table(out)
    assert_same_rows(got, oracle_sort(pa.concat_tables(runs), by))
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == 8
    assert meta.row_group(0).sorting_columns[0].descending
    assert seen and seen[-1] == (7500, 7500)
    assert files_in(out.parent) == ["merged.parquet"]  # no temporary file left
    # The key from the files' sorting_columns (the output declares it).
    again = corank.merge_files(out, tmp_path / "again.parquet")
    assert again["rows"] == 7500 and again["by"] == s["by"]
    assert_same_rows(pq.read_table(tmp_path / "again.parquet"), got)
    # A directory input; the output in that directory is never read as an input.
    os.remove(tmp_path / "again.parquet")
    for _ in range(2):
        s = corank.merge_files(tmp_path, tmp_path / "all.parquet", by=by, overwrite=True)
        assert s["rows"] == 7500 and s["files"] == 3


def test_merge_files_globs_and_sizes(sorted_files, tmp_path):
    by, runs, paths = sorted_files
    out = tmp_path / "merged.parquet"
    s = corank.merge_files(str(tmp_path / "in-*.parquet"), out, by=by, memory_limit="64MiB", row_group_rows="2k", row_group_bytes="1MiB")
    assert s["memory_limit"] == 64 << 20 and s["rows"] == 7500
    assert pq.ParquetFile(out).metadata.num_row_groups == 4


def test_sort_files(tmp_path, rng):
    by = "s DESC NULLS LAST, k"
    tables = [random_table(KINDS, n, rng).append_column("id", pa.array(np.arange(o, o + n))) for o, n in [(0, 4000), (4000, 3000)]]
    paths = []
    for i, t in enumerate(tables):
        p = tmp_path / f"u-{i}.parquet"
        write(p, t, row_group_size=1000)
        paths.append(p)
    want = oracle_sort(pa.concat_tables(tables), by)
    for strategy in ("columns", "runs"):
        out = tmp_path / f"sorted-{strategy}.parquet"
        seen = []
        # 256 MiB: the columns strategy's estimate grows with the cores (64 MiB is too
        # little on 16), and this test is not about the limit.
        s = corank.sort_files(paths, out, by=by, strategy=strategy, memory_limit="256MiB", progress=lambda d, t: seen.append((d, t)))
        assert s["strategy"] == strategy and s["rows"] == 7000 and s["by"] == "s DESC NULLS LAST, k ASC NULLS LAST"
        assert seen[-1] == (14000, 14000)
        assert_same_rows(pq.read_table(out), want)
    # More rows than the memory limit holds: sorted runs spilled in temp_dir, merged, removed.
    n = 200_000
    big = pa.table({"k": rng.integers(0, 1000, n), "s": np.array(["x", "yy", "zzz"])[rng.integers(0, 3, n)], "id": np.arange(n)})
    write(tmp_path / "big.parquet", big, row_group_size=20_000)
    temp = tmp_path / "spill"
    temp.mkdir()
    out = tmp_path / "sorted-spilled.parquet"
    s = corank.sort_files(tmp_path / "big.parquet", out, by="k", strategy="runs", memory_limit="5MiB", temp_dir=temp, spill_compression="zstd")
    assert s["spill_runs"] > 1 and s["spill_compression"] == "zstd(1)"
    assert pq.read_table(out)["id"].to_pylist() == oracle_sort(big, "k")["id"].to_pylist()
    assert files_in(temp) == []


def test_progress_callback_that_raises(tmp_path, rng):
    # An exception from the callback cancels the work as Ctrl-C does: nothing is written.
    n = 1_000_000
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"big-{i}.parquet")
        write(paths[-1], pa.table({"k": np.sort(rng.integers(0, 1 << 40, n))}), row_group_size=250_000)
    before = files_in(tmp_path)
    calls = []

    def stop(done, total):
        calls.append((done, total))
        raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        corank.merge_files(paths, tmp_path / "m.parquet", by="k", row_group_rows="100k", progress=stop)
    assert len(calls) == 1 and calls[0][0] < calls[0][1] == 2 * n
    assert files_in(tmp_path) == before


def test_union_by_name(sorted_files, tmp_path):
    by, runs, paths = sorted_files
    reordered = tmp_path / "reordered.parquet"
    write(reordered, runs[1].select(["s", "k", "id", "d"]))  # another order, no f
    with pytest.raises(corank.SchemaError) as e:
        corank.merge_files([paths[0], reordered], tmp_path / "u.parquet", by=by)
    assert e.value.path.endswith("reordered.parquet") and "union_by_name" in str(e.value)
    s = corank.merge_files([paths[0], reordered], tmp_path / "u.parquet", by=by, union_by_name=True)
    got = pq.read_table(tmp_path / "u.parquet")
    assert s["rows"] == 5000 and got.column_names == ["k", "s", "f", "d", "id"]
    assert got["f"].null_count >= 2000
    assert sorted(got["id"].to_pylist()) == sorted(runs[0]["id"].to_pylist() + runs[1]["id"].to_pylist())
    s = corank.sort_files([paths[0], reordered], tmp_path / "us.parquet", by="id", union_by_name=True)
    assert pq.read_table(tmp_path / "us.parquet")["id"].to_pylist() == sorted(got["id"].to_pylist())


def test_progress_bar(sorted_files, tmp_path, capfd):
    by, _, paths = sorted_files
    corank.merge_files(paths, tmp_path / "m.parquet", by=by, progress=True)
    err = capfd.readouterr().err
    assert "merging [" in err and "100.0%" in err and "7,500 of 7,500" in err


# ------------------------------------------------------------------------ bad input ---


def expect_nothing_written(tmp_path, before, call, exc, **attrs):
    with pytest.raises(exc) as e:
        call()
    for name, value in attrs.items():
        got = getattr(e.value, name)
        assert got == value or (isinstance(value, str) and str(got).endswith(value)), (name, got, value)
    assert files_in(tmp_path) == before, "something was written"
    return e.value


def test_bad_inputs(sorted_files, tmp_path):
    by, runs, paths = sorted_files
    unsorted = tmp_path / "unsorted.parquet"
    t = runs[0]
    write(unsorted, t.take(np.r_[0:1500, 1600, 1500:1600, 1601:3000]), row_group_size=700)
    other = tmp_path / "other.parquet"
    write(other, runs[1].drop_columns(["f"]))
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 not a parquet file at all PAR1")
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    existing = tmp_path / "existing.parquet"
    existing.write_bytes(b"keep me")
    out = tmp_path / "out.parquet"
    before = files_in(tmp_path)
    m = lambda inputs, **kw: (lambda: corank.merge_files(inputs, kw.pop("output", out), **{"by": by, **kw}))  # noqa: E731

    e = expect_nothing_written(tmp_path, before, m([paths[0], str(unsorted)]), corank.NotSortedError, path="unsorted.parquet", row_group=2)
    assert e.row == 101 and "not sorted: row group 2, row 101" in str(e)
    expect_nothing_written(tmp_path, before, m([paths[0], str(other)]), corank.SchemaError, path="other.parquet")
    expect_nothing_written(tmp_path, before, m([paths[0], str(tmp_path / "missing.parquet")]), corank.FileError, path="missing.parquet")
    expect_nothing_written(tmp_path, before, m([str(empty_dir)]), corank.FileError, path="nothing")
    expect_nothing_written(tmp_path, before, m([paths[0], str(corrupt)]), corank.FileError, path="corrupt.parquet")
    expect_nothing_written(tmp_path, before, m(paths, output=existing), corank.OutputExistsError, setting="overwrite")
    assert existing.read_bytes() == b"keep me"
    expect_nothing_written(tmp_path, before, m(paths, compression="zip"), corank.InvalidOptionError, setting="compression")
    expect_nothing_written(tmp_path, before, m(paths, by="k UPWARDS"), corank.InvalidOptionError, setting="by")
    expect_nothing_written(tmp_path, before, m(paths, by="nope"), corank.InvalidOptionError)
    expect_nothing_written(tmp_path, before, m(paths, by=None), corank.InvalidOptionError, setting="by")  # no sorting_columns
    expect_nothing_written(tmp_path, before, m(paths, memory_limit="1KiB"), corank.InvalidOptionError, setting="memory_limit")
    expect_nothing_written(tmp_path, before, m(paths, memory_limit="two gigs"), corank.InvalidOptionError, setting="memory_limit")
    expect_nothing_written(tmp_path, before, m(paths, passthrough="sometimes"), corank.InvalidOptionError)
    expect_nothing_written(tmp_path, before, m(paths + [str(existing)], output=existing, overwrite=True), corank.Error)
    expect_nothing_written(tmp_path, before, m([paths[0], paths[0]], output=paths[0], overwrite=True), corank.InvalidOptionError)
    if not _gpu_usable():
        expect_nothing_written(tmp_path, before, m(paths, engine="gpu"), corank.GpuUnavailableError)
    s = lambda inputs, **kw: (lambda: corank.sort_files(inputs, out, **{"by": by, **kw}))  # noqa: E731
    expect_nothing_written(tmp_path, before, s([paths[0], str(other)]), corank.SchemaError, path="other.parquet")
    expect_nothing_written(tmp_path, before, s(paths, strategy="quick"), corank.InvalidOptionError)
    expect_nothing_written(tmp_path, before, s(paths, spill_compression="zip"), corank.InvalidOptionError, setting="spill_compression")
    expect_nothing_written(tmp_path, before, s(paths, temp_dir=tmp_path / "no-such-dir"), corank.FileError)
    expect_nothing_written(tmp_path, before, s(paths, strategy="columns", memory_limit="64KiB"), corank.InvalidOptionError, setting="memory_limit")
    expect_nothing_written(tmp_path, before, s([str(corrupt)]), corank.FileError)


def _gpu_usable() -> bool:
    try:
        corank.merge([pa.table({"k": [1]})], by="k", engine="gpu")
        return True
    except corank.GpuUnavailableError:
        return False


def test_the_memory_limit_defaults_to_half_the_memory_available(tmp_path):
    """No ``memory_limit``: half the memory available to the process, as the command line
    (the library's ``default_memory_limit``; docs/memory.md)."""
    a = pa.table({"k": [1, 3, 5]})
    b = pa.table({"k": [2, 4, 6]})
    paths = []
    for name, t in (("a", a), ("b", b)):
        p = tmp_path / f"{name}.parquet"
        pq.write_table(t, p)
        paths.append(p)
    summary = corank.merge_files(paths, tmp_path / "out.parquet", by="k")
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < summary["memory_limit"] <= pages // 2
    given = corank.merge_files(paths, tmp_path / "out2.parquet", by="k", memory_limit="64MiB")
    assert given["memory_limit"] == 64 << 20


def test_split_outputs(sorted_files, tmp_path):
    by, runs, paths = sorted_files
    want = oracle_sort(pa.concat_tables(runs), by)
    for fn in (corank.merge_files, corank.sort_files):
        out = tmp_path / f"parts-{fn.__name__}"
        s = fn(paths, out, by=by, max_file_rows=2000, row_group_rows=500)
        files = s["output_files"]
        assert len(files) >= 4 and [f["path"] for f in files] == [str(out / f"part-{i:05d}.parquet") for i in range(len(files))]
        assert files_in(out) == [f"part-{i:05d}.parquet" for i in range(len(files))]
        parts = [pq.read_table(f["path"]) for f in files]
        assert [p.num_rows for p in parts] == [f["rows"] for f in files] and all(p.num_rows <= 2000 for p in parts)
        assert_same_rows(pa.concat_tables(parts), want)
        # Cut where the key changes: a file's last key differs from the next file's first.
        for f, g in zip(files, files[1:]):
            assert f["last_key"] != g["first_key"]
        with pytest.raises(corank.OutputExistsError):
            fn(paths, out, by=by, max_file_rows=2000)
    with pytest.raises(corank.InvalidOptionError):
        corank.merge_files(paths, tmp_path / "zero", by=by, max_file_rows=0)
    assert corank.merge_files(paths, tmp_path / "one.parquet", by=by)["output_files"] == []


def test_hive_partitions(tmp_path, rng):
    by = "k"
    for day, n in [("2026-12-01", 400), ("2026-12-02", 300)]:
        d = tmp_path / "t" / f"date={day}"
        d.mkdir(parents=True)
        t = pa.table({"k": np.sort(rng.integers(0, 50, n)), "v": rng.integers(0, 9, n)})
        write(d / "part-0.parquet", t)
    s = corank.merge_files(tmp_path / "t", tmp_path / "out.parquet", by="date, k")
    assert s["hive_partitions"] == ["date"] and s["rows"] == 700
    got = pq.read_table(tmp_path / "out.parquet")
    assert got.schema.field("date").type == pa.date32() and got.column("date").to_pylist()[0].isoformat() == "2026-12-01"
    s = corank.sort_files(tmp_path / "t", tmp_path / "plain.parquet", by=by, hive_partitioning=False)
    assert s["hive_partitions"] == [] and "date" not in pq.read_table(tmp_path / "plain.parquet").column_names
    with pytest.raises(corank.InvalidOptionError):
        corank.merge_files(tmp_path / "t", tmp_path / "x.parquet", by=by, hive_partitioning="sometimes")
    # Types by hand, as DuckDB's hive_types.
    s = corank.merge_files(tmp_path / "t", tmp_path / "typed.parquet", by="date, k", hive_types={"date": "VARCHAR"}, overwrite=True)
    assert pq.read_table(tmp_path / "typed.parquet").schema.field("date").type == pa.string()
    with pytest.raises(corank.InvalidOptionError, match="hive partition date=2026-12-01 is not a Int32"):
        corank.sort_files(tmp_path / "t", tmp_path / "y.parquet", by=by, hive_types={"date": "INTEGER"})
    with pytest.raises(corank.InvalidOptionError, match="hive_types"):
        corank.sort_files(tmp_path / "t", tmp_path / "y.parquet", by=by, hive_types=["date"])
    assert not (tmp_path / "y.parquet").exists()

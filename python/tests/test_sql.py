"""SQL ``ORDER BY`` in a datafusion-python 55 session through corank's FFI capsules
(``corank.datafusion``): the plans show corank's nodes where they may run, and every answer
equals stock datafusion-python's (the same query in a session without corank)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import corank
import corank.datafusion as cdf

datafusion = pytest.importorskip("datafusion")

ROWS = 6000


def _sorted_files(directory, files=4, rows=ROWS, seed=7):
    """``files`` Parquet files, each sorted by ``k`` (ties across files), ``v`` random with
    nulls, ``id`` unique; small row groups."""
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(files):
        k = np.sort(rng.integers(0, rows // 5, rows))
        v = pa.array(rng.integers(0, 1000, rows), mask=rng.random(rows) < 0.1)
        table = pa.table({"k": k, "v": v, "id": np.arange(f * rows, (f + 1) * rows), "s": [f"s{x % 97}" for x in k]})
        path = directory / f"part-{f}.parquet"
        pq.write_table(table, path, row_group_size=1000)
        paths.append(path)
    return paths


def _config():
    # One file per partition, so the scan's partitions are the sorted files.
    return datafusion.SessionConfig().with_target_partitions(4).set("datafusion.optimizer.repartition_file_scans", "false")


def _contexts(directory, **settings):
    ours = cdf.session_context(_config(), **settings)
    stock = datafusion.SessionContext(_config())
    for ctx in (ours, stock):
        ctx.register_parquet("t", str(directory), file_sort_order=[[datafusion.col("k").sort()]])
    return ours, stock


def _nodes(plan):
    """A physical plan's node names, top down (``FFI_ExecutionPlan: X`` counts as X)."""
    names = []
    for line in plan.splitlines():
        line = line.strip().removeprefix("FFI_ExecutionPlan: ")
        if line:
            names.append(line.split(":")[0].split(",")[0].strip())
    return names


def _physical(ctx, sql):
    table = ctx.sql("EXPLAIN " + sql).to_arrow_table()
    rows = dict(zip(table.column("plan_type").to_pylist(), table.column("plan").to_pylist()))
    return rows["physical_plan"]


def _names(ctx, sql):
    return _nodes(_physical(ctx, sql))


def _plain(table):
    """``table`` with view types as plain strings (pyarrow's take and sort lack them)."""
    fields = [pa.field(f.name, pa.large_string()) if pa.types.is_string_view(f.type) else f for f in table.schema]
    return table.cast(pa.schema(fields))


def _check_same(ours, stock, sql, key):
    got = _plain(ours.sql(sql).to_arrow_table())
    want = _plain(stock.sql(sql).to_arrow_table())
    assert got.column(key).to_pylist() == want.column(key).to_pylist(), sql
    if "LIMIT" not in sql:
        if "id" in got.column_names:  # unique: the same rows
            assert got.sort_by("id").equals(want.sort_by("id")), sql
    return got


def test_merge_goes_under_the_hosts_merge(tmp_path):
    _sorted_files(tmp_path)
    ours, stock = _contexts(tmp_path)
    sql = "SELECT * FROM t ORDER BY k"
    assert _names(ours, sql)[:3] == ["SortPreservingMergeExec", "CoRankMergeExec", "DataSourceExec"], _physical(ours, sql)
    assert "CoRank" not in _physical(stock, sql)
    got = _check_same(ours, stock, sql, "k")
    assert got.num_rows == 4 * ROWS
    # corank's merge is stable: ties keep file order, then row order (ids increase).
    ids = got.column("id").to_numpy()
    ks = got.column("k").to_numpy()
    tie = ks[1:] == ks[:-1]
    assert (ids[1:][tie] > ids[:-1][tie]).all()


@pytest.mark.parametrize("limit", [1, 7, 5000, 10 * ROWS])
def test_limit_stays_with_the_hosts_merge(tmp_path, limit):
    _sorted_files(tmp_path)
    ours, stock = _contexts(tmp_path)
    sql = f"SELECT k, id FROM t ORDER BY k LIMIT {limit}"
    plan = _physical(ours, sql)
    assert plan.startswith(f"SortPreservingMergeExec: [k@0 ASC NULLS LAST], fetch={limit}"), plan
    got = _check_same(ours, stock, sql, "k")
    assert got.num_rows == min(limit, 4 * ROWS)


def test_sort_of_an_unsorted_column(tmp_path):
    _sorted_files(tmp_path)
    ours, stock = _contexts(tmp_path)
    for sql in ["SELECT * FROM t ORDER BY v DESC NULLS LAST, id", "SELECT * FROM t ORDER BY s, id DESC", "SELECT * FROM t ORDER BY k DESC, id"]:
        assert "CoRankSortExec" in _names(ours, sql), _physical(ours, sql)
        _check_same(ours, stock, sql, "id")


def test_topk_stays_with_datafusion(tmp_path):
    _sorted_files(tmp_path)
    ours, stock = _contexts(tmp_path)
    sql = "SELECT * FROM t ORDER BY v, id LIMIT 5"
    plan = _physical(ours, sql)
    assert "SortExec: TopK(fetch=5)" in plan and "CoRankSortExec" not in plan, plan
    got = _check_same(ours, stock, sql, "id")
    assert got.num_rows == 5


def test_settings_reach_the_rule(tmp_path):
    _sorted_files(tmp_path)
    ours, _ = _contexts(tmp_path)
    sql = "SELECT * FROM t ORDER BY v, id"
    assert "CoRankSortExec" in _physical(ours, sql)
    ours.sql("SET corank.sort = false").collect()
    assert "CoRankSortExec" not in _physical(ours, sql)
    ours.sql("SET corank.enabled = false").collect()
    assert "CoRank" not in _physical(ours, "SELECT * FROM t ORDER BY k")
    ours.sql("SET corank.enabled = true").collect()
    # A bad value is refused where the rule next reads the settings.
    with pytest.raises(Exception, match="corank.window_rows must be at least 1"):
        ours.sql("SET corank.window_rows = 0").collect()
        ours.sql("SELECT * FROM t ORDER BY k").collect()
    off, _ = _contexts(tmp_path, enabled=False)
    assert "CoRank" not in _physical(off, "SELECT * FROM t ORDER BY k")


def metrics(ctx, sql, node):
    """``node``'s metrics in ``EXPLAIN ANALYZE sql`` (they cross the FFI), by name."""
    plan = ctx.sql("EXPLAIN ANALYZE " + sql).to_arrow_table().column("plan")[0].as_py()
    line = next(line for line in plan.splitlines() if f": {node}," in line)
    found = {}
    for item in line.split("metrics=[", 1)[1].rstrip("]").split(", "):
        name, _, value = item.partition("=")
        found[name] = value
    return found


def test_engine_setting_reaches_the_nodes(tmp_path):
    _sorted_files(tmp_path)
    ours, _ = _contexts(tmp_path, engine="cpu")
    m = metrics(ours, "SELECT * FROM t ORDER BY k", "CoRankMergeExec")
    assert int(m["rounds_cpu"]) > 0 and m["rounds_gpu"] == "0", m
    assert m["output_rows"] == "24.00 K", m


def test_bad_settings_raise_at_once():
    with pytest.raises(corank.InvalidOptionError, match="unknown engine 'fastest'"):
        cdf.session_context(engine="fastest")
    with pytest.raises(corank.InvalidOptionError, match="unknown setting corank.speed"):
        cdf.session_context(speed=3)
    assert cdf.Settings({"engine": "cpu", "window_rows": "1024"}).entries()["corank.engine"] == "cpu"


def _overlapping_row_groups(directory, files=3, groups=4, rows=700, seed=3):
    """Files whose row groups are each sorted by ``(k DESC, j)`` but overlap, within and
    across files; ``sorting_columns`` written on every row group."""
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(files):
        path = directory / f"rg-{f}.parquet"
        schema = pa.schema([("k", pa.int32()), ("j", pa.string()), ("id", pa.int64())])
        sorting = [pq.SortingColumn(0, descending=True, nulls_first=True), pq.SortingColumn(1)]
        with pq.ParquetWriter(path, schema, sorting_columns=sorting) as writer:
            for g in range(groups):
                k = rng.integers(0, 50, rows).astype(np.int32)
                j = np.array([f"j{x}" for x in rng.integers(0, 9, rows)])
                order = np.lexsort((j, -k))
                base = (f * groups + g) * rows
                writer.write_table(pa.table({"k": k[order], "j": j[order], "id": np.arange(base, base + rows)}, schema=schema), row_group_size=rows)
        paths.append(path)
    return paths


def test_sorted_row_groups_table(tmp_path):
    paths = _overlapping_row_groups(tmp_path)
    table = cdf.SortedRowGroupsTable(paths)
    assert table.order == "k DESC NULLS FIRST, j ASC NULLS LAST" and table.num_row_groups == 12
    ctx = cdf.session_context(_config())
    ctx.register_table("r", table)
    sql = "SELECT * FROM r ORDER BY k DESC, j"
    assert _names(ctx, sql)[:2] == ["SortPreservingMergeExec", "CoRankMergeExec"], _physical(ctx, sql)
    got = _plain(ctx.sql(sql).to_arrow_table())
    # The oracle: the stable sort of the row groups in file order (pyarrow's sort is stable).
    allrows = _plain(pa.concat_tables([pq.read_table(p) for p in paths]))
    want = allrows.take(pc.sort_indices(allrows, [("k", "descending"), ("j", "ascending")]))
    assert got.equals(want)
    # With a LIMIT, and a declared order given as a list.
    declared = cdf.SortedRowGroupsTable(str(tmp_path), by=["k DESC", "j"])
    ctx.register_table("d", declared)
    # DataFusion's TopK below the merge keeps ties in no set order: the keys must agree.
    got = _plain(ctx.sql("SELECT * FROM d ORDER BY k DESC, j LIMIT 10").to_arrow_table())
    assert got.select(["k", "j"]).equals(want.slice(0, 10).select(["k", "j"]))


def test_sorted_row_groups_table_errors(tmp_path):
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"k": [3, 1, 2]}), plain)
    with pytest.raises(corank.InvalidOptionError, match="no sorting_columns"):
        cdf.SortedRowGroupsTable(plain)
    with pytest.raises(corank.ColumnNotFoundError):
        cdf.SortedRowGroupsTable(plain, by="nope")
    with pytest.raises(corank.FileError):
        cdf.SortedRowGroupsTable(tmp_path / "missing.parquet", by="k")
    with pytest.raises(corank.InvalidOptionError, match="local files only"):
        cdf.SortedRowGroupsTable("s3://bucket/x.parquet", by="k")

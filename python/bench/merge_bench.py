"""The in-memory merge from Python against what a Python user would pick instead.

    python3 python/bench/merge_bench.py [--rows 16M,100M] [--runs 16] [--only NAMES] [--reps 3]

For each size: RUNS sorted pyarrow tables, lineitem-like (key ``l_orderkey`` with about
four rows a key, and ``l_partkey``, ``l_quantity``, ``l_shipdate``, ``l_comment``), merged
by the key:

- ``corank-gpu``, ``corank-cpu``: ``corank.merge(runs, by="l_orderkey", engine=...)``;
- ``pyarrow``: ``pa.concat_tables(runs).sort_by("l_orderkey")`` (a stable sort);
- ``polars-sort``: ``pl.concat(frames).sort("l_orderkey", maintain_order=True)``;
- ``polars-merge_sorted``: ``merge_sorted`` folded over the runs;
- ``duckdb``: ``ORDER BY l_orderkey`` over the Arrow tables, ``.arrow()`` out;
- ``floor-copy``: no merge, the runs copied into one contiguous table (Polars'
  ``pl.concat(frames, rechunk=True)``, pyarrow's ``concat_tables(runs).combine_chunks()``
  without Polars): every value written once, as any merge that returns a table must; not a
  contender, the last column says how far each is from it.

A time counts only once the output is checked: equal to pyarrow's stable sort (corank,
Polars); DuckDB's ORDER BY is not stable, so its keys must be in order and its rows the
same multiset (by the unique ``id`` column), and the floor's rows the same multiset. Medians of ``--reps`` after one warm-up; the
"fastest other / this" column is the fastest other contender's time over each corank
engine's; "this / floor" each time over the floor's.

Then the GPU's second small merge in one process: 100k rows merged on the GPU engine after
a first GPU merge has started the device, against the same merge on the CPU engine (the
target is at most 5 ms more). Contenders whose package is missing are left out (named).
"""

import argparse
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KEY = "l_orderkey"


def parse_count(text):
    units = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
    t = text.strip().lower()
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def lineitem_runs(rows, runs, seed=7):
    """RUNS sorted tables of ROWS rows in all; keys drawn so about four rows share a key."""
    rng = np.random.default_rng(seed)
    per = rows // runs
    words = np.array(["carefully", "final", "deposits", "sleep", "quickly", "regular", "pending", "ironic"])
    tables = []
    for r in range(runs):
        n = per + (1 if r < rows % runs else 0)
        key = np.sort(rng.integers(0, max(rows // 4, 1), n, dtype=np.int64))
        comment = pc.binary_join_element_wise(
            pa.array(words[rng.integers(0, len(words), n)]),
            pa.array(words[rng.integers(0, len(words), n)]),
            " ",
        )
        tables.append(pa.table({
            KEY: key,
            "id": np.arange(n, dtype=np.int64) + r * (per + 1),
            "l_partkey": rng.integers(0, 2_000_000, n, dtype=np.int64),
            "l_quantity": rng.integers(1, 51, n).astype(np.float64),
            "l_shipdate": pa.array(rng.integers(8000, 10500, n, dtype=np.int32), pa.date32()),
            "l_comment": comment,
        }))
    return tables


def contenders(only):
    """(name, prepare(runs) -> state, run(state) -> pyarrow-convertible, kind) for each
    contender whose package is here; the missing ones named on stderr."""
    out = []
    try:
        import corank

        for engine in ("gpu", "cpu"):
            out.append((f"corank-{engine}", lambda runs: runs,
                        (lambda e: lambda runs: corank.merge(runs, by=KEY, engine=e))(engine), "stable"))
    except ImportError as e:
        print(f"corank missing: {e}", file=sys.stderr)
    out.append(("pyarrow", lambda runs: runs, lambda runs: pa.concat_tables(runs).sort_by(KEY), "stable"))
    try:
        import polars as pl

        out.append(("polars-sort", lambda runs: [pl.from_arrow(t) for t in runs],
                    lambda frames: pl.concat(frames).sort(KEY, maintain_order=True), "stable"))

        def fold(frames):
            merged = frames[0]
            for f in frames[1:]:
                merged = merged.merge_sorted(f, KEY)
            return merged

        out.append(("polars-merge_sorted", lambda runs: [pl.from_arrow(t) for t in runs], fold, "stable"))
        out.append(("floor-copy", lambda runs: [pl.from_arrow(t) for t in runs],
                    lambda frames: pl.concat(frames, rechunk=True), "copy"))
    except ImportError as e:
        print(f"polars missing: {e}", file=sys.stderr)
        out.append(("floor-copy", lambda runs: runs, lambda runs: pa.concat_tables(runs).combine_chunks(), "copy"))
    try:
        import duckdb

        def duck_prepare(runs):
            con = duckdb.connect()
            for i, t in enumerate(runs):
                con.register(f"t{i}", t)
            union = " UNION ALL ".join(f"SELECT * FROM t{i}" for i in range(len(runs)))
            return con, f"SELECT * FROM ({union}) ORDER BY {KEY}"

        # `.arrow()` may hand back a lazy reader: the time counts the table materialized.
        out.append(("duckdb", duck_prepare, lambda s: as_table(s[0].sql(s[1]).arrow()), "unstable"))
    except ImportError as e:
        print(f"duckdb missing: {e}", file=sys.stderr)
    if only:
        out = [c for c in out if c[0] in only]
    return out


def as_table(result):
    if isinstance(result, pa.Table):
        return result
    if hasattr(result, "to_arrow"):
        return result.to_arrow()
    if hasattr(result, "read_all"):
        return result.read_all()
    return pa.table(result)


def check(name, kind, got, want):
    got = as_table(got).select(want.column_names)
    if kind == "copy":
        if len(got) != len(want):
            raise AssertionError(f"{name}: {len(got)} rows, not {len(want)}")
    elif kind == "stable":
        if not got.cast(want.schema).equals(want):
            raise AssertionError(f"{name}: output differs from the stable sort")
        return
    else:
        keys = got.column(KEY)
        if len(keys) != len(want) or not pc.all(pc.greater_equal(keys[1:], keys[:-1])).as_py():
            raise AssertionError(f"{name}: keys not in order")

    def ids(t):
        a = t.column("id")
        return pc.take(a, pc.sort_indices(a))

    if not ids(got).equals(ids(want)):
        raise AssertionError(f"{name}: rows differ")


def time_it(fn, state, reps):
    fn(state)  # warm-up (the GPU's start, caches)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn(state)
        times.append(time.perf_counter() - t)
        del out
    return statistics.median(times)


def second_small_merge():
    import corank

    runs = lineitem_runs(100_000, 16, seed=11)
    corank.merge(runs, by=KEY, engine="gpu")  # the device's start
    gpu = time_it(lambda r: corank.merge(r, by=KEY, engine="gpu"), runs, 10)
    cpu = time_it(lambda r: corank.merge(r, by=KEY, engine="cpu"), runs, 10)
    return gpu, cpu


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="16M,100M")
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--only", default="")
    p.add_argument("--no-small", action="store_true", help="skip the second small GPU merge")
    args = p.parse_args()
    only = {o for o in args.only.split(",") if o}
    rows_list = [parse_count(r) for r in args.rows.split(",")]
    print("| rows | contender | median s | Mrows/s | fastest other / this | this / floor |")
    print("|---:|---|---:|---:|---:|---:|")
    for rows in rows_list:
        runs = lineitem_runs(rows, args.runs)
        want = pa.concat_tables(runs).sort_by(KEY)
        results = {}
        for name, prepare, run, kind in contenders(only):
            state = prepare(runs)
            try:
                check(name, kind, run(state), want)
            except Exception as e:  # a contender that fails (e.g. no GPU) is named, not timed
                print(f"{name}: not timed: {e}", file=sys.stderr)
                continue
            results[name] = time_it(run, state, args.reps)
            del state
        others = [t for n, t in results.items() if not n.startswith(("corank", "floor"))]
        best_other = min(others) if others else None
        floor = results.get("floor-copy")
        for name, t in results.items():
            ratio = f"{best_other / t:.2f}x" if best_other and name.startswith("corank") else ""
            to_floor = f"{t / floor:.2f}x" if floor and name != "floor-copy" else ""
            print(f"| {rows:,} | {name} | {t:.3f} | {rows / t / 1e6:.1f} | {ratio} | {to_floor} |", flush=True)
        del runs, want
    if not args.no_small and (not only or "corank-gpu" in only):
        try:
            gpu, cpu = second_small_merge()
            print(f"\nsecond small merge (100,000 rows, 16 runs): GPU engine {gpu * 1e3:.2f} ms, "
                  f"CPU engine {cpu * 1e3:.2f} ms, GPU - CPU = {(gpu - cpu) * 1e3:+.2f} ms (target <= +5 ms)")
        except Exception as e:
            print(f"second small merge: not measured: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()

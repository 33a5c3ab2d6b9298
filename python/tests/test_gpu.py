"""NVRTC from the nvidia-cuda-nvrtc wheel without LD_LIBRARY_PATH, and the GPU engine where
there is a GPU (skipped without one; ``CORANK_REQUIRE_GPU=1`` makes a missing GPU a
failure, as in the Rust suites)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

import corank
from conftest import assert_same_rows, oracle_sort, sorted_runs

REQUIRE_GPU = os.environ.get("CORANK_REQUIRE_GPU") == "1"


def _nvrtc_package() -> bool:
    spec = importlib.util.find_spec("nvidia")
    return bool(spec and any(os.path.exists(os.path.join(p, "cu13", "lib", "libnvrtc.so.13")) for p in spec.submodule_search_locations))


@pytest.mark.skipif(not _nvrtc_package(), reason="nvidia-cuda-nvrtc is not installed")
def test_nvrtc_found_without_ld_library_path():
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = "import corank; print(corank.nvrtc_version(), corank._nvrtc_path)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    version, path = r.stdout.split(") ")
    assert version.startswith("(13, "), r.stdout
    assert path.strip().endswith("nvidia/cu13/lib/libnvrtc.so.13")


def _gpu() -> bool:
    try:
        corank.merge([pa.table({"k": [1]})], by="k", engine="gpu")
        return True
    except corank.GpuUnavailableError as e:
        if REQUIRE_GPU:
            raise AssertionError(f"CORANK_REQUIRE_GPU=1 but no usable GPU: {e}")
        return False


def test_gpu_engine_matches_the_oracle(rng):
    if not _gpu():
        pytest.skip("no usable GPU")
    by = "k DESC, s NULLS FIRST"
    runs = sorted_runs({"k": "int64", "s": "string", "f": "float64"}, by, [200_000, 150_000, 0, 90_000], rng)
    want = oracle_sort(pa.concat_tables(runs), by)
    for kernel in ("auto", "basic", "tiled", "circular", "kway"):
        assert_same_rows(corank.merge(runs, by=by, engine="gpu", kernel=kernel, on_gpu_failure="error"), want)
    t = pa.concat_tables(runs)
    assert_same_rows(corank.sort(t, by=by, engine="gpu", on_gpu_failure="error"), want)


def test_second_small_gpu_merge_is_cheap():
    if not _gpu():
        pytest.skip("no usable GPU")
    runs = [pa.table({"k": np.arange(i, 20_000, 4)}) for i in range(4)]
    corank.merge(runs, by="k", engine="gpu")  # the device is up (the check above started it)
    timings = {}
    for engine in ("cpu", "gpu"):
        start = time.perf_counter()
        for _ in range(5):
            corank.merge(runs, by="k", engine=engine)
        timings[engine] = (time.perf_counter() - start) / 5
    print(f"small merge: cpu {1000 * timings['cpu']:.2f} ms, gpu {1000 * timings['gpu']:.2f} ms")
    assert timings["gpu"] < 0.05, timings  # milliseconds, not the driver's start


def test_sql_on_the_gpu(tmp_path):
    """datafusion-python with ``corank.engine = 'gpu'``: the merge's rounds and the sort run
    on the device, the answers equal stock datafusion-python's."""
    pytest.importorskip("datafusion")
    if not _gpu():
        pytest.skip("no usable GPU")
    import test_sql

    test_sql._sorted_files(tmp_path, rows=250_000)
    ours, stock = test_sql._contexts(tmp_path, engine="gpu")
    merge = test_sql.metrics(ours, "SELECT * FROM t ORDER BY k", "CoRankMergeExec")
    # The node's first round (about one batch) merges on the CPU for its latency
    # (docs/datafusion.md); every later one on the device.
    assert int(merge["rounds_gpu"]) > 0 and merge["rounds_cpu"] in ("0", "1"), merge
    sort = test_sql.metrics(ours, "SELECT * FROM t ORDER BY v, id", "CoRankSortExec")
    assert int(sort["runs_gpu"]) > 0 and sort["runs_gpu"] == sort["runs"], sort
    for sql, key in [("SELECT * FROM t ORDER BY k", "k"), ("SELECT * FROM t ORDER BY v DESC, id", "id"), ("SELECT * FROM t ORDER BY k LIMIT 9", "k")]:
        test_sql._check_same(ours, stock, sql, key)

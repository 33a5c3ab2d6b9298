"""The ``corank`` command the wheel installs (a console script into the Rust CLI)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corank


def corank_command() -> list:
    """The installed script beside this Python, else the module (a source checkout)."""
    script = os.path.join(os.path.dirname(sys.executable), "corank")
    if os.path.exists(script):
        return [script]
    found = shutil.which("corank")
    return [found] if found else [sys.executable, "-m", "corank._cli"]


def run(*args, **kw):
    return subprocess.run(corank_command() + list(args), capture_output=True, text=True, timeout=120, **kw)


def test_help_and_version():
    r = run("--help")
    assert r.returncode == 0 and "merge" in r.stdout and "sort" in r.stdout
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"corank {corank.__version__}"


def test_demo():
    r = run("demo", "--files", "3", "--rows", "20k")
    assert r.returncode == 0, r.stderr
    assert "merged 60,000 rows" in r.stdout + r.stderr


def test_merge_and_exit_codes(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"k": [1, 3, 5]}), a)
    pq.write_table(pa.table({"k": [2, 4, 6]}), b)
    r = run("merge", str(a), str(b), "-o", str(tmp_path / "out.parquet"), "--by", "k", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["ok"] and summary["rows"] == 6
    assert pq.read_table(tmp_path / "out.parquet")["k"].to_pylist() == [1, 2, 3, 4, 5, 6]
    # The same summary keys as merge_files returns.
    again = corank.merge_files([a, b], tmp_path / "out2.parquet", by="k")
    assert set(again) == set(summary)
    assert run("merge", "--bogus").returncode == 2
    assert run("merge", str(tmp_path / "missing.parquet"), "-o", str(tmp_path / "x.parquet")).returncode == 1
    pq.write_table(pa.table({"k": [3, 1]}), tmp_path / "unsorted.parquet")
    r = run("merge", str(a), str(tmp_path / "unsorted.parquet"), "-o", str(tmp_path / "y.parquet"), "--by", "k")
    assert r.returncode == 3 and "not sorted" in r.stderr

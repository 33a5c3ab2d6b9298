#!/usr/bin/env bash
# `corank bench` (the merge, or with SORT=1 the sort) against DuckDB and the floor on
# datasets of 2, 4 and 16 files: the bench's own table (time, peak RSS, ratios), every
# output checked by the bench.
#
# Pack (here):   ../shared/gpu/pack --bin corank, and DuckDB's wheel under .whl
#                (docs/device/README.md)
# Run (there):   bash docs/device/few3.sh                       (.gpu and .whl carried)
#   FILES=16 SIZES=20M,100M DATASETS=lineitem,time bash docs/device/few3.sh
#   FILES=16 SORT=1 ONLY=corank-cpu,corank-gpu,duckdb bash docs/device/few3.sh
#
# FILES     space-separated file counts, one bench each (default "2 4 16")
# SIZES     --sizes (default 20M); DATASETS --datasets (default lineitem)
# ONLY      --only (default corank-cpu,corank-gpu,duckdb,floor-corank); without duckdb no
#           wheel is needed
# SORT      1: `corank bench --sort` (by l_partkey); BENCH benches of each (default 1)
# EXTRA     more `corank bench` arguments (e.g. "--memory-limit 4GiB")
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb);
# WHEELS    the wheels' folder (default .whl)
# Recorded: docs/log/2026-12-performance-log.md, stop 31 (few files); stop 38 (16 files,
# lineitem and time at 20M and 100M, then the sort, then run by dictbench.sh).
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
ONLY=${ONLY:-corank-cpu,corank-gpu,duckdb,floor-corank}; WHEELS=${WHEELS:-.whl}
if [[ ",$ONLY," == *,duckdb,* ]]; then
  ls "$WHEELS"/duckdb-*.whl >/dev/null 2>&1 || { echo "no DuckDB wheel under $WHEELS (docs/device/README.md)" >&2; exit 2; }
  mkdir -p /tmp/py && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/py "$WHEELS"/*.whl 2>&1 | tail -1
fi
D=${DATA:-/tmp/cb}; mkdir -p "$D"
for b in $(seq "${BENCH:-1}"); do
  for f in ${FILES:-2 4 16}; do
    PYTHONPATH=/tmp/py corank_bench --dir "$D" --files "$f" --sizes "${SIZES:-20M}" --datasets "${DATASETS:-lineitem}" --only "$ONLY" ${SORT:+--sort} ${EXTRA:-} --chart /tmp/c.png 2>&1 | grep "^|"
  done
done

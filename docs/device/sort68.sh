#!/usr/bin/env bash
# Issue 68's `corank sort` tables on the 16-core host: lineitem in 16 files sorted by
# l_partkey, (1) every tool with its defaults at SIZES (corank's default memory is a share
# of the machine's), (2) at equal memory limits (`--equal-memory`: DuckDB's memory_limit =
# corank's --memory-limit) of LIMITS at EQUAL_SIZE. Outputs are checked by the bench before
# a time counts; it prints peak RSS against the limit after every table.
#
# Pack (here):  ../shared/gpu/pack --bench cli --bin corank   (release)
#               and DuckDB 2.0.1 unpacked as .wheels/d.tar.xz (site/, docs/device/README.md)
# Run (there):  bash docs/device/sort68.sh        with carry [".gpu", ".wheels/d.tar.xz"]
# SIZES (default 20M,100M), EQUAL_SIZE (100M), LIMITS ("2GiB 8GiB"), ONLY (corank-cpu,
# corank-gpu,duckdb), DATA (default /tmp/cb: the generated datasets, reused).
# Recorded: stop 76 (2026-12-07, H100 host: SIZES=100M ONLY=corank-cpu,duckdb, then SIZES=20M
# LIMITS=" "), docs/performance.md rows 25 and 31.
set -u
. docs/device/bench_cli.sh
mkdir -p /tmp/s && tar -C /tmp/s -xJf .wheels/d.tar.xz
export PYTHONPATH=/tmp/s/site
nproc; free -g | head -2
D=${DATA:-/tmp/cb}
corank_bench --dir "$D" --files 16 --sort --sizes "${SIZES:-20M,100M}" --datasets lineitem \
  --only "${ONLY:-corank-cpu,corank-gpu,duckdb}" --chart /tmp/c.png 2>&1 | grep -v "^chart:"
for limit in ${LIMITS:-2GiB 8GiB}; do
  corank_bench --dir "$D" --files 16 --sort --sizes "${EQUAL_SIZE:-100M}" --datasets lineitem \
    --only corank-cpu,duckdb --memory-limit "$limit" --equal-memory --chart /tmp/c.png 2>&1 | grep -v "^chart:"
done

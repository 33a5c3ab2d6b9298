#!/usr/bin/env bash
# `corank sort` of 100M lineitem rows (the bench's 16 files, by l_partkey, zstd(3)) one
# column at a time with a memory limit that fits them, on each engine, the outputs' rows
# compared (count, a hash sum over the rows and their positions, and the order, through
# DuckDB) and the engines' outputs byte for byte; then `corank bench --sort` (corank at
# its 2 GiB default, in runs) against DuckDB on the same rows. The dataset is generated
# once per host (several minutes at 100M) and reused from DATA.
#
# Pack (here):   ../shared/gpu/pack --bin corank, and DuckDB's wheel under .whl
#                (docs/device/README.md)
# Run (there):   bash docs/device/sort100.sh                    (.gpu and .whl carried)
#   ENGINES=cpu LIMIT=32GiB bash docs/device/sort100.sh
#
# SIZE      rows (default 100M); LIMIT --memory-limit of the column sorts (default 16GiB)
# ENGINES   (default "cpu gpu"); BENCH 0 skips the bench (default 1)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb);
# WHEELS    the wheels' folder (default .whl)
# Recorded: docs/log/2026-12-performance-log.md, stop 40 ("`corank sort` of 100M rows by
# columns, given the memory") and stop 48 ("Against DuckDB").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-100M}; LIMIT=${LIMIT:-16GiB}; WHEELS=${WHEELS:-.whl}
ls "$WHEELS"/duckdb-*.whl >/dev/null 2>&1 || { echo "no DuckDB wheel under $WHEELS (docs/device/README.md)" >&2; exit 2; }
mkdir -p /tmp/py && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/py "$WHEELS"/*.whl 2>&1 | tail -1
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
rm -f /tmp/s100-*.parquet
"$CORANK" sort "$IN"/*.parquet -o /tmp/plan.parquet --by l_partkey --memory-limit "$LIMIT" --dry-run | grep strategy
for e in ${ENGINES:-cpu gpu}; do
  printf "sort %s columns %s: " "$e" "$LIMIT"
  /usr/bin/time -f "%e s %P cpu %M KB" "$CORANK" sort "$IN"/*.parquet -o /tmp/s100-$e.parquet -f -q -v --by l_partkey --engine "$e" --strategy columns --memory-limit "$LIMIT" --compression 'zstd(3)' 2>&1 | grep -E "^strategy|KB" | tr '\n' ' ' | cut -c1-420; echo
done
[ -f /tmp/s100-gpu.parquet ] && [ -f /tmp/s100-cpu.parquet ] && cmp /tmp/s100-cpu.parquet /tmp/s100-gpu.parquet && echo "cpu and gpu outputs byte-identical"
PYTHONPATH=/tmp/py python3 - <<'PY'
import duckdb, glob
con = duckdb.connect()
q = "SELECT count(*), sum(hash(l_orderkey, l_linenumber, l_partkey, file_row_number) % 1000000007) FROM read_parquet('{}', file_row_number=true)"
files = sorted(glob.glob('/tmp/s100-*.parquet'))
for f in files:
    print(f, con.execute(q.format(f)).fetchall())
if files:
    print("ordered:", con.execute(f"SELECT bool_and(l_partkey >= prev) FROM (SELECT l_partkey, lag(l_partkey, 1, l_partkey) OVER (ORDER BY file_row_number) prev FROM read_parquet('{files[0]}', file_row_number=true))").fetchall())
PY
rm -f /tmp/s100-*.parquet
[ "${BENCH:-1}" = 0 ] || PYTHONPATH=/tmp/py corank_bench --dir "$D" --files 16 --sort --sizes "$SIZE" --datasets lineitem --only corank-cpu,duckdb --chart /tmp/c.png 2>&1 | grep "^|"

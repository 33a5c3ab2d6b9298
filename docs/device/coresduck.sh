#!/usr/bin/env bash
# (1) How the host's CPUs scale: N copies of a CPU-bound Python loop at once, wall each
# (with all CPUs busy each may run slower than alone: shared cores or clocks); (2) with
# DuckDB's wheel, DuckDB's COPY ... ORDER BY l_orderkey of the bench's 16 sorted lineitem
# files (zstd 3) and `corank merge` of the same, each under the thread sampler
# (docs/device/threadsample.py): wall, CPU seconds per thread class, cores busy.
#
# Pack (here):   ../shared/gpu/pack --bin corank, and DuckDB's wheel under .whl
#                (docs/device/README.md)
# Run (there):   bash docs/device/coresduck.sh                  (.gpu and .whl carried)
#   ROUNDS=0 bash docs/device/coresduck.sh                     (the CPUs' scaling alone)
#
# LOOPS     space-separated counts of loops at once (default "1 8 16")
# ROUNDS    DuckDB / corank pairs (default 2); ENGINE corank's --engine (default cpu)
# STEP      the sampler's slice in s (default 1); HEAD lines of each sampler report (default 7)
# SIZE      rows (default 20M)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb);
# WHEELS    the wheels' folder (default .whl)
# Recorded: docs/log/2026-12-performance-log.md, stop 49 ("How the host's CPUs scale",
# "Against DuckDB on the same host").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}; WHEELS=${WHEELS:-.whl}
for n in ${LOOPS:-1 8 16}; do
  s=$(date +%s.%N)
  for i in $(seq "$n"); do python3 -c "sum(i*i for i in range(20_000_000))" & done; wait
  python3 -c "import time; print('$n loops at once: %.2f s' % (time.time() - $s))"
done
[ "${ROUNDS:-2}" = 0 ] && exit 0
ls "$WHEELS"/duckdb-*.whl >/dev/null 2>&1 || { echo "no DuckDB wheel under $WHEELS (docs/device/README.md)" >&2; exit 2; }
mkdir -p /tmp/py && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/py "$WHEELS"/*.whl 2>&1 | tail -1
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
cat > /tmp/duck.py <<'PY'
import sys, duckdb
out, key, files = sys.argv[1], sys.argv[2], sys.argv[3:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY {key}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
PY
here=$(dirname "$0")
for round in $(seq "${ROUNDS:-2}"); do
  echo "DuckDB:"; PYTHONPATH=/tmp/py python3 /tmp/duck.py /tmp/d.parquet l_orderkey "$IN"/*.parquet & P=$!
  python3 "$here/threadsample.py" $P "${STEP:-1}" | head -"${HEAD:-7}"; wait $P
  echo "corank:"; "$CORANK" merge "$IN"/*.parquet -o /tmp/m.parquet -f -q --by l_orderkey --engine "${ENGINE:-cpu}" --compression 'zstd(3)' & P=$!
  python3 "$here/threadsample.py" $P "${STEP:-1}" | head -"${HEAD:-7}"; wait $P
done

#!/usr/bin/env bash
# `corank sort` of the bench's 16 lineitem files (by l_partkey, zstd(3)) in sorted runs
# against one column at a time (`--strategy runs` / `columns`, one build), on each engine,
# alternating ROUNDS times: -v's phase times and peak RSS; the outputs' rows compared in
# order (count and a hash sum over the rows and their positions, through DuckDB) and the
# engines' column outputs byte for byte; then BENCH runs of `corank bench --sort` against
# DuckDB.
#
# Pack (here):   ../shared/gpu/pack --bin corank, and DuckDB's wheel under .whl
#                (docs/device/README.md)
# Run (there):   bash docs/device/sortcols.sh                   (.gpu and .whl carried)
#
# ROUNDS    (default 2); ENGINES (default "cpu gpu"); STRATEGIES (default "runs columns")
# BENCH     `corank bench --sort` runs (default 1); SIZE rows (default 20M)
# EXTRA     more sort arguments (e.g. "--memory-limit 4GiB")
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb);
# WHEELS    the wheels' folder (default .whl)
# Recorded: docs/log/2026-12-performance-log.md, stop 39 ("`corank sort` one column at a
# time") and stop 40.
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}; WHEELS=${WHEELS:-.whl}
ls "$WHEELS"/duckdb-*.whl >/dev/null 2>&1 || { echo "no DuckDB wheel under $WHEELS (docs/device/README.md)" >&2; exit 2; }
mkdir -p /tmp/py && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/py "$WHEELS"/*.whl 2>&1 | tail -1
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
rm -f /tmp/s-*.parquet
"$CORANK" sort "$IN"/*.parquet -o /tmp/plan.parquet --by l_partkey --dry-run ${EXTRA:-} | grep strategy
for round in $(seq "${ROUNDS:-2}"); do
  for e in ${ENGINES:-cpu gpu}; do
    for s in ${STRATEGIES:-runs columns}; do
      printf "sort %s %s: " "$e" "$s"
      /usr/bin/time -f "%e s %P cpu %M KB" "$CORANK" sort "$IN"/*.parquet -o /tmp/s-$e-$s.parquet -f -q -v --by l_partkey --engine "$e" --strategy "$s" --compression 'zstd(3)' ${EXTRA:-} 2>&1 | grep -E "^strategy|KB" | sed 's/chunks up to.*peak memory/peak/; s/ (0 spill runs, 0 intermediate passes, 1 runs in the final merge; 0 cpu + 0 gpu rounds)//' | tr '\n' ' ' | cut -c1-360; echo
    done
  done
done
[ -f /tmp/s-gpu-columns.parquet ] && [ -f /tmp/s-cpu-columns.parquet ] && cmp /tmp/s-cpu-columns.parquet /tmp/s-gpu-columns.parquet && echo "columns: cpu and gpu outputs byte-identical"
ls -l /tmp/s-*.parquet | awk '{print $5, $9}'
PYTHONPATH=/tmp/py python3 - <<'PY'
import duckdb, glob
con = duckdb.connect()
q = "SELECT count(*), sum(hash(l_orderkey, l_linenumber, l_partkey, file_row_number) % 1000000007) FROM read_parquet('{}', file_row_number=true)"
for f in sorted(glob.glob('/tmp/s-*.parquet')):
    print(f, con.execute(q.format(f)).fetchall())
PY
for b in $(seq "${BENCH:-1}"); do
  PYTHONPATH=/tmp/py corank_bench --dir "$D" --files 16 --sort --sizes "$SIZE" --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c.png 2>&1 | grep "^|"
done

#!/usr/bin/env bash
# Where `corank sort --strategy columns` of the bench's 16 lineitem files (by l_partkey,
# zstd(3)) spends its wall time: -vv's timeline (the keys, each column decoded and encoded,
# the row groups appended, fsync) beside the cores busy every 0.1 s (/proc/stat); first the
# file system's write speed (dd, one and four writers). Then, with DuckDB's wheel, BENCH
# runs of `corank bench --sort` against DuckDB and DuckDB's own COPY ... ORDER BY under
# /usr/bin/time (its cores).
#
# Pack (here):   ../shared/gpu/pack --bin corank, and DuckDB's wheel under .whl for the
#                comparison (docs/device/README.md)
# Run (there):   bash docs/device/sortprofile.sh                (.gpu and .whl carried)
#   ROUNDS=0 BENCH=3 bash docs/device/sortprofile.sh           (the comparison alone)
#
# ROUNDS    profiled sorts per engine (default 2); ENGINES (default cpu)
# BENCH     `corank bench --sort` runs (default 1; skipped without the wheel)
# SIZE      rows (default 20M); EXTRA more sort arguments (e.g. "--memory-limit 4GiB")
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb);
# WHEELS    the wheels' folder (default .whl)
# Recorded: docs/log/2026-12-performance-log.md, stop 48 ("Where the time went", "Against
# DuckDB").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}; WHEELS=${WHEELS:-.whl}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
du -sh "$IN"; nproc; df -h /tmp | tail -1
for bs in 1M 8M; do echo "dd bs=$bs 480 MiB: $(dd if=/dev/zero of=/tmp/ddtest bs=$bs count=$((480 >> $([ $bs = 8M ] && echo 3 || echo 0))) 2>&1 | tail -1)"; rm -f /tmp/ddtest; done
t0=$(date +%s.%N); for i in 0 1 2 3; do dd if=/dev/zero of=/tmp/ddtest bs=1M count=120 seek=$((i * 120)) conv=notrunc 2>/dev/null & done; wait
echo "dd 4 x 120 MiB into one file at once: $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"; rm -f /tmp/ddtest
sample() { while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.1; done; }
for round in $(seq "${ROUNDS:-2}"); do
  for e in ${ENGINES:-cpu}; do
    sample > /tmp/stat.log & SP=$!
    start=$(date +%s.%N)
    /usr/bin/time -f "%e s wall %U user %S sys %M KB" "$CORANK" sort "$IN"/*.parquet -o /tmp/s-$e.parquet -f -q -vv --by l_partkey --engine "$e" --strategy columns --compression 'zstd(3)' ${EXTRA:-} 2>&1 | grep -E "sort by columns|l_comment|l_shipmode|synced|wall|strategy" | sed -E 's/^\[[0-9-]+T([0-9:.]+)Z [A-Z]+ +[a-z_:]+\]/\1/' | cut -c1-200
    kill $SP; wait $SP 2>/dev/null
    echo "start $(date -d @$start +%H:%M:%S.%N | cut -c1-12) UTC; cores busy per 0.1 s:"
    awk '{t=$1; b=$3+$4+$5+$8+$9+$10; a=b+$6+$7; if (NR>1 && t>pt) printf "%.1f ", (b-pb)/(a-pa)*'"$(nproc)"'; pt=t; pb=b; pa=a} END {print ""}' /tmp/stat.log
  done
done
ls -l /tmp/s-*.parquet 2>/dev/null | awk '{print $5, $9}'
ls "$WHEELS"/duckdb-*.whl >/dev/null 2>&1 || { echo "no DuckDB wheel under $WHEELS: no comparison"; exit 0; }
mkdir -p /tmp/py && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/py "$WHEELS"/*.whl 2>&1 | tail -1
for b in $(seq "${BENCH:-1}"); do
  PYTHONPATH=/tmp/py corank_bench --dir "$D" --files 16 --sort --sizes "$SIZE" --datasets lineitem --only corank-cpu,duckdb --chart /tmp/c.png 2>&1 | grep "^|"
done
# DuckDB's own cores: the bench's COPY, timed by /usr/bin/time.
cat > /tmp/duck.py <<'PY'
import sys, glob, duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
files = sorted(glob.glob(sys.argv[1] + "/*.parquet"))
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY l_partkey) TO '/tmp/duck.parquet' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
PY
for i in 1 2; do PYTHONPATH=/tmp/py /usr/bin/time -f "duckdb: %e s wall %U user %S sys %M KB" python3 /tmp/duck.py "$IN" 2>&1 | tail -1; done
ls -l /tmp/duck.parquet | awk '{print $5, $9}'

#!/usr/bin/env bash
# Where `corank merge` of the bench's 16 sorted lineitem files (by l_orderkey, zstd(3))
# leaves the host's cores idle: wall, user, sys, peak RSS, -v's summary and the cores busy
# every 0.1 s (from /proc/stat), ROUNDS times.
#
# Pack (here):   ../shared/gpu/pack --bin corank
# Run (there):   bash docs/device/mergeprofile.sh               (.gpu carried)
#
# ROUNDS    (default 2); ENGINE --engine (default cpu); SIZE rows (default 20M)
# EXTRA     more arguments for the merge (e.g. "--memory-limit 4GiB")
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stop 48 ("The merge's cores, for comparison").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
sample() { while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.1; done; }
for round in $(seq "${ROUNDS:-2}"); do
  sample > /tmp/stat.log & SP=$!
  /usr/bin/time -f "%e s wall %U user %S sys %M KB" "$CORANK" merge "$IN"/*.parquet -o /tmp/m.parquet -f -q -v --by l_orderkey --engine "${ENGINE:-cpu}" --compression 'zstd(3)' ${EXTRA:-} 2>&1 | grep -vE "^\s*$" | cut -c1-300
  kill $SP; wait $SP 2>/dev/null
  echo "cores busy per 0.1 s:"
  awk '{t=$1; b=$3+$4+$5+$8+$9+$10; a=b+$6+$7; if (NR>1 && t>pt) printf "%.1f ", (b-pb)/(a-pa)*'"$(nproc)"'; pt=t; pb=b; pa=a} END {print ""}' /tmp/stat.log
done

#!/usr/bin/env bash
# Where `corank merge` of the bench's 16 sorted lineitem files (by l_orderkey, zstd(3))
# spends its threads: each thread class's CPU seconds, cores busy per STEP seconds and what
# it waits in (docs/device/threadsample.py, from /proc), then -vv's round and writer lines;
# ROUNDS times, as is and under each glibc tunable setting of MALLOC.
#
# Pack (here):   ../shared/gpu/pack --bin corank
# Run (there):   bash docs/device/threadprofile.sh              (.gpu carried)
#   MALLOC=glibc.malloc.hugetlb=1 STEP=0.5 bash docs/device/threadprofile.sh
#
# ROUNDS    (default 2); STEP the sampler's slice in s (default 0.25)
# MALLOC    space-separated GLIBC_TUNABLES values run after the plain run (default none)
# ENGINE    --engine (default cpu); SIZE rows (default 20M); EXTRA more merge arguments
# SHOW      the -vv lines printed, a sed range (default 1,99)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stop 49 ("Where the threads are").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
here=$(dirname "$0")
for round in $(seq "${ROUNDS:-2}"); do for T in "" ${MALLOC:-}; do
  echo "GLIBC_TUNABLES=$T"
  GLIBC_TUNABLES=$T "$CORANK" merge "$IN"/*.parquet -o /tmp/m.parquet -f -q -vv --by l_orderkey --engine "${ENGINE:-cpu}" --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log & P=$!
  python3 "$here/threadsample.py" $P "${STEP:-0.25}"
  wait $P; echo "rc=$?"
  grep -E "corank round|waited" /tmp/m.log | sed -E 's/^\[[^]]*\] //; s/ in ([0-9]+) runs//' | cut -c1-200 | sed -n "${SHOW:-1,99}p"
done; done

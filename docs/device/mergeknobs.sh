#!/usr/bin/env bash
# `corank merge` of the bench's 16 sorted lineitem files (by l_orderkey, zstd(3)) under
# settings that need no rebuild: the memory limit (larger windows, row groups and rounds)
# and rayon's thread count, alternating ROUNDS times: wall, user, sys, peak RSS and -v's
# merging summary.
#
# Pack (here):   ../shared/gpu/pack --bin corank
# Run (there):   bash docs/device/mergeknobs.sh                 (.gpu carried)
#   VARIANTS="2GiB 16GiB 2GiB/8" ENGINE=gpu bash docs/device/mergeknobs.sh
#
# VARIANTS  space-separated, each LIMIT[/THREADS]: --memory-limit, and RAYON_NUM_THREADS
#           where given (default "2GiB 4GiB 8GiB 2GiB/24")
# ROUNDS    (default 2); ENGINE --engine (default cpu); SIZE rows (default 20M)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stop 48 ("Two knobs tried without a rebuild").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq "${ROUNDS:-2}"); do
  for v in ${VARIANTS:-2GiB 4GiB 8GiB 2GiB/24}; do
    limit=${v%/*}; threads=; [ "$limit" = "$v" ] || threads=${v#*/}
    ( [ -z "$threads" ] || export RAYON_NUM_THREADS=$threads
      /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt "$CORANK" merge "$IN"/*.parquet -o /tmp/m.parquet -f -q -v --by l_orderkey --engine "${ENGINE:-cpu}" --compression 'zstd(3)' --memory-limit "$limit" > /tmp/log.txt 2>&1 )
    echo "$v: wall user sys KB $(cat /tmp/time.txt); $(grep -o 'merging [0-9.]*m*s ([0-9]* cpu.*' /tmp/log.txt | cut -c1-150)"
  done
done

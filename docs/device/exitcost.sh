#!/usr/bin/env bash
# What a GPU process's end costs: docs/device/exitcost.c (the driver started, device and
# pinned memory held, then released, returned from or _exit'ed) for each MODE and size,
# each process timed whole; then `corank merge` of the bench's 16 lineitem files on each
# engine with RUST_LOG=debug and the process's start and end: where the GPU engine's time
# after the last round goes.
#
# Pack (here):   ../shared/gpu/pack --bin corank      (nvcc and the driver are on the host)
# Run (there):   bash docs/device/exitcost.sh                   (.gpu carried)
#
# MODES     the ends, in order (default "release return _exit release return _exit")
# MIBS      space-separated DEVICE:PINNED MiB held (default "0:0 2048:256")
# ENGINES   the merges, in order (default "cpu gpu cpu gpu cpu gpu"); SIZE rows (default 20M)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stop 32 ("where the GPU engine's process
# ends").
set -u
. docs/device/bench_cli.sh
nvcc -O2 -o /tmp/exitcost "$(dirname "$0")/exitcost.c" -lcuda 2>&1 | tail -3
for m in ${MODES:-release return _exit release return _exit}; do
  for sz in ${MIBS:-0:0 2048:256}; do
    s=$(date +%s%N); /tmp/exitcost "$m" "${sz%%:*}" "${sz#*:}" | tr '\n' ' '; e=$(date +%s%N); echo " [device:pinned MiB $sz] process $(( (e - s) / 1000000 )) ms"
  done
done
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for e in ${ENGINES:-cpu gpu cpu gpu cpu gpu}; do
  s=$(date +%s%N)
  RUST_LOG=debug "$CORANK" merge "$IN"/*.parquet -o /tmp/o.parquet -f -q -v --by l_orderkey --engine "$e" --compression 'zstd(3)' > /tmp/out-$e.txt 2>/tmp/log-$e.txt
  e2=$(date +%s%N)
  echo "== $e: start $(date -d @$((s/1000000000)) +%T).$(printf %03d $(( (s/1000000) % 1000 ))) end $(date -d @$((e2/1000000000)) +%T).$(printf %03d $(( (e2/1000000) % 1000 ))) wall $(( (e2 - s) / 1000000 )) ms"
  grep -v "^\s*$" /tmp/log-$e.txt | sed -E 's/^\[[0-9-]+T//; s/Z / /' | cut -c1-110 | grep -E "merging|round 1 |round 9|round 10|GPU|context|done|exiting|wrote|renam" | tail -8
done

#!/usr/bin/env bash
# Where a `corank merge` of the bench's 16 lineitem files (by l_orderkey, zstd(3)) spends its
# wall time from the process's start to its end, per engine: RUST_LOG=debug's timestamped
# lines (each round, the writer, the GPU's start) beside the start and end taken outside the
# process, and -v's summary.
#
# Pack (here):   ../shared/gpu/pack --bin corank
# Run (there):   bash docs/device/timeline.sh                   (.gpu carried)
#
# ENGINES   the merges, in order (default "cpu gpu cpu gpu"); SIZE rows (default 20M)
# HEAD      log lines printed a run (default 30); RUST_LOG (default debug)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stop 31 ("Where the GPU engine's extra time
# goes at 20M rows").
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
# The kernels compiled into the cache by a small GPU run first, so no timed run compiles them.
corank_bench --dir /tmp/sb --files 4 --sizes 2000 --datasets lineitem --only corank-gpu --chart /tmp/c.png >/dev/null 2>&1
for e in ${ENGINES:-cpu gpu cpu gpu}; do
  s=$(date +%s%N)
  RUST_LOG=${RUST_LOG:-debug} "$CORANK" merge "$IN"/*.parquet -o /tmp/o.parquet -f -q -v --by l_orderkey --engine "$e" --compression 'zstd(3)' > /tmp/out-$e.txt 2>/tmp/log-$e.txt
  e2=$(date +%s%N)
  echo "== $e: start $(date -d @$((s/1000000000)) +%T).$(printf %03d $(( (s/1000000) % 1000 ))) end $(date -d @$((e2/1000000000)) +%T).$(printf %03d $(( (e2/1000000) % 1000 ))) wall $(( (e2 - s) / 1000000 )) ms"
  grep -v "^\s*$" /tmp/log-$e.txt | sed -E 's/^\[[0-9-]+T//; s/Z / /' | cut -c1-150 | head -"${HEAD:-30}"
  tail -3 /tmp/out-$e.txt | cut -c1-250
done

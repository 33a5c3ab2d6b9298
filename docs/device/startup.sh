#!/usr/bin/env bash
# The GPU engine's start against the driver's own: docs/device/startup.c (cuInit, the
# primary context, two pinned buffers, release) for each pinned size of MIBS, each process
# timed whole; then `corank merge` of 2,000 lineitem rows in 4 files on each engine,
# alternating, with RUST_LOG=debug (the GPU run's log printed: where its time goes).
#
# Pack (here):   ../shared/gpu/pack --bin corank      (nvcc and the driver are on the host)
# Run (there):   bash docs/device/startup.sh                    (.gpu carried)
#
# MIBS      pinned MiB a buffer, one process each (default "64 0 1 64": the first pays
#           the first cuInit of the host)
# ENGINES   the merges, in order (default "cpu gpu cpu gpu cpu gpu"; on a fresh host the
#           first GPU merge also compiles the kernels into the cache)
# ROWS      rows of the small merge (default 2000)
# CORANK    the binary (default: the pack's)
# Recorded: docs/log/2026-12-performance-log.md, stop 31 ("GPU start-up: what the driver
# costs by itself") and stop 61 ("The driver's start on the H100 host"); docs/performance.md,
# target 22.
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
nvcc -O2 -o /tmp/startup "$(dirname "$0")/startup.c" -lcuda 2>&1 | tail -3
for mb in ${MIBS:-64 0 1 64}; do s=$(date +%s%N); /tmp/startup "$mb"; e=$(date +%s%N); echo "  process $(( (e - s) / 1000000 )) ms"; done
ROWS=${ROWS:-2000}
corank_bench --dir /tmp/sb --files 4 --sizes "$ROWS" --datasets lineitem --only corank-cpu --chart /tmp/c.png >/dev/null 2>&1
F=$(ls /tmp/sb/lineitem-4x$ROWS/*.parquet)
for e in ${ENGINES:-cpu gpu cpu gpu cpu gpu}; do
  s=$(date +%s%N); RUST_LOG=debug "$CORANK" merge $F -o /tmp/so.parquet -f -q --by l_orderkey --engine "$e" 2>/tmp/log-$e; e2=$(date +%s%N)
  echo "$e: $(( (e2 - s) / 1000000 )) ms; start $(date -d @$((s/1000000000)) +%T).$(printf %03d $(( (s/1000000) % 1000 )))"
done
cat /tmp/log-gpu 2>/dev/null

#!/usr/bin/env bash
# bench-gpu cases in rounds, each a kernel source and a tuning of the policy: every case
# SOURCE:TUNING:SECTIONS runs bench-gpu's sections SECTIONS (CORANK_BENCH_SECTIONS, comma-
# separated) with the kernels compiled from .gpu/src-SOURCE (CORANK_KERNEL_SOURCES; "-":
# the bundle's own kernels) and the policy's overrides TUNING (CORANK_GPU_TUNING, names in
# src/engine/gpu/tuning.rs; "-": the default policy). Cases run in the order given, ROUNDS
# times; each prints the table rows PICK selects. Written for odd items a thread in
# unpadded tiles (stop 54), hence its name; with "-" sources it sweeps tunings of one build.
#
# Pack (here):   ../shared/gpu/pack --bench gpu; for a SOURCE other than "-", a full copy of
#                cuda/ at .gpu/src-SOURCE (as kernel_ab.sh's header says)
# Run (there):   bash docs/device/oddab.sh                      (.gpu carried)
#   CASES="-:-:kway -:ipt_kway=19:kway" bash docs/device/oddab.sh
#   CASES="-:-:sort -:ipt_sort=8:sort -:-:2way -:ipt_tiled=9,tiled_min_blocks=2:2way" ROUNDS=3 bash docs/device/oddab.sh
#
# CASES     space-separated SOURCE:TUNING:SECTIONS (default "-:-:2way -:-:kway -:-:sort")
# ROUNDS    (default 2)
# PICK      an extended regular expression of the table rows printed (default: the 2-way,
#           copy, k = 16 and 64 default, and sort rows)
# Each case's whole output is appended to $OUT/odd-SOURCE-TUNING-SECTIONS.log (characters
# other than letters, digits, '.', '_' and '-' written as '_').
# Recorded: docs/log/2026-12-performance-log.md, stops 54, 55, 56 and 60.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PICK=${PICK:-'^\| 2-way u64|^\| 2-way u32|^\| D2D|^\| k = (16|64): default|^\| k = 16 u32 random: default|^\| k = 16 u64x2 random: default|^\| sort (random|dup)'}
for round in $(seq "${ROUNDS:-2}"); do
  for c in ${CASES:--:-:2way -:-:kway -:-:sort}; do
    src=${c%%:*}; rest=${c#*:}; tun=${rest%%:*}; sec=${rest#*:}
    [ "$tun" = - ] && tun=
    dir=; [ "$src" = - ] || dir=$PWD/.gpu/src-$src
    [ -z "$dir" ] || [ -f "$dir/common.cuh" ] || { echo "no kernel sources at .gpu/src-$src" >&2; exit 2; }
    echo "=== $c (round $round, $(date -u +%T))"
    env ${dir:+CORANK_KERNEL_SOURCES=$dir} CORANK_GPU_TUNING=$tun CORANK_BENCH_SECTIONS=$sec bash .gpu/remote run bench-gpu 2>&1 | grep -v '^gpu:' > "$OUT/odd.log"
    grep -E "$PICK" "$OUT/odd.log"
    cat "$OUT/odd.log" >> "$OUT/$(echo "odd-$src-${tun:-default}-$sec" | tr -c 'A-Za-z0-9._\n-' '_').log"
  done
done

#!/usr/bin/env bash
# Kernel source variants against each other in one call, no Rust build between them:
# bench-gpu's sections SECTIONS compiled from each source directory .gpu/src-NAME given,
# in the order given (repeat names to alternate). bench-gpu checks every output against
# the CPU engine before a time counts.
#
# Pack (here):   ../shared/gpu/pack --bench gpu, and each variant as a full copy of cuda/:
#                mkdir -p .gpu/src-base && cp cuda/* .gpu/src-base
#                mkdir -p .gpu/src-new && cp cuda/* .gpu/src-new && (edit .gpu/src-new/...)
#                (a committed version: git show REV:cuda/FILE > .gpu/src-old/FILE, every file)
# Run (there):   bash docs/device/kernel_ab.sh base new base new        (.gpu carried)
#   SECTIONS=kway,sort CORANK_GPU_TUNING=ipt_kway=19 bash docs/device/kernel_ab.sh base new
#
# NAME...   the variants, each a directory .gpu/src-NAME holding every file of cuda/
# SECTIONS  bench-gpu's CORANK_BENCH_SECTIONS: 2way, kway, host, spm, gather, multi, sort
#           (default 2way,kway)
# CORANK_GPU_TUNING  passed through: the policy's overrides for every variant
#           (names in src/engine/gpu/tuning.rs)
# Each variant's table goes to $OUT/ab-NAME.log (appended: repeats stack up).
# Recorded: docs/log/2026-12-performance-log.md, stops 37, 38, 51, 54 and 61 (each names the
# variants it compared).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ $# -gt 0 ] || { sed -n '2,21p' "$0"; exit 2; }
for v in "$@"; do [ -f ".gpu/src-$v/common.cuh" ] || { echo "no kernel sources at .gpu/src-$v (see the header)" >&2; exit 2; }; done
sec=${SECTIONS:-2way,kway}
for v in "$@"; do
  echo "=== variant $v ($(date -u +%T))"
  CORANK_KERNEL_SOURCES=$PWD/.gpu/src-$v CORANK_BENCH_SECTIONS=$sec bash .gpu/remote run bench-gpu 2>&1 | grep -v '^gpu:' | tee -a "$OUT/ab-$v.log"
done

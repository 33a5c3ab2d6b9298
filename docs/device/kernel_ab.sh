#!/usr/bin/env bash
# A/B of kernel sources in one call, no Rust build between variants: bench-gpu's sections
# $SECTIONS (default 2way,kway) compiled from each source directory given, in order.
# Here: copy each variant of cuda/ to .gpu/src-NAME (e.g. `git show REV:cuda/F`), then pack
# (`../shared/gpu/pack --bench gpu`). There: bash docs/device/kernel_ab.sh base new base new
# Each variant's table goes to $OUT/ab-NAME.log (appended, so repeats stack up).
sec=${SECTIONS:-2way,kway}
for v in "$@"; do
  echo "=== variant $v ($(date -u +%T))"
  CORANK_KERNEL_SOURCES=$PWD/.gpu/src-$v CORANK_BENCH_SECTIONS=$sec bash .gpu/remote run bench-gpu 2>&1 | grep -v '^gpu:' | tee -a "$OUT/ab-$v.log"
done

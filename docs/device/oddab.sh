#!/usr/bin/env bash
# Issue 16, item 2's other half: odd items a thread instead of padded shared tiles. Each
# case is SOURCE:TUNING:SECTION (SOURCE a copy of cuda/ at .gpu/src-SOURCE; TUNING a
# CORANK_GPU_TUNING value, "-" for the default; SECTION a bench-gpu section; SOURCE "-":
# the bundle's own kernels), run in order,
# ROUNDS times (default 2). Here: .gpu/src-head = cuda/ as committed, .gpu/src-odd = the
# same with `padded<PAD>` a no-op for odd PAD (an odd stride is already conflict-free:
# 8-byte keys are read by half-warps, so an odd stride in words of 8 bytes hits 16 distinct
# bank pairs). Bundle: ../shared/gpu/pack --bench gpu (+ the two source copies).
set -u
rows() { grep -E "^\| 2-way u64|^\| 2-way u32|^\| D2D|^\| k = (16|64): default|^\| k = 16 u32 random: default|^\| k = 16 u64x2 random: default|^\| sort (random|dup)" ; }
for round in $(seq "${ROUNDS:-2}"); do
  for c in ${CASES}; do
    src=${c%%:*}; rest=${c#*:}; tun=${rest%%:*}; sec=${rest#*:}
    [ "$tun" = - ] && tun=
    echo "=== $c (round $round, $(date -u +%T))"
    dir=$PWD/.gpu/src-$src
    [ "$src" = - ] && dir=
    env ${dir:+CORANK_KERNEL_SOURCES=$dir} CORANK_GPU_TUNING=$tun CORANK_BENCH_SECTIONS=$sec bash .gpu/remote run bench-gpu 2>&1 | grep -v '^gpu:' > "$OUT/odd.log"
    rows < "$OUT/odd.log"
    cat "$OUT/odd.log" >> "$OUT/odd-$src-${tun:-default}-$sec.log"
  done
done

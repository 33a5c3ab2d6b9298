#!/usr/bin/env bash
# The GPU sort's merge levels on keys and indices or on packed elements (issue 14/16, stop 53):
# bench-gpu's sort section with CORANK_AB_SORT_KEYS=first|rule|all (experiment build only:
# the first level, the levels whose groups hold at most tile^2 keys, every level), alternating;
# then the sort tile's size (ipt_sort) and the 2-way tile (ipt_tiled, tiled_min_blocks) on
# this GPU (SORT_TUNINGS, TILED_TUNINGS: CORANK_GPU_TUNING values, space-separated). Before
# it, with TESTS=1, every packed GPU test binary. (The final build has no switch: its
# levels are the rule's, and VARIANTS=rule measures it.)
set -u
sort_rows() { grep -E "^\| sort|^\| D2D|^\| 2-way|^\| k = " | grep -v "from host" ; }
if [ "${TESTS:-0}" = 1 ]; then
  echo "=== tests ($(date -u +%T))"
  timeout "${TEST_LIMIT:-300}" bash .gpu/remote test > "$OUT/tests.log" 2>&1; echo "remote test rc=$?"
  grep -E "^== |test result|FAILED|panicked|^test .* \.\.\. FAILED" "$OUT/tests.log"
fi
for v in ${VARIANTS-first rule all first rule all}; do  # VARIANTS="": none
  echo "=== sort levels on keys: $v ($(date -u +%T))"
  CORANK_AB_SORT_KEYS=$v CORANK_BENCH_SECTIONS=sort bash .gpu/remote run bench-gpu > "$OUT/sort-$v.log" 2>&1
  sort_rows < "$OUT/sort-$v.log"
done
for t in ${SORT_TUNINGS:-}; do
  echo "=== tuning $t, sort ($(date -u +%T))"
  CORANK_GPU_TUNING=$t CORANK_BENCH_SECTIONS=sort bash .gpu/remote run bench-gpu > "$OUT/tune-$t.log" 2>&1
  sort_rows < "$OUT/tune-$t.log"
done
for t in ${TILED_TUNINGS:-}; do
  echo "=== tuning $t, 2way ($(date -u +%T))"
  CORANK_GPU_TUNING=$t CORANK_BENCH_SECTIONS=2way bash .gpu/remote run bench-gpu > "$OUT/tune-$t.log" 2>&1
  sort_rows < "$OUT/tune-$t.log"
done

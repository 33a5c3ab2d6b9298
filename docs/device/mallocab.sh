#!/usr/bin/env bash
# `corank sort` of the bench's 16 lineitem files (by l_partkey, zstd(3)) under glibc malloc
# tunables, no rebuild: as is; large blocks kept in the heap (mmap_threshold 32 MiB,
# trim_threshold 1 GiB); transparent huge pages for the heap (hugetlb=1). Alternating ROUNDS
# times: wall, user, sys seconds and minor page faults; the outputs compared byte for byte.
#
# Pack (here):   ../shared/gpu/pack --bin corank
# Run (there):   bash docs/device/mallocab.sh                   (.gpu carried)
#
# VARIANTS  any of as_is, heap, thp (default all three)
# ROUNDS    (default 3); SIZE rows (default 20M); ENGINE --engine (default cpu)
# STRATEGY  the sort's --strategy: columns, runs or auto (default columns)
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stops 48 (the CPU sort's glibc tunables)
# and 50 ("Huge pages for the heap"; its merge half, then run by envab.sh, is now
# VARIANTS="cpu cpu,GLIBC_TUNABLES=glibc.malloc.hugetlb=1" bash docs/device/engineab.sh).
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}; VARIANTS=${VARIANTS:-as_is heap thp}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
for round in $(seq "${ROUNDS:-3}"); do
  for v in $VARIANTS; do
    case $v in
      as_is) T= ;;
      heap) T=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824 ;;
      thp) T=glibc.malloc.hugetlb=1 ;;
      *) echo "unknown variant $v (as_is, heap, thp)" >&2; exit 2 ;;
    esac
    GLIBC_TUNABLES=$T /usr/bin/time -f "%e %U %S %R" -o /tmp/time.txt "$CORANK" sort "$IN"/*.parquet -o /tmp/s-$v.parquet -f -q --by l_partkey --engine "${ENGINE:-cpu}" --strategy "${STRATEGY:-columns}" --compression 'zstd(3)'
    echo "$v: wall user sys minor-faults $(cat /tmp/time.txt)"
  done
done
first=${VARIANTS%% *}
for v in $VARIANTS; do cmp /tmp/s-$first.parquet /tmp/s-$v.parquet || echo "$v: output differs"; done; echo "outputs compared"

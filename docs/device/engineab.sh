#!/usr/bin/env bash
# `corank merge` (or, with SORT=1, `corank sort`) of the bench's 16 lineitem files on each
# engine and under environment settings, alternating: wall, user, sys, peak RSS, the -vv
# rounds' fill, merge and gather totals, how many rounds merged on the GPU and how long the
# writer waited for its encodes; every output compared with the first variant's.
#
# Pack (here):   ../shared/gpu/pack --bin corank
# Run (there):   bash docs/device/engineab.sh                  (.gpu carried)
#   VARIANTS="cpu gpu gpu,RAYON_NUM_THREADS=8" ROUNDS=2 bash docs/device/engineab.sh
#
# VARIANTS  space-separated, each ENGINE[,NAME=VALUE...]: --engine (cpu, gpu, auto) and the
#           environment of that run (default "cpu gpu")
# ROUNDS    rounds of all variants (default 3)
# SIZE      rows of the dataset, made by `corank bench` if missing (default 20M)
# SORT      1: `corank sort --by l_partkey` instead of `corank merge --by l_orderkey` (its -vv
#           has no round lines: the times are the process's, and the key read and sort)
# EXTRA     more arguments for every run (e.g. "--memory-limit 4GiB")
# CORANK    the binary (default: the pack's); DATA the datasets' folder (default /tmp/cb)
# Recorded: docs/log/2026-12-performance-log.md, stop 50 (the device gather, then
# `--engine auto` without the GPU's start-up wait; that stop also set an experiment build's
# switch, CORANK_AB_CPU_GATHER, which no build reads now).
set -u
. docs/device/bench_cli.sh
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
SIZE=${SIZE:-20M}; VARIANTS=${VARIANTS:-cpu gpu}
ROWS=$(awk -v s="$SIZE" 'BEGIN { m = 1; c = substr(s, length(s)); if (c ~ /[kK]/) m = 1e3; else if (c ~ /[mM]/) m = 1e6; else if (c ~ /[gG]/) m = 1e9; if (m > 1) s = substr(s, 1, length(s) - 1); printf "%d", s * m + 0.5 }')
D=${DATA:-/tmp/cb}; mkdir -p "$D"; IN=$D/lineitem-16x$ROWS
[ -f "$IN/.complete" ] || corank_bench --dir "$D" --files 16 --sizes "$SIZE" --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
if [ -n "${SORT:-}" ]; then CMD=sort; BY=l_partkey; else CMD=merge; BY=l_orderkey; fi
ms() { grep -oE "$1 [0-9.]+(ms|s|µs)" /tmp/m.log | awk '{v=$NF; u=v; sub(/[0-9.]+/,"",u); sub(/[a-zµ]+$/,"",v); if (u=="s") v*=1000; if (u=="µs") v/=1000; s+=v} END {printf "%.0f", s}'; }
for round in $(seq "${ROUNDS:-3}"); do i=0; for V in $VARIANTS; do
  i=$((i+1)); E=${V%%,*}; ENV=$(echo "$V" | cut -s -d, -f2- | tr , ' ')
  ( [ -z "$ENV" ] || export $ENV; /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt "$CORANK" $CMD "$IN"/*.parquet -o /tmp/m-$i.parquet -f -q -vv --by $BY --engine "$E" --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log )
  [ -n "${SORT:-}" ] && grep -oE "keys read in [^ ]+, sorted in [^ ]+" /tmp/m.log | tr '\n' ' '
  n=$(grep -c "corank round:" /tmp/m.log); g=$(grep -c "merged on the Gpu engine" /tmp/m.log)
  w=$(grep -oE "waited [^ ]+ for their encoding" /tmp/m.log | awk '{print $2}' | tr '\n' ' ')
  echo "$V: $(awk '{printf "%s s wall %s user %s sys %.0f MiB", $1, $2, $3, $4/1024}' /tmp/time.txt); fill $(ms 'filled in') merge $(ms 'engine in') gather $(ms 'gathered in') ms; $g of $n rounds merged on the GPU; writer waited ${w:-?}"
done; done
i=0; for V in $VARIANTS; do i=$((i+1)); cmp /tmp/m-1.parquet /tmp/m-$i.parquet && echo "$V: output identical"; done

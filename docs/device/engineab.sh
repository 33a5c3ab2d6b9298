# Stop 50: `corank merge` of the bench's 16 sorted lineitem files (by l_orderkey, zstd(3))
# on each engine, VARIANTS separated by spaces, each ENGINE[,NAME=VALUE...] (environment
# settings after the engine), alternating ROUNDS times at SIZE rows (20M default; the
# dataset is made if missing): wall, user, sys, peak RSS, the -vv rounds' fill, merge and
# gather totals and how many rounds merged on the GPU; outputs compared with the first
# variant's. SORT=1 runs `corank sort --by l_partkey` of the same files instead (its -vv
# has no round lines: the times are the process's). Bundle: `../shared/gpu/pack --bin corank`. (Stop 50 ran it on an experiment
# build whose GPU rounds gathered their fixed-width columns on the device, off with
# CORANK_AB_CPU_GATHER=1; not kept: docs/PERFORMANCE.md.)
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=${NEW:-/tmp/corank-bundle/bin/bin-corank}
SIZE=${SIZE:-20M}
ROWS=$(echo $SIZE | sed 's/M$/000000/')
D=/tmp/cb; mkdir -p $D
# SORT=1: `corank sort --by l_partkey` of the same files instead of the merge.
if [ -n "${SORT:-}" ]; then CMD=sort; BY=l_partkey; else CMD=merge; BY=l_orderkey; fi
[ -d $D/lineitem-16x$ROWS ] || $NEW bench --dir $D --files 16 --sizes $SIZE --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
ms() { grep -oE "$1 [0-9.]+(ms|s|µs)" /tmp/m.log | awk '{v=$NF; u=v; sub(/[0-9.]+/,"",u); sub(/[a-zµ]+$/,"",v); if (u=="s") v*=1000; if (u=="µs") v/=1000; s+=v} END {printf "%.0f", s}'; }
for round in $(seq ${ROUNDS:-3}); do i=0; for V in ${VARIANTS:-cpu gpu}; do
  i=$((i+1)); E=${V%%,*}; ENV=$(echo $V | cut -s -d, -f2- | tr , ' ')
  ( [ -z "$ENV" ] || export $ENV; /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW $CMD $D/lineitem-16x$ROWS/*.parquet -o /tmp/m-$i.parquet -f -q -vv --by $BY --engine $E --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log )
  [ -n "${SORT:-}" ] && grep -oE "keys read in [^ ]+, sorted in [^ ]+" /tmp/m.log | tr '\n' ' '
  n=$(grep -c "corank round:" /tmp/m.log); g=$(grep -c "merged on the Gpu engine" /tmp/m.log)
  echo "$V: $(awk '{printf "%s s wall %s user %s sys %.0f MiB", $1, $2, $3, $4/1024}' /tmp/time.txt); fill $(ms 'filled in') merge $(ms 'engine in') gather $(ms 'gathered in') ms; $g of $n rounds merged on the GPU"
done; done
i=0; for V in ${VARIANTS:-cpu gpu}; do i=$((i+1)); cmp /tmp/m-1.parquet /tmp/m-$i.parquet && echo "$V: output identical"; done

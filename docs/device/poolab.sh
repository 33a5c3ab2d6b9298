# Stop 49: the 20M-row `corank merge` (16 sorted lineitem files, by l_orderkey, cpu engine,
# zstd(3)) with the row groups encoded on rayon's global pool (as built), on a pool of their
# own, or on their own pool at nice +N (experiment build, CORANK_AB_POOL=own|niceN),
# alternating ROUNDS times: wall, user, sys, peak RSS, the -vv rounds' fill and gather
# totals, and the writer's waits. Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=${NEW:-/tmp/corank-bundle/bin/bin-corank}
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-3}); do for V in ${POOLS:-global own nice5 nice10}; do
  P=${V%:*}; F=${V#*:}; [ "$F" = "$V" ] && F=
  ( [ $P = global ] || export CORANK_AB_POOL=$P; [ -z "$F" ] || export CORANK_AB_IN_FLIGHT=$F; /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m-$P.parquet -f -q -vv --by l_orderkey --engine cpu --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log )
  fills=$(grep -oE "filled in [0-9.]+ms" /tmp/m.log | awk '{s+=$3} END {printf "%.0f", s}')
  gathers=$(grep -oE "gathered in [0-9.]+ms" /tmp/m.log | awk '{s+=$3} END {printf "%.0f", s}')
  w=$(grep -oE "waited [^ ]+ for their encoding" /tmp/m.log | awk '{print $2}')
  echo "$V: $(awk '{printf "%s s wall %s user %s sys %.0f MiB", $1, $2, $3, $4/1024}' /tmp/time.txt); fill ${fills} gather ${gathers} ms; writer waited $w"
done; done
for V in ${POOLS:-global own nice5 nice10}; do P=${V%:*}; cmp /tmp/m-global.parquet /tmp/m-$P.parquet && echo "$V: output identical"; done

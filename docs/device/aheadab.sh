# Stop 49: the 20M-row `corank merge` (16 sorted lineitem files, by l_orderkey, cpu engine,
# zstd(3)) with each run decoding AHEADS batches ahead of the merge (experiment build,
# CORANK_AB_AHEAD), alternating ROUNDS times: wall, user, sys, peak RSS, and the -vv
# rounds' total fill / gather times. Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=${NEW:-/tmp/corank-bundle/bin/bin-corank}
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-3}); do for A in ${AHEADS:-0 1 3}; do
  CORANK_AB_AHEAD=$A /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m-$A.parquet -f -q -vv --by l_orderkey --engine cpu --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log
  fills=$(grep -oE "filled in [0-9.]+ms" /tmp/m.log | awk '{s+=$3} END {printf "%.0f", s}')
  gathers=$(grep -oE "gathered in [0-9.]+ms" /tmp/m.log | awk '{s+=$3} END {printf "%.0f", s}')
  echo "ahead $A: $(awk '{printf "%s s wall %s user %s sys %.0f MiB", $1, $2, $3, $4/1024}' /tmp/time.txt); fill ${fills} ms gather ${gathers} ms"
done; done
for A in ${AHEADS:-0 1 3}; do cmp /tmp/m-0.parquet /tmp/m-$A.parquet && echo "ahead $A: output identical"; done

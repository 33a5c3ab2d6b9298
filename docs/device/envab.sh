# Stop 49: the 20M-row `corank merge` (16 sorted lineitem files, by l_orderkey, cpu engine,
# zstd(3)) under experiment settings given as environment variables, VARIANTS separated by
# spaces, each a comma-separated list of NAME=VALUE ("base" = none), alternating ROUNDS
# times: wall, user, sys, peak RSS, the -vv rounds' fill and gather totals, the writer's
# wait for encodes; outputs compared with the first variant's. Experiment build (stop 49:
# CORANK_AB_POOL=own|niceN row groups encoded on a pool of their own, CORANK_AB_IN_FLIGHT=N
# row groups in flight, CORANK_AB_AHEAD=N batches each run decodes ahead,
# CORANK_AB_DECODERS=N row groups of a run decoded at once, CORANK_AB_FIRST=1 the first
# round started after one batch a run). Bundle:
# `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=${NEW:-/tmp/corank-bundle/bin/bin-corank}
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-3}); do i=0; for V in ${VARIANTS:-base}; do
  i=$((i+1))
  ( [ $V = base ] || export $(echo $V | tr , ' '); /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m-$i.parquet -f -q -vv --by l_orderkey --engine cpu --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log )
  fills=$(grep -oE "filled in [0-9.]+ms" /tmp/m.log | awk '{s+=$3} END {printf "%.0f", s}')
  gathers=$(grep -oE "gathered in [0-9.]+ms" /tmp/m.log | awk '{s+=$3} END {printf "%.0f", s}')
  w=$(grep -oE "waited [^ ]+ for their encoding" /tmp/m.log | awk '{print $2}')
  echo "$V: $(awk '{printf "%s s wall %s user %s sys %.0f MiB", $1, $2, $3, $4/1024}' /tmp/time.txt); fill ${fills} gather ${gathers} ms; writer waited $w"
done; done
i=0; for V in ${VARIANTS:-base}; do i=$((i+1)); cmp /tmp/m-1.parquet /tmp/m-$i.parquet && echo "$V: output identical"; done

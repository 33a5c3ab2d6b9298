# Stop 48: where `corank merge` (16 sorted lineitem files, 20M rows, cpu engine, zstd(3))
# leaves cores idle, without a rebuild: the memory limit (2, 4, 8 GiB: larger windows, row
# groups and rounds) and more rayon threads than cores (RAYON_NUM_THREADS=24), alternating
# ROUNDS times (default 2): wall, user, sys, peak RSS, -v's summary.
# Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-2}); do
  for v in 2GiB 4GiB 8GiB 2GiB/24; do
    limit=${v%/*}; threads=; [ "${v#*/}" = 24 ] && threads=24
    RAYON_NUM_THREADS=$threads /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m.parquet -f -q -v --by l_orderkey --engine cpu --compression 'zstd(3)' --memory-limit $limit > /tmp/log.txt 2>&1
    echo "$v: wall user sys KB $(cat /tmp/time.txt); $(grep -o 'merging [0-9.]*m*s ([0-9]* cpu.*' /tmp/log.txt | cut -c1-150)"
  done
done

# Stop 48: `corank merge` (16 sorted lineitem files, 20M rows, cpu engine, zstd(3), 2 GiB)
# with more row groups encoding at once than the memory plan sized them for
# (`CORANK_AB_IN_FLIGHT`, an experiment build's switch, removed since; the row groups stay
# the same size): if the writer thread's in-order appends starve the encoding pool, more
# queued row groups keep the cores busy. Alternating ROUNDS times (default 3).
# Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-3}); do
  for v in 16 24 32 48; do
    CORANK_AB_IN_FLIGHT=$v /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m-$v.parquet -f -q -v --by l_orderkey --engine cpu --compression 'zstd(3)' > /tmp/log.txt 2>&1
    echo "in flight $v: wall user sys KB $(cat /tmp/time.txt); $(grep -o 'writing [0-9.]*m*s' /tmp/log.txt)"
  done
done
for v in 24 32 48; do cmp /tmp/m-16.parquet /tmp/m-$v.parquet || echo "$v differs"; done; echo compared

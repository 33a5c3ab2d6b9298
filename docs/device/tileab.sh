# Stop 48: the CPU sort's tile size (`CORANK_AB_TILE`, an experiment build's switch, removed
# since) in `corank sort --strategy columns` (20M lineitem rows by l_partkey, cpu engine,
# zstd(3)), alternating ROUNDS times (default 3): -v's key sort time, wall, user, sys,
# peak RSS; then the same with glibc's large blocks kept in the heap (GLIBC_TUNABLES).
# Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
HEAP=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
for round in $(seq ${ROUNDS:-3}); do
  for v in 4096 16384 65536 262144 4096/heap 65536/heap; do
    tile=${v%/*}; T=; [ "${v#*/}" = heap ] && T=$HEAP
    CORANK_AB_TILE=$tile GLIBC_TUNABLES=$T /usr/bin/time -f "%e %U %S %M" -o /tmp/time.txt $NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-${tile}.parquet -f -q -v --by l_partkey --engine cpu --strategy columns --compression 'zstd(3)' > /tmp/log.txt 2>&1
    echo "$v: $(grep -o 'sorting the keys [0-9.]*ms' /tmp/log.txt); wall user sys KB $(cat /tmp/time.txt)"
  done
done
for t in 16384 65536 262144; do cmp /tmp/s-4096.parquet /tmp/s-$t.parquet || echo "tile $t output differs"; done; echo compared

# OLD against NEW (builds carried as .wheels/old.tar.xz and .wheels/new.tar.xz, each
# bin/corank) on the same 20M lineitem rows: `corank merge` on each engine and `corank
# sort` on the CPU, alternating, time and peak RSS, output sizes. Used for the dictionary
# choice of the writer (stop 38).
set -u
mkdir -p /tmp/old /tmp/new
xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
xz -dc .wheels/new.tar.xz | tar -C /tmp/new -xf -
OLD=/tmp/old/bin/corank NEW=/tmp/new/bin/corank
D=/tmp/cb; mkdir -p $D
nproc; nvidia-smi -L
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
F=$(ls $D/lineitem-16x20000000/*.parquet)
$NEW merge $F -o /tmp/warm.parquet --force -q --by l_orderkey --engine gpu   # kernels compiled and cached, not timed
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    printf "merge %s %s: " $v $e
    /usr/bin/time -f "%e s %P %M KB" $C merge $F -o /tmp/m-$v-$e.parquet --force -q --by l_orderkey --engine $e --compression 'zstd(3)' 2>&1 | tail -1
  done
done
ls -l /tmp/m-*.parquet | awk '{print $5, $9}'
for v in OLD NEW OLD NEW; do
  C=${!v}
  printf "sort %s cpu: " $v
  /usr/bin/time -f "%e s %P %M KB" $C sort $F -o /tmp/s-$v.parquet --force -q --by l_partkey --engine cpu --compression 'zstd(3)' 2>&1 | tail -1
done
ls -l /tmp/s-*.parquet | awk '{print $5, $9}'

# A/B of the transfers' own copy threads (issue 13): OLD (.wheels/old.tar.xz, main before
# the change) vs NEW (the packed bundle), `corank merge` and `corank sort` of 20M lineitem
# rows with each engine, alternating.
mkdir -p /tmp/old && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
bash .gpu/remote run corank --version >/dev/null 2>&1
NEW=/tmp/corank-bundle/bin/bin-corank OLD=/tmp/old/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
F=$(ls $D/lineitem-16x20000000/*.parquet)
$OLD merge $F -o /tmp/o.parquet -f -q --by l_orderkey --engine gpu; $NEW merge $F -o /tmp/o.parquet -f -q --by l_orderkey --engine gpu  # warm the page cache and kernel cache
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    printf "merge 20M %s %s: " $v $e
    /usr/bin/time -f "%e s %M KB" $C merge $F -o /tmp/o.parquet -f -q --by l_orderkey --engine $e --compression 'zstd(3)' 2>&1 | tail -1
  done
done
for v in OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    printf "sort 20M %s %s: " $v $e
    /usr/bin/time -f "%e s %M KB" $C sort $F -o /tmp/s_${v}_${e}.parquet -f -q --by l_partkey --engine $e --compression 'zstd(3)' 2>&1 | tail -1
  done
done

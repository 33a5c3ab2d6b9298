# A/B of the previous corank (OLD) and the working tree's (NEW) on the same 20M lineitem
# rows in 2, 4 and 16 files, and the sort (its reader moved into a shared module).
bash .gpu/remote run corank --version >/dev/null
mkdir -p /tmp/old && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
NEW=/tmp/corank-bundle/bin/bin-corank OLD=/tmp/old/bin/bin-corank
D=/tmp/cb; mkdir -p $D
for f in ${FILES:-2 4 16}; do
  [ -d $D/lineitem-${f}x20000000 ] || $NEW bench --dir $D --files $f --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
  $NEW merge $D/lineitem-${f}x20000000/*.parquet -o /tmp/o.parquet -f --dry-run --by l_orderkey | grep -o "Parquet decoders[^;]*"
  for v in OLD NEW OLD NEW OLD NEW; do
    C=${!v}
    printf "%s files %s: " $f $v
    /usr/bin/time -f "%e s %P cpu %M KB" $C merge $D/lineitem-${f}x20000000/*.parquet -o /tmp/o-$v.parquet -f -q -v --by l_orderkey --engine ${ENGINE:-cpu} --compression 'zstd(3)' 2>&1 | tail -2 | sed 's/window up to.*peak memory/peak/; s/no row group copied untouched//' | tr '\n' ' '; echo
  done
done
if [ -n "${SORT:-}" ]; then
  for v in OLD NEW OLD NEW; do
    C=${!v}
    printf "sort %s: " $v
    /usr/bin/time -f "%e s %P cpu %M KB" $C sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$v.parquet -f -q --by l_partkey --engine cpu --compression 'zstd(3)' 2>&1 | tail -1; echo
  done
fi

# A/B of `--engine gpu`'s start: OLD waits for cuInit and the context before reading
# (.wheels/old.tar.xz), NEW starts them in the background and lets the first round wait.
bash .gpu/remote run corank --version >/dev/null
mkdir -p /tmp/old && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
NEW=/tmp/corank-bundle/bin/bin-corank OLD=/tmp/old/bin/bin-corank
D=/tmp/cb; mkdir -p $D
$NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
$NEW bench --dir /tmp/sb --files 4 --sizes 2000 --datasets lineitem --only corank-gpu --chart /tmp/c.png >/dev/null 2>&1
F=$(ls /tmp/sb/lineitem-4x2000/*.parquet)
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    s=$(date +%s%N); $C merge $F -o /tmp/so.parquet -f -q --by l_orderkey --engine $e; e2=$(date +%s%N)
    printf "small %s %s: %d ms\n" $v $e $(( (e2 - s) / 1000000 ))
  done
done
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    printf "20M %s %s: " $v $e
    /usr/bin/time -f "%e s %M KB" $C merge $D/lineitem-16x20000000/*.parquet -o /tmp/o.parquet -f -q -v --by l_orderkey --engine $e --compression 'zstd(3)' 2>&1 | tail -2 | sed 's/window up to.*peak memory/peak/; s/no row group copied untouched//' | tr '\n' ' '; echo
  done
done
# An absent device: an error naming it, exit code as before, nothing written.
rm -f /tmp/bad.parquet; $NEW merge $F -o /tmp/bad.parquet -q --by l_orderkey --engine gpu --devices 5; echo "NEW --devices 5: exit $?"; ls /tmp/bad.parquet /tmp/.corank-* 2>&1 | head -2
rm -f /tmp/bad.parquet; $OLD merge $F -o /tmp/bad.parquet -q --by l_orderkey --engine gpu --devices 5; echo "OLD --devices 5: exit $?"
rm -f /tmp/bad.parquet; $NEW sort $F -o /tmp/bad.parquet -q --by l_partkey --engine gpu --devices 5; echo "NEW sort --devices 5: exit $?"; ls /tmp/bad.parquet 2>&1 | head -1

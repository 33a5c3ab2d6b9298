# A/B of GPU start-up (small merges) and a 20M GPU merge: OLD (main e502982) vs NEW.
mkdir -p /tmp/old /tmp/new && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf - && xz -dc .wheels/newbin.tar.xz | tar -C /tmp/new -xf -
NEW=/tmp/new/bin/bin-corank OLD=/tmp/old/bin/bin-corank
$NEW bench --dir /tmp/sb --files 4 --sizes 2000 --datasets lineitem --only corank-cpu --chart /tmp/c.png >/dev/null 2>&1
F=$(ls /tmp/sb/lineitem-4x2000/*.parquet)
$NEW merge $F -o /tmp/so.parquet -f -q --by l_orderkey --engine gpu; $OLD merge $F -o /tmp/so.parquet -f -q --by l_orderkey --engine gpu  # fill the kernel cache
for v in OLD NEW OLD NEW OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    s=$(date +%s%N); $C merge $F -o /tmp/so.parquet -f -q --by l_orderkey --engine $e; e2=$(date +%s%N)
    printf "small %s %s: %d ms\n" $v $e $(( (e2 - s) / 1000000 ))
  done
done
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in cpu gpu; do
    printf "20M %s %s: " $v $e
    /usr/bin/time -f "%e s %M KB" $C merge $D/lineitem-16x20000000/*.parquet -o /tmp/o.parquet -f -q -v --by l_orderkey --engine $e --compression 'zstd(3)' 2>&1 | tail -2 | sed 's/window up to.*peak memory/peak/; s/no row group copied untouched//' | tr '\n' ' '; echo
  done
done

# Stop 48: `corank sort --strategy columns` (20M lineitem rows, cpu engine, zstd(3)) with the
# row groups appended while the last columns encode (as built) or after every column is
# encoded (`CORANK_AB_APPEND_AT_END=1`, an experiment build's switch, removed since),
# alternating ROUNDS times (default 4): wall, user and sys seconds, and -vv's time from the
# last column encoded to the row groups appended. Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-4}); do
  for v in overlap at_end; do
    if [ $v = at_end ]; then export CORANK_AB_APPEND_AT_END=1; else unset CORANK_AB_APPEND_AT_END; fi
    /usr/bin/time -f "%e %U %S" -o /tmp/time.txt $NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$v.parquet -f -q -vv --by l_partkey --engine cpu --strategy columns --compression 'zstd(3)' 2> /tmp/log.txt
    enc=$(grep "l_comment: encoded" /tmp/log.txt | sed -E 's/^\[[0-9-]+T[0-9:]+:([0-9.]+)Z.*/\1/')
    app=$(grep "row groups appended" /tmp/log.txt | sed -E 's/^\[[0-9-]+T[0-9:]+:([0-9.]+)Z.*/\1/')
    echo "$v: wall user sys $(cat /tmp/time.txt); last column encoded -> appended $(awk "BEGIN{printf \"%.3f\", $app - $enc}") s"
  done
done
unset CORANK_AB_APPEND_AT_END
cmp /tmp/s-overlap.parquet /tmp/s-at_end.parquet && echo "outputs byte-identical"

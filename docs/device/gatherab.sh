# The row gather of this build (stop 44): `bench-gather`, then `corank sort --strategy columns`
# of 20M lineitem rows with the column phase's pieces gathered through their addresses (new)
# against arrow's `interleave` (old, `CORANK_AB_INTERLEAVE=1`, an experiment build's switch),
# alternating, ROUNDS times (default 3) on each engine, the outputs compared byte for byte;
# then the SQL sort bench (`CORANK_BENCH_SQL=sort bench-operator`) unless OPERATOR=0.
set -u
bash .gpu/remote run bench-gather 16777216 5
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png 2>&1 | grep "^| lineitem"
for round in $(seq ${ROUNDS:-3}); do
  for e in cpu gpu; do
    for v in new old; do
      printf "sort %s %s: " $e $v
      if [ $v = old ]; then export CORANK_AB_INTERLEAVE=1; else unset CORANK_AB_INTERLEAVE; fi
      /usr/bin/time -f "%e s %P cpu %M KB" $NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$e-$v.parquet -f -q -v --by l_partkey --engine $e --strategy columns --compression 'zstd(3)' 2>&1 | grep -E "^strategy|KB" | sed 's/(the keys, then each column), //; s/ ([0-9]* output row groups, 0 B of encoded pages spilled)//' | tr '\n' ' ' | cut -c1-300; echo
    done
  done
done
unset CORANK_AB_INTERLEAVE
cmp /tmp/s-cpu-new.parquet /tmp/s-cpu-old.parquet && cmp /tmp/s-cpu-new.parquet /tmp/s-gpu-new.parquet && cmp /tmp/s-gpu-old.parquet /tmp/s-gpu-new.parquet && echo "sort outputs byte-identical"
[ "${OPERATOR:-1}" = 0 ] || CORANK_BENCH_SQL=sort bash .gpu/remote run bench-operator 0 20971520 1 16777216 2>&1 | grep -vE "^\s*$" | tail -40

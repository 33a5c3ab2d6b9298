# `corank sort` of OLD (.wheels/old.tar.xz) against NEW (this build), alternating on the same
# 20M lineitem rows, for each engine of ENGINES (default cpu) and memory limit of LIMITS
# (default 2GiB): -v phase times and peak RSS, outputs compared; then, where a DuckDB wheel
# is under .wheels/duckdb, `corank bench --sort` against DuckDB on the same host.
# Used for the spill runs without fsync (stop 32) and the chunks sorted in pieces (stop 33).
bash .gpu/remote run corank --version >/dev/null
mkdir -p /tmp/old && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
NEW=/tmp/corank-bundle/bin/bin-corank OLD=/tmp/old/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in ${ENGINES:-cpu}; do
    for m in ${LIMITS:-2GiB}; do
      printf "sort %s %s %s: " $v $e $m
      /usr/bin/time -f "%e s %P cpu %M KB" $C sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$v-$e-$m.parquet -f -q -v --by l_partkey --engine $e --memory-limit $m --compression 'zstd(3)' 2>&1 | grep -E "^reading|KB" | sed 's/chunks up to.*peak memory/peak/' | tr '\n' ' ' | cut -c1-330; echo
    done
  done
done
for e in ${ENGINES:-cpu}; do for m in ${LIMITS:-2GiB}; do cmp /tmp/s-OLD-$e-$m.parquet /tmp/s-NEW-$e-$m.parquet && echo "$e $m: outputs byte-identical"; done; done
if [ -d .wheels/duckdb ]; then
  python3 -m pip install --quiet --no-index --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
  PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c.png 2>&1 | tail -12
fi

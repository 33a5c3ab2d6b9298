# `corank sort` with its spill runs flushed to disk (OLD: .wheels/old.tar.xz) and without
# (NEW: this build), alternating on the same 20M lineitem rows, then `corank bench --sort`
# against DuckDB (wheel under .wheels/duckdb) on the same host.
bash .gpu/remote run corank --version >/dev/null
mkdir -p /tmp/old && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
python3 -m pip install --quiet --no-index --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/py
NEW=/tmp/corank-bundle/bin/bin-corank OLD=/tmp/old/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in ${ENGINES:-cpu}; do
    printf "sort %s %s: " $v $e
    /usr/bin/time -f "%e s %P cpu %M KB" $C sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$v.parquet -f -q -v --by l_partkey --engine $e --compression 'zstd(3)' 2>&1 | grep -E "reading|KB" | tr '\n' ' ' | cut -c1-400; echo
  done
done
cmp /tmp/s-OLD.parquet /tmp/s-NEW.parquet && echo "outputs byte-identical"
[ -d .wheels/duckdb ] && $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c.png 2>&1 | tail -12

# `corank sort` of 100M lineitem rows by columns with a memory limit that fits them (LIMIT,
# default 16GiB), each engine of ENGINES (default cpu gpu), against `corank bench --sort`
# (corank at its 2 GiB default, in runs) and DuckDB (its wheel under .wheels/duckdb) on the
# same rows; the outputs' rows compared (count and a hash sum over every row, in order).
# Reuses /tmp/cb's 100M dataset where a call before generated it. Stop 40.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
mkdir -p /tmp/py && python3 -m pip install --quiet --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
D=/tmp/cb; mkdir -p $D; IN=$D/lineitem-16x100000000
[ -f $IN/.complete ] || $NEW bench --dir $D --files 16 --sizes 100M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
$NEW sort $IN/*.parquet -o /tmp/plan.parquet --by l_partkey --memory-limit ${LIMIT:-16GiB} --dry-run | grep strategy
for e in ${ENGINES:-cpu gpu}; do
  printf "sort %s columns %s: " $e ${LIMIT:-16GiB}
  /usr/bin/time -f "%e s %P cpu %M KB" $NEW sort $IN/*.parquet -o /tmp/s100-$e.parquet -f -q -v --by l_partkey --engine $e --strategy columns --memory-limit ${LIMIT:-16GiB} --compression 'zstd(3)' 2>&1 | grep -E "^strategy|KB" | tr '\n' ' ' | cut -c1-420; echo
done
[ -f /tmp/s100-gpu.parquet ] && cmp /tmp/s100-cpu.parquet /tmp/s100-gpu.parquet && echo "cpu and gpu outputs byte-identical"
PYTHONPATH=/tmp/py python3 - <<'PY'
import duckdb, glob
con = duckdb.connect()
q = "SELECT count(*), sum(hash(l_orderkey, l_linenumber, l_partkey, file_row_number) % 1000000007) FROM read_parquet('{}', file_row_number=true)"
for f in sorted(glob.glob('/tmp/s100-*.parquet')):
    print(f, con.execute(q.format(f)).fetchall())
print("ordered:", con.execute("SELECT bool_and(l_partkey >= prev) FROM (SELECT l_partkey, lag(l_partkey, 1, l_partkey) OVER (ORDER BY file_row_number) prev FROM read_parquet('/tmp/s100-cpu.parquet', file_row_number=true))").fetchall())
PY
rm -f /tmp/s100-*.parquet
PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sort --sizes 100M --datasets lineitem --only corank-cpu,duckdb --chart /tmp/c.png 2>&1 | grep "^|"

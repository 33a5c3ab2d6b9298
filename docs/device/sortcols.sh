# `corank sort` one column at a time against sorted runs (the same build, `--strategy`), for
# each engine of ENGINES (default cpu gpu), ROUNDS times (default 2) alternating on the same
# 20M lineitem rows: -v phase times and peak RSS; the outputs' rows compared in order (DuckDB,
# per file row number) and the engines' column outputs byte for byte; then BENCH times
# (default 1) `corank bench --sort` against DuckDB (its wheel under .wheels/duckdb). Stop 39.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
mkdir -p /tmp/py && python3 -m pip install --quiet --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
$NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/plan.parquet --by l_partkey --dry-run | grep strategy
for round in $(seq ${ROUNDS:-2}); do
  for e in ${ENGINES:-cpu gpu}; do
    for s in runs columns; do
      printf "sort %s %s: " $e $s
      /usr/bin/time -f "%e s %P cpu %M KB" $NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$e-$s.parquet -f -q -v --by l_partkey --engine $e --strategy $s --compression 'zstd(3)' 2>&1 | grep -E "^strategy|KB" | sed 's/chunks up to.*peak memory/peak/; s/ (0 spill runs, 0 intermediate passes, 1 runs in the final merge; 0 cpu + 0 gpu rounds)//' | tr '\n' ' ' | cut -c1-360; echo
    done
  done
done
[ -f /tmp/s-gpu-columns.parquet ] && cmp /tmp/s-cpu-columns.parquet /tmp/s-gpu-columns.parquet && echo "columns: cpu and gpu outputs byte-identical"
ls -l /tmp/s-*.parquet | awk '{print $5, $9}'
PYTHONPATH=/tmp/py python3 - <<'PY'
import duckdb, glob
con = duckdb.connect()
q = "SELECT count(*), sum(hash(l_orderkey, l_linenumber, l_partkey, file_row_number) % 1000000007) FROM read_parquet('{}', file_row_number=true)"
for f in sorted(glob.glob('/tmp/s-*.parquet')):
    print(f, con.execute(q.format(f)).fetchall())
PY
for b in $(seq ${BENCH:-1}); do
  PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c.png 2>&1 | grep "^|"
done

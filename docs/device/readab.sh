# Stop 44: the gather's reads eight at a time against one at a time (`CORANK_AB_READ=1`, an
# experiment build's switch), `bench-gather` alternating; then `corank bench --sort` (twice)
# and `corank bench` (the merge) against DuckDB at 20M lineitem rows (its wheel under
# .wheels/duckdb, carried). Bundle: `../shared/gpu/pack --bench gather --bin corank`.
set -u
for v in eight one eight one; do
  if [ $v = one ]; then export CORANK_AB_READ=1; else unset CORANK_AB_READ; fi
  echo "== gather, reads $v at a time"; bash .gpu/remote run bench-gather 16777216 5 | grep "^|"
done
unset CORANK_AB_READ
mkdir -p /tmp/py && python3 -m pip install --quiet --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
for b in 1 2; do
  PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c.png 2>&1 | grep "^| lineitem"
done
PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c.png 2>&1 | grep "^| lineitem"

# Stop 49: (1) whether the host's 16 CPUs scale as 16 cores: N copies (1, 8, 16) of a
# CPU-bound Python loop at once, wall each; (2) DuckDB's COPY ... ORDER BY l_orderkey of the
# bench's 16 sorted lineitem files (20M rows, zstd 3) and `corank merge` of the same, each
# under the thread sampler (docs/device/threadsample.py): wall, CPU seconds, cores busy.
# Needs .wheels/duckdb carried. Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=${NEW:-/tmp/corank-bundle/bin/bin-corank}
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for n in 1 8 16; do
  s=$(date +%s.%N)
  for i in $(seq $n); do python3 -c "sum(i*i for i in range(20_000_000))" & done; wait
  python3 -c "import time; print('$n loops at once: %.2f s' % (time.time() - $s))"
done
mkdir -p /tmp/py && python3 -m pip install --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl -q 2>&1 | tail -2
cat > /tmp/duck.py <<'PY'
import sys, duckdb
out, key, files = sys.argv[1], sys.argv[2], sys.argv[3:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY {key}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
PY
for round in $(seq ${ROUNDS:-2}); do
  echo "DuckDB:"; PYTHONPATH=/tmp/py python3 /tmp/duck.py /tmp/d.parquet l_orderkey $D/lineitem-16x20000000/*.parquet & P=$!
  python3 docs/device/threadsample.py $P ${STEP:-1} | head -${HEAD:-7}; wait $P
  echo "corank:"; $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m.parquet -f -q --by l_orderkey --engine cpu --compression 'zstd(3)' & P=$!
  python3 docs/device/threadsample.py $P ${STEP:-1} | head -${HEAD:-7}; wait $P
done

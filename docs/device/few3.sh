mkdir -p /tmp/py && python3 -m pip install --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl -q 2>&1 | tail -2
bash .gpu/remote run corank --version >/dev/null
C=/tmp/corank-bundle/bin/bin-corank; D=/tmp/cb; mkdir -p $D
for f in 2 4 16; do
PYTHONPATH=/tmp/py $C bench --dir $D --files $f --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb,floor-corank --chart /tmp/c.png 2>&1 | grep "| lineitem"
done

# `corank bench` of the build carried as .wheels/new.tar.xz against DuckDB (its wheel under
# .wheels/duckdb): lineitem and time-partitioned at SIZES (default 20M,100M), then `--sort`
# at 20M (stop 38).
set -u
mkdir -p /tmp/new /tmp/py
[ -x /tmp/new/bin/corank ] || xz -dc .wheels/new.tar.xz | tar -C /tmp/new -xf -
python3 -m pip install --quiet --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
NEW=/tmp/new/bin/corank D=/tmp/cb; mkdir -p $D
PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sizes ${SIZES:-20M,100M} --datasets lineitem,time --only corank-cpu,corank-gpu,duckdb,floor-corank --chart /tmp/c.png 2>&1 | grep "^|"
PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,duckdb --chart /tmp/c2.png 2>&1 | grep "^|"

# `corank bench` (the merge) against Polars on both datasets at SIZES (default 20M,100M).
# Polars 2.1.0 travels extracted and xz-packed as .wheels/polars.tar.xz (DuckDB cannot travel
# in the same call: the bundle, Polars and DuckDB exceed what a call carries). Stop 40.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
mkdir -p /tmp/pol && xz -dc .wheels/polars.tar.xz | tar -C /tmp/pol -xf -
D=/tmp/cb; mkdir -p $D
for s in $(echo ${SIZES:-20M,100M} | tr , ' '); do
  PYTHONPATH=/tmp/pol $NEW bench --dir $D --files 16 --sizes $s --datasets lineitem,time --only corank-cpu,corank-gpu,polars --chart /tmp/c-$s.png 2>&1 | grep "^|"
done

# `corank bench --sort` against Polars at 20M lineitem rows, BENCH times (default 2). Polars
# 2.1.0 travels extracted and xz-packed as .wheels/polars.tar.xz (its runtime wheel is 54 MB,
# too large beside the corank bundle). Stop 39.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
mkdir -p /tmp/pol && xz -dc .wheels/polars.tar.xz | tar -C /tmp/pol -xf -
D=/tmp/cb; mkdir -p $D
for b in $(seq ${BENCH:-2}); do
  PYTHONPATH=/tmp/pol $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,corank-gpu,polars --chart /tmp/c.png 2>&1 | grep "^|"
done

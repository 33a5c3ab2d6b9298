# Stop 48: `corank merge` of the bench's 16 sorted lineitem files (20M rows, by l_orderkey,
# cpu engine, zstd(3)): wall, user, sys, peak RSS and the cores busy every 0.1 s
# (/proc/stat), ROUNDS times (default 2). Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
sample() { while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.1; done; }
for round in $(seq ${ROUNDS:-2}); do
  sample > /tmp/stat.log & SP=$!
  /usr/bin/time -f "%e s wall %U user %S sys %M KB" $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m.parquet -f -q -v --by l_orderkey --engine cpu --compression 'zstd(3)' 2>&1 | grep -vE "^\s*$" | cut -c1-300
  kill $SP; wait $SP 2>/dev/null
  echo "cores busy per 0.1 s:"
  awk '{t=$1; b=$3+$4+$5+$8+$9+$10; a=b+$6+$7; if (NR>1 && t>pt) printf "%.1f ", (b-pb)/(a-pa)*'$(nproc)'; pt=t; pb=b; pa=a} END {print ""}' /tmp/stat.log
done

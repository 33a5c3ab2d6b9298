# Stop 49: where the 20M-row `corank merge` (the bench's 16 sorted lineitem files, by
# l_orderkey, cpu engine, zstd(3)) spends its threads: each thread class's CPU seconds and
# cores busy per STEP s (docs/device/threadsample.py), and the -vv round and writer lines,
# ROUNDS times (default 2), as is and with MALLOC (glibc tunables) set if given. Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=${NEW:-/tmp/corank-bundle/bin/bin-corank}
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for round in $(seq ${ROUNDS:-2}); do for T in "" ${MALLOC:-}; do
  echo "GLIBC_TUNABLES=$T"
  GLIBC_TUNABLES=$T $NEW merge $D/lineitem-16x20000000/*.parquet -o /tmp/m.parquet -f -q -vv --by l_orderkey --engine cpu --compression 'zstd(3)' ${EXTRA:-} 2>/tmp/m.log & P=$!
  python3 docs/device/threadsample.py $P ${STEP:-0.25}
  wait $P; echo "rc=$?"
  grep -E "corank round|waited" /tmp/m.log | sed -E 's/^\[[^]]*\] //; s/ in ([0-9]+) runs//' | cut -c1-200 | sed -n "${LINES:-1,99}p"
done; done

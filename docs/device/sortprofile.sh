# Stop 48: where `corank sort --strategy columns` spends its wall time on the 16-core host:
# -vv's timeline (keys, each column decoded / encoded, row groups appended, fsync), the
# cores busy every 0.1 s (/proc/stat), the file system's write speed (dd, one and four writers), then
# `corank bench --sort` against DuckDB (its wheel under .wheels/duckdb, carried).
# Bundle: `../shared/gpu/pack --bin corank`. ROUNDS (default 2), ENGINES (default cpu).
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
mkdir -p /tmp/py && python3 -m pip install --quiet --no-index --no-deps --target /tmp/py .wheels/duckdb/*.whl 2>&1 | tail -1
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
du -sh $D/lineitem-16x20000000; nproc; df -h /tmp | tail -1
for bs in 1M 8M; do echo "dd bs=$bs 480 MiB: $(dd if=/dev/zero of=/tmp/ddtest bs=$bs count=$((480 >> $([ $bs = 8M ] && echo 3 || echo 0))) 2>&1 | tail -1)"; rm -f /tmp/ddtest; done
t0=$(date +%s.%N); for i in 0 1 2 3; do dd if=/dev/zero of=/tmp/ddtest bs=1M count=120 seek=$((i * 120)) conv=notrunc 2>/dev/null & done; wait
echo "dd 4 x 120 MiB into one file at once: $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"; rm -f /tmp/ddtest
sample() { while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.1; done; }
for round in $(seq ${ROUNDS:-2}); do
  for e in ${ENGINES:-cpu}; do
    sample > /tmp/stat.log & SP=$!
    start=$(date +%s.%N)
    /usr/bin/time -f "%e s wall %U user %S sys %M KB" $NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$e.parquet -f -q -vv --by l_partkey --engine $e --strategy columns --compression 'zstd(3)' 2>&1 | grep -E "sort by columns|l_comment|l_shipmode|synced|wall|strategy" | sed -E 's/^\[[0-9-]+T([0-9:.]+)Z [A-Z]+ +[a-z_:]+\]/\1/' | cut -c1-200
    kill $SP; wait $SP 2>/dev/null
    echo "start $(date -d @$start +%H:%M:%S.%N | cut -c1-12) UTC; cores busy per 0.1 s:"
    awk '{t=$1; b=$3+$4+$5+$8+$9+$10; a=b+$6+$7; if (NR>1 && t>pt) printf "%.1f ", (b-pb)/(a-pa)*'$(nproc)'; pt=t; pb=b; pa=a} END {print ""}' /tmp/stat.log
  done
done
ls -l /tmp/s-*.parquet | awk '{print $5, $9}'
for b in $(seq ${BENCH:-1}); do
  PYTHONPATH=/tmp/py $NEW bench --dir $D --files 16 --sort --sizes 20M --datasets lineitem --only corank-cpu,duckdb --chart /tmp/c.png 2>&1 | grep "^|"
done
# DuckDB's own cores: the bench's COPY, timed by /usr/bin/time.
cat > /tmp/duck.py <<'PY'
import sys, glob, duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
files = sorted(glob.glob(sys.argv[1] + "/*.parquet"))
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY l_partkey) TO '/tmp/duck.parquet' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
PY
for i in 1 2; do PYTHONPATH=/tmp/py /usr/bin/time -f "duckdb: %e s wall %U user %S sys %M KB" python3 /tmp/duck.py $D/lineitem-16x20000000 2>&1 | tail -1; done
ls -l /tmp/duck.parquet | awk '{print $5, $9}'

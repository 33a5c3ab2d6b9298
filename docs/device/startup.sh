bash .gpu/remote run corank --version >/dev/null
C=/tmp/corank-bundle/bin/bin-corank
nvcc -O2 -o /tmp/startup .wheels/startup.c -lcuda 2>&1 | tail -3
for mb in 64 0 1 64; do s=$(date +%s%N); /tmp/startup $mb; e=$(date +%s%N); echo "  process $(( (e - s) / 1000000 )) ms"; done
D=/tmp/small; mkdir -p $D
$C demo --help >/dev/null 2>&1
# small inputs: the first 2 files of a tiny bench dataset
$C bench --dir /tmp/sb --files 4 --sizes 2000 --datasets lineitem --only corank-cpu --chart /tmp/c.png >/dev/null 2>&1
F=$(ls /tmp/sb/lineitem-4x2000/*.parquet)
for e in cpu gpu cpu gpu cpu gpu; do
  s=$(date +%s%N); RUST_LOG=debug $C merge $F -o /tmp/so.parquet -f -q --by l_orderkey --engine $e 2>/tmp/log-$e; e2=$(date +%s%N)
  echo "$e: $(( (e2 - s) / 1000000 )) ms; start $(date -d @$((s/1000000000)) +%T).$(( (s/1000000) % 1000 ))"
done
cat /tmp/log-gpu

# The cost of a GPU process's end (docs/device/exitcost.c), then corank merge's timeline with
# the exit logged: where the GPU engine's time after the last round goes.
nvcc -O2 -o /tmp/exitcost docs/device/exitcost.c -lcuda 2>&1 | tail -3
for m in release return _exit release return _exit; do
  for sz in "0 0" "2048 256"; do
    s=$(date +%s%N); /tmp/exitcost $m $sz | tr '\n' ' '; e=$(date +%s%N); echo " [dev/pinned MiB $sz] process $(( (e - s) / 1000000 )) ms"
  done
done
bash .gpu/remote run corank --version >/dev/null
C=/tmp/corank-bundle/bin/bin-corank; D=/tmp/cb; mkdir -p $D
$C bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
ms() { echo $(( ($1 / 1000000) % 100000 )); }
for e in cpu gpu cpu gpu cpu gpu; do
  s=$(date +%s%N)
  RUST_LOG=debug $C merge $D/lineitem-16x20000000/*.parquet -o /tmp/o.parquet -f -q -v --by l_orderkey --engine $e --compression 'zstd(3)' > /tmp/out-$e.txt 2>/tmp/log-$e.txt
  e2=$(date +%s%N)
  echo "== $e: start $(date -d @$((s/1000000000)) +%T).$(printf %03d $(( (s/1000000) % 1000 ))) end $(date -d @$((e2/1000000000)) +%T).$(printf %03d $(( (e2/1000000) % 1000 ))) wall $(( (e2 - s) / 1000000 )) ms"
  grep -v "^\s*$" /tmp/log-$e.txt | sed 's/^\[2026-11-2.T//; s/Z / /' | cut -c1-110 | grep -E "merging|round 1 |round 9|round 10|GPU|context|done|exiting|wrote|renam" | tail -8
done

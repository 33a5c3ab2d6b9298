bash .gpu/remote run corank --version >/dev/null
C=/tmp/corank-bundle/bin/bin-corank; D=/tmp/cb; mkdir -p $D
$C bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
$C bench --dir /tmp/sb --files 4 --sizes 2000 --datasets lineitem --only corank-gpu --chart /tmp/c.png >/dev/null 2>&1
for e in cpu gpu cpu gpu; do
  s=$(date +%s%N)
  RUST_LOG=debug $C merge $D/lineitem-16x20000000/*.parquet -o /tmp/o.parquet -f -q -v --by l_orderkey --engine $e --compression 'zstd(3)' > /tmp/out-$e.txt 2>/tmp/log-$e.txt
  e2=$(date +%s%N)
  echo "== $e: start $(date -d @$((s/1000000000)) +%T).$(printf %03d $(( (s/1000000) % 1000 ))) end $(date -d @$((e2/1000000000)) +%T).$(printf %03d $(( (e2/1000000) % 1000 ))) wall $(( (e2 - s) / 1000000 )) ms"
  grep -v "^\s*$" /tmp/log-$e.txt | sed 's/^\[2026-11-26T//; s/Z / /' | cut -c1-150 | head -30
  tail -3 /tmp/out-$e.txt | cut -c1-250
done

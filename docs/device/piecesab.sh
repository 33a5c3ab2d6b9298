# `corank sort` with each chunk sorted whole and gathered at random (OLD: .wheels/old.tar.xz)
# and sorted in cache-sized pieces, then merged (NEW: this build), alternating on the same
# 20M lineitem rows; -v phase times and peak RSS; outputs compared.
bash .gpu/remote run corank --version >/dev/null
mkdir -p /tmp/old && xz -dc .wheels/old.tar.xz | tar -C /tmp/old -xf -
NEW=/tmp/corank-bundle/bin/bin-corank OLD=/tmp/old/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
for v in OLD NEW OLD NEW OLD NEW; do
  C=${!v}
  for e in ${ENGINES:-cpu}; do
    for m in ${LIMITS:-2GiB}; do
      printf "sort %s %s %s: " $v $e $m
      /usr/bin/time -f "%e s %P cpu %M KB" $C sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$v-$e-$m.parquet -f -q -v --by l_partkey --engine $e --memory-limit $m --compression 'zstd(3)' 2>&1 | grep -E "^reading|KB" | sed 's/chunks up to.*peak memory/peak/' | tr '\n' ' ' | cut -c1-330; echo
    done
  done
done
for e in ${ENGINES:-cpu}; do for m in ${LIMITS:-2GiB}; do cmp /tmp/s-OLD-$e-$m.parquet /tmp/s-NEW-$e-$m.parquet && echo "$e $m: outputs byte-identical"; done; done

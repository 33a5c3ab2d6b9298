# Stop 48: `corank sort --strategy columns` (20M lineitem rows, cpu engine, zstd(3)) under
# glibc malloc tunables (no rebuild): as is; large blocks kept in the heap
# (mmap_threshold 32 MiB, trim_threshold 1 GiB); and transparent huge pages for the heap
# (hugetlb=1). Alternating ROUNDS times (default 3): wall, user, sys seconds, minor faults.
# Bundle: `../shared/gpu/pack --bin corank`.
set -u
bash .gpu/remote run corank --version >/dev/null
NEW=/tmp/corank-bundle/bin/bin-corank
D=/tmp/cb; mkdir -p $D
[ -d $D/lineitem-16x20000000 ] || $NEW bench --dir $D --files 16 --sizes 20M --datasets lineitem --only floor --chart /tmp/c.png >/dev/null 2>&1
cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
for round in $(seq ${ROUNDS:-3}); do
  for v in as_is heap thp; do
    case $v in
      as_is) T= ;;
      heap) T=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824 ;;
      thp) T=glibc.malloc.hugetlb=1 ;;
    esac
    GLIBC_TUNABLES=$T /usr/bin/time -f "%e %U %S %R" -o /tmp/time.txt $NEW sort $D/lineitem-16x20000000/*.parquet -o /tmp/s-$v.parquet -f -q --by l_partkey --engine cpu --strategy columns --compression 'zstd(3)'
    echo "$v: wall user sys minor-faults $(cat /tmp/time.txt)"
  done
done
cmp /tmp/s-as_is.parquet /tmp/s-heap.parquet && cmp /tmp/s-as_is.parquet /tmp/s-thp.parquet && echo "outputs byte-identical"

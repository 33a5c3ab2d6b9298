# Issue 16, item 3: double-buffered tile loads (variants/double_buffered_loads.patch: each
# block merges DB_TILES tiles, the next tile's keys copied by cp.async into a second shared
# buffer while it merges) against the kernels as they are, bench-gpu's 2-way section, in one
# call. Here: cp -r cuda .gpu/src-base; cp -r cuda .gpu/src-db && patch -d .gpu/src-db -p2 <
# docs/device/variants/double_buffered_loads.patch; .gpu/src-db4 the same with DB_TILES 4;
# then ../shared/gpu/pack --bench gpu. There: bash docs/device/dbab.sh (tables in $OUT/ab-*.log).
# At the policy's 15 items a thread the second buffer leaves 2 blocks an SM (u64 keys); at 9
# (CORANK_GPU_TUNING=ipt_tiled=9) both fit 4, so the two are compared at 9 as well.
export SECTIONS=2way
for round in 1 2; do
  bash docs/device/kernel_ab.sh base db db4
done
CORANK_GPU_TUNING=ipt_tiled=9 bash docs/device/kernel_ab.sh base db db4

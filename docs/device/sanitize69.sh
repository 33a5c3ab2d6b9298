#!/usr/bin/env bash
# Issue 69's device code under compute-sanitizer, test group by test group, with the
# hazards' reports kept (kernel, access, addresses), not only the summaries: the stage 2
# decode tests, the key encoding, the resident round and the page encoder's GPU tests, each
# with CORANK_GPU_SMALL=1. nvCOMP's snappy kernel (`unsnap`, NVIDIA's, racy by racecheck's
# reading since stop 76) is excluded from racecheck.
#
# Needs, carried into the project's root (as docs/device/nvcomp.sh's header says):
#   .gpu/          the library's tests packed (`test-corank`), any profile
#   .probe/nvcomp/nvidia_libnvcomp_cu13-6.0.0.12-*.whl
# Run there: bash docs/device/sanitize69.sh   (carry [".gpu", ".probe/nvcomp"])
# Env: TEST_GROUPS (the test filters, one group each; default below), TOOLS ("memcheck racecheck"),
# LINES (report lines kept per group and tool, 40).
# Recorded: stop 78 ran the four groups at once: memcheck 0 errors, racecheck 1 hazard in a
# kernel the kept summary did not name (docs/gpu.md); this script keeps the reports.
set -u
root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
cd "$root"
out=${OUT:-/tmp/out}; mkdir -p "$out"
NVCOMP_TESTS=none NVCOMP_BENCH=0 bash docs/device/nvcomp.sh >/dev/null 2>&1 || { echo "sanitize69.sh: nvcomp.sh could not unpack" >&2; exit 2; }
bash .gpu/remote run test-corank --list >/dev/null 2>&1   # unpacks the bundle
export CORANK_NVCOMP=/tmp/nvcomp/nvidia/libnvcomp/lib64/libnvcomp.so.6 CORANK_REQUIRE_NVCOMP=1 CORANK_REQUIRE_GPU=1 CORANK_GPU_SMALL=1
bin=/tmp/corank-bundle/bin/test-corank
groups=${TEST_GROUPS:-"parquet::device::decode_tests engine::gpu::key_encode parquet::device::round_tests parquet::device::encode_tests::on_device"}
rc=0
for tool in ${TOOLS:-memcheck racecheck}; do
  extra=()
  [ "$tool" = racecheck ] && extra=(--kernel-name-exclude kns=unsnap)
  for g in $groups; do
    echo "== $tool $g"
    log="$out/sanitize69-$tool-${g//:/_}.log"
    compute-sanitizer --tool "$tool" "${extra[@]}" --print-limit 8 --error-exitcode 99 "$bin" "$g" > "$log" 2>&1
    r=$?; [ "$r" = 0 ] || rc=$r
    grep -E "Race reported|Invalid|Error:|Warning:|in [A-Za-z_]+\(|^=========     (at|by) |SUMMARY|test result" "$log" | head -n "${LINES:-40}"
  done
done
echo "sanitize69.sh exit: $rc"
exit $rc

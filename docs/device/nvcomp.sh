#!/usr/bin/env bash
# Issue 69 stages 1 and 2 on the GPU machine: Parquet pages decompressed by nvCOMP, and the
# covered flat columns' pages decoded into Arrow buffers by cuda/parquet_decode.cu (the
# library tests under parquet::device::decode_tests, the bench's "decompress + decode";
# fixed-width columns and, since stage 2's second slice, BYTE_ARRAY ones).
#
# Runs the packed library tests with the GPU and nvCOMP required (the page table, every page
# of zstd / snappy / LZ4_RAW / uncompressed files from arrow-rs decompressed on the device
# against parquet-rs, a damaged page named, the loader), then the decode-alone benchmark
# (`benches/gpu.rs`, section `nvcomp`: nvCOMP against parquet-rs on every core, lineitem
# zstd files, outputs checked equal before a time counts).
#
# Needs, carried into the project's root:
#   .gpu/    the pack of the library's tests and the gpu bench, made here (the dev VM) with
#              PACK_PROFILE=quick ../shared/gpu/pack --lib --bench gpu
#            (add PACK_FEATURES="ballista distributed" where the build at hand is an
#            --all-features one). The bundle must leave room for the wheel (29.8 MB) and the
#            tree: 64 MiB in all. `--bench` packs the package's binaries too; where that is
#            too large, make two calls: `pack --lib` with NVCOMP_BENCH=0, then
#            `pack --bench gpu` with NVCOMP_TESTS=none;
#   .probe/nvcomp/nvidia_libnvcomp_cu13-6.0.0.12-*.whl   the nvCOMP wheel (29.8 MB), e.g.
#              mkdir -p .probe/nvcomp && cp /tmp/nvc/*.whl .probe/nvcomp/
# Run there: bash docs/device/nvcomp.sh   (with `carry: [".gpu", ".probe/nvcomp"]`: only
# the wheel's folder, where .probe holds more)
#
# Env: NVCOMP_TESTS (the test name filters, default "parquet::device engine::gpu::nvcomp
# engine::decompress"; "all" runs every library test, "none" none), NVCOMP_BENCH=0 skips the
# benchmark, and the benchmark's own CORANK_NVCOMP_FILES (16), CORANK_NVCOMP_ROWS (1000000),
# CORANK_NVCOMP_REPS (5), CORANK_NVCOMP_DIR (measure these files instead).
# Logs land under $OUT (nvcomp-tests.log, nvcomp-bench.log).
# Recorded: stage 1 in stop 75 (H200, tests and bench) and stop 76 (H100, compute-sanitizer),
# docs/gpu.md; stage 2 first slice (decode tests, sanitizer, the decode row) in stop 77 (H100);
# its second slice (byte arrays, FLBA, DELTA_BINARY_PACKED), the key encoding, the resident
# round and the page encoder's tests in stop 78 (H100; docs/gpu.md, the log).
set -uo pipefail
root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
cd "$root"
out=${OUT:-/tmp/out}; mkdir -p "$out"
wheel=$(ls .probe/nvcomp/nvidia_libnvcomp_cu13-6.0.0.12-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "nvcomp.sh: no .probe/nvcomp/nvidia_libnvcomp_cu13-6.0.0.12-*.whl (see the header)" >&2; exit 2; }
[ -f .gpu/bundle.tar.xz ] || { echo "nvcomp.sh: no .gpu/bundle.tar.xz (see the header)" >&2; exit 2; }
rm -rf /tmp/nvcomp && mkdir -p /tmp/nvcomp
python3 -m zipfile -e "$wheel" /tmp/nvcomp || exit 1
export CORANK_NVCOMP=/tmp/nvcomp/nvidia/libnvcomp/lib64/libnvcomp.so.6
[ -f "$CORANK_NVCOMP" ] || { echo "nvcomp.sh: the wheel has no nvidia/libnvcomp/lib64/libnvcomp.so.6" >&2; exit 2; }
export CORANK_REQUIRE_GPU=1 CORANK_REQUIRE_NVCOMP=1 RUST_LOG=${RUST_LOG:-info}
rc=0
filters=${NVCOMP_TESTS:-parquet::device engine::gpu::nvcomp engine::decompress}
if [ "$filters" != none ]; then
  [ "$filters" = all ] && filters=""
  echo "== library tests ($CORANK_NVCOMP; filters: ${filters:-every test})"
  # shellcheck disable=SC2086 # the filters are words
  bash .gpu/remote test $filters --nocapture 2>&1 | tee "$out/nvcomp-tests.log"
  r=${PIPESTATUS[0]}; [ "$r" = 0 ] || rc=$r
fi
if [ "${NVCOMP_BENCH:-1}" != 0 ]; then
  echo "== decode alone (benches/gpu.rs, section nvcomp)"
  CORANK_BENCH_SECTIONS=nvcomp bash .gpu/remote run bench-gpu --bench 2>&1 | tee "$out/nvcomp-bench.log"
  r=${PIPESTATUS[0]}; [ "$r" = 0 ] || rc=$r
fi
echo "nvcomp.sh exit: $rc"
exit $rc

#!/usr/bin/env bash
# Issue 66's benchmark: `corank merge` from S3 to S3 against the same merge from local files,
# DuckDB's COPY ... ORDER BY through httpfs against the same endpoint, and the store's own
# GET of the inputs and PUT of the output (`store-floor`): the cli bench's --s3-endpoint,
# served by s3s-fs (an S3 server over a directory; built here with
# `cargo install s3s-fs@0.14.1 --features binary`) on 127.0.0.1.
#
# Pack (here): PACK_FEATURES=ballista,distributed ../shared/gpu/pack --bench cli --bin corank
#   (release; keep only bench-cli and bin-corank in the bundle: cargo builds every binary of
#   the package for a bench, and the rest does not fit beside .probe/s3), and in .probe/s3/:
#   s3s-fs.xz (the binary, xz), d15.tar.xz (DuckDB 1.5.5 + httpfs for the GPU host's Python
#   3.12: `pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
#   --platform manylinux_2_28_x86_64 duckdb==1.5.5 duckdb-extension-httpfs==1.5.5`, each wheel
#   unzipped into site/, .so stripped, tar | xz; a site/ for another Python fails `import
#   duckdb` there and both DuckDB contenders are skipped: httpfs is not on PyPI for
#   DuckDB 2.0, and the GPU machine cannot download it; the extension file is DuckDB's
#   signed one, loaded with signature checks on).
# Run (there): bash docs/device/s3bench.sh with carry [".gpu", ".probe/s3"].
# SIZES (default 20M,100M), ONLY (corank-cpu,duckdb,corank-cpu-s3,duckdb-s3,store-floor),
# DATA (default /tmp/cb), EXTRA (more bench flags). Both DuckDB contenders are 1.5.5.
# Recorded: stop 76 (2026-12-07, H100 host, 20M and 100M, one call each; stop 75's H200 run
# skipped DuckDB), docs/log/2026-12-performance-log.md and docs/performance.md row 30.
set -u
. docs/device/bench_cli.sh
mkdir -p /tmp/s3b && xz -dc .probe/s3/s3s-fs.xz > /tmp/s3b/s3s-fs && chmod +x /tmp/s3b/s3s-fs
tar -C /tmp/s3b -xJf .probe/s3/d15.tar.xz
ext=$(ls /tmp/s3b/site/duckdb_extension_httpfs/extensions/*/httpfs.duckdb_extension)
root=/tmp/s3root; mkdir -p "$root/corank-bench"
/tmp/s3b/s3s-fs --host 127.0.0.1 --port 9014 --access-key test --secret-key test "$root" >/tmp/s3b/s3s.log 2>&1 &
server=$!; trap 'kill $server 2>/dev/null' EXIT
sleep 1
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
nproc; free -g | head -2
PYTHONPATH=/tmp/s3b/site corank_bench --dir "${DATA:-/tmp/cb}" --files 16 --sizes "${SIZES:-20M,100M}" --datasets lineitem \
  --only "${ONLY:-corank-cpu,duckdb,corank-cpu-s3,duckdb-s3,store-floor}" --s3-endpoint http://127.0.0.1:9014 \
  --duckdb-httpfs "$ext" --chart /tmp/c.png ${EXTRA:-} 2>&1 | grep -v "^chart:"

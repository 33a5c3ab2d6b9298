#!/usr/bin/env bash
# Issue 67's benchmark: SQL `ORDER BY l_orderkey` (and the same with a LIMIT) over 100M
# sorted lineitem rows in 16 files, stock DataFusion and corank (CPU and GPU engines) in one
# process, and stock Ballista and corank in a Ballista cluster of 2 executors
# (`corank-ballista` processes on 127.0.0.1) on the same host: the bench's table (medians,
# the ratio to stock in one process, the cluster's stages and the rest of its time), every
# output checked against stock's before a time counts (benches/cluster/main.rs).
#
# Pack (here):   PACK_PROFILE=quick PACK_FEATURES=ballista ../shared/gpu/pack --bench cluster --bin corank-ballista
#                (cargo also builds and packs the `corank` binary for the bench: about 47 MiB of
#                xz from the quick profile, estimated from each binary's xz size; the tree's
#                ~5 MB fits beside it. PACK_PROFILE=release, where a release build with
#                `ballista` exists, times both sides as the operator bench's recorded figures did)
#   or the two binaries alone by hand (39.3 MiB from the quick build with --all-features):
#                mkdir -p .gpu/bin && cp "$CARGO_TARGET_DIR"/quick/deps/cluster-<hash> .gpu/bin/bench-cluster &&
#                cp "$CARGO_TARGET_DIR"/quick/corank-ballista .gpu/bin/bin-corank-ballista && strip .gpu/bin/* &&
#                cp ../shared/gpu/remote .gpu/ && tar -C .gpu -cf - bin | xz -T0 -6 > .gpu/bundle.tar.xz && rm -r .gpu/bin
#                (the bench's executable: `cargo bench --profile quick --all-features --bench cluster --no-run`)
# Run (there):   STEP=data bash docs/device/cluster.sh     (carry .gpu; one call: the dataset)
#                bash docs/device/cluster.sh               (the next call, same warm host: the bench)
#   ENGINES=cpu RUNS=1 bash docs/device/cluster.sh
#
# STEP      data (make the dataset and stop), bench (run it; the default), or all (both)
# SIZE      rows (default 100M); RUNS timed runs per case after the warm-up (default 1)
# ENGINES   corank's engines, comma-separated (default: cpu, and gpu where one is usable)
# LIMIT     the second query's LIMIT (default 10000; 0: no such query)
# VCORES    task slots per executor (default: half the cores)
# DATA      the dataset's and the cluster's work folder (default /tmp/cb, the folder the
#           cli bench scripts use: the same lineitem-16xROWS dataset serves both)
# EXTRA     more flags for the bench; BUNDLE the binaries' folder (default: the pack's)
#
# Disk: the dataset is about 3 GB at 100M rows; each cluster query writes its shuffle and
# result files as Arrow IPC under DATA (about 17 GB a stage at 100M rows: the stock plan
# writes two stages before the bench empties the folder after the query). The host's 64 GiB
# disk holds that; nothing else should fill it meanwhile. Time: the dataset takes minutes
# to make (its own call); the bench's cluster cases take the most (every row goes through
# the executors' IPC files and the client's fetch). If a call may pass its 10 minutes, split
# it: ENGINES=cpu in one call, ENGINES=gpu in the next (each with its own stock baselines).
# Recorded: stop 76 (2026-12-07, H100 host, 100M, ENGINES=cpu RUNS=1 STEP=all), docs/ballista.md.
set -u
# BUNDLE: a folder holding bench-cluster and bin-corank-ballista instead of the pack's
# (how the script was tried on the dev VM).
B=${BUNDLE:-/tmp/corank-bundle/bin}
[ -n "${BUNDLE:-}" ] || bash .gpu/remote run corank-ballista --version >/dev/null || exit 1
[ -x "$B/bench-cluster" ] || { echo "no bench-cluster in the bundle: pack with --bench cluster --bin corank-ballista" >&2; exit 2; }
D=${DATA:-/tmp/cb}; mkdir -p "$D"
args=(--rows "${SIZE:-100M}" --files 16 --dir "$D" --runs "${RUNS:-1}" --limit "${LIMIT:-10000}")
[ -n "${ENGINES:-}" ] && args+=(--engines "$ENGINES")
[ -n "${VCORES:-}" ] && args+=(--vcores "$VCORES")
df -h "$D" | tail -1
case "${STEP:-bench}" in
  data) /usr/bin/time -f "dataset: %e s" "$B/bench-cluster" "${args[@]}" --data-only ;;
  bench|all)
    [ "${STEP:-bench}" = all ] && { "$B/bench-cluster" "${args[@]}" --data-only || exit 1; }
    # The executed plans and warm-up lines go to stderr (kept under $OUT); the table to stdout.
    out=${OUT:-/tmp/out}; mkdir -p "$out"
    CORANK_BENCH_BALLISTA="$B/bin-corank-ballista" "$B/bench-cluster" "${args[@]}" ${EXTRA:-} 2> "$out/cluster-bench.err"
    rc=$?
    grep -E "warm-up|^generated|error:|differ|^removing" "$out/cluster-bench.err"
    df -h "$D" | tail -1
    exit $rc ;;
  *) echo "STEP is data, bench or all" >&2; exit 2 ;;
esac

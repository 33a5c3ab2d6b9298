# Sourced by the scripts that run the comparison bench (`benches/cli`, since stop 72 no
# longer a `corank` subcommand): `corank_bench ARGS` runs the pack's bench-cli with $CORANK
# as the corank binary it times. Pack with `../shared/gpu/pack --bench cli --bin corank`.
corank_bench() {
  local b=/tmp/corank-bundle/bin/bench-cli
  [ -x "$b" ] || { bash .gpu/remote run corank --version >/dev/null || return 2; }
  [ -x "$b" ] || { echo "no bench-cli in the bundle: pack with --bench cli --bin corank" >&2; return 2; }
  CORANK_BENCH_CORANK="${CORANK:-/tmp/corank-bundle/bin/bin-corank}" "$b" "$@"
}

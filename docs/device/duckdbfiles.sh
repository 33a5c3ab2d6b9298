#!/usr/bin/env bash
# Time-partitioned files as DuckDB writes them (no page indexes; a column without nulls in
# one file written REQUIRED there), merged by `corank merge` against DuckDB's own COPY ...
# ORDER BY of the same files and against `cat` + `sync` of the inputs (the disk's floor).
# 16 "daily" files of ROWS/16 rows each, key ranges apart, plus one late file whose keys
# fall into the days' range (its comment column holds no nulls, so DuckDB writes it
# REQUIRED). Every output checked: row count, key order, and the rows' multiset against
# the inputs'.
#
# Pack (here):   ../shared/gpu/pack --bin corank, and DuckDB's wheel under .whl
#                (docs/device/README.md)
# Run (there):   bash docs/device/duckdbfiles.sh                (.gpu and .whl carried)
#   ROWS=20000000 ROUNDS=3 bash docs/device/duckdbfiles.sh
#
# ROWS      rows of the 16 daily files together (default 100000000)
# ROUNDS    corank / DuckDB / cat rounds (default 2)
# SPACING   the late file's keys every SPACING: it spans SPACING/50 days (default 100)
# ENGINE    corank's --engine (default auto)
# CORANK    the binary (default: the pack's); WHEELS the wheels' folder (default .whl)
# Recorded: docs/log/2026-12-performance-log.md, stop 56 ("DuckDB's own time-partitioned
# files").
set -u
ROWS=${ROWS:-100000000}; ROUNDS=${ROUNDS:-2}; SPACING=${SPACING:-100}; WHEELS=${WHEELS:-.whl}
[ -n "${CORANK:-}" ] || { bash .gpu/remote run corank --version >/dev/null || exit 1; CORANK=/tmp/corank-bundle/bin/bin-corank; }
ls "$WHEELS"/duckdb-*.whl >/dev/null 2>&1 || { echo "no DuckDB wheel under $WHEELS (docs/device/README.md)" >&2; exit 2; }
mkdir -p /tmp/py && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/py "$WHEELS"/*.whl 2>&1 | tail -1
D=/tmp/days; rm -rf $D; mkdir -p $D
cat > /tmp/gen.py <<'PY'
import sys, duckdb
rows, d, spacing = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
per = rows // 16
con = duckdb.connect()
cols = lambda lo: (f"({lo} + range) AS ts, range % 1000 AS a, (random()*1e6)::BIGINT AS b, 'str_' || (range % 5000)::VARCHAR AS s, "
                   f"random() AS x, CASE WHEN range % 7 = 0 THEN NULL ELSE 'comment ' || range::VARCHAR END AS c")
for f in range(16):
    con.execute(f"COPY (SELECT {cols(f * per)} FROM range({per}) ORDER BY ts) TO '{d}/day{f:02d}.parquet' (FORMAT parquet, COMPRESSION zstd)")
late = per // 50
con.execute(f"COPY (SELECT ({5 * per} + range * {spacing}) AS ts, range % 1000 AS a, 0::BIGINT AS b, 'late' AS s, 0.5::DOUBLE AS x, 'late ' || range::VARCHAR AS c "
            f"FROM range({late}) ORDER BY ts) TO '{d}/late.parquet' (FORMAT parquet, COMPRESSION zstd)")
PY
cat > /tmp/duck.py <<'PY'
import sys, glob, duckdb
out, d = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute(f"COPY (SELECT * FROM read_parquet('{d}/*.parquet', union_by_name=true) ORDER BY ts) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
PY
cat > /tmp/check.py <<'PY'
import sys, duckdb
out, d = sys.argv[1], sys.argv[2]
con = duckdb.connect()
n, bad = con.execute(f"SELECT count(*), count(*) FILTER (WHERE ts < p) FROM (SELECT ts, lag(ts) OVER () AS p FROM '{out}')").fetchone()
diff = con.execute(f"SELECT count(*) FROM (SELECT * FROM '{out}' EXCEPT ALL SELECT * FROM read_parquet('{d}/*.parquet', union_by_name=true))").fetchone()[0]
print(f"check {out}: {n} rows, {bad} out of order, {diff} rows not in the inputs")
PY
echo "generating $ROWS rows"; /usr/bin/time -f "gen %e s" env PYTHONPATH=/tmp/py python3 /tmp/gen.py $ROWS $D $SPACING
du -sh $D; nproc
for r in $(seq $ROUNDS); do
  rm -f /tmp/o-*.parquet; sync
  /usr/bin/time -f "corank wall %e s, user %U s, sys %S s, peak RSS %M KB" "$CORANK" merge $D/*.parquet -o /tmp/o-corank.parquet --by ts --engine "${ENGINE:-auto}" -v 2>&1 | grep -E "merged|reading|wall|error"
  sync
  /usr/bin/time -f "duckdb wall %e s, user %U s, sys %S s, peak RSS %M KB" env PYTHONPATH=/tmp/py python3 /tmp/duck.py /tmp/o-duck.parquet $D 2>&1 | tail -1
  /usr/bin/time -f "cat+sync floor %e s" sh -c "cat $D/*.parquet > /tmp/o-cat.bin && sync"
done
PYTHONPATH=/tmp/py python3 /tmp/check.py /tmp/o-corank.parquet $D
PYTHONPATH=/tmp/py python3 /tmp/check.py /tmp/o-duck.parquet $D

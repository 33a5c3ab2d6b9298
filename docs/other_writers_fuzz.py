#!/usr/bin/env python3
"""Differential fuzz of `corank merge` and `corank sort` on files written by other tools (stop 56).

Random sorted inputs written by DuckDB and Polars (their codecs, row group sizes, page
layouts, statistics or none, nullability and nested types), merged by `corank merge` with
random keys (DuckDB's key types, 1-3 columns, ASC/DESC, NULLS FIRST/LAST), passthrough
modes, memory limits and codecs; the output read back by DuckDB and compared row for row
with the oracle: the stable sort of the inputs' concatenation (floats by IEEE total order).
Modes: interleaved, disjoint or touching key ranges (passthrough), files sorted per row
group; a quarter of the cases write the rows unsorted and run `corank sort` instead (its
strategies and memory limits drawn too). An exit other than 0 is printed with the case, so legitimate errors (a memory limit
too small for the runs, an unsupported key type) show beside real failures.

    pip install duckdb polars
    CORANK=target/release/corank python3 docs/other_writers_fuzz.py 0 100   # seeds 0..99
"""
import duckdb, polars as pl, random, struct, subprocess, sys, os, shutil, functools, traceback

CORANK = os.environ.get("CORANK", "target/release/corank")
WORK = os.environ.get("WORK", "/tmp/corank-fuzz")

def fbits(x, single):
    if single:
        b = struct.unpack('<i', struct.pack('<f', x))[0]
        return b if b >= 0 else b ^ 0x7fffffff
    b = struct.unpack('<q', struct.pack('<d', x))[0]
    return b if b >= 0 else b ^ 0x7fffffffffffffff

# key types: (duckdb type, sql value generator given a random domain size)
def gen_expr(t, rng):
    d = rng.choice([2, 5, 50, 100000])
    if t in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT"):
        lim = {"BIGINT": 2**62, "INTEGER": 2**30, "SMALLINT": 2**14, "TINYINT": 100}[t]
        d = min(d, lim)
        off = rng.choice([0, d // 2, lim // 2 if lim > 1000 else 0])
        return f"((random()*{d})::BIGINT - {off})::{t}"
    if t in ("UBIGINT", "UINTEGER", "UTINYINT", "USMALLINT"):
        base = {"UBIGINT": rng.choice([0, 2**63 - 10, 2**64 - 200000]), "UINTEGER": rng.choice([0, 2**31 - 5, 2**32 - 200000]), "UTINYINT": 0, "USMALLINT": 0}[t]
        if t == "UTINYINT": d = min(d, 255)
        if t == "USMALLINT": d = min(d, 65535)
        return f"(({base}::UBIGINT + (random()*{d})::UBIGINT))::{t}"
    if t in ("DOUBLE", "FLOAT"):
        return (f"(CASE WHEN random() < 0.05 THEN 'nan'::{t} WHEN random() < 0.05 THEN '-0.0'::{t} WHEN random() < 0.05 THEN '0.0'::{t} "
                f"WHEN random() < 0.03 THEN 'inf'::{t} WHEN random() < 0.03 THEN '-inf'::{t} ELSE (round(random()*{d}, 1) - {d}/2)::{t} END)")
    if t in ("VARCHAR", "BLOB"):
        pre = rng.choice(["", "a", "common_prefix_longer_than_16_bytes_", "é" if t == "VARCHAR" else "e", "zz"])
        e = (f"(CASE WHEN random() < 0.05 THEN '' ELSE '{pre}' || ((random()*{d})::BIGINT)::VARCHAR || "
             f"repeat('x', (random()*{rng.choice([1, 3, 30])})::INT) END)")
        return e if t == "VARCHAR" else f"({e})::BLOB"
    if t == "BOOLEAN":
        return "(random() < 0.5)"
    if t == "DATE":
        return f"(DATE '1970-01-01' + ((random()*{d})::INT - {d//2}))"
    if t.startswith("TIMESTAMP"):
        return f"(TIMESTAMP '2020-01-01' + to_microseconds(((random()*{d})::BIGINT - {d//2}) * 1000003))::{t}"
    if t.startswith("DECIMAL"):
        return f"((random()*{d})::BIGINT - {d//2} + 0.25)::{t}"
    if t == "TIME":
        return f"(TIME '00:00:00' + to_microseconds((random()*{min(d, 86000)})::BIGINT * 1000000))"
    if t == "UUID":
        return f"('00000000-0000-0000-0000-' || lpad(((random()*{d})::BIGINT)::VARCHAR, 12, '0'))::UUID"
    raise ValueError(t)

KEY_TYPES = ["BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "UTINYINT", "DOUBLE", "FLOAT",
             "VARCHAR", "BLOB", "BOOLEAN", "DATE", "TIMESTAMP", "TIMESTAMP_MS", "TIMESTAMP_NS", "TIMESTAMPTZ",
             "DECIMAL(9,2)", "DECIMAL(18,3)", "DECIMAL(38,10)", "TIME", "UUID"]

def value_key(t, v):
    if t in ("DOUBLE", "FLOAT"):
        return fbits(v, t == "FLOAT")
    if t == "VARCHAR":
        return v.encode()
    if hasattr(v, "bytes"):
        return v.bytes
    if isinstance(v, str):
        return v.encode()
    return v

def make_cmp(types, specs):
    def cmp(a, b):
        for t, (desc, nulls_first), x, y in zip(types, specs, a, b):
            if x is None and y is None: continue
            if x is None: return -1 if nulls_first else 1
            if y is None: return 1 if nulls_first else -1
            kx, ky = value_key(t, x), value_key(t, y)
            if kx == ky: continue
            r = -1 if kx < ky else 1
            return -r if desc else r
        return 0
    return cmp

def norm(v):
    # Polars writes UUIDs as binaries, so a mixed case's output column is binary: compare bytes.
    if type(v).__name__ == "UUID": return v.bytes
    if isinstance(v, float):
        return ("f", struct.pack('<d', v))
    if isinstance(v, (list, tuple)): return [norm(x) for x in v]
    if isinstance(v, dict): return {k: norm(x) for k, x in v.items()}
    return v

def one_case(seed):
    rng = random.Random(seed)
    shutil.rmtree(WORK, ignore_errors=True); os.makedirs(WORK)
    con = duckdb.connect()
    con.execute("SET threads=1")
    nkeys = rng.choice([1, 1, 2, 3])
    types = [rng.choice(KEY_TYPES) for _ in range(nkeys)]
    specs = [(rng.random() < 0.5, rng.random() < 0.5) for _ in range(nkeys)]
    null_p = [rng.choice([0, 0, 0.1, 0.5]) for _ in range(nkeys)]
    nfiles = rng.choice([1, 2, 3, 5, 9])
    mode = rng.choice(["interleaved", "disjoint", "touching", "per_row_group"])
    case_writer = rng.choice(["duckdb", "polars", "mixed"])
    if mode == "per_row_group": case_writer = "polars"
    payload = rng.random() < 0.5
    # A quarter of the cases sort unsorted files (`corank sort`) instead of merging sorted ones.
    # (Its own generator, so that the merge cases are those of the seeds before it.)
    command = "sort" if random.Random(-1 - seed).random() < 0.25 else "merge"
    if command == "sort": mode = "unsorted"
    cmp = make_cmp(types, specs)
    keyf = functools.cmp_to_key(lambda a, b: cmp(a[:nkeys], b[:nkeys]))
    files, all_rows = [], []
    for f in range(nfiles):
        n = rng.choice([0, 1, 7, 300, 3000, 20000])
        cols = []
        for i, t in enumerate(types):
            e = gen_expr(t, rng)
            if mode in ("disjoint", "touching") and i == 0:
                fl = f if not specs[0][0] else nfiles - 1 - f  # files in key order
                if t == "VARCHAR":
                    e = f"('k{fl:03d}_' || ((random()*100)::INT)::VARCHAR)"
                    if mode == "touching": e = f"(CASE WHEN random() < 0.1 THEN 'k{fl+1:03d}_0' ELSE {e} END)"
                elif t in ("BIGINT", "INTEGER", "DOUBLE", "FLOAT", "DECIMAL(18,3)", "UBIGINT"):
                    e = f"(({fl}*1000 + (random()*999)::BIGINT))::{t}"
                    if mode == "touching": e = f"(CASE WHEN random() < 0.1 THEN ({(fl+1)*1000})::{t} ELSE {e} END)"
                elif t == "DATE" or t.startswith("TIMESTAMP"):
                    e = f"(DATE '2000-01-01' + ({fl}*1000 + (random()*999)::INT))::{'DATE' if t == 'DATE' else t}"
                    if mode == "touching": e = f"(CASE WHEN random() < 0.1 THEN (DATE '2000-01-01' + {(fl+1)*1000})::{'DATE' if t == 'DATE' else t} ELSE {e} END)"
            if null_p[i]:
                e = f"(CASE WHEN random() < {null_p[i]} THEN NULL ELSE {e} END)"
            cols.append(f"{e} AS k{i}")
        cols.append(f"{f}::INT AS src")
        cols.append("range::BIGINT AS rn")
        if payload:
            cols.append("CASE WHEN random() < 0.2 THEN NULL ELSE 'payload ' || repeat('p', (random()*40)::INT) END AS p_str")
            cols.append("CASE WHEN random() < 0.2 THEN NULL ELSE [range, range + 1] END AS p_list")
            cols.append("{'a': range, 'b': 'x' || range::VARCHAR} AS p_struct")
            cols.append("(random() * 1000)::DOUBLE AS p_f")
        con.execute(f"CREATE OR REPLACE TABLE t AS SELECT {', '.join(cols)} FROM range({n})")
        rows = con.execute("SELECT * FROM t").fetchall()
        if mode == "per_row_group" and n > 0:
            rg = rng.choice([1, 3, 100, 1000])
            rows = [r for i in range(0, n, rg) for r in sorted(rows[i:i + rg], key=keyf)]
        elif mode == "unsorted":
            rng.shuffle(rows)
            rg = rng.choice([1, 100, 1000, 5000, 1 << 20])
        else:
            rows.sort(key=keyf)
            rg = rng.choice([1, 100, 1000, 5000, 1 << 20])
        order = [r[nkeys + 1] for r in rows]
        rows = [r[:nkeys + 1] + (j,) + r[nkeys + 2:] for j, r in enumerate(rows)]
        con.execute("CREATE OR REPLACE TABLE m AS SELECT UNNEST($1::BIGINT[]) AS old, generate_subscripts($1::BIGINT[], 1) - 1 AS pos", [order])
        con.execute("CREATE OR REPLACE TABLE s AS SELECT t.* REPLACE (m.pos AS rn) FROM t JOIN m ON t.rn = m.old ORDER BY m.pos")
        path = os.path.join(WORK, f"part-{f:02d}.parquet")
        writer = "polars" if mode == "per_row_group" else case_writer if case_writer != "mixed" else rng.choice(["duckdb", "polars"])
        comp = rng.choice(["zstd", "snappy", "uncompressed", "gzip", "lz4"])
        stats = rng.random() < 0.8
        if writer == "polars":
            tmp = path + ".tmp"
            con.execute(f"COPY (SELECT * FROM s ORDER BY rn) TO '{tmp}' (FORMAT parquet)")
            try:
                df = pl.read_parquet(tmp)
                df.write_parquet(path, compression=comp, row_group_size=rg, statistics=stats)
            except Exception as e:
                writer = f"duckdb(polars failed: {type(e).__name__})"
            os.remove(tmp)
        if writer.startswith("duckdb"):
            dcomp = {"lz4": "lz4_raw"}.get(comp, comp)
            con.execute(f"COPY (SELECT * FROM s ORDER BY rn) TO '{path}' (FORMAT parquet, COMPRESSION {dcomp}, ROW_GROUP_SIZE {rg})")
        files.append((path, writer, comp, rg, n, stats))
        all_rows.extend(con.execute(f"SELECT * FROM read_parquet('{path}')").fetchall())
    oracle = sorted(all_rows, key=keyf)
    by = ", ".join(f"k{i} {'DESC' if d else 'ASC'} NULLS {'FIRST' if nf else 'LAST'}" for i, (d, nf) in enumerate(specs))
    out = os.path.join(WORK, "out.parquet")
    if command == "sort":
        extra = rng.choice([[], ["--memory-limit", "64MiB"], ["--memory-limit", "16MiB", "--strategy", "runs"], ["--strategy", "columns"], ["--row-group-size", "1000"]])
    else:
        extra = rng.choice([[], ["--passthrough", "never"], ["--passthrough", "always"], ["--memory-limit", "64MiB"], ["--row-group-size", "1000"]])
    extra += rng.choice([[], ["--compression", "snappy"], ["--compression", "zstd"], ["--compression", "lz4"]])
    if case_writer == "mixed" or any("failed" in w for _, w, *_ in files): extra.append("--union-by-name")
    args = [CORANK, command, *[p for p, *_ in files], "-o", out, "--by", by, "-q", "--json", *extra]
    desc = f"seed {seed}: {command} types {types} by '{by}' nulls {null_p} mode {mode} payload {payload} files {[x[1:] for x in files]} extra {extra}"
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return f"EXIT {r.returncode}: {r.stderr.strip()[:400]} | {desc}", None
    got = con.execute(f"SELECT * FROM read_parquet('{out}')").fetchall()
    if len(got) != len(oracle):
        return f"ROWS {len(got)} != {len(oracle)} | {desc}", r.stdout
    for i, (a, b) in enumerate(zip(got, oracle)):
        if norm(a) != norm(b):
            return f"ROW {i}: got {norm(a)} want {norm(b)} | {desc}", r.stdout
    return None, r.stdout

if __name__ == "__main__":
    a, b = int(sys.argv[1]), int(sys.argv[2])
    fails = 0
    for seed in range(a, b):
        try:
            err, out = one_case(seed)
        except Exception as e:
            err = "PYTHON " + traceback.format_exc(limit=2).replace("\n", " ")
        if err:
            fails += 1
            print(err, flush=True)
    print(f"done {a}..{b}: {fails} failures")

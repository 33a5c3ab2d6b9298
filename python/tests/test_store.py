"""merge_files and sort_files with object-store URLs (docs/object-stores.md) against moto's
S3 server on 127.0.0.1: S3 to S3, local files to S3, the endpoint and credentials given
by ``storage_options`` only, and the errors of a bad URL or option."""

from __future__ import annotations

import io
import os
import socket

# Parts of any size but the last (S3 wants 5 MiB): the outputs go up in small parts.
os.environ.setdefault("S3_UPLOAD_PART_MIN_SIZE", "1024")

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import corank
from conftest import assert_same_rows, oracle_sort, random_table

moto_server = pytest.importorskip("moto.server", reason="moto[server] runs the S3 server")
boto3 = pytest.importorskip("boto3")

KINDS = {"k": "int64", "s": "string", "f": "float64"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """moto's S3 on a free port; its endpoint, and a boto3 client of it."""
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")
    yield endpoint, client
    server.stop()


@pytest.fixture
def options(s3, monkeypatch):
    """Storage options that reach the server: nothing comes from the environment."""
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    endpoint, _ = s3
    return {"endpoint": endpoint, "allow_http": True, "access_key_id": "test", "secret_access_key": "test", "region": "us-east-1", "part_size": "16KiB"}


def runs(rng, by):
    from conftest import sorted_runs

    return sorted_runs(KINDS, by, [3000, 2000, 2500], rng)


def put_table(client, bucket, key, table, row_group_size=700):
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=row_group_size)
    client.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())


def get_table(client, bucket, key) -> pa.Table:
    return pq.read_table(io.BytesIO(client.get_object(Bucket=bucket, Key=key)["Body"].read()))


def no_uploads_left(client, bucket):
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_s3_to_s3(s3, options, rng):
    _, client = s3
    client.create_bucket(Bucket="py-s3")
    by = "k DESC, s"
    tables = runs(rng, by)
    for i, t in enumerate(tables):
        put_table(client, "py-s3", f"in/{i}.parquet", t)
    want = oracle_sort(pa.concat_tables(tables), by)

    s = corank.merge_files("s3://py-s3/in/", "s3://py-s3/out/merged.parquet", by=by, engine="cpu", storage_options=options)
    assert s["rows"] == 7500 and s["files"] == 3 and s["output"] == "s3://py-s3/out/merged.parquet"
    assert_same_rows(get_table(client, "py-s3", "out/merged.parquet"), want)

    # A sort by another key (the inputs in any order), S3 to S3; its spill files local.
    s = corank.sort_files(
        [f"s3://py-s3/in/{i}.parquet" for i in range(3)], "s3://py-s3/out/sorted.parquet", by="s, f DESC", engine="cpu", storage_options=options
    )
    assert s["rows"] == 7500
    assert_same_rows(get_table(client, "py-s3", "out/sorted.parquet"), oracle_sort(pa.concat_tables(tables), "s, f DESC"))
    no_uploads_left(client, "py-s3")


def test_local_to_s3(s3, options, rng, tmp_path):
    _, client = s3
    client.create_bucket(Bucket="py-local")
    by = "k DESC, s"
    tables = runs(rng, by)
    paths = []
    for i, t in enumerate(tables):
        p = tmp_path / f"in-{i}.parquet"
        pq.write_table(t, p, row_group_size=700)
        paths.append(p)
    corank.merge_files(paths, "s3://py-local/merged.parquet", by=by, engine="cpu", storage_options=options)
    assert_same_rows(get_table(client, "py-local", "merged.parquet"), oracle_sort(pa.concat_tables(tables), by))
    corank.sort_files(paths, "s3://py-local/sorted.parquet", by="f", engine="cpu", storage_options=options)
    assert_same_rows(get_table(client, "py-local", "sorted.parquet"), oracle_sort(pa.concat_tables(tables), "f"))
    # An existing output needs overwrite; with it, the object is replaced.
    with pytest.raises(corank.OutputExistsError):
        corank.sort_files(paths, "s3://py-local/sorted.parquet", by="f", engine="cpu", storage_options=options)
    corank.sort_files(paths, "s3://py-local/sorted.parquet", by="k", engine="cpu", overwrite=True, storage_options=options)
    assert_same_rows(get_table(client, "py-local", "sorted.parquet"), oracle_sort(pa.concat_tables(tables), "k"))
    no_uploads_left(client, "py-local")


def test_bad_urls_and_options(s3, options, rng, tmp_path):
    _, client = s3
    client.create_bucket(Bucket="py-errors")
    table = oracle_sort(random_table(KINDS, 100, rng), "k")
    put_table(client, "py-errors", "a.parquet", table)
    out = tmp_path / "out.parquet"
    # A missing object: FileError naming the URL; nothing written.
    with pytest.raises(corank.FileError, match="s3://py-errors/missing.parquet.*no such object"):
        corank.merge_files(["s3://py-errors/a.parquet", "s3://py-errors/missing.parquet"], out, by="k", storage_options=options)
    # A missing bucket for the output.
    with pytest.raises(corank.FileError, match="s3://no-such-bucket/out.parquet.*no such bucket"):
        corank.sort_files("s3://py-errors/a.parquet", "s3://no-such-bucket/out.parquet", by="k", storage_options=options)
    assert not out.exists()
    # An option no store knows, and options that are not a dict of str keys.
    with pytest.raises(corank.InvalidOptionError, match="no_such_key"):
        corank.merge_files("s3://py-errors/a.parquet", out, by="k", storage_options={**options, "no_such_key": "1"})
    with pytest.raises(corank.InvalidOptionError, match="storage_options"):
        corank.merge_files("s3://py-errors/a.parquet", out, by="k", storage_options=[("endpoint", "x")])
    with pytest.raises(corank.InvalidOptionError, match="storage_options"):
        corank.merge_files("s3://py-errors/a.parquet", out, by="k", storage_options={**options, "timeout": None})
    # An HTTP(S) output is read-only.
    with pytest.raises(corank.InvalidOptionError, match="read-only"):
        corank.merge_files("s3://py-errors/a.parquet", "http://127.0.0.1:1/x.parquet", by="k", storage_options=options)
    # Wrong credentials are refused by moto only where it checks them; the options reach
    # the store: a wrong endpoint port fails to connect (no retries asked), naming the URL.
    bad = {**options, "endpoint": "http://127.0.0.1:1", "max_retries": 0}
    with pytest.raises(corank.FileError, match="s3://py-errors/a.parquet"):
        corank.merge_files("s3://py-errors/a.parquet", out, by="k", storage_options=bad)
    # The options of one call are not the next one's: the good ones work again.
    corank.merge_files("s3://py-errors/a.parquet", out, by="k", storage_options=options)
    assert_same_rows(pq.read_table(out), oracle_sort(table, "k"))
    no_uploads_left(client, "py-errors")

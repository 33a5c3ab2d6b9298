//! The comparison over an S3-compatible store (`--s3-endpoint URL`, issue 66's benchmark):
//! each dataset uploaded to the bucket `--s3-bucket` (which must exist), then
//!
//! - `corank-cpu-s3` (and `corank-gpu-s3`): `corank merge` (or `sort`) from the objects to an
//!   object, the same command as `corank-cpu` with URLs for paths;
//! - `duckdb-s3`: DuckDB's `COPY (SELECT * FROM read_parquet([...]) ORDER BY k) TO 's3://...'`
//!   through its `httpfs` extension (`--duckdb-httpfs` names the extension file to load where
//!   DuckDB cannot install it), a secret pointing at the same endpoint;
//! - `store-floor`: the store's own time for the bytes any S3 → S3 merge moves, measured
//!   from this process: every input object fetched once (8 at a time) and one object of the
//!   output's size uploaded in 16 MiB parts (8 at a time).
//!
//! A contender's output object is fetched to a local file and checked like every other
//! output, then deleted. Credentials: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` from
//! the environment (`test`/`test` where unset, as local test servers take), region
//! `AWS_REGION` (default `us-east-1`), path-style requests over plain HTTP.

use corank::{Error, Result};
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The store-floor contender's name.
pub const STORE_FLOOR: &str = "store-floor";

/// Requests in flight for the store's floor.
const CONCURRENCY: usize = 8;

/// Part size of the floor's upload.
const PART_BYTES: usize = 16 << 20;

/// An S3-compatible endpoint and the bucket the bench writes to.
pub struct S3 {
    endpoint: String,
    bucket: String,
    store: AmazonS3,
    runtime: tokio::runtime::Runtime,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn store_error(what: &str, e: object_store::Error) -> Error {
    Error::InvalidArgument(format!("the bench's S3 store: {what}: {e}"))
}

impl S3 {
    /// A client of `bucket` at `endpoint` (`http://127.0.0.1:9000`).
    pub fn connect(endpoint: &str, bucket: &str) -> Result<S3> {
        let store = AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(bucket)
            .with_access_key_id(env_or("AWS_ACCESS_KEY_ID", "test"))
            .with_secret_access_key(env_or("AWS_SECRET_ACCESS_KEY", "test"))
            .with_region(env_or("AWS_REGION", "us-east-1"))
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()
            .map_err(|e| store_error("connecting", e))?;
        let runtime =
            tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| Error::io(Path::new(endpoint), "", e))?;
        Ok(S3 { endpoint: endpoint.to_string(), bucket: bucket.to_string(), store, runtime })
    }

    /// The URL of `key` in the bucket.
    pub fn url(&self, key: &str) -> PathBuf {
        PathBuf::from(format!("s3://{}/{key}", self.bucket))
    }

    /// `files` uploaded under `prefix/` (each unless an object of its size is there): their URLs.
    pub fn upload(&self, prefix: &str, files: &[PathBuf]) -> Result<Vec<PathBuf>> {
        let t = Instant::now();
        let mut urls = Vec::with_capacity(files.len());
        for file in files {
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("part.parquet");
            let key = format!("{prefix}/{name}");
            let location = ObjectPath::from(key.as_str());
            let size = file.metadata().map_err(|e| Error::io(file, "", e))?.len();
            let there = self.runtime.block_on(self.store.head(&location)).ok().map(|m| m.size);
            if there != Some(size) {
                let bytes = std::fs::read(file).map_err(|e| Error::io(file, "", e))?;
                self.runtime.block_on(self.store.put(&location, PutPayload::from(bytes))).map_err(|e| store_error(&key, e))?;
            }
            urls.push(self.url(&key));
        }
        eprintln!("uploaded {} files to s3://{}/{prefix}/ in {:.1?}", files.len(), self.bucket, t.elapsed());
        Ok(urls)
    }

    /// The store's floor: seconds to GET every object of `urls` once, and to PUT one object
    /// of `output_bytes` in parts (deleted after).
    pub fn floor(&self, urls: &[PathBuf], output_bytes: u64) -> Result<(f64, f64)> {
        let keys: Vec<ObjectPath> = urls.iter().map(|u| ObjectPath::from(self.key_of(u))).collect();
        let t = Instant::now();
        let fetched: Vec<usize> = self
            .runtime
            .block_on(
                futures::stream::iter(keys)
                    .map(|k| async move { Ok::<_, object_store::Error>(self.store.get(&k).await?.bytes().await?.len()) })
                    .buffer_unordered(CONCURRENCY)
                    .try_collect(),
            )
            .map_err(|e| store_error("fetching the inputs", e))?;
        let get_s = t.elapsed().as_secs_f64();
        let target = ObjectPath::from("out/store-floor.bin");
        let t = Instant::now();
        self.runtime
            .block_on(async {
                let upload = self.store.put_multipart(&target).await?;
                let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
                let part = vec![0x5au8; PART_BYTES];
                let mut left = output_bytes as usize;
                while left > 0 {
                    writer.wait_for_capacity(CONCURRENCY).await?;
                    let n = left.min(PART_BYTES);
                    writer.write(&part[..n]);
                    left -= n;
                }
                writer.finish().await
            })
            .map_err(|e| store_error("uploading the floor's object", e))?;
        let put_s = t.elapsed().as_secs_f64();
        let _ = self.runtime.block_on(self.store.delete(&target));
        let mib = fetched.iter().sum::<usize>() as f64 / (1 << 20) as f64;
        eprintln!(
            "{STORE_FLOOR:>12}: GET {mib:.0} MiB in {get_s:.2} s, PUT {:.0} MiB in {put_s:.2} s",
            output_bytes as f64 / (1 << 20) as f64
        );
        Ok((get_s, put_s))
    }

    /// The object at `url` written to `local`, then deleted from the store.
    pub fn fetch_and_delete(&self, url: &Path, local: &Path) -> Result<()> {
        let location = ObjectPath::from(self.key_of(url));
        let bytes = self
            .runtime
            .block_on(async { self.store.get(&location).await?.bytes().await })
            .map_err(|e| store_error("fetching an output", e))?;
        std::fs::write(local, &bytes).map_err(|e| Error::io(local, "", e))?;
        let _ = self.runtime.block_on(self.store.delete(&location));
        Ok(())
    }

    /// Deletes the object at `url`, if there is one.
    pub fn delete(&self, url: &Path) {
        let _ = self.runtime.block_on(self.store.delete(&ObjectPath::from(self.key_of(url))));
    }

    fn key_of<'a>(&self, url: &'a Path) -> &'a str {
        let text = url.to_str().unwrap_or_default();
        text.strip_prefix("s3://").and_then(|r| r.split_once('/')).map_or(text, |(_, key)| key)
    }

    /// The endpoint and credentials in a contender's environment: corank's (object_store's
    /// `AWS_*` variables) and, for DuckDB's secret, `S3_ENDPOINT`.
    pub fn set_env(&self, cmd: &mut Command) {
        cmd.env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ACCESS_KEY_ID", env_or("AWS_ACCESS_KEY_ID", "test"))
            .env("AWS_SECRET_ACCESS_KEY", env_or("AWS_SECRET_ACCESS_KEY", "test"))
            .env("AWS_REGION", env_or("AWS_REGION", "us-east-1"))
            .env("S3_ENDPOINT", self.endpoint.trim_start_matches("http://").trim_end_matches('/'));
    }
}

/// DuckDB's COPY .. ORDER BY from objects to an object, run as `python -c DUCKDB_S3 HTTPFS
/// OUT KEY URL...` (`HTTPFS`: the extension file to load, or `httpfs`).
pub const DUCKDB_S3: &str = r#"
import os, sys, duckdb
httpfs, out, key, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
if "DUCKDB_MEMORY_LIMIT" in os.environ:
    con.execute(f"SET memory_limit = '{os.environ['DUCKDB_MEMORY_LIMIT']}'")
con.execute(f"LOAD '{httpfs}'" if httpfs != "httpfs" else "LOAD httpfs")
con.execute(f"""CREATE SECRET bench (TYPE s3, KEY_ID '{os.environ["AWS_ACCESS_KEY_ID"]}', SECRET '{os.environ["AWS_SECRET_ACCESS_KEY"]}',
    REGION '{os.environ["AWS_REGION"]}', ENDPOINT '{os.environ["S3_ENDPOINT"]}', URL_STYLE 'path', USE_SSL false)""")
con.execute(f"COPY (SELECT * FROM read_parquet({files!r}) ORDER BY {key}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 3)")
"#;

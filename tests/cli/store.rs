//! Object stores end to end (docs/object-stores.md): `corank merge` and `corank sort` with
//! `s3://` inputs and outputs against moto's S3 server, `http://` inputs from a static
//! server, both on 127.0.0.1, started once for the test binary by
//! `tests/common/object_store_servers.py` (`moto[server]`, which .ci/run installs; `common::moto`). Every test
//! has a bucket of its own, so they run in parallel.

use crate::cli_common::{command, read_file, s, text, write_file, Keys};
use crate::common::moto::{bucket, get, http, put, servers};
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::compute::SortOptions;
use futures::stream::BoxStream;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult, UploadPart,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

/// The values of `<tag>` in an XML answer.
fn tags(xml: &[u8], tag: &str) -> Vec<String> {
    let xml = text(xml);
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(&open).skip(1).filter_map(|s| s.split(&close).next().map(str::to_string)).collect()
}

/// The keys of a bucket, and its multipart uploads still open.
pub(crate) fn keys_and_uploads(bucket: &str) -> (Vec<String>, Vec<String>) {
    let (_, listed) = http(servers().s3, "GET", &format!("/{bucket}?list-type=2"), b"");
    let (_, uploads) = http(servers().s3, "GET", &format!("/{bucket}?uploads"), b"");
    (tags(&listed, "Key"), tags(&uploads, "UploadId"))
}

/// `corank ARGS` with the S3 server's endpoint and test credentials in the environment.
fn corank_s3(args: &[&str]) -> Output {
    corank_s3_command().args(args).output().expect("the corank binary runs")
}

/// The binary with the S3 server's endpoint and test credentials in the environment.
pub(crate) fn corank_s3_command() -> Command {
    let mut c = command();
    c.env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", servers().s3))
        .env("AWS_ALLOW_HTTP", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
    c
}

fn ok(args: &[&str]) -> Output {
    let out = corank_s3(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    out
}

/// Fails with `code` and one line of stderr holding every one of `needles`.
fn fails(args: &[&str], code: i32, needles: &[&str]) {
    let out = corank_s3(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: not one line: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{args:?}: '{needle}' not in: {stderr}");
    }
}

/// Three sorted inputs (`k` Int64 with ties across files, `v` strings), several row groups
/// each, written in `dir` as a.parquet, b.parquet, c.parquet.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(f, name)| {
            let groups: Vec<RecordBatch> = (0..4)
                .map(|g| {
                    let k: Vec<i64> = (0..3000).map(|i| (g * 3000 + i) as i64 * 3 / (f as i64 + 2)).collect();
                    let v: Vec<String> = k.iter().map(|k| format!("{name}{k}-{}", "x".repeat((*k % 17) as usize))).collect();
                    RecordBatch::try_from_iter([
                        ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
                        ("v", Arc::new(StringArray::from(v)) as ArrayRef),
                    ])
                    .unwrap()
                })
                .collect();
            let path = dir.join(format!("{name}.parquet"));
            write_file(&path, &groups, Some(&keys));
            path
        })
        .collect()
}

/// The rows of a Parquet file's bytes.
fn rows_of(bytes: &[u8], dir: &Path, name: &str) -> RecordBatch {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    rows_at(&path)
}

pub(crate) fn rows_at(path: &Path) -> RecordBatch {
    let (batches, sorting) = read_file(path);
    assert!(sorting.is_some_and(|s| !s.is_empty()), "{}: sorting_columns set", path.display());
    arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// Uploads the inputs to `bucket` under `in/` (straight to the server); their URLs.
pub(crate) fn upload(bucket: &str, paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            put(bucket, &format!("in/{name}"), &std::fs::read(p).unwrap());
            format!("s3://{bucket}/in/{name}")
        })
        .collect()
}

#[test]
fn merges_and_sorts_read_and_write_s3_as_local_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("directions");
    let paths = inputs(d);
    upload(&b, &paths);
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    let remote: Vec<String> = ["a", "b", "c"].iter().map(|n| format!("s3://{b}/in/{n}.parquet")).collect();
    let remote: Vec<&str> = remote.iter().map(String::as_str).collect();
    // Small parts: the outputs go up in many of them.
    let small_parts = ["--storage-option", "part_size=16KiB", "--row-group-size", "4000"];

    // The oracle: the same merge, local files to a local file.
    let oracle_path = d.join("oracle.parquet");
    ok(&[&["merge", "-q"], &locals[..], &["-o", s(&oracle_path), "--row-group-size", "4000"]].concat());
    let oracle = rows_at(&oracle_path);
    assert_eq!(oracle.num_rows(), 36_000);

    // S3 to S3, S3 to a local file, local files to S3.
    ok(&[&["merge", "-q"], &remote[..], &["-o", &format!("s3://{b}/out/merged.parquet")], &small_parts[..]].concat());
    assert_eq!(rows_of(&get(&b, "out/merged.parquet"), d, "m1.parquet"), oracle);
    let to_local = d.join("from-s3.parquet");
    ok(&[&["merge", "-q"], &remote[..], &["-o", s(&to_local)]].concat());
    assert_eq!(rows_at(&to_local), oracle);
    ok(&[&["merge", "-q"], &locals[..], &["-o", &format!("s3://{b}/out/from-local.parquet")], &small_parts[..]].concat());
    assert_eq!(rows_of(&get(&b, "out/from-local.parquet"), d, "m2.parquet"), oracle);
    // A mix, and --json names the URL.
    let out = ok(&["merge", "--json", remote[0], locals[1], remote[2], "-o", &format!("s3://{b}/out/mixed.parquet")]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["output"].as_str(), Some(format!("s3://{b}/out/mixed.parquet").as_str()));
    assert_eq!(rows_of(&get(&b, "out/mixed.parquet"), d, "m3.parquet"), oracle);

    // Sorts: both strategies, the runs' spill files local (--temp-dir), S3 to S3.
    let sorted_oracle = d.join("sorted.parquet");
    ok(&[&["sort", "-q", "--by", "v DESC"], &locals[..], &["-o", s(&sorted_oracle)]].concat());
    let sorted = rows_at(&sorted_oracle);
    // In runs: 8 MiB makes several spill runs.
    for (strategy, limit) in [("columns", "64MiB"), ("runs", "8MiB")] {
        let key = format!("out/sorted-{strategy}.parquet");
        let spill = tempfile::tempdir().unwrap();
        let mut args = vec!["sort", "-q", "--by", "v DESC", "--strategy", strategy, "--temp-dir", s(spill.path())];
        args.extend(&remote);
        let target = format!("s3://{b}/{key}");
        args.extend(["-o", &target, "--memory-limit", limit]);
        args.extend(small_parts);
        ok(&args);
        assert_eq!(rows_of(&get(&b, &key), d, "s.parquet"), sorted, "--strategy {strategy}");
        assert_eq!(std::fs::read_dir(spill.path()).unwrap().count(), 0, "the spill files are removed");
    }
    // S3 to a local file (the default strategy).
    let sorted_local = d.join("sorted-from-s3.parquet");
    ok(&[&["sort", "-q", "--by", "v DESC"], &remote[..], &["-o", s(&sorted_local)]].concat());
    assert_eq!(rows_at(&sorted_local), sorted);
    let (_, uploads) = keys_and_uploads(&b);
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

#[test]
fn prefixes_and_patterns_are_listed_from_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("listing");
    let paths = inputs(d);
    upload(&b, &paths);
    put(&b, "in/notes.txt", b"not parquet");
    put(&b, "in/deeper/a.parquet", &std::fs::read(&paths[0]).unwrap());
    let merged = |inputs: &[&str]| -> serde_json::Value {
        let target = format!("s3://{b}/out/m.parquet");
        let out = ok(&[&["merge", "--json", "-f"], inputs, &["-o", &target]].concat());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // A prefix: its .parquet objects, not deeper, not other objects.
    assert_eq!(merged(&[&format!("s3://{b}/in/")])["files"], 3);
    // Patterns: `*` within a level, `[..]`, `**` across levels.
    assert_eq!(merged(&[&format!("s3://{b}/in/*.parquet")])["files"], 3);
    assert_eq!(merged(&[&format!("s3://{b}/in/[ab].parquet")])["files"], 2);
    assert_eq!(merged(&[&format!("s3://{b}/in/**/a.parquet")])["files"], 2, "in/a.parquet and in/deeper/a.parquet");
    assert_eq!(merged(&[&format!("s3://{b}/*/a.parquet")])["files"], 1);
    fails(&["merge", &format!("s3://{b}/in/*.csv"), "-o", "x.parquet"], 1, &["no object matches this pattern"]);
    fails(&["merge", &format!("s3://{b}/nothing/"), "-o", "x.parquet"], 1, &["no .parquet objects under this prefix"]);
}

#[test]
fn an_existing_output_needs_force_and_is_never_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let b = bucket("force");
    let paths = inputs(dir.path());
    upload(&b, &paths);
    let a = format!("s3://{b}/in/a.parquet");
    let out = format!("s3://{b}/in/out.parquet");
    ok(&["merge", "-q", &a, "-o", &out]);
    fails(&["merge", &a, "-o", &out], 2, &["exists", &out]);
    ok(&["merge", "-q", &a, "-o", &out, "--force"]);
    // By URL identity: s3a:// is the same object.
    fails(&["merge", &a, &format!("s3://{b}/in/b.parquet"), "-o", &format!("s3a://{b}/in/a.parquet"), "-f"], 2, &["is also an input"]);
    // Listed by the prefix, the output is skipped: the three inputs are merged.
    let listed = ok(&["merge", "--json", &format!("s3://{b}/in/"), "-o", &out, "-f"]);
    let v: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(v["files"], 3);
    // HTTP is read-only.
    fails(&["merge", &a, "-o", "http://127.0.0.1:1/x.parquet"], 2, &["read-only"]);
}

#[test]
fn a_merge_that_fails_mid_upload_leaves_no_object_and_no_parts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("midupload");
    let mut paths = inputs(d);
    // A third input out of order in its last row group: the merge fails after many parts
    // of the output went up.
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    let groups: Vec<RecordBatch> = (0..4)
        .map(|g| {
            let k: Vec<i64> = (0..3000).map(|i| if g == 3 && i == 2000 { 0 } else { (g * 3000 + i) as i64 }).collect();
            let v: Vec<String> = k.iter().map(|k| format!("bad{k}")).collect();
            RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
                ("v", Arc::new(StringArray::from(v)) as ArrayRef),
            ])
            .unwrap()
        })
        .collect();
    write_file(&paths[2], &groups, Some(&keys));
    paths.truncate(3);
    upload(&b, &paths);
    let inputs: Vec<String> = ["a", "b", "c"].iter().map(|n| format!("s3://{b}/in/{n}.parquet")).collect();
    let target = format!("s3://{b}/out/never.parquet");
    let out = corank_s3(
        &[
            &["merge"],
            &inputs.iter().map(String::as_str).collect::<Vec<_>>()[..],
            &["-o", &target, "--storage-option", "part_size=4KiB", "--row-group-size", "1000", "--engine", "cpu"],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(3), "not sorted: {}", text(&out.stderr));
    let (keys, uploads) = keys_and_uploads(&b);
    assert!(!keys.iter().any(|k| k.starts_with("out/")), "no output object: {keys:?}");
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

#[test]
fn missing_objects_buckets_and_bad_credentials_are_clear_errors() {
    let b = bucket("errors");
    let dir = tempfile::tempdir().unwrap();
    let paths = inputs(dir.path());
    upload(&b, &paths[..1]);
    let a = format!("s3://{b}/in/a.parquet");
    let local_out = dir.path().join("out.parquet");
    let missing = format!("s3://{b}/in/missing.parquet");
    fails(&["merge", &a, &missing, "-o", s(&local_out)], 1, &[&missing, "no such object"]);
    let no_bucket = "s3://no-such-bucket/in/a.parquet";
    fails(&["merge", no_bucket, "-o", s(&local_out)], 1, &[no_bucket, "no such object (or no such bucket)"]);
    fails(&["merge", &a, "-o", "s3://no-such-bucket/out.parquet"], 1, &["s3://no-such-bucket/out.parquet", "no such bucket"]);
    fails(&["merge", &a, "-o", s(&local_out), "--storage-option", "no_such_key=1"], 2, &["no_such_key"]);
    // Credentials a store refuses (this server knows no key): exit 1, the URL named.
    let endpoint = format!("endpoint=http://127.0.0.1:{}", servers().s3_auth);
    let refused = "s3://guarded/in/a.parquet";
    fails(&["merge", refused, "-o", s(&local_out), "--storage-option", &endpoint], 1, &[refused, "access denied"]);
    assert!(!local_out.exists());
}

#[test]
fn http_inputs_are_read_by_range_requests() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = servers().http_root.join("http-test");
    std::fs::create_dir_all(&served).unwrap();
    let paths = inputs(&served);
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    let oracle_path = d.join("oracle.parquet");
    ok(&[&["merge", "-q"], &locals[..], &["-o", s(&oracle_path)]].concat());
    let urls: Vec<String> = ["a", "b", "c"].iter().map(|n| format!("http://127.0.0.1:{}/http-test/{n}.parquet", servers().http)).collect();
    let out = d.join("from-http.parquet");
    let mut args = vec!["merge", "-q", "-o", s(&out), "--storage-option", "allow_http=true"];
    args.extend(urls.iter().map(String::as_str));
    ok(&args);
    assert_eq!(rows_at(&out), rows_at(&oracle_path));
    let missing = format!("http://127.0.0.1:{}/http-test/missing.parquet", servers().http);
    fails(&["merge", &missing, "-o", s(&out), "-f", "--storage-option", "allow_http=true"], 1, &[&missing, "no such object"]);
}

/// A store that fails the `fail_at`-th part of every upload (and passes the rest, and all
/// else, to `inner`).
#[derive(Debug)]
struct FailingPart {
    inner: Arc<dyn ObjectStore>,
    fail_at: usize,
}

impl std::fmt::Display for FailingPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FailingPart({})", self.inner)
    }
}

#[derive(Debug)]
struct FailingUpload {
    inner: Box<dyn MultipartUpload>,
    parts: usize,
    fail_at: usize,
}

#[async_trait::async_trait]
impl MultipartUpload for FailingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.parts += 1;
        if self.parts == self.fail_at {
            return Box::pin(async { Err(object_store::Error::Generic { store: "test", source: "injected part failure".into() }) });
        }
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[async_trait::async_trait]
impl ObjectStore for FailingPart {
    async fn put_opts(&self, location: &ObjectPath, payload: PutPayload, opts: PutOptions) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &ObjectPath, opts: PutMultipartOptions) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FailingUpload { inner, parts: 0, fail_at: self.fail_at }))
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Through the library: a store that fails one part of the upload (a store registered for
/// the bucket, as a program would) makes the merge fail naming the output, and the upload is
/// aborted: no object, no parts.
#[test]
fn a_part_that_fails_aborts_the_upload() {
    let dir = tempfile::tempdir().unwrap();
    let b = bucket("failing-part");
    let paths = inputs(dir.path());
    let inner = AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{}", servers().s3))
        .with_allow_http(true)
        .with_bucket_name(&b)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    corank::parquet::store::register_object_store(&format!("s3://{b}"), Arc::new(FailingPart { inner: Arc::new(inner), fail_at: 3 }))
        .unwrap();
    // Only this test sets the options of this process (the others run the binary).
    corank::parquet::store::set_storage_options([("part_size", "4KiB"), ("max_concurrency", "2")]).unwrap();
    let plan = corank::parquet::plan_merge(&paths, None).unwrap();
    let target = PathBuf::from(format!("s3://{b}/out/failed.parquet"));
    let options = corank::parquet::MergeFilesOptions {
        engine: corank::EngineOptions { engine: corank::Engine::Cpu, ..Default::default() },
        ..Default::default()
    };
    let err = corank::parquet::merge_files(&plan, &target, &options, &|_| {}).unwrap_err().to_string();
    assert!(err.contains(target.to_str().unwrap()) && err.contains("injected part failure"), "{err}");
    let (keys, uploads) = keys_and_uploads(&b);
    assert!(keys.is_empty(), "no object: {keys:?}");
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

/// Ctrl-C during an upload: the binary aborts it, then ends by the signal.
#[test]
fn ctrl_c_during_an_upload_aborts_it() {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let b = bucket("interrupted");
    let paths = inputs(dir.path());
    let target = format!("s3://{b}/out/interrupted.parquet");
    for attempt in 0..5 {
        // One part of 1 KiB in flight at a time: the upload takes a while.
        let mut child = corank_s3_command()
            .args([
                "merge",
                "-q",
                "--engine",
                "cpu",
                "-o",
                &target,
                "-f",
                "--storage-option",
                "part_size=1KiB",
                "--storage-option",
                "max_concurrency=1",
            ])
            .args(&paths)
            .spawn()
            .expect("the corank binary runs");
        let start = Instant::now();
        let seen = loop {
            if !keys_and_uploads(&b).1.is_empty() {
                break true;
            }
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "no upload after 30 s");
            std::thread::sleep(Duration::from_millis(2));
        };
        if seen {
            // SAFETY: kill(2) with the pid of our own child; no memory is involved.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        }
        let status = child.wait().unwrap();
        let (keys, uploads) = keys_and_uploads(&b);
        assert!(uploads.is_empty(), "attempt {attempt}: no upload left open: {uploads:?} ({status})");
        if status.signal() == Some(libc::SIGINT) {
            assert!(keys.is_empty(), "attempt {attempt}: no object: {keys:?}");
            return;
        }
        assert!(status.success(), "attempt {attempt}: {status}");
    }
    panic!("the merge ended before a Ctrl-C could reach its upload, five times");
}

#[test]
fn hive_partitions_of_a_prefix_and_a_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("hive");
    let root = d.join("t");
    let (paths, batches) = crate::hive::hive_layout(&root);
    for p in &paths {
        let key = p.strip_prefix(&root).unwrap().to_str().unwrap();
        put(&b, &format!("t/{key}"), &std::fs::read(p).unwrap());
    }
    // Beside the partitions: a directory that is none is not listed.
    put(&b, "t/other/x.parquet", &std::fs::read(&paths[0]).unwrap());
    let want = crate::hive::expected(&batches, &[("date", false, false), ("k", false, false), ("x", false, false)]);
    let out = d.join("out.parquet");
    for input in [format!("s3://{b}/t/"), format!("s3://{b}/t/*/*/*.parquet")] {
        let run = ok(&["merge", "--json", "-f", &input, "-o", s(&out), "--by", "date, k, x"]);
        let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        assert_eq!(v["files"], 6, "{input}");
        assert_eq!(v["hive_partitions"], serde_json::json!(["date", "k"]), "{input}");
        assert_eq!(crate::hive::rows_at(&out), want, "{input}");
    }
    let target = format!("s3://{b}/out/sorted.parquet");
    ok(&["sort", "-q", &format!("s3://{b}/t/"), "-o", &target, "--by", "x DESC, date"]);
    let sorted = rows_of(&get(&b, "out/sorted.parquet"), d, "s.parquet");
    let sorted = crate::hive::loose(&sorted);
    assert_eq!(sorted, crate::hive::expected(&batches, &[("x", true, true), ("date", false, false)]));
    fails(
        &["merge", &format!("s3://{b}/t/*/*.parquet"), "-o", "x.parquet", "--hive-partitioning=true"],
        2,
        &["has no key=value directory"],
    );
}

/// The keys under `prefix` of `bucket`, sorted.
fn keys_under(bucket: &str, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = keys_and_uploads(bucket).0.into_iter().filter(|k| k.starts_with(prefix)).collect();
    keys.sort();
    keys
}

/// Runs a split `corank ARGS -o s3://BUCKET/PREFIX --json` and checks its parts (downloaded
/// into `local`) against `oracle` (crate::split::check_parts); returns how many.
fn split_to_s3(args: &[&str], bucket: &str, prefix: &str, local: &Path, oracle: &Path, max_rows: Option<usize>) -> usize {
    let url = format!("s3://{bucket}/{prefix}");
    let out = ok(&[args, &["-o", &url, "--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = keys_under(bucket, prefix);
    std::fs::create_dir_all(local).unwrap();
    let mut parts = Vec::new();
    let mut names = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(key, &format!("{prefix}part-{i:05}.parquet"), "{keys:?}");
        let path = local.join(format!("part-{i:05}.parquet"));
        std::fs::write(&path, get(bucket, key)).unwrap();
        parts.push(path);
        names.push(format!("s3://{bucket}/{key}"));
    }
    crate::split::check_parts(&parts, oracle, max_rows, None, &v["output_files"], &names);
    assert!(keys_and_uploads(bucket).1.is_empty(), "no upload left open");
    parts.len()
}

#[test]
fn split_outputs_go_to_s3_as_parts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("splits");
    let paths = crate::split::sorted_inputs(d);
    upload(&b, &paths);
    let remote: Vec<String> = ["a", "b", "c"].iter().map(|n| format!("s3://{b}/in/{n}.parquet")).collect();
    let remote: Vec<&str> = remote.iter().map(String::as_str).collect();
    let oracle = d.join("oracle.parquet");
    ok(&[&["merge", "-q"], &remote[..], &["-o", s(&oracle), "--row-group-size", "300"]].concat());
    let small = ["--row-group-size", "300", "--storage-option", "part_size=4KiB"];

    // Merge by rows, S3 to S3, several upload parts a file.
    let merge = [&["merge"], &remote[..], &small[..]].concat();
    let n = split_to_s3(&[&merge[..], &["--max-file-rows", "1000"]].concat(), &b, "merged/", &d.join("m"), &oracle, Some(1000));
    assert!(n >= 9, "{n} files");
    // Sort by bytes, the prefix named without its `/`.
    let sorted = d.join("sorted.parquet");
    ok(&[&["sort", "-q", "--by", "k", "--row-group-size", "300"], &remote[..], &["-o", s(&sorted)]].concat());
    let sort = [&["sort", "--by", "k"], &remote[..], &small[..], &["--max-file-bytes", "8KiB"]].concat();
    let url = format!("s3://{b}/sorted");
    let out = ok(&[&sort[..], &["-o", &url, "--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = keys_under(&b, "sorted/");
    assert!(keys.len() >= 3, "{keys:?}");
    let local = d.join("s");
    std::fs::create_dir(&local).unwrap();
    let parts: Vec<PathBuf> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let p = local.join(format!("part-{i:05}.parquet"));
            std::fs::write(&p, get(&b, k)).unwrap();
            p
        })
        .collect();
    let names: Vec<String> = keys.iter().map(|k| format!("s3://{b}/{k}")).collect();
    crate::split::check_parts(&parts, &sorted, None, Some(8 << 10), &v["output_files"], &names);

    // Parts there already: refused without --force; with it the older parts beyond the new
    // set go, other objects stay.
    put(&b, "merged/_SUCCESS", b"");
    fails(&[&merge[..], &["--max-file-rows", "4000", "-o", &format!("s3://{b}/merged/")]].concat(), 2, &["part-00000.parquet"]);
    assert_eq!(keys_under(&b, "merged/").len(), n + 1);
    ok(&[&merge[..], &["-q", "--max-file-rows", "4000", "--force", "-o", &format!("s3://{b}/merged/")]].concat());
    let keys = keys_under(&b, "merged/");
    assert_eq!(keys, ["merged/_SUCCESS", "merged/part-00000.parquet", "merged/part-00001.parquet", "merged/part-00002.parquet"]);
}

#[test]
fn a_split_merge_that_fails_after_files_were_finished_leaves_no_object() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("splitfails");
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    // Sorted, but for a row out of order in the last row group of b.parquet.
    let batch = |k: Vec<i64>| {
        let v: Vec<String> = k.iter().map(|k| format!("v{k}")).collect();
        RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(k)) as ArrayRef), ("v", Arc::new(StringArray::from(v)) as ArrayRef)])
            .unwrap()
    };
    let n = 300_000i64;
    let a: Vec<RecordBatch> = (0..n).collect::<Vec<_>>().chunks(50_000).map(|c| batch(c.to_vec())).collect();
    write_file(&d.join("a.parquet"), &a, Some(&keys));
    let mut bad: Vec<RecordBatch> = (1..=n).collect::<Vec<_>>().chunks(50_000).map(|c| batch(c.to_vec())).collect();
    bad.push(batch(vec![n + 10, n + 12, n + 11]));
    write_file(&d.join("b.parquet"), &bad, Some(&keys));
    let out = corank_s3(&[
        "merge",
        "-v",
        s(&d.join("a.parquet")),
        s(&d.join("b.parquet")),
        "-o",
        &format!("s3://{b}/out/"),
        "--max-file-rows",
        "20000",
        "--memory-limit",
        "64MiB",
        "--engine",
        "cpu",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "not sorted: {stderr}");
    assert!(stderr.contains("(put in place at the end)"), "no file was finished before the error: {stderr}");
    let (keys, uploads) = keys_and_uploads(&b);
    assert!(keys.is_empty(), "no object: {keys:?}");
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

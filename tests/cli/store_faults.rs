//! Object-store faults end to end (docs/object-stores.md, "Faults"): `corank merge` and
//! `corank sort` talking to moto's S3 through a proxy that injects faults
//! (`fault_proxy.rs`): 500s, 503 `SlowDown`s and bodies cut off on reads, retried to the
//! same result, the version check kept by the retries; faults on an upload's requests
//! retried, or beyond the retry budget an error naming the output with the upload aborted;
//! the server lost mid-upload; credentials refused. Every test checks that the proxy served
//! its faults, so none passes without them.

use crate::cli_common::{read_file, s, text, write_file, Keys};
use crate::common::moto::{bucket, get, put, servers};
use crate::fault_proxy::{Fault, FaultProxy, Seen};
use crate::store::{corank_s3_command, keys_and_uploads, rows_at, upload};
use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::compute::SortOptions;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Three sorted inputs (`k` Int64 with ties across files, `v` 16 hex digits that do not
/// compress), 4 row groups of 20,000 rows each: about 1.4 MB a file, so that a reader's
/// row groups are ranged GETs beyond the footer's 64 KiB.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(f, name)| {
            let groups: Vec<RecordBatch> = (0..4)
                .map(|g| {
                    let k: Vec<i64> = (0..20_000).map(|i| (g * 20_000 + i) as i64 * 3 / (f as i64 + 2)).collect();
                    let v: Vec<String> = (0..20_000u64)
                        .map(|i| format!("{:016x}", (f as u64 * 1_000_003 + g as u64 * 20_000 + i).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
                        .collect();
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

/// `corank ARGS` through `proxy` (its endpoint as a storage option, which wins over the
/// environment's server).
fn through(proxy: &FaultProxy, args: &[&str]) -> Output {
    corank_s3_command().args(args).args(["--storage-option", &proxy.endpoint_option()]).output().expect("the corank binary runs")
}

fn ok_through(proxy: &FaultProxy, args: &[&str]) {
    let out = through(proxy, args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
}

fn rows(path: &Path) -> RecordBatch {
    let (batches, _) = read_file(path);
    arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// Whether `seen` is a GET of the object `key` (path-style: `/bucket/key`).
fn get_of(seen: &Seen, key: &str) -> bool {
    seen.method == "GET" && seen.target.split('?').next().is_some_and(|p| p.ends_with(key))
}

/// Whether `seen` is an upload's part `n` (`PUT ...?partNumber=n&uploadId=...`).
fn part(seen: &Seen, n: usize) -> bool {
    seen.method == "PUT" && seen.target.contains(&format!("partNumber={n}&"))
}

/// Rules for each input: its first two GETs without `If-Match` (the footer's, and its
/// retries) and its first two with (row groups) answered with 500, 503 SlowDown, or the
/// body cut off halfway: a kind an input.
fn read_faults(proxy: &FaultProxy) {
    for (name, fault) in [("a", Fault::InternalError), ("b", Fault::SlowDown), ("c", Fault::CutMidBody)] {
        let key = format!("in/{name}.parquet");
        let k = key.clone();
        proxy.fault(2, fault, move |r| get_of(r, &k) && r.if_match.is_none());
        proxy.fault(2, fault, move |r| get_of(r, &key) && r.if_match.is_some());
    }
}

/// Every faulted GET under `If-Match` was sent again with the same `If-Match`, and that
/// retry was answered (206).
fn retries_kept_if_match(seen: &[Seen]) {
    let mut checked = 0;
    for (i, faulted) in seen.iter().enumerate().filter(|(_, r)| r.fault.is_some() && r.method == "GET") {
        let Some(tag) = &faulted.if_match else { continue };
        let path = faulted.target.split('?').next().unwrap();
        // A body cut off is read on from where it stopped: a range of its own.
        let cut = faulted.fault == Some(Fault::CutMidBody);
        let retried = seen[i + 1..].iter().any(|r| {
            r.target.split('?').next() == Some(path)
                && r.if_match.as_ref() == Some(tag)
                && r.fault.is_none()
                && r.status == Some(206)
                && (!cut || r.range != faulted.range)
        });
        assert!(retried, "no retry of {faulted:?} with its If-Match");
        checked += 1;
    }
    assert!(checked >= 6, "{checked} faulted GETs under If-Match");
}

#[test]
fn reads_are_retried_through_500s_503s_and_cut_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("fault-reads");
    let paths = inputs(d);
    let urls = upload(&b, &paths);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    let proxy = FaultProxy::start(servers().s3);

    // The oracles: the same runs on the local files.
    let merged = d.join("merged.parquet");
    let sorted = d.join("sorted.parquet");
    let out = d.join("out.parquet");
    ok_through(&proxy, &[&["merge", "-q", "--row-group-size", "7000", "-o", s(&merged)], &locals[..]].concat());
    ok_through(&proxy, &[&["sort", "-q", "--by", "v DESC", "--row-group-size", "7000", "-o", s(&sorted)], &locals[..]].concat());

    read_faults(&proxy);
    ok_through(&proxy, &[&["merge", "-q", "--row-group-size", "7000", "-o", s(&out)], &urls[..]].concat());
    assert_eq!(rows(&out), rows(&merged), "the merge read through faults");
    let seen = proxy.seen();
    assert_eq!(seen.iter().filter(|r| r.fault.is_some()).count(), 12, "every fault served");
    retries_kept_if_match(&seen);

    // The sort (one column at a time: projected reads, then the rest).
    read_faults(&proxy);
    let before = seen.len();
    ok_through(&proxy, &[&["sort", "-q", "--by", "v DESC", "--row-group-size", "7000", "-f", "-o", s(&out)], &urls[..]].concat());
    assert_eq!(rows(&out), rows(&sorted), "the sort read through faults");
    let seen = proxy.seen()[before..].to_vec();
    assert_eq!(seen.iter().filter(|r| r.fault.is_some()).count(), 12, "every fault served");
    retries_kept_if_match(&seen);
}

/// A merge from objects reads each row group ahead of its decoder, once: every ranged GET of
/// a row group (under `If-Match`) asks for a range no other asked for, each input's four
/// row groups one GET each. With one row group's GETs failing for good (beyond a retry
/// budget of one) the read-ahead and its reader's own fetch both fail: exit 1, the object
/// named, no output.
#[test]
fn read_ahead_fetches_each_row_group_once_and_a_failed_one_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("read-ahead");
    let paths = inputs(d);
    let urls = upload(&b, &paths);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    let proxy = FaultProxy::start(servers().s3);
    let merged = d.join("merged.parquet");
    let out = d.join("out.parquet");
    let args = ["merge", "-q", "--passthrough", "never", "--row-group-size", "7000"];
    ok_through(&proxy, &[&args[..], &["-o", s(&merged)], &locals[..]].concat());
    let before = proxy.seen().len();
    ok_through(&proxy, &[&args[..], &["-o", s(&out)], &urls[..]].concat());
    assert_eq!(rows(&out), rows(&merged), "the merge from objects");
    let ranged: Vec<(String, String)> = proxy.seen()[before..]
        .iter()
        .filter(|r| r.method == "GET" && r.if_match.is_some())
        .map(|r| (r.target.clone(), r.range.clone().unwrap_or_default()))
        .collect();
    let mut unique = ranged.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ranged.len(), "a range fetched twice: {ranged:?}");
    for name in ["a", "b", "c"] {
        let n = ranged.iter().filter(|(t, _)| t.split('?').next().unwrap().ends_with(&format!("in/{name}.parquet"))).count();
        assert_eq!(n, 4, "{name}: one GET per row group: {ranged:?}");
    }

    // b's third row group fails for good: its read-ahead, then its reader's fetch.
    let third = ranged
        .iter()
        .filter(|(t, _)| t.split('?').next().unwrap().ends_with("in/b.parquet"))
        .map(|(_, range)| range.clone())
        .collect::<std::collections::BTreeSet<String>>();
    let mut starts: Vec<(u64, String)> =
        third.iter().map(|r| (r.trim_start_matches("bytes=").split('-').next().unwrap().parse::<u64>().unwrap(), r.clone())).collect();
    starts.sort();
    let failing = starts[2].1.clone();
    let f = failing.clone();
    proxy.fault(usize::MAX, Fault::InternalError, move |r| get_of(r, "in/b.parquet") && r.range.as_deref() == Some(f.as_str()));
    let fail_out = d.join("failed.parquet");
    let budget = ["--storage-option", "max_retries=1", "--storage-option", "retry_backoff=10ms"];
    let got = through(&proxy, &[&args[..], &budget[..], &["-o", s(&fail_out)], &urls[..]].concat());
    assert_eq!(got.status.code(), Some(1), "{}", text(&got.stderr));
    let stderr = text(&got.stderr);
    assert!(stderr.contains(&format!("s3://{b}/in/b.parquet")), "the object named: {stderr}");
    assert!(!fail_out.exists(), "no output after a failed read");
    let served = proxy.faults_served().iter().filter(|r| r.range.as_deref() == Some(failing.as_str())).count();
    // The read-ahead's request and its retry, then the reader's request and its retry.
    assert_eq!(served, 4, "the failed row group fetched by the read-ahead and once more by its reader");
}

/// An object replaced between a failed ranged GET and its retry: the retry carries the
/// ETag the footer was read with, the server refuses it (412), and the run fails without
/// an output, never mixing two versions.
#[test]
fn a_retried_read_still_checks_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("fault-version");
    let paths = inputs(d);
    let urls = upload(&b, &paths);
    let proxy = FaultProxy::start(servers().s3);
    let replacement = std::fs::read(&paths[1]).unwrap();
    let bucket_name = b.clone();
    proxy.fault(1, Fault::InternalError, move |r| {
        let hit = get_of(r, "in/a.parquet") && r.if_match.is_some();
        if hit {
            // Replaced now, before the 500 goes back: the retry finds another version.
            put(&bucket_name, "in/a.parquet", &replacement);
        }
        hit
    });
    let out = d.join("out.parquet");
    let run = through(&proxy, &["merge", "--engine", "cpu", &urls[0], &urls[2], "-o", s(&out)]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&urls[0]) && stderr.contains("changed since its footer was read"), "{stderr}");
    assert!(!out.exists(), "no output");
    let seen = proxy.seen();
    let i = seen.iter().position(|r| r.fault.is_some()).expect("the fault was served");
    let tag = seen[i].if_match.clone().unwrap();
    assert!(
        seen[i + 1..].iter().any(|r| get_of(r, "in/a.parquet") && r.if_match.as_ref() == Some(&tag) && r.status == Some(412)),
        "the retry carried the first ETag and was refused: {seen:?}"
    );
}

/// Local inputs merged to `target` through `proxy` with small parts (many of them), two in
/// flight, and `extra` options; the run's output.
fn merge_up(proxy: &FaultProxy, paths: &[PathBuf], target: &str, extra: &[&str]) -> Output {
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    let args = [
        &["merge", "-q", "--engine", "cpu", "-o", target, "--storage-option", "part_size=64KiB"][..],
        &["--storage-option", "max_concurrency=2"],
        extra,
        &locals[..],
    ]
    .concat();
    through(proxy, &args)
}

/// The local merge of `paths` into `d/oracle.parquet`, through `proxy` (no fault armed yet):
/// what every upload must hold.
fn local_oracle(proxy: &FaultProxy, d: &Path, paths: &[PathBuf]) -> PathBuf {
    let oracle = d.join("oracle.parquet");
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    ok_through(proxy, &[&["merge", "-q", "--engine", "cpu", "-o", s(&oracle)], &locals[..]].concat());
    oracle
}

#[test]
fn upload_requests_are_retried_to_the_same_object() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("fault-uploads");
    let paths = inputs(d);
    let proxy = FaultProxy::start(servers().s3);
    let oracle = local_oracle(&proxy, d, &paths);

    proxy.fault(1, Fault::SlowDown, |r| r.method == "POST" && r.target.contains("uploads"));
    proxy.fault(2, Fault::InternalError, |r| part(r, 2));
    proxy.fault(2, Fault::SlowDown, |r| part(r, 3));
    proxy.fault(1, Fault::NoAnswer, |r| part(r, 4));
    proxy.fault(1, Fault::InternalError, |r| r.method == "POST" && r.target.contains("uploadId="));
    let target = format!("s3://{b}/out/merged.parquet");
    let run = merge_up(&proxy, &paths, &target, &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(proxy.faults_served().len(), 7, "every fault served: {:?}", proxy.faults_served());
    let got = d.join("got.parquet");
    std::fs::write(&got, get(&b, "out/merged.parquet")).unwrap();
    assert_eq!(rows_at(&got), rows_at(&oracle));
    let (keys, uploads) = keys_and_uploads(&b);
    assert_eq!(keys, ["out/merged.parquet"]);
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

#[test]
fn a_completion_whose_answer_is_lost_still_succeeds() {
    // The server completes the object, the answer never arrives, object_store sends the
    // completion again and the server (moto, as S3) says the upload is no more: the object
    // is there, whole, and the merge must say so, not fail.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("fault-lost-completion");
    let paths = inputs(d);
    let proxy = FaultProxy::start(servers().s3);
    let oracle = local_oracle(&proxy, d, &paths);
    let completion = |r: &Seen| r.method == "POST" && r.target.contains("uploadId=");
    // The retry answered as moto answers it, then as S3 may (`NoSuchUpload`); both with an
    // object there before (`--force`: another object, whose ETag differs).
    // k 2 overwrites k 1's object with other bytes (snappy): another ETag.
    let cases: [(&str, Option<Fault>, &[&str]); 3] = [
        ("m0", None, &[]),
        ("m1", Some(Fault::NoSuchUpload), &[]),
        ("m1", Some(Fault::NoSuchUpload), &["--force", "--compression", "snappy"]),
    ];
    for (name, answer, extra) in cases {
        let before = proxy.seen().len();
        proxy.fault(1, Fault::LoseAnswer, completion);
        if let Some(fault) = answer {
            proxy.fault(1, fault, completion);
        }
        let key = format!("out/{name}.parquet");
        let run = merge_up(&proxy, &paths, &format!("s3://{b}/{key}"), extra);
        assert!(run.status.success(), "{name} {answer:?}: {}", text(&run.stderr));
        let completions: Vec<Seen> = proxy.seen()[before..].iter().filter(|r| completion(r)).cloned().collect();
        assert_eq!(completions.len(), 2, "the completion sent again: {completions:?}");
        assert_eq!((completions[0].fault, completions[1].fault), (Some(Fault::LoseAnswer), answer));
        let got = d.join("got.parquet");
        std::fs::write(&got, get(&b, &key)).unwrap();
        assert_eq!(rows_at(&got), rows_at(&oracle));
        let (_, uploads) = keys_and_uploads(&b);
        assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
    }
    // A completion refused outright (`NoSuchUpload` without the server completing it):
    // exit 1, no object, the upload aborted. With --force the old object stays as it was.
    proxy.fault(usize::MAX, Fault::NoSuchUpload, completion);
    let target = format!("s3://{b}/out/other.parquet");
    let run = merge_up(&proxy, &paths, &target, &[]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    assert!(text(&run.stderr).contains("completing the upload"), "{}", text(&run.stderr));
    let old = get(&b, "out/m1.parquet");
    let run = merge_up(&proxy, &paths, &format!("s3://{b}/out/m1.parquet"), &["--force"]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    assert_eq!(get(&b, "out/m1.parquet"), old, "the old object untouched");
    let (keys, uploads) = keys_and_uploads(&b);
    assert_eq!(keys, ["out/m0.parquet", "out/m1.parquet"]);
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

/// Asserts a failed upload: exit 1, the output's URL and `needle` on stderr, no object and
/// no open upload in `bucket`.
fn failed_cleanly(run: &Output, target: &str, needle: &str, bucket: &str) {
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(target) && stderr.contains(needle), "'{target}', '{needle}' not in: {stderr}");
    let (keys, uploads) = keys_and_uploads(bucket);
    assert!(keys.is_empty(), "no object: {keys:?}");
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
}

#[test]
fn upload_faults_beyond_the_budget_and_refusals_abort_the_upload() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let paths = inputs(d);
    let budget = ["--storage-option", "max_retries=2", "--storage-option", "retry_backoff=10ms"];

    // Throttled for good: the part is sent 1 + max_retries times, then the run fails.
    let b = bucket("fault-budget");
    let proxy = FaultProxy::start(servers().s3);
    proxy.fault(usize::MAX, Fault::SlowDown, |r| part(r, 3));
    let target = format!("s3://{b}/out/never.parquet");
    let run = merge_up(&proxy, &paths, &target, &budget);
    failed_cleanly(&run, &target, "SlowDown", &b);
    assert_eq!(proxy.faults_served().len(), 3, "one try and two retries");
    assert!(proxy.seen().iter().any(|r| r.method == "DELETE" && r.status == Some(204)), "the upload was aborted");

    // Credentials refused mid-upload (403): not retried.
    let b = bucket("fault-refused");
    let proxy = FaultProxy::start(servers().s3);
    proxy.fault(usize::MAX, Fault::Forbidden, |r| part(r, 2));
    let target = format!("s3://{b}/out/never.parquet");
    let run = merge_up(&proxy, &paths, &target, &budget);
    failed_cleanly(&run, &target, "access denied", &b);
    assert_eq!(proxy.faults_served().len(), 1, "a 403 is not retried");

    // Credentials the server refuses from the start (it knows no key): the output's check.
    let endpoint = format!("endpoint=http://127.0.0.1:{}", servers().s3_auth);
    let refused = "s3://guarded/out.parquet";
    let run = corank_s3_command()
        .args(["merge", s(&paths[0]), "-o", refused, "--storage-option", &endpoint])
        .output()
        .expect("the corank binary runs");
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(refused) && stderr.contains("access denied"), "{stderr}");
}

/// Runs `merge_up` in a thread of its own; the proxy goes down at part 3. `back_after`:
/// when (after it went down) it comes back, if before the run ends.
fn lose_the_server(b: &str, d: &Path, back_after: Option<Duration>) -> (Output, FaultProxy, String) {
    let paths = inputs(d);
    let proxy = FaultProxy::start(servers().s3);
    proxy.fault(1, Fault::GoDown, |r| part(r, 3));
    let target = format!("s3://{b}/out/never.parquet");
    let run = {
        let (proxy, target) = (proxy.clone(), target.clone());
        // One retry, soon: the parts fail while the server is away.
        std::thread::spawn(move || {
            merge_up(&proxy, &paths, &target, &["--storage-option", "max_retries=1", "--storage-option", "retry_backoff=10ms"])
        })
    };
    if let Some(after) = back_after {
        let start = Instant::now();
        let down = loop {
            if let Some(since) = proxy.down_since() {
                break since;
            }
            assert!(!run.is_finished() && start.elapsed() < Duration::from_secs(30), "the proxy never went down");
            std::thread::sleep(Duration::from_millis(5));
        };
        while down.elapsed() < after {
            std::thread::sleep(Duration::from_millis(5));
        }
        proxy.set_down(false);
    }
    let out = run.join().unwrap();
    proxy.set_down(false);
    (out, proxy, target)
}

/// The server gone after the first parts, back 3 s later: the parts fail (exit 1, the
/// output named); the abort, tried again for 10 s, reaches the server when it is back: no
/// object, no parts.
#[test]
fn a_server_lost_mid_upload_and_back_gets_the_abort() {
    let dir = tempfile::tempdir().unwrap();
    let b = bucket("fault-lost");
    let (run, proxy, target) = lose_the_server(&b, dir.path(), Some(Duration::from_secs(3)));
    failed_cleanly(&run, &target, "uploading a part", &b);
    assert!(proxy.seen().iter().any(|r| r.method == "DELETE" && r.status == Some(204)), "the upload was aborted once it was back");
}

/// The server gone for good (as far as this run can tell): exit 1 once the abort gave up
/// (10 s), and no object. The parts the server holds stay (an abort cannot reach a server
/// that is gone): the bucket's lifecycle rule is what removes them.
#[test]
fn a_server_lost_for_good_leaves_no_object() {
    let dir = tempfile::tempdir().unwrap();
    let b = bucket("fault-gone");
    let start = Instant::now();
    let (run, _proxy, target) = lose_the_server(&b, dir.path(), None);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&target) && stderr.contains("could not be aborted"), "{stderr}");
    assert!(start.elapsed() >= Duration::from_secs(9), "the abort was tried for 10 s");
    let (keys, uploads) = keys_and_uploads(&b);
    assert!(keys.is_empty(), "no object: {keys:?}");
    assert_eq!(uploads.len(), 1, "the open upload stays (documented): {uploads:?}");
}

/// Four inputs laid out by time, as daily partitions are: each file's keys follow the one
/// before, but for its first row group, which overlaps the last of the file before. Most
/// row groups are copied unchanged (passthrough), the rest merged.
fn time_partitioned(dir: &Path) -> Vec<PathBuf> {
    let keys: Keys = vec![("k".into(), SortOptions { descending: false, nulls_first: false })];
    (0..4u64)
        .map(|f| {
            let groups: Vec<RecordBatch> = (0..4u64)
                .map(|g| {
                    // File f's keys from f*80,000 - 2,000 (into the file before) on.
                    let from = (f * 80_000 + g * 20_000) as i64 - if f > 0 && g == 0 { 2_000 } else { 0 };
                    let to = (f * 80_000 + (g + 1) * 20_000) as i64 - if f > 0 && g == 0 { 2_000 } else { 0 };
                    let k: Vec<i64> = (from..to).collect();
                    let v: Vec<String> =
                        k.iter().map(|&i| format!("{:016x}", (i as u64 ^ f).wrapping_mul(0x9E37_79B9_7F4A_7C15))).collect();
                    RecordBatch::try_from_iter([
                        ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
                        ("v", Arc::new(StringArray::from(v)) as ArrayRef),
                    ])
                    .unwrap()
                })
                .collect();
            let path = dir.join(format!("day{f}.parquet"));
            write_file(&path, &groups, Some(&keys));
            path
        })
        .collect()
}

/// `bytes=a-b` (inclusive) as `a..b+1`.
fn byte_range(header: &str) -> std::ops::Range<u64> {
    let (a, b) = header.trim_start_matches("bytes=").split_once('-').expect("a bounded range");
    a.parse().unwrap()..b.parse::<u64>().unwrap() + 1
}

/// A merge that copies most row groups unchanged fetches every byte of the inputs' row
/// groups once: the row groups copied are fetched once (for the order check and the copy
/// together), those merged once, and no two ranged GETs of an object overlap (counted at
/// the proxy, so at the server).
#[test]
fn a_passthrough_merge_fetches_each_byte_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("passthrough-once");
    let paths = time_partitioned(d);
    let urls = upload(&b, &paths);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let locals: Vec<&str> = paths.iter().map(|p| s(p)).collect();
    let proxy = FaultProxy::start(servers().s3);
    let merged = d.join("merged.parquet");
    ok_through(&proxy, &[&["merge", "-q", "--passthrough", "never", "-o", s(&merged)], &locals[..]].concat());
    let before = proxy.seen().len();
    let target = format!("s3://{b}/out/merged.parquet");
    let out = corank_s3_command()
        // Any codec copied (the inputs' is not the output's).
        .args([&["merge", "-q", "--json", "--passthrough", "always", "-o", &target], &urls[..]].concat())
        .args(["--storage-option", &proxy.endpoint_option()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let copied = v["passthrough_row_groups"].as_u64().unwrap();
    assert!(copied >= 8, "most row groups copied unchanged: {v}");
    let got = d.join("got.parquet");
    std::fs::write(&got, get(&b, "out/merged.parquet")).unwrap();
    assert_eq!(rows(&got), rows(&merged), "the merge with passthrough");
    for (name, path) in ["day0", "day1", "day2", "day3"].iter().zip(&paths) {
        let key = format!("in/{name}.parquet");
        let gets: Vec<Seen> = proxy.seen()[before..].iter().filter(|r| get_of(r, &key) && r.if_match.is_some()).cloned().collect();
        // Only the GETs the server answered: object_store sends a request again after a 5xx
        // or a timeout (a loaded server's), and a retry is not a second fetch of the bytes.
        let mut ranges: Vec<std::ops::Range<u64>> = gets
            .iter()
            .filter(|r| r.status.is_some_and(|s| (200..300).contains(&s)))
            .map(|r| byte_range(r.range.as_deref().expect("a ranged GET")))
            .collect();
        ranges.sort_by_key(|r| r.start);
        for pair in ranges.windows(2) {
            assert!(pair[0].end <= pair[1].start, "{key}: bytes fetched twice: {ranges:?}; its GETs: {gets:?}");
        }
        let fetched: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let size = std::fs::metadata(path).unwrap().len();
        assert!(fetched <= size, "{key}: {fetched} bytes fetched of {size}");
        assert!(ranges.len() >= 4, "{key}: its row groups fetched: {ranges:?}");
    }
}

/// Ctrl-C while a merge S3 → S3 waits for its read-ahead: the inputs' first three row groups
/// answered, their last stalled at the proxy (fetched ahead, never answered). The binary
/// ends by the signal at once (not after the stalled requests, nor their retries), with no
/// object written, no multipart upload left open and no file left in its working or
/// temporary directory. (Whether an upload is open by then is not up to the test: the
/// encoders share rayon's threads with the readers waiting for the stalled row groups.)
#[test]
fn ctrl_c_during_a_read_ahead_leaves_nothing() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("interrupted-read");
    let paths = inputs(d);
    let urls = upload(&b, &paths);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let proxy = FaultProxy::start(servers().s3);
    for (name, path) in ["a", "b", "c"].iter().zip(&paths) {
        let footer = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&std::fs::File::open(path).unwrap()).unwrap();
        let last = footer.row_group(3).columns().iter().map(|c| c.byte_range().0).min().unwrap();
        let key = format!("in/{name}.parquet");
        proxy.fault(usize::MAX, Fault::Stall, move |r| {
            get_of(r, &key) && r.if_match.is_some() && r.range.as_deref().is_some_and(|h| byte_range(h).start >= last)
        });
    }
    let (work, tmp) = (d.join("work"), d.join("tmp"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let target = format!("s3://{b}/out/interrupted.parquet");
    let mut child = corank_s3_command()
        .current_dir(&work)
        .env("TMPDIR", &tmp)
        // Windows of a few thousand rows: rounds merge what the first three row groups of
        // each input hold before the readers wait (a large limit's first window waits).
        .args(
            [&["merge", "-q", "--engine", "cpu", "--memory-limit", "16MiB", "--row-group-size", "7000", "-o", &target], &urls[..]].concat(),
        )
        .args(["--storage-option", &proxy.endpoint_option(), "--storage-option", "part_size=64KiB"])
        .spawn()
        .expect("the corank binary runs");
    let start = Instant::now();
    loop {
        if proxy.faults_served().iter().any(|r| r.fault == Some(Fault::Stall)) {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the merge ended with its row groups stalled");
        assert!(start.elapsed() < Duration::from_secs(60), "no stalled read-ahead after 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) with the pid of our own child; no memory is involved.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    // Well before the stalled requests end (or time out): the signal does not wait for them.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < crate::fault_proxy::STALL / 2, "the merge did not end on Ctrl-C");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status.signal(), Some(libc::SIGINT), "ended by the signal: {status}");
    let (keys, uploads) = keys_and_uploads(&b);
    assert!(keys.iter().all(|k| k.starts_with("in/")), "no object written: {keys:?}");
    assert!(uploads.is_empty(), "no upload left open: {uploads:?}");
    for left in [&work, &tmp] {
        let files: Vec<_> = std::fs::read_dir(left).unwrap().collect();
        assert!(files.is_empty(), "{}: {files:?} left behind", left.display());
    }
}

/// An upload's parts over plain HTTP carry their SHA-256 in the signature by default (the
/// only check of the body there); `unsigned_payload=true` sends them unsigned, as corank
/// does over HTTPS (config.rs's unit test), and the object is the same.
#[test]
fn upload_parts_are_signed_over_plain_http_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bucket("payload-signing");
    let paths = inputs(d);
    let urls = upload(&b, &paths);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let proxy = FaultProxy::start(servers().s3);
    let mut objects = Vec::new();
    for (name, extra) in [("signed", None), ("unsigned", Some("unsigned_payload=true"))] {
        let before = proxy.seen().len();
        let target = format!("s3://{b}/out/{name}.parquet");
        let mut args: Vec<&str> = vec!["merge", "-q", "--storage-option", "part_size=256KiB", "-o", &target];
        if let Some(option) = extra {
            args.extend(["--storage-option", option]);
        }
        ok_through(&proxy, &[&args[..], &urls[..]].concat());
        let parts: Vec<Seen> = proxy.seen()[before..].iter().filter(|r| part(r, 1) || part(r, 2)).cloned().collect();
        assert_eq!(parts.len(), 2, "{name}: parts 1 and 2 seen");
        for p in &parts {
            let hash = p.content_sha256.as_deref().unwrap_or_default();
            match extra {
                None => assert!(hash.len() == 64 && hash.bytes().all(|c| c.is_ascii_hexdigit()), "{name}: {hash}"),
                Some(_) => assert_eq!(hash, "UNSIGNED-PAYLOAD", "{name}"),
            }
        }
        objects.push(get(&b, &format!("out/{name}.parquet")));
    }
    assert_eq!(objects[0], objects[1], "the same object either way");
}

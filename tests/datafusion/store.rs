//! SQL over sorted Parquet files in an S3 bucket (moto's server, `common::moto`) registered
//! on the session: the same plans (node for node, partition for partition) and the same
//! answers as over the same files on local disk. The rule proves the files' order from
//! footers read through the session's object store registry (or DataFusion's file metadata
//! cache), splits the files of overlapping row groups into runs, and re-sorts only what it
//! cannot read.

use crate::common::moto::{bucket, put, servers};
use crate::datagen::{write_lineitem_files, FileLayout, LINEITEM_KEY};
use arrow::array::*;
use arrow::datatypes::SchemaRef;
use corank::datafusion::{session_context, CoRankMergeExec, SessionStateBuilderExt, SortedRowGroupsTable};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan, ExecutionPlanProperties};
use datafusion::prelude::*;
use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn config() -> SessionConfig {
    SessionConfig::new().with_target_partitions(4)
}

/// The files of `dir`, put under `prefix` in `bucket`, by name.
fn upload(bucket: &str, prefix: &str, paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            put(bucket, &format!("{prefix}/{name}"), &std::fs::read(p).unwrap());
            format!("s3://{bucket}/{prefix}/{name}")
        })
        .collect()
}

/// An S3 store of `bucket` on the test server.
fn s3(bucket: &str) -> Arc<dyn ObjectStore> {
    let store = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(format!("http://127.0.0.1:{}", servers().s3))
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap();
    Arc::new(store)
}

/// A session with corank and `bucket`'s store registered; with `keep_footers = false`, a
/// file metadata cache that keeps nothing, so that every footer the rule needs it reads
/// through the registry (DataFusion reads them as it plans too, and would have cached them).
fn s3_session(config: SessionConfig, bucket: &str, keep_footers: bool) -> SessionContext {
    let mut runtime = RuntimeEnvBuilder::new();
    if !keep_footers {
        runtime = runtime.with_metadata_cache_limit(0);
    }
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime.build_arc().unwrap())
        .with_default_features()
        .with_corank()
        .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.register_object_store(ObjectStoreUrl::parse(format!("s3://{bucket}")).unwrap().as_ref(), s3(bucket));
    ctx
}

/// The plan (as text), the plan, and the result of `sql`.
async fn run(ctx: &SessionContext, sql: &str) -> (String, Arc<dyn ExecutionPlan>, Vec<RecordBatch>) {
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let text = displayable(plan.as_ref()).indent(true).to_string();
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
    (text, plan, batches)
}

/// The plan's shape: each node's name at its depth (the files' names left out).
fn shape(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let depth = l.len() - l.trim_start().len();
            let name: String = l.trim_start().chars().take_while(|c| c.is_alphanumeric()).collect();
            format!("{depth}:{name}")
        })
        .collect()
}

fn count(text: &str, node: &str) -> usize {
    text.lines().filter(|l| l.trim_start().starts_with(&format!("{node}:"))).count()
}

/// Partitions of the merge's input, `None` without a `CoRankMergeExec`.
fn merged_partitions(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<&CoRankMergeExec> {
        plan.downcast_ref::<CoRankMergeExec>().or_else(|| plan.children().into_iter().find_map(find))
    }
    find(plan).map(|m| m.input().output_partitioning().partition_count())
}

fn keys(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column_by_name(LINEITEM_KEY).unwrap().as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
        .collect()
}

/// The rows of `batches` whose key is below `key`.
fn below(batches: &[RecordBatch], key: i64) -> Vec<RecordBatch> {
    batches
        .iter()
        .map(|b| {
            let k = b.column_by_name(LINEITEM_KEY).unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
            let keep = BooleanArray::from_iter(k.values().iter().map(|&v| Some(v < key)));
            arrow::compute::filter_record_batch(b, &keep).unwrap()
        })
        .collect()
}

/// The rows of `batches` as sorted arrow-row bytes: the multiset of rows.
fn row_multiset(batches: &[RecordBatch], schema: &SchemaRef) -> Vec<Vec<u8>> {
    let fields: Vec<_> = schema.fields().iter().map(|f| arrow::row::SortField::new(f.data_type().clone())).collect();
    let converter = arrow::row::RowConverter::new(fields).unwrap();
    let mut out = vec![];
    for b in batches {
        let cols: Vec<ArrayRef> = schema.fields().iter().map(|f| Arc::clone(b.column_by_name(f.name()).unwrap())).collect();
        let rows = converter.convert_columns(&cols).unwrap();
        out.extend(rows.iter().map(|r| r.as_ref().to_vec()));
    }
    out.sort();
    out
}

/// The same query over the local files and over the bucket: the same plan shape, merge
/// partitions and answer (rows in the same key order, the same rows). Returns the plan text
/// and merge partitions over the bucket.
async fn same_as_local(local: &SessionContext, remote: &SessionContext, sql: &str) -> (String, Option<usize>) {
    let (local_text, local_plan, want) = run(local, sql).await;
    let (text, plan, got) = run(remote, sql).await;
    assert_eq!(shape(&text), shape(&local_text), "{sql}: plans differ\nS3:\n{text}\nlocal:\n{local_text}");
    assert_eq!(merged_partitions(&plan), merged_partitions(&local_plan), "{sql}\nS3:\n{text}\nlocal:\n{local_text}");
    let got_keys = keys(&got);
    assert!(got_keys.windows(2).all(|w| w[0] <= w[1]), "{sql}: not sorted\n{text}");
    assert_eq!(got_keys, keys(&want), "{sql}\n{text}");
    // Under a LIMIT, which of the rows tied at the last key come is the files' order (the
    // local listing's and the bucket's may differ): the rows before them must be the same.
    let (got, want) = match (sql.contains("LIMIT"), got_keys.last()) {
        (true, Some(&last)) => (below(&got, last), below(&want, last)),
        _ => (got, want),
    };
    let schema = want[0].schema();
    assert_eq!(row_multiset(&got, &schema), row_multiset(&want, &schema), "{sql}\n{text}");
    (text, merged_partitions(&plan))
}

fn dir_url(dir: &Path) -> String {
    dir.display().to_string()
}

/// `CREATE EXTERNAL TABLE t` over `location`.
async fn create_table(ctx: &SessionContext, location: &str, with_order: &str) {
    ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{location}' {with_order}")).await.unwrap();
}

/// Sorted files and files of overlapping sorted row groups, through `CREATE EXTERNAL TABLE`
/// over the bucket, with and without `LIMIT` and `WITH ORDER`, with the footers in
/// DataFusion's file metadata cache (read while planning) and without (read by the rule
/// through the registry, on this multi-thread runtime).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_over_a_bucket_plans_and_answers_as_local_files() {
    let b = bucket("df-sql");
    let dir = tempfile::tempdir().unwrap();
    for (layout, name, want_parts) in [(FileLayout::Sorted, "sorted", 4), (FileLayout::RowGroupsSorted, "overlapping", 40)] {
        let local_dir = dir.path().join(name);
        // 4 files of 20,000 rows, row groups of 2,000 rows.
        let paths = write_lineitem_files(&local_dir, 4, 20_000, 2_000, layout, 17).unwrap();
        upload(&b, name, &paths);
        for (with_order, sql) in [
            ("", "SELECT * FROM t ORDER BY l_orderkey"),
            ("", "SELECT * FROM t ORDER BY l_orderkey LIMIT 1000"),
            ("WITH ORDER (l_orderkey ASC NULLS LAST)", "SELECT l_orderkey, l_comment FROM t ORDER BY l_orderkey"),
        ] {
            for cached in [true, false] {
                let local = session_context(config());
                create_table(&local, &dir_url(&local_dir), with_order).await;
                let remote = s3_session(config(), &b, cached);
                create_table(&remote, &format!("s3://{b}/{name}/"), with_order).await;
                let (text, parts) = same_as_local(&local, &remote, sql).await;
                assert_eq!(count(&text, "CoRankMergeExec"), 1, "{name}, {sql}:\n{text}");
                assert_eq!(count(&text, "SortExec"), 0, "{name}, {sql}: the files merge without a sort:\n{text}");
                assert_eq!(parts, Some(want_parts), "{name}, {sql}:\n{text}");
            }
        }
    }
}

/// On a current-thread runtime the rule cannot wait for the store (the runtime's one thread
/// would serve the request): footers DataFusion read while planning are in its cache and
/// prove the files as local files are proven; without them the files are not proven, and
/// their partitions are sorted below the merge: the same answer, never a wrong one.
#[tokio::test]
async fn a_current_thread_runtime_proves_from_the_cache_or_sorts() {
    let b = bucket("df-current-thread");
    let dir = tempfile::tempdir().unwrap();
    let paths = write_lineitem_files(dir.path(), 3, 10_000, 2_000, FileLayout::RowGroupsSorted, 19).unwrap();
    upload(&b, "in", &paths);
    let sql = "SELECT * FROM t ORDER BY l_orderkey";
    let local = session_context(config());
    create_table(&local, &dir_url(dir.path()), "").await;
    let remote = s3_session(config(), &b, true);
    create_table(&remote, &format!("s3://{b}/in/"), "").await;
    let (_, parts) = same_as_local(&local, &remote, sql).await;
    assert_eq!(parts, Some(15));

    let (local_text, _, want) = run(&local, sql).await;
    assert_eq!(count(&local_text, "SortExec"), 0, "{local_text}");
    let remote = s3_session(config(), &b, false);
    create_table(&remote, &format!("s3://{b}/in/"), "").await;
    let (text, plan, got) = run(&remote, sql).await;
    assert_eq!(count(&text, "SortExec"), 1, "unproven files are sorted below the merge:\n{text}");
    // The partitions as DataFusion planned them (the local plan's, before the split).
    assert_eq!(merged_partitions(&plan), Some(4), "{text}");
    assert_eq!(keys(&got), keys(&want), "{text}");
    assert_eq!(row_multiset(&got, &want[0].schema()), row_multiset(&want, &want[0].schema()));
}

/// `SortedRowGroupsTable` over the objects: the same row-group partitions, plans and
/// answers as over the local files, with and without `LIMIT`; and its errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sorted_row_groups_table_over_a_bucket() {
    let b = bucket("df-row-groups");
    let dir = tempfile::tempdir().unwrap();
    let paths = write_lineitem_files(dir.path(), 3, 12_000, 2_000, FileLayout::RowGroupsSorted, 23).unwrap();
    let urls = upload(&b, "rg", &paths);
    let local_table = SortedRowGroupsTable::try_new(&paths, None).unwrap();
    let local = session_context(config());
    local.register_table("t", Arc::new(local_table.clone())).unwrap();
    let remote = s3_session(config(), &b, true);
    let table = SortedRowGroupsTable::try_new_in_store(&remote.runtime_env(), &urls, None).await.unwrap();
    assert_eq!(table.num_row_groups(), local_table.num_row_groups());
    assert_eq!(table.num_row_groups(), 18);
    assert_eq!(table.order(), local_table.order());
    assert_eq!(table.paths().map(|p| p.to_str().unwrap().to_string()).collect::<Vec<_>>(), urls);
    remote.register_table("t", Arc::new(table)).unwrap();
    for sql in ["SELECT * FROM t ORDER BY l_orderkey", "SELECT * FROM t ORDER BY l_orderkey LIMIT 777"] {
        let (text, parts) = same_as_local(&local, &remote, sql).await;
        assert_eq!(count(&text, "SortExec"), 0, "{sql}:\n{text}");
        assert_eq!(parts, Some(18), "{sql}:\n{text}");
    }
    // The footers the rule reads, through the registry where the cache keeps none.
    let forgetful = s3_session(config(), &b, false);
    let table = SortedRowGroupsTable::try_new_in_store(&forgetful.runtime_env(), &urls, None).await.unwrap();
    forgetful.register_table("t", Arc::new(table)).unwrap();
    let (text, parts) = same_as_local(&local, &forgetful, "SELECT * FROM t ORDER BY l_orderkey").await;
    assert_eq!((count(&text, "SortExec"), parts), (0, Some(18)), "{text}");

    // Errors name the URL.
    let bare = session_context(config());
    let err = SortedRowGroupsTable::try_new_in_store(&bare.runtime_env(), &urls, None).await.unwrap_err().to_string();
    assert!(err.contains(&urls[0]), "{err}");
    let missing = format!("s3://{b}/rg/missing.parquet");
    let err =
        SortedRowGroupsTable::try_new_in_store(&remote.runtime_env(), std::slice::from_ref(&missing), None).await.unwrap_err().to_string();
    assert!(err.contains(&missing), "{err}");
    let other = format!("s3://other-{b}/rg/a.parquet");
    let err = SortedRowGroupsTable::try_new_in_store(&remote.runtime_env(), &[urls[0].clone(), other.clone()], None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&other) && err.contains("one store"), "{err}");
    let err = SortedRowGroupsTable::try_new_in_store(&remote.runtime_env(), &["no-url.parquet"], None).await.unwrap_err().to_string();
    assert!(err.contains("not a URL"), "{err}");
}

/// `register_store` gives a session the store corank's own file functions use (here set up
/// by storage options): SQL over the bucket then needs no store of the caller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_store_uses_corank_s_store_settings() {
    let b = bucket("df-register-store");
    let dir = tempfile::tempdir().unwrap();
    let paths = write_lineitem_files(dir.path(), 2, 10_000, 2_000, FileLayout::RowGroupsSorted, 29).unwrap();
    upload(&b, "in", &paths);
    // This test binary's only user of corank's store settings.
    let endpoint = format!("http://127.0.0.1:{}", servers().s3);
    corank::parquet::store::set_storage_options([
        ("endpoint", endpoint.as_str()),
        ("allow_http", "true"),
        ("region", "us-east-1"),
        ("access_key_id", "test"),
        ("secret_access_key", "test"),
    ])
    .unwrap();
    let local = session_context(config());
    create_table(&local, &dir_url(dir.path()), "").await;
    let remote = session_context(config());
    corank::datafusion::register_store(&remote.runtime_env(), &format!("s3://{b}/in/")).unwrap();
    create_table(&remote, &format!("s3://{b}/in/"), "").await;
    let (text, parts) = same_as_local(&local, &remote, "SELECT * FROM t ORDER BY l_orderkey").await;
    assert_eq!((count(&text, "SortExec"), parts), (0, Some(10)), "{text}");
}

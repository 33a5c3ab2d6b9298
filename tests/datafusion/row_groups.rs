//! Sorted row groups as partitions: files whose row groups are each sorted (the files as a
//! whole are not) merge through CoRankMergeExec; the result equals a full sort.

use crate::common::{sorted_run, Rng};
use arrow::array::*;
use arrow::compute::SortOptions;
use arrow::datatypes::DataType;
use corank::datafusion::session_context;
use corank::datafusion::SortedRowGroupsTable;
use corank::SortKey;
use datafusion::physical_plan::displayable;
use datafusion::prelude::*;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;
use std::path::PathBuf;
use std::sync::Arc;

/// Writes a file of `groups` row groups, each an independently sorted run of (k0, k1) by
/// `options`; with `metadata`, each row group says so in `sorting_columns`.
fn write_file(path: &std::path::Path, rng: &mut Rng, groups: usize, options: &[SortOptions], metadata: bool, first_id: u64) -> u64 {
    let types = [DataType::Int32, DataType::Utf8];
    let mut props = WriterProperties::builder().set_max_row_group_row_count(Some(1 << 20));
    if metadata {
        props = props.set_sorting_columns(Some(
            options
                .iter()
                .enumerate()
                .map(|(i, o)| SortingColumn { column_idx: i as i32, descending: o.descending, nulls_first: o.nulls_first })
                .collect(),
        ));
    }
    let mut id = first_id;
    let mut writer: Option<ArrowWriter<std::fs::File>> = None;
    for _ in 0..groups {
        let n = rng.below(800) as usize + 1;
        let run = sorted_run(rng, &types, options, n, 30, 0.1, id);
        id += n as u64;
        let w = writer.get_or_insert_with(|| {
            ArrowWriter::try_new(std::fs::File::create(path).unwrap(), run.schema(), Some(props.clone().build())).unwrap()
        });
        w.write(&run).unwrap();
        w.flush().unwrap(); // ends the row group
    }
    writer.unwrap().close().unwrap();
    id
}

async fn sorted_ids(ctx: &SessionContext, sql: &str) -> (Vec<u64>, String) {
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    let text = displayable(plan.as_ref()).indent(true).to_string();
    let batches = df.collect().await.unwrap();
    let ids = batches
        .iter()
        .flat_map(|b| b.column_by_name("id").unwrap().as_any().downcast_ref::<UInt64Array>().unwrap().values().to_vec())
        .collect();
    (ids, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_groups_merge_like_a_full_sort() {
    let mut rng = Rng::new(21);
    for case in 0..6 {
        let options = [
            SortOptions { descending: case % 2 == 1, nulls_first: case % 3 == 0 },
            SortOptions { descending: false, nulls_first: case % 2 == 0 },
        ];
        let dir = tempfile::tempdir().unwrap();
        let mut paths: Vec<PathBuf> = vec![];
        let mut id = 0;
        for f in 0..(1 + case) {
            let p = dir.path().join(format!("f{f}.parquet"));
            let groups = 1 + rng.below(6) as usize;
            id = write_file(&p, &mut rng, groups, &options, true, id);
            paths.push(p);
        }
        let table = SortedRowGroupsTable::try_new(&paths, None).unwrap();
        assert_eq!(table.order().len(), 2);
        let ctx = session_context(SessionConfig::new().with_target_partitions(4));
        ctx.register_table("t", Arc::new(table)).unwrap();
        let order = |c: &str, o: SortOptions| {
            format!("{c} {} NULLS {}", if o.descending { "DESC" } else { "ASC" }, if o.nulls_first { "FIRST" } else { "LAST" })
        };
        let by = format!("{}, {}", order("k0", options[0]), order("k1", options[1]));
        let (ids, text) = sorted_ids(&ctx, &format!("SELECT * FROM t ORDER BY {by}")).await;
        // The stable full sort (ties by id, which numbers rows in file and row-group order).
        let stock = SessionContext::new();
        for (i, p) in paths.iter().enumerate() {
            stock.register_parquet(format!("f{i}"), p.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        }
        let union: Vec<String> = (0..paths.len()).map(|i| format!("SELECT * FROM f{i}")).collect();
        let (expected, _) = sorted_ids(&stock, &format!("SELECT * FROM ({}) ORDER BY {by}, id", union.join(" UNION ALL "))).await;
        assert_eq!(ids, expected, "case {case}\n{text}");
        if table_partitions(&text) > 1 {
            assert!(text.contains("CoRankMergeExec"), "{text}");
            assert!(!text.contains("SortExec"), "row groups must merge, not re-sort:\n{text}");
        }
    }
}

fn table_partitions(plan_text: &str) -> usize {
    plan_text.matches(".parquet").count()
}

#[tokio::test]
async fn declared_order_and_missing_metadata() {
    let mut rng = Rng::new(4);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("plain.parquet");
    let asc = [SortOptions { descending: false, nulls_first: false }, SortOptions { descending: false, nulls_first: false }];
    write_file(&p, &mut rng, 3, &asc, false, 0);
    let err = SortedRowGroupsTable::try_new(std::slice::from_ref(&p), None).unwrap_err();
    assert!(err.to_string().contains("row group 0 has no sorting_columns"), "{err}");
    let table = SortedRowGroupsTable::try_new(std::slice::from_ref(&p), Some(vec![SortKey::asc("k0"), SortKey::asc("k1")])).unwrap();
    assert_eq!(table.num_row_groups(), 3);
    let ctx = session_context(SessionConfig::new());
    ctx.register_table("t", Arc::new(table)).unwrap();
    let (ids, text) = sorted_ids(&ctx, "SELECT * FROM t ORDER BY k0 ASC NULLS LAST, k1 ASC NULLS LAST LIMIT 50").await;
    assert_eq!(ids.len(), 50);
    assert!(text.contains("CoRankMergeExec"), "{text}");
    let err = SortedRowGroupsTable::try_new(std::slice::from_ref(&p), Some(vec![SortKey::asc("nope")])).unwrap_err();
    assert!(err.to_string().contains("'nope'"), "{err}");
    let missing = dir.path().join("missing.parquet");
    let err = SortedRowGroupsTable::try_new(&[missing], None).unwrap_err();
    assert!(err.to_string().contains("missing.parquet"), "{err}");
}

/// A plan over row-group partitions survives a plan codec (as Ballista ships plans to its
/// executors): datafusion-proto drops a file's access plan, so each piece also carries the
/// byte range of its row groups. Without it every decoded partition read the whole file and
/// the rows came back several times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_group_partitions_survive_a_plan_codec() {
    use corank::datafusion::CoRankCodec;
    use datafusion_proto::bytes::{physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec};
    let mut rng = Rng::new(5);
    let options = [SortOptions { descending: false, nulls_first: false }; 2];
    let dir = tempfile::tempdir().unwrap();
    let mut paths: Vec<PathBuf> = vec![];
    let mut id = 0;
    for f in 0..2 {
        let p = dir.path().join(format!("f{f}.parquet"));
        id = write_file(&p, &mut rng, 4, &options, true, id);
        paths.push(p);
    }
    let sql = "SELECT * FROM t ORDER BY k0 ASC NULLS LAST, k1 ASC NULLS LAST";
    // Twice: the row groups as a table's partitions, and a listing table whose files the
    // rule splits into row-group runs (the row groups overlap, the files claim the order).
    for listing in [false, true] {
        let ctx = session_context(SessionConfig::new().with_target_partitions(4));
        if listing {
            let ddl = format!(
                "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}/' WITH ORDER (k0 ASC NULLS LAST, k1 ASC NULLS LAST)",
                dir.path().display()
            );
            ctx.sql(&ddl).await.unwrap();
        } else {
            ctx.register_table("t", Arc::new(SortedRowGroupsTable::try_new(&paths, None).unwrap())).unwrap();
        }
        let (expected, text) = sorted_ids(&ctx, sql).await;
        assert_eq!(expected.len() as u64, id, "{text}");
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let bytes = physical_plan_to_bytes_with_extension_codec(plan, &CoRankCodec).unwrap();
        let back = physical_plan_from_bytes_with_extension_codec(&bytes, &ctx.task_ctx(), &CoRankCodec).unwrap();
        let batches = datafusion::physical_plan::collect(back, ctx.task_ctx()).await.unwrap();
        let ids: Vec<u64> = batches
            .iter()
            .flat_map(|b| b.column_by_name("id").unwrap().as_any().downcast_ref::<UInt64Array>().unwrap().values().to_vec())
            .collect();
        assert_eq!(ids, expected, "listing {listing}: the decoded plan differs\n{text}");
    }
}

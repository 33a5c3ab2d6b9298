//! The proto round trip: a plan holding CoRankMergeExec goes to bytes and back, and the
//! decoded plan gives the same rows.

use arrow::array::{Int64Array, RecordBatch};
use arrow::compute::SortOptions;
use corank::datafusion::{CoRankCodec, CoRankMergeExec, MergeSettings};
use corank::{Devices, Engine, EngineOptions, Kernel, OnGpuFailure};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::col;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
use datafusion_proto::bytes::{physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec};
use datafusion_proto::physical_plan::{DefaultPhysicalProtoConverter, PhysicalExtensionCodec};
use std::sync::Arc;

#[tokio::test]
async fn plan_with_the_node_round_trips() {
    let part = |v: Vec<i64>| vec![RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(v)) as _)]).unwrap()];
    let data = vec![part(vec![9, 7, 7, 1]), part(vec![8, 7, 2])];
    let schema = data[0][0].schema();
    let source = MemorySourceConfig::try_new_exec(&data, schema.clone(), None).unwrap();
    let ordering =
        LexOrdering::new([PhysicalSortExpr::new(col("k", &schema).unwrap(), SortOptions { descending: true, nulls_first: false })])
            .unwrap();
    // Every engine option travels: engine, kernel, device, gpu_min_rows, on_gpu_failure.
    let engine = EngineOptions::default()
        .with_engine(Engine::Cpu)
        .with_kernel(Kernel::Circular)
        .with_device(2)
        .with_gpu_min_rows(12345)
        .with_on_gpu_failure(OnGpuFailure::Error);
    let settings = MergeSettings { engine, window_rows: 3 };
    let plan: Arc<dyn ExecutionPlan> = Arc::new(CoRankMergeExec::new(ordering, source).with_fetch(Some(5)).with_settings(settings.clone()));

    let bytes = physical_plan_to_bytes_with_extension_codec(Arc::clone(&plan), &CoRankCodec).unwrap();
    let ctx = TaskContext::default();
    let back = physical_plan_from_bytes_with_extension_codec(&bytes, &ctx, &CoRankCodec).unwrap();
    assert_eq!(displayable(back.as_ref()).indent(true).to_string(), displayable(plan.as_ref()).indent(true).to_string());
    let node = back.downcast_ref::<CoRankMergeExec>().unwrap();
    assert_eq!(node.settings(), &settings);
    assert_eq!(node.fetch(), Some(5));
    let a = collect(plan, Arc::new(TaskContext::default())).await.unwrap();
    let b = collect(back, Arc::new(TaskContext::default())).await.unwrap();
    assert_eq!(a, b);
    let k: Vec<i64> = b.iter().flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()).collect();
    assert_eq!(k, [9, 8, 7, 7, 7]);
}

/// Every form of the device choice travels (one ordinal, a set, all).
#[test]
fn devices_travel() {
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, false)]));
    for devices in [Devices::One(7), Devices::Set(0b1011), Devices::All] {
        let source = MemorySourceConfig::try_new_exec(&[vec![]], schema.clone(), None).unwrap();
        let ordering = LexOrdering::new([PhysicalSortExpr::new(col("k", &schema).unwrap(), SortOptions::default())]).unwrap();
        let settings = MergeSettings { engine: EngineOptions::default().with_devices(devices), window_rows: 10 };
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CoRankMergeExec::new(ordering, source).with_settings(settings.clone()));
        let bytes = physical_plan_to_bytes_with_extension_codec(plan, &CoRankCodec).unwrap();
        let back = physical_plan_from_bytes_with_extension_codec(&bytes, &TaskContext::default(), &CoRankCodec).unwrap();
        assert_eq!(back.downcast_ref::<CoRankMergeExec>().unwrap().settings(), &settings, "{devices}");
    }
}

#[test]
fn garbage_bytes_are_an_error() {
    let ctx = TaskContext::default();
    let source: Arc<dyn ExecutionPlan> =
        MemorySourceConfig::try_new_exec(&[vec![]], Arc::new(arrow::datatypes::Schema::empty()), None).unwrap();
    for bad in [
        &b""[..],
        b"CRNK",
        b"XXXX\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
    ] {
        let err = CoRankCodec.try_decode(bad, &[Arc::clone(&source)], &ctx, &DefaultPhysicalProtoConverter {}).unwrap_err();
        assert!(err.to_string().contains("CoRankMergeExec"), "{err}");
    }
}

//! `merge_stream`: sorted readers in, one merged reader out, in bounded memory.
//!
//! Built on corank's DataFusion node (`corank::datafusion::CoRankMergeExec`, which streams
//! with the frontier merge): each input reader is one input partition; the node holds a
//! window of rows per input, accounted in a memory pool of `memory_limit` bytes, and merges
//! round by round as the output is read. The inputs are read on tokio's blocking threads
//! (a Python reader takes the GIL itself when it needs it); the output is read on the
//! consumer's thread.

use crate::convert::{ArrowStream, import_reader};
use crate::options::{EngineArgs, parse_by};
use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use corank::Error;
use corank::datafusion::{CoRankMergeExec, MergeSettings};
use datafusion::common::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use datafusion::prelude::SessionConfig;
use futures::StreamExt;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::{Arc, Mutex, OnceLock};

/// The runtime the merges' tasks run on (threads named `corank-stream`).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().thread_name("corank-stream").enable_all().build().expect("a tokio runtime")
    })
}

/// One input reader as a DataFusion partition (read once).
struct ReaderPartition {
    schema: SchemaRef,
    reader: Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
}

impl std::fmt::Debug for ReaderPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReaderPartition")
    }
}

impl PartitionStream for ReaderPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let reader = self.reader.lock().map(|mut r| r.take()).unwrap_or(None);
        let schema = Arc::clone(&self.schema);
        let batches = futures::stream::unfold((reader, schema.clone()), |(reader, schema)| async move {
            let mut reader = reader?;
            let (next, reader) = tokio::task::spawn_blocking(move || {
                let next = reader.next();
                (next, reader)
            })
            .await
            .ok()?;
            let batch = match next? {
                // The batch under the partition's schema (layouts cast, nullability and
                // metadata the partition's): DataFusion wants its batches exactly so.
                Ok(b) => crate::convert::conform(b, &schema)
                    .and_then(|b| RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec()))
                    .map_err(|e| DataFusionError::ArrowError(Box::new(e), None)),
                Err(e) => Err(DataFusionError::ArrowError(Box::new(e), None)),
            };
            Some((batch, (Some(reader), schema)))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }
}

/// The merged output, read batch by batch by the consumer.
struct MergedReader {
    schema: SchemaRef,
    stream: Option<SendableRecordBatchStream>,
}

impl Iterator for MergedReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let stream = self.stream.as_mut()?;
        let next = runtime().block_on(stream.next());
        match next {
            None => {
                self.stream = None;
                None
            }
            Some(Ok(b)) => Some(Ok(b)),
            Some(Err(e)) => {
                self.stream = None;
                Some(Err(to_arrow(e)))
            }
        }
    }
}

impl RecordBatchReader for MergedReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// A DataFusion error as the arrow error the stream reports; corank's own error inside
/// is kept (as an external error), so its message is corank's.
fn to_arrow(e: DataFusionError) -> ArrowError {
    match e.find_root() {
        DataFusionError::External(inner) => ArrowError::ExternalError(Box::new(std::io::Error::other(inner.to_string()))),
        DataFusionError::ArrowError(a, _) => ArrowError::ExternalError(Box::new(std::io::Error::other(a.to_string()))),
        root => ArrowError::ExternalError(Box::new(std::io::Error::other(root.message().to_string()))),
    }
}

/// The inputs' common schema: names and types as the first input's, a column nullable where
/// any input's is; inputs whose columns differ are an error naming the input.
fn common_schema(schemas: &[SchemaRef]) -> corank::Result<SchemaRef> {
    let first = &schemas[0];
    let mut fields: Vec<Field> = first.fields().iter().map(|f| f.as_ref().clone()).collect();
    for (r, s) in schemas.iter().enumerate().skip(1) {
        if s.fields().len() != fields.len() {
            return Err(Error::SchemaMismatch { run: r, detail: format!("{} columns instead of {}", s.fields().len(), fields.len()) });
        }
        for (a, b) in fields.iter_mut().zip(s.fields()) {
            if a.name() != b.name() || (a.data_type() != b.data_type() && !crate::convert::castable(b.data_type(), a.data_type())) {
                return Err(Error::SchemaMismatch {
                    run: r,
                    detail: format!("column {}: {} instead of {}: {}", b.name(), b.data_type(), a.name(), a.data_type()),
                });
            }
            if b.is_nullable() {
                a.set_nullable(true);
            }
        }
    }
    Ok(Arc::new(Schema::new_with_metadata(fields, first.metadata().clone())))
}

/// `merge_stream`: the merged rows of sorted readers as a reader.
#[pyfunction]
#[pyo3(signature = (runs, by, engine, check_sorted, batch_size, window_rows, memory_limit))]
pub fn merge_stream(
    runs: &Bound<'_, PyList>,
    by: &str,
    engine: EngineArgs,
    check_sorted: bool,
    batch_size: usize,
    window_rows: usize,
    memory_limit: Option<usize>,
) -> PyResult<ArrowStream> {
    let to_py = crate::errors::to_py;
    let keys = parse_by(by).map_err(to_py)?;
    let settings = MergeSettings { engine: engine.options().map_err(to_py)?, window_rows: window_rows.max(1) };
    if batch_size == 0 {
        return Err(to_py(Error::InvalidArgument("batch size 0".into())));
    }
    let readers = runs.iter().map(|r| import_reader(&r)).collect::<PyResult<Vec<_>>>()?;
    if readers.is_empty() {
        return Ok(ArrowStream::from_batches(Arc::new(Schema::empty()), Vec::new()));
    }
    let schemas: Vec<SchemaRef> = readers.iter().map(|r| r.schema()).collect();
    let schema = common_schema(&schemas).map_err(to_py)?;
    let mut sort_exprs = Vec::with_capacity(keys.len());
    for (k, key) in keys.iter().enumerate() {
        if schema.field_with_name(&key.column).is_err() {
            let run = schemas.iter().position(|s| s.field_with_name(&key.column).is_err()).unwrap_or(0);
            let _ = k;
            return Err(to_py(Error::MissingColumn { run, column: key.column.clone() }));
        }
        let expr = col(&key.column, &schema).map_err(|e| to_py(Error::InvalidArgument(e.to_string())))?;
        sort_exprs.push(PhysicalSortExpr::new(expr, key.options));
    }
    let ordering = LexOrdering::new(sort_exprs).ok_or_else(|| to_py(Error::InvalidArgument("no sort key".into())))?;
    let partitions: Vec<Arc<dyn PartitionStream>> = readers
        .into_iter()
        .map(|reader| {
            Arc::new(ReaderPartition { schema: Arc::clone(&schema), reader: Mutex::new(Some(reader)) }) as Arc<dyn PartitionStream>
        })
        .collect();
    let build = || -> datafusion::common::Result<SendableRecordBatchStream> {
        let input = StreamingTableExec::try_new(Arc::clone(&schema), partitions, None, [ordering.clone()], false, None)?;
        let merge = CoRankMergeExec::new(ordering, Arc::new(input)).with_settings(settings).with_check_sorted(check_sorted);
        let mut runtime_env = RuntimeEnvBuilder::new();
        if let Some(limit) = memory_limit {
            runtime_env = runtime_env.with_memory_limit(limit, 1.0);
        }
        let context = TaskContext::default()
            .with_session_config(SessionConfig::new().with_batch_size(batch_size))
            .with_runtime(runtime_env.build_arc()?);
        let _entered = runtime().enter();
        merge.execute(0, Arc::new(context))
    };
    let stream = build().map_err(|e| crate::errors::internal(e.to_string()))?;
    Ok(ArrowStream::new(Box::new(MergedReader { schema, stream: Some(stream) })))
}

//! Arrow data across the boundary by the Arrow PyCapsule interface: any Python object with
//! `__arrow_c_stream__` (pyarrow tables and readers, Polars and pandas data frames, DuckDB
//! relations) or `__arrow_c_array__` (record batches, struct arrays) comes in without a
//! copy; results go out as a stream capsule that pyarrow reads without a copy.

use arrow::array::{Array, RecordBatch, RecordBatchIterator, RecordBatchReader, StructArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::ffi::{FFI_ArrowArray, FFI_ArrowSchema, from_ffi};
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};
use std::ffi::CStr;

const STREAM: &CStr = c"arrow_array_stream";
const SCHEMA: &CStr = c"arrow_schema";
const ARRAY: &CStr = c"arrow_array";

/// A Python object's Arrow data: a stream (`__arrow_c_stream__`) or one array
/// (`__arrow_c_array__`), imported without copying buffers.
pub fn import_reader(obj: &Bound<'_, PyAny>) -> PyResult<Box<dyn RecordBatchReader + Send>> {
    if obj.hasattr("__arrow_c_stream__")? {
        let capsule = obj.call_method0("__arrow_c_stream__")?;
        let capsule = capsule.cast::<PyCapsule>().map_err(|_| PyTypeError::new_err("__arrow_c_stream__ did not return a PyCapsule"))?;
        let ptr = capsule.pointer_checked(Some(STREAM))?.cast::<FFI_ArrowArrayStream>();
        // SAFETY: the capsule holds a valid `ArrowArrayStream` (its name says so); moving it
        // out leaves a released (empty) one behind, which the capsule's destructor skips.
        let stream = unsafe { std::ptr::replace(ptr.as_ptr(), FFI_ArrowArrayStream::empty()) };
        let reader = ArrowArrayStreamReader::try_new(stream).map_err(crate::errors::arrow_error)?;
        return Ok(Box::new(reader));
    }
    if obj.hasattr("__arrow_c_array__")? {
        let batch = import_array(obj)?;
        let schema = batch.schema();
        return Ok(Box::new(RecordBatchIterator::new([Ok(batch)], schema)));
    }
    Err(PyTypeError::new_err(format!(
        "expected Arrow data (an object with __arrow_c_stream__ or __arrow_c_array__, such as a pyarrow Table), got {}",
        obj.get_type().name()?
    )))
}

/// One struct array (`__arrow_c_array__`) as a record batch.
fn import_array(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    let pair = obj.call_method0("__arrow_c_array__")?;
    let pair = pair.cast::<PyTuple>().map_err(|_| PyTypeError::new_err("__arrow_c_array__ did not return a tuple"))?;
    if pair.len() != 2 {
        return Err(PyTypeError::new_err("__arrow_c_array__ did not return (schema, array)"));
    }
    let schema_capsule = pair.get_item(0)?;
    let schema_capsule = schema_capsule.cast::<PyCapsule>().map_err(|_| PyTypeError::new_err("expected a schema PyCapsule"))?;
    let array_capsule = pair.get_item(1)?;
    let array_capsule = array_capsule.cast::<PyCapsule>().map_err(|_| PyTypeError::new_err("expected an array PyCapsule"))?;
    let schema_ptr = schema_capsule.pointer_checked(Some(SCHEMA))?.cast::<FFI_ArrowSchema>();
    let array_ptr = array_capsule.pointer_checked(Some(ARRAY))?.cast::<FFI_ArrowArray>();
    // SAFETY: the capsules hold a valid `ArrowSchema` and `ArrowArray` (their names say
    // so). The array is moved out (a released one stays behind for the capsule's
    // destructor); the schema is only read, and outlives this call.
    let data = unsafe {
        let array = std::ptr::replace(array_ptr.as_ptr(), FFI_ArrowArray::empty());
        from_ffi(array, schema_ptr.as_ref())
    }
    .map_err(crate::errors::arrow_error)?;
    if !matches!(data.data_type(), DataType::Struct(_)) {
        return Err(PyTypeError::new_err(format!(
            "expected a table or record batch, got an array of type {} (a struct array works)",
            data.data_type()
        )));
    }
    let array = StructArray::from(data);
    if array.null_count() > 0 {
        return Err(PyTypeError::new_err("a struct array with null rows is not a record batch"));
    }
    Ok(RecordBatch::from(array))
}

/// Every batch of a Python object's Arrow data, with its schema.
pub fn import_batches(obj: &Bound<'_, PyAny>) -> PyResult<(SchemaRef, Vec<RecordBatch>)> {
    let reader = import_reader(obj)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().map_err(crate::errors::arrow_error)?;
    Ok((schema, batches))
}

/// Arrow data on its way to Python: an object with `__arrow_c_stream__`, which pyarrow
/// (`pa.table`, `pa.RecordBatchReader.from_stream`) or any other consumer reads once.
#[pyclass(module = "corank._corank", name = "ArrowStream")]
pub struct ArrowStream {
    reader: std::sync::Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
}

impl ArrowStream {
    pub fn new(reader: Box<dyn RecordBatchReader + Send>) -> Self {
        Self { reader: std::sync::Mutex::new(Some(reader)) }
    }

    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        Self::new(Box::new(RecordBatchIterator::new(batches.into_iter().map(Ok), schema)))
    }
}

#[pymethods]
impl ArrowStream {
    /// The stream as a PyCapsule holding an `ArrowArrayStream` (once).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(&self, py: Python<'py>, requested_schema: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // the schema is the data's; casting is the consumer's
        let reader = self
            .reader
            .lock()
            .ok()
            .and_then(|mut r| r.take())
            .ok_or_else(|| PyTypeError::new_err("this Arrow stream was already consumed"))?;
        PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), STREAM)
    }
}

/// Whether a column of type `from` is cast to `to` when runs meet: the same values in
/// another Arrow layout (string, large string and string view; the binary three), or a
/// column of nulls only (what an empty pandas column exports). Data frame libraries pick
/// these layouts on their own (pandas exports large strings, Polars string views), so runs
/// from different sources hold the same column in different ones.
pub fn castable(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let strings = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    let binaries = |t: &DataType| matches!(t, Binary | LargeBinary | BinaryView);
    from != to && ((strings(from) && strings(to)) || (binaries(from) && binaries(to)) || *from == Null)
}

/// `batch` with the column types of `schema` where [`castable`] allows it (a copy of those
/// columns only); other differences are left for corank to report.
pub fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
    let theirs = batch.schema();
    if theirs.fields().len() != schema.fields().len()
        || !theirs.fields().iter().zip(schema.fields()).any(|(a, b)| a.name() == b.name() && castable(a.data_type(), b.data_type()))
    {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for ((theirs, ours), column) in theirs.fields().iter().zip(schema.fields()).zip(batch.columns()) {
        if theirs.name() == ours.name() && castable(theirs.data_type(), ours.data_type()) {
            columns.push(arrow::compute::cast(column, ours.data_type())?);
            fields.push(theirs.as_ref().clone().with_data_type(ours.data_type().clone()));
        } else {
            columns.push(column.clone());
            fields.push(theirs.as_ref().clone());
        }
    }
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new_with_metadata(fields, theirs.metadata().clone()));
    RecordBatch::try_new(schema, columns)
}

/// The schema the runs merge under, as the library's merge and sort output it: the first
/// run's names, types and metadata (schema and fields), a column nullable where any run's
/// is. Batches need only [`conform`]: the library merges runs whose metadata or
/// nullability differ.
pub fn common_schema(schemas: &[SchemaRef]) -> Option<SchemaRef> {
    let first = schemas.first()?;
    let mut fields: Vec<arrow::datatypes::Field> = first.fields().iter().map(|f| f.as_ref().clone()).collect();
    for s in &schemas[1..] {
        if s.fields().len() != fields.len() {
            continue;
        }
        for (a, b) in fields.iter_mut().zip(s.fields()) {
            if a.name() == b.name() && b.is_nullable() {
                a.set_nullable(true);
            }
        }
    }
    Some(std::sync::Arc::new(arrow::datatypes::Schema::new_with_metadata(fields, first.metadata().clone())))
}

//! The device-side work that callers above the engine ask for, in builds with and without
//! the `gpu` feature: the gather of a merged round's fixed-width columns on the GPU, the
//! pieces of a whole-input sort on the device, and a batched decompression through nvCOMP
//! ([`decompress_on_device`], for Parquet pages). Without the feature every function here
//! answers "not on this build" (`None`, `false`, or `Error::GpuUnavailable`), so the
//! frontier and the DataFusion nodes carry no `cfg(feature = "gpu")` and no `engine::gpu`
//! path of their own. Whether device work is done at all is decided in
//! [`super::placement`]; this module only does it.

use crate::error::Result;
use crate::options::EngineOptions;
use crate::permutation::{Indices, Permutation};
use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::DataType;

#[cfg(not(feature = "gpu"))]
fn not_built() -> crate::Error {
    crate::Error::GpuUnavailable("corank was built without the `gpu` feature".into())
}

/// Bytes a row of a column of `data_type` takes on the device when the device gathers it:
/// the value width of fixed-width types, 16 for byte views (`Utf8View`, `BinaryView`: the
/// views are gathered, the strings stay in the input's buffers); `None` for types the
/// device does not gather, and for every type without the `gpu` feature.
pub fn device_width(data_type: &DataType) -> Option<usize> {
    #[cfg(feature = "gpu")]
    return super::gpu::gather::device_width(data_type);
    #[cfg(not(feature = "gpu"))]
    {
        let _ = data_type;
        None
    }
}

/// Whether the device gathers columns of `data_type` ([`device_width`]).
pub fn gathers_on_device(data_type: &DataType) -> bool {
    device_width(data_type).is_some()
}

/// The width of fixed-width values of `data_type` (`None` for other types, and for every
/// type without the `gpu` feature): the columns a merged round may gather on the device.
fn fixed_width(data_type: &DataType) -> Option<usize> {
    #[cfg(feature = "gpu")]
    return super::gpu::gather::fixed_width(data_type);
    #[cfg(not(feature = "gpu"))]
    {
        let _ = data_type;
        None
    }
}

/// The columns of a round merged on the GPU (`runs`, in the order of `perm`) that gather on
/// the device: those of a fixed-width type, the same in every run, where the device gather
/// of all of them pays ([`super::placement::device_gather_pays`]). `None` where none does
/// (fewer than two runs, no such column, a round merged on the CPU, no `gpu` feature).
pub fn round_columns_on_device(runs: &[RecordBatch], perm: &Permutation) -> Option<Vec<usize>> {
    if perm.engine != crate::options::Engine::Gpu || runs.len() < 2 {
        return None;
    }
    let schema = runs[0].schema();
    let same_type = |c: usize| runs.iter().all(|r| r.schema().field(c).data_type() == schema.field(c).data_type());
    let fixed: Vec<usize> =
        (0..schema.fields().len()).filter(|&c| fixed_width(schema.field(c).data_type()).is_some() && same_type(c)).collect();
    let bytes_per_row: usize = fixed.iter().filter_map(|&c| fixed_width(schema.field(c).data_type())).sum();
    let index_bytes = match perm.indices {
        Indices::U32(_) => 4,
        Indices::U64(_) => 8,
    };
    let pays = super::placement::device_gather_pays(perm.len(), bytes_per_row, index_bytes, rayon::current_num_threads());
    (!fixed.is_empty() && pays).then_some(fixed)
}

/// Gathers `columns` of `runs` in the order of `perm` on the first GPU of
/// `options.devices`, into pooled pinned memory (a merge round's output): one array per
/// column, `perm.len()` rows. Call it on a thread that is not a rayon worker (a device's
/// lock is never taken on one). `Error::GpuUnavailable` without the `gpu` feature.
pub fn gather_round_on_device(
    runs: &[RecordBatch],
    perm: &Permutation,
    columns: &[usize],
    options: &EngineOptions,
) -> Result<Vec<ArrayRef>> {
    #[cfg(feature = "gpu")]
    return super::gpu::gather_fixed_gpu(runs, perm, columns, &super::placement::gpu_options(options));
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (runs, perm, columns, options);
        Err(not_built())
    }
}

/// Whether the device's memory holds a sort of `rows` rows and the gather of every column
/// on the first device of `devices`, now: `key_columns` are the sort columns' types and
/// nullability (bounding the key words' width: each column's value bytes, 32 for a type of
/// no fixed width, whose strings sort by prefix words, and a byte where it may be null, in
/// whole 8-byte words up to the widest key word), `column_types` the output's columns.
/// `Ok(false)` without the `gpu` feature.
pub fn whole_sort_fits(
    rows: usize,
    key_columns: &[(DataType, bool)],
    column_types: &[DataType],
    devices: crate::options::Devices,
) -> Result<bool> {
    #[cfg(feature = "gpu")]
    {
        use super::gpu::{device_bytes_available, whole_sort_device_bytes};
        let key_bytes: usize = key_columns.iter().map(|(t, nullable)| fixed_width(t).unwrap_or(32) + usize::from(*nullable)).sum();
        let key_bytes = key_bytes.next_multiple_of(8).clamp(8, 32);
        let device_row_bytes: usize = column_types.iter().map(|t| device_width(t).unwrap_or(16) + 1).sum();
        Ok(whole_sort_device_bytes(rows, key_bytes, device_row_bytes) <= device_bytes_available(devices.first())?)
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (rows, key_columns, column_types, devices);
        Ok(false)
    }
}

/// Gathers every column of `batches` (the whole input of a sort) in the order of `perm` on
/// the first GPU of `options.devices`, into ordinary (pageable) memory: one array per
/// column, `perm.len()` rows. Every column must gather on the device ([`gathers_on_device`]).
/// `Error::GpuUnavailable` without the `gpu` feature.
pub fn gather_all_on_device(batches: &[RecordBatch], perm: &Permutation, options: &EngineOptions) -> Result<Vec<ArrayRef>> {
    #[cfg(feature = "gpu")]
    {
        use super::gpu::{gather_fixed_gpu_into, GatherOutput};
        let columns: Vec<usize> = (0..batches.first().map_or(0, |b| b.num_columns())).collect();
        gather_fixed_gpu_into(batches, perm, &columns, &super::placement::gpu_options(options), GatherOutput::Pageable)
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (batches, perm, options);
        Err(not_built())
    }
}

// The nvCOMP entries' one caller is the Parquet reader (`parquet/device/`).
/// Whether nvCOMP loads here (no GPU needed): where it was found, or why not (without the
/// `gpu` feature: not on this build). The first call that finds it absent logs one line.
#[cfg_attr(not(feature = "parquet"), allow(dead_code))]
pub fn nvcomp_availability() -> std::result::Result<String, String> {
    #[cfg(feature = "gpu")]
    return super::gpu::nvcomp::availability();
    #[cfg(not(feature = "gpu"))]
    Err(not_built().to_string())
}

#[cfg(feature = "gpu")]
#[cfg_attr(not(feature = "parquet"), allow(unused_imports))]
pub(crate) use super::gpu::nvcomp::{Decompressed, DeviceOutput};

/// A decompression's output on the device (none without the `gpu` feature).
#[cfg(not(feature = "gpu"))]
#[allow(dead_code)] // never made: without the `gpu` feature nothing runs on a device
pub(crate) struct DeviceOutput(std::convert::Infallible);

#[cfg(not(feature = "gpu"))]
#[allow(dead_code)] // as above
impl DeviceOutput {
    /// The output's length in bytes.
    pub fn len(&self) -> usize {
        match self.0 {}
    }

    /// The output copied to host memory.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        match self.0 {}
    }
}

/// A decompression's result (never made without the `gpu` feature).
#[cfg(not(feature = "gpu"))]
#[allow(dead_code)] // as above
pub(crate) struct Decompressed {
    pub output: DeviceOutput,
    pub statuses: Vec<super::decompress::SpanStatus>,
    pub upload_ms: f32,
    pub device_ms: f32,
}

/// Runs a batched decompression ([`super::decompress::DecompressJob`]) on CUDA device
/// `device` through nvCOMP: `fill` writes the upload image. Call it off rayon's workers
/// (it may wait on a device). `Error::GpuUnavailable` without nvCOMP, a GPU or the `gpu`
/// feature.
#[cfg_attr(not(feature = "parquet"), allow(dead_code))]
pub(crate) fn decompress_on_device(
    device: usize,
    job: &super::decompress::DecompressJob,
    fill: &mut dyn FnMut(&mut [u8]),
) -> Result<Decompressed> {
    #[cfg(feature = "gpu")]
    return super::gpu::nvcomp::decompress(device, job, fill);
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (device, job, fill);
        Err(not_built())
    }
}

#[cfg(feature = "gpu")]
#[cfg_attr(not(feature = "parquet"), allow(unused_imports))]
pub(crate) use super::gpu::parquet_decode::DecodedOnDevice;

/// Decoded pages on the device (none without the `gpu` feature).
#[cfg(not(feature = "gpu"))]
#[allow(dead_code)] // never made: without the `gpu` feature nothing runs on a device
pub(crate) struct DecodedOnDevice {
    never: std::convert::Infallible,
    pub faults: Vec<u32>,
    pub dict_faults: Vec<u32>,
    pub chunk_faults: Vec<u32>,
    pub data_spans: Vec<(usize, usize)>,
}

#[cfg(not(feature = "gpu"))]
#[allow(dead_code)] // as above
impl DecodedOnDevice {
    /// The output copied to host memory.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        match self.never {}
    }

    /// The byte array values copied to host memory.
    pub fn data_to_host(&self) -> Result<Vec<u8>> {
        match self.never {}
    }

    /// The output buffer's device address.
    pub fn ptr(&self) -> u64 {
        match self.never {}
    }

    /// The byte array values buffer's device address.
    pub fn data_ptr(&self) -> Option<u64> {
        match self.never {}
    }
}

/// Decodes Parquet data pages on CUDA device `device` ([`super::decode_job::DecodeJob`],
/// `cuda/parquet_decode.cu`) from `input`, a decompression's output on that device.
/// `Error::GpuUnavailable` without a GPU or the `gpu` feature.
#[cfg_attr(not(feature = "parquet"), allow(dead_code))]
pub(crate) fn decode_on_device(device: usize, input: &DeviceOutput, job: &super::decode_job::DecodeJob) -> Result<DecodedOnDevice> {
    #[cfg(feature = "gpu")]
    return super::gpu::parquet_decode::decode_pages(device, input.ptr(), input.len(), job);
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (device, input, job);
        Err(not_built())
    }
}

/// Runs a device-resident merge round ([`super::resident_job`]: keys encoded, merged and the
/// payload gathered on the device that holds the columns). Call it off rayon's workers.
/// `Error::GpuUnavailable` without a GPU or the `gpu` feature.
#[cfg_attr(not(feature = "parquet"), allow(dead_code))]
pub(crate) fn merge_resident(
    job: &super::resident_job::ResidentJob,
    options: &EngineOptions,
) -> Result<super::resident_job::ResidentOutput> {
    #[cfg(feature = "gpu")]
    return super::gpu::resident::merge_resident(job, &super::placement::gpu_options(options));
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (job, options);
        Err(not_built())
    }
}

//! NVIDIA nvCOMP, loaded at run time (as NVRTC is: never needed to build), and the batched
//! decompression of a [`DecompressJob`] with it.
//!
//! **Finding the library** (`libnvcomp.so.6`, nvCOMP 6; the pip package
//! `nvidia-libnvcomp-cu13` ships it as `nvidia/libnvcomp/lib64/libnvcomp.so.6`), first that
//! loads wins:
//! 1. `CORANK_NVCOMP`: the library's path, or a folder holding it (itself, its `lib64/`, or
//!    the pip package's `nvidia/libnvcomp/lib64/` below it). Where it is set and does not
//!    load, nvCOMP is unavailable (what the user named is not silently replaced);
//! 2. a copy already loaded in the process (the Python package loads the wheel's, as it
//!    loads NVRTC's);
//! 3. the pip package in the Python environments a user expects: `$PYTHONPATH`'s folders;
//!    the running interpreter's (where this process is Python: the Python package, and the
//!    `corank` command pip installs), `$VIRTUAL_ENV`'s and `$CONDA_PREFIX`'s
//!    `lib/python3*/{site,dist}-packages`; the user's `~/.local/lib/python3*/site-packages`;
//!    `/usr/local/lib` and `/usr/lib`'s `python3*/{site,dist}-packages`;
//! 4. the loader's search path (`dlopen("libnvcomp.so.6")`: `LD_LIBRARY_PATH`, the cache).
//!
//! Absent, the Parquet work stays on the CPU: the first caller that asks logs one line
//! (info) saying why, and [`availability`] says it to whoever asks again.
//!
//! **The bindings** are the C API of the 6.0 headers (`nvcomp/zstd.h`, `snappy.h`, `lz4.h`,
//! `shared_types.h`): for each of zstd, snappy and LZ4 the batched decompression, its
//! temporary-size query and its alignment query, plus `nvcompGetProperties` and
//! `nvcompGetStatusString`. The options arguments are passed by value: each codec's
//! `nvcompBatched*DecompressOpts_t` is 64 bytes of 4-byte fields (zstd: `backend`, 60
//! reserved bytes; snappy: `backend`, `sort_before_hw_decompress`, 56 reserved; LZ4:
//! `backend`, `sort_before_hw_decompress`, `data_type`, `bitshuffle_mode`, 48 reserved),
//! and every default is 0 (`NVCOMP_DECOMPRESS_BACKEND_DEFAULT`, no sort, `NVCOMP_TYPE_CHAR`,
//! `NVCOMP_BITSHUFFLE_NONE`), so one `#[repr(C)]` type of sixteen `c_int`s, zeroed, has the
//! size, alignment and contents of each (a 64-byte struct is passed in memory by the x86-64
//! and AArch64 C conventions alike). The loaded library's version must be 6.x, and each
//! codec's required alignments must divide [`SPAN_ALIGN`].
//!
//! **A job** ([`decompress`]): the image (compressed bodies and bytes copied through) is
//! filled by the caller into pinned host memory, followed by the per-span argument arrays
//! nvCOMP reads on the device (input pointers and sizes, output buffer sizes and pointers),
//! and goes up in one copy; one `nvcompBatched*DecompressAsync` per codec present writes
//! into one output buffer; copied spans (adjacent ones merged) are device-to-device copies;
//! each decompressed span's status and decompressed size come back, and a status other than
//! success, or a size other than the span's, is that span's failure. Every call's returned
//! status is checked. nvCOMP documents a corrupt compressed stream as undefined behaviour:
//! the Parquet caller checks the pages' headers, sizes and offsets first, and a stream that
//! lies is caught by the size check only as far as nvCOMP reports it.

// Its one caller is the Parquet reader (`parquet/device/`): unused in builds without it.
#![cfg_attr(not(feature = "parquet"), allow(dead_code))]

use super::context::{gpu, gpu_err, DevBuf};
use super::event::Event;
use crate::engine::decompress::{DecompressJob, DeviceCodec, SpanStatus, SPAN_ALIGN};
use crate::{Error, Result};
use cudarc::driver::{result, sys};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The library's file name (nvCOMP 6's soname).
pub(crate) const SONAME: &str = "libnvcomp.so.6";

/// `nvcompStatus_t` (a C enum: an `int`).
type Status = c_int;
const SUCCESS: Status = 0;

/// Any codec's `nvcompBatched*DecompressOpts_t` (the module doc says why one type serves).
#[repr(C)]
#[derive(Clone, Copy)]
struct DecompressOpts {
    fields: [c_int; 16],
}

const _: () = assert!(std::mem::size_of::<DecompressOpts>() == 64 && std::mem::align_of::<DecompressOpts>() == 4);

/// The defaults of every codec's options (`nvcompBatched*DecompressDefaultOpts`).
const DEFAULT_OPTS: DecompressOpts = DecompressOpts { fields: [0; 16] };

/// `nvcompAlignmentRequirements_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Alignments {
    input: usize,
    output: usize,
    temp: usize,
}

/// `nvcompProperties_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Properties {
    version: u32,
    cudart_version: u32,
}

type AlignmentsFn = unsafe extern "C" fn(DecompressOpts, *mut Alignments) -> Status;
type TempSizeFn = unsafe extern "C" fn(usize, usize, DecompressOpts, *mut usize, usize, sys::CUstream) -> Status;
type DecompressFn = unsafe extern "C" fn(
    *const *const c_void, // device_compressed_chunk_ptrs
    *const usize,         // device_compressed_chunk_bytes
    *const usize,         // device_uncompressed_buffer_bytes
    *mut usize,           // device_uncompressed_chunk_bytes (out)
    usize,                // num_chunks
    *mut c_void,          // device_temp_ptr
    usize,                // temp_bytes
    *const *mut c_void,   // device_uncompressed_chunk_ptrs
    DecompressOpts,       // decompress_opts
    *mut Status,          // device_statuses (out)
    sys::CUstream,        // stream
) -> Status;
type StatusStringFn = unsafe extern "C" fn(Status) -> *const c_char;
type PropertiesFn = unsafe extern "C" fn(*mut Properties) -> Status;

/// One codec's entry points and its alignments.
struct Codec {
    temp_size: TempSizeFn,
    decompress: DecompressFn,
    alignments: Alignments,
}

/// The loaded library. Never unloaded (its code may run on the device's streams until the
/// process ends).
pub(crate) struct Nvcomp {
    path: String,
    version: u32,
    status_string: StatusStringFn,
    codecs: [Codec; 3],
}

impl Nvcomp {
    fn codec(&self, c: DeviceCodec) -> &Codec {
        &self.codecs[DeviceCodec::ALL.iter().position(|&x| x == c).expect("every codec is in ALL")]
    }

    /// A status in words, as nvCOMP says it.
    fn status(&self, s: Status) -> String {
        // SAFETY: nvcompGetStatusString returns a static NUL-terminated string (or null).
        let p = unsafe { (self.status_string)(s) };
        if p.is_null() {
            return format!("nvCOMP status {s}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        format!("{} (nvCOMP status {s})", unsafe { CStr::from_ptr(p) }.to_string_lossy())
    }

    /// "nvCOMP 6.0.0 from PATH".
    pub fn describe(&self) -> String {
        let v = self.version;
        format!("nvCOMP {}.{}.{} from {}", v / 1000, (v % 1000) / 100, v % 100, self.path)
    }
}

static NVCOMP: OnceLock<std::result::Result<Nvcomp, String>> = OnceLock::new();

/// The one line logged (info) when nvCOMP is absent.
pub(crate) fn absent_line(why: &str) -> String {
    format!("corank: nvCOMP is not available ({why}); Parquet pages are decompressed on the CPU")
}

/// `cell`'s value, loaded by `load` on first use; an absence is logged there, once.
fn found<T>(
    cell: &OnceLock<std::result::Result<T, String>>,
    load: impl FnOnce() -> std::result::Result<T, String>,
) -> &std::result::Result<T, String> {
    cell.get_or_init(|| {
        let loaded = load();
        if let Err(e) = &loaded {
            log::info!("{}", absent_line(e));
        }
        loaded
    })
}

/// The library, loaded on first use (its absence logged once, there).
pub(crate) fn nvcomp() -> Result<&'static Nvcomp> {
    found(&NVCOMP, || {
        let n = load(std::env::var_os("CORANK_NVCOMP"))?;
        log::debug!("corank: {}", n.describe());
        Ok(n)
    })
    .as_ref()
    .map_err(|e| Error::GpuUnavailable(format!("nvCOMP: {e}")))
}

/// Whether nvCOMP loads here: where from, or why not. Needs no GPU.
pub(crate) fn availability() -> std::result::Result<String, String> {
    nvcomp().map(Nvcomp::describe).map_err(|e| e.to_string())
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl call
    // on this thread, read at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn dlopen(name: &str, flags: c_int) -> std::result::Result<*mut c_void, String> {
    let c = CString::new(name).map_err(|_| format!("{name:?} holds a NUL byte"))?;
    // SAFETY: a NUL-terminated name; dlopen runs the library's initializers, which nvCOMP's
    // are (it loads no GPU state until called).
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if h.is_null() {
        Err(dlerror())
    } else {
        Ok(h)
    }
}

/// The library in a folder `CORANK_NVCOMP` names.
fn in_folder(dir: &Path) -> PathBuf {
    [dir.join(SONAME), dir.join("lib64").join(SONAME), dir.join("nvidia/libnvcomp/lib64").join(SONAME)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| dir.join(SONAME))
}

/// `base/lib/python3.*/site-packages` (`lib` taken as given).
fn python_dirs(lib: &Path, kinds: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(lib) else { return Vec::new() };
    let mut pythons: Vec<PathBuf> =
        entries.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("python3")).map(|e| e.path()).collect();
    pythons.sort();
    pythons.into_iter().flat_map(|p| kinds.iter().map(move |k| p.join(k))).collect()
}

/// The prefix of the Python interpreter this process is (the Python package's extension,
/// and the `corank` command pip installs, which runs in Python): `PREFIX/bin/python3.X`.
fn running_python_prefix() -> Option<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    name.starts_with("python").then(|| exe.parent()?.parent().map(Path::to_path_buf)).flatten()
}

/// The Python folders where the pip package may be, in the module doc's order.
fn site_dirs() -> Vec<PathBuf> {
    let mut sites: Vec<PathBuf> = Vec::new();
    if let Some(pp) = std::env::var_os("PYTHONPATH") {
        sites.extend(std::env::split_paths(&pp));
    }
    let prefixes = ["VIRTUAL_ENV", "CONDA_PREFIX"].iter().filter_map(|v| std::env::var_os(v).map(PathBuf::from));
    for prefix in running_python_prefix().into_iter().chain(prefixes) {
        sites.extend(python_dirs(&prefix.join("lib"), &["site-packages", "dist-packages"]));
    }
    if let Some(home) = std::env::var_os("HOME") {
        sites.extend(python_dirs(&Path::new(&home).join(".local/lib"), &["site-packages"]));
    }
    for lib in ["/usr/local/lib", "/usr/lib"] {
        sites.extend(python_dirs(Path::new(lib), &["site-packages", "dist-packages"]));
    }
    sites
}

/// The pip package's library in each of `sites` that holds it.
fn pip_libraries(sites: Vec<PathBuf>) -> Vec<PathBuf> {
    sites.into_iter().map(|s| s.join("nvidia/libnvcomp/lib64").join(SONAME)).filter(|p| p.is_file()).collect()
}

/// Finds and binds the library (the module doc's order); `named` is `CORANK_NVCOMP`.
fn load(named: Option<std::ffi::OsString>) -> std::result::Result<Nvcomp, String> {
    let flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
    if let Some(named) = named.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(named);
        let p = if p.is_dir() { in_folder(&p) } else { p };
        let shown = p.display().to_string();
        let h = dlopen(&shown, flags).map_err(|e| format!("CORANK_NVCOMP={shown} does not load: {e}"))?;
        return bind(h, shown);
    }
    if let Ok(h) = dlopen(SONAME, flags | libc::RTLD_NOLOAD) {
        return bind(h, format!("{SONAME} (already loaded)"));
    }
    let mut tried = Vec::new();
    for p in pip_libraries(site_dirs()) {
        let shown = p.display().to_string();
        match dlopen(&shown, flags) {
            Ok(h) => return bind(h, shown),
            Err(e) => tried.push(format!("{shown}: {e}")),
        }
    }
    match dlopen(SONAME, flags) {
        Ok(h) => bind(h, SONAME.into()),
        Err(e) => {
            tried.push(e);
            Err(format!("{SONAME} not found (set CORANK_NVCOMP, or `pip install nvidia-libnvcomp-cu13`): {}", tried.join("; ")))
        }
    }
}

/// `dlsym` of `name` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C type the library declares for `name`.
unsafe fn sym<F: Copy>(h: *mut c_void, name: &str) -> std::result::Result<F, String> {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let c = CString::new(name).expect("symbol names hold no NUL");
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("the library has no {name}"));
    }
    // SAFETY: the caller names the declared type; a function pointer and a data pointer
    // have one size and representation on the platforms libnvcomp ships for.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn bind(h: *mut c_void, path: String) -> std::result::Result<Nvcomp, String> {
    // SAFETY: the type is the 6.0 header's declaration (nvcomp.h), transcribed above.
    let properties: PropertiesFn = unsafe { sym(h, "nvcompGetProperties")? };
    // SAFETY: as above.
    let status_string: StatusStringFn = unsafe { sym(h, "nvcompGetStatusString")? };
    let mut props = Properties::default();
    // SAFETY: writes one nvcompProperties_t.
    let s = unsafe { properties(&mut props) };
    if s != SUCCESS {
        return Err(format!("{path}: nvcompGetProperties failed (status {s})"));
    }
    if props.version / 1000 != 6 {
        return Err(format!("{path} is nvCOMP version {} (semantic version code), corank binds nvCOMP 6", props.version));
    }
    let codec = |name: &str| -> std::result::Result<Codec, String> {
        // SAFETY: as above.
        let alignments_fn: AlignmentsFn = unsafe { sym(h, &format!("nvcompBatched{name}DecompressGetRequiredAlignments"))? };
        let mut a = Alignments::default();
        // SAFETY: options by value, writes one nvcompAlignmentRequirements_t.
        let s = unsafe { alignments_fn(DEFAULT_OPTS, &mut a) };
        if s != SUCCESS {
            return Err(format!("{path}: nvcompBatched{name}DecompressGetRequiredAlignments failed (status {s})"));
        }
        for (what, v) in [("input", a.input), ("output", a.output)] {
            if v == 0 || !SPAN_ALIGN.is_multiple_of(v) {
                return Err(format!("{path}: {name} asks for {what} alignment {v}, which does not divide {SPAN_ALIGN}"));
            }
        }
        Ok(Codec {
            // SAFETY: as above.
            temp_size: unsafe { sym(h, &format!("nvcompBatched{name}DecompressGetTempSize"))? },
            // SAFETY: as above.
            decompress: unsafe { sym(h, &format!("nvcompBatched{name}DecompressAsync"))? },
            alignments: a,
        })
    };
    let codecs = [codec("Zstd")?, codec("Snappy")?, codec("LZ4")?];
    Ok(Nvcomp { path, version: props.version, status_string, codecs })
}

/// Pinned host memory, grown to the largest job and kept (one job at a time fills it: the
/// mutex around it is held for a whole [`decompress`]).
struct Pinned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: pinned host memory belongs to no thread; its user holds the mutex around it.
unsafe impl Send for Pinned {}

impl Drop for Pinned {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by malloc_host, freed once, after the copies that read it.
            unsafe {
                let _ = result::free_host(self.ptr as *mut c_void);
            }
        }
    }
}

static STAGING: Mutex<Option<Pinned>> = Mutex::new(None);

/// A device buffer of a job's output, its context bound again to free it.
pub(crate) struct DeviceOutput {
    buf: Option<DevBuf>,
    device: usize,
    len: usize,
}

impl DeviceOutput {
    /// The output's device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.buf.as_ref().expect("held until drop").ptr
    }

    /// The output's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The output copied to host memory (tests and the benchmark's checks).
    pub fn to_host(&self) -> Result<Vec<u8>> {
        gpu(self.device)?.bind()?;
        let mut host = vec![0u8; self.len];
        if self.len > 0 {
            // SAFETY: the buffer holds at least `len` bytes, written by a finished job.
            unsafe { result::memcpy_dtoh_sync(&mut host, self.ptr()) }.map_err(gpu_err("downloading decompressed pages"))?;
        }
        Ok(host)
    }
}

impl Drop for DeviceOutput {
    fn drop(&mut self) {
        if let Ok(g) = gpu(self.device) {
            let _ = g.bind();
        }
        drop(self.buf.take());
    }
}

/// A job's result: the output on the device, each span's status (copies always `Ok`), and
/// the device's times (CUDA events): the upload, and decompression plus copies.
pub(crate) struct Decompressed {
    pub output: DeviceOutput,
    pub statuses: Vec<SpanStatus>,
    pub upload_ms: f32,
    pub device_ms: f32,
}

/// Runs `job` on CUDA device `device`: `fill` writes the image (its `job.image_len` bytes,
/// in pinned memory) before the upload. Span failures are in the result's statuses; an
/// `Err` is a failure of the device or of nvCOMP's calls themselves (or nvCOMP absent).
pub(crate) fn decompress(device: usize, job: &DecompressJob, fill: &mut dyn FnMut(&mut [u8])) -> Result<Decompressed> {
    job.check().map_err(|e| Error::Internal(format!("a device decompression's layout: {e}")))?;
    let nv = nvcomp()?;
    let g = gpu(device)?;
    g.bind()?;
    let stream = g.ctx.new_stream().map_err(gpu_err("creating nvCOMP's stream"))?;
    let s = stream.cu_stream();

    // The spans of each codec, and where their argument arrays lie in the uploaded metadata
    // (4 words a span: input pointer, input bytes, output buffer bytes, output pointer) and
    // in the results (a word of decompressed bytes a span, then an i32 status a span).
    let groups: Vec<(DeviceCodec, Vec<usize>)> = DeviceCodec::ALL
        .iter()
        .map(|&c| (c, (0..job.spans.len()).filter(|&i| job.spans[i].codec == Some(c)).collect::<Vec<_>>()))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let spans_decompressed: usize = groups.iter().map(|(_, v)| v.len()).sum();
    let meta_at = job.image_len.next_multiple_of(SPAN_ALIGN);
    let meta_words = 4 * spans_decompressed;
    let upload_len = meta_at + meta_words * 8;
    let results_len = spans_decompressed * 8 + spans_decompressed * 4;

    // Temporary space: the groups run one after another on one stream and share it.
    let mut temp_len = 0usize;
    for (c, idx) in &groups {
        let max_out = idx.iter().map(|&i| job.spans[i].output_len).max().unwrap_or(0);
        let total_out: usize = idx.iter().map(|&i| job.spans[i].output_len).sum();
        let mut bytes = 0usize;
        // SAFETY: host-side query with the header's argument order; writes one size_t.
        let st = unsafe { (nv.codec(*c).temp_size)(idx.len(), max_out, DEFAULT_OPTS, &mut bytes, total_out, s) };
        if st != SUCCESS {
            return Err(Error::Gpu(format!("nvCOMP {} temporary size: {}", c.name(), nv.status(st))));
        }
        temp_len = temp_len.max(bytes);
    }

    let input = DevBuf::new(upload_len.max(1))?;
    let output = DeviceOutput { buf: Some(DevBuf::new(job.output_len.max(1))?), device, len: job.output_len };
    let results = DevBuf::new(results_len.max(1))?;
    let temp = DevBuf::new(temp_len.max(1))?;
    for (c, _) in &groups {
        let a = nv.codec(*c).alignments;
        if !(temp.ptr as usize).is_multiple_of(a.temp.max(1)) {
            return Err(Error::Internal(format!("nvCOMP {} temporary space not aligned to {}", c.name(), a.temp)));
        }
    }

    let mut staging = STAGING.lock().unwrap_or_else(|p| p.into_inner());
    if staging.as_ref().is_none_or(|p| p.len < upload_len) {
        // The smaller buffer is freed before the larger one is pinned.
        *staging = None;
        let len = upload_len.max(1);
        // SAFETY: a plain pinned allocation in the context bound to this thread, of `len`
        // bytes, every one written here: later calls see initialized memory (the padding
        // between spans keeps whatever an earlier call left, and is never read as data).
        let p = unsafe {
            let p = result::malloc_host(len, 0).map_err(gpu_err("pinning nvCOMP's upload buffer"))? as *mut u8;
            std::ptr::write_bytes(p, 0, len);
            p
        };
        *staging = Some(Pinned { ptr: p, len });
    }
    let pinned = staging.as_mut().expect("allocated above");
    // SAFETY: `pinned` holds at least `upload_len` initialized bytes, owned by this call
    // under the mutex.
    let host = unsafe { std::slice::from_raw_parts_mut(pinned.ptr, upload_len) };
    fill(&mut host[..job.image_len]);
    let mut meta: Vec<u64> = Vec::with_capacity(meta_words);
    for (_, idx) in &groups {
        meta.extend(idx.iter().map(|&i| input.ptr + job.spans[i].input as u64));
        meta.extend(idx.iter().map(|&i| job.spans[i].input_len as u64));
        meta.extend(idx.iter().map(|&i| job.spans[i].output_len as u64));
        meta.extend(idx.iter().map(|&i| output.ptr() + job.spans[i].output as u64));
    }
    for (w, m) in host[meta_at..].chunks_exact_mut(8).zip(&meta) {
        w.copy_from_slice(&m.to_ne_bytes());
    }

    let copies = merged_copies(job);
    let (e0, e1, e2) = (Event::new()?, Event::new()?, Event::new()?);
    let queued = (|| -> Result<()> {
        e0.record(s)?;
        // SAFETY: `host` stays pinned and untouched until the stream is synchronized below.
        unsafe { result::memcpy_htod_async(input.ptr, &host[..], s) }.map_err(gpu_err("uploading column chunks"))?;
        e1.record(s)?;
        let (mut m, mut r) = (0usize, 0usize);
        for (c, idx) in &groups {
            let n = idx.len();
            let word = |k: usize| (input.ptr + (meta_at + 8 * (m + k * n)) as u64) as usize;
            let actual = results.ptr + 8 * r as u64;
            let statuses = results.ptr + (8 * spans_decompressed + 4 * r) as u64;
            // SAFETY: every pointer is device memory of this context laid out above: n input
            // pointers, input sizes, output sizes and output pointers (each span checked
            // inside its buffer and aligned by `job.check`), n decompressed sizes and n
            // statuses, temp of `temp_len` bytes; all live until the synchronize below.
            let st = unsafe {
                (nv.codec(*c).decompress)(
                    word(0) as *const *const c_void,
                    word(1) as *const usize,
                    word(2) as *const usize,
                    actual as *mut usize,
                    n,
                    temp.ptr as *mut c_void,
                    temp_len,
                    word(3) as *const *mut c_void,
                    DEFAULT_OPTS,
                    statuses as *mut Status,
                    s,
                )
            };
            if st != SUCCESS {
                return Err(Error::Gpu(format!("nvCOMP {} decompression of {n} pages: {}", c.name(), nv.status(st))));
            }
            m += 4 * n;
            r += n;
        }
        for &(src, dst, len) in &copies {
            // SAFETY: ranges inside the input and output buffers (`job.check`).
            unsafe { result::memcpy_dtod_async(output.ptr() + dst as u64, input.ptr + src as u64, len, s) }
                .map_err(gpu_err("copying uncompressed pages"))?;
        }
        e2.record(s)
    })();
    // Whatever was queued finishes before the buffers are freed or reused.
    let synced = stream.synchronize().map_err(gpu_err("decompressing column chunks"));
    queued?;
    synced?;
    drop(staging);

    let mut sizes = vec![0u64; spans_decompressed];
    let mut codes = vec![0i32; spans_decompressed];
    if spans_decompressed > 0 {
        // SAFETY: the results buffer holds these arrays, written by the finished work.
        unsafe {
            result::memcpy_dtoh_sync(&mut sizes, results.ptr).map_err(gpu_err("reading nvCOMP's sizes"))?;
            result::memcpy_dtoh_sync(&mut codes, results.ptr + 8 * spans_decompressed as u64)
                .map_err(gpu_err("reading nvCOMP's statuses"))?;
        }
    }
    let mut statuses: Vec<SpanStatus> = vec![Ok(()); job.spans.len()];
    for (k, i) in groups.iter().flat_map(|(_, idx)| idx.iter().copied()).enumerate() {
        let want = job.spans[i].output_len as u64;
        statuses[i] = if codes[k] != SUCCESS {
            Err(nv.status(codes[k]))
        } else if sizes[k] != want {
            Err(format!("decompressed into {} bytes, its header says {want}", sizes[k]))
        } else {
            Ok(())
        };
    }
    Ok(Decompressed { output, statuses, upload_ms: e0.until(&e1)?, device_ms: e1.until(&e2)? })
}

/// The copied spans as (input, output, length), adjacent ones (contiguous in both buffers)
/// merged into one copy.
fn merged_copies(job: &DecompressJob) -> Vec<(usize, usize, usize)> {
    let mut c: Vec<(usize, usize, usize)> =
        job.spans.iter().filter(|s| s.codec.is_none() && s.input_len > 0).map(|s| (s.input, s.output, s.input_len)).collect();
    c.sort_unstable();
    let mut out: Vec<(usize, usize, usize)> = Vec::with_capacity(c.len());
    for (i, o, l) in c {
        match out.last_mut() {
            Some(last) if last.0 + last.2 == i && last.1 + last.2 == o => last.2 += l,
            _ => out.push((i, o, l)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::decompress::Span;

    #[test]
    fn adjacent_copies_merge() {
        let sp = |input, output, len| Span { codec: None, input, input_len: len, output, output_len: len };
        let job = DecompressJob { image_len: 100, spans: vec![sp(10, 0, 5), sp(0, 50, 10), sp(15, 5, 5), sp(30, 20, 5)], output_len: 100 };
        assert_eq!(merged_copies(&job), vec![(0, 50, 10), (10, 0, 10), (30, 20, 5)]);
    }

    /// The pip package's layout is found under a prefix's `lib/python3.*/site-packages`.
    #[test]
    fn finds_the_pip_package_layout() {
        let root = std::env::temp_dir().join(format!("corank-nvcomp-{}", std::process::id()));
        let lib64 = root.join("lib/python3.12/site-packages/nvidia/libnvcomp/lib64");
        std::fs::create_dir_all(&lib64).unwrap();
        std::fs::create_dir_all(root.join("lib/python3.11/site-packages")).unwrap();
        std::fs::write(lib64.join(SONAME), b"").unwrap();
        let sites = python_dirs(&root.join("lib"), &["site-packages"]);
        assert_eq!(sites.len(), 2, "{sites:?}");
        assert_eq!(pip_libraries(sites), vec![lib64.join(SONAME)]);
        assert_eq!(in_folder(&root.join("lib/python3.12/site-packages")), lib64.join(SONAME));
        assert_eq!(in_folder(lib64.parent().unwrap()), lib64.join(SONAME));
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A library `CORANK_NVCOMP` names that does not load makes nvCOMP unavailable, saying
    /// which; the absence is logged once however often it is asked for.
    #[test]
    fn absent_is_one_log_line() {
        let bad = load(Some("/nonexistent/corank-test/libnvcomp.so.6".into())).err().expect("no such file");
        assert!(bad.contains("CORANK_NVCOMP=/nonexistent/corank-test/libnvcomp.so.6"), "{bad}");
        let folder = load(Some("/nonexistent-folder-for-corank".into())).err().expect("no such folder");
        assert!(folder.contains("does not load"), "{folder}");

        static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
        struct Capture;
        impl log::Log for Capture {
            fn enabled(&self, m: &log::Metadata) -> bool {
                m.level() <= log::Level::Info
            }
            fn log(&self, r: &log::Record) {
                let line = r.args().to_string();
                if line.contains("corank-test-absent") {
                    LINES.lock().unwrap().push(line);
                }
            }
            fn flush(&self) {}
        }
        let captured = log::set_logger(&Capture).is_ok();
        if captured {
            log::set_max_level(log::LevelFilter::Info);
        }
        let cell: OnceLock<std::result::Result<(), String>> = OnceLock::new();
        let mut loads = 0;
        for _ in 0..3 {
            let r = found(&cell, || {
                loads += 1;
                Err("corank-test-absent".into())
            });
            assert_eq!(r, &Err("corank-test-absent".to_string()));
        }
        assert_eq!(loads, 1);
        if captured {
            let lines = LINES.lock().unwrap();
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert_eq!(lines[0], absent_line("corank-test-absent"));
            assert!(lines[0].contains("decompressed on the CPU"));
        }
    }

    /// The library loads where it is installed (CI has no nvCOMP: skipped there unless
    /// `CORANK_REQUIRE_NVCOMP=1`), its version and alignments read with no GPU.
    #[test]
    fn loads_where_installed() {
        match availability() {
            Ok(what) => {
                eprintln!("{what}");
                let nv = nvcomp().unwrap();
                assert_eq!(nv.version / 1000, 6);
                for (name, c) in DeviceCodec::ALL.iter().zip(&nv.codecs) {
                    eprintln!("{}: alignments {:?}", name.name(), c.alignments);
                    assert!(
                        SPAN_ALIGN.is_multiple_of(c.alignments.input) && SPAN_ALIGN.is_multiple_of(c.alignments.output),
                        "{:?}",
                        c.alignments
                    );
                }
                assert!(nv.status(SUCCESS).contains("status 0"));
            }
            Err(e) => {
                assert!(std::env::var("CORANK_REQUIRE_NVCOMP").as_deref() != Ok("1"), "CORANK_REQUIRE_NVCOMP=1 but {e}");
                eprintln!("loads_where_installed: skipped: {e}");
            }
        }
    }
}

//! Kernels compiled by NVRTC straight to a cubin for the device's architecture, and kept
//! in a cache on disk so that a later process loads them in milliseconds (no NVRTC run, no
//! driver JIT of PTX).
//!
//! Where: `$CORANK_CACHE_DIR` if set (and not empty), else `$XDG_CACHE_HOME/corank` (an
//! absolute path), else `$HOME/.cache/corank`. One file a module, named after the module
//! and the architecture, with the 64-bit FNV-1a hash of everything the cubin depends on
//! (the cache format, the full source, the compile options, the architecture and NVRTC's
//! version) in its name and in its header, e.g. `production_k8_i32-sm_90-<hash>.cubin`.
//!
//! An entry is a 40-byte header (magic `CORANKCB`, format version, header size, the key
//! hash, the payload's length and its FNV-1a checksum) then the cubin. A missing,
//! truncated, corrupt or foreign entry is never trusted: it is logged, rebuilt and
//! overwritten. Entries are written to a temporary file in the same directory and renamed
//! over the name, so a reader sees a whole entry or none; an unwritable directory is
//! logged and the compiled cubin used all the same. Deleting the directory clears the
//! cache; entries of old sources or another NVRTC are never read again (their names
//! differ) and can be deleted at any time.

use cudarc::nvrtc::{result, sys};
use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bumped when the entry layout or what the key covers changes.
pub(crate) const FORMAT_VERSION: u32 = 1;
const MAGIC: [u8; 8] = *b"CORANKCB";
const HEADER_BYTES: usize = 40;

/// 64-bit FNV-1a.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv64(u64);

impl Fnv64 {
    pub fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Writes `bytes` preceded by their length, so that a sequence of parts hashes
    /// differently from any other split of the same bytes.
    pub fn write_part(&mut self, bytes: &[u8]) {
        self.write(&(bytes.len() as u64).to_le_bytes());
        self.write(bytes);
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a/64 of `bytes`.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv64::new();
    h.write(bytes);
    h.finish()
}

/// The cache directory the environment names (`CORANK_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`),
/// or `None` where it names none.
pub(crate) fn default_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("CORANK_CACHE_DIR") {
        return Some(dir);
    }
    // The XDG base directory spec: a relative path is invalid and ignored.
    if let Some(xdg) = var("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("corank"));
    }
    var("HOME").map(|home| home.join(".cache").join("corank"))
}

/// One cubin to build: what NVRTC gets.
#[derive(Debug, Clone)]
pub(crate) struct CubinRequest {
    /// The program name NVRTC reports in its messages; also the start of the file name
    /// (letters, digits, `_` only).
    pub name: String,
    pub source: String,
    /// NVRTC options, `--gpu-architecture=sm_XY` among them.
    pub options: Vec<String>,
    /// The architecture, e.g. `sm_90` (the file name's middle).
    pub arch: String,
}

/// Why no cubin was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CompileFailure {
    /// NVRTC refused our sources (a compile error, with its log): PTX would fail the same.
    Sources(String),
    /// Anything else (NVRTC without cubin output, an option it does not know, ...): the
    /// caller may still try PTX.
    Other(String),
}

/// NVRTC's version, (major, minor). Load libnvrtc first (`is_culib_present`).
pub(crate) fn nvrtc_version() -> Result<(i32, i32), String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through valid pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(|e| format!("nvrtcVersion: {e:?}"))?;
    Ok((major, minor))
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by create_program, destroyed once, here.
        unsafe {
            let _ = result::destroy_program(self.0);
        }
    }
}

/// Compiles `req` with NVRTC to a cubin (the options must name a real architecture,
/// `--gpu-architecture=sm_XY`). Load libnvrtc first (`is_culib_present`).
pub(crate) fn compile_cubin(req: &CubinRequest) -> Result<Vec<u8>, CompileFailure> {
    compile_cubin_logged(req).map(|(cubin, _)| cubin)
}

/// NVRTC's log of `prog` (empty where it cannot be read).
fn program_log(prog: &Program) -> String {
    // SAFETY: `prog` is a live program.
    unsafe { result::get_program_log(prog.0) }
        .map(|raw| {
            let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default()
}

/// [`compile_cubin`], with NVRTC's log of the compilation (ptxas's register and spill report
/// where the options ask for it: `--ptxas-options=-v`).
pub(crate) fn compile_cubin_logged(req: &CubinRequest) -> Result<(Vec<u8>, String), CompileFailure> {
    let other = |what: &'static str| move |e: result::NvrtcError| CompileFailure::Other(format!("NVRTC {what} for {}: {e:?}", req.name));
    let src = CString::new(req.source.as_bytes()).map_err(|_| CompileFailure::Sources(format!("{}: NUL in the source", req.name)))?;
    let name = CString::new(req.name.as_bytes()).map_err(|_| CompileFailure::Other(format!("{}: NUL in the name", req.name)))?;
    if req.options.iter().any(|o| o.contains('\0')) {
        return Err(CompileFailure::Other(format!("{}: NUL in an option", req.name)));
    }
    let prog = Program(result::create_program(&src, Some(&name)).map_err(other("creating the program"))?);
    // SAFETY: `prog` is a live program (destroyed by its drop, after the calls below);
    // `src` and `name`, which it may point to, outlive it.
    let compiled = unsafe { result::compile_program(prog.0, &req.options) };
    if let Err(e) = compiled {
        let msg = format!("NVRTC failed on {} ({}): {e:?}\n{}", req.name, req.options.join(" "), program_log(&prog));
        return Err(if e.0 == sys::nvrtcResult::NVRTC_ERROR_COMPILATION {
            CompileFailure::Sources(msg)
        } else {
            CompileFailure::Other(msg)
        });
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled; the size is written through a valid pointer.
    unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }.result().map_err(other("sizing the cubin"))?;
    if size == 0 {
        return Err(CompileFailure::Other(format!("NVRTC made no cubin for {} (options {})", req.name, req.options.join(" "))));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds the `size` bytes nvrtcGetCUBIN writes.
    unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }.result().map_err(other("copying the cubin"))?;
    Ok((cubin, program_log(&prog)))
}

/// The key of `req`'s entry: the hash of everything the cubin depends on.
pub(crate) fn entry_key(req: &CubinRequest, nvrtc: (i32, i32)) -> u64 {
    let mut h = Fnv64::new();
    h.write_part(&FORMAT_VERSION.to_le_bytes());
    h.write_part(req.name.as_bytes());
    h.write_part(req.source.as_bytes());
    h.write_part(&(req.options.len() as u64).to_le_bytes());
    for o in &req.options {
        h.write_part(o.as_bytes());
    }
    h.write_part(req.arch.as_bytes());
    h.write_part(&nvrtc.0.to_le_bytes());
    h.write_part(&nvrtc.1.to_le_bytes());
    h.finish()
}

/// The file of `req`'s entry under `dir`.
pub(crate) fn entry_path(dir: &Path, req: &CubinRequest, key: u64) -> PathBuf {
    let clean = |s: &str| s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect::<String>();
    dir.join(format!("{}-{}-{key:016x}.cubin", clean(&req.name), clean(&req.arch)))
}

/// The bytes of an entry holding `payload` under `key`.
pub(crate) fn encode_entry(key: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&fnv1a64(payload).to_le_bytes());
    debug_assert_eq!(out.len(), HEADER_BYTES);
    out.extend_from_slice(payload);
    out
}

/// The cubin of an entry's bytes, or why they are not a whole, valid entry for `key`.
pub(crate) fn decode_entry(key: u64, bytes: &[u8]) -> Result<&[u8], String> {
    if bytes.len() < HEADER_BYTES {
        return Err(format!("{} bytes, shorter than the header", bytes.len()));
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    if bytes[..8] != MAGIC {
        return Err("not a corank cache entry (magic)".into());
    }
    if u32_at(8) != FORMAT_VERSION || u32_at(12) as usize != HEADER_BYTES {
        return Err(format!("format {} (header {} bytes), expected {FORMAT_VERSION}", u32_at(8), u32_at(12)));
    }
    if u64_at(16) != key {
        return Err(format!("the entry of key {:016x}, expected {key:016x}", u64_at(16)));
    }
    let payload = &bytes[HEADER_BYTES..];
    if u64_at(24) != payload.len() as u64 {
        return Err(format!("{} payload bytes, the header says {}", payload.len(), u64_at(24)));
    }
    if u64_at(32) != fnv1a64(payload) {
        return Err("checksum mismatch".into());
    }
    if !payload.starts_with(b"\x7fELF") {
        return Err("the payload is not a cubin (ELF)".into());
    }
    Ok(payload)
}

/// Where a cubin came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A valid entry of the disk cache.
    Cache,
    /// Compiled by this call (and written to the cache where it could be).
    Compiled,
}

/// A cubin and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Cubin {
    pub bytes: Vec<u8>,
    pub origin: Origin,
}

/// The valid cached cubin of `req` under `dir`, if there is one (a missing entry is `None`
/// silently; an invalid one is `None` with a log line).
pub(crate) fn read_cached(dir: &Path, req: &CubinRequest, nvrtc: (i32, i32)) -> Option<Vec<u8>> {
    let key = entry_key(req, nvrtc);
    let path = entry_path(dir, req, key);
    match std::fs::read(&path) {
        Ok(bytes) => match decode_entry(key, &bytes) {
            Ok(cubin) => Some(cubin.to_vec()),
            Err(why) => {
                log::warn!("corank: ignoring the kernel cache entry {}: {why}; rebuilding it", path.display());
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::warn!("corank: cannot read the kernel cache entry {}: {e}; rebuilding it", path.display());
            None
        }
    }
}

/// Writes `payload` as `req`'s entry under `dir` atomically (a temporary file in `dir`
/// renamed over the entry's name).
pub(crate) fn write_entry(dir: &Path, req: &CubinRequest, nvrtc: (i32, i32), payload: &[u8]) -> std::io::Result<PathBuf> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let key = entry_key(req, nvrtc);
    let path = entry_path(dir, req, key);
    std::fs::create_dir_all(dir)?;
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let tmp = dir.join(format!(".{file_name}.{}.{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&encode_entry(key, payload))?;
        f.flush()?;
        drop(f);
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

/// `req`'s cubin: the valid entry under `dir` when there is one, else `compile()`'s result,
/// written to `dir` (an entry that cannot be written is logged, not an error). With no
/// `dir`, always compiled.
pub(crate) fn cubin_through_cache(
    dir: Option<&Path>,
    req: &CubinRequest,
    nvrtc: (i32, i32),
    compile: impl FnOnce() -> Result<Vec<u8>, CompileFailure>,
) -> Result<Cubin, CompileFailure> {
    if let Some(bytes) = dir.and_then(|d| read_cached(d, req, nvrtc)) {
        return Ok(Cubin { bytes, origin: Origin::Cache });
    }
    let bytes = compile()?;
    if let Some(dir) = dir {
        match write_entry(dir, req, nvrtc, &bytes) {
            Ok(path) => log::debug!("corank: cached the kernels {} in {}", req.name, path.display()),
            Err(e) => {
                // Once a process at warn level: a read-only home is not worth a line per module.
                static WARNED: AtomicBool = AtomicBool::new(false);
                let msg = format!("corank: cannot write the kernel cache in {}: {e}; going on without it", dir.display());
                if WARNED.swap(true, Ordering::Relaxed) {
                    log::debug!("{msg}");
                } else {
                    log::warn!("{msg}");
                }
            }
        }
    }
    Ok(Cubin { bytes, origin: Origin::Compiled })
}

#[cfg(test)]
mod tests {
    use super::super::manifest::Family;
    use super::super::nvrtc::ModuleSpec;
    use super::super::tuning::Arch;
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::OnceLock;

    #[test]
    fn fnv1a64_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    fn fake_request() -> CubinRequest {
        CubinRequest { name: "fake_k8".into(), source: "x".into(), options: vec!["--gpu-architecture=sm_90".into()], arch: "sm_90".into() }
    }

    #[test]
    fn entries_round_trip_and_reject_damage() {
        let payload = b"\x7fELF and the rest of a cubin".to_vec();
        let entry = encode_entry(42, &payload);
        assert_eq!(decode_entry(42, &entry).unwrap(), &payload[..]);
        assert!(decode_entry(43, &entry).is_err(), "another key");
        for cut in [0, 1, HEADER_BYTES - 1, HEADER_BYTES, entry.len() - 1] {
            assert!(decode_entry(42, &entry[..cut]).is_err(), "truncated at {cut}");
        }
        for i in 0..entry.len() {
            let mut bad = entry.clone();
            bad[i] ^= 0x10;
            assert!(decode_entry(42, &bad).is_err(), "byte {i} flipped");
        }
        let not_elf = encode_entry(42, b"PTX text");
        assert!(decode_entry(42, &not_elf).is_err());
    }

    #[test]
    fn keys_cover_everything_the_cubin_depends_on() {
        let base = fake_request();
        let k = entry_key(&base, (13, 0));
        assert_eq!(k, entry_key(&base.clone(), (13, 0)));
        assert_ne!(k, entry_key(&base, (13, 1)), "NVRTC version");
        assert_ne!(k, entry_key(&base, (12, 0)), "NVRTC version");
        let mut r = base.clone();
        r.source.push(' ');
        assert_ne!(k, entry_key(&r, (13, 0)), "source");
        let mut r = base.clone();
        r.options.push("-G".into());
        assert_ne!(k, entry_key(&r, (13, 0)), "options");
        let mut r = base.clone();
        r.arch = "sm_80".into();
        assert_ne!(k, entry_key(&r, (13, 0)), "arch");
        let mut r = base.clone();
        r.name = "fake_k16".into();
        assert_ne!(k, entry_key(&r, (13, 0)), "name");
        assert_ne!(entry_path(Path::new("/c"), &base, k), entry_path(Path::new("/c"), &base, k ^ 1));
    }

    /// An unwritable cache directory is not an error: the compiled bytes come back.
    #[test]
    fn an_unwritable_directory_is_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("a-file");
        std::fs::write(&blocker, b"not a directory").unwrap();
        let cache = blocker.join("corank"); // under a regular file: cannot be created
        let req = fake_request();
        let got = cubin_through_cache(Some(&cache), &req, (13, 0), || Ok(b"\x7fELF!".to_vec())).unwrap();
        assert_eq!((got.bytes.as_slice(), got.origin), (&b"\x7fELF!"[..], Origin::Compiled));
        let got = cubin_through_cache(None, &req, (13, 0), || Ok(b"\x7fELF?".to_vec())).unwrap();
        assert_eq!(got.origin, Origin::Compiled);
        // Compile failures pass through untouched.
        let fail = cubin_through_cache(Some(dir.path()), &req, (13, 0), || Err(CompileFailure::Sources("bad".into())));
        assert_eq!(fail.unwrap_err(), CompileFailure::Sources("bad".into()));
    }

    /// libnvrtc's version, or `None` (the test skips) where it is absent and
    /// `CORANK_REQUIRE_NVRTC=1` is not set.
    fn nvrtc_or_skip(test: &str) -> Option<(i32, i32)> {
        // SAFETY: only tries to load libnvrtc.
        if unsafe { sys::is_culib_present() } {
            return Some(nvrtc_version().unwrap());
        }
        if std::env::var("CORANK_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("{test}: CORANK_REQUIRE_NVRTC=1 but libnvrtc is not present");
        }
        eprintln!("{test}: skipped: libnvrtc is not present");
        None
    }

    /// The request the engine makes for the production module of 8-byte keys and u32
    /// indices on sm_90.
    fn sm90_request() -> CubinRequest {
        sm90_request_for(8)
    }

    /// The production module for keys of `key_bytes` and u32 indices under the sm_90 policy.
    fn sm90_request_for(key_bytes: usize) -> CubinRequest {
        let spec = ModuleSpec { family: Family::Production, key_bytes, index_bits: 32 };
        spec.cubin_request(Arch::SM90, &super::super::tuning::policy(Arch::SM90, key_bytes, 4))
    }

    /// The bytes of spill stores ptxas reports for entry point `kernel` in an NVRTC log
    /// (`--ptxas-options=-v`), or `None` where the log does not report it.
    fn spill_stores(log: &str, kernel: &str) -> Option<u64> {
        let quoted = format!("'{kernel}'");
        let section = log.split("Compiling entry function").find(|s| s.trim_start().starts_with(&quoted))?;
        let line = section.lines().find(|l| l.contains(" bytes spill stores"))?;
        let before = line.split(" bytes spill stores").next()?;
        before.rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    }

    #[test]
    fn spill_stores_reads_ptxas_reports() {
        let log = "ptxas info    : Compiling entry function 'merge_kway_keys' for 'sm_90'\n\
                   ptxas info    : Function properties for merge_kway_keys\n\
                   ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n\
                   ptxas info    : Used 64 registers, used 1 barriers\n\
                   ptxas info    : Compiling entry function 'merge_kway' for 'sm_90'\n\
                   ptxas info    : Function properties for merge_kway\n\
                   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
        assert_eq!(spill_stores(log, "merge_kway_keys"), Some(4));
        assert_eq!(spill_stores(log, "merge_kway"), Some(0));
        assert_eq!(spill_stores(log, "merge_tiled_only"), None);
    }

    /// The default policy's merge kernels for u64, u32 and u64x2 keys and u32 indices keep
    /// their values in registers on sm_90: the k-way kernel's two kinds of rounds once
    /// spilled hundreds of bytes a thread and were slower for it (the performance log,
    /// "Packed elements in the k-way kernel"). ptxas's own report through NVRTC: no GPU needed, so CI
    /// sees a kernel change that brings spills back. At most one register saved once
    /// (`MAX_SPILL_BYTES`): at 15 items a thread `merge_tiled_only` stores one register
    /// before its tile load and reloads it once after (no spill in the merge), and measured
    /// faster than 16 items padded without it (the performance log, stop 54).
    #[test]
    fn sm90_merge_kernels_do_not_spill() {
        const MAX_SPILL_BYTES: u64 = 4;
        let Some(_) = nvrtc_or_skip("sm90_merge_kernels_do_not_spill") else { return };
        for key_bytes in [8, 4, 16] {
            let mut req = sm90_request_for(key_bytes);
            req.options.push("--ptxas-options=-v".into());
            let (_, log) = compile_cubin_logged(&req).unwrap();
            for kernel in ["merge_kway", "merge_tiled_only", "merge_tiled_first", "merge_tiled_inner", "merge_tiled_last"] {
                let spilled = spill_stores(&log, kernel).unwrap_or_else(|| panic!("no ptxas report for {kernel}:\n{log}"));
                assert!(
                    spilled <= MAX_SPILL_BYTES,
                    "{kernel} spills {spilled} bytes of registers on sm_90 ({key_bytes}-byte keys):\n{log}"
                );
            }
        }
    }

    /// The cubin compiled once without the cache (the reference every cache path must give).
    fn reference() -> &'static [u8] {
        static REF: OnceLock<Vec<u8>> = OnceLock::new();
        REF.get_or_init(|| compile_cubin(&sm90_request()).unwrap())
    }

    /// Runs the cache with a compile step that counts its calls.
    fn through_cache(dir: &Path, nvrtc: (i32, i32), compiles: &AtomicUsize) -> Cubin {
        let req = sm90_request();
        cubin_through_cache(Some(dir), &req, nvrtc, || {
            compiles.fetch_add(1, Ordering::SeqCst);
            compile_cubin(&req)
        })
        .unwrap()
    }

    #[test]
    fn sm90_cubin_cold_then_warm() {
        let Some(nvrtc) = nvrtc_or_skip("sm90_cubin_cold_then_warm") else { return };
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("nested").join("corank");
        let compiles = AtomicUsize::new(0);
        let cold = through_cache(&cache, nvrtc, &compiles);
        assert_eq!((cold.origin, compiles.load(Ordering::SeqCst)), (Origin::Compiled, 1));
        assert!(cold.bytes.starts_with(b"\x7fELF"), "a cubin is an ELF image");
        assert_eq!(cold.bytes, reference(), "the cache's cold result is NVRTC's cubin");
        let req = sm90_request();
        let path = entry_path(&cache, &req, entry_key(&req, nvrtc));
        assert!(path.is_file(), "{} was written", path.display());
        let files: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(files.len(), 1, "no temporary file left: {files:?}");
        for _ in 0..2 {
            let warm = through_cache(&cache, nvrtc, &compiles);
            assert_eq!((warm.origin, compiles.load(Ordering::SeqCst)), (Origin::Cache, 1), "warm runs do not compile");
            assert_eq!(warm.bytes, cold.bytes);
        }
        assert_eq!(read_cached(&cache, &req, nvrtc).as_deref(), Some(reference()));
    }

    /// A damaged entry is rebuilt: compiled again, rewritten whole, and the next run reads it.
    fn damaged_entry_is_rebuilt(test: &str, damage: impl Fn(&mut Vec<u8>)) {
        let Some(nvrtc) = nvrtc_or_skip(test) else { return };
        let dir = tempfile::tempdir().unwrap();
        let req = sm90_request();
        let path = entry_path(dir.path(), &req, entry_key(&req, nvrtc));
        let compiles = AtomicUsize::new(0);
        let cold = through_cache(dir.path(), nvrtc, &compiles);
        let good = std::fs::read(&path).unwrap();
        let mut bad = good.clone();
        damage(&mut bad);
        assert_ne!(bad, good, "{test}: the damage changed the file");
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(read_cached(dir.path(), &req, nvrtc), None, "{test}: a damaged entry is not trusted");
        let rebuilt = through_cache(dir.path(), nvrtc, &compiles);
        assert_eq!((rebuilt.origin, compiles.load(Ordering::SeqCst)), (Origin::Compiled, 2), "{test}: rebuilt");
        assert_eq!(rebuilt.bytes, cold.bytes, "{test}");
        assert_eq!(rebuilt.bytes, reference(), "{test}");
        assert_eq!(std::fs::read(&path).unwrap(), good, "{test}: the entry was rewritten whole");
        let warm = through_cache(dir.path(), nvrtc, &compiles);
        assert_eq!((warm.origin, compiles.load(Ordering::SeqCst)), (Origin::Cache, 2), "{test}: then read back");
    }

    #[test]
    fn truncated_entry_is_rebuilt() {
        damaged_entry_is_rebuilt("truncated_entry_is_rebuilt", |b| b.truncate(b.len() / 2));
    }

    #[test]
    fn entry_cut_inside_its_header_is_rebuilt() {
        damaged_entry_is_rebuilt("entry_cut_inside_its_header_is_rebuilt", |b| b.truncate(HEADER_BYTES / 2));
    }

    #[test]
    fn flipped_byte_is_rebuilt() {
        damaged_entry_is_rebuilt("flipped_byte_is_rebuilt", |b| {
            let i = HEADER_BYTES + (b.len() - HEADER_BYTES) / 3;
            b[i] ^= 0x01;
        });
    }

    #[test]
    fn foreign_header_is_rebuilt() {
        // Another program's file under the entry's name (same length, other magic).
        damaged_entry_is_rebuilt("foreign_header_is_rebuilt", |b| b[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00"));
    }

    #[test]
    fn entry_of_another_key_is_rebuilt() {
        // A valid entry whose header names another key (e.g. copied from another version).
        damaged_entry_is_rebuilt("entry_of_another_key_is_rebuilt", |b| {
            let other = encode_entry(0x1234, &b[HEADER_BYTES..]);
            *b = other;
        });
    }

    #[test]
    fn empty_entry_is_rebuilt() {
        damaged_entry_is_rebuilt("empty_entry_is_rebuilt", |b| b.clear());
    }

    /// NVRTC's compile errors in our sources are `Sources` (no PTX fallback); an
    /// architecture NVRTC does not know is `Other` (the engine falls back to PTX).
    #[test]
    fn compile_failures_are_classified() {
        let Some(_) = nvrtc_or_skip("compile_failures_are_classified") else { return };
        let mut req = fake_request();
        req.source = "extern \"C\" __global__ void k( { }".into();
        assert!(matches!(compile_cubin(&req), Err(CompileFailure::Sources(_))));
        req.source = "extern \"C\" __global__ void k() { }".into();
        assert!(compile_cubin(&req).unwrap().starts_with(b"\x7fELF"));
        req.options = vec!["--gpu-architecture=sm_1".into()];
        assert!(matches!(compile_cubin(&req), Err(CompileFailure::Other(_))));
    }
}

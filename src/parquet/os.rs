//! What the operating system is asked: the process's peak resident memory, the limit on
//! open files, thread names.

/// The process's peak resident memory so far, in bytes: `VmHWM` of `/proc/self/status` on
/// Linux, `getrusage`'s `ru_maxrss` on macOS; `None` elsewhere or when unreadable.
pub fn peak_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(target_os = "macos")]
    {
        // SAFETY: `rusage` is plain integers: all zeros is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes the struct passed by pointer.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0;
        // On macOS ru_maxrss is in bytes (on Linux and the BSDs in KiB).
        ok.then(|| usage.ru_maxrss.max(0) as u64)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        None
    }
}

/// File descriptors kept for everything but the runs' files (output, libraries, GPU).
const RESERVED_FILES: u64 = 64;

/// On Unix, raises the soft limit on open files toward the hard limit (capped at 2^20;
/// halved until the system accepts it: macOS refuses more than its per-process maximum)
/// and returns how many input files a merge may hold open at once. Elsewhere 512 (the C
/// runtime's default on Windows).
pub fn open_file_budget() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: getrlimit/setrlimit read and write the plain struct passed by pointer.
        unsafe {
            let mut limit: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                let mut want = limit.rlim_max.min(1 << 20);
                while limit.rlim_cur < want {
                    let raised = libc::rlimit { rlim_cur: want, rlim_max: limit.rlim_max };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                        limit.rlim_cur = want;
                        break;
                    }
                    want /= 2;
                }
                return (limit.rlim_cur as u64).saturating_sub(RESERVED_FILES).max(16) as usize;
            }
        }
        512
    }
    #[cfg(not(unix))]
    {
        512
    }
}

/// Names the calling thread for the operating system (`top -H`, `perf`, /proc/…/comm; at
/// most 15 bytes kept), so a profile tells the merge's threads apart. Best effort, Linux
/// only.
pub(crate) fn name_this_thread(name: &str) {
    #[cfg(target_os = "linux")]
    if let Ok(name) = std::ffi::CString::new(name.bytes().take(15).collect::<Vec<u8>>()) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which
        // `name` is, and only renames the calling thread.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = name;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The kernel's name of the calling thread.
    fn comm() -> String {
        std::fs::read_to_string("/proc/thread-self/comm").unwrap().trim_end().to_string()
    }

    #[test]
    fn threads_are_named_for_the_os_up_to_15_bytes() {
        let names = std::thread::spawn(|| {
            super::name_this_thread("corank-writer");
            let short = comm();
            super::name_this_thread("corank-a-name-longer-than-fifteen");
            let long = comm();
            // An interior NUL cannot be a name: the thread keeps the one it had.
            super::name_this_thread("bad\0name");
            (short, long, comm())
        })
        .join()
        .unwrap();
        assert_eq!(names, ("corank-writer".into(), "corank-a-name-l".into(), "corank-a-name-l".into()));
    }
}

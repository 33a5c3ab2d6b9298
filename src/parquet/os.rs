//! What the operating system is asked: the memory available to the process, its peak
//! resident memory, the limit on open files, thread names.

use std::path::Path;

/// Where [`available_memory`]'s figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// The machine's physical memory.
    Physical,
    /// The memory limit of the process's control group (a container's, a systemd unit's,
    /// a job scheduler's), lower than the physical memory.
    Cgroup,
}

/// The memory available to this process, in bytes, and where that figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvailableMemory {
    /// Bytes the process may use.
    pub bytes: u64,
    /// Physical memory, or a cgroup's lower limit.
    pub source: MemorySource,
}

/// The memory this process may use: the physical memory, or the limit of its cgroup (v2
/// `memory.max` of its cgroup and every ancestor, v1 `memory.limit_in_bytes`) where one is
/// set and lower. `None` where neither can be read (not Linux or a Unix with `sysconf`).
/// Read once a process.
///
/// ```
/// if let Some(m) = corank::parquet::available_memory() {
///     assert!(m.bytes > 0);
/// }
/// ```
pub fn available_memory() -> Option<AvailableMemory> {
    static AVAILABLE: std::sync::OnceLock<Option<AvailableMemory>> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let physical = physical_memory();
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok().and_then(|c| cgroup_limit(&c, Path::new("/sys/fs/cgroup")));
        lower_of(physical, cgroup)
    })
}

/// The physical memory and a cgroup limit combined: the cgroup's where it is lower.
fn lower_of(physical: Option<u64>, cgroup: Option<u64>) -> Option<AvailableMemory> {
    match (physical, cgroup) {
        (Some(p), Some(c)) if c < p => Some(AvailableMemory { bytes: c, source: MemorySource::Cgroup }),
        (None, Some(c)) => Some(AvailableMemory { bytes: c, source: MemorySource::Cgroup }),
        (Some(p), _) => Some(AvailableMemory { bytes: p, source: MemorySource::Physical }),
        (None, None) => None,
    }
}

/// Physical memory in bytes (`sysconf`), `None` where it cannot be read.
fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a system constant; it takes no pointer.
        let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        (pages > 0 && page_size > 0).then(|| pages as u64 * page_size as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The lowest memory limit over the process's cgroup and its ancestors, from the text of
/// `/proc/self/cgroup` and the cgroup file system mounted at `mount` (`/sys/fs/cgroup`):
/// v2 (`0::/path`, `memory.max`) or v1 (`N:memory:/path`, `memory/…/memory.limit_in_bytes`).
/// A namespaced cgroup (a container's) shows its own cgroup as `/`: the mount's top holds
/// its limit. `max`, and v1's "unlimited" (beyond 2^62), are no limit.
fn cgroup_limit(proc_self_cgroup: &str, mount: &Path) -> Option<u64> {
    let mut lowest: Option<u64> = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (dir, file) = if controllers.is_empty() {
            (mount.to_path_buf(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (mount.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        // The cgroup's own directory and every ancestor up to the mount; each limit applies.
        let mut at = dir.join(path.trim_start_matches('/'));
        loop {
            if let Some(limit) = read_limit(&at.join(file)) {
                lowest = Some(lowest.map_or(limit, |l| l.min(limit)));
            }
            if at == dir || !at.pop() {
                break;
            }
        }
    }
    lowest
}

/// A cgroup memory limit file's value: bytes, or `None` for `max`, "unlimited" or unreadable.
fn read_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < 1 << 62).then_some(bytes)
}

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
    use super::*;

    /// A simulated cgroup file system: `files` as (path under the mount, content).
    fn mount(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let f = d.path().join(path);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, content).unwrap();
        }
        d
    }

    #[test]
    fn a_cgroup_v2_limit_is_the_lowest_over_the_cgroup_and_its_ancestors() {
        let m = mount(&[
            ("memory.max", "max\n"),
            ("jobs/memory.max", "8589934592\n"),
            ("jobs/job1/memory.max", "max\n"),
            ("jobs/job1/step/memory.max", "17179869184\n"),
        ]);
        assert_eq!(cgroup_limit("0::/jobs/job1/step\n", m.path()), Some(8 << 30), "the parent's 8 GiB caps the child's 16");
        assert_eq!(cgroup_limit("0::/jobs/job1\n", m.path()), Some(8 << 30));
        assert_eq!(cgroup_limit("0::/\n", m.path()), None, "max is no limit");
        // A container's namespaced cgroup: `/`, the limit at the mount's top.
        let container = mount(&[("memory.max", "2147483648\n")]);
        assert_eq!(cgroup_limit("0::/\n", container.path()), Some(2 << 30));
        // A path the mount does not show (another namespace): its ancestors still count.
        assert_eq!(cgroup_limit("0::/elsewhere/x\n", container.path()), Some(2 << 30));
    }

    #[test]
    fn a_cgroup_v1_limit_is_read_from_the_memory_controller() {
        let m = mount(&[
            ("memory/memory.limit_in_bytes", "9223372036854771712\n"),
            ("memory/docker/abc/memory.limit_in_bytes", "1073741824\n"),
        ]);
        let proc = "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n";
        assert_eq!(cgroup_limit(proc, m.path()), Some(1 << 30));
        assert_eq!(cgroup_limit("4:memory:/\n", m.path()), None, "v1's unlimited is no limit");
        assert_eq!(cgroup_limit("", m.path()), None);
        assert_eq!(cgroup_limit("not a cgroup line\n", m.path()), None);
    }

    #[test]
    fn the_lower_of_physical_memory_and_a_cgroup_limit_is_available() {
        let gib = 1u64 << 30;
        assert_eq!(lower_of(Some(64 * gib), Some(4 * gib)), Some(AvailableMemory { bytes: 4 * gib, source: MemorySource::Cgroup }));
        assert_eq!(lower_of(Some(64 * gib), Some(128 * gib)), Some(AvailableMemory { bytes: 64 * gib, source: MemorySource::Physical }));
        assert_eq!(lower_of(Some(64 * gib), None), Some(AvailableMemory { bytes: 64 * gib, source: MemorySource::Physical }));
        assert_eq!(lower_of(None, Some(gib)), Some(AvailableMemory { bytes: gib, source: MemorySource::Cgroup }));
        assert_eq!(lower_of(None, None), None);
        // This machine: some memory is available, no more than the physical memory.
        let here = available_memory().expect("Linux tells");
        assert!(here.bytes > 0 && here.bytes <= physical_memory().unwrap());
    }

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

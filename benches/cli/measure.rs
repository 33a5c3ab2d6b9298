//! One contender's run measured: wall-clock seconds and the child process' own peak RSS.

use std::process::Command;

/// One measured run.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// The dataset's name (`lineitem`, `time`).
    pub dataset: String,
    pub rows: usize,
    pub contender: String,
    pub seconds: f64,
    /// The process' peak resident set, bytes (None where the platform does not tell).
    pub peak_rss: Option<u64>,
}

/// Runs `cmd` to its end: whether it succeeded, and its peak RSS in bytes (`wait4`'s
/// `ru_maxrss` of this child alone; None off Unix).
pub fn run_measured(mut cmd: Command) -> std::io::Result<(bool, Option<u64>)> {
    let child = cmd.spawn()?;
    #[cfg(unix)]
    {
        let pid = child.id() as libc::pid_t;
        let mut status: libc::c_int = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: `pid` is our child, not yet reaped (std's Child reaps only in wait()).
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            if r == pid {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        drop(child);
        let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        // Linux reports kilobytes, macOS bytes.
        let scale = if cfg!(target_os = "macos") { 1 } else { 1024 };
        Ok((ok, Some(usage.ru_maxrss.max(0) as u64 * scale)))
    }
    #[cfg(not(unix))]
    {
        let mut child = child;
        Ok((child.wait()?.success(), None))
    }
}

// Run by `tests/cli` (bench.rs). The bench target compiles this module with cfg(test) but
// without its `#[test]` functions (harness = false), leaving the helpers unused there.
#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_measured_per_child() {
        let (ok, rss) = run_measured(Command::new("true")).unwrap();
        assert!(ok);
        #[cfg(unix)]
        assert!(rss.is_some_and(|r| r > 0), "{rss:?}");
        let (ok, _) = run_measured(Command::new("false")).unwrap();
        assert!(!ok);
    }
}

//! The cluster's processes: `corank-ballista scheduler` and executors on free 127.0.0.1
//! ports, each logging to a file in the bench's work folder, all killed when the
//! [`Cluster`] is dropped (on success and on error), and by the kernel when the bench dies
//! (`PR_SET_PDEATHSIG`: Ctrl-C, a panic, a kill). The work folder holds the executors'
//! shuffle files (an `ORDER BY` of 100M lineitem rows writes gigabytes a job), so the bench
//! empties it after every query ([`Cluster::remove_job_data`]) and removes what a bench
//! that died left behind ([`remove_leftovers`]).

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a process may take to be ready.
const READY: Duration = Duration::from_secs(60);

/// The prefix of a bench's work folder (`PREFIX<pid>` under `--dir`).
const PREFIX: &str = "cluster-work-";

pub struct Process {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log holds every one of `lines` and `port` accepts connections (the
    /// log says a server starts before it binds); an error with the log if the process
    /// exits first or `READY` passes.
    fn wait_ready(&mut self, lines: &[&str], port: u16) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let log = self.log();
            let connects = || TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok();
            if lines.iter().all(|l| log.contains(l)) && connects() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited ({status}) before it was ready:\n{log}", self.name));
            }
            if start.elapsed() > READY {
                return Err(format!("{} not ready after {READY:?}:\n{log}", self.name));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now. Ballista's processes advertise the ports they bind, so
/// they cannot bind port 0; one that loses its port in between exits and is started again.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// A scheduler and its executors, killed on drop; their logs and work folders in `dir`.
pub struct Cluster {
    binary: PathBuf,
    dir: PathBuf,
    pub processes: Vec<Process>,
    /// The scheduler's port.
    pub port: u16,
    work_dirs: Vec<PathBuf>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.processes {
            p.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the work folders under `parent` of benches that are no longer running (killed
/// outright: their shuffle files would stay on the disk).
pub fn remove_leftovers(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: kill with signal 0 sends nothing; it only asks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            eprintln!("removing {} (left by a bench that is gone)", entry.path().display());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Cluster {
    /// Starts `binary scheduler` (round-robin task distribution, so both executors take
    /// tasks) and `executors` executors of `vcores` task slots each, under
    /// `parent/cluster-work-<pid>`; an error (with the process's log) if one does not start.
    pub fn start(binary: &Path, parent: &Path, executors: usize, vcores: usize) -> Result<Cluster, String> {
        let dir = parent.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut cluster = Cluster { binary: binary.to_path_buf(), dir, processes: vec![], port: 0, work_dirs: vec![] };
        cluster.port = cluster.launch("scheduler", 1, &["listening on"], |p| {
            let mut args =
                vec!["scheduler", "--bind-host", "127.0.0.1", "--external-host", "127.0.0.1", "--task-distribution", "round-robin"]
                    .into_iter()
                    .map(String::from)
                    .collect::<Vec<_>>();
            args.extend(["--bind-port".into(), p[0].to_string()]);
            args
        })?[0];
        for i in 0..executors {
            let work = cluster.dir.join(format!("work-{i}"));
            std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
            let scheduler = cluster.port;
            let w = work.display().to_string();
            cluster.launch(&format!("exec-{i}"), 2, &["Executor registration succeed", "flight server listening"], |p| {
                let mut args =
                    vec!["executor", "--bind-host", "127.0.0.1", "--external-host", "127.0.0.1", "--scheduler-host", "127.0.0.1"]
                        .into_iter()
                        .map(String::from)
                        .collect::<Vec<_>>();
                args.extend(["--scheduler-port".into(), scheduler.to_string(), "--id".into(), format!("exec-{i}")]);
                args.extend(["--bind-port".into(), p[0].to_string(), "--bind-grpc-port".into(), p[1].to_string()]);
                args.extend(["--vcores".into(), vcores.to_string(), "--work-dir".into(), w.clone()]);
                args
            })?;
            cluster.work_dirs.push(work);
        }
        Ok(cluster)
    }

    /// Starts `binary ARGS` (`args(ports)` on new free ports each try) until it is ready
    /// (`lines` logged, its first port listening); three tries.
    fn launch(&mut self, name: &str, ports: usize, lines: &[&str], args: impl Fn(&[u16]) -> Vec<String>) -> Result<Vec<u16>, String> {
        let mut last = String::new();
        for attempt in 0..3 {
            let ports: Vec<u16> = (0..ports).map(|_| free_port()).collect();
            let log = self.dir.join(format!("{name}.{attempt}.log"));
            let mut command = Command::new(&self.binary);
            let stderr = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            command.args(args(&ports)).env_remove("RUST_LOG").stdout(Stdio::null()).stderr(stderr);
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent; the
            // child gets SIGKILL when the thread that started it (the bench's main thread)
            // ends, so a bench killed outright (Ctrl-C) leaves no process behind.
            unsafe {
                use std::os::unix::process::CommandExt;
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = command.spawn().map_err(|e| format!("starting {}: {e}", self.binary.display()))?;
            let mut p = Process { name: name.to_string(), child, log };
            match p.wait_ready(lines, ports[0]) {
                Ok(()) => {
                    self.processes.push(p);
                    return Ok(ports);
                }
                Err(e) => {
                    p.kill();
                    last = e;
                }
            }
        }
        Err(format!("{name} did not start: {last}"))
    }

    /// The executors' logs.
    pub fn executor_logs(&self) -> Vec<String> {
        self.processes.iter().filter(|p| p.name.starts_with("exec-")).map(Process::log).collect()
    }

    /// Empties the executors' work folders (the finished jobs' shuffle and output files),
    /// which Ballista would keep for minutes (`--finished-job-data-clean-up-interval-seconds`).
    pub fn remove_job_data(&self) {
        for w in &self.work_dirs {
            for entry in std::fs::read_dir(w).into_iter().flatten().flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

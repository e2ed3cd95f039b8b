//! Using a run cgroup: its fd for CLONE_INTO_CGROUP, moving a process in,
//! killing everything in it, and removing it (and, at start, the ones a
//! crashed stockade left behind).

use std::fs::{self, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{CgroupError, FileOp};
use super::files::{holds_processes, words, write_file};
use super::{
    locate, parse_run_name, proc_starttime, read_stats, RealHost, RunCgroup, Stats, PARENT_NAME,
};
use crate::sys;

impl RunCgroup {
    /// The run cgroup's directory, e.g. `/sys/fs/cgroup/stockade/run-1234-5678-0`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An O_DIRECTORY fd of the run cgroup, for clone3 CLONE_INTO_CGROUP.
    /// Valid as long as `self` lives; close-on-exec.
    pub fn dir_fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Move a process into the run cgroup (the fallback when clone3 with
    /// CLONE_INTO_CGROUP is refused): write its pid to cgroup.procs.
    pub fn add_pid(&self, pid: i32) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.procs"))?;
        io::Write::write_all(&mut f, pid.to_string().as_bytes())
    }

    /// SIGKILL every process in the run cgroup and its descendants:
    /// cgroup.kill (kernel 5.14 and later); otherwise freeze, kill each pid
    /// listed in cgroup.procs, thaw, until it is empty.
    pub fn kill(&self) {
        kill_tree(&self.path);
    }

    /// Whether any process is left (cgroup.events `populated 1`).
    pub fn populated(&self) -> bool {
        populated(&self.path)
    }

    /// Read what the run used.
    pub fn stats(&self) -> Stats {
        read_stats(&self.path)
    }

    /// Wait (briefly) for the cgroup to empty, killing what is left, and
    /// remove it with any sub-cgroups the jail made. Err says what is left
    /// behind ([`cleanup_stale`] removes it at the next start).
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        remove_tree(&self.path, Duration::from_secs(2))
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if !self.removed && sys::getpid() == self.owner {
            let _ = remove_tree(&self.path, Duration::from_millis(500));
        }
    }
}

fn populated(dir: &Path) -> bool {
    match fs::read_to_string(dir.join("cgroup.events")) {
        Ok(s) => s
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["populated", "1"]),
        Err(_) => dir.join("cgroup.procs").exists() && holds_processes(dir).unwrap_or(false),
    }
}

fn kill_tree(dir: &Path) {
    if write_file(dir, "cgroup.kill", "1").is_ok() {
        return;
    }
    // Before 5.14: a frozen task cannot fork, and SIGKILL still ends it.
    let frozen = write_file(dir, "cgroup.freeze", "1").is_ok();
    for _ in 0..100 {
        let mut any = false;
        for d in subtree(dir) {
            for pid in words(&d.join("cgroup.procs")) {
                if let Ok(pid) = pid.parse::<i32>() {
                    any = true;
                    let _ = sys::kill(pid, libc::SIGKILL);
                }
            }
        }
        if !any {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if frozen {
        let _ = write_file(dir, "cgroup.freeze", "0");
    }
}

/// `dir` and every cgroup below it, deepest first.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(subtree(&e.path()));
            }
        }
    }
    out.push(dir.to_path_buf());
    out
}

fn remove_tree(dir: &Path, wait: Duration) -> Result<(), CgroupError> {
    let deadline = Instant::now() + wait;
    let mut killed = false;
    let mut pause = Duration::from_micros(200);
    loop {
        let mut last = None;
        for d in subtree(dir) {
            match fs::remove_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    last = Some(CgroupError::File {
                        op: FileOp::Rmdir,
                        path: d,
                        source: e,
                    })
                }
            }
        }
        let Some(why) = last else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(why);
        }
        if !killed && populated(dir) {
            kill_tree(dir);
            killed = true;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------ stale cgroups

/// Remove run cgroups left by a stockade that crashed: those under our
/// `stockade/` whose owner (pid + start time in the name) no longer runs.
/// A live owner's cgroup is never touched. Returns the paths removed.
pub fn cleanup_stale() -> Vec<PathBuf> {
    match locate(&RealHost) {
        Ok((p, _)) => cleanup_stale_in(&p.base.join(PARENT_NAME), |pid, st| {
            proc_starttime(pid) == Some(st)
        }),
        Err(_) => Vec::new(),
    }
}

/// [`cleanup_stale`] on one `stockade/` directory; `alive(pid, starttime)`
/// says whether an owner still runs.
pub fn cleanup_stale_in(parent: &Path, alive: impl Fn(i32, u64) -> bool) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(rd) = fs::read_dir(parent) else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some((pid, st)) = name.to_str().and_then(parse_run_name) else {
            continue;
        };
        if alive(pid, st) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let p = e.path();
        if populated(&p) {
            kill_tree(&p);
        }
        if remove_tree(&p, Duration::from_millis(500)).is_ok() {
            removed.push(p);
        }
    }
    removed
}

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
    cpu_max, locate, parse_run_name, proc_starttime, read_stats, RealHost, Request, RunCgroup,
    Stats, PARENT_NAME,
};
use crate::sys;

impl RunCgroup {
    /// The run's main cgroup directory: its group in the unified hierarchy,
    /// e.g. `/sys/fs/cgroup/stockade/run-1234-5678-0`, else its first
    /// cgroup v1 group.
    pub fn path(&self) -> &Path {
        match (&self.v2, self.v1.first()) {
            (Some(v2), _) => &v2.path,
            (None, Some(g)) => &g.path,
            (None, None) => Path::new("/"),
        }
    }

    /// The run's groups in cgroup v1 controller hierarchies.
    pub fn v1_groups(&self) -> &[super::V1Group] {
        &self.v1
    }

    /// The systemd scope the run cgroup is in (the systemd rung).
    pub fn systemd_unit(&self) -> Option<&str> {
        self.systemd.as_ref().map(|(h, _)| h.unit.as_str())
    }

    /// Whether the run has a group in the unified hierarchy.
    pub fn has_v2(&self) -> bool {
        self.v2.is_some()
    }

    /// An O_DIRECTORY fd of the run's unified-hierarchy group, for clone3
    /// CLONE_INTO_CGROUP (None without one). Valid as long as `self`
    /// lives; close-on-exec.
    pub fn dir_fd(&self) -> Option<RawFd> {
        // In a systemd scope only systemd may move a process in.
        if self.systemd.is_some() {
            return None;
        }
        self.v2.as_ref().map(|v| v.dir.as_raw_fd())
    }

    /// Move a process into the run's unified-hierarchy group (the fallback
    /// when clone3 with CLONE_INTO_CGROUP is refused): write its pid to
    /// cgroup.procs.
    pub fn add_pid(&mut self, pid: i32) -> io::Result<()> {
        if let Some((holder, sub)) = &mut self.systemd {
            return holder.attach(sub, pid).map_err(io::Error::other);
        }
        let Some(v2) = &self.v2 else {
            return Ok(());
        };
        let mut f = OpenOptions::new()
            .write(true)
            .open(v2.path.join("cgroup.procs"))?;
        io::Write::write_all(&mut f, pid.to_string().as_bytes())
    }

    /// Move a process into each of the run's cgroup v1 groups. The caller
    /// does it while the process waits (the jail's child before GO), so
    /// nothing it runs later is outside them; its children inherit them.
    pub fn place_v1(&self, pid: i32) -> Result<(), CgroupError> {
        for g in &self.v1 {
            write_file(&g.path, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// Write `req`'s limits (each one it asks) over those the run cgroup
    /// was made with: a jail built ahead of its run, whose run asks for
    /// limits of its own. Each goes where the run's cgroup holds its
    /// controller: the unified group when it has the limit's file, else
    /// the v1 group. Err: a limit no group of the run holds, or a value
    /// the kernel refused (on cgroup v1, a memory limit below what the
    /// run already uses).
    pub fn set_limits(&self, req: &Request) -> Result<(), CgroupError> {
        let v2 = self.v2.as_ref().map(|v| v.path.as_path());
        let unified = |file: &str| v2.filter(|d| d.join(file).exists());
        let v1 = |ctrl: &str, limit: &'static str| {
            self.v1
                .iter()
                .find(|g| g.controllers.iter().any(|c| c == ctrl))
                .map(|g| g.path.as_path())
                .ok_or_else(|| CgroupError::NotHeld {
                    limit,
                    cgroup: self.path().to_path_buf(),
                })
        };
        if let Some(m) = req.memory {
            match unified("memory.max") {
                Some(d) => write_file(d, "memory.max", &m.to_string())?,
                None => super::v1::set_memory(v1("memory", "memory")?, m)?,
            }
        }
        if let Some(m) = req.memory_high {
            let d = unified("memory.high").ok_or_else(|| CgroupError::NotHeld {
                limit: "memory_high",
                cgroup: self.path().to_path_buf(),
            })?;
            write_file(d, "memory.high", &m.to_string())?;
        }
        if let Some(c) = req.cpus {
            let max = cpu_max(c).ok_or_else(|| CgroupError::Write {
                path: self.path().join("cpu.max"),
                value: c.to_string(),
                source: io::Error::from(ErrorKind::InvalidInput),
            })?;
            match unified("cpu.max") {
                Some(d) => write_file(d, "cpu.max", &max)?,
                None => {
                    let quota = max.split(' ').next().unwrap_or_default();
                    write_file(v1("cpu", "cpus")?, "cpu.cfs_quota_us", quota)?;
                }
            }
        }
        if let Some(n) = req.pids {
            let d = match unified("pids.max") {
                Some(d) => d,
                None => v1("pids", "pids")?,
            };
            write_file(d, "pids.max", &n.to_string())?;
        }
        Ok(())
    }

    /// SIGKILL every process in the run's cgroups and their descendants:
    /// cgroup.kill (kernel 5.14 and later); otherwise freeze, kill each pid
    /// listed in cgroup.procs, thaw, until it is empty.
    pub fn kill(&self) {
        for d in self.dirs() {
            kill_tree(d);
        }
    }

    /// Whether any process is left (cgroup.events `populated 1`).
    pub fn populated(&self) -> bool {
        self.dirs().any(populated)
    }

    /// Read what the run used (the unified group's files, then the v1
    /// groups' for what the v1 controllers hold).
    pub fn stats(&self) -> Stats {
        let mut st = match &self.v2 {
            Some(v2) => read_stats(&v2.path),
            None => Stats::default(),
        };
        for g in &self.v1 {
            super::v1::read_into(g, &mut st);
        }
        st
    }

    /// Wait (briefly) for the cgroups to empty, killing what is left, and
    /// remove them with any sub-cgroups the jail made. Err says what is
    /// left behind ([`cleanup_stale`] removes it at the next start).
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.removed = true;
        self.remove_all(Duration::from_secs(2))
    }

    /// Remove it if it can go at once (nothing left in it): whether it
    /// is gone. Never waits (see `janitor`).
    pub fn try_remove(&mut self) -> bool {
        let gone = self.remove_all(Duration::ZERO).is_ok();
        self.removed |= gone;
        gone
    }

    /// Stop owning it: dropping it no longer removes it.
    pub fn forget(&mut self) {
        self.removed = true;
    }

    fn dirs(&self) -> impl Iterator<Item = &Path> {
        let v2 = self.v2.as_ref().map(|v| v.path.as_path());
        v2.into_iter()
            .chain(self.v1.iter().map(|g| g.path.as_path()))
    }

    fn remove_all(&self, wait: Duration) -> Result<(), CgroupError> {
        let mut first = Ok(());
        for d in self.dirs() {
            if let Err(e) = remove_tree(d, wait) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Add a v1 group (made by the v1 rung).
    pub(super) fn push_v1(&mut self, g: super::V1Group) {
        self.v1.push(g);
    }

    /// A run with no unified-hierarchy group (only v1 groups).
    pub(super) fn v1_only(owner: i32) -> RunCgroup {
        RunCgroup {
            v2: None,
            v1: Vec::new(),
            systemd: None,
            owner,
            removed: false,
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if !self.removed && sys::getpid() == self.owner {
            let _ = self.remove_all(Duration::from_millis(500));
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
    // Mostly a run left no sub-cgroup and no process: one rmdir.
    match fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
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
    let alive = |pid, st| proc_starttime(pid) == Some(st);
    let mut removed = match locate(&RealHost) {
        Ok((p, _)) => cleanup_stale_in(&p.base.join(PARENT_NAME), alive),
        Err(_) => Vec::new(),
    };
    for parent in super::v1::parents() {
        removed.extend(cleanup_stale_in(&parent, alive));
    }
    removed
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
        // Not waited for here, on the run's way in: what was killed may
        // take a while to go (a loaded host); the run's end tries again.
        match remove_tree(&p, Duration::ZERO) {
            Ok(()) => removed.push(p),
            Err(_) => pending().push(p),
        }
    }
    removed
}

/// Stale cgroups killed by [`cleanup_stale`] and not removed yet.
fn pending() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    static PENDING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The stale cgroups [`cleanup_stale`] killed but could not remove at
/// once, removed now (the run is over: they have had its whole time to
/// empty; at most `wait` more each). What is still there is left to the
/// next start. Returns the paths removed.
pub fn cleanup_stale_pending(wait: Duration) -> Vec<PathBuf> {
    let left = std::mem::take(&mut *pending());
    let mut removed = Vec::new();
    for p in left {
        if remove_tree(&p, wait).is_ok() {
            removed.push(p);
        }
    }
    removed
}

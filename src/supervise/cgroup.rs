//! cgroup v2 limits for one run: find the unified hierarchy, pick a cgroup we
//! may create children in, make `…/stockade/run-<pid>-<starttime>-<seq>` with
//! the requested limits, and afterwards read what the run used, kill whatever
//! is left in it and remove it.
//!
//! Where the cgroup goes:
//!
//! * The unified hierarchy is the `cgroup2` line of `/proc/self/mountinfo`
//!   (pure v2 at `/sys/fs/cgroup`, hybrid at `/sys/fs/cgroup/unified`).
//! * Started by root (euid 0): `<hierarchy root>/stockade`.
//! * Otherwise (and when root cannot use the hierarchy root): the nearest
//!   ancestor of our own cgroup that we can write and that holds no
//!   processes: a systemd `Delegate=yes` unit whose processes live in a
//!   subgroup, a user session's `user@UID.service`, or a directory an admin
//!   chowned to us. Our own cgroup is not a candidate: it holds at least this
//!   process (and usually the shell), so the kernel's no-internal-processes
//!   rule refuses to enable controllers in it (EBUSY), and we never move
//!   processes that are not ours.
//!
//! Why an *ancestor* of our own cgroup, and why its `cgroup.procs` must be
//! writable: moving a task (by writing `cgroup.procs`, or by clone3 with
//! CLONE_INTO_CGROUP, which the kernel treats as the same write) is allowed
//! only when the writer may write `cgroup.procs` of the destination *and* of
//! the common ancestor of the source and destination cgroups
//! (`cgroup_procs_write_permission()` and `cgroup_may_write()` in
//! kernel/cgroup/cgroup.c; with `nsdelegate`, both must also be inside the
//! writer's cgroup namespace). The supervisor is the source, the run cgroup
//! under `<base>/stockade` the destination, so the common ancestor is
//! `<base>`: an unprivileged caller needs `<base>/cgroup.procs` delegated to
//! it, which is exactly what systemd's `Delegate=yes` (and a chown by hand)
//! gives.
//!
//! Names encode the owner (`run-<pid>-<starttime>-<seq>`), so
//! [`cleanup_stale`] removes cgroups left by a crashed stockade and never
//! touches one whose owner is still alive.

#![deny(unsafe_code)]

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::policy::Limits;
use crate::sys;

/// cpu.max period in microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;
/// The kernel refuses quotas below 1 ms.
const CPU_MIN_QUOTA_US: u64 = 1_000;
/// The directory under the base cgroup that holds every run cgroup.
pub const PARENT_NAME: &str = "stockade";
const RUN_PREFIX: &str = "run-";

/// The limits the cgroup layer enforces.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Request {
    /// memory.max in bytes (with memory.swap.max 0 and memory.oom.group 1).
    pub memory: Option<u64>,
    /// memory.high in bytes.
    pub memory_high: Option<u64>,
    /// CPUs, as cpu.max `<cpus * 100000> 100000`.
    pub cpus: Option<f64>,
    /// pids.max.
    pub pids: Option<u64>,
}

impl From<&Limits> for Request {
    fn from(l: &Limits) -> Self {
        Request {
            memory: l.memory,
            memory_high: l.memory_high,
            cpus: l.cpus,
            pids: l.pids,
        }
    }
}

/// Whether one limit is enforced by the cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforced {
    /// The limit is written into the run cgroup.
    Cgroup,
    /// The limit was not asked for.
    NotRequested,
    /// The limit was asked for and cannot be enforced by a cgroup; the text
    /// says precisely why (which file, which errno, which hierarchy).
    Unavailable(String),
}

impl Enforced {
    pub fn is_cgroup(&self) -> bool {
        matches!(self, Enforced::Cgroup)
    }
}

/// What [`prepare`] did.
#[derive(Debug)]
pub struct Setup {
    /// The run cgroup, when one could be created (even with no controller:
    /// it still tracks and kills every process of the run).
    pub cgroup: Option<RunCgroup>,
    /// memory and memory_high.
    pub memory: Enforced,
    pub cpu: Enforced,
    pub pids: Enforced,
    /// Why there is no cgroup at all.
    pub why: Option<String>,
}

/// Resource controllers this layer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Cpu,
    Pids,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Cpu, Controller::Pids];

    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
        }
    }
}

/// One cgroup a run lives in. Dropping it without [`RunCgroup::remove`]
/// kills what is left in it and removes it (only in the process that created
/// it: a forked jail child that unwinds never touches it).
#[derive(Debug)]
pub struct RunCgroup {
    path: PathBuf,
    dir: File,
    owner: i32,
    removed: bool,
}

/// What a run used, read after it ended. `None`: the file is missing (no
/// such controller in this cgroup, or a kernel older than the file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// memory.peak (kernel 5.19 and later).
    pub memory_peak: Option<u64>,
    pub memory_current: Option<u64>,
    pub memory_events: Option<MemoryEvents>,
    pub cpu: Option<CpuStat>,
    /// pids.peak (kernel 6.1 and later).
    pub pids_peak: Option<u64>,
    pub pids_current: Option<u64>,
    /// pids.events `max`: forks refused by pids.max.
    pub pids_events_max: Option<u64>,
}

impl Stats {
    /// The kernel's OOM killer killed a process of the run because of its
    /// memory limit.
    pub fn oom_killed(&self) -> bool {
        self.memory_events
            .as_ref()
            .is_some_and(|e| e.oom_kill > 0 || e.oom_group_kill > 0)
    }

    /// A fork or clone was refused because of pids.max.
    pub fn pids_limit_hit(&self) -> bool {
        self.pids_events_max.is_some_and(|n| n > 0)
    }

    /// CPU time of the whole cgroup in microseconds (cpu.stat usage_usec; it
    /// counts every process of the run, also those not reaped by us).
    pub fn cpu_usage_usec(&self) -> Option<u64> {
        self.cpu.as_ref().map(|c| c.usage_usec)
    }
}

/// memory.events (hierarchical counts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryEvents {
    pub low: u64,
    pub high: u64,
    pub max: u64,
    pub oom: u64,
    pub oom_kill: u64,
    pub oom_group_kill: u64,
}

/// cpu.stat. The throttling fields stay 0 without the cpu controller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuStat {
    pub usage_usec: u64,
    pub user_usec: u64,
    pub system_usec: u64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_usec: u64,
}

// ------------------------------------------------------------ finding the hierarchy

/// A cgroup mount from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The cgroup path this mount shows at its mount point (field 4).
    pub root: String,
    pub mountpoint: PathBuf,
    /// v1 only: the controllers bound to it.
    pub controllers: Vec<String>,
}

/// The cgroup mounts of this mount namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    pub v2: Vec<Mount>,
    pub v1: Vec<Mount>,
}

impl Hierarchies {
    /// The unified hierarchy to use: the one at /sys/fs/cgroup (pure v2) or
    /// /sys/fs/cgroup/unified (hybrid) when mounted there, else the first.
    pub fn unified(&self) -> Option<&Mount> {
        for want in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            if let Some(m) = self.v2.iter().find(|m| m.mountpoint == Path::new(want)) {
                return Some(m);
            }
        }
        self.v2.first()
    }

    /// The v1 mount a controller is bound to, if any.
    pub fn v1_for(&self, ctrl: &str) -> Option<&Mount> {
        self.v1
            .iter()
            .find(|m| m.controllers.iter().any(|c| c == ctrl))
    }
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse /proc/self/mountinfo: `id parent maj:min root mountpoint opts
/// [optional…] - fstype source superopts`.
pub fn parse_mountinfo(text: &str) -> Hierarchies {
    let mut h = Hierarchies::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if dash < 5 || fields.len() < dash + 2 {
            continue;
        }
        let fstype = fields[dash + 1];
        let root = unescape(fields[3]);
        let mountpoint = PathBuf::from(unescape(fields[4]));
        match fstype {
            "cgroup2" => h.v2.push(Mount {
                root,
                mountpoint,
                controllers: Vec::new(),
            }),
            "cgroup" => {
                let superopts = fields.get(dash + 3).copied().unwrap_or("");
                let controllers = superopts
                    .split(',')
                    .filter(|o| {
                        !o.is_empty()
                            && !o.contains('=')
                            && !matches!(*o, "rw" | "ro" | "noprefix" | "clone_children")
                            && !o.starts_with("xattr")
                    })
                    .map(str::to_string)
                    .collect();
                h.v1.push(Mount {
                    root,
                    mountpoint,
                    controllers,
                })
            }
            _ => {}
        }
    }
    h
}

/// The unified-hierarchy path of this process from /proc/self/cgroup (the
/// `0::` line), e.g. `/user.slice/user-1000.slice/session-2.scope`.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_string())
}

/// Where cgroup `cg` (a /proc/self/cgroup path) appears under mount `m`.
/// None when the mount does not show it (a bind of another subtree, or a
/// path outside our cgroup namespace, shown as `/..`).
pub fn cgroup_dir(m: &Mount, cg: &str) -> Option<PathBuf> {
    if cg.starts_with("/..") || !cg.starts_with('/') {
        return None;
    }
    let root = m.root.trim_end_matches('/');
    let rel = if root.is_empty() {
        cg.trim_start_matches('/')
    } else if cg == root {
        ""
    } else {
        cg.strip_prefix(root)?.strip_prefix('/')?
    };
    let rel = rel.trim_end_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        m.mountpoint.clone()
    } else {
        m.mountpoint.join(rel)
    })
}

// ------------------------------------------------------------ the environment

/// What the cgroup code asks of the host, so the choice can be tested
/// against a fake cgroupfs in a temp dir.
pub trait Host {
    fn euid(&self) -> u32;
    fn writable(&self, p: &Path) -> bool;
    /// mkdir(2) in cgroupfs (the kernel fills the new directory).
    fn mkdir(&self, p: &Path) -> io::Result<()> {
        fs::create_dir(p)
    }
}

/// The real host.
pub struct RealHost;

impl Host for RealHost {
    fn euid(&self) -> u32 {
        sys::geteuid()
    }
    fn writable(&self, p: &Path) -> bool {
        sys::cgroup::writable(p)
    }
}

fn read_trim(p: &Path) -> io::Result<String> {
    fs::read_to_string(p).map(|s| s.trim().to_string())
}

fn words(p: &Path) -> Vec<String> {
    read_trim(p)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The real root cgroup has no `cgroup.type` (CFTYPE_NOT_ON_ROOT); it is
/// exempt from the no-internal-processes rule. A cgroup namespace's root is
/// not.
fn is_true_root(dir: &Path) -> bool {
    dir.join("cgroup.controllers").exists() && !dir.join("cgroup.type").exists()
}

fn holds_processes(dir: &Path) -> io::Result<bool> {
    Ok(!read_trim(&dir.join("cgroup.procs"))?.is_empty())
}

fn short_err(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => sys::errno_text(sys::Errno::from_raw(n)),
        None => e.to_string(),
    }
}

/// Write `value` to `dir/file` in one write(2), as cgroupfs wants.
fn write_file(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    let p = dir.join(file);
    // O_TRUNC as a shell's `>` does (cgroupfs ignores it); never O_CREAT.
    let mut f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .map_err(|e| format!("open {}: {}", p.display(), short_err(&e)))?;
    io::Write::write_all(&mut f, value.as_bytes())
        .map_err(|e| format!("write {:?} to {}: {}", value, p.display(), short_err(&e)))
}

/// The located hierarchy and the base cgroup to create `stockade/` in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Mount point of the unified hierarchy.
    pub hierarchy: PathBuf,
    /// The cgroup that will hold `stockade/run-…`.
    pub base: PathBuf,
}

/// Read the mount table and our cgroup, and choose the base.
fn locate(host: &dyn Host) -> Result<(Placement, Hierarchies), String> {
    let mi = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("read /proc/self/mountinfo: {}", short_err(&e)))?;
    let h = parse_mountinfo(&mi);
    let pc = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("read /proc/self/cgroup: {}", short_err(&e)))?;
    let p = choose(host, &h, &pc)?;
    Ok((p, h))
}

/// Choose the base cgroup (pure given the host and the files it reads).
pub fn choose(host: &dyn Host, h: &Hierarchies, proc_cgroup: &str) -> Result<Placement, String> {
    let m = h.unified().ok_or_else(|| {
        "no cgroup v2 hierarchy mounted (no cgroup2 line in /proc/self/mountinfo)".to_string()
    })?;
    let own_cg = parse_proc_cgroup(proc_cgroup)
        .ok_or_else(|| "no unified-hierarchy (0::) line in /proc/self/cgroup".to_string())?;
    let own = cgroup_dir(m, &own_cg).ok_or_else(|| {
        format!(
            "our cgroup {own_cg} is not visible under the cgroup2 mount at {} (mount root {})",
            m.mountpoint.display(),
            m.root
        )
    })?;
    let mut candidates: Vec<PathBuf> = Vec::new();
    if host.euid() == 0 {
        candidates.push(m.mountpoint.clone());
    }
    if is_true_root(&own) {
        candidates.push(own.clone());
    }
    let mut a = own.parent();
    while let Some(d) = a {
        if !d.starts_with(&m.mountpoint) {
            break;
        }
        candidates.push(d.to_path_buf());
        a = d.parent();
    }
    candidates.dedup();
    let mut refused = Vec::new();
    for c in &candidates {
        match usable_base(host, c) {
            Ok(()) => {
                return Ok(Placement {
                    hierarchy: m.mountpoint.clone(),
                    base: c.clone(),
                })
            }
            Err(why) => refused.push(format!("{}: {why}", c.display())),
        }
    }
    if !is_true_root(&own) {
        refused.insert(
            0,
            format!("{}: our own cgroup, holds our processes", own.display()),
        );
    }
    Err(format!(
        "no cgroup usable by uid {} (tried {}); delegate one (systemd Delegate=yes, or chown a \
         cgroup and its cgroup.procs, cgroup.subtree_control, cgroup.threads) and run stockade \
         in a child of it",
        host.euid(),
        refused.join("; ")
    ))
}

fn usable_base(host: &dyn Host, c: &Path) -> Result<(), String> {
    if !host.writable(c) {
        return Err("directory not writable".into());
    }
    if !host.writable(&c.join("cgroup.procs")) {
        return Err("cgroup.procs not writable".into());
    }
    if !is_true_root(c) {
        match holds_processes(c) {
            Ok(false) => {}
            Ok(true) => return Err("holds processes".into()),
            Err(e) => return Err(format!("read cgroup.procs: {}", short_err(&e))),
        }
    }
    Ok(())
}

// ------------------------------------------------------------ creating a run cgroup

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Start time of a process in clock ticks after boot (field 22 of
/// /proc/PID/stat); None when it does not exist.
pub fn proc_starttime(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_starttime(&s)
}

fn parse_starttime(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// `run-<pid>-<starttime>-<seq>`.
pub fn run_name(pid: i32, starttime: u64, seq: u64) -> String {
    format!("{RUN_PREFIX}{pid}-{starttime}-{seq}")
}

/// (pid, starttime) of the stockade that created a run cgroup.
pub fn parse_run_name(name: &str) -> Option<(i32, u64)> {
    let mut it = name.strip_prefix(RUN_PREFIX)?.split('-');
    let pid = it.next()?.parse().ok()?;
    let st = it.next()?.parse().ok()?;
    it.next()?.parse::<u64>().ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((pid, st))
}

/// `cpus` as a cpu.max value.
pub fn cpu_max(cpus: f64) -> Option<String> {
    if !cpus.is_finite() || cpus <= 0.0 {
        return None;
    }
    let quota = (cpus * CPU_PERIOD_US as f64).round();
    if quota > u64::MAX as f64 / 2.0 {
        return None;
    }
    let quota = (quota as u64).max(CPU_MIN_QUOTA_US);
    Some(format!("{quota} {CPU_PERIOD_US}"))
}

fn unavailable_everywhere(req: &Request, why: &str) -> Setup {
    let e = |asked: bool| {
        if asked {
            Enforced::Unavailable(why.to_string())
        } else {
            Enforced::NotRequested
        }
    };
    Setup {
        cgroup: None,
        memory: e(req.memory.is_some() || req.memory_high.is_some()),
        cpu: e(req.cpus.is_some()),
        pids: e(req.pids.is_some()),
        why: Some(why.to_string()),
    }
}

/// Create the run cgroup and write the limits. Called by the supervisor
/// before clone. Never panics; every failure is in the returned Setup.
pub fn prepare(req: &Request) -> Setup {
    let host = RealHost;
    match locate(&host) {
        Ok((place, h)) => prepare_at(&host, &place, &h, req),
        Err(why) => unavailable_everywhere(req, &why),
    }
}

/// [`prepare`] once the base is chosen.
pub fn prepare_at(host: &dyn Host, place: &Placement, h: &Hierarchies, req: &Request) -> Setup {
    let top = &place.hierarchy;
    let base = &place.base;
    let parent = base.join(PARENT_NAME);

    // Which controllers can be enabled down to the run cgroup.
    let in_hierarchy = words(&top.join("cgroup.controllers"));
    let in_base = words(&base.join("cgroup.controllers"));
    let mut ctrl_state: Vec<(Controller, Result<(), String>)> = Vec::new();
    for c in Controller::ALL {
        let name = c.name();
        let st = if !in_hierarchy.iter().any(|w| w == name) {
            let v1 = match h.v1_for(name) {
                Some(m) => format!(
                    " (it is bound to the cgroup v1 hierarchy at {})",
                    m.mountpoint.display()
                ),
                None => String::new(),
            };
            Err(format!(
                "no {name} controller in the cgroup v2 hierarchy at {}{v1}",
                top.display()
            ))
        } else if !in_base.iter().any(|w| w == name) {
            Err(format!(
                "the {name} controller is not delegated to {}: missing from its \
                 cgroup.controllers (enable it in the parent's cgroup.subtree_control)",
                base.display()
            ))
        } else {
            enable(base, name)
        };
        ctrl_state.push((c, st));
    }

    if let Err(e) = host.mkdir(&parent) {
        if e.kind() != ErrorKind::AlreadyExists {
            return unavailable_everywhere(
                req,
                &format!("mkdir {}: {}", parent.display(), short_err(&e)),
            );
        }
    }
    for (c, st) in ctrl_state.iter_mut() {
        if st.is_ok() {
            *st = enable(&parent, c.name());
        }
    }

    let pid = sys::getpid();
    let start = proc_starttime(pid).unwrap_or(0);
    let mut path;
    let mut tries = 0;
    loop {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        path = parent.join(run_name(pid, start, seq));
        match host.mkdir(&path) {
            Ok(()) => break,
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            // A concurrent cleanup may have removed an empty parent between
            // our mkdir calls: recreate it once.
            Err(e) if e.kind() == ErrorKind::NotFound && tries < 100 => {
                tries += 1;
                let _ = host.mkdir(&parent);
                for (c, st) in ctrl_state.iter_mut() {
                    if st.is_ok() {
                        *st = enable(&parent, c.name());
                    }
                }
            }
            Err(e) => {
                return unavailable_everywhere(
                    req,
                    &format!("mkdir {}: {}", path.display(), short_err(&e)),
                )
            }
        }
    }
    let dir = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) => {
            let _ = fs::remove_dir(&path);
            return unavailable_everywhere(
                req,
                &format!("open {}: {}", path.display(), short_err(&e)),
            );
        }
    };
    let run = RunCgroup {
        path,
        dir,
        owner: pid,
        removed: false,
    };

    let state = |c: Controller| -> Result<(), String> {
        ctrl_state
            .iter()
            .find(|(x, _)| *x == c)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| Err("unknown controller".into()))
    };
    let p = run.path.clone();
    let apply = |c: Controller, asked: bool, writes: &[(&str, String, bool)]| -> Enforced {
        if !asked {
            return Enforced::NotRequested;
        }
        if let Err(why) = state(c) {
            return Enforced::Unavailable(why);
        }
        for (file, value, required) in writes {
            match write_file(&p, file, value) {
                Ok(()) => {}
                // memory.swap.max is missing without swap accounting: with
                // no swap there is nothing to limit.
                Err(_) if !required && !p.join(file).exists() => {}
                Err(why) => return Enforced::Unavailable(why),
            }
        }
        Enforced::Cgroup
    };

    let mut mem_writes = Vec::new();
    if let Some(m) = req.memory {
        mem_writes.push(("memory.max", m.to_string(), true));
        mem_writes.push(("memory.swap.max", "0".to_string(), false));
        mem_writes.push(("memory.oom.group", "1".to_string(), false));
    }
    if let Some(m) = req.memory_high {
        mem_writes.push(("memory.high", m.to_string(), true));
    }
    let memory = apply(
        Controller::Memory,
        req.memory.is_some() || req.memory_high.is_some(),
        &mem_writes,
    );
    let cpu = match req.cpus.map(cpu_max) {
        Some(None) => Enforced::Unavailable(format!(
            "cpus {:?}: not a positive number",
            req.cpus.unwrap_or_default()
        )),
        Some(Some(v)) => apply(Controller::Cpu, true, &[("cpu.max", v, true)]),
        None => Enforced::NotRequested,
    };
    let pids = match req.pids {
        Some(n) => apply(Controller::Pids, true, &[("pids.max", n.to_string(), true)]),
        None => Enforced::NotRequested,
    };
    Setup {
        cgroup: Some(run),
        memory,
        cpu,
        pids,
        why: None,
    }
}

/// Add `+name` to `dir/cgroup.subtree_control` unless it is already there.
fn enable(dir: &Path, name: &str) -> Result<(), String> {
    let f = dir.join("cgroup.subtree_control");
    if words(&f).iter().any(|w| w == name) {
        return Ok(());
    }
    write_file(dir, "cgroup.subtree_control", &format!("+{name}")).map_err(|e| {
        if e.ends_with(&sys::errno_text(sys::Errno::EBUSY)) {
            format!(
                "{e} (no-internal-processes rule: {} holds processes)",
                dir.display()
            )
        } else {
            e
        }
    })
}

// ------------------------------------------------------------ using it

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
    pub fn remove(mut self) -> Result<(), String> {
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

fn remove_tree(dir: &Path, wait: Duration) -> Result<(), String> {
    let deadline = Instant::now() + wait;
    let mut killed = false;
    let mut pause = Duration::from_micros(200);
    loop {
        let mut last = None;
        for d in subtree(dir) {
            match fs::remove_dir(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => last = Some(format!("rmdir {}: {}", d.display(), short_err(&e))),
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

fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    let s = read_trim(&dir.join(file)).ok()?;
    if s == "max" {
        return Some(u64::MAX);
    }
    s.parse().ok()
}

fn keyed(dir: &Path, file: &str) -> Option<Vec<(String, u64)>> {
    let s = fs::read_to_string(dir.join(file)).ok()?;
    Some(
        s.lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                Some((it.next()?.to_string(), it.next()?.parse().ok()?))
            })
            .collect(),
    )
}

fn get(kv: &[(String, u64)], k: &str) -> u64 {
    kv.iter()
        .find(|(x, _)| x == k)
        .map(|(_, v)| *v)
        .unwrap_or(0)
}

/// Read the stats files of a cgroup directory.
pub fn read_stats(dir: &Path) -> Stats {
    Stats {
        memory_peak: read_u64(dir, "memory.peak"),
        memory_current: read_u64(dir, "memory.current"),
        memory_events: keyed(dir, "memory.events").map(|kv| MemoryEvents {
            low: get(&kv, "low"),
            high: get(&kv, "high"),
            max: get(&kv, "max"),
            oom: get(&kv, "oom"),
            oom_kill: get(&kv, "oom_kill"),
            oom_group_kill: get(&kv, "oom_group_kill"),
        }),
        cpu: keyed(dir, "cpu.stat").map(|kv| CpuStat {
            usage_usec: get(&kv, "usage_usec"),
            user_usec: get(&kv, "user_usec"),
            system_usec: get(&kv, "system_usec"),
            nr_periods: get(&kv, "nr_periods"),
            nr_throttled: get(&kv, "nr_throttled"),
            throttled_usec: get(&kv, "throttled_usec"),
        }),
        pids_peak: read_u64(dir, "pids.peak"),
        pids_current: read_u64(dir, "pids.current"),
        pids_events_max: keyed(dir, "pids.events").map(|kv| get(&kv, "max")),
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

impl fmt::Display for Enforced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Enforced::Cgroup => f.write_str("cgroup"),
            Enforced::NotRequested => f.write_str("not requested"),
            Enforced::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashSet;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn mountinfo_hybrid_finds_unified_and_v1_controllers() {
        let h = parse_mountinfo(HYBRID);
        let u = h.unified().expect("cgroup2 mount");
        assert_eq!(u.mountpoint, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(u.root, "/");
        assert_eq!(
            h.v1_for("memory").map(|m| m.mountpoint.clone()),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
        assert_eq!(
            h.v1_for("pids").map(|m| m.mountpoint.clone()),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        // name=systemd and xattr are not controllers.
        assert!(h.v1_for("systemd").is_none());
        assert!(h.v1_for("xattr").is_none());
    }

    #[test]
    fn mountinfo_prefers_sys_fs_cgroup_and_unescapes() {
        let text = "\
50 1 0:40 / /mnt/with\\040space rw - cgroup2 cgroup2 rw
51 1 0:41 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
";
        let h = parse_mountinfo(text);
        assert_eq!(h.v2.len(), 2);
        assert_eq!(h.v2[0].mountpoint, Path::new("/mnt/with space"));
        assert_eq!(h.unified().unwrap().mountpoint, Path::new("/sys/fs/cgroup"));
        assert!(h.v1.is_empty());
        assert!(parse_mountinfo("garbage line\n\n").unified().is_none());
    }

    #[test]
    fn proc_cgroup_and_mount_root() {
        let pc = "12:memory:/x\n0::/user.slice/user-1000.slice/session-2.scope\n";
        let cg = parse_proc_cgroup(pc).unwrap();
        assert_eq!(cg, "/user.slice/user-1000.slice/session-2.scope");
        let m = Mount {
            root: "/".into(),
            mountpoint: "/sys/fs/cgroup".into(),
            controllers: vec![],
        };
        assert_eq!(
            cgroup_dir(&m, &cg).unwrap(),
            Path::new("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope")
        );
        assert_eq!(cgroup_dir(&m, "/").unwrap(), Path::new("/sys/fs/cgroup"));
        // Outside our cgroup namespace, or escaping it.
        assert!(cgroup_dir(&m, "/../other").is_none());
        assert!(cgroup_dir(&m, "/a/../../b").is_none());
        // A mount of a subtree.
        let sub = Mount {
            root: "/user.slice".into(),
            mountpoint: "/c".into(),
            controllers: vec![],
        };
        assert_eq!(
            cgroup_dir(&sub, "/user.slice/u/s").unwrap(),
            Path::new("/c/u/s")
        );
        assert_eq!(cgroup_dir(&sub, "/user.slice").unwrap(), Path::new("/c"));
        assert!(cgroup_dir(&sub, "/system.slice/x").is_none());
        assert!(cgroup_dir(&sub, "/user.slicex/y").is_none());
        assert!(parse_proc_cgroup("1:cpu:/\n").is_none());
    }

    #[test]
    fn run_names_round_trip_and_reject_strangers() {
        let n = run_name(1234, 99887766, 3);
        assert_eq!(n, "run-1234-99887766-3");
        assert_eq!(parse_run_name(&n), Some((1234, 99887766)));
        for bad in [
            "run-1-2",
            "run-x-2-3",
            "run-1-2-3-4",
            "other",
            "run--2-3",
            "run-1-2-x",
        ] {
            assert_eq!(parse_run_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn starttime_survives_odd_comm() {
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 555666 1000 10";
        assert_eq!(parse_starttime(stat), Some(555666));
        let me = proc_starttime(sys::getpid());
        assert!(me.is_some_and(|t| t > 0), "{me:?}");
    }

    #[test]
    fn cpu_max_values() {
        assert_eq!(cpu_max(0.5).as_deref(), Some("50000 100000"));
        assert_eq!(cpu_max(2.0).as_deref(), Some("200000 100000"));
        assert_eq!(cpu_max(0.001).as_deref(), Some("1000 100000"));
        assert_eq!(cpu_max(0.0), None);
        assert_eq!(cpu_max(-1.0), None);
        assert_eq!(cpu_max(f64::NAN), None);
        assert_eq!(cpu_max(f64::INFINITY), None);
    }

    /// A fake cgroupfs: directories with the control files the kernel would
    /// create. Non-root cgroups get `cgroup.type` (the real root has none).
    struct FakeFs {
        dir: PathBuf,
    }

    impl FakeFs {
        fn new(tag: &str) -> FakeFs {
            let dir = std::env::temp_dir().join(format!(
                "stockade-cg-{tag}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            FakeFs { dir }
        }
        fn cg(&self, rel: &str, controllers: &str, procs: &str) -> PathBuf {
            let d = if rel.is_empty() {
                self.dir.clone()
            } else {
                self.dir.join(rel)
            };
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("cgroup.controllers"), controllers).unwrap();
            fs::write(d.join("cgroup.subtree_control"), "").unwrap();
            fs::write(d.join("cgroup.procs"), procs).unwrap();
            if !rel.is_empty() {
                fs::write(d.join("cgroup.type"), "domain\n").unwrap();
            }
            d
        }
        fn hier(&self) -> Hierarchies {
            Hierarchies {
                v2: vec![Mount {
                    root: "/".into(),
                    mountpoint: self.dir.clone(),
                    controllers: vec![],
                }],
                v1: vec![Mount {
                    root: "/".into(),
                    mountpoint: "/sys/fs/cgroup/memory".into(),
                    controllers: vec!["memory".into()],
                }],
            }
        }
    }

    impl Drop for FakeFs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    /// cgroupfs removes control files with the directory; a temp dir does not.
    fn discard(run: RunCgroup) {
        for e in fs::read_dir(run.path()).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
        let path = run.path().to_path_buf();
        run.remove().unwrap();
        assert!(!path.exists());
    }

    struct FakeHost {
        euid: u32,
        /// Paths that are NOT writable.
        locked: RefCell<HashSet<PathBuf>>,
    }

    impl FakeHost {
        fn new(euid: u32, locked: &[PathBuf]) -> FakeHost {
            FakeHost {
                euid,
                locked: RefCell::new(locked.iter().cloned().collect()),
            }
        }
    }

    impl Host for FakeHost {
        fn euid(&self) -> u32 {
            self.euid
        }
        /// Like cgroupfs: the new directory comes with its control files,
        /// and with a controller's files when the parent lists it.
        fn mkdir(&self, p: &Path) -> io::Result<()> {
            fs::create_dir(p)?;
            let ctrls = words(&p.parent().unwrap().join("cgroup.controllers")).join(" ");
            for (f, v) in [
                ("cgroup.controllers", ctrls.as_str()),
                ("cgroup.subtree_control", ""),
                ("cgroup.procs", ""),
                ("cgroup.type", "domain\n"),
                ("cgroup.events", "populated 0\nfrozen 0\n"),
            ] {
                fs::write(p.join(f), v)?;
            }
            let files: &[(&str, &[&str])] = &[
                (
                    "memory",
                    &[
                        "memory.max",
                        "memory.high",
                        "memory.swap.max",
                        "memory.oom.group",
                    ],
                ),
                ("cpu", &["cpu.max"]),
                ("pids", &["pids.max"]),
            ];
            for (c, fl) in files {
                if ctrls.split(' ').any(|w| w == *c) {
                    for f in fl.iter() {
                        fs::write(p.join(f), "")?;
                    }
                }
            }
            Ok(())
        }
        fn writable(&self, p: &Path) -> bool {
            !self.locked.borrow().contains(p)
        }
    }

    fn locked_tree(paths: &[&Path]) -> Vec<PathBuf> {
        paths
            .iter()
            .flat_map(|p| [p.to_path_buf(), p.join("cgroup.procs")])
            .collect()
    }

    #[test]
    fn root_uses_the_hierarchy_root_even_from_a_busy_session() {
        let fs_ = FakeFs::new("root");
        let top = fs_.cg("", "cpu memory pids io", "1\n");
        fs_.cg("user.slice", "cpu memory pids", "");
        fs_.cg("user.slice/session-1.scope", "", "100\n200\n");
        let host = FakeHost::new(0, &[]);
        let p = choose(&host, &fs_.hier(), "0::/user.slice/session-1.scope\n").unwrap();
        assert_eq!(p.base, top);
        assert_eq!(p.hierarchy, top);
    }

    #[test]
    fn user_gets_nearest_delegated_ancestor_without_processes() {
        let fs_ = FakeFs::new("user");
        let top = fs_.cg("", "cpu memory pids", "1\n");
        let slice = fs_.cg("user.slice", "cpu memory pids", "");
        let svc = fs_.cg("user.slice/user@1000.service", "cpu memory pids", "");
        fs_.cg(
            "user.slice/user@1000.service/app.slice",
            "cpu memory pids",
            "",
        );
        let scope = fs_.cg(
            "user.slice/user@1000.service/app.slice/run-x.scope",
            "",
            "4242\n",
        );
        let host = FakeHost::new(1000, &locked_tree(&[&top, &slice]));
        let p = choose(
            &host,
            &fs_.hier(),
            "0::/user.slice/user@1000.service/app.slice/run-x.scope\n",
        )
        .unwrap();
        // Not the scope itself (it holds us), but its parent.
        assert_eq!(p.base, svc.join("app.slice"));
        assert!(p.base != scope);
    }

    #[test]
    fn user_skips_ancestor_that_holds_processes_or_whose_procs_is_not_ours() {
        let fs_ = FakeFs::new("skip");
        let top = fs_.cg("", "cpu memory pids", "1\n");
        let deleg = fs_.cg("deleg", "cpu memory pids", "");
        let mid = fs_.cg("deleg/mid", "cpu memory pids", "77\n");
        let odd = fs_.cg("deleg/mid/odd", "cpu memory pids", "");
        fs_.cg("deleg/mid/odd/shell", "", "500\n");
        // odd/ is writable but its cgroup.procs is not: the kernel would
        // refuse the migration (common-ancestor rule).
        let mut locked = locked_tree(&[&top]);
        locked.push(odd.join("cgroup.procs"));
        let host = FakeHost::new(1000, &locked);
        let p = choose(&host, &fs_.hier(), "0::/deleg/mid/odd/shell\n").unwrap();
        assert_eq!(p.base, deleg);
        let _ = mid;
    }

    #[test]
    fn user_without_delegation_gets_a_precise_why() {
        let fs_ = FakeFs::new("nodeleg");
        let top = fs_.cg("", "cpu memory pids", "1\n");
        let slice = fs_.cg("user.slice", "cpu memory pids", "");
        let sess = fs_.cg("user.slice/session-3.scope", "", "300\n");
        let host = FakeHost::new(65534, &locked_tree(&[&top, &slice, &sess]));
        let why = choose(&host, &fs_.hier(), "0::/user.slice/session-3.scope\n").unwrap_err();
        assert!(
            why.starts_with("no cgroup usable by uid 65534 (tried "),
            "{why}"
        );
        assert!(why.contains("our own cgroup, holds our processes"), "{why}");
        assert!(why.contains("uid 65534"), "{why}");
        assert!(
            why.contains(&format!("{}: directory not writable", slice.display())),
            "{why}"
        );
        // Flat hierarchy (like this host's hybrid unified mount): own = root.
        let fs2 = FakeFs::new("flat");
        let top2 = fs2.cg("", "hugetlb", "1\n2\n");
        let host2 = FakeHost::new(65534, &locked_tree(&[&top2]));
        let why2 = choose(&host2, &fs2.hier(), "0::/\n").unwrap_err();
        assert!(why2.contains("directory not writable"), "{why2}");
        let none = choose(&host2, &Hierarchies::default(), "0::/\n").unwrap_err();
        assert!(none.starts_with("no cgroup v2 hierarchy mounted"), "{none}");
    }

    #[test]
    fn limits_are_written_and_controllers_enabled_down_the_path() {
        let fs_ = FakeFs::new("limits");
        let top = fs_.cg("", "cpu memory pids", "1\n");
        let place = Placement {
            hierarchy: top.clone(),
            base: top.clone(),
        };
        // What mkdir would create in a real cgroupfs.
        let req = Request {
            memory: Some(64 << 20),
            memory_high: Some(48 << 20),
            cpus: Some(0.5),
            pids: Some(32),
        };
        let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &req);
        assert!(setup.why.is_none(), "{:?}", setup.why);
        assert_eq!(setup.memory, Enforced::Cgroup);
        assert_eq!(setup.cpu, Enforced::Cgroup);
        assert_eq!(setup.pids, Enforced::Cgroup);
        let run = setup.cgroup.expect("run cgroup");
        let rd = |f: &str| fs::read_to_string(run.path().join(f)).unwrap();
        assert_eq!(rd("memory.max"), (64u64 << 20).to_string());
        assert_eq!(rd("memory.high"), (48u64 << 20).to_string());
        assert_eq!(rd("memory.swap.max"), "0");
        assert_eq!(rd("memory.oom.group"), "1");
        assert_eq!(rd("cpu.max"), "50000 100000");
        assert_eq!(rd("pids.max"), "32");
        let parent = top.join(PARENT_NAME);
        assert_eq!(run.path().parent().unwrap(), parent);
        let name = run
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            parse_run_name(&name),
            Some((sys::getpid(), proc_starttime(sys::getpid()).unwrap()))
        );
        // The fake file keeps only the last "+x" written: the parent got one
        // write per controller, the last being pids.
        assert_eq!(
            fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap(),
            "+pids"
        );
        assert!(run.dir_fd() >= 0);
        discard(run);
    }

    #[test]
    fn missing_controllers_are_unavailable_with_the_reason() {
        let fs_ = FakeFs::new("missing");
        let top = fs_.cg("", "hugetlb", "1\n");
        let place = Placement {
            hierarchy: top.clone(),
            base: top.clone(),
        };
        let req = Request {
            memory: Some(1 << 20),
            memory_high: None,
            cpus: None,
            pids: Some(8),
        };
        let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &req);
        let Enforced::Unavailable(why) = &setup.memory else {
            panic!("{:?}", setup.memory)
        };
        assert_eq!(
            why,
            &format!(
                "no memory controller in the cgroup v2 hierarchy at {} (it is bound to the \
                 cgroup v1 hierarchy at /sys/fs/cgroup/memory)",
                top.display()
            )
        );
        let Enforced::Unavailable(why) = &setup.pids else {
            panic!("{:?}", setup.pids)
        };
        assert_eq!(
            why,
            &format!(
                "no pids controller in the cgroup v2 hierarchy at {}",
                top.display()
            )
        );
        assert_eq!(setup.cpu, Enforced::NotRequested);
        let run = setup.cgroup.expect("a cgroup still tracks the run");
        assert!(!run.path().join("memory.max").exists());
        assert!(!run.path().join("pids.max").exists());
        discard(run);
        // Nothing was enabled that the hierarchy does not have.
        assert_eq!(
            fs::read_to_string(top.join("cgroup.subtree_control")).unwrap(),
            ""
        );
    }

    #[test]
    fn undelegated_and_refused_controllers_say_which_file() {
        let fs_ = FakeFs::new("undeleg");
        let top = fs_.cg("", "cpu memory pids", "1\n");
        let base = fs_.cg("deleg", "memory pids", "");
        // A directory where a file should be: every write to it fails.
        fs::remove_file(base.join("cgroup.subtree_control")).unwrap();
        fs::create_dir(base.join("cgroup.subtree_control")).unwrap();
        let place = Placement {
            hierarchy: top.clone(),
            base: base.clone(),
        };
        let req = Request {
            memory: Some(1 << 20),
            memory_high: None,
            cpus: Some(1.0),
            pids: None,
        };
        let setup = prepare_at(&FakeHost::new(0, &[]), &place, &fs_.hier(), &req);
        let Enforced::Unavailable(cpu) = &setup.cpu else {
            panic!("{:?}", setup.cpu)
        };
        assert!(
            cpu.starts_with("the cpu controller is not delegated to"),
            "{cpu}"
        );
        let Enforced::Unavailable(mem) = &setup.memory else {
            panic!("{:?}", setup.memory)
        };
        assert!(
            mem.contains(&format!(
                "{}",
                base.join("cgroup.subtree_control").display()
            )),
            "{mem}"
        );
        assert_eq!(setup.pids, Enforced::NotRequested);
        discard(setup.cgroup.expect("run cgroup"));
    }

    #[test]
    fn stats_are_parsed_and_classify_limits() {
        let fs_ = FakeFs::new("stats");
        let d = fs_.cg("run", "", "");
        fs::write(d.join("memory.peak"), "67108864\n").unwrap();
        fs::write(d.join("memory.current"), "0\n").unwrap();
        fs::write(
            d.join("memory.events"),
            "low 0\nhigh 3\nmax 120\noom 1\noom_kill 1\noom_group_kill 1\n",
        )
        .unwrap();
        fs::write(
            d.join("cpu.stat"),
            "usage_usec 1000500\nuser_usec 990000\nsystem_usec 10500\nnr_periods 20\nnr_throttled 19\nthrottled_usec 950000\nnr_bursts 0\n",
        )
        .unwrap();
        fs::write(d.join("pids.events"), "max 7\n").unwrap();
        fs::write(d.join("pids.peak"), "32\n").unwrap();
        let s = read_stats(&d);
        assert_eq!(s.memory_peak, Some(64 << 20));
        assert!(s.oom_killed());
        assert_eq!(s.memory_events.as_ref().unwrap().max, 120);
        assert_eq!(s.cpu_usage_usec(), Some(1000500));
        assert_eq!(s.cpu.as_ref().unwrap().nr_throttled, 19);
        assert!(s.pids_limit_hit());
        assert_eq!(s.pids_peak, Some(32));
        assert_eq!(s.pids_current, None);
        let empty = read_stats(&fs_.cg("none", "", ""));
        assert_eq!(empty, Stats::default());
        assert!(!empty.oom_killed());
        assert!(!empty.pids_limit_hit());
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"oom_kill\":1"), "{json}");
    }

    #[test]
    fn stale_cleanup_spares_live_owners_and_strangers() {
        let fs_ = FakeFs::new("stale");
        let parent = fs_.dir.join(PARENT_NAME);
        fs::create_dir(&parent).unwrap();
        for n in ["run-10-100-0", "run-11-200-3", "unrelated", "run-12-300-1"] {
            fs::create_dir(parent.join(n)).unwrap();
        }
        let removed = cleanup_stale_in(&parent, |pid, st| pid == 11 && st == 200);
        let mut names: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["run-10-100-0", "run-12-300-1"]);
        assert!(parent.join("run-11-200-3").exists());
        assert!(parent.join("unrelated").exists());
        assert!(!parent.join("run-10-100-0").exists());
    }
}

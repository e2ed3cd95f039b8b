//! The cgroup v1 rung: for each limit the unified hierarchy cannot hold
//! (the host binds that controller to a v1 hierarchy, as hybrid and
//! cgroup-v1 hosts do), a group `<our cgroup there>/stockade/<run name>` in
//! that controller's v1 hierarchy, with the limit written into its files.
//!
//! The group sits under our own cgroup of that hierarchy, so whatever limit
//! the host put on us still holds the jail (v1 has no no-internal-process
//! rule). The supervisor writes the jail's first process into every group
//! while it waits for GO (`RunCgroup::place_v1`): no instruction of the
//! payload runs outside them, and every process it starts inherits them.
//!
//! Files written: memory `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`
//! (with swap accounting), `memory.oom_control` (the OOM killer on); pids
//! `pids.max`; cpu `cpu.cfs_period_us`/`cpu.cfs_quota_us`. Read after the
//! run: `memory.failcnt` (and memsw's), `memory.max_usage_in_bytes`, the
//! `oom_kill` and `under_oom` lines of `memory.oom_control` (the memory
//! verdict's: failcnt and max_usage also move when reclaim drops page
//! cache at the limit), `pids.events`, `cpuacct.usage*`, `cpu.stat`.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::error::{CgroupError, FileOp};
use super::files::{read_trim, write_file};
use super::prepare::next_run_name;
use super::{
    cgroup_dir, read_host, Controller, CpuStat, Enforced, Hierarchies, Host, MemoryEvents, Mount,
    Request, RunCgroup, Setup, Stats, CPU_MIN_QUOTA_US, CPU_PERIOD_US, PARENT_NAME,
};
use crate::sys;

/// The run's group in one cgroup v1 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Group {
    /// The controllers bound to that hierarchy (`memory`, or `cpu,cpuacct`).
    pub controllers: Vec<String>,
    pub path: PathBuf,
}

impl V1Group {
    fn has(&self, ctrl: &str) -> bool {
        self.controllers.iter().any(|c| c == ctrl)
    }
}

/// Our cgroup in the v1 hierarchy of `ctrl`, from /proc/self/cgroup
/// (`4:memory:/some/path`, or `2:cpu,cpuacct:/…`).
pub fn own_v1_path(proc_cgroup: &str, ctrl: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_, ctrls, path) = (it.next()?, it.next()?, it.next()?);
        ctrls
            .split(',')
            .any(|c| c == ctrl)
            .then(|| path.trim_end().to_string())
    })
}

/// The limits v2 left unavailable, tried on the v1 hierarchies. Each
/// success is `Enforced::CgroupV1` with its group added to the run; each
/// failure keeps the v2 reason and adds the v1 one. `cpuacct`: with a cpu
/// limit, also a group in cpuacct's hierarchy when it is one of its own
/// (the CPU time of the whole run; a caller that counts it otherwise
/// passes false).
pub(super) fn climb(
    host: &dyn Host,
    h: &Hierarchies,
    pc: &str,
    req: &Request,
    setup: &mut Setup,
    cpuacct: bool,
) {
    if h.v1.is_empty() {
        return;
    }
    let name = match &setup.cgroup {
        Some(c) if c.has_v2() => c
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        _ => None,
    }
    .unwrap_or_else(next_run_name);
    let mut groups: Vec<V1Group> = Vec::new();
    let mut rung = Rung {
        host,
        h,
        pc,
        name: &name,
        groups: &mut groups,
        cpuacct,
    };
    let climbed = &mut setup.climbed;
    if let (Some(m), Enforced::Unavailable(_)) = (req.memory, &setup.memory) {
        let got = rung.memory(m);
        add(&mut setup.memory, got, Controller::Memory, climbed);
    }
    if let (Enforced::Unavailable(why), true) = (&mut setup.memory_high, req.memory_high.is_some())
    {
        why.push_str("; cgroup v1 has no memory.high");
    }
    if let (Some(c), Enforced::Unavailable(_)) = (req.cpus, &setup.cpu) {
        let got = rung.cpu(c);
        add(&mut setup.cpu, got, Controller::Cpu, climbed);
    }
    if let (Some(p), Enforced::Unavailable(_)) = (req.pids, &setup.pids) {
        let got = rung.pids(p);
        add(&mut setup.pids, got, Controller::Pids, climbed);
    }
    // No limit asked but no unified group either: a group that still
    // tracks (and kills) every process of the run.
    if rung.groups.is_empty() && setup.cgroup.is_none() {
        let _ = rung.group("pids").or_else(|_| rung.group("memory"));
    }
    if groups.is_empty() {
        return;
    }
    let run = setup
        .cgroup
        .get_or_insert_with(|| RunCgroup::v1_only(sys::getpid()));
    for g in groups {
        run.push_v1(g);
    }
    setup.why = None;
}

/// One limit's v1 result folded into its v2 answer.
fn add(
    e: &mut Enforced,
    got: Result<(), String>,
    c: Controller,
    climbed: &mut Vec<(Controller, String)>,
) {
    match (got, &mut *e) {
        (Ok(()), Enforced::Unavailable(v2)) => {
            climbed.push((c, std::mem::take(v2)));
            *e = Enforced::CgroupV1;
        }
        (Ok(()), _) => *e = Enforced::CgroupV1,
        (Err(v1), Enforced::Unavailable(v2)) => {
            v2.push_str("; cgroup v1: ");
            v2.push_str(&v1);
        }
        (Err(v1), _) => *e = Enforced::Unavailable(format!("cgroup v1: {v1}")),
    }
}

/// What the v1 rung works with while it makes the run's groups.
struct Rung<'a> {
    host: &'a dyn Host,
    h: &'a Hierarchies,
    pc: &'a str,
    name: &'a str,
    groups: &'a mut Vec<V1Group>,
    cpuacct: bool,
}

impl Rung<'_> {
    fn memory(&mut self, bytes: u64) -> Result<(), String> {
        let g = self.group("memory")?;
        write_file(&g, "memory.limit_in_bytes", &bytes.to_string()).map_err(text)?;
        // Without swap accounting there is no memsw file (and with no swap,
        // nothing to limit).
        if g.join("memory.memsw.limit_in_bytes").exists() {
            write_file(&g, "memory.memsw.limit_in_bytes", &bytes.to_string()).map_err(text)?;
        }
        // The OOM killer on (a group with it off would hang at the limit).
        if g.join("memory.oom_control").exists() {
            write_file(&g, "memory.oom_control", "0").map_err(text)?;
        }
        Ok(())
    }

    fn cpu(&mut self, cpus: f64) -> Result<(), String> {
        if !cpus.is_finite() || cpus <= 0.0 || cpus * CPU_PERIOD_US as f64 > i64::MAX as f64 / 2.0 {
            return Err(format!("cpus {cpus:?}: not a positive number"));
        }
        let quota = ((cpus * CPU_PERIOD_US as f64).round() as u64).max(CPU_MIN_QUOTA_US);
        let g = self.group("cpu")?;
        write_file(&g, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string()).map_err(text)?;
        write_file(&g, "cpu.cfs_quota_us", &quota.to_string()).map_err(text)?;
        // CPU time of the whole run, when cpuacct is on a hierarchy of its own.
        if self.cpuacct {
            let _ = self.group("cpuacct");
        }
        Ok(())
    }

    fn pids(&mut self, n: u64) -> Result<(), String> {
        let g = self.group("pids")?;
        write_file(&g, "pids.max", &n.to_string()).map_err(text)
    }

    /// The run's group in `ctrl`'s hierarchy, made unless another
    /// controller of the same hierarchy made it.
    fn group(&mut self, ctrl: &str) -> Result<PathBuf, String> {
        let m = self
            .h
            .v1_for(ctrl)
            .ok_or_else(|| format!("no {ctrl} hierarchy mounted"))?;
        if let Some(g) = self.groups.iter().find(|g| g.has(ctrl)) {
            return Ok(g.path.clone());
        }
        let parent = parent_in(m, self.pc, ctrl)?;
        let euid = self.host.euid();
        let probe = if parent.exists() {
            &parent
        } else {
            parent.parent().unwrap_or(&parent)
        };
        if !self.host.writable(probe) {
            return Err(format!(
                "{}: not writable by uid {euid} (the v1 hierarchies are root's unless a directory is delegated)",
                probe.display()
            ));
        }
        mkdir(self.host, &parent, true)?;
        let path = parent.join(self.name);
        mkdir(self.host, &path, false)?;
        self.groups.push(V1Group {
            controllers: m.controllers.clone(),
            path: path.clone(),
        });
        Ok(path)
    }
}

/// A new memory limit for a group made earlier: memory.limit_in_bytes and
/// (with swap accounting) memsw's, in the order the kernel takes them
/// (the memory limit may never pass memsw's): a raise writes memsw's
/// first, a cut the memory limit first. A cut below what the group uses
/// and cannot reclaim is refused (EBUSY).
pub(super) fn set_memory(g: &Path, bytes: u64) -> Result<(), CgroupError> {
    let v = bytes.to_string();
    let memsw = g.join("memory.memsw.limit_in_bytes").exists();
    let raise = num(g, "memory.limit_in_bytes").is_some_and(|now| bytes > now);
    if memsw && raise {
        write_file(g, "memory.memsw.limit_in_bytes", &v)?;
    }
    write_file(g, "memory.limit_in_bytes", &v)?;
    if memsw && !raise {
        write_file(g, "memory.memsw.limit_in_bytes", &v)?;
    }
    Ok(())
}

/// `<our cgroup in m>/stockade`.
fn parent_in(m: &Mount, pc: &str, ctrl: &str) -> Result<PathBuf, String> {
    let own =
        own_v1_path(pc, ctrl).ok_or_else(|| format!("no {ctrl} line in /proc/self/cgroup"))?;
    let dir = cgroup_dir(m, &own).ok_or_else(|| {
        format!(
            "our {ctrl} cgroup {own} is not visible under {} (mount root {})",
            m.mountpoint.display(),
            m.root
        )
    })?;
    Ok(dir.join(PARENT_NAME))
}

fn mkdir(host: &dyn Host, p: &Path, exist_ok: bool) -> Result<(), String> {
    match host.mkdir(p) {
        Ok(()) => Ok(()),
        Err(e) if exist_ok && e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(text(CgroupError::File {
            op: FileOp::Mkdir,
            path: p.to_path_buf(),
            source,
        })),
    }
}

fn text(e: CgroupError) -> String {
    e.to_string()
}

/// The `stockade/` directories under our cgroup in each v1 hierarchy that
/// holds a controller this layer uses (for the stale-cgroup cleanup).
pub(super) fn parents() -> Vec<PathBuf> {
    let Ok((h, pc)) = read_host() else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for ctrl in ["memory", "cpu", "cpuacct", "pids"] {
        if let Some(p) = h.v1_for(ctrl).and_then(|m| parent_in(m, &pc, ctrl).ok()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

// ------------------------------------------------------------ what it used

fn num(dir: &Path, file: &str) -> Option<u64> {
    read_trim(&dir.join(file)).ok()?.parse().ok()
}

/// The `key value` lines of a v1 file (empty when it cannot be read).
fn keyed(dir: &Path, file: &str) -> Vec<(String, u64)> {
    let Ok(s) = fs::read_to_string(dir.join(file)) else {
        return Vec::new();
    };
    s.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// `key`'s value in [`keyed`]'s lines.
fn get(kv: &[(String, u64)], key: &str) -> Option<u64> {
    kv.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// Fill `st` with what the v1 group's controllers counted.
pub(super) fn read_into(g: &V1Group, st: &mut Stats) {
    let d = &g.path;
    if g.has("memory") {
        st.memory_peak = num(d, "memory.max_usage_in_bytes").or(st.memory_peak);
        // failcnt: charges that met the limit (memsw's: with swap), also
        // those reclaim satisfied by dropping page cache: reported, never
        // a verdict (see `Stats::memory_limit_hit`). The verdict's counters
        // are those of memory.oom_control: `oom_kill` (the OOM killer
        // killed in this group because reclaim could not bring it under
        // the limit) and `under_oom` (it is at the limit with nothing
        // reclaimable right now).
        let fails =
            num(d, "memory.failcnt").unwrap_or(0) + num(d, "memory.memsw.failcnt").unwrap_or(0);
        let oom = keyed(d, "memory.oom_control");
        st.memory_events = Some(MemoryEvents {
            max: fails,
            oom: get(&oom, "under_oom").unwrap_or(0),
            oom_kill: get(&oom, "oom_kill").unwrap_or(0),
            ..MemoryEvents::default()
        });
    }
    if g.has("pids") {
        st.pids_peak = num(d, "pids.peak").or(st.pids_peak);
        st.pids_events_max = get(&keyed(d, "pids.events"), "max").or(st.pids_events_max);
    }
    if g.has("cpuacct") {
        let mut c = st.cpu.clone().unwrap_or_default();
        if let Some(ns) = num(d, "cpuacct.usage") {
            c.usage_usec = ns / 1000;
        }
        c.user_usec = num(d, "cpuacct.usage_user").map_or(c.user_usec, |ns| ns / 1000);
        c.system_usec = num(d, "cpuacct.usage_sys").map_or(c.system_usec, |ns| ns / 1000);
        st.cpu = Some(c);
    }
    if g.has("cpu") {
        let c: &mut CpuStat = st.cpu.get_or_insert_with(CpuStat::default);
        let kv = keyed(d, "cpu.stat");
        c.nr_periods = get(&kv, "nr_periods").unwrap_or(0);
        c.nr_throttled = get(&kv, "nr_throttled").unwrap_or(0);
        c.throttled_usec = get(&kv, "throttled_time").unwrap_or(0) / 1000;
    }
}

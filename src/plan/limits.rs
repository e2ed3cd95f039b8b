//! Which mechanism enforces each limit: a cgroup controller when there is
//! one, else an rlimit, recorded out loud in the outcome. The plan makes
//! the run's cgroup and the run directory's cap first (the resources the
//! decision depends on), then decides.

#![deny(unsafe_code)]

pub mod ipc_share;
pub mod tmpfs_share;

use std::collections::BTreeMap;
use std::path::PathBuf;

use nix::sys::resource::Resource;
use serde_json::json;

use super::mode::Kind;
use super::{rundir, Mode, Plan, Resources, SetupError};
use crate::cgroup;
use crate::policy::{Layer, Limits as Asked, Policy};
use crate::sys;

/// The run's limits: those asked for, how each is held, and what the jail
/// does for them (the payload's rlimits, init's sampling and watch, the
/// tmpfs and IPC bounds).
#[derive(Debug, Clone)]
pub struct Limits {
    /// The limits asked for.
    pub asked: Asked,
    /// How each limit is enforced (decided once the run's cgroup and the
    /// run directory's cap are known).
    pub enforcement: Enforcement,
    /// rlimits the payload sets (those limits no cgroup controller holds).
    pub rlimits: Vec<Rlimit>,
    /// How often init samples the jail's task count and memory (ms; -1: only
    /// when a child exits): often when a limit is an rlimit whose verdict
    /// needs the samples.
    pub sample_ms: i32,
    /// /tmp's size cap (the fallback's run directory's), for the outcome.
    pub tmp_size: u64,
    /// Under the rlimit rung: the limits init writes in the jail's IPC
    /// namespace (path under /proc/sys, value), see `limits::ipc_share`.
    pub ipc_sysctls: Vec<(&'static str, String)>,
    /// The workdir tmpfs (inside the jail) and its size, when filling it
    /// ends the run as `disk_limit` (`Workdir::full_ends_run`): init
    /// watches it as it samples the jail's peaks. Never in the fallback.
    pub workdir_cap: Option<(PathBuf, u64)>,
}

/// One rlimit the payload sets (soft, hard) before anything else narrows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: nix::sys::resource::Resource,
    pub name: &'static str,
    pub soft: u64,
    pub hard: u64,
}

impl Limits {
    /// The limits `p` asks for, before [`enforce`] decides how they are held.
    pub(super) fn asked(p: &Policy, kind: Kind) -> Limits {
        // Only the jail's own workdir tmpfs (the fallback's run directory
        // is metered by the supervisor).
        let workdir_cap = match kind {
            Kind::Namespaced => (p.workdir.full_ends_run
                && p.workdir.host.is_none()
                && p.base != crate::policy::BaseRoot::Bare)
                .then(|| (p.workdir.inner.clone(), p.workdir.size)),
            Kind::Fallback => None,
        };
        Limits {
            asked: p.limits.clone(),
            enforcement: Enforcement::default(),
            rlimits: Vec::new(),
            sample_ms: 100,
            tmp_size: p.tmp_size,
            ipc_sysctls: Vec::new(),
            workdir_cap,
        }
    }
}

/// Why a cgroup controller does not enforce a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoController {
    /// No cgroup limit was asked for, so no cgroup was made.
    #[error("no cgroup limit was asked for")]
    NotAsked,
    /// The cgroup layer's reason (which file, which errno, which hierarchy).
    #[error("{0}")]
    Unavailable(String),
}

/// For each cgroup controller: the rung that holds it (`cgroup` for v2,
/// `cgroup_v1`), or why no cgroup can.
#[derive(Debug, Clone)]
pub struct Controllers {
    pub memory: Result<&'static str, NoController>,
    pub memory_high: Result<&'static str, NoController>,
    pub cpu: Result<&'static str, NoController>,
    pub pids: Result<&'static str, NoController>,
}

/// How one limit is enforced, for the outcome's `limits`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rung {
    /// Bytes, seconds, CPUs or a count, as the limit's unit.
    pub limit: serde_json::Value,
    /// The mechanism (`cgroup`, `rlimit_as`, `tmpfs`, `supervisor`, `none`, …).
    pub enforced_by: &'static str,
    pub why: Option<String>,
}

/// The decision: rlimits for the payload, the rung of every limit, and
/// limits that nothing enforces (a warning line each).
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub rlimits: Vec<Rlimit>,
    pub report: BTreeMap<&'static str, Rung>,
    pub unenforced: Vec<String>,
    /// The memory limit falls back to RLIMIT_AS (classification needs samples).
    pub memory_by_rlimit: bool,
    /// The pids limit falls back to RLIMIT_NPROC.
    pub pids_by_rlimit: bool,
}

/// How `--tmp-size` is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TmpCap {
    /// A tmpfs of that size is mounted (the jail's /tmp, or the fallback's
    /// run directory): writes past it fail with ENOSPC.
    Tmpfs,
    /// The fallback's run directory has no tmpfs (the reason): RLIMIT_FSIZE
    /// caps each file and the supervisor meters the directory and kills the
    /// jail past the cap (supervise::rundir).
    Metered(String),
}

/// The cgroup layer as the plan found it, for the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLayer {
    /// The run's cgroup (held in [`Resources::cgroup`]), the controllers
    /// it enforces, and its groups in cgroup v1 hierarchies.
    Applied {
        path: PathBuf,
        controllers: Vec<&'static str>,
        v1: Vec<PathBuf>,
        /// The systemd scope the run cgroup is in (the systemd rung).
        scope: Option<String>,
    },
    /// A cgroup limit was asked for and no cgroup could be made: why.
    Unavailable(String),
    /// No cgroup limit was asked for.
    Skipped,
}

/// What the plan decided about the limits, besides the payload's rlimits
/// (`Limits::rlimits`).
#[derive(Debug, Clone)]
pub struct Enforcement {
    /// Every limit's rung, for the outcome's `limits`.
    pub report: BTreeMap<&'static str, Rung>,
    /// Limits nothing enforces: a warning line each.
    pub unenforced: Vec<String>,
    pub memory_by_rlimit: bool,
    /// RLIMIT_AS when the jail's tmpfs mounts share `--memory` with it.
    pub rlimit_as: Option<u64>,
    pub pids_by_rlimit: bool,
    /// How `--tmp-size` is held.
    pub tmp: TmpCap,
    pub cgroup: CgroupLayer,
}

impl Default for Enforcement {
    fn default() -> Self {
        Enforcement {
            report: BTreeMap::new(),
            unenforced: Vec::new(),
            memory_by_rlimit: false,
            rlimit_as: None,
            pids_by_rlimit: false,
            tmp: TmpCap::Tmpfs,
            cgroup: CgroupLayer::Skipped,
        }
    }
}

// ------------------------------------------------------------ the plan's step

/// The run's cgroup (only when a cgroup limit is asked for or the layer is
/// required), the fallback run directory's cap, then how each limit is
/// enforced: the plan's rlimits, sampling and enforcement; the cgroup goes
/// into `res`.
pub(super) fn enforce(plan: &mut Plan, res: &mut Resources) -> Result<(), SetupError> {
    let l = &plan.limits.asked;
    let wants_cgroup =
        l.memory.is_some() || l.memory_high.is_some() || l.cpus.is_some() || l.pids.is_some();
    let require_cgroup = plan.layers.require.contains(&Layer::Cgroup);
    let setup = (wants_cgroup || require_cgroup).then(|| {
        cgroup::cleanup_stale();
        cgroup::prepare(&cgroup::Request::from(l))
    });
    let ctl = controllers(setup.as_ref());
    let asked_tmp = plan.limits.tmp_size;
    let share = match (plan.limits.asked.memory, &ctl.memory) {
        (Some(m), Err(_)) => Some((m, tmpfs_share::share(m, plan, res.run_dir.is_some()))),
        _ => None,
    };
    let tmp = run_dir_cap(plan, res);
    let mut d = decide(&plan.limits.asked, &ctl, plan.limits.tmp_size, &tmp);
    if let Some((m, s)) = &share {
        d.shared(*m, s, asked_tmp);
    }
    if let Some(s) = &setup {
        explain_climbs(&mut d.report, s);
    }
    if require_cgroup {
        if let Some(why) = setup.as_ref().and_then(unavailable) {
            return Err(SetupError::new(
                "cgroup",
                "",
                format!("required but unavailable: {why}"),
            ));
        }
    }
    let (cg, why) = match setup {
        Some(s) => (s.cgroup, s.why),
        None => (None, None),
    };
    let layer = match &cg {
        Some(c) => cgroup_layer(c, &ctl),
        None if wants_cgroup || require_cgroup => {
            CgroupLayer::Unavailable(why.unwrap_or_else(|| "no cgroup could be created".into()))
        }
        None => CgroupLayer::Skipped,
    };
    res.cgroup = cg;
    if d.memory_by_rlimit || d.pids_by_rlimit {
        plan.limits.sample_ms = 10;
    }
    let mut report = d.report;
    nproc_whose(&mut report, plan.mode.fallback().map(|f| f.ids));
    plan.limits.rlimits = d.rlimits;
    plan.limits.enforcement = Enforcement {
        report,
        unenforced: d.unenforced,
        rlimit_as: share.map(|(_, s)| s.rlimit_as),
        memory_by_rlimit: d.memory_by_rlimit,
        pids_by_rlimit: d.pids_by_rlimit,
        tmp,
        cgroup: layer,
    };
    Ok(())
}

/// A limit a lower cgroup rung holds says why the higher one could not.
pub fn explain_climbs(report: &mut BTreeMap<&'static str, Rung>, s: &cgroup::Setup) {
    for (c, why) in &s.climbed {
        let name = match c {
            cgroup::Controller::Memory => "memory",
            cgroup::Controller::Cpu => "cpus",
            cgroup::Controller::Pids => "pids",
        };
        if let Some(r) = report.get_mut(name) {
            r.why = Some(format!("cgroup v2: {why}"));
        }
    }
}

/// The rung each cgroup limit (memory, memory_high, cpus, pids) takes given
/// the cgroup layer's answer to a request for all of them, as a run would
/// decide it: (limit, enforced_by, why). For `stockade check`.
pub fn rungs(s: &cgroup::Setup) -> Vec<(&'static str, &'static str, Option<String>)> {
    let l = Asked {
        memory: Some(1 << 30),
        memory_high: Some(1 << 30),
        cpus: Some(1.0),
        pids: Some(1024),
        ..Asked::default()
    };
    let mut d = decide(&l, &controllers(Some(s)), 1 << 20, &TmpCap::Tmpfs);
    explain_climbs(&mut d.report, s);
    ["memory", "memory_high", "cpus", "pids"]
        .into_iter()
        .filter_map(|n| d.report.remove(n).map(|r| (n, r.enforced_by, r.why)))
        .collect()
}

/// The cgroup layer of a run held by `c`, whose controllers are `ctl`.
pub fn cgroup_layer(c: &cgroup::RunCgroup, ctl: &Controllers) -> CgroupLayer {
    CgroupLayer::Applied {
        path: c.path().to_path_buf(),
        controllers: enabled(ctl),
        v1: c.v1_groups().iter().map(|g| g.path.clone()).collect(),
        scope: c.systemd_unit().map(str::to_string),
    }
}

/// Map the cgroup layer's answer to what the limits decision needs.
pub fn controllers(setup: Option<&cgroup::Setup>) -> Controllers {
    let one = |e: Option<&cgroup::Enforced>| match e {
        Some(cgroup::Enforced::Cgroup) => Ok("cgroup"),
        Some(cgroup::Enforced::CgroupV1) => Ok("cgroup_v1"),
        Some(cgroup::Enforced::CgroupSystemd) => Ok("cgroup_systemd"),
        Some(cgroup::Enforced::Unavailable(why)) => Err(NoController::Unavailable(why.clone())),
        _ => Err(NoController::NotAsked),
    };
    Controllers {
        memory: one(setup.map(|s| &s.memory)),
        memory_high: one(setup.map(|s| &s.memory_high)),
        cpu: one(setup.map(|s| &s.cpu)),
        pids: one(setup.map(|s| &s.pids)),
    }
}

/// Why a required cgroup layer is not there: no cgroup at all, or a
/// controller asked for that it lacks.
fn unavailable(s: &cgroup::Setup) -> Option<String> {
    match s {
        cgroup::Setup {
            cgroup: None, why, ..
        } => Some(why.clone().unwrap_or_default()),
        s => [&s.memory, &s.memory_high, &s.cpu, &s.pids]
            .iter()
            .find_map(|e| match e {
                cgroup::Enforced::Unavailable(w) => Some(w.clone()),
                _ => None,
            }),
    }
}

fn enabled(c: &Controllers) -> Vec<&'static str> {
    [
        ("memory", c.memory.is_ok() || c.memory_high.is_ok()),
        ("cpu", c.cpu.is_ok()),
        ("pids", c.pids.is_ok()),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| *n)
    .collect()
}

/// The fallback's run directory: a tmpfs of its own where one can be
/// mounted, else metered (supervise::rundir).
fn run_dir_cap(plan: &mut Plan, res: &mut Resources) -> TmpCap {
    let (Some(dir), Mode::Fallback(f)) = (res.run_dir.as_mut(), &mut plan.mode) else {
        return TmpCap::Tmpfs;
    };
    if sys::geteuid() == 0 {
        rundir::cleanup_stale();
    }
    match dir.mount_tmpfs(plan.limits.tmp_size, f.ids) {
        Ok(()) => {
            f.run_dir_tmpfs = true;
            TmpCap::Tmpfs
        }
        Err(why) => TmpCap::Metered(format!(
            "no tmpfs on the run directory ({why}): RLIMIT_FSIZE caps each file, the supervisor meters the directory and kills the jail past the cap"
        )),
    }
}

/// Without a user namespace RLIMIT_NPROC counts the host uid's processes,
/// wherever they run: say whose. `fallback`: the fallback's leased ids
/// (`Some(None)`: it leased none); None with namespaces.
fn nproc_whose(report: &mut BTreeMap<&'static str, Rung>, fallback: Option<Option<(u32, u32)>>) {
    let Some(r) = report.get_mut("pids") else {
        return;
    };
    let whose = match fallback {
        None => None,
        Some(Some((uid, _))) => Some(format!(
            "RLIMIT_NPROC counts the processes of host uid {uid}, this jail's own (leased from --uid-range)"
        )),
        Some(None) => Some(format!(
            "RLIMIT_NPROC counts every process of host uid {} (no user namespace): the limit is shared with the caller's other processes",
            sys::getuid()
        )),
    };
    if let (Some(w), "rlimit_nproc") = (whose, r.enforced_by) {
        r.why = Some(match r.why.take() {
            Some(first) => format!("{first}; {w}"),
            None => w,
        });
    }
}

// ------------------------------------------------------------ the decision

fn rl(resource: Resource, name: &'static str, soft: u64, hard: u64) -> Rlimit {
    Rlimit {
        resource,
        name,
        soft,
        hard,
    }
}

fn rung(limit: serde_json::Value, enforced_by: &'static str, why: Option<String>) -> Rung {
    Rung {
        limit,
        enforced_by,
        why,
    }
}

/// Decide how to enforce `l` given the cgroup controllers at hand.
pub fn decide(l: &Asked, c: &Controllers, tmp_size: u64, tmp: &TmpCap) -> Decision {
    let mut d = Decision::default();
    d.core_and_tmp(tmp_size, tmp);
    d.memory(l, c);
    d.cpus(l, c);
    d.pids(l, c);
    d.files(l, tmp_size, tmp);
    d.supervisor(l);
    d
}

impl Decision {
    /// No core dumps; /tmp (or the run directory) capped by a tmpfs or the
    /// meter.
    fn core_and_tmp(&mut self, tmp_size: u64, tmp: &TmpCap) {
        self.rlimits
            .push(rl(Resource::RLIMIT_CORE, "RLIMIT_CORE", 0, 0));
        self.report
            .insert("core_size", rung(json!(0), "rlimit_core", None));
        let tmp = match tmp {
            TmpCap::Tmpfs => rung(json!(tmp_size), "tmpfs", None),
            TmpCap::Metered(why) => rung(
                json!(tmp_size),
                "rlimit_fsize+supervisor",
                Some(why.clone()),
            ),
        };
        self.report.insert("tmp_size", tmp);
    }

    /// `--memory` (RLIMIT_AS without the controller) and `--memory-high`
    /// (nothing without it).
    fn memory(&mut self, l: &Asked, c: &Controllers) {
        if let Some(m) = l.memory {
            let r = match &c.memory {
                Ok(by) => rung(json!(m), by, None),
                Err(why) => {
                    self.rlimits
                        .push(rl(Resource::RLIMIT_AS, "RLIMIT_AS", m, m));
                    self.memory_by_rlimit = true;
                    rung(json!(m), "rlimit_as", Some(why.to_string()))
                }
            };
            self.report.insert("memory", r);
        }
        if let Some(m) = l.memory_high {
            let r = self.controller_only("--memory-high", json!(m), &c.memory_high);
            self.report.insert("memory_high", r);
        }
    }

    /// Under the rlimit rung: RLIMIT_AS is `--memory` less the jail's
    /// tmpfs mounts (see [`tmpfs_share`]), and the outcome says so.
    fn shared(&mut self, memory: u64, s: &tmpfs_share::Share, asked_tmp: u64) {
        for r in &mut self.rlimits {
            if r.name == "RLIMIT_AS" {
                (r.soft, r.hard) = (s.rlimit_as, s.rlimit_as);
            }
        }
        if let Some(ipc) = &s.ipc {
            self.rlimits.push(rl(
                Resource::RLIMIT_MSGQUEUE,
                "RLIMIT_MSGQUEUE",
                ipc.mq,
                ipc.mq,
            ));
        }
        let line = s.describe(memory);
        if let Some(r) = self.report.get_mut("memory") {
            r.why = Some(match r.why.take() {
                Some(w) => format!("{w}; {line}"),
                None => line,
            });
        }
        if let Some(r) = self.report.get_mut("tmp_size") {
            let now = r.limit.as_u64().unwrap_or(asked_tmp);
            if now != asked_tmp {
                let why = format!(
                    "--tmp-size {asked_tmp} shrunk: under RLIMIT_AS the jail's tmpfs mounts count against --memory"
                );
                r.why = Some(match r.why.take() {
                    Some(w) => format!("{why}; {w}"),
                    None => why,
                });
            }
        }
    }

    /// `--cpus`: the cpu controller or nothing.
    fn cpus(&mut self, l: &Asked, c: &Controllers) {
        if let Some(cpus) = l.cpus {
            let r = self.controller_only("--cpus", json!(cpus), &c.cpu);
            self.report.insert("cpus", r);
        }
    }

    /// A limit only a controller can enforce; without it, a warning.
    fn controller_only(
        &mut self,
        flag: &str,
        limit: serde_json::Value,
        c: &Result<&'static str, NoController>,
    ) -> Rung {
        match c {
            Ok(by) => rung(limit, by, None),
            Err(why) => {
                self.unenforced
                    .push(format!("{flag} is not enforced: {why}"));
                rung(limit, "none", Some(why.to_string()))
            }
        }
    }

    /// `--pids-limit` (RLIMIT_NPROC without the controller: counted per
    /// uid inside the jail's own user namespace, where init and the payload
    /// are the only users of the jail uid) and `--cpu-time`.
    fn pids(&mut self, l: &Asked, c: &Controllers) {
        if let Some(p) = l.pids {
            let r = match &c.pids {
                Ok(by) => rung(json!(p), by, None),
                Err(why) => {
                    self.rlimits
                        .push(rl(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", p, p));
                    self.pids_by_rlimit = true;
                    rung(json!(p), "rlimit_nproc", Some(why.to_string()))
                }
            };
            self.report.insert("pids", r);
        }
        if let Some(t) = l.cpu_time {
            let secs = t.as_secs_f64().ceil().max(1.0) as u64;
            // SIGXCPU at the soft limit, SIGKILL one second later.
            self.rlimits
                .push(rl(Resource::RLIMIT_CPU, "RLIMIT_CPU", secs, secs + 1));
            self.report
                .insert("cpu_time", rung(json!(secs), "rlimit_cpu", None));
        }
    }

    /// RLIMIT_FSIZE (`--max-file-size`, and the metered run directory's
    /// cap on one file) and RLIMIT_NOFILE.
    fn files(&mut self, l: &Asked, tmp_size: u64, tmp: &TmpCap) {
        let metered = matches!(tmp, TmpCap::Metered(_));
        let fsize = match (l.max_file_size, metered) {
            (Some(f), true) => Some(f.min(tmp_size)),
            (Some(f), false) => Some(f),
            (None, true) => Some(tmp_size),
            (None, false) => None,
        };
        if let Some(f) = fsize {
            self.rlimits
                .push(rl(Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", f, f));
        }
        if let Some(f) = l.max_file_size {
            self.report
                .insert("max_file_size", rung(json!(f), "rlimit_fsize", None));
        }
        if let Some(n) = l.max_open_files {
            self.rlimits
                .push(rl(Resource::RLIMIT_NOFILE, "RLIMIT_NOFILE", n, n));
            self.report
                .insert("max_open_files", rung(json!(n), "rlimit_nofile", None));
        }
    }

    /// What the supervisor enforces: the deadline, its grace, the output cap.
    fn supervisor(&mut self, l: &Asked) {
        if let Some(t) = l.timeout {
            self.report
                .insert("timeout", rung(json!(t.as_secs_f64()), "supervisor", None));
            self.report.insert(
                "grace",
                rung(json!(l.grace.as_secs_f64()), "supervisor", None),
            );
        }
        if let Some(m) = l.max_output {
            self.report
                .insert("max_output", rung(json!(m), "supervisor", None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn none(why: &str) -> Controllers {
        let e = || Err(NoController::Unavailable(why.into()));
        Controllers {
            memory: e(),
            memory_high: e(),
            cpu: e(),
            pids: e(),
        }
    }

    #[test]
    fn without_controllers_memory_and_pids_fall_back_to_rlimits() {
        let l = Asked {
            memory: Some(256 << 20),
            pids: Some(64),
            cpus: Some(0.5),
            ..Default::default()
        };
        let d = decide(&l, &none("no memory controller"), 1 << 20, &TmpCap::Tmpfs);
        assert_eq!(d.report["memory"].enforced_by, "rlimit_as");
        assert_eq!(
            d.report["memory"].why.as_deref(),
            Some("no memory controller")
        );
        assert_eq!(d.report["pids"].enforced_by, "rlimit_nproc");
        assert_eq!(d.report["cpus"].enforced_by, "none");
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_AS" && r.soft == 256 << 20));
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_NPROC" && r.soft == 64));
        assert_eq!(d.unenforced.len(), 1);
        assert!(d.memory_by_rlimit && d.pids_by_rlimit);
    }

    #[test]
    fn with_controllers_no_rlimit_fallback() {
        let c = Controllers {
            memory: Ok("cgroup"),
            memory_high: Ok("cgroup"),
            cpu: Ok("cgroup"),
            pids: Ok("cgroup_v1"),
        };
        let l = Asked {
            memory: Some(1 << 30),
            pids: Some(10),
            cpus: Some(1.0),
            ..Default::default()
        };
        let d = decide(&l, &c, 1, &TmpCap::Tmpfs);
        assert!(d
            .rlimits
            .iter()
            .all(|r| r.name != "RLIMIT_AS" && r.name != "RLIMIT_NPROC"));
        assert_eq!(d.report["memory"].enforced_by, "cgroup");
        assert!(d.unenforced.is_empty());
    }

    #[test]
    fn a_metered_run_directory_caps_every_file_at_the_smaller_size() {
        let fsize = |d: &Decision| {
            d.rlimits
                .iter()
                .filter(|r| r.name == "RLIMIT_FSIZE")
                .map(|r| (r.soft, r.hard))
                .collect::<Vec<_>>()
        };
        let metered = TmpCap::Metered("not root".into());
        let d = decide(&Asked::default(), &none("x"), 8 << 20, &metered);
        assert_eq!(fsize(&d), vec![(8 << 20, 8 << 20)]);
        assert_eq!(d.report["tmp_size"].enforced_by, "rlimit_fsize+supervisor");
        assert_eq!(d.report["tmp_size"].why.as_deref(), Some("not root"));
        let l = Asked {
            max_file_size: Some(1 << 20),
            ..Default::default()
        };
        let d = decide(&l, &none("x"), 8 << 20, &metered);
        assert_eq!(fsize(&d), vec![(1 << 20, 1 << 20)]);
        let d = decide(&Asked::default(), &none("x"), 8 << 20, &TmpCap::Tmpfs);
        assert!(fsize(&d).is_empty());
        assert_eq!(d.report["tmp_size"].enforced_by, "tmpfs");
    }

    #[test]
    fn always_core_zero_and_cpu_time_rounds_up() {
        let l = Asked {
            cpu_time: Some(Duration::from_millis(1500)),
            ..Default::default()
        };
        let d = decide(&l, &none("x"), 1, &TmpCap::Tmpfs);
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_CORE" && r.hard == 0));
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_CPU" && r.soft == 2 && r.hard == 3));
    }

    #[test]
    fn the_unenforced_warnings_name_the_flag_and_why() {
        let l = Asked {
            memory_high: Some(1 << 20),
            cpus: Some(2.0),
            ..Default::default()
        };
        let c = Controllers {
            memory_high: Err(NoController::NotAsked),
            ..none("no cpu controller")
        };
        let d = decide(&l, &c, 1, &TmpCap::Tmpfs);
        assert_eq!(
            d.unenforced,
            vec![
                "--memory-high is not enforced: no cgroup limit was asked for",
                "--cpus is not enforced: no cpu controller"
            ]
        );
    }

    #[test]
    fn the_fallbacks_nproc_says_whose_processes_count() {
        let with = |why: Option<&str>| {
            let mut m = BTreeMap::new();
            m.insert(
                "pids",
                rung(json!(5), "rlimit_nproc", why.map(String::from)),
            );
            m
        };
        let mut r = with(Some("no pids controller"));
        nproc_whose(&mut r, None);
        assert_eq!(r["pids"].why.as_deref(), Some("no pids controller"));
        nproc_whose(&mut r, Some(Some((70000, 70000))));
        assert_eq!(
            r["pids"].why.as_deref(),
            Some("no pids controller; RLIMIT_NPROC counts the processes of host uid 70000, this jail's own (leased from --uid-range)")
        );
        let mut r = with(None);
        nproc_whose(&mut r, Some(None));
        assert!(r["pids"]
            .why
            .as_deref()
            .is_some_and(|w| w.starts_with("RLIMIT_NPROC counts every process of host uid")));
    }
}

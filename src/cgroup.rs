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
//! touches one whose owner is still alive; it kills what is left in them
//! and does not wait for it to go: [`cleanup_stale_pending`] removes them
//! at the run's end.
//!
//! Files: this one holds the layer's vocabulary (the request, what each
//! limit got, the run cgroup) and [`prepare`](fn@prepare); `probe` finds the hierarchy
//! and the base, `prepare` makes the run cgroup and writes the limits,
//! `run` uses and removes it (and stale ones), `stats` reads what the run
//! used, `files` is the plain file I/O on cgroupfs they share; `nest`
//! makes a fork server's zygote cgroup the parent of its children's.

#![deny(unsafe_code)]

mod error;
mod files;
mod janitor;
mod nest;
mod prepare;
mod probe;
mod run;
mod stats;
mod systemd;
mod v1;

use std::fmt;
use std::fs::File;
use std::path::PathBuf;

use crate::policy::Limits;

pub use error::*;
pub use janitor::{remove_after_exit, settle};
pub use nest::{Nest, NEST_LEAF};
pub use prepare::*;
pub use probe::*;
pub use run::*;
pub use stats::*;
pub use v1::{own_v1_path, V1Group};

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
    /// The limit is written into the run cgroup (cgroup v2).
    Cgroup,
    /// The limit is written into the run's group in a cgroup v1 controller
    /// hierarchy (the host has the controller on v1, not on v2).
    CgroupV1,
    /// The limit is written into the run cgroup made inside a transient
    /// scope the user's systemd delegated to us (over D-Bus).
    CgroupSystemd,
    /// The limit was not asked for.
    NotRequested,
    /// The limit was asked for and cannot be enforced by a cgroup; the text
    /// says precisely why (which file, which errno, which hierarchy).
    Unavailable(String),
}

impl Enforced {
    /// Held by a real cgroup controller (v2 or v1).
    pub fn is_cgroup(&self) -> bool {
        matches!(
            self,
            Enforced::Cgroup | Enforced::CgroupV1 | Enforced::CgroupSystemd
        )
    }
}

/// What [`prepare`](fn@prepare) did.
#[derive(Debug)]
pub struct Setup {
    /// The run cgroup, when one could be created (even with no controller:
    /// it still tracks and kills every process of the run).
    pub cgroup: Option<RunCgroup>,
    /// memory (memory.max, or v1 memory.limit_in_bytes).
    pub memory: Enforced,
    /// memory_high (memory.high: v2 only, cgroup v1 has no equivalent).
    pub memory_high: Enforced,
    pub cpu: Enforced,
    pub pids: Enforced,
    /// Why there is no cgroup at all.
    pub why: Option<String>,
    /// The limits a lower rung (cgroup v1) holds, and why the unified
    /// hierarchy could not.
    pub climbed: Vec<(Controller, String)>,
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

/// The cgroups a run lives in: its group in the unified hierarchy (when
/// one could be made) and its groups in the cgroup v1 controller
/// hierarchies that hold the limits v2 cannot (at least one of the two).
/// Dropping it without [`RunCgroup::remove`] kills what is left in it and
/// removes it (only in the process that created it: a forked jail child
/// that unwinds never touches it).
#[derive(Debug)]
pub struct RunCgroup {
    v2: Option<V2Dir>,
    v1: Vec<V1Group>,
    /// The systemd rung: the scope's holder and the run cgroup's path in
    /// the scope (systemd moves the jail's child there).
    systemd: Option<(systemd::Holder, String)>,
    owner: i32,
    removed: bool,
}

/// The run's group in the unified hierarchy, and an O_DIRECTORY fd of it.
#[derive(Debug)]
struct V2Dir {
    path: PathBuf,
    dir: File,
}

/// Create the run cgroup and write the limits. Called by the supervisor
/// before clone. Never panics; every failure is in the returned Setup.
pub fn prepare(req: &Request) -> Setup {
    match read_host() {
        Ok((h, pc)) => prepare_in(req, &h, &pc),
        Err(why) => unavailable_everywhere(req, &why.to_string()),
    }
}

/// [`prepare`] with the host's hierarchies and our own cgroup as
/// [`read_host`] found them, read once by a caller that makes many run
/// cgroups (a fork server: one per child).
pub fn prepare_in(req: &Request, h: &Hierarchies, pc: &str) -> Setup {
    let host = RealHost;
    let mut setup = match choose(&host, h, pc) {
        Ok(place) => prepare_at(&host, &place, h, req),
        Err(why) => match asks_limits(req) && host.euid() != 0 {
            true => systemd_rung(&host, h, req, &why.to_string()),
            false => unavailable_everywhere(req, &why.to_string()),
        },
    };
    v1::climb(&host, h, pc, req, &mut setup, true);
    setup
}

/// [`prepare_in`] for a run whose processes a pid namespace of their own
/// already holds and kills (a fork server's child), on a host where the
/// unified hierarchy held none of a first run's limits (`climbed`: that
/// run's [`Setup::climbed`], every limit it was asked held by cgroup v1,
/// as on a hybrid host whose controllers are all on v1): the run gets its
/// v1 groups only, each limit reported as having climbed for the same
/// reason; the unified group would hold no limit and count nothing the
/// pid namespace does not. None when the request asks a limit `climbed`
/// has no reason for (the caller then uses [`prepare_in`]).
pub fn prepare_v1_in(
    req: &Request,
    h: &Hierarchies,
    pc: &str,
    climbed: &[(Controller, String)],
) -> Option<Setup> {
    let why = |c: Controller, asked: bool| -> Option<Enforced> {
        if !asked {
            return Some(Enforced::NotRequested);
        }
        climbed
            .iter()
            .find(|(x, _)| *x == c)
            .map(|(_, w)| Enforced::Unavailable(w.clone()))
    };
    let mut setup = Setup {
        cgroup: None,
        memory: why(Controller::Memory, req.memory.is_some())?,
        memory_high: why(Controller::Memory, req.memory_high.is_some())?,
        cpu: why(Controller::Cpu, req.cpus.is_some())?,
        pids: why(Controller::Pids, req.pids.is_some())?,
        why: None,
        climbed: Vec::new(),
    };
    // The child's rusage (its pid 1 reaps the whole tree) is its CPU time.
    v1::climb(&RealHost, h, pc, req, &mut setup, false);
    Some(setup)
}

fn asks_limits(req: &Request) -> bool {
    req.memory.is_some() || req.memory_high.is_some() || req.cpus.is_some() || req.pids.is_some()
}

/// The rung below a unified hierarchy with no base of our own: a scope the
/// user's systemd delegates (see `systemd`); `v2_why` is why the rung
/// above is not there.
fn systemd_rung(host: &dyn Host, h: &Hierarchies, req: &Request, v2_why: &str) -> Setup {
    let name = prepare::next_run_name();
    let unit = format!("stockade-{name}.scope");
    let (holder, scope) = match systemd::scope(h, &unit) {
        Ok(s) => s,
        Err(why) => return unavailable_everywhere(req, &format!("{v2_why}; systemd: {why}")),
    };
    let Some(m) = h.unified() else {
        return unavailable_everywhere(req, v2_why);
    };
    let place = Placement {
        hierarchy: m.mountpoint.clone(),
        base: scope.clone(),
    };
    let mut setup = prepare_at(host, &place, h, req);
    let Some(run) = setup.cgroup.as_mut() else {
        let why = setup.why.clone().unwrap_or_default();
        return unavailable_everywhere(req, &format!("{v2_why}; systemd scope {unit}: {why}"));
    };
    let Some(sub) = systemd::subcgroup(&scope, run.path()) else {
        return unavailable_everywhere(req, v2_why);
    };
    run.systemd = Some((holder, sub));
    for (e, c) in [
        (&mut setup.memory, Some(Controller::Memory)),
        (&mut setup.memory_high, None),
        (&mut setup.cpu, Some(Controller::Cpu)),
        (&mut setup.pids, Some(Controller::Pids)),
    ] {
        if *e == Enforced::Cgroup {
            *e = Enforced::CgroupSystemd;
            // The outcome and `stockade check` say why the rung above
            // (a base of our own) did not hold it.
            setup.climbed.extend(c.map(|c| (c, v2_why.to_string())));
        }
    }
    setup
}

impl fmt::Display for Enforced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Enforced::Cgroup => f.write_str("cgroup"),
            Enforced::CgroupV1 => f.write_str("cgroup v1"),
            Enforced::CgroupSystemd => f.write_str("cgroup (systemd scope)"),
            Enforced::NotRequested => f.write_str("not requested"),
            Enforced::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

#[cfg(test)]
mod tests;

//! Policy → Plan: everything that may allocate, parse or fail slowly happens
//! here, before clone, and every decision is made here: the root's steps,
//! the Landlock rules, the compiled seccomp program, the fallback's leased
//! uid and run directory, the run's cgroup and how each limit is enforced.
//! Once built, a plan does not change; the child only executes it.
//!
//! Building a plan for a run also acquires what the run holds (the run's
//! cgroup, the run directory's tmpfs, the seccomp socket pair, the audit
//! read-log socket Landlock's denials are read from): they are
//! in [`Resources`], released on every path. [`Plan::validate`] checks a
//! policy the same way without acquiring anything.

#![deny(unsafe_code)]

mod channels;
mod deny;
pub mod egress;
mod error;
mod exec;
mod identity;
mod layers;
pub mod limits;
mod mode;
mod root;

/// Every mount of a jail of `p`, in order: the base root's, the workdir,
/// the policy's own (what `Plan::build` lays out).
pub(crate) fn mount_specs(p: &Policy) -> Vec<crate::policy::MountSpec> {
    root::specs(p)
}
pub mod rundir;
pub mod secrets;
pub mod uids;

use std::os::fd::OwnedFd;

pub use channels::Channels;
pub use deny::Masked;
pub use error::{step, SetupError};
pub use exec::Exec;
pub use identity::{BecomeUser, Identity};
pub use layers::{audit_verdict, Landlock, Layers};
pub use limits::{Limits, Rlimit};
use mode::Kind;
pub use mode::{Fallback, Mode, Namespaces};
pub use root::{Access, Root, RootStep, Upper, Writes};

use crate::cgroup::RunCgroup;
use crate::policy::{Network, Policy};
use crate::sys;

/// The syscall-ready description of a run, in parts that change for
/// reasons of their own.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Namespaced or fallback, with what only that mode has.
    pub mode: Mode,
    /// The ids the jail runs as and maps to, its capabilities.
    pub identity: Identity,
    /// The jail's own root (none in the fallback), what it hides.
    pub root: Root,
    /// The command, its environment and where it starts.
    pub exec: Exec,
    /// The limits and how each is held.
    pub limits: Limits,
    /// Landlock, seccomp, the network, the layers required.
    pub layers: Layers,
    /// The fds the run keeps, reads or writes, and the output's pipes.
    pub channels: Channels,
}

/// What building a plan acquired for its run. Each part is released when
/// dropped (in the process that acquired it), so every path out of a run,
/// or out of a build that failed half-way, lets go of it; the supervisor
/// takes the parts it uses.
#[derive(Debug, Default)]
pub struct Resources {
    /// The run's cgroup, when a cgroup limit is asked for (or the layer
    /// required) and one could be made.
    pub cgroup: Option<RunCgroup>,
    /// The seccomp socket pair (learning and kill mode, mediation): the
    /// supervisor's end and the payload's (`Channels::seccomp`).
    pub seccomp: Option<(OwnedFd, OwnedFd)>,
    /// The fallback's run directory: removed, its tmpfs detached, on drop.
    pub run_dir: Option<rundir::RunDir>,
    /// A socket on the kernel's audit read-log (`Landlock::log_tag`).
    pub audit: Option<OwnedFd>,
    /// The secrets' values and the jail's trust file (`--secret`).
    pub secrets: Option<secrets::Held>,
}

impl Plan {
    /// The payload says hello before execve, for the supervisor to tell
    /// its pid (`supervise::childpid`): the policy asks for the pid, and
    /// not before the id maps (`userns_block_fd`: init's is told then).
    pub fn payload_hello(&self) -> bool {
        let maps_told = self
            .mode
            .namespaces()
            .is_some_and(|ns| ns.userns_block_fd.is_some());
        !self.channels.pid_reports.is_empty() && !maps_told
    }

    /// Turn a validated policy into the plan of a run, and acquire what the
    /// run holds. Reads the host (bind sources, caller ids), allocates every
    /// string the child will need, makes the run's cgroup when a cgroup
    /// limit is asked for, and decides how each limit is enforced.
    pub fn build(p: &Policy) -> Result<(Plan, Resources), SetupError> {
        Plan::for_run(p, Kind::Namespaced)
    }

    /// The plan for a host where user namespaces are refused: no namespaces,
    /// no new root; Landlock rules name host paths (the binds' sources), and a
    /// private per-run directory is the only writable place.
    pub fn build_fallback(p: &Policy) -> Result<(Plan, Resources), SetupError> {
        Plan::for_run(p, Kind::Fallback)
    }

    /// What [`Plan::build`] checks (bind sources, ids, names, the seccomp
    /// program), without acquiring anything: no cgroup, no mount, no
    /// socket.
    pub fn validate(p: &Policy) -> Result<(), SetupError> {
        Plan::draft(p, Kind::Namespaced, &mut Resources::default(), false).map(drop)
    }

    fn for_run(p: &Policy, kind: Kind) -> Result<(Plan, Resources), SetupError> {
        let mut res = Resources::default();
        let mut plan = Plan::draft(p, kind, &mut res, true)?;
        limits::enforce(&mut plan, &mut res)?;
        // Under the rlimit rung the supervisor hears of large allocations,
        // to tell one RLIMIT_AS refused (see supervise::classify).
        let rlimit_as = match plan.limits.enforcement.memory_by_rlimit {
            true => plan
                .limits
                .rlimits
                .iter()
                .find(|r| r.name == "RLIMIT_AS")
                .map(|r| r.soft),
            false => None,
        };
        if rlimit_as.is_some() && plan.layers.seccomp.is_some() {
            plan.layers.seccomp = layers::seccomp(p, kind, rlimit_as)?;
        }
        plan.channels
            .open_seccomp(plan.layers.seccomp.as_ref(), &mut res)?;
        if let Some(l) = plan.layers.landlock.as_mut() {
            l.open_audit(&mut res);
        }
        Ok((plan, res))
    }

    /// Everything but the limits' enforcement, the seccomp channel and
    /// the audit socket. The fallback's run directory goes into `res`.
    /// `acquire`: take what a run needs (false: only check, for
    /// [`Plan::validate`]).
    fn draft(
        p: &Policy,
        kind: Kind,
        res: &mut Resources,
        acquire: bool,
    ) -> Result<Plan, SetupError> {
        refuse(p, kind)?;
        let mapped = identity::Mapped::of(p, kind)?;
        let root::Laid {
            mut steps,
            mut rules,
        } = root::plan(p)?;
        let mut env = p.env.clone();
        // In the fallback the allowlist itself is refused (egress::plan).
        let intercept = match kind {
            Kind::Namespaced => secrets::plan(
                p,
                &mut steps,
                &mut rules,
                &mut env,
                acquire.then_some(&mut res.secrets),
            )?,
            Kind::Fallback => None,
        };
        let denied = deny::expand(p, &steps)?;
        let mut cwd = p.chdir.clone().unwrap_or_else(|| p.workdir.inner.clone());
        let mut place = match kind {
            Kind::Namespaced => None,
            Kind::Fallback => Some(mode::Place::make(
                p,
                mapped.euid,
                &steps,
                &mut env,
                &mut cwd,
                res,
            )?),
        };
        let host_rules = place.as_mut().map(|f| std::mem::take(&mut f.rules));
        let (rules, masked) = deny::hide(p, &denied, &mut steps, rules, host_rules)?;
        let root = Root::of(p, steps, masked)?;
        let egress = egress::plan(p, kind, &mut env, intercept)?;
        let work = place.as_ref().map(|f| f.work.as_path());
        let exec = Exec::of(p, &env, cwd, work, kind)?;
        let (layers, unix_roots) = Layers::of(p, kind, rules, &root)?;
        let lease = place.as_ref().and_then(|f| f.lease.clone());
        Ok(Plan {
            mode: match place {
                Some(f) => f.into_mode(unix_roots),
                None => Mode::Namespaced(Namespaces::of(p, egress)),
            },
            identity: mapped.identity(p, kind, lease),
            root,
            exec,
            limits: Limits::asked(p, kind),
            layers,
            channels: Channels::of(p),
        })
    }
}

/// What no plan can be made of: a caller's fd that is not open, and in
/// the fallback what needs namespaces (a joined one, the caller's own id
/// maps, `--network loopback`).
fn refuse(p: &Policy, kind: Kind) -> Result<(), SetupError> {
    let c = &p.compat;
    let joins = c.joins().next();
    // The caller's own fds: one not open here would be whatever this
    // process opens next under that number.
    for fd in c.joins().chain(c.userns_block_fd) {
        if !sys::fd_is_open(fd) {
            return Err(SetupError::from_errno(
                "namespaces",
                format!("fd {fd}"),
                sys::Errno::EBADF,
            ));
        }
    }
    if kind == Kind::Namespaced {
        return Ok(());
    }
    root::refuse_in_fallback(p)?;
    if joins.is_some() || c.userns_block_fd.is_some() {
        return Err(SetupError::new(
            "namespaces",
            "",
            "a joined namespace or the caller's own id maps need namespaces, which are refused here",
        ));
    }
    if p.network == Network::Loopback {
        // No silent downgrade: without a network namespace of the
        // jail's own, TCP on loopback is the host's loopback.
        return Err(SetupError::new(
            "network",
            "--network loopback",
            "needs a network namespace of the jail's own, and user namespaces are refused here; \
             stockade refuses the run rather than let the payload reach the host's loopback services",
        ));
    }
    Ok(())
}

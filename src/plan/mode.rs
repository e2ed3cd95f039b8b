//! The plan's mode: the jail's own namespaces, or (user namespaces
//! refused) none, the payload on the host's file system in a private run
//! directory. Each carries what only it has.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use super::identity::lease_id;
use super::{egress, root, rundir, uids, Access, Resources, RootStep, SetupError};
use crate::policy::{Network, Policy};

/// Namespaced or fallback.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The jail's own namespaces (those the caller hands over joined), and
    /// its own root (`Plan::root`).
    Namespaced(Namespaces),
    /// No namespaces could be had: the payload runs on the host's file
    /// system behind Landlock, seccomp and rlimits only.
    Fallback(Fallback),
}

/// Which mode a plan is drafted for, before the mode's own parts (its
/// [`Namespaces`], its [`Fallback`] place) exist: each builder's
/// decisions are made per mode on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`Mode::Namespaced`]: [`Plan::build`](super::Plan::build).
    Namespaced,
    /// [`Mode::Fallback`]: [`Plan::build_fallback`](super::Plan::build_fallback).
    Fallback,
}

/// The namespaces of a namespaced jail.
#[derive(Debug, Clone)]
pub struct Namespaces {
    /// Namespaces clone creates (never CLONE_NEWNET: see `new_netns`).
    pub clone_flags: u64,
    /// Init is pid 1 of a pid namespace of the jail's own (false in a
    /// joined pid namespace without `nest_pidns`): `kill(-1)` there
    /// reaches only the jail.
    pub own_pidns: bool,
    /// A network namespace with only `lo` (up): the supervisor makes it in
    /// the jail's user namespace while init builds the root; init joins it
    /// before it starts the payload.
    pub new_netns: bool,
    /// The egress allowlist's proxy (`Policy::allow_hosts`): made in the
    /// jail's network namespace with `lo`, run by the supervisor.
    pub egress: Option<egress::Egress>,
    /// The user namespace the supervisor joins before clone
    /// (`Compat::join_userns`); clone then makes no user namespace.
    pub join_userns: Option<i32>,
    /// The user namespace init joins once the root is built
    /// (`Compat::join_userns2`).
    pub join_userns2: Option<i32>,
    /// The pid namespace the supervisor's next child is born in
    /// (`Compat::join_pidns`); clone makes one under it only with
    /// `nest_pidns`.
    pub join_pidns: Option<i32>,
    /// The supervisor waits on this fd instead of writing the id maps
    /// (`Compat::userns_block_fd`).
    pub userns_block_fd: Option<i32>,
    /// `Compat::disable_userns`: one more user namespace under the
    /// jail's, and no other.
    pub disable_userns: bool,
    /// Init execs the command itself (`Compat::as_pid_1`).
    pub as_pid_1: bool,
}

/// The fallback's own place on the host.
#[derive(Debug, Clone)]
pub struct Fallback {
    /// Started by root: the payload becomes this uid/gid (leased, the
    /// lease in `Identity::lease`).
    pub ids: Option<(u32, u32)>,
    /// The private per-run directory (the only writable place), removed
    /// after the run (see [`Resources::run_dir`]).
    pub run_dir: PathBuf,
    /// A tmpfs of `Limits::tmp_size` is mounted on `run_dir` (detached
    /// after the run).
    pub run_dir_tmpfs: bool,
    /// Held (flock) on `run_dir` while the run lives, so no other run takes
    /// it for stale.
    #[allow(dead_code)] // held, not read: the flock lasts as long as the plan
    pub run_dir_lock: Arc<OwnedFd>,
    /// The host directories beneath which the payload may connect to a
    /// pathname unix socket (see jail::unix_agent).
    pub unix_roots: Vec<PathBuf>,
}

impl Mode {
    /// Which mode this is.
    pub fn kind(&self) -> Kind {
        match self {
            Mode::Namespaced(_) => Kind::Namespaced,
            Mode::Fallback(_) => Kind::Fallback,
        }
    }

    /// The namespaces, unless this is the fallback.
    pub fn namespaces(&self) -> Option<&Namespaces> {
        match self {
            Mode::Namespaced(ns) => Some(ns),
            Mode::Fallback(_) => None,
        }
    }

    /// The fallback's place, if this is the fallback.
    pub fn fallback(&self) -> Option<&Fallback> {
        match self {
            Mode::Namespaced(_) => None,
            Mode::Fallback(f) => Some(f),
        }
    }

    /// The namespaces clone creates: none in the fallback (a plain fork).
    pub fn clone_flags(&self) -> u64 {
        self.namespaces().map_or(0, |ns| ns.clone_flags)
    }

    /// Init is pid 1 of a pid namespace of the jail's own (never in the
    /// fallback): `kill(-1)` there reaches only the jail.
    pub fn own_pidns(&self) -> bool {
        self.namespaces().is_some_and(|ns| ns.own_pidns)
    }
}

impl Namespaces {
    /// The namespaces `p` asks for, the network's with `egress`.
    pub(super) fn of(p: &Policy, egress: Option<egress::Egress>) -> Namespaces {
        let c = &p.compat;
        Namespaces {
            clone_flags: clone_flags(p),
            own_pidns: c.join_pidns.is_none() || c.nest_pidns,
            new_netns: p.network != Network::Host,
            egress,
            join_userns: c.join_userns,
            join_userns2: c.join_userns2,
            join_pidns: c.join_pidns,
            userns_block_fd: c.userns_block_fd,
            disable_userns: c.disable_userns,
            as_pid_1: c.as_pid_1,
        }
    }
}

/// Namespaces clone creates: every one but the network's, which is not
/// made by clone (setting one up costs about as much as the rest of the
/// clone): the supervisor makes it while init builds the root (sys::netns),
/// and init joins it.
/// A joined user namespace (`Compat::join_userns`) replaces the new one;
/// a joined pid namespace (`Compat::join_pidns`) the new one, unless
/// `nest_pidns` makes one under it.
fn clone_flags(p: &Policy) -> u64 {
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWCGROUP;
    if p.compat.join_userns.is_none() {
        flags |= libc::CLONE_NEWUSER;
    }
    if p.compat.join_pidns.is_none() || p.compat.nest_pidns {
        flags |= libc::CLONE_NEWPID;
    }
    flags as u64
}

/// The fallback's place while the plan is drafted: its [`Fallback`] to
/// be, the lease, the payload's workdir and the Landlock rules on host
/// paths.
pub(super) struct Place {
    ids: Option<(u32, u32)>,
    /// Root: the lease on `ids`.
    pub lease: Option<Arc<uids::Lease>>,
    run_dir: PathBuf,
    /// The payload's workdir on the host.
    pub work: PathBuf,
    lock: Arc<OwnedFd>,
    /// Landlock rules on host paths.
    pub rules: Vec<(PathBuf, Access)>,
}

impl Place {
    /// A leased uid (when root), the locked run directory (into `res`),
    /// Landlock rules on the binds' host paths and the run directory; the
    /// payload's HOME, TMPDIR and (unless chdir is set) working directory.
    pub(super) fn make(
        p: &Policy,
        euid: u32,
        steps: &[RootStep],
        env: &mut Vec<(OsString, OsString)>,
        cwd: &mut PathBuf,
        res: &mut Resources,
    ) -> Result<Place, SetupError> {
        // Rules name host paths; only binds and the device nodes carry over.
        let mut rules = root::fallback_rules(steps);
        let (mut ids, mut lease) = (None, None);
        if euid == 0 {
            // Its own host id: RLIMIT_NPROC, signals and /proc go by
            // the real uid, shared with every process that has it.
            let l = lease_id(p.fallback_uid_range)?;
            ids = Some((l.id, l.id));
            lease = Some(Arc::new(l));
        }
        let (dir, lock) = rundir::make(ids)?;
        let run_dir = dir.path().to_path_buf();
        res.run_dir = Some(dir);
        rules.push((run_dir.clone(), Access::ReadWrite));
        let work = match &p.workdir.host {
            Some(h) => std::fs::canonicalize(h)
                .map_err(|e| SetupError::io("workdir", h.display().to_string(), &e))?,
            None => run_dir.clone(),
        };
        if p.chdir.is_none() {
            *cwd = work.clone();
        }
        crate::policy::set_env(env, "HOME".into(), work.clone().into_os_string());
        crate::policy::set_env(env, "TMPDIR".into(), run_dir.clone().into_os_string());
        Ok(Place {
            ids,
            lease,
            run_dir,
            work,
            lock: Arc::new(lock),
            rules,
        })
    }

    /// The fallback mode, its payload connecting beneath `unix_roots`.
    pub(super) fn into_mode(self, unix_roots: Vec<PathBuf>) -> Mode {
        Mode::Fallback(Fallback {
            ids: self.ids,
            run_dir: self.run_dir,
            run_dir_tmpfs: false,
            run_dir_lock: self.lock,
            unix_roots,
        })
    }
}

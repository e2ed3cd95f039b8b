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

mod deny;
pub mod egress;
mod error;
pub mod limits;
mod root;

/// Every mount of a jail of `p`, in order: the base root's, the workdir,
/// the policy's own (what `Plan::build` lays out).
pub(crate) fn mount_specs(p: &Policy) -> Vec<crate::policy::MountSpec> {
    root::specs(p)
}
pub mod rundir;
pub mod uids;

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

pub use deny::Masked;
pub use error::{step, SetupError};
pub use root::{Access, RootStep};

use crate::cgroup::RunCgroup;
use crate::policy::{Network, Policy};
use crate::sys;

/// One rlimit the payload sets (soft, hard) before anything else narrows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: nix::sys::resource::Resource,
    pub name: &'static str,
    pub soft: u64,
    pub hard: u64,
}

/// The syscall-ready description of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Namespaces clone creates (never CLONE_NEWNET: see `new_netns`).
    pub clone_flags: u64,
    /// A network namespace with only `lo` (up): the supervisor makes it in
    /// the jail's user namespace while init builds the root; init joins it
    /// before it starts the payload.
    pub new_netns: bool,
    pub network: Network,
    /// The egress allowlist's proxy (`Policy::allow_hosts`): made in the
    /// jail's network namespace with `lo`, run by the supervisor.
    pub egress: Option<egress::Egress>,
    /// `inner outer 1` lines for /proc/PID/uid_map and gid_map.
    pub uid_map: String,
    pub gid_map: String,
    pub inner_uid: u32,
    pub inner_gid: u32,
    /// Host directory (in the jail's private mount namespace) where the new
    /// root tmpfs is assembled before pivot_root.
    pub base: PathBuf,
    pub steps: Vec<RootStep>,
    /// The root's own tmpfs stays writable (a bare root, as bwrap's), not
    /// sealed read-only.
    pub root_writable: bool,
    pub hostname: String,
    /// Paths inside the jail with the access Landlock grants beneath them.
    pub landlock_rules: Vec<(PathBuf, Access)>,
    pub cwd: PathBuf,
    /// Where to start when `cwd` cannot be entered, in order, each with
    /// its environment (`PWD` set to it): `Compat::chdir_fallbacks`.
    pub cwd_fallbacks: Vec<(PathBuf, Vec<CString>)>,
    /// Paths to try for execve, in order.
    pub exec_candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub keep_fds: Vec<i32>,
    /// Where the supervisor tells the jail's pid (`Compat::pid_reports`).
    pub pid_reports: Vec<crate::policy::PidReport>,
    /// The command as the user typed it, for messages.
    pub command: String,
    /// Landlock is applied with `landlock_rules` unless disabled.
    pub landlock: bool,
    /// Deny TCP bind/connect through Landlock (network `none`).
    pub landlock_deny_tcp: bool,
    /// Landlock also grants what /dev/mqueue's rule grants on the root of
    /// the IPC namespace's mqueue filesystem, which the root does not
    /// mount (a bare root, bwrap's `--dev`): `mq_open` resolves its queue
    /// there, and without a rule on that root Landlock refuses it. Init
    /// opens it (`sys::fs_detached`), mounted nowhere. Never in the
    /// fallback (the host's IPC namespace) nor in a zygote (its children
    /// make their own).
    pub landlock_mqueue: bool,
    /// The supervisor can read the kernel's Landlock audit records (its
    /// socket in [`Resources::audit`]): whether it will is its verdict,
    /// one byte on the control socket after GO (`proto::AUDIT_LOG`: the
    /// kernel's audit settings are asked for then, while init builds the
    /// root, each query costing a kernel thread). When it will, the
    /// payload takes this name before it enforces its domain (the domain's
    /// creation record carries it: this run's domain, told from every
    /// other) and asks for denials after execve to be logged.
    pub landlock_log_tag: Option<CString>,
    /// Landlock is on and its denials cannot be recorded: why (for the
    /// outcome's `denials_unrecorded`).
    pub landlock_unrecorded: Option<String>,
    /// The compiled seccomp filter, if any.
    pub seccomp: Option<crate::seccomp::Compiled>,
    /// The caller's own BPF programs (`Compat::bpf_filters`), installed in
    /// order after `seccomp`.
    pub bpf_filters: Vec<Vec<libc::sock_filter>>,
    /// Read (one byte, or EOF) by the payload before seccomp and execve
    /// (`Compat::block_fd`).
    pub block_fd: Option<i32>,
    /// Where each refusal goes as a JSON line while the run goes on
    /// (`Policy::denials_fd`).
    pub denials_fd: Option<i32>,
    /// `Compat::disable_userns` (never in the fallback: no user namespace
    /// of the jail's own to limit).
    pub disable_userns: bool,
    /// `Compat::assert_userns_disabled`, or `disable_userns`.
    pub assert_userns_disabled: bool,
    /// Init execs the command itself (`Compat::as_pid_1`), never in the
    /// fallback.
    pub as_pid_1: bool,
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
    /// Init is pid 1 of a pid namespace of the jail's own (false in the
    /// fallback, and in a joined pid namespace without `nest_pidns`):
    /// `kill(-1)` there reaches only the jail.
    pub own_pidns: bool,
    /// Which ids init takes after GO (see [`BecomeUser`]).
    pub become_user: BecomeUser,
    /// Capabilities the payload keeps (`Compat::keep_caps`), and how
    /// (`Compat::caps_as_root`).
    pub keep_caps: u64,
    pub caps_as_root: bool,
    /// `Compat::bounding_caps`.
    pub bounding_caps: Option<u64>,
    /// The payload is a fork server's zygote (`Policy::zygote`), never in
    /// the fallback.
    pub zygote: bool,
    /// The workdir as the payload sees it, and the files the payload step
    /// writes into it before the command starts (`Workdir::files`).
    pub seed: Option<(PathBuf, Vec<crate::policy::SeedFile>)>,
    /// The workdir tmpfs (inside the jail) and its size, when filling it
    /// ends the run as `disk_limit` (`Workdir::full_ends_run`): init
    /// watches it as it samples the jail's peaks.
    pub workdir_cap: Option<(PathBuf, u64)>,
    /// Read-locked by init once the root is built (`Compat::lock_files`).
    pub lock_files: Vec<PathBuf>,
    /// Layers that must be applied.
    pub require: Vec<crate::policy::Layer>,
    /// The limits asked for.
    pub limits: crate::policy::Limits,
    /// How each limit is enforced (decided once the run's cgroup and the
    /// run directory's cap are known).
    pub enforcement: limits::Enforcement,
    /// rlimits the payload sets (those limits no cgroup controller holds).
    pub rlimits: Vec<Rlimit>,
    /// How often init samples the jail's task count and memory (ms; -1: only
    /// when a child exits): often when a limit is an rlimit whose verdict
    /// needs the samples.
    pub sample_ms: i32,
    /// Pipe stdout/stderr through the supervisor (cap, capture, report).
    pub pipe_output: bool,
    /// Keep stdout and stderr in the outcome.
    pub capture: bool,
    /// stdout carries the JSON report: the payload's stdout goes only into it.
    pub stdout_in_report: bool,
    /// /tmp's size cap, for the outcome.
    pub tmp_size: u64,
    /// Under the rlimit rung: the limits init writes in the jail's IPC
    /// namespace (path under /proc/sys, value), see `limits::ipc_share`.
    pub ipc_sysctls: Vec<(&'static str, String)>,
    /// No namespaces could be had: the payload runs on the host's file
    /// system behind Landlock, seccomp and rlimits only.
    pub fallback: bool,
    /// Fallback started by root: the payload becomes this uid/gid.
    pub fallback_ids: Option<(u32, u32)>,
    /// Started by host root with `Compat::idmap_root_binds`: the host uid
    /// and gid (a leased id, which the jail's ids map to) that files of
    /// host uid and gid 0 show as on the binds, idmapped by the supervisor
    /// (`supervise::idmap`).
    pub idmap: Option<(u32, u32)>,
    /// The lease on `fallback_ids` or `idmap`'s id (see plan::uids), held
    /// until the plan is dropped after the run.
    pub uid_lease: Option<std::sync::Arc<crate::plan::uids::Lease>>,
    /// Fallback: the private per-run directory (the only writable place),
    /// removed after the run (see [`Resources::run_dir`]).
    pub run_dir: Option<PathBuf>,
    /// Fallback: the host directories beneath which the payload may connect
    /// to a pathname unix socket (see jail::unix_agent).
    pub unix_roots: Vec<PathBuf>,
    /// A tmpfs of `tmp_size` is mounted on `run_dir` (detached after the
    /// run).
    pub run_dir_tmpfs: bool,
    /// Held (flock) on `run_dir` while the run lives, so no other run takes
    /// it for stale.
    #[allow(dead_code)] // held, not read: the flock lasts as long as the plan
    pub run_dir_lock: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The payload's end of the supervisor's seccomp socket (learning and
    /// kill mode, mediation): the listener is sent over it. Held open in
    /// [`Resources::seccomp`].
    pub seccomp_channel: Option<std::os::fd::RawFd>,
    /// Where the root build mounts something (absolute jail paths; the
    /// masks inside /proc and /dev's own mounts lie beneath these). Empty
    /// in the fallback, which has no root of its own.
    pub mount_points: Vec<PathBuf>,
    /// The denied paths hidden (`Policy::deny`), for the outcome.
    pub masked: Vec<Masked>,
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
    /// supervisor's end and the payload's (`Plan::seccomp_channel`).
    pub seccomp: Option<(OwnedFd, OwnedFd)>,
    /// The fallback's run directory: removed, its tmpfs detached, on drop.
    pub run_dir: Option<rundir::RunDir>,
    /// A socket on the kernel's audit read-log (`Plan::landlock_log_tag`).
    pub audit: Option<OwnedFd>,
}

/// Which ids init takes after GO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BecomeUser {
    /// `inner_uid`/`inner_gid`, which stockade's id maps map (the jail's
    /// own user namespace).
    Policy,
    /// None: the ids stay the caller's (the fallback; the caller's own
    /// maps, `userns_block_fd`, give them their meaning).
    Keep,
    /// In a joined user namespace (`Compat::join_userns`): the ids asked
    /// for (bwrap's `--uid`/`--gid`, as that namespace maps them); else
    /// the caller's, as bwrap keeps them, except host root: where that
    /// namespace does not map the caller's uid 0 (or gid 0), the jail
    /// takes the policy's id there instead (`unmapped_root`), so a jail in
    /// a namespace that does not map host root never runs as host root.
    /// A namespace that maps host root was the caller's choice.
    Joined {
        uid: Option<u32>,
        gid: Option<u32>,
        unmapped_root: Option<u32>,
        unmapped_root_group: Option<u32>,
    },
}

/// The host ids the jail's ids map to.
struct Outer {
    euid: u32,
    uid: u32,
    gid: u32,
}

impl Outer {
    /// Our own ids, or (root) the policy's; never host root. Inside a
    /// user namespace where host root is not 0 (a sandbox's), uid 0 is not
    /// host root: when the policy's ids do not exist there, the jail maps
    /// to uid 0 as to any caller's own uid.
    fn of(p: &Policy) -> Result<Outer, SetupError> {
        let euid = sys::geteuid();
        let egid = sys::getegid();
        let nested = !sys::host_root_is_zero_here();
        let policy_ids_exist = sys::id_is_mapped("uid_map", p.root_host_uid)
            && sys::id_is_mapped("gid_map", p.root_host_gid);
        let (uid, gid) = if euid == 0 && (!nested || policy_ids_exist) {
            (p.root_host_uid, p.root_host_gid)
        } else {
            (euid, egid)
        };
        if (uid == 0 || gid == 0) && !nested {
            return Err(SetupError::new(
                "id map",
                "",
                "the jail would map to host root (uid or gid 0); choose an unprivileged host id",
            ));
        }
        Ok(Outer { euid, uid, gid })
    }
}

/// Namespaces clone creates: every one but the network's, which is not
/// made by clone (setting one up costs about as much as the rest of the
/// clone): the supervisor makes it while init builds the root (sys::netns),
/// and init joins it. None in the fallback.
/// A joined user namespace (`Compat::join_userns`) replaces the new one;
/// a joined pid namespace (`Compat::join_pidns`) the new one, unless
/// `nest_pidns` makes one under it.
fn clone_flags(p: &Policy, fallback: bool) -> u64 {
    if fallback {
        return 0;
    }
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

/// Which ids init takes after GO (see [`BecomeUser`]).
fn become_user(p: &Policy, fallback: bool) -> BecomeUser {
    if fallback || p.compat.userns_block_fd.is_some() {
        return BecomeUser::Keep;
    }
    if p.compat.join_userns.is_none() {
        return BecomeUser::Policy;
    }
    // bwrap's `--uid`/`--gid`: ids other than the caller's own.
    let asked = |mine: u32, wanted: u32| (mine != wanted).then_some(wanted);
    BecomeUser::Joined {
        uid: asked(sys::getuid(), p.uid),
        gid: asked(sys::getegid(), p.gid),
        unmapped_root: (sys::geteuid() == 0).then_some(p.uid),
        unmapped_root_group: (sys::getegid() == 0).then_some(p.gid),
    }
}

/// The fallback's own place on the host.
struct Fallback {
    /// Root: the payload's leased uid and gid, and the lease.
    ids: Option<(u32, u32)>,
    lease: Option<Arc<uids::Lease>>,
    run_dir: PathBuf,
    /// The payload's workdir on the host.
    work: PathBuf,
    lock: Arc<OwnedFd>,
    /// Landlock rules on host paths.
    rules: Vec<(PathBuf, Access)>,
}

impl Fallback {
    /// A leased uid (when root), the locked run directory (into `res`),
    /// Landlock rules on the binds' host paths and the run directory; the
    /// payload's HOME, TMPDIR and (unless chdir is set) working directory.
    fn make(
        p: &Policy,
        euid: u32,
        steps: &[RootStep],
        env: &mut Vec<(std::ffi::OsString, std::ffi::OsString)>,
        cwd: &mut PathBuf,
        res: &mut Resources,
    ) -> Result<Fallback, SetupError> {
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
        Ok(Fallback {
            ids,
            lease,
            run_dir,
            work,
            lock: Arc::new(lock),
            rules,
        })
    }
}

/// The host directory the new root is assembled on.
fn assembly_dir() -> Result<PathBuf, SetupError> {
    ["/tmp", "/run", "/mnt", "/var/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|d| {
            std::fs::symlink_metadata(d)
                .map(|m| m.is_dir())
                .unwrap_or(false)
        })
        .ok_or_else(|| {
            SetupError::new(
                "new root",
                "/tmp",
                "no directory to assemble the new root on (/tmp, /run, /mnt, /var/tmp all missing)",
            )
        })
}

fn cstr(origin: &str, b: &[u8]) -> Result<CString, SetupError> {
    CString::new(b)
        .map_err(|_| SetupError::new(origin, String::from_utf8_lossy(b), "contains a NUL byte"))
}

/// Each of `Compat::chdir_fallbacks` with the environment execve gets
/// there: `env` with `PWD` set to it.
fn cwd_fallbacks(
    p: &Policy,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<Vec<(PathBuf, Vec<CString>)>, SetupError> {
    let mut out = Vec::new();
    for dir in &p.compat.chdir_fallbacks {
        let mut e = env.to_vec();
        crate::policy::set_env(&mut e, "PWD".into(), dir.clone().into_os_string());
        out.push((dir.clone(), Exec::of(p, &e)?.envp));
    }
    Ok(out)
}

/// What execve gets: the arguments, the environment, and the paths to try.
struct Exec {
    argv: Vec<CString>,
    envp: Vec<CString>,
    candidates: Vec<CString>,
}

impl Exec {
    fn of(
        p: &Policy,
        env: &[(std::ffi::OsString, std::ffi::OsString)],
    ) -> Result<Exec, SetupError> {
        let argv: Vec<CString> = p
            .argv
            .iter()
            .map(|a| cstr("command", a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                cstr("env", &b)
            })
            .collect::<Result<_, _>>()?;
        let cmd = p.argv[0].as_bytes();
        let candidates = if cmd.contains(&b'/') {
            vec![argv[0].clone()]
        } else {
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_bytes())
                .unwrap_or_default();
            on_path(cmd, path)?
        };
        let mut argv = argv;
        if let Some(a0) = &p.compat.argv0 {
            argv[0] = cstr("argv0", a0.as_bytes())?;
        }
        Ok(Exec {
            argv,
            envp,
            candidates,
        })
    }
}

/// `cmd` in each absolute directory of `path`, in order, once each.
fn on_path(cmd: &[u8], path: &[u8]) -> Result<Vec<CString>, SetupError> {
    let mut c = Vec::new();
    for dir in path.split(|b| *b == b':') {
        if dir.first() != Some(&b'/') {
            continue;
        }
        let mut full = dir.to_vec();
        if full.last() != Some(&b'/') {
            full.push(b'/');
        }
        full.extend_from_slice(cmd);
        let full = cstr("command", &full)?;
        if !c.contains(&full) {
            c.push(full);
        }
    }
    Ok(c)
}

/// Where a pathname socket may be reached in the fallback: beneath what
/// Landlock grants, but not /proc (magic links) or /dev.
fn unix_roots(rules: &[(PathBuf, Access)]) -> Vec<PathBuf> {
    rules
        .iter()
        .filter(|(path, a)| {
            !matches!(a, Access::Device | Access::List)
                && !path.starts_with("/proc")
                && !path.starts_with("/dev")
        })
        .map(|(path, _)| path.clone())
        .collect()
}

/// The seccomp program, compiled for this run; with the allocation meter
/// when `rlimit_as` (the rlimit rung) holds `--memory`.
fn seccomp(
    p: &Policy,
    fallback: bool,
    rlimit_as: Option<u64>,
) -> Result<Option<crate::seccomp::Compiled>, SetupError> {
    if !p.seccomp.enabled {
        return Ok(None);
    }
    let mut sp = p.seccomp.clone();
    // Without a network namespace only Landlock stands between the
    // payload and the network, and it knows TCP only: no inet sockets.
    sp.unix_sockets_only |= fallback && p.network == Network::None;
    // Nor a mount namespace to hide the host's unix sockets:
    // connect() is mediated, no unix datagram sockets.
    sp.mediate_unix = fallback;
    // Nor an IPC namespace: no queue is named in the host's.
    sp.host_ipc = fallback;
    crate::seccomp::compile_metered(&sp, rlimit_as)
        .map(Some)
        .map_err(|e| SetupError::new("seccomp", "", e.to_string()))
}

/// The fallback's Landlock rules split around the denied paths, and what
/// that masks; refused when Landlock is off (nothing else could hide them).
fn denials_fallback(
    p: &Policy,
    denied: &[deny::Denied],
    rules: Vec<(PathBuf, Access)>,
) -> Result<deny::Split, SetupError> {
    if denied.is_empty() {
        return Ok((rules, Vec::new()));
    }
    if p.landlock.disabled {
        return Err(SetupError::new(
            "--deny",
            "",
            "without namespaces only Landlock can hide a path, and it is disabled (--no-landlock)",
        ));
    }
    let max = match p.deny.max_entries {
        0 => crate::policy::DENY_MAX_ENTRIES,
        n => n,
    };
    deny::split(rules, denied, max)
}

impl Plan {
    /// The payload says hello before execve, for the supervisor to tell
    /// its pid (`supervise::childpid`): the policy asks for the pid, and
    /// not before the id maps (`userns_block_fd`: init's is told then).
    pub fn payload_hello(&self) -> bool {
        !self.pid_reports.is_empty() && self.userns_block_fd.is_none()
    }

    /// Turn a validated policy into the plan of a run, and acquire what the
    /// run holds. Reads the host (bind sources, caller ids), allocates every
    /// string the child will need, makes the run's cgroup when a cgroup
    /// limit is asked for, and decides how each limit is enforced.
    pub fn build(p: &Policy) -> Result<(Plan, Resources), SetupError> {
        Plan::for_run(p, false)
    }

    /// The plan for a host where user namespaces are refused: no namespaces,
    /// no new root; Landlock rules name host paths (the binds' sources), and a
    /// private per-run directory is the only writable place.
    pub fn build_fallback(p: &Policy) -> Result<(Plan, Resources), SetupError> {
        Plan::for_run(p, true)
    }

    /// What [`Plan::build`] checks (bind sources, ids, names, the seccomp
    /// program), without acquiring anything: no cgroup, no mount, no
    /// socket.
    pub fn validate(p: &Policy) -> Result<(), SetupError> {
        Plan::draft(p, false, &mut Resources::default()).map(drop)
    }

    fn for_run(p: &Policy, fallback: bool) -> Result<(Plan, Resources), SetupError> {
        let mut res = Resources::default();
        let mut plan = Plan::draft(p, fallback, &mut res)?;
        limits::enforce(&mut plan, &mut res)?;
        // Under the rlimit rung the supervisor hears of large allocations,
        // to tell one RLIMIT_AS refused (see supervise::classify).
        let rlimit_as = match plan.enforcement.memory_by_rlimit {
            true => plan
                .rlimits
                .iter()
                .find(|r| r.name == "RLIMIT_AS")
                .map(|r| r.soft),
            false => None,
        };
        if rlimit_as.is_some() && plan.seccomp.is_some() {
            plan.seccomp = seccomp(p, fallback, rlimit_as)?;
        }
        plan.open_seccomp_channel(&mut res)?;
        plan.open_audit(&mut res);
        Ok((plan, res))
    }

    /// With Landlock on: the audit read-log socket its denials are read
    /// from, and the payload's tag; or why they cannot be read.
    fn open_audit(&mut self, res: &mut Resources) {
        if !self.landlock {
            return;
        }
        match landlock_audit() {
            Ok(fd) => {
                let tag = sys::random_bytes::<6>()
                    .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
                match tag {
                    Ok(t) => {
                        self.landlock_log_tag = CString::new(format!("sk{t}")).ok();
                        res.audit = Some(fd);
                    }
                    Err(e) => self.landlock_unrecorded = Some(e.to_string()),
                }
            }
            Err(why) => self.landlock_unrecorded = Some(why),
        }
    }

    /// The socket pair the payload sends its seccomp listener over, when
    /// the filter wants one.
    fn open_seccomp_channel(&mut self, res: &mut Resources) -> Result<(), SetupError> {
        if !self.seccomp.as_ref().is_some_and(|c| c.wants_listener()) {
            return Ok(());
        }
        let (ours, theirs) = sys::fdpass::socketpair(libc::SOCK_SEQPACKET)
            .map_err(|e| SetupError::sys("seccomp", "", &e))?;
        self.seccomp_channel = Some(theirs.as_raw_fd());
        res.seccomp = Some((ours, theirs));
        Ok(())
    }

    /// Everything but the limits' enforcement and the seccomp channel. The
    /// fallback's run directory goes into `res`.
    fn draft(p: &Policy, fallback: bool, res: &mut Resources) -> Result<Plan, SetupError> {
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
        if fallback && (joins.is_some() || c.userns_block_fd.is_some()) {
            return Err(SetupError::new(
                "namespaces",
                "",
                "a joined namespace or the caller's own id maps need namespaces, which are refused here",
            ));
        }
        if fallback && p.network == Network::Loopback {
            // No silent downgrade: without a network namespace of the
            // jail's own, TCP on loopback is the host's loopback.
            return Err(SetupError::new(
                "network",
                "--network loopback",
                "needs a network namespace of the jail's own, and user namespaces are refused here; \
                 stockade refuses the run rather than let the payload reach the host's loopback services",
            ));
        }
        let mut outer = Outer::of(p)?;
        // Host root's files shown as the jail root's on the binds (bwrap
        // run by root): the jail's ids map to a host id of its own, leased
        // for the run, so that no other process on the host shares the uid
        // that owns those files here (and could ptrace or signal the
        // payload). Not in a user namespace the caller hands over
        // (`join_userns`) or maps itself (`userns_block_fd`): the jail's
        // ids are what that namespace maps, not a leased id.
        let idmap_lease = match c.idmap_root_binds
            && !fallback
            && outer.euid == 0
            && c.join_userns.is_none()
            && c.userns_block_fd.is_none()
            && sys::host_root_is_zero_here()
        {
            true => {
                let l = lease_id(p.fallback_uid_range)?;
                (outer.uid, outer.gid) = (l.id, l.id);
                Some(Arc::new(l))
            }
            false => None,
        };
        let root::Root { mut steps, rules } = root::plan(p)?;
        let denied = deny::expand(p, &steps)?;
        let mut env = p.env.clone();
        let mut cwd = p.chdir.clone().unwrap_or_else(|| p.workdir.inner.clone());
        let mut fb = match fallback {
            true => Some(Fallback::make(
                p, outer.euid, &steps, &mut env, &mut cwd, res,
            )?),
            false => None,
        };
        let (mut rules, masked) = match fb.as_mut() {
            Some(f) => {
                steps.clear();
                denials_fallback(p, &denied, std::mem::take(&mut f.rules))?
            }
            None => {
                let (covers, masked) = deny::covers(&denied, &steps);
                steps.extend(covers);
                (rules, masked)
            }
        };
        let mut require = p.require.clone();
        if fallback && !masked.is_empty() && !require.contains(&crate::policy::Layer::Landlock) {
            // Only Landlock hides them there: no silent downgrade.
            require.push(crate::policy::Layer::Landlock);
        }
        let base = assembly_dir()?;
        let egress = egress::plan(p, fallback, &mut env)?;
        let exec = Exec::of(p, &env)?;
        let cwd_fallbacks = cwd_fallbacks(p, &env)?;
        rules.retain(|(path, _)| !p.landlock.exclude.iter().any(|x| path.starts_with(x)));
        let unix_roots = if fallback {
            unix_roots(&rules)
        } else {
            Vec::new()
        };
        if !fallback {
            rules = root::coalesce_rules(rules, &steps, &p.landlock.exclude);
        }
        let seccomp = seccomp(p, fallback, None)?;
        let stdout_in_report = p.stdout_in_report;
        let seed = (!p.workdir.files.is_empty()).then(|| {
            let dir = match &fb {
                Some(f) => f.work.clone(),
                None => p.workdir.inner.clone(),
            };
            (dir, p.workdir.files.clone())
        });
        let workdir_cap = (p.workdir.full_ends_run
            && p.workdir.host.is_none()
            && !fallback
            && p.base != crate::policy::BaseRoot::Bare)
            .then(|| (p.workdir.inner.clone(), p.workdir.size));
        Ok(Plan {
            seed,
            workdir_cap,
            limits: p.limits.clone(),
            enforcement: limits::Enforcement::default(),
            rlimits: Vec::new(),
            sample_ms: 100,
            seccomp_channel: None,
            mount_points: root::mount_points(&steps),
            pipe_output: p.capture || stdout_in_report || p.limits.max_output.is_some(),
            capture: p.capture || stdout_in_report,
            stdout_in_report,
            tmp_size: p.tmp_size,
            ipc_sysctls: Vec::new(),
            landlock: !p.landlock.disabled,
            landlock_deny_tcp: p.network == Network::None,
            landlock_mqueue: !p.landlock.disabled
                && !fallback
                && !p.zygote
                && !root::mounts_mqueue(&steps),
            landlock_log_tag: None,
            landlock_unrecorded: None,
            seccomp,
            require,
            masked,
            clone_flags: clone_flags(p, fallback),
            new_netns: p.network != Network::Host && !fallback,
            network: p.network,
            egress,
            uid_map: format!("{} {} 1\n", p.uid, outer.uid),
            gid_map: format!("{} {} 1\n", p.gid, outer.gid),
            inner_uid: p.uid,
            inner_gid: p.gid,
            base,
            steps,
            root_writable: p.base == crate::policy::BaseRoot::Bare,
            hostname: p.hostname.clone(),
            landlock_rules: rules,
            cwd,
            cwd_fallbacks,
            fallback,
            fallback_ids: fb.as_ref().and_then(|f| f.ids),
            idmap: idmap_lease.as_ref().map(|l| (l.id, l.id)),
            uid_lease: idmap_lease.or_else(|| fb.as_ref().and_then(|f| f.lease.clone())),
            run_dir: fb.as_ref().map(|f| f.run_dir.clone()),
            unix_roots,
            run_dir_tmpfs: false,
            run_dir_lock: fb.map(|f| f.lock),
            exec_candidates: exec.candidates,
            argv: exec.argv,
            envp: exec.envp,
            keep_fds: p.keep_fds.clone(),
            pid_reports: c.pid_reports.clone(),
            bpf_filters: c.bpf_filters.iter().map(|b| sock_filters(b)).collect(),
            block_fd: c.block_fd,
            denials_fd: p.denials_fd,
            lock_files: c.lock_files.clone(),
            // Root's capabilities are kept inside the jail's user
            // namespace only: the fallback's payload, no longer root,
            // keeps none.
            keep_caps: match fallback && outer.euid == 0 {
                true => 0,
                false => c.keep_caps,
            },
            caps_as_root: c.caps_as_root,
            bounding_caps: c.bounding_caps.filter(|_| !fallback),
            zygote: p.zygote && !fallback,
            as_pid_1: c.as_pid_1 && !fallback,
            join_userns: c.join_userns,
            join_userns2: c.join_userns2,
            join_pidns: c.join_pidns,
            userns_block_fd: c.userns_block_fd,
            own_pidns: !fallback && (c.join_pidns.is_none() || c.nest_pidns),
            become_user: become_user(p, fallback),
            disable_userns: c.disable_userns && !fallback,
            assert_userns_disabled: c.assert_userns_disabled || c.disable_userns,
            command: p.argv[0].to_string_lossy().into_owned(),
        })
    }
}

/// A classic BPF program from its bytes (`struct sock_filter`: code u16,
/// jt u8, jf u8, k u32, native endian); a trailing partial entry is
/// dropped (the policy's check refuses it).
fn sock_filters(bytes: &[u8]) -> Vec<libc::sock_filter> {
    bytes
        .chunks_exact(8)
        .map(|b| libc::sock_filter {
            code: u16::from_ne_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        })
        .collect()
}

/// A socket on the kernel's audit read-log, where Landlock's denial
/// records can be read; or why they cannot be (in the outcome's words).
/// Whether audit is on is asked later (`audit_verdict`). Nothing here
/// changes the host's audit settings.
fn landlock_audit() -> Result<OwnedFd, String> {
    let abi = sys::landlock::abi_version().map_err(|e| format!("Landlock: {e}"))?;
    if abi < 7 {
        return Err(format!(
            "Landlock ABI {abi} writes no audit records (ABI 7, Linux 6.15, does)"
        ));
    }
    let fd = sys::audit::open_readlog(1 << 20).map_err(|e| match e.errno {
        sys::Errno::EPERM => "reading the kernel's audit records needs CAP_AUDIT_READ in the initial user namespace, which stockade does not have here".to_string(),
        _ => format!("cannot read the kernel's audit records: {e}"),
    })?;
    Ok(fd)
}

/// Whether the payload may ask for its Landlock denials to be logged,
/// from the kernel's audit settings; else why not (the outcome's words).
pub fn audit_verdict() -> Result<(), String> {
    match sys::audit::audit_status() {
        Ok(st) if st.enabled == 0 => Err("the kernel's audit is disabled on this host, so Landlock writes no records (`auditctl -e 1` enables it; stockade leaves the host's audit settings as they are)".into()),
        // A payload could flood the audit backlog with denials; a lost
        // record must not panic the host.
        Ok(st) if st.failure == 2 => Err("the host's audit panics the kernel when a record is lost (`auditctl -f 2`), and a payload could make the kernel lose some: stockade does not ask Landlock to log the payload's denials".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cannot ask the kernel whether audit is enabled: {e}")),
    }
}

/// A host id of the run's own from `range` (`--uid-range`), its refusal
/// as a setup error naming the flag.
fn lease_id(range: (u32, u32)) -> Result<uids::Lease, SetupError> {
    uids::lease(range).map_err(|e| {
        let s = SetupError::new("--uid-range", "", e.to_string());
        match e.errno() {
            Some(n) => s.with_errno(n),
            None => s,
        }
    })
}

//! Policy → Plan: everything that may allocate, parse or fail slowly happens
//! here, before clone. The child only executes the Plan.

#![deny(unsafe_code)]

pub mod uids;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::policy::{MountSpec, Network, Policy};
use crate::sys;

/// One rlimit the payload sets (soft, hard) before anything else narrows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimit {
    pub resource: nix::sys::resource::Resource,
    pub name: &'static str,
    pub soft: u64,
    pub hard: u64,
}

/// A setup error found before clone; printed as `stockade: <step>: <path>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError {
    pub step: String,
    pub path: String,
    pub reason: String,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.step, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.step, self.path, self.reason)
        }
    }
}

impl std::error::Error for SetupError {}

impl SetupError {
    pub fn new(
        step: impl Into<String>,
        path: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        SetupError {
            step: step.into(),
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// One filesystem step of the jail's root, with host paths resolved and jail
/// paths relative to the new root.
#[derive(Debug, Clone)]
pub enum RootStep {
    Bind {
        src: PathBuf,
        dst: PathBuf,
        writable: bool,
        optional: bool,
    },
    Tmpfs {
        dst: PathBuf,
        data: String,
    },
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    File {
        dst: PathBuf,
        content: Vec<u8>,
        mode: u32,
    },
    Dir {
        dst: PathBuf,
    },
    Proc {
        dst: PathBuf,
    },
    Dev {
        dst: PathBuf,
    },
}

/// What Landlock grants beneath a jail path (derived from the mount list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and execute.
    ReadExec,
    /// Everything.
    ReadWrite,
    /// Device nodes: read and write files, no creation.
    Device,
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
    /// `inner outer 1` lines for /proc/PID/uid_map and gid_map.
    pub uid_map: String,
    pub gid_map: String,
    pub inner_uid: u32,
    pub inner_gid: u32,
    /// Host directory (in the jail's private mount namespace) where the new
    /// root tmpfs is assembled before pivot_root.
    pub base: PathBuf,
    pub steps: Vec<RootStep>,
    pub hostname: String,
    /// Paths inside the jail with the access Landlock grants beneath them.
    pub landlock_rules: Vec<(PathBuf, Access)>,
    pub cwd: PathBuf,
    /// Paths to try for execve, in order.
    pub exec_candidates: Vec<CString>,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub keep_fds: Vec<i32>,
    /// The command as the user typed it, for messages.
    pub command: String,
    /// Landlock is applied with `landlock_rules` unless disabled.
    pub landlock: bool,
    /// Deny TCP bind/connect through Landlock (every network but `host`).
    pub landlock_deny_tcp: bool,
    /// The compiled seccomp filter, if any.
    pub seccomp: Option<crate::seccomp::Compiled>,
    /// Layers that must be applied.
    pub require: Vec<crate::policy::Layer>,
    /// The limits asked for (how each is enforced is decided by the supervisor).
    pub limits: crate::policy::Limits,
    /// rlimits the payload sets (filled in by the supervisor once it knows
    /// which cgroup controllers it has).
    pub rlimits: Vec<Rlimit>,
    /// How often init samples the jail's task count and memory (ms; -1: only
    /// when a child exits).
    pub sample_ms: i32,
    /// Pipe stdout/stderr through the supervisor (cap, capture, report).
    pub pipe_output: bool,
    /// Keep stdout and stderr in the outcome.
    pub capture: bool,
    /// stdout carries the JSON report: the payload's stdout goes only into it.
    pub stdout_in_report: bool,
    /// /tmp's size cap, for the outcome.
    pub tmp_size: u64,
    /// No namespaces could be had: the payload runs on the host's file
    /// system behind Landlock, seccomp and rlimits only.
    pub fallback: bool,
    /// Fallback started by root: the payload becomes this uid/gid.
    pub fallback_ids: Option<(u32, u32)>,
    /// The lease on `fallback_ids` (see plan::uids), held until the
    /// plan is dropped after the run.
    pub uid_lease: Option<std::sync::Arc<crate::plan::uids::Lease>>,
    /// Fallback: the private per-run directory (the only writable place),
    /// removed after the run.
    pub run_dir: Option<PathBuf>,
    /// Fallback: the host directories beneath which the payload may connect
    /// to a pathname unix socket (see jail::unix_agent).
    pub unix_roots: Vec<PathBuf>,
    /// The supervisor mounted a tmpfs of `tmp_size` on `run_dir` (set by
    /// the supervisor; detached after the run).
    pub run_dir_tmpfs: bool,
    /// Held (flock) on `run_dir` while the run lives, so no other run takes
    /// it for stale.
    #[allow(dead_code)] // held, not read: the flock lasts as long as the plan
    pub run_dir_lock: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The payload's end of the supervisor's seccomp socket (learning and
    /// kill mode): the listener is sent over it. Set by the supervisor.
    pub seccomp_channel: Option<std::os::fd::RawFd>,
    /// Where the root build mounts something (absolute jail paths; the
    /// masks inside /proc and /dev's own mounts lie beneath these). Empty
    /// in the fallback, which has no root of its own.
    pub mount_points: Vec<PathBuf>,
}

fn cstr(origin: &str, b: &[u8]) -> Result<CString, SetupError> {
    CString::new(b)
        .map_err(|_| SetupError::new(origin, String::from_utf8_lossy(b), "contains a NUL byte"))
}

fn rel(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap_or(p).to_path_buf()
}

/// Canonical host paths of bind sources. The directories already resolved
/// are remembered: the default binds share /etc, whose every component
/// realpath(3) would otherwise read again for each file under it.
#[derive(Default)]
struct Sources {
    /// (directory as named, its canonical path).
    dirs: Vec<(PathBuf, PathBuf)>,
}

impl Sources {
    /// The canonical path of `p`, as `std::fs::canonicalize` gives it (same
    /// result, same errors): the parent directory from the cache when it
    /// is there, then one readlink(2) of the last component.
    fn canonicalize(&mut self, p: &Path) -> std::io::Result<PathBuf> {
        let Some((parent, name)) = plain_split(p) else {
            return std::fs::canonicalize(p);
        };
        let dir = match self.dirs.iter().find(|(d, _)| d == parent) {
            Some((_, c)) => c.clone(),
            None => {
                let c = std::fs::canonicalize(parent)?;
                self.dirs.push((parent.to_path_buf(), c.clone()));
                c
            }
        };
        let full = dir.join(name);
        match std::fs::read_link(&full) {
            Ok(_) => std::fs::canonicalize(&full),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(full),
            Err(e) => Err(e),
        }
    }

    /// Resolve a bind source to its canonical host path. The child opens
    /// that path again refusing every symlink, so a symlink swapped in later
    /// fails.
    fn resolve(&mut self, src: &Path, optional: bool) -> Result<Option<PathBuf>, SetupError> {
        match self.canonicalize(src) {
            Ok(p) => Ok(Some(p)),
            Err(e) if optional && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SetupError::new(
                "bind",
                src.display().to_string(),
                sys::errno_text(sys::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))),
            )),
        }
    }
}

/// `/a/b/c` as (`/a/b`, `c`) when every component is a plain name (no `.`,
/// `..`, empty component or trailing slash, whose meaning realpath(3) settles
/// itself); `None` otherwise.
fn plain_split(p: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let b = p.as_os_str().as_bytes();
    if b.first() != Some(&b'/') || b.len() < 2 {
        return None;
    }
    if b[1..]
        .split(|c| *c == b'/')
        .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        return None;
    }
    let cut = b.iter().rposition(|c| *c == b'/')?;
    let parent = if cut == 0 { &b[..1] } else { &b[..cut] };
    Some((
        Path::new(std::ffi::OsStr::from_bytes(parent)),
        std::ffi::OsStr::from_bytes(&b[cut + 1..]),
    ))
}

/// Landlock rules for the fallback: read-only binds' sources read and
/// execute, writable ones read-write, the device nodes. Not /proc: without
/// a pid namespace it is the host's, and shows every host process (its
/// command line included).
fn fallback_rules(steps: &[RootStep]) -> Vec<(PathBuf, Access)> {
    let mut rules = Vec::new();
    for s in steps {
        match s {
            RootStep::Bind { src, writable, .. } => rules.push((
                src.clone(),
                if *writable {
                    Access::ReadWrite
                } else {
                    Access::ReadExec
                },
            )),
            RootStep::Dev { .. } => {
                for d in ["null", "zero", "full", "random", "urandom", "tty"] {
                    rules.push((PathBuf::from("/dev").join(d), Access::Device));
                }
            }
            _ => {}
        }
    }
    rules
}

fn mount_points(steps: &[RootStep]) -> Vec<PathBuf> {
    steps
        .iter()
        .filter_map(|s| match s {
            RootStep::Bind { dst, .. }
            | RootStep::Tmpfs { dst, .. }
            | RootStep::Proc { dst }
            | RootStep::Dev { dst } => Some(Path::new("/").join(dst)),
            RootStep::Symlink { .. } | RootStep::File { .. } | RootStep::Dir { .. } => None,
        })
        .collect()
}

/// Fewer Landlock rules for the same grants: each rule costs the payload
/// an open, two stats and a landlock_add_rule before execve.
///
/// Read-only rules beneath a top-level directory that stockade created on
/// the root tmpfs itself (such as /etc, which holds only what the plan
/// puts there) become one read-only rule on that directory, when
/// everything the plan puts beneath it is read-only and granted (read-only
/// binds, files, symlinks, empty directories) and no --landlock-exclude
/// lies at, above or beneath it. The same paths are readable either way;
/// the directory itself becomes listable, as `/` is when every mount is
/// granted.
fn coalesce_rules(
    rules: Vec<(PathBuf, Access)>,
    steps: &[RootStep],
    exclude: &[PathBuf],
) -> Vec<(PathBuf, Access)> {
    let top = |p: &Path| -> Option<PathBuf> {
        let mut c = p.components();
        match (c.next(), c.next(), c.next()) {
            (Some(std::path::Component::RootDir), Some(t), Some(_)) => {
                Some(Path::new("/").join(t.as_os_str()))
            }
            _ => None,
        }
    };
    let mut tops: Vec<PathBuf> = Vec::new();
    for (path, access) in &rules {
        if *access != Access::ReadExec {
            continue;
        }
        let Some(t) = top(path) else { continue };
        if tops.contains(&t) || rules.iter().any(|(r, _)| *r == t) {
            continue;
        }
        let blocked = exclude
            .iter()
            .any(|x| x.starts_with(&t) || t.starts_with(x));
        let all_read_only = steps.iter().all(|s| {
            let (dst, ok) = match s {
                RootStep::Bind { dst, writable, .. } => (dst, !writable),
                RootStep::File { dst, .. } | RootStep::Dir { dst } => (dst, true),
                RootStep::Symlink { link, .. } => (link, true),
                RootStep::Tmpfs { dst, .. } | RootStep::Proc { dst } | RootStep::Dev { dst } => {
                    (dst, false)
                }
            };
            ok || !Path::new("/").join(dst).starts_with(&t)
        });
        if !blocked && all_read_only {
            tops.push(t);
        }
    }
    let mut out: Vec<(PathBuf, Access)> = rules
        .into_iter()
        .filter(|(path, access)| {
            *access != Access::ReadExec || !tops.iter().any(|t| path.starts_with(t))
        })
        .collect();
    out.extend(tops.into_iter().map(|t| (t, Access::ReadExec)));
    out
}

/// Open a directory to lock it (no symlink followed).
fn open_dir(path: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map(std::os::fd::OwnedFd::from)
}

/// Remove the run directories under `base` that no run uses any more:
/// left behind when stockade was killed. A run holds a lock on its
/// directory for its whole life (the supervisor, and init, which outlives
/// a killed supervisor while it kills the jail). The process named in the
/// directory's name must be gone too: it has not locked the directory yet
/// between mkdir and flock, and an older stockade never does.
fn remove_stale_run_dirs(base: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(dir) = std::fs::read_dir(base) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("stockade-run-"))
            .and_then(|r| r.split('-').next())
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let path = e.path();
        let Ok(fd) = open_dir(&path) else { continue };
        if sys::try_lock_exclusive(&fd) == Ok(true) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Create the fallback's private per-run directory (0700, owned by the
/// payload's user), locked for the run's life (see
/// [`remove_stale_run_dirs`], which runs first).
fn make_run_dir(owner: Option<(u32, u32)>) -> Result<(PathBuf, std::os::fd::OwnedFd), SetupError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let base = std::fs::canonicalize(&base)
        .map_err(|e| SetupError::new("run directory", base.display().to_string(), e.to_string()))?;
    remove_stale_run_dirs(&base);
    for n in 0..1000u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = base.join(format!(
            "stockade-run-{}-{:08x}{n}",
            std::process::id(),
            nanos
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                let fail = |e: String| {
                    let _ = std::fs::remove_dir(&dir);
                    SetupError::new("run directory", dir.display().to_string(), e)
                };
                let lock = open_dir(&dir).map_err(|e| fail(e.to_string()))?;
                match sys::try_lock_exclusive(&lock) {
                    Ok(true) => {}
                    Ok(false) => return Err(fail("locked by another process".into())),
                    Err(e) => return Err(fail(e.to_string())),
                }
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
                if let Some((u, g)) = owner {
                    std::os::unix::fs::chown(&dir, Some(u), Some(g))
                        .map_err(|e| fail(e.to_string()))?;
                }
                return Ok((dir, lock));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(SetupError::new(
                    "run directory",
                    dir.display().to_string(),
                    e.to_string(),
                ))
            }
        }
    }
    Err(SetupError::new(
        "run directory",
        base.display().to_string(),
        "could not create a unique directory",
    ))
}

fn tmpfs_data(size: u64, mode: u32) -> String {
    format!("size={size},mode={mode:o}")
}

impl Plan {
    /// Turn a validated policy into a plan. Reads the host (bind sources,
    /// caller ids), allocates every string the child will need.
    pub fn build(p: &Policy) -> Result<Plan, SetupError> {
        Plan::build_mode(p, false)
    }

    /// The plan for a host where user namespaces are refused: no namespaces,
    /// no new root; Landlock rules name host paths (the binds' sources), and a
    /// private per-run directory is the only writable place.
    pub fn build_fallback(p: &Policy) -> Result<Plan, SetupError> {
        Plan::build_mode(p, true)
    }

    fn build_mode(p: &Policy, fallback: bool) -> Result<Plan, SetupError> {
        let euid = sys::geteuid();
        let egid = sys::getegid();
        let (outer_uid, outer_gid) = if euid == 0 {
            (p.root_host_uid, p.root_host_gid)
        } else {
            (euid, egid)
        };
        if outer_uid == 0 || outer_gid == 0 {
            return Err(SetupError::new(
                "id map",
                "",
                "the jail would map to host root (uid or gid 0); choose an unprivileged host id",
            ));
        }
        let mut flags = (libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP) as u64;
        // The network namespace is not made by clone: setting one up costs
        // about as much as the rest of the clone. The supervisor makes it
        // while init builds the root (sys::netns), and init joins it.
        let new_netns = p.network == Network::None && !fallback;
        if fallback {
            flags = 0;
        }

        let mut specs: Vec<MountSpec> =
            crate::policy::default_mounts(p.uid, p.gid, &p.hostname, &p.workdir.inner, p.tmp_size);
        if p.base == crate::policy::BaseRoot::Empty {
            specs.retain(|m| !matches!(m, MountSpec::Bind { .. } | MountSpec::Symlink { .. }));
        }
        specs.push(match &p.workdir.host {
            Some(h) => MountSpec::Bind {
                src: h.clone(),
                dst: p.workdir.inner.clone(),
                writable: true,
                optional: false,
            },
            None => MountSpec::Tmpfs {
                dst: p.workdir.inner.clone(),
                size: p.workdir.size,
                mode: 0o755,
            },
        });
        specs.extend(p.mounts.iter().cloned());

        let mut steps = Vec::with_capacity(specs.len());
        let mut landlock_rules = Vec::new();
        let mut sources = Sources::default();
        for s in &specs {
            match s {
                MountSpec::Bind {
                    src,
                    dst,
                    writable,
                    optional,
                } => {
                    let Some(src) = sources.resolve(src, *optional)? else {
                        continue;
                    };
                    landlock_rules.push((
                        dst.clone(),
                        if *writable {
                            Access::ReadWrite
                        } else {
                            Access::ReadExec
                        },
                    ));
                    steps.push(RootStep::Bind {
                        src,
                        dst: rel(dst),
                        writable: *writable,
                        optional: *optional,
                    });
                }
                MountSpec::Tmpfs { dst, size, mode } => {
                    landlock_rules.push((dst.clone(), Access::ReadWrite));
                    steps.push(RootStep::Tmpfs {
                        dst: rel(dst),
                        data: tmpfs_data(*size, *mode),
                    });
                }
                MountSpec::Symlink { target, link } => steps.push(RootStep::Symlink {
                    target: target.clone(),
                    link: rel(link),
                }),
                MountSpec::File { dst, content, mode } => {
                    landlock_rules.push((dst.clone(), Access::ReadExec));
                    steps.push(RootStep::File {
                        dst: rel(dst),
                        content: content.clone(),
                        mode: *mode,
                    })
                }
                MountSpec::Dir { dst } => steps.push(RootStep::Dir { dst: rel(dst) }),
                MountSpec::Proc { dst } => {
                    landlock_rules.push((dst.clone(), Access::ReadExec));
                    steps.push(RootStep::Proc { dst: rel(dst) })
                }
                MountSpec::Dev { dst } => {
                    landlock_rules.push((dst.clone(), Access::Device));
                    landlock_rules.push((dst.join("shm"), Access::ReadWrite));
                    landlock_rules.push((dst.join("pts"), Access::Device));
                    steps.push(RootStep::Dev { dst: rel(dst) })
                }
            }
        }

        let mut env = p.env.clone();
        let mut cwd = p.chdir.clone().unwrap_or_else(|| p.workdir.inner.clone());
        let mut run_dir = None;
        let mut run_dir_lock = None;
        let mut fallback_ids = None;
        let mut uid_lease = None;
        if fallback {
            // Rules name host paths; only binds and the device nodes carry over.
            landlock_rules = fallback_rules(&steps);
            steps.clear();
            if euid == 0 {
                // Its own host id: RLIMIT_NPROC, signals and /proc go by
                // the real uid, shared with every process that has it.
                let lease = crate::plan::uids::lease(p.fallback_uid_range)
                    .map_err(|e| SetupError::new("--uid-range", "", e))?;
                fallback_ids = Some((lease.id, lease.id));
                uid_lease = Some(std::sync::Arc::new(lease));
            }
            let (dir, lock) = make_run_dir(fallback_ids)?;
            run_dir_lock = Some(std::sync::Arc::new(lock));
            landlock_rules.push((dir.clone(), Access::ReadWrite));
            let work = match &p.workdir.host {
                Some(h) => std::fs::canonicalize(h).map_err(|e| {
                    SetupError::new("workdir", h.display().to_string(), e.to_string())
                })?,
                None => dir.clone(),
            };
            if p.chdir.is_none() {
                cwd = work.clone();
            }
            crate::policy::set_env(&mut env, "HOME".into(), work.into_os_string());
            crate::policy::set_env(&mut env, "TMPDIR".into(), dir.clone().into_os_string());
            run_dir = Some(dir);
        }

        let base = ["/tmp", "/run", "/mnt", "/var/tmp"]
            .iter()
            .map(PathBuf::from)
            .find(|d| std::fs::symlink_metadata(d).map(|m| m.is_dir()).unwrap_or(false))
            .ok_or_else(|| SetupError::new("new root", "/tmp", "no directory to assemble the new root on (/tmp, /run, /mnt, /var/tmp all missing)"))?;

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
        let exec_candidates = if cmd.contains(&b'/') {
            vec![argv[0].clone()]
        } else {
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_bytes().to_vec())
                .unwrap_or_default();
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
            c
        };

        landlock_rules.retain(|(path, _)| !p.landlock.exclude.iter().any(|x| path.starts_with(x)));
        // Where a pathname socket may be reached in the fallback: beneath
        // what Landlock grants, but not /proc (magic links) or /dev.
        let unix_roots = if fallback {
            landlock_rules
                .iter()
                .filter(|(path, a)| {
                    *a != Access::Device && !path.starts_with("/proc") && !path.starts_with("/dev")
                })
                .map(|(path, _)| path.clone())
                .collect()
        } else {
            Vec::new()
        };
        if !fallback {
            landlock_rules = coalesce_rules(landlock_rules, &steps, &p.landlock.exclude);
        }
        let seccomp = if p.seccomp.enabled {
            let mut sp = p.seccomp.clone();
            // Without a network namespace only Landlock stands between the
            // payload and the network, and it knows TCP only: no inet sockets.
            sp.unix_sockets_only |= fallback && p.network == Network::None;
            // Nor a mount namespace to hide the host's unix sockets:
            // connect() is mediated, no unix datagram sockets.
            sp.mediate_unix = fallback;
            Some(crate::seccomp::compile(&sp).map_err(|e| SetupError::new("seccomp", "", e))?)
        } else {
            None
        };

        let stdout_in_report = p.stdout_in_report;
        Ok(Plan {
            limits: p.limits.clone(),
            rlimits: Vec::new(),
            sample_ms: 100,
            seccomp_channel: None,
            mount_points: mount_points(&steps),
            pipe_output: p.capture || stdout_in_report || p.limits.max_output.is_some(),
            capture: p.capture || stdout_in_report,
            stdout_in_report,
            tmp_size: p.tmp_size,
            landlock: !p.landlock.disabled,
            landlock_deny_tcp: p.network != Network::Host,
            seccomp,
            require: p.require.clone(),
            clone_flags: flags,
            new_netns,
            network: p.network,
            uid_map: format!("{} {} 1\n", p.uid, outer_uid),
            gid_map: format!("{} {} 1\n", p.gid, outer_gid),
            inner_uid: p.uid,
            inner_gid: p.gid,
            base,
            steps,
            hostname: p.hostname.clone(),
            landlock_rules,
            cwd,
            fallback,
            fallback_ids,
            uid_lease,
            run_dir,
            unix_roots,
            run_dir_tmpfs: false,
            run_dir_lock,
            exec_candidates,
            argv,
            envp,
            keep_fds: p.keep_fds.clone(),
            command: p.argv[0].to_string_lossy().into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(dst: &str, writable: bool) -> RootStep {
        RootStep::Bind {
            src: PathBuf::from("/x"),
            dst: PathBuf::from(dst),
            writable,
            optional: false,
        }
    }

    fn ro(p: &str) -> (PathBuf, Access) {
        (PathBuf::from(p), Access::ReadExec)
    }

    #[test]
    fn read_only_rules_under_a_created_directory_become_one() {
        let steps = vec![
            bind("usr", false),
            bind("etc/ld.so.cache", false),
            bind("etc/ssl", false),
            RootStep::File {
                dst: PathBuf::from("etc/passwd"),
                content: Vec::new(),
                mode: 0o644,
            },
            RootStep::Symlink {
                target: PathBuf::from("/usr/share/zoneinfo/UTC"),
                link: PathBuf::from("etc/localtime"),
            },
            RootStep::Tmpfs {
                dst: PathBuf::from("tmp"),
                data: String::new(),
            },
        ];
        let rules = vec![
            ro("/usr"),
            ro("/etc/ld.so.cache"),
            ro("/etc/ssl"),
            ro("/etc/passwd"),
            (PathBuf::from("/tmp"), Access::ReadWrite),
        ];
        let mut got = coalesce_rules(rules.clone(), &steps, &[]);
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            vec![
                ro("/etc"),
                (PathBuf::from("/tmp"), Access::ReadWrite),
                ro("/usr")
            ]
        );
        // An exclusion beneath /etc, or at or above it, keeps the rules apart.
        for x in ["/etc/ssl", "/etc", "/"] {
            let kept: Vec<_> = rules
                .iter()
                .filter(|(p, _)| !p.starts_with(x))
                .cloned()
                .collect();
            assert_eq!(
                coalesce_rules(kept.clone(), &steps, &[PathBuf::from(x)]),
                kept,
                "{x}"
            );
        }
        // Something writable (or a mount of its own) beneath /etc, too.
        for extra in [
            bind("etc/rw", true),
            RootStep::Tmpfs {
                dst: PathBuf::from("etc/t"),
                data: String::new(),
            },
            RootStep::Dev {
                dst: PathBuf::from("etc/dev"),
            },
        ] {
            let mut st = steps.clone();
            st.push(extra);
            assert_eq!(coalesce_rules(rules.clone(), &st, &[]), rules);
        }
    }

    #[test]
    fn sources_resolve_as_canonicalize_does() {
        let root = std::env::temp_dir().join(format!("stockade-plan-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        std::fs::write(root.join("real/f"), b"x").unwrap();
        std::fs::write(root.join("real/sub/g"), b"x").unwrap();
        let link = |t: &str, l: &str| std::os::unix::fs::symlink(t, root.join(l)).unwrap();
        link("real", "dirlink");
        link(&root.join("real/f").display().to_string(), "abslink");
        link("real/sub/../f", "rellink");
        link("missing", "dangling");
        link("loop", "loop");
        let r = root.display().to_string();
        let mut names: Vec<String> = [
            "",
            "/real",
            "/real/f",
            "/real/sub/g",
            "/dirlink",
            "/dirlink/f",
            "/dirlink/sub/g",
            "/abslink",
            "/rellink",
            "/dangling",
            "/loop",
            "/missing",
            "/missing/x",
            "/real/f/x",
            "/real/",
            "/real//f",
            "/real/./f",
            "/real/sub/../f",
            "/dirlink/../real/f",
            "/real/sub/",
            "/real/f/",
        ]
        .iter()
        .map(|n| format!("{r}{n}"))
        .collect();
        names
            .extend(["/", "/usr", "/etc/hostname", "/proc/self", "/nonexistent"].map(String::from));
        let mut sources = Sources::default();
        for pass in 0..2 {
            for n in &names {
                let p = Path::new(n);
                let want = std::fs::canonicalize(p).map_err(|e| e.raw_os_error());
                let got = sources.canonicalize(p).map_err(|e| e.raw_os_error());
                assert_eq!(got, want, "{n} (pass {pass})");
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn plain_split_takes_only_plain_paths() {
        let s = |p: &str| {
            plain_split(Path::new(p)).map(|(a, b)| (a.display().to_string(), b.to_os_string()))
        };
        assert_eq!(s("/usr"), Some(("/".into(), "usr".into())));
        assert_eq!(s("/etc/ssl"), Some(("/etc".into(), "ssl".into())));
        for p in [
            "/",
            "",
            "etc",
            "/etc/",
            "/etc//ssl",
            "/etc/./ssl",
            "/etc/..",
            "/a/../b",
        ] {
            assert_eq!(s(p), None, "{p}");
        }
    }
}

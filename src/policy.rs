//! What a run is allowed to do, validated: every path absolute, every value
//! in range. Built from a profile and CLI overrides; immutable afterwards.

#![deny(unsafe_code)]

pub use crate::seccomp::{SeccompAction, SeccompPolicy};

pub mod compat;
pub mod egress;
mod error;
pub mod profile;
pub mod python;
mod system;
pub mod units;
pub mod workspace;

pub use compat::{Compat, PidReport};
pub use error::{PathError, PolicyError, Reason};

pub use units::parse_uid_range;
pub use workspace::{Commit, Workspaces};

pub use system::{default_env, default_mounts, set_env};

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// One entry of the jail's filesystem, applied in order on a fresh tmpfs root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MountSpec {
    /// Bind a host path. `optional` entries are skipped when the source is
    /// missing (the defaults); others are a setup error.
    Bind {
        src: PathBuf,
        dst: PathBuf,
        writable: bool,
        optional: bool,
    },
    /// A fresh tmpfs capped at `size` bytes (0: the kernel's default, half
    /// of the memory, as bwrap's `--tmpfs` without `--size`).
    Tmpfs { dst: PathBuf, size: u64, mode: u32 },
    /// A symlink at `link` pointing to `target` (not resolved on the host).
    Symlink { target: PathBuf, link: PathBuf },
    /// A regular file with inline content (read-only once the root is sealed).
    File {
        dst: PathBuf,
        content: Vec<u8>,
        mode: u32,
    },
    /// A file of the jail's own with inline content, bind-mounted on `dst`
    /// (read-only unless `writable`): bwrap's `--bind-data` and
    /// `--ro-bind-data`.
    Data {
        dst: PathBuf,
        content: Vec<u8>,
        mode: u32,
        writable: bool,
    },
    /// An empty directory; missing parents are made with the same `mode`,
    /// an existing directory is left as it is (bwrap's `--perms` `--dir`).
    Dir {
        dst: PathBuf,
        #[serde(default = "dir_mode")]
        mode: u32,
    },
    /// A fresh /proc of the jail's pid namespace, /proc/sys read-only and
    /// dangerous files masked.
    Proc { dst: PathBuf },
    /// A minimal /dev: null, zero, full, random, urandom, tty, shm, pts.
    Dev { dst: PathBuf },
    /// Bind a host path writable with its device nodes usable (no nodev:
    /// bwrap's `--dev-bind`); `optional` as for `Bind`.
    DevBind {
        src: PathBuf,
        dst: PathBuf,
        optional: bool,
    },
    /// A fresh mqueue filesystem of the jail's ipc namespace (bwrap's
    /// `--mqueue`).
    Mqueue { dst: PathBuf },
    /// An overlayfs of host directories (bwrap's `--overlay`,
    /// `--tmp-overlay`, `--ro-overlay`): `lower` bottom to top; writes go
    /// to `upper` (with its `work` directory), or to a tmpfs of its own
    /// (`tmp`), or nowhere (neither).
    Overlay {
        dst: PathBuf,
        lower: Vec<PathBuf>,
        upper: Option<(PathBuf, PathBuf)>,
        tmp: bool,
    },
    /// A copy-on-write view of the host directory `src` at `dst`
    /// (`--overlay SRC:DST`): the jail may change anything there, the
    /// changes go to an upper layer of the run's own (see
    /// [`Policy::workspace`]) and `src` is never written while the jail
    /// runs; the outcome lists them (`changes`), and they are applied to
    /// `src` only when the policy says so (`Workspaces::commit`).
    Workspace { src: PathBuf, dst: PathBuf },
    /// Change the mode of what an earlier entry put at `dst` (bwrap's
    /// `--chmod`; symlinks followed inside the jail's root).
    Chmod { dst: PathBuf, mode: u32 },
    /// Make the mount at `dst` (put there by an earlier entry) read-only,
    /// not recursively (bwrap's `--remount-ro`).
    RemountRo { dst: PathBuf },
}

/// A directory's mode unless given.
pub const DIR_MODE: u32 = 0o755;

fn dir_mode() -> u32 {
    DIR_MODE
}

impl MountSpec {
    pub fn dst(&self) -> &Path {
        match self {
            MountSpec::Bind { dst, .. }
            | MountSpec::DevBind { dst, .. }
            | MountSpec::Tmpfs { dst, .. }
            | MountSpec::File { dst, .. }
            | MountSpec::Data { dst, .. }
            | MountSpec::Dir { dst, .. }
            | MountSpec::Proc { dst }
            | MountSpec::Dev { dst }
            | MountSpec::RemountRo { dst }
            | MountSpec::Chmod { dst, .. }
            | MountSpec::Mqueue { dst }
            | MountSpec::Overlay { dst, .. }
            | MountSpec::Workspace { dst, .. } => dst,
            MountSpec::Symlink { link, .. } => link,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Network {
    /// A new network namespace with only `lo`; Landlock denies TCP bind
    /// and connect (ABI 4).
    None,
    /// `None`'s namespace with only `lo`, and TCP left to it: the jail's
    /// processes reach each other on 127.0.0.1 and ::1, and nothing else
    /// (there is no other interface). Never in the fallback, which has no
    /// network namespace: there it would reach the host's loopback.
    Loopback,
    /// The host's network namespace (recorded in the outcome).
    Host,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Loopback => "loopback",
            Network::Host => "host",
        }
    }
}

/// The Landlock layer. Its rules are derived from the mount list.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct LandlockPolicy {
    pub disabled: bool,
    /// Jail paths that are mounted but left out of the ruleset.
    pub exclude: Vec<PathBuf>,
}

/// Host paths hidden inside the jail's binds (`--deny`, `--deny-glob`,
/// `filesystem.deny`): each match is covered in the jail (or, in the
/// fallback, left out of the Landlock rules), see `plan::deny`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct DenyPolicy {
    /// Absolute host paths (`~` already expanded); each must exist.
    pub paths: Vec<PathBuf>,
    /// Glob patterns (`*`, `?`, `[…]`, `**` for any depth), matched
    /// against the entries beneath the sources of the binds the caller
    /// asked for (the workdir and the policy's own binds, not the
    /// system's): a relative one against the path relative to the source,
    /// an absolute one against the host path.
    pub globs: Vec<String>,
    /// Most directory entries the expansion may visit (0: the default,
    /// [`DENY_MAX_ENTRIES`]).
    #[serde(default)]
    pub max_entries: u64,
}

/// The default bound on the entries visited while expanding denials.
pub const DENY_MAX_ENTRIES: u64 = 200_000;

/// A deny glob checked: it must compile. `origin` names the flag or field.
pub fn deny_glob(origin: &str, pat: &str) -> Result<String, PolicyError> {
    if pat.is_empty() {
        return Err(PolicyError::new(origin, "empty pattern"));
    }
    glob::Pattern::new(pat)
        .map(|_| pat.to_string())
        .map_err(|e| PolicyError::new(origin, format!("{pat:?}: {}", e.msg)))
}

/// A deny path that must exist (`--deny`: a path that is not there is
/// most likely a typo): [`deny_home`], checked.
pub fn deny_path(origin: &str, p: &Path) -> Result<PathBuf, PolicyError> {
    let p = deny_home(origin, p)?;
    host_exists(&p, false).map_err(|e| PolicyError::value(origin, e))?;
    Ok(p)
}

/// A deny path: `~` and `~/…` are the caller's `$HOME`; relative paths are
/// taken from the current directory.
pub fn deny_home(origin: &str, p: &Path) -> Result<PathBuf, PolicyError> {
    use std::os::unix::ffi::OsStrExt;
    let b = p.as_os_str().as_bytes();
    let p = if b == b"~" || b.starts_with(b"~/") {
        let home = std::env::var_os("HOME")
            .filter(|h| Path::new(h).is_absolute())
            .ok_or_else(|| {
                PolicyError::new(
                    origin,
                    format!("{}: $HOME is not set to an absolute path", p.display()),
                )
            })?;
        let rest = std::ffi::OsStr::from_bytes(b.get(2..).unwrap_or_default());
        Path::new(&home).join(rest)
    } else {
        p.to_path_buf()
    };
    host_path(origin, &p)
}

/// Resource limits. `None` means no limit of that kind.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Bytes of memory (cgroup memory.max, or RLIMIT_AS as fallback).
    pub memory: Option<u64>,
    /// cgroup memory.high (throttling point).
    pub memory_high: Option<u64>,
    /// CPUs (cpu.max quota/period).
    pub cpus: Option<f64>,
    /// Processes and threads (pids.max, or RLIMIT_NPROC as fallback).
    pub pids: Option<u64>,
    /// CPU time (RLIMIT_CPU).
    pub cpu_time: Option<Duration>,
    /// Wall-clock deadline.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL at the deadline.
    pub grace: Duration,
    /// stdout + stderr bytes.
    pub max_output: Option<u64>,
    /// RLIMIT_FSIZE.
    pub max_file_size: Option<u64>,
    /// RLIMIT_NOFILE.
    pub max_open_files: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: None,
            memory_high: None,
            cpus: None,
            pids: None,
            cpu_time: None,
            timeout: None,
            grace: Duration::from_secs(2),
            max_output: None,
            max_file_size: None,
            max_open_files: None,
        }
    }
}

/// A layer a policy can require: if it cannot be applied the run fails
/// (exit 125) instead of running without it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Layer {
    Userns,
    Landlock,
    Seccomp,
    Cgroup,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Userns => "userns",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Cgroup => "cgroup",
        }
    }

    pub fn parse(s: &str) -> Option<Layer> {
        Some(match s {
            "userns" | "namespaces" => Layer::Userns,
            "landlock" => Layer::Landlock,
            "seccomp" => Layer::Seccomp,
            "cgroup" => Layer::Cgroup,
            _ => return None,
        })
    }
}

/// The jail's working directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Workdir {
    /// Host directory bound read-write; `None` means a fresh tmpfs.
    pub host: Option<PathBuf>,
    /// Where it appears inside (also $HOME).
    pub inner: PathBuf,
    /// Size of the tmpfs when `host` is `None`.
    pub size: u64,
    /// Files the payload finds in the workdir, written by the jail itself
    /// just before it starts the command (so on the jail's own storage,
    /// charged to it and bounded by its size): a server's request files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SeedFile>,
    /// Filling the workdir's tmpfs ends the run (`disk_limit`) instead of
    /// only failing the write with ENOSPC: a server's workdir cap.
    #[serde(default)]
    pub full_ends_run: bool,
}

/// One file written into the workdir before the command starts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SeedFile {
    /// Relative to the workdir: plain components only (no `..`, `.`, empty
    /// or absolute), parents made as needed.
    pub path: String,
    pub content: Vec<u8>,
    pub executable: bool,
}

impl SeedFile {
    /// Why `path` is not a plain relative path, if it is not.
    pub fn check_path(path: &str) -> Result<(), &'static str> {
        if path.is_empty() {
            return Err("empty path");
        }
        if path.contains('\0') {
            return Err("contains a NUL byte");
        }
        if path.starts_with('/') {
            return Err("absolute path: paths are relative to the workdir");
        }
        if path.split('/').any(|c| matches!(c, "" | "." | "..")) {
            return Err("empty, `.` or `..` component");
        }
        Ok(())
    }
}

/// What the jail's root holds before the policy's own mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum BaseRoot {
    /// The host's /usr, /bin, /sbin, /lib* and a few /etc files (read-only),
    /// plus the generated /etc files, /proc, /dev and /tmp.
    #[default]
    System,
    /// Only the generated /etc files, /proc, /dev and /tmp: nothing from the
    /// host unless a mount names it (the `minimal` profile).
    Empty,
    /// Nothing at all, not even /proc, /dev, /tmp or the workdir: only the
    /// policy's own mounts, in order (bwrap's empty root, `stockade bwrap`).
    Bare,
}

/// Everything about one run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    /// The command and its arguments; `argv[0]` is looked up in the jail's PATH
    /// when it has no `/`.
    pub argv: Vec<OsString>,
    /// uid and gid inside the jail.
    pub uid: u32,
    pub gid: u32,
    /// Host ids the jail maps to when started by real root.
    pub root_host_uid: u32,
    pub root_host_gid: u32,
    /// Where user namespaces are refused and stockade is root: the host
    /// ids (uid = gid) each jail gets one of, as (first, count).
    pub fallback_uid_range: (u32, u32),
    /// What the root holds before `mounts`.
    pub base: BaseRoot,
    /// Filesystem entries in order; the defaults come first.
    pub mounts: Vec<MountSpec>,
    pub workdir: Workdir,
    /// Size cap of /tmp in bytes.
    pub tmp_size: u64,
    /// Directory to start in (default: the workdir).
    pub chdir: Option<PathBuf>,
    /// The payload's complete environment.
    pub env: Vec<(OsString, OsString)>,
    pub hostname: String,
    pub network: Network,
    /// The egress allowlist (`--allow-host`, `network.allow`): when not
    /// empty, the jail's network namespace (only `lo`) reaches these hosts
    /// through stockade's proxy, and nothing else. Needs `Network::None`.
    #[serde(default)]
    pub allow_hosts: Vec<egress::AllowHost>,
    /// Learning (`--learn`): the proxy runs even with no allowlist,
    /// reaches any public host, and records those reached.
    #[serde(default)]
    pub egress_record: bool,
    /// Secrets the jail never holds (`--secret`, `--secret-file`): the
    /// payload's variable holds a placeholder, and the proxy puts the
    /// value into requests to the secret's hosts only. Needs an allowlist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<egress::Secret>,
    /// More trust anchors (PEM files) for the hosts the proxy intercepts
    /// (`--egress-ca`), beside the host's trust store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_cas: Vec<PathBuf>,
    /// What requests may go to a host (`--allow-http`): its TLS is
    /// intercepted, and only requests some rule of its allows go there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_rules: Vec<egress::HttpRule>,
    /// Caller fds passed through to the payload under the same number.
    pub keep_fds: Vec<i32>,
    pub seccomp: SeccompPolicy,
    /// The payload is a fork server's zygote (`stockade serve`'s fork
    /// pool): it keeps `CAP_SYS_ADMIN`, `CAP_NET_ADMIN` and `CAP_SETPCAP`
    /// inside the jail's user namespace (and `compat.keep_caps` is ignored);
    /// Landlock's ruleset is made but not enforced and stockade's seccomp
    /// program is not installed: both are handed to the command (see
    /// `jail::zygote::handoff`), and each child the zygote forks enforces
    /// them (stockade-sys's `forked` steps, which the zygote loads) after it
    /// has made its own namespaces and dropped every capability. Only the
    /// serve pool sets it.
    #[doc(hidden)]
    #[serde(default)]
    pub zygote: bool,
    /// A caller fd each new refusal record (`outcome::Denial`) is written
    /// to as a JSON line while the run goes on (`--denials-fd`). Only for a run in the caller's own process
    /// (`run_here`); never passed to the payload.
    #[serde(default)]
    pub denials_fd: Option<i32>,
    pub landlock: LandlockPolicy,
    /// What only the bwrap front end asks (bubblewrap's options beyond
    /// stockade's own policy); nothing unless it fills it.
    #[serde(default)]
    pub compat: Compat,
    /// Paths hidden inside the binds.
    #[serde(default)]
    pub deny: DenyPolicy,
    /// What becomes of the overlays' changes ([`MountSpec::Workspace`]).
    #[serde(default)]
    pub workspace: Workspaces,
    pub limits: Limits,
    /// Layers that must be applied or the run fails.
    pub require: Vec<Layer>,
    /// Keep stdout and stderr in the outcome.
    pub capture: bool,
    /// The JSON report goes to stdout: the payload's stdout is captured into
    /// it instead of streamed.
    pub stdout_in_report: bool,
}

pub const DEFAULT_UID: u32 = 1000;
pub const DEFAULT_GID: u32 = 1000;
pub const DEFAULT_HOSTNAME: &str = "stockade";
pub const DEFAULT_WORKDIR: &str = "/work";
pub const DEFAULT_TMP_SIZE: u64 = 128 << 20;
pub const DEFAULT_WORKDIR_SIZE: u64 = 128 << 20;
pub const NOBODY: u32 = 65534;

/// The default `--uid-range`: the 65536 ids just below 2^31, above the
/// ranges systemd hands out (containers end at 1879048191, its foreign
/// range at 2147418111) and far above useradd's subordinate ids.
pub const DEFAULT_UID_RANGE: (u32, u32) = (2_147_418_112, 65_536);

/// Check that a jail path is absolute and plain (no `..`), and normalize it.
pub fn jail_path(origin: &str, p: &Path) -> Result<PathBuf, PolicyError> {
    check_jail_path(p).map_err(|e| PolicyError::value(origin, e))
}

/// [`jail_path`] without an origin.
pub(crate) fn check_jail_path(p: &Path) -> Result<PathBuf, PathError> {
    if !p.is_absolute() {
        return Err(PathError::NotAbsolute(p.to_path_buf()));
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(PathError::ParentDir(p.to_path_buf()))
            }
        }
    }
    if out.as_os_str().len() > 4000 {
        return Err(PathError::TooLong);
    }
    Ok(out)
}

/// Check a host path: absolute after joining with the cwd, no NUL.
pub fn host_path(origin: &str, p: &Path) -> Result<PathBuf, PolicyError> {
    check_host_path(p).map_err(|e| PolicyError::value(origin, e))
}

/// [`host_path`] without an origin.
pub(crate) fn check_host_path(p: &Path) -> Result<PathBuf, PathError> {
    use std::os::unix::ffi::OsStrExt;
    if p.as_os_str().is_empty() {
        return Err(PathError::Empty);
    }
    if p.as_os_str().as_bytes().contains(&0) {
        return Err(PathError::Nul);
    }
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        let cwd = std::env::current_dir().map_err(|e| PathError::NoCurrentDir(e.to_string()))?;
        Ok(cwd.join(p))
    }
}

/// Check that the host path `p` exists (and is a directory when `dir`), as
/// the jail will need it: the error is one phrase naming the path.
pub fn host_exists(p: &Path, dir: bool) -> Result<(), PathError> {
    match std::fs::metadata(p) {
        Ok(m) if dir && !m.is_dir() => Err(PathError::NotADirectory(p.to_path_buf())),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(PathError::Missing {
            path: p.to_path_buf(),
            dir,
        }),
        Err(e) => {
            let s = e.to_string();
            let s = s.split(" (os error").next().unwrap_or(&s).to_lowercase();
            Err(PathError::Unreachable {
                path: p.to_path_buf(),
                why: s,
            })
        }
    }
}

/// Check one seccomp group (`@name`) or syscall name against the tables:
/// the error says what is known.
pub fn seccomp_name(name: &str) -> Result<(), Reason> {
    let mut sp = SeccompPolicy {
        groups: Vec::new(),
        ..SeccompPolicy::default()
    };
    if name.starts_with('@') {
        sp.groups.push(name.to_string());
    } else {
        sp.allow.push(name.to_string());
    }
    crate::seccomp::resolve_bits(&sp)
        .map(|_| ())
        .map_err(|e| Reason::Seccomp(e.to_string()))
}

impl Policy {
    /// A policy with the defaults for `argv`.
    pub fn with_defaults(argv: Vec<OsString>) -> Policy {
        let workdir = PathBuf::from(DEFAULT_WORKDIR);
        Policy {
            argv,
            uid: DEFAULT_UID,
            gid: DEFAULT_GID,
            root_host_uid: NOBODY,
            root_host_gid: NOBODY,
            fallback_uid_range: DEFAULT_UID_RANGE,
            base: BaseRoot::System,
            mounts: Vec::new(),
            env: default_env(&workdir),
            workdir: Workdir {
                host: None,
                inner: workdir,
                size: DEFAULT_WORKDIR_SIZE,
                files: Vec::new(),
                full_ends_run: false,
            },
            tmp_size: DEFAULT_TMP_SIZE,
            chdir: None,
            hostname: DEFAULT_HOSTNAME.into(),
            network: Network::None,
            allow_hosts: Vec::new(),
            egress_record: false,
            secrets: Vec::new(),
            egress_cas: Vec::new(),
            http_rules: Vec::new(),
            keep_fds: Vec::new(),
            seccomp: SeccompPolicy::default(),
            denials_fd: None,
            zygote: false,
            landlock: LandlockPolicy::default(),
            compat: Compat::default(),
            deny: DenyPolicy::default(),
            workspace: Workspaces::default(),
            limits: Limits::default(),
            require: Vec::new(),
            capture: false,
            stdout_in_report: false,
        }
    }

    /// Final checks that need the whole policy.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.argv.is_empty() {
            return Err(PolicyError::new(
                "command",
                "no command given (stockade run [OPTIONS] -- CMD [ARGS…])",
            ));
        }
        if self.hostname.is_empty() || self.hostname.len() > 64 || self.hostname.contains('\0') {
            return Err(PolicyError::new(
                "hostname",
                format!("{:?}: must be 1 to 64 bytes", self.hostname),
            ));
        }
        for (k, _) in &self.env {
            use std::os::unix::ffi::OsStrExt;
            let b = k.as_bytes();
            if b.is_empty() || b.contains(&b'=') || b.contains(&0) {
                return Err(PolicyError::new(
                    "env",
                    format!("{k:?}: not a valid variable name"),
                ));
            }
        }
        let l = &self.limits;
        for (field, zero) in [
            ("limits.memory", l.memory == Some(0)),
            ("limits.memory_high", l.memory_high == Some(0)),
            ("limits.pids", l.pids == Some(0)),
            ("limits.max_output", l.max_output == Some(0)),
            ("limits.max_file_size", l.max_file_size == Some(0)),
            ("limits.max_open_files", l.max_open_files == Some(0)),
            ("limits.cpu_time", l.cpu_time.is_some_and(|d| d.is_zero())),
            ("limits.timeout", l.timeout.is_some_and(|d| d.is_zero())),
            (
                "limits.cpus",
                l.cpus
                    .is_some_and(|c| !(c.is_finite() && c > 0.0 && c <= 4096.0)),
            ),
        ] {
            if zero {
                return Err(PolicyError::new(
                    field,
                    "must be greater than 0 (leave the limit out for none)",
                ));
            }
        }
        if !self.allow_hosts.is_empty() && self.network != Network::None {
            return Err(PolicyError::new(
                "allow_hosts",
                format!(
                    "an egress allowlist needs network = \"none\" (not {:?})",
                    self.network.as_str()
                ),
            ));
        }
        egress::check_secrets(self)?;
        if self.tmp_size == 0 {
            return Err(PolicyError::new("tmp_size", "must be greater than 0"));
        }
        for f in &self.workdir.files {
            if let Err(why) = SeedFile::check_path(&f.path) {
                return Err(PolicyError::new(
                    "workdir.files",
                    format!("{:?}: {why}", f.path),
                ));
            }
        }
        if !self.workdir.files.is_empty() && self.base == BaseRoot::Bare {
            return Err(PolicyError::new(
                "workdir.files",
                "a bare root has no workdir to write them into",
            ));
        }
        self.compat.validate()?;
        workspace::check(self)?;
        if self.denials_fd.is_some_and(|fd| fd < 0) {
            return Err(PolicyError::new("--denials-fd", "not a file descriptor"));
        }
        for fd in &self.keep_fds {
            if *fd < 3 {
                return Err(PolicyError::new(
                    "--keep-fd",
                    format!("{fd}: 0, 1 and 2 are always passed"),
                ));
            }
        }
        Ok(())
    }
}

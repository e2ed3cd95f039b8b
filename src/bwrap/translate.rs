//! bwrap's setup ops, in order, into a [`Policy`] on an empty root.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::parse::Op;
use super::sources::resolved;
use super::BwrapError;
use crate::policy::{self, BaseRoot, MountSpec, Network, PidReport, Policy};

/// Namespace options seen; checked together once every op is read.
#[derive(Default)]
struct Ns {
    user: bool,
    /// `--unshare-user` itself (bwrap's checks look at it before `-try`
    /// or a caller who is not root turn it on).
    unshare_user: bool,
    /// `--unshare-user-try`, or `--unshare-all`.
    unshare_user_try: bool,
    uts: bool,
    net: bool,
    share_net: bool,
    uid: bool,
    pid: bool,
    gid: bool,
    hostname: bool,
    /// `--seccomp`'s program (not repeatable: the last one counts).
    seccomp: Option<Vec<u8>>,
}

/// `--perms` and `--size` wait for the op they apply to.
#[derive(Default)]
struct Pending {
    perms: Option<u32>,
    size: Option<u64>,
    /// `--overlay-src` directories waiting for their overlay, in order.
    overlay_src: Vec<PathBuf>,
    /// The fds read to their end so far: bwrap closes each after reading
    /// it, so a second read of one fails with EBADF there.
    read_fds: Vec<i32>,
}

/// The policy for `ops` and `argv`: bwrap's semantics (see the module
/// `bwrap`'s doc), or the first op refused.
pub(super) fn policy(ops: &[Op], argv: Vec<OsString>) -> Result<Policy, BwrapError> {
    let mut p = Policy::with_defaults(argv);
    let root = crate::sys::getuid() == 0;
    p.base = BaseRoot::Bare;
    p.env = std::env::vars_os().collect();
    p.network = Network::Host;
    p.hostname = host_hostname();
    p.uid = crate::sys::getuid();
    p.gid = crate::sys::getegid();
    if p.uid == 0 {
        // bwrap run by root: its payload starts with the caller's
        // capabilities (here in the jail's user namespace), and host
        // root's files on the binds are its own (idmapped; its processes
        // stay an unprivileged host id).
        p.compat.keep_caps = caller_caps();
        p.compat.caps_as_root = true;
        p.compat.idmap_root_binds = true;
    }
    p.seccomp.enabled = false;
    p.landlock.disabled = true;
    // Where user namespaces are refused, bwrap.rs decides: bwrap's failure
    // or the run without them (`bwrap::fallback`).
    let (mut ns, mut pending) = (Ns::default(), Pending::default());
    for op in ops {
        apply(op, &mut p, &mut ns, &mut pending)?;
        if op.opt != "--overlay-src" && !pending.overlay_src.is_empty() {
            return Err(usage(OVERLAY_SRC_ALONE));
        }
        // An op that did not take them: bwrap refuses them there.
        if op.opt != "--perms" && op.opt != "--size" {
            if pending.perms.is_some() {
                return Err(usage(
                    "--perms must be followed by an option that creates a file",
                ));
            }
            if pending.size.is_some() {
                return Err(usage("--size must be followed by --tmpfs"));
            }
        }
    }
    if !pending.overlay_src.is_empty() {
        return Err(usage(OVERLAY_SRC_ALONE));
    }
    namespace_combinations(&p, &ns)?;
    // A joined user namespace is the jail's: `--uid`/`--gid` are its ids.
    // As bwrap, a caller other than root always gets a user namespace of
    // its own (bwrap turns `--unshare-user` on for it), and an id equal to
    // the caller's own needs none.
    let user = ns.user || p.compat.join_userns.is_some() || !root;
    if ns.uid && !user && p.uid != crate::sys::getuid() {
        return Err(usage(
            "Specifying --uid requires --unshare-user or --userns",
        ));
    }
    if ns.gid && !user && p.gid != crate::sys::getgid() {
        return Err(usage(
            "Specifying --gid requires --unshare-user or --userns",
        ));
    }
    if ns.hostname && !ns.uts {
        return Err(usage("Specifying --hostname requires --unshare-uts"));
    }
    if p.compat.as_pid_1 && !ns.pid {
        return Err(usage("Specifying --as-pid-1 requires --unshare-pid"));
    }
    if p.compat.as_pid_1 && !p.compat.lock_files.is_empty() {
        return Err(usage(
            "Specifying --as-pid-1 and --lock-file is not permitted",
        ));
    }
    // With `--pidns`, `--unshare-pid` makes the jail's own under it.
    p.compat.nest_pidns = p.compat.join_pidns.is_some() && ns.pid;
    if let Some(prog) = ns.seccomp.take() {
        p.compat.bpf_filters.push(prog);
    }
    if root && !ns.user {
        p.compat.bounding_caps = Some(caller_caps());
    }
    if ns.net && !ns.share_net {
        p.network = Network::None;
    }
    if p.chdir.is_none() {
        // As bwrap, at the command's start: the caller's directory if it
        // can be entered inside, else `$HOME`, else `/`.
        p.chdir = Some(std::env::current_dir().unwrap_or_else(|_| "/".into()));
        p.compat.chdir_fallbacks = home(&p.env).into_iter().chain(["/".into()]).collect();
    }
    let cwd = p.chdir.clone().unwrap_or_default();
    policy::set_env(&mut p.env, "PWD".into(), cwd.into_os_string());
    Ok(p)
}

/// The namespace options that exclude or need each other, checked in
/// bwrap's order with its words (before `--uid`, `--gid` and the rest).
fn namespace_combinations(p: &Policy, ns: &Ns) -> Result<(), BwrapError> {
    let block = p.compat.userns_block_fd.is_some();
    let userns = p.compat.join_userns.is_some();
    let info = p.compat.pid_reports.iter().any(|r| r.pretty);
    let refusals = [
        (
            block && !ns.unshare_user,
            "--userns-block-fd requires --unshare-user",
        ),
        (block && !info, "--userns-block-fd requires --info-fd"),
        (
            userns && ns.unshare_user,
            "--userns is not compatible with --unshare-user",
        ),
        (
            userns && ns.unshare_user_try,
            "--userns is not compatible with --unshare-user-try",
        ),
        (
            p.compat.disable_userns && !ns.unshare_user,
            "--disable-userns requires --unshare-user",
        ),
        (
            p.compat.disable_userns && block,
            "--disable-userns is not compatible with --userns-block-fd",
        ),
    ];
    match refusals.into_iter().find(|(refused, _)| *refused) {
        Some((_, words)) => Err(usage(words)),
        None => Ok(()),
    }
}

/// The namespace fds the caller did not have open when we started fail
/// as bwrap's setns fails on them (EBADF), in its words: by then this
/// process has fds of its own, which a number the caller names must never
/// reach. A `--userns-block-fd` not open reads EOF at once in bwrap: here
/// it becomes a fd of /dev/null.
pub(super) fn namespace_fds(p: &mut Policy, inherited: &[i32]) -> Result<(), Vec<String>> {
    let open = |fd: &Option<i32>| fd.is_none_or(|fd| inherited.contains(&fd));
    let bad = "Bad file descriptor";
    if !open(&p.compat.join_userns) {
        return Err(vec![format!(
            "Joining specified user namespace failed: {bad}"
        )]);
    }
    if !open(&p.compat.join_pidns) {
        return Err(vec![
            format!("Setting pidns failed: {bad}"),
            "Unexpected short read from pid socket".into(),
        ]);
    }
    if !open(&p.compat.join_userns2) {
        return Err(vec![format!("Setting userns2 failed: {bad}")]);
    }
    if !open(&p.compat.userns_block_fd) {
        let null = std::fs::File::open("/dev/null").map_err(|e| vec![e.to_string()])?;
        // Held until this process ends, as the caller's fd would be.
        p.compat.userns_block_fd = Some(std::os::fd::IntoRawFd::into_raw_fd(null));
    }
    Ok(())
}

/// The options whose first word is an fd bwrap uses up (reads, writes or
/// binds) and closes before the command runs.
const FD_OPTIONS: &[&str] = &[
    "--args",
    "--info-fd",
    "--json-status-fd",
    "--block-fd",
    "--userns-block-fd",
    "--sync-fd",
    "--seccomp",
    "--add-seccomp-fd",
    "--file",
    "--bind-data",
    "--ro-bind-data",
    "--bind-fd",
    "--ro-bind-fd",
    "--userns",
    "--userns2",
    "--pidns",
];

/// The caller's fds the command gets, as bwrap passes them through: every
/// inherited one but those an option named (bwrap closes those first).
pub(super) fn passed_fds(ops: &[Op], inherited: &[i32]) -> Vec<i32> {
    // With --as-pid-1 bwrap leaves --sync-fd open in the command.
    let as_pid_1 = ops.iter().any(|o| o.opt == "--as-pid-1");
    let used: Vec<i32> = ops
        .iter()
        .filter(|o| FD_OPTIONS.contains(&o.opt))
        .filter(|o| !(as_pid_1 && o.opt == "--sync-fd"))
        .filter_map(|o| super::parse::parse_fd(&o.args[0]).ok())
        .collect();
    inherited
        .iter()
        .copied()
        .filter(|fd| *fd >= 3 && !used.contains(fd))
        .collect()
}

pub(super) const OVERLAY_SRC_ALONE: &str = "--overlay-src must be followed by another --overlay-src or one of --overlay, --tmp-overlay, or --ro-overlay";

fn usage(s: &str) -> BwrapError {
    BwrapError::Usage(s.into())
}

/// One op onto the policy.
fn apply(op: &Op, p: &mut Policy, ns: &mut Ns, pending: &mut Pending) -> Result<(), BwrapError> {
    let a = &op.args;
    match op.opt {
        "--unshare-all" => {
            ns.pid = true;
            ns.user = true;
            ns.unshare_user_try = true;
            ns.uts = true;
            ns.net = true;
        }
        "--share-net" => ns.share_net = true,
        "--unshare-user" => {
            ns.user = true;
            ns.unshare_user = true;
        }
        "--unshare-user-try" => {
            ns.user = true;
            ns.unshare_user_try = true;
        }
        // The caller's namespaces (`Compat::join_userns`, …).
        "--userns" => p.compat.join_userns = Some(super::parse::parse_fd(&a[0])?),
        "--userns2" => p.compat.join_userns2 = Some(super::parse::parse_fd(&a[0])?),
        "--pidns" => p.compat.join_pidns = Some(super::parse::parse_fd(&a[0])?),
        "--userns-block-fd" => p.compat.userns_block_fd = Some(super::parse::parse_fd(&a[0])?),
        "--unshare-uts" => ns.uts = true,
        "--unshare-net" => ns.net = true,
        "--unshare-pid" => ns.pid = true,
        "--disable-userns" => p.compat.disable_userns = true,
        "--assert-userns-disabled" => p.compat.assert_userns_disabled = true,
        // The command is the jail's pid 1 (`Compat::as_pid_1`).
        "--as-pid-1" => p.compat.as_pid_1 = true,
        // Always new here.
        "--unshare-ipc" | "--unshare-cgroup" | "--unshare-cgroup-try" => {}
        // Always so here: a new session, every capability dropped.
        "--new-session" => {}
        // bwrap::main arms it; the jail dies with this process.
        "--die-with-parent" => {}
        // bwrap tolerates some setup failures with it; every one stays
        // fatal here (stricter, never weaker).
        "--not-a-security-boundary" => {}
        // Capabilities in the jail's user namespace, added and dropped in
        // order from none (a caller who is not root) or from the caller's
        // own (root), as bwrap's.
        // Either makes bwrap set every set, ambient included, to the result.
        "--cap-add" => {
            p.compat.keep_caps |= cap_mask(&a[0])?;
            p.compat.caps_as_root = false;
        }
        "--cap-drop" => {
            p.compat.keep_caps &= !cap_mask(&a[0])?;
            p.compat.caps_as_root = false;
        }
        // Held open by this process (and the jail's init) until the end.
        // The payload reads it before execve (`Compat::block_fd`).
        "--block-fd" => p.compat.block_fd = Some(super::parse::parse_fd(&a[0])?),
        "--sync-fd" => {
            super::parse::parse_fd(&a[0])?;
        }
        "--uid" => {
            p.uid = id(&a[0], "uid")?;
            ns.uid = true;
        }
        "--gid" => {
            p.gid = id(&a[0], "gid")?;
            ns.gid = true;
        }
        "--hostname" => {
            p.hostname = a[0].to_string_lossy().into_owned();
            ns.hostname = true;
        }
        "--chdir" => p.chdir = Some(PathBuf::from(&a[0])),
        "--clearenv" => p.env.clear(),
        "--setenv" => policy::set_env(&mut p.env, a[0].clone(), a[1].clone()),
        "--unsetenv" => p.env.retain(|(k, _)| *k != a[0]),
        "--info-fd" | "--json-status-fd" => {
            let pretty = op.opt == "--info-fd";
            p.compat.pid_reports.retain(|r| r.pretty != pretty);
            p.compat.pid_reports.push(PidReport {
                fd: super::parse::parse_fd(&a[0])?,
                pretty,
            })
        }
        "--argv0" => p.compat.argv0 = Some(a[0].clone()),
        // Read by the parser; its fd is not the command's (`passed_fds`).
        "--args" => {}
        // Installed last before execve, in order (`Compat::bpf_filters`).
        "--seccomp" if !p.compat.bpf_filters.is_empty() => {
            return Err(usage("--seccomp cannot be combined with --add-seccomp-fd"))
        }
        "--seccomp" => ns.seccomp = Some(seccomp_data(&a[0], pending)?),
        "--add-seccomp-fd" if ns.seccomp.is_some() => {
            return Err(usage("--add-seccomp-fd cannot be combined with --seccomp"))
        }
        "--add-seccomp-fd" => {
            let prog = seccomp_data(&a[0], pending)?;
            p.compat.bpf_filters.push(prog);
        }
        // Refused by the parser (`parse::label`); never here.
        "--exec-label" | "--file-label" => return Err(BwrapError::Unsupported(op.opt)),
        // Opened and read-locked inside by the jail's init, held to the end.
        "--lock-file" => p.compat.lock_files.push(PathBuf::from(&a[0])),
        "--perms" if pending.perms.is_some() => {
            return Err(usage("--perms given twice for the same action"))
        }
        "--perms" => pending.perms = Some(perms(op.opt, &a[0])?),
        "--size" if pending.size.is_some() => {
            return Err(usage("--size given twice for the same action"))
        }
        "--size" => pending.size = Some(size(&a[0])?),
        _ => return mount(op, p, pending),
    }
    Ok(())
}

/// A filesystem op (or a refusal).
fn mount(op: &Op, p: &mut Policy, pending: &mut Pending) -> Result<(), BwrapError> {
    let a = &op.args;
    let spec = match op.opt {
        "--bind" | "--bind-try" | "--dev-bind" | "--dev-bind-try" | "--ro-bind"
        | "--ro-bind-try" | "--bind-fd" | "--ro-bind-fd" => match bind_spec(op)? {
            Some(spec) => spec,
            None => return Ok(()),
        },
        "--tmpfs" => MountSpec::Tmpfs {
            dst: dest(op.opt, &a[0])?,
            // 0: the kernel's default size, as bwrap leaves it.
            size: pending.size.take().unwrap_or(0),
            mode: pending.perms.take().unwrap_or(0o755),
        },
        "--dir" => MountSpec::Dir {
            dst: dest(op.opt, &a[0])?,
            mode: pending.perms.take().unwrap_or(policy::DIR_MODE),
        },
        // A file of the sandbox's own with FD's content, as bwrap copies
        // it (writable where its directory is).
        "--file" => MountSpec::File {
            content: fd_data(op.opt, &a[0], pending)?,
            dst: dest(op.opt, &a[1])?,
            mode: pending.perms.take().unwrap_or(0o666),
        },
        // The same, bind-mounted on DEST (read-only for ro-), mode 0600
        // unless --perms, as bwrap's.
        "--bind-data" | "--ro-bind-data" => MountSpec::Data {
            content: fd_data(op.opt, &a[0], pending)?,
            dst: dest(op.opt, &a[1])?,
            mode: pending.perms.take().unwrap_or(0o600),
            writable: op.opt == "--bind-data",
        },
        "--mqueue" => MountSpec::Mqueue {
            dst: dest(op.opt, &a[0])?,
        },
        "--chmod" => MountSpec::Chmod {
            mode: perms(op.opt, &a[0])?,
            dst: dest(op.opt, &a[1])?,
        },
        "--remount-ro" => MountSpec::RemountRo {
            dst: dest(op.opt, &a[0])?,
        },
        "--proc" => MountSpec::Proc {
            dst: dest(op.opt, &a[0])?,
        },
        "--dev" => MountSpec::Dev {
            dst: dest(op.opt, &a[0])?,
        },
        "--overlay-src" => {
            pending.overlay_src.push(resolved(&a[0]));
            return Ok(());
        }
        "--overlay" | "--tmp-overlay" | "--ro-overlay" => overlay(op, pending)?,
        "--symlink" => MountSpec::Symlink {
            target: PathBuf::from(&a[0]),
            link: dest(op.opt, &a[1])?,
        },
        other => return Err(BwrapError::Unsupported(other)),
    };
    p.mounts.push(spec);
    Ok(())
}

/// A path of the caller's, relative ones from its working directory.
pub(super) fn caller_path(p: &OsString) -> PathBuf {
    std::env::current_dir().unwrap_or_default().join(p)
}

/// An overlay op onto the `--overlay-src` directories before it (bottom
/// to top), its directories resolved as bwrap resolves them.
fn overlay(op: &Op, pending: &mut Pending) -> Result<MountSpec, BwrapError> {
    let a = &op.args;
    let lower = std::mem::take(&mut pending.overlay_src);
    let (need, what) = match op.opt {
        "--ro-overlay" => (2, "two"),
        _ => (1, "one"),
    };
    if lower.len() < need {
        return Err(BwrapError::Usage(format!(
            "{} requires at least {what} --overlay-src",
            op.opt
        )));
    }
    let dst_arg = a.last().cloned().unwrap_or_default();
    let upper = (op.opt == "--overlay").then(|| (resolved(&a[0]), resolved(&a[1])));
    Ok(MountSpec::Overlay {
        dst: dest(op.opt, &dst_arg)?,
        lower,
        upper,
        tmp: op.opt == "--tmp-overlay",
    })
}

/// Everything in the fd named by `s`, for `opt`'s file.
fn fd_data(opt: &str, s: &OsString, pending: &mut Pending) -> Result<Vec<u8>, BwrapError> {
    let fd = super::parse::parse_fd(s)?;
    read_once(fd, pending).map_err(|e| {
        let e = std::io::Error::from_raw_os_error(e.errno as i32);
        BwrapError::Usage(format!(
            "Can't read {opt} data: {}",
            crate::sys::strerror(&e)
        ))
    })
}

/// Everything in `fd`, which bwrap then closes: read a second time, it
/// fails as a closed fd does.
fn read_once(fd: i32, pending: &mut Pending) -> crate::sys::SysResult<Vec<u8>> {
    if pending.read_fds.contains(&fd) {
        return Err(crate::sys::SysError {
            call: "read",
            arg: fd.to_string(),
            errno: crate::sys::Errno::EBADF,
        });
    }
    pending.read_fds.push(fd);
    super::parse::read_fd(fd)
}

/// A bind op's mount; None for one whose source is missing (a `-try`'s
/// is skipped; any other is refused by `sources::missing` before the
/// run, after every usage error, as bwrap refuses it).
fn bind_spec(op: &Op) -> Result<Option<MountSpec>, BwrapError> {
    let a = &op.args;
    let spec = match op.opt {
        "--bind" | "--bind-try" | "--dev-bind" | "--dev-bind-try" | "--ro-bind"
        | "--ro-bind-try" => {
            let optional = op.opt.ends_with("-try");
            let src = policy::host_path(op.opt, Path::new(&a[0]))?;
            if std::fs::metadata(&src).is_err() {
                return Ok(None);
            }
            let dst = dest(op.opt, &a[1])?;
            match op.opt.starts_with("--dev-") {
                true => MountSpec::DevBind { src, dst, optional },
                false => MountSpec::Bind {
                    src,
                    dst,
                    writable: !op.opt.starts_with("--ro-"),
                    optional,
                },
            }
        }
        // bwrap binds /proc/self/fd/FD, resolved to its path first.
        "--bind-fd" | "--ro-bind-fd" => {
            let fd = super::parse::parse_fd(&a[0])?;
            let link = PathBuf::from(format!("/proc/self/fd/{fd}"));
            let Ok(src) = std::fs::canonicalize(&link) else {
                return Ok(None);
            };
            MountSpec::Bind {
                src,
                dst: dest(op.opt, &a[1])?,
                writable: op.opt == "--bind-fd",
                optional: false,
            }
        }
        other => return Err(BwrapError::Unsupported(other)),
    };
    Ok(Some(spec))
}

/// A destination inside: bwrap takes relative ones from the root.
fn dest(opt: &str, d: &OsString) -> Result<PathBuf, BwrapError> {
    let d = Path::new("/").join(d);
    Ok(policy::jail_path(opt, &d)?)
}

fn id(s: &OsString, what: &str) -> Result<u32, BwrapError> {
    s.to_str()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| BwrapError::Usage(format!("Invalid {what}: {}", s.to_string_lossy())))
}

/// The caller's effective capabilities as a mask (bit N: capability N).
fn caller_caps() -> u64 {
    caps::read(None, caps::CapSet::Effective)
        .map(|set| set.iter().fold(0, |m, c| m | 1u64 << c.index()))
        .unwrap_or(0)
}

/// bwrap's capability names (`ALL`, or `CAP_…`, either case) as a mask.
fn cap_mask(s: &OsString) -> Result<u64, BwrapError> {
    use std::str::FromStr;
    let up = s.to_string_lossy().to_ascii_uppercase();
    if up == "ALL" {
        return Ok(caps::all().iter().fold(0, |m, c| m | 1u64 << c.index()));
    }
    match caps::Capability::from_str(&up) {
        Ok(c) if up.starts_with("CAP_") => Ok(1u64 << c.index()),
        _ => Err(BwrapError::Usage(format!(
            "unknown cap: {}",
            s.to_string_lossy()
        ))),
    }
}

/// A seccomp program read from the fd named by `s` (to its end), checked
/// as bwrap checks it.
fn seccomp_data(s: &OsString, pending: &mut Pending) -> Result<Vec<u8>, BwrapError> {
    let fd = super::parse::parse_fd(s)?;
    let data = read_once(fd, pending).map_err(|e| {
        let e = std::io::Error::from_raw_os_error(e.errno as i32);
        BwrapError::Usage(format!(
            "Can't read seccomp data: {}",
            crate::sys::strerror(&e)
        ))
    })?;
    if data.len() % 8 != 0 {
        return Err(usage("Invalid seccomp data, must be multiple of 8"));
    }
    Ok(data)
}

fn perms(opt: &str, s: &OsString) -> Result<u32, BwrapError> {
    s.to_str()
        .and_then(|t| u32::from_str_radix(t, 8).ok())
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| BwrapError::Usage(format!("{opt} takes an octal argument <= 07777")))
}

/// A tmpfs size as bwrap reads it (C's strtoull with base 0: decimal,
/// 0x hex or 0 octal, starting with a digit), at most SIZE_MAX / 2.
fn size(s: &OsString) -> Result<u64, BwrapError> {
    const MAX: u64 = u64::MAX >> 1;
    let t = s.to_str().unwrap_or_default();
    let (digits, radix) = match t.as_bytes() {
        [b'0', b'x' | b'X', ..] => (&t[2..], 16),
        [b'0', _, ..] => (&t[1..], 8),
        _ => (t, 10),
    };
    let n = t
        .as_bytes()
        .first()
        .filter(|c| c.is_ascii_digit())
        .and_then(|_| u64::from_str_radix(digits, radix).ok())
        .filter(|n| *n > 0)
        .ok_or_else(|| usage("--size takes a non-zero number of bytes"))?;
    if n > MAX {
        return Err(BwrapError::Usage(format!(
            "--size (for tmpfs) is limited to {MAX}"
        )));
    }
    Ok(n)
}

/// The host's hostname (bwrap keeps it without `--unshare-uts`).
fn host_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim_end().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| policy::DEFAULT_HOSTNAME.into())
}

/// `$HOME` of the command's environment, when set.
fn home(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    env.iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(opt: &'static str, args: &[&str]) -> Op {
        Op {
            opt,
            args: args.iter().map(OsString::from).collect(),
        }
    }

    #[test]
    fn mounts_keep_the_command_line_order() {
        let ops = [
            op("--tmpfs", &["/tmp"]),
            op("--ro-bind", &["/usr", "/tmp"]),
            op("--perms", &["0700"]),
            op("--size", &["4096"]),
            op("--tmpfs", &["x"]),
        ];
        let p = policy(&ops, vec!["true".into()]).unwrap();
        assert_eq!(p.base, BaseRoot::Bare);
        let dsts: Vec<&Path> = p.mounts.iter().map(|m| m.dst()).collect();
        assert_eq!(
            dsts,
            [Path::new("/tmp"), Path::new("/tmp"), Path::new("/x")]
        );
        assert_eq!(
            p.mounts[2],
            MountSpec::Tmpfs {
                dst: "/x".into(),
                size: 4096,
                mode: 0o700
            }
        );
    }

    #[test]
    fn namespace_options_onto_the_policy_and_their_refusals() {
        let p = policy(
            &[
                op("--userns", &["5"]),
                op("--pidns", &["6"]),
                op("--unshare-pid", &[]),
            ],
            vec!["x".into()],
        )
        .unwrap();
        assert_eq!(
            (
                p.compat.join_userns,
                p.compat.join_pidns,
                p.compat.nest_pidns
            ),
            (Some(5), Some(6), true)
        );
        let p = policy(&[op("--pidns", &["6"])], vec!["x".into()]).unwrap();
        assert!(!p.compat.nest_pidns);
        let p = policy(
            &[
                op("--unshare-user", &[]),
                op("--info-fd", &["3"]),
                op("--userns-block-fd", &["4"]),
            ],
            vec!["x".into()],
        )
        .unwrap();
        assert_eq!(p.compat.userns_block_fd, Some(4));
        let e = |ops: &[Op]| policy(ops, vec!["x".into()]).unwrap_err().to_string();
        let userns = op("--userns", &["5"]);
        let block = op("--userns-block-fd", &["4"]);
        let info = op("--info-fd", &["3"]);
        let user = op("--unshare-user", &[]);
        assert_eq!(
            e(&[userns.clone(), user.clone()]),
            "--userns is not compatible with --unshare-user"
        );
        assert_eq!(
            e(&[op("--unshare-all", &[]), userns.clone()]),
            "--userns is not compatible with --unshare-user-try"
        );
        assert_eq!(
            e(&[block.clone(), info.clone()]),
            "--userns-block-fd requires --unshare-user"
        );
        assert_eq!(
            e(&[user.clone(), block.clone()]),
            "--userns-block-fd requires --info-fd"
        );
        assert_eq!(
            e(&[user.clone(), info, block, op("--disable-userns", &[])]),
            "--disable-userns is not compatible with --userns-block-fd"
        );
        // bwrap looks at --unshare-user itself, not at -try.
        assert_eq!(
            e(&[op("--unshare-all", &[]), op("--disable-userns", &[])]),
            "--disable-userns requires --unshare-user"
        );
        assert_eq!(e(&[op("--pidns", &["x"])]), "Invalid fd: x");
        // --uid with a joined user namespace is that namespace's uid.
        assert!(policy(&[userns, op("--uid", &["7"])], vec!["x".into()]).is_ok());
    }

    #[test]
    fn bwrap_defaults_and_refusals() {
        let p = policy(&[], vec!["true".into()]).unwrap();
        assert_eq!(p.network, Network::Host);
        assert!(!p.seccomp.enabled && p.landlock.disabled);
        assert!(p.require.is_empty());
        let e = |ops: &[Op]| policy(ops, vec!["x".into()]).unwrap_err().to_string();
        assert_eq!(
            e(&[op("--overlay", &["a", "b", "c"])]),
            "--overlay requires at least one --overlay-src"
        );
        assert_eq!(
            e(&[op("--cap-drop", &["sys_admin"])]),
            "unknown cap: sys_admin"
        );
        assert!(policy(&[op("--cap-drop", &["cap_sys_admin"])], vec!["x".into()]).is_ok());
        assert_eq!(
            e(&[op("--hostname", &["h"])]),
            "Specifying --hostname requires --unshare-uts"
        );
        assert_eq!(e(&[op("--uid", &["x"])]), "Invalid uid: x");
        let net = policy(&[op("--unshare-all", &[])], vec!["x".into()]).unwrap();
        assert_eq!(net.network, Network::None);
        let shared = [op("--unshare-all", &[]), op("--share-net", &[])];
        assert_eq!(
            policy(&shared, vec!["x".into()]).unwrap().network,
            Network::Host
        );
    }
}

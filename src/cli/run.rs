//! `stockade run`: the flags onto the profile's policy, the run, the report.

use std::ffi::OsString;
use std::path::PathBuf;

use super::args::{CommitArg, MountFlag, NetArg, RunArgs, SeccompActionArg};
use super::eprint_line;
use super::report::{refuse, ReportTo};
use crate::policy::{
    self, profile, units, Layer, MountSpec, Network, Policy, PolicyError, SeccompAction,
};
use crate::Status;

/// Split `a:b` at the first `:` that starts an absolute second part.
fn split_src_dst(s: &str) -> (String, Option<String>) {
    match s.find(':') {
        Some(i) => (s[..i].to_string(), Some(s[i + 1..].to_string())),
        None => (s.to_string(), None),
    }
}

fn bind_spec(flag: &str, v: &str, writable: bool) -> Result<MountSpec, PolicyError> {
    let (src, dst) = split_src_dst(v);
    let src = policy::host_path(flag, std::path::Path::new(&src))?;
    let dst = match dst {
        Some(d) => policy::jail_path(flag, std::path::Path::new(&d))?,
        None => policy::jail_path(flag, &src)?,
    };
    Ok(MountSpec::Bind {
        src,
        dst,
        writable,
        optional: false,
    })
}

fn tmpfs_spec(v: &str) -> Result<MountSpec, PolicyError> {
    let (dst, size) = match v.rfind(':') {
        Some(i) => (&v[..i], Some(&v[i + 1..])),
        None => (v, None),
    };
    let size = match size {
        Some(s) => units::parse_size(s).map_err(|e| PolicyError::value("--tmpfs", e))?,
        None => 64 << 20,
    };
    if size == 0 {
        return Err(PolicyError::new(
            "--tmpfs",
            format!("{v}: size must be greater than 0"),
        ));
    }
    Ok(MountSpec::Tmpfs {
        dst: policy::jail_path("--tmpfs", std::path::Path::new(dst))?,
        size,
        mode: 0o1777,
    })
}

fn symlink_spec(v: &str) -> Result<MountSpec, PolicyError> {
    let i = v.rfind(":/").ok_or_else(|| {
        PolicyError::new(
            "--symlink",
            format!("{v}: expected TARGET:LINK with an absolute LINK"),
        )
    })?;
    if i == 0 {
        return Err(PolicyError::new("--symlink", format!("{v}: empty TARGET")));
    }
    Ok(MountSpec::Symlink {
        target: PathBuf::from(&v[..i]),
        link: policy::jail_path("--symlink", std::path::Path::new(&v[i + 1..]))?,
    })
}

/// Filesystem flags in the order they were given (they apply in that order).
/// Values are checked flag by flag (--ro-bind, --bind, --tmpfs, --symlink,
/// --overlay),
/// so the first error reported does not depend on the order given.
fn ordered_mounts(flags: &[(usize, MountFlag, String)]) -> Result<Vec<MountSpec>, PolicyError> {
    let mut items: Vec<(usize, MountSpec)> = Vec::new();
    for f in MountFlag::ALL {
        for (i, _, v) in flags.iter().filter(|(_, g, _)| *g == f) {
            let spec = match f {
                MountFlag::RoBind => bind_spec("--ro-bind", v, false)?,
                MountFlag::Bind => bind_spec("--bind", v, true)?,
                MountFlag::Tmpfs => tmpfs_spec(v)?,
                MountFlag::Symlink => symlink_spec(v)?,
                MountFlag::Overlay => policy::workspace::parse_overlay(v)?,
            };
            items.push((*i, spec));
        }
    }
    items.sort_by_key(|(i, _)| *i);
    Ok(items.into_iter().map(|(_, s)| s).collect())
}

/// A `--` in the command when none came before it: `stockade run --ro-bind
/// /a /bin/x -- y` (bwrap's `SRC DST`) reads `/bin/x` as the command and
/// `--` as its argument. Refused, saying what was read and how to write it.
pub(super) fn literal_dashdash(a: &RunArgs) -> Result<(), PolicyError> {
    if a.dashdash || !a.command.iter().skip(1).any(|x| x == "--") {
        return Ok(());
    }
    let word = |w: &OsString| {
        let s = w.to_string_lossy();
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            s.into_owned()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let mut shown: Vec<String> = a.command.iter().take(6).map(word).collect();
    if a.command.len() > 6 {
        shown.push("…".into());
    }
    Err(PolicyError::new(
        "command",
        format!(
            "{} was read as the command, with a literal \"--\" among its arguments \
             (a flag takes one value: --ro-bind SRC[:DST], not SRC DST); \
             if that is meant, put -- before the command: stockade run [OPTIONS] -- {}",
            word(&a.command[0]),
            shown.join(" ")
        ),
    ))
}

/// The policy `stockade run` runs: the profile's, with the flags on top,
/// each step checking the flags it applies.
pub(super) fn run_policy(
    a: &RunArgs,
    mounts: &[(usize, MountFlag, String)],
) -> Result<Policy, PolicyError> {
    literal_dashdash(a)?;
    let workdir = Workdir::of(a)?;
    let resolved = resolve_profile(a, &workdir)?;
    let mut p = resolved.policy.clone();
    p.argv = a.command.clone();
    ids(a, &mut p)?;
    workdir.apply(&mut p)?;
    filesystem(a, mounts, &mut p)?;
    environment(a, &mut p)?;
    seccomp_and_landlock(a, &mut p)?;
    require(a, &mut p)?;
    limits(a, &mut p.limits)?;
    python_reachable(&resolved, &p, a.python.is_some())?;
    report(a, &mut p)?;
    if a.learn.is_some() {
        super::learn::apply(&mut p)?;
    }
    p.validate()?;
    Ok(p)
}

/// `--workdir HOST[:INNER]`, split and checked.
struct Workdir {
    host: Option<String>,
    inner: Option<PathBuf>,
}

impl Workdir {
    fn of(a: &RunArgs) -> Result<Workdir, PolicyError> {
        let Some((host, inner)) = a.workdir.as_deref().map(split_src_dst) else {
            return Ok(Workdir {
                host: None,
                inner: None,
            });
        };
        let inner = match inner {
            Some(i) => Some(policy::jail_path("--workdir", std::path::Path::new(&i))?),
            None => None,
        };
        Ok(Workdir {
            host: Some(host),
            inner,
        })
    }

    fn apply(&self, p: &mut Policy) -> Result<(), PolicyError> {
        let Some(host) = &self.host else {
            return Ok(());
        };
        let host = policy::host_path("--workdir", std::path::Path::new(host))?;
        policy::host_exists(&host, true).map_err(|e| PolicyError::value("--workdir", e))?;
        p.workdir.host = Some(host);
        if let Some(i) = &self.inner {
            p.workdir.inner = i.clone();
            let home = p.workdir.inner.as_os_str().to_owned();
            policy::set_env(&mut p.env, "HOME".into(), home);
        }
        Ok(())
    }
}

/// The profile `--profile` names (the default without it), resolved with
/// what the flags decide before: the interpreter, the workdir's path.
fn resolve_profile(a: &RunArgs, w: &Workdir) -> Result<profile::Resolved, PolicyError> {
    let opts = profile::Options {
        python: a.python.clone(),
        workdir_inner: w.inner.clone(),
    };
    let spec = a.profile.as_deref().unwrap_or(profile::DEFAULT_PROFILE);
    profile::resolve(spec, "--profile", &opts, &crate::host::python::discover)
}

/// `--uid`, `--gid`, `--host-uid`, `--host-gid`, `--uid-range`.
fn ids(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(u) = a.uid {
        p.uid = u;
    }
    if let Some(g) = a.gid {
        p.gid = g;
    }
    if let Some(u) = a.host_uid {
        p.root_host_uid = u;
    }
    if let Some(g) = a.host_gid {
        p.root_host_gid = g;
    }
    if let Some(r) = &a.uid_range {
        p.fallback_uid_range =
            policy::parse_uid_range(r).map_err(|e| PolicyError::value("--uid-range", e))?;
    }
    Ok(())
}

/// `--tmp-size`, the mount flags in order, `--hostname`, `--chdir`,
/// `--network`, `--allow-host`.
fn filesystem(
    a: &RunArgs,
    mounts: &[(usize, MountFlag, String)],
    p: &mut Policy,
) -> Result<(), PolicyError> {
    if let Some(s) = &a.tmp_size {
        p.tmp_size = match units::parse_size(s) {
            Ok(0) => Err(PolicyError::new(
                "--tmp-size",
                format!("{s:?}: must be greater than 0"),
            )),
            r => r.map_err(|e| PolicyError::value("--tmp-size", e)),
        }?;
    }
    p.mounts.extend(ordered_mounts(mounts)?);
    overlays(a, p)?;
    if let Some(h) = &a.hostname {
        p.hostname = h.clone();
    }
    if let Some(c) = &a.chdir {
        p.chdir = Some(policy::jail_path("--chdir", c)?);
    }
    match a.network {
        Some(NetArg::None) => p.network = Network::None,
        Some(NetArg::Loopback) => p.network = Network::Loopback,
        Some(NetArg::Host) => p.network = Network::Host,
        None => {}
    }
    allow_hosts(a, p)?;
    secrets(a, p)
}

/// `--secret`, `--secret-file`, `--egress-ca`.
fn secrets(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    for s in &a.secret {
        let s =
            policy::egress::Secret::parse(s).map_err(|why| PolicyError::new("--secret", why))?;
        if a.keep_env.contains(&s.name) {
            return Err(PolicyError::new(
                "--secret",
                format!(
                    "{}: also named by --keep-env, which would copy the value into the jail",
                    s.name
                ),
            ));
        }
        p.secrets.push(s);
    }
    for f in &a.secret_file {
        let bad = |why: String| PolicyError::new("--secret-file", why);
        let (name, path) = f
            .split_once('=')
            .ok_or_else(|| bad(format!("{f:?}: expected NAME=PATH")))?;
        let s = p
            .secrets
            .iter_mut()
            .find(|s| s.name == name)
            .ok_or_else(|| bad(format!("{name}: no --secret {name}:HOST names its hosts")))?;
        let path = policy::host_path("--secret-file", std::path::Path::new(path))?;
        policy::host_exists(&path, false).map_err(|e| PolicyError::value("--secret-file", e))?;
        s.file = Some(path);
    }
    for f in &a.secret_body {
        let bad = |why: String| PolicyError::new("--secret-body", why);
        let (name, types) = f
            .split_once('=')
            .ok_or_else(|| bad(format!("{f:?}: expected NAME=TYPE[,TYPE…]")))?;
        let s = p
            .secrets
            .iter_mut()
            .find(|s| s.name == name)
            .ok_or_else(|| bad(format!("{name}: no --secret {name}:HOST names its hosts")))?;
        s.body = policy::egress::Secret::parse_body_types(types).map_err(bad)?;
    }
    for r in &a.allow_http {
        let r = policy::egress::HttpRule::parse(r)
            .map_err(|why| PolicyError::new("--allow-http", why))?;
        p.http_rules.push(r);
    }
    for c in &a.egress_ca {
        let c = policy::host_path("--egress-ca", c)?;
        policy::host_exists(&c, false).map_err(|e| PolicyError::value("--egress-ca", e))?;
        p.egress_cas.push(c);
    }
    Ok(())
}

/// `--overlay-upper`, `--commit`, `--changes-diff` (the overlays
/// themselves are mount flags, in order with the others).
fn overlays(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    let w = &mut p.workspace;
    if let Some(d) = &a.overlay_upper {
        w.keep = Some(policy::workspace::parse_upper(d)?);
    }
    if let Some(when) = a.commit {
        w.commit = match when {
            None | Some(CommitArg::Success) => policy::Commit::Success,
            Some(CommitArg::Always) => policy::Commit::Always,
        };
    }
    if let Some(f) = &a.changes_diff {
        let f = policy::host_path("--changes-diff", f)?;
        let parent = f.parent().unwrap_or(std::path::Path::new("/"));
        policy::host_exists(parent, true).map_err(|e| PolicyError::value("--changes-diff", e))?;
        w.diff = Some(f);
    }
    Ok(())
}

/// `--allow-host`, each on top of the profile's `network.allow`.
fn allow_hosts(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    if a.allow_host.is_empty() {
        return Ok(());
    }
    if p.network == Network::Host {
        return Err(PolicyError::new(
            "--allow-host",
            "needs the jail's own network, not --network host (or a profile's network = \"host\")",
        ));
    }
    if p.network == Network::Loopback {
        return Err(PolicyError::new(
            "--allow-host",
            "holds TCP to the egress proxy alone: not with --network loopback (or a profile's network = \"loopback\")",
        ));
    }
    for h in &a.allow_host {
        let e = policy::egress::AllowHost::parse(h)
            .map_err(|why| PolicyError::new("--allow-host", why))?;
        if !p.allow_hosts.contains(&e) {
            p.allow_hosts.push(e);
        }
    }
    Ok(())
}

/// `--keep-env`, `--setenv`, `--keep-fd`.
fn environment(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    for k in &a.keep_env {
        if let Some(v) = std::env::var_os(k) {
            policy::set_env(&mut p.env, k.into(), v);
        }
    }
    for kv in &a.setenv {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| PolicyError::new("--setenv", format!("{kv:?}: expected NAME=VALUE")))?;
        policy::set_env(&mut p.env, k.into(), v.into());
    }
    for fd in &a.keep_fd {
        if !crate::sys::fd_is_open(*fd) {
            return Err(PolicyError::new(
                "--keep-fd",
                format!("{fd}: not an open file descriptor"),
            ));
        }
    }
    p.keep_fds = a.keep_fd.clone();
    Ok(())
}

/// `--seccomp-action`, `--seccomp-learn`, `--seccomp-allow`,
/// `--no-seccomp`, `--no-landlock`, `--landlock-exclude`.
fn seccomp_and_landlock(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(act) = a.seccomp_action {
        p.seccomp.action = match act {
            SeccompActionArg::Errno => SeccompAction::Errno,
            SeccompActionArg::Kill => SeccompAction::Kill,
        };
    }
    if a.seccomp_learn {
        p.seccomp.action = SeccompAction::Learn;
    }
    for n in &a.seccomp_allow {
        policy::seccomp_name(n).map_err(|e| PolicyError::value("--seccomp-allow", e))?;
        if let Some(g) = n.strip_prefix('@') {
            p.seccomp.groups.push(format!("@{g}"));
        } else {
            p.seccomp.allow.push(n.clone());
        }
    }
    if a.no_seccomp {
        p.seccomp.enabled = false;
    }
    if a.no_landlock {
        p.landlock.disabled = true;
    }
    for x in &a.landlock_exclude {
        p.landlock
            .exclude
            .push(policy::jail_path("--landlock-exclude", x)?);
    }
    deny(a, p)
}

/// `--deny`, `--deny-glob`.
fn deny(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    for d in &a.deny {
        let d = policy::deny_path("--deny", d)?;
        if !p.deny.paths.contains(&d) {
            p.deny.paths.push(d);
        }
    }
    if let Some(n) = &a.deny_max_entries {
        p.deny.max_entries = policy::units::parse_count(n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                PolicyError::new(
                    "--deny-max-entries",
                    format!("{n:?}: not a count greater than 0"),
                )
            })?;
    }
    for g in &a.deny_glob {
        let g = policy::deny_glob("--deny-glob", g)?;
        if !p.deny.globs.contains(&g) {
            p.deny.globs.push(g);
        }
    }
    Ok(())
}

/// `--require LAYER`.
fn require(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    for r in &a.require {
        let l = Layer::parse(r).ok_or_else(|| {
            PolicyError::new(
                "--require",
                format!("{r:?}: unknown layer (userns, landlock, seccomp, cgroup)"),
            )
        })?;
        if !p.require.contains(&l) {
            p.require.push(l);
        }
    }
    Ok(())
}

/// A limit flag's value through `parse`, the error naming the flag.
fn limit<T>(
    flag: &str,
    v: &Option<String>,
    parse: fn(&str) -> Result<T, units::UnitError>,
) -> Result<Option<T>, PolicyError> {
    v.as_deref()
        .map(|s| parse(s).map_err(|e| PolicyError::value(flag, e)))
        .transpose()
}

/// The limit flags: each one given replaces the profile's.
fn limits(a: &RunArgs, l: &mut policy::Limits) -> Result<(), PolicyError> {
    l.memory = limit("--memory", &a.memory, units::parse_limit_size)?.or(l.memory);
    l.memory_high =
        limit("--memory-high", &a.memory_high, units::parse_limit_size)?.or(l.memory_high);
    l.cpus = limit("--cpus", &a.cpus, units::parse_cpus)?.or(l.cpus);
    l.pids = limit("--pids-limit", &a.pids_limit, units::parse_count)?.or(l.pids);
    l.cpu_time = limit("--cpu-time", &a.cpu_time, units::parse_limit_duration)?.or(l.cpu_time);
    l.timeout = limit("--timeout", &a.timeout, units::parse_limit_duration)?.or(l.timeout);
    // A grace of 0 is meaningful: SIGKILL right at the deadline.
    if let Some(g) = limit("--grace", &a.grace, units::parse_duration)? {
        l.grace = g;
    }
    l.max_output = limit("--max-output", &a.max_output, units::parse_limit_size)?.or(l.max_output);
    l.max_file_size =
        limit("--max-file-size", &a.max_file_size, units::parse_limit_size)?.or(l.max_file_size);
    l.max_open_files =
        limit("--max-open-files", &a.max_open_files, units::parse_count)?.or(l.max_open_files);
    Ok(())
}

/// `--capture`, `--report`, `--report-fd`: what the policy keeps of the
/// payload's output, and a report fd that is open and not also kept.
fn report(a: &RunArgs, p: &mut Policy) -> Result<(), PolicyError> {
    p.capture = a.capture;
    p.stdout_in_report = a.report.as_deref() == Some(std::path::Path::new("-"));
    if let Some(fd) = a.report_fd {
        if !crate::sys::fd_is_open(fd) {
            return Err(PolicyError::new(
                "--report-fd",
                format!("{fd}: not an open file descriptor"),
            ));
        }
        if p.keep_fds.contains(&fd) {
            return Err(PolicyError::new(
                "--report-fd",
                format!("{fd}: also given to --keep-fd"),
            ));
        }
    }
    if let Some(fd) = a.denials_fd {
        if fd < 0 || !crate::sys::fd_is_open(fd) {
            return Err(PolicyError::new(
                "--denials-fd",
                format!("{fd}: not an open file descriptor"),
            ));
        }
        if p.keep_fds.contains(&fd) {
            return Err(PolicyError::new(
                "--denials-fd",
                format!("{fd}: also given to --keep-fd"),
            ));
        }
    }
    p.denials_fd = a.denials_fd;
    Ok(())
}

/// The jail runs as an unprivileged host uid: the caller opens the binds
/// (so a private parent such as /root is fine), but what is bound of a
/// discovered interpreter must be readable by the jail's host uid. Say so
/// before the run. `flag`: the interpreter came from `--python`.
pub(super) fn python_reachable(
    r: &profile::Resolved,
    p: &Policy,
    flag: bool,
) -> Result<(), PolicyError> {
    let Some(i) = &r.python else {
        return Ok(());
    };
    let (ou, og) = if crate::sys::geteuid() == 0 {
        (p.root_host_uid, p.root_host_gid)
    } else {
        (crate::sys::geteuid(), crate::sys::getegid())
    };
    let name = if flag { "--python" } else { "python" };
    if let Some(why) = crate::host::python::jail_cannot_run(i, r.system_root, ou, og) {
        return Err(PolicyError::new(name, why));
    }
    for m in policy::python::mounts(i, r.system_root) {
        if let MountSpec::Bind { src, .. } = &m {
            if let Some(why) = crate::host::python::not_readable_by(src, ou, og) {
                return Err(PolicyError::new(
                    name,
                    format!(
                        "{}: the jail (host uid {ou}) cannot reach the interpreter's {}: {why}",
                        i.executable.display(),
                        src.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `--learn FILE`: the base profile (as `--profile` names it, without the
/// flags) and FILE's temporary file beside it.
fn learning(a: &RunArgs, file: &std::path::Path) -> Result<super::learn::Learning, String> {
    let w = Workdir::of(a).map_err(|e| e.to_string())?;
    let base = resolve_profile(a, &w).map_err(|e| e.to_string())?;
    let mut policy = base.policy;
    w.apply(&mut policy).map_err(|e| e.to_string())?;
    let spec = a.profile.as_deref().unwrap_or(profile::DEFAULT_PROFILE);
    super::learn::Learning::prepare(file, spec, policy)
}

/// `stockade run`: build the policy, run it, write the report; the exit code.
pub(super) fn run_cmd(a: &RunArgs, mounts: &[(usize, MountFlag, String)]) -> i32 {
    let policy = match run_policy(a, mounts) {
        Ok(p) => p,
        Err(e) => return refuse(&ReportTo::of(a), &e.to_string()),
    };
    // Open the report's destinations before running: a bad path is bad input.
    let report = match ReportTo::of(a).open() {
        Ok(r) => r,
        Err(e) => {
            eprint_line(&e.to_string());
            return 125;
        }
    };
    // `--learn FILE`: writable, before the run.
    let learning = match &a.learn {
        Some(f) => match learning(a, f) {
            Ok(l) => Some(l),
            Err(e) => {
                eprint_line(&e);
                return 125;
            }
        },
        None => None,
    };
    let run = learning.as_ref().map(|_| policy.clone());
    // The library's own door: in this process, which is single-threaded.
    let jail = crate::Jail::new(policy);
    let o = match jail.run_here() {
        Ok(o) => o,
        Err(e) => return refuse(&ReportTo::of(a), &e.to_string()),
    };
    if let Some(err) = &o.error {
        eprint_line(err);
    }
    // With --learn, the summary line says it instead.
    if let Some(learned) = o.seccomp_learned.as_ref().filter(|_| learning.is_none()) {
        eprint_line(&format!(
            "seccomp-learn: syscalls outside the allowlist: {}",
            if learned.is_empty() {
                "(none)".to_string()
            } else {
                learned.join(", ")
            }
        ));
    }
    // Learned only from a command that ran: else the error line above
    // says why, and dropping `l` removes the temporary file.
    if let (Some(l), Some(run)) = (learning, &run) {
        if o.status != Status::SetupError {
            match l.commit(run, &o) {
                Ok(line) => eprint_line(&line),
                Err(e) => {
                    eprint_line(&e);
                    return 125;
                }
            }
        }
    }
    // Serialized only when some report is asked for: the run is over, but
    // the caller still waits for this process to exit.
    if report.wanted() {
        if let Err(e) = report.write(&(o.to_json() + "\n")) {
            eprint_line(&e.to_string());
            return 125;
        }
    }
    if o.status == Status::SetupError && o.exit_code != 126 && o.exit_code != 127 {
        return 125;
    }
    o.exit_code
}

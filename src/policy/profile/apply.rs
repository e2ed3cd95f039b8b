//! One parsed profile file applied onto the policy built so far.

use toml::Spanned;

use super::context::Ctx;
use super::schema::{
    expected, value_of, Raw, RawEnv, RawFs, RawLandlock, RawLimits, RawNamespaces, RawNetwork,
    RawSeccomp, RawWorkdir, Scalar, NETWORKS, S, SECCOMP_ACTIONS,
};
use crate::policy::{Layer, MountSpec, Network, PathError, Policy, PolicyError};

fn bind_string(
    cx: &Ctx,
    v: &S<String>,
    field: &str,
    writable: bool,
) -> Result<MountSpec, PolicyError> {
    let s = cx.expand(v, field)?;
    let (src, dst) = match s.find(":/") {
        Some(i) => (s[..i].to_string(), Some(s[i + 1..].to_string())),
        None => (s.clone(), None),
    };
    let src_v = Spanned::new(v.span(), src);
    // Already expanded: escape `$` so it is not expanded twice.
    let src_v = Spanned::new(src_v.span(), src_v.get_ref().replace('$', "$$"));
    let src = cx.host_path(&src_v, field)?;
    crate::policy::host_exists(&src, false).map_err(|e| cx.err(v.span(), field, e))?;
    let dst = match dst {
        Some(d) => cx.jail_path(&Spanned::new(v.span(), d.replace('$', "$$")), field)?,
        None => crate::policy::check_jail_path(&src).map_err(|e| cx.err(v.span(), field, e))?,
    };
    Ok(MountSpec::Bind {
        src,
        dst,
        writable,
        optional: false,
    })
}

/// One file's fields onto `p`, section by section; the mounts it asks for
/// onto `mounts`, its `filesystem.system` into `system_root`.
pub(super) fn apply(
    cx: &Ctx,
    raw: &Raw,
    p: &mut Policy,
    mounts: &mut Vec<MountSpec>,
    system_root: &mut bool,
) -> Result<(), PolicyError> {
    ids(cx, raw, p)?;
    names(cx, raw, p)?;
    require(cx, raw, p)?;
    if let Some(w) = &raw.workdir {
        workdir(cx, w, p)?;
    }
    if let Some(fs) = &raw.filesystem {
        if let Some(v) = &fs.system {
            *system_root = *v.get_ref();
        }
        binds(cx, fs, mounts)?;
        other_mounts(cx, fs, mounts)?;
        deny(cx, fs, p)?;
    }
    if let Some(env) = &raw.environment {
        environment(cx, env, p)?;
    }
    if let Some(l) = &raw.limits {
        limits(cx, l, p)?;
    }
    if let Some(s) = &raw.seccomp {
        seccomp(cx, s, p)?;
    }
    if let Some(l) = &raw.landlock {
        landlock(cx, l, p)?;
    }
    if let Some(ns) = &raw.namespaces {
        namespaces(cx, ns, raw, p)?;
    }
    Ok(())
}

/// `uid`, `gid`, `host_uid`, `host_gid`.
fn ids(cx: &Ctx, raw: &Raw, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(v) = &raw.uid {
        p.uid = *v.get_ref();
    }
    if let Some(v) = &raw.gid {
        p.gid = *v.get_ref();
    }
    if let Some(v) = &raw.host_uid {
        if *v.get_ref() == 0 {
            return Err(cx.err(v.span(), "host_uid", "0 would map the jail to host root"));
        }
        p.root_host_uid = *v.get_ref();
    }
    if let Some(v) = &raw.host_gid {
        if *v.get_ref() == 0 {
            return Err(cx.err(v.span(), "host_gid", "0 would map the jail to host root"));
        }
        p.root_host_gid = *v.get_ref();
    }
    Ok(())
}

/// `hostname`, `network`, `chdir`.
fn names(cx: &Ctx, raw: &Raw, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(v) = &raw.hostname {
        let h = cx.expand(v, "hostname")?;
        if h.is_empty() || h.len() > 64 {
            return Err(cx.err(
                v.span(),
                "hostname",
                format!("{h:?}: must be 1 to 64 bytes"),
            ));
        }
        p.hostname = h;
    }
    if let Some(v) = &raw.network {
        network(cx, v, p)?;
    }
    if let Some(v) = &raw.chdir {
        p.chdir = Some(cx.jail_path(v, "chdir")?);
    }
    Ok(())
}

/// `network = "MODE"`, or `[network]` with `mode` and `allow` (the
/// egress allowlist, added to what the profiles it extends allow).
fn network(cx: &Ctx, v: &S<RawNetwork>, p: &mut Policy) -> Result<(), PolicyError> {
    let (mode, span, field) = match v.get_ref() {
        RawNetwork::Mode(m) => (Some(m.as_str()), v.span(), "network"),
        RawNetwork::Table(t) => match &t.mode {
            Some(m) => (Some(m.get_ref().as_str()), m.span(), "network.mode"),
            None => (None, v.span(), "network"),
        },
    };
    if let Some(o) = mode {
        p.network = value_of(NETWORKS, o).ok_or_else(|| {
            cx.err(
                span.clone(),
                field,
                format!("{o:?}: expected {}", expected(NETWORKS)),
            )
        })?;
    }
    let RawNetwork::Table(t) = v.get_ref() else {
        return Ok(());
    };
    for h in t.allow.iter().flatten() {
        let e = crate::policy::egress::AllowHost::parse(&cx.expand(h, "network.allow")?)
            .map_err(|why| cx.err(h.span(), "network.allow", why))?;
        if !p.allow_hosts.contains(&e) {
            p.allow_hosts.push(e);
        }
    }
    if !p.allow_hosts.is_empty() && p.network == Network::Host {
        return Err(cx.err(
            span,
            field,
            "an egress allowlist (network.allow) needs the jail's own network, not \"host\"",
        ));
    }
    if !p.allow_hosts.is_empty() && p.network == Network::Loopback {
        return Err(cx.err(
            span,
            field,
            "an egress allowlist (network.allow) holds TCP to its proxy alone: not with \"loopback\"",
        ));
    }
    Ok(())
}

/// `require`.
fn require(cx: &Ctx, raw: &Raw, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(r) = &raw.require {
        for v in r {
            let l = Layer::parse(v.get_ref()).ok_or_else(|| {
                cx.err(
                    v.span(),
                    "require",
                    format!(
                        "{:?}: unknown layer (userns, landlock, seccomp, cgroup)",
                        v.get_ref()
                    ),
                )
            })?;
            if !p.require.contains(&l) {
                p.require.push(l);
            }
        }
    }
    Ok(())
}

/// `[workdir]`.
fn workdir(cx: &Ctx, w: &RawWorkdir, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(h) = &w.host {
        let host = cx.host_path(h, "workdir.host")?;
        crate::policy::host_exists(&host, true).map_err(|e| cx.err(h.span(), "workdir.host", e))?;
        p.workdir.host = Some(host);
    }
    if let Some(s) = &w.size {
        p.workdir.size = cx.size(s, "workdir.size")?;
        if p.workdir.size == 0 {
            return Err(cx.err(s.span(), "workdir.size", "must be greater than 0"));
        }
    }
    Ok(())
}

/// `filesystem.ro`, `filesystem.rw`, `[[filesystem.bind]]`.
fn binds(cx: &Ctx, fs: &RawFs, mounts: &mut Vec<MountSpec>) -> Result<(), PolicyError> {
    for v in fs.ro.iter().flatten() {
        mounts.push(bind_string(cx, v, "filesystem.ro", false)?);
    }
    for v in fs.rw.iter().flatten() {
        mounts.push(bind_string(cx, v, "filesystem.rw", true)?);
    }
    for b in fs.bind.iter().flatten() {
        let src = cx.host_path(&b.src, "filesystem.bind.src")?;
        let optional = b.optional.as_ref().map(|w| *w.get_ref()).unwrap_or(false);
        if !optional {
            crate::policy::host_exists(&src, false)
                .map_err(|e| cx.err(b.src.span(), "filesystem.bind.src", e))?;
        }
        let dst = match &b.dst {
            Some(d) => cx.jail_path(d, "filesystem.bind.dst")?,
            None => crate::policy::check_jail_path(&src)
                .map_err(|e| cx.err(b.src.span(), "filesystem.bind.src", e))?,
        };
        mounts.push(MountSpec::Bind {
            src,
            dst,
            writable: b.writable.as_ref().map(|w| *w.get_ref()).unwrap_or(false),
            optional,
        });
    }
    Ok(())
}

/// `filesystem.tmpfs`, `.symlink`, `.file`, `.dir`.
fn other_mounts(cx: &Ctx, fs: &RawFs, mounts: &mut Vec<MountSpec>) -> Result<(), PolicyError> {
    for t in fs.tmpfs.iter().flatten() {
        let size = match &t.size {
            Some(s) => cx.size(s, "filesystem.tmpfs.size")?,
            None => 64 << 20,
        };
        if size == 0 {
            let span = t.size.as_ref().map(|s| s.span()).unwrap_or(t.path.span());
            return Err(cx.err(span, "filesystem.tmpfs.size", "must be greater than 0"));
        }
        mounts.push(MountSpec::Tmpfs {
            dst: cx.jail_path(&t.path, "filesystem.tmpfs.path")?,
            size,
            mode: cx.mode(&t.mode, "filesystem.tmpfs.mode", 0o1777)?,
        });
    }
    for s in fs.symlink.iter().flatten() {
        let target = cx.expand(&s.target, "filesystem.symlink.target")?;
        if target.is_empty() {
            return Err(cx.err(s.target.span(), "filesystem.symlink.target", "empty target"));
        }
        mounts.push(MountSpec::Symlink {
            target: target.into(),
            link: cx.jail_path(&s.link, "filesystem.symlink.link")?,
        });
    }
    for f in fs.file.iter().flatten() {
        mounts.push(MountSpec::File {
            dst: cx.jail_path(&f.path, "filesystem.file.path")?,
            content: f.content.get_ref().clone().into_bytes(),
            mode: cx.mode(&f.mode, "filesystem.file.mode", 0o644)?,
        });
    }
    for d in fs.dir.iter().flatten() {
        mounts.push(MountSpec::Dir {
            dst: cx.jail_path(d, "filesystem.dir")?,
            mode: crate::policy::DIR_MODE,
        });
    }
    Ok(())
}

/// `filesystem.deny`: host paths (`~` is the caller's home, a relative
/// path the profile's directory's) and globs (an entry with `*`, `?` or
/// `[`). A path that does not exist is passed over: a profile is shared
/// by users and machines, and there is nothing to hide.
fn deny(cx: &Ctx, fs: &RawFs, p: &mut Policy) -> Result<(), PolicyError> {
    const FIELD: &str = "filesystem.deny";
    for v in fs.deny.iter().flatten() {
        let s = cx.expand(v, FIELD)?;
        let at = |e: PolicyError| cx.err(v.span(), FIELD, e.reason().clone());
        if s.contains(['*', '?', '[']) {
            let g = crate::policy::deny_glob(FIELD, &s).map_err(at)?;
            if !p.deny.globs.contains(&g) {
                p.deny.globs.push(g);
            }
            continue;
        }
        let d = if s == "~" || s.starts_with("~/") {
            crate::policy::deny_home(FIELD, std::path::Path::new(&s)).map_err(at)?
        } else {
            cx.host_path(v, FIELD)?
        };
        match crate::policy::host_exists(&d, false) {
            Ok(()) => {}
            Err(PathError::Missing { .. }) => continue,
            Err(e) => return Err(cx.err(v.span(), FIELD, e)),
        }
        if !p.deny.paths.contains(&d) {
            p.deny.paths.push(d);
        }
    }
    Ok(())
}

/// `[environment]`: `clear`, then `keep`, then `set`.
fn environment(cx: &Ctx, env: &RawEnv, p: &mut Policy) -> Result<(), PolicyError> {
    if env.clear.as_ref().map(|c| *c.get_ref()) == Some(true) {
        let home = p.workdir.inner.as_os_str().to_owned();
        p.env.clear();
        p.env
            .push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
        p.env.push(("HOME".into(), home));
    }
    for k in env.keep.iter().flatten() {
        check_env_name(cx, k.span(), "environment.keep", k.get_ref())?;
        if let Some(v) = std::env::var_os(k.get_ref()) {
            crate::policy::set_env(&mut p.env, k.get_ref().into(), v);
        }
    }
    for (k, v) in env.set.iter().flatten() {
        let field = format!("environment.set.{k}");
        check_env_name(cx, v.span(), &field, k)?;
        let val = cx.expand(v, &field)?;
        if val.contains('\0') {
            return Err(cx.err(v.span(), &field, "contains a NUL byte"));
        }
        crate::policy::set_env(&mut p.env, k.into(), val.into());
    }
    Ok(())
}

/// `[limits]`.
fn limits(cx: &Ctx, l: &RawLimits, p: &mut Policy) -> Result<(), PolicyError> {
    let lim = &mut p.limits;
    if let Some(v) = &l.memory {
        lim.memory = Some(cx.limit_size(v, "limits.memory")?);
    }
    if let Some(v) = &l.memory_high {
        lim.memory_high = Some(cx.limit_size(v, "limits.memory_high")?);
    }
    if let Some(v) = &l.cpus {
        lim.cpus = Some(cpus(cx, v)?);
    }
    if let Some(v) = &l.pids {
        lim.pids = Some(cx.count(v, "limits.pids")?);
    }
    if let Some(v) = &l.cpu_time {
        lim.cpu_time = Some(cx.limit_duration(v, "limits.cpu_time")?);
    }
    if let Some(v) = &l.timeout {
        lim.timeout = Some(cx.limit_duration(v, "limits.timeout")?);
    }
    if let Some(v) = &l.grace {
        lim.grace = cx.duration(v, "limits.grace")?;
    }
    if let Some(v) = &l.max_output {
        lim.max_output = Some(cx.limit_size(v, "limits.max_output")?);
    }
    if let Some(v) = &l.max_file_size {
        lim.max_file_size = Some(cx.limit_size(v, "limits.max_file_size")?);
    }
    if let Some(v) = &l.max_open_files {
        lim.max_open_files = Some(cx.count(v, "limits.max_open_files")?);
    }
    if let Some(v) = &l.tmp_size {
        p.tmp_size = cx.size(v, "limits.tmp_size")?;
        if p.tmp_size == 0 {
            return Err(cx.err(
                v.span(),
                "limits.tmp_size",
                format!("{}: must be greater than 0", v.get_ref().shown()),
            ));
        }
    }
    Ok(())
}

/// `limits.cpus`: a number of CPUs above 0, at most 4096.
fn cpus(cx: &Ctx, v: &S<Scalar>) -> Result<f64, PolicyError> {
    let c = match v.get_ref() {
        Scalar::Int(i) => *i as f64,
        Scalar::Float(f) => *f,
        Scalar::Str(s) => s.parse().unwrap_or(f64::NAN),
    };
    if !(c.is_finite() && c > 0.0 && c <= 4096.0) {
        return Err(cx.err(
            v.span(),
            "limits.cpus",
            format!(
                "{} is not a number of CPUs above 0 (examples: 0.5, 1, 2)",
                v.get_ref().shown()
            ),
        ));
    }
    Ok(c)
}

/// `[seccomp]`.
fn seccomp(cx: &Ctx, s: &RawSeccomp, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(v) = &s.enabled {
        p.seccomp.enabled = *v.get_ref();
    }
    if let Some(g) = &s.groups {
        seccomp_groups(cx, g, p)?;
    }
    seccomp_allow(cx, s.allow.iter().flatten(), p)?;
    if let Some(v) = &s.action {
        let o = v.get_ref();
        p.seccomp.action = value_of(SECCOMP_ACTIONS, o).ok_or_else(|| {
            cx.err(
                v.span(),
                "seccomp.action",
                format!("{o:?}: expected {}", expected(SECCOMP_ACTIONS)),
            )
        })?;
    }
    Ok(())
}

/// `seccomp.groups`: replaces the groups so far.
fn seccomp_groups(cx: &Ctx, g: &[S<String>], p: &mut Policy) -> Result<(), PolicyError> {
    p.seccomp.groups.clear();
    for v in g {
        let name = v.get_ref();
        if !name.starts_with('@') || name.len() < 2 {
            return Err(cx.err(
                v.span(),
                "seccomp.groups",
                format!("{name:?}: a group name starts with @ (e.g. \"@default\")"),
            ));
        }
        crate::policy::seccomp_name(name).map_err(|e| cx.err(v.span(), "seccomp.groups", e))?;
        if !p.seccomp.groups.contains(name) {
            p.seccomp.groups.push(name.clone());
        }
    }
    Ok(())
}

/// `seccomp.allow`: added to the syscalls so far.
fn seccomp_allow<'a>(
    cx: &Ctx,
    allow: impl Iterator<Item = &'a S<String>>,
    p: &mut Policy,
) -> Result<(), PolicyError> {
    for v in allow {
        let name = v.get_ref();
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            return Err(cx.err(
                v.span(),
                "seccomp.allow",
                format!("{name:?}: not a syscall name (lower-case, e.g. \"ptrace\")"),
            ));
        }
        crate::policy::seccomp_name(name).map_err(|e| cx.err(v.span(), "seccomp.allow", e))?;
        if !p.seccomp.allow.contains(name) {
            p.seccomp.allow.push(name.clone());
        }
    }
    Ok(())
}

/// `[landlock]`.
fn landlock(cx: &Ctx, l: &RawLandlock, p: &mut Policy) -> Result<(), PolicyError> {
    if let Some(v) = &l.enabled {
        p.landlock.disabled = !*v.get_ref();
    }
    for v in l.exclude.iter().flatten() {
        let x = cx.jail_path(v, "landlock.exclude")?;
        if !p.landlock.exclude.contains(&x) {
            p.landlock.exclude.push(x);
        }
    }
    Ok(())
}

/// `[namespaces]`: every one but `net` is always new; `net` agrees with
/// `network` when both are given.
fn namespaces(cx: &Ctx, ns: &RawNamespaces, raw: &Raw, p: &mut Policy) -> Result<(), PolicyError> {
    for (v, name) in [
        (&ns.user, "user"),
        (&ns.mount, "mount"),
        (&ns.pid, "pid"),
        (&ns.ipc, "ipc"),
        (&ns.uts, "uts"),
        (&ns.cgroup, "cgroup"),
    ] {
        if let Some(v) = v {
            if !*v.get_ref() {
                return Err(cx.err(
                    v.span(),
                    &format!("namespaces.{name}"),
                    format!("stockade always creates a new {name} namespace; only `net` can be shared with the host"),
                ));
            }
        }
    }
    if let Some(v) = &ns.net {
        // `loopback` has a namespace of its own too.
        let want = match (*v.get_ref(), p.network) {
            (true, Network::Loopback) => Network::Loopback,
            (true, _) => Network::None,
            (false, _) => Network::Host,
        };
        if let Some(n) = raw.network.as_ref().and_then(|n| n.get_ref().mode()) {
            if p.network != want {
                return Err(cx.err(
                    v.span(),
                    "namespaces.net",
                    format!("contradicts network = {n:?}"),
                ));
            }
        }
        p.network = want;
    }
    Ok(())
}

fn check_env_name(
    cx: &Ctx,
    span: std::ops::Range<usize>,
    field: &str,
    k: &str,
) -> Result<(), PolicyError> {
    if k.is_empty() || k.contains('=') || k.contains('\0') {
        return Err(cx.err(span, field, format!("{k:?}: not a valid variable name")));
    }
    Ok(())
}

//! `stockade profile show`: a resolved profile, in words.

use std::fmt::Write;

use super::source::io_text;
use super::Resolved;
use crate::policy::{MountSpec, SeccompAction};

/// A human-readable, fully resolved description of `r` (`stockade profile
/// show`): the binds with their real host paths, the syscall list, the
/// limits.
pub fn show(r: &Resolved) -> String {
    let mut o = String::new();
    header(&mut o, r);
    filesystem(&mut o, r);
    environment(&mut o, r);
    seccomp(&mut o, r);
    landlock(&mut o, r);
    deny(&mut o, r);
    limits(&mut o, r);
    require(&mut o, r);
    o
}

/// The chain, the description, the interpreter, ids, network, workdir.
fn header(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let _ = writeln!(o, "# profile: {}", r.chain.join(" <- "));
    if let Some(d) = &r.description {
        let _ = writeln!(o, "# {d}");
    }
    if let Some(i) = &r.python {
        let _ = writeln!(
            o,
            "python: {} (Python {}, prefix {}, base prefix {}{})",
            i.executable.display(),
            i.version,
            i.prefix.display(),
            i.base_prefix.display(),
            if i.is_venv() { ", venv" } else { "" }
        );
    }
    let _ = writeln!(
        o,
        "uid: {}  gid: {}  hostname: {}",
        p.uid, p.gid, p.hostname
    );
    let _ = writeln!(o, "network: {}", p.network.as_str());
    if !p.allow_hosts.is_empty() {
        let hosts: Vec<String> = p.allow_hosts.iter().map(|h| h.to_string()).collect();
        let _ = writeln!(o, "network allow (through the proxy): {}", hosts.join(", "));
    }
    let _ = writeln!(
        o,
        "workdir: {} ({})",
        p.workdir.inner.display(),
        match &p.workdir.host {
            Some(h) => format!("bind of {}", h.display()),
            None => format!("tmpfs, {}", human_size(p.workdir.size)),
        }
    );
}

/// Every mount in order, binds with their real host paths, then the workdir.
fn filesystem(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let _ = writeln!(o, "filesystem:");
    let mut all = Vec::new();
    if r.system_root {
        all.extend(crate::policy::default_mounts(
            p.uid,
            p.gid,
            &p.hostname,
            &p.workdir.inner,
            p.tmp_size,
        ));
    } else {
        all.extend(
            crate::policy::default_mounts(p.uid, p.gid, &p.hostname, &p.workdir.inner, p.tmp_size)
                .into_iter()
                .filter(|m| !matches!(m, MountSpec::Bind { .. } | MountSpec::Symlink { .. })),
        );
    }
    all.extend(p.mounts.iter().cloned());
    for m in &all {
        if let Some(line) = mount_line(m) {
            let _ = writeln!(o, "{line}");
        }
    }
    let _ = writeln!(
        o,
        "  rw {:<32} <- {}",
        p.workdir.inner.display(),
        p.workdir
            .host
            .as_ref()
            .map(|h| h.display().to_string())
            .unwrap_or_else(|| "tmpfs".into())
    );
}

/// One mount's line; `None` for an optional bind whose source is missing.
fn mount_line(m: &MountSpec) -> Option<String> {
    Some(match m {
        MountSpec::Bind {
            src,
            dst,
            writable,
            optional,
        } => {
            let real = std::fs::canonicalize(src);
            let shown = match &real {
                Ok(r) => r.display().to_string(),
                Err(_) if *optional => return None,
                Err(e) => format!("{} (missing: {})", src.display(), io_text(e)),
            };
            format!(
                "  {} {:<32} <- {}",
                if *writable { "rw" } else { "ro" },
                dst.display(),
                shown
            )
        }
        MountSpec::Tmpfs { dst, size, mode } => {
            format!(
                "  tmpfs {:<29} size {} mode {mode:o}",
                dst.display(),
                human_size(*size)
            )
        }
        MountSpec::Symlink { target, link } => {
            format!("  link {:<30} -> {}", link.display(), target.display())
        }
        MountSpec::File { dst, content, mode } => format!(
            "  file {:<30} {} bytes mode {mode:o}",
            dst.display(),
            content.len()
        ),
        MountSpec::Data {
            dst,
            content,
            mode,
            writable,
        } => format!(
            "  data {:<30} {} bytes mode {mode:o}{}",
            dst.display(),
            content.len(),
            if *writable { "" } else { " ro" }
        ),
        MountSpec::Dir { dst, mode } if *mode == crate::policy::DIR_MODE => {
            format!("  dir  {}", dst.display())
        }
        MountSpec::Dir { dst, mode } => format!("  dir  {} mode {mode:o}", dst.display()),
        MountSpec::DevBind { src, dst, .. } => {
            format!("  dev-bind  {} -> {}", src.display(), dst.display())
        }
        MountSpec::RemountRo { dst } => format!("  remount-ro  {}", dst.display()),
        MountSpec::Mqueue { dst } => format!("  mqueue {}", dst.display()),
        MountSpec::Overlay { dst, .. } => format!("  overlay {}", dst.display()),
        MountSpec::Workspace { src, dst } => {
            format!("  cow  {:<31} <- {}", dst.display(), src.display())
        }
        MountSpec::Chmod { dst, mode } => format!("  chmod  {} {mode:o}", dst.display()),
        MountSpec::Proc { dst } => format!("  proc {}", dst.display()),
        MountSpec::Dev { dst } => format!("  dev  {}", dst.display()),
    })
}

/// The payload's environment.
fn environment(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let _ = writeln!(o, "environment:");
    for (k, v) in &p.env {
        let _ = writeln!(o, "  {}={}", k.to_string_lossy(), v.to_string_lossy());
    }
}

/// The seccomp action, groups, extra syscalls and how many are allowed.
fn seccomp(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let _ = writeln!(o, "seccomp:");
    if p.seccomp.enabled {
        let _ = writeln!(
            o,
            "  action: {}",
            match p.seccomp.action {
                SeccompAction::Errno => "errno (EPERM)",
                SeccompAction::Kill => "kill",
                SeccompAction::Learn => "learn",
            }
        );
        let _ = writeln!(o, "  groups: {}", p.seccomp.groups.join(" "));
        if !p.seccomp.allow.is_empty() {
            let _ = writeln!(o, "  allow: {}", p.seccomp.allow.join(" "));
        }
        match crate::seccomp::compile(&p.seccomp) {
            Ok(c) => {
                let _ = writeln!(o, "  syscalls allowed: {}", c.allowed);
            }
            Err(e) => {
                let _ = writeln!(o, "  error: {e}");
            }
        }
    } else {
        let _ = writeln!(o, "  disabled");
    }
}

/// Landlock, and what it leaves out.
fn landlock(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let _ = writeln!(
        o,
        "landlock: {}",
        if p.landlock.disabled {
            "disabled".to_string()
        } else if p.landlock.exclude.is_empty() {
            "rules from the filesystem above".to_string()
        } else {
            format!(
                "rules from the filesystem above, excluding {}",
                p.landlock
                    .exclude
                    .iter()
                    .map(|x| x.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
    );
}

/// The denied paths and globs, when there are any.
fn deny(o: &mut String, r: &Resolved) {
    let d = &r.policy.deny;
    if d.paths.is_empty() && d.globs.is_empty() {
        return;
    }
    let _ = writeln!(o, "denied inside the binds:");
    for p in &d.paths {
        let _ = writeln!(o, "  {}", p.display());
    }
    for g in &d.globs {
        let _ = writeln!(o, "  {g} (glob)");
    }
}

/// Every limit (`none` where there is none).
fn limits(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let l = &p.limits;
    let sz = |v: Option<u64>| v.map(human_size).unwrap_or_else(|| "none".into());
    let du = |v: Option<std::time::Duration>| {
        v.map(|d| format!("{}s", d.as_secs_f64()))
            .unwrap_or_else(|| "none".into())
    };
    let _ = writeln!(o, "limits:");
    let _ = writeln!(
        o,
        "  memory: {}  memory_high: {}",
        sz(l.memory),
        sz(l.memory_high)
    );
    let _ = writeln!(
        o,
        "  cpus: {}  pids: {}",
        l.cpus
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into()),
        l.pids
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into())
    );
    let _ = writeln!(
        o,
        "  cpu_time: {}  timeout: {}  grace: {}s",
        du(l.cpu_time),
        du(l.timeout),
        l.grace.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "  max_output: {}  max_file_size: {}  max_open_files: {}  tmp_size: {}",
        sz(l.max_output),
        sz(l.max_file_size),
        l.max_open_files
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into()),
        human_size(p.tmp_size)
    );
}

/// The layers required.
fn require(o: &mut String, r: &Resolved) {
    let p = &r.policy;
    let _ = writeln!(
        o,
        "require: {}",
        if p.require.is_empty() {
            "(none)".to_string()
        } else {
            p.require
                .iter()
                .map(|l| l.name())
                .collect::<Vec<_>>()
                .join(" ")
        }
    );
}

fn human_size(n: u64) -> String {
    for (unit, shift) in [("g", 30), ("m", 20), ("k", 10)] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

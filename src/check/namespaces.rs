//! Can this host give a jail its namespaces and a fresh /proc? Tried with
//! a child in new user, mount and pid namespaces; when it cannot, the
//! facts (sysctls, seccomp, a container) that say why.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use super::{read, status_field, Probe, ProbeError};
use crate::sys::{self, Errno, SysError};

/// Mount points strictly below /proc (what a container runtime masks).
fn proc_overmounts() -> Vec<String> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for l in mi.lines() {
        if let Some(mp) = l.split(' ').nth(4) {
            let mp = mp.replace("\\040", " ");
            if mp.starts_with("/proc/") && !out.contains(&mp) {
                out.push(mp);
            }
        }
    }
    out
}

fn in_container() -> Option<String> {
    if Path::new("/.dockerenv").exists() {
        return Some("/.dockerenv exists".into());
    }
    if Path::new("/run/.containerenv").exists() {
        return Some("/run/.containerenv exists".into());
    }
    if let Ok(c) = std::env::var("container") {
        return Some(format!("$container = {c}"));
    }
    let cg = read("/proc/1/cgroup").unwrap_or_default();
    for k in ["docker", "kubepods", "containerd", "lxc", "libpod"] {
        if cg.contains(k) {
            return Some(format!("/proc/1/cgroup mentions {k}"));
        }
    }
    None
}

/// Facts about this process that explain a refused user namespace.
fn process_facts(f: &mut BTreeMap<&'static str, String>) {
    for (k, p) in [
        (
            "user.max_user_namespaces",
            "/proc/sys/user/max_user_namespaces",
        ),
        (
            "kernel.apparmor_restrict_unprivileged_userns",
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        ),
        (
            "kernel.unprivileged_userns_clone",
            "/proc/sys/kernel/unprivileged_userns_clone",
        ),
    ] {
        if let Some(v) = read(p) {
            f.insert(k, v);
        }
    }
    if let Some(v) = status_field("NoNewPrivs") {
        f.insert("no_new_privs", v);
    }
    if let Some(v) = status_field("Seccomp") {
        f.insert("seccomp_mode", v);
    }
    if let Some(v) = status_field("Seccomp_filters") {
        f.insert("seccomp_filters", v);
    }
    if let Some(c) = in_container() {
        f.insert("container", c);
    }
    f.insert("euid", sys::geteuid().to_string());
}

/// Why creating a user namespace failed with `err`, from the facts.
fn userns_reason(err: &ProbeError, f: &BTreeMap<&'static str, String>) -> String {
    let unpriv = sys::geteuid() != 0;
    let mut why = Vec::new();
    if f.get("user.max_user_namespaces")
        .map(|v| v == "0")
        .unwrap_or(false)
    {
        why.push("user.max_user_namespaces is 0 (sysctl user.max_user_namespaces)".to_string());
    }
    if unpriv
        && f.get("kernel.apparmor_restrict_unprivileged_userns")
            .map(|v| v == "1")
            .unwrap_or(false)
    {
        why.push(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns = 1)"
                .to_string(),
        );
    }
    if unpriv
        && f.get("kernel.unprivileged_userns_clone")
            .map(|v| v == "0")
            .unwrap_or(false)
    {
        why.push("kernel.unprivileged_userns_clone = 0".to_string());
    }
    if f.get("seccomp_mode").map(|v| v == "2").unwrap_or(false) {
        why.push(format!(
            "a seccomp filter is installed on this process ({} filter(s); a container \
             runtime's default profile refuses namespace creation)",
            f.get("seccomp_filters").map(String::as_str).unwrap_or("?")
        ));
    }
    if let Some(c) = f.get("container") {
        why.push(format!("running inside a container ({c})"));
    }
    if why.is_empty() {
        err.to_string()
    } else {
        format!("{err}: {}", why.join("; "))
    }
}

/// Try what the jail does: clone into new user, mount and pid namespaces,
/// map our ids, and mount a fresh /proc. Returns the (userns, proc)
/// results.
fn try_namespaces() -> (Result<(), ProbeError>, Result<(), ProbeError>) {
    let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID) as u64;
    let (go_r, go_w) = match sys::pipe() {
        Ok(p) => p,
        Err(e) => return (Err(e.into()), Err(ProbeError::NotTried)),
    };
    let (res_r, res_w) = match sys::pipe() {
        Ok(p) => p,
        Err(e) => return (Err(e.into()), Err(ProbeError::NotTried)),
    };
    match sys::clone_jail(flags, None) {
        Err(e) => (Err(e.into()), Err(ProbeError::NeedsUserns)),
        Ok((sys::Cloned::Child, _)) => in_probe_child(&go_r, &res_w),
        Ok((sys::Cloned::Parent { pid, pidfd: _ }, _)) => {
            drop(res_w);
            map_and_wait(pid, go_w, &res_r)
        }
    }
}

/// The probe child: once told to go (`g` on `go`), make `/` private and
/// mount a fresh /proc; answer `ok` or `err <errno> <path>` on `res`.
fn in_probe_child(go: &OwnedFd, res: &OwnedFd) -> ! {
    let mut b = [0u8; 1];
    let _ = sys::read(go.as_raw_fd(), &mut b);
    let msg = if b[0] != b'g' {
        "skip".to_string()
    } else {
        match sys::mount(
            None,
            Path::new("/"),
            None,
            libc::MS_REC | libc::MS_PRIVATE,
            None,
        ) {
            Err(e) => format!("err {} {}", e.errno as i32, e.arg),
            Ok(()) => match sys::mount(
                Some("proc"),
                Path::new("/proc"),
                Some("proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            ) {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("err {} {}", e.errno as i32, e.arg),
            },
        }
    };
    let _ = sys::write_all(res.as_raw_fd(), msg.as_bytes());
    sys::exit_now(0)
}

/// The parent's half: write the child's id maps, tell it to go (or not),
/// read its answer and reap it.
fn map_and_wait(
    pid: i32,
    go: OwnedFd,
    res: &OwnedFd,
) -> (Result<(), ProbeError>, Result<(), ProbeError>) {
    let euid = sys::geteuid();
    let egid = sys::getegid();
    let map = std::fs::write(format!("/proc/{pid}/setgroups"), "deny")
        .and_then(|_| std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {euid} 1\n")))
        .and_then(|_| std::fs::write(format!("/proc/{pid}/gid_map"), format!("0 {egid} 1\n")));
    let answer: &[u8] = if map.is_ok() { b"g" } else { b"x" };
    let _ = sys::write_all(go.as_raw_fd(), answer);
    drop(go);
    let mut buf = [0u8; 512];
    let n = sys::read(res.as_raw_fd(), &mut buf).unwrap_or(0);
    let _ = sys::waitpid(pid, false);
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    match map {
        Err(source) => (
            Err(ProbeError::IdMap { pid, source }),
            Err(ProbeError::NeedsIdMap),
        ),
        Ok(()) => (Ok(()), child_answer(&msg)),
    }
}

/// What the probe child's answer says of the /proc mount.
fn child_answer(msg: &str) -> Result<(), ProbeError> {
    if msg == "ok" {
        return Ok(());
    }
    let failed = msg
        .strip_prefix("err ")
        .and_then(|r| r.split_once(' '))
        .and_then(|(errno, arg)| {
            Some(SysError {
                call: "mount",
                arg: arg.to_string(),
                errno: Errno::from_raw(errno.parse().ok()?),
            })
        });
    Err(failed.map_or(ProbeError::NoAnswer, ProbeError::Sys))
}

pub(super) fn probe_userns_and_proc() -> (Probe, Probe) {
    let mut f = BTreeMap::new();
    process_facts(&mut f);
    let (u, p) = try_namespaces();
    let user =
        match &u {
            Ok(()) => Probe {
                name: "userns",
                available: true,
                reason: format!(
                "new user, mount and pid namespaces can be created (user.max_user_namespaces = {})",
                f.get("user.max_user_namespaces").map(String::as_str).unwrap_or("?")
            ),
                facts: f.clone(),
            },
            Err(e) => Probe {
                name: "userns",
                available: false,
                reason: userns_reason(e, &f),
                facts: f.clone(),
            },
        };
    let masked = proc_overmounts();
    let mut pf = BTreeMap::new();
    if !masked.is_empty() {
        pf.insert("mounts_below_proc", masked.join(" "));
    }
    let proc = match (&u, &p) {
        (_, Ok(())) => Probe {
            name: "proc",
            available: true,
            reason: "a fresh /proc can be mounted in a new pid namespace".into(),
            facts: pf,
        },
        (Err(_), Err(e)) => Probe {
            name: "proc",
            available: false,
            reason: e.to_string(),
            facts: pf,
        },
        (Ok(()), Err(e)) => {
            let reason = if masked.is_empty() {
                e.to_string()
            } else {
                format!(
                    "{e}: /proc is masked here ({} mounted over entries of it): the kernel lets \
                     a user namespace mount proc only when an unmasked proc is already visible \
                     (mnt_already_visible), as inside most containers",
                    masked.join(", ")
                )
            };
            Probe {
                name: "proc",
                available: false,
                reason,
                facts: pf,
            }
        }
    };
    (user, proc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child's answer becomes the error the report shows, as the text
    /// the child used to send did.
    #[test]
    fn child_answer_is_the_mount_error() {
        assert!(child_answer("ok").is_ok());
        let e = child_answer(&format!("err {} /proc", libc::EPERM)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("mount(/proc): {}", sys::errno_text(Errno::EPERM))
        );
        assert!(matches!(
            e,
            ProbeError::Sys(SysError {
                errno: Errno::EPERM,
                ..
            })
        ));
        for silent in ["", "skip", "err", "err x /"] {
            let e = child_answer(silent).unwrap_err();
            assert_eq!(e.to_string(), "the probe child died before answering");
        }
    }
}

//! Id maps, and why user namespaces may be refused.

#![deny(unsafe_code)]

use crate::plan::Plan;
use crate::sys::Errno;

/// A /proc/PID id-map file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct IdMapError {
    pub path: String,
    pub source: std::io::Error,
}

/// Write setgroups "deny", then uid_map and gid_map, once each.
pub fn write_id_maps(pid: i32, plan: &Plan) -> Result<(), IdMapError> {
    let base = proc_dir(pid);
    for (file, content) in [
        ("setgroups", "deny\n"),
        ("uid_map", plan.identity.uid_map.as_str()),
        ("gid_map", plan.identity.gid_map.as_str()),
    ] {
        let path = format!("{base}/{file}");
        std::fs::write(&path, content).map_err(|source| IdMapError { path, source })?;
    }
    Ok(())
}

/// The /proc directory of our child `pid` (a pid of our pid namespace).
/// Where the /proc in view belongs to an outer pid namespace (a sandbox
/// that bound the host's /proc, as bubblewrap's tests do around a nested
/// run), the child is found among our threads' children by its `NSpid`.
pub fn proc_dir(pid: i32) -> String {
    let plain = format!("/proc/{pid}");
    let ours = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok());
    if ours.is_none_or(|p| p == std::process::id()) {
        return plain;
    }
    let Some(depth) = nspid("/proc/self/status").map(|v| v.len()) else {
        return plain;
    };
    let tasks = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten();
    for t in tasks {
        let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        for c in children.split_whitespace() {
            let ids = nspid(&format!("/proc/{c}/status")).unwrap_or_default();
            if ids.get(depth - 1) == Some(&pid) {
                return format!("/proc/{c}");
            }
        }
    }
    plain
}

/// The `NSpid` line of a /proc status file: the pid in each pid namespace
/// from the /proc's own down.
fn nspid(status: &str) -> Option<Vec<i32>> {
    let s = std::fs::read_to_string(status).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect(),
    )
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The likely reasons the kernel refused to create a user namespace.
pub fn userns_refusal_reasons(errno: Errno) -> Vec<String> {
    let mut why = Vec::new();
    if read_trim("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        why.push(
            "user.max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=15000)".to_string(),
        );
    } else if errno == Errno::ENOSPC {
        why.push(
            "the user.max_user_namespaces limit is reached, or the namespace nesting is too deep"
                .to_string(),
        );
    }
    if read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        why.push(
            "kernel.unprivileged_userns_clone is 0 (sysctl -w kernel.unprivileged_userns_clone=1)"
                .to_string(),
        );
    }
    if read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        why.push(
            "kernel.apparmor_restrict_unprivileged_userns is 1 (give stockade an AppArmor profile with `userns,` or set the sysctl to 0)"
                .to_string(),
        );
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if status
            .lines()
            .any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2'))
        {
            why.push(
                "a seccomp filter is active on this process, as a container runtime installs (run with a seccomp profile that allows clone/unshare with namespace flags)"
                    .to_string(),
            );
        }
    }
    if why.is_empty() {
        why.push("the kernel refused without a visible reason (a container without CAP_SYS_ADMIN, or an LSM policy)".to_string());
    }
    why
}

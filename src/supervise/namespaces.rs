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
    let base = format!("/proc/{pid}");
    for (file, content) in [
        ("setgroups", "deny\n"),
        ("uid_map", plan.uid_map.as_str()),
        ("gid_map", plan.gid_map.as_str()),
    ] {
        let path = format!("{base}/{file}");
        std::fs::write(&path, content).map_err(|source| IdMapError { path, source })?;
    }
    Ok(())
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

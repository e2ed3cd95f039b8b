//! The server's own confinement: no_new_privs and a seccomp filter fit for
//! a server, installed after the spawner is started (the spawner must
//! clone into new namespaces and exec payloads) and before any thread
//! exists (so it covers every thread the runtime makes).
//!
//! The filter is a deny list: a server that parses requests from the
//! network has no business executing programs, tracing or reading other
//! processes, mounting, changing namespaces, loading kernel code or
//! eBPF, or touching the clock, keys, swap or reboot. Those fail with
//! EPERM. `clone` with a namespace flag fails too; `clone3` (whose flags
//! a filter cannot read) fails with ENOSYS, so the C library falls back
//! to `clone` for new threads.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// Syscalls the server never makes, by name (as /healthz reports them).
fn denied() -> Vec<(&'static str, i64)> {
    let mut v = vec![
        ("execve", libc::SYS_execve),
        ("execveat", libc::SYS_execveat),
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_readv", libc::SYS_process_vm_readv),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("chroot", libc::SYS_chroot),
        ("open_tree", libc::SYS_open_tree),
        ("move_mount", libc::SYS_move_mount),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("reboot", libc::SYS_reboot),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("acct", libc::SYS_acct),
        ("settimeofday", libc::SYS_settimeofday),
        ("clock_settime", libc::SYS_clock_settime),
        ("clock_adjtime", libc::SYS_clock_adjtime),
        ("adjtimex", libc::SYS_adjtimex),
        ("syslog", libc::SYS_syslog),
        ("quotactl", libc::SYS_quotactl),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("personality", libc::SYS_personality),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        ("iopl", libc::SYS_iopl),
        ("ioperm", libc::SYS_ioperm),
        ("uselib", libc::SYS_uselib),
    ]);
    v
}

fn arch() -> Result<seccompiler::TargetArch, String> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: {e:?}"))
}

fn deny_filter() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = denied()
        .into_iter()
        .map(|(_, nr)| (nr, Vec::new()))
        .collect();
    // One rule per namespace flag `clone` may not carry (the jails' own
    // mask, crate::seccomp::CLONE_NS_FLAGS).
    let clone_rules = (0..64)
        .map(|i| 1u64 << i)
        .filter(|bit| crate::seccomp::CLONE_NS_FLAGS & bit != 0)
        .map(|bit| {
            SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(bit), bit)
                .and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("seccomp: {e}"))?;
    rules.insert(libc::SYS_clone, clone_rules);
    let f = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    f.try_into().map_err(|e| format!("seccomp: {e}"))
}

fn clone3_filter() -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let f = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch()?,
    )
    .map_err(|e| format!("seccomp: {e}"))?;
    f.try_into().map_err(|e| format!("seccomp: {e}"))
}

/// Set no_new_privs and install the filters on this (only) thread.
pub fn apply() -> Result<(), String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    for prog in [clone3_filter()?, deny_filter()?] {
        seccompiler::apply_filter(&prog).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

/// What /healthz says of the server's confinement: read back from the
/// kernel (/proc/self/status), not from what was asked.
pub fn report(asked: bool, error: Option<&str>) -> serde_json::Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
    };
    let nnp = field("NoNewPrivs:").is_some_and(|v| v == "1");
    let seccomp = match field("Seccomp:").as_deref() {
        Some("2") => "filter",
        Some("1") => "strict",
        _ => "none",
    };
    let mut v = serde_json::json!({
        "no_new_privs": nnp,
        "seccomp": seccomp,
        "confined": nnp && seccomp == "filter",
        "denied_syscalls": if asked {
            denied().iter().map(|(n, _)| *n).chain(["clone with namespace flags", "clone3 (ENOSYS)"]).collect::<Vec<_>>()
        } else {
            Vec::new()
        },
    });
    if let Some(e) = error {
        v["error"] = e.into();
    }
    if !asked {
        v["why"] = "--no-confine".into();
    }
    v
}

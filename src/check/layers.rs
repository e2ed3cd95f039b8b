//! The other layers and kernel features: Landlock, seccomp, the cgroup
//! base, clone3 and pidfds.

use std::collections::BTreeMap;

use super::{read, status_field, Probe, ProbeError};
use crate::cgroup;
use crate::sys;

pub(super) fn probe_landlock() -> Probe {
    let mut f = BTreeMap::new();
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm");
    let abi = sys::landlock::abi_version();
    if let Ok(a) = &abi {
        f.insert("abi", a.to_string());
    }
    let listed = match &lsm {
        Ok(s) => {
            f.insert("lsm", s.trim().to_string());
            Some(s.trim().split(',').any(|x| x == "landlock"))
        }
        Err(e) => {
            f.insert(
                "lsm",
                format!("unreadable: /sys/kernel/security/lsm: {}", short(e)),
            );
            None
        }
    };
    let lsm_note = match listed {
        Some(true) => "landlock is in the active LSM list".to_string(),
        Some(false) => "landlock is not in the active LSM list (boot with lsm=…,landlock)".into(),
        None => "the active LSM list is unreadable (securityfs not mounted at \
                 /sys/kernel/security?), so the ABI probe decides"
            .into(),
    };
    match abi {
        Ok(a) => Probe {
            name: "landlock",
            available: true,
            reason: format!("ABI {a}; {lsm_note}"),
            facts: f,
        },
        Err(e) => {
            let why = match e.errno {
                sys::Errno::ENOSYS => {
                    "the kernel has no Landlock (or a seccomp filter hides landlock_create_ruleset)"
                }
                sys::Errno::EOPNOTSUPP => "Landlock is built in but not enabled at boot",
                _ => "",
            };
            Probe {
                name: "landlock",
                available: false,
                reason: if why.is_empty() {
                    format!("{e}; {lsm_note}")
                } else {
                    format!("{e}: {why}; {lsm_note}")
                },
                facts: f,
            }
        }
    }
}

pub(super) fn probe_seccomp() -> Probe {
    let mut f = BTreeMap::new();
    if let Some(v) = status_field("Seccomp") {
        f.insert("seccomp_mode", v);
    }
    // An allow-everything filter, installed in a throwaway child.
    let allow = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    // `stockade check` is single-threaded (EBUSY otherwise).
    let forked = sys::fork_single_threaded();
    let r: Result<(), ProbeError> = match forked {
        Err(e) => Err(e.into()),
        Ok(None) => {
            let code =
                match sys::set_no_new_privs().and_then(|_| sys::seccomp::install(&allow, false)) {
                    Ok(_) => 0,
                    Err(e) => e.errno as i32,
                };
            sys::exit_now(code)
        }
        Ok(Some(pid)) => match sys::waitpid(pid, false) {
            Ok(Some((_, st))) if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 => Ok(()),
            Ok(Some((_, st))) if libc::WIFEXITED(st) => Err(ProbeError::SeccompFilter(
                sys::Errno::from_raw(libc::WEXITSTATUS(st)),
            )),
            Ok(_) => Err(ProbeError::Abnormal),
            Err(e) => Err(e.into()),
        },
    };
    match r {
        Ok(()) => Probe {
            name: "seccomp",
            available: true,
            reason: "a seccomp-bpf filter can be installed".into(),
            facts: f,
        },
        Err(e) => Probe {
            name: "seccomp",
            available: false,
            reason: if status_field("Seccomp").is_none() {
                format!("{e}: the kernel has no seccomp (no Seccomp field in /proc/self/status)")
            } else {
                e.to_string()
            },
            facts: f,
        },
    }
}

/// The cgroup layer: a v2 base we may create children in, else a scope
/// the user's systemd delegates, else the v1 rung's groups (`setup` is a
/// trial of every cgroup limit).
pub(super) fn probe_cgroup(setup: &cgroup::Setup) -> Probe {
    let mut p = probe_v2();
    if let Some(c) = setup.cgroup.as_ref() {
        if let (Some(unit), false) = (c.systemd_unit(), p.available) {
            p.facts.insert("systemd_scope", unit.to_string());
            p.facts.insert("path", c.path().display().to_string());
            p.reason = format!(
                "a transient scope with Delegate=yes from the user's systemd over D-Bus \
                 (tried {unit}; no cgroup v2 base of our own: {})",
                p.reason
            );
            p.available = true;
        }
    }
    let v1: Vec<String> = setup
        .cgroup
        .iter()
        .flat_map(|c| c.v1_groups())
        .map(|g| g.controllers.join(","))
        .collect();
    if !v1.is_empty() {
        p.facts.insert("v1_controllers", v1.join(" "));
        if !p.available {
            p.reason = format!(
                "cgroup v1 controllers {} (no cgroup v2 rung: {})",
                v1.join(", "),
                p.reason
            );
            p.available = true;
        }
    }
    p
}

fn probe_v2() -> Probe {
    let mut f = BTreeMap::new();
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let pc = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let h = cgroup::parse_mountinfo(&mi);
    let Some(m) = h.unified() else {
        return Probe {
            name: "cgroup",
            available: false,
            reason: "no cgroup v2 hierarchy mounted (no cgroup2 line in /proc/self/mountinfo)"
                .into(),
            facts: f,
        };
    };
    f.insert("mount", m.mountpoint.display().to_string());
    if let Some(favor) = cgroup::favors_dynmods(&mi, &m.mountpoint) {
        f.insert(
            "favordynmods",
            match favor {
                true => "yes: a move into another cgroup does not wait".into(),
                false => format!(
                    "no: each move of a process into another cgroup takes a host-wide lock \
                     that may wait for an RCU grace period (one per forked run of `serve --warm-fork` where cgroup v1 holds \
                     its limits: on cgroup v2 each child is born in its cgroup; 1.4 ms a move measured \
                     under load on a 2-CPU VM, 0.13 ms with it); `mount -o remount,favordynmods {}` trades \
                     that for slower forks and exits",
                    m.mountpoint.display()
                ),
            },
        );
    }
    f.insert(
        "layout",
        if h.v1.is_empty() {
            "unified"
        } else {
            "hybrid (v1 controllers also mounted)"
        }
        .into(),
    );
    if let Some(own) = cgroup::parse_proc_cgroup(&pc) {
        f.insert("own_cgroup", own);
    }
    match cgroup::choose(&cgroup::RealHost, &h, &pc) {
        Err(e) => Probe {
            name: "cgroup",
            available: false,
            reason: e.to_string(),
            facts: f,
        },
        Ok(place) => {
            let ctrl = read(&place.base.join("cgroup.controllers").display().to_string())
                .unwrap_or_default();
            f.insert("base", place.base.display().to_string());
            f.insert("controllers", ctrl.clone());
            let missing: Vec<&str> = ["memory", "cpu", "pids"]
                .into_iter()
                .filter(|c| !ctrl.split_whitespace().any(|x| x == *c))
                .collect();
            Probe {
                name: "cgroup",
                available: true,
                reason: if missing.is_empty() {
                    format!(
                        "writable delegated subtree {} with controllers {}",
                        place.base.display(),
                        ctrl
                    )
                } else {
                    format!(
                        "writable delegated subtree {} (controllers: {}; missing {}: those \
                         limits take a lower rung, see limits)",
                        place.base.display(),
                        if ctrl.is_empty() { "none" } else { &ctrl },
                        missing.join(", ")
                    )
                },
                facts: f,
            }
        }
    }
}

/// clone3 and pidfds, tried with a child that exits at once.
pub(super) fn probe_clone3_pidfd() -> (Probe, Probe) {
    let mut f = BTreeMap::new();
    if let Some(v) = read("/proc/sys/kernel/osrelease") {
        f.insert("kernel", v);
    }
    if let Some(v) = status_field("Seccomp") {
        f.insert("seccomp_mode", v);
    }
    match sys::clone_jail(0, None) {
        Err(e) => {
            let p = |name| Probe {
                name,
                available: false,
                reason: format!("{e}: cannot create a process to probe with"),
                facts: f.clone(),
            };
            (p("clone3"), p("pidfd"))
        }
        Ok((sys::Cloned::Child, _)) => sys::exit_now(0),
        Ok((sys::Cloned::Parent { pid, pidfd }, via)) => {
            let sig = sys::pidfd_send_signal(&pidfd, 0);
            let _ = sys::waitpid(pid, false);
            let clone3 = if via == sys::CloneVia::Clone {
                let filtered = f.get("seccomp_mode").map(|v| v == "2").unwrap_or(false);
                Probe {
                    name: "clone3",
                    available: false,
                    reason: format!(
                        "clone3 returned ENOSYS or EPERM ({}); stockade falls back to clone(2) \
                         and cannot start the jail inside its cgroup atomically",
                        if filtered {
                            "a seccomp filter on this process hides it, as container runtimes do"
                        } else {
                            "kernel older than 5.3?"
                        }
                    ),
                    facts: f.clone(),
                }
            } else {
                Probe {
                    name: "clone3",
                    available: true,
                    reason: "clone3 works".into(),
                    facts: f.clone(),
                }
            };
            let pidfd = match sig {
                Ok(()) => Probe {
                    name: "pidfd",
                    available: true,
                    reason: "CLONE_PIDFD and pidfd_send_signal work".into(),
                    facts: BTreeMap::new(),
                },
                Err(e) => Probe {
                    name: "pidfd",
                    available: false,
                    reason: format!("{e} (kernel older than 5.3, or filtered)"),
                    facts: BTreeMap::new(),
                },
            };
            (clone3, pidfd)
        }
    }
}

fn short(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

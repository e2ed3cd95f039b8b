//! `stockade check`: which layers this host can enforce, and the precise
//! reason when one cannot be.
//!
//! Namespaces, the /proc mount and seccomp are probed by trying them in a
//! child process (the CLI is single-threaded here, so clone and fork are
//! safe); the rest is read from /proc and /sys.

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::policy::Layer;
use crate::supervise::cgroup;
use crate::sys;

/// One probed layer or kernel feature.
#[derive(Debug, Clone)]
pub struct Probe {
    pub name: &'static str,
    pub available: bool,
    /// What was found: the reason when unavailable, a summary otherwise.
    pub reason: String,
    /// Facts behind the verdict (sysctls, status fields, versions).
    pub facts: BTreeMap<&'static str, String>,
}

/// Everything `stockade check` found.
#[derive(Debug, Clone)]
pub struct Report {
    pub probes: Vec<Probe>,
}

impl Report {
    pub fn get(&self, name: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.name == name)
    }

    /// Can `layer` be applied on this host?
    pub fn layer_available(&self, layer: Layer) -> bool {
        let ok = |n: &str| self.get(n).map(|p| p.available).unwrap_or(false);
        match layer {
            Layer::Userns => ok("userns") && ok("proc"),
            Layer::Landlock => ok("landlock"),
            Layer::Seccomp => ok("seccomp"),
            Layer::Cgroup => ok("cgroup"),
        }
    }
}

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A `Name:\tvalue` field of /proc/self/status.
fn status_field(name: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

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
fn userns_reason(err: &str, f: &BTreeMap<&'static str, String>) -> String {
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
/// map our ids, and mount a fresh /proc. Returns (userns, proc) results and
/// whether clone3 and the pidfd were used.
fn try_namespaces() -> (Result<(), String>, Result<(), String>) {
    let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID) as u64;
    let (go_r, go_w) = match sys::pipe() {
        Ok(p) => p,
        Err(e) => return (Err(e.to_string()), Err("not tried".into())),
    };
    let (res_r, res_w) = match sys::pipe() {
        Ok(p) => p,
        Err(e) => return (Err(e.to_string()), Err("not tried".into())),
    };
    use std::os::fd::AsRawFd;
    match sys::clone_jail(flags, None) {
        Err(e) => (
            Err(e.to_string()),
            Err("not tried: needs a user namespace".into()),
        ),
        Ok((sys::Cloned::Child, _)) => {
            let mut b = [0u8; 1];
            let _ = sys::read(go_r.as_raw_fd(), &mut b);
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
                    Err(e) => format!("err {e}"),
                    Ok(()) => match sys::mount(
                        Some("proc"),
                        Path::new("/proc"),
                        Some("proc"),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        None,
                    ) {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("err {e}"),
                    },
                }
            };
            let _ = sys::write_all(res_w.as_raw_fd(), msg.as_bytes());
            sys::exit_now(0)
        }
        Ok((sys::Cloned::Parent { pid, pidfd: _ }, _)) => {
            drop(res_w);
            let euid = sys::geteuid();
            let egid = sys::getegid();
            let map = std::fs::write(format!("/proc/{pid}/setgroups"), "deny")
                .and_then(|_| {
                    std::fs::write(format!("/proc/{pid}/uid_map"), format!("0 {euid} 1\n"))
                })
                .and_then(|_| {
                    std::fs::write(format!("/proc/{pid}/gid_map"), format!("0 {egid} 1\n"))
                });
            let go: &[u8] = if map.is_ok() { b"g" } else { b"x" };
            let _ = sys::write_all(go_w.as_raw_fd(), go);
            drop(go_w);
            let mut buf = [0u8; 512];
            let n = sys::read(res_r.as_raw_fd(), &mut buf).unwrap_or(0);
            let _ = sys::waitpid(pid, false);
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            match map {
                Err(e) => (
                    Err(format!("writing /proc/{pid}/uid_map: {e}")),
                    Err("not tried: the id map failed".into()),
                ),
                Ok(()) if msg == "ok" => (Ok(()), Ok(())),
                Ok(()) => (
                    Ok(()),
                    Err(msg
                        .strip_prefix("err ")
                        .unwrap_or("the probe child died before answering")
                        .to_string()),
                ),
            }
        }
    }
}

fn probe_userns_and_proc() -> (Probe, Probe) {
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
            reason: e.clone(),
            facts: pf,
        },
        (Ok(()), Err(e)) => {
            let reason = if masked.is_empty() {
                e.clone()
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

fn probe_landlock() -> Probe {
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

fn probe_seccomp() -> Probe {
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
    #[allow(unsafe_code)]
    // SAFETY: `stockade check` is single-threaded.
    let forked = unsafe { sys::fork() };
    let r = match forked {
        Err(e) => Err(e.to_string()),
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
            Ok(Some((_, st))) if libc::WIFEXITED(st) => Err(format!(
                "seccomp(SECCOMP_SET_MODE_FILTER): {}",
                sys::errno_text(sys::Errno::from_raw(libc::WEXITSTATUS(st)))
            )),
            Ok(_) => Err("the probe child ended abnormally".into()),
            Err(e) => Err(e.to_string()),
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
                e
            },
            facts: f,
        },
    }
}

fn probe_cgroup() -> Probe {
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
                         limits fall back to rlimits)",
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
fn probe_clone3_pidfd() -> (Probe, Probe) {
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

/// Probe every layer. Must be called while the process is single-threaded.
pub fn probe_all() -> Report {
    let (u, p) = probe_userns_and_proc();
    let (c3, pidfd) = probe_clone3_pidfd();
    Report {
        probes: vec![
            u,
            p,
            probe_landlock(),
            probe_seccomp(),
            probe_cgroup(),
            pidfd,
            c3,
        ],
    }
}

/// 0 when every layer in `require` is available, else 1.
pub fn exit_code(r: &Report, require: &[Layer]) -> i32 {
    if require.iter().all(|l| r.layer_available(*l)) {
        0
    } else {
        1
    }
}

fn missing(r: &Report, require: &[Layer]) -> Vec<&'static str> {
    require
        .iter()
        .filter(|l| !r.layer_available(**l))
        .map(|l| l.name())
        .collect()
}

/// The report for a person.
pub fn to_text(r: &Report, profile: &str, require: &[Layer]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let req: Vec<&str> = require.iter().map(|l| l.name()).collect();
    let _ = writeln!(
        o,
        "stockade check: profile {profile} requires {}",
        if req.is_empty() {
            "no layer".to_string()
        } else {
            req.join(", ")
        }
    );
    for p in &r.probes {
        let _ = writeln!(
            o,
            "  {:<9} {:<12} {}",
            p.name,
            if p.available {
                "available"
            } else {
                "unavailable"
            },
            p.reason
        );
    }
    let miss = missing(r, require);
    if miss.is_empty() {
        let _ = writeln!(o, "ok: every layer the profile requires is available");
    } else {
        let _ = writeln!(o, "not ok: required but unavailable: {}", miss.join(", "));
    }
    o
}

/// The report as one JSON document.
pub fn to_json(r: &Report, profile: &str, require: &[Layer]) -> String {
    let mut layers = serde_json::Map::new();
    for p in &r.probes {
        layers.insert(
            p.name.to_string(),
            json!({ "available": p.available, "reason": p.reason, "facts": p.facts }),
        );
    }
    let v = json!({
        "schema_version": 1,
        "profile": profile,
        "required": require.iter().map(|l| l.name()).collect::<Vec<_>>(),
        "missing": missing(r, require),
        "ok": exit_code(r, require) == 0,
        "layers": layers,
    });
    v.to_string() + "\n"
}

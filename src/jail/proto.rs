//! The two channels between the supervisor and the jail, and the child
//! side's one way to report and to give up ([`Reporter`]).
//!
//! control (supervisor → init, a unix stream socket): `G` go (maps are
//! written), `R` go after re-rooting the cgroup namespace, `N` with an fd
//! (SCM_RIGHTS) the network namespace to join, `T` SIGTERM to
//! every process in the jail, `F<sig>` forward
//! one signal to the payload. EOF means the supervisor is gone.
//!
//! report (jail → supervisor), one line each:
//! `E<step>\t<path>\t<errno>\t<value>\t<reason>` setup failed (a
//! [`SetupError`]: errno and value empty when none); `X<errno>\t<path>` execve
//! failed; `L<record>` a layer init or the payload applied (a
//! [`LayerRecord`] as one line of JSON); `P<tasks>\t<vm>`
//! sampled peaks; `U<user µs>\t<system µs>\t<maxrss KiB>` what the jail's
//! processes used; `S<wait status>` the payload ended and every other
//! process of the jail is dead. Init writes U, P and S together, last,
//! right before it exits.

#![deny(unsafe_code)]

use std::os::fd::RawFd;

use serde::{Deserialize, Serialize};

use super::error::JailError;
use crate::plan::SetupError;
use crate::seccomp::SeccompAction;
use crate::sys;

pub const GO: u8 = b'G';
/// Go, after re-rooting the cgroup namespace at the run cgroup (the child
/// was moved into it after clone).
pub const GO_REROOT_CGROUP: u8 = b'R';
/// The network namespace's fd, sent after GO (when the plan makes one).
pub const NETNS: u8 = b'N';
/// init → supervisor, on the control socket: the covers' inotify watch
/// (with the number of covers watched, a u32), see `observe::masks`.
pub const MASKS: u8 = b'M';
/// supervisor → init, after GO (and the network namespace) when the plan
/// has a `Landlock::log_tag`: the payload asks for its Landlock denials to
/// be logged (`AUDIT_LOG`) or not (`AUDIT_NO_LOG`).
pub const AUDIT_LOG: u8 = b'A';
pub const AUDIT_NO_LOG: u8 = b'a';
pub const TERM_ALL: u8 = b'T';
/// SIGKILL to every process of the jail, sent to init where killing init
/// would not do it (no pid namespace).
pub const KILL_ALL: u8 = b'K';
pub const FORWARD: u8 = b'F';

/// A message from the jail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Setup(SetupError),
    Exec {
        errno: i32,
        path: String,
    },
    Status(i32),
    /// Peaks init sampled: tasks alive at once, largest VmPeak of a process;
    /// whether the workdir's tmpfs was found full (`Limits::workdir_cap`:
    /// init killed the jail).
    Peak {
        tasks: u64,
        vm_bytes: u64,
        workdir_full: bool,
    },
    /// CPU time and largest resident set of every process init reaped
    /// (getrusage RUSAGE_CHILDREN), sent once the jail is empty.
    Usage {
        user_us: u64,
        system_us: u64,
        maxrss_kb: u64,
    },
    /// A layer init or the payload applied (or could not).
    Layer(LayerRecord),
}

/// A layer as the jail saw it, for the outcome's `layers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayerRecord {
    /// What the payload's capability sets still hold after dropping them.
    Capabilities(CapsLeft),
    /// Landlock, as the kernel enforced it.
    Landlock(LandlockApplied),
    /// The kernel refused a Landlock step: nothing is enforced.
    LandlockUnavailable { why: String },
    /// The seccomp filter the payload installs last.
    Seccomp(SeccompApplied),
    /// pivot_root was refused: the new root was moved over / and chrooted
    /// into.
    Chroot,
    /// The jail has no /proc of its own.
    ProcUnavailable { why: String },
    /// The IPC namespace's limits could not be written (`jail::ipc`): the
    /// payload's SysV IPC and POSIX message queues are not bounded.
    IpcUnbounded { why: String },
}

/// How many capabilities each set holds (`usize::MAX`: unreadable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapsLeft {
    pub effective: usize,
    pub permitted: usize,
    pub inheritable: usize,
    pub bounding: usize,
    pub ambient: usize,
}

/// What Landlock enforced; serialized, the layer's detail in the outcome
/// (fields in this order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockApplied {
    pub status: Enforced,
    /// The running kernel's Landlock ABI (0: none).
    pub abi: i32,
    /// Filesystem rules in the enforced ruleset.
    pub fs_rules: usize,
    pub tcp: Tcp,
    /// Enforced scopes: "abstract_unix_socket", "signal".
    pub scopes: Vec<String>,
    /// Rights the policy wanted and the kernel could not enforce
    /// (`fs:read_file`, `net:bind_tcp`, `scope:signal`).
    pub missing: Vec<String>,
    /// `/` may be listed: every mount in the jail is granted somewhere.
    pub root_listable: bool,
    /// Rule paths left out of the ruleset (so nothing is granted there).
    pub skipped: Vec<Skipped>,
    /// Why the kernel's Landlock ABI could not be read, when it could not.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub why: Option<String>,
}

impl LandlockApplied {
    /// The detail as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|_| format!("{{\"status\":\"{}\"}}", self.status.name()))
    }
}

/// The kernel's verdict on a Landlock ruleset: fully, partially or not
/// enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Enforced {
    #[serde(rename = "fully_enforced")]
    Fully,
    #[serde(rename = "partially_enforced")]
    Partially,
    #[serde(rename = "not_enforced")]
    Not,
}

impl Enforced {
    pub fn name(self) -> &'static str {
        match self {
            Enforced::Fully => "fully_enforced",
            Enforced::Partially => "partially_enforced",
            Enforced::Not => "not_enforced",
        }
    }
}

/// TCP bind and connect under Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tcp {
    Denied,
    /// Not denied by Landlock: the policy shares the host network, or
    /// (`loopback`) the jail's own network namespace has only `lo`.
    Allowed,
    /// Wanted, but the kernel cannot deny it.
    Unavailable,
    /// Denied but connect to one port: the egress proxy's (`--allow-host`).
    ProxyOnly,
}

/// A Landlock rule path left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    pub why: String,
}

/// The seccomp filter: its action, how many syscalls it allows, the
/// groups the policy named, its length in instructions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompApplied {
    pub action: SeccompAction,
    pub allowed: usize,
    pub groups: Vec<String>,
    pub instructions: usize,
}

fn clean(s: &str) -> String {
    s.replace(['\t', '\n'], " ")
}

pub fn encode(r: &Report) -> Vec<u8> {
    match r {
        Report::Setup(e) => format!(
            "E{}\t{}\t{}\t{}\t{}\n",
            clean(e.step()),
            clean(e.path()),
            e.errno().map(|n| n.to_string()).unwrap_or_default(),
            clean(e.value().unwrap_or_default()),
            clean(e.reason())
        )
        .into_bytes(),
        Report::Exec { errno, path } => format!("X{}\t{}\n", errno, clean(path)).into_bytes(),
        Report::Status(st) => format!("S{st}\n").into_bytes(),
        Report::Peak {
            tasks,
            vm_bytes,
            workdir_full,
        } => format!("P{tasks}\t{vm_bytes}\t{}\n", u8::from(*workdir_full)).into_bytes(),
        Report::Usage {
            user_us,
            system_us,
            maxrss_kb,
        } => format!("U{user_us}\t{system_us}\t{maxrss_kb}\n").into_bytes(),
        // JSON escapes tabs and newlines inside strings: one line.
        Report::Layer(l) => {
            let mut b = b"L".to_vec();
            // Cannot fail: plain structs, strings and numbers.
            let _ = serde_json::to_writer(&mut b, l);
            b.push(b'\n');
            b
        }
    }
}

/// Parse every complete line in `buf`.
pub fn decode(buf: &[u8]) -> Vec<Report> {
    let mut out = Vec::new();
    for line in buf.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(line);
        let Some(kind) = line.chars().next() else {
            continue;
        };
        let rest = &line[1..];
        let mut f = rest.split('\t');
        match kind {
            'E' => {
                let (step, path) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
                let errno = f.next().and_then(|n| n.parse().ok());
                let value = f.next().filter(|v| !v.is_empty());
                let mut e = SetupError::new(step, path, f.next().unwrap_or(""));
                if let Some(n) = errno {
                    e = e.with_errno(n);
                }
                if let Some(v) = value {
                    e = e.with_value(v);
                }
                out.push(Report::Setup(e))
            }
            'X' => out.push(Report::Exec {
                errno: f.next().and_then(|e| e.parse().ok()).unwrap_or(0),
                path: f.next().unwrap_or("").to_string(),
            }),
            'L' => {
                if let Ok(l) = serde_json::from_str(rest) {
                    out.push(Report::Layer(l))
                }
            }
            'P' => out.push(Report::Peak {
                tasks: f.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0),
                vm_bytes: f.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0),
                workdir_full: f.next().is_some_and(|v| v.trim() == "1"),
            }),
            'U' => {
                let mut n = || f.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
                let (user_us, system_us, maxrss_kb) = (n(), n(), n());
                out.push(Report::Usage {
                    user_us,
                    system_us,
                    maxrss_kb,
                })
            }
            'S' => {
                if let Ok(st) = rest.trim().parse() {
                    out.push(Report::Status(st))
                }
            }
            _ => {}
        }
    }
    out
}

/// The child side's end of the report pipe: init's, or the payload's copy
/// of it. Writes are best effort: if the supervisor is gone, no one is left
/// to tell.
#[derive(Debug, Clone, Copy)]
pub struct Reporter(RawFd);

impl Reporter {
    pub fn new(fd: RawFd) -> Reporter {
        Reporter(fd)
    }

    /// Send one record.
    pub fn send(self, r: &Report) {
        let _ = sys::write_all(self.0, &encode(r));
    }

    /// Send several records in one write.
    pub fn send_all(self, rs: &[Report]) {
        let bytes: Vec<u8> = rs.iter().flat_map(encode).collect();
        let _ = sys::write_all(self.0, &bytes);
    }

    /// The one way init and the payload give up: the setup error record
    /// (step, path, errno, value, reason), unless there is no one to read it, then exit
    /// 125 at once (no destructor runs: the payload shares init's memory).
    pub fn fail(self, e: JailError) -> ! {
        if !matches!(e, JailError::Silent(_)) {
            self.send(&Report::Setup(e.setup()));
        }
        sys::exit_now(125)
    }
}

/// A step's value, or [`Reporter::fail`] right where it failed (with every
/// value of the caller still alive: nothing is closed or freed first).
pub trait OrFail<T> {
    fn or_fail(self, r: Reporter) -> T;
}

impl<T> OrFail<T> for Result<T, JailError> {
    fn or_fail(self, r: Reporter) -> T {
        match self {
            Ok(v) => v,
            Err(e) => r.fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let msgs = vec![
            Report::Setup(
                SetupError::new("bind", "/x\ty", "ENOENT: No such file").with_errno(libc::ENOENT),
            ),
            Report::Setup(
                SetupError::new("symlink destination", "/l", "a symlink to /usr is there")
                    .with_errno(libc::EEXIST)
                    .with_value("/usr"),
            ),
            Report::Exec {
                errno: 2,
                path: "/bin/nope".into(),
            },
            Report::Usage {
                user_us: 1,
                system_us: 22,
                maxrss_kb: 333,
            },
            Report::Status(9),
            Report::Layer(LayerRecord::Landlock(LandlockApplied {
                status: Enforced::Partially,
                abi: 3,
                fs_rules: 2,
                tcp: Tcp::Unavailable,
                scopes: vec![],
                missing: vec!["net:bind_tcp".into()],
                root_listable: true,
                skipped: vec![Skipped {
                    path: "/a\tb\nc".into(),
                    why: "No such file".into(),
                }],
                why: None,
            })),
            Report::Layer(LayerRecord::Chroot),
            Report::Layer(LayerRecord::Seccomp(SeccompApplied {
                action: SeccompAction::Kill,
                allowed: 300,
                groups: vec!["@default".into()],
                instructions: 700,
            })),
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            buf.extend(encode(m));
        }
        let back = decode(&buf);
        assert_eq!(back.len(), msgs.len());
        assert_eq!(
            back[0],
            Report::Setup(
                SetupError::new("bind", "/x y", "ENOENT: No such file").with_errno(libc::ENOENT)
            )
        );
        assert_eq!(back[1..], msgs[1..]);
    }

    #[test]
    fn landlock_detail_keeps_its_field_order() {
        let l = LandlockApplied {
            status: Enforced::Fully,
            abi: 6,
            fs_rules: 1,
            tcp: Tcp::Denied,
            scopes: vec!["signal".into()],
            missing: vec![],
            root_listable: false,
            skipped: vec![],
            why: Some("w".into()),
        };
        assert_eq!(
            l.to_json(),
            r#"{"status":"fully_enforced","abi":6,"fs_rules":1,"tcp":"denied","scopes":["signal"],"missing":[],"root_listable":false,"skipped":[],"why":"w"}"#
        );
    }
}

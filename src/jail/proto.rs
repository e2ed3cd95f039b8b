//! The two channels between the supervisor and the jail.
//!
//! control (supervisor → init, a unix stream socket): `G` go (maps are
//! written), `R` go after re-rooting the cgroup namespace, `N` with an fd
//! (SCM_RIGHTS) the network namespace to join, `T` SIGTERM to
//! every process in the jail, `F<sig>` forward
//! one signal to the payload. EOF means the supervisor is gone.
//!
//! report (jail → supervisor), one line each:
//! `E<step>\t<path>\t<reason>` setup failed; `X<errno>\t<path>` execve
//! failed; `L<layer>\t<json>` a layer the payload applied; `P<tasks>\t<vm>`
//! sampled peaks; `U<user µs>\t<system µs>\t<maxrss KiB>` what the jail's
//! processes used; `S<wait status>` the payload ended and every other
//! process of the jail is dead. Init writes U, P and S together, last,
//! right before it exits.

#![deny(unsafe_code)]

pub const GO: u8 = b'G';
/// Go, after re-rooting the cgroup namespace at the run cgroup (the child
/// was moved into it after clone).
pub const GO_REROOT_CGROUP: u8 = b'R';
/// The network namespace's fd, sent after GO (when the plan makes one).
pub const NETNS: u8 = b'N';
pub const TERM_ALL: u8 = b'T';
/// SIGKILL to every process of the jail, sent to init where killing init
/// would not do it (no pid namespace).
pub const KILL_ALL: u8 = b'K';
pub const FORWARD: u8 = b'F';

/// A message from the jail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Setup {
        step: String,
        path: String,
        reason: String,
    },
    Exec {
        errno: i32,
        path: String,
    },
    Status(i32),
    /// Peaks init sampled: tasks alive at once, largest VmPeak of a process.
    Peak {
        tasks: u64,
        vm_bytes: u64,
    },
    /// CPU time and largest resident set of every process init reaped
    /// (getrusage RUSAGE_CHILDREN), sent once the jail is empty.
    Usage {
        user_us: u64,
        system_us: u64,
        maxrss_kb: u64,
    },
    /// A layer applied in the payload (landlock, seccomp, …), its detail as
    /// one line of JSON.
    Layer {
        name: String,
        detail: String,
    },
}

fn clean(s: &str) -> String {
    s.replace(['\t', '\n'], " ")
}

pub fn encode(r: &Report) -> Vec<u8> {
    match r {
        Report::Setup { step, path, reason } => {
            format!("E{}\t{}\t{}\n", clean(step), clean(path), clean(reason)).into_bytes()
        }
        Report::Exec { errno, path } => format!("X{}\t{}\n", errno, clean(path)).into_bytes(),
        Report::Status(st) => format!("S{st}\n").into_bytes(),
        Report::Peak { tasks, vm_bytes } => format!("P{tasks}\t{vm_bytes}\n").into_bytes(),
        Report::Usage {
            user_us,
            system_us,
            maxrss_kb,
        } => format!("U{user_us}\t{system_us}\t{maxrss_kb}\n").into_bytes(),
        Report::Layer { name, detail } => {
            format!("L{}\t{}\n", clean(name), clean(detail)).into_bytes()
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
            'E' => out.push(Report::Setup {
                step: f.next().unwrap_or("").to_string(),
                path: f.next().unwrap_or("").to_string(),
                reason: f.next().unwrap_or("").to_string(),
            }),
            'X' => out.push(Report::Exec {
                errno: f.next().and_then(|e| e.parse().ok()).unwrap_or(0),
                path: f.next().unwrap_or("").to_string(),
            }),
            'L' => out.push(Report::Layer {
                name: f.next().unwrap_or("").to_string(),
                detail: f.next().unwrap_or("").to_string(),
            }),
            'P' => out.push(Report::Peak {
                tasks: f.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0),
                vm_bytes: f.next().and_then(|v| v.trim().parse().ok()).unwrap_or(0),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let msgs = vec![
            Report::Setup {
                step: "bind".into(),
                path: "/x\ty".into(),
                reason: "ENOENT".into(),
            },
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
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            buf.extend(encode(m));
        }
        let back = decode(&buf);
        assert_eq!(back.len(), 4);
        assert_eq!(
            back[0],
            Report::Setup {
                step: "bind".into(),
                path: "/x y".into(),
                reason: "ENOENT".into()
            }
        );
        assert_eq!(back[1], msgs[1]);
        assert_eq!(back[2], msgs[2]);
        assert_eq!(back[3], msgs[3]);
    }
}

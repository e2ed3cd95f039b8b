//! pid 1 of the jail: builds the root, forks the payload (pid 2), then reaps
//! orphans, forwards signals, and exits after the payload with every other
//! process in the jail killed.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::signal::Signal;

use super::proto::{self, Report};
use super::{caps, payload, rootfs};
use crate::plan::Plan;
use crate::sys;

fn report(fd: RawFd, r: &Report) {
    let _ = sys::write_all(fd, &proto::encode(r));
}

fn fail(fd: RawFd, step: &str, path: &str, reason: &str) -> ! {
    report(
        fd,
        &Report::Setup {
            step: step.into(),
            path: path.into(),
            reason: reason.into(),
        },
    );
    sys::exit_now(125)
}

/// Entry point of the cloned child. Never returns. `stdio`, when given,
/// replaces stdout and stderr (the supervisor's capped pipes).
pub fn main(plan: &Plan, ctl: OwnedFd, rep: OwnedFd, stdio: Option<(OwnedFd, OwnedFd)>) -> ! {
    let rep_fd = rep.as_raw_fd();
    sys::scrub_cmdline(b"stockade-init");
    if let Some((out, err)) = stdio {
        if sys::dup2(out.as_raw_fd(), 1).is_err() || sys::dup2(err.as_raw_fd(), 2).is_err() {
            sys::exit_now(125);
        }
    }

    // Open the bind sources while the supervisor writes the id maps: the
    // host checks them against our unchanged host credentials either way.
    let mut sources = None;
    if !plan.fallback {
        match rootfs::open_sources(plan) {
            Ok(s) => sources = Some(s),
            Err(e) => fail(rep_fd, e.step, &e.path, &e.err.to_string()),
        }
    }
    // Wait until the supervisor has written the id maps.
    let mut b = [0u8; 1];
    match sys::read(ctl.as_raw_fd(), &mut b) {
        Ok(1) if b[0] == proto::GO => {}
        Ok(1) if b[0] == proto::GO_REROOT_CGROUP => {
            if let Err(e) = sys::unshare_cgroupns() {
                fail(rep_fd, "cgroup namespace", "", &e.to_string());
            }
        }
        _ => sys::exit_now(125),
    }

    if !plan.fallback {
        if let Err(e) = caps::become_jail_user(plan.inner_uid, plan.inner_gid) {
            fail(rep_fd, "switch to jail user", "", &e.to_string());
        }
    }
    // After the credential change (which clears it): die with the supervisor.
    if let Err(e) = sys::set_pdeathsig(libc::SIGKILL) {
        fail(rep_fd, "parent death signal", "", &e.to_string());
    }
    // The supervisor may have died before the line above.
    let mut pf = [libc::pollfd {
        fd: ctl.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if sys::poll(&mut pf, 0).is_ok() && pf[0].revents & libc::POLLHUP != 0 {
        sys::exit_now(125);
    }

    let mut held = None;
    if plan.fallback {
        // No pid namespace: orphans of the payload must still come back to
        // us so the whole tree can be found and killed.
        if let Err(e) = sys::set_child_subreaper() {
            fail(rep_fd, "child subreaper", "", &e.to_string());
        }
    } else {
        let sources = sources.take().expect("opened above");
        match rootfs::build(plan, sources) {
            Ok((notes, h)) => {
                held = Some(h);
                if notes.chrooted {
                    report(
                        rep_fd,
                        &Report::Layer {
                            name: "pivot".into(),
                            detail: serde_json::json!({ "status": "chroot", "why": "pivot_root refused (EPERM): the new root was moved over / and chrooted into" }).to_string(),
                        },
                    );
                }
                if let Some(why) = notes.proc_unavailable {
                    report(
                        rep_fd,
                        &Report::Layer {
                            name: "proc".into(),
                            detail: serde_json::json!({ "status": "unavailable", "why": why })
                                .to_string(),
                        },
                    );
                }
            }
            Err(e) => fail(rep_fd, e.step, &e.path, &e.err.to_string()),
        }
        if let Err(e) = sys::sethostname(&plan.hostname) {
            fail(rep_fd, "hostname", &plan.hostname, &e.to_string());
        }
        if plan.new_netns {
            // The supervisor made it while we built the root.
            match sys::fdpass::recv_fd(ctl.as_raw_fd()) {
                Ok(Some(ns)) => {
                    if let Err(e) = sys::enter_netns(&ns) {
                        fail(rep_fd, "network", "lo", &e.to_string());
                    }
                }
                // The supervisor is gone (or failed and says why).
                _ => sys::exit_now(125),
            }
        }
    }
    // No one in the jail may ptrace init or read its memory.
    if let Err(e) = sys::set_dumpable(false) {
        fail(rep_fd, "dumpable", "", &e.to_string());
    }

    let sigs = [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ];
    let sfd = match sys::signalfd_for(&sigs) {
        Ok(s) => s,
        Err(e) => fail(rep_fd, "signalfd", "", &e.to_string()),
    };

    let (sfd_raw, ctl_raw) = (sfd.as_raw_fd(), ctl.as_raw_fd());
    let mut start_payload = || {
        sys::close_raw(sfd_raw);
        sys::close_raw(ctl_raw);
        payload::main(plan, rep_fd)
    };
    let child = match sys::spawn_vfork(&mut start_payload) {
        Ok(pid) => pid,
        Err(e) => fail(rep_fd, "start payload", "", &e.to_string()),
    };

    drop(held);
    let mut peak = Peak::default();
    let tree = Tree {
        contained: !plan.fallback,
    };
    let status = supervise(
        child,
        &sfd,
        ctl.as_raw_fd(),
        plan.sample_ms,
        &mut peak,
        &tree,
    );
    // The payload is gone: nothing else in the jail outlives it.
    tree.kill_all(libc::SIGKILL);
    while let Ok(Some(_)) = sys::waitpid(-1, false) {
        tree.kill_all(libc::SIGKILL);
    }
    // The jail is empty. Let go of the output pipes so the supervisor sees
    // their end now, then send the last records in one write: the
    // supervisor may finish on them without waiting for this process's
    // exit (unmapping its memory, tearing down the namespaces).
    sys::close_raw(1);
    sys::close_raw(2);
    let mut last = proto::encode(&children_usage());
    last.extend(proto::encode(&Report::Peak {
        tasks: peak.tasks,
        vm_bytes: peak.vm_bytes,
    }));
    last.extend(proto::encode(&Report::Status(status)));
    let _ = sys::write_all(rep_fd, &last);
    sys::exit_now(0)
}

/// What every reaped process of the jail used.
fn children_usage() -> Report {
    use nix::sys::resource::{getrusage, UsageWho};
    let us = |t: nix::sys::time::TimeVal| (t.tv_sec() as u64) * 1_000_000 + t.tv_usec() as u64;
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(r) => Report::Usage {
            user_us: us(r.user_time()),
            system_us: us(r.system_time()),
            maxrss_kb: r.max_rss().max(0) as u64,
        },
        Err(_) => Report::Usage {
            user_us: 0,
            system_us: 0,
            maxrss_kb: 0,
        },
    }
}

/// Every process of the jail.
struct Tree {
    /// In our own pid namespace: "everyone but init" is `kill(-1)`. Without
    /// one, kill(-1) would reach the caller's other processes, so the jail is
    /// the tree of init's descendants (init is a subreaper, orphans come back).
    contained: bool,
}

impl Tree {
    /// Pids of every descendant of init.
    fn members(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut todo = vec![std::process::id()];
        while let Some(p) = todo.pop() {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
                continue;
            };
            for t in tasks.flatten() {
                let path = t.path().join("children");
                if let Ok(c) = std::fs::read_to_string(path) {
                    for kid in c.split_whitespace().filter_map(|k| k.parse::<u32>().ok()) {
                        if !out.contains(&kid) {
                            out.push(kid);
                            todo.push(kid);
                        }
                    }
                }
            }
        }
        out
    }

    fn kill_all(&self, sig: i32) {
        if self.contained {
            let _ = sys::kill(-1, sig);
            return;
        }
        // Walk until nothing is left to signal: a process that forks while we
        // walk is found on the next pass (SIGKILL stops it forking again).
        for _ in 0..64 {
            let m = self.members();
            if m.is_empty() {
                break;
            }
            for p in &m {
                let _ = sys::kill(*p as i32, sig);
            }
            if sig != libc::SIGKILL {
                break;
            }
        }
    }
}

/// Peaks seen by sampling the jail's /proc.
#[derive(Default)]
struct Peak {
    tasks: u64,
    vm_bytes: u64,
}

impl Peak {
    /// Count the tasks (threads included) alive in the jail, excluding init,
    /// and the largest VmPeak of one process.
    fn sample(&mut self, tree: &Tree) {
        let pids: Vec<u32> = if tree.contained {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                return;
            };
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                .filter(|p| *p != 1)
                .collect()
        } else {
            tree.members()
        };
        let mut tasks = 0u64;
        for pid in pids {
            let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            for line in st.lines() {
                if let Some(v) = line.strip_prefix("Threads:") {
                    tasks += v.trim().parse::<u64>().unwrap_or(1);
                } else if let Some(v) = line.strip_prefix("VmPeak:") {
                    let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    self.vm_bytes = self.vm_bytes.max(kb * 1024);
                }
            }
        }
        self.tasks = self.tasks.max(tasks);
    }
}

/// Reap until the payload ends; return its raw wait status.
fn supervise(
    child: i32,
    sfd: &nix::sys::signalfd::SignalFd,
    ctl: RawFd,
    sample_ms: i32,
    peak: &mut Peak,
    tree: &Tree,
) -> i32 {
    let mut ctl_open = true;
    let mut forward_next = false;
    // Sampling reads /proc for every process: on every wake-up only when a
    // limit's classification depends on it (the rlimit fallbacks ask for a
    // short period), otherwise once per period. The payload alone is one task.
    let eager = (0..=10).contains(&sample_ms);
    if eager {
        peak.sample(tree);
    } else {
        peak.tasks = 1;
    }
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if ctl_open { ctl } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        match sys::poll(&mut fds, sample_ms) {
            Ok(0) => peak.sample(tree),
            Ok(_) if eager => peak.sample(tree),
            Ok(_) => {}
            // Should not happen; keep reaping without busy-looping.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
        if fds[0].revents != 0 {
            while let Ok(Some(si)) = sfd.read_signal() {
                let sig = si.ssi_signo as i32;
                if sig != libc::SIGCHLD {
                    let _ = sys::kill(child, sig);
                }
            }
            while let Ok(Some((pid, st))) = sys::waitpid(-1, true) {
                if pid == child {
                    return st;
                }
            }
        }
        if fds[1].revents != 0 {
            let mut buf = [0u8; 64];
            match sys::read(ctl, &mut buf) {
                Ok(0) | Err(_) => {
                    // The supervisor is gone (PDEATHSIG will follow).
                    ctl_open = false;
                    tree.kill_all(libc::SIGKILL);
                }
                Ok(n) => {
                    for &b in &buf[..n] {
                        // A FORWARD and its signal number may arrive in
                        // two reads: the stream has no record boundaries.
                        if forward_next {
                            forward_next = false;
                            let _ = sys::kill(child, b as i32);
                            continue;
                        }
                        match b {
                            proto::TERM_ALL => tree.kill_all(libc::SIGTERM),
                            proto::FORWARD => forward_next = true,
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

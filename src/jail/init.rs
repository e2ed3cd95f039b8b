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

/// Entry point of the cloned child. Never returns.
pub fn main(plan: &Plan, ctl: OwnedFd, rep: OwnedFd) -> ! {
    let rep_fd = rep.as_raw_fd();

    // Wait until the supervisor has written the id maps.
    let mut b = [0u8; 1];
    match sys::read(ctl.as_raw_fd(), &mut b) {
        Ok(1) if b[0] == proto::GO => {}
        _ => sys::exit_now(125),
    }

    if let Err(e) = caps::become_jail_user(plan.inner_uid, plan.inner_gid) {
        fail(rep_fd, "switch to jail user", "", &e.to_string());
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

    if let Err(e) = rootfs::build(plan) {
        fail(rep_fd, e.step, &e.path, &e.err.to_string());
    }
    if let Err(e) = sys::sethostname(&plan.hostname) {
        fail(rep_fd, "hostname", &plan.hostname, &e.to_string());
    }
    if plan.network == crate::policy::Network::None {
        if let Err(e) = sys::loopback_up() {
            fail(rep_fd, "network", "lo", &e.to_string());
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

    let child = match sys::fork() {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            drop(sfd);
            drop(ctl);
            payload::main(plan, rep)
        }
        Err(e) => fail(rep_fd, "fork payload", "", &e.to_string()),
    };

    let status = supervise(child, &sfd, ctl.as_raw_fd());
    // The payload is gone: nothing else in the jail outlives it.
    let _ = sys::kill(-1, libc::SIGKILL);
    while let Ok(Some(_)) = sys::waitpid(-1, false) {}
    report(rep_fd, &Report::Status(status));
    sys::exit_now(0)
}

/// Reap until the payload ends; return its raw wait status.
fn supervise(child: i32, sfd: &nix::sys::signalfd::SignalFd, ctl: RawFd) -> i32 {
    let mut ctl_open = true;
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
        if sys::poll(&mut fds, -1).is_err() {
            // Should not happen; keep reaping without busy-looping.
            std::thread::sleep(std::time::Duration::from_millis(10));
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
                    let _ = sys::kill(-1, libc::SIGKILL);
                }
                Ok(n) => {
                    let mut i = 0;
                    while i < n {
                        match buf[i] {
                            proto::TERM_ALL => {
                                let _ = sys::kill(-1, libc::SIGTERM);
                            }
                            proto::KILL_ALL => {
                                let _ = sys::kill(-1, libc::SIGKILL);
                            }
                            proto::FORWARD if i + 1 < n => {
                                let _ = sys::kill(child, buf[i + 1] as i32);
                                i += 1;
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                }
            }
        }
    }
}

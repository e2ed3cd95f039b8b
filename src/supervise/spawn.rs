//! Start the jail and wait for it.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use nix::sys::signal::Signal;

use super::namespaces;
use crate::jail::{self, proto};
use crate::outcome::{Outcome, Status, SCHEMA_VERSION};
use crate::plan::{Plan, SetupError};
use crate::sys::{self, Cloned, Errno};

fn setup_err(step: &str, path: &str, reason: impl Into<String>) -> SetupError {
    SetupError::new(step, path, reason)
}

/// Run the plan to completion. The caller must be single-threaded.
pub fn run(plan: &Plan) -> Outcome {
    let start = Instant::now();
    match run_inner(plan, start) {
        Ok(o) => o,
        Err(e) => {
            let mut o = Outcome::setup_error(&e);
            o.wall_time_ms = start.elapsed().as_millis() as u64;
            o
        }
    }
}

fn run_inner(plan: &Plan, start: Instant) -> Result<Outcome, SetupError> {
    let (ctl_rd, ctl_wr) = sys::pipe().map_err(|e| setup_err("pipe", "", e.to_string()))?;
    let (rep_rd, rep_wr) = sys::pipe().map_err(|e| setup_err("pipe", "", e.to_string()))?;

    let (cloned, _via) = match sys::clone_jail(plan.clone_flags, None) {
        Ok(c) => c,
        Err(e) => {
            let reason = if matches!(
                e.errno,
                Errno::EPERM | Errno::ENOSPC | Errno::EACCES | Errno::EINVAL
            ) {
                format!(
                    "{}; user namespaces refused: {}",
                    sys::errno_text(e.errno),
                    namespaces::userns_refusal_reasons(e.errno).join("; ")
                )
            } else {
                e.to_string()
            };
            return Err(setup_err("create namespaces", "", reason));
        }
    };
    let (pid, pidfd) = match cloned {
        Cloned::Child => {
            drop(ctl_wr);
            drop(rep_rd);
            jail::init::main(plan, ctl_rd, rep_wr)
        }
        Cloned::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(ctl_rd);
    drop(rep_wr);

    if let Err((path, e)) = namespaces::write_id_maps(pid, plan) {
        let _ = sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
        let _ = sys::wait4(pid);
        return Err(setup_err("id map", &path, e.to_string()));
    }
    sys::ignore_sigpipe();
    sys::write_all(ctl_wr.as_raw_fd(), &[proto::GO])
        .map_err(|e| setup_err("start jail", "", e.to_string()))?;

    let sfd = sys::signalfd_for(&[
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ])
    .map_err(|e| setup_err("signalfd", "", e.to_string()))?;

    let reports = wait_loop(&pidfd, &rep_rd, &ctl_wr, &sfd);
    let (st, ru) = sys::wait4(pid).map_err(|e| setup_err("wait", "", e.to_string()))?;
    let wall = start.elapsed();

    let mut o = Outcome {
        schema_version: SCHEMA_VERSION,
        status: Status::Exited,
        exit_code: 0,
        signal: None,
        error: None,
        wall_time_ms: wall.as_millis() as u64,
        user_time_ms: tv_ms(ru.ru_utime),
        system_time_ms: tv_ms(ru.ru_stime),
        max_rss_bytes: (ru.ru_maxrss as u64) * 1024,
    };
    let mut payload_status = None;
    for r in proto::decode(&reports) {
        match r {
            proto::Report::Setup { step, path, reason } => {
                o.status = Status::SetupError;
                o.exit_code = 125;
                o.error = Some(SetupError::new(step, path, reason).to_string());
                return Ok(o);
            }
            proto::Report::Exec { errno, path } => {
                let e = Errno::from_raw(errno);
                o.error = Some(SetupError::new("execve", path, sys::errno_text(e)).to_string());
            }
            proto::Report::Status(s) => payload_status = Some(s),
            proto::Report::Layer { .. } => {}
        }
    }
    let end = match payload_status {
        Some(s) => sys::ChildEnd::from_wait_status(s),
        // init itself died (killed from outside): report how.
        None => sys::ChildEnd::from_wait_status(st),
    };
    if let Some(sig) = end.signal {
        o.status = Status::Signaled;
        o.signal = Some(sig);
        o.exit_code = 128 + sig;
    } else {
        o.exit_code = end.code.unwrap_or(125);
        if payload_status.is_none() {
            o.status = Status::SetupError;
            if o.error.is_none() {
                o.error = Some(
                    SetupError::new(
                        "init",
                        "",
                        format!(
                            "jail init exited with {} before the payload ended",
                            o.exit_code
                        ),
                    )
                    .to_string(),
                );
            }
            o.exit_code = 125;
        }
    }
    Ok(o)
}

fn tv_ms(t: libc::timeval) -> u64 {
    (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000
}

/// Poll the jail until init exits; forward our signals; return what it reported.
fn wait_loop(
    pidfd: &OwnedFd,
    rep: &OwnedFd,
    ctl: &OwnedFd,
    sfd: &nix::sys::signalfd::SignalFd,
) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut rep_open = true;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if rep_open { rep.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if sys::poll(&mut fds, -1).is_err() {
            break;
        }
        if fds[1].revents != 0 {
            let mut chunk = [0u8; 4096];
            match sys::read(rep.as_raw_fd(), &mut chunk) {
                Ok(0) | Err(_) => rep_open = false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        if fds[2].revents != 0 {
            while let Ok(Some(si)) = sfd.read_signal() {
                let _ = sys::write_all(ctl.as_raw_fd(), &[proto::FORWARD, si.ssi_signo as u8]);
            }
        }
        if fds[0].revents != 0 {
            break;
        }
    }
    // init has exited; the pid namespace is gone, so the pipe reaches EOF.
    while rep_open {
        let mut chunk = [0u8; 4096];
        match sys::read(rep.as_raw_fd(), &mut chunk) {
            Ok(0) | Err(_) => rep_open = false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf
}

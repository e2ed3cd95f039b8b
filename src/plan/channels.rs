//! The plan's channels: the fds the run keeps, reads or writes besides
//! the supervisor's own pipes (the caller's kept fds, where the jail's pid
//! and each refusal are told, the block fd, the seccomp listener's
//! socket), and what becomes of the payload's output.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, RawFd};

use super::{Resources, SetupError};
use crate::policy::Policy;
use crate::sys;

/// The fds and pipes of a run.
#[derive(Debug, Clone)]
pub struct Channels {
    /// The caller's fds the payload keeps across execve.
    pub keep_fds: Vec<i32>,
    /// Where the supervisor tells the jail's pid (`Compat::pid_reports`).
    pub pid_reports: Vec<crate::policy::PidReport>,
    /// Read (one byte, or EOF) by the payload before seccomp and execve
    /// (`Compat::block_fd`).
    pub block_fd: Option<i32>,
    /// Where each refusal goes as a JSON line while the run goes on
    /// (`Policy::denials_fd`).
    pub denials_fd: Option<i32>,
    /// The payload's end of the supervisor's seccomp socket (learning and
    /// kill mode, mediation): the listener is sent over it. Held open in
    /// [`Resources::seccomp`].
    pub seccomp: Option<RawFd>,
    /// Pipe stdout/stderr through the supervisor (cap, capture, report).
    pub pipe_output: bool,
    /// Keep stdout and stderr in the outcome.
    pub capture: bool,
    /// stdout carries the JSON report: the payload's stdout goes only into it.
    pub stdout_in_report: bool,
}

impl Channels {
    /// The channels `p` asks for; no seccomp socket yet (see
    /// [`Channels::open_seccomp`]).
    pub(super) fn of(p: &Policy) -> Channels {
        let stdout_in_report = p.stdout_in_report;
        Channels {
            keep_fds: p.keep_fds.clone(),
            pid_reports: p.compat.pid_reports.clone(),
            block_fd: p.compat.block_fd,
            denials_fd: p.denials_fd,
            seccomp: None,
            pipe_output: p.capture || stdout_in_report || p.limits.max_output.is_some(),
            capture: p.capture || stdout_in_report,
            stdout_in_report,
        }
    }

    /// The socket pair the payload sends its seccomp listener over, when
    /// the filter `f` wants one.
    pub(super) fn open_seccomp(
        &mut self,
        f: Option<&crate::seccomp::Compiled>,
        res: &mut Resources,
    ) -> Result<(), SetupError> {
        if !f.is_some_and(|c| c.wants_listener()) {
            return Ok(());
        }
        let (ours, theirs) = sys::fdpass::socketpair(libc::SOCK_SEQPACKET)
            .map_err(|e| SetupError::sys("seccomp", "", &e))?;
        self.seccomp = Some(theirs.as_raw_fd());
        res.seccomp = Some((ours, theirs));
        Ok(())
    }
}

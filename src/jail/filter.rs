//! Install the compiled seccomp filter: the payload's last step before
//! execve (see `crate::seccomp` for what the filter is).

#![deny(unsafe_code)]

use std::os::fd::{IntoRawFd, RawFd};

use super::proto::{LayerRecord, SeccompApplied};
use crate::policy::SeccompAction;
use crate::seccomp::Compiled;
use crate::sys::{self, Errno, SysError, SysResult};

/// Install the filter in the calling (single-threaded) process;
/// no_new_privs must be set. With `channel` (the payload's end of the
/// supervisor's socket) and an action that wants a listener, the allowlist
/// is installed with a user-notification listener that is sent over
/// `channel` at once. Learning mode without a channel is an error; kill
/// mode without one kills with SIGSYS in the kernel.
///
/// Nothing but `sendmsg` and then `execve` may run after this in learning
/// or kill mode (both are always allowed).
pub fn install_with(c: &Compiled, channel: Option<RawFd>) -> SysResult<()> {
    let Some(ch) = channel.filter(|_| c.wants_listener()) else {
        if c.action == SeccompAction::Learn {
            return Err(SysError {
                call: "seccomp",
                arg: "learning mode without a supervisor channel".into(),
                errno: Errno::EINVAL,
            });
        }
        // Kill mode kills in the kernel; a mediated syscall without a
        // listener fails with ENOSYS.
        return sys::seccomp::install(&c.program(false), false).map(|_| ());
    };
    let installed = match sys::seccomp::install(&c.program(true), true) {
        // A filter above ours already has a listener (a container
        // runtime's, an outer jail's): one process tree gets one. Errno
        // and kill mode are then judged in the kernel alone; the
        // supervisor, hearing no listener, says refusals went unrecorded.
        Err(e) if e.errno == Errno::EBUSY && c.action != SeccompAction::Learn => {
            return sys::seccomp::install(&c.program(false), false).map(|_| ());
        }
        r => r?,
    };
    let Some(l) = installed else {
        return Err(SysError {
            call: "seccomp",
            arg: "NEW_LISTENER returned no fd".into(),
            errno: Errno::EINVAL,
        });
    };
    sys::fdpass::send_fd(ch, std::os::fd::AsRawFd::as_raw_fd(&l), b'L')?;
    // Keep the listener open: it is close-on-exec, and close(2) may not be
    // in the allowlist. execve closes it.
    let _ = l.into_raw_fd();
    Ok(())
}

/// What the outcome says of the filter.
pub fn record(c: &Compiled) -> LayerRecord {
    LayerRecord::Seccomp(SeccompApplied {
        action: c.action,
        allowed: c.allowed,
        groups: c.groups.clone(),
        instructions: c.len(),
    })
}

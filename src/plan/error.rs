//! The plan layer's error: a setup step that failed before (or, reported
//! by the jail, after) clone.

#![deny(unsafe_code)]

use crate::sys::{self, SysError};

/// A setup error: which step failed, on what path, why, the errno when
/// a system call gave one (or that names what the step refused), and what
/// else the step names ([`SetupError::value`]). Printed as
/// `<step>: <path>: <reason>` (or `<step>: <reason>` without a path); the
/// outcome's `error` is that text, its `setup` the parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError {
    step: String,
    path: String,
    reason: String,
    errno: Option<i32>,
    value: Option<String>,
}

/// The steps a front end tells apart by name (the bwrap front end says
/// each as bubblewrap does, `bwrap::words`); the others are named where
/// they run. `errno` and `value` are as each says.
pub mod step {
    /// clone with the jail's namespaces (the supervisor).
    pub const CREATE_NAMESPACES: &str = "create namespaces";
    /// setns into the caller's user namespace (the supervisor).
    pub const JOIN_USERNS: &str = "join user namespace";
    /// setns into the caller's pid namespace (the supervisor).
    pub const JOIN_PIDNS: &str = "join pid namespace";
    /// setns into the caller's user namespace under the jail's (init).
    pub const JOIN_INNER_USERNS: &str = "join inner user namespace";
    /// In a joined user namespace: setresgid, setresuid or the
    /// capabilities kept across them (init); `value` is what it switched
    /// to (`uid 1000`, `gid 0`, `capabilities 0`).
    pub const SWITCH_USER: &str = "switch to jail user";
    /// Open `/proc/sys/user/max_user_namespaces` (init; the path).
    pub const OPEN_USERNS_LIMIT: &str = "open userns limit";
    /// Write it (init; the path); `value` is the limit written.
    pub const SET_USERNS_LIMIT: &str = "set userns limit";
    /// A bind's mount point refused for what is there (init; the jail
    /// path): `ELOOP` a symlink, `EISDIR` a directory where the source is
    /// not one, `ENOTDIR` not a directory where the source is one.
    pub const MOUNT_POINT: &str = "mount point";
    /// A symlink where something else is already (init; the jail path,
    /// `EEXIST`); `value` is the symlink's target if a symlink is there.
    pub const SYMLINK_EXISTS: &str = "symlink destination";
    /// Open what a chmod changes (init; the jail path).
    pub const CHMOD_OPEN: &str = "open for chmod";
    /// The chmod itself (init; the jail path).
    pub const CHMOD: &str = "chmod";
    /// Open an overlay's upper or lower directory (init; the host path).
    pub const OVERLAY_SOURCE: &str = "overlay source";
    /// Open an overlay's work directory (init; the host path).
    pub const OVERLAY_WORKDIR: &str = "overlay workdir";
    /// Mount the overlay (init; the jail path); `value` is its options.
    pub const OVERLAY_MOUNT: &str = "overlay mount";
    /// Open a lock file (init; the jail path).
    pub const OPEN_LOCK_FILE: &str = "open lock file";
    /// Read-lock it (init; the jail path).
    pub const LOCK_FILE: &str = "lock file";
    /// The payload could still create a user namespace (no errno).
    pub const ASSERT_USERNS_DISABLED: &str = "assert userns disabled";
    /// The payload's working directory (the path).
    pub const CHDIR: &str = "chdir";
    /// execve of the command, for every candidate (the last path tried).
    pub const EXECVE: &str = "execve";
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.step, self.reason)
        } else {
            write!(f, "{}: {}: {}", self.step, self.path, self.reason)
        }
    }
}

impl std::error::Error for SetupError {}

impl SetupError {
    /// A setup error without an errno.
    pub fn new(
        step: impl Into<String>,
        path: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        SetupError {
            step: step.into(),
            path: path.into(),
            reason: reason.into(),
            errno: None,
            value: None,
        }
    }

    /// The same error, carrying the errno the kernel gave.
    pub fn with_errno(mut self, errno: i32) -> Self {
        self.errno = Some(errno);
        self
    }

    /// The same error, with what else its step names.
    pub fn with_value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// A failed system call as the reason (its text, its errno).
    pub(crate) fn sys(step: &str, path: &str, e: &SysError) -> Self {
        SetupError::new(step, path, e.to_string()).with_errno(e.errno as i32)
    }

    /// A failed I/O call as the reason (its text, its errno when it has one).
    pub(crate) fn io(step: &str, path: impl Into<String>, e: &std::io::Error) -> Self {
        let s = SetupError::new(step, path, e.to_string());
        match e.raw_os_error() {
            Some(n) => s.with_errno(n),
            None => s,
        }
    }

    /// An errno alone as the reason (`ENOENT: No such file or directory`).
    pub(crate) fn from_errno(step: &str, path: impl Into<String>, errno: sys::Errno) -> Self {
        SetupError::new(step, path, sys::errno_text(errno)).with_errno(errno as i32)
    }

    /// The step that failed (`bind`, `pivot_root`, `cgroup`, …).
    pub fn step(&self) -> &str {
        &self.step
    }

    /// The path it failed on; empty when the step has none.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Why, as printed.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The errno the kernel gave, when the failure was a system call's.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// What else the step names besides its path: a symlink's existing
    /// target, an overlay's options, the id switched to (see [`step`]).
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_parts() {
        let e = SetupError::new("bind", "/x", "ENOENT: No such file or directory")
            .with_errno(libc::ENOENT);
        assert_eq!(e.to_string(), "bind: /x: ENOENT: No such file or directory");
        assert_eq!(
            (e.step(), e.path(), e.errno()),
            ("bind", "/x", Some(libc::ENOENT))
        );
        let e = SetupError::new("seccomp", "", "bad");
        assert_eq!(e.to_string(), "seccomp: bad");
        assert_eq!(e.errno(), None);
        let e = SetupError::from_errno("bind", "/y", sys::Errno::EACCES);
        assert_eq!(e.reason(), sys::errno_text(sys::Errno::EACCES));
        assert_eq!(e.errno(), Some(libc::EACCES));
    }
}

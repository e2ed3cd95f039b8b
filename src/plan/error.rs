//! The plan layer's error: a setup step that failed before (or, reported
//! by the jail, after) clone.

#![deny(unsafe_code)]

use crate::sys::{self, SysError};

/// A setup error: which step failed, on what path, why, and the errno when
/// a system call gave one. Printed as `<step>: <path>: <reason>` (or
/// `<step>: <reason>` without a path); the outcome's `error` is that text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError {
    step: String,
    path: String,
    reason: String,
    errno: Option<i32>,
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
        }
    }

    /// The same error, carrying the errno the kernel gave.
    pub fn with_errno(mut self, errno: i32) -> Self {
        self.errno = Some(errno);
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

//! The error every call of the facade returns: which call, on what, and
//! the errno.

use std::fmt;

use super::Errno;

/// A failed system call: which call, on what, and the errno. The fields
/// are public: a caller matches on `errno` (and `call`) to decide, and
/// formats the whole only to show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysError {
    /// The system call, as its man page names it (`clone3`, `mount`).
    pub call: &'static str,
    /// What it was called on: a path, an fd, flags.
    pub arg: String,
    /// What the kernel answered.
    pub errno: Errno,
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}): {}", self.call, self.arg, errno_text(self.errno))
    }
}

impl std::error::Error for SysError {}

impl SysError {
    /// A call made through std that failed with `e` (EIO when it carries
    /// no errno).
    pub fn io(call: &'static str, arg: impl fmt::Display, e: &std::io::Error) -> SysError {
        SysError {
            call,
            arg: arg.to_string(),
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
}

/// `ENOENT: No such file or directory`.
pub fn errno_text(e: Errno) -> String {
    e.to_string()
}

/// An I/O error in C's strerror words, without Rust's ` (os error N)`
/// (the bwrap front end's messages quote them).
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// What every call of the facade returns.
pub type SysResult<T> = Result<T, SysError>;

pub(super) fn err<T>(call: &'static str, arg: impl fmt::Display, errno: Errno) -> SysResult<T> {
    Err(SysError {
        call,
        arg: arg.to_string(),
        errno,
    })
}

pub(super) fn last_errno() -> Errno {
    Errno::last()
}

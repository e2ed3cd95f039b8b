//! The jail layer's error: which step of the child side failed, on what
//! path, with which errno, and why. Its text (`Display`) is the reason
//! alone, in stockade's words, as the setup error record carries it after
//! the step, the path, the errno and the step's value (`JailError::setup`;
//! the supervisor prints `<step>: <path>: <reason>`, and a front end may
//! word the parts its own way).

#![deny(unsafe_code)]

use std::path::Path;

use super::proto::LandlockApplied;
use crate::plan::SetupError;
use crate::sys::{Errno, SysError, SysResult};

/// A step of the child side that failed (or, for [`JailError::ProcRefused`],
/// did not happen and did not stop the jail).
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// A system call of `step` failed on `path` ("" when none); `value`:
    /// what else the step names (see `plan::SetupError::value`).
    #[error("{err}")]
    Sys {
        step: &'static str,
        path: String,
        err: SysError,
        value: Option<String>,
    },
    /// `step` refused at `path`, for `why` (stockade's words).
    #[error("{why}")]
    Refused {
        step: &'static str,
        path: String,
        why: String,
    },
    /// What `step` found at `path` does not fit it (a symlink where a
    /// mount point goes, a file where a directory does, something where a
    /// symlink goes): `errno` names it (see `plan::step`), `value` is what
    /// else the step names (the symlink's target that is there), `why`
    /// says it.
    #[error("{why}")]
    Found {
        step: &'static str,
        path: String,
        errno: Errno,
        value: Option<String>,
        why: String,
    },
    /// Nothing to report: exit 125 without a record. The supervisor is gone
    /// (no go, its end of the control socket hung up), or init could not
    /// take the supervisor's output pipes as its stdout and stderr.
    #[error("{0}")]
    Silent(&'static str),
    /// `/` could not be opened for the Landlock rule that lets it be
    /// listed. (The kernel's refusals of the layer's calls are
    /// [`JailError::Sys`] of step "landlock".)
    #[error("landlock rule for /: open: {0}")]
    LandlockOpenRoot(std::io::Error),
    /// Landlock is required (`--require landlock`) and the kernel enforced
    /// less than the policy: the status and the layer's whole detail.
    #[error("required but {}: {}", .0.status.name(), .0.to_json())]
    LandlockWeak(Box<LandlockApplied>),
    /// The kernel refused a new proc mount (EPERM, EACCES): /proc is left
    /// empty and the jail goes on.
    #[error("{0}: the kernel refuses a new proc mount where the caller's /proc is partly masked (a container runtime's masked paths); /proc is left empty")]
    ProcRefused(SysError),
}

impl JailError {
    /// The same error, with what else its step names.
    pub fn with_value(mut self, v: impl Into<String>) -> Self {
        if let JailError::Sys { value, .. } | JailError::Found { value, .. } = &mut self {
            *value = Some(v.into());
        }
        self
    }

    /// The step, as the setup error names it.
    pub fn step(&self) -> &str {
        match self {
            JailError::Sys { step, .. }
            | JailError::Refused { step, .. }
            | JailError::Found { step, .. } => step,
            JailError::Silent(_) => "",
            JailError::ProcRefused(_) => "proc",
            _ => "landlock",
        }
    }

    /// The path the step worked on ("" when none).
    pub fn path(&self) -> &str {
        match self {
            JailError::Sys { path, .. }
            | JailError::Refused { path, .. }
            | JailError::Found { path, .. } => path,
            _ => "",
        }
    }

    /// The errno of the failed call, or the one naming what was refused.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            JailError::Sys { err, .. } | JailError::ProcRefused(err) => Some(err.errno),
            JailError::Found { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The setup error this is, in parts (its text is the reason).
    pub fn setup(&self) -> SetupError {
        let mut e = SetupError::new(self.step(), self.path(), self.to_string());
        if let Some(n) = self.errno() {
            e = e.with_errno(n as i32);
        }
        match self {
            JailError::Sys { value: Some(v), .. } | JailError::Found { value: Some(v), .. } => {
                e.with_value(v.as_str())
            }
            _ => e,
        }
    }
}

/// Name the step (and the path it worked on) of a failed system call. The
/// path is formatted only when the call failed.
pub trait Step<T> {
    fn step(self, step: &'static str, path: impl AsRef<Path>) -> Result<T, JailError>;
}

impl<T> Step<T> for SysResult<T> {
    fn step(self, step: &'static str, path: impl AsRef<Path>) -> Result<T, JailError> {
        self.map_err(|err| JailError::Sys {
            step,
            path: path.as_ref().display().to_string(),
            err,
            value: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_the_reason_and_step_path_travel_beside_it() {
        let err = SysError {
            call: "sethostname",
            arg: "jail".into(),
            errno: Errno::EPERM,
        };
        let text = err.to_string();
        let e: Result<(), _> = Err(err).step("hostname", "jail");
        let e = e.unwrap_err();
        assert_eq!((e.step(), e.path()), ("hostname", "jail"));
        assert_eq!(e.to_string(), text);
        let s = e.setup();
        assert_eq!((s.errno(), s.value()), (Some(libc::EPERM), None));
        let e = JailError::Found {
            step: "symlink destination",
            path: "/l".into(),
            errno: Errno::EEXIST,
            value: Some("/usr".into()),
            why: "a symlink to /usr is there".into(),
        };
        let s = e.setup();
        assert_eq!(
            (s.step(), s.path(), s.errno(), s.value(), s.reason()),
            (
                "symlink destination",
                "/l",
                Some(libc::EEXIST),
                Some("/usr"),
                "a symlink to /usr is there"
            )
        );
        let e = JailError::LandlockOpenRoot(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.step(), "landlock");
        assert!(e
            .to_string()
            .starts_with("landlock rule for /: open: No such file"));
    }
}

//! The jail layer's error: which step of the child side failed, on what
//! path, and why. Its text (`Display`) is the reason alone, exactly as the
//! setup error record carries it after the step and the path (the
//! supervisor prints `<step>: <path>: <reason>`).

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use landlock::RulesetError;

use super::proto::LandlockApplied;
use crate::sys::{SysError, SysResult};

/// A step of the child side that failed (or, for [`JailError::ProcRefused`],
/// did not happen and did not stop the jail).
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// A system call of `step` failed on `path` ("" when none).
    #[error("{err}")]
    Sys {
        step: &'static str,
        path: String,
        err: SysError,
    },
    /// `step` refused what it found at `path` (a symlink where a mount
    /// point goes, a file where a directory does): `why`, in bubblewrap's
    /// words, naming the path.
    #[error("{why}")]
    Refused {
        step: &'static str,
        path: String,
        why: String,
    },
    /// Nothing to report: exit 125 without a record. The supervisor is gone
    /// (no go, its end of the control socket hung up), or init could not
    /// take the supervisor's output pipes as its stdout and stderr.
    #[error("{0}")]
    Silent(&'static str),
    #[error("landlock handle fs access: {0}")]
    LandlockHandleFs(RulesetError),
    #[error("landlock handle net access: {0}")]
    LandlockHandleNet(RulesetError),
    #[error("landlock scope: {0}")]
    LandlockScope(RulesetError),
    #[error("landlock_create_ruleset: {0}")]
    LandlockCreate(RulesetError),
    #[error("landlock_add_rule({}): {err}", path.display())]
    LandlockAddRule { path: PathBuf, err: RulesetError },
    #[error("landlock rule for /: open: {0}")]
    LandlockOpenRoot(std::io::Error),
    #[error("landlock_restrict_self: {0}")]
    LandlockRestrict(RulesetError),
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
    /// The step, as the setup error names it.
    pub fn step(&self) -> &str {
        match self {
            JailError::Sys { step, .. } | JailError::Refused { step, .. } => step,
            JailError::Silent(_) => "",
            JailError::ProcRefused(_) => "proc",
            _ => "landlock",
        }
    }

    /// The path the step worked on ("" when none).
    pub fn path(&self) -> &str {
        match self {
            JailError::Sys { path, .. } | JailError::Refused { path, .. } => path,
            _ => "",
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::Errno;

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
        let e = JailError::LandlockOpenRoot(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.step(), "landlock");
        assert!(e
            .to_string()
            .starts_with("landlock rule for /: open: No such file"));
    }
}

//! Why a probe of `stockade check` failed. The text of each variant is the
//! reason the report shows.

use std::io;

use crate::sys::{self, Errno, SysError};

/// A probe that failed: the call that did, or the step it never reached.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A call of the probe (pipe, clone, fork, waitpid) or of its child
    /// (the mounts) failed.
    #[error("{0}")]
    Sys(#[from] SysError),
    /// Not tried: the probe could not even be set up.
    #[error("not tried")]
    NotTried,
    /// Not tried: /proc is mounted inside the user namespace that could not
    /// be made.
    #[error("not tried: needs a user namespace")]
    NeedsUserns,
    /// Not tried: the child's id maps could not be written.
    #[error("not tried: the id map failed")]
    NeedsIdMap,
    /// Writing the child's setgroups, uid_map or gid_map failed.
    #[error("writing /proc/{pid}/uid_map: {source}")]
    IdMap {
        pid: i32,
        #[source]
        source: io::Error,
    },
    /// The child wrote no answer (or one that could not be read).
    #[error("the probe child died before answering")]
    NoAnswer,
    /// Installing an allow-everything seccomp filter failed with this errno.
    #[error("seccomp(SECCOMP_SET_MODE_FILTER): {}", sys::errno_text(*.0))]
    SeccompFilter(Errno),
    /// The child was killed instead of exiting.
    #[error("the probe child ended abnormally")]
    Abnormal,
}

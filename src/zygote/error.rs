//! Why a fork server could not start, or could not start a run.

use std::fmt;

use crate::outcome::Status;
use crate::sys;

#[derive(Debug)]
pub enum ForkError {
    /// A kernel call for the run's channels (a pipe, a socket pair).
    Sys(sys::SysError),
    /// No cgroup holds one of a run's limits here (each child's memory
    /// and pids are its own cgroup's): the limit, and what holds it.
    Unheld {
        limit: &'static str,
        held_by: String,
    },
    /// The template's plan could not be made.
    Plan(crate::plan::SetupError),
    /// The template asks what no fork server can give its children.
    Template(&'static str),
    /// The zygote's jail could not be started.
    Spawn(crate::Error),
    /// The zygote's first child could not be confined (its words).
    FirstChild(String),
    /// The zygote did not say it was ready: how its jail ended.
    NotReady {
        status: Status,
        exit_code: i32,
        error: Option<String>,
    },
    /// The zygote could not fork (its words).
    Refused(String),
    /// The zygote went away.
    Gone,
    /// The child forked ahead ended before it was confined (its zygote
    /// went away meanwhile).
    ChildEnded,
    /// The child's pid in this pid namespace is unknown.
    ChildPid,
    /// The child could not be moved into its run cgroup.
    Move(String),
}

impl fmt::Display for ForkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForkError::Sys(e) => write!(f, "{e}"),
            ForkError::Unheld { limit, held_by } => {
                write!(f, "no cgroup holds a run's {limit} limit here ({held_by})")
            }
            ForkError::Plan(e) => write!(f, "the template's plan: {e}"),
            ForkError::Template(why) => f.write_str(why),
            ForkError::Spawn(e) => write!(f, "{e}"),
            ForkError::FirstChild(w) => write!(f, "its first child could not be confined: {w}"),
            ForkError::NotReady {
                status,
                exit_code,
                error,
            } => {
                write!(
                    f,
                    "the zygote was not ready: status {status:?}, exit code {exit_code}"
                )?;
                match error {
                    Some(e) => write!(f, ": {e}"),
                    None => Ok(()),
                }
            }
            ForkError::Refused(w) => write!(f, "the zygote could not fork: {w}"),
            ForkError::Gone => f.write_str("the zygote went away"),
            ForkError::ChildEnded => f.write_str(
                "the child forked ahead ended before it was confined (its zygote went away?)",
            ),
            ForkError::ChildPid => f.write_str("the child's pid is unknown"),
            ForkError::Move(why) => write!(f, "moving the child into its cgroup: {why}"),
        }
    }
}

impl std::error::Error for ForkError {}

impl From<sys::SysError> for ForkError {
    fn from(e: sys::SysError) -> ForkError {
        ForkError::Sys(e)
    }
}

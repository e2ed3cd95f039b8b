//! The policy layer's errors: what was refused, where it came from, and
//! why, as one line of text.

use std::path::PathBuf;

use super::{profile, python, units};

/// A value refused while building a policy. Its text is one line, where
/// the value came from and why: `--memory: "12q" is not a size (…)`, or
/// `profiles/x.toml:4:12: limits.memory: …` for a profile's field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A value from a command-line flag, a builder method or a policy
    /// field, which `origin` names (`--memory`, `memory`, `limits.memory`).
    #[error("{origin}: {reason}")]
    Value { origin: String, reason: Reason },
    /// A value in a profile file: `at` is `file:line:column`, `field` the
    /// dotted field (`limits.memory`).
    #[error("{at}: {field}: {reason}")]
    Field {
        at: String,
        field: String,
        reason: Reason,
    },
}

impl PolicyError {
    /// A refused value, said in words.
    pub fn new(origin: impl Into<String>, msg: impl Into<String>) -> Self {
        PolicyError::value(origin, Reason::Other(msg.into()))
    }

    /// A refused value and the reason (a [`Reason`] or what converts to one).
    pub fn value(origin: impl Into<String>, reason: impl Into<Reason>) -> Self {
        PolicyError::Value {
            origin: origin.into(),
            reason: reason.into(),
        }
    }

    /// Where the value came from: the flag, method or field, or a
    /// profile's `file:line:column`.
    pub fn origin(&self) -> &str {
        match self {
            PolicyError::Value { origin, .. } => origin,
            PolicyError::Field { at, .. } => at,
        }
    }

    /// Why it was refused.
    pub fn reason(&self) -> &Reason {
        match self {
            PolicyError::Value { reason, .. } | PolicyError::Field { reason, .. } => reason,
        }
    }
}

/// Why a value was refused (the text after its origin).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Reason {
    /// A size, duration, count, CPU quota or id range.
    #[error("{0}")]
    Unit(#[from] units::UnitError),
    /// A path inside the jail or on the host.
    #[error("{0}")]
    Path(#[from] PathError),
    /// `--profile ""`.
    #[error("empty profile name")]
    EmptyProfileName,
    /// Neither a built-in profile nor a path to a file.
    #[error(
        "{name:?}: no such profile (built-in: {}; or give a path to a .toml file)",
        profile::builtin_names()
    )]
    UnknownProfile { name: String },
    /// A profile file that cannot be read: `why` is the system's word
    /// (`no such file`, `permission denied`, …).
    #[error("{}: cannot read profile: {why}", .path.display())]
    ProfileUnreadable {
        path: PathBuf,
        kind: std::io::ErrorKind,
        why: String,
    },
    #[error("{}: not UTF-8 text", .path.display())]
    ProfileNotUtf8 { path: PathBuf },
    /// The TOML parser's own complaint, in the profile's words.
    #[error("{0}")]
    Toml(String),
    /// The Python interpreter could not be found or asked about itself.
    #[error("{0}")]
    Python(#[from] python::PythonError),
    /// An unknown syscall or seccomp group.
    #[error("{0}")]
    Seccomp(String),
    /// Anything else, in words.
    #[error("{0}")]
    Other(String),
}

impl From<String> for Reason {
    fn from(s: String) -> Reason {
        Reason::Other(s)
    }
}

impl From<&str> for Reason {
    fn from(s: &str) -> Reason {
        Reason::Other(s.to_string())
    }
}

/// A path that cannot be used as the jail needs it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    #[error("{}: path inside the jail must be absolute", .0.display())]
    NotAbsolute(PathBuf),
    #[error("{}: `..` is not allowed in a jail path", .0.display())]
    ParentDir(PathBuf),
    #[error("path too long")]
    TooLong,
    #[error("empty path")]
    Empty,
    #[error("path contains a NUL byte")]
    Nul,
    /// A relative host path, and the current directory cannot be read.
    #[error("cannot read the current directory: {0}")]
    NoCurrentDir(String),
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error(
        "{}: no such {}",
        .path.display(),
        if *.dir { "directory" } else { "file or directory" }
    )]
    Missing { path: PathBuf, dir: bool },
    /// Any other reason the host path cannot be reached.
    #[error("{}: {why}", .path.display())]
    Unreachable { path: PathBuf, why: String },
}

//! What can go wrong in the cgroup layer. Each variant's text is the one
//! line the outcome and `stockade check` show (a limit's `unavailable`
//! reason, the layer's why).

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::sys::{self, Errno};

/// A cgroup (or its hierarchy, or the base to make it in) that could not be
/// found, made or removed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Reading, opening, making or removing a file or directory failed.
    #[error("{op} {}: {}", path.display(), io_text(source))]
    File {
        op: FileOp,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing a value to a cgroupfs file failed.
    #[error("write {value:?} to {}: {}", path.display(), io_text(source))]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    /// Enabling a controller was refused with EBUSY: `dir` holds processes.
    #[error("{source} (no-internal-processes rule: {} holds processes)", dir.display())]
    InternalProcesses {
        dir: PathBuf,
        #[source]
        source: Box<CgroupError>,
    },
    /// /proc/self/mountinfo has no cgroup2 line.
    #[error("no cgroup v2 hierarchy mounted (no cgroup2 line in /proc/self/mountinfo)")]
    NoHierarchy,
    /// /proc/self/cgroup has no `0::` line.
    #[error("no unified-hierarchy (0::) line in /proc/self/cgroup")]
    NoOwnCgroup,
    /// Our cgroup is outside what the cgroup2 mount shows.
    #[error(
        "our cgroup {cgroup} is not visible under the cgroup2 mount at {} (mount root {root})",
        mountpoint.display()
    )]
    NotVisible {
        cgroup: String,
        mountpoint: PathBuf,
        root: String,
    },
    /// No candidate base can hold the run cgroups; each one tried, and why.
    #[error(
        "no cgroup usable by uid {euid} (tried {}); delegate one (systemd Delegate=yes, or chown a \
         cgroup and its cgroup.procs, cgroup.subtree_control, cgroup.threads) and run stockade \
         in a child of it",
        Tried(tried)
    )]
    NoUsableBase {
        euid: u32,
        tried: Vec<(PathBuf, Unusable)>,
    },
    /// The hierarchy lacks the controller (`v1`: where it is bound instead).
    #[error(
        "no {controller} controller in the cgroup v2 hierarchy at {}{}",
        hierarchy.display(),
        BoundToV1(v1)
    )]
    NoController {
        controller: &'static str,
        hierarchy: PathBuf,
        v1: Option<PathBuf>,
    },
    /// A limit asked of a run cgroup made without its controller (a
    /// jail built ahead of its run, asked a limit of its own).
    #[error("no group of the run cgroup {} holds the {limit} limit", cgroup.display())]
    NotHeld {
        limit: &'static str,
        cgroup: PathBuf,
    },
    /// The base's parent does not delegate the controller to it.
    #[error(
        "the {controller} controller is not delegated to {}: missing from its \
         cgroup.controllers (enable it in the parent's cgroup.subtree_control)",
        base.display()
    )]
    NotDelegated {
        controller: &'static str,
        base: PathBuf,
    },
}

impl CgroupError {
    /// The errno of the failed call, when one failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            CgroupError::File { source, .. } | CgroupError::Write { source, .. } => {
                source.raw_os_error().map(Errno::from_raw)
            }
            CgroupError::InternalProcesses { source, .. } => source.errno(),
            _ => None,
        }
    }
}

/// Why a candidate base cgroup cannot hold the run cgroups.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("directory not writable")]
    DirectoryNotWritable,
    #[error("cgroup.procs not writable")]
    ProcsNotWritable,
    #[error("holds processes")]
    HoldsProcesses,
    #[error("read cgroup.procs: {}", io_text(.0))]
    ReadProcs(#[source] io::Error),
    /// The cgroup we run in (never a candidate).
    #[error("our own cgroup, holds our processes")]
    OwnCgroup,
}

/// The file operation of [`CgroupError::File`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    Read,
    Open,
    Mkdir,
    Rmdir,
    Chown,
}

impl fmt::Display for FileOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileOp::Read => "read",
            FileOp::Open => "open",
            FileOp::Mkdir => "mkdir",
            FileOp::Rmdir => "rmdir",
            FileOp::Chown => "chown",
        })
    }
}

/// `EACCES: Permission denied` for an errno, else the io::Error's text.
pub(super) fn io_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => sys::errno_text(Errno::from_raw(n)),
        None => e.to_string(),
    }
}

/// `<path>: <why>; …`
struct Tried<'a>(&'a [(PathBuf, Unusable)]);

impl fmt::Display for Tried<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (p, why)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {why}", p.display())?;
        }
        Ok(())
    }
}

/// ` (it is bound to the cgroup v1 hierarchy at …)`, or nothing.
struct BoundToV1<'a>(&'a Option<PathBuf>);

impl fmt::Display for BoundToV1<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(m) => write!(
                f,
                " (it is bound to the cgroup v1 hierarchy at {})",
                m.display()
            ),
            None => Ok(()),
        }
    }
}

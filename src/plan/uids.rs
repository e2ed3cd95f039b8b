//! Host uids for the fallback started by root: each jail gets its own.
//!
//! Without a user namespace RLIMIT_NPROC counts every process of a real uid
//! on the host, and signals and /proc are guarded by uid alone. Were every
//! jail to run as 65534, one jail's processes would use up another's
//! `--pids-limit`, and jails could signal each other. So each root-started
//! fallback jail leases one id (used as both uid and gid) from
//! `--uid-range`:
//!
//! - an id is taken only when no account names it (/etc/passwd,
//!   /etc/group), no subordinate range holds it (/etc/subuid, /etc/subgid),
//!   and no process on the host has it as a real, effective, saved or
//!   filesystem uid or gid;
//! - the lease is an exclusive flock(2) on `/run/stockade/uids/<id>`, held
//!   by the supervisor for the run: concurrent stockades never share an
//!   id, and a crashed one lets go of it with its last fd. The file is
//!   removed (still locked) when the run ends.

#![deny(unsafe_code)]

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// Why no id could be leased.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lock directory (or its parent) could not be made or read.
    #[error("{}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The lock directory is not root's alone.
    #[error("{}: must be a directory owned by root and writable by no one else", path.display())]
    DirUnsafe { path: PathBuf },
    /// An id's lock file could not be opened.
    #[error("{}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// flock(2) on an id's lock file failed (not because it is held).
    #[error("flock({}): {errno}", path.display())]
    Lock {
        path: PathBuf,
        errno: nix::errno::Errno,
    },
    /// Every id of the range is taken.
    #[error("no free id in {start}:{count} (every one is leased by another stockade, named in /etc/passwd, /etc/group, /etc/subuid or /etc/subgid, or used by a process)")]
    Exhausted { start: u32, count: u32 },
}

impl LeaseError {
    /// The errno behind it, when a system call failed.
    pub fn errno(&self) -> Option<i32> {
        match self {
            LeaseError::Dir { source, .. } | LeaseError::Open { source, .. } => {
                source.raw_os_error()
            }
            LeaseError::Lock { errno, .. } => Some(*errno as i32),
            LeaseError::DirUnsafe { .. } | LeaseError::Exhausted { .. } => None,
        }
    }
}

/// One leased id; released (file removed, lock dropped) on drop.
pub struct Lease {
    pub id: u32,
    path: PathBuf,
    _lock: Flock<File>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Removed while still locked: whoever opens the name later gets a
        // fresh file, and a waiter on the old one sees it is stale (inode
        // check in `try_lock`).
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The directory of the lock files: root's, writable by nobody else.
fn lock_dir() -> Result<PathBuf, LeaseError> {
    let run = Path::new("/run");
    let (parent, dir) = if run.is_dir() {
        (run.join("stockade"), run.join("stockade/uids"))
    } else {
        (
            PathBuf::from("/tmp/.stockade"),
            PathBuf::from("/tmp/.stockade/uids"),
        )
    };
    for (d, mode) in [(&parent, 0o755), (&dir, 0o700)] {
        match std::fs::DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(LeaseError::Dir {
                    path: d.clone(),
                    source,
                })
            }
        }
        let m = std::fs::symlink_metadata(d).map_err(|source| LeaseError::Dir {
            path: d.clone(),
            source,
        })?;
        if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
            return Err(LeaseError::DirUnsafe { path: d.clone() });
        }
    }
    Ok(dir)
}

/// Ids that are not free: named by an account or a subordinate range, or
/// held by a running process.
#[derive(Default)]
struct Busy {
    ids: HashSet<u32>,
    ranges: Vec<(u64, u64)>,
}

impl Busy {
    fn contains(&self, id: u32) -> bool {
        let i = u64::from(id);
        self.ids.contains(&id) || self.ranges.iter().any(|(a, n)| i >= *a && i < a + n)
    }

    fn scan() -> Busy {
        let mut b = Busy::default();
        for (file, field) in [("/etc/passwd", 2), ("/etc/group", 2)] {
            if let Ok(t) = std::fs::read_to_string(file) {
                b.ids.extend(
                    t.lines()
                        .filter_map(|l| l.split(':').nth(field)?.parse::<u32>().ok()),
                );
            }
        }
        for file in ["/etc/subuid", "/etc/subgid"] {
            if let Ok(t) = std::fs::read_to_string(file) {
                b.ranges.extend(t.lines().filter_map(|l| {
                    let mut f = l.split(':').skip(1);
                    Some((
                        f.next()?.trim().parse().ok()?,
                        f.next()?.trim().parse().ok()?,
                    ))
                }));
            }
        }
        b.ids.extend(process_ids());
        b
    }
}

/// Every uid and gid (real, effective, saved, filesystem) of every process
/// on the host.
fn process_ids() -> HashSet<u32> {
    let mut ids = HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return ids;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|c| c.is_ascii_digit()))
        {
            continue;
        }
        let Ok(st) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        for line in st.lines() {
            if let Some(v) = line
                .strip_prefix("Uid:")
                .or_else(|| line.strip_prefix("Gid:"))
            {
                ids.extend(v.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    ids
}

/// Lock `dir/<id>` if nobody holds it.
fn try_lock(dir: &Path, id: u32) -> Result<Option<Lease>, LeaseError> {
    let path = dir.join(id.to_string());
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path);
    let f = match f {
        Ok(f) => f,
        Err(source) => return Err(LeaseError::Open { path, source }),
    };
    let lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
        Err((_, errno)) => return Err(LeaseError::Lock { path, errno }),
    };
    // The holder before us may have removed the name after we opened it:
    // then our lock is on a file nobody else will look at.
    let ours = lock.metadata().map(|m| m.ino()).ok();
    let now = std::fs::symlink_metadata(&path).map(|m| m.ino()).ok();
    if ours.is_none() || ours != now {
        return Ok(None);
    }
    Ok(Some(Lease {
        id,
        path,
        _lock: lock,
    }))
}

/// Lease a free id from `(start, count)`. Probing starts at an offset
/// derived from our pid and the clock, so concurrent stockades rarely
/// try the same id first.
pub fn lease(range: (u32, u32)) -> Result<Lease, LeaseError> {
    let (start, count) = range;
    let dir = lock_dir()?;
    let busy = Busy::scan();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let n = u64::from(count);
    let offset = (u64::from(std::process::id()).wrapping_mul(2_654_435_761) ^ u64::from(nanos)) % n;
    for i in 0..n {
        let id = (u64::from(start) + (offset + i) % n) as u32;
        if busy.contains(id) {
            continue;
        }
        if let Some(l) = try_lock(&dir, id)? {
            return Ok(l);
        }
    }
    Err(LeaseError::Exhausted { start, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ranges_and_ids() {
        let b = Busy {
            ids: [7u32].into_iter().collect(),
            ranges: vec![(100_000, 65_536)],
        };
        assert!(b.contains(7) && b.contains(100_000) && b.contains(165_535));
        assert!(!b.contains(8) && !b.contains(99_999) && !b.contains(165_536));
    }

    #[test]
    fn our_own_ids_are_busy() {
        let ids = process_ids();
        assert!(ids.contains(&crate::sys::getuid()));
    }
}

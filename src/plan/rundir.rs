//! The fallback's private run directory ($HOME and $TMPDIR of a payload
//! that runs without namespaces): made and locked for the run, capped by a
//! tmpfs of `--tmp-size` where one can be mounted, removed after the run.
//!
//! Started by root with CAP_SYS_ADMIN, the plan mounts a size-capped tmpfs
//! on the directory: the kernel refuses writes past the cap (ENOSPC).
//! Without a mount namespace that mount is visible on the host, so it is
//! detached after the run, and mounts left by a stockade that was killed
//! are detached by the next run. Otherwise the supervisor meters the
//! directory (supervise::rundir).

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::SetupError;
use crate::sys::{self, SysError};

/// Prefix of a run directory's name.
pub const PREFIX: &str = "stockade-run-";

/// The run directory, removed (its tmpfs detached first) when dropped in
/// the process that made it: after the run, or when the plan's build fails
/// after it was made.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    /// A tmpfs is mounted on it.
    tmpfs: bool,
    owner: i32,
    /// Removed already (by [`RunDir::remove`]).
    removed: bool,
}

impl RunDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Mount a tmpfs of `size` bytes on it (see [`mount_tmpfs`]).
    pub(super) fn mount_tmpfs(
        &mut self,
        size: u64,
        owner: Option<(u32, u32)>,
    ) -> Result<(), TmpfsError> {
        mount_tmpfs(&self.path, size, owner)?;
        self.tmpfs = true;
        Ok(())
    }

    /// Remove it now (after the run): the warning for the outcome when its
    /// tmpfs could not be detached.
    pub fn remove(mut self) -> Option<String> {
        if sys::getpid() != self.owner {
            return None;
        }
        self.removed = true;
        remove(&self.path, self.tmpfs)
    }
}

impl Drop for RunDir {
    /// A run directory not removed by [`RunDir::remove`] (the plan's build
    /// failed after making it): no outcome to carry the warning, so it
    /// goes to stderr.
    fn drop(&mut self) {
        if !self.removed && sys::getpid() == self.owner {
            if let Some(w) = remove(&self.path, self.tmpfs) {
                eprintln!("stockade: warning: {w}");
            }
        }
    }
}

/// Why no tmpfs could be mounted on the run directory.
#[derive(Debug, thiserror::Error)]
pub enum TmpfsError {
    #[error("stockade is not root, and without a mount namespace only root can mount a tmpfs")]
    NotRoot,
    /// The kernel reads size=0 as "no limit".
    #[error("--tmp-size 0: a tmpfs of size 0 has no limit")]
    NoLimit,
    #[error("{0} (no CAP_SYS_ADMIN, as in a default container)")]
    NoCapSysAdmin(SysError),
    #[error("{0}")]
    Mount(SysError),
}

/// Open a directory to lock it (no symlink followed).
fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map(OwnedFd::from)
}

/// Remove the run directories under `base` that no run uses any more:
/// left behind when stockade was killed. A run holds a lock on its
/// directory for its whole life (the supervisor, and init, which outlives
/// a killed supervisor while it kills the jail). The process named in the
/// directory's name must be gone too: it has not locked the directory yet
/// between mkdir and flock, and an older stockade never does.
fn remove_stale_dirs(base: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(dir) = std::fs::read_dir(base) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|r| r.split('-').next())
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let path = e.path();
        let Ok(fd) = open_dir(&path) else { continue };
        if sys::try_lock_exclusive(&fd) == Ok(true) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Create the fallback's private per-run directory (0700, owned by the
/// payload's user), locked for the run's life (see
/// [`remove_stale_dirs`], which runs first).
pub(super) fn make(owner: Option<(u32, u32)>) -> Result<(RunDir, OwnedFd), SetupError> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let base = std::fs::canonicalize(&base)
        .map_err(|e| SetupError::io("run directory", base.display().to_string(), &e))?;
    remove_stale_dirs(&base);
    for n in 0..1000u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = base.join(format!("{PREFIX}{}-{:08x}{n}", std::process::id(), nanos));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                // Removed again when a step below fails.
                let dir = RunDir {
                    path,
                    tmpfs: false,
                    owner: sys::getpid(),
                    removed: false,
                };
                let lock = lock_new(&dir.path, owner)?;
                return Ok((dir, lock));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(SetupError::io(
                    "run directory",
                    path.display().to_string(),
                    &e,
                ))
            }
        }
    }
    Err(SetupError::new(
        "run directory",
        base.display().to_string(),
        "could not create a unique directory",
    ))
}

/// Lock the directory just made, then make it 0700 and the payload's.
fn lock_new(dir: &Path, owner: Option<(u32, u32)>) -> Result<OwnedFd, SetupError> {
    use std::os::unix::fs::PermissionsExt;
    let name = || dir.display().to_string();
    let lock = open_dir(dir).map_err(|e| SetupError::io("run directory", name(), &e))?;
    match sys::try_lock_exclusive(&lock) {
        Ok(true) => {}
        Ok(false) => {
            return Err(SetupError::new(
                "run directory",
                name(),
                "locked by another process",
            ))
        }
        Err(e) => return Err(SetupError::sys("run directory", &name(), &e)),
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Some((u, g)) = owner {
        std::os::unix::fs::chown(dir, Some(u), Some(g))
            .map_err(|e| SetupError::io("run directory", name(), &e))?;
    }
    Ok(lock)
}

/// Mount a tmpfs of `size` bytes on `dir` (mode 0700, owned by `owner`).
/// `Err` says why none could be mounted.
fn mount_tmpfs(dir: &Path, size: u64, owner: Option<(u32, u32)>) -> Result<(), TmpfsError> {
    if sys::geteuid() != 0 {
        return Err(TmpfsError::NotRoot);
    }
    if size == 0 {
        return Err(TmpfsError::NoLimit);
    }
    let (uid, gid) = owner.unwrap_or((0, 0));
    let data = format!("size={size},mode=700,uid={uid},gid={gid}");
    sys::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )
    .map_err(|e| {
        if e.errno == sys::Errno::EPERM {
            TmpfsError::NoCapSysAdmin(e)
        } else {
            TmpfsError::Mount(e)
        }
    })
}

/// Remove the run directory, detaching its tmpfs first when one is
/// mounted; the warning when it could not be detached.
fn remove(dir: &Path, mounted: bool) -> Option<String> {
    let mut warning = None;
    if mounted {
        if let Err(e) = sys::umount_detach(dir) {
            warning = Some(format!("run directory's tmpfs not detached: {e}"));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    warning
}

/// Detach and remove the tmpfs run directories whose stockade is gone (it
/// was killed before it could): a tmpfs mounted on a directory named
/// `stockade-run-PID-…` where no process PID exists. A directory whose PID
/// is alive (that run, or a process that reused the number) is left alone.
pub fn cleanup_stale() {
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return;
    };
    for line in info.split(|b| *b == b'\n') {
        let Some(dir) = stale_mount(line) else {
            continue;
        };
        if sys::umount_detach(&dir).is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The mount point of one /proc/self/mountinfo line when it is a run
/// directory's tmpfs whose stockade is gone.
fn stale_mount(line: &[u8]) -> Option<PathBuf> {
    let text = std::str::from_utf8(line).ok()?;
    let (left, right) = text.split_once(" - ")?;
    if right.split(' ').next()? != "tmpfs" {
        return None;
    }
    let point = sys::mountinfo_path(left.split(' ').nth(4)?);
    let name = point.file_name()?.to_str()?;
    let pid: u32 = name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()?;
    let alive = Path::new("/proc").join(pid.to_string()).exists();
    (!alive && pid != std::process::id()).then_some(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_mounts_are_only_those_of_dead_pids() {
        let line = |point: &str, fs: &str| {
            format!("101 29 0:52 / {point} rw,nosuid,nodev shared:1 - {fs} tmpfs rw,size=8192k")
        };
        let dead = 999_999_999u32;
        let me = std::process::id();
        let p = format!("/tmp/{PREFIX}{dead}-00000000");
        assert_eq!(
            stale_mount(line(&p, "tmpfs").as_bytes()),
            Some(PathBuf::from(&p))
        );
        assert_eq!(stale_mount(line(&p, "ext4").as_bytes()), None);
        let live = format!("/tmp/{PREFIX}{me}-00000000");
        assert_eq!(stale_mount(line(&live, "tmpfs").as_bytes()), None);
        assert_eq!(stale_mount(line("/tmp/other", "tmpfs").as_bytes()), None);
        let spaced = format!("/tmp/a\\040b/{PREFIX}{dead}-1");
        assert_eq!(
            stale_mount(line(&spaced, "tmpfs").as_bytes()),
            Some(PathBuf::from(format!("/tmp/a b/{PREFIX}{dead}-1")))
        );
    }
}

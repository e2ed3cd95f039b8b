//! The jail's special filesystems: a fresh /proc of its pid namespace with
//! the entries that reach the host masked, and a minimal /dev.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::{Root, Step, DEVICES};
use crate::jail::error::JailError;
use crate::sys::{self, at, Errno, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// Mount /proc; `Ok(Some(refusal))` when the kernel refuses a new proc
/// mount (EPERM: the caller's /proc has masked entries, as in containers),
/// which leaves /proc empty rather than exposing the outer one.
pub(super) fn proc(
    root: &mut Root,
    dst: &Path,
    devnull: &OwnedFd,
) -> Result<Option<JailError>, JailError> {
    let d = root.dir(dst, 0o555).step("proc", dst)?;
    match sys::mount_fs_on(root.fd_of(&d), "proc", sys::procfs::FLAGS, None, dst) {
        Ok(()) => {}
        Err(e) if e.errno == Errno::EPERM || e.errno == Errno::EACCES => {
            return Ok(Some(JailError::ProcRefused(e)))
        }
        Err(e) => return Err(e).step("proc", dst),
    }
    root.mounted(dst);
    let d = root.dir(dst, 0o555).step("proc", dst)?;
    sys::procfs::mask(root.fd_of(&d), dst, devnull).step("proc", dst)?;
    Ok(None)
}

/// A /dev of its own at `dst`: a few device binds, the usual links, shm
/// (`shm_data`: its mount options), a private devpts and, with `mqueue`,
/// the mqueue filesystem of the IPC namespace init is in (the payload's:
/// under the rlimit rung, `jail::ipc` made init join the bounded one
/// before the root is built). Sealed read-only unless `writable` (a bare
/// root, as bwrap's, where later ops mount and bind under /dev).
pub(super) fn dev(
    root: &mut Root,
    dst: &Path,
    shm_data: &str,
    mqueue: bool,
    devices: &[OwnedFd],
    writable: bool,
) -> Result<(), JailError> {
    let d = root.dir(dst, 0o755).step("dev", dst)?;
    sys::mount_fs_on(
        root.fd_of(&d),
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("size=64k,nr_inodes=64,mode=755"),
        dst,
    )
    .step("dev", dst)?;
    root.mounted(dst);
    let d = root.dir(dst, 0o755).step("dev", dst)?;
    let dfd = root.fd_of(&d);
    for (name, fd) in DEVICES.iter().zip(devices) {
        let p = dst.join(name);
        let name = OsStr::new(name);
        at::open(
            dfd,
            name,
            libc::O_RDONLY | libc::O_CREAT | libc::O_EXCL,
            0o666,
            &p,
        )
        .step("dev", &p)?;
        // The bind keeps the host /dev mount's flags (not nodev), so the node
        // works; nosuid, noexec (and read-only: writing a device node is not
        // writing the filesystem) come with /dev's recursive seal below.
        let tree = sys::open_tree_clone(fd, &p).step("dev", &p)?;
        at::move_mount(&tree, dfd, name, &p).step("dev", &p)?;
    }
    for (target, link) in [
        ("/proc/self/fd", "fd"),
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
        ("pts/ptmx", "ptmx"),
        ("/proc/kcore", "core"),
    ] {
        let l = dst.join(link);
        at::symlink(Path::new(target), dfd, OsStr::new(link), &l).step("dev", &l)?;
    }
    let shm = dst.join("shm");
    at::mkdir(dfd, OsStr::new("shm"), 0o1777, &shm).step("dev", &shm)?;
    let pts = dst.join("pts");
    at::mkdir(dfd, OsStr::new("pts"), 0o755, &pts).step("dev", &pts)?;
    let mq = dst.join("mqueue");
    if mqueue {
        at::mkdir(dfd, OsStr::new("mqueue"), 0o755, &mq).step("dev", &mq)?;
    }
    // Nothing new may be created in /dev (unless `writable`); the device
    // binds get nosuid and noexec with it. shm and pts are mounted after,
    // writable.
    let ro = if writable { 0 } else { MOUNT_ATTR_RDONLY };
    sys::mount_setattr(dfd, ro | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, true, dst)
        .step("dev", dst)?;
    let fd = at::open_dir(dfd, OsStr::new("shm"), &shm).step("dev", &shm)?;
    sys::mount_fs_on(
        &fd,
        "tmpfs",
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(shm_data),
        &shm,
    )
    .step("dev", &shm)?;
    let fd = at::open_dir(dfd, OsStr::new("pts"), &pts).step("dev", &pts)?;
    sys::mount_fs_on(
        &fd,
        "devpts",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
        &pts,
    )
    .step("dev", &pts)?;
    if mqueue {
        let fd = at::open_dir(dfd, OsStr::new("mqueue"), &mq).step("dev", &mq)?;
        sys::mount_fs_on(
            &fd,
            "mqueue",
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
            &mq,
        )
        .step("dev", &mq)?;
        root.mounted(&mq);
    }
    root.mounted(&shm);
    root.mounted(&pts);
    Ok(())
}

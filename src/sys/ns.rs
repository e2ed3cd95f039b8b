//! Joining and making namespaces from the calling process, and the UTS
//! namespace's hostname.

use std::os::fd::OwnedFd;

use super::{err, SysResult};

/// A new cgroup namespace rooted at the caller's current cgroup.
pub fn unshare_cgroupns() -> SysResult<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
        .or_else(|e| err("unshare", "CLONE_NEWCGROUP", e))
}

/// A new user namespace for the caller (bwrap's check that creating one
/// is refused: success is the failure there).
pub fn unshare_userns() -> SysResult<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .or_else(|e| err("unshare", "CLONE_NEWUSER", e))
}

/// Write `data` to the file `rel` beneath the directory `dir` (a /proc
/// file such as `self/uid_map`).
pub fn write_beneath(dir: std::os::fd::RawFd, rel: &str, data: &[u8]) -> SysResult<()> {
    use std::io::Write;
    use std::os::fd::{AsFd, BorrowedFd};
    // SAFETY: `dir` is an open fd for the length of this call (the caller's).
    let d: BorrowedFd<'_> = unsafe { BorrowedFd::borrow_raw(dir) };
    let fd = nix::fcntl::openat(
        d.as_fd(),
        rel,
        nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| err("openat", rel, e))?;
    std::fs::File::from(fd).write_all(data).or_else(|e| {
        err(
            "write",
            rel,
            super::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })
}

/// Move the calling thread into the network namespace `ns`.
pub fn enter_netns(ns: &OwnedFd) -> SysResult<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
        .or_else(|e| err("setns", "CLONE_NEWNET", e))
}

/// The UTS namespace's hostname.
pub fn sethostname(name: &str) -> SysResult<()> {
    nix::unistd::sethostname(name).or_else(|e| err("sethostname", name, e))
}

/// A new IPC namespace for the caller, owned by its user namespace.
pub fn unshare_ipcns() -> SysResult<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWIPC)
        .or_else(|e| err("unshare", "CLONE_NEWIPC", e))
}

/// Move the calling thread into the IPC namespace `ns`.
pub fn enter_ipcns(ns: &OwnedFd) -> SysResult<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWIPC)
        .or_else(|e| err("setns", "CLONE_NEWIPC", e))
}

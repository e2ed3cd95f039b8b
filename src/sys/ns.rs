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

/// A new user namespace with `uid_map` and `gid_map` (lines `inner outer
/// count`, setgroups denied), held by the returned fd alone. Made by a
/// forked child that unshares it and waits while we write its maps and
/// open it, then exits. The caller must be single-threaded and may write
/// such maps (CAP_SETUID and CAP_SETGID over our own user namespace).
pub fn userns_with_maps(uid_map: &str, gid_map: &str) -> SysResult<OwnedFd> {
    use std::os::fd::AsRawFd;
    let (ready_rd, ready_wr) = super::pipe()?;
    let (done_rd, done_wr) = super::pipe()?;
    let Some(pid) = super::fork_single_threaded()? else {
        // The child: a single-threaded copy of us, free to use std.
        drop((ready_rd, done_wr));
        let made = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_ok();
        if made && super::write_all(ready_wr.as_raw_fd(), b"u").is_ok() {
            // Until the parent closes its end (or dies).
            let _ = super::read(done_rd.as_raw_fd(), &mut [0u8; 1]);
        }
        super::exit_now(0)
    };
    drop((ready_wr, done_rd));
    let opened = (|| {
        let mut b = [0u8; 1];
        if super::read(ready_rd.as_raw_fd(), &mut b)? != 1 {
            return err(
                "unshare",
                "CLONE_NEWUSER (id map helper)",
                super::Errno::EPERM,
            );
        }
        let proc = nix::fcntl::open(
            format!("/proc/{pid}").as_str(),
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .or_else(|e| err("open", format!("/proc/{pid}"), e))?;
        write_beneath(proc.as_raw_fd(), "setgroups", b"deny")?;
        write_beneath(proc.as_raw_fd(), "uid_map", uid_map.as_bytes())?;
        write_beneath(proc.as_raw_fd(), "gid_map", gid_map.as_bytes())?;
        nix::fcntl::openat(
            &proc,
            "ns/user",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .or_else(|e| err("open", format!("/proc/{pid}/ns/user"), e))
    })();
    drop(done_wr);
    let _ = super::waitpid(pid, false);
    opened
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

//! The jail's network namespace, made by a short-lived helper of the
//! supervisor while init builds the root.
//!
//! Setting up a network namespace costs the kernel about as much as the
//! rest of the clone together. Made by init's clone, it would delay
//! everything init does; made here, it overlaps with the root build. The
//! helper is a vfork child (we are suspended until it exits) that joins
//! the jail's user namespace, so the new network namespace belongs to the
//! jail (its root may bring `lo` up; init may setns into it), unshares a
//! network namespace, brings `lo` up, and leaves an fd of the namespace in
//! the fd table it shares with us. The supervisor passes it to init.
//!
//! The helper lives in our pid namespace, not the jail's, so the payload is
//! still pid 2.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysError, SysResult};

/// SIOCGSKNSFD from <linux/sockios.h>: an fd of a socket's namespace.
const SIOCGSKNSFD: libc::c_ulong = 0x894C;

/// An fd of the user namespace of the jail's init (`pidfd`, `pid`): by
/// PIDFD_GET_USER_NAMESPACE (Linux 6.11), else from /proc. Open it before
/// init changes its credentials: after that (a different uid, and not
/// dumpable) only a caller with CAP_SYS_PTRACE may, which root in a
/// container lacks. Joining through the fd needs no such check.
pub fn userns_of(pidfd: &OwnedFd, pid: i32) -> SysResult<OwnedFd> {
    /// _IO(PIDFS_IOCTL_MAGIC, 9) from <linux/pidfd.h>.
    const PIDFD_GET_USER_NAMESPACE: libc::c_ulong = 0xFF09;
    // SAFETY: the ioctl takes no argument and returns a new fd or -1.
    let r = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_USER_NAMESPACE as _, 0) };
    if r >= 0 {
        // SAFETY: a fresh fd from the kernel.
        return Ok(unsafe { OwnedFd::from_raw_fd(r) });
    }
    let p = format!("/proc/{pid}/ns/user");
    nix::fcntl::open(
        p.as_str(),
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .or_else(|e| err("open", &p, e))
}

/// A new network namespace owned by the user namespace `userns` (from
/// [`userns_of`]; None: the caller's own), with `lo` up and nothing else; with `listen`, also a TCP
/// socket listening on 127.0.0.1:`listen` inside it (the egress proxy's:
/// a socket stays in the namespace it was made in, whoever holds it).
pub fn create_in(
    userns: Option<&OwnedFd>,
    listen: Option<u16>,
) -> SysResult<(OwnedFd, Option<OwnedFd>)> {
    let mut made: SysResult<(RawFd, Option<OwnedFd>)> = Err(SysError {
        call: "clone",
        arg: "network helper".into(),
        errno: Errno::ECHILD,
    });
    let mut helper = || -> std::convert::Infallible {
        made = in_helper(userns, listen);
        super::exit_now(0)
    };
    // SAFETY: the supervisor is single-threaded until it returns (the
    // contract of every caller of this module), and the helper only sets
    // `made` and exits: it drops, moves or closes nothing of ours.
    let hpid = unsafe { super::spawn_vfork_with(libc::CLONE_FILES, &mut helper) }?;
    // The helper has exited (vfork): reap it.
    let _ = super::waitpid(hpid, false);
    // SAFETY: the helper made this fd in the fd table it shared with us and
    // then exited; nothing else owns it.
    made.map(|(fd, l)| (unsafe { OwnedFd::from_raw_fd(fd) }, l))
}

/// Runs in the helper (our memory, our fd table, its own credentials).
fn in_helper(userns: Option<&OwnedFd>, listen: Option<u16>) -> SysResult<(RawFd, Option<OwnedFd>)> {
    // As the namespace's owner we hold every capability in it. None: we
    // are in the jail's user namespace already (a joined one).
    if let Some(userns) = userns {
        nix::sched::setns(userns, nix::sched::CloneFlags::CLONE_NEWUSER)
            .or_else(|e| err("setns", "CLONE_NEWUSER", e))?;
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
        .or_else(|e| err("unshare", "CLONE_NEWNET", e))?;
    let sock = loopback_up()?;
    // SAFETY: SIOCGSKNSFD takes no argument and returns a new fd
    // (close-on-exec) or -1.
    let fd = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNSFD as _) };
    if fd < 0 {
        return err("ioctl", "SIOCGSKNSFD", last_errno());
    }
    // SAFETY: a fresh fd from the kernel, ours alone.
    let ns = unsafe { OwnedFd::from_raw_fd(fd) };
    let listener = match listen {
        Some(port) => {
            let at = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let l = std::net::TcpListener::bind(at).map_err(|e| SysError {
                call: "bind",
                arg: format!("{at} (egress proxy)"),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })?;
            Some(OwnedFd::from(l))
        }
        None => None,
    };
    Ok((std::os::fd::IntoRawFd::into_raw_fd(ns), listener))
}

/// Bring the caller's network namespace's `lo` up (a new namespace's is
/// down); the socket used, which is in that namespace.
pub fn loopback_up() -> SysResult<OwnedFd> {
    // SAFETY: socket() with constant arguments.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return err("socket", "AF_INET", last_errno());
    }
    // SAFETY: a fresh fd that only this function uses.
    let sock = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain old data; zeroed is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        ifr.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut ifr) < 0 {
            return err("ioctl", "lo, SIOCGIFFLAGS", last_errno());
        }
        ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &ifr) < 0 {
            return err("ioctl", "lo, SIOCSIFFLAGS", last_errno());
        }
    }
    Ok(sock)
}

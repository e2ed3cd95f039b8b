//! The kernel's audit netlink socket, read-only: whether audit is enabled
//! (`AUDIT_GET`) and the read-log multicast group, where every audit
//! record (Landlock's among them) is copied for readers that hold
//! CAP_AUDIT_READ in the initial user namespace. Nothing here changes the
//! host's audit settings.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysResult};

/// `NETLINK_AUDIT` from `<linux/netlink.h>`.
const NETLINK_AUDIT: libc::c_int = 9;
/// `AUDIT_GET` from `<linux/audit.h>`.
const AUDIT_GET: u16 = 1000;
/// `AUDIT_NLGRP_READLOG`: the read-only multicast group.
const AUDIT_NLGRP_READLOG: u32 = 1;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `AUDIT_LANDLOCK_ACCESS` from `<linux/audit.h>`: one denied access.
pub const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
/// `AUDIT_LANDLOCK_DOMAIN` from `<linux/audit.h>`: a domain's creation
/// details (with its first logged denial) and its end.
pub const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;

fn netlink_socket(flags: libc::c_int) -> SysResult<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            NETLINK_AUDIT,
        )
    };
    if fd < 0 {
        return err("socket", "AF_NETLINK, NETLINK_AUDIT", last_errno());
    }
    // SAFETY: fd was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind_groups(fd: RawFd, groups: u32) -> SysResult<()> {
    // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_groups = groups;
    // SAFETY: sa is a valid sockaddr_nl of the size given.
    let r = unsafe {
        libc::bind(
            fd,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return err("bind", "NETLINK_AUDIT, AUDIT_NLGRP_READLOG", last_errno());
    }
    Ok(())
}

/// The kernel's audit settings that matter to a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditStatus {
    /// 0 off, 1 on, 2 on and locked.
    pub enabled: u32,
    /// What a lost record does: 0 nothing, 1 a kernel message, 2 panic.
    pub failure: u32,
}

/// The kernel's audit settings (`AUDIT_GET`). Needs CAP_AUDIT_CONTROL
/// and the initial pid namespace (else EPERM or ECONNREFUSED).
pub fn audit_status() -> SysResult<AuditStatus> {
    let sock = netlink_socket(0)?;
    bind_groups(sock.as_raw_fd(), 0)?;
    // struct nlmsghdr (16 bytes), no payload.
    let mut req = [0u8; 16];
    req[0..4].copy_from_slice(&16u32.to_ne_bytes());
    req[4..6].copy_from_slice(&AUDIT_GET.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // SAFETY: req is a valid buffer of its length; the kernel is the peer.
    let r = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if r < 0 {
        return err("send", "NETLINK_AUDIT, AUDIT_GET", last_errno());
    }
    let mut buf = [0u8; 512];
    // The kernel answers from a thread of its own: wait for it (a second
    // at most; it comes at once).
    let mut p = [libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if super::poll(&mut p, 1000)? == 0 {
        return err("recv", "NETLINK_AUDIT, AUDIT_GET", Errno::ETIMEDOUT);
    }
    let n = recv(sock.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT)?;
    let typ = u16::from_ne_bytes([buf[4], buf[5]]);
    if n >= 20 && typ == NLMSG_ERROR {
        let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
        return err("send", "NETLINK_AUDIT, AUDIT_GET", Errno::from_raw(-code));
    }
    // struct audit_status: mask, enabled, failure, …
    if n < 28 || typ != AUDIT_GET {
        return err("recv", "NETLINK_AUDIT, AUDIT_GET", Errno::EPROTO);
    }
    let word = |at: usize| u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
    Ok(AuditStatus {
        enabled: word(20),
        failure: word(24),
    })
}

/// A non-blocking socket bound to the audit read-log multicast group,
/// with a receive buffer of up to `rcvbuf` bytes. EPERM without
/// CAP_AUDIT_READ in the initial user namespace.
pub fn open_readlog(rcvbuf: usize) -> SysResult<OwnedFd> {
    let sock = netlink_socket(libc::SOCK_NONBLOCK)?;
    let size = rcvbuf.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: size is a c_int of the length given.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
    bind_groups(sock.as_raw_fd(), 1 << (AUDIT_NLGRP_READLOG - 1))?;
    Ok(sock)
}

fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> SysResult<usize> {
    // SAFETY: buf is a valid, writable buffer of its length.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    if r < 0 {
        return err("recv", format!("fd {fd}"), last_errno());
    }
    Ok(r as usize)
}

/// One audit record from a read-log socket: its type and text (the
/// netlink payload, `audit(TIME:SERIAL): key=value …`). Ok(None) when
/// nothing is pending. `ENOBUFS`: records were dropped since the last
/// read (the socket's buffer overflowed); reading may go on.
pub fn recv_record(fd: RawFd, buf: &mut [u8]) -> SysResult<Option<(u16, usize, usize)>> {
    let n = match recv(fd, buf, libc::MSG_DONTWAIT) {
        Ok(n) => n,
        Err(e) if e.errno == Errno::EAGAIN => return Ok(None),
        Err(e) => return Err(e),
    };
    if n < 16 {
        return Ok(Some((0, 16, 16)));
    }
    let len = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    let typ = u16::from_ne_bytes([buf[4], buf[5]]);
    let end = len.clamp(16, n);
    Ok(Some((typ, 16, end)))
}

//! Raw kernel calls for the seccomp layer (the only unsafe code for it):
//! installing a filter, the user-notification ioctls, and passing the
//! listener fd over a unix socket (SCM_RIGHTS).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysResult};

/// Install a seccomp BPF program on the calling thread (no_new_privs must
/// be set). With `listener`, asks for a user-notification fd
/// (SECCOMP_FILTER_FLAG_NEW_LISTENER, close-on-exec) and returns it.
pub fn install(prog: &[libc::sock_filter], listener: bool) -> SysResult<Option<OwnedFd>> {
    if prog.is_empty() || prog.len() > u16::MAX as usize {
        return err("seccomp", "SECCOMP_SET_MODE_FILTER", Errno::EINVAL);
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let flags = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: fprog points to `prog`, which outlives the call; the kernel
    // copies the program and never writes through the pointer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        let what = if listener {
            "SECCOMP_SET_MODE_FILTER, NEW_LISTENER"
        } else {
            "SECCOMP_SET_MODE_FILTER"
        };
        return err("seccomp", what, last_errno());
    }
    if listener {
        // SAFETY: with NEW_LISTENER the return value is a fresh fd nobody
        // else owns.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(r as RawFd) }));
    }
    Ok(None)
}

/// A connected pair of unix seqpacket sockets, both close-on-exec.
pub fn socketpair() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return err("socketpair", "AF_UNIX, SOCK_SEQPACKET", last_errno());
    }
    // SAFETY: the kernel returned two fresh fds nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for one fd in a control message, u64-aligned.
#[repr(C, align(8))]
struct CmsgBuf([u8; 32]);

/// Send `fd` over the unix socket `sock` (one byte of data, one SCM_RIGHTS).
pub fn send_fd(sock: RawFd, fd: RawFd) -> SysResult<()> {
    let mut byte = [b'L'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = CmsgBuf([0; 32]);
    // SAFETY: msghdr is plain old data; zeroed is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: msg_control points to a zeroed, aligned buffer of at least
    // CMSG_SPACE(sizeof(int)) bytes (32 >= 24), so CMSG_FIRSTHDR is non-null
    // and the header and its int payload lie inside `cbuf`.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
    }
    loop {
        // SAFETY: every pointer in `msg` refers to locals that outlive the call.
        let r = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("sendmsg", "SCM_RIGHTS", e);
        }
        return Ok(());
    }
}

/// Receive one fd sent by [`send_fd`]. `Ok(None)` on end of file (the peer
/// closed without sending) or a message without an fd.
pub fn recv_fd(sock: RawFd) -> SysResult<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = CmsgBuf([0; 32]);
    // SAFETY: msghdr is plain old data; zeroed is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len() as _;
    let r = loop {
        // SAFETY: every pointer in `msg` refers to locals that outlive the
        // call; MSG_CMSG_CLOEXEC makes a received fd close-on-exec.
        let r = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("recvmsg", "SCM_RIGHTS", e);
        }
        break r;
    };
    if r == 0 {
        return Ok(None);
    }
    let mut got: Option<OwnedFd> = None;
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of
    // well-formed control messages; CMSG_FIRSTHDR/NXTHDR stay inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..n {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    // Each received fd is ours now: keep the first, close
                    // the rest (OwnedFd's drop).
                    let owned = OwnedFd::from_raw_fd(fd);
                    if got.is_none() {
                        got = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(got)
}

/// One pending user notification: who asked for which syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notif {
    pub id: u64,
    /// The caller's pid in the supervisor's pid namespace.
    pub pid: u32,
    pub nr: i32,
    pub arch: u32,
}

/// SECCOMP_IOCTL_NOTIF_RECV. `Ok(None)` when the notification vanished
/// before we read it (the caller was interrupted or died: ENOENT).
pub fn notif_recv(listener: &OwnedFd) -> SysResult<Option<Notif>> {
    loop {
        // SAFETY: seccomp_notif is plain old data; the kernel requires it
        // zeroed on entry.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl writes one seccomp_notif into `n`, which we own;
        // the struct layout matches the kernel's (checked by the kernel via
        // the size encoded in the ioctl number).
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut n as *mut libc::seccomp_notif,
            )
        };
        if r < 0 {
            match last_errno() {
                Errno::EINTR => continue,
                Errno::ENOENT => return Ok(None),
                e => return err("ioctl", "SECCOMP_IOCTL_NOTIF_RECV", e),
            }
        }
        return Ok(Some(Notif {
            id: n.id,
            pid: n.pid,
            nr: n.data.nr,
            arch: n.data.arch,
        }));
    }
}

/// Answer notification `id`: let the syscall run (`continue_it`) or fail it
/// with `errno`. A caller that went away meanwhile (ENOENT) is not an error.
pub fn notif_reply(listener: &OwnedFd, id: u64, continue_it: bool, errno: i32) -> SysResult<()> {
    let resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: if continue_it { 0 } else { -errno },
        flags: if continue_it {
            libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
        } else {
            0
        },
    };
    loop {
        // SAFETY: the ioctl reads one seccomp_notif_resp from `resp`, which
        // outlives the call.
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND as _,
                &resp as *const libc::seccomp_notif_resp,
            )
        };
        if r < 0 {
            match last_errno() {
                Errno::EINTR => continue,
                Errno::ENOENT => return Ok(()),
                e => return err("ioctl", "SECCOMP_IOCTL_NOTIF_SEND", e),
            }
        }
        return Ok(());
    }
}

/// Poll one fd without blocking: (readable, hung up or in error).
pub fn poll_now(fd: RawFd) -> (bool, bool) {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: `p` is a valid array of one pollfd.
    let r = unsafe { libc::poll(p.as_mut_ptr(), 1, 0) };
    if r <= 0 {
        return (false, false);
    }
    (
        p[0].revents & libc::POLLIN != 0,
        p[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
    )
}

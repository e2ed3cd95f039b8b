//! Unix socket pairs and passing an fd over them.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysError, SysResult};

/// A connected pair of unix sockets of `kind` (SOCK_STREAM,
/// SOCK_SEQPACKET), both close-on-exec.
pub fn socketpair(kind: libc::c_int) -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r < 0 {
        return err("socketpair", "AF_UNIX", last_errno());
    }
    // SAFETY: the kernel returned two fresh fds nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// socket(2): a new socket of `domain`, `ty` (SOCK_NONBLOCK allowed) and
/// `protocol`, close-on-exec.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> SysResult<OwnedFd> {
    // SAFETY: integers only; a returned fd is fresh and ours.
    let r = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
    if r < 0 {
        return err(
            "socket",
            format_args!("{domain}, {ty}, {protocol}"),
            last_errno(),
        );
    }
    // SAFETY: the kernel returned a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Room for one fd in a control message, u64-aligned.
#[repr(C, align(8))]
struct CmsgBuf([u8; 32]);

/// Send `fd` over the unix socket `sock`: one byte of data, `tag`, with
/// one SCM_RIGHTS.
pub fn send_fd(sock: RawFd, fd: RawFd, tag: u8) -> SysResult<()> {
    send_fd_with(sock, fd, &[tag])
}

/// Send `data` (at least one byte) with `fd` as one SCM_RIGHTS message.
pub fn send_fd_with(sock: RawFd, fd: RawFd, data: &[u8]) -> SysResult<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
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
    match recv_fd_with(sock, &mut byte)? {
        (0, _) => Ok(None),
        (_, fd) => Ok(fd),
    }
}

/// Receive one message into `buf` and the first fd sent with it: (bytes
/// read, the fd); (0, None) at end of file.
pub fn recv_fd_with(sock: RawFd, buf: &mut [u8]) -> SysResult<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
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
    Ok((r as usize, got))
}

/// connect(2) `sock` to the socket address in `addr` (raw bytes of a
/// sockaddr, as a program passed them). Returns the errno, 0 on success.
pub fn connect_raw(sock: RawFd, addr: &[u8]) -> i32 {
    // Aligned storage for the address (sockaddr_storage is 128 bytes).
    let mut st: libc::sockaddr_storage = unsafe_zeroed_storage();
    let n = addr
        .len()
        .min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `st` has room for `n` bytes; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.as_ptr(),
            (&mut st as *mut libc::sockaddr_storage).cast::<u8>(),
            n,
        )
    };
    loop {
        // SAFETY: `st` holds `n` initialized bytes and outlives the call.
        let r = unsafe {
            libc::connect(
                sock,
                (&st as *const libc::sockaddr_storage).cast(),
                n as libc::socklen_t,
            )
        };
        if r == 0 {
            return 0;
        }
        let e = last_errno();
        if e != Errno::EINTR {
            return e as i32;
        }
    }
}

fn unsafe_zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is valid.
    unsafe { std::mem::zeroed() }
}

/// connect(2) `sock` to the pathname socket `path`. Returns the errno, 0
/// on success.
pub fn connect_path(sock: RawFd, path: &[u8]) -> i32 {
    let mut a = Vec::with_capacity(2 + path.len() + 1);
    a.extend_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
    a.extend_from_slice(path);
    a.push(0);
    if a.len() > std::mem::size_of::<libc::sockaddr_un>() {
        return libc::ENAMETOOLONG;
    }
    connect_raw(sock, &a)
}

/// Send one message of `data` with `fds` attached (SCM_RIGHTS) over the
/// unix socket `sock` (SOCK_SEQPACKET keeps it one message).
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> SysResult<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [std::io::IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return err("sendmsg", format!("{} fds", fds.len()), e),
        }
    }
}

/// Most fds [`recv_with_fds`] takes from one message.
pub const MAX_FDS: usize = 16;

/// Receive one message into `buf` with up to [`MAX_FDS`] fds
/// (close-on-exec). Returns the bytes received (0: the peer closed) and the
/// fds; a message that carried more fds is an error (EMSGSIZE).
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> SysResult<(usize, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => break m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return err("recvmsg", "SCM_RIGHTS", e),
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(|e| SysError {
        call: "recvmsg",
        arg: "control messages".into(),
        errno: e,
    })? {
        if let ControlMessageOwned::ScmRights(got) = c {
            for fd in got {
                // SAFETY: the kernel installed this fd in our table for
                // this message; nothing else owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return err("recvmsg", "too many fds", Errno::EMSGSIZE);
    }
    Ok((msg.bytes, fds))
}

/// Ask the kernel to attach the sender's credentials to every message
/// read on `sock` (SO_PASSCRED), so [`recv_sender_pid`] can tell who
/// wrote, without the sender doing anything but write.
pub fn set_passcred(sock: &OwnedFd) -> SysResult<()> {
    use nix::sys::socket::{setsockopt, sockopt::PassCred};
    setsockopt(sock, PassCred, &true).or_else(|e| err("setsockopt", "SO_PASSCRED", e))
}

/// Read one message on `sock` (which has [`set_passcred`]) and return the
/// pid of the process that wrote it, as our pid namespace numbers it (the
/// kernel translates it when we read): (bytes read, the pid); (0, None)
/// at end of file.
pub fn recv_sender_pid(sock: RawFd) -> SysResult<(usize, Option<i32>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixCredentials};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut cbuf = nix::cmsg_space!(UnixCredentials);
    loop {
        match recvmsg::<()>(sock, &mut iov, Some(&mut cbuf), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => {
                let cmsgs = m
                    .cmsgs()
                    .or_else(|e| err("recvmsg", "SCM_CREDENTIALS", e))?;
                let pid = cmsgs
                    .filter_map(|c| match c {
                        ControlMessageOwned::ScmCredentials(cred) => Some(cred.pid()),
                        _ => None,
                    })
                    .next();
                return Ok((m.bytes, pid));
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return err("recvmsg", "SCM_CREDENTIALS", e),
        }
    }
}

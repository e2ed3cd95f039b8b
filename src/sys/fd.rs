//! File descriptors: pipes, reads and writes, duplicating, flags, and
//! closing in bulk.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysResult};

/// Close a raw fd that no `OwnedFd` of ours owns (the vfork child closing
/// its copies of the parent's fds, init letting go of stdout).
///
/// # Safety
///
/// No live value of this process (an `OwnedFd`, a `File`) may own `fd`
/// (or the one that does is never used or dropped again), or its later
/// drop closes whatever fd then has the number.
pub unsafe fn close_raw(fd: RawFd) {
    // SAFETY: the caller guarantees nothing else owns the fd.
    unsafe { libc::close(fd) };
}

pub fn pipe() -> SysResult<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).or_else(|e| err("pipe2", "O_CLOEXEC", e))
}

pub fn write_all(fd: RawFd, mut buf: &[u8]) -> SysResult<()> {
    while !buf.is_empty() {
        // SAFETY: buf is a valid slice for its length.
        let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("write", fd, e);
        }
        buf = &buf[r as usize..];
    }
    Ok(())
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> SysResult<usize> {
    loop {
        // SAFETY: buf is a valid, writable slice for its length.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("read", fd, e);
        }
        return Ok(r as usize);
    }
}

/// Mark every fd >= 3 close-on-exec except those in `keep`, which lose their
/// close-on-exec flag.
pub fn cloexec_all_but(keep: &[RawFd]) -> SysResult<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&f| f >= 3).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from: u32 = 3;
    let ranges = keep
        .iter()
        .map(|&k| (k as u32).saturating_sub(1))
        .chain(std::iter::once(u32::MAX));
    for (i, to) in ranges.enumerate() {
        if from <= to {
            close_range(from, to, libc::CLOSE_RANGE_CLOEXEC)?;
        }
        if let Some(&k) = keep.get(i) {
            set_cloexec(k, false)?;
            from = k as u32 + 1;
        }
    }
    Ok(())
}

/// Close every fd except those in `keep`.
///
/// # Safety
///
/// The fds closed may be owned by values elsewhere in this process (an
/// `OwnedFd`, a `File`): the caller must never use or drop any of them
/// afterwards (a process that just forked and never returns to the code
/// that owns them), or a later drop closes an unrelated fd that reuses the
/// number.
pub unsafe fn close_all_but(keep: &[RawFd]) -> SysResult<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&f| f >= 0).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from: u32 = 0;
    for k in keep.iter().map(|&k| k as u32) {
        if from < k {
            close_range(from, k - 1, 0)?;
        }
        from = k + 1;
    }
    close_range(from, u32::MAX, 0)
}

/// A close-on-exec duplicate of `fd` numbered `min` or above.
pub fn dup_above(fd: RawFd, min: RawFd) -> SysResult<OwnedFd> {
    // SAFETY: fcntl F_DUPFD_CLOEXEC on an integer fd returns a new fd or -1.
    let r = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if r < 0 {
        return err(
            "fcntl",
            format!("{fd}, F_DUPFD_CLOEXEC {min}"),
            last_errno(),
        );
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

fn close_range(from: u32, to: u32, flags: libc::c_uint) -> SysResult<()> {
    // SAFETY: close_range takes integers only; it affects only our fd table.
    let r = unsafe { libc::syscall(libc::SYS_close_range, from, to, flags) };
    if r < 0 {
        return err("close_range", format!("{from}, {to}"), last_errno());
    }
    Ok(())
}

pub fn set_cloexec(fd: RawFd, on: bool) -> SysResult<()> {
    // SAFETY: fcntl F_SETFD on an integer fd.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFD, if on { libc::FD_CLOEXEC } else { 0 }) };
    if r < 0 {
        return err("fcntl", format!("{fd}, F_SETFD"), last_errno());
    }
    Ok(())
}

/// Is `fd` open in this process?
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on an integer fd only reads flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// The fds >= 3 this process inherited from its caller: open and without
/// close-on-exec (every fd this process opens itself is close-on-exec, and
/// an inherited one cannot be: execve closed those). Read from
/// /proc/self/fd, or by probing the first 1024 numbers without /proc.
pub fn inherited_fds() -> Vec<RawFd> {
    let listed: Option<Vec<RawFd>> = std::fs::read_dir("/proc/self/fd").ok().map(|d| {
        d.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    });
    let mut fds: Vec<RawFd> = listed
        .unwrap_or_else(|| (3..1024).collect())
        .into_iter()
        .filter(|&fd| fd >= 3)
        .filter(|&fd| {
            // SAFETY: F_GETFD on an integer fd only reads its flags.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            flags >= 0 && flags & libc::FD_CLOEXEC == 0
        })
        .collect();
    fds.sort_unstable();
    fds
}

/// dup2(2): `to` becomes a copy of `from`, closing what `to` was.
///
/// # Safety
///
/// No live value of this process may own `to` (it is closed and replaced
/// under its owner's feet), unless that owner is never used or dropped again.
pub unsafe fn dup2(from: RawFd, to: RawFd) -> SysResult<()> {
    // SAFETY: dup2 on integer fds.
    let r = unsafe { libc::dup2(from, to) };
    if r < 0 {
        return err("dup2", format!("{from}, {to}"), last_errno());
    }
    Ok(())
}

pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> SysResult<usize> {
    // SAFETY: fds is a valid mutable slice of pollfd for its length.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = last_errno();
        if e == Errno::EINTR {
            return Ok(0);
        }
        return err("poll", fds.len(), e);
    }
    Ok(r as usize)
}

/// Take a POSIX read lock on the whole file `fd` without waiting (F_SETLK,
/// F_RDLCK), as bwrap's `--lock-file`: held while this process keeps it.
pub fn read_lock(fd: &OwnedFd) -> SysResult<()> {
    // SAFETY: a zeroed flock is a valid value; the fields are set below.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_RDLCK as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    loop {
        // SAFETY: fcntl F_SETLK reads the flock struct, valid for the call.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLK, &l) };
        if r == 0 {
            return Ok(());
        }
        let e = last_errno();
        if e != Errno::EINTR {
            return err("fcntl", format!("{}, F_SETLK", fd.as_raw_fd()), e);
        }
    }
}

/// Take an exclusive flock(2) on `fd` without waiting: false when another
/// open file description holds a lock on the same file.
pub fn try_lock_exclusive(fd: &OwnedFd) -> SysResult<bool> {
    loop {
        // SAFETY: flock on a valid fd takes integers only.
        let r = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(true);
        }
        match last_errno() {
            Errno::EINTR => continue,
            Errno::EWOULDBLOCK => return Ok(false),
            e => return err("flock", fd.as_raw_fd(), e),
        }
    }
}

pub fn set_nonblocking(fd: RawFd) -> SysResult<()> {
    // SAFETY: fcntl on an integer fd.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return err("fcntl", format!("{fd}, O_NONBLOCK"), last_errno());
    }
    Ok(())
}

/// Make a pipe hold at least `size` bytes (F_SETPIPE_SZ).
pub fn set_pipe_size(fd: RawFd, size: usize) -> SysResult<()> {
    let size = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl on an integer fd with an integer argument.
    if unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, size) } < 0 {
        return err("fcntl", format!("{fd}, F_SETPIPE_SZ {size}"), last_errno());
    }
    Ok(())
}

/// How a caller's fd takes writes that must never block us.
#[derive(Debug)]
pub enum NoWait {
    /// A pipe or FIFO, opened anew (its own file description) with
    /// O_NONBLOCK: the caller's description is left as it was.
    Pipe(OwnedFd),
    /// A socket: each write is a send with MSG_DONTWAIT.
    Socket,
    /// Anything else (a regular file, a terminal): written as it is.
    Plain,
}

/// The way to write to `fd` without blocking (see [`NoWait`]).
pub fn no_wait(fd: RawFd) -> SysResult<NoWait> {
    // SAFETY: fd is only inspected; BorrowedFd lives for this call alone.
    let st = nix::sys::stat::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        .or_else(|e| err("fstat", fd, e))?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => Ok(NoWait::Socket),
        libc::S_IFIFO => {
            let p = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default();
            // SAFETY: `p` is NUL-terminated and outlives the call.
            let r = unsafe {
                libc::open(
                    p.as_ptr(),
                    libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY,
                )
            };
            if r < 0 {
                return err("open", format!("/proc/self/fd/{fd}"), last_errno());
            }
            // SAFETY: fresh fd from the kernel.
            Ok(NoWait::Pipe(unsafe { OwnedFd::from_raw_fd(r) }))
        }
        _ => Ok(NoWait::Plain),
    }
}

/// One write of `buf` to `fd` the [`NoWait`] way: how much was taken
/// (EAGAIN when nothing could be without blocking).
pub fn write_no_wait(fd: RawFd, how: &NoWait, buf: &[u8]) -> SysResult<usize> {
    loop {
        // SAFETY: buf is a valid slice for its length.
        let r = unsafe {
            match how {
                NoWait::Pipe(p) => libc::write(p.as_raw_fd(), buf.as_ptr().cast(), buf.len()),
                NoWait::Socket => libc::send(
                    fd,
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                ),
                NoWait::Plain => libc::write(fd, buf.as_ptr().cast(), buf.len()),
            }
        };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("write", fd, e);
        }
        return Ok(r as usize);
    }
}

/// A memfd named `name` holding `data`, sealed against any change
/// (close-on-exec). Asked for as executable where the kernel knows the
/// flag (`MFD_EXEC`, Linux 6.3: a host whose `vm.memfd_noexec` seals new
/// memfds otherwise), so that it can be mapped to run.
pub fn memfd_with(name: &str, data: &[u8]) -> SysResult<OwnedFd> {
    const MFD_EXEC: libc::c_uint = 0x10;
    let c = std::ffi::CString::new(name).unwrap_or_default();
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a NUL-terminated name that outlives the call; integer flags.
    let mut r = unsafe { libc::memfd_create(c.as_ptr(), base | MFD_EXEC) };
    if r < 0 && last_errno() == Errno::EINVAL {
        // SAFETY: as above.
        r = unsafe { libc::memfd_create(c.as_ptr(), base) };
    }
    if r < 0 {
        return err("memfd_create", name, last_errno());
    }
    // SAFETY: a fresh fd from the kernel, ours alone.
    let fd = unsafe { OwnedFd::from_raw_fd(r) };
    write_all(fd.as_raw_fd(), data)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS on our own fd with integer flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return err("fcntl", format!("{name}, F_ADD_SEALS"), last_errno());
    }
    Ok(fd)
}

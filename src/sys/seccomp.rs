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

/// Install `prog` with prctl(PR_SET_SECCOMP), as bwrap installs the
/// caller's programs: a filter installed before may allow prctl but not
/// seccomp(2).
pub fn install_prctl(prog: &[libc::sock_filter]) -> SysResult<()> {
    if prog.is_empty() || prog.len() > u16::MAX as usize {
        return err("prctl", "PR_SET_SECCOMP", Errno::EINVAL);
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points to `prog`, which outlives the call; the kernel
    // copies the program and never writes through the pointer.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        return err("prctl", "PR_SET_SECCOMP", last_errno());
    }
    Ok(())
}

/// One pending user notification: who asked for which syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notif {
    pub id: u64,
    /// The caller's pid in the supervisor's pid namespace.
    pub pid: u32,
    pub nr: i32,
    pub arch: u32,
    pub args: [u64; 6],
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
            args: n.data.args,
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

/// SECCOMP_IOCTL_NOTIF_ID_VALID: the caller of notification `id` is still
/// blocked in it (so its pid still names the same thread).
pub fn notif_id_valid(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64 from `id`, which outlives the call.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id as *const u64,
        )
    };
    r == 0
}

/// SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SETFD: put a copy of
/// our `fd` into the table of notification `id`'s caller at number `at`,
/// closing what was there (as dup2 would), close-on-exec if `cloexec`.
pub fn notif_addfd_at(
    listener: &OwnedFd,
    id: u64,
    fd: RawFd,
    at: i32,
    cloexec: bool,
) -> SysResult<()> {
    if fd < 0 || at < 0 {
        return err("ioctl", "SECCOMP_IOCTL_NOTIF_ADDFD", Errno::EBADF);
    }
    let a = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
        srcfd: fd as u32,
        newfd: at as u32,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    loop {
        // SAFETY: the ioctl reads one seccomp_notif_addfd from `a`, which
        // outlives the call (the size is encoded in the ioctl number).
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ADDFD as _,
                &a as *const libc::seccomp_notif_addfd,
            )
        };
        if r < 0 {
            match last_errno() {
                Errno::EINTR => continue,
                e => return err("ioctl", "SECCOMP_IOCTL_NOTIF_ADDFD", e),
            }
        }
        return Ok(());
    }
}

/// A copy of fd `fd` of thread `tid` (pidfd_open with PIDFD_THREAD, then
/// pidfd_getfd; close-on-exec). Needs ptrace access to the thread.
pub fn take_fd(tid: u32, fd: i32) -> SysResult<OwnedFd> {
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    // SAFETY: integers only; a returned fd is fresh and ours.
    let mut p = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::pid_t, PIDFD_THREAD) };
    if p < 0 && last_errno() == Errno::EINVAL {
        // Before Linux 6.9 (no PIDFD_THREAD): the thread group's leader,
        // whose fd table the threads share.
        let tgid = std::fs::read_to_string(format!("/proc/{tid}/status"))
            .ok()
            .and_then(|st| {
                st.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse::<libc::pid_t>().ok())
            })
            .unwrap_or(tid as libc::pid_t);
        // SAFETY: as above.
        p = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
    }
    if p < 0 {
        return err("pidfd_open", tid, last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    let pidfd = unsafe { OwnedFd::from_raw_fd(p as RawFd) };
    // SAFETY: integers only; a returned fd is fresh and ours.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return err("pidfd_getfd", format_args!("{tid}, {fd}"), last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// Have `cmd` install `prog` as a seccomp filter in its child, the last
/// step before exec (no_new_privs must already be set, as it is in a
/// jail). The child of a multi-threaded process may only make
/// async-signal-safe calls: this is one seccomp(2) call and no allocation.
pub fn filter_before_exec(
    cmd: &mut std::process::Command,
    prog: std::sync::Arc<Vec<libc::sock_filter>>,
) {
    use std::os::unix::process::CommandExt;
    let hook = move || {
        let fprog = libc::sock_fprog {
            len: prog.len() as libc::c_ushort,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: fprog points to `prog`, alive for the call; the kernel
        // copies the program and never writes through the pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes one
    // system call, allocating nothing and taking no lock (see above).
    unsafe { cmd.pre_exec(hook) };
}

#[cfg(test)]
mod tests {
    /// The kernel's _IOW('!', 3, struct seccomp_notif_addfd) on 64 bits:
    /// the struct is 24 bytes (u64 id, then four u32).
    #[test]
    fn addfd_ioctl_number_and_layout() {
        assert_eq!(std::mem::size_of::<libc::seccomp_notif_addfd>(), 24);
        // The ioctl type is c_ulong on glibc, c_int on musl.
        #[allow(clippy::unnecessary_cast)]
        let nr = libc::SECCOMP_IOCTL_NOTIF_ADDFD as u64;
        assert_eq!(nr, 0x4018_2103);
        assert_eq!(libc::SECCOMP_ADDFD_FLAG_SETFD, 1);
    }
}

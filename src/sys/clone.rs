//! Creating the jail's first process: clone3 into new namespaces (and,
//! where possible, straight into the run's cgroup), with clone(2) as the
//! fallback.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysResult};

/// Result of [`clone_jail`].
pub enum Cloned {
    /// We are the new process: pid 1 of the new pid namespace, or (in a
    /// joined pid namespace, with no new one) one process of it.
    Child,
    /// We are the supervisor; the child has this host pid and pidfd.
    Parent { pid: i32, pidfd: OwnedFd },
}

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Which entry point created the jail, for the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneVia {
    Clone3,
    Clone3IntoCgroup,
    Clone,
}

/// clone3 with `ns_flags | CLONE_PIDFD` (and CLONE_INTO_CGROUP when a cgroup
/// fd is given); falls back to clone(2) when clone3 is missing (ENOSYS) or
/// refused by a filter (EPERM from some container runtimes' seccomp).
/// The caller must be single-threaded.
pub fn clone_jail(ns_flags: u64, cgroup: Option<RawFd>) -> SysResult<(Cloned, CloneVia)> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: ns_flags | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        // With CLONE_PARENT the child inherits ours (SIGCHLD), and clone3
        // refuses one given.
        exit_signal: match ns_flags & libc::CLONE_PARENT as u64 {
            0 => libc::SIGCHLD as u64,
            _ => 0,
        },
        ..Default::default()
    };
    let mut via = CloneVia::Clone3;
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
        via = CloneVia::Clone3IntoCgroup;
    }
    // SAFETY: clone3 without CLONE_VM/CLONE_SETTLS and with a null stack behaves
    // like fork: the child gets a copy-on-write copy of this (single-threaded)
    // address space and continues from this point. `args` and `pidfd` live on
    // this stack frame for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret < 0 {
        let e = last_errno();
        if e == Errno::ENOSYS || e == Errno::EPERM || (cgroup.is_some() && e == Errno::EINVAL) {
            if cgroup.is_some() && e != Errno::ENOSYS {
                return err("clone3", "CLONE_INTO_CGROUP", e);
            }
            return clone_legacy(ns_flags).map(|c| (c, CloneVia::Clone));
        }
        return err("clone3", flags_text(ns_flags), e);
    }
    if ret == 0 {
        return Ok((Cloned::Child, via));
    }
    // SAFETY: on success the kernel stored a fresh pidfd that nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((
        Cloned::Parent {
            pid: ret as i32,
            pidfd,
        },
        via,
    ))
}

/// fork(2) whose child gets pid `pid` in the caller's pid namespace
/// (clone3 with set_tid: needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE over
/// that namespace), so that the next ordinary fork still gets the pid it
/// would have had. Only when this process has exactly one thread (EBUSY
/// otherwise), as [`super::fork_single_threaded`].
pub fn fork_with_pid(pid: i32) -> SysResult<Option<i32>> {
    if super::thread_count() != 1 {
        return err(
            "clone3",
            "set_tid from a multi-threaded process",
            Errno::EBUSY,
        );
    }
    let tid: [libc::pid_t; 1] = [pid];
    let mut args = CloneArgs {
        exit_signal: libc::SIGCHLD as u64,
        set_tid: tid.as_ptr() as u64,
        set_tid_size: 1,
        ..Default::default()
    };
    // SAFETY: this process is single-threaded (checked above), so the
    // child may use the allocator and std freely; `tid` lives on this
    // stack frame for the duration of the call.
    unsafe { fork3(&mut args, format_args!("set_tid {pid}")) }
}

/// clone3 with `args` and no stack (a fork: no CLONE_VM, no
/// CLONE_SETTLS); `Ok(None)` in the child. `what` names the call's
/// arguments in its error.
///
/// # Safety
///
/// The caller has exactly one thread, and what `args` points to lives
/// for the call.
unsafe fn fork3(args: &mut CloneArgs, what: std::fmt::Arguments<'_>) -> SysResult<Option<i32>> {
    // SAFETY: clone3 without CLONE_VM/CLONE_SETTLS and with a null stack
    // behaves like fork, in a process with one thread (the caller's
    // promise); `args` lives for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        r if r < 0 => err("clone3", what, last_errno()),
        0 => Ok(None),
        child => Ok(Some(child as i32)),
    }
}

/// fork(2) whose child is born in the cgroup whose directory `cgroup` is
/// open on (unified hierarchy): clone3 with `CLONE_INTO_CGROUP`, so that
/// no move into it follows. A move (a write to `cgroup.procs`) takes the
/// kernel's host-wide threadgroup lock for writing, which waits for an
/// RCU grace period on a cgroup2 mount without `favordynmods`: a fork
/// server that moved each child serialised every run of the host on it.
/// The kernel checks the move as if the caller wrote the pid into the
/// cgroup's `cgroup.procs` (that file and the common ancestor's writable
/// by it; with `nsdelegate`, both cgroups in its cgroup namespace). Its
/// errors as clone3 gives them (ENOSYS without clone3 or under a filter
/// that refuses it, EACCES, ENOENT, EBUSY…): the caller forks otherwise.
/// `Ok(None)` in the child, `Ok(Some(pid))` in the caller.
///
/// # Safety
///
/// As for fork: the caller has exactly one thread. No handler of
/// `pthread_atfork` runs, and the C library's record of the thread's id
/// in the child is the caller's until the child forks again with the C
/// library's fork or execs: the child must not rely on either (the fork
/// server's child forks its payload with the C library's fork).
pub unsafe fn fork_into_cgroup(cgroup: RawFd) -> SysResult<Option<i32>> {
    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..Default::default()
    };
    // SAFETY: one thread, the caller's promise; `args` points to nothing.
    unsafe { fork3(&mut args, format_args!("CLONE_INTO_CGROUP")) }
}

/// [`clone_jail`] with CLONE_NEWPID in `ns_flags` after `setns(fd,
/// CLONE_NEWPID)` ([`super::setns_pid`]): the kernel makes a new pid
/// namespace only from a process whose own pid namespace is its children's,
/// so an intermediate process, born in the joined namespace, clones the
/// jail with CLONE_PARENT (the jail is our child, as from [`clone_jail`])
/// and exits. It shares our fd table (the pidfd it gets is ours) and sends
/// the pidfd's number, how it cloned, or the errno, over a pipe. The jail's
/// pid as we see it comes from its pidfd. The caller must be
/// single-threaded.
pub fn clone_jail_nested(ns_flags: u64, cgroup: Option<RawFd>) -> SysResult<(Cloned, CloneVia)> {
    use std::os::fd::AsRawFd;
    let (r, w) = super::pipe()?;
    // SAFETY: clone(2) without CLONE_VM and with a null stack behaves like
    // fork: the intermediate runs on a copy of this single-threaded
    // address space; CLONE_FILES makes it share our fd table, into which it
    // only adds the pidfd (it closes nothing: it leaves by exit_now).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_FILES | libc::SIGCHLD) as u64,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if ret < 0 {
        return err("clone", "intermediate for CLONE_NEWPID", last_errno());
    }
    if ret == 0 {
        let flags = ns_flags | libc::CLONE_PARENT as u64;
        let msg: [i32; 2] = match clone_jail(flags, cgroup) {
            // The jail: a copy of the intermediate, hence of us; it goes on
            // as the child of clone_jail would. Its fd table is a copy: the
            // pipe's ends close when their values drop.
            Ok((Cloned::Child, via)) => return Ok((Cloned::Child, via)),
            Ok((Cloned::Parent { pidfd, .. }, via)) => {
                let n = pidfd.as_raw_fd();
                // Ours now (the shared table): not closed here.
                std::mem::forget(pidfd);
                [n, via as i32]
            }
            Err(e) => [-1, e.errno as i32],
        };
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&msg[0].to_ne_bytes());
        bytes[4..].copy_from_slice(&msg[1].to_ne_bytes());
        let _ = super::write_all(w.as_raw_fd(), &bytes);
        super::exit_now(0);
    }
    // The fd table is shared: our end of the pipe goes only once the
    // intermediate (which writes its 8 bytes without blocking) is gone.
    let _ = super::waitpid(ret as i32, false);
    drop(w);
    let mut bytes = [0u8; 8];
    let n = super::read(r.as_raw_fd(), &mut bytes)?;
    if n != 8 {
        return err("clone", "intermediate for CLONE_NEWPID", Errno::ECHILD);
    }
    let fd = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let code = i32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if fd < 0 {
        return err("clone3", flags_text(ns_flags), Errno::from_raw(code));
    }
    // SAFETY: the intermediate stored a fresh pidfd in our shared fd table
    // and exited without closing it: nobody else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    let via = match code {
        c if c == CloneVia::Clone3IntoCgroup as i32 => CloneVia::Clone3IntoCgroup,
        c if c == CloneVia::Clone3 as i32 => CloneVia::Clone3,
        _ => CloneVia::Clone,
    };
    let pid = pidfd_pid(&pidfd)?;
    Ok((Cloned::Parent { pid, pidfd }, via))
}

/// The pid of a pidfd's process in our pid namespace (PIDFD_GET_INFO,
/// Linux 6.13; else the pidfd's fdinfo, whose pid is that of /proc's
/// namespace, ours unless /proc is an outer one).
fn pidfd_pid(pidfd: &OwnedFd) -> SysResult<i32> {
    use std::os::fd::AsRawFd;
    /// struct pidfd_info's first version (64 bytes) from <linux/pidfd.h>.
    #[repr(C)]
    #[derive(Default)]
    struct PidfdInfo {
        mask: u64,
        cgroupid: u64,
        ids: [u32; 12],
    }
    /// _IOWR(PIDFS_IOCTL_MAGIC, 11, struct pidfd_info) for its 64 bytes.
    const PIDFD_GET_INFO: libc::c_ulong = 0xC040_FF0B;
    const PIDFD_INFO_PID: u64 = 1;
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_PID,
        ..Default::default()
    };
    // SAFETY: the ioctl writes at most the 64 bytes of `info`, which lives
    // on this frame for the call.
    let r = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_INFO as _, &mut info) };
    if r == 0 && info.mask & PIDFD_INFO_PID != 0 && info.ids[0] != 0 {
        return Ok(info.ids[0] as i32);
    }
    let path = format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd());
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse::<i32>().ok())
        .filter(|p| *p > 0)
        .map_or_else(|| err("read", path, Errno::ESRCH), Ok)
}

fn clone_legacy(ns_flags: u64) -> SysResult<Cloned> {
    let mut pidfd: RawFd = -1;
    let flags = ns_flags | libc::CLONE_PIDFD as u64 | libc::SIGCHLD as u64;
    // SAFETY: raw clone(2) on x86_64 takes (flags, newsp, parent_tid, child_tid,
    // tls). A null stack means the child runs on a copy-on-write copy of our
    // stack, like fork. With CLONE_PIDFD the pidfd is written to parent_tid,
    // which points to a local that outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            0usize,
            &mut pidfd as *mut RawFd,
            0usize,
            0usize,
        )
    };
    if ret < 0 {
        return err("clone", flags_text(ns_flags), last_errno());
    }
    if ret == 0 {
        return Ok(Cloned::Child);
    }
    // SAFETY: the kernel stored a fresh pidfd that nobody else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Cloned::Parent {
        pid: ret as i32,
        pidfd,
    })
}

fn flags_text(f: u64) -> String {
    let names = [
        (libc::CLONE_NEWUSER, "NEWUSER"),
        (libc::CLONE_NEWNS, "NEWNS"),
        (libc::CLONE_NEWPID, "NEWPID"),
        (libc::CLONE_NEWNET, "NEWNET"),
        (libc::CLONE_NEWIPC, "NEWIPC"),
        (libc::CLONE_NEWUTS, "NEWUTS"),
        (libc::CLONE_NEWCGROUP, "NEWCGROUP"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| f & (*b as u64) != 0)
        .map(|(_, n)| *n)
        .collect();
    format!("CLONE_{}", v.join("|CLONE_"))
}

//! Creating the jail's first process: clone3 into new namespaces (and,
//! where possible, straight into the run's cgroup), with clone(2) as the
//! fallback.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{err, last_errno, Errno, SysResult};

/// Result of [`clone_jail`].
pub enum Cloned {
    /// We are the new process, pid 1 of the new pid namespace.
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
        exit_signal: libc::SIGCHLD as u64,
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
    // SAFETY: clone3 without CLONE_VM/CLONE_SETTLS and with a null stack
    // behaves like fork, and this process is single-threaded (checked
    // above), so the child may use the allocator and std freely. `args`
    // and `tid` live on this stack frame for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        r if r < 0 => err("clone3", format!("set_tid {pid}"), last_errno()),
        0 => Ok(None),
        child => Ok(Some(child as i32)),
    }
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

//! Processes: fork, exit, signals to a process, waiting for one, execve.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};

use super::{err, last_errno, setresuid, Errno, SysResult};

/// Send `sig` to every process whose uid is `uid` (but the sender), in one
/// pass: a short-lived child of ours takes that uid and calls kill(-1). The
/// kernel signals the matching processes under its task list lock, so a
/// fork racing with it either completes first (and its child is signalled)
/// or fails. Only exact when `uid` belongs to one jail alone. The caller
/// must be single-threaded and may hold the privilege to change uid.
pub fn kill_every_process_of(uid: u32, sig: i32) -> SysResult<()> {
    // SAFETY: the caller is single-threaded (this function's contract).
    match unsafe { fork() }? {
        None => {
            if setresuid(uid).is_err() {
                exit_now(2);
            }
            // ESRCH: no process has the uid (all gone already).
            // SAFETY: kill(2) with integers only.
            let r = unsafe { libc::kill(-1, sig) };
            exit_now(if r == 0 || last_errno() == Errno::ESRCH {
                0
            } else {
                1
            })
        }
        Some(pid) => match waitpid(pid, false)? {
            Some((_, 0)) => Ok(()),
            _ => err("kill", format!("-1 as uid {uid}, {sig}"), Errno::EPERM),
        },
    }
}

/// fork(2): `None` in the child, the child's pid in the parent.
///
/// # Safety
///
/// The calling process must be single-threaded: the child gets only the
/// calling thread, and a lock another thread held at the fork (the
/// allocator's, stdio's, the environment's) would stay locked for ever in
/// the child, which may use the allocator and std freely only because no
/// other thread existed.
pub unsafe fn fork() -> SysResult<Option<i32>> {
    // SAFETY: the caller guarantees a single-threaded process (above).
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => Ok(None),
        Ok(nix::unistd::ForkResult::Parent { child }) => Ok(Some(child.as_raw())),
        Err(e) => err("fork", "", e),
    }
}

/// fork(2) when this process has exactly one thread (the caller: no other
/// thread exists that could start one meanwhile), so the child may use the
/// allocator and std freely; EBUSY when it has more (or the count cannot be
/// read).
pub fn fork_single_threaded() -> SysResult<Option<i32>> {
    if thread_count() != 1 {
        return err("fork", "a multi-threaded process", Errno::EBUSY);
    }
    // SAFETY: single-threaded, checked above; a thread count of one cannot
    // grow behind our back.
    unsafe { fork() }
}

/// Leave at once without running destructors or atexit handlers (the state
/// is a fork of the supervisor's).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

pub fn setsid() -> SysResult<()> {
    nix::unistd::setsid()
        .map(|_| ())
        .or_else(|e| err("setsid", "", e))
}

/// In `cmd`'s child, before exec: `setsid` (a session and process group
/// of its own, whose id is the child's pid), and no signal blocked (std's
/// spawn passes the caller's mask on: a caller that blocks the signals it
/// reads from a signalfd would hand them blocked to the program).
pub fn setsid_before_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let hook = || {
        // SAFETY: setsid takes no argument.
        if unsafe { libc::setsid() } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: an empty set on the stack, initialised by sigemptyset
        // before sigprocmask reads it; no old mask is asked for.
        let r = unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes
    // async-signal-safe calls only, allocating nothing and taking no lock.
    unsafe { cmd.pre_exec(hook) };
}

pub fn getpgid(pid: i32) -> SysResult<i32> {
    nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid)))
        .map(|p| p.as_raw())
        .or_else(|e| err("getpgid", pid, e))
}

pub fn getpid() -> i32 {
    nix::unistd::getpid().as_raw()
}

pub fn kill(pid: i32, sig: i32) -> SysResult<()> {
    // SAFETY: kill takes integers only.
    let r = unsafe { libc::kill(pid, sig) };
    if r < 0 {
        return err("kill", format!("{pid}, {sig}"), last_errno());
    }
    Ok(())
}

/// A pidfd of the calling process.
pub fn pidfd_self() -> SysResult<OwnedFd> {
    pidfd_open(getpid())
}

/// A pidfd of process `pid`: for a child of ours not yet reaped, it is
/// that child's (its pid cannot be reused until we reap it).
pub fn pidfd_open(pid: i32) -> SysResult<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open of a pid with no flags; it returns a new fd or -1.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        return err("pidfd_open", pid, last_errno());
    }
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
}

pub fn pidfd_send_signal(pidfd: &OwnedFd, sig: i32) -> SysResult<()> {
    // SAFETY: pidfd_send_signal with a valid pidfd, a signal number, a null
    // siginfo and no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return err("pidfd_send_signal", sig, last_errno());
    }
    Ok(())
}

/// How a child ended, with its resource usage.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChildEnd {
    /// Exit code when it exited.
    pub code: Option<i32>,
    /// Signal when it was killed.
    pub signal: Option<i32>,
}

impl ChildEnd {
    pub fn from_wait_status(st: i32) -> ChildEnd {
        if libc::WIFEXITED(st) {
            ChildEnd {
                code: Some(libc::WEXITSTATUS(st)),
                ..Default::default()
            }
        } else if libc::WIFSIGNALED(st) {
            ChildEnd {
                signal: Some(libc::WTERMSIG(st)),

                ..Default::default()
            }
        } else {
            ChildEnd::default()
        }
    }
}

/// waitpid(pid, WNOHANG or blocking), retrying EINTR. Returns the raw status.
pub fn waitpid(pid: i32, nohang: bool) -> SysResult<Option<(i32, i32)>> {
    let mut st: libc::c_int = 0;
    loop {
        // SAFETY: `st` is a valid out-pointer for the duration of the call.
        let r = unsafe { libc::waitpid(pid, &mut st, if nohang { libc::WNOHANG } else { 0 }) };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("waitpid", pid, e);
        }
        if r == 0 {
            return Ok(None);
        }
        return Ok(Some((r, st)));
    }
}

/// Has the child `pid` ended? Looks without reaping it (WNOWAIT): its
/// zombie keeps holding its pid, and so its process group's number.
pub fn ended_unreaped(pid: i32) -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(nix::unistd::Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => return true,
            Err(Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// The pid of a child that has ended, left unreaped (WNOWAIT), or None
/// when no child has ended yet. Reaping that pid next (and no other)
/// lets the caller act while the zombie still holds its number.
pub fn dead_child_unreaped() -> SysResult<Option<i32>> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::All, flags) {
            Ok(WaitStatus::StillAlive) => return Ok(None),
            Ok(st) => return Ok(st.pid().map(|p| p.as_raw())),
            Err(Errno::EINTR) => continue,
            Err(e) => return err("waitid", -1, e),
        }
    }
}

/// wait4 on a pid, blocking, with rusage of the reaped child (and its
/// reaped descendants).
pub fn wait4(pid: i32) -> SysResult<(i32, libc::rusage)> {
    let mut st: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both out-pointers are valid for the duration of the call.
        let r = unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR {
                continue;
            }
            return err("wait4", pid, e);
        }
        return Ok((st, ru));
    }
}

/// The number of threads of this process (from /proc/self/status).
pub fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(usize::MAX)
}

/// execve; returns only on failure, with the errno.
pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> Errno {
    match nix::unistd::execve(path, argv, envp) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// The id of host thread `tid` in its innermost pid namespace (the last
/// `NSpid:` field of its status), or None once it is gone.
pub fn ns_tid(tid: u32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// getrusage(RUSAGE_CHILDREN): what the caller's reaped children used.
pub fn rusage_children() -> libc::rusage {
    // SAFETY: rusage is plain old data; zeroed is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for the call.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru
}

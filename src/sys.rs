//! The one place that talks to the kernel directly.
//!
//! Every raw call goes through a function here whose error names the call and
//! its argument (`pivot_root("/tmp/.stockade-root"): EPERM`). This is the only
//! module allowed to contain `unsafe`; each block says why it is sound.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

pub use nix::errno::Errno;

#[allow(unsafe_code)]
pub mod at;
#[allow(unsafe_code)]
pub mod cgroup;
#[allow(unsafe_code)]
pub mod fdpass;
#[allow(unsafe_code)]
pub mod landlock;
#[allow(unsafe_code)]
pub mod netns;
#[allow(unsafe_code)]
pub mod seccomp;

/// A failed system call: which call, on what, and the errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysError {
    pub call: &'static str,
    pub arg: String,
    pub errno: Errno,
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({}): {}", self.call, self.arg, errno_text(self.errno))
    }
}

impl std::error::Error for SysError {}

/// `ENOENT: No such file or directory`.
pub fn errno_text(e: Errno) -> String {
    e.to_string()
}

pub type SysResult<T> = Result<T, SysError>;

fn err<T>(call: &'static str, arg: impl fmt::Display, errno: Errno) -> SysResult<T> {
    Err(SysError {
        call,
        arg: arg.to_string(),
        errno,
    })
}

fn cpath(p: &Path) -> CString {
    // Paths reaching here come from Policy/Plan, which rejects NUL bytes.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|_| CString::from(c"/nonexistent"))
}

fn last_errno() -> Errno {
    Errno::last()
}

// ---------------------------------------------------------------- process

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

/// Start `child` in a new process that shares our memory until it calls
/// execve or exits, as vfork(2) does: the caller is suspended until then.
/// This skips fork's copy of the page tables and the copy-on-write faults
/// that follow it in both processes. Returns the child's pid.
///
/// `child` runs on its own stack and must end in execve or [`exit_now`]. It
/// must not close or drop anything of ours: our fd table is copied (no
/// CLONE_FILES), but values it moves out of shared memory are gone for us
/// too.
///
/// # Safety
///
/// The calling process must be single-threaded, so that no lock (the
/// allocator's included) can be held by anyone else while the child runs
/// in our memory; and `child` must not drop, move out or close anything
/// the caller still owns, and must end in execve or [`exit_now`].
pub unsafe fn spawn_vfork(child: &mut dyn FnMut() -> std::convert::Infallible) -> SysResult<i32> {
    // SAFETY: the caller upholds spawn_vfork_with's contract (the same).
    unsafe { spawn_vfork_with(0, child) }
}

/// [`spawn_vfork`] with more clone flags (CLONE_FILES: the child's new fds
/// are ours too).
///
/// # Safety
///
/// As [`spawn_vfork`].
pub unsafe fn spawn_vfork_with(
    extra: libc::c_int,
    child: &mut dyn FnMut() -> std::convert::Infallible,
) -> SysResult<i32> {
    const STACK: usize = 1 << 20;
    const GUARD: usize = 1 << 16;
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut &mut dyn FnMut` built below; it lives in
        // the parent's frame, which stays put while the parent is suspended.
        let f = unsafe { &mut *(arg as *mut &mut dyn FnMut() -> std::convert::Infallible) };
        // The release profile aborts on panic; a debug build unwinds here,
        // where the child just ends.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match f() {}));
        exit_now(125)
    }
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return err("mmap", "child stack", last_errno());
    }
    // A guard at the low end: an overflow faults instead of writing into
    // our memory below the stack.
    // SAFETY: the range lies within the mapping made above.
    if unsafe { libc::mprotect(stack, GUARD, libc::PROT_NONE) } < 0 {
        let e = last_errno();
        // SAFETY: unmapping exactly the mapping made above.
        unsafe { libc::munmap(stack, STACK) };
        return err("mprotect", "child stack guard", e);
    }
    let mut f: &mut dyn FnMut() -> std::convert::Infallible = child;
    // SAFETY: the stack top is the end of our mapping (16-byte aligned, as
    // mmap returns page-aligned memory); with CLONE_VFORK we do not run
    // again until the child has left this address space (execve) or exited,
    // so `f` and the stack outlive every use the child makes of them.
    let r = unsafe {
        clone_on_stack(
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | extra,
            (stack as *mut u8).add(STACK),
            trampoline,
            &mut f as *mut &mut dyn FnMut() -> std::convert::Infallible as *mut libc::c_void,
        )
    };
    // SAFETY: the child no longer uses the stack (it has exec'd or exited).
    unsafe { libc::munmap(stack, STACK) };
    if r < 0 {
        return err("clone", "CLONE_VM|CLONE_VFORK", Errno::from_raw(-r as i32));
    }
    Ok(r as i32)
}

/// The clone system call with the child on `stack_top`, running
/// `f(arg)` and then exiting; returns the child's pid or `-errno`.
///
/// Not libc's clone(): musl's wrapper emulates fork in the child, writing
/// the child's tid into the thread descriptor it shares with us under
/// CLONE_VM. Here nothing of libc runs between clone and `f`.
///
/// # Safety
/// `stack_top` must be the 16-byte-aligned top of memory the child may use
/// as its stack, valid until the child has exited or exec'd; `f` must
/// never return into the caller's frame (it runs on the new stack) and
/// `arg` must stay valid for it; with CLONE_VM, the caller must not run
/// again until then (CLONE_VFORK).
#[cfg(target_arch = "x86_64")]
unsafe fn clone_on_stack(
    flags: libc::c_int,
    stack_top: *mut u8,
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 clone ABI: clone(flags, newsp, ptid, ctid, tls)
    // in rdi, rsi, rdx, r10, r8; the kernel clobbers rcx and r11 and keeps
    // every other register, so the child finds `f` and `arg` in r13 and
    // r12, on its new stack (aligned: the call pushes the return address
    // as the ABI expects). The child calls f(arg) and exits with its
    // result; it never comes back here. The parent continues at 2.
    unsafe {
        core::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone as isize => ret,
            in("rdi") flags as usize,
            in("rsi") stack_top,
            in("rdx") 0usize,
            in("r10") 0usize,
            in("r8") 0usize,
            in("r12") arg,
            in("r13") f,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// As for the x86_64 version.
#[cfg(target_arch = "aarch64")]
unsafe fn clone_on_stack(
    flags: libc::c_int,
    stack_top: *mut u8,
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 clone ABI: clone(flags, newsp, ptid, tls, ctid)
    // in x0-x4, number in x8; the kernel returns in x0 and keeps every
    // other register, so the child finds `arg` and `f` in x9 and x10, on
    // its new (16-byte aligned) stack. The child calls f(arg) and exits
    // with its result; the parent continues at 2.
    unsafe {
        core::arch::asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x0, x9",
            "blr x10",
            "mov x8, {exit}",
            "svc 0",
            "brk #0",
            "2:",
            exit = const libc::SYS_exit,
            in("x8") libc::SYS_clone,
            inlateout("x0") flags as usize => ret,
            in("x1") stack_top,
            in("x2") 0usize,
            in("x3") 0usize,
            in("x4") 0usize,
            in("x9") arg,
            in("x10") f,
        );
    }
    ret
}

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

pub fn getpgid(pid: i32) -> SysResult<i32> {
    nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid)))
        .map(|p| p.as_raw())
        .or_else(|e| err("getpgid", pid, e))
}

pub fn getpid() -> i32 {
    nix::unistd::getpid().as_raw()
}

pub fn getuid() -> u32 {
    nix::unistd::getuid().as_raw()
}

pub fn geteuid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

pub fn getegid() -> u32 {
    nix::unistd::getegid().as_raw()
}

fn prctl(op: libc::c_int, a: libc::c_ulong, name: &'static str) -> SysResult<libc::c_int> {
    // SAFETY: the prctl operations used here take integer arguments only.
    let r = unsafe {
        libc::prctl(
            op,
            a,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return err("prctl", name, last_errno());
    }
    Ok(r)
}

pub fn set_pdeathsig(sig: i32) -> SysResult<()> {
    prctl(
        libc::PR_SET_PDEATHSIG,
        sig as libc::c_ulong,
        "PR_SET_PDEATHSIG",
    )
    .map(|_| ())
}

/// Where the kernel put our argument strings: `[start, end)`, found from
/// argv when the program starts (glibc, see `ARGV_RANGE_INIT`) or from
/// /proc before clone ([`record_argv_range_from_proc`]); 0 if unknown.
static ARGV_START: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static ARGV_END: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cfg(target_env = "gnu")]
extern "C" fn record_argv_range(
    argc: libc::c_int,
    argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    if argc < 1 || argv.is_null() {
        return;
    }
    // SAFETY: glibc calls .init_array functions with the process's own
    // argc and argv: argc valid pointers to NUL-terminated strings, which
    // the kernel laid out one after another on the initial stack.
    unsafe {
        let first = *argv;
        let last = *argv.add(argc as usize - 1);
        if first.is_null() || last.is_null() {
            return;
        }
        let end = last as usize + libc::strlen(last) + 1;
        ARGV_START.store(first as usize, std::sync::atomic::Ordering::Relaxed);
        ARGV_END.store(end, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs before main, as the standard library's own argument capture does
/// on glibc (which, unlike musl, passes argc, argv and envp to these
/// functions); it only reads argv and stores two integers.
#[cfg(target_env = "gnu")]
#[used]
#[link_section = ".init_array"]
static ARGV_RANGE_INIT: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = record_argv_range;

/// Make sure the argv string area is known before clone: recorded before
/// main (glibc), or else read from /proc/self/stat (fields 48 and 49,
/// arg_start and arg_end) here, so init does not read it between clone
/// and the payload's execve.
pub fn record_argv_range_from_proc() {
    if ARGV_START.load(std::sync::atomic::Ordering::Relaxed) != 0 {
        return;
    }
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return;
    };
    let mut f = rest.split(' ').skip(45);
    if let (Some(a), Some(b)) = (
        f.next().and_then(|v| v.parse().ok()),
        f.next().and_then(|v| v.parse().ok()),
    ) {
        ARGV_END.store(b, std::sync::atomic::Ordering::Relaxed);
        ARGV_START.store(a, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Replace what /proc/self/cmdline shows with `name`: the jail's init is a
/// clone of the supervisor, whose command line names host paths the payload
/// must not learn. Best effort: on any doubt it leaves the area as it is.
pub fn scrub_cmdline(name: &[u8]) {
    let start = ARGV_START.load(std::sync::atomic::Ordering::Relaxed);
    let end = ARGV_END.load(std::sync::atomic::Ordering::Relaxed);
    if start == 0 || end <= start || end - start > 1 << 20 || name.len() >= end - start {
        return;
    }
    // SAFETY: [start, end) is this process's own argv string area (from
    // argv before main, or the kernel's arg_start/arg_end), mapped and
    // writable on the initial stack.
    // Only the C strings are overwritten, never the argv pointer array;
    // after clone, nothing in this process reads the arguments again (the
    // CLI parsed them before), and the supervisor's copy is a separate
    // copy-on-write page.
    unsafe {
        let p = start as *mut u8;
        std::ptr::write_bytes(p, 0, end - start);
        std::ptr::copy_nonoverlapping(name.as_ptr(), p, name.len());
    }
}

pub fn set_child_subreaper() -> SysResult<()> {
    prctl(libc::PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER").map(|_| ())
}

pub fn set_dumpable(on: bool) -> SysResult<()> {
    prctl(
        libc::PR_SET_DUMPABLE,
        on as libc::c_ulong,
        "PR_SET_DUMPABLE",
    )
    .map(|_| ())
}

pub fn set_keepcaps(on: bool) -> SysResult<()> {
    prctl(
        libc::PR_SET_KEEPCAPS,
        on as libc::c_ulong,
        "PR_SET_KEEPCAPS",
    )
    .map(|_| ())
}

pub fn set_no_new_privs() -> SysResult<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_NO_NEW_PRIVS,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return err("prctl", "PR_SET_NO_NEW_PRIVS", last_errno());
    }
    Ok(())
}

pub fn setresuid(uid: u32) -> SysResult<()> {
    let u = nix::unistd::Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).or_else(|e| err("setresuid", uid, e))
}

pub fn setresgid(gid: u32) -> SysResult<()> {
    let g = nix::unistd::Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).or_else(|e| err("setresgid", gid, e))
}

/// Run `f` with the calling thread's file-system uid and gid set to `uid`
/// and `gid`, then set them back. setfsuid/setfsgid act on the calling
/// thread only, and the kernel's access checks for /proc/PID/mem, fd and
/// cwd (PTRACE_MODE_FSCREDS) compare the target's ids with these: root
/// without CAP_SYS_PTRACE reads another uid's /proc this way. Needs
/// CAP_SETUID and CAP_SETGID (root's own ids need nothing).
pub fn with_fsids<T>(uid: u32, gid: u32, f: impl FnOnce() -> T) -> SysResult<T> {
    use nix::unistd::{setfsgid, setfsuid, Gid, Uid};
    // Each call returns the previous value whether or not it changed it;
    // -1 is never a valid id, so setfs*id(-1) only reports the current one.
    let old_gid = setfsgid(Gid::from_raw(gid));
    let old_uid = setfsuid(Uid::from_raw(uid));
    let restore = || {
        setfsuid(old_uid);
        setfsgid(old_gid);
    };
    if setfsgid(Gid::from_raw(u32::MAX)).as_raw() != gid
        || setfsuid(Uid::from_raw(u32::MAX)).as_raw() != uid
    {
        restore();
        return err("setfsuid", format_args!("{uid}:{gid}"), Errno::EPERM);
    }
    let r = f();
    restore();
    Ok(r)
}

/// The extended attribute `name` of the file at `path` (following
/// symlinks, /proc's magic links included), at most 255 bytes.
pub fn getxattr(path: &Path, name: &CStr) -> SysResult<Vec<u8>> {
    let p = cpath(path);
    let mut buf = vec![0u8; 255];
    // SAFETY: `p` and `name` are NUL-terminated strings, and the kernel
    // writes at most `buf.len()` bytes into `buf`, which we own.
    let r = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if r < 0 {
        return err("getxattr", path.display(), last_errno());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// Make the permitted capabilities effective again (after a setresuid under
/// PR_SET_KEEPCAPS).
pub fn raise_effective_caps() -> SysResult<()> {
    let permitted = caps::read(None, caps::CapSet::Permitted)
        .or_else(|_| err("capget", "permitted", Errno::EINVAL))?;
    caps::set(None, caps::CapSet::Effective, &permitted)
        .or_else(|_| err("capset", "effective", Errno::EPERM))
}

/// Empty the bounding set (needs CAP_SETPCAP, so before anything else).
/// Without CAP_SETPCAP (the fallback, started unprivileged) there is nothing
/// to do that we are allowed to do: the set stays, and no_new_privs keeps
/// execve from gaining any of it.
pub fn drop_bounding_caps() -> SysResult<usize> {
    if !caps::has_cap(None, caps::CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false)
    {
        return Ok(caps::read(None, caps::CapSet::Bounding).map_or(usize::MAX, |c| c.len()));
    }
    // One prctl per capability the kernel knows: EINVAL marks the end.
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes integer arguments only.
        let r = unsafe {
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                cap as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINVAL && cap > 0 {
                break;
            }
            return err("prctl", format!("PR_CAPBSET_DROP {cap}"), e);
        }
    }
    // Every drop succeeded up to the kernel's last capability.
    Ok(0)
}

/// Number of capabilities left in (effective, permitted, inheritable,
/// bounding, ambient), given what [`drop_all_caps`] said of the bounding
/// set (each of its drops succeeded, or the set as read back).
pub fn caps_left(bounding: usize) -> [usize; 5] {
    use caps::CapSet::*;
    let [e, p, i] = [Effective, Permitted, Inheritable]
        .map(|s| caps::read(None, s).map(|c| c.len()).unwrap_or(usize::MAX));
    // The kernel keeps ambient within permitted: nothing permitted, nothing
    // ambient.
    let a = if p == 0 {
        0
    } else {
        caps::read(None, Ambient).map_or(usize::MAX, |c| c.len())
    };
    [e, p, i, bounding, a]
}

/// Empty every capability set; returns how many capabilities the bounding
/// set still holds (0 unless CAP_SETPCAP was missing).
pub fn drop_all_caps() -> SysResult<usize> {
    let bounding = drop_bounding_caps()?;
    caps::clear(None, caps::CapSet::Ambient)
        .or_else(|_| err("prctl", "PR_CAP_AMBIENT_CLEAR_ALL", Errno::EPERM))?;
    for set in [
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        caps::clear(None, set).or_else(|_| err("capset", format!("{set:?}"), Errno::EPERM))?;
    }
    Ok(bounding)
}

pub fn sethostname(name: &str) -> SysResult<()> {
    nix::unistd::sethostname(name).or_else(|e| err("sethostname", name, e))
}

/// Set a resource limit (soft, hard).
pub fn setrlimit2(
    res: nix::sys::resource::Resource,
    name: &'static str,
    soft: u64,
    hard: u64,
) -> SysResult<()> {
    nix::sys::resource::setrlimit(res, soft, hard)
        .or_else(|e| err("setrlimit", format!("{name}={soft}:{hard}"), e))
}

pub fn kill(pid: i32, sig: i32) -> SysResult<()> {
    // SAFETY: kill takes integers only.
    let r = unsafe { libc::kill(pid, sig) };
    if r < 0 {
        return err("kill", format!("{pid}, {sig}"), last_errno());
    }
    Ok(())
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

/// Block `sigs` and return a signalfd for them.
pub fn signalfd_for(sigs: &[nix::sys::signal::Signal]) -> SysResult<nix::sys::signalfd::SignalFd> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let mut set = SigSet::empty();
    for s in sigs {
        set.add(*s);
    }
    set.thread_block()
        .or_else(|e| err("sigprocmask", "SIG_BLOCK", e))?;
    // An ignored signal is discarded when it is sent, blocked or not, so it
    // would never reach the signalfd (a caller that started us with SIGHUP
    // or SIGINT ignored, as nohup and shells' background jobs do). Blocked
    // first, so no default action can run in between.
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for s in sigs {
        // SAFETY: installing SIG_DFL replaces no Rust handler state; the
        // signal is blocked, so the default action cannot run.
        unsafe { sigaction(*s, &dfl) }.or_else(|e| err("sigaction", format!("{s}, SIG_DFL"), e))?;
    }
    nix::sys::signalfd::SignalFd::with_flags(
        &set,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .or_else(|e| err("signalfd", "", e))
}

/// Block `sigs` in the calling thread (to be read later from a signalfd).
pub fn block_signals(sigs: &[nix::sys::signal::Signal]) -> SysResult<()> {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in sigs {
        set.add(*s);
    }
    set.thread_block()
        .or_else(|e| err("sigprocmask", "SIG_BLOCK", e))
}

/// Unblock every signal and restore the default disposition of the ones
/// an ignore survives execve for (handlers are reset by execve itself; the
/// Rust runtime and the supervisor set SIGPIPE to SIG_IGN).
pub fn reset_signals() -> SysResult<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    SigSet::all()
        .thread_unblock()
        .or_else(|e| err("sigprocmask", "SIG_UNBLOCK", e))?;
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for s in [Signal::SIGPIPE, Signal::SIGXFSZ, Signal::SIGCHLD] {
        // SAFETY: installing SIG_DFL replaces no Rust handler state.
        unsafe { sigaction(s, &dfl) }.or_else(|e| err("sigaction", format!("{s}, SIG_DFL"), e))?;
    }
    Ok(())
}

/// SIGCHLD back to its default: a caller that ignored it (SIG_IGN survives
/// execve) would have the kernel reap our children before we wait for them.
pub fn default_sigchld() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_DFL installs no handler code.
    let _ = unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) };
}

/// Ignore SIGPIPE (the supervisor writes to pipes whose reader may be gone).
pub fn ignore_sigpipe() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    // SAFETY: SIG_IGN installs no handler code.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

// ---------------------------------------------------------------- fds

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

/// A path field of /proc/self/mountinfo, its octal escapes undone (`\040`
/// for a space: space, tab, newline and backslash are escaped).
pub fn mountinfo_path(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
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

// ---------------------------------------------------------------- mounts

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;

fn openat2(
    dirfd: RawFd,
    path: &CStr,
    flags: i32,
    resolve: u64,
    shown: &dyn fmt::Display,
) -> SysResult<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    loop {
        // SAFETY: `path` is NUL-terminated and `how` is a valid open_how that
        // outlives the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if r < 0 {
            let e = last_errno();
            if e == Errno::EINTR || e == Errno::EAGAIN {
                continue;
            }
            return err("openat2", shown, e);
        }
        // SAFETY: the kernel returned a fresh fd that nobody else owns.
        return Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) });
    }
}

/// Open an absolute host path as O_PATH, refusing any symlink on the way
/// (the path was canonicalized before; a symlink now means someone swapped
/// one in).
pub fn open_path_nofollow(path: &Path) -> SysResult<OwnedFd> {
    let c = cpath(path);
    openat2(
        libc::AT_FDCWD,
        &c,
        libc::O_PATH,
        RESOLVE_NO_SYMLINKS,
        &path.display(),
    )
}

/// Open `rel` (relative, may contain symlinks) under `root` as if `root`
/// were `/`: symlinks cannot lead out of it.
pub fn open_in_root(root: &OwnedFd, rel: &Path, flags: i32) -> SysResult<OwnedFd> {
    let c = cpath(rel);
    openat2(
        root.as_raw_fd(),
        &c,
        flags,
        RESOLVE_IN_ROOT,
        &format_args!("/{}", rel.display()),
    )
}

/// An O_PATH fd of `rel` beneath the directory `dir`: EXDEV when the path
/// (through `..` or a symlink) would leave it; no /proc magic links.
pub fn open_path_beneath(dir: &OwnedFd, rel: &Path) -> SysResult<OwnedFd> {
    let c = cpath(rel);
    openat2(
        dir.as_raw_fd(),
        &c,
        libc::O_PATH,
        RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        &rel.display(),
    )
}

/// Create every missing directory of `rel` under `root` (contained as in
/// [`open_in_root`]) and return an O_PATH fd of the last one.
pub fn mkdir_p_in_root(root: &OwnedFd, rel: &Path, mode: u32) -> SysResult<OwnedFd> {
    let mut cur = std::path::PathBuf::new();
    let mut last: Option<OwnedFd> = None;
    for comp in rel.components() {
        let name = comp.as_os_str();
        cur.push(name);
        match open_in_root(root, &cur, libc::O_PATH | libc::O_DIRECTORY) {
            Ok(fd) => last = Some(fd),
            Err(e) if e.errno == Errno::ENOENT => {
                let parent = last.as_ref().unwrap_or(root);
                mkdirat(parent, Path::new(name), mode, &cur)?;
                last = Some(open_in_root(root, &cur, libc::O_PATH | libc::O_DIRECTORY)?);
            }
            Err(e) => return Err(e),
        }
    }
    match last {
        Some(fd) => Ok(fd),
        None => open_in_root(root, Path::new("."), libc::O_PATH | libc::O_DIRECTORY),
    }
}

fn mkdirat(dir: &OwnedFd, name: &Path, mode: u32, shown: &Path) -> SysResult<()> {
    let c = cpath(name);
    // SAFETY: `c` is NUL-terminated; dir is a valid directory fd.
    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) };
    if r < 0 && last_errno() != Errno::EEXIST {
        return err("mkdir", format_args!("/{}", shown.display()), last_errno());
    }
    Ok(())
}

pub fn fd_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

pub fn mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> SysResult<()> {
    mount_c(src, &cpath(target), &target.display(), fstype, flags, data)
}

fn mount_c(
    src: Option<&str>,
    target: &CStr,
    shown: &dyn fmt::Display,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> SysResult<()> {
    let s = src.map(|s| CString::new(s).unwrap_or_default());
    let t = fstype.map(|s| CString::new(s).unwrap_or_default());
    let d = data.map(|s| CString::new(s).unwrap_or_default());
    // SAFETY: every pointer is either null or a NUL-terminated string that
    // outlives the call.
    let r = unsafe {
        libc::mount(
            s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            target.as_ptr(),
            t.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            flags,
            d.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()).cast(),
        )
    };
    if r < 0 {
        return err("mount", shown, last_errno());
    }
    Ok(())
}

/// `umount2(target, MNT_DETACH)`: detach a mount made on the host (the
/// fallback's run directory), whoever still uses it.
pub fn umount_detach(target: &Path) -> SysResult<()> {
    nix::mount::umount2(target, nix::mount::MntFlags::MNT_DETACH).or_else(|e| {
        err(
            "umount2",
            format_args!("{}, MNT_DETACH", target.display()),
            e,
        )
    })
}

/// Mount a fresh filesystem (tmpfs, proc, devpts, mqueue) on the directory `fd`
/// refers to.
pub fn mount_fs_on(
    fd: &OwnedFd,
    fstype: &str,
    flags: libc::c_ulong,
    data: Option<&str>,
    shown: &Path,
) -> SysResult<()> {
    mount_c(
        Some(fstype),
        &fd_path(fd),
        &shown.display(),
        Some(fstype),
        flags,
        data,
    )
}

/// Clone the mount tree at `src` (recursively) as a detached mount.
pub fn open_tree_clone(src: &OwnedFd, shown: &Path) -> SysResult<OwnedFd> {
    const OPEN_TREE_CLONE: u32 = 1;
    const AT_RECURSIVE: u32 = 0x8000;
    let flags =
        OPEN_TREE_CLONE | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32 | libc::O_CLOEXEC as u32;
    // SAFETY: empty NUL-terminated path with AT_EMPTY_PATH on a valid fd.
    let r = unsafe { libc::syscall(libc::SYS_open_tree, src.as_raw_fd(), c"".as_ptr(), flags) };
    if r < 0 {
        return err("open_tree", shown.display(), last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Set mount attributes on the mount (tree) `fd` refers to. Only the named
/// bits are set; locked flags are left as they are, so this never trips
/// over flags the kernel locked in a user namespace.
pub fn mount_setattr(fd: &OwnedFd, set: u64, recursive: bool, shown: &Path) -> SysResult<()> {
    const AT_RECURSIVE: u32 = 0x8000;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: empty path with AT_EMPTY_PATH on a valid fd; `attr` outlives
    // the call and its size is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return err("mount_setattr", shown.display(), last_errno());
    }
    Ok(())
}

/// (st_dev, st_ino, st_mode) of an fd.
/// (st_mode, st_size) of `fd`.
pub fn fstat_mode_size(fd: &OwnedFd) -> SysResult<(u32, u64)> {
    let st = nix::sys::stat::fstat(fd).or_else(|e| err("fstat", fd.as_raw_fd(), e))?;
    Ok((st.st_mode, st.st_size as u64))
}

/// Open what the O_PATH fd `fd` refers to, for reading.
pub fn reopen_read(fd: &OwnedFd) -> SysResult<OwnedFd> {
    let p = fd_path(fd);
    // SAFETY: `p` is NUL-terminated and outlives the call.
    let r = unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if r < 0 {
        return err("open", fd.as_raw_fd(), last_errno());
    }
    // SAFETY: fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

pub fn fstat_id(fd: &OwnedFd) -> SysResult<(u64, u64, u32)> {
    let st = nix::sys::stat::fstat(fd).or_else(|e| err("fstat", fd.as_raw_fd(), e))?;
    Ok((st.st_dev, st.st_ino, st.st_mode))
}

/// pivot_root into `newroot` (an absolute path we mounted), stacking the old
/// root under it and detaching that at once (the ". ." idiom). Returns
/// false when pivot_root was refused and a move + chroot was used instead.
pub fn pivot_root_and_detach(newroot: &Path) -> SysResult<bool> {
    nix::unistd::chdir(newroot).or_else(|e| err("chdir", newroot.display(), e))?;
    // SAFETY: both arguments are NUL-terminated static strings.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
    if r < 0 {
        let e = last_errno();
        if e != Errno::EPERM && e != Errno::EINVAL {
            return err("pivot_root", newroot.display(), e);
        }
        // EPERM: some container runtimes' seccomp profiles refuse pivot_root
        // even with CAP_SYS_ADMIN. EINVAL: / is the initramfs (rootfs), which
        // cannot be pivoted away from. Move the new root over / and chroot into it:
        // the old root stays underneath, unreachable without
        // CAP_SYS_CHROOT, which the payload never holds.
        mount_c(Some("."), c"/", &"/", None, libc::MS_MOVE, None)?;
        nix::unistd::chroot(".").or_else(|e| err("chroot", newroot.display(), e))?;
        nix::unistd::chdir("/").or_else(|e| err("chdir", "/", e))?;
        return Ok(false);
    }
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)
        .or_else(|e| err("umount2", "old root", e))?;
    nix::unistd::chdir("/").or_else(|e| err("chdir", "/", e))?;
    Ok(true)
}

/// A new cgroup namespace rooted at the caller's current cgroup.
pub fn unshare_cgroupns() -> SysResult<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
        .or_else(|e| err("unshare", "CLONE_NEWCGROUP", e))
}

pub fn chdir(p: &Path) -> SysResult<()> {
    nix::unistd::chdir(p).or_else(|e| err("chdir", p.display(), e))
}

/// Bring the loopback interface up in the current network namespace.
/// Move the calling thread into the network namespace `ns`.
pub fn enter_netns(ns: &OwnedFd) -> SysResult<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
        .or_else(|e| err("setns", "CLONE_NEWNET", e))
}

// ---------------------------------------------------------------- exec

/// execve; returns only on failure, with the errno.
pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> Errno {
    match nix::unistd::execve(path, argv, envp) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

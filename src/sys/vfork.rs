//! Starting a process that shares our memory until it calls execve or
//! exits (vfork semantics on a stack of its own), without libc's clone
//! wrapper.

use super::{err, exit_now, last_errno, Errno, SysResult};

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

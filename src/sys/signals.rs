//! Signal masks and dispositions, and the signalfd the supervisor and init
//! read signals from.

use super::{err, SysResult};

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

/// Unblock every signal and restore the default disposition of every one
/// (an ignore survives execve, and whoever started the caller may have
/// ignored any: nohup's SIGHUP, the Rust runtime's SIGPIPE, a server's
/// realtime signals; handlers are reset by execve itself). By the raw
/// call: libc's wrapper refuses the realtime signals it keeps for itself.
pub fn reset_signals() -> SysResult<()> {
    use nix::sys::signal::SigSet;
    SigSet::all()
        .thread_unblock()
        .or_else(|e| err("sigprocmask", "SIG_UNBLOCK", e))?;
    // The kernel's struct sigaction, all zero: SIG_DFL, no flags, no mask
    // (zero whatever its layout on this architecture).
    let dfl = [0u64; 4];
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: the kernel reads an all-zero struct (SIG_DFL) from a live
        // buffer at least as large as its struct sigaction, and writes
        // nothing (no old action asked for).
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                dfl.as_ptr(),
                std::ptr::null_mut::<libc::c_void>(),
                8 as libc::size_t,
            )
        };
        if r < 0 {
            let e = super::last_errno();
            // Past the kernel's last signal.
            if e == nix::errno::Errno::EINVAL && sig > 32 {
                break;
            }
            return err("rt_sigaction", format!("{sig}, SIG_DFL"), e);
        }
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

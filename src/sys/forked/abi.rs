//! The zygote's door to these steps, as the shared library exports it
//! (`src/confine`): integers only, no pointer crosses it. Each returns 0,
//! or -1 with the reason written on stderr (the server's log).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use super::failure::{bad, failure, Failed};
use super::Zygote;

static ZYGOTE: OnceLock<Zygote> = OnceLock::new();

fn said(what: &str, r: crate::SysResult<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            let _ = crate::write_all(2, format!("stockade: zygote: {what}: {e}\n").as_bytes());
            -1
        }
    }
}

fn zygote() -> crate::SysResult<&'static Zygote> {
    ZYGOTE.get().ok_or_else(|| bad("not prepared"))
}

/// Read the recipe from the hand-off pipe `handoff`, whose fd this
/// takes (and closes).
#[no_mangle]
pub extern "C" fn stockade_zygote_prepare(handoff: RawFd) -> i32 {
    if handoff < 0 {
        return said("prepare", Err(bad("no hand-off")));
    }
    // SAFETY: the caller gives the fd up to us: no value of its owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(handoff) };
    said(
        "prepare",
        Zygote::prepare(fd).and_then(|z| ZYGOTE.set(z).map_err(|_| bad("prepared twice"))),
    )
}

/// Say ready on the server's socket `sock`: `R` and the layers'
/// records, one message, with a pidfd of the zygote (where the kernel
/// gives one): the server tells from it that the zygote has ended
/// before anything else it held goes.
#[no_mangle]
pub extern "C" fn stockade_zygote_ready(sock: RawFd) -> i32 {
    said(
        "ready",
        zygote().and_then(|z| {
            let mut m = b"R".to_vec();
            m.extend_from_slice(z.layers());
            match crate::pidfd_self() {
                Ok(me) => {
                    crate::fdpass::send_with_fds(sock, &m, &[std::os::fd::AsRawFd::as_raw_fd(&me)])
                }
                Err(_) => crate::write_all(sock, &m),
            }
        }),
    )
}

/// [`Zygote::before_fork`].
#[no_mangle]
pub extern "C" fn stockade_zygote_before_fork() -> i32 {
    said("before fork", zygote().and_then(|z| z.before_fork()))
}

/// [`Zygote::after_fork`].
#[no_mangle]
pub extern "C" fn stockade_zygote_after_fork() -> i32 {
    said("after fork", zygote().and_then(|z| z.after_fork()))
}

/// Fork a child born in the run cgroup whose directory `cgroup` is open
/// on ([`crate::fork_into_cgroup`]): its pid in the zygote, 0 in the
/// child (where `cgroup` is closed at once), or minus the errno, with
/// nothing forked (the zygote then forks as the interpreter does, and the
/// server moves the child).
///
/// # Safety
///
/// The caller has exactly one thread and holds the interpreter's lock,
/// between `PyOS_BeforeFork` and `PyOS_AfterFork_Parent` or
/// `PyOS_AfterFork_Child`, as `os.fork` calls fork (serve/zygote.py). In
/// the child, nothing relies on the C library's fork handlers: the
/// child's payload is forked with the C library's fork
/// ([`Zygote::confine`]).
#[no_mangle]
pub unsafe extern "C" fn stockade_zygote_fork_into(cgroup: RawFd) -> i64 {
    // SAFETY: one thread, the caller's promise (above).
    match unsafe { crate::fork_into_cgroup(cgroup) } {
        Ok(Some(pid)) => pid as i64,
        Ok(None) => {
            // SAFETY: the fd number the zygote's caller handed over; no
            // value of the child's owns it, and it is the child's to close
            // (its run's init and payload never use it).
            unsafe { crate::close_raw(cgroup) };
            0
        }
        Err(e) => -(e.errno as i64),
    }
}

/// [`Zygote::confine`], in the child; returns 0 once confined, else
/// it has ended the child (125). `notify`: the socket for the seccomp
/// listener, or -1.
#[no_mangle]
pub extern "C" fn stockade_zygote_child(
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    setup: RawFd,
    notify: RawFd,
) -> i32 {
    match zygote() {
        Ok(z) => {
            z.confine([stdin, stdout, stderr], setup, notify);
            0
        }
        Err(e) => {
            let f = Failed {
                step: "zygote",
                path: String::new(),
                err: e,
            };
            let _ = crate::write_all(setup, &failure(&f));
            crate::exit_now(125)
        }
    }
}

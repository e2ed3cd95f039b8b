//! Under the rlimit rung, init bounds the jail's SysV IPC and POSIX
//! message queues (the limits `plan::limits::ipc_share` chose) before the
//! payload starts, so that what a payload can hold outside its address
//! space stays within `--memory`.
//!
//! The IPC sysctls are the writer's IPC namespace's, and the kernel lets
//! only the uid that uid 0 of the namespace's owning user namespace maps
//! to write them (`ipc_permissions()` in ipc/ipc_sysctl.c). The jail's
//! user namespace maps only the jail's uid (1000 by default), not uid 0,
//! so init cannot write its own namespace's. Instead a forked helper makes
//! a user namespace of its own under the jail's, where uid 0 is the jail's
//! uid, and in it a new IPC namespace; it writes the limits there (through
//! the host's /proc, still in view) and hands the namespace to init, which
//! joins it (init's uid owns the helper's user namespace, so init holds
//! CAP_SYS_ADMIN over it). The payload inherits it. Its uid is that
//! namespace's uid 0, but its /proc/sys is a read-only mount it cannot
//! undo, it has no capabilities, and seccomp refuses it new namespaces.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::plan::Plan;
use crate::sys;

/// The helper's pid in the jail (below the smallest pid_max, 301).
const HELPER_PID: i32 = 300;

/// Join an IPC namespace bounded by `plan.limits.ipc_sysctls`. Err: why it could
/// not be made (the payload then keeps the jail's own, unbounded).
pub fn bound(plan: &Plan) -> Result<(), String> {
    let (ours, theirs) =
        sys::fdpass::socketpair(libc::SOCK_SEQPACKET).map_err(|e| e.to_string())?;
    // The helper takes a pid of our choosing, so the payload is still pid
    // 2 (a plain fork where the kernel refuses to choose).
    let forked = sys::fork_with_pid(HELPER_PID).or_else(|_| sys::fork_single_threaded());
    match forked.map_err(|e| e.to_string())? {
        None => {
            drop(ours);
            let code = match helper(plan, &theirs) {
                Ok(()) => 0,
                Err(why) => {
                    let _ = UnixStream::from(theirs).write_all(why.as_bytes());
                    1
                }
            };
            sys::exit_now(code)
        }
        Some(pid) => {
            drop(theirs);
            let mut buf = [0u8; 512];
            let got = sys::fdpass::recv_fd_with(ours.as_raw_fd(), &mut buf);
            let _ = sys::waitpid(pid, false);
            match got.map_err(|e| e.to_string())? {
                (n, Some(ns)) if &buf[..n] == b"ok" => {
                    sys::enter_ipcns(&ns).map_err(|e| e.to_string())
                }
                (0, _) => Err("the helper ended without a word".into()),
                (n, _) => Err(String::from_utf8_lossy(&buf[..n]).into_owned()),
            }
        }
    }
}

/// The helper's side: its own user namespace (uid 0 is the jail's uid),
/// a new IPC namespace in it, the limits, and the namespace sent back.
fn helper(plan: &Plan, sock: &OwnedFd) -> Result<(), String> {
    let proc = sys::open_dir_path(Path::new("/proc")).map_err(|e| e.to_string())?;
    let p = proc.as_raw_fd();
    let (uid, gid) = (plan.identity.uid, plan.identity.gid);
    // The credential change to the jail's uid left us undumpable, which
    // makes our /proc files root's: our own maps could not be written.
    sys::set_dumpable(true)
        .and_then(|_| sys::unshare_userns())
        .and_then(|_| sys::write_beneath(p, "self/setgroups", b"deny"))
        .and_then(|_| sys::write_beneath(p, "self/uid_map", format!("0 {uid} 1").as_bytes()))
        .and_then(|_| sys::write_beneath(p, "self/gid_map", format!("0 {gid} 1").as_bytes()))
        .and_then(|_| sys::unshare_ipcns())
        .map_err(|e| e.to_string())?;
    for (path, value) in &plan.limits.ipc_sysctls {
        sys::write_beneath(p, &format!("sys/{path}"), value.as_bytes())
            .map_err(|e| format!("sysctl {} = {value}: {e}", path.replace('/', ".")))?;
    }
    let ns: OwnedFd = std::fs::File::open("/proc/self/ns/ipc")
        .map_err(|e| format!("/proc/self/ns/ipc: {e}"))?
        .into();
    sys::fdpass::send_fd_with(sock.as_raw_fd(), ns.as_raw_fd(), b"ok").map_err(|e| e.to_string())
}

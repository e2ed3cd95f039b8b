//! The fallback's connect agent: the process that performs the payload's
//! `connect()` calls once the supervisor has looked at them.
//!
//! Without a mount namespace every unix socket on the host has a path the
//! payload can name, and Landlock does not mediate `connect()` to a
//! pathname socket. So in the fallback the seccomp filter sends every
//! `connect()` to the supervisor's listener (SECCOMP_RET_USER_NOTIF). The
//! supervisor copies the address out of the caller's memory
//! (/proc/PID/mem) and hands it to this agent, which connects and answers
//! with the errno; the supervisor answers the notification with it. The
//! caller's own connect never runs, so nothing it changes in its memory
//! after the check matters (no SECCOMP_USER_NOTIF_FLAG_CONTINUE, which
//! seccomp_unotify(2) warns is unsafe for exactly that). Which socket is
//! connected:
//!
//! - The caller's own, when the supervisor can take a copy of it
//!   (pidfd_getfd: the same open socket, with its options and its bound
//!   address).
//! - Otherwise a new one (see [`NewSocket`]): pidfd_getfd needs ptrace
//!   access and Docker's default seccomp profile refuses it without
//!   CAP_SYS_PTRACE. The supervisor reads the caller's socket's family,
//!   type, protocol and flags from /proc; the agent creates a socket like
//!   it, connects it, and sends it back, and the supervisor puts it in
//!   place of the caller's fd (SECCOMP_IOCTL_NOTIF_ADDFD with
//!   SECCOMP_ADDFD_FLAG_SETFD) before answering. Only a socket connected
//!   here ever takes the caller's fd number, so a caller that swaps its fd
//!   meanwhile only confuses itself.
//!
//! The address:
//!
//! - A pathname is resolved beneath one of the jail's allowed directories
//!   (the binds' sources and the run directory) with openat2
//!   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, and the socket connected
//!   through that O_PATH fd (`/proc/self/fd/N`): the inode checked is the
//!   inode connected to. A path elsewhere gets EACCES.
//! - Any other address (abstract, unnamed, another family) is connected as
//!   given.
//!
//! The agent is forked by the payload after Landlock and before seccomp,
//! so it has the payload's uid, groups, capabilities (none) and Landlock
//! domain: the kernel checks the socket file's permissions and Landlock's
//! abstract-socket scope against the jail, as for the payload's own
//! connect, and the listener's SO_PEERCRED shows the jail's uid. It is not
//! dumpable (the payload cannot write its memory), holds only its socket
//! to the supervisor, and runs each request on a thread of its own so that
//! a connect that blocks (a full backlog, a slow TCP peer) holds up no
//! other.

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys::{self, Errno, SysResult};

/// Request kinds: an absolute path to resolve beneath the roots, or a raw
/// sockaddr to connect to as given.
pub const KIND_PATH: u8 = 1;
pub const KIND_RAW: u8 = 2;
/// Or'ed into the kind: no socket comes with the request; a
/// [`NewSocket`] spec leads the body.
const KIND_NEW: u8 = 0x80;
/// Largest request: id, kind, a new socket's spec, and a path.
pub const MAX_REQUEST: usize = 9 + 12 + libc::PATH_MAX as usize;

/// A socket for the agent to create and connect in place of the caller's:
/// socket(domain, ty, protocol), `ty` with SOCK_NONBLOCK when the caller's
/// was non-blocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewSocket {
    pub domain: i32,
    pub ty: i32,
    pub protocol: i32,
}

/// `[id u64][kind u8][spec: domain, type, protocol i32, when new][body]`.
pub fn encode_request(id: u64, kind: u8, new: Option<NewSocket>, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(21 + body.len());
    m.extend_from_slice(&id.to_le_bytes());
    match new {
        Some(n) => {
            m.push(kind | KIND_NEW);
            for v in [n.domain, n.ty, n.protocol] {
                m.extend_from_slice(&v.to_le_bytes());
            }
        }
        None => m.push(kind),
    }
    m.extend_from_slice(body);
    m
}

/// (id, kind, new socket spec, body) of a request.
fn decode_request(b: &[u8]) -> Option<(u64, u8, Option<NewSocket>, &[u8])> {
    let id = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let kind = *b.get(8)?;
    if kind & KIND_NEW == 0 {
        return Some((id, kind, None, b.get(9..)?));
    }
    let int = |at: usize| -> Option<i32> {
        Some(i32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let new = NewSocket {
        domain: int(9)?,
        ty: int(13)?,
        protocol: int(17)?,
    };
    Some((id, kind & !KIND_NEW, Some(new), b.get(21..)?))
}

/// `[id u64][errno i32]`.
pub fn decode_reply(b: &[u8]) -> Option<(u64, i32)> {
    let id = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let e = i32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
    Some((id, e))
}

/// Answer request `id` with `errno`, and with the new socket when there is
/// one to put in the caller's place.
fn reply(chan: RawFd, id: u64, errno: i32, new: Option<&OwnedFd>) {
    let mut m = id.to_le_bytes().to_vec();
    m.extend_from_slice(&errno.to_le_bytes());
    let _ = match new {
        Some(s) => sys::fdpass::send_fd_with(chan, s.as_raw_fd(), &m),
        None => sys::write_all(chan, &m),
    };
}

/// Start the agent on `chan` (its end of the socket the supervisor has the
/// other end of). Called by the payload after Landlock, before seccomp.
/// The agent is a grandchild, so the payload never sees it as a child of
/// its own; init (a subreaper) adopts it and kills it with the jail.
pub fn start(chan: RawFd, roots: &[PathBuf]) -> SysResult<()> {
    #[allow(unsafe_code)]
    // SAFETY: the payload is single-threaded (it is about to execve).
    let forked = unsafe { sys::fork() }?;
    match forked {
        Some(mid) => match sys::waitpid(mid, false)? {
            Some((_, 0)) => Ok(()),
            _ => Err(sys::SysError {
                call: "fork",
                arg: "unix socket agent".into(),
                errno: Errno::EAGAIN,
            }),
        },
        #[allow(unsafe_code)]
        // SAFETY: a fresh fork of a single-threaded process is one too.
        None => match unsafe { sys::fork() } {
            Ok(Some(_)) => sys::exit_now(0),
            Ok(None) => serve(chan, roots),
            Err(_) => sys::exit_now(1),
        },
    }
}

fn serve(chan: RawFd, roots: &[PathBuf]) -> ! {
    if sys::set_dumpable(false).is_err() {
        sys::exit_now(1);
    }
    #[allow(unsafe_code)]
    // SAFETY: this process (a fresh fork) never returns into the code that
    // owns the fds closed here: it serves below and ends with exit_now.
    if unsafe { sys::close_all_but(&[chan]) }.is_err() {
        sys::exit_now(1);
    }
    let mut roots: Vec<PathBuf> = roots.to_vec();
    // The most specific directory first.
    roots.sort_by_key(|r| std::cmp::Reverse(r.as_os_str().len()));
    let roots = std::sync::Arc::new(roots);
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (n, sock) = match sys::fdpass::recv_fd_with(chan, &mut buf) {
            Ok((0, _)) | Err(_) => sys::exit_now(0),
            Ok(got) => got,
        };
        let Some((id, kind, new, body)) = decode_request(&buf[..n]) else {
            continue;
        };
        let body = body.to_vec();
        let roots = roots.clone();
        let work = move || {
            // The caller's own socket, or a new one like it.
            let (sock, made) = match (new, sock) {
                (None, Some(s)) => (s, false),
                (Some(n), None) => match sys::fdpass::socket(n.domain, n.ty, n.protocol) {
                    Ok(s) => (s, true),
                    Err(e) => return reply(chan, id, e.errno as i32, None),
                },
                _ => return reply(chan, id, libc::EINVAL, None),
            };
            let e = match kind {
                KIND_PATH => connect_beneath(sock.as_raw_fd(), &body, &roots),
                KIND_RAW => sys::fdpass::connect_raw(sock.as_raw_fd(), &body),
                _ => libc::EINVAL,
            };
            // A new socket that is connected, or connecting (a
            // non-blocking TCP socket), goes to the caller.
            let give = made && (e == 0 || e == libc::EINPROGRESS);
            reply(chan, id, e, give.then_some(&sock));
        };
        if let Err(e) = std::thread::Builder::new().stack_size(64 << 10).spawn(work) {
            reply(chan, id, e.raw_os_error().unwrap_or(libc::EAGAIN), None);
        }
    }
}

/// Connect `sock` to the pathname socket at absolute `path` when the path
/// lies beneath one of `roots`; the errno (0 on success).
fn connect_beneath(sock: RawFd, path: &[u8], roots: &[PathBuf]) -> i32 {
    let p = Path::new(OsStr::from_bytes(path));
    for root in roots {
        let Ok(rest) = p.strip_prefix(root) else {
            continue;
        };
        let Ok(dir) = sys::open_path_nofollow(root) else {
            continue;
        };
        let rel = if rest.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rest
        };
        match sys::open_path_beneath(&dir, rel) {
            Ok(f) => {
                return match sys::fstat_mode_size(&f) {
                    Ok((mode, _)) if mode & libc::S_IFMT == libc::S_IFSOCK => {
                        sys::fdpass::connect_path(sock, sys::fd_path(&f).as_bytes())
                    }
                    Ok(_) => libc::ECONNREFUSED,
                    Err(e) => e.errno as i32,
                };
            }
            // Out of this directory (`..`, a symlink): maybe within another.
            Err(e) if e.errno == Errno::EXDEV || e.errno == Errno::ELOOP => continue,
            Err(e) => return e.errno as i32,
        }
    }
    libc::EACCES
}

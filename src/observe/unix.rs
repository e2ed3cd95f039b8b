//! The supervisor's half of the fallback's connect mediation (the design is
//! described in jail::unix_agent): take a `connect()` notification, copy
//! the address and the socket (or a description of it) out of the caller,
//! hand them to the agent, and answer the notification with the agent's
//! errno, putting the agent's new socket in the caller's place when the
//! caller's own could not be taken.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::jail::unix_agent::{self, NewSocket, KIND_PATH, KIND_RAW};
use crate::sys::{self, seccomp::Notif, Errno};

/// Connects handed to the agent and not yet answered.
#[derive(Debug, Default)]
pub struct Mediator {
    /// Our end of the agent's socket (sent by the payload; None before
    /// that and after the agent is gone).
    agent: Option<OwnedFd>,
    next: u64,
    pending: Vec<Pending>,
    /// Fallback started by root: the payload's uid and gid, which we take
    /// as our file-system ids to read its /proc files where root lacks
    /// CAP_SYS_PTRACE (as in a container): `as_caller` once that was
    /// needed. Not always: with fsuid not 0, root loses CAP_DAC_OVERRIDE,
    /// and the /proc files of a payload that made itself non-dumpable
    /// belong to root.
    caller_ids: Option<(u32, u32)>,
    as_caller: bool,
    /// New sockets may be TCP or UDP ones (`--network host`); else only
    /// unix stream and seqpacket sockets, as the jail's filter lets the
    /// payload create.
    inet: bool,
    /// Why the caller's own socket cannot be taken (pidfd_getfd refused):
    /// from then on every connect goes through a new socket.
    no_getfd: Option<String>,
    /// Connects handed to the agent with the caller's own socket, and with
    /// a new one.
    own: u64,
    new: u64,
}

#[derive(Debug)]
struct Pending {
    request: u64,
    notif: u64,
    /// A new socket replaces the caller's fd (number, close-on-exec).
    replace: Option<(i32, bool)>,
}

/// What the caller asked for, read from its /proc.
struct Asked {
    addr: Vec<u8>,
    /// The calling thread's working directory (for a relative path).
    cwd: Option<PathBuf>,
    /// Without pidfd_getfd: the socket to create in place of the caller's,
    /// and whether its fd is close-on-exec.
    new: Option<(NewSocket, bool)>,
}

impl Mediator {
    pub fn new(caller_ids: Option<(u32, u32)>, inet: bool) -> Mediator {
        Mediator {
            caller_ids,
            inet,
            ..Default::default()
        }
    }

    pub fn set_agent(&mut self, fd: OwnedFd) {
        if self.agent.is_none() {
            self.agent = Some(fd);
        }
    }

    /// The agent's socket, to poll for replies.
    pub fn fd(&self) -> Option<i32> {
        self.agent.as_ref().map(|a| a.as_raw_fd())
    }

    /// For the outcome (the seccomp layer's `unix_sockets`): how connects
    /// were made.
    pub fn report(&self) -> serde_json::Value {
        serde_json::json!({
            "connect": "mediated by the supervisor; pathnames only beneath the binds and the run directory",
            "socket": if self.no_getfd.is_some() { "new" } else { "caller's" },
            "why_new": self.no_getfd,
            "connects_caller_socket": self.own,
            "connects_new_socket": self.new,
        })
    }

    /// Run `f` (reading the caller's /proc) with the caller's ids as our
    /// file-system ids when root started the jail; EACCES if they cannot
    /// be taken.
    fn with_caller_ids<T>(&self, f: impl FnOnce() -> T) -> Result<T, i32> {
        match self.caller_ids {
            Some((uid, gid)) => sys::with_fsids(uid, gid, f).map_err(|_| libc::EACCES),
            None => Ok(f()),
        }
    }

    /// A `connect(fd, addr, len)` notification: answered now with an
    /// errno, or handed to the agent (answered when it replies).
    pub fn on_connect(&mut self, listener: &OwnedFd, n: &Notif) {
        if let Err(e) = self.connect(listener, n) {
            let _ = sys::seccomp::notif_reply(listener, n.id, false, e);
        }
    }

    /// [`Mediator::on_connect`]'s steps; `Err` is the errno to answer
    /// with (`Ok` without a request sent: the caller is gone).
    fn connect(&mut self, listener: &OwnedFd, n: &Notif) -> Result<(), i32> {
        if self.agent.is_none() {
            return Err(libc::EACCES);
        }
        let (fd, ptr, len) = (n.args[0] as i32, n.args[1], n.args[2] as u32 as usize);
        if len < 2 || len > std::mem::size_of::<libc::sockaddr_storage>() {
            return Err(libc::EINVAL);
        }
        let sock = self.take_socket(n.pid, fd)?;
        let asked = self.read_asked(n.pid, fd, ptr, len, sock.is_none())?;
        // The caller is still waiting, so `n.pid` was its thread all along
        // (for its memory, its fd and its working directory).
        if !sys::seccomp::notif_id_valid(listener, n.id) {
            return Ok(());
        }
        let (kind, body) = target(&asked)?;
        self.hand_over(n.id, fd, sock, asked.new, kind, &body)
    }

    /// The caller's own socket, unless pidfd_getfd is (or turns out)
    /// refused: then None, and a new socket stands in for it.
    fn take_socket(&mut self, pid: u32, fd: i32) -> Result<Option<OwnedFd>, i32> {
        if self.no_getfd.is_some() {
            return Ok(None);
        }
        match sys::seccomp::take_fd(pid, fd) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.call == "pidfd_getfd" && e.errno == Errno::EBADF => Err(libc::EBADF),
            Err(e) if matches!(e.errno, Errno::EPERM | Errno::EACCES | Errno::ENOSYS) => {
                self.no_getfd = Some(format!("{} refused ({})", e.call, sys::errno_text(e.errno)));
                Ok(None)
            }
            Err(_) => Err(libc::EACCES),
        }
    }

    /// What the caller asked for, read from its /proc: as ourselves, or
    /// (root started the jail, and that was refused once) with the
    /// caller's ids.
    fn read_asked(
        &mut self,
        pid: u32,
        fd: i32,
        ptr: u64,
        len: usize,
        want_new: bool,
    ) -> Result<Asked, i32> {
        let inet = self.inet;
        let read = || read_caller(pid, fd, ptr, len, want_new, inet);
        match (!self.as_caller).then(read) {
            Some(Ok(a)) => Ok(a),
            Some(Err(e))
                if self.caller_ids.is_none() || !matches!(e, libc::EFAULT | libc::EACCES) =>
            {
                Err(e)
            }
            _ => {
                let a = self.with_caller_ids(read)??;
                self.as_caller = true;
                Ok(a)
            }
        }
    }

    /// Send the request to the agent (with the caller's socket, or the
    /// description of a new one) and remember the notification it answers.
    fn hand_over(
        &mut self,
        notif: u64,
        fd: i32,
        sock: Option<OwnedFd>,
        new: Option<(NewSocket, bool)>,
        kind: u8,
        body: &[u8],
    ) -> Result<(), i32> {
        let Some(agent) = &self.agent else {
            return Err(libc::EACCES);
        };
        let msg = unix_agent::encode_request(self.next, kind, new.map(|(s, _)| s), body);
        let sent = match &sock {
            Some(s) => sys::fdpass::send_fd_with(agent.as_raw_fd(), s.as_raw_fd(), &msg),
            None => sys::fdpass::send_with_fds(agent.as_raw_fd(), &msg, &[]),
        };
        sent.map_err(|_| libc::EACCES)?;
        self.pending.push(Pending {
            request: self.next,
            notif,
            replace: new.map(|(_, cloexec)| (fd, cloexec)),
        });
        self.next += 1;
        if sock.is_some() {
            self.own += 1;
        } else {
            self.new += 1;
        }
        Ok(())
    }

    /// Answer the connects the agent has finished. When the agent is gone,
    /// every waiting connect fails (EACCES) and so will later ones.
    pub fn on_ready(&mut self, listener: &OwnedFd) {
        loop {
            let Some(agent) = &self.agent else { return };
            let (readable, hup) = sys::seccomp::poll_now(agent.as_raw_fd());
            if readable {
                let mut b = [0u8; 16];
                if let Ok((n @ 1.., sock)) = sys::fdpass::recv_fd_with(agent.as_raw_fd(), &mut b) {
                    if let Some((id, e)) = unix_agent::decode_reply(&b[..n]) {
                        if let Some(i) = self.pending.iter().position(|p| p.request == id) {
                            let p = self.pending.swap_remove(i);
                            answer_connect(listener, &p, e, sock);
                        }
                    }
                    continue;
                }
            } else if !hup {
                return;
            }
            self.agent = None;
            for p in self.pending.drain(..) {
                let _ = sys::seccomp::notif_reply(listener, p.notif, false, libc::EACCES);
            }
        }
    }
}

/// What the agent connects to: a pathname (made absolute against the
/// calling thread's working directory, for a relative one), or the raw
/// address (abstract unix names, inet addresses).
fn target(asked: &Asked) -> Result<(u8, Vec<u8>), i32> {
    let addr = &asked.addr;
    let family = u16::from_ne_bytes([addr[0], addr[1]]);
    if family != libc::AF_UNIX as u16 || addr.len() <= 2 || addr[2] == 0 {
        return Ok((KIND_RAW, addr.clone()));
    }
    let raw = &addr[2..];
    let path = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
    let abs = if path.first() == Some(&b'/') {
        path.to_vec()
    } else {
        match &asked.cwd {
            Some(cwd) => cwd
                .join(std::ffi::OsStr::from_bytes(path))
                .as_os_str()
                .as_bytes()
                .to_vec(),
            None => return Err(libc::EACCES),
        }
    };
    if abs.len() + 21 > unix_agent::MAX_REQUEST {
        return Err(libc::ENAMETOOLONG);
    }
    Ok((KIND_PATH, abs))
}

/// Answer one connect with the agent's errno `e`; a new socket the agent
/// connected (or is connecting: EINPROGRESS) first takes the caller's fd.
fn answer_connect(listener: &OwnedFd, p: &Pending, e: i32, sock: Option<OwnedFd>) {
    let mut e = e;
    if let Some((at, cloexec)) = p.replace {
        if e == 0 || e == libc::EINPROGRESS {
            let put = match &sock {
                Some(s) => {
                    sys::seccomp::notif_addfd_at(listener, p.notif, s.as_raw_fd(), at, cloexec)
                }
                None => Err(sys::SysError {
                    call: "connect agent",
                    arg: "no socket".into(),
                    errno: Errno::EACCES,
                }),
            };
            match put {
                Ok(()) => {}
                // The caller is gone.
                Err(err) if err.errno == Errno::ENOENT => return,
                Err(_) => e = libc::EACCES,
            }
        }
    }
    let _ = sys::seccomp::notif_reply(listener, p.notif, false, e);
}

/// Read what thread `pid` asked for: `len` bytes of address at `ptr` in its
/// memory, its working directory, and (`want_new`) a description of its
/// socket `fd` to build a new one from. The errno for the caller on
/// failure.
fn read_caller(
    pid: u32,
    fd: i32,
    ptr: u64,
    len: usize,
    want_new: bool,
    inet: bool,
) -> Result<Asked, i32> {
    let mut addr = vec![0u8; len];
    std::fs::File::open(format!("/proc/{pid}/mem"))
        .and_then(|m| m.read_exact_at(&mut addr, ptr))
        .map_err(|_| libc::EFAULT)?;
    let relative = addr.len() > 2
        && u16::from_ne_bytes([addr[0], addr[1]]) == libc::AF_UNIX as u16
        && addr[2] != 0
        && addr[2] != b'/';
    let cwd = if relative {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
    } else {
        None
    };
    let new = if want_new {
        Some(describe_socket(pid, fd, inet)?)
    } else {
        None
    };
    Ok(Asked { addr, cwd, new })
}

/// __SO_ACCEPTCON in /proc/net/unix's Flags: a listening socket.
const UNIX_LISTENING: u64 = 1 << 16;
/// SS_CONNECTED in /proc/net/unix's St.
const UNIX_CONNECTED: u64 = 3;

/// The socket to create in place of thread `pid`'s fd `fd`, and whether
/// that fd is close-on-exec: its protocol from the socket's
/// `system.sockprotoname` (`UNIX-STREAM`, `TCPv6`, ...), a unix socket's
/// type and state from /proc/PID/net/unix, O_NONBLOCK and O_CLOEXEC from
/// /proc/PID/fdinfo. A socket a new one could not stand in for faithfully
/// (bound, connected or listening, an unusual protocol) gets EACCES, or
/// what connect(2) would answer; so does one of a kind the jail's filter
/// does not let the payload create (a unix datagram socket; TCP and UDP
/// without `inet`), which it can only have been handed.
fn describe_socket(pid: u32, fd: i32, inet: bool) -> Result<(NewSocket, bool), i32> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    let fd_path = PathBuf::from(format!("/proc/{pid}/fd/{fd}"));
    let link = std::fs::read_link(&fd_path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => libc::EBADF,
        _ => libc::EACCES,
    })?;
    let ino: u64 = link
        .to_str()
        .and_then(|l| l.strip_prefix("socket:["))
        .and_then(|l| l.strip_suffix(']'))
        .and_then(|l| l.parse().ok())
        .ok_or(libc::ENOTSOCK)?;
    let info =
        std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).map_err(|_| libc::EACCES)?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .ok_or(libc::EACCES)?;
    let name = sys::getxattr(&fd_path, c"system.sockprotoname").map_err(|_| libc::EACCES)?;
    let name = name.strip_suffix(b"\0").unwrap_or(&name);
    let (domain, ty, protocol) = match name {
        b"UNIX-STREAM" | b"UNIX" => {
            let (ty, flags, state, bound) = unix_entry(pid, ino).ok_or(libc::EACCES)?;
            if flags & UNIX_LISTENING != 0 {
                return Err(libc::EINVAL);
            }
            if state == UNIX_CONNECTED {
                return Err(libc::EISCONN);
            }
            if bound || ty == libc::SOCK_DGRAM {
                // A new socket would not have its name; datagram sockets
                // can send anywhere.
                return Err(libc::EACCES);
            }
            (libc::AF_UNIX, ty, 0)
        }
        b"TCP" => (libc::AF_INET, libc::SOCK_STREAM, 0),
        b"TCPv6" => (libc::AF_INET6, libc::SOCK_STREAM, 0),
        b"UDP" => (libc::AF_INET, libc::SOCK_DGRAM, 0),
        b"UDPv6" => (libc::AF_INET6, libc::SOCK_DGRAM, 0),
        b"MPTCP" => (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
        b"MPTCPv6" => (libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
        _ => return Err(libc::EACCES),
    };
    if domain != libc::AF_UNIX && (!inet || inet_hashed(pid, ino)) {
        // Bound or connected: a new socket would have neither.
        return Err(libc::EACCES);
    }
    let nonblock = flags & libc::O_NONBLOCK as u32 != 0;
    let cloexec = flags & libc::O_CLOEXEC as u32 != 0;
    let ty = ty | if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    Ok((
        NewSocket {
            domain,
            ty,
            protocol,
        },
        cloexec,
    ))
}

/// Unix socket `ino` in thread `pid`'s /proc/PID/net/unix: (type, flags,
/// state, bound to a name).
fn unix_entry(pid: u32, ino: u64) -> Option<(i32, u64, u64, bool)> {
    let table = read_table(Path::new(&format!("/proc/{pid}/net/unix")))?;
    parse_unix_entry(&table, ino)
}

/// `Num RefCount Protocol Flags Type St Inode [Path]`, hex but the inode.
fn parse_unix_entry(table: &str, ino: u64) -> Option<(i32, u64, u64, bool)> {
    let want = ino.to_string();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(6) != Some(&want.as_str()) {
            return None;
        }
        let hex = |i: usize| u64::from_str_radix(f.get(i)?, 16).ok();
        Some((hex(4)? as i32, hex(3)?, hex(5)?, f.len() > 7))
    })
}

/// A /proc table, read in large chunks (its size says 0, so
/// fs::read_to_string would start with small reads).
fn read_table(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut s = String::with_capacity(64 << 10);
    std::fs::File::open(path)
        .ok()?
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Inet socket `ino` is in one of thread `pid`'s TCP or UDP tables (a
/// socket is there once bound or connected).
fn inet_hashed(pid: u32, ino: u64) -> bool {
    let want = ino.to_string();
    ["tcp", "tcp6", "udp", "udp6"].iter().any(|t| {
        std::fs::read_to_string(Path::new(&format!("/proc/{pid}/net/{t}"))).is_ok_and(|table| {
            table
                .lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(9) == Some(want.as_str()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_table_entries() {
        let t = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                 0000000000000000: 00000002 00000000 00010000 0001 01 1234 /run/x.sock\n\
                 0000000000000000: 00000002 00000000 00000000 0005 03 99\n\
                 0000000000000000: 00000002 00000000 00000000 0001 01 7 @abstract\n";
        assert_eq!(parse_unix_entry(t, 1234), Some((1, 1 << 16, 1, true)));
        assert_eq!(parse_unix_entry(t, 99), Some((5, 0, 3, false)));
        assert_eq!(parse_unix_entry(t, 7), Some((1, 0, 1, true)));
        assert_eq!(parse_unix_entry(t, 12), None);
    }

    /// The description of a socket of our own, read from our /proc as the
    /// supervisor reads the caller's.
    #[test]
    fn describes_own_sockets() {
        use std::os::fd::AsRawFd;
        let me = std::process::id();
        let s =
            sys::fdpass::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0).unwrap();
        let (n, cloexec) = describe_socket(me, s.as_raw_fd(), false).unwrap();
        assert_eq!(
            n,
            NewSocket {
                domain: libc::AF_UNIX,
                ty: libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
                protocol: 0
            }
        );
        assert!(cloexec);
        let (a, _b) = sys::fdpass::socketpair(libc::SOCK_SEQPACKET).unwrap();
        assert_eq!(
            describe_socket(me, a.as_raw_fd(), false),
            Err(libc::EISCONN)
        );
        let t = sys::fdpass::socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
        sys::set_cloexec(t.as_raw_fd(), false).unwrap();
        assert_eq!(describe_socket(me, t.as_raw_fd(), false), Err(libc::EACCES));
        let (n, cloexec) = describe_socket(me, t.as_raw_fd(), true).unwrap();
        assert_eq!(
            (n.domain, n.ty, cloexec),
            (libc::AF_INET6, libc::SOCK_STREAM, false)
        );
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(
            describe_socket(me, f.as_raw_fd(), false),
            Err(libc::ENOTSOCK)
        );
        let d = sys::fdpass::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0).unwrap();
        assert_eq!(describe_socket(me, d.as_raw_fd(), false), Err(libc::EACCES));
        // Listening, and bound to a name (a new socket would not have it).
        let dir = std::env::temp_dir().join(format!("stockade-unit-describe-{me}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let l = std::os::unix::net::UnixListener::bind(dir.join("l")).unwrap();
        assert_eq!(describe_socket(me, l.as_raw_fd(), false), Err(libc::EINVAL));
        let b = sys::fdpass::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0).unwrap();
        let addr = nix::sys::socket::UnixAddr::new(&dir.join("b")).unwrap();
        nix::sys::socket::bind(b.as_raw_fd(), &addr).unwrap();
        assert_eq!(describe_socket(me, b.as_raw_fd(), false), Err(libc::EACCES));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(describe_socket(me, 1 << 20, false), Err(libc::EBADF));
    }
}

//! The supervisor's half of the fallback's connect mediation (the design is
//! described in jail::unix_agent): take a `connect()` notification, copy
//! the address and the socket out of the caller, hand them to the agent,
//! and answer the notification with the agent's errno.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use crate::jail::unix_agent::{self, KIND_PATH, KIND_RAW};
use crate::sys::{self, seccomp::Notif};

/// Connects handed to the agent and not yet answered.
#[derive(Debug, Default)]
pub struct Mediator {
    /// Our end of the agent's socket (sent by the payload; None before
    /// that and after the agent is gone).
    agent: Option<OwnedFd>,
    next: u64,
    /// (request id, notification id).
    pending: Vec<(u64, u64)>,
}

impl Mediator {
    pub fn set_agent(&mut self, fd: OwnedFd) {
        if self.agent.is_none() {
            self.agent = Some(fd);
        }
    }

    /// The agent's socket, to poll for replies.
    pub fn fd(&self) -> Option<i32> {
        self.agent.as_ref().map(|a| a.as_raw_fd())
    }

    /// A `connect(fd, addr, len)` notification.
    pub fn on_connect(&mut self, listener: &OwnedFd, n: &Notif) {
        let answer = |e: i32| {
            let _ = sys::seccomp::notif_reply(listener, n.id, false, e);
        };
        let Some(agent) = &self.agent else {
            return answer(libc::EACCES);
        };
        let (fd, ptr, len) = (n.args[0] as i32, n.args[1], n.args[2] as u32 as usize);
        if len < 2 || len > std::mem::size_of::<libc::sockaddr_storage>() {
            return answer(libc::EINVAL);
        }
        let mut addr = vec![0u8; len];
        let read = std::fs::File::open(format!("/proc/{}/mem", n.pid))
            .and_then(|m| m.read_exact_at(&mut addr, ptr));
        if read.is_err() {
            return answer(libc::EFAULT);
        }
        let sock = match sys::seccomp::take_fd(n.pid, fd) {
            Ok(s) => s,
            Err(e) if e.call == "pidfd_getfd" && e.errno == sys::Errno::EBADF => {
                return answer(libc::EBADF)
            }
            Err(_) => return answer(libc::EACCES),
        };
        // The caller is still waiting, so `n.pid` was its thread all along.
        if !sys::seccomp::notif_id_valid(listener, n.id) {
            return;
        }
        let family = u16::from_ne_bytes([addr[0], addr[1]]);
        let msg = if family == libc::AF_UNIX as u16 && len > 2 && addr[2] != 0 {
            let raw = &addr[2..];
            let path = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
            let abs = if path.first() == Some(&b'/') {
                path.to_vec()
            } else {
                // Relative to the calling thread's working directory.
                match std::fs::read_link(format!("/proc/{}/cwd", n.pid)) {
                    Ok(cwd) => cwd
                        .join(std::ffi::OsStr::from_bytes(path))
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                    Err(_) => return answer(libc::EACCES),
                }
            };
            if abs.len() + 9 > unix_agent::MAX_REQUEST {
                return answer(libc::ENAMETOOLONG);
            }
            unix_agent::encode_request(self.next, KIND_PATH, &abs)
        } else {
            unix_agent::encode_request(self.next, KIND_RAW, &addr)
        };
        match sys::fdpass::send_fd_with(agent.as_raw_fd(), sock.as_raw_fd(), &msg) {
            Ok(()) => {
                self.pending.push((self.next, n.id));
                self.next += 1;
            }
            Err(_) => answer(libc::EACCES),
        }
    }

    /// Answer the connects the agent has finished. When the agent is gone,
    /// every waiting connect fails (EACCES) and so will later ones.
    pub fn on_ready(&mut self, listener: &OwnedFd) {
        loop {
            let Some(agent) = &self.agent else { return };
            let (readable, hup) = sys::seccomp::poll_now(agent.as_raw_fd());
            if readable {
                let mut b = [0u8; 16];
                if let Ok(n @ 1..) = sys::read(agent.as_raw_fd(), &mut b) {
                    if let Some((id, e)) = unix_agent::decode_reply(&b[..n]) {
                        if let Some(i) = self.pending.iter().position(|(r, _)| *r == id) {
                            let (_, nid) = self.pending.swap_remove(i);
                            let _ = sys::seccomp::notif_reply(listener, nid, false, e);
                        }
                    }
                    continue;
                }
            } else if !hup {
                return;
            }
            self.agent = None;
            for (_, nid) in self.pending.drain(..) {
                let _ = sys::seccomp::notif_reply(listener, nid, false, libc::EACCES);
            }
        }
    }
}

//! The jail's pid, told where the policy asks (`Compat::pid_reports`:
//! bwrap's `--info-fd` and `--json-status-fd`), as bwrap tells it: the
//! host pid of the process that execs the command (its user, pid, mount
//! and other namespaces are the jail's; it is dumpable once it has exec'd,
//! where init is not), written before the command starts.
//!
//! The payload learns nothing: before execve it writes one byte on its own
//! socket ([`Hello`]), the kernel attaches its pid (SO_PASSCRED, read in
//! our pid namespace), we tell it, then answer one byte and the payload
//! goes on. With `--userns-block-fd` the caller needs the pid before the
//! maps, when init is the only process: init's pid is told then (see
//! `spawn::run_inner`), and the payload says nothing.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::policy::PidReport;
use crate::sys;

/// What is told besides the pid: the namespaces' inode numbers, in
/// bwrap's order (cgroup, ipc, mnt, net, pid, uts).
pub(super) struct ChildPid {
    reports: Vec<PidReport>,
    namespaces: Vec<(String, u64)>,
}

impl ChildPid {
    /// `namespaces` as `spawn::ns_inodes` read them, `net` the network
    /// namespace's (made after GO).
    pub(super) fn new(
        reports: &[PidReport],
        namespaces: Vec<(&'static str, u64)>,
        net: Option<u64>,
    ) -> ChildPid {
        let mut fields = Vec::new();
        for (ns, ino) in namespaces {
            if ns == "pid" {
                if let Some(n) = net {
                    fields.push(("net-namespace".to_string(), n));
                }
            }
            fields.push((format!("{ns}-namespace"), ino));
        }
        ChildPid {
            reports: reports.to_vec(),
            namespaces: fields,
        }
    }

    /// Write `pid` and the namespaces to every report fd. A write that
    /// fails is the caller's loss, as in bwrap, which does not check it
    /// either.
    pub(super) fn tell(&self, pid: i32) {
        let mut body = vec![format!("\"child-pid\": {pid}")];
        body.extend(self.namespaces.iter().map(|(k, v)| format!("\"{k}\": {v}")));
        for r in &self.reports {
            let text = if r.pretty {
                format!("{{\n    {}\n}}\n", body.join(",\n    "))
            } else {
                format!("{{ {} }}\n", body.join(", "))
            };
            let _ = sys::write_all(r.fd, text.as_bytes());
        }
    }
}

/// Our end of the payload's hello socket, and what to tell when it speaks.
pub(super) struct Hello {
    sock: OwnedFd,
    what: ChildPid,
    /// init's pid, told when the payload's is not known.
    init: i32,
    /// The hello came (or the socket ended): nothing more to read.
    done: bool,
    told: bool,
}

impl Hello {
    pub(super) fn new(sock: OwnedFd, what: ChildPid, init: i32) -> Hello {
        Hello {
            sock,
            what,
            init,
            done: false,
            told: false,
        }
    }

    /// The fd to poll, while the hello is still to come.
    pub(super) fn fd(&self) -> RawFd {
        match self.done {
            true => -1,
            false => self.sock.as_raw_fd(),
        }
    }

    /// The payload spoke (or its socket ended): tell its pid, then let it
    /// go on to execve.
    pub(super) fn on_ready(&mut self) {
        self.done = true;
        let Ok((1.., pid)) = sys::fdpass::recv_sender_pid(self.sock.as_raw_fd()) else {
            return;
        };
        // Always credentials on this socket: the fallback is for form.
        self.what.tell(pid.unwrap_or(self.init));
        self.told = true;
        let _ = sys::write_all(self.sock.as_raw_fd(), b"G");
    }

    /// The jail ended without a hello (it failed before its command):
    /// init's pid is told instead, as bwrap tells its child's whatever
    /// becomes of it (a `--json-status-fd` reader finds the child-pid
    /// line before the exit-code one).
    pub(super) fn finish(self) {
        if !self.told {
            self.what.tell(self.init);
        }
    }
}

impl crate::observe::Observer for Hello {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        [self.fd(), -1]
    }

    fn on_ready(&mut self, _fd: Option<RawFd>, _asks: &mut Vec<crate::observe::Ask>) {
        if !self.done {
            self.on_ready();
        }
    }
}

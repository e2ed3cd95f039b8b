//! The supervisor's wait: one poll loop over init's pidfd, the report
//! pipe, forwarded signals, the output pipes (streamed, captured, capped),
//! the seccomp listener, the caller's control socket, the run directory's
//! meter and the deadline.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::learn::Learner;
use super::{cgroup, rundir};
use crate::jail::proto;
use crate::sys::{self, Errno};

/// One output stream of the payload.
pub(super) struct Stream {
    pub(super) fd: OwnedFd,
    pub(super) open: bool,
    /// Where to stream it (our stdout or stderr); None: capture only.
    pub(super) forward: Option<RawFd>,
    pub(super) captured: Vec<u8>,
    pub(super) keep: u64,
    pub(super) truncated: bool,
    pub(super) bytes: u64,
}

impl Stream {
    pub(super) fn new(fd: OwnedFd, forward: Option<RawFd>, keep: u64) -> Stream {
        let _ = sys::set_nonblocking(fd.as_raw_fd());
        Stream {
            fd,
            open: true,
            forward,
            captured: Vec::new(),
            keep,
            truncated: false,
            bytes: 0,
        }
    }
}

/// The supervisor's view of a running jail.
pub(super) struct Watch {
    pub(super) pidfd: OwnedFd,
    pub(super) ctl: OwnedFd,
    pub(super) deadline: Option<Instant>,
    pub(super) grace: Duration,
    pub(super) kill_at: Option<Instant>,
    pub(super) timed_out: bool,
    pub(super) cap: Option<u64>,
    pub(super) total: u64,
    pub(super) hit_cap: bool,
    pub(super) out: Option<Stream>,
    pub(super) err: Option<Stream>,
    /// seccomp listener (learning and kill mode).
    pub(super) learner: Option<Learner>,
    /// Kill mode: the refused syscall the jail was killed for.
    pub(super) violation: Option<(i64, String)>,
    /// The run's cgroup, when there is one.
    pub(super) cg: Option<cgroup::RunCgroup>,
    /// Init has exited (its pidfd was readable).
    pub(super) init_done: bool,
    /// The asker's socket (see [`run`]); None once it has spoken or closed.
    pub(super) control: Option<RawFd>,
    /// No pid namespace: init's death is not the jail's.
    pub(super) fallback: bool,
    /// The fallback's run directory without a tmpfs: metered.
    pub(super) meter: Option<rundir::Meter>,
    /// The meter found the run directory past the cap; the jail was killed.
    pub(super) disk_hit: bool,
}

impl Watch {
    /// Kill every process in the jail: init's death takes the pid namespace.
    /// Without one, init's children would outlive it under the host's init:
    /// init kills them, then ends as when the payload ends.
    fn kill_all(&self) {
        if self.fallback {
            let _ = sys::write_all(self.ctl.as_raw_fd(), &[proto::KILL_ALL]);
        } else {
            let _ = sys::pidfd_send_signal(&self.pidfd, libc::SIGKILL);
        }
        if let Some(c) = &self.cg {
            c.kill();
        }
    }

    /// The asker said kill (`K`), or is gone: kill the jail, once.
    fn on_control(&mut self) {
        let Some(fd) = self.control else { return };
        let mut b = [0u8; 16];
        match sys::read(fd, &mut b) {
            Ok(n) if n > 0 && !b[..n].contains(&b'K') => return,
            Err(e) if e.errno == Errno::EAGAIN => return,
            _ => {}
        }
        self.control = None;
        self.kill_all();
    }

    /// Read what is available on one stream; stream it, capture it, count it.
    fn pump(&mut self, which: usize) {
        let mut chunk = vec![0u8; 65536];
        let s = match which {
            0 => self.out.as_mut(),
            _ => self.err.as_mut(),
        };
        let Some(s) = s else { return };
        let n = match sys::read(s.fd.as_raw_fd(), &mut chunk) {
            Ok(0) => {
                s.open = false;
                return;
            }
            Ok(n) => n,
            Err(e) if e.errno == Errno::EAGAIN => return,
            Err(_) => {
                s.open = false;
                return;
            }
        };
        let data = &chunk[..n];
        let room = match self.cap {
            Some(c) => c.saturating_sub(self.total) as usize,
            None => usize::MAX,
        };
        let pass = &data[..n.min(room)];
        if let Some(fd) = s.forward {
            if sys::write_all(fd, pass).is_err() {
                s.forward = None;
            }
        }
        let keep_room = s.keep.saturating_sub(s.captured.len() as u64) as usize;
        s.captured
            .extend_from_slice(&pass[..pass.len().min(keep_room)]);
        if pass.len() > keep_room || pass.len() < n {
            s.truncated = true;
        }
        s.bytes += n as u64;
        self.total += n as u64;
        if self.cap.is_some_and(|c| self.total > c) && !self.hit_cap {
            self.hit_cap = true;
            self.kill_all();
        }
    }

    /// Loop until every output pipe is closed and either init has exited
    /// or (with no cgroup to remove) init's last records said the jail is
    /// empty; return what the jail reported.
    ///
    /// Records come in few writes (the payload's layers at once, init's
    /// last ones at once): each wake-up costs, and here a wake-up of an
    /// idle vCPU takes a few hundred microseconds.
    pub(super) fn wait(&mut self, rep: &OwnedFd, sfd: &nix::sys::signalfd::SignalFd) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut rep_open = true;
        let mut emptied = false;
        let mut drain_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if let Some(d) = self.deadline {
                if now >= d && !self.timed_out {
                    self.timed_out = true;
                    let _ = sys::write_all(self.ctl.as_raw_fd(), &[proto::TERM_ALL]);
                    self.kill_at = Some(now + self.grace);
                }
            }
            if let Some(k) = self.kill_at {
                if now >= k {
                    self.kill_all();
                    self.kill_at = None;
                }
            }
            if !self.disk_hit && !self.init_done {
                let over = match &mut self.meter {
                    Some(m) if now >= m.due() => m.check(),
                    _ => false,
                };
                if over {
                    self.disk_hit = true;
                    self.kill_all();
                }
            }
            let out_open = self.out.as_ref().is_some_and(|s| s.open);
            let err_open = self.err.as_ref().is_some_and(|s| s.open);
            if (self.init_done || (emptied && self.cg.is_none())) && !out_open && !err_open {
                break;
            }
            if drain_until.is_some_and(|d| now >= d) {
                break;
            }
            let mut next: Option<Instant> = None;
            let meter_due = match &self.meter {
                Some(m) if !self.disk_hit && !self.init_done => Some(m.due()),
                _ => None,
            };
            for t in [
                if self.timed_out { None } else { self.deadline },
                self.kill_at,
                drain_until,
                meter_due,
            ]
            .into_iter()
            .flatten()
            {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
            let timeout = next.map_or(-1, |t| {
                t.saturating_duration_since(now)
                    .as_millis()
                    .min(i32::MAX as u128) as i32
                    + 1
            });
            let fd_or = |open: bool, fd: RawFd| if open { fd } else { -1 };
            let lfds = self.learner.as_ref().map(|l| l.fds()).unwrap_or_default();
            let lfd = |i: usize| lfds.get(i).copied().unwrap_or(-1);
            let mut fds = [
                libc::pollfd {
                    fd: fd_or(!self.init_done, self.pidfd.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: fd_or(rep_open && !self.init_done, rep.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self
                        .out
                        .as_ref()
                        .map_or(-1, |s| fd_or(s.open, s.fd.as_raw_fd())),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self
                        .err
                        .as_ref()
                        .map_or(-1, |s| fd_or(s.open, s.fd.as_raw_fd())),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: lfd(0),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: lfd(1),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.control.unwrap_or(-1),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if sys::poll(&mut fds, timeout).is_err() {
                break;
            }
            if fds[1].revents != 0 {
                let mut chunk = [0u8; 4096];
                match sys::read(rep.as_raw_fd(), &mut chunk) {
                    Ok(0) | Err(_) => rep_open = false,
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        emptied = has_status(&proto::decode(&buf));
                    }
                }
            }
            if fds[2].revents != 0 {
                while let Ok(Some(si)) = sfd.read_signal() {
                    let _ =
                        sys::write_all(self.ctl.as_raw_fd(), &[proto::FORWARD, si.ssi_signo as u8]);
                }
            }
            if fds[3].revents != 0 {
                self.pump(0);
            }
            if fds[4].revents != 0 {
                self.pump(1);
            }
            if fds[7].revents != 0 {
                self.on_control();
            }
            for p in &fds[5..7] {
                if p.fd >= 0 && p.revents != 0 {
                    if let Some(l) = self.learner.as_mut() {
                        l.on_ready(p.fd);
                    }
                }
            }
            if self.violation.is_none() {
                if let Some(v) = self.learner.as_ref().and_then(|l| l.violation()) {
                    self.violation = Some(v);
                    self.kill_all();
                }
            }
            if fds[0].revents != 0 && !self.init_done {
                self.init_done = true;
                // Everything in the jail is gone with init; the pipes reach
                // EOF at once. Bound the drain in case something else holds them.
                drain_until = Some(Instant::now() + Duration::from_secs(2));
            }
        }
        // Read what is left without blocking: init may still be exiting,
        // or (init gone) a stray holder may keep the pipe open.
        let _ = sys::set_nonblocking(rep.as_raw_fd());
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = sys::read(rep.as_raw_fd(), &mut chunk) {
            buf.extend_from_slice(&chunk[..n]);
        }
        buf
    }
}

/// Whether init's last records (its Status) are among `r`.
pub(super) fn has_status(r: &[proto::Report]) -> bool {
    r.iter().any(|r| matches!(r, proto::Report::Status(_)))
}

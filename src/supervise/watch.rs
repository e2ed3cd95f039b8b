//! The supervisor's wait: one poll loop over init's pidfd, the report
//! pipe, forwarded signals, the output pipes (supervise::pump), the seccomp
//! listener, the caller's control socket, the run directory's meter,
//! the payload's hello (supervise::childpid) and the deadline
//! (supervise::deadline).

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::sys::signalfd::SignalFd;

use super::deadline::{self, Deadline};
use super::learn::Learner;
use super::pump::{Output, Which};
use super::rundir;
use crate::cgroup;
use crate::jail::proto;
use crate::plan::limits::TmpCap;
use crate::plan::Plan;
use crate::sys::{self, Errno};

/// How long the pipes may stay open once init is gone (something outside
/// the jail may hold them).
const DRAIN: Duration = Duration::from_secs(2);

/// The supervisor's view of a running jail.
pub(super) struct Watch {
    pub(super) pidfd: OwnedFd,
    pub(super) ctl: OwnedFd,
    pub(super) deadline: Deadline,
    pub(super) output: Output,
    /// seccomp listener (learning and kill mode).
    pub(super) learner: Option<Learner>,
    /// Kill mode: the refused syscall the jail was killed for.
    pub(super) violation: Option<(i64, String)>,
    /// The run's cgroup, when there is one.
    pub(super) cg: Option<cgroup::RunCgroup>,
    /// Init has exited (its pidfd was readable).
    pub(super) init_done: bool,
    /// The asker's socket (see `spawn::run`); None once it has spoken or
    /// closed.
    pub(super) control: Option<RawFd>,
    /// No pid namespace: init's death is not the jail's.
    pub(super) fallback: bool,
    /// The fallback's run directory without a tmpfs: metered.
    pub(super) meter: Option<rundir::Meter>,
    /// The meter found the run directory past the cap; the jail was killed.
    pub(super) disk_hit: bool,
    /// The clock is held (see `deadline::hold`): the policy's timeout,
    /// until the asker starts the clock.
    held: Option<Option<Duration>>,
    /// Bytes read from the asker's socket, not yet a whole record.
    asked: Vec<u8>,
    /// The reader of this run's Landlock audit records.
    pub(super) audit: Option<super::audit::AuditLog>,
    /// The watch on the covers over denied paths.
    pub(super) masks: Option<super::masks::MaskWatch>,
    /// The payload's hello, when its pid is to be told.
    pub(super) hello: Option<super::childpid::Hello>,
}

/// What the jail wrote on the report pipe.
struct Reports {
    buf: Vec<u8>,
    open: bool,
    /// Init's last records (its Status) are in: the jail is empty.
    emptied: bool,
}

impl Reports {
    fn read(&mut self, rep: &OwnedFd) {
        let mut chunk = [0u8; 4096];
        match sys::read(rep.as_raw_fd(), &mut chunk) {
            Ok(0) | Err(_) => self.open = false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.emptied = has_status(&proto::decode(&self.buf));
            }
        }
    }

    /// Read what is left without blocking: init may still be exiting, or
    /// (init gone) a stray holder may keep the pipe open.
    fn drain(mut self, rep: &OwnedFd) -> Vec<u8> {
        let _ = sys::set_nonblocking(rep.as_raw_fd());
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = sys::read(rep.as_raw_fd(), &mut chunk) {
            self.buf.extend_from_slice(&chunk[..n]);
        }
        self.buf
    }
}

// The poll set, in order.
const PIDFD: usize = 0;
const REPORTS: usize = 1;
const SIGNALS: usize = 2;
const STDOUT: usize = 3;
const STDERR: usize = 4;
/// Two: the learner's socket or listener, and the connect agent.
const LISTENER: usize = 5;
const CONTROL: usize = 7;
const AUDIT: usize = 8;
/// Our end of the control socket, while the covers' watch is to come.
const CTL_IN: usize = 9;
const MASKS: usize = 10;
/// The payload's hello socket (see supervise::childpid).
const HELLO: usize = 11;
/// The size of the poll set.
const POLLED: usize = 12;

fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

impl Watch {
    /// The watch over a jail just released: its pidfd and control socket,
    /// the output pipes' read ends, the seccomp listener's socket, the
    /// run's cgroup, the asker's control socket; the deadline counts from
    /// `start`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        plan: &Plan,
        pidfd: OwnedFd,
        ctl: OwnedFd,
        output: Output,
        learner: Option<Learner>,
        cg: Option<cgroup::RunCgroup>,
        control: Option<RawFd>,
        start: Instant,
    ) -> Watch {
        let l = &plan.limits;
        let meter = match (&l.enforcement.tmp, plan.mode.fallback()) {
            (TmpCap::Metered(_), Some(f)) => {
                Some(rundir::Meter::new(f.run_dir.clone(), l.tmp_size))
            }
            _ => None,
        };
        let held = deadline::held().then_some(l.asked.timeout);
        let at = match held {
            Some(_) => None,
            None => l.asked.timeout.map(|t| start + t),
        };
        Watch {
            pidfd,
            ctl,
            deadline: Deadline::new(at, l.asked.grace),
            output,
            learner,
            violation: None,
            cg,
            init_done: false,
            control,
            fallback: plan.mode.fallback().is_some(),
            meter,
            disk_hit: false,
            held,
            asked: Vec::new(),
            audit: None,
            masks: None,
            hello: None,
        }
    }

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

    /// The asker said kill (`K`), or is gone: kill the jail, once. It may
    /// also start a held clock (`deadline::START_CLOCK`); other bytes mean
    /// nothing.
    fn on_control(&mut self) {
        let Some(fd) = self.control else { return };
        let mut b = [0u8; 64];
        match sys::read(fd, &mut b) {
            Ok(n) if n > 0 => self.asked.extend_from_slice(&b[..n]),
            Err(e) if e.errno == Errno::EAGAIN => return,
            _ => return self.asker_kills(),
        }
        while let Some(&first) = self.asked.first() {
            match first {
                b'K' => return self.asker_kills(),
                deadline::START_CLOCK => {
                    let Some(rec) = self.asked.get(..deadline::START_CLOCK_LEN) else {
                        return; // the rest is to come
                    };
                    let rec: [u8; deadline::START_CLOCK_LEN] =
                        rec.try_into().unwrap_or([0; deadline::START_CLOCK_LEN]);
                    self.asked.drain(..deadline::START_CLOCK_LEN);
                    self.start_clock(deadline::decode_start(&rec));
                }
                deadline::START_CLOCK_LIMITS => {
                    const LEN: usize = deadline::START_CLOCK_LIMITS_LEN;
                    let Some(rec) = self.asked.get(..LEN) else {
                        return; // the rest is to come
                    };
                    let rec: [u8; LEN] = rec.try_into().unwrap_or([0; LEN]);
                    self.asked.drain(..LEN);
                    self.start_clock_limits(deadline::decode_start_limits(&rec), fd);
                }
                _ => {
                    self.asked.remove(0);
                }
            }
        }
    }

    fn asker_kills(&mut self) {
        self.control = None;
        self.kill_all();
    }

    /// The asker gave the run limits of its own with its program: into
    /// the run's cgroup, then the clock started; the asker hears which
    /// (`LIMITS_SET`), or that the cgroup cannot hold them
    /// (`LIMITS_REFUSED`, the clock still held), before its program goes
    /// to the payload.
    fn start_clock_limits(&mut self, c: deadline::ClockStart, asker: RawFd) {
        let set = match (&self.cg, &c.limits) {
            (_, None) => true,
            (Some(cg), Some(req)) if self.held.is_some() => cg.set_limits(req).is_ok(),
            _ => false,
        };
        if set {
            self.start_clock(c);
        }
        let answer = match set {
            true => deadline::LIMITS_SET,
            false => deadline::LIMITS_REFUSED,
        };
        // An asker gone: its end of the socket says so next.
        let _ = sys::write_all(asker, &[answer]);
    }

    /// The asker handed the jail its program: the deadline counts from
    /// now (once; a clock not held is not restarted).
    fn start_clock(&mut self, c: deadline::ClockStart) {
        let Some(policy_timeout) = self.held.take() else {
            return;
        };
        let now = Instant::now();
        deadline::clock_started(now, c);
        self.deadline
            .start(c.timeout.or(policy_timeout).map(|t| now + t));
        if let Some(m) = c.max_output {
            self.output.set_cap(m);
        }
        self.output.send_to(c.output);
    }

    /// Loop until every output pipe is closed and either init has exited
    /// or (with no cgroup to remove) init's last records said the jail is
    /// empty; return what the jail reported.
    ///
    /// Records come in few writes (the payload's layers at once, init's
    /// last ones at once): each wake-up costs, and here a wake-up of an
    /// idle vCPU takes a few hundred microseconds.
    pub(super) fn wait(&mut self, rep: &OwnedFd, sfd: &SignalFd) -> Vec<u8> {
        let mut reports = Reports {
            buf: Vec::new(),
            open: true,
            emptied: false,
        };
        let mut drain_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            self.on_timers(now);
            if self.finished(&reports) || drain_until.is_some_and(|d| now >= d) {
                break;
            }
            let timeout = self.poll_timeout(now, drain_until);
            let mut fds = self.poll_set(rep, &reports, sfd);
            if sys::poll(&mut fds, timeout).is_err() {
                break;
            }
            if self.dispatch(&fds, rep, &mut reports, sfd) {
                // Everything in the jail is gone with init; the pipes reach
                // EOF at once. Bound the drain in case something else holds them.
                drain_until = Some(Instant::now() + DRAIN);
            }
        }
        reports.drain(rep)
    }

    /// The deadline's SIGTERM and SIGKILL, and the run directory's meter.
    fn on_timers(&mut self, now: Instant) {
        if self.deadline.term_due(now) {
            let _ = sys::write_all(self.ctl.as_raw_fd(), &[proto::TERM_ALL]);
        }
        if self.deadline.kill_due(now) {
            self.kill_all();
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
    }

    /// Once more now that the jail is gone: what it left counts too.
    pub(super) fn meter_last(&mut self) {
        if let Some(m) = &mut self.meter {
            if !self.disk_hit && m.check() {
                self.disk_hit = true;
            }
        }
    }

    /// The output is all read, and init has exited or (no cgroup to
    /// remove) said the jail is empty.
    fn finished(&self, r: &Reports) -> bool {
        (self.init_done || (r.emptied && self.cg.is_none())) && !self.output.open()
    }

    /// Milliseconds until the next timer (deadline, grace, drain, meter),
    /// or -1 for none.
    fn poll_timeout(&self, now: Instant, drain_until: Option<Instant>) -> i32 {
        let meter_due = match &self.meter {
            Some(m) if !self.disk_hit && !self.init_done => Some(m.due()),
            _ => None,
        };
        let next = [self.deadline.next(), drain_until, meter_due]
            .into_iter()
            .flatten()
            .min();
        next.map_or(-1, |t| {
            t.saturating_duration_since(now)
                .as_millis()
                .min(i32::MAX as u128) as i32
                + 1
        })
    }

    fn poll_set(&self, rep: &OwnedFd, r: &Reports, sfd: &SignalFd) -> [libc::pollfd; POLLED] {
        let fd_or = |open: bool, fd: RawFd| if open { fd } else { -1 };
        let lfds = self.learner.as_ref().map(|l| l.fds()).unwrap_or_default();
        let lfd = |i: usize| lfds.get(i).copied().unwrap_or(-1);
        let [out, err] = self.output.poll_fds();
        [
            pollin(fd_or(!self.init_done, self.pidfd.as_raw_fd())),
            pollin(fd_or(r.open && !self.init_done, rep.as_raw_fd())),
            pollin(sfd.as_raw_fd()),
            pollin(out),
            pollin(err),
            pollin(lfd(0)),
            pollin(lfd(1)),
            pollin(self.control.unwrap_or(-1)),
            pollin(self.audit.as_ref().and_then(|a| a.fd()).unwrap_or(-1)),
            pollin(fd_or(
                self.masks.as_ref().is_some_and(|m| m.waiting()),
                self.ctl.as_raw_fd(),
            )),
            pollin(self.masks.as_ref().and_then(|m| m.fd()).unwrap_or(-1)),
            pollin(self.hello.as_ref().map_or(-1, |h| h.fd())),
        ]
    }

    /// Handle what poll found ready. True when init has just exited.
    fn dispatch(
        &mut self,
        fds: &[libc::pollfd; POLLED],
        rep: &OwnedFd,
        r: &mut Reports,
        sfd: &SignalFd,
    ) -> bool {
        if fds[REPORTS].revents != 0 {
            r.read(rep);
        }
        // The payload waits for this answer before execve.
        if fds[HELLO].revents != 0 {
            if let Some(h) = self.hello.as_mut() {
                h.on_ready();
            }
        }
        if fds[SIGNALS].revents != 0 {
            while let Ok(Some(si)) = sfd.read_signal() {
                let _ = sys::write_all(self.ctl.as_raw_fd(), &[proto::FORWARD, si.ssi_signo as u8]);
            }
        }
        // The asker first: a clock started with a lower output cap is
        // written before the program gets its input, so before any output
        // it makes.
        if fds[CONTROL].revents != 0 {
            self.on_control();
        }
        for (i, which) in [(STDOUT, Which::Out), (STDERR, Which::Err)] {
            if fds[i].revents != 0 && self.output.pump(which) {
                self.kill_all();
            }
        }
        self.on_listener(&fds[LISTENER..LISTENER + 2]);
        if fds[AUDIT].revents != 0 {
            if let Some(a) = self.audit.as_mut() {
                a.on_ready();
            }
        }
        if let Some(m) = self.masks.as_mut() {
            if fds[CTL_IN].revents != 0 {
                m.on_ctl(self.ctl.as_raw_fd());
            }
            if fds[MASKS].revents != 0 {
                m.on_ready();
            }
        }
        if fds[PIDFD].revents != 0 && !self.init_done {
            self.init_done = true;
            return true;
        }
        false
    }

    /// Notifications and the connect agent's replies; in kill mode, kill
    /// the jail at the first refused syscall.
    fn on_listener(&mut self, fds: &[libc::pollfd]) {
        for p in fds {
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
    }
}

/// Whether init's last records (its Status) are among `r`.
pub(super) fn has_status(r: &[proto::Report]) -> bool {
    r.iter().any(|r| matches!(r, proto::Report::Status(_)))
}

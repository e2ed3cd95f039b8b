//! A cold run's watch: its parts (init's pidfd and control socket, the
//! output, the deadline, the run's cgroup, the seccomp listener, the audit
//! reader, the covers' watch, the run directory's meter, the payload's
//! hello) and the observers only a cold run has (the report pipe, the
//! caller's forwarded signals, the asker's control socket), handed to the
//! one watch loop (`supervise::engine`).

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::sys::signalfd::SignalFd;

use super::engine;
use super::rundir;
use crate::cgroup;
use crate::jail::proto;
use crate::observe::deadline::{self, Deadline};
use crate::observe::learn::Learner;
use crate::observe::pump::Output;
use crate::observe::{Ask, Observer};
use crate::plan::limits::TmpCap;
use crate::plan::Plan;
use crate::sys::{self, Errno};

/// The supervisor's view of a running jail.
pub(super) struct Watch {
    pub(super) pidfd: OwnedFd,
    pub(super) ctl: OwnedFd,
    pub(super) deadline: Deadline,
    pub(super) output: Output,
    /// seccomp listener (learning and kill mode).
    pub(super) learner: Option<Learner>,
    /// The run's cgroup, when there is one.
    pub(super) cg: Option<cgroup::RunCgroup>,
    /// Init has exited (its pidfd was readable).
    pub(super) init_done: bool,
    /// The asker's socket (see `spawn::run`).
    control: Asker,
    /// No pid namespace: init's death is not the jail's.
    fallback: bool,
    /// The fallback's run directory without a tmpfs: metered.
    pub(super) meter: Option<rundir::Meter>,
    /// The meter found the run directory past the cap; the jail was killed.
    pub(super) disk_hit: bool,
    /// The reader of this run's Landlock audit records.
    pub(super) audit: Option<crate::observe::audit::AuditLog>,
    /// The watch on the covers over denied paths.
    pub(super) masks: Option<crate::observe::masks::MaskWatch>,
    /// The payload's hello, when its pid is to be told.
    pub(super) hello: Option<super::childpid::Hello>,
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
            cg,
            init_done: false,
            control: Asker {
                fd: control,
                asked: Vec::new(),
                held,
            },
            fallback: plan.mode.fallback().is_some(),
            meter,
            disk_hit: false,
            audit: None,
            masks: None,
            hello: None,
        }
    }

    /// Watch until every output pipe is closed and either init has
    /// exited or (with no cgroup to remove) init's last records said the
    /// jail is empty (see `engine::watch`); return what the jail reported.
    ///
    /// Records come in few writes (the payload's layers at once, init's
    /// last ones at once): each wake-up costs, and here a wake-up of an
    /// idle vCPU takes a few hundred microseconds.
    pub(super) fn wait(&mut self, rep: &OwnedFd, sfd: &SignalFd) -> Vec<u8> {
        let mut reports = Reports {
            rep,
            buf: Vec::new(),
            open: true,
            emptied: false,
            emptied_ends: self.cg.is_none(),
        };
        let ends = InitEnds {
            pidfd: &self.pidfd,
            ctl: &self.ctl,
            fallback: self.fallback,
            cg: self.cg.as_ref(),
        };
        let mut signals = Signals {
            sfd,
            ctl: self.ctl.as_raw_fd(),
        };
        let mut asking = Asking {
            a: &mut self.control,
            cg: self.cg.as_ref(),
        };
        // In the order they are heard: the asker before the output (see
        // engine::watch); the payload waits for the hello's answer before
        // execve.
        let mut observers: Vec<&mut dyn Observer> = vec![&mut reports];
        if let Some(h) = self.hello.as_mut() {
            observers.push(h);
        }
        observers.push(&mut signals);
        observers.push(&mut asking);
        if let Some(l) = self.learner.as_mut() {
            observers.push(l);
        }
        if let Some(a) = self.audit.as_mut() {
            observers.push(a);
        }
        if let Some(m) = self.masks.as_mut() {
            observers.push(m);
        }
        if let Some(m) = self.meter.as_mut() {
            observers.push(m);
        }
        let core = engine::Core {
            pidfd: &self.pidfd,
            output: &mut self.output,
            deadline: &mut self.deadline,
            ends: &ends,
        };
        let w = engine::watch(core, &mut observers);
        drop(observers);
        self.init_done = w.gone;
        self.disk_hit |= self.meter.as_ref().is_some_and(|m| m.hit);
        reports.drain()
    }

    /// Once more now that the jail is gone: what it left counts too.
    pub(super) fn meter_last(&mut self) {
        if let Some(m) = &mut self.meter {
            if !self.disk_hit && m.check() {
                self.disk_hit = true;
            }
        }
    }
}

/// A cold jail is ended through its init: SIGTERM is passed on by init to
/// every process; SIGKILL goes to init, whose death takes the pid
/// namespace (without one, init kills the rest, then ends as when the
/// payload ends), and to the cgroup.
struct InitEnds<'a> {
    pidfd: &'a OwnedFd,
    ctl: &'a OwnedFd,
    fallback: bool,
    cg: Option<&'a cgroup::RunCgroup>,
}

impl engine::Ends for InitEnds<'_> {
    fn term(&self) {
        let _ = sys::write_all(self.ctl.as_raw_fd(), &[proto::TERM_ALL]);
    }

    fn kill(&self) {
        if self.fallback {
            let _ = sys::write_all(self.ctl.as_raw_fd(), &[proto::KILL_ALL]);
        } else {
            let _ = sys::pidfd_send_signal(self.pidfd, libc::SIGKILL);
        }
        if let Some(c) = self.cg {
            c.kill();
        }
    }
}

/// What the jail wrote on the report pipe.
struct Reports<'a> {
    rep: &'a OwnedFd,
    buf: Vec<u8>,
    open: bool,
    /// Init's last records (its Status) are in: the jail is empty.
    emptied: bool,
    /// With no cgroup to remove, init's last records end the watch.
    emptied_ends: bool,
}

impl Reports<'_> {
    fn read(&mut self) {
        let mut chunk = [0u8; 4096];
        match sys::read(self.rep.as_raw_fd(), &mut chunk) {
            Ok(0) | Err(_) => self.open = false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.emptied = has_status(&proto::decode(&self.buf));
            }
        }
    }

    /// Read what is left without blocking: init may still be exiting, or
    /// (init gone) a stray holder may keep the pipe open.
    fn drain(mut self) -> Vec<u8> {
        let rep = self.rep;
        let _ = sys::set_nonblocking(rep.as_raw_fd());
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = sys::read(rep.as_raw_fd(), &mut chunk) {
            self.buf.extend_from_slice(&chunk[..n]);
        }
        self.buf
    }
}

impl Observer for Reports<'_> {
    fn fds(&self, gone: bool) -> [RawFd; 2] {
        let open = self.open && !gone;
        [if open { self.rep.as_raw_fd() } else { -1 }, -1]
    }

    fn on_ready(&mut self, _fd: Option<RawFd>, asks: &mut Vec<Ask>) {
        self.read();
        if self.emptied && self.emptied_ends {
            asks.push(Ask::Ended);
        }
    }
}

/// The caller's signals (a signalfd), passed on to init.
struct Signals<'a> {
    sfd: &'a SignalFd,
    ctl: RawFd,
}

impl Observer for Signals<'_> {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        [self.sfd.as_raw_fd(), -1]
    }

    fn on_ready(&mut self, _fd: Option<RawFd>, _asks: &mut Vec<Ask>) {
        while let Ok(Some(si)) = self.sfd.read_signal() {
            let _ = sys::write_all(self.ctl, &[proto::FORWARD, si.ssi_signo as u8]);
        }
    }
}

/// The asker's control socket (`Child`'s).
struct Asker {
    /// None once it has said kill or closed.
    fd: Option<RawFd>,
    /// Bytes read, not yet a whole record.
    asked: Vec<u8>,
    /// The clock is held (see `deadline::hold`): the policy's timeout,
    /// until the asker starts the clock.
    held: Option<Option<Duration>>,
}

/// The asker, with the run's cgroup its limits may go to.
struct Asking<'a> {
    a: &'a mut Asker,
    cg: Option<&'a cgroup::RunCgroup>,
}

impl Observer for Asking<'_> {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        [self.a.fd.unwrap_or(-1), -1]
    }

    /// The asker said kill (`K`), or is gone: kill the jail, once. It may
    /// also start a held clock (`deadline::START_CLOCK`); other bytes mean
    /// nothing.
    fn on_ready(&mut self, _fd: Option<RawFd>, asks: &mut Vec<Ask>) {
        let Some(fd) = self.a.fd else { return };
        let mut b = [0u8; 64];
        match sys::read(fd, &mut b) {
            Ok(n) if n > 0 => self.a.asked.extend_from_slice(&b[..n]),
            Err(e) if e.errno == Errno::EAGAIN => return,
            _ => return self.kills(asks),
        }
        while let Some(&first) = self.a.asked.first() {
            match first {
                b'K' => return self.kills(asks),
                deadline::START_CLOCK => {
                    const LEN: usize = deadline::START_CLOCK_LEN;
                    let Some(rec) = self.a.asked.get(..LEN) else {
                        return; // the rest is to come
                    };
                    let rec: [u8; LEN] = rec.try_into().unwrap_or([0; LEN]);
                    self.a.asked.drain(..LEN);
                    self.start_clock(deadline::decode_start(&rec), asks);
                }
                deadline::START_CLOCK_LIMITS => {
                    const LEN: usize = deadline::START_CLOCK_LIMITS_LEN;
                    let Some(rec) = self.a.asked.get(..LEN) else {
                        return; // the rest is to come
                    };
                    let rec: [u8; LEN] = rec.try_into().unwrap_or([0; LEN]);
                    self.a.asked.drain(..LEN);
                    self.start_clock_limits(deadline::decode_start_limits(&rec), fd, asks);
                }
                _ => {
                    self.a.asked.remove(0);
                }
            }
        }
    }
}

impl Asking<'_> {
    fn kills(&mut self, asks: &mut Vec<Ask>) {
        self.a.fd = None;
        asks.push(Ask::Kill);
    }

    /// The asker gave the run limits of its own with its program: into
    /// the run's cgroup, then the clock started; the asker hears which
    /// (`LIMITS_SET`), or that the cgroup cannot hold them
    /// (`LIMITS_REFUSED`, the clock still held), before its program goes
    /// to the payload.
    fn start_clock_limits(&mut self, c: deadline::ClockStart, asker: RawFd, asks: &mut Vec<Ask>) {
        let set = match (self.cg, &c.limits) {
            (_, None) => true,
            (Some(cg), Some(req)) if self.a.held.is_some() => cg.set_limits(req).is_ok(),
            _ => false,
        };
        if set {
            self.start_clock(c, asks);
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
    fn start_clock(&mut self, c: deadline::ClockStart, asks: &mut Vec<Ask>) {
        let Some(policy_timeout) = self.a.held.take() else {
            return;
        };
        let now = Instant::now();
        deadline::clock_started(now, c);
        asks.push(Ask::Start {
            at: c.timeout.or(policy_timeout).map(|t| now + t),
            max_output: c.max_output,
            to: c.output,
        });
    }
}

/// Whether init's last records (its Status) are among `r`.
pub(super) fn has_status(r: &[proto::Report]) -> bool {
    r.iter().any(|r| matches!(r, proto::Report::Status(_)))
}

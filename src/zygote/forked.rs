//! One forked run, from the request's side: its watch (the one loop,
//! `supervise::engine`, over the child's pidfd, its output, its deadline,
//! its setup pipe and its killer) and its outcome (classified as a cold
//! run's, `supervise::classify`).

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{payload_end, Shared};
use crate::cgroup;
use crate::observe::deadline::Deadline;
use crate::observe::learn::Learner;
use crate::observe::pump::Output;
use crate::observe::{Ask, Observer};
use crate::outcome::{self, LayerReport, LimitReport, Outcome, Status};
use crate::stages::{self, Stage};
use crate::supervise::{classify, engine, report};
use crate::sys;
use crate::Killer;

/// One forked run.
pub struct Forked {
    pub(super) shared: Arc<Shared>,
    /// It has ended.
    pub(super) ended: bool,
    pub(super) pidfd: OwnedFd,
    /// Its stdout and stderr, captured and capped together.
    pub(super) output: Output,
    pub(super) setup: Option<OwnedFd>,
    /// What it said there before the run was handed over.
    pub(super) said: Vec<u8>,
    /// Its seccomp listener's end (errno mode's records, kill mode's
    /// verdict), when it passes one on.
    pub(super) learner: Option<Learner>,
    /// Its other end is the [`Killer`]'s: a `K` there kills the run.
    pub(super) control: OwnedFd,
    pub(super) killer: Option<OwnedFd>,
    pub(super) cgroup: Option<cgroup::RunCgroup>,
    pub(super) t0: Instant,
    pub(super) timeout: Option<Duration>,
    pub(super) grace: Duration,
    pub(super) limits: BTreeMap<outcome::Name, LimitReport>,
    pub(super) layers: BTreeMap<outcome::Name, LayerReport>,
    pub(super) memory_limit: Option<u64>,
    /// The size of its workdir's tmpfs.
    pub(super) workdir_size: u64,
    /// The child's stdin, when the caller writes it.
    pub stdin: Option<std::fs::File>,
    /// Where it is passed on (each until its reader goes away).
    pub(super) sinks: [Option<OwnedFd>; 2],
    /// The child's stdout and stderr as they come, when streamed.
    pub stdout: Option<std::fs::File>,
    pub stderr: Option<std::fs::File>,
}

impl Forked {
    /// A [`Killer`] of this run (once).
    pub fn killer(&mut self) -> Option<Killer> {
        self.killer.take().map(Killer::from_control)
    }

    /// Pump and cap the output until the child has ended (ending it at
    /// the deadline, at the output cap, or on the killer's word), then
    /// its outcome.
    pub fn wait(mut self) -> Outcome {
        let w = self.watch();
        // Ended (its pidfd said so, or its init's last record and its
        // files' closing); the zygote's kernel reaps it.
        self.ended = true;
        self.conclude(w)
    }

    /// The run's watch: the one loop (`supervise::engine`) over its
    /// pidfd, its output (captured and capped as a cold run's), its
    /// deadline (SIGTERM to every process of the run, which its init
    /// passes on, then SIGKILL after the grace), its setup pipe and its
    /// killer.
    fn watch(&mut self) -> Watched {
        let mut deadline = Deadline::new(self.timeout.map(|t| self.t0 + t), self.grace);
        let mut setup = SetupPipe {
            fd: self.setup.take(),
            said: std::mem::take(&mut self.said),
        };
        let mut killer = KillerControl {
            fd: Some(self.control.as_raw_fd()),
        };
        let ends = ChildEnds { pidfd: &self.pidfd };
        let core = engine::Core {
            pidfd: &self.pidfd,
            output: &mut self.output,
            deadline: &mut deadline,
            ends: &ends,
        };
        let mut observers: Vec<&mut dyn Observer> = vec![&mut setup, &mut killer];
        if let Some(l) = self.learner.as_mut() {
            observers.push(l);
        }
        let w = engine::watch(core, &mut observers);
        drop(observers);
        // Both streams ended: so do the streamed copies.
        self.sinks = [None, None];
        Watched {
            said: setup.said,
            timed_out: deadline.timed_out,
            killed: w.killed,
        }
    }

    /// The outcome, from what the watch saw, the child's end as the zygote
    /// passed it on (status, user and system µs, max RSS KiB) and its run
    /// cgroup's counters; classified as a cold run's (`supervise::classify`).
    fn conclude(mut self, w: Watched) -> Outcome {
        let concluding = stages::lap(Stage::ForkRun, self.t0);
        let o = self.outcome(w);
        stages::lap(Stage::ForkConclude, concluding);
        o
    }

    fn outcome(&mut self, w: Watched) -> Outcome {
        let mut o = Outcome::new();
        o.usage.wall_time_ms = self.t0.elapsed().as_millis() as u64;
        let stats = self.cgroup.as_ref().map(|c| c.stats());
        // The child's init sent the payload's end before it exits: its
        // cgroup goes once it has (not in this answer's time).
        if let Some(c) = self.cgroup.take() {
            cgroup::remove_after_exit(c, self.pidfd.try_clone().ok());
        }
        // The payload's end as its init saw it. Without it: a child that
        // failed a step (125), or one killed whole (its pid 1 with it: by
        // us, by the OOM killer, or with the zygote's jail).
        let end = payload_end(&w.said);
        let status_word = match end {
            Some(e) => e.status,
            None if w.said.first() == Some(&b'e') => 125 << 8,
            None => libc::SIGKILL,
        };
        if let Some(e) = end {
            o.usage.user_time_ms = e.user_us / 1000;
            o.usage.system_time_ms = e.sys_us / 1000;
            o.usage.peak_memory_bytes = e.maxrss_kb * 1024;
        }
        if let Some(st) = &stats {
            if let Some(p) = st.memory_peak {
                o.usage.peak_memory_bytes = p;
                o.usage.peak_memory_source = "cgroup";
            }
            if let Some(c) = &st.cpu {
                if c.user_usec + c.system_usec > 0 {
                    o.usage.user_time_ms = c.user_usec / 1000;
                    o.usage.system_time_ms = c.system_usec / 1000;
                }
            }
            o.usage.peak_pids = st.pids_peak.unwrap_or(0);
        }
        report::output(&mut o, &self.output);
        let ended = sys::ChildEnd::from_wait_status(status_word);
        o.limits = std::mem::take(&mut self.limits);
        o.layers = std::mem::take(&mut self.layers);
        // The same verdicts and the same classification as a cold run's
        // (supervise::classify): no limit's status beside an exit of 0.
        classify::verdicts(&mut o, stats.as_ref(), ended);
        let seccomp_kill = o
            .layers
            .get("seccomp")
            .is_some_and(|l| l.detail["action"] == "kill");
        let observed = classify::Observed {
            signal: ended.signal,
            code: ended.code,
            memory_hit: stats.as_ref().is_some_and(|s| s.memory_limit_hit()),
            pids_refused: stats.as_ref().is_some_and(|s| s.pids_limit_hit()),
            memory_limit: self.memory_limit,
            disk_over: end.is_some_and(|e| e.workdir_full),
            output_cap_hit: self.output.hit_cap,
            timed_out: w.timed_out,
            seccomp_kill,
            ..Default::default()
        };
        o.exit_code = ended
            .code
            .unwrap_or_else(|| 128 + ended.signal.unwrap_or(0));
        o.signal = ended.signal;
        o.status = if end.is_none() && !w.killed && !self.shared.alive() {
            o.exit_code = 125;
            o.error = Some("zygote: the child's end is unknown (the fork server went away)".into());
            Status::SetupError
        } else if w.said.first() == Some(&b'e') {
            o.exit_code = 125;
            setup_failed(&mut o, &w.said);
            Status::SetupError
        } else {
            classify::classify(&observed)
        };
        self.listened(&mut o);
        if o.status == Status::DiskLimit {
            o.detail = Some(format!(
                "the workdir reached its size ({} bytes){}",
                self.workdir_size,
                if o.signal == Some(libc::SIGKILL) {
                    ": run killed"
                } else {
                    ""
                }
            ));
        }
        classify::explain_oom(&mut o);
        o
    }
}

/// What a forked run's watch saw.
struct Watched {
    /// What the child said on its setup pipe (`k`, or a failed step;
    /// then its init's record of the payload's end).
    said: Vec<u8>,
    timed_out: bool,
    /// We sent it SIGKILL (deadline's end, output cap, killer).
    killed: bool,
}

/// The outcome's error and setup, from the child's failed step's record.
fn setup_failed(o: &mut Outcome, said: &[u8]) {
    match sys::forked::failure_of(said) {
        Some(f) => {
            // The step and path as a cold jail names the same failure, the
            // call as the reason: the same setup error as a cold run's.
            let e = crate::plan::SetupError::new(f.step.as_str(), f.path.as_str(), f.reason())
                .with_errno(f.errno as i32);
            o.error = Some(e.to_string());
            o.setup = Some((&e).into());
        }
        None => o.error = Some("zygote child: it ended before it was confined".into()),
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        // A run dropped before its end is killed (its pid namespace dies
        // with its pid 1); its cgroup goes with the RunCgroup.
        if !self.ended {
            self.shared.end(&self.pidfd);
        }
    }
}

impl Forked {
    /// What its seccomp listener heard: the refused syscalls (errno mode),
    /// the one it was killed for (kill mode), or that no listener came
    /// (another filter of the process tree holds the one it may have).
    /// Without a listener at all (`jail::zygote::forked_listener`), errno
    /// mode's refusals went unrecorded: the outcome says so.
    fn listened(&mut self, o: &mut Outcome) {
        let errno_mode = o
            .layers
            .get("seccomp")
            .is_some_and(|l| l.detail["action"] == "errno");
        let Some(l) = self.learner.take() else {
            if errno_mode {
                o.warnings.push(
                    "seccomp: refused syscalls were not recorded (this fork server's children have no listener; the kernel refused them alone)".into(),
                );
            }
            return;
        };
        let violation = l.killed_for();
        let heard = l.finish();
        report::seccomp_denials(o, heard.denials, heard.more);
        if heard.unheard {
            report::seccomp_unheard(o);
        }
        if let Some(v) = violation.filter(|_| o.status != Status::SetupError) {
            report::violation(o, v);
        }
    }
}

/// A forked child is ended through its pidfd: SIGTERM to its init, which
/// passes it on to every process of the run; SIGKILL to its init, whose
/// death takes the pid namespace.
struct ChildEnds<'a> {
    pidfd: &'a OwnedFd,
}

impl engine::Ends for ChildEnds<'_> {
    fn term(&self) {
        let _ = sys::pidfd_send_signal(self.pidfd, libc::SIGTERM);
    }

    fn kill(&self) {
        let _ = sys::pidfd_send_signal(self.pidfd, libc::SIGKILL);
    }
}

/// The child's setup pipe: its first word (`k`, or a failed step), then
/// its init's record of the payload's end, which ends the run (init
/// closed its files on its way out; what is left of its exit, the
/// namespaces' and mounts' teardown, is not this answer's to wait for:
/// the cgroup goes once the pidfd says so, see `Forked::outcome`).
struct SetupPipe {
    fd: Option<OwnedFd>,
    said: Vec<u8>,
}

impl Observer for SetupPipe {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        [self.fd.as_ref().map_or(-1, |f| f.as_raw_fd()), -1]
    }

    fn on_ready(&mut self, _fd: Option<RawFd>, asks: &mut Vec<Ask>) {
        let mut buf = [0u8; 4096];
        match self.fd.as_ref().map(|f| sys::read(f.as_raw_fd(), &mut buf)) {
            Some(Ok(n)) if n > 0 => self.said.extend_from_slice(&buf[..n]),
            _ => self.fd = None,
        }
        if payload_end(&self.said).is_some() {
            asks.push(Ask::Ended);
        }
    }

    fn holds(&self) -> bool {
        self.fd.is_some()
    }
}

/// The run's [`Killer`]s' socket: a `K`, or every killer gone, kills it.
struct KillerControl {
    fd: Option<RawFd>,
}

impl Observer for KillerControl {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        [self.fd.unwrap_or(-1), -1]
    }

    fn on_ready(&mut self, _fd: Option<RawFd>, asks: &mut Vec<Ask>) {
        let Some(fd) = self.fd else { return };
        let mut b = [0u8; 1];
        let n = sys::read(fd, &mut b).unwrap_or(0);
        // Every killer gone: nothing more to hear, and the run ends.
        if n == 0 {
            self.fd = None;
        }
        if n == 0 || b[0] == b'K' {
            asks.push(Ask::Kill);
        }
    }
}

//! The one watch of a running jail, whichever launcher made it (a cold
//! clone, a warm member, a fork server's child): one poll loop over the
//! jail's pidfd, its output (`observe::pump`, captured and capped), its
//! deadline (`observe::deadline`: SIGTERM, the grace, SIGKILL) and the
//! run's [`Observer`]s, until the jail has ended and its output is all
//! read. How a jail is told to end is the launcher's ([`Ends`]); what
//! ends it, and when, is decided here only.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::observe::deadline::Deadline;
use crate::observe::pump::{Output, Which};
use crate::observe::{Ask, Observer};
use crate::sys;

/// How long the output may stay open once the jail's first process is
/// gone (something outside the jail may hold the pipes).
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

/// How a launcher's jail is told to end.
pub(crate) trait Ends {
    /// The deadline: SIGTERM to every process of the run.
    fn term(&self);
    /// SIGKILL to every process of the run.
    fn kill(&self);
    /// The jail's first process has exited: what it left is ended here
    /// where the launcher must do it itself (a session command's sweep).
    /// How long to wait for the output from now.
    fn gone(&self) -> Duration {
        DRAIN
    }
}

/// What every run has: the pidfd of its first process, its output, its
/// deadline, and how it is ended.
pub(crate) struct Core<'a> {
    pub(crate) pidfd: &'a OwnedFd,
    pub(crate) output: &'a mut Output,
    pub(crate) deadline: &'a mut Deadline,
    pub(crate) ends: &'a dyn Ends,
}

/// What the watch saw.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Watched {
    /// The pidfd said the jail's first process exited.
    pub(crate) gone: bool,
    /// An observer said the run was over (its init's last record).
    pub(crate) ended: bool,
    /// The watch killed the run (deadline, output cap, an observer).
    pub(crate) killed: bool,
}

/// Watch until the jail has ended (its pidfd, or an observer's
/// [`Ask::Ended`]), its output is all read and no observer holds the
/// watch open; once the pidfd has said so, at most [`DRAIN`] more.
///
/// Observers are heard in their order, before the output: a held clock
/// started with a lower output cap applies before the program gets its
/// input, so before any output it makes.
pub(crate) fn watch(mut core: Core<'_>, observers: &mut [&mut dyn Observer]) -> Watched {
    let mut w = Watched::default();
    let mut asks = Vec::new();
    let mut drain_until: Option<Instant> = None;
    let mut fds = Vec::with_capacity(3 + 2 * observers.len());
    loop {
        let now = Instant::now();
        if core.deadline.term_due(now) && !w.killed {
            core.ends.term();
        }
        if core.deadline.kill_due(now) {
            kill(&core, &mut w);
        }
        for o in observers.iter_mut() {
            if o.due(w.gone).is_some_and(|d| d <= now) {
                o.on_ready(None, &mut asks);
            }
        }
        apply(&mut core, &mut asks, &mut w);
        let ended = w.gone || w.ended;
        let held = core.output.open() || observers.iter().any(|o| o.holds());
        if (ended && !held) || drain_until.is_some_and(|d| now >= d) {
            // What the pipes hold is read, even when something still
            // holds them open.
            core.output.drain_now();
            break;
        }
        let next = [core.deadline.next(), drain_until]
            .into_iter()
            .chain(observers.iter().map(|o| o.due(w.gone)))
            .flatten()
            .min();
        let timeout = next.map_or(-1, |t| {
            t.saturating_duration_since(now)
                .as_millis()
                .min(i32::MAX as u128 - 1) as i32
                + 1
        });
        fds.clear();
        let [out, err] = core.output.poll_fds();
        let pidfd = if w.gone { -1 } else { core.pidfd.as_raw_fd() };
        fds.extend([pollin(pidfd), pollin(out), pollin(err)]);
        for o in observers.iter() {
            fds.extend(o.fds(w.gone).map(pollin));
        }
        if sys::poll(&mut fds, timeout).is_err() {
            break;
        }
        for (i, o) in observers.iter_mut().enumerate() {
            for p in &fds[3 + 2 * i..5 + 2 * i] {
                if p.fd >= 0 && p.revents != 0 {
                    o.on_ready(Some(p.fd), &mut asks);
                }
            }
            apply(&mut core, &mut asks, &mut w);
        }
        for (i, which) in [(1, Which::Out), (2, Which::Err)] {
            if fds[i].revents != 0 && core.output.pump(which) {
                kill(&core, &mut w);
            }
        }
        if fds[0].revents != 0 && !w.gone {
            w.gone = true;
            // Everything in the jail is gone with it; the pipes reach EOF
            // at once. Bound the drain in case something else holds them.
            drain_until = Some(Instant::now() + core.ends.gone());
        }
    }
    w
}

fn kill(core: &Core<'_>, w: &mut Watched) {
    w.killed = true;
    core.ends.kill();
}

/// What the observers asked, in their order.
fn apply(core: &mut Core<'_>, asks: &mut Vec<Ask>, w: &mut Watched) {
    for a in asks.drain(..) {
        match a {
            Ask::Kill => kill(core, w),
            Ask::Ended => w.ended = true,
            Ask::Grace => core.deadline.cut_short(Instant::now()),
            Ask::Start { at, max_output, to } => {
                core.deadline.start(at);
                if let Some(m) = max_output {
                    core.output.set_cap(m);
                }
                core.output.send_to(to);
            }
        }
    }
}

fn pollin(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

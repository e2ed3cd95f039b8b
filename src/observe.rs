//! What is heard from a running jail, and the one interface the watch
//! (`supervise::engine`) hears it through: an [`Observer`] names the fds
//! it wants polled and when it wants to be asked without one, and answers
//! what it heard with [`Ask`]s. Every launcher's watch is the same loop
//! over the same kinds of observer; only which observers a run has
//! differs (a forked child has no audit reader, a cold run no setup
//! pipe).
//!
//! Here: the deadline (`deadline`, SIGTERM, the grace, SIGKILL; the held
//! clock's records) and the output (`pump`), which every run has and the
//! engine holds itself; the seccomp listener (`learn`, with the
//! fallback's connect mediation, `unix`), Landlock's audit records
//! (`audit`), the covers' watch (`masks`) and the denial lines they all
//! write (`lines`). None of them starts or ends a process: what to do is
//! the engine's.

#![deny(unsafe_code)]

use std::os::fd::RawFd;
use std::time::Instant;

pub(crate) mod audit;
pub(crate) mod deadline;
pub(crate) mod learn;
pub(crate) mod lines;
pub(crate) mod masks;
pub(crate) mod pump;
pub(crate) mod unix;

/// What an observer asks of the watch once it has heard something.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Ask {
    /// End the run now: every process of it killed (the output cap, the
    /// asker's kill, kill mode's refused syscall, a full disk).
    Kill,
    /// The run was told to end (the observer passed on an interrupt):
    /// SIGKILL after the grace, the deadline no longer counts.
    Grace,
    /// The run is over as far as this observer can tell (its init's last
    /// record): the watch ends once nothing holds it open.
    Ended,
    /// A held clock starts: the deadline at `at`, the output capped at
    /// `max_output` and sent `to`.
    Start {
        at: Option<Instant>,
        max_output: Option<u64>,
        to: deadline::OutputTo,
    },
}

/// One source of a running jail's events, polled by the watch.
pub(crate) trait Observer {
    /// The fds to poll now (-1 for none). `gone`: the jail's first
    /// process has exited.
    fn fds(&self, gone: bool) -> [RawFd; 2];
    /// When it next wants to be asked with no fd ready (a meter).
    fn due(&self, _gone: bool) -> Option<Instant> {
        None
    }
    /// One of its fds is ready (`Some`), or its time came (`None`).
    fn on_ready(&mut self, fd: Option<RawFd>, asks: &mut Vec<Ask>);
    /// The watch may not end while this holds (a pipe still open).
    fn holds(&self) -> bool {
        false
    }
}

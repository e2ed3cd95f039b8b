//! The supervisor's end of the seccomp user-notification listener: learning
//! mode (record and let through every syscall outside the allowlist), kill
//! mode (record the first refused syscall; the caller then kills the
//! jail) and errno mode (answer each refused syscall with EPERM and record
//! it as a denial: per syscall and thread, with a count).
//!
//! Lifecycle: the plan opens the socket pair (`Channels::seccomp`, in
//! `plan::Resources::seccomp`); [`Learner::for_compiled`] takes both ends
//! before clone. The child keeps its end open and the payload sends the
//! listener over it right after installing its filter
//! (`jail::filter::install_with`). After clone the supervisor calls
//! [`Learner::close_child_end`], polls [`Learner::fds`], calls
//! [`Learner::on_ready`] for each readable one, and at the end
//! [`Learner::finish`].

#![deny(unsafe_code)]

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

pub mod paths;

use crate::policy::SeccompAction;
use crate::seccomp::syscalls;
use crate::sys;

/// What the supervisor does with a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Record the syscall and let it run.
    Learn,
    /// Record the syscall and leave the caller blocked: the supervisor
    /// kills the jail (see [`Learner::violation`]).
    Kill,
    /// Answer EPERM and record the denial (and mediate the fallback's
    /// connect: see observe::unix).
    Errno,
}

/// One syscall refused to one thread (errno mode).
#[derive(Debug)]
struct Refused {
    nr: i64,
    host_tid: u32,
    /// Its id in the jail's pid namespace, read when first refused.
    thread: Option<i64>,
    count: u64,
}

impl Refused {
    fn denial(&self) -> crate::outcome::Denial {
        crate::outcome::Denial::Seccomp {
            syscall: syscalls::display(self.nr),
            thread: self.thread,
            count: self.count,
        }
    }
}

/// What the listener heard, for the outcome.
#[derive(Debug, Default)]
pub struct Heard {
    /// Learning mode: the syscalls used outside the allowlist.
    pub learned: Vec<String>,
    /// Errno mode: each syscall refused, per thread.
    pub denials: Vec<crate::outcome::Denial>,
    /// Errno or kill mode, and no listener came: refusals were judged in
    /// the kernel alone, unrecorded (or nothing was installed).
    pub unheard: bool,
    /// Refusals beyond the outcome's cap on denials.
    pub more: u64,
    /// Learning paths: each path used, with the strongest access.
    pub paths: Vec<(std::path::PathBuf, paths::Access)>,
    /// Paths beyond [`paths::MAX_PATHS`].
    pub more_paths: u64,
    /// Allocations the meter saw ask for more address space than
    /// RLIMIT_AS had left (see [`Learner::meter_allocations`]).
    pub allocations_refused: u64,
}

/// Supervisor side of the listener hand-over and the notifications.
#[derive(Debug)]
pub struct Learner {
    mode: Mode,
    /// Our end of the socketpair, until the listener arrives or EOF.
    sock: Option<OwnedFd>,
    /// The child's end; closed in the supervisor after clone.
    child: Option<OwnedFd>,
    listener: Option<OwnedFd>,
    /// Syscall numbers seen, in the order first seen.
    seen: Vec<i64>,
    seen_set: BTreeSet<i64>,
    violation: Option<i64>,
    /// The watch was asked to kill the jail for the violation.
    killed_for: bool,
    /// Errno mode: each (syscall, host tid) refused, in the order first
    /// refused, with the jail's tid and a count; at most MAX_DENIALS.
    denied: Vec<Refused>,
    /// Refusals of pairs beyond MAX_DENIALS.
    more: u64,
    /// The payload's listener arrived.
    heard_from: bool,
    /// `--denials-fd`: each new refusal as a JSON line.
    lines: super::lines::Lines,
    /// The syscall the filter sends here to be mediated, not judged.
    mediated: Option<i32>,
    /// Learning paths: the allowed path-taking syscalls sent here
    /// (ascending), and what their paths were.
    watched: Vec<i32>,
    learn_paths: bool,
    paths: paths::PathLog,
    unix: super::unix::Mediator,
    /// The allocation meter: RLIMIT_AS, and the metered syscalls with the
    /// argument each asks for its length in.
    meter: Option<u64>,
    metered: Vec<(i32, usize)>,
    /// Metered allocations larger than RLIMIT_AS had left.
    allocations_refused: u64,
}

impl Learner {
    /// For a compiled filter that wants a listener (learning and kill
    /// mode, or a mediated syscall: the fallback's connect), over the plan's
    /// socket pair `(ours, the payload's)`. `caller_ids`: the payload's uid
    /// and gid when root started it; `inet`: the payload may have TCP and
    /// UDP sockets.
    pub fn for_compiled(
        c: &crate::seccomp::Compiled,
        sockets: (OwnedFd, Option<OwnedFd>),
        caller_ids: Option<(u32, u32)>,
        inet: bool,
    ) -> Learner {
        let mode = match c.action {
            SeccompAction::Learn => Mode::Learn,
            SeccompAction::Kill => Mode::Kill,
            SeccompAction::Errno => Mode::Errno,
        };
        let mut l = Learner::with_sockets(mode, sockets);
        l.mediated = c.mediated;
        l.learn_paths = !c.watched.is_empty();
        l.watched = c.watched.clone();
        l.unix = super::unix::Mediator::new(caller_ids, inet);
        l.meter = c.meter;
        l.metered = crate::seccomp::METERED
            .iter()
            .filter_map(|(n, arg)| Some((syscalls::number(n)? as i32, *arg as usize)))
            .collect();
        l
    }

    /// Over a socket pair `(ours, the payload's)` (theirs None: passed on
    /// and closed here already).
    fn with_sockets(mode: Mode, (ours, theirs): (OwnedFd, Option<OwnedFd>)) -> Learner {
        Learner {
            mode,
            sock: Some(ours),
            child: theirs,
            listener: None,
            seen: Vec::new(),
            seen_set: BTreeSet::new(),
            violation: None,
            killed_for: false,
            denied: Vec::new(),
            more: 0,
            heard_from: false,
            lines: Default::default(),
            mediated: None,
            watched: Vec::new(),
            learn_paths: false,
            paths: Default::default(),
            unix: Default::default(),
            meter: None,
            metered: Vec::new(),
            allocations_refused: 0,
        }
    }

    /// Write each refusal's first occurrence (per syscall and thread) to
    /// `fd` as a JSON line, as it happens.
    pub fn send_lines_to(&mut self, lines: super::lines::Lines) {
        self.lines = lines;
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Learning mode records the paths used too (`--learn`).
    pub fn learns_paths(&self) -> bool {
        self.learn_paths
    }

    /// Call in the supervisor right after clone, so that the socket reports
    /// EOF when the jail dies before handing over a listener.
    pub fn close_child_end(&mut self) {
        self.child = None;
    }

    /// The fds to poll for POLLIN: the socket until the listener arrives,
    /// then the listener until every filtered process is gone.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = Vec::with_capacity(2);
        if let Some(s) = &self.sock {
            v.push(s.as_raw_fd());
        }
        if let Some(l) = &self.listener {
            v.push(l.as_raw_fd());
        }
        v.extend(self.unix.fd());
        v
    }

    /// Handle one readable (or hung-up) fd from [`Learner::fds`]. Never
    /// blocks: it drains what is pending and returns.
    pub fn on_ready(&mut self, fd: RawFd) {
        if self.sock.as_ref().is_some_and(|s| s.as_raw_fd() == fd) {
            self.take_listener();
        } else if self.listener.as_ref().is_some_and(|l| l.as_raw_fd() == fd) {
            self.drain();
        } else if self.unix.fd() == Some(fd) {
            if let Some(l) = &self.listener {
                self.unix.on_ready(l);
            }
        }
    }

    fn take_listener(&mut self) {
        let Some(sock) = &self.sock else { return };
        let (readable, hup) = sys::seccomp::poll_now(sock.as_raw_fd());
        if readable {
            // The connect agent's socket ('U', only when a syscall is
            // mediated) may come first; the listener ('L') comes last: the
            // socket is closed after it, so nothing the command does later
            // can reach us this way.
            let mut tag = [0u8; 1];
            match sys::fdpass::recv_fd_with(sock.as_raw_fd(), &mut tag) {
                Ok((1, Some(a))) if tag[0] == b'U' && self.mediated.is_some() => {
                    self.unix.set_agent(a);
                    return self.take_listener();
                }
                Ok((1, Some(l))) if tag[0] == b'L' => {
                    self.heard_from = true;
                    self.listener = Some(l);
                }
                _ => {}
            }
            self.sock = None;
            if self.listener.is_some() {
                self.drain();
            }
        } else if hup {
            self.sock = None;
        }
    }

    fn drain(&mut self) {
        loop {
            let Some(l) = &self.listener else { return };
            let (readable, hup) = sys::seccomp::poll_now(l.as_raw_fd());
            if !readable {
                if hup {
                    // Every process under the filter is gone.
                    self.listener = None;
                }
                return;
            }
            let n = match sys::seccomp::notif_recv(l) {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(_) => {
                    self.listener = None;
                    return;
                }
            };
            if let (Some(limit), Some(&(_, arg))) =
                (self.meter, self.metered.iter().find(|(nr, _)| *nr == n.nr))
            {
                if asks_past(l, &n, arg, limit) {
                    self.allocations_refused += 1;
                }
                let _ = sys::seccomp::notif_reply(l, n.id, true, 0);
                continue;
            }
            if self.mediated == Some(n.nr) {
                self.unix.on_connect(l, &n);
                continue;
            }
            let nr = n.nr as i64;
            if self.learn_paths {
                if let Some(sc) = crate::seccomp::paths::path_syscall(nr) {
                    self.paths.record(l, &n, sc);
                }
                if self.watched.binary_search(&n.nr).is_ok() {
                    // Allowed: only its path was wanted.
                    let _ = sys::seccomp::notif_reply(l, n.id, true, 0);
                    continue;
                }
            }
            if self.seen_set.insert(nr) {
                self.seen.push(nr);
            }
            match self.mode {
                Mode::Learn => {
                    let _ = sys::seccomp::notif_reply(l, n.id, true, 0);
                }
                Mode::Errno => {
                    refused(&mut self.denied, &mut self.more, nr, n.pid, &self.lines);
                    let _ = sys::seccomp::notif_reply(l, n.id, false, libc::EPERM);
                }
                Mode::Kill => {
                    // Leave the caller blocked: the syscall never runs, and
                    // the supervisor kills the jail now.
                    if self.violation.is_none() {
                        self.violation = Some(nr);
                    }
                    return;
                }
            }
        }
    }

    /// The fallback's connect mediation, for the outcome (None when no
    /// syscall is mediated).
    pub fn unix_report(&self) -> Option<serde_json::Value> {
        self.mediated.map(|_| self.unix.report())
    }

    /// Kill mode: the first syscall refused, as (number, name). The caller
    /// must kill the jail as soon as this is Some.
    pub fn violation(&self) -> Option<(i64, String)> {
        self.violation.map(|nr| (nr, syscalls::display(nr)))
    }

    /// What was heard: the syscalls seen outside the allowlist (learning
    /// mode), in the order first seen; the refusals (errno mode). Closes
    /// the listener (any caller still blocked gets ENOSYS).
    pub fn finish(mut self) -> Heard {
        // A payload that ended at once may end before the loop saw its
        // listener arrive: it was sent before the exec, so it waits in the
        // socket. Take it now, or the run would say it never came.
        if self.sock.is_some() {
            self.take_listener();
        }
        if self.listener.is_some() {
            self.drain();
        }
        let learned = match self.mode {
            Mode::Learn => self.seen.iter().map(|&nr| syscalls::display(nr)).collect(),
            _ => Vec::new(),
        };
        let denials = self.denied.iter().map(Refused::denial).collect();
        let paths = std::mem::take(&mut self.paths);
        Heard {
            learned,
            denials,
            paths: paths.seen.into_iter().collect(),
            more_paths: paths.more,
            more: self.more,
            allocations_refused: self.allocations_refused,
            unheard: !self.heard_from && self.mode != Mode::Learn,
        }
    }
}

/// Whether the metered allocation `n` (its length in argument `arg`) asks
/// for more address space than RLIMIT_AS `limit` leaves its process, as
/// the kernel will judge it (`may_expand_vm`: the process's VmSize and the
/// length in pages past the limit). `mremap` asks for its growth. False
/// for an `mmap` with MAP_FIXED (it may replace mappings of its own, which
/// the kernel deducts), when the process's VmSize cannot be read, or when
/// the caller is gone.
fn asks_past(l: &OwnedFd, n: &sys::seccomp::Notif, arg: usize, limit: u64) -> bool {
    let len = match arg {
        2 => n.args[2].saturating_sub(n.args[1]),
        _ if n.args[3] & libc::MAP_FIXED as u64 != 0 => return false,
        _ => n.args[arg],
    };
    let len = len.saturating_add(4095) & !4095;
    let Some(size) = vm_size(n.pid) else {
        return false;
    };
    // The tid read is still the caller's.
    sys::seccomp::notif_id_valid(l, n.id) && size.saturating_add(len) > limit
}

/// VmSize of host thread `tid`'s process, in bytes.
fn vm_size(tid: u32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let kb = st.lines().find_map(|l| l.strip_prefix("VmSize:"))?;
    kb.trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

/// Count a refusal of `nr` to host thread `tid` in `denied` (read, while
/// the thread is blocked in the syscall, as the jail sees it); beyond
/// MAX_DENIALS pairs, in `more`.
fn refused(
    denied: &mut Vec<Refused>,
    more: &mut u64,
    nr: i64,
    tid: u32,
    lines: &super::lines::Lines,
) {
    if let Some(r) = denied.iter_mut().find(|r| r.nr == nr && r.host_tid == tid) {
        r.count += 1;
        return;
    }
    if denied.len() >= crate::outcome::MAX_DENIALS {
        *more += 1;
        return;
    }
    let r = Refused {
        nr,
        host_tid: tid,
        thread: sys::ns_tid(tid),
        count: 1,
    };
    lines.send(&r.denial());
    denied.push(r);
}

/// As the watch's observer: its socket (until the listener comes), then
/// the listener, and the connect agent; in kill mode, the first refused
/// syscall asks for the jail's end (once).
impl super::Observer for Learner {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        let v = Learner::fds(self);
        [
            v.first().copied().unwrap_or(-1),
            v.get(1).copied().unwrap_or(-1),
        ]
    }

    fn on_ready(&mut self, fd: Option<RawFd>, asks: &mut Vec<super::Ask>) {
        if let Some(fd) = fd {
            Learner::on_ready(self, fd);
        }
        if !self.killed_for && self.violation.is_some() {
            self.killed_for = true;
            asks.push(super::Ask::Kill);
        }
    }
}

impl Learner {
    /// Kill mode: the refused syscall the jail was killed for.
    pub fn killed_for(&self) -> Option<(i64, String)> {
        self.violation().filter(|_| self.killed_for)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_eof_without_listener_stops_polling() {
        let pair = sys::fdpass::socketpair(libc::SOCK_SEQPACKET).unwrap();
        let mut l = Learner::with_sockets(Mode::Learn, (pair.0, Some(pair.1)));
        let fds = l.fds();
        assert_eq!(fds.len(), 1);
        l.close_child_end();
        l.on_ready(fds[0]);
        assert!(l.fds().is_empty());
        let heard = l.finish();
        assert!(heard.learned.is_empty() && heard.denials.is_empty());
    }
}

//! The wall-clock deadline (`--timeout`): at it, SIGTERM to the jail; after
//! the grace, SIGKILL.

//!
//! A run may start with its clock held ([`hold`], for a jail built ahead
//! of its program: a warm pool's member): no deadline runs until the
//! caller sends [`START_CLOCK`] on its control socket, and the outcome's
//! wall time counts from then; [`START_CLOCK_LIMITS`] also gives the run
//! cgroup limits of its own, written before the clock starts, and the
//! outcome's limits say them. The hold is this process's state: a
//! supervisor process runs one jail.

#![deny(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cgroup;
use crate::outcome::{LimitReport, Outcome};

/// The caller's record that starts a held clock: `S`, then the timeout in
/// milliseconds and the output cap in bytes, each a little-endian u64
/// (`u64::MAX`: as the policy says), then where the output goes from now
/// (`-`: as the jail was spawned; `C`: captured only; `P`: to the pipes
/// only).
pub(crate) const START_CLOCK: u8 = b'S';
/// The record's length.
pub(crate) const START_CLOCK_LEN: usize = 18;
/// The record that also gives the run limits of its own: `L`, the
/// [`START_CLOCK`] record's fields, then the run cgroup's memory,
/// memory_high and pids (little-endian u64s) and cpus (an f64's bits),
/// each `u64::MAX` for as the policy says. The supervisor writes them into
/// the run's cgroup before it starts the clock, and answers
/// [`LIMITS_SET`] or [`LIMITS_REFUSED`] on the control socket (the
/// clock then stays held).
pub(crate) const START_CLOCK_LIMITS: u8 = b'L';
/// That record's length.
pub(crate) const START_CLOCK_LIMITS_LEN: usize = START_CLOCK_LEN + 32;
/// The supervisor's answer to [`START_CLOCK_LIMITS`]: written, the clock
/// started.
pub(crate) const LIMITS_SET: u8 = b'a';
/// The supervisor's answer to [`START_CLOCK_LIMITS`]: the run's cgroup
/// cannot hold one of them; the clock is still held.
pub(crate) const LIMITS_REFUSED: u8 = b'r';

/// Where a held jail's output goes once its clock starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputTo {
    /// As the jail was spawned.
    AsSpawned,
    /// Captured into the outcome, not written to the caller's pipes.
    Captured,
    /// Written to the caller's pipes, not captured.
    Piped,
}

/// The [`START_CLOCK`] record for `timeout` and `max_output` (None: as
/// the policy says), the output going to `to`.
pub(crate) fn encode_start(
    timeout: Option<Duration>,
    max_output: Option<u64>,
    to: OutputTo,
) -> [u8; START_CLOCK_LEN] {
    let t = timeout.map_or(u64::MAX, |t| (t.as_millis() as u64).clamp(1, u64::MAX - 1));
    let m = max_output.map_or(u64::MAX, |m| m.min(u64::MAX - 1));
    let mut b = [0u8; START_CLOCK_LEN];
    b[0] = START_CLOCK;
    b[1..9].copy_from_slice(&t.to_le_bytes());
    b[9..17].copy_from_slice(&m.to_le_bytes());
    b[17] = match to {
        OutputTo::AsSpawned => b'-',
        OutputTo::Captured => b'C',
        OutputTo::Piped => b'P',
    };
    b
}

/// The [`START_CLOCK_LIMITS`] record: [`encode_start`]'s, with the run
/// cgroup's limits `cg` (each None: as the policy says).
pub(crate) fn encode_start_limits(
    timeout: Option<Duration>,
    max_output: Option<u64>,
    to: OutputTo,
    cg: &cgroup::Request,
) -> [u8; START_CLOCK_LIMITS_LEN] {
    let mut b = [0u8; START_CLOCK_LIMITS_LEN];
    b[..START_CLOCK_LEN].copy_from_slice(&encode_start(timeout, max_output, to));
    b[0] = START_CLOCK_LIMITS;
    let words = [
        cg.memory,
        cg.memory_high,
        cg.pids,
        cg.cpus.map(f64::to_bits),
    ];
    for (i, w) in words.into_iter().enumerate() {
        let at = START_CLOCK_LEN + 8 * i;
        b[at..at + 8].copy_from_slice(&w.unwrap_or(u64::MAX).to_le_bytes());
    }
    b
}

/// What a [`START_CLOCK`] (or [`START_CLOCK_LIMITS`]) record asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ClockStart {
    pub(crate) timeout: Option<Duration>,
    pub(crate) max_output: Option<u64>,
    pub(crate) output: OutputTo,
    /// The run cgroup's limits of its own ([`START_CLOCK_LIMITS`]).
    pub(crate) limits: Option<cgroup::Request>,
}

fn word(r: &[u8]) -> u64 {
    u64::from_le_bytes(r.try_into().unwrap_or([0xff; 8]))
}

/// Decode a whole [`START_CLOCK`] record.
pub(crate) fn decode_start(b: &[u8; START_CLOCK_LEN]) -> ClockStart {
    let (t, m) = (word(&b[1..9]), word(&b[9..17]));
    ClockStart {
        timeout: (t != u64::MAX).then(|| Duration::from_millis(t)),
        max_output: (m != u64::MAX).then_some(m),
        output: match b[17] {
            b'C' => OutputTo::Captured,
            b'P' => OutputTo::Piped,
            _ => OutputTo::AsSpawned,
        },
        limits: None,
    }
}

/// Decode a whole [`START_CLOCK_LIMITS`] record.
pub(crate) fn decode_start_limits(b: &[u8; START_CLOCK_LIMITS_LEN]) -> ClockStart {
    let mut head = [0u8; START_CLOCK_LEN];
    head.copy_from_slice(&b[..START_CLOCK_LEN]);
    let at = |i: usize| {
        let w = word(&b[START_CLOCK_LEN + 8 * i..START_CLOCK_LEN + 8 * i + 8]);
        (w != u64::MAX).then_some(w)
    };
    ClockStart {
        limits: Some(cgroup::Request {
            memory: at(0),
            memory_high: at(1),
            pids: at(2),
            cpus: at(3).map(f64::from_bits),
        }),
        ..decode_start(&head)
    }
}

static HELD: AtomicBool = AtomicBool::new(false);
static STARTED: Mutex<Option<(Instant, ClockStart)>> = Mutex::new(None);

/// Hold this process's run's clock until the caller starts it.
pub(crate) fn hold() {
    HELD.store(true, Ordering::SeqCst);
}

/// Whether the clock is held (until [`clock_started`]).
pub(crate) fn held() -> bool {
    HELD.load(Ordering::SeqCst)
}

/// The caller started the held clock now, with `c`.
pub(crate) fn clock_started(now: Instant, c: ClockStart) {
    *STARTED.lock().unwrap_or_else(|e| e.into_inner()) = Some((now, c));
}

/// When the held clock was started (None: not held, or never started).
pub(crate) fn started_at() -> Option<Instant> {
    STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|(t, _)| t)
}

/// The outcome's limits say what the clock's start asked for (a timeout
/// or output cap other than the policy's).
pub(crate) fn restate_limits(o: &mut Outcome) {
    let Some((_, c)) = *STARTED.lock().unwrap_or_else(|e| e.into_inner()) else {
        return;
    };
    let mut set = |name: &'static str, v: serde_json::Value| {
        o.limits
            .entry(name)
            .and_modify(|r| r.limit = v.clone())
            .or_insert(LimitReport {
                limit: v,
                enforced_by: "supervisor",
                why: None,
                hit: None,
                verdict: None,
                oom_killed: None,
            });
    };
    if let Some(t) = c.timeout {
        set("timeout", serde_json::json!(t.as_secs_f64()));
    }
    if let Some(m) = c.max_output {
        set("max_output", serde_json::json!(m));
    }
    let Some(l) = c.limits else { return };
    // The run cgroup's own: restated where the plan reported them.
    for (name, v) in [
        ("memory", l.memory.map(|m| serde_json::json!(m))),
        ("memory_high", l.memory_high.map(|m| serde_json::json!(m))),
        ("cpus", l.cpus.map(|c| serde_json::json!(c))),
        ("pids", l.pids.map(|p| serde_json::json!(p))),
    ] {
        if let (Some(v), Some(r)) = (v, o.limits.get_mut(name)) {
            r.limit = v;
        }
    }
}

/// The deadline's state.
#[derive(Debug, Clone)]
pub(crate) struct Deadline {
    at: Option<Instant>,
    grace: Duration,
    kill_at: Option<Instant>,
    /// The deadline passed (the run's status is `timeout`).
    pub(crate) timed_out: bool,
}

impl Deadline {
    /// A deadline at `at` (none: never), SIGKILL `grace` after it.
    pub(crate) fn new(at: Option<Instant>, grace: Duration) -> Deadline {
        Deadline {
            at,
            grace,
            kill_at: None,
            timed_out: false,
        }
    }

    /// Set the deadline now (a held clock started): at `at`, none if None.
    pub(crate) fn start(&mut self, at: Option<Instant>) {
        self.at = at;
    }

    /// Ended early (an interrupt was passed on at `now`): no deadline
    /// from here, SIGKILL after the grace unless one is due already.
    pub(crate) fn cut_short(&mut self, now: Instant) {
        self.at = None;
        if !self.timed_out && self.kill_at.is_none() {
            self.kill_at = Some(now + self.grace);
        }
    }

    /// True once, when `now` reaches the deadline: terminate the jail.
    pub(crate) fn term_due(&mut self, now: Instant) -> bool {
        match self.at {
            Some(d) if now >= d && !self.timed_out => {
                self.timed_out = true;
                self.kill_at = Some(now + self.grace);
                true
            }
            _ => false,
        }
    }

    /// True once, when `now` reaches the end of the grace: kill the jail.
    pub(crate) fn kill_due(&mut self, now: Instant) -> bool {
        match self.kill_at {
            Some(k) if now >= k => {
                self.kill_at = None;
                true
            }
            _ => false,
        }
    }

    /// When to look again: the deadline (until it passed), the grace's end.
    pub(crate) fn next(&self) -> Option<Instant> {
        let at = if self.timed_out { None } else { self.at };
        [at, self.kill_at].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_at_the_deadline_then_kill_after_the_grace_once_each() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut d = Deadline::new(Some(t0 + s), 2 * s);
        assert_eq!(d.next(), Some(t0 + s));
        assert!(!d.term_due(t0) && !d.kill_due(t0));
        assert!(d.term_due(t0 + s));
        assert!(d.timed_out);
        assert!(!d.term_due(t0 + 2 * s), "once");
        assert_eq!(d.next(), Some(t0 + 3 * s));
        assert!(!d.kill_due(t0 + 2 * s));
        assert!(d.kill_due(t0 + 3 * s));
        assert!(!d.kill_due(t0 + 4 * s), "once");
        assert_eq!(d.next(), None);
    }

    #[test]
    fn the_start_record_reads_back() {
        let s = Duration::from_millis(1500);
        let b = encode_start(Some(s), Some(7), OutputTo::Piped);
        assert_eq!(b[0], START_CLOCK);
        let c = decode_start(&b);
        assert_eq!((c.timeout, c.max_output), (Some(s), Some(7)));
        assert_eq!(c.output, OutputTo::Piped);
        let c = decode_start(&encode_start(None, None, OutputTo::AsSpawned));
        assert_eq!((c.timeout, c.max_output), (None, None));
        assert_eq!(c.output, OutputTo::AsSpawned);
        let c = decode_start(&encode_start(None, None, OutputTo::Captured));
        assert_eq!(c.output, OutputTo::Captured);
        assert_eq!(c.limits, None);
    }

    #[test]
    fn the_start_record_with_limits_reads_back() {
        let s = Duration::from_secs(3);
        let cg = cgroup::Request {
            memory: Some(128 << 20),
            memory_high: None,
            cpus: Some(0.5),
            pids: Some(16),
        };
        let b = encode_start_limits(Some(s), None, OutputTo::Piped, &cg);
        assert_eq!(b[0], START_CLOCK_LIMITS);
        let c = decode_start_limits(&b);
        assert_eq!((c.timeout, c.max_output), (Some(s), None));
        assert_eq!(c.output, OutputTo::Piped);
        assert_eq!(c.limits, Some(cg));
        let none = cgroup::Request::default();
        let c = decode_start_limits(&encode_start_limits(None, None, OutputTo::AsSpawned, &none));
        assert_eq!(c.limits, Some(none));
    }

    #[test]
    fn no_deadline_never_fires() {
        let mut d = Deadline::new(None, Duration::ZERO);
        let later = Instant::now() + Duration::from_secs(3600);
        assert!(!d.term_due(later) && !d.kill_due(later));
        assert_eq!(d.next(), None);
    }

    #[test]
    fn a_zero_grace_kills_in_the_same_tick() {
        let t0 = Instant::now();
        let mut d = Deadline::new(Some(t0), Duration::ZERO);
        assert!(d.term_due(t0));
        assert!(d.kill_due(t0));
    }
}

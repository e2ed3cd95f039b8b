//! The wall-clock deadline (`--timeout`): at it, SIGTERM to the jail; after
//! the grace, SIGKILL.

#![deny(unsafe_code)]

use std::time::{Duration, Instant};

/// The deadline's state.
#[derive(Debug, Clone)]
pub(super) struct Deadline {
    at: Option<Instant>,
    grace: Duration,
    kill_at: Option<Instant>,
    /// The deadline passed (the run's status is `timeout`).
    pub(super) timed_out: bool,
}

impl Deadline {
    /// A deadline at `at` (none: never), SIGKILL `grace` after it.
    pub(super) fn new(at: Option<Instant>, grace: Duration) -> Deadline {
        Deadline {
            at,
            grace,
            kill_at: None,
            timed_out: false,
        }
    }

    /// True once, when `now` reaches the deadline: terminate the jail.
    pub(super) fn term_due(&mut self, now: Instant) -> bool {
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
    pub(super) fn kill_due(&mut self, now: Instant) -> bool {
        match self.kill_at {
            Some(k) if now >= k => {
                self.kill_at = None;
                true
            }
            _ => false,
        }
    }

    /// When to look again: the deadline (until it passed), the grace's end.
    pub(super) fn next(&self) -> Option<Instant> {
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

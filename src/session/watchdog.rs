//! The front end's own watch on each command's deadline: a stopped or
//! dead agent must never let a command outlive its timeout until the
//! session's lifetime.
//!
//! The agent ends a command at its timeout (SIGTERM, SIGKILL after
//! `command::GRACE`, then its exit event). The front end (`stockade
//! session`, `serve`'s sessions) sees every request it sends and every
//! event the agent writes; when a command's exit event has not come by
//! its timeout plus [`SLACK`], the agent is not doing its work (stopped,
//! dead, starved) and the front end kills the whole jail and ends the
//! session as `agent_unresponsive`. Time the front end spends blocked
//! passing an event on to a slow client (while the agent may be blocked
//! writing the next to it) is not counted ([`Watchdog::hold`]).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::proto::{self, Request};

/// The end reason when the watchdog ended the session.
pub(crate) const UNRESPONSIVE: &str = "agent_unresponsive";

/// How long after a command's timeout its exit event may come: the
/// agent's SIGTERM-to-SIGKILL grace, the grace it gives the streams after
/// SIGKILL, and a margin for a loaded host.
pub(crate) const SLACK: Duration = Duration::from_secs(9);

/// The commands sent and not yet answered, each with its deadline.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    pending: Vec<(String, Instant)>,
}

impl Deadlines {
    /// A request line sent to the agent at `now`: an exec starts a clock.
    pub(crate) fn sent(&mut self, line: &[u8], now: Instant) {
        if line.len() > proto::MAX_LINE {
            return;
        }
        if let Ok(Request::Exec(e)) = proto::parse(line) {
            let t = e.timeout.unwrap_or(proto::DEFAULT_TIMEOUT);
            let by = Duration::try_from_secs_f64(t)
                .ok()
                .and_then(|t| now.checked_add(t + SLACK));
            if let Some(by) = by {
                self.pending.push((e.id, by));
            }
        }
    }

    /// An event from the agent: an exit answers its command; an error
    /// with an id (busy, exec_failed, bad_request) answers the latest
    /// request of that id.
    pub(crate) fn event(&mut self, ev: &Value) {
        let Some(id) = ev["id"].as_str() else {
            return;
        };
        let at = match ev["event"].as_str() {
            Some("exit") => self.pending.iter().position(|(i, _)| i == id),
            Some("error") => self.pending.iter().rposition(|(i, _)| i == id),
            _ => None,
        };
        if let Some(at) = at {
            self.pending.remove(at);
        }
    }

    /// Every deadline `by` later: the time the front end kept the agent
    /// waiting (its events not read while their reader was blocked
    /// writing to a slow client).
    pub(crate) fn delay(&mut self, by: Duration) {
        for (_, d) in &mut self.pending {
            *d = d.checked_add(by).unwrap_or(*d);
        }
    }

    /// The earliest deadline, and its command.
    pub(crate) fn next(&self) -> Option<(&str, Instant)> {
        self.pending
            .iter()
            .min_by_key(|(_, by)| *by)
            .map(|(id, by)| (id.as_str(), *by))
    }
}

/// [`Deadlines`] shared between the threads of a front end, and the wait
/// for the first to pass.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
    told: Condvar,
}

#[derive(Debug, Default)]
struct State {
    deadlines: Deadlines,
    /// The session is over.
    over: bool,
    /// The front end is passing an event on and is not reading the
    /// agent's meanwhile: no deadline passes until it is done.
    holding: bool,
}

impl Watchdog {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The front end stops reading the agent's events for a while (to
    /// write one to a client that may be slow): the agent may be blocked
    /// on us, so no deadline passes until [`Watchdog::release`].
    pub(crate) fn hold(&self) {
        self.lock().holding = true;
    }

    /// Reading again after `held`: every deadline moves that much later.
    pub(crate) fn release(&self, held: Duration) {
        let mut g = self.lock();
        g.holding = false;
        g.deadlines.delay(held);
        drop(g);
        self.told.notify_all();
    }

    pub(crate) fn sent(&self, line: &[u8]) {
        self.lock().deadlines.sent(line, Instant::now());
        self.told.notify_all();
    }

    pub(crate) fn event(&self, ev: &Value) {
        self.lock().deadlines.event(ev);
        self.told.notify_all();
    }

    /// No command is waiting for its exit event (none runs).
    pub(crate) fn idle(&self) -> bool {
        self.lock().deadlines.next().is_none()
    }

    /// The session is over: [`Watchdog::wait`] returns `None`.
    pub(crate) fn over(&self) {
        self.lock().over = true;
        self.told.notify_all();
    }

    /// Block until a command is past its deadline (its id) or the session
    /// is over (`None`).
    pub(crate) fn wait(&self) -> Option<String> {
        let mut g = self.lock();
        loop {
            if g.over {
                return None;
            }
            let now = Instant::now();
            g = match g.deadlines.next() {
                Some(_) if g.holding => self.told.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some((id, by)) if by <= now => return Some(id.to_string()),
                Some((_, by)) => {
                    self.told
                        .wait_timeout(g, by - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.told.wait(g).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// The one line a front end prints when it ends the session itself.
pub(crate) fn unresponsive_message(id: &str) -> String {
    format!(
        "session: the agent did not report the end of command {id:?} within its timeout \
         and {}s: the session is ended ({UNRESPONSIVE})",
        SLACK.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_exec_is_watched_until_its_exit_or_its_error() {
        let mut d = Deadlines::default();
        let t0 = Instant::now();
        d.sent(br#"{"op":"exec","id":"a","command":"x","timeout":2}"#, t0);
        d.sent(br#"{"op":"exec","id":"b","command":"x"}"#, t0);
        d.sent(br#"{"op":"interrupt","id":"a"}"#, t0);
        d.sent(b"not json", t0);
        let (id, by) = d.next().unwrap();
        assert_eq!((id, by), ("a", t0 + Duration::from_secs(2) + SLACK));
        d.event(&json!({"event": "output", "id": "a", "stream": "stdout", "data": ""}));
        assert_eq!(d.next().unwrap().0, "a");
        d.event(&json!({"event": "exit", "id": "a"}));
        let (id, by) = d.next().unwrap();
        let default = Duration::from_secs_f64(proto::DEFAULT_TIMEOUT);
        assert_eq!((id, by), ("b", t0 + default + SLACK));
        // A busy exec of the same id answers the latest, not the running one.
        d.sent(br#"{"op":"exec","id":"b","command":"y","timeout":1}"#, t0);
        d.event(&json!({"event": "error", "id": "b", "error": {"code": "busy"}}));
        assert_eq!(d.next().unwrap().1, t0 + default + SLACK);
        d.delay(Duration::from_secs(3));
        assert_eq!(
            d.next().unwrap().1,
            t0 + default + SLACK + Duration::from_secs(3)
        );
        d.event(&json!({"event": "exit", "id": "b"}));
        assert!(d.next().is_none());
    }

    #[test]
    fn the_watchdog_returns_when_the_session_is_over() {
        let w = std::sync::Arc::new(Watchdog::default());
        w.sent(br#"{"op":"exec","id":"a","command":"x","timeout":86400}"#);
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.wait());
        w.over();
        assert_eq!(t.join().unwrap(), None);
    }
}

//! One session command's events on their way to its exec's answer, in
//! bounded memory whatever the client does.
//!
//! The session's reader thread must never wait on a client (it reads the
//! agent, whose own deadlines must keep running), and a client that does
//! not read must not make the server hold an event per write of the
//! command. So the mailbox coalesces: what the client has not taken yet
//! is at most one `output` event per stream (their data joined) and the
//! last event (`exit`, `error` or `end`). The agent caps a command's
//! output at its `max_output`, so a mailbox holds at most that much
//! output, plus one event.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::sync::mpsc;

/// Largest `data` of one event handed out: a streamed answer still comes
/// in pieces.
const PIECE: usize = 64 << 10;

#[derive(Default)]
struct Held {
    /// Text not yet taken, per stream: stdout, stderr.
    out: [String; 2],
    /// The command's last event, once it came.
    last: Option<Value>,
}

/// The reader thread's end.
#[derive(Clone)]
pub struct Sender {
    held: Arc<Mutex<Held>>,
    bell: mpsc::Sender<()>,
}

/// The exec's end.
pub struct Receiver {
    held: Arc<Mutex<Held>>,
    bell: mpsc::Receiver<()>,
    id: String,
}

pub fn new(id: &str) -> (Sender, Receiver) {
    let held = Arc::new(Mutex::new(Held::default()));
    let (tx, rx) = mpsc::channel(1);
    (
        Sender {
            held: held.clone(),
            bell: tx,
        },
        Receiver {
            held,
            bell: rx,
            id: id.to_string(),
        },
    )
}

fn lock(m: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sender {
    /// Put `ev` in (never waits); false when the exec went away.
    pub fn put(&self, ev: Value) -> bool {
        if self.bell.is_closed() {
            return false;
        }
        {
            let mut h = lock(&self.held);
            match (ev["event"].as_str(), ev["stream"].as_str()) {
                (Some("output"), Some(s)) => {
                    let i = usize::from(s != "stdout");
                    h.out[i].push_str(ev["data"].as_str().unwrap_or_default());
                }
                _ => h.last = Some(ev),
            }
        }
        // Full means a ring is already waiting to be heard.
        let _ = self.bell.try_send(());
        true
    }
}

impl Receiver {
    /// The next event: held output first (stdout, then stderr), then the
    /// last event; `None` once the sender is gone and nothing is held.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Value>> {
        loop {
            if let Some(ev) = self.take() {
                return Poll::Ready(Some(ev));
            }
            match self.bell.poll_recv(cx) {
                Poll::Ready(Some(())) => continue,
                Poll::Ready(None) => return Poll::Ready(self.take()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn take(&self) -> Option<Value> {
        let mut h = lock(&self.held);
        for (i, stream) in ["stdout", "stderr"].into_iter().enumerate() {
            if h.out[i].is_empty() {
                continue;
            }
            let data = split_off_piece(&mut h.out[i]);
            return Some(crate::session::proto::output(&self.id, stream, &data));
        }
        h.last.take()
    }
}

/// The first [`PIECE`] bytes of `s` (cut at a character boundary),
/// removed from it.
fn split_off_piece(s: &mut String) -> String {
    if s.len() <= PIECE {
        return std::mem::take(s);
    }
    let mut at = PIECE;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    let rest = s.split_off(at);
    std::mem::replace(s, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn drain(rx: &mut Receiver) -> Vec<Value> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut out = Vec::new();
        while let Poll::Ready(Some(v)) = rx.poll_recv(&mut cx) {
            out.push(v);
        }
        out
    }

    #[test]
    fn writes_not_taken_are_joined_and_the_last_event_comes_last() {
        let (tx, mut rx) = new("c1");
        for _ in 0..100_000 {
            assert!(tx.put(json!({"event": "output", "id": "c1", "stream": "stdout", "data": "x"})));
            tx.put(json!({"event": "output", "id": "c1", "stream": "stderr", "data": "é"}));
        }
        tx.put(json!({"event": "exit", "id": "c1", "code": 0}));
        {
            let h = lock(&tx.held);
            assert_eq!(h.out[0].len(), 100_000);
            assert_eq!(h.out[1].len(), 200_000);
        }
        drop(tx);
        let evs = drain(&mut rx);
        let out: usize = evs
            .iter()
            .filter(|e| e["stream"] == "stdout")
            .map(|e| e["data"].as_str().unwrap().len())
            .sum();
        let err: String = evs
            .iter()
            .filter(|e| e["stream"] == "stderr")
            .map(|e| e["data"].as_str().unwrap())
            .collect();
        assert_eq!(out, 100_000);
        assert_eq!(err, "é".repeat(100_000));
        assert!(evs
            .iter()
            .all(|e| e["data"].as_str().is_none_or(|d| d.len() <= PIECE)));
        assert_eq!(evs.last().unwrap()["event"], "exit");
    }

    #[test]
    fn a_receiver_gone_stops_the_sender() {
        let (tx, rx) = new("c1");
        drop(rx);
        assert!(!tx.put(json!({"event": "output", "stream": "stdout", "data": "x"})));
    }
}

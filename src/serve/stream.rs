//! The ndjson answer (`Accept: application/x-ndjson`): `{"stdout": …}` and
//! `{"stderr": …}` lines as the payload writes, then the outcome's line.
//! The body owns the run's [`KillGuard`]: a client that goes away drops
//! the body, and the jail is killed.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::run::{Applied, KillGuard, Started};

/// The response body: lines from the reader task; the guard with it.
pub struct Lines {
    rx: mpsc::Receiver<Bytes>,
    guard: KillGuard,
}

impl futures_core::Stream for Lines {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(b))),
            Poll::Ready(None) => {
                // The last line was sent: the run is over.
                self.guard.disarm();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Start reading the run's pipes into lines; the body to answer with.
pub fn lines(started: Started, applied: Applied) -> Lines {
    let Started {
        guard,
        stdout,
        stderr,
        done,
        ..
    } = started;
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let out = pump(stdout, "stdout", tx.clone());
        let err = pump(stderr, "stderr", tx.clone());
        tokio::join!(out, err);
        let line = match done.await {
            Ok(Ok(o)) => super::http::result_json(&o, &applied),
            Ok(Err(e)) => super::error::ApiError::internal(e).to_json(),
            Err(_) => {
                super::error::ApiError::internal("the run ended without an outcome").to_json()
            }
        };
        let _ = tx.send(line_bytes(&line)).await;
    });
    Lines { rx, guard }
}

fn line_bytes(v: &serde_json::Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// Read one pipe to its end, sending a line per chunk. UTF-8 split across
/// reads is held back to the next; bytes that are not UTF-8 go as base64.
async fn pump(file: Option<std::fs::File>, name: &'static str, tx: mpsc::Sender<Bytes>) {
    let Some(file) = file else { return };
    let Ok(mut rx) = pipe::Receiver::from_file(file) else {
        return;
    };
    let mut held: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        held.extend_from_slice(&buf[..n]);
        let keep = incomplete_tail(&held);
        let emit: Vec<u8> = held.drain(..held.len() - keep).collect();
        if !emit.is_empty() && tx.send(chunk(name, &emit)).await.is_err() {
            return;
        }
    }
    if !held.is_empty() {
        let _ = tx.send(chunk(name, &held)).await;
    }
}

/// How many bytes at the end of `b` start a UTF-8 sequence the next read
/// may complete (0 when `b` is valid or invalid for other reasons).
fn incomplete_tail(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => 0,
        Err(e) if e.error_len().is_none() => b.len() - e.valid_up_to(),
        Err(_) => 0,
    }
}

fn chunk(name: &str, data: &[u8]) -> Bytes {
    let c = crate::outcome::capture(data, false);
    let mut v = serde_json::json!({ name: c.data });
    if c.encoding != "utf-8" {
        v["encoding"] = c.encoding.into();
    }
    line_bytes(&v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utf8_tails() {
        assert_eq!(super::incomplete_tail(b"abc"), 0);
        assert_eq!(super::incomplete_tail("é".as_bytes()), 0);
        assert_eq!(super::incomplete_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(super::incomplete_tail(&"a€".as_bytes()[..3]), 2);
        assert_eq!(super::incomplete_tail(b"\xff"), 0);
    }

    #[test]
    fn chunks_are_lines() {
        assert_eq!(
            &super::chunk("stdout", b"hi\n")[..],
            b"{\"stdout\":\"hi\\n\"}\n"
        );
        assert_eq!(
            &super::chunk("stderr", b"\xff")[..],
            b"{\"encoding\":\"base64\",\"stderr\":\"/w==\"}\n"
        );
    }
}

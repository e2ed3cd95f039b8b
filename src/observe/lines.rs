//! `--denials-fd`: each new refusal record as one JSON line while the run
//! goes on, written so that a slow (or stopped) reader never holds the
//! supervisor up. A pipe is written through a description of its own
//! with O_NONBLOCK, a socket with MSG_DONTWAIT; a line the fd cannot take
//! now is dropped and counted (the outcome has every record), and a line
//! taken in part is finished before any other is begun, so the reader
//! only ever sees whole lines. Lines are sent only for new records (a
//! refusal already recorded only counts), so they are bounded as the
//! records are: at most [`crate::outcome::MAX_DENIALS`] per kind.
//!
//! Shared (a clone each) by the seccomp listener, the audit reader, the
//! mask watcher and the egress proxy's thread.

#![deny(unsafe_code)]

use std::sync::{Arc, Mutex};

use crate::sys::{self, NoWait};

/// How long the end of a run waits for a slow reader to take the rest of
/// a line begun (so that it never sees half a line).
const LAST_WAIT_MS: i32 = 1000;

#[derive(Debug, Clone, Default)]
pub struct Lines(Option<Arc<Mutex<Sink>>>);

#[derive(Debug)]
struct Sink {
    fd: i32,
    how: NoWait,
    /// The rest of a line begun.
    pending: Vec<u8>,
    /// Lines dropped: the fd could not take them without blocking, or
    /// failed.
    dropped: u64,
    /// The fd failed (its reader is gone): nothing more is tried.
    broken: bool,
}

impl Lines {
    /// Lines to `fd` (None: nowhere).
    pub fn to(fd: Option<i32>) -> Lines {
        let Some(fd) = fd else { return Lines(None) };
        let (how, broken) = match sys::no_wait(fd) {
            Ok(h) => (h, false),
            Err(_) => (NoWait::Plain, true),
        };
        Lines(Some(Arc::new(Mutex::new(Sink {
            fd,
            how,
            pending: Vec::new(),
            dropped: 0,
            broken,
        }))))
    }

    fn sink(&self) -> Option<std::sync::MutexGuard<'_, Sink>> {
        self.0
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Send `d` as one JSON line, or count it dropped.
    pub fn send(&self, d: &impl serde::Serialize) {
        let Some(mut s) = self.sink() else { return };
        let Ok(mut line) = serde_json::to_vec(d) else {
            return;
        };
        line.push(b'\n');
        s.flush();
        if s.broken || !s.pending.is_empty() {
            s.dropped += 1;
            return;
        }
        s.pending = line;
        let before = s.pending.len();
        s.flush();
        if s.broken || s.pending.len() == before {
            // Not a byte taken: the line is dropped whole.
            s.pending.clear();
            s.dropped += 1;
        }
    }

    /// The end of the run: finish a line begun (waiting at most
    /// [`LAST_WAIT_MS`] for the reader), and say how many were dropped.
    pub fn finish(&self) -> u64 {
        let Some(mut s) = self.sink() else { return 0 };
        let mut waited = 0;
        while !s.pending.is_empty() && !s.broken && waited < LAST_WAIT_MS {
            let mut p = [libc::pollfd {
                fd: s.write_fd(),
                events: libc::POLLOUT,
                revents: 0,
            }];
            let _ = sys::poll(&mut p, 100);
            waited += 100;
            s.flush();
        }
        s.dropped
    }
}

impl Sink {
    fn write_fd(&self) -> i32 {
        match &self.how {
            NoWait::Pipe(p) => std::os::fd::AsRawFd::as_raw_fd(p),
            _ => self.fd,
        }
    }

    /// Write what is pending, as far as the fd takes it now.
    fn flush(&mut self) {
        while !self.pending.is_empty() && !self.broken {
            match sys::write_no_wait(self.fd, &self.how, &self.pending) {
                Ok(0) => return,
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.errno == sys::Errno::EAGAIN => return,
                Err(_) => {
                    self.broken = true;
                    self.pending.clear();
                }
            }
        }
    }
}

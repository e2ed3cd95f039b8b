//! What reaches the agent from outside: request lines on its stdin and
//! the signals it takes, both read from fds its one poll loop watches
//! (between commands the agent's own, during one the engine's).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};

use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;

use super::proto;
use crate::sys::{self, Errno};

/// One thing heard.
#[derive(Debug, PartialEq)]
pub(crate) enum Input {
    /// A request line (with its newline, if it had one).
    Line(Vec<u8>),
    /// A request line longer than `proto::MAX_LINE` (skipped).
    TooLong,
    /// SIGINT, SIGTERM, SIGHUP or SIGQUIT (forwarded by the jail's init
    /// from stockade's, or sent by a command).
    Signal(i32),
}

/// The agent's stdin, read as lines, and its signalfd.
pub(crate) struct Inputs {
    /// Open until its end was read.
    stdin: Option<RawFd>,
    line: Vec<u8>,
    /// Inside a line that was too long: skip to its newline.
    skipping: bool,
    signals: SignalFd,
    heard: VecDeque<Input>,
}

impl Inputs {
    /// Stdin (fd 0) and `taken` (blocked in every thread already; read
    /// from a signalfd from now on).
    pub(crate) fn new(taken: &[Signal]) -> Result<Inputs, String> {
        Ok(Inputs {
            stdin: Some(0),
            line: Vec::new(),
            skipping: false,
            signals: sys::signalfd_for(taken).map_err(|e| e.to_string())?,
            heard: VecDeque::new(),
        })
    }

    /// The fds to poll: stdin (-1 once it ended), the signalfd.
    pub(crate) fn fds(&self) -> [RawFd; 2] {
        [self.stdin.unwrap_or(-1), self.signals.as_raw_fd()]
    }

    /// Stdin has ended (what it said before may still be queued).
    pub(crate) fn stdin_ended(&self) -> bool {
        self.stdin.is_none()
    }

    /// Something heard and not yet taken.
    pub(crate) fn queued(&self) -> bool {
        !self.heard.is_empty()
    }

    /// The next thing heard, in order.
    pub(crate) fn next(&mut self) -> Option<Input> {
        self.heard.pop_front()
    }

    /// `fd` (one of [`Inputs::fds`]) is ready: read what it has.
    pub(crate) fn ready(&mut self, fd: RawFd) {
        if Some(fd) == self.stdin {
            self.read_stdin(fd);
        } else if fd == self.signals.as_raw_fd() {
            while let Ok(Some(s)) = self.signals.read_signal() {
                self.heard.push_back(Input::Signal(s.ssi_signo as i32));
            }
        }
    }

    fn read_stdin(&mut self, fd: RawFd) {
        let mut buf = vec![0u8; 64 << 10];
        match sys::read(fd, &mut buf) {
            Ok(0) => self.ended(),
            Ok(n) => self.take(&buf[..n]),
            Err(e) if e.errno == Errno::EAGAIN || e.errno == Errno::EINTR => {}
            Err(_) => self.ended(),
        }
    }

    /// Stdin's end: a last line without its newline is a line.
    fn ended(&mut self) {
        self.stdin = None;
        if !self.line.is_empty() && !self.skipping {
            self.heard
                .push_back(Input::Line(std::mem::take(&mut self.line)));
        }
    }

    /// Bytes read: every whole line heard, a line past the limit refused.
    fn take(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let nl = data.iter().position(|&b| b == b'\n');
            let (part, rest) = match nl {
                Some(i) => (&data[..=i], &data[i + 1..]),
                None => (data, &data[data.len()..]),
            };
            data = rest;
            if self.skipping {
                self.skipping = nl.is_none();
                continue;
            }
            self.line.extend_from_slice(part);
            if nl.is_some() && self.line.len() <= proto::MAX_LINE + 1 {
                self.heard
                    .push_back(Input::Line(std::mem::take(&mut self.line)));
            } else if self.line.len() > proto::MAX_LINE {
                self.line = Vec::new();
                self.skipping = nl.is_none();
                self.heard.push_back(Input::TooLong);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            stdin: Some(-1),
            line: Vec::new(),
            skipping: false,
            signals: sys::signalfd_for(&[]).unwrap(),
            heard: VecDeque::new(),
        }
    }

    fn drain(i: &mut Inputs) -> Vec<Input> {
        std::iter::from_fn(|| i.next()).collect()
    }

    #[test]
    fn lines_are_cut_where_their_newlines_are_whatever_the_reads() {
        let mut i = inputs();
        i.take(b"{\"a\":1}\n{\"b\"");
        i.take(b":2}\n\n{\"c\":3}");
        assert_eq!(
            drain(&mut i),
            [
                Input::Line(b"{\"a\":1}\n".to_vec()),
                Input::Line(b"{\"b\":2}\n".to_vec()),
                Input::Line(b"\n".to_vec()),
            ]
        );
        i.ended();
        assert_eq!(drain(&mut i), [Input::Line(b"{\"c\":3}".to_vec())]);
        assert!(i.stdin_ended());
    }

    #[test]
    fn a_line_past_the_limit_is_refused_once_and_skipped_to_its_end() {
        let mut i = inputs();
        let big = vec![b'x'; proto::MAX_LINE / 2 + 1];
        i.take(&big);
        i.take(&big);
        i.take(&big);
        i.take(b"still the long one\nnext\n");
        assert_eq!(
            drain(&mut i),
            [Input::TooLong, Input::Line(b"next\n".to_vec())]
        );
        let mut exact = vec![b'y'; proto::MAX_LINE];
        exact.push(b'\n');
        i.take(&exact);
        assert_eq!(drain(&mut i), [Input::Line(exact)]);
    }
}

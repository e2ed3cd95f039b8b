//! The payload's output: read from its pipes as it comes, streamed to our
//! stdout or stderr, captured (up to a size) and counted; past
//! `--max-output` (both streams together) the jail is to be killed.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::plan::Plan;
use crate::sys::{self, Errno};

/// Captured bytes kept per stream when --capture has no --max-output.
const DEFAULT_CAPTURE: u64 = 16 << 20;

/// One output stream of the payload.
pub(crate) struct Stream {
    pub(crate) fd: OwnedFd,
    pub(crate) open: bool,
    /// Where to stream it (our stdout or stderr); None: capture only.
    pub(crate) forward: Option<RawFd>,
    pub(crate) captured: Vec<u8>,
    pub(crate) keep: u64,
    pub(crate) truncated: bool,
    pub(crate) bytes: u64,
}

impl Stream {
    pub(crate) fn new(fd: OwnedFd, forward: Option<RawFd>, keep: u64) -> Stream {
        let _ = sys::set_nonblocking(fd.as_raw_fd());
        Stream {
            fd,
            open: true,
            forward,
            captured: Vec::new(),
            keep,
            truncated: false,
            bytes: 0,
        }
    }

    /// The fd to poll, or -1 once it is closed.
    fn poll_fd(&self) -> RawFd {
        if self.open {
            self.fd.as_raw_fd()
        } else {
            -1
        }
    }
}

/// Which stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Out,
    Err,
}

/// Where a run's output goes as events rather than to fds: a session
/// command's chunks, framed by the agent.
pub(crate) trait Sink {
    /// `data` read from `which`, under the cap.
    fn chunk(&mut self, which: Which, data: &[u8]);
    /// `which` reached its end.
    fn end(&mut self, which: Which);
}

/// The payload's stdout and stderr (when piped through us) and the cap on
/// them together.
pub(crate) struct Output {
    pub(crate) out: Option<Stream>,
    pub(crate) err: Option<Stream>,
    cap: Option<u64>,
    total: u64,
    /// The cap was passed.
    pub(crate) hit_cap: bool,
    /// What is kept goes in the outcome.
    pub(crate) capture: bool,
    /// Where stdout is streamed when it is (None: it carries the report).
    out_to: Option<RawFd>,
    /// Past the cap: kill the run (true), or drop what is over (a session
    /// command's output, whose exit says `truncated`).
    cap_kills: bool,
    /// Where chunks go as they come, when they go to a [`Sink`].
    sink: Option<Box<dyn Sink>>,
}

impl Output {
    /// The read ends of the pipes, as the plan wants them streamed and kept.
    pub(crate) fn new(plan: &Plan, out: Option<OwnedFd>, err: Option<OwnedFd>) -> Output {
        let keep = if plan.channels.capture {
            plan.limits.asked.max_output.unwrap_or(DEFAULT_CAPTURE)
        } else {
            0
        };
        // stdout carrying the report: the payload's stdout only goes in it.
        let out_to = if plan.channels.stdout_in_report {
            None
        } else {
            Some(1)
        };
        Output {
            out: out.map(|fd| Stream::new(fd, out_to, keep)),
            err: err.map(|fd| Stream::new(fd, Some(2), keep)),
            cap: plan.limits.asked.max_output,
            total: 0,
            hit_cap: false,
            capture: plan.channels.capture,
            out_to,
            cap_kills: true,
            sink: None,
        }
    }

    /// Both streams captured (nothing forwarded), up to `cap` together:
    /// a fork server's child's, whose outcome carries its output.
    pub(crate) fn captured(out: OwnedFd, err: OwnedFd, cap: Option<u64>) -> Output {
        let keep = cap.unwrap_or(DEFAULT_CAPTURE);
        Output {
            out: Some(Stream::new(out, None, keep)),
            err: Some(Stream::new(err, None, keep)),
            cap,
            total: 0,
            hit_cap: false,
            capture: true,
            out_to: None,
            cap_kills: true,
            sink: None,
        }
    }

    /// Both streams passed on as they come to `to` (stdout's, stderr's;
    /// fds the caller keeps open while this pumps), nothing captured, up
    /// to `cap` together: a fork server's child's streamed output.
    pub(crate) fn streamed(out: OwnedFd, err: OwnedFd, cap: Option<u64>, to: [RawFd; 2]) -> Output {
        Output {
            out: Some(Stream::new(out, Some(to[0]), 0)),
            err: Some(Stream::new(err, Some(to[1]), 0)),
            cap,
            total: 0,
            hit_cap: false,
            capture: false,
            out_to: Some(to[0]),
            cap_kills: true,
            sink: None,
        }
    }

    /// Both streams passed to `sink` as they come, nothing captured or
    /// forwarded, up to `cap` together; what is over the cap is dropped
    /// (the run goes on): a session command's output.
    pub(crate) fn events(out: OwnedFd, err: OwnedFd, cap: u64, sink: Box<dyn Sink>) -> Output {
        Output {
            out: Some(Stream::new(out, None, 0)),
            err: Some(Stream::new(err, None, 0)),
            cap: Some(cap),
            total: 0,
            hit_cap: false,
            capture: false,
            out_to: None,
            cap_kills: false,
            sink: Some(sink),
        }
    }

    /// From now on, the output goes `to` (a held clock started): captured
    /// only, or streamed only (what was captured so far is dropped).
    pub(crate) fn send_to(&mut self, to: super::deadline::OutputTo) {
        use super::deadline::OutputTo;
        let (capture, keep) = match to {
            OutputTo::AsSpawned => return,
            OutputTo::Captured => (true, self.cap.unwrap_or(DEFAULT_CAPTURE)),
            OutputTo::Piped => (false, 0),
        };
        self.capture = capture;
        let forward = [self.out_to, Some(2)].map(|f| f.filter(|_| !capture));
        for (s, fwd) in [&mut self.out, &mut self.err].into_iter().zip(forward) {
            if let Some(s) = s {
                s.forward = fwd;
                s.keep = keep;
                if !capture {
                    s.captured.clear();
                    s.truncated = false;
                }
            }
        }
    }

    /// A new cap (a held clock started with one): what is kept of each
    /// stream follows it when output is captured.
    pub(crate) fn set_cap(&mut self, cap: u64) {
        self.cap = Some(cap);
        for s in [&mut self.out, &mut self.err].into_iter().flatten() {
            if s.keep > 0 {
                s.keep = cap;
            }
        }
    }

    /// Whether a stream is still open.
    pub(crate) fn open(&self) -> bool {
        [&self.out, &self.err]
            .into_iter()
            .any(|s| s.as_ref().is_some_and(|s| s.open))
    }

    /// The fds to poll (stdout, stderr), -1 for none.
    pub(crate) fn poll_fds(&self) -> [RawFd; 2] {
        [&self.out, &self.err].map(|s| s.as_ref().map_or(-1, Stream::poll_fd))
    }

    /// Read what is available on one stream; stream it, capture it, count
    /// it. True when this read passed the cap: kill the jail.
    pub(crate) fn pump(&mut self, which: Which) -> bool {
        let mut chunk = vec![0u8; 65536];
        let s = match which {
            Which::Out => self.out.as_mut(),
            Which::Err => self.err.as_mut(),
        };
        let Some(s) = s else { return false };
        let n = match sys::read(s.fd.as_raw_fd(), &mut chunk) {
            Ok(n) if n > 0 => n,
            Err(e) if e.errno == Errno::EAGAIN => return false,
            _ => {
                s.open = false;
                if let Some(sink) = self.sink.as_mut() {
                    sink.end(which);
                }
                return false;
            }
        };
        let room = match self.cap {
            Some(c) => c.saturating_sub(self.total) as usize,
            None => usize::MAX,
        };
        take(s, &chunk[..n], room);
        if let Some(sink) = self.sink.as_mut().filter(|_| room > 0) {
            sink.chunk(which, &chunk[..n.min(room)]);
        }
        self.total += n as u64;
        if self.cap.is_some_and(|c| self.total > c) && !self.hit_cap {
            self.hit_cap = true;
            return self.cap_kills;
        }
        false
    }

    /// Read what the pipes hold now, to their end or until they are empty
    /// (the watch is over: whatever still holds them is not waited for).
    pub(crate) fn drain_now(&mut self) {
        for which in [Which::Out, Which::Err] {
            // Bounded: a writer that still holds a pipe is not followed.
            for _ in 0..32 {
                let s = match which {
                    Which::Out => self.out.as_ref(),
                    Which::Err => self.err.as_ref(),
                };
                if !s.is_some_and(|s| s.open) || !readable_now(s) {
                    break;
                }
                self.pump(which);
            }
        }
    }
}

/// Whether a read of `s` would not block now (data, or its end).
fn readable_now(s: Option<&Stream>) -> bool {
    let Some(s) = s else { return false };
    let mut fds = [libc::pollfd {
        fd: s.fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    matches!(sys::poll(&mut fds, 0), Ok(n) if n > 0)
}

/// One read's `data` on stream `s`, of which `room` bytes fit under the
/// cap: those are forwarded and (as far as `keep` allows) captured.
fn take(s: &mut Stream, data: &[u8], room: usize) {
    let n = data.len();
    let pass = &data[..n.min(room)];
    if let Some(fd) = s.forward {
        if sys::write_all(fd, pass).is_err() {
            s.forward = None;
        }
    }
    let keep_room = s.keep.saturating_sub(s.captured.len() as u64) as usize;
    s.captured
        .extend_from_slice(&pass[..pass.len().min(keep_room)]);
    if pass.len() > keep_room || pass.len() < n {
        s.truncated = true;
    }
    s.bytes += n as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(keep: u64) -> (Stream, OwnedFd) {
        let (r, w) = sys::pipe().unwrap();
        (Stream::new(r, None, keep), w)
    }

    #[test]
    fn capture_keeps_up_to_its_size_and_the_cap_kills_once() {
        let (s, w) = stream(4);
        let mut o = Output {
            out: Some(s),
            err: None,
            cap: Some(6),
            total: 0,
            hit_cap: false,
            capture: true,
            out_to: Some(1),
            cap_kills: true,
            sink: None,
        };
        sys::write_all(w.as_raw_fd(), b"abc").unwrap();
        assert!(!o.pump(Which::Out));
        sys::write_all(w.as_raw_fd(), b"defgh").unwrap();
        assert!(o.pump(Which::Out), "past the cap: kill");
        sys::write_all(w.as_raw_fd(), b"ij").unwrap();
        assert!(!o.pump(Which::Out), "once");
        let s = o.out.as_ref().unwrap();
        assert_eq!(s.captured, b"abcd");
        assert!(s.truncated);
        assert_eq!(s.bytes, 10);
        assert!(o.open());
        drop(w);
        assert!(!o.pump(Which::Out));
        assert!(!o.open());
        assert_eq!(o.poll_fds(), [-1, -1]);
        assert!(!o.pump(Which::Err), "no stderr pipe");
    }
}

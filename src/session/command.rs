//! One command: `/bin/sh -c` in a session of its own, its stdin from the
//! request, watched by the engine every run has (`supervise::engine`):
//! its pidfd, its output (as `output` events, capped), its deadline
//! (SIGTERM, the grace, SIGKILL), and the agent's inputs as an observer
//! (an interrupt, a close, the signals the agent takes). When its shell
//! ends, what it left is swept (`sweep`) and the exit event sent.

use std::cell::Cell;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::guard::Isolation;
use super::input::{Input, Inputs};
use super::proto::{self, Events, ExitStatus, Request};
use super::state::{self, State};
use super::sweep::Reach;
use crate::observe::deadline::Deadline;
use crate::observe::pump::{Output, Sink, Which};
use crate::observe::{Ask, Observer};
use crate::supervise::engine;
use crate::sys;

/// The grace between SIGINT (or SIGTERM) and SIGKILL.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

/// What a command runs with, from the agent.
pub(crate) struct Ctx<'a> {
    pub(crate) state: &'a State,
    /// The path the shell runs the state report with.
    pub(crate) agent: &'a Path,
    /// What keeps the command off the agent.
    pub(crate) isolation: &'a Isolation,
    pub(crate) reach: Reach,
    pub(crate) events: &'a Events,
}

/// How a command's watch ended.
pub(crate) enum Ended {
    /// It ran to its end (its exit event is sent): what its shell reported
    /// of its state.
    Ran(Vec<u8>),
    /// The session ends, with this exit code of the agent's (a close or a
    /// signal while it ran); the command was killed and swept.
    Session(i32),
}

/// Run `e` to its end. Err: it could not be started (`exec_failed`).
pub(crate) fn run(e: &proto::Exec, cx: &Ctx<'_>, inputs: &mut Inputs) -> Result<Ended, String> {
    let started = Instant::now();
    let (state_r, state_w) = sys::pipe().map_err(|e| e.to_string())?;
    sys::set_pipe_size(state_w.as_raw_fd(), state::MAX_RECORD).map_err(|e| e.to_string())?;
    sys::set_nonblocking(state_r.as_raw_fd()).map_err(|e| e.to_string())?;
    // The one fd the shell inherits besides its stdio.
    sys::set_cloexec(state_w.as_raw_fd(), false).map_err(|e| e.to_string())?;
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(state::wrapper(cx.agent, state_w.as_raw_fd()))
        .arg("sh")
        .arg(&e.command)
        .env_clear()
        .envs(cx.state.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&cx.state.cwd)
        .stdin(if e.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cx.isolation.apply(&mut c);
    let mut child = c.spawn().map_err(|err| format!("/bin/sh: {err}"))?;
    drop(state_w);
    let pid = child.id() as i32;
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        unreachable!("both streams were piped")
    };
    // Before anything can fail: the shell is ours to end and reap.
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(err) => {
            cx.reach.sweep(pid);
            return Err(err.to_string());
        }
    };
    if let (Some(text), Some(mut w)) = (e.stdin.clone(), child.stdin.take()) {
        // A writer of its own: the command may read its input slowly, or
        // never (its end ends the write with EPIPE).
        std::thread::spawn(move || {
            let _ = w.write_all(text.as_bytes());
        });
    }
    let max_output = e.max_output.unwrap_or(proto::DEFAULT_MAX_OUTPUT);
    let sink = EventSink {
        id: e.id.clone(),
        pending: [Vec::new(), Vec::new()],
        events: cx.events.clone(),
    };
    let mut output = Output::events(out.into(), err.into(), max_output, Box::new(sink));
    let timeout = Duration::from_secs_f64(e.timeout.unwrap_or(proto::DEFAULT_TIMEOUT));
    let mut deadline = Deadline::new(Some(started + timeout), GRACE);
    let ending: Cell<Option<(ExitStatus, Instant)>> = Cell::new(None);
    let status = Cell::new(None);
    let ends = CommandEnds {
        pid,
        ending: &ending,
        status: &status,
        reach: cx.reach,
    };
    let mut during = During {
        inputs,
        id: &e.id,
        pgid: pid,
        ending: &ending,
        events: cx.events,
        since: Instant::now(),
        session_end: None,
    };
    let core = engine::Core {
        pidfd: &pidfd,
        output: &mut output,
        deadline: &mut deadline,
        ends: &ends,
    };
    engine::watch(core, &mut [&mut during]);
    // Whatever is left (the shell gone before what it started, the grace
    // over) ends now; nothing when the sweep ran already.
    cx.reach.sweep(pid);
    if let Some(code) = during.session_end {
        return Ok(Ended::Session(code));
    }
    let end = sys::ChildEnd::from_wait_status(status.get().unwrap_or(libc::SIGKILL));
    let exit = proto::Exit {
        status: match (ending.get().map(|e| e.0), end.signal) {
            (Some(why), _) => why,
            (None, Some(_)) => ExitStatus::Signaled,
            (None, None) => ExitStatus::Exited,
        },
        code: end.code.unwrap_or_else(|| 128 + end.signal.unwrap_or(0)),
        signal: end.signal,
        truncated: output.hit_cap,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    let state = state_bytes(&state_r);
    cx.events.emit(&proto::exit(&e.id, &exit));
    Ok(Ended::Ran(state))
}

/// A command is ended through its process group; once its shell is gone,
/// the sweep ends everything it left, so its output is complete at once;
/// unless it was told to end (its deadline's SIGTERM, an interrupt): then
/// what the shell started has the rest of the grace to finish, as a cold
/// run's processes have.
struct CommandEnds<'a> {
    pid: i32,
    /// Why it was signalled and when, if it was (the first reason wins).
    ending: &'a Cell<Option<(ExitStatus, Instant)>>,
    /// The shell's wait status, reaped when its pidfd said it ended.
    status: &'a Cell<Option<i32>>,
    reach: Reach,
}

impl engine::Ends for CommandEnds<'_> {
    fn term(&self) {
        if self.ending.get().is_none() {
            self.ending.set(Some((ExitStatus::Timeout, Instant::now())));
        }
        let _ = sys::kill(-self.pid, libc::SIGTERM);
    }

    fn kill(&self) {
        let _ = sys::kill(-self.pid, libc::SIGKILL);
    }

    fn gone(&self) -> Duration {
        // The shell first (the sweep reaps every child of the agent's).
        if let Ok(Some((_, st))) = sys::waitpid(self.pid, false) {
            self.status.set(Some(st));
        }
        if let Some((_, at)) = self.ending.get() {
            // What it started may be cleaning up: the output is read until
            // they are all gone or the grace is over (then the sweep).
            return (at + GRACE).saturating_duration_since(Instant::now());
        }
        self.reach.sweep(self.pid);
        // Everything that held the pipes is gone; what they hold is read
        // and not waited for beyond (a process the sweep cannot reach).
        Duration::ZERO
    }
}

/// The agent's inputs while a command runs: an interrupt of it, a close
/// or a signal that ends the session; a second `exec` is refused (`busy`).
struct During<'a> {
    inputs: &'a mut Inputs,
    id: &'a str,
    pgid: i32,
    ending: &'a Cell<Option<(ExitStatus, Instant)>>,
    events: &'a Events,
    /// When the watch began: what was heard before is taken at once.
    since: Instant,
    /// The session ends once the command is killed.
    session_end: Option<i32>,
}

impl During<'_> {
    fn interrupt(&mut self, asks: &mut Vec<Ask>) {
        if self.ending.get().is_none() {
            self.ending
                .set(Some((ExitStatus::Interrupted, Instant::now())));
        }
        let _ = sys::kill(-self.pgid, libc::SIGINT);
        asks.push(Ask::Grace);
    }

    fn end_session(&mut self, code: i32, asks: &mut Vec<Ask>) {
        self.session_end = Some(code);
        asks.push(Ask::Kill);
    }

    fn on_input(&mut self, input: Input, asks: &mut Vec<Ask>) {
        let line = match input {
            Input::Signal(libc::SIGINT) => return self.interrupt(asks),
            Input::Signal(_) => return self.end_session(super::agent::EXIT_TERMINATED, asks),
            Input::TooLong => {
                let m = format!("request line longer than {} bytes", proto::MAX_LINE);
                return self.events.emit(&proto::error(None, "bad_request", &m));
            }
            Input::Line(l) => l,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match proto::parse(&line) {
            Err(m) => self.events.emit(&proto::error(None, "bad_request", &m)),
            Ok(Request::Close {}) => self.end_session(super::agent::EXIT_CLOSED, asks),
            Ok(Request::Interrupt { id }) if id == self.id => self.interrupt(asks),
            Ok(Request::Interrupt { id }) => {
                let m = format!("{id}: no such command running");
                self.events
                    .emit(&proto::error(Some(&id), "not_running", &m));
            }
            Ok(Request::Exec(e)) => {
                let m = "a command is running; commands run one at a time";
                self.events.emit(&proto::error(Some(&e.id), "busy", m));
            }
        }
    }
}

impl Observer for During<'_> {
    fn fds(&self, _gone: bool) -> [RawFd; 2] {
        if self.session_end.is_some() {
            return [-1, -1];
        }
        self.inputs.fds()
    }

    fn due(&self, _gone: bool) -> Option<Instant> {
        (self.session_end.is_none() && self.inputs.queued()).then_some(self.since)
    }

    fn on_ready(&mut self, fd: Option<RawFd>, asks: &mut Vec<Ask>) {
        if let Some(fd) = fd {
            self.inputs.ready(fd);
        }
        // Once the session ends, what follows is not heard.
        while self.session_end.is_none() {
            let Some(i) = self.inputs.next() else { break };
            self.on_input(i, asks);
        }
    }
}

/// A command's output as `output` events: each chunk as text, a UTF-8
/// sequence cut between chunks joined.
struct EventSink {
    id: String,
    pending: [Vec<u8>; 2],
    events: Events,
}

const STREAMS: [&str; 2] = ["stdout", "stderr"];

fn index(which: Which) -> usize {
    match which {
        Which::Out => 0,
        Which::Err => 1,
    }
}

impl Sink for EventSink {
    fn chunk(&mut self, which: Which, data: &[u8]) {
        let i = index(which);
        let text = decode(&mut self.pending[i], data);
        if !text.is_empty() {
            self.events
                .emit(&proto::output(&self.id, STREAMS[i], &text));
        }
    }

    fn end(&mut self, which: Which) {
        let i = index(which);
        let rest = std::mem::take(&mut self.pending[i]);
        if !rest.is_empty() {
            let text = String::from_utf8_lossy(&rest);
            self.events
                .emit(&proto::output(&self.id, STREAMS[i], &text));
        }
    }
}

/// Everything the shell wrote on the state pipe.
fn state_bytes(fd: &OwnedFd) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n) = sys::read(fd.as_raw_fd(), &mut buf) {
        if n == 0 || out.len() > 4 * state::MAX_RECORD {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// `pending` + `data` as text: a UTF-8 sequence cut at the end is kept for
/// the next chunk; invalid bytes are replaced.
fn decode(pending: &mut Vec<u8>, data: &[u8]) -> String {
    pending.extend_from_slice(data);
    let cut = match std::str::from_utf8(pending) {
        Ok(_) => pending.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => {
            // Invalid inside: keep a cut sequence at the very end only.
            let tail = pending.len().saturating_sub(3);
            (tail..pending.len())
                .find(|&i| {
                    std::str::from_utf8(&pending[i..])
                        .err()
                        .is_some_and(|e| e.valid_up_to() == 0 && e.error_len().is_none())
                })
                .unwrap_or(pending.len())
        }
    };
    let rest = pending.split_off(cut);
    let text = String::from_utf8_lossy(pending).into_owned();
    *pending = rest;
    text
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn utf8_cut_between_chunks_is_joined() {
        let mut p = Vec::new();
        let s = "é€".as_bytes();
        assert_eq!(decode(&mut p, &s[..1]), "");
        assert_eq!(decode(&mut p, &s[1..3]), "é");
        assert_eq!(decode(&mut p, &s[3..]), "€");
        assert_eq!(decode(&mut p, b"a\xffb"), "a\u{fffd}b");
        assert!(p.is_empty());
    }
}

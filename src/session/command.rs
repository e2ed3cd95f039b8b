//! One running command: `/bin/sh -c` in a session of its own, its stdin
//! from the request, stdout and stderr read by a thread each, its end
//! waited for by another; everything arrives on the agent's channel as a
//! [`Msg`] tagged with the command's sequence number.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use super::guard::Isolation;
use super::proto::{self, ExitStatus};
use super::state::{self, State};
use crate::observe::deadline::Deadline;
use crate::sys;

/// What the agent's loop receives.
pub(crate) enum Msg {
    /// A request line (without its newline).
    Line(Vec<u8>),
    /// A request line longer than `proto::MAX_LINE`.
    LineTooLong,
    /// The agent's stdin ended.
    StdinEnd,
    /// Output of command `seq` on stream 0 (stdout) or 1 (stderr).
    Out(u64, usize, Vec<u8>),
    /// Stream 0 or 1 of command `seq` ended.
    OutEnd(u64, usize),
    /// Command `seq`'s shell ended with this wait status.
    Exited(u64, i32),
    /// The agent got SIGINT, SIGTERM, SIGHUP or SIGQUIT (forwarded by the
    /// jail's init from stockade's, or sent by a command).
    Signal(i32),
}

pub(crate) const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// A command being run.
pub(crate) struct Running {
    pub(crate) id: String,
    pub(crate) seq: u64,
    pub(crate) pgid: i32,
    started: Instant,
    /// The command's deadline: SIGTERM at its timeout, SIGKILL after the
    /// grace (`observe::deadline`, as every run's).
    deadline: Deadline,
    /// After its SIGKILL: when to stop waiting for its streams.
    give_up: Option<Instant>,
    /// Why it was signalled (timeout, interrupt), if it was.
    pub(crate) ending: Option<ExitStatus>,
    max_output: u64,
    kept: u64,
    truncated: bool,
    pending: [Vec<u8>; 2],
    pub(crate) open_streams: usize,
    pub(crate) status: Option<i32>,
    state: OwnedFd,
    /// Dropped once the command has ended: its readers then take what is
    /// left in the pipes and stop, even if a process that outlived the
    /// command (one the sweep cannot reach) still holds them open.
    stop: Option<OwnedFd>,
}

/// The grace between SIGINT (or SIGTERM) and SIGKILL.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

impl Running {
    /// Start `e` in the session's `st`, kept off the agent by `iso`;
    /// `agent` is the path the shell runs the state report with.
    pub(crate) fn start(
        e: &proto::Exec,
        seq: u64,
        st: &State,
        agent: &Path,
        iso: &Isolation,
        tx: &Sender<Msg>,
    ) -> Result<Running, String> {
        let (state_r, state_w) = sys::pipe().map_err(|e| e.to_string())?;
        let (stop_r, stop_w) = sys::pipe().map_err(|e| e.to_string())?;
        sys::set_pipe_size(state_w.as_raw_fd(), state::MAX_RECORD).map_err(|e| e.to_string())?;
        sys::set_nonblocking(state_r.as_raw_fd()).map_err(|e| e.to_string())?;
        // The one fd the shell inherits besides its stdio.
        sys::set_cloexec(state_w.as_raw_fd(), false).map_err(|e| e.to_string())?;
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(state::wrapper(agent, state_w.as_raw_fd()))
            .arg("sh")
            .arg(&e.command)
            .env_clear()
            .envs(st.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&st.cwd)
            .stdin(if e.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        iso.apply(&mut c);
        let mut child = c.spawn().map_err(|err| format!("/bin/sh: {err}"))?;
        drop(state_w);
        let pid = child.id() as i32;
        if let (Some(text), Some(mut w)) = (e.stdin.clone(), child.stdin.take()) {
            std::thread::spawn(move || {
                let _ = w.write_all(text.as_bytes());
            });
        }
        let stop2 = stop_r.try_clone().map_err(|e| e.to_string())?;
        pump(child.stdout.take(), stop_r, seq, 0, tx.clone());
        pump(child.stderr.take(), stop2, seq, 1, tx.clone());
        let t = tx.clone();
        std::thread::spawn(move || {
            if let Ok(Some((_, st))) = sys::waitpid(pid, false) {
                let _ = t.send(Msg::Exited(seq, st));
            }
        });
        let timeout = Duration::from_secs_f64(e.timeout.unwrap_or(proto::DEFAULT_TIMEOUT));
        Ok(Running {
            id: e.id.clone(),
            seq,
            pgid: pid,
            started: Instant::now(),
            deadline: Deadline::new(Some(Instant::now() + timeout), GRACE),
            give_up: None,
            ending: None,
            max_output: e.max_output.unwrap_or(proto::DEFAULT_MAX_OUTPUT),
            kept: 0,
            truncated: false,
            pending: [Vec::new(), Vec::new()],
            open_streams: 2,
            status: None,
            state: state_r,
            stop: Some(stop_w),
        })
    }

    /// The command has ended (and what it left was swept): the readers
    /// drain the pipes and end.
    pub(crate) fn ended(&mut self, status: i32) {
        self.status = Some(status);
        self.stop = None;
    }

    /// Signal the group: `sig` now, SIGKILL after the grace. `why` is how
    /// the exit event will say it ended (the first reason wins).
    pub(crate) fn stop(&mut self, sig: i32, why: ExitStatus) {
        self.ending.get_or_insert(why);
        let _ = sys::kill(-self.pgid, sig);
        self.deadline.cut_short(Instant::now());
    }

    /// When to look at it again: its deadline or grace, or the end of the
    /// wait for its streams after SIGKILL.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.deadline.next().or(self.give_up)
    }

    /// A time from [`Running::next`] came: SIGTERM at the deadline (a
    /// timeout), SIGKILL after the grace. Once the shell has ended, true:
    /// finish without waiting for the streams.
    pub(crate) fn deadline_passed(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let now = Instant::now();
        if self.deadline.term_due(now) {
            self.ending.get_or_insert(ExitStatus::Timeout);
            let _ = sys::kill(-self.pgid, libc::SIGTERM);
        }
        if self.deadline.kill_due(now) {
            let _ = sys::kill(-self.pgid, libc::SIGKILL);
            self.give_up = Some(now + GRACE);
        } else if self.give_up.is_some_and(|g| now >= g) {
            // Nothing more to time: its end comes from its waiter.
            self.give_up = None;
        }
        false
    }

    /// Output kept (up to `max_output`), decoded; `None` when nothing is
    /// left to say.
    pub(crate) fn take_output(&mut self, stream: usize, mut data: Vec<u8>) -> Option<String> {
        let room = self.max_output.saturating_sub(self.kept);
        if data.len() as u64 > room {
            data.truncate(room as usize);
            self.truncated = true;
        }
        self.kept += data.len() as u64;
        let text = decode(&mut self.pending[stream], &data);
        (!text.is_empty()).then_some(text)
    }

    /// What is left undecoded of `stream` (a cut UTF-8 sequence) at its end.
    pub(crate) fn flush(&mut self, stream: usize) -> Option<String> {
        let rest = std::mem::take(&mut self.pending[stream]);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }

    /// Everything the shell wrote on the state pipe.
    pub(crate) fn state_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = sys::read(self.state.as_raw_fd(), &mut buf) {
            if n == 0 || out.len() > 4 * state::MAX_RECORD {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    /// The exit event's fields.
    pub(crate) fn exit(&self) -> proto::Exit {
        let end = sys::ChildEnd::from_wait_status(self.status.unwrap_or(0));
        let status = match (self.ending, end.signal) {
            (Some(why), _) => why,
            (None, Some(_)) => ExitStatus::Signaled,
            (None, None) => ExitStatus::Exited,
        };
        proto::Exit {
            status,
            code: end.code.unwrap_or_else(|| 128 + end.signal.unwrap_or(0)),
            signal: end.signal,
            truncated: self.truncated,
            duration_ms: self.started.elapsed().as_millis() as u64,
        }
    }
}

/// Read `from` until its end, or until `stop` hangs up and then what the
/// pipe holds; each chunk a message.
fn pump<R>(from: Option<R>, stop: OwnedFd, seq: u64, stream: usize, tx: Sender<Msg>)
where
    R: Read + AsRawFd + Send + 'static,
{
    let Some(mut from) = from else {
        let _ = tx.send(Msg::OutEnd(seq, stream));
        return;
    };
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut draining = false;
        loop {
            if !draining && !readable_first(from.as_raw_fd(), stop.as_raw_fd()) {
                // Everything written before the end is in the pipe now.
                draining = sys::set_nonblocking(from.as_raw_fd()).is_ok();
                if !draining {
                    break;
                }
            }
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(Msg::Out(seq, stream, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Msg::OutEnd(seq, stream));
    });
}

/// Wait until `fd` can be read (true) or `stop` hangs up (false).
fn readable_first(fd: i32, stop: i32) -> bool {
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        match sys::poll(&mut fds, -1) {
            Ok(_) if fds[1].revents != 0 => return false,
            Ok(_) if fds[0].revents != 0 => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
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

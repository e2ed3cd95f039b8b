//! `stockade session-agent`: the payload of a session's jail. Reads
//! requests on stdin, runs one command at a time, writes events on stdout.
//!
//! It makes itself not dumpable (a command of the same uid cannot open its
//! /proc files or ptrace it), a child subreaper (orphans come back to it),
//! and blocks the signals whose default would end or stop it; each command
//! runs in a session and a Landlock domain of its own, from which the
//! kernel lets no signal (SIGKILL and SIGSTOP included) or ptrace reach the
//! agent (`guard`; a seccomp filter instead on kernels without Landlock's
//! signal scope). The agent is in a domain of its own too, in which the
//! commands' are nested: its signals reach only the commands (`sweep`).
//! SIGINT, SIGTERM, SIGHUP and SIGQUIT (stockade's, forwarded by the jail's
//! init) are taken by a thread: SIGINT interrupts the running command, the
//! others end the session (`terminated`).

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::command::{Msg, Running, STREAMS};
use super::guard::Isolation;
use super::proto::{self, ExitStatus, Request};
use super::state::{self, State};
use super::sweep::Reach;
use crate::sys;

/// The agent's exit codes: why the session ended.
pub(crate) const EXIT_CLOSED: i32 = 0;
pub(crate) const EXIT_STDIN_END: i32 = 10;
pub(crate) const EXIT_IDLE: i32 = 11;
pub(crate) const EXIT_TERMINATED: i32 = 12;

/// The signals the agent blocks (before any thread: every thread inherits
/// the mask; a command gets an empty one from std's spawn). Not every
/// signal: with SIGCHLD blocked too, `sleep 0.1 & wait` in a command never
/// returned (seen, not explained).
const BLOCKED: [Signal; 12] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGIO,
    Signal::SIGVTALRM,
];

/// The signals the agent's signal thread takes.
const TAKEN: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// The agent's arguments (set by `session::policy`).
struct Args {
    session: String,
    path: Option<OsString>,
    idle: Option<Duration>,
}

fn args(a: &[OsString]) -> Result<Args, String> {
    let mut out = Args {
        session: String::new(),
        path: None,
        idle: None,
    };
    let mut it = a.iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        let s = v.to_string_lossy();
        match k.to_str() {
            Some("--session") => out.session = s.into_owned(),
            Some("--path") => out.path = Some(v.clone()),
            Some("--idle-timeout") => {
                let secs: f64 = s.parse().map_err(|_| format!("--idle-timeout: {s}"))?;
                out.idle = (secs > 0.0).then(|| Duration::from_secs_f64(secs));
            }
            _ => return Err(format!("unknown argument {k:?}")),
        }
    }
    Ok(out)
}

/// The agent's loop; its exit code says why the session ended.
pub(crate) fn main(argv: &[OsString]) -> i32 {
    match run(argv) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stockade session-agent: {e}");
            1
        }
    }
}

fn run(argv: &[OsString]) -> Result<i32, String> {
    let a = args(argv)?;
    sys::set_dumpable(false).map_err(|e| e.to_string())?;
    sys::set_child_subreaper().map_err(|e| e.to_string())?;
    // Before any thread: every thread inherits the mask (a command gets
    // an empty one from std's spawn).
    sys::block_signals(&BLOCKED).map_err(|e| e.to_string())?;
    let pgid = sys::getpgid(0).map_err(|e| e.to_string())?;
    let isolation = Isolation::detect(sys::getpid(), pgid)?;
    let agent = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    if !state::plain_path(&agent) {
        return Err(format!("{}: not a plain path", agent.display()));
    }
    let cwd = std::env::current_dir().map_err(|e| format!("getcwd: {e}"))?;
    let mut env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| k != "PATH").collect();
    if let Some(p) = &a.path {
        env.push(("PATH".into(), p.clone()));
    }
    let (tx, rx) = channel();
    read_requests(tx.clone());
    take_signals(tx.clone());
    let mut agent_loop = Agent {
        out: std::io::stdout(),
        state: State {
            cwd: cwd.clone(),
            env,
        },
        home: cwd.clone(),
        agent,
        reach: Reach::detect(isolation.scoped()),
        isolation,
        running: None,
        seq: 0,
        idle: a.idle,
        last: Instant::now(),
        stdin_ended: false,
        tx,
    };
    agent_loop.emit(&proto::ready(&a.session, &cwd.to_string_lossy()))?;
    agent_loop.serve(&rx)
}

/// The stdin reader: one message per line.
fn read_requests(tx: Sender<Msg>) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut r = stdin.lock();
        loop {
            let mut line = Vec::new();
            let n = std::io::Read::take(&mut r, proto::MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .unwrap_or_default();
            if n == 0 {
                let _ = tx.send(Msg::StdinEnd);
                return;
            }
            let msg = if line.last() != Some(&b'\n') && line.len() > proto::MAX_LINE {
                // Skip the rest of the line.
                let _ = r.skip_until(b'\n');
                Msg::LineTooLong
            } else {
                Msg::Line(line)
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });
}

/// The signal thread: each of [`TAKEN`] (blocked in every thread) as a
/// message.
fn take_signals(tx: Sender<Msg>) {
    std::thread::spawn(move || {
        let mut set = nix::sys::signal::SigSet::empty();
        for s in TAKEN {
            set.add(s);
        }
        while let Ok(sig) = set.wait() {
            if tx.send(Msg::Signal(sig as i32)).is_err() {
                return;
            }
        }
    });
}

struct Agent {
    out: std::io::Stdout,
    state: State,
    /// The session's first directory, where a command starts when the
    /// last one's cwd is gone.
    home: PathBuf,
    agent: PathBuf,
    reach: Reach,
    /// What keeps every command off the agent (`guard`).
    isolation: Isolation,
    running: Option<Running>,
    seq: u64,
    idle: Option<Duration>,
    /// When the last command ended (or the session started).
    last: Instant,
    /// stdin has ended: the session ends once no command runs.
    stdin_ended: bool,
    tx: Sender<Msg>,
}

impl Agent {
    fn emit(&mut self, ev: &serde_json::Value) -> Result<(), String> {
        let mut o = self.out.lock();
        writeln!(o, "{ev}")
            .and_then(|_| o.flush())
            .map_err(|e| format!("stdout: {e}"))
    }

    /// The loop until the session ends: its exit code.
    fn serve(&mut self, rx: &Receiver<Msg>) -> Result<i32, String> {
        loop {
            let wait = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            let msg = match wait {
                Some(w) => rx.recv_timeout(w),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let done = match msg {
                Ok(m) => self.on_msg(m)?,
                Err(RecvTimeoutError::Timeout) => self.on_deadline()?,
                Err(RecvTimeoutError::Disconnected) => Some(EXIT_STDIN_END),
            };
            let done =
                done.or((self.stdin_ended && self.running.is_none()).then_some(EXIT_STDIN_END));
            if let Some(code) = done {
                if let Some(r) = self.running.take() {
                    self.reach.sweep(r.pgid);
                }
                return Ok(code);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        match &self.running {
            Some(r) => r.next(),
            None => self.idle.map(|i| self.last + i),
        }
    }

    fn on_deadline(&mut self) -> Result<Option<i32>, String> {
        let Some(r) = self.running.as_mut() else {
            return Ok(Some(EXIT_IDLE));
        };
        if r.deadline_passed() {
            self.finish()?;
        }
        Ok(None)
    }

    fn on_msg(&mut self, m: Msg) -> Result<Option<i32>, String> {
        match m {
            Msg::Line(l) => return self.on_request(&l),
            Msg::LineTooLong => {
                let m = format!("request line longer than {} bytes", proto::MAX_LINE);
                self.emit(&proto::error(None, "bad_request", &m))?;
            }
            // The running command (if any) is seen to its end first.
            Msg::StdinEnd => self.stdin_ended = true,
            Msg::Signal(libc::SIGINT) => {
                if let Some(r) = self.running.as_mut() {
                    r.stop(libc::SIGINT, ExitStatus::Interrupted);
                }
            }
            Msg::Signal(_) => return Ok(Some(EXIT_TERMINATED)),
            Msg::Out(seq, stream, data) => self.on_output(seq, stream, data)?,
            Msg::OutEnd(seq, stream) => {
                if let Some(r) = self.running.as_mut().filter(|r| r.seq == seq) {
                    r.open_streams -= 1;
                    if let Some(t) = r.flush(stream) {
                        let id = r.id.clone();
                        self.emit(&proto::output(&id, STREAMS[stream], &t))?;
                    }
                    self.maybe_finish()?;
                }
            }
            Msg::Exited(seq, st) => {
                if let Some(r) = self.running.as_mut().filter(|r| r.seq == seq) {
                    self.reach.sweep(r.pgid);
                    r.ended(st);
                    self.maybe_finish()?;
                }
            }
        }
        Ok(None)
    }

    fn on_output(&mut self, seq: u64, stream: usize, data: Vec<u8>) -> Result<(), String> {
        let Some(r) = self.running.as_mut().filter(|r| r.seq == seq) else {
            return Ok(());
        };
        if let Some(t) = r.take_output(stream, data) {
            let id = r.id.clone();
            self.emit(&proto::output(&id, STREAMS[stream], &t))?;
        }
        Ok(())
    }

    fn on_request(&mut self, line: &[u8]) -> Result<Option<i32>, String> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let req = match proto::parse(line) {
            Ok(r) => r,
            Err(m) => {
                self.emit(&proto::error(None, "bad_request", &m))?;
                return Ok(None);
            }
        };
        match req {
            Request::Close {} => return Ok(Some(EXIT_CLOSED)),
            Request::Interrupt { id } => match self.running.as_mut().filter(|r| r.id == id) {
                Some(r) => r.stop(libc::SIGINT, ExitStatus::Interrupted),
                None => {
                    let m = format!("{id}: no such command running");
                    self.emit(&proto::error(Some(&id), "not_running", &m))?;
                }
            },
            Request::Exec(e) => self.start(&e)?,
        }
        Ok(None)
    }

    fn start(&mut self, e: &proto::Exec) -> Result<(), String> {
        if self.running.is_some() {
            let m = "a command is running; commands run one at a time";
            return self.emit(&proto::error(Some(&e.id), "busy", m));
        }
        if !self.state.cwd.is_dir() {
            self.state.cwd = self.home.clone();
        }
        self.seq += 1;
        match Running::start(
            e,
            self.seq,
            &self.state,
            &self.agent,
            &self.isolation,
            &self.tx,
        ) {
            Ok(r) => self.running = Some(r),
            Err(m) => self.emit(&proto::error(Some(&e.id), "exec_failed", &m))?,
        }
        Ok(())
    }

    /// Once the shell has ended and both streams with it: the state, the
    /// exit event.
    fn maybe_finish(&mut self) -> Result<(), String> {
        if self
            .running
            .as_ref()
            .is_some_and(|r| r.status.is_some() && r.open_streams == 0)
        {
            self.finish()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        let Some(mut r) = self.running.take() else {
            return Ok(());
        };
        for (s, name) in STREAMS.iter().enumerate() {
            if let Some(t) = r.flush(s) {
                self.emit(&proto::output(&r.id, name, &t))?;
            }
        }
        self.state.apply(&r.state_bytes());
        self.last = Instant::now();
        self.emit(&proto::exit(&r.id, &r.exit()))
    }
}

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
//! init) are read from a signalfd: SIGINT interrupts the running command,
//! the others end the session (`terminated`). The agent has one thread (and
//! one more while it writes a command's stdin): one poll loop between
//! commands over its stdin and its signals, and the engine's during one.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::command::{self, Ctx, Ended};
use super::guard::Isolation;
use super::input::{Input, Inputs};
use super::proto::{self, Events, Request};
use super::state::{self, State};
use super::sweep::Reach;
use crate::sys;

/// The agent's exit codes: why the session ended.
pub(crate) const EXIT_CLOSED: i32 = 0;
pub(crate) const EXIT_STDIN_END: i32 = 10;
pub(crate) const EXIT_IDLE: i32 = 11;
pub(crate) const EXIT_TERMINATED: i32 = 12;

/// The signals the agent blocks (before any thread: every thread inherits
/// the mask; a command's child clears it before exec, `guard`: before it
/// did, a command inherited these blocked, and a builtin loop never saw
/// its deadline's SIGTERM).
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

/// The signals the agent takes (from a signalfd).
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
    // Before any thread: every thread inherits the mask (a command's
    // child clears it before exec).
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
    let mut agent_loop = Agent {
        events: Events::default(),
        inputs: Inputs::new(&TAKEN)?,
        state: State {
            cwd: cwd.clone(),
            env,
        },
        home: cwd.clone(),
        agent,
        reach: Reach::detect(isolation.scoped()),
        isolation,
        idle: a.idle,
        last: Instant::now(),
    };
    agent_loop
        .events
        .emit(&proto::ready(&a.session, &cwd.to_string_lossy()));
    let code = agent_loop.serve();
    agent_loop.events.failed()?;
    code
}

struct Agent {
    events: Events,
    inputs: Inputs,
    state: State,
    /// The session's first directory, where a command starts when the
    /// last one's cwd is gone.
    home: PathBuf,
    agent: PathBuf,
    reach: Reach,
    /// What keeps every command off the agent (`guard`).
    isolation: Isolation,
    idle: Option<Duration>,
    /// When the last command ended (or the session started).
    last: Instant,
}

impl Agent {
    /// The loop until the session ends: its exit code. Between commands
    /// it polls the agent's stdin and signals, until the idle timeout.
    fn serve(&mut self) -> Result<i32, String> {
        loop {
            while let Some(input) = self.inputs.next() {
                if let Some(code) = self.on_input(input)? {
                    return Ok(code);
                }
                self.events.failed()?;
            }
            if self.inputs.stdin_ended() {
                return Ok(EXIT_STDIN_END);
            }
            let now = Instant::now();
            let timeout = match self.idle.map(|i| self.last + i) {
                Some(at) if at <= now => return Ok(EXIT_IDLE),
                Some(at) => (at - now).as_millis().min(i32::MAX as u128 - 1) as i32 + 1,
                None => -1,
            };
            let mut fds = self.inputs.fds().map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            sys::poll(&mut fds, timeout).map_err(|e| e.to_string())?;
            for p in fds {
                if p.fd >= 0 && p.revents != 0 {
                    self.inputs.ready(p.fd);
                }
            }
        }
    }

    /// One input heard between commands; `Some`: the session ends.
    fn on_input(&mut self, input: Input) -> Result<Option<i32>, String> {
        let line = match input {
            // Nothing runs to interrupt.
            Input::Signal(libc::SIGINT) => return Ok(None),
            Input::Signal(_) => return Ok(Some(EXIT_TERMINATED)),
            Input::TooLong => {
                let m = format!("request line longer than {} bytes", proto::MAX_LINE);
                self.events.emit(&proto::error(None, "bad_request", &m));
                return Ok(None);
            }
            Input::Line(l) => l,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        match proto::parse(&line) {
            Err(m) => self.events.emit(&proto::error(None, "bad_request", &m)),
            Ok(Request::Close {}) => return Ok(Some(EXIT_CLOSED)),
            Ok(Request::Interrupt { id }) => {
                let m = format!("{id}: no such command running");
                self.events
                    .emit(&proto::error(Some(&id), "not_running", &m));
            }
            Ok(Request::Exec(e)) => return self.exec(&e),
        }
        Ok(None)
    }

    /// Run one command to its end; `Some`: the session ended while it ran.
    fn exec(&mut self, e: &proto::Exec) -> Result<Option<i32>, String> {
        if !self.state.cwd.is_dir() {
            self.state.cwd = self.home.clone();
        }
        let cx = Ctx {
            state: &self.state,
            agent: &self.agent,
            isolation: &self.isolation,
            reach: self.reach,
            events: &self.events,
        };
        let ended = command::run(e, &cx, &mut self.inputs);
        self.last = Instant::now();
        match ended {
            Ok(Ended::Ran(state)) => self.state.apply(&state),
            Ok(Ended::Session(code)) => return Ok(Some(code)),
            Err(m) => self
                .events
                .emit(&proto::error(Some(&e.id), "exec_failed", &m)),
        }
        Ok(None)
    }
}

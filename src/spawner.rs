//! The spawner: a single-threaded process that starts jails for callers
//! that may have threads.
//!
//! A process with more than one thread cannot create a user namespace, and
//! the child of a fork in such a process may only make async-signal-safe
//! calls. So [`crate::Jail::spawn`] does not clone itself: it asks the
//! spawner, a process that was single-threaded when it was made and stays
//! so, over a unix socket. The spawner forks one supervisor per run (a fork
//! of a single-threaded process may do anything), which runs the jail
//! exactly as `stockade run` does and reports the outcome.
//!
//! How the spawner is made:
//! - when the caller is single-threaded (first use before any thread, or
//!   [`start`] called early in `main`): a fork of the caller;
//! - otherwise: the `stockade` binary exec'd as `stockade __spawner` (from
//!   `STOCKADE_BIN`, the current executable when it is stockade, or PATH),
//!   since only an exec gives a clean process.
//!
//! The protocol, per run:
//! 1. the caller makes a stream socket pair (the run's *control* socket)
//!    and sends the spawner one message, `run`, with five fds: the payload's
//!    stdin, stdout and stderr, the control socket's other end, and (for
//!    `keep_fds`) nothing else: kept fds travel in the same message after
//!    those, their numbers in the message text;
//! 2. the spawner forks the supervisor and answers with its pid;
//! 3. the caller writes the policy (JSON, length-prefixed) on the control
//!    socket; the supervisor reads it, runs the jail (a `K` on the control
//!    socket, or its end, kills the jail), writes the outcome (JSON) and
//!    exits. The end of the control socket tells the caller it is over.
//!
//! A run asked for as `run-held` starts with its clock held: no deadline
//! until the caller writes the start record on the control socket
//! ([`crate::Child::start_clock`]; see `observe::deadline`).

#![deny(unsafe_code)]

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use crate::outcome::Outcome;
use crate::policy::Policy;
use crate::sys::{self, fdpass};

/// The argument that makes the stockade binary a spawner.
#[doc(hidden)]
pub const SPAWNER_ARG: &str = "__spawner";

/// Most kept fds one run may pass (the message carries at most 16 fds).
const MAX_KEEP: usize = fdpass::MAX_FDS - 4;

/// A system call that failed: its name, its argument and the errno.
/// Printed as `call(arg): ERRNO: description`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct OsFailure {
    call: &'static str,
    errno: i32,
    text: String,
}

impl OsFailure {
    /// The system call (`socketpair`, `fork`, `sendmsg`, …).
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// The errno it failed with.
    pub fn errno(&self) -> i32 {
        self.errno
    }
}

impl OsFailure {
    pub(crate) fn of(e: sys::SysError) -> OsFailure {
        OsFailure {
            call: e.call,
            errno: e.errno as i32,
            text: e.to_string(),
        }
    }
}

/// Why a jail could not be started through the spawner, or its outcome
/// not read back. How a jail that ran ended is in its outcome instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The spawner could not be started or asked: a system call failed
    /// (socketpair, fork, sending the request, reading the answer).
    #[error("spawner: {0}")]
    Spawner(OsFailure),
    /// The stockade binary could not be started as the spawner.
    #[error("spawner: {}: {source} (a multi-threaded process starts jails through the stockade binary: set STOCKADE_BIN, or call stockade::spawner::start() before any thread starts)", bin.display())]
    Exec {
        bin: std::path::PathBuf,
        source: std::io::Error,
    },
    /// This process has threads, and no stockade binary was found.
    #[error("spawner: this process has threads, and no stockade binary was found (STOCKADE_BIN, PATH); call stockade::spawner::start() before any thread starts")]
    NoBinary,
    /// More kept fds than one message carries.
    #[error("keep_fds: at most {max} fds")]
    TooManyFds { max: usize },
    /// The policy could not be encoded.
    #[error("policy: {0}")]
    Encode(serde_json::Error),
    /// The spawner answered that it could not start the run (its words),
    /// or answered something else than a pid.
    #[error("spawner: {0}")]
    Refused(String),
    /// The spawner is gone (it closed its socket).
    #[error("spawner: it has exited")]
    SpawnerDied,
    /// The policy could not be sent to the run's supervisor.
    #[error("spawner: sending the policy to the supervisor (pid {pid}): {source}")]
    SendPolicy { pid: i32, source: std::io::Error },
    /// The run's control socket failed.
    #[error("control socket: {0}")]
    Control(std::io::Error),
    /// The run's supervisor ended without writing an outcome.
    #[error("the run's supervisor ended without an outcome")]
    SupervisorDied,
    /// The outcome the supervisor wrote could not be read.
    #[error("outcome: {0}")]
    Decode(serde_json::Error),
    /// A system call on the caller's side of the run failed (a pipe for
    /// the payload's stdio, the kill request).
    #[error("{0}")]
    Os(OsFailure),
}

impl SpawnError {
    fn spawner(e: sys::SysError) -> SpawnError {
        SpawnError::Spawner(OsFailure::of(e))
    }
}

/// The caller's handle on its spawner.
struct Handle {
    sock: OwnedFd,
}

static SPAWNER: Mutex<Option<Handle>> = Mutex::new(None);

/// Start this process's spawner now, if it has none. Call it first thing in
/// `main`, before any thread exists, to get a forked spawner (no `stockade`
/// binary needed); later, from a multi-threaded process, the spawner is the
/// `stockade` binary. [`crate::Jail::spawn`] starts one on first use anyway.
pub fn start() -> Result<(), SpawnError> {
    let mut s = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
    if s.is_none() {
        *s = Some(launch()?);
    }
    Ok(())
}

/// Whether this process has a spawner that is still there (started and
/// not hung up). A dead one is replaced on the next run, where this
/// process may still start one (a server that confined itself may not).
pub fn alive() -> bool {
    let s = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
    match s.as_ref() {
        Some(h) => !sys::seccomp::poll_now(h.sock.as_raw_fd()).1,
        None => false,
    }
}

fn launch() -> Result<Handle, SpawnError> {
    let (ours, theirs) = fdpass::socketpair(libc::SOCK_SEQPACKET).map_err(SpawnError::spawner)?;
    if sys::thread_count() == 1 {
        // Single-threaded: a fork of us may run anything.
        #[allow(unsafe_code)]
        // SAFETY: thread_count() just said this process has one thread, and
        // we hold the lock every other user of the spawner needs.
        let forked = unsafe { sys::fork() }.map_err(SpawnError::spawner)?;
        match forked {
            None => {
                drop(ours);
                serve(theirs)
            }
            Some(_) => return Ok(Handle { sock: ours }),
        }
    }
    let bin = binary()?;
    std::process::Command::new(&bin)
        .arg(SPAWNER_ARG)
        .stdin(std::process::Stdio::from(theirs))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|source| SpawnError::Exec { bin, source })?;
    Ok(Handle { sock: ours })
}

/// The stockade binary to exec as a spawner.
fn binary() -> Result<std::path::PathBuf, SpawnError> {
    if let Some(p) = std::env::var_os("STOCKADE_BIN") {
        return Ok(p.into());
    }
    if let Ok(me) = std::env::current_exe() {
        if me.file_name().is_some_and(|n| n == "stockade") {
            return Ok(me);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("stockade"))
        .find(|p| p.is_file())
        .ok_or(SpawnError::NoBinary)
}

/// What a caller gets back for one run.
pub(crate) struct Started {
    /// The run's supervisor.
    pub pid: i32,
    /// The run's control socket (see the module doc).
    pub control: OwnedFd,
}

/// Ask the spawner to start a run of `policy` with `stdio` (stdin, stdout,
/// stderr) as the payload's, and `keep` passed through by number.
pub(crate) fn request(
    policy: &Policy,
    stdio: [RawFd; 3],
    keep: &[RawFd],
    held: bool,
) -> Result<Started, SpawnError> {
    if keep.len() > MAX_KEEP {
        return Err(SpawnError::TooManyFds { max: MAX_KEEP });
    }
    let json = serde_json::to_vec(policy).map_err(SpawnError::Encode)?;
    let (control, theirs) = fdpass::socketpair(libc::SOCK_STREAM).map_err(SpawnError::spawner)?;
    let mut fds = vec![stdio[0], stdio[1], stdio[2], theirs.as_raw_fd()];
    fds.extend_from_slice(keep);
    let text = format!(
        "{} {}",
        if held { "run-held" } else { "run" },
        keep.iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let pid = ask(&text, &fds)?;
    drop(theirs);
    let mut f = std::fs::File::from(control);
    let len = (json.len() as u64).to_le_bytes();
    f.write_all(&len)
        .and_then(|()| f.write_all(&json))
        .map_err(|source| SpawnError::SendPolicy { pid, source })?;
    Ok(Started {
        pid,
        control: OwnedFd::from(f),
    })
}

/// Send the spawner one request (started first if there is none); its
/// answer is the run's supervisor's pid. A spawner that failed us is not
/// asked again: the next run starts a new one.
fn ask(text: &str, fds: &[RawFd]) -> Result<i32, SpawnError> {
    let mut s = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
    if s.is_none() {
        *s = Some(launch()?);
    }
    let sock = s.as_ref().map(|h| h.sock.as_raw_fd()).unwrap_or(-1);
    let asked = fdpass::send_with_fds(sock, text.as_bytes(), fds)
        .map_err(SpawnError::spawner)
        .and_then(|()| {
            let mut buf = [0u8; 512];
            let (n, _) = fdpass::recv_with_fds(sock, &mut buf).map_err(SpawnError::spawner)?;
            let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
            match reply.strip_prefix("pid ") {
                Some(p) => p
                    .parse::<i32>()
                    .map_err(|_| SpawnError::Refused(reply.clone())),
                None if n == 0 => Err(SpawnError::SpawnerDied),
                None => Err(SpawnError::Refused(reply)),
            }
        });
    if asked.is_err() {
        *s = None;
    }
    asked
}

/// Read the outcome a supervisor wrote on its control socket, to its end.
pub(crate) fn read_outcome(control: &OwnedFd) -> Result<Outcome, SpawnError> {
    let dup = control.try_clone().map_err(SpawnError::Control)?;
    let mut text = Vec::new();
    std::fs::File::from(dup)
        .read_to_end(&mut text)
        .map_err(SpawnError::Control)?;
    if text.is_empty() {
        return Err(SpawnError::SupervisorDied);
    }
    serde_json::from_slice(&text).map_err(SpawnError::Decode)
}

// ------------------------------------------------------------ spawner side

/// The spawner's loop (in a forked child, or `stockade __spawner` with the
/// socket on fd 0). Never returns.
#[doc(hidden)]
pub fn serve(sock: OwnedFd) -> ! {
    // The caller's signal mask and ignored signals are not ours either: an
    // ignored SIGCHLD would have the kernel reap the jail's init before its
    // supervisor can wait for it.
    if sys::reset_signals().is_err() {
        sys::exit_now(1);
    }
    // The caller's other fds (files, sockets, pipe ends it waits on) are
    // not ours to hold open.
    let keep_err = sys::fd_is_open(2);
    let sock = match sys::dup_above(sock.as_raw_fd(), 3) {
        Ok(s) => s,
        Err(_) => sys::exit_now(1),
    };
    let mut keep = vec![sock.as_raw_fd()];
    if keep_err {
        keep.push(2);
    }
    #[allow(unsafe_code)]
    // SAFETY: this process never returns into the code that owns the fds
    // closed here: it loops below and ends with exit_now.
    if unsafe { sys::close_all_but(&keep) }.is_err() {
        sys::exit_now(1);
    }
    loop {
        reap();
        let mut buf = [0u8; 512];
        let (n, fds) = match fdpass::recv_with_fds(sock.as_raw_fd(), &mut buf) {
            Ok((0, _)) => sys::exit_now(0),
            Ok(got) => got,
            Err(_) => sys::exit_now(1),
        };
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let reply = match start_run(&text, fds, sock.as_raw_fd()) {
            Ok(pid) => format!("pid {pid}"),
            Err(e) => e.to_string(),
        };
        if fdpass::send_with_fds(sock.as_raw_fd(), reply.as_bytes(), &[]).is_err() {
            sys::exit_now(1);
        }
    }
}

/// Reap the supervisors that have finished.
fn reap() {
    while let Ok(Some(_)) = sys::waitpid(-1, true) {}
}

/// Why the spawner could not start a run: its answer to the caller.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("unknown request {0:?}")]
    Unknown(String),
    #[error("bad fd number {0:?}")]
    BadFd(String),
    #[error("expected {expected} fds, got {got}")]
    FdCount { expected: usize, got: usize },
    #[error("{0}")]
    Fork(sys::SysError),
}

/// Fork the supervisor of one run; returns its pid.
fn start_run(text: &str, fds: Vec<OwnedFd>, spawner_sock: RawFd) -> Result<i32, RequestError> {
    let mut words = text.split_whitespace();
    let held = match words.next() {
        Some("run") => false,
        Some("run-held") => true,
        _ => return Err(RequestError::Unknown(text.to_string())),
    };
    let keep: Vec<RawFd> = words
        .map(|w| {
            w.parse::<RawFd>()
                .map_err(|_| RequestError::BadFd(w.to_string()))
        })
        .collect::<Result<_, _>>()?;
    if fds.len() != 4 + keep.len() {
        return Err(RequestError::FdCount {
            expected: 4 + keep.len(),
            got: fds.len(),
        });
    }
    #[allow(unsafe_code)]
    // SAFETY: the spawner is single-threaded.
    let forked = unsafe { sys::fork() }.map_err(RequestError::Fork)?;
    match forked {
        Some(pid) => Ok(pid),
        None => {
            if held {
                crate::supervise::hold();
            }
            supervise_one(fds, &keep, spawner_sock)
        }
    }
}

/// The supervisor of one run (a child of the spawner). Never returns.
fn supervise_one(fds: Vec<OwnedFd>, keep: &[RawFd], spawner_sock: RawFd) -> ! {
    #[allow(unsafe_code)]
    // SAFETY: the value that owns it (in `serve`) is never used or dropped
    // again: this process ends in exit_now.
    unsafe {
        sys::close_raw(spawner_sock)
    };
    // Move every fd we were given out of the way, then into place: the
    // payload's stdio on 0, 1, 2, kept fds under their own numbers.
    let top = keep.iter().copied().max().unwrap_or(0).max(2) + 1;
    let moved: Vec<OwnedFd> = match fds
        .iter()
        .map(|f| sys::dup_above(f.as_raw_fd(), top))
        .collect::<Result<_, _>>()
    {
        Ok(m) => m,
        Err(_) => sys::exit_now(1),
    };
    drop(fds);
    for (f, to) in moved
        .iter()
        .take(3)
        .zip([0, 1, 2])
        .chain(moved.iter().skip(4).zip(keep.iter().copied()))
    {
        #[allow(unsafe_code)]
        // SAFETY: every value that owns an fd here is in `moved`, above
        // `top`; 0, 1, 2 and the kept numbers are owned by none.
        let placed = unsafe { sys::dup2(f.as_raw_fd(), to) };
        if placed.is_err() {
            sys::exit_now(1);
        }
    }
    // Only the control socket stays besides the fds now in place.
    let mut moved = moved;
    let control_fd = moved.swap_remove(3);
    drop(moved);
    let control = control_fd.as_raw_fd();
    let outcome = match read_policy(control) {
        Ok(p) => crate::run_with(&p, Some(control)),
        Err(e) => Outcome::setup_error(&crate::SetupError::new("spawner", "", e.to_string())),
    };
    let _ = sys::write_all(control, outcome.to_json().as_bytes());
    sys::exit_now(0)
}

/// Why the supervisor could not read the policy of its run.
#[derive(Debug, thiserror::Error)]
enum PolicyReadError {
    #[error("{0}")]
    Dup(sys::SysError),
    #[error("reading the policy: {0}")]
    Read(std::io::Error),
    #[error("policy of {0} bytes")]
    TooLong(u64),
    #[error("policy: {0}")]
    Decode(serde_json::Error),
}

/// Read the length-prefixed policy from the control socket.
fn read_policy(control: RawFd) -> Result<Policy, PolicyReadError> {
    // Borrowed for reading only: `f` must not close the fd.
    let dup = sys::dup_above(control, 3).map_err(PolicyReadError::Dup)?;
    let mut f = std::fs::File::from(dup);
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(PolicyReadError::Read)?;
    let len = u64::from_le_bytes(len);
    if len > 1 << 30 {
        return Err(PolicyReadError::TooLong(len));
    }
    let mut json = vec![0u8; len as usize];
    f.read_exact(&mut json).map_err(PolicyReadError::Read)?;
    serde_json::from_slice(&json).map_err(PolicyReadError::Decode)
}

/// The socket of `stockade __spawner`: its stdin.
#[doc(hidden)]
pub fn stdin_socket() -> OwnedFd {
    match sys::dup_above(0, 3) {
        Ok(fd) => fd,
        Err(_) => {
            // Nothing to serve.
            let _ = std::io::stderr().write_all(b"stockade: __spawner: no socket on stdin\n");
            sys::exit_now(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_before_and_carry_their_parts() {
        let sys_err = sys::SysError {
            call: "socketpair",
            arg: "AF_UNIX".into(),
            errno: sys::Errno::EMFILE,
        };
        let e = SpawnError::spawner(sys_err.clone());
        assert_eq!(e.to_string(), format!("spawner: {sys_err}"));
        match &e {
            SpawnError::Spawner(f) => {
                assert_eq!((f.call(), f.errno()), ("socketpair", libc::EMFILE))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            SpawnError::TooManyFds { max: MAX_KEEP }.to_string(),
            format!("keep_fds: at most {MAX_KEEP} fds")
        );
        assert_eq!(
            SpawnError::SpawnerDied.to_string(),
            "spawner: it has exited"
        );
        assert_eq!(
            SpawnError::Refused("expected 4 fds, got 3".into()).to_string(),
            "spawner: expected 4 fds, got 3"
        );
        let io = || std::io::Error::from_raw_os_error(libc::EPIPE);
        assert_eq!(
            SpawnError::SendPolicy {
                pid: 7,
                source: io()
            }
            .to_string(),
            format!(
                "spawner: sending the policy to the supervisor (pid 7): {}",
                io()
            )
        );
        assert_eq!(
            SpawnError::SupervisorDied.to_string(),
            "the run's supervisor ended without an outcome"
        );
        assert_eq!(
            RequestError::FdCount {
                expected: 4,
                got: 3
            }
            .to_string(),
            "expected 4 fds, got 3"
        );
        assert_eq!(
            RequestError::Unknown("go".into()).to_string(),
            "unknown request \"go\""
        );
        assert_eq!(PolicyReadError::TooLong(9).to_string(), "policy of 9 bytes");
    }
}

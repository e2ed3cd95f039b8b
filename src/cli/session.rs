//! `stockade session`: the flags onto the profile's policy (as `run` puts
//! them), the agent as the payload, the jail spawned with pipes for its
//! stdin and stdout, then the `end` event.
//!
//! This process relays the protocol: each request line from its stdin to
//! the agent, each event line from the agent to its stdout, and watches
//! every command's deadline on the way (`session::watchdog`): when a
//! command's exit event is overdue (the agent stopped or died), it kills
//! the jail and ends the session as `agent_unresponsive`. SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT go to the jail's supervisor, which forwards them to
//! the agent.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};

use super::args::{MountFlag, RunArgs, SessionArgs};
use super::report::{refuse, ReportTo};
use crate::policy::{units, PolicyError};
use crate::session::watchdog::Watchdog;
use crate::session::{self, policy::session_policy};
use crate::sys;

/// The signals passed on to the jail's supervisor.
const FORWARDED: [Signal; 4] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// `stockade session`: the exit code (0 when the session ended as asked:
/// `close`, stdin's end, the idle timeout, SIGTERM).
pub(super) fn session_cmd(a: &SessionArgs, mounts: &[(usize, MountFlag, String)]) -> i32 {
    let policy = match policy(a, mounts) {
        Ok(p) => p,
        Err(e) => return refused(&e.to_string()),
    };
    let mut child = match crate::Jail::new(policy)
        .stdin(crate::Stdio::piped())
        .stdout(crate::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return refused(&e.to_string()),
    };
    let (o, overdue) = match relay(&mut child) {
        Ok(r) => r,
        Err(e) => return refused(&e),
    };
    if let Some(err) = &o.error {
        super::eprint_line(err);
    }
    let end = match &overdue {
        Some(id) => {
            super::eprint_line(&session::watchdog::unresponsive_message(id));
            session::end_event_unresponsive(&o)
        }
        None => session::end_event(&o),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{end}").and_then(|_| out.flush());
    if overdue.is_some() {
        return if o.exit_code == 0 { 1 } else { o.exit_code };
    }
    match session::end_reason(&o).as_str() {
        "closed" | "stdin_closed" | "idle_timeout" | "terminated" => 0,
        "setup_error" => 125,
        _ if o.exit_code == 0 => 1,
        _ => o.exit_code,
    }
}

/// Relay requests and events until the jail ends, watching each
/// command's deadline; the jail's outcome, and the command whose deadline
/// passed when the watchdog ended it.
fn relay(child: &mut crate::Child) -> Result<(crate::Outcome, Option<String>), String> {
    let (Some(to_agent), Some(from_agent)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("session: the jail has no stdin or stdout pipe".into());
    };
    let killer = child.killer().map_err(|e| e.to_string())?;
    // Before any thread: every thread inherits the mask.
    sys::block_signals(&FORWARDED).map_err(|e| e.to_string())?;
    let supervisor = child.id() as i32;
    std::thread::spawn(move || {
        let set: SigSet = FORWARDED.iter().copied().collect();
        while let Ok(sig) = set.wait() {
            let _ = sys::kill(supervisor, sig as i32);
        }
    });
    let dog = Arc::new(Watchdog::default());
    let d = dog.clone();
    std::thread::spawn(move || requests(to_agent, &d));
    let d = dog.clone();
    let events = std::thread::spawn(move || {
        events(from_agent, &d);
        d.over();
    });
    let overdue = dog.wait();
    if overdue.is_some() {
        let _ = killer.kill();
    }
    let o = child.wait().map_err(|e| e.to_string())?;
    let _ = events.join();
    Ok((o, overdue))
}

/// Each request line from our stdin to the agent; its end closes the
/// agent's stdin.
fn requests(mut to_agent: std::fs::File, dog: &Watchdog) {
    let stdin = std::io::stdin();
    let mut r = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        // The agent refuses (and skips) a longer line; no more is kept here.
        let limit = session::proto::MAX_LINE as u64 + 2;
        match r.by_ref().take(limit).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        dog.sent(line.strip_suffix(b"\n").unwrap_or(&line));
        if to_agent.write_all(&line).is_err() {
            return;
        }
    }
}

/// Each event line from the agent to our stdout, seen by the watchdog.
fn events(from_agent: std::fs::File, dog: &Watchdog) {
    let mut r = BufReader::new(from_agent);
    let mut line = Vec::new();
    let out = std::io::stdout();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Ok(ev) = serde_json::from_slice::<serde_json::Value>(&line) {
            dog.event(&ev);
        }
        // A slow reader of ours keeps the agent waiting, not the other
        // way round: that time is not held against its deadlines.
        dog.hold();
        let started = std::time::Instant::now();
        let mut o = out.lock();
        let _ = o.write_all(&line).and_then(|_| o.flush());
        drop(o);
        dog.release(started.elapsed());
    }
}

/// Refused before the jail: the line on stderr, and the `end` event with
/// a `setup_error` outcome (a client reading events sees why).
fn refused(msg: &str) -> i32 {
    let mut o = crate::Outcome::new();
    o.status = crate::Status::SetupError;
    o.exit_code = 125;
    o.error = Some(msg.to_string());
    println!("{}", session::end_event(&o));
    refuse(&ReportTo::default(), msg)
}

fn policy(
    a: &SessionArgs,
    mounts: &[(usize, MountFlag, String)],
) -> Result<crate::Policy, PolicyError> {
    let run = RunArgs {
        profile: a.profile.clone(),
        python: a.python.clone(),
        ro_bind: a.ro_bind.clone(),
        bind: a.bind.clone(),
        tmpfs: a.tmpfs.clone(),
        symlink: a.symlink.clone(),
        setenv: a.setenv.clone(),
        keep_env: a.keep_env.clone(),
        network: a.network,
        workdir: a.workdir.clone(),
        tmp_size: a.tmp_size.clone(),
        memory: a.memory.clone(),
        cpus: a.cpus.clone(),
        pids_limit: a.pids_limit.clone(),
        seccomp_allow: a.seccomp_allow.clone(),
        require: a.require.clone(),
        uid_range: a.uid_range.clone(),
        command: vec![OsString::from(session::AGENT_ARG)],
        dashdash: true,
        ..RunArgs::default()
    };
    let base = super::run::run_policy(&run, mounts)?;
    let dur = |flag: &str, v: &Option<String>| {
        v.as_deref()
            .map(|s| units::parse_duration(s).map_err(|e| PolicyError::value(flag, e)))
            .transpose()
            .map(|d| d.filter(|d| !d.is_zero()))
    };
    let idle = dur("--idle-timeout", &a.idle_timeout)?;
    let lifetime = dur("--timeout", &a.timeout)?;
    session_policy(base, &session::policy::new_id(), idle, lifetime)
}

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
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, Signal};

use super::args::{MountFlag, RunArgs, SessionArgs};
use super::report::{refuse, ReportTo};
use crate::policy::{units, PolicyError};
use crate::session::watchdog::Watchdog;
use crate::session::workspace::{self, Layers, Request as WsRequest};
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
    let mut policy = match policy(a, mounts) {
        Ok(p) => p,
        Err(e) => return refused(&e.to_string()),
    };
    let mut layers = match Layers::prepare(&mut policy) {
        Ok(l) => l,
        Err(e) => return refused(&format!("--overlay: {e}")),
    };
    let ended = spawn(&policy).and_then(|child| relay(child, &policy, &mut layers));
    if let Some(l) = layers {
        l.finish();
    }
    let (o, overdue) = match ended {
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
    emit(&end);
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

/// The session's jail, its stdin and stdout piped.
fn spawn(policy: &crate::Policy) -> Result<crate::Child, String> {
    crate::Jail::new(policy.clone())
        .stdin(crate::Stdio::piped())
        .stdout(crate::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())
}

/// One event line on our stdout.
fn emit(ev: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{ev}").and_then(|_| out.flush());
}

/// What the relay's loop hears.
enum Heard {
    /// A workspace request (`session::workspace`), answered here; the
    /// reader of requests waits for its answer before the next line.
    Op(WsRequest),
    /// A command's deadline passed (its id): the watchdog's word.
    Overdue(String),
    /// The agent's stdout of the jail of this generation ended.
    AgentEnd(u64),
}

/// The relay's side of the session's jail of the moment (a rollback or a
/// commit starts a new one).
struct Current {
    child: crate::Child,
    generation: u64,
    events: std::thread::JoinHandle<()>,
}

/// Relay requests and events until the jail ends, watching each
/// command's deadline and answering the workspace requests; the jail's
/// outcome, and the command whose deadline passed when the watchdog
/// ended it.
fn relay(
    mut child: crate::Child,
    policy: &crate::Policy,
    layers: &mut Option<Layers>,
) -> Result<(crate::Outcome, Option<String>), String> {
    let began = std::time::Instant::now();
    let (Some(to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("session: the jail has no stdin or stdout pipe".into());
    };
    // Before any thread: every thread inherits the mask.
    sys::block_signals(&FORWARDED).map_err(|e| e.to_string())?;
    let supervisor = Arc::new(AtomicI32::new(child.id() as i32));
    let s = supervisor.clone();
    std::thread::spawn(move || {
        let set: SigSet = FORWARDED.iter().copied().collect();
        while let Ok(sig) = set.wait() {
            let _ = sys::kill(s.load(Ordering::SeqCst), sig as i32);
        }
    });
    let dog = Arc::new(Watchdog::default());
    let to_agent = Arc::new(Mutex::new(Some(to)));
    let (tx, rx) = channel();
    let (answered, wait_answer) = channel();
    let (d, t, a) = (dog.clone(), tx.clone(), to_agent.clone());
    std::thread::spawn(move || requests(&a, &d, &t, &wait_answer));
    let (d, t) = (dog.clone(), tx.clone());
    std::thread::spawn(move || {
        if let Some(id) = d.wait() {
            let _ = t.send(Heard::Overdue(id));
        }
    });
    let events = start_events(BufReader::new(from), &dog, &tx, 0);
    let mut cur = Current {
        child,
        generation: 0,
        events,
    };
    loop {
        let Ok(heard) = rx.recv() else {
            return Err("session: the relay's channel closed".into());
        };
        match heard {
            Heard::Overdue(id) => {
                if let Ok(k) = cur.child.killer() {
                    let _ = k.kill();
                }
                let o = cur.child.wait().map_err(|e| e.to_string())?;
                let _ = cur.events.join();
                dog.over();
                return Ok((o, Some(id)));
            }
            Heard::AgentEnd(g) if g == cur.generation => {
                let o = cur.child.wait().map_err(|e| e.to_string())?;
                let _ = cur.events.join();
                dog.over();
                return Ok((o, None));
            }
            Heard::AgentEnd(_) => {}
            Heard::Op(r) => {
                let ctx = Restart {
                    policy,
                    began,
                    dog: &dog,
                    tx: &tx,
                    to_agent: &to_agent,
                    supervisor: &supervisor,
                };
                let ended = on_op(&r, layers, &mut cur, &ctx);
                let _ = answered.send(());
                if let Some(o) = ended {
                    dog.over();
                    return Ok((o, None));
                }
            }
        }
    }
}

/// What a restart of the session's jail needs.
struct Restart<'a> {
    policy: &'a crate::Policy,
    /// When the session's first jail started (its lifetime runs on).
    began: std::time::Instant,
    dog: &'a Arc<Watchdog>,
    tx: &'a Sender<Heard>,
    to_agent: &'a Mutex<Option<std::fs::File>>,
    supervisor: &'a AtomicI32,
}

/// Answer a workspace request (see `session::workspace`): refused while
/// a command runs; a rollback or a commit ends the jail, writes, starts
/// it again. The outcome when the session ended on the way (its new jail
/// did not start).
fn on_op(
    r: &WsRequest,
    layers: &mut Option<Layers>,
    cur: &mut Current,
    ctx: &Restart,
) -> Option<crate::Outcome> {
    let Some(l) = layers.as_mut() else {
        emit(&workspace::no_overlay(r));
        return None;
    };
    if !ctx.dog.idle() {
        emit(&workspace::busy(r));
        return None;
    }
    if !r.op.restarts() || !l.knows(r) {
        emit(&l.answer(r));
        return None;
    }
    // The jail ends: its overlays are unmounted with it.
    if let Some(mut to) = lock(ctx.to_agent).take() {
        let _ = to.write_all(b"{\"op\":\"close\"}\n");
    }
    let ended = cur.child.wait();
    match ended {
        Ok(o) if !workspace::closed_as_asked(&o) => {
            emit(&workspace::ended_first(r, &o));
            return Some(o);
        }
        Err(e) => return Some(not_again(r, None, &e.to_string())),
        Ok(_) => {}
    }
    let answer = l.answer(r);
    let started = workspace::restart_policy(ctx.policy, ctx.began)
        .and_then(|p| spawn(&p))
        .map(|mut c| {
            let pipes = ready(&mut c);
            (c, pipes)
        });
    emit(&answer);
    match started {
        Ok((c, Ok((to, from)))) => {
            ctx.supervisor.store(c.id() as i32, Ordering::SeqCst);
            *lock(ctx.to_agent) = Some(to);
            let g = cur.generation + 1;
            let events = start_events(from, ctx.dog, ctx.tx, g);
            let old = std::mem::replace(
                cur,
                Current {
                    child: c,
                    generation: g,
                    events,
                },
            );
            let _ = old.events.join();
            None
        }
        Ok((mut c, Err(why))) => Some(not_again(r, c.wait().ok(), &why)),
        Err(why) => Some(not_again(r, None, &why)),
    }
}

/// The session's end when its jail did not start again after `r`.
fn not_again(r: &WsRequest, o: Option<crate::Outcome>, why: &str) -> crate::Outcome {
    let mut o = o.unwrap_or_else(|| {
        let mut o = crate::Outcome::new();
        o.status = crate::Status::SetupError;
        o.exit_code = 125;
        o
    });
    o.error.get_or_insert(format!(
        "session: the jail did not start again after {}: {why}",
        r.op.name()
    ));
    o
}

/// A jail started again: its pipes, once its agent said it is ready
/// (that event is not passed on: the request's answer says it).
fn ready(c: &mut crate::Child) -> Result<(std::fs::File, BufReader<std::fs::File>), String> {
    let (Some(to), Some(from)) = (c.stdin.take(), c.stdout.take()) else {
        return Err("the jail has no stdin or stdout pipe".into());
    };
    let mut from = BufReader::new(from);
    let mut line = String::new();
    let _ = from.read_line(&mut line);
    let ready: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
    if ready["event"] != "ready" {
        return Err("its agent did not start".into());
    }
    Ok((to, from))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Each request line from our stdin to the agent (a workspace request to
/// the relay's loop, its answer waited for); our stdin's end closes the
/// agent's stdin.
fn requests(
    to_agent: &Mutex<Option<std::fs::File>>,
    dog: &Watchdog,
    tx: &Sender<Heard>,
    answered: &Receiver<()>,
) {
    let stdin = std::io::stdin();
    let mut r = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        // The agent refuses (and skips) a longer line; no more is kept here.
        let limit = session::proto::MAX_LINE as u64 + 2;
        match r.by_ref().take(limit).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match workspace::parse(text) {
            Some(Ok(req)) => {
                if tx.send(Heard::Op(req)).is_err() || answered.recv().is_err() {
                    return;
                }
                continue;
            }
            Some(Err((id, why))) => {
                emit(&workspace::refused(id.as_deref(), "bad_request", &why));
                continue;
            }
            None => {}
        }
        dog.sent(text);
        let mut to = lock(to_agent);
        let Some(f) = to.as_mut() else { return };
        if f.write_all(&line).is_err() {
            return;
        }
    }
    lock(to_agent).take();
}

/// The events thread of the jail of generation `g`.
fn start_events(
    from: BufReader<std::fs::File>,
    dog: &Arc<Watchdog>,
    tx: &Sender<Heard>,
    g: u64,
) -> std::thread::JoinHandle<()> {
    let (d, t) = (dog.clone(), tx.clone());
    std::thread::spawn(move || {
        events(from, &d);
        let _ = t.send(Heard::AgentEnd(g));
    })
}
/// Each event line from the agent to our stdout, seen by the watchdog.
fn events(mut r: BufReader<std::fs::File>, dog: &Watchdog) {
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
        allow_host: a.allow_host.clone(),
        secret: a.secret.clone(),
        secret_file: a.secret_file.clone(),
        egress_ca: a.egress_ca.clone(),
        allow_http: a.allow_http.clone(),
        workdir: a.workdir.clone(),
        tmp_size: a.tmp_size.clone(),
        memory: a.memory.clone(),
        cpus: a.cpus.clone(),
        pids_limit: a.pids_limit.clone(),
        seccomp_allow: a.seccomp_allow.clone(),
        require: a.require.clone(),
        uid_range: a.uid_range.clone(),
        overlay_upper: a.overlay_upper.clone(),
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

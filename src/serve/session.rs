//! Sessions over HTTP (`/v1/sessions`): the registry of open sessions,
//! each a jail whose payload is the session agent (`crate::session`), and
//! the thread that reads its events and routes them to the exec waiting
//! for them.
//!
//! A session holds no run slot (it would starve runs for its lifetime);
//! `--max-sessions` caps how many are open at once. Its jail is spawned
//! through the library like a run's, its workdir made the same way. The
//! agent ends the session on `close`, on its idle timeout, or when its
//! stdin ends; the jail's limits (and the operator's lifetime cap) end it
//! otherwise. Each session's watchdog thread (`session::watchdog`) kills
//! the jail when a command's exit event is overdue (its timeout and
//! `SLACK`: the agent stopped or died), and the session ends as
//! `agent_unresponsive`. Once it ends, its id is forgotten (404).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::error::ApiError;
use super::request::{FileSpec, RunRequest};
use super::workdir;
use super::State;
use crate::session::watchdog::Watchdog;
use crate::session::workspace::{self as ws, Layers, Op, Request as WsRequest};
use crate::{Child, Jail, Killer, Policy, Stdio};

/// The id `current` holds while a workspace request is answered: no
/// exec gets in meanwhile (command ids are `c1`, `c2`, …).
const WORKSPACE: &str = "workspace";

/// Every open session, and the counters `/metrics` shows.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Open>>>,
    /// Told when a session is forgotten.
    gone: Condvar,
    /// Open or being opened (the cap counts both).
    reserved: AtomicUsize,
    created: AtomicU64,
    commands: AtomicU64,
    ended: Mutex<BTreeMap<String, u64>>,
}

/// One open session.
pub struct Open {
    pub id: String,
    stdin: Mutex<Option<std::fs::File>>,
    /// The exec being answered: its command id and where its events go.
    current: Mutex<Option<(String, super::mailbox::Sender)>>,
    /// Its jail's killer (a new one after a rollback or a commit).
    killer: Mutex<Killer>,
    /// Its overlays, when its request had a `workspace`.
    layers: Mutex<Option<Layers>>,
    /// The base's lock when the base allows commits (`:commit`): held
    /// while a commit is applied. None: `commit` is refused.
    commit_lock: Option<Arc<Mutex<()>>>,
    /// A rollback or a commit waiting for the jail to end: the reader
    /// thread answers it and starts the jail again.
    restart: Mutex<Option<Pending>>,
    /// Asked to end (`DELETE`, the server's shutdown): a jail ended for a
    /// rollback or a commit is not started again.
    closing: AtomicBool,
    next_command: AtomicU64,
    /// The `end` event once the session is over.
    end: watch::Receiver<Option<Value>>,
    /// Every command's deadline, seen from here.
    watchdog: Watchdog,
    /// The command whose deadline passed, when the watchdog killed the jail.
    overdue: Mutex<Option<String>>,
}

/// A workspace request that restarts the jail, and where its answer goes.
struct Pending {
    req: WsRequest,
    reply: std::sync::mpsc::Sender<Value>,
}

/// A session's workspace, as its request set it up.
#[derive(Default)]
pub struct SessionWorkspace {
    pub layers: Option<Layers>,
    pub commit_lock: Option<Arc<Mutex<()>>>,
    /// `{"base", "at"}`, for the created session's answer.
    pub shown: Option<Value>,
}

/// What `POST /v1/sessions` asked for.
pub struct Create {
    pub run: RunRequest,
    pub idle: Duration,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sessions {
    pub fn get(&self, id: &str) -> Option<Arc<Open>> {
        lock(&self.map).get(id).cloned()
    }

    /// A place under `--max-sessions`, or 429.
    pub fn reserve(&self, max: usize) -> Result<Reservation<'_>, ApiError> {
        if self.reserved.fetch_add(1, Ordering::SeqCst) >= max {
            self.reserved.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::too_many_sessions(max));
        }
        Ok(Reservation(self))
    }

    pub fn command_started(&self) {
        self.commands.fetch_add(1, Ordering::Relaxed);
    }

    /// Kill every session and wait until each is over (its workdir
    /// removed): the server's last step.
    pub fn shutdown(&self) {
        let mut map = lock(&self.map);
        for s in map.values() {
            s.closing.store(true, Ordering::SeqCst);
            let _ = lock(&s.killer).kill();
        }
        while !map.is_empty() {
            map = self.gone.wait(map).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The session lines of `/metrics`.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let open = lock(&self.map).len();
        let _ = writeln!(o, "# HELP stockade_sessions_open Sessions open now.");
        let _ = writeln!(o, "# TYPE stockade_sessions_open gauge");
        let _ = writeln!(o, "stockade_sessions_open {open}");
        let _ = writeln!(o, "# HELP stockade_sessions_created_total Sessions opened.");
        let _ = writeln!(o, "# TYPE stockade_sessions_created_total counter");
        let created = self.created.load(Ordering::Relaxed);
        let _ = writeln!(o, "stockade_sessions_created_total {created}");
        let _ = writeln!(
            o,
            "# HELP stockade_sessions_ended_total Sessions ended, by reason."
        );
        let _ = writeln!(o, "# TYPE stockade_sessions_ended_total counter");
        for (r, n) in lock(&self.ended).iter() {
            let _ = writeln!(o, "stockade_sessions_ended_total{{reason=\"{r}\"}} {n}");
        }
        let _ = writeln!(
            o,
            "# HELP stockade_session_commands_total Commands run in sessions."
        );
        let _ = writeln!(o, "# TYPE stockade_session_commands_total counter");
        let commands = self.commands.load(Ordering::Relaxed);
        let _ = writeln!(o, "stockade_session_commands_total {commands}");
        o
    }

    fn forget(&self, id: &str, reason: &str) {
        // Gone from the map before it is counted: whoever sees the count
        // finds it gone (404).
        let mut map = lock(&self.map);
        if map.remove(id).is_some() {
            self.reserved.fetch_sub(1, Ordering::SeqCst);
        }
        *lock(&self.ended).entry(reason.to_string()).or_default() += 1;
        self.gone.notify_all();
    }
}

/// A place under the cap, given back unless a session takes it.
pub struct Reservation<'a>(&'a Sessions);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.reserved.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Reservation<'_> {
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Open {
    /// Write one request line to the agent.
    pub fn send(&self, line: &Value) -> Result<(), ApiError> {
        let mut stdin = lock(&self.stdin);
        let f = stdin.as_mut().ok_or_else(ApiError::session_ended)?;
        let text = line.to_string();
        self.watchdog.sent(text.as_bytes());
        f.write_all(format!("{text}\n").as_bytes())
            .map_err(|_| ApiError::session_ended())
    }

    /// Become the exec that gets command `id`'s events (409 while another
    /// runs).
    pub fn subscribe(&self, id: &str) -> Result<super::mailbox::Receiver, ApiError> {
        let mut cur = lock(&self.current);
        if cur.is_some() {
            return Err(ApiError::busy());
        }
        if self.end.borrow().is_some() {
            return Err(ApiError::session_ended());
        }
        let (tx, rx) = super::mailbox::new(id);
        *cur = Some((id.to_string(), tx));
        Ok(rx)
    }

    /// The exec went away before its command ended: interrupt it. The
    /// next exec gets in once its exit event has come (409 until then).
    pub fn abandon(&self, id: &str) {
        let _ = self.send(&json!({"op": "interrupt", "id": id}));
    }

    pub fn next_command_id(&self) -> String {
        format!("c{}", self.next_command.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Answer a workspace request (`session::workspace`; blocking): no
    /// exec starts meanwhile, and none may be running (409). A rollback
    /// or a commit ends the jail, and the reader thread answers it and
    /// starts the jail again.
    pub fn workspace(&self, r: WsRequest) -> Result<Value, ApiError> {
        {
            let mut cur = lock(&self.current);
            if cur.is_some() {
                return Err(to_error(&ws::busy(&r)));
            }
            if self.end.borrow().is_some() {
                return Err(ApiError::session_ended());
            }
            let (tx, _) = super::mailbox::new(WORKSPACE);
            *cur = Some((WORKSPACE.to_string(), tx));
        }
        let ev = self.workspace_marked(&r);
        let mut cur = lock(&self.current);
        if cur.as_ref().is_some_and(|(id, _)| id == WORKSPACE) {
            *cur = None;
        }
        drop(cur);
        if ev["event"] == "error" {
            return Err(to_error(&ev));
        }
        let mut v = ev;
        if let Some(o) = v.as_object_mut() {
            o.remove("event");
            o.remove("id");
        }
        Ok(v)
    }

    fn workspace_marked(&self, r: &WsRequest) -> Value {
        let mut layers = lock(&self.layers);
        let Some(l) = layers.as_mut() else {
            return ws::no_overlay(r);
        };
        if r.op == Op::Commit && self.commit_lock.is_none() {
            let m = "commit: the session's base is read-only here (the operator allows commits with --workspace-base NAME=DIR:commit)";
            return ws::refused(r.id.as_deref(), "commit_refused", m);
        }
        if !r.op.restarts() || !l.knows(r) {
            return l.answer(r);
        }
        drop(layers);
        let (tx, rx) = std::sync::mpsc::channel();
        *lock(&self.restart) = Some(Pending {
            req: r.clone(),
            reply: tx,
        });
        if self.send(&json!({"op": "close"})).is_err() {
            lock(&self.restart).take();
        }
        rx.recv().unwrap_or_else(|_| {
            let m = format!("the session ended before its {} was made", r.op.name());
            ws::refused(r.id.as_deref(), "session_ended", &m)
        })
    }

    /// Ask the agent to close; the end event once the session is over.
    pub async fn close(&self) -> Value {
        self.closing.store(true, Ordering::SeqCst);
        let _ = self.send(&json!({"op": "close"}));
        let mut end = self.end.clone();
        let v = end
            .wait_for(Option::is_some)
            .await
            .map(|v| v.clone().unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        v
    }
}

/// Start the session (on a blocking thread): its jail up and its agent
/// ready, then the thread that reads its events. The ready event.
pub fn open(
    state: Arc<State>,
    policy: Policy,
    files: Vec<FileSpec>,
    id: String,
    workspace: SessionWorkspace,
) -> Result<Value, ApiError> {
    let SessionWorkspace {
        layers,
        commit_lock,
        ..
    } = workspace;
    let mut layers = layers;
    let ready = start(&state, policy, files, id, commit_lock, &mut layers);
    // Not taken by the session: it did not start.
    if let Some(l) = layers {
        l.finish();
    }
    ready
}

fn start(
    state: &Arc<State>,
    policy: Policy,
    files: Vec<FileSpec>,
    id: String,
    commit_lock: Option<Arc<Mutex<()>>>,
    layers: &mut Option<Layers>,
) -> Result<Value, ApiError> {
    let state = state.clone();
    let reservation = state.sessions.reserve(state.max.sessions)?;
    workdir::check_files(&files)?;
    let mut policy = policy;
    policy.workdir.files = workdir::seed(&files);
    let mut child = Jail::new(policy.clone())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| ApiError::internal(format!("starting the session's jail: {e}")))?;
    let killer = child
        .killer()
        .map_err(|e| ApiError::internal(format!("starting the session's jail: {e}")))?;
    let mut out = BufReader::new(child.stdout.take().ok_or_else(no_pipe)?);
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    let ready: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    if ready["event"] != "ready" {
        return Err(not_started(&mut child));
    }
    let (end_tx, end_rx) = watch::channel(None);
    let open = Arc::new(Open {
        id: id.clone(),
        stdin: Mutex::new(child.stdin.take()),
        current: Mutex::new(None),
        killer: Mutex::new(killer),
        layers: Mutex::new(layers.take()),
        commit_lock,
        restart: Mutex::new(None),
        closing: AtomicBool::new(false),
        next_command: AtomicU64::new(0),
        end: end_rx,
        watchdog: Watchdog::default(),
        overdue: Mutex::new(None),
    });
    lock(&state.sessions.map).insert(id, open.clone());
    reservation.keep();
    state.sessions.created.fetch_add(1, Ordering::Relaxed);
    let run = Actor {
        state,
        open,
        child,
        out,
        end_tx,
        policy,
        began: std::time::Instant::now(),
    };
    let dog = run.open.clone();
    std::thread::spawn(move || {
        if let Some(id) = dog.watchdog.wait() {
            *lock(&dog.overdue) = Some(id);
            let _ = lock(&dog.killer).kill();
        }
    });
    std::thread::spawn(move || run.run());
    Ok(ready)
}

/// A workspace request's error event as the server's error.
fn to_error(ev: &Value) -> ApiError {
    ApiError::workspace(
        ev["error"]["code"].as_str().unwrap_or_default(),
        ev["error"]["message"].as_str().unwrap_or_default(),
    )
}

fn no_pipe() -> ApiError {
    ApiError::internal("the session's jail has no stdout pipe")
}

/// The jail ended before its agent was ready: why, from its outcome.
fn not_started(child: &mut Child) -> ApiError {
    match child.wait() {
        Ok(o) => ApiError::internal(format!(
            "the session's jail ended before it was ready: {}",
            o.error.unwrap_or_else(|| format!("{:?}", o.status))
        )),
        Err(e) => ApiError::internal(format!("the session's jail: {e}")),
    }
}

/// The thread that owns a session's jail: reads its events to the end,
/// then waits for its outcome.
struct Actor {
    state: Arc<State>,
    open: Arc<Open>,
    child: Child,
    out: BufReader<std::fs::File>,
    end_tx: watch::Sender<Option<Value>>,
    /// The jail's policy, for a start again after a rollback or a commit.
    policy: Policy,
    /// When the session's first jail started (its lifetime runs on).
    began: std::time::Instant,
}

impl Actor {
    fn run(mut self) {
        let outcome = loop {
            self.read_events();
            let Some(p) = lock(&self.open.restart).take() else {
                drop(lock(&self.open.stdin).take());
                break self.child.wait().map_err(|e| e.to_string());
            };
            if let Some(o) = self.restart(p) {
                break o;
            }
        };
        self.end(outcome);
    }

    fn read_events(&mut self) {
        let mut line = String::new();
        loop {
            line.clear();
            match self.out.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if let Ok(ev) = serde_json::from_str::<Value>(&line) {
                self.open.watchdog.event(&ev);
                self.route(ev);
            }
        }
    }

    /// The jail has ended for a rollback or a commit: the layers written,
    /// the request answered, the jail started again on them. Its outcome
    /// when it did not start (the session ends).
    fn restart(&mut self, p: Pending) -> Option<Result<crate::Outcome, String>> {
        drop(lock(&self.open.stdin).take());
        let ended = self.child.wait().map_err(|e| e.to_string());
        if let Some(o) = ended.as_ref().ok().filter(|o| !ws::closed_as_asked(o)) {
            // It ended on its own meanwhile: so does the session.
            let _ = p.reply.send(ws::ended_first(&p.req, o));
            return Some(ended);
        }
        let answer = {
            let held = match (&p.req.op, &self.open.commit_lock) {
                (Op::Commit, Some(l)) => Some(lock(l)),
                _ => None,
            };
            let a = lock(&self.open.layers).as_mut().map(|l| l.answer(&p.req));
            drop(held);
            a.unwrap_or_default()
        };
        if self.open.closing.load(Ordering::SeqCst) {
            // Closed meanwhile: the session ends with the jail it had.
            let _ = p.reply.send(answer);
            return Some(ended);
        }
        // Answered once the jail is up again: the next exec finds it.
        let again = self.start_again();
        if again.is_ok() && self.open.closing.load(Ordering::SeqCst) {
            // Closed while it started: its close went nowhere.
            let _ = self.open.send(&json!({"op": "close"}));
        }
        let _ = p.reply.send(answer);
        again.err().map(|o| *o)
    }

    /// The jail started again on its layers, its pipes and killer in
    /// place; its outcome when it did not start.
    fn start_again(&mut self) -> Result<(), Box<Result<crate::Outcome, String>>> {
        let policy = ws::restart_policy(&self.policy, self.began).map_err(|e| Box::new(Err(e)))?;
        let mut child = Jail::new(policy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Box::new(Err(format!("starting the session's jail again: {e}"))))?;
        let (Ok(killer), Some(out)) = (child.killer(), child.stdout.take()) else {
            return Err(Box::new(child.wait().map_err(|e| e.to_string())));
        };
        let mut out = BufReader::new(out);
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let ready: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if ready["event"] != "ready" {
            return Err(Box::new(child.wait().map_err(|e| e.to_string())));
        }
        *lock(&self.open.stdin) = child.stdin.take();
        *lock(&self.open.killer) = killer;
        self.out = out;
        self.child = child;
        Ok(())
    }

    fn end(self, outcome: Result<crate::Outcome, String>) {
        self.open.watchdog.over();
        if let Some(l) = lock(&self.open.layers).take() {
            l.finish();
        }
        let overdue = lock(&self.open.overdue).take();
        let end = match (outcome, overdue) {
            (Ok(o), Some(id)) => {
                eprintln!(
                    "stockade: session {}: {}",
                    self.open.id,
                    crate::session::watchdog::unresponsive_message(&id)
                );
                crate::session::end_event_unresponsive(&o)
            }
            (Ok(o), None) => crate::session::end_event(&o),
            (Err(e), _) => json!({"event": "end", "reason": "error", "error": e}),
        };
        let reason = end["reason"].as_str().unwrap_or("error").to_string();
        // Everything let go of before anyone hears of the end.
        drop(self.child);
        self.state.sessions.forget(&self.open.id, &reason);
        if let Some((_, tx)) = lock(&self.open.current).take() {
            tx.put(end.clone());
        }
        let _ = self.end_tx.send(Some(end));
    }

    /// An event to the exec waiting for its command.
    fn route(&self, ev: Value) {
        let mut cur = lock(&self.open.current);
        let Some((id, tx)) = cur.as_ref() else {
            return;
        };
        if ev["id"] != id.as_str() {
            return;
        }
        let last = ev["event"] == "exit" || ev["event"] == "error";
        // Never waits: a client that does not read costs the mailbox's
        // bound, and the agent is read on.
        tx.put(ev);
        if last {
            *cur = None;
        }
    }
}

/// The jail of a session: `req`'s profile and clamped limits, the agent
/// as its payload, the operator's idle timeout and lifetime.
pub fn policy(
    state: &State,
    c: &Create,
    id: &str,
) -> Result<(Policy, super::run::Applied, SessionWorkspace), ApiError> {
    let (mut p, applied) = super::run::policy_for(state, &c.run, true)?;
    let mut w = workspace(state, c, &mut p)?;
    let p = crate::session::policy::session_policy(
        p,
        id,
        Some(c.idle),
        Some(state.max.session_lifetime),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()));
    match p {
        Ok(p) => Ok((p, applied, w)),
        Err(e) => {
            if let Some(l) = w.layers.take() {
                l.finish();
            }
            Err(e)
        }
    }
}

/// The request's `workspace` (`base` and `at`; a session commits with its
/// `commit` request, when the base allows it) as an overlay of `p`, its
/// upper layer kept where the server can reach it.
fn workspace(state: &State, c: &Create, p: &mut Policy) -> Result<SessionWorkspace, ApiError> {
    let Some(ask) = c.run.workspace.clone() else {
        return Ok(SessionWorkspace::default());
    };
    if ask.commit != crate::policy::Commit::Never {
        return Err(ApiError::field(
            "workspace.commit",
            "a session commits with POST /v1/sessions/{id}/commit (where its base allows commits)",
        ));
    }
    if ask.diff {
        return Err(ApiError::field(
            "workspace.diff",
            "a session lists its changes with POST /v1/sessions/{id}/changes",
        ));
    }
    let shown = json!({"base": ask.base, "at": ask.at});
    super::workspace::apply(&state.bases, Some(ask.clone()), p)?;
    let commit_lock = state
        .bases
        .iter()
        .find(|b| b.name == ask.base && b.commit)
        .map(|b| b.lock.clone());
    let layers = Layers::prepare(p).map_err(|e| ApiError::internal(format!("workspace: {e}")))?;
    Ok(SessionWorkspace {
        layers,
        commit_lock,
        shown: Some(shown),
    })
}

/// `POST /v1/sessions`'s body: the run request's `profile`, `env`,
/// `files`, `limits` (memory, cpus, pids) and `secrets`, and `idle_timeout`
/// (seconds, cut to the operator's).
pub fn parse_create(body: &[u8], state: &State) -> Result<Create, ApiError> {
    let mut v = super::body::json(body)?;
    let Some(obj) = v.as_object_mut() else {
        return Err(ApiError::field("body", "must be a JSON object"));
    };
    let idle = super::clamp::read(
        "idle_timeout",
        super::clamp::DURATION,
        obj.remove("idle_timeout").as_ref(),
    )?;
    let (idle, _) = super::clamp::clamp(idle, None, state.max.session_idle);
    if let Some(k) = obj.keys().find(|k| {
        !["profile", "env", "files", "limits", "workspace", "secrets"].contains(&k.as_str())
    }) {
        return Err(ApiError::field(k.clone(), "unknown field"));
    }
    if let Some(Value::Object(l)) = obj.get("limits") {
        if let Some(k) = l
            .keys()
            .find(|k| !["memory", "cpus", "pids"].contains(&k.as_str()))
        {
            let why =
                "not a session limit (memory, cpus, pids; timeout and max_output are per command)";
            return Err(ApiError::field(format!("limits.{k}"), why));
        }
    }
    obj.insert("argv".into(), json!([crate::session::AGENT_ARG]));
    let run = super::request::parse(v.to_string().as_bytes(), state.max.files)?;
    Ok(Create { run, idle })
}

/// `POST /v1/sessions/{id}/exec`'s body as the agent's request line:
/// `command`, `timeout` (seconds, default 60, cut to `--max-timeout`),
/// `max_output` (cut to `--max-output`), `stdin`.
pub fn exec_line(body: &[u8], state: &State, id: &str) -> Result<Value, ApiError> {
    let v = super::body::json(body)?;
    let Value::Object(mut obj) = v else {
        return Err(ApiError::field("body", "must be a JSON object"));
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !["command", "timeout", "max_output", "stdin"].contains(&k.as_str()))
    {
        return Err(ApiError::field(k.clone(), "unknown field"));
    }
    // Read and clamped here, whatever the JSON type: the agent gets a
    // number within the operator's ceilings, never a null or a string.
    use super::clamp::{clamp, read, DURATION, SIZE};
    let t = read("timeout", DURATION, obj.get("timeout"))?;
    let default_t = Duration::from_secs_f64(crate::session::proto::DEFAULT_TIMEOUT);
    let (t, _) = clamp(t, Some(default_t), state.max.timeout);
    obj.insert("timeout".into(), json!(t.as_secs_f64()));
    let m = read("max_output", SIZE, obj.get("max_output"))?;
    let (m, _) = clamp(m, None, state.max.max_output);
    obj.insert("max_output".into(), json!(m));
    obj.insert("op".into(), json!("exec"));
    obj.insert("id".into(), json!(id));
    let line = Value::Object(obj);
    let text = line.to_string();
    if text.len() > crate::session::proto::MAX_LINE {
        let max = crate::session::proto::MAX_LINE;
        return Err(ApiError::too_large(format!(
            "body: the request line would be longer than {max} bytes"
        )));
    }
    crate::session::proto::parse(text.as_bytes()).map_err(ApiError::bad_request)?;
    Ok(line)
}

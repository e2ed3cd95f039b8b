//! One request's run: its policy (profile, limits clamped to the
//! operator's maxima), admission (run slots, the bounded queue), and the
//! jail started and waited for on a blocking thread that, once started,
//! always sees the run to its end: the outcome, the workdir removed, the
//! metrics, the slot given back, whatever became of the request.

use std::ffi::OsString;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::error::ApiError;
use super::pool::{Miss, Taken};
use super::request::{FileSpec, RunRequest};
use super::workdir;
use super::State;
use crate::policy::{self, Policy};
use crate::{Child, Jail, Killer, Outcome, Stdio};

/// What was applied to a run, for the response.
#[derive(Debug, Clone)]
pub struct Applied {
    pub profile: String,
    pub memory: u64,
    pub cpus: f64,
    pub pids: u64,
    pub timeout: f64,
    pub max_output: u64,
    /// The limits asked for above the operator's maxima (cut to them).
    pub clamped: Vec<&'static str>,
    /// Whether a warm jail ran it, or why none did (once it started).
    pub pool: Option<Result<(), Miss>>,
    /// The run's workspace, when it asked for one (the response's
    /// `workspace`); its diff file goes with the last copy.
    pub workspace: Option<Arc<super::workspace::Held>>,
    /// The secrets bound to the run (names and hosts, never a value).
    pub secrets: Vec<crate::policy::egress::Secret>,
}

impl Applied {
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "profile": self.profile,
            "limits": {
                "memory": self.memory,
                "cpus": self.cpus,
                "pids": self.pids,
                "timeout": self.timeout,
                "max_output": self.max_output,
            },
            "clamped": self.clamped,
        });
        if !self.secrets.is_empty() {
            v["secrets"] = super::secrets::to_json(&self.secrets);
        }
        match self.pool {
            Some(Ok(())) => v["pool"] = serde_json::json!({ "hit": true }),
            Some(Err(m)) => v["pool"] = serde_json::json!({ "hit": false, "reason": m.name() }),
            None => {}
        }
        v
    }
}

/// [`super::clamp::clamp`], noting `name` when the ask was cut.
fn clamp<T: PartialOrd + Copy>(
    name: &'static str,
    asked: Option<T>,
    profile: Option<T>,
    max: T,
    clamped: &mut Vec<&'static str>,
) -> T {
    let (v, cut) = super::clamp::clamp(asked, profile, max);
    if cut {
        clamped.push(name);
    }
    v
}

/// The policy for `req` (workdir still unset) and what it applies.
pub fn policy_for(
    state: &State,
    req: &RunRequest,
    stream: bool,
) -> Result<(Policy, Applied), ApiError> {
    policy_with(&state.profiles, &state.max, &state.secrets, req, stream)
}

/// [`policy_for`] with the allowed profiles, the operator's bounds and
/// secrets.
pub fn policy_with(
    profiles: &[(String, Policy)],
    m: &super::Max,
    declared: &super::secrets::Declared,
    req: &RunRequest,
    stream: bool,
) -> Result<(Policy, Applied), ApiError> {
    let name = req.profile.clone().unwrap_or_else(|| profiles[0].0.clone());
    let Some((_, base)) = profiles.iter().find(|(n, _)| *n == name) else {
        let names: Vec<String> = profiles.iter().map(|(n, _)| n.clone()).collect();
        return Err(ApiError::unknown_profile(&name, &names));
    };
    let mut p = base.clone();
    p.argv = req.argv.iter().map(OsString::from).collect();
    for (k, v) in &req.env {
        policy::set_env(&mut p.env, k.into(), v.into());
    }
    let secrets = declared.bind(&req.secrets, &name, &mut p)?;
    let r = &req.limits;
    let mut clamped = Vec::new();
    let l = &p.limits;
    let memory = clamp("memory", r.memory, l.memory, m.memory, &mut clamped);
    let cpus = clamp("cpus", r.cpus, l.cpus, m.cpus, &mut clamped);
    let pids = clamp("pids", r.pids, l.pids, m.pids, &mut clamped);
    let timeout = clamp("timeout", r.timeout, l.timeout, m.timeout, &mut clamped);
    let max_output = clamp(
        "max_output",
        r.max_output,
        l.max_output,
        m.max_output,
        &mut clamped,
    );
    // The workdir: a tmpfs in the jail, charged to the run's memory, of
    // the operator's size or the memory limit's; the request's files
    // count against it (in the fallback, the metered run directory, which
    // holds /tmp too, gets the same cap).
    let workdir = m.workdir.unwrap_or(memory);
    let files: u64 = req.files.iter().map(|f| f.content.len() as u64).sum();
    if files > workdir {
        return Err(ApiError::too_large(format!(
            "files: {files} bytes; the workdir holds {workdir} (--max-workdir, else the memory limit)"
        )));
    }
    p.workdir.host = None;
    p.workdir.size = workdir;
    p.workdir.full_ends_run = true;
    p.tmp_size = p.tmp_size.min(workdir);
    let l = &mut p.limits;
    l.memory = Some(memory);
    l.cpus = Some(cpus);
    l.pids = Some(pids);
    l.timeout = Some(timeout);
    l.max_output = Some(max_output);
    // Captured into the outcome, or streamed from pipes as it comes.
    p.capture = !stream;
    let applied = Applied {
        profile: name,
        memory,
        cpus,
        pids,
        timeout: timeout.as_secs_f64(),
        max_output,
        clamped,
        pool: None,
        workspace: None,
        secrets,
    };
    Ok((p, applied))
}

/// A place in the run slots or the queue before them; given back on drop.
pub struct Admission {
    state: Arc<State>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.state.admitted.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.state.idle.notify_waiters();
        }
    }
}

/// Admit a request (503 while draining, 429 when the slots and the queue
/// are full) and wait for a run slot.
pub async fn admit(
    state: &Arc<State>,
) -> Result<(Admission, tokio::sync::OwnedSemaphorePermit), ApiError> {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::shutting_down());
    }
    let cap = state.max.concurrent + state.max.queue;
    if state.admitted.fetch_add(1, Ordering::SeqCst) >= cap {
        state.admitted.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::queue_full(state.max.queue));
    }
    let admission = Admission {
        state: state.clone(),
    };
    state.metrics.queued.fetch_add(1, Ordering::SeqCst);
    let permit = state.slots.clone().acquire_owned().await;
    state.metrics.queued.fetch_sub(1, Ordering::SeqCst);
    let permit = permit.map_err(|_| ApiError::shutting_down())?;
    if state.killing.load(Ordering::SeqCst) {
        return Err(ApiError::shutting_down());
    }
    Ok((admission, permit))
}

/// Kills the jail when dropped, unless the run was seen to its end: the
/// request went away (client disconnect) before its answer was sent.
pub struct KillGuard {
    killer: Arc<Killer>,
    armed: bool,
}

impl KillGuard {
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.killer.kill();
        }
    }
}

/// A started run, as the request sees it.
pub struct Started {
    pub guard: KillGuard,
    pub stdin: Option<std::fs::File>,
    pub stdout: Option<std::fs::File>,
    pub stderr: Option<std::fs::File>,
    pub done: oneshot::Receiver<Result<Outcome, String>>,
    /// Whether a warm jail runs it, or why none does.
    pub pool: Result<(), Miss>,
}

/// Everything the blocking side needs for one run.
pub struct Job {
    pub state: Arc<State>,
    pub policy: Policy,
    /// The profile's name (the metrics' label).
    pub profile: String,
    pub files: Vec<FileSpec>,
    pub stdin: bool,
    pub stream: bool,
    pub admission: Admission,
    pub permit: tokio::sync::OwnedSemaphorePermit,
    /// The run's workspace: kept until the run ended (its diff file is
    /// written then, whoever still waits), its base's lock held meanwhile
    /// when the run may commit.
    pub workspace: Option<Arc<super::workspace::Held>>,
}

/// A started run: a jail of its own, or a fork server's child.
enum Running {
    Jail(Box<Child>),
    Fork(Box<crate::zygote::Forked>),
}

/// The jail for `policy`: a warm pool's member (or a fork server's
/// child) when one can run it exactly as a cold jail would (a hit), else
/// a cold one (a miss, and why).
fn launch(
    state: &State,
    mut policy: Policy,
    profile: &str,
    files: &[FileSpec],
    stdin: bool,
    stream: bool,
) -> Result<(Running, Result<(), Miss>), ApiError> {
    workdir::check_files(files)?;
    // A fork server found gone as it was asked (its zygote killed): once
    // more, from the pool's next one.
    let mut again = true;
    let miss = loop {
        break match state.pool.take(profile, &policy) {
            Ok((Taken::Member { member, limits }, env)) => {
                match member.hand_over(&policy, &env, files, stdin, stream, limits)? {
                    Some(c) => {
                        state.pool.hit(profile);
                        return Ok((Running::Jail(Box::new(c)), Ok(())));
                    }
                    // Its run cgroup could not take the run's limits (the
                    // member is gone): a cold jail.
                    None => {
                        eprintln!(
                            "stockade: serve: warning: warm pool {profile}: a member's run cgroup could not take the run's limits; the run is a cold one"
                        );
                        Miss::Limits
                    }
                }
            }
            Ok((Taken::Fork(server), env)) => {
                let input = super::warm::fork_input(&policy.argv, &env, files);
                match server.run(&policy, &input, stdin) {
                    Ok(f) => {
                        state.pool.hit(profile);
                        return Ok((Running::Fork(Box::new(f)), Ok(())));
                    }
                    // The fork server went away meanwhile (the pool starts
                    // another), or could not make this run's cgroup: this run
                    // is a cold one.
                    Err(e) => {
                        eprintln!(
                            "stockade: serve: warning: warm pool {profile}: the fork server could not start a run: {e}"
                        );
                        match server.alive() {
                            true => Miss::StartFailed,
                            false if again => {
                                again = false;
                                continue;
                            }
                            false => Miss::ForkServerDown,
                        }
                    }
                }
            }
            Err(m) => m,
        };
    };
    state.metrics.pool_missed(profile, miss);
    // Written by the jail itself into its own workdir (a tmpfs of the
    // run's, or the fallback's metered run directory).
    policy.workdir.files = workdir::seed(files);
    let pipe = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
    let spawned = Jail::new(policy)
        .stdin(pipe(stdin))
        .stdout(pipe(stream))
        .stderr(pipe(stream))
        .spawn();
    match spawned {
        Ok(c) => Ok((Running::Jail(Box::new(c)), Err(miss))),
        Err(crate::Error::Policy(e)) => Err(policy_error(&e)),
        Err(e) => Err(ApiError::internal(format!("starting the jail: {e}"))),
    }
}

/// A refused policy as a 400 naming its origin, with the text after the
/// origin (for a profile's field, the field and why).
fn policy_error(e: &crate::PolicyError) -> ApiError {
    let text = e.to_string();
    let why = text
        .strip_prefix(e.origin())
        .and_then(|t| t.strip_prefix(": "))
        .unwrap_or(&text);
    ApiError::field(e.origin(), why)
}

/// Start the run on a blocking thread; answer once the jail is started.
pub async fn start(job: Job) -> Result<Started, ApiError> {
    let (started_tx, started_rx) = oneshot::channel();
    tokio::task::spawn_blocking(move || run_blocking(job, started_tx));
    started_rx
        .await
        .unwrap_or_else(|_| Err(ApiError::internal("the run's thread ended early")))
}

type StartedTx = oneshot::Sender<Result<Started, ApiError>>;

fn run_blocking(job: Job, started_tx: StartedTx) {
    let Job {
        state,
        policy,
        profile,
        files,
        stdin,
        stream,
        admission,
        permit,
        workspace,
    } = job;
    // Commits to one base, one at a time: held until the run (and its
    // commit, made before its outcome comes back) is over.
    let commit_lock = workspace.as_ref().and_then(|w| w.commit_lock());
    let _commit = commit_lock
        .as_ref()
        .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
    let (mut running, pool) = match launch(&state, policy, &profile, &files, stdin, stream) {
        Ok(c) => c,
        Err(e) => {
            let _ = started_tx.send(Err(e));
            return;
        }
    };
    let t0 = Instant::now();
    let killer = match &mut running {
        Running::Jail(child) => child.killer().map_err(|e| e.to_string()),
        Running::Fork(f) => f.killer().ok_or_else(|| "no killer".to_string()),
    };
    let killer = match killer {
        Ok(k) => Arc::new(k),
        Err(e) => {
            let _ = started_tx.send(Err(ApiError::internal(format!("starting the jail: {e}"))));
            return; // dropping the child kills the jail
        }
    };
    state.metrics.in_flight.fetch_add(1, Ordering::SeqCst);
    let id = state.register(killer.clone());
    let (done_tx, done_rx) = oneshot::channel();
    let (stdin, stdout, stderr) = match &mut running {
        Running::Jail(child) => (child.stdin.take(), child.stdout.take(), child.stderr.take()),
        Running::Fork(f) => (f.stdin.take(), f.stdout.take(), f.stderr.take()),
    };
    let started = Started {
        guard: KillGuard {
            killer: killer.clone(),
            armed: true,
        },
        stdin,
        stdout,
        stderr,
        done: done_rx,
        pool,
    };
    if let Err(Ok(started)) = started_tx.send(Ok(started)) {
        // Nobody waits for it any more.
        drop(started);
    }
    let outcome = match running {
        Running::Jail(mut child) => child.wait().map_err(|e| e.to_string()),
        Running::Fork(f) => Ok(f.wait()),
    };
    state.unregister(id);
    state.metrics.in_flight.fetch_sub(1, Ordering::SeqCst);
    let status = match &outcome {
        Ok(o) => serde_json::to_value(o.status)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
        Err(_) => "error".into(),
    };
    state.metrics.run_ended(&status, t0.elapsed());
    drop(permit);
    drop(admission);
    let _ = done_tx.send(outcome);
}

//! `stockade serve`: runs over HTTP/JSON, each request in its own fresh
//! jail, for a sidecar, a local service or a Deployment behind a Service.
//!
//! Start-up order matters: the spawner (the single-threaded process that
//! clones jails) is forked first, while this process has one thread; then
//! the allowed profiles are resolved once (Python discovery may run the
//! interpreter), the socket is bound, and this process confines itself
//! (no_new_privs, a seccomp deny list that forbids exec, namespaces,
//! mounts, tracing); only then is the tokio runtime, and its threads,
//! built. Jails are started through the library's public API
//! ([`crate::Jail::spawn`]), waited for on blocking threads.

mod accept;
mod args;
mod b64;
mod body;
mod clamp;
mod confine;
mod error;
mod http;
mod listen;
mod mailbox;
mod metrics;
mod pool;
mod request;
mod run;
mod secrets;
mod session;
mod session_http;
mod stream;
mod warm;
mod workdir;
mod workspace;

pub use args::ServeArgs;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::policy::{profile, Policy};
use crate::Killer;

/// The operator's bounds.
#[derive(Debug, Clone)]
pub struct Max {
    pub memory: u64,
    pub cpus: f64,
    pub pids: u64,
    pub timeout: Duration,
    pub max_output: u64,
    /// Each workdir's size (`--max-workdir`); else the run's memory limit.
    pub workdir: Option<u64>,
    pub concurrent: usize,
    pub queue: usize,
    pub body: u64,
    pub files: usize,
    /// Sessions open at once; a session's idle timeout (and its default)
    /// and its whole life.
    pub sessions: usize,
    pub session_idle: Duration,
    pub session_lifetime: Duration,
    /// Connections: in all, per TCP client, and the head's deadline.
    pub connections: accept::Limits,
}

/// What every request handler shares.
pub struct State {
    pub max: Max,
    /// The allowed profiles, resolved at start-up; the first is the default.
    pub profiles: Vec<(String, Policy)>,
    pub token: Option<Vec<u8>>,
    pub slots: Arc<tokio::sync::Semaphore>,
    /// Requests holding a run slot or waiting for one.
    pub admitted: AtomicUsize,
    /// Told when `admitted` drops to 0.
    pub idle: tokio::sync::Notify,
    pub metrics: metrics::Metrics,
    pub pool: pool::Pool,
    /// SIGTERM seen: no new requests.
    pub draining: AtomicBool,
    /// The drain timeout passed: every run is being killed.
    pub killing: AtomicBool,
    running: Mutex<HashMap<u64, Arc<Killer>>>,
    next_id: AtomicU64,

    pub confinement: serde_json::Value,
    pub sessions: session::Sessions,
    /// `--workspace-base`: the host directories runs may overlay.
    pub bases: Vec<workspace::Base>,
    /// `--secret`, `--secret-file`, `--egress-ca`: what requests may name.
    pub secrets: secrets::Declared,
}

impl State {
    /// Track a running jail (to kill it at the drain timeout).
    fn register(&self, k: Arc<Killer>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.running_map().insert(id, k.clone());
        if self.killing.load(Ordering::SeqCst) {
            let _ = k.kill();
        }
        id
    }

    fn unregister(&self, id: u64) {
        self.running_map().remove(&id);
    }

    fn running_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Killer>>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until no request holds or waits for a run slot.
    async fn idle(&self) {
        loop {
            let woken = self.idle.notified();
            if self.admitted.load(Ordering::SeqCst) == 0 {
                return;
            }
            woken.await;
        }
    }

    /// Kill every running jail (the drain timeout).
    fn kill_all(&self) {
        self.killing.store(true, Ordering::SeqCst);
        for k in self.running_map().values() {
            let _ = k.kill();
        }
    }
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("stockade: serve: {msg}");
    2
}

/// `stockade serve ARGS`: the exit code.
pub fn main(a: ServeArgs) -> i32 {
    // First, while this process has one thread: the spawner is a fork.
    if let Err(e) = crate::spawner::start() {
        return fail(e);
    }
    let profiles = match resolve_profiles(&a.profiles) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let max = match bounds(&a) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let bases = match workspace::parse_bases(&a.workspace_base) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let secrets =
        match secrets::Declared::from_args(&a.secret, &a.secret_file, &a.egress_ca, &profiles) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
    let token = match listen::read_token(a.token_file.as_deref()) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let listener = match listen::bind(&a.listen, a.socket_group.as_deref(), token.is_some()) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    if let Some(d) = &a.workdir_root {
        eprintln!(
            "stockade: serve: warning: --workdir-root {}: no longer used: each workdir is a tmpfs inside its own jail (--max-workdir)",
            d.display()
        );
    }
    let confinement = if a.no_confine {
        confine::report(false, None)
    } else {
        let err = confine::apply().err();
        if let Some(e) = &err {
            eprintln!("stockade: serve: warning: the server runs unconfined: {e}");
        }
        confine::report(true, err.as_deref())
    };
    // Builder threads: after the confinement, like every other thread.
    let pool = match warm_pools(&a, &profiles, &max) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let state = Arc::new(State {
        slots: Arc::new(tokio::sync::Semaphore::new(max.concurrent)),
        max,
        profiles,
        token,
        admitted: AtomicUsize::new(0),
        idle: tokio::sync::Notify::new(),
        metrics: metrics::Metrics::default(),
        pool,
        draining: AtomicBool::new(false),
        killing: AtomicBool::new(false),
        running: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        confinement,
        sessions: session::Sessions::default(),
        bases,
        secrets,
    });
    // A run holds a blocking thread (its supervisor's wait) from start to
    // outcome: a burst of N requests leaves N threads behind. They end
    // after 2 s idle (tokio's default is 10 s), so the server's memory is
    // back soon after the burst.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(std::time::Duration::from_secs(2))
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format_args!("runtime: {e}")),
    };
    let code = rt.block_on(listen::serve(listener, state.clone(), a.drain_timeout));
    state.pool.shutdown();
    state.sessions.shutdown();
    code
}

/// Resolve each allowed profile once.
fn resolve_profiles(names: &[String]) -> Result<Vec<(String, Policy)>, String> {
    let mut out: Vec<(String, Policy)> = Vec::new();
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if out.iter().any(|(m, _)| m == n) {
            continue;
        }
        let r = profile::resolve(
            n,
            "--profiles",
            &profile::Options::default(),
            &crate::host::python::discover,
        )
        .map_err(|e| e.to_string())?;
        out.push((n.to_string(), r.policy));
    }
    if out.is_empty() {
        return Err("--profiles: name at least one profile".into());
    }
    Ok(out)
}

/// The pools `--warm` asks for, their members built from now on: each
/// profile's template is the policy a cold request with default limits
/// gets.
fn warm_pools(
    a: &ServeArgs,
    profiles: &[(String, Policy)],
    max: &Max,
) -> Result<pool::Pool, String> {
    let modules: Vec<&str> = a
        .warm
        .warm_import
        .iter()
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .collect();
    for m in &modules {
        let ok = m.split('.').all(|p| {
            p.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_alphanumeric() || c == '_')
        });
        if !ok {
            return Err(format!("--warm-import: {m:?} is not a module name"));
        }
    }
    let mut pools = Vec::new();
    for (name, n) in &a.warm.warm {
        if !profiles.iter().any(|(p, _)| p == name) {
            return Err(format!("--warm: {name}: not among --profiles"));
        }
        let req = request::RunRequest {
            profile: Some(name.clone()),
            argv: vec!["python3".into()],
            stdin: None,
            files: Vec::new(),
            env: Vec::new(),
            limits: request::Requested::default(),
            workspace: None,
            secrets: Vec::new(),
        };
        let none = secrets::Declared::default();
        let (template, _) = run::policy_with(profiles, max, &none, &req, false)
            .map_err(|e| format!("--warm: {name}: {}", e.message))?;
        pools.push((name.clone(), template, *n));
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let builders = a.warm.warm_builders.unwrap_or((ncpu / 2).max(1));
    if builders == 0 {
        return Err("--warm-builders: must be greater than 0".into());
    }
    Ok(pool::Pool::new(
        pools,
        modules.join(","),
        builders,
        a.warm.warm_fork,
    ))
}

fn bounds(a: &ServeArgs) -> Result<Max, String> {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let concurrent = a.max_concurrent.unwrap_or(ncpu);
    if concurrent == 0 {
        return Err("--max-concurrent: must be greater than 0".into());
    }
    if !(a.max_cpus.is_finite() && a.max_cpus > 0.0) {
        return Err("--max-cpus: must be greater than 0".into());
    }
    if a.max_pids == 0 {
        return Err("--max-pids: must be greater than 0".into());
    }
    let total = a.max_connections.unwrap_or_else(accept::default_total);
    if total == 0 {
        return Err("--max-connections: must be greater than 0".into());
    }
    if a.max_connections_per_client == 0 {
        return Err("--max-connections-per-client: must be greater than 0".into());
    }
    Ok(Max {
        memory: a.max_memory,
        cpus: a.max_cpus,
        pids: a.max_pids,
        timeout: a.max_timeout,
        max_output: a.max_output,
        workdir: a.max_workdir,
        concurrent,
        queue: a.max_queue.unwrap_or(4 * concurrent),
        body: a.max_body,
        files: a.max_files,
        sessions: a.max_sessions,
        session_idle: a.session_idle_timeout,
        session_lifetime: a.max_session_lifetime,
        connections: accept::Limits {
            total,
            per_client: a.max_connections_per_client,
            head: a.header_timeout,
        },
    })
}

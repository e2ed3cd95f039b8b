//! Warm pools (`--warm PROFILE=N`): per profile, N members (see
//! [`super::warm`]: fresh jails whose interpreter has imported the
//! `--warm-import` modules and waits for its program), kept full in the
//! background by a few builder threads (`--warm-builders`, so refilling
//! does not take every CPU from the runs).
//!
//! A request takes a member only when the member can run it exactly as a
//! cold jail would: the same profile and limits (the timeout and the
//! output cap excepted: the clock is started with the request's, and
//! whether the output is captured or streamed as ndjson: the clock's
//! start says that too), `python3 -c CODE` or `python3 FILE`, and
//! no variable that changes how the interpreter starts (`PYTHON*`,
//! locale, `PATH`, …). Anything else is a miss and gets a cold jail. A
//! member serves one request, then ends with it; the pool builds another
//! behind it. Members left at shutdown are killed.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::warm::{self, Member};
use crate::policy::Policy;
use crate::zygote::ForkServer;

/// What a request takes from a pool.
pub enum Taken {
    /// A warm member, all its own.
    Member(Box<Member>),
    /// The profile's fork server, to fork a child from.
    Fork(Arc<ForkServer>),
}

/// Longest wait before building again after a member failed to start.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One profile's pool, as `/metrics` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub profile: String,
    pub size: usize,
    pub target: usize,
    pub hits: u64,
}

/// One profile's pool.
struct Profile {
    name: String,
    template: Policy,
    /// The template with what a request may change cleared.
    key: serde_json::Value,
    target: usize,
    hits: AtomicU64,
    /// Full at least once.
    filled: AtomicBool,
    /// The fork server, in fork mode (`--warm-fork`), once started.
    fork: Mutex<Option<Arc<ForkServer>>>,
}

/// Members parked and being built, per profile (in `Inner::profiles`'
/// order).
#[derive(Default)]
struct Slots {
    idle: VecDeque<Member>,
    building: usize,
}

struct Inner {
    profiles: Vec<Profile>,
    slots: Mutex<Vec<Slots>>,
    /// Told when a member is taken, and at shutdown.
    wake: Condvar,
    stop: AtomicBool,
    modules: String,
    /// Fork mode: each pool is one fork server.
    forking: bool,
    /// Fork mode failed to start (three times in a row): the pools are
    /// members from then on.
    fork_failed: AtomicBool,
}

/// The warm pools (none without `--warm`).
pub struct Pool {
    inner: Arc<Inner>,
    builders: Mutex<Vec<JoinHandle<()>>>,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool::new(Vec::new(), String::new(), 0, false)
    }
}

/// A request's policy with what a member does not fix cleared: the
/// program, its environment, the timeout and output cap, the workdir's
/// host directory, the kept fds, whether output is captured.
fn key(p: &Policy) -> serde_json::Value {
    let mut p = p.clone();
    p.argv.clear();
    p.env.clear();
    p.limits.timeout = None;
    p.limits.max_output = None;
    p.workdir.host = None;
    p.workdir.files.clear();
    p.keep_fds.clear();
    p.capture = false;
    serde_json::to_value(&p).unwrap_or_default()
}

impl Pool {
    /// Pools of `(profile, template, size)`: members each
    /// importing `modules` (comma-separated); `builders` threads fill
    /// them, started now.
    pub fn new(
        pools: Vec<(String, Policy, usize)>,
        modules: String,
        builders: usize,
        forking: bool,
    ) -> Pool {
        let profiles: Vec<Profile> = pools
            .into_iter()
            .filter(|(_, _, n)| *n > 0)
            .map(|(name, template, target)| Profile {
                key: key(&template),
                name,
                template,
                target,
                hits: AtomicU64::new(0),
                filled: AtomicBool::new(false),
                fork: Mutex::new(None),
            })
            .collect();
        // A fork server holds each run's memory and pids in a cgroup of
        // its own; where none can, the pools are members.
        let forking = forking
            && match profiles
                .iter()
                .find_map(|p| crate::zygote::cannot_hold(&p.template))
            {
                Some(why) => {
                    eprintln!("stockade: serve: warning: --warm-fork: {why}: each warm jail serves one request instead");
                    false
                }
                None => true,
            };
        let inner = Arc::new(Inner {
            slots: Mutex::new(profiles.iter().map(|_| Slots::default()).collect()),
            profiles,
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            modules,
            forking,
            fork_failed: AtomicBool::new(false),
        });
        let n = if inner.profiles.is_empty() {
            0
        } else if forking {
            1
        } else {
            builders.max(1)
        };
        let builders = (0..n)
            .map(|_| {
                let inner = inner.clone();
                std::thread::spawn(move || inner.build_loop())
            })
            .collect();
        Pool {
            inner,
            builders: Mutex::new(builders),
        }
    }

    /// A member that can run `policy` exactly as a cold jail would, and
    /// the variables the request adds to its environment; None: a miss.
    pub fn take(&self, policy: &Policy) -> Option<(Taken, Vec<(OsString, OsString)>)> {
        if self.inner.profiles.is_empty() || !warm::servable_argv(&policy.argv) {
            return None;
        }
        let k = key(policy);
        let i = self.inner.profiles.iter().position(|p| p.key == k)?;
        let prof = &self.inner.profiles[i];
        let env = warm::env_additions(policy, &prof.template)?;
        if self.inner.forks() {
            let f = prof
                .fork
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()?;
            if !f.alive() {
                self.inner.wake.notify_all();
                return None;
            }
            prof.hits.fetch_add(1, Ordering::Relaxed);
            return Some((Taken::Fork(f), env));
        }
        let m = loop {
            let mut m = self.inner.lock()[i].idle.pop_front()?;
            self.inner.wake.notify_all();
            if !m.ended() {
                break m;
            }
            eprintln!(
                "stockade: serve: warning: warm pool {}: a parked member had ended; not used",
                prof.name
            );
            m.discard();
        };
        prof.hits.fetch_add(1, Ordering::Relaxed);
        Some((Taken::Member(Box::new(m)), env))
    }

    /// Whether each pool is a fork server (`--warm-fork`, where a cgroup
    /// holds each run's limits).
    pub fn forking(&self) -> bool {
        self.inner.forks()
    }

    /// Each pool now.
    pub fn stats(&self) -> Vec<Stat> {
        let slots = self.inner.lock();
        self.inner
            .profiles
            .iter()
            .zip(slots.iter())
            .map(|(p, s)| Stat {
                profile: p.name.clone(),
                size: if self.inner.forks() {
                    let f = p.fork.lock().unwrap_or_else(|e| e.into_inner());
                    if f.as_ref().is_some_and(|f| f.alive()) {
                        p.target
                    } else {
                        0
                    }
                } else {
                    s.idle.len()
                },
                target: p.target,
                hits: p.hits.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Whether every pool has been full at least once (vacuously, with
    /// none).
    pub fn warm(&self) -> bool {
        self.inner
            .profiles
            .iter()
            .all(|p| p.filled.load(Ordering::SeqCst))
    }

    /// Stop building; kill the members left.
    pub fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake.notify_all();
        let builders =
            std::mem::take(&mut *self.builders.lock().unwrap_or_else(|e| e.into_inner()));
        for b in builders {
            let _ = b.join();
        }
        let left: Vec<Member> = self
            .inner
            .lock()
            .iter_mut()
            .flat_map(|s| s.idle.drain(..))
            .collect();
        for m in left {
            m.discard();
        }
        for p in &self.inner.profiles {
            let f = p.fork.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(f) = f {
                f.shutdown();
            }
        }
    }
}

impl Inner {
    /// Fork mode, and it works.
    fn forks(&self) -> bool {
        self.forking && !self.fork_failed.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slots>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A builder: build a member for the pool furthest below its target,
    /// park it; wait while every pool is full (or being filled).
    fn build_loop(&self) {
        if self.forking {
            self.fork_loop();
            if !self.fork_failed.load(Ordering::SeqCst) {
                return;
            }
        }
        let mut failures = 0u32;
        while let Some(i) = self.next_to_build() {
            let p = &self.profiles[i];
            let built = warm::build(&p.template, &self.modules);
            let mut slots = self.lock();
            slots[i].building -= 1;
            match built {
                Ok(m) if !self.stop.load(Ordering::SeqCst) => {
                    failures = 0;
                    slots[i].idle.push_back(m);
                    if slots[i].idle.len() >= p.target {
                        p.filled.store(true, Ordering::SeqCst);
                    }
                }
                Ok(m) => {
                    drop(slots);
                    m.discard();
                }
                Err(e) => {
                    eprintln!(
                        "stockade: serve: warning: warm pool {}: a member did not start: {e}",
                        p.name
                    );
                    failures = failures.saturating_add(1);
                    let wait = (Duration::from_millis(100) * 2u32.saturating_pow(failures))
                        .min(MAX_BACKOFF);
                    // Woken early only by a shutdown.
                    let _ = self
                        .wake
                        .wait_timeout_while(slots, wait, |_| !self.stop.load(Ordering::SeqCst));
                }
            }
        }
    }

    /// Fork mode: keep each profile's fork server running (start one
    /// where there is none, or where it went away).
    fn fork_loop(&self) {
        let mut failures = 0u32;
        let bootstrap = super::warm::fork_bootstrap();
        while !self.stop.load(Ordering::SeqCst) {
            let mut started_all = true;
            for p in &self.profiles {
                let up = p
                    .fork
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .is_some_and(|f| f.alive());
                if up {
                    continue;
                }
                match ForkServer::start(&p.template, &bootstrap, &self.modules) {
                    Ok(f) => {
                        let old = p
                            .fork
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .replace(Arc::new(f));
                        if let Some(old) = old {
                            old.shutdown();
                        }
                        p.filled.store(true, Ordering::SeqCst);
                        failures = 0;
                    }
                    Err(e) => {
                        started_all = false;
                        eprintln!(
                            "stockade: serve: warning: warm pool {}: the fork server did not start: {e}",
                            p.name
                        );
                    }
                }
                // Never up yet, three times in a row: this host cannot
                // (user namespaces refused, a step of the child's
                // refused): members instead, for every pool.
                if !started_all
                    && failures >= 2
                    && !self
                        .profiles
                        .iter()
                        .any(|p| p.filled.load(Ordering::SeqCst))
                {
                    eprintln!(
                        "stockade: serve: warning: --warm-fork: no fork server could start; each warm jail serves one request instead"
                    );
                    self.fork_failed.store(true, Ordering::SeqCst);
                    return;
                }
            }
            let wait = if started_all {
                Duration::from_millis(200)
            } else {
                failures = failures.saturating_add(1);
                (Duration::from_millis(100) * 2u32.saturating_pow(failures)).min(MAX_BACKOFF)
            };
            let slots = self.lock();
            let _ = self
                .wake
                .wait_timeout_while(slots, wait, |_| !self.stop.load(Ordering::SeqCst));
        }
    }

    /// The pool to build a member for next (marked as building one), or
    /// None at shutdown.
    fn next_to_build(&self) -> Option<usize> {
        let mut slots = self.lock();
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return None;
            }
            let short = |(i, s): (usize, &Slots)| {
                let have = s.idle.len() + s.building;
                (have < self.profiles[i].target).then_some((have, i))
            };
            if let Some((_, i)) = slots.iter().enumerate().filter_map(short).min() {
                slots[i].building += 1;
                return Some(i);
            }
            slots = self.wake.wait(slots).unwrap_or_else(|e| e.into_inner());
        }
    }
}

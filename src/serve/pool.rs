//! Warm pools (`--warm PROFILE=N`): per profile, N members (see
//! [`super::warm`]: fresh jails whose interpreter has imported the
//! `--warm-import` modules and waits for its program), kept full in the
//! background by a few builder threads (`--warm-builders`, so refilling
//! does not take every CPU from the runs), or with `--warm-fork` N fork
//! servers taken in turn, at most one per CPU (see [`crate::zygote`]).
//!
//! A request takes a warm jail when it can run it exactly as a cold jail
//! would: the pool of its profile, `python3 -c CODE` or `python3 FILE`,
//! no variable that changes how the interpreter starts (`PYTHON*`,
//! locale, `PATH`, …), the profile's policy otherwise, and limits the
//! warm jail can give it. Those a run sets for itself: the timeout and
//! the output cap (the supervisor's), and its run cgroup's memory,
//! memory_high, cpus and pids: a fork server's child gets a cgroup of its
//! own made from them; a member's supervisor writes them into the
//! member's run cgroup before its clock starts, where that cgroup holds
//! them (probed once per pool: [`PerRun`]). What a warm jail fixed when it
//! started must be the pool's: the rlimits (cpu_time, max_file_size,
//! max_open_files), a member's /tmp size, grace and workdir size
//! (or, where the run's memory cgroup bounds the workdir, at least that
//! bound). Anything else is a miss, with its [`Miss`] reason, and gets a
//! cold jail. A member serves one request, then ends with it; the pool
//! builds another behind it. Members left at shutdown are killed.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::warm::{self, Member};
use crate::policy::{Limits, Policy};
use crate::zygote::ForkServer;

/// What a request takes from a pool.
pub enum Taken {
    /// A warm member, all its own; `limits`: the run's cgroup limits
    /// differ from the member's, to be set at its hand-over.
    Member { member: Box<Member>, limits: bool },
    /// One of the profile's fork servers, to fork a child from.
    Fork(Arc<ForkServer>),
}

/// Why a request found no warm jail: the `reason` of `/metrics`'
/// `stockade_pool_misses_total` and of the answer's `applied.pool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Miss {
    /// No pool for its profile (`--warm PROFILE=N` names others, or none).
    NoPool,
    /// Its program is not `python3 -c CODE` or `python3 FILE ARGS`.
    Argv,
    /// It sets a variable that changes how the interpreter starts
    /// (`PYTHON*`, `LC_*`, `LANG`, `PATH`, `HOME`, …).
    Env,
    /// A limit the warm jail fixed when it started differs from the
    /// pool's: an rlimit, a tmpfs's size, or one its run cgroup cannot
    /// change on this host.
    Limits,
    /// Another setting of its policy differs from the pool's profile.
    Policy,
    /// It names secrets: a warm jail was made before its placeholders,
    /// its trust store and its proxy could be, so it runs cold.
    Secrets,
    /// Every member of the pool is taken (it is refilling).
    Empty,
    /// The pool's fork server is not running (starting, or replacing one
    /// that went away).
    ForkServerDown,
    /// The warm jail could not start this run (the server's log says
    /// why).
    StartFailed,
}

impl Miss {
    /// The name `/metrics` and `applied.pool.reason` give it.
    pub fn name(self) -> &'static str {
        match self {
            Miss::NoPool => "no_pool",
            Miss::Argv => "argv",
            Miss::Env => "env",
            Miss::Limits => "limits",
            Miss::Policy => "policy",
            Miss::Secrets => "secrets",
            Miss::Empty => "empty",
            Miss::ForkServerDown => "fork_server_down",
            Miss::StartFailed => "start_failed",
        }
    }
}

/// Which of a template's run cgroup limits a warm jail gives each run
/// its own value of: all of them for a fork server's children (each
/// child's cgroup is made for its run); for members, those the run
/// cgroup holds on this host (a limit held by an rlimit, or by nothing,
/// is fixed when the member starts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerRun {
    pub memory: bool,
    pub memory_high: bool,
    pub cpus: bool,
    pub pids: bool,
}

impl PerRun {
    const ALL: PerRun = PerRun {
        memory: true,
        memory_high: true,
        cpus: true,
        pids: true,
    };

    /// Probed as a member's supervisor will find it: a run cgroup for
    /// `template`'s limits made, looked at and removed.
    fn probe(template: &Policy) -> PerRun {
        use crate::cgroup;
        let setup = cgroup::prepare(&cgroup::Request::from(&template.limits));
        let per_run = PerRun {
            memory: setup.memory.is_cgroup(),
            memory_high: setup.memory_high.is_cgroup(),
            cpus: setup.cpu.is_cgroup(),
            pids: setup.pids.is_cgroup(),
        };
        if let Some(c) = setup.cgroup {
            let _ = c.remove();
        }
        per_run
    }
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
    /// Which run cgroup limits a member takes per run.
    per_run: PerRun,
    target: usize,
    hits: AtomicU64,
    /// Full at least once.
    filled: AtomicBool,
    /// Fork mode (`--warm-fork`): its fork servers (N of `PROFILE=N`, at
    /// most one per CPU), each once started. Runs take them in turn, so
    /// that no one zygote's forks serialise every run.
    forks: Mutex<Vec<Option<Arc<ForkServer>>>>,
    /// Whose turn it is.
    turn: std::sync::atomic::AtomicUsize,
}

impl Profile {
    fn lock_forks(&self) -> MutexGuard<'_, Vec<Option<Arc<ForkServer>>>> {
        self.forks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next fork server whose zygote is alive, in turn.
    fn next_fork(&self) -> Option<Arc<ForkServer>> {
        let forks = self.lock_forks();
        let n = forks.len().max(1);
        let first = self.turn.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .filter_map(|i| forks.get((first + i) % n)?.as_ref())
            .find(|f| f.alive())
            .cloned()
    }
}

/// How many fork servers a pool of `target` gets: at most one per CPU.
fn zygotes(target: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    target.clamp(1, cpus.max(1))
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
    /// Fork mode: each pool is fork servers.
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

/// A request's policy with what a warm jail does not fix cleared, and
/// what [`limits_fit`] compares: the program, its environment, the
/// workdir's host directory, size and files, the kept fds, whether output
/// is captured, every limit, /tmp's size.
fn key(p: &Policy) -> serde_json::Value {
    let mut p = p.clone();
    p.argv.clear();
    p.env.clear();
    p.limits = Limits::default();
    p.tmp_size = 0;
    p.workdir.host = None;
    p.workdir.size = 0;
    p.workdir.files.clear();
    p.keep_fds.clear();
    p.capture = false;
    serde_json::to_value(&p).unwrap_or_default()
}

/// Whether a warm jail of `template` can give `run` its limits: each one
/// it fixed when it started (the rlimits, /tmp's size; a member's grace,
/// and its workdir's size, which may be larger where the run's memory
/// cgroup is the smaller bound of the two) is the template's, and each
/// run cgroup limit is the template's or one `per_run` gives each run.
/// The timeout and the output cap are the run's in every case.
fn limits_fit(run: &Policy, template: &Policy, per_run: PerRun, fork: bool) -> bool {
    let (r, t) = (&run.limits, &template.limits);
    let own = |per_run: bool, same: bool| per_run || same;
    // A fork server's child mounts its /tmp and workdir at the run's sizes
    // (its go) and keeps its own deadline; a member's were mounted with
    // its jail, its grace is its supervisor's.
    let fixed = r.cpu_time == t.cpu_time
        && r.max_file_size == t.max_file_size
        && r.max_open_files == t.max_open_files
        && (fork || run.tmp_size == template.tmp_size);
    let member_fixed = fork
        || (r.grace == t.grace
            && match r.memory.filter(|_| per_run.memory) {
                // The workdir's tmpfs is charged to the run's memory
                // cgroup: a tmpfs no smaller than the limit holds as much
                // as the limit lets it.
                Some(m) => run.workdir.size.min(m) == template.workdir.size.min(m),
                None => run.workdir.size == template.workdir.size,
            });
    fixed
        && member_fixed
        && own(per_run.memory, r.memory == t.memory)
        && own(per_run.memory_high, r.memory_high == t.memory_high)
        && own(per_run.cpus, r.cpus == t.cpus)
        && own(per_run.pids, r.pids == t.pids)
}

/// Whether `run`'s run cgroup limits are `template`'s.
fn same_cgroup_limits(run: &Limits, template: &Limits) -> bool {
    run.memory == template.memory
        && run.memory_high == template.memory_high
        && run.cpus == template.cpus
        && run.pids == template.pids
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
                per_run: PerRun::probe(&template),
                name,
                template,
                target,
                hits: AtomicU64::new(0),
                filled: AtomicBool::new(false),
                forks: Mutex::new(vec![None; zygotes(target)]),
                turn: std::sync::atomic::AtomicUsize::new(0),
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

    /// A warm jail of `profile`'s pool that can run `policy` exactly as a
    /// cold jail would, and the variables the request adds to its
    /// environment; else why not.
    pub fn take(
        &self,
        profile: &str,
        policy: &Policy,
    ) -> Result<(Taken, Vec<(OsString, OsString)>), Miss> {
        let i = self
            .inner
            .profiles
            .iter()
            .position(|p| p.name == profile)
            .ok_or(Miss::NoPool)?;
        if !policy.secrets.is_empty() {
            return Err(Miss::Secrets);
        }
        let prof = &self.inner.profiles[i];
        if !warm::servable_argv(&policy.argv) {
            return Err(Miss::Argv);
        }
        let env = warm::env_additions(policy, &prof.template).ok_or(Miss::Env)?;
        if key(policy) != prof.key {
            return Err(Miss::Policy);
        }
        let forks = self.inner.forks();
        let per_run = if forks { PerRun::ALL } else { prof.per_run };
        if !limits_fit(policy, &prof.template, per_run, forks) {
            return Err(Miss::Limits);
        }
        if forks {
            let Some(f) = prof.next_fork() else {
                self.inner.wake.notify_all();
                return Err(Miss::ForkServerDown);
            };
            return Ok((Taken::Fork(f), env));
        }
        let m = loop {
            let mut m = self.inner.lock()[i].idle.pop_front().ok_or(Miss::Empty)?;
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
        let limits = !same_cgroup_limits(&policy.limits, &prof.template.limits);
        Ok((
            Taken::Member {
                member: Box::new(m),
                limits,
            },
            env,
        ))
    }

    /// A run of `profile` was served warm (`/metrics`' hits).
    pub fn hit(&self, profile: &str) {
        if let Some(p) = self.inner.profiles.iter().find(|p| p.name == profile) {
            p.hits.fetch_add(1, Ordering::Relaxed);
        }
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
                // Fork mode: the fork servers up, of how many.
                size: if self.inner.forks() {
                    p.lock_forks()
                        .iter()
                        .flatten()
                        .filter(|f| f.alive())
                        .count()
                } else {
                    s.idle.len()
                },
                target: if self.inner.forks() {
                    p.lock_forks().len()
                } else {
                    p.target
                },
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
            let forks: Vec<_> = p.lock_forks().iter_mut().filter_map(Option::take).collect();
            for f in forks {
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
            for (p, slot) in self
                .profiles
                .iter()
                .flat_map(|p| (0..p.lock_forks().len()).map(move |i| (p, i)))
            {
                let up = p.lock_forks()[slot].as_ref().is_some_and(|f| f.alive());
                if up {
                    continue;
                }
                match ForkServer::start(&p.template, &bootstrap, &self.modules) {
                    Ok(f) => {
                        let old = p.lock_forks()[slot].replace(Arc::new(f));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A template as `serve` makes one: the defaults with a server's
    /// limits.
    fn template() -> Policy {
        let mut p = Policy::with_defaults(vec!["python3".into()]);
        p.limits.memory = Some(512 << 20);
        p.limits.cpus = Some(1.0);
        p.limits.pids = Some(64);
        p.limits.timeout = Some(std::time::Duration::from_secs(30));
        p.limits.max_output = Some(1 << 20);
        p.workdir.size = 512 << 20;
        p.tmp_size = 128 << 20;
        p
    }

    const MEMBER_V1: PerRun = PerRun {
        memory: true,
        memory_high: false,
        cpus: true,
        pids: true,
    };

    #[test]
    fn a_run_sets_its_own_cgroup_limits_and_clock_but_not_what_the_jail_fixed() {
        let t = template();
        let fits = |f: &dyn Fn(&mut Policy)| {
            let mut r = t.clone();
            f(&mut r);
            assert_eq!(key(&r), key(&t), "the key ignores every limit");
            (
                limits_fit(&r, &t, PerRun::ALL, true),
                limits_fit(&r, &t, MEMBER_V1, false),
                limits_fit(&r, &t, PerRun::default(), false),
            )
        };
        // Fork server, member whose cgroup holds them, member without.
        assert_eq!(fits(&|_| {}), (true, true, true));
        let small = |r: &mut Policy| {
            r.limits.memory = Some(128 << 20);
            // serve's workdir follows the memory limit.
            r.workdir.size = 128 << 20;
            r.limits.pids = Some(16);
            r.limits.cpus = Some(0.5);
        };
        assert_eq!(fits(&small), (true, true, false));
        assert_eq!(
            fits(&|r| r.limits.memory_high = Some(1 << 20)),
            (true, false, false)
        );
        let clock = |r: &mut Policy| {
            r.limits.timeout = Some(std::time::Duration::from_secs(1));
            r.limits.max_output = Some(10);
        };
        assert_eq!(fits(&clock), (true, true, true));
        // A workdir smaller than the member's, not bounded by the run's
        // memory: the member's tmpfs would hold more.
        assert_eq!(fits(&|r| r.workdir.size = 64 << 20), (true, false, false));
        // /tmp's size: a forked child's own, a member's fixed.
        assert_eq!(fits(&|r| r.tmp_size = 64 << 20), (true, false, false));
        for fixed in [
            &(|r: &mut Policy| r.limits.max_open_files = Some(16)) as &dyn Fn(&mut Policy),
            &|r| r.limits.max_file_size = Some(1 << 20),
            &|r| r.limits.cpu_time = Some(std::time::Duration::from_secs(1)),
        ] {
            assert_eq!(fits(fixed), (false, false, false));
        }
        assert_eq!(
            fits(&|r| r.limits.grace = std::time::Duration::ZERO),
            (true, false, false)
        );
    }

    #[test]
    fn what_else_a_run_changes_is_the_policy_s() {
        let t = template();
        let mut r = t.clone();
        r.argv = vec!["python3".into(), "-c".into(), "pass".into()];
        r.env.push(("ANSWER".into(), "42".into()));
        r.capture = !t.capture;
        assert_eq!(key(&r), key(&t));
        r.hostname = "other".into();
        assert_ne!(key(&r), key(&t));
    }

    #[test]
    fn each_miss_has_a_name() {
        let all = [
            Miss::NoPool,
            Miss::Argv,
            Miss::Env,
            Miss::Limits,
            Miss::Policy,
            Miss::Secrets,
            Miss::Empty,
            Miss::ForkServerDown,
            Miss::StartFailed,
        ];
        let names: Vec<&str> = all.iter().map(|m| m.name()).collect();
        assert_eq!(
            names,
            [
                "no_pool",
                "argv",
                "env",
                "limits",
                "policy",
                "secrets",
                "empty",
                "fork_server_down",
                "start_failed"
            ]
        );
        let p = Pool::default();
        let t = template();
        assert!(matches!(p.take("python", &t), Err(Miss::NoPool)));
    }
}

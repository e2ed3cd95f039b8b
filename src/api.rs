//! The library's front door: [`Jail`], shaped like [`std::process::Command`],
//! and the [`Child`] it starts.
//!
//! ```
//! use std::time::Duration;
//! use stockade::{Jail, Stdio};
//!
//! let out = Jail::profile("shell")?
//!     .arg("sh").arg("-c").arg("echo hello from $(hostname)")
//!     .memory(256 << 20)
//!     .timeout(Duration::from_secs(5))
//!     .stdout(Stdio::piped())
//!     .spawn()?
//!     .wait_with_output()?;
//! assert_eq!(out.outcome.exit_code, 0);
//! assert_eq!(out.stdout, b"hello from stockade\n");
//! # Ok::<(), stockade::Error>(())
//! ```
//!
//! The CLI, the HTTP server and sessions build a [`Policy`] and run it
//! through here; the bwrap front end calls the run functions under it
//! (`run_namespaced`, `run_fallback`) itself, to choose between them.

#![deny(unsafe_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use crate::outcome::Outcome;
use crate::policy::{self, profile, Commit, Layer, MountSpec, Network, Policy, PolicyError};
use crate::spawner::{self, SpawnError};

/// What can go wrong before a jail runs. How a jail that ran ended (setup
/// errors inside it included) is in its [`Outcome`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad value: names the field (or `file:line:col: field`) and why.
    #[error("{0}")]
    Policy(#[from] PolicyError),
    /// The jail could not be started through the spawner, or its outcome
    /// not read back (see [`SpawnError`]'s kinds).
    #[error("{0}")]
    Spawn(#[from] SpawnError),
    /// Reading or writing the caller's side of the run.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where one of the payload's standard streams goes.
#[derive(Debug)]
pub struct Stdio(StdioKind);

#[derive(Debug)]
enum StdioKind {
    Inherit,
    Null,
    Piped,
    Fd(OwnedFd),
}

impl Stdio {
    /// The caller's own stream (the default).
    pub fn inherit() -> Stdio {
        Stdio(StdioKind::Inherit)
    }
    /// `/dev/null`.
    pub fn null() -> Stdio {
        Stdio(StdioKind::Null)
    }
    /// A pipe to the caller: [`Child::stdin`], [`Child::stdout`],
    /// [`Child::stderr`].
    pub fn piped() -> Stdio {
        Stdio(StdioKind::Piped)
    }
}

impl From<OwnedFd> for Stdio {
    fn from(fd: OwnedFd) -> Stdio {
        Stdio(StdioKind::Fd(fd))
    }
}

impl From<std::fs::File> for Stdio {
    fn from(f: std::fs::File) -> Stdio {
        Stdio(StdioKind::Fd(f.into()))
    }
}

/// A jail to start: a [`Policy`] plus the payload's stdio. Built like
/// [`std::process::Command`]; usable from any thread (see [`Jail::spawn`]).
#[derive(Debug)]
pub struct Jail {
    policy: Policy,
    /// The first bad value given to a builder method, reported by `spawn`.
    error: Option<PolicyError>,
    stdio: [Option<Stdio>; 3],
    /// Start with the clock held (see [`Jail::hold_clock`]).
    held: bool,
}

impl Jail {
    /// A jail running `policy` as it is.
    pub fn new(policy: Policy) -> Jail {
        Jail {
            policy,
            error: None,
            stdio: [None, None, None],
            held: false,
        }
    }

    /// A jail from a profile: a built-in name (`minimal`, `shell`, `python`,
    /// `strict`) or a TOML file's path, with no command yet.
    pub fn profile(spec: &str) -> Result<Jail, Error> {
        let r = profile::resolve(
            spec,
            "profile",
            &profile::Options::default(),
            &crate::host::python::discover,
        )?;
        Ok(Jail::new(r.policy))
    }

    /// The policy as built so far.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn keep(&mut self, r: Result<(), PolicyError>) -> &mut Jail {
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
        self
    }

    /// Add an argument (the first is the command, looked up in the jail's
    /// PATH when it has no `/`).
    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Jail {
        self.policy.argv.push(a.as_ref().to_owned());
        self
    }

    /// Add arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Jail
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self.arg(a);
        }
        self
    }

    /// Set a variable in the payload's environment.
    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut Jail {
        policy::set_env(
            &mut self.policy.env,
            k.as_ref().to_owned(),
            v.as_ref().to_owned(),
        );
        self
    }

    /// The directory (inside the jail) the payload starts in.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Jail {
        let r = policy::jail_path("current_dir", dir.as_ref()).map(|p| self.policy.chdir = Some(p));
        self.keep(r)
    }

    /// Memory limit in bytes.
    pub fn memory(&mut self, bytes: u64) -> &mut Jail {
        let r = positive("memory", bytes).map(|b| self.policy.limits.memory = Some(b));
        self.keep(r)
    }

    /// CPU limit in CPUs (`0.5`: half a core).
    pub fn cpus(&mut self, cpus: f64) -> &mut Jail {
        let r = if cpus.is_finite() && cpus > 0.0 {
            self.policy.limits.cpus = Some(cpus);
            Ok(())
        } else {
            Err(PolicyError::new(
                "cpus",
                format!("{cpus}: must be greater than 0"),
            ))
        };
        self.keep(r)
    }

    /// Most processes and threads at once.
    pub fn pids(&mut self, n: u64) -> &mut Jail {
        let r = positive("pids", n).map(|n| self.policy.limits.pids = Some(n));
        self.keep(r)
    }

    /// Wall-clock deadline: SIGTERM to the jail, SIGKILL after the grace.
    pub fn timeout(&mut self, d: Duration) -> &mut Jail {
        let r = if d.is_zero() {
            Err(PolicyError::new("timeout", "must be greater than 0"))
        } else {
            self.policy.limits.timeout = Some(d);
            Ok(())
        };
        self.keep(r)
    }

    /// Cap on stdout and stderr together; the jail is killed at the cap.
    pub fn max_output(&mut self, bytes: u64) -> &mut Jail {
        let r = positive("max_output", bytes).map(|b| self.policy.limits.max_output = Some(b));
        self.keep(r)
    }

    /// Bind the host path `src` read-only at `dst` inside the jail.
    pub fn ro_bind(&mut self, src: impl AsRef<Path>, dst: impl AsRef<Path>) -> &mut Jail {
        let r = bind(src.as_ref(), dst.as_ref(), false).map(|m| self.policy.mounts.push(m));
        self.keep(r)
    }

    /// Bind the host path `src` read-write at `dst` inside the jail.
    pub fn bind(&mut self, src: impl AsRef<Path>, dst: impl AsRef<Path>) -> &mut Jail {
        let r = bind(src.as_ref(), dst.as_ref(), true).map(|m| self.policy.mounts.push(m));
        self.keep(r)
    }

    /// Show the host directory `src` at `dst` copy-on-write, as
    /// `--overlay SRC:DST` does: the jail may change anything there, `src`
    /// is not written while it runs, and the outcome lists the changes
    /// ([`Outcome::changes`]); [`Jail::commit`] applies them.
    pub fn overlay(&mut self, src: impl AsRef<Path>, dst: impl AsRef<Path>) -> &mut Jail {
        let r = (|| {
            let src = policy::host_path("overlay", src.as_ref())?;
            policy::host_exists(&src, true).map_err(|e| PolicyError::value("overlay", e))?;
            let dst = policy::jail_path("overlay", dst.as_ref())?;
            Ok(MountSpec::Workspace { src, dst })
        })()
        .map(|m| self.policy.mounts.push(m));
        self.keep(r)
    }

    /// When the overlays' changes are applied to their host directories
    /// (`--commit`): after the payload exits 0 ([`Commit::Success`]), or
    /// whatever its end ([`Commit::Always`]); the outcome says what was
    /// applied and refused ([`Outcome::commit`]).
    pub fn commit(&mut self, when: Commit) -> &mut Jail {
        self.policy.workspace.commit = when;
        self
    }

    /// The jail's network: [`Network::None`] (the default), [`Network::Loopback`]
    /// (TCP between the jail's processes on its own `lo`) or the host's.
    pub fn network(&mut self, n: Network) -> &mut Jail {
        self.policy.network = n;
        self
    }

    /// Reach `entry` (`NAME`, `*.SUFFIX`, an address, each with an
    /// optional `:PORT`; 80 and 443 without one) through stockade's egress
    /// proxy, as `--allow-host` does; the jail reaches nothing else. A bad
    /// entry is an error (`allow_host: …`) when the jail is started.
    pub fn allow_host(&mut self, entry: &str) -> &mut Jail {
        let r = crate::policy::egress::AllowHost::parse(entry)
            .map(|e| {
                if !self.policy.allow_hosts.contains(&e) {
                    self.policy.allow_hosts.push(e);
                }
            })
            .map_err(|why| PolicyError::new("allow_host", why));
        self.keep(r)
    }

    /// A layer that must be applied, or the run fails (status
    /// `setup_error`) instead of running without it.
    pub fn require(&mut self, layer: Layer) -> &mut Jail {
        if !self.policy.require.contains(&layer) {
            self.policy.require.push(layer);
        }
        self
    }

    /// The payload's stdin (default: inherited).
    pub fn stdin(&mut self, s: Stdio) -> &mut Jail {
        self.stdio[0] = Some(s);
        self
    }

    /// The payload's stdout (default: inherited).
    pub fn stdout(&mut self, s: Stdio) -> &mut Jail {
        self.stdio[1] = Some(s);
        self
    }

    /// The payload's stderr (default: inherited).
    pub fn stderr(&mut self, s: Stdio) -> &mut Jail {
        self.stdio[2] = Some(s);
        self
    }

    /// Start the jail with its clock held: the payload starts as usual,
    /// but the deadline (`timeout`) does not run, and the outcome's wall
    /// time does not count, until [`Child::start_clock`]. For a jail built
    /// ahead of its program (a warm pool's member). Only [`Jail::spawn`]
    /// holds the clock.
    pub fn hold_clock(&mut self) -> &mut Jail {
        self.held = true;
        self
    }

    /// The policy, checked.
    fn checked(&self) -> Result<&Policy, Error> {
        if let Some(e) = &self.error {
            return Err(e.clone().into());
        }
        self.policy.validate()?;
        Ok(&self.policy)
    }

    /// Start the jail and return at once. Works from any thread: the jail
    /// is started by this process's spawner, a single-threaded process made
    /// on first use (see [`crate::spawner::start`]).
    pub fn spawn(&mut self) -> Result<Child, Error> {
        let policy = self.checked()?.clone();
        let own_fd = policy
            .compat
            .own_fds()
            .or(policy.denials_fd.is_some().then_some("denials_fd"));
        if let Some(field) = own_fd {
            return Err(PolicyError::new(
                field,
                "only for a run in the caller's process (the fds are its own)",
            )
            .into());
        }
        // Our ends of the pipes, and the fds the spawner gets.
        let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
        let mut theirs: Vec<OwnedFd> = Vec::new();
        let mut given: [RawFd; 3] = [0, 1, 2];
        for (i, s) in self.stdio.iter_mut().enumerate() {
            let kind = s.take().map(|s| s.0).unwrap_or(StdioKind::Inherit);
            match kind {
                StdioKind::Inherit => {}
                StdioKind::Null => {
                    let f = std::fs::OpenOptions::new()
                        .read(i == 0)
                        .write(i != 0)
                        .open("/dev/null")?;
                    given[i] = f.as_raw_fd();
                    theirs.push(f.into());
                }
                StdioKind::Piped => {
                    let (r, w) = crate::sys::pipe()
                        .map_err(|e| SpawnError::Os(spawner::OsFailure::of(e)))?;
                    let (mine, child) = if i == 0 { (w, r) } else { (r, w) };
                    given[i] = child.as_raw_fd();
                    ours[i] = Some(mine);
                    theirs.push(child);
                }
                StdioKind::Fd(fd) => {
                    given[i] = fd.as_raw_fd();
                    theirs.push(fd);
                }
            }
        }
        // The namespaces to join travel with the kept fds, under the same
        // numbers; the per-run supervisor joins them (the payload gets
        // only `keep_fds`).
        let mut passed = policy.keep_fds.clone();
        let joins = policy.compat.joins();
        passed.extend(joins.filter(|fd| !policy.keep_fds.contains(fd)));
        let started = spawner::request(&policy, given, &passed, self.held)?;
        drop(theirs);
        let [stdin, stdout, stderr] = ours;
        Ok(Child {
            pid: started.pid,
            control: started.control,
            stdin: stdin.map(std::fs::File::from),
            stdout: stdout.map(std::fs::File::from),
            stderr: stderr.map(std::fs::File::from),
            ended: None,
        })
    }

    /// Run to the end with stdout and stderr captured (stdin `/dev/null`
    /// unless set).
    pub fn output(&mut self) -> Result<Output, Error> {
        if self.stdio[0].is_none() {
            self.stdio[0] = Some(Stdio::null());
        }
        self.stdio[1] = Some(Stdio::piped());
        self.stdio[2] = Some(Stdio::piped());
        self.spawn()?.wait_with_output()
    }

    /// Run to the end; return how it ended.
    pub fn status(&mut self) -> Result<Outcome, Error> {
        self.spawn()?.wait()
    }

    /// Run to the end in this process, with this process's stdio, without
    /// a spawner. This process must be single-threaded (the CLI is).
    #[doc(hidden)]
    pub fn run_here(&self) -> Result<Outcome, Error> {
        let policy = self.checked()?;
        Ok(crate::run(policy))
    }
}

fn positive(field: &str, n: u64) -> Result<u64, PolicyError> {
    if n == 0 {
        Err(PolicyError::new(field, "must be greater than 0"))
    } else {
        Ok(n)
    }
}

fn bind(src: &Path, dst: &Path, writable: bool) -> Result<MountSpec, PolicyError> {
    let flag = if writable { "bind" } else { "ro_bind" };
    Ok(MountSpec::Bind {
        src: policy::host_path(flag, src)?,
        dst: policy::jail_path(flag, dst)?,
        writable,
        optional: false,
    })
}

/// A running jail, from [`Jail::spawn`]. Dropping it without waiting kills
/// the jail (unlike `std::process::Child`): nothing runs unwatched.
#[derive(Debug)]
pub struct Child {
    pid: i32,
    control: OwnedFd,
    /// The payload's stdin, when [`Stdio::piped`].
    pub stdin: Option<std::fs::File>,
    /// The payload's stdout, when [`Stdio::piped`].
    pub stdout: Option<std::fs::File>,
    /// The payload's stderr, when [`Stdio::piped`].
    pub stderr: Option<std::fs::File>,
    /// The outcome [`Child::try_wait`] read (the control socket is at its
    /// end then).
    ended: Option<Outcome>,
}

/// Kills a running jail from any thread, from [`Child::killer`]: the
/// caller's way to end a jail while another thread blocks in
/// [`Child::wait`]. Killing a jail that is over does nothing. (It holds the
/// run's control socket open: while a `Killer` lives, dropping the `Child`
/// does not kill the jail.)
#[derive(Debug)]
pub struct Killer {
    control: OwnedFd,
}

impl Killer {
    /// A killer that writes `K` on `control` (the fork server's runs).
    pub(crate) fn from_control(control: OwnedFd) -> Killer {
        Killer { control }
    }

    /// Kill the whole jail now, as [`Child::kill`].
    pub fn kill(&self) -> Result<(), Error> {
        send_kill(&self.control)
    }
}

fn send_kill(control: &OwnedFd) -> Result<(), Error> {
    match crate::sys::write_all(control.as_raw_fd(), b"K") {
        Ok(()) => Ok(()),
        // Already over: nothing left to kill.
        Err(e) if e.errno == crate::sys::Errno::EPIPE => Ok(()),
        Err(e) => Err(SpawnError::Os(spawner::OsFailure::of(e)).into()),
    }
}

/// How a jail ended, with what it wrote when stdout and stderr were piped.
#[derive(Debug)]
pub struct Output {
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Child {
    /// The pid of the run's supervisor (a process of the caller's user;
    /// SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to it reach the payload).
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Kill the whole jail now. [`Child::wait`] then reports how it ended.
    pub fn kill(&mut self) -> Result<(), Error> {
        send_kill(&self.control)
    }

    /// Start the clock of a jail spawned with [`Jail::hold_clock`]: the
    /// deadline counts from now, `timeout` long (None: the policy's), and
    /// `max_output` (None: the policy's) caps the output from now. Only
    /// the first call counts; on a jail whose clock was not held it does
    /// nothing.
    pub fn start_clock(
        &self,
        timeout: Option<Duration>,
        max_output: Option<u64>,
    ) -> Result<(), Error> {
        self.send_start(timeout, max_output, crate::supervise::OutputTo::AsSpawned)
    }

    /// [`Child::start_clock`], and from then on the payload's stdout and
    /// stderr go only to this child's pipes (`piped`; the jail spawned
    /// with [`Stdio::piped`] for them) or only into the outcome's captured
    /// `stdout` and `stderr` (not `piped`), whatever the policy's
    /// `capture` said: a jail built ahead of its program serves either
    /// kind of caller.
    pub fn start_clock_output(
        &self,
        timeout: Option<Duration>,
        max_output: Option<u64>,
        piped: bool,
    ) -> Result<(), Error> {
        use crate::supervise::OutputTo;
        let to = if piped {
            OutputTo::Piped
        } else {
            OutputTo::Captured
        };
        self.send_start(timeout, max_output, to)
    }

    /// [`Child::start_clock_output`] for a run with limits of its own:
    /// `limits`' timeout and output cap as there, and its memory,
    /// memory_high, cpus and pids (each one set) written into the jail's
    /// run cgroup over the policy's before the clock starts. Returns once
    /// they are: `Ok(true)`, the payload may be handed its program.
    /// `Ok(false)`: the run's cgroup cannot hold one of them (no group of
    /// the run has that controller, or the kernel refused the value, as a
    /// cgroup v1 memory limit below what the jail already uses); the
    /// clock is still held, and the jail is best killed. Only a jail
    /// spawned with [`Jail::hold_clock`] whose clock has not started takes
    /// them. A jail that has ended meanwhile: `Ok(true)`, its outcome
    /// says how.
    pub fn start_clock_limits(&self, limits: &policy::Limits, piped: bool) -> Result<bool, Error> {
        use crate::supervise::OutputTo;
        let to = if piped {
            OutputTo::Piped
        } else {
            OutputTo::Captured
        };
        let cg = crate::cgroup::Request::from(limits);
        let rec = crate::supervise::encode_start_limits(limits.timeout, limits.max_output, to, &cg);
        match crate::sys::write_all(self.control.as_raw_fd(), &rec) {
            Ok(()) => {}
            Err(e) if e.errno == crate::sys::Errno::EPIPE => return Ok(true),
            Err(e) => return Err(SpawnError::Os(spawner::OsFailure::of(e)).into()),
        }
        // The answer is one byte ahead of the outcome (JSON, `{`), which
        // stays where it is when the jail ended instead.
        use nix::sys::socket::{recv, MsgFlags};
        let fd = self.control.as_raw_fd();
        let mut b = [0u8; 1];
        let peeked = loop {
            match recv(fd, &mut b, MsgFlags::MSG_PEEK) {
                Err(nix::errno::Errno::EINTR) => continue,
                r => break r,
            }
        };
        let answer = match peeked {
            Ok(1) => b[0],
            // Over: its outcome (or its end) is what is left to read.
            Ok(_) => return Ok(true),
            Err(e) => return Err(Error::Io(e.into())),
        };
        match answer {
            crate::supervise::LIMITS_SET | crate::supervise::LIMITS_REFUSED => {
                let _ = recv(fd, &mut b, MsgFlags::empty());
                Ok(answer == crate::supervise::LIMITS_SET)
            }
            _ => Ok(true),
        }
    }

    fn send_start(
        &self,
        timeout: Option<Duration>,
        max_output: Option<u64>,
        to: crate::supervise::OutputTo,
    ) -> Result<(), Error> {
        let rec = crate::supervise::encode_start(timeout, max_output, to);
        match crate::sys::write_all(self.control.as_raw_fd(), &rec) {
            Ok(()) => Ok(()),
            // Already over.
            Err(e) if e.errno == crate::sys::Errno::EPIPE => Ok(()),
            Err(e) => Err(SpawnError::Os(spawner::OsFailure::of(e)).into()),
        }
    }

    /// A handle that kills this jail from another thread, while this one
    /// waits (see [`Killer`]).
    pub fn killer(&self) -> Result<Killer, Error> {
        Ok(Killer {
            control: self.control.try_clone()?,
        })
    }

    /// How it ended, if it has: the outcome when the run is over, None
    /// while it runs (without waiting, and without closing stdin).
    pub fn try_wait(&mut self) -> Result<Option<Outcome>, Error> {
        if let Some(o) = &self.ended {
            return Ok(Some(o.clone()));
        }
        let mut fds = [libc::pollfd {
            fd: self.control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        match crate::sys::poll(&mut fds, 0) {
            Ok(0) => Ok(None),
            // The supervisor writes the outcome, then exits: read to EOF.
            Ok(_) => {
                let o = spawner::read_outcome(&self.control)?;
                self.ended = Some(o.clone());
                Ok(Some(o))
            }
            Err(e) => Err(SpawnError::Os(spawner::OsFailure::of(e)).into()),
        }
    }

    /// Wait for the end; return how it ended. Closes stdin first, as
    /// `std::process::Child::wait` does.
    pub fn wait(&mut self) -> Result<Outcome, Error> {
        drop(self.stdin.take());
        if let Some(o) = &self.ended {
            return Ok(o.clone());
        }
        Ok(spawner::read_outcome(&self.control)?)
    }

    /// Wait for the end, reading stdout and stderr (when piped) meanwhile.
    pub fn wait_with_output(mut self) -> Result<Output, Error> {
        drop(self.stdin.take());
        let read = |f: Option<std::fs::File>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(mut f) = f {
                    f.read_to_end(&mut v)?;
                }
                Ok::<_, std::io::Error>(v)
            })
        };
        let out = read(self.stdout.take());
        let err = read(self.stderr.take());
        let outcome = self.wait()?;
        let join = |h: std::thread::JoinHandle<std::io::Result<Vec<u8>>>| {
            h.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked")))
        };
        Ok(Output {
            outcome,
            stdout: join(out)?,
            stderr: join(err)?,
        })
    }
}

//! A fork server: one jail whose payload is a zygote (`Policy::zygote`, a
//! pre-started interpreter holding three capabilities in the jail's user
//! namespace), which forks a child per run; the child makes its own pid,
//! mount, net, ipc, uts and cgroup namespaces, drops every capability and
//! enforces the jail's Landlock ruleset and seccomp program on itself
//! before it reads its program, with stockade's own code: the library
//! `jail::zygote` hands the zygote (stockade-sys's `forked` steps). This
//! side: start the zygote, ask it for a child with the run's stdio, in a
//! run cgroup of its own, pump and cap its output, keep its deadline, kill
//! it (its pid namespace dies with it), and make its outcome.
//!
//! On cgroup v2 the zygote's jail cgroup is made the parent of its
//! children's ([`cgroup::Nest`]) and the zygote forks each child straight
//! into its run cgroup (clone3 `CLONE_INTO_CGROUP`): no child is moved, so
//! no run waits on the kernel's host-wide lock that a move takes. Where
//! cgroup v1 holds the limits, or the kernel refuses the clone, this side
//! moves the child after its fork.
//!
//! The zygote never sees a run's program, stdin or files: they are written
//! to the child's stdin after the fork. Nor does it keep any record of
//! runs: this side keeps each child's pidfd; the zygote answers each
//! request in turn, so an answer is known by its order (no run number
//! crosses the socket), and lets the kernel reap its children; the run's
//! init writes the payload's end and usage on the setup pipe.

#![deny(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cgroup;
use crate::jail::proto::{self, Report};
use crate::observe::learn::Learner;
use crate::observe::pump::Output;
use crate::outcome::{self, LayerReport, LimitReport, Outcome};
use crate::plan::limits::{self, CgroupLayer};
use crate::policy::Policy;
use crate::stages::{self, Stage};
use crate::sys;
use crate::{Child, Jail, Stdio};

mod cgroups;
mod error;
mod forked;
pub use cgroups::cannot_hold;
use cgroups::{probe_cgroups, unheld};
pub use error::ForkError;
pub use forked::Forked;

/// How long the zygote may take to import and confine its first child.
const READY_WITHIN_MS: i32 = 60_000;

/// What the zygote said of one run.
enum Msg {
    /// `placed`: born in the run cgroup it was asked into (no move).
    Forked {
        pidfd: OwnedFd,
        placed: bool,
    },
    Failed(String),
}

struct Shared {
    /// The zygote's pidfd, when it sent one: readable once it has ended.
    zygote: Option<OwnedFd>,
    sock: OwnedFd,
    /// Who waits for each answer, in the order of the requests.
    waiting: Mutex<VecDeque<mpsc::Sender<Msg>>>,
    /// The zygote went away: nothing more can be forked.
    gone: AtomicBool,
}

/// One fork server (a zygote jail) and what each of its children applies.
pub struct ForkServer {
    zygote: Mutex<Option<Child>>,
    shared: Arc<Shared>,
    /// The layers each child applies, as the outcome says them.
    layers: BTreeMap<outcome::Name, LayerReport>,
    maker: Arc<Maker>,
    /// The children's filter, when each passes its listener on (errno
    /// mode's records, kill mode's verdict: `jail::zygote::forked_listener`).
    seccomp: Option<crate::seccomp::Compiled>,
    /// The child forked ahead of the next request, and whether one is on
    /// its way (see [`ForkServer::ahead`]).
    next: Arc<Mutex<Option<Ahead>>>,
    refilling: Arc<AtomicBool>,
}

/// What forks a child and puts it in its run cgroup.
struct Maker {
    shared: Arc<Shared>,
    /// The host's cgroup hierarchies and our own cgroup, read once.
    host: Option<(cgroup::Hierarchies, String)>,
    /// Where the unified hierarchy held none of the template's limits and
    /// cgroup v1 held them (a hybrid host): why, per controller; each
    /// child then gets its v1 groups only (see [`cgroup::prepare_v1_in`]).
    climbed: Option<Vec<(cgroup::Controller, String)>>,
    /// The template's limits: a child forked ahead has them until its
    /// request's are written.
    template: cgroup::Request,
    /// Each child gets a socket to pass its seccomp listener on.
    notify: bool,
    /// The zygote's cgroup, made the parent of its children's (cgroup v2):
    /// each child is born in its run cgroup there, never moved.
    nest: Option<cgroup::Nest>,
}

/// A child forked and in its run cgroup, waiting for its go (its pipes'
/// other ends are its stdin, stdout, stderr and setup pipe).
struct Ahead {
    pidfd: OwnedFd,
    in_w: OwnedFd,
    out_r: OwnedFd,
    err_r: OwnedFd,
    setup_r: OwnedFd,
    cgroup: Option<cgroup::RunCgroup>,
    /// What holds each limit (the cgroup itself is `cgroup`).
    setup: cgroup::Setup,
    /// Where its seccomp listener comes, when it passes one on.
    notify: Option<OwnedFd>,
}

impl ForkServer {
    /// Start the zygote of `template` running `bootstrap` (python3 -c
    /// BOOTSTRAP SOCK_FD MODULES), and wait until it is ready.
    pub fn start(
        template: &Policy,
        bootstrap: &str,
        modules: &str,
    ) -> Result<ForkServer, ForkError> {
        // Its children share its jail's mounts: one overlay for every run.
        if !crate::policy::workspace::overlays(template).is_empty() {
            return Err(ForkError::Template(
                "an overlay (--overlay) would be every forked run's: not in a fork server's template",
            ));
        }
        let climbed = probe_cgroups(template)?;
        let (planned, seccomp) = match crate::plan::Plan::build(template) {
            Ok((plan, _resources)) => (
                crate::supervise::layers::planned(&plan),
                plan.layers
                    .seccomp
                    .filter(crate::jail::zygote::forked_listener),
            ),
            Err(e) => return Err(ForkError::Plan(e)),
        };
        let (ours, theirs) = sys::fdpass::socketpair(libc::SOCK_SEQPACKET)?;
        let mut p = template.clone();
        p.zygote = true;
        p.limits.timeout = None;
        p.limits.max_output = None;
        p.capture = false;
        p.keep_fds = vec![theirs.as_raw_fd()];
        p.argv = vec![
            "python3".into(),
            "-c".into(),
            bootstrap.into(),
            theirs.as_raw_fd().to_string().into(),
            modules.into(),
        ];
        let child = Jail::new(p)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Its own words (a traceback) go to the server's log.
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(ForkError::Spawn)?;
        drop(theirs);
        let mut buf = vec![0u8; 1 << 16];
        let mut fds = [pfd(ours.as_raw_fd())];
        let ready = match sys::poll(&mut fds, READY_WITHIN_MS) {
            Ok(1) => sys::fdpass::recv_with_fds(ours.as_raw_fd(), &mut buf),
            _ => Ok((0, Vec::new())),
        };
        let mut child = child;
        let (n, zygote_pidfd) = match ready {
            Ok((n, mut fds)) if n > 0 && buf[0] == b'R' => (n, fds.pop()),
            Ok((n, _)) if n > 0 && buf[0] == b'F' => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ForkError::FirstChild(
                    String::from_utf8_lossy(&buf[1..n]).into_owned(),
                ));
            }
            _ => {
                let _ = child.kill();
                let o = child.wait().map_err(ForkError::Spawn)?;
                return Err(ForkError::NotReady {
                    status: o.status,
                    exit_code: o.exit_code,
                    error: o.error,
                });
            }
        };
        // The layers of the zygote's jail, which its children share (the
        // root, rlimits, network, user namespace), as a cold jail of the
        // template reports them; each child's own namespaces and records
        // on top.
        let mut layers = planned;
        if let Some(u) = layers.get_mut("user_namespace") {
            if let Some(d) = u.detail.as_object_mut() {
                d.remove("created_by");
            }
            u.detail["shared_with"] =
                serde_json::json!("the fork server's zygote (no capability left in it)");
        }
        for r in proto::decode(&buf[1..n]) {
            if let Report::Layer(l) = r {
                let mut o = Outcome::new();
                o.layers = std::mem::take(&mut layers);
                crate::supervise::layers::record_payload_layer(&mut o, l);
                layers = o.layers;
            }
        }
        let shared = Arc::new(Shared {
            zygote: zygote_pidfd,
            sock: ours,
            waiting: Mutex::new(VecDeque::new()),
            gone: AtomicBool::new(false),
        });
        let host = cgroup::read_host().ok();
        let nest = cgroups::nest_for(&climbed, shared.zygote.as_ref(), template, host.as_ref());
        let reader = shared.clone();
        std::thread::spawn(move || reader.read_loop());
        let server = ForkServer {
            zygote: Mutex::new(Some(child)),
            shared: shared.clone(),
            layers,
            maker: Arc::new(Maker {
                shared,
                host,
                climbed,
                template: cgroup::Request::from(&template.limits),
                notify: seccomp.is_some(),
                nest,
            }),
            seccomp,
            next: Arc::new(Mutex::new(None)),
            refilling: Arc::new(AtomicBool::new(false)),
        };
        server.refill();
        Ok(server)
    }

    /// Whether the zygote can still fork.
    pub fn alive(&self) -> bool {
        self.shared.alive()
    }

    /// A child for `policy` (the template's but for its limits: its
    /// timeout, grace and output cap, and its memory, memory_high, cpus
    /// and pids, which make the child's run cgroup; what the zygote fixed
    /// for every child, its rlimits and tmpfs sizes, is the template's),
    /// handed `input` (its program header and files) on its stdin; the
    /// caller writes the rest of stdin when `stdin`. Its output is
    /// captured into the outcome, or (`policy.capture` off) passed on as
    /// it comes to [`Forked::stdout`] and [`Forked::stderr`], capped
    /// alike.
    pub fn run(&self, policy: &Policy, input: &[u8], stdin: bool) -> Result<Forked, ForkError> {
        let mut sinks = [None, None];
        let mut streams = [None, None];
        if !policy.capture {
            for (sink, stream) in sinks.iter_mut().zip(streams.iter_mut()) {
                let (r, w) = sys::pipe()?;
                *sink = Some(w);
                *stream = Some(std::fs::File::from(r));
            }
        }
        let [stdout, stderr] = streams;
        let (kill_ours, kill_theirs) = sys::fdpass::socketpair(libc::SOCK_SEQPACKET)?;
        let req = cgroup::Request::from(&policy.limits);
        let Ahead {
            pidfd,
            in_w,
            out_r,
            err_r,
            setup_r,
            cgroup: cg,
            setup,
            notify,
        } = self.ahead(&req)?;
        let mut learner = match (&self.seccomp, notify) {
            (Some(c), Some(sock)) => Some(Learner::for_compiled(c, (sock, None), None, false)),
            _ => None,
        };
        let l = &policy.limits;
        let limits = run_limits(policy, &setup);
        let cgroup_layer = crate::supervise::report::cgroup_report(&match &cg {
            Some(c) => limits::cgroup_layer(c, &limits::controllers(Some(&setup))),
            None => CgroupLayer::Skipped,
        });
        let t0 = Instant::now();
        // The go (the child forks its payload in the run's cgroup), the
        // header and files; a child that died meanwhile: EPIPE, its
        // outcome says why.
        let go = sys::forked::Go {
            tmp_size: policy.tmp_size,
            workdir_size: policy.workdir.size,
        };
        let _ = sys::write_all(in_w.as_raw_fd(), &go.encode());
        // Its first word (confined, or the step that failed) before the
        // run is handed over: a child forked ahead whose zygote went away
        // meanwhile (killed with the zygote's jail) ends without one, and
        // the run is started elsewhere instead.
        // And its zygote still there: a zygote that ended before now has
        // its jail kill this child too, however far it got.
        let said = match first_word(&setup_r, learner.as_mut()).filter(|_| self.shared.alive()) {
            Some(w) => w,
            None => {
                let _ = sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
                if let Some(c) = cg {
                    cgroup::remove_after_exit(c, Some(pidfd));
                }
                return Err(ForkError::ChildEnded);
            }
        };
        let _ = sys::write_all(in_w.as_raw_fd(), input);
        let stdin = if stdin {
            Some(std::fs::File::from(in_w))
        } else {
            drop(in_w);
            None
        };
        Ok(Forked {
            shared: self.shared.clone(),
            ended: false,
            pidfd,
            output: match &sinks {
                [Some(o), Some(e)] => {
                    Output::streamed(out_r, err_r, l.max_output, [o.as_raw_fd(), e.as_raw_fd()])
                }
                _ => Output::captured(out_r, err_r, l.max_output),
            },
            setup: Some(setup_r),
            said,
            learner,
            control: kill_ours,
            killer: Some(kill_theirs),
            cgroup: cg,
            t0,
            timeout: l.timeout,
            grace: l.grace,
            limits,
            layers: {
                let mut l = self.layers.clone();
                l.insert("cgroup", cgroup_layer);
                l
            },
            stdin,
            sinks,
            stdout,
            stderr,
            memory_limit: l.memory,
            workdir_size: policy.workdir.size,
        })
    }

    /// A child for a run with `req`'s limits, in its run cgroup and
    /// waiting for its go: the one forked ahead, with `req`'s limits
    /// written into its cgroup, when there is one and it is alive and
    /// its cgroup takes them; else one forked now. Either way the next
    /// is forked ahead, off this run's path (its fork, its cgroup made,
    /// and, where the child is moved into it, the move: a move may wait
    /// for an RCU grace period, see `docs/reference/performance.md`).
    fn ahead(&self, req: &cgroup::Request) -> Result<Ahead, ForkError> {
        let taken = self.next.lock().unwrap_or_else(|e| e.into_inner()).take();
        let ready = taken.and_then(|a| {
            let t = Instant::now();
            let fits = a.alive() && a.takes(req);
            stages::lap(Stage::ForkLimits, t);
            match fits {
                true => Some(a),
                false => {
                    a.discard();
                    None
                }
            }
        });
        let a = match ready {
            Some(a) => a,
            None => self.maker.make(req)?,
        };
        self.refill();
        Ok(a)
    }

    /// Fork the next child ahead (in a thread of its own), unless one is
    /// there or on its way.
    fn refill(&self) {
        if !self.shared.alive() || self.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let (maker, next, refilling) = (
            self.maker.clone(),
            self.next.clone(),
            self.refilling.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("stockade-fork-ahead".into())
            .spawn(move || {
                if let Ok(a) = maker.make(&maker.template) {
                    let old = next.lock().unwrap_or_else(|e| e.into_inner()).replace(a);
                    if let Some(old) = old {
                        old.discard();
                    }
                }
                refilling.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            self.refilling.store(false, Ordering::SeqCst);
        }
    }

    /// Kill the zygote (its jail's init kills every child left) and wait.
    pub fn shutdown(&self) {
        let child = self.zygote.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut c) = child {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A child being forked ahead: its fork fails with the zygote gone
        // (its cgroup removed then), or it is there to let go of.
        let t = Instant::now();
        while self.refilling.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let next = self.next.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(a) = next {
            a.discard();
        }
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Maker {
    /// Fork a child for `req`'s limits: its run cgroup made, the zygote
    /// asked, the child born in the cgroup (in the nest) or moved there.
    fn make(&self, req: &cgroup::Request) -> Result<Ahead, ForkError> {
        let started = Instant::now();
        let (in_r, in_w) = sys::pipe()?;
        let (out_r, out_w) = sys::pipe()?;
        let (err_r, err_w) = sys::pipe()?;
        let (setup_r, setup_w) = sys::pipe()?;
        let notify = match self.notify {
            true => Some(sys::fdpass::socketpair(libc::SOCK_SEQPACKET)?),
            false => None,
        };
        let nested = self.nest.as_ref().and_then(|n| n.prepare(req));
        let into = nested.is_some();
        let mut setup = match (nested, &self.host, &self.climbed) {
            (Some(setup), _, _) => setup,
            (None, Some((h, pc)), Some(climbed)) => cgroup::prepare_v1_in(req, h, pc, climbed)
                .unwrap_or_else(|| cgroup::prepare_in(req, h, pc)),
            (None, Some((h, pc)), None) => cgroup::prepare_in(req, h, pc),
            (None, None, _) => cgroup::prepare(req),
        };
        if let Some(why) = unheld(req, &setup) {
            return Err(why);
        }
        let asked = stages::lap(Stage::ForkCgroupMake, started);
        let mut fds = vec![
            in_r.as_raw_fd(),
            out_w.as_raw_fd(),
            err_w.as_raw_fd(),
            setup_w.as_raw_fd(),
        ];
        fds.extend(notify.as_ref().map(|(_, theirs)| theirs.as_raw_fd()));
        // In the nest: the zygote forks the child into its run cgroup
        // ("C", the cgroup's directory last).
        let into = match into {
            true => setup.cgroup.as_ref().and_then(|c| c.dir_fd()),
            false => None,
        };
        fds.extend(into);
        let op = if into.is_some() { b'C' } else { b'F' };
        let rx = self.shared.ask(op, &fds)?;
        drop((in_r, out_w, err_w, setup_w));
        let notify = notify.map(|(ours, _theirs)| ours);
        let (pidfd, placed) = match rx.recv() {
            Ok(Msg::Forked { pidfd, placed }) => (pidfd, placed && into.is_some()),
            Ok(Msg::Failed(why)) => return Err(ForkError::Refused(why)),
            _ => return Err(ForkError::Gone),
        };
        let forked = stages::lap(Stage::ForkZygote, asked);
        let mut cg = setup.cgroup.take();
        // Born there: nothing to move (and no fork_cgroup_move stage).
        if let (Some(c), false) = (cg.as_mut(), placed) {
            let Some(host_pid) = pid_of(&pidfd) else {
                self.shared.end(&pidfd);
                return Err(ForkError::ChildPid);
            };
            let placed = c
                .place_v1(host_pid)
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    if c.has_v2() {
                        c.add_pid(host_pid).map_err(|e| e.to_string())
                    } else {
                        Ok(())
                    }
                });
            if let Err(why) = placed {
                self.shared.end(&pidfd);
                return Err(ForkError::Move(why));
            }
            stages::lap(Stage::ForkCgroupMove, forked);
        }
        Ok(Ahead {
            pidfd,
            in_w,
            out_r,
            err_r,
            setup_r,
            cgroup: cg,
            setup,
            notify,
        })
    }
}

impl Ahead {
    /// Its child has not ended (a zygote that went away took it along).
    fn alive(&self) -> bool {
        let mut fds = [pfd(self.pidfd.as_raw_fd())];
        matches!(sys::poll(&mut fds, 0), Ok(0))
    }

    /// Whether its cgroup holds exactly the limits `req` asks for, each
    /// as a cgroup limit, and took `req`'s values.
    fn takes(&self, req: &cgroup::Request) -> bool {
        let s = &self.setup;
        let same = [
            (req.memory.is_some(), &s.memory),
            (req.memory_high.is_some(), &s.memory_high),
            (req.cpus.is_some(), &s.cpu),
            (req.pids.is_some(), &s.pids),
        ]
        .iter()
        .all(|(asked, e)| match asked {
            true => e.is_cgroup(),
            false => matches!(e, cgroup::Enforced::NotRequested),
        });
        same && self
            .cgroup
            .as_ref()
            .is_none_or(|c| c.set_limits(req).is_ok())
    }

    /// Let it go: the child is killed, its cgroup removed once it has
    /// exited (off this path).
    fn discard(self) {
        let _ = sys::pidfd_send_signal(&self.pidfd, libc::SIGKILL);
        if let Some(c) = self.cgroup {
            cgroup::remove_after_exit(c, Some(self.pidfd));
        }
    }
}

impl Shared {
    /// The zygote has not gone away: not seen gone, its process not
    /// ended (its pidfd: a child forked ahead, which the zygote's jail
    /// kills once the zygote has ended, is seen dead only after), and its
    /// socket not closed (read_loop may not have heard it yet).
    fn alive(&self) -> bool {
        if self.gone.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(z) = &self.zygote {
            let mut fds = [pfd(z.as_raw_fd())];
            if matches!(sys::poll(&mut fds, 0), Ok(1)) {
                return false;
            }
        }
        let mut fds = [libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        }];
        let closed = matches!(sys::poll(&mut fds, 0), Ok(1))
            && fds[0].revents & (libc::POLLHUP | libc::POLLRDHUP) != 0;
        !closed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<mpsc::Sender<Msg>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ask the zygote `op` ("F": fork a child with these stdin, stdout,
    /// stderr and setup pipe); its answer comes on the receiver.
    fn ask(&self, op: u8, fds: &[RawFd]) -> Result<mpsc::Receiver<Msg>, ForkError> {
        let (tx, rx) = mpsc::channel();
        // The request and its place in the queue together: answers come
        // in the order of the requests.
        let mut w = self.lock();
        if self.gone.load(Ordering::SeqCst) {
            return Err(ForkError::Gone);
        }
        sys::fdpass::send_with_fds(self.sock.as_raw_fd(), &[op], fds).map_err(|e| {
            // The zygote is gone (EPIPE): nothing more can be asked of it.
            self.gone.store(true, Ordering::SeqCst);
            ForkError::Sys(e)
        })?;
        w.push_back(tx);
        Ok(rx)
    }

    /// Kill the child of `pidfd` and wait for its end (a run that ends
    /// without its outcome; the zygote's kernel reaps it).
    fn end(&self, pidfd: &OwnedFd) {
        let _ = sys::pidfd_send_signal(pidfd, libc::SIGKILL);
        let mut fds = [pfd(pidfd.as_raw_fd())];
        let _ = sys::poll(&mut fds, -1);
    }

    /// Hand each of the zygote's answers to the run that waits for it.
    fn read_loop(&self) {
        let mut buf = [0u8; 1024];
        loop {
            let Ok((n, mut fds)) = sys::fdpass::recv_with_fds(self.sock.as_raw_fd(), &mut buf)
            else {
                break;
            };
            let body = &buf[1.min(n)..n];
            let msg = match buf[..n].first() {
                Some(b'P') if !fds.is_empty() => Msg::Forked {
                    pidfd: fds.remove(0),
                    placed: body.first() == Some(&b'c'),
                },
                Some(b'E') => Msg::Failed(String::from_utf8_lossy(body).into_owned()),
                // Gone, or an answer out of step: no later one can be
                // placed.
                _ => break,
            };
            if let Some(tx) = self.lock().pop_front() {
                let _ = tx.send(msg);
            }
        }
        self.gone.store(true, Ordering::SeqCst);
        // Every run waiting hears that the zygote is gone.
        self.lock().clear();
    }
}

/// How long a child may take from its go to its first word.
const CONFINED_WITHIN_MS: i32 = 30_000;

/// A child's first word on its setup pipe (what one read gives once it
/// is readable), or None when it ended without one or said nothing in
/// [`CONFINED_WITHIN_MS`].
///
/// Meanwhile `learner` hears the child's listener, and answers what the
/// child's last steps (after its filter) may ask of it.
fn first_word(setup: &OwnedFd, mut learner: Option<&mut Learner>) -> Option<Vec<u8>> {
    let until = Instant::now() + Duration::from_millis(CONFINED_WITHIN_MS as u64);
    loop {
        let left = until.saturating_duration_since(Instant::now()).as_millis() as i32;
        let mut fds = vec![pfd(setup.as_raw_fd())];
        if let Some(l) = learner.as_deref() {
            fds.extend(l.fds().into_iter().map(pfd));
        }
        match sys::poll(&mut fds, left) {
            Ok(_) if fds[0].revents != 0 => break,
            Ok(n) if n > 0 => {
                for p in &fds[1..] {
                    if let (true, Some(l)) = (p.revents != 0, learner.as_deref_mut()) {
                        l.on_ready(p.fd);
                    }
                }
            }
            // A signal (sys::poll says 0 then too): wait out the rest.
            Ok(_) if left > 0 => continue,
            _ => return None,
        }
    }
    let mut buf = vec![0u8; 4096];
    match sys::read(setup.as_raw_fd(), &mut buf) {
        Ok(n) if n > 0 => {
            buf.truncate(n);
            Some(buf)
        }
        _ => None,
    }
}

/// The payload's end from what the child said on the setup pipe: `k` once
/// confined, then its init's record ([`sys::forked::End`]).
fn payload_end(said: &[u8]) -> Option<sys::forked::End> {
    sys::forked::End::decode(said.strip_prefix(b"k")?)
}

/// Every limit of a child's run and what holds it: as a cold run's plan
/// decides it, from the run's own cgroup (the rlimits it would choose are
/// the zygote's, which its children inherit).
fn run_limits(policy: &Policy, setup: &cgroup::Setup) -> BTreeMap<outcome::Name, LimitReport> {
    let c = limits::controllers(Some(setup));
    let mut d = limits::decide(&policy.limits, &c, policy.tmp_size, &limits::TmpCap::Tmpfs);
    // Why each limit climbed to the rung that holds it, as a cold run says.
    limits::explain_climbs(&mut d.report, setup);
    d.report
        .into_iter()
        .map(|(k, r)| {
            (
                k,
                LimitReport {
                    limit: r.limit,
                    enforced_by: r.enforced_by,
                    why: r.why,
                    hit: None,
                    verdict: None,
                    oom_killed: None,
                },
            )
        })
        .collect()
}

/// The pid of `pidfd`'s process in our pid namespace (its fdinfo).
fn pid_of(pidfd: &OwnedFd) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|p: &i32| *p > 0)
}

fn pfd(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

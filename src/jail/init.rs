//! pid 1 of the jail: builds the root, forks the payload (pid 2), then reaps
//! orphans, forwards signals, and exits after the payload with every other
//! process in the jail killed.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::signal::Signal;

use super::proto::{self, Report};
use super::{caps, payload, rootfs};
use crate::plan::Plan;
use crate::sys;

fn report(fd: RawFd, r: &Report) {
    let _ = sys::write_all(fd, &proto::encode(r));
}

fn fail(fd: RawFd, step: &str, path: &str, reason: &str) -> ! {
    report(
        fd,
        &Report::Setup {
            step: step.into(),
            path: path.into(),
            reason: reason.into(),
        },
    );
    sys::exit_now(125)
}

/// Entry point of the cloned child. Never returns. `stdio`, when given,
/// replaces stdout and stderr (the supervisor's capped pipes).
pub fn main(plan: &Plan, ctl: OwnedFd, rep: OwnedFd, stdio: Option<(OwnedFd, OwnedFd)>) -> ! {
    let rep_fd = rep.as_raw_fd();
    sys::scrub_cmdline(b"stockade-init");
    if let Some((out, err)) = stdio {
        #[allow(unsafe_code)]
        // SAFETY: fds 1 and 2 are owned by no value of init (the inherited
        // stdout and stderr are only ever used by number).
        let moved = unsafe { sys::dup2(out.as_raw_fd(), 1).and(sys::dup2(err.as_raw_fd(), 2)) };
        if moved.is_err() {
            sys::exit_now(125);
        }
    }

    // Open the bind sources while the supervisor writes the id maps: the
    // host checks them against our unchanged host credentials either way.
    let mut sources = None;
    if !plan.fallback {
        match rootfs::open_sources(plan) {
            Ok(s) => sources = Some(s),
            Err(e) => fail(rep_fd, e.step, &e.path, &e.err.to_string()),
        }
    }
    // Wait until the supervisor has written the id maps.
    let mut b = [0u8; 1];
    match sys::read(ctl.as_raw_fd(), &mut b) {
        Ok(1) if b[0] == proto::GO => {}
        Ok(1) if b[0] == proto::GO_REROOT_CGROUP => {
            if let Err(e) = sys::unshare_cgroupns() {
                fail(rep_fd, "cgroup namespace", "", &e.to_string());
            }
        }
        _ => sys::exit_now(125),
    }

    if !plan.fallback {
        if let Err(e) = caps::become_jail_user(plan.inner_uid, plan.inner_gid) {
            fail(rep_fd, "switch to jail user", "", &e.to_string());
        }
    }
    // After the credential change (which clears it): die with the
    // supervisor. In a pid namespace our death is the jail's: the kernel
    // kills every process in it. Without one, our children would outlive
    // us under the host's init, so the signal is one we catch (blocked
    // here, read from the signalfd): we kill the whole tree, then exit.
    let pdeathsig = if plan.fallback {
        if let Err(e) = sys::block_signals(&[SUPERVISOR_GONE]) {
            fail(rep_fd, "parent death signal", "", &e.to_string());
        }
        SUPERVISOR_GONE as i32
    } else {
        libc::SIGKILL
    };
    if let Err(e) = sys::set_pdeathsig(pdeathsig) {
        fail(rep_fd, "parent death signal", "", &e.to_string());
    }
    // The supervisor may have died before the line above.
    let mut pf = [libc::pollfd {
        fd: ctl.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if sys::poll(&mut pf, 0).is_ok() && pf[0].revents & libc::POLLHUP != 0 {
        sys::exit_now(125);
    }

    let mut held = None;
    if plan.fallback {
        // No pid namespace: orphans of the payload must still come back to
        // us so the whole tree can be found and killed.
        if let Err(e) = sys::set_child_subreaper() {
            fail(rep_fd, "child subreaper", "", &e.to_string());
        }
    } else {
        let sources = sources.take().expect("opened above");
        match rootfs::build(plan, sources) {
            Ok((notes, h)) => {
                held = Some(h);
                if notes.chrooted {
                    report(
                        rep_fd,
                        &Report::Layer {
                            name: "pivot".into(),
                            detail: serde_json::json!({ "status": "chroot", "why": "pivot_root refused (EPERM): the new root was moved over / and chrooted into" }).to_string(),
                        },
                    );
                }
                if let Some(why) = notes.proc_unavailable {
                    report(
                        rep_fd,
                        &Report::Layer {
                            name: "proc".into(),
                            detail: serde_json::json!({ "status": "unavailable", "why": why })
                                .to_string(),
                        },
                    );
                }
            }
            Err(e) => fail(rep_fd, e.step, &e.path, &e.err.to_string()),
        }
        if let Err(e) = sys::sethostname(&plan.hostname) {
            fail(rep_fd, "hostname", &plan.hostname, &e.to_string());
        }
        if plan.new_netns {
            // The supervisor made it while we built the root.
            match sys::fdpass::recv_fd(ctl.as_raw_fd()) {
                Ok(Some(ns)) => {
                    if let Err(e) = sys::enter_netns(&ns) {
                        fail(rep_fd, "network", "lo", &e.to_string());
                    }
                }
                // The supervisor is gone (or failed and says why).
                _ => sys::exit_now(125),
            }
        }
    }
    // No one in the jail may ptrace init or read its memory.
    if let Err(e) = sys::set_dumpable(false) {
        fail(rep_fd, "dumpable", "", &e.to_string());
    }

    let mut sigs = vec![
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ];
    if plan.fallback {
        sigs.push(SUPERVISOR_GONE);
    }
    let sfd = match sys::signalfd_for(&sigs) {
        Ok(s) => s,
        Err(e) => fail(rep_fd, "signalfd", "", &e.to_string()),
    };

    let (sfd_raw, ctl_raw) = (sfd.as_raw_fd(), ctl.as_raw_fd());
    let mut start_payload = || {
        #[allow(unsafe_code)]
        // SAFETY: the payload's own copies of the numbers: the values that
        // own them in init (`sfd`, `ctl`) stay with init, and the fd table
        // is not shared.
        unsafe {
            sys::close_raw(sfd_raw);
            sys::close_raw(ctl_raw);
        }
        payload::main(plan, rep_fd)
    };
    #[allow(unsafe_code)]
    // SAFETY: init is single-threaded, and the payload closes only its own
    // copies of init's fds (above) and ends in execve or exit_now.
    let spawned = unsafe { sys::spawn_vfork(&mut start_payload) };
    let child = match spawned {
        Ok(pid) => pid,
        Err(e) => fail(rep_fd, "start payload", "", &e.to_string()),
    };

    drop(held);
    let mut peak = Peak::default();
    // The payload leads a session of its own (setsid, done before the
    // spawn returned): its process group, unless something left it.
    let group = (plan.fallback && sys::getpgid(child) == Ok(child)).then_some(child);
    let own_uid = plan.uid_lease.as_ref().map(|l| l.id);
    let tree = Tree::new(!plan.fallback, own_uid, group);
    let status = supervise(
        child,
        &sfd,
        ctl.as_raw_fd(),
        plan.sample_ms,
        &mut peak,
        &tree,
    );
    // The payload is gone, or the supervisor is: nothing else in the jail
    // outlives it.
    tree.end();
    let Some(status) = status else {
        // No one is left to read a report or to remove the run directory
        // (and detach its tmpfs, which is on the host's mount table).
        if let Some(d) = &plan.run_dir {
            if plan.run_dir_tmpfs {
                let _ = sys::umount_detach(d);
            }
            let _ = std::fs::remove_dir_all(d);
        }
        sys::exit_now(125)
    };
    // The jail is empty. Let go of the output pipes so the supervisor sees
    // their end now, then send the last records in one write: the
    // supervisor may finish on them without waiting for this process's
    // exit (unmapping its memory, tearing down the namespaces).
    #[allow(unsafe_code)]
    // SAFETY: no value of init owns its stdout and stderr (used by number).
    unsafe {
        sys::close_raw(1);
        sys::close_raw(2);
    }
    let mut last = proto::encode(&children_usage());
    last.extend(proto::encode(&Report::Peak {
        tasks: peak.tasks,
        vm_bytes: peak.vm_bytes,
    }));
    last.extend(proto::encode(&Report::Status(status)));
    let _ = sys::write_all(rep_fd, &last);
    sys::exit_now(0)
}

/// What every reaped process of the jail used.
fn children_usage() -> Report {
    use nix::sys::resource::{getrusage, UsageWho};
    let us = |t: nix::sys::time::TimeVal| (t.tv_sec() as u64) * 1_000_000 + t.tv_usec() as u64;
    match getrusage(UsageWho::RUSAGE_CHILDREN) {
        Ok(r) => Report::Usage {
            user_us: us(r.user_time()),
            system_us: us(r.system_time()),
            maxrss_kb: r.max_rss().max(0) as u64,
        },
        Err(_) => Report::Usage {
            user_us: 0,
            system_us: 0,
            maxrss_kb: 0,
        },
    }
}

/// The fallback's parent death signal (see `main`): our parent, the
/// supervisor, is gone.
const SUPERVISOR_GONE: Signal = Signal::SIGUSR1;

/// Every process of the jail.
struct Tree {
    /// In our own pid namespace: "everyone but init" is `kill(-1)`. Without
    /// one, kill(-1) would reach the caller's other processes, so the jail is
    /// the tree of init's descendants (init is a subreaper, orphans come back).
    contained: bool,
    /// The root-started fallback: the host uid leased to this jail alone
    /// (see plan::uids). Every process that has it is the jail's.
    own_uid: Option<u32>,
    me: u32,
    /// Without a pid namespace, the payload's process group (most of the
    /// jail, unless they left it) while the payload is not reaped: see
    /// [`Tree::kill_group`].
    group: std::cell::Cell<Option<i32>>,
}

/// What /proc/PID/stat says of a process: None when it is dead (a zombie
/// whose every thread has exited, or gone), else its number of threads.
fn live_threads(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start after its last ')'.
    let mut f = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = f.next()?;
    // num_threads is field 20, the 18th after the state. A zombie thread
    // group leader whose other threads still run is not dead.
    let threads = f.nth(16).and_then(|t| t.parse::<u32>().ok()).unwrap_or(1);
    if (state == "Z" || state == "X") && threads <= 1 {
        return None;
    }
    Some(threads)
}

/// Append the children of every thread of `pid` to `out`.
fn children_of(pid: u32, threads: u32, out: &mut Vec<u32>) {
    let mut read = |path: std::path::PathBuf| {
        if let Ok(c) = std::fs::read_to_string(path) {
            out.extend(c.split_whitespace().filter_map(|k| k.parse::<u32>().ok()));
        }
    };
    if threads <= 1 {
        read(format!("/proc/{pid}/task/{pid}/children").into());
        return;
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            read(t.path().join("children"));
        }
    }
}

impl Tree {
    fn new(contained: bool, own_uid: Option<u32>, group: Option<i32>) -> Tree {
        Tree {
            contained,
            own_uid,
            me: std::process::id(),
            group: std::cell::Cell::new(group),
        }
    }

    /// SIGKILL to the payload's process group, at once: exact for what is
    /// in it (a signal to a group reaches a child being forked, like
    /// kill(-1) in [`Tree::end`]). Only while the payload is not reaped:
    /// its pid, the group's number, cannot name anyone else's group then.
    fn kill_group(&self) {
        if let Some(g) = self.group.take() {
            let _ = sys::kill(-g, libc::SIGKILL);
        }
    }

    /// The payload was reaped: its group's number may be free again.
    fn forget_group(&self) {
        self.group.set(None);
    }

    /// One pass over init's descendants, parents before children:
    /// `visit(pid)` runs before the children of `pid` are listed. Zombies
    /// are not looked into (their children went to a subreaper when they
    /// died). Linear in the number
    /// of processes: each is visited once (a set remembers them), costing a
    /// read of its stat and of its children. Returns the live ones, and how
    /// many were seen, zombies included.
    fn walk(&self, mut visit: impl FnMut(u32)) -> Walked {
        let mut seen = std::collections::HashSet::new();
        let mut live = Vec::new();
        let mut todo = vec![(self.me, 1u32)];
        let mut kids = Vec::new();
        while let Some((p, threads)) = todo.pop() {
            kids.clear();
            children_of(p, threads, &mut kids);
            kids.retain(|&k| k != self.me && seen.insert(k));
            // Newest first (the ones still forking, in a flood of orphans
            // coming back to us), and all of them before any is looked
            // into: a visit is one system call, a look two files.
            for &kid in kids.iter().rev() {
                visit(kid);
            }
            for &kid in kids.iter().rev() {
                if let Some(t) = live_threads(kid) {
                    live.push(kid);
                    todo.push((kid, t));
                }
            }
        }
        Walked {
            live,
            seen: seen.len(),
        }
    }

    /// Pids of every live descendant of init.
    fn members(&self) -> Vec<u32> {
        self.walk(|_| {}).live
    }

    /// Send `sig` to every process of the jail, once (for SIGKILL, the
    /// payload's group first, see [`Tree::end`]).
    fn signal_all(&self, sig: i32) {
        if self.contained {
            let _ = sys::kill(-1, sig);
            return;
        }
        if let Some(uid) = self.own_uid {
            // Exact, as kill(-1) in a pid namespace (see `end`): every
            // process with the jail's own uid, in one pass.
            if sys::kill_every_process_of(uid, sig).is_ok() {
                return;
            }
        }
        if sig == libc::SIGKILL {
            self.kill_group();
        }
        self.walk(|p| {
            let _ = sys::kill(p as i32, sig);
        });
    }

    /// Kill every process of the jail and reap them all: returns when init
    /// has no child left.
    fn end(&self) {
        if self.contained {
            // Exact: kill(-1) signals every process of the namespace but
            // us in one pass under the kernel's task list lock, and a fork
            // racing with it either finishes first (its child is in the
            // list) or fails (copy_process sees the pending SIGKILL under
            // the same lock; a signal sent to many processes also reaches a
            // child being forked). No process of the jail is left to fork,
            // so blocking waits reap the rest.
            let _ = sys::kill(-1, libc::SIGKILL);
            while let Ok(Some(_)) = sys::waitpid(-1, false) {}
            return;
        }
        // No pid namespace, and kill(-1) would reach the caller's other
        // processes (the rootless fallback runs the jail as the caller; the
        // root-started one as a uid other jails share). So walk the tree,
        // killing each process before listing its children: once SIGKILL
        // is pending a process cannot fork again, so its set of children is
        // final; those it leaves behind when it dies are reparented to us
        // and found by the next pass. Passes repeat until we have no child
        // left. Dead children are reaped in one batch between passes, so a
        // pass never wades through a pile of zombies, and a pass follows a
        // batch of deaths, not each death: linear, however many processes
        // the jail made.
        //
        // With a uid of the jail's own, kill(-1) as that uid is exact, as
        // above: one pass, then blocking waits (orphans come back to us,
        // a subreaper).
        if let Some(uid) = self.own_uid {
            if sys::kill_every_process_of(uid, libc::SIGKILL).is_ok() {
                while let Ok(Some(_)) = sys::waitpid(-1, false) {}
                return;
            }
        }
        // First the payload's group, if the payload is not reaped yet (the
        // supervisor is gone); otherwise it was killed when the payload
        // ended.
        self.kill_group();
        let mut batch = REAP_BATCH;
        loop {
            // Reap the dead first (cheaper than looking at them), but no
            // more than a batch: a forker that escaped the kills must not
            // keep us reaping its orphans instead of passing again to kill
            // it.
            if let Reaped::Empty = reap_dead(batch) {
                return;
            }
            let pass = self.walk(|p| {
                let _ = sys::kill(p as i32, libc::SIGKILL);
            });
            batch = 2 * pass.seen + 64;
            // Those found are dying or dead: wait for one death rather
            // than spin.
            if !matches!(sys::waitpid(-1, false), Ok(Some(_))) {
                return;
            }
        }
    }
}

/// What [`Tree::walk`] found.
struct Walked {
    live: Vec<u32>,
    seen: usize,
}

/// What is left of init's children after [`reap_dead`].
enum Reaped {
    /// Init has no child left: the jail is empty.
    Empty,
    /// Some children still run, or more were dead than we reaped.
    Running,
}

/// Reap up to `max` children that are dead already, without waiting.
fn reap_dead(max: usize) -> Reaped {
    for _ in 0..max {
        match sys::waitpid(-1, true) {
            Ok(Some(_)) => {}
            Ok(None) => return Reaped::Running,
            // ECHILD (nothing else is expected with -1 and WNOHANG).
            Err(_) => return Reaped::Empty,
        }
    }
    Reaped::Running
}

/// Peaks seen by sampling the jail's /proc.
#[derive(Default)]
struct Peak {
    tasks: u64,
    vm_bytes: u64,
}

impl Peak {
    /// Count the tasks (threads included) alive in the jail, excluding init,
    /// and the largest VmPeak of one process.
    fn sample(&mut self, tree: &Tree) {
        let pids: Vec<u32> = if tree.contained {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                return;
            };
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
                .filter(|p| *p != 1)
                .collect()
        } else {
            tree.members()
        };
        let mut tasks = 0u64;
        for pid in pids {
            let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                continue;
            };
            for line in st.lines() {
                if let Some(v) = line.strip_prefix("Threads:") {
                    tasks += v.trim().parse::<u64>().unwrap_or(1);
                } else if let Some(v) = line.strip_prefix("VmPeak:") {
                    let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    self.vm_bytes = self.vm_bytes.max(kb * 1024);
                }
            }
        }
        self.tasks = self.tasks.max(tasks);
    }
}

/// Children reaped per wake-up of [`supervise`].
const REAP_BATCH: usize = 4096;

/// Reap until the payload ends; return its raw wait status, or None when
/// the supervisor is gone.
fn supervise(
    child: i32,
    sfd: &nix::sys::signalfd::SignalFd,
    ctl: RawFd,
    sample_ms: i32,
    peak: &mut Peak,
    tree: &Tree,
) -> Option<i32> {
    let mut forward_next = false;
    // Sampling reads /proc for every process: on every wake-up only when a
    // limit's classification depends on it (the rlimit fallbacks ask for a
    // short period), otherwise once per period. The payload alone is one task.
    let eager = (0..=10).contains(&sample_ms);
    if eager {
        peak.sample(tree);
    } else {
        peak.tasks = 1;
    }
    // More dead children than one batch reaps: poll without waiting, so
    // the supervisor's messages are still read during a flood of orphans.
    let mut backlog = false;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: sfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ctl,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        match sys::poll(&mut fds, if backlog { 0 } else { sample_ms }) {
            Ok(0) if backlog && !eager => {}
            Ok(0) => peak.sample(tree),
            Ok(_) if eager => peak.sample(tree),
            Ok(_) => {}
            // Should not happen; keep reaping without busy-looping.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
        if fds[0].revents != 0 {
            while let Ok(Some(si)) = sfd.read_signal() {
                let sig = si.ssi_signo as i32;
                if sig == SUPERVISOR_GONE as i32 {
                    return None;
                }
                if sig != libc::SIGCHLD {
                    let _ = sys::kill(child, sig);
                }
            }
        }
        if fds[0].revents != 0 || backlog {
            if sys::ended_unreaped(child) {
                // Most of the jail at once, before the payload's zombie
                // lets go of the group's number.
                tree.kill_group();
                if let Ok(Some((_, st))) = sys::waitpid(child, true) {
                    return Some(st);
                }
            }
            // The dead, in one batch: each waitpid costs the same however
            // many orphans came back.
            backlog = true;
            for _ in 0..REAP_BATCH {
                match sys::waitpid(-1, true) {
                    Ok(Some((pid, st))) if pid == child => {
                        tree.forget_group();
                        return Some(st);
                    }
                    Ok(Some(_)) => {}
                    _ => {
                        backlog = false;
                        break;
                    }
                }
            }
        }
        if fds[1].revents != 0 {
            let mut buf = [0u8; 64];
            match sys::read(ctl, &mut buf) {
                // The supervisor is gone (in a pid namespace, PDEATHSIG
                // kills us all at once; without one, it is caught above).
                Ok(0) | Err(_) => return None,
                Ok(n) => {
                    for &b in &buf[..n] {
                        // A FORWARD and its signal number may arrive in
                        // two reads: the stream has no record boundaries.
                        if forward_next {
                            forward_next = false;
                            let _ = sys::kill(child, b as i32);
                            continue;
                        }
                        match b {
                            proto::TERM_ALL => tree.signal_all(libc::SIGTERM),
                            proto::KILL_ALL => tree.signal_all(libc::SIGKILL),
                            proto::FORWARD => forward_next = true,
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

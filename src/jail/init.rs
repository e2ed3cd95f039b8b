//! pid 1 of the jail: builds the root, forks the payload (pid 2), then reaps
//! orphans, forwards signals, and exits after the payload with every other
//! process in the jail killed. `main` is the list of steps, in order; a
//! step that fails ends init where it failed ([`OrFail`]).

#![deny(unsafe_code)]

mod reap;
mod tree;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;

use self::reap::{Peak, Waiter};
use self::tree::Tree;
use super::error::{JailError, Step};
use super::proto::{self, LayerRecord, OrFail, Report, Reporter};
use super::{caps, ipc, payload, rootfs};
use crate::plan::{step, BecomeUser, Namespaces, Plan, RootStep};
use crate::sys::{self, SysError};
use std::path::{Path, PathBuf};

/// The fallback's parent death signal (see [`die_with_supervisor`]): our
/// parent, the supervisor, is gone.
const SUPERVISOR_GONE: Signal = Signal::SIGUSR1;

/// Entry point of the cloned child. Never returns. `stdio`, when given,
/// replaces stdout and stderr (the supervisor's capped pipes); `trees`,
/// the binds' mount trees the supervisor idmapped (one per plan step, or
/// none: see `supervise::idmap`), attached instead of clones of our own;
/// `hello`, the payload's hello socket (see `payload::say_hello`);
/// `uppers`, where the overlays' upper directories go (see
/// [`hand_uppers`]).
pub fn main(
    plan: &Plan,
    ctl: OwnedFd,
    rep: OwnedFd,
    stdio: Option<(OwnedFd, OwnedFd)>,
    trees: Vec<Option<rootfs::Idmapped>>,
    hello: Option<OwnedFd>,
    uppers: Option<OwnedFd>,
) -> ! {
    let report = Reporter::new(rep.as_raw_fd());
    sys::scrub_cmdline(b"stockade-init");
    take_stdio(stdio, report);
    // Open the bind sources while the supervisor writes the id maps: the
    // host checks them against our unchanged host credentials either way.
    let ns = plan.mode.namespaces();
    let sources = ns.map(|ns| (ns, rootfs::open_sources(plan, trees).or_fail(report)));
    wait_for_go(&ctl).or_fail(report);
    let id = &plan.identity;
    match id.become_user {
        BecomeUser::Policy => caps::become_jail_user(id.uid, id.gid)
            .step("switch to jail user", "")
            .or_fail(report),
        BecomeUser::Keep => {}
        BecomeUser::Joined { .. } => joined_ids(id.become_user).or_fail(report),
    }
    die_with_supervisor(!plan.mode.own_pidns(), &ctl).or_fail(report);
    // Before the root is built: the helper writes through the host's /proc.
    let ipc_bounded = ns.is_some() && !plan.limits.ipc_sysctls.is_empty() && {
        let got = ipc::bound(plan);
        if let Err(why) = &got {
            let why = why.clone();
            report.send(&Report::Layer(LayerRecord::IpcUnbounded { why }));
        }
        got.is_ok()
    };
    let host_proc = match ns.is_some_and(|ns| ns.disable_userns) {
        true => Some(disable_userns(1 + u32::from(ipc_bounded)).or_fail(report)),
        false => None,
    };
    let proc_raw = host_proc.as_ref().map(|f| f.as_raw_fd());
    let held = match sources {
        Some((ns, sources)) => Some(enter_root(plan, ns, &ctl, sources, uppers, report)),
        // No pid namespace: orphans of the payload must still come back to
        // us so the whole tree can be found and killed.
        None => {
            sys::set_child_subreaper()
                .step("child subreaper", "")
                .or_fail(report);
            None
        }
    };
    // While init still holds CAP_SYS_ADMIN over the jail's IPC namespace
    // (before --userns2), in it (after ipc::bound): held until the
    // payload has made its Landlock rule on it, then closed.
    let mqueue = plan.layers.landlock.as_ref().is_some_and(|l| l.mqueue);
    let mqueue = mqueue
        .then(|| sys::fs_detached("mqueue").map_err(|e| format!("no detached mount of it: {e}")));
    let lock = payload::FromInit {
        log: audit_verdict(plan, &ctl).or_fail(report),
        mqueue: mqueue
            .as_ref()
            .map(|m| m.as_ref().map(|fd| fd.as_fd()).map_err(String::as_str)),
    };
    if ns.is_some_and(|ns| !ns.own_pidns) {
        // A joined pid namespace, not ours: kill(-1) there would reach
        // processes that are not the jail's; the jail is our descendants,
        // and orphans must come back to us to be found.
        sys::set_child_subreaper()
            .step("child subreaper", "")
            .or_fail(report);
    }
    if let Some(fd) = ns.and_then(|ns| ns.join_userns2) {
        // The caller's user namespace under the jail's (bwrap's
        // `--userns2`): the payload starts in it.
        sys::setns_user(fd)
            .step(step::JOIN_INNER_USERNS, "")
            .or_fail(report);
    }
    // Held (open and locked) until init exits.
    let _locks = lock_files(plan).or_fail(report);
    // No one in the jail may ptrace init or read its memory.
    sys::set_dumpable(false)
        .step("dumpable", "")
        .or_fail(report);
    if ns.is_some_and(|ns| ns.as_pid_1) {
        // The command is pid 1: init's own steps end here, and the
        // supervisor takes init's exit as the command's.
        drop(held);
        let hello = hello.as_ref().map(|h| h.as_raw_fd());
        match payload::main(plan, report, proc_raw, lock, hello) {}
    }
    let sfd = signal_fd(!plan.mode.own_pidns(), report);
    let hello_raw = hello.as_ref().map(|h| h.as_raw_fd());
    let child = start_payload(plan, &sfd, &ctl, proc_raw, lock, hello_raw, report);
    // The payload has said hello (and exec'd): ours is of no more use,
    // nor is the mqueue mount its Landlock rule was made on.
    drop(hello);
    drop(mqueue);
    drop(held);
    let (status, peak) = wait_for_payload(plan, child, &sfd, &ctl);
    match status {
        Some(status) => finish(status, &peak, report),
        None => abandon(plan, report),
    }
}

/// The supervisor's output pipes become stdout and stderr.
fn take_stdio(stdio: Option<(OwnedFd, OwnedFd)>, report: Reporter) {
    let Some((out, err)) = stdio else {
        return;
    };
    #[allow(unsafe_code)]
    // SAFETY: fds 1 and 2 are owned by no value of init (the inherited
    // stdout and stderr are only ever used by number).
    let moved = unsafe { sys::dup2(out.as_raw_fd(), 1).and(sys::dup2(err.as_raw_fd(), 2)) };
    if moved.is_err() {
        report.fail(JailError::Silent("stdout and stderr"));
    }
}

/// Wait until the supervisor has written the id maps (GO), re-rooting the
/// cgroup namespace when it says so.
/// The supervisor's verdict on Landlock's records (`Landlock::log_tag`):
/// whether the payload asks for its denials to be logged. False without
/// a tag (nothing asked).
fn audit_verdict(plan: &Plan, ctl: &OwnedFd) -> Result<bool, JailError> {
    if plan.layers.log_tag().is_none() {
        return Ok(false);
    }
    let mut b = [0u8; 1];
    match sys::read(ctl.as_raw_fd(), &mut b) {
        Ok(1) if b[0] == proto::AUDIT_LOG => Ok(true),
        Ok(1) if b[0] == proto::AUDIT_NO_LOG => Ok(false),
        _ => Err(JailError::Silent("no audit verdict from the supervisor")),
    }
}

fn wait_for_go(ctl: &OwnedFd) -> Result<(), JailError> {
    let mut b = [0u8; 1];
    match sys::read(ctl.as_raw_fd(), &mut b) {
        Ok(1) if b[0] == proto::GO => Ok(()),
        Ok(1) if b[0] == proto::GO_REROOT_CGROUP => {
            sys::unshare_cgroupns().step("cgroup namespace", "")
        }
        _ => Err(JailError::Silent("no go from the supervisor")),
    }
}

/// In a joined user namespace: the ids asked for, and in place of a host
/// root the namespace does not map (the kernel shows it as the overflow
/// id), the policy's (see [`BecomeUser::Joined`]). The error's value is
/// the id it switched to (`step::SWITCH_USER`).
fn joined_ids(b: BecomeUser) -> Result<(), JailError> {
    let BecomeUser::Joined {
        uid,
        gid,
        unmapped_root,
        unmapped_root_group,
    } = b
    else {
        return Ok(());
    };
    let overflow = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .unwrap_or(crate::policy::NOBODY)
    };
    let unmapped = |now: u32, f: &str| now == overflow(f);
    let uid =
        uid.or(unmapped_root.filter(|_| unmapped(sys::getuid(), "/proc/sys/kernel/overflowuid")));
    let gid = gid
        .or(unmapped_root_group
            .filter(|_| unmapped(sys::getegid(), "/proc/sys/kernel/overflowgid")));
    caps::become_ids(uid, gid).map_err(|(what, id, err)| JailError::Sys {
        step: step::SWITCH_USER,
        path: String::new(),
        err,
        value: Some(format!("{what} {id}")),
    })
}

/// After the credential change (which clears it): die with the
/// supervisor. In a pid namespace our death is the jail's: the kernel
/// kills every process in it. Without one, our children would outlive
/// us under the host's init, so the signal is one we catch (blocked
/// here, read from the signalfd): we kill the whole tree, then exit.
fn die_with_supervisor(fallback: bool, ctl: &OwnedFd) -> Result<(), JailError> {
    let pdeathsig = if fallback {
        sys::block_signals(&[SUPERVISOR_GONE]).step("parent death signal", "")?;
        SUPERVISOR_GONE as i32
    } else {
        libc::SIGKILL
    };
    sys::set_pdeathsig(pdeathsig).step("parent death signal", "")?;
    // The supervisor may have died before the line above.
    let mut pf = [libc::pollfd {
        fd: ctl.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if sys::poll(&mut pf, 0).is_ok() && pf[0].revents & libc::POLLHUP != 0 {
        return Err(JailError::Silent("the supervisor is gone"));
    }
    Ok(())
}

/// The jail's own root (what could not be built, reported), hostname and
/// network namespace. The returned fds are the root's build's, see
/// [`rootfs::Held`].
fn enter_root(
    plan: &Plan,
    ns: &Namespaces,
    ctl: &OwnedFd,
    sources: rootfs::Sources,
    uppers: Option<OwnedFd>,
    report: Reporter,
) -> rootfs::Held {
    let (mut notes, held) = rootfs::build(plan, sources).or_fail(report);
    hand_uppers(uppers, std::mem::take(&mut notes.uppers));
    if notes.chrooted {
        report.send(&Report::Layer(LayerRecord::Chroot));
    }
    if let Some(refused) = notes.proc_unavailable {
        let why = refused.to_string();
        report.send(&Report::Layer(LayerRecord::ProcUnavailable { why }));
    }
    sys::sethostname(&plan.root.hostname)
        .step("hostname", &plan.root.hostname)
        .or_fail(report);
    if ns.new_netns {
        join_network(ctl, report);
    }
    watch_covers(plan, ctl);
    held
}

/// The overlays' upper directories (on their tmpfs, which an open fd
/// keeps after the jail's mount namespace is gone) to the supervisor, in
/// one message on their own socket: one byte per fd, the overlay's index.
/// It reads them after the run (`supervise::workspace`), to list and
/// commit the changes. Best effort: without them the supervisor says the
/// changes are unknown and commits nothing.
fn hand_uppers(sock: Option<OwnedFd>, uppers: Vec<(usize, OwnedFd)>) {
    let Some(sock) = sock else { return };
    let index: Vec<u8> = uppers.iter().map(|(i, _)| *i as u8).collect();
    let fds: Vec<i32> = uppers.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
    let _ = sys::fdpass::send_with_fds(sock.as_raw_fd(), &index, &fds);
}

/// Watch the covers over denied paths for opens and reads (see
/// `rootfs::watch_covers`) and hand the watch to the supervisor, which
/// records what the payload tries of them. Best effort: without a watch
/// the masks still hold, and the supervisor says they are unwatched.
fn watch_covers(plan: &Plan, ctl: &OwnedFd) {
    let covers: Vec<PathBuf> = plan
        .root
        .steps
        .iter()
        .filter_map(|s| match s {
            RootStep::Cover { dst, .. } => Some(Path::new("/").join(dst)),
            _ => None,
        })
        .collect();
    let covers: Vec<&Path> = covers.iter().map(PathBuf::as_path).collect();
    if let Some((fd, n)) = rootfs::watch_covers(&covers) {
        let mut data = vec![proto::MASKS];
        data.extend_from_slice(&n.to_ne_bytes());
        let _ = sys::fdpass::send_fd_with(ctl.as_raw_fd(), fd.as_raw_fd(), &data);
    }
}

/// One more user namespace under the jail's, and no other: its
/// `user.max_user_namespaces` becomes 1, as bwrap sets it, and the payload
/// takes that one (`payload::nest_userns`), where no capability of its
/// reaches the jail's sysctl. Written through the host's /proc while it is
/// still in view (before the root is built); the sysctl is the writer's
/// user namespace's. `max` is 2 when the IPC bounds' helper already holds
/// one (`jail::ipc`). Returns that /proc, which the payload writes its id
/// maps through.
fn disable_userns(max: u32) -> Result<OwnedFd, JailError> {
    use std::io::Write;
    const SYSCTL: &str = "/proc/sys/user/max_user_namespaces";
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(SYSCTL)
        .map_err(|e| SysError::io("open", SYSCTL, &e))
        .step(step::OPEN_USERNS_LIMIT, SYSCTL)?;
    f.write_all(max.to_string().as_bytes())
        .map_err(|e| SysError::io("write", max, &e))
        .step(step::SET_USERNS_LIMIT, SYSCTL)
        .map_err(|e| e.with_value(max.to_string()))?;
    sys::open_dir_path(std::path::Path::new("/proc")).step("disable userns", "/proc")
}

/// Open and read-lock each of the plan's lock files (inside the root), as
/// bwrap's pid 1 does.
fn lock_files(plan: &Plan) -> Result<Vec<OwnedFd>, JailError> {
    let mut held = Vec::new();
    for p in &plan.root.lock_files {
        let fd: OwnedFd = std::fs::File::open(p)
            .map_err(|e| SysError::io("open", p.display(), &e))
            .step(step::OPEN_LOCK_FILE, p)?
            .into();
        sys::read_lock(&fd).step(step::LOCK_FILE, p)?;
        held.push(fd);
    }
    Ok(held)
}

/// Join the network namespace the supervisor made while we built the root.
fn join_network(ctl: &OwnedFd, report: Reporter) {
    match sys::fdpass::recv_fd(ctl.as_raw_fd()) {
        Ok(Some(ns)) => sys::enter_netns(&ns).step("network", "lo").or_fail(report),
        // The supervisor is gone (or failed and says why).
        _ => report.fail(JailError::Silent(
            "no network namespace from the supervisor",
        )),
    }
}

/// Block the signals init handles and read them from a signalfd: SIGCHLD,
/// those it forwards to the payload, and (fallback) the supervisor's death.
fn signal_fd(fallback: bool, report: Reporter) -> SignalFd {
    let mut sigs = vec![
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ];
    if fallback {
        sigs.push(SUPERVISOR_GONE);
    }
    sys::signalfd_for(&sigs)
        .step("signalfd", "")
        .or_fail(report)
}

/// Start the payload in init's memory (`CLONE_VM|CLONE_VFORK`); returns its
/// pid once it has called execve or exited.
fn start_payload(
    plan: &Plan,
    sfd: &SignalFd,
    ctl: &OwnedFd,
    host_proc: Option<i32>,
    lock: payload::FromInit,
    hello: Option<i32>,
    report: Reporter,
) -> i32 {
    let (sfd_raw, ctl_raw) = (sfd.as_raw_fd(), ctl.as_raw_fd());
    let mut start = || {
        #[allow(unsafe_code)]
        // SAFETY: the payload's own copies of the numbers: the values that
        // own them in init (`sfd`, `ctl`) stay with init, and the fd table
        // is not shared.
        unsafe {
            sys::close_raw(sfd_raw);
            sys::close_raw(ctl_raw);
        }
        payload::main(plan, report, host_proc, lock, hello)
    };
    #[allow(unsafe_code)]
    // SAFETY: init is single-threaded, and the payload closes only its own
    // copies of init's fds (above) and ends in execve or exit_now.
    let spawned = unsafe { sys::spawn_vfork(&mut start) };
    spawned.step("start payload", "").or_fail(report)
}

/// Reap, forward and sample until the payload ends (its wait status) or
/// the supervisor is gone (None); then kill and reap everything left.
fn wait_for_payload(plan: &Plan, child: i32, sfd: &SignalFd, ctl: &OwnedFd) -> (Option<i32>, Peak) {
    // The payload leads a session of its own (setsid, done before the
    // spawn returned): its process group, unless something left it.
    let own_pidns = plan.mode.own_pidns();
    let group = (!own_pidns && sys::getpgid(child) == Ok(child)).then_some(child);
    let own_uid = plan.identity.lease.as_ref().map(|l| l.id);
    let tree = Tree::new(own_pidns, own_uid, group);
    let mut waiter = Waiter::new(child, sfd, ctl.as_raw_fd(), plan.limits.sample_ms, &tree);
    // The workdir whose filling ends the run: watched from here, inside
    // the jail, where its tmpfs is.
    if let Some((dir, _)) = plan.limits.workdir_cap.as_ref().filter(|_| tree.contained) {
        waiter.workdir = sys::open_dir_path(dir).ok();
    }
    let status = waiter.run();
    // What the payload left counts too: a workdir it filled and then
    // ended on its own (ENOSPC) is the run's disk_limit as well.
    waiter.check_workdir();
    // The payload is gone, or the supervisor is: nothing else in the jail
    // outlives it.
    tree.end();
    (status, waiter.peak)
}

/// The jail is empty. Let go of the output pipes so the supervisor sees
/// their end now, then send the last records in one write: the supervisor
/// may finish on them without waiting for this process's exit (unmapping
/// its memory, tearing down the namespaces).
fn finish(status: i32, peak: &Peak, report: Reporter) -> ! {
    #[allow(unsafe_code)]
    // SAFETY: no value of init owns its stdout and stderr (used by number).
    unsafe {
        sys::close_raw(1);
        sys::close_raw(2);
    }
    report.send_all(&[
        children_usage(),
        Report::Peak {
            tasks: peak.tasks,
            vm_bytes: peak.vm_bytes,
            workdir_full: peak.workdir_full,
        },
        Report::Status(status),
    ]);
    sys::exit_now(0)
}

/// The supervisor is gone: no one is left to read a report or to remove the
/// run directory (and detach its tmpfs, which is on the host's mount
/// table).
fn abandon(plan: &Plan, report: Reporter) -> ! {
    if let Some(f) = plan.mode.fallback() {
        if f.run_dir_tmpfs {
            let _ = sys::umount_detach(&f.run_dir);
        }
        let _ = std::fs::remove_dir_all(&f.run_dir);
    }
    report.fail(JailError::Silent("the supervisor is gone"))
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

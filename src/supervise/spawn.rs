//! One run, as its steps: the plan's limits into the outcome, the channels,
//! clone, release (cgroup, id maps, GO, network), the wait
//! (supervise::watch), reaping, the cgroup's removal, the seccomp
//! listener's last word, and the conclusion (supervise::report, with the
//! status from supervise::classify).

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

use super::channels::Channels;
use super::childpid::{ChildPid, Hello};
use super::watch::{has_status, Watch};
use super::{classify, idmap, layers, namespaces, report, workspace};
use crate::cgroup;
use crate::egress::{Denials, Proxy};
use crate::jail::proto;
use crate::observe::audit::AuditLog;
use crate::observe::learn::{self, Learner};
use crate::observe::lines::Lines;
use crate::observe::masks::MaskWatch;
use crate::observe::pump::Output;
use crate::outcome::Outcome;
use crate::plan::{step, Namespaces, Plan, Resources, SetupError};
use crate::policy::Network;
use crate::sys::{self, Cloned, Errno};

/// The result of [`run`].
pub enum Spawned {
    /// The jail ran (or failed to set up) and this is how it ended.
    Ran(Box<Outcome>),
    /// The kernel refused to create the namespaces; nothing was started.
    Refused { errno: Errno, why: String },
}

/// Why a run stopped short.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// A setup step failed: the outcome is a setup error.
    #[error("{0}")]
    Setup(#[from] SetupError),
    /// The kernel refused the namespaces (and why it likely did).
    #[error("{errno}: {why}")]
    Refused { errno: Errno, why: String },
}

/// Run the plan to completion, with what its build acquired (released
/// here, on every path). The caller must be single-threaded. `control`,
/// when given, is a socket of whoever asked for the run: a `K` on it, or
/// its end (the asker is gone), kills the jail.
pub fn run(plan: &Plan, res: Resources, control: Option<RawFd>) -> Spawned {
    sys::default_sigchld();
    reap_earlier();
    let start = Instant::now();
    let mut o = Outcome::new();
    o.masked = plan.root.masked.clone();
    let Resources {
        cgroup,
        seccomp,
        run_dir,
        audit,
        secrets,
    } = res;
    let landlock = plan.layers.landlock.as_ref();
    if let Some(why) = landlock.and_then(|l| l.unrecorded.as_ref()) {
        o.denials_unrecorded.insert("landlock".into(), why.clone());
    }
    let lines = Lines::to(plan.channels.denials_fd);
    let audit = match (audit, plan.layers.log_tag()) {
        (Some(fd), Some(tag)) => Some(AuditLog::new(fd, tag, lines.clone())),
        _ => None,
    };
    let got = run_inner(
        plan, cgroup, seccomp, audit, secrets, &lines, &mut o, start, control,
    );
    o.denial_lines_dropped = lines.finish();
    match got {
        Ok(()) => {}
        Err(RunError::Setup(e)) => o.set_setup_error(&e),
        Err(RunError::Refused { errno, why }) => {
            workspace::unprepare(plan);
            return Spawned::Refused { errno, why };
        }
    }
    // The run directory goes (its tmpfs detached) before the clock stops.
    if let Some(w) = run_dir.and_then(|d| d.remove()) {
        o.warnings.push(w);
    }
    // A held clock counts from when the caller started it.
    let from = crate::observe::deadline::started_at().unwrap_or(start);
    o.usage.wall_time_ms = from.elapsed().as_millis() as u64;
    crate::observe::deadline::restate_limits(&mut o);
    Spawned::Ran(Box::new(o))
}

#[allow(clippy::too_many_arguments)]
fn run_inner(
    plan: &Plan,
    mut cg: Option<cgroup::RunCgroup>,
    seccomp: Option<(OwnedFd, OwnedFd)>,
    audit: Option<AuditLog>,
    secrets: Option<crate::plan::secrets::Held>,
    lines: &Lines,
    o: &mut Outcome,
    start: Instant,
    control: Option<RawFd>,
) -> Result<(), RunError> {
    // 1. What the plan decided of the limits.
    report::record_limits(plan, o);
    // 2. Channels: control socket, report pipe, output pipes, signals;
    //    the seccomp listener's socket; the overlays' kept layers.
    let channels = Channels::open(plan)?;
    let since = workspace::prepare(plan)?;
    let mut learner = listener(plan, seccomp, lines);
    // Init scrubs its copy of our command line (see sys::scrub_cmdline).
    sys::record_argv_range_from_proc();
    // Started by host root (bwrap's): the binds' trees, idmapped here,
    // where host root may (init attaches them), before any joined user
    // namespace takes that away.
    let (trees, idmap_warning) = idmap::trees(plan);
    o.warnings.extend(idmap_warning);
    // 3. Into the namespaces the caller gave (for good: this process runs
    //    only this jail), then clone into the new ones (all but the
    //    network's: see 4).
    join_namespaces(plan)?;
    let (cloned, via) = clone(plan, cg.as_ref())?;
    let (pid, pidfd) = match cloned {
        // The secrets' fds are the supervisor's alone.
        Cloned::Child => channels.enter_jail(plan, trees, secrets),
        Cloned::Parent { pid, pidfd } => (pid, pidfd),
    };
    let intercept = interceptor(plan, secrets)?;
    // Init has its own copies.
    drop(trees);
    let ours = channels.ours();
    if let Some(l) = &mut learner {
        l.close_child_end();
    }
    // While the child waits for GO: alive, and still ours to inspect.
    let namespaces = ns_inodes(plan, pid);
    // 4. Into the cgroup (when clone3 could not put it there), id maps,
    //    GO, then the network namespace, made while init builds the root.
    let ns = plan.mode.namespaces();
    let maps_told = ns.is_some_and(|ns| ns.userns_block_fd.is_some());
    if maps_told && !plan.channels.pid_reports.is_empty() {
        // The caller writes the id maps: it learns the pid first, init's,
        // the jail's only process so far.
        ChildPid::new(&plan.channels.pid_reports, namespaces.clone(), None).tell(pid);
    }
    let (net, listener, audit_ok) = match release(plan, cg.as_mut(), via, pid, &pidfd, &ours.ctl) {
        Ok(r) => r,
        Err(e) => {
            // The child may have failed first (it opens the bind sources
            // before it waits for GO): its own error is the one to report.
            return Err(layers::failed_first(&pidfd, pid, &ours.rep)
                .unwrap_or(e)
                .into());
        }
    };
    // Else the payload's pid, told when it says hello (see
    // supervise::childpid).
    let hello = ours.hello.map(|sock| {
        let what = ChildPid::new(&plan.channels.pid_reports, namespaces, net);
        Hello::new(sock, what, pid)
    });
    // The egress proxy (threads from here on: see crate::egress).
    let proxy = start_proxy(plan, listener, intercept, lines)?;
    // 5. Wait, pumping output and watching the deadline.
    let output = Output::new(plan, ours.out, ours.err);
    let mut w = Watch::new(plan, pidfd, ours.ctl, output, learner, cg, control, start);
    // Landlock's records, when the kernel's audit settings allow them.
    match audit_ok {
        Ok(()) => w.audit = audit,
        Err(why) => {
            o.denials_unrecorded.insert("landlock".into(), why);
        }
    }
    w.masks = MaskWatch::for_plan(plan, lines.clone(), w.ctl.as_raw_fd());
    w.hello = hello;
    let reports = w.wait(&ours.rep, &ours.sfd);
    if let Some(h) = w.hello.take() {
        h.finish();
    }
    w.meter_last();
    let connections = proxy.map(|p| {
        let record = egress(plan).is_some_and(|e| e.record);
        record_denials(p.finish(), record, o)
    });
    let decoded = proto::decode(&reports);
    // 6. Reap init, remove the cgroup, hear the listener's last word.
    let waited = reap_init(plan, pid, &w, &decoded)?;
    let cg_stats = w.cg.take().map(|c| remove_cgroup(c, o));
    let ((violation, unix_report, unheard, allocation_refused), unwatched) = last_words(&mut w, o);
    // 7. What happened: usage, the payload's records and layers, then the
    //    status.
    let ended = Ended {
        via,
        decoded,
        waited,
        cg_stats,
        violation,
        unix_report,
        unheard,
        allocation_refused,
        watch: w,
    };
    conclude(plan, o, ended)?;
    record_connections(connections, o);
    // 8. The overlays' changes: listed, diffed, committed.
    workspace::conclude(plan, ours.uppers, since, o);
    // A jail that failed before its root was built had no covers to watch.
    if let (Some(why), false) = (unwatched, o.status == crate::outcome::Status::SetupError) {
        o.denials_unrecorded.insert("mask".into(), why);
    }
    Ok(())
}

/// The secrets' values read and the run's authority made (its
/// certificate in the jail's trust file), while the child waits for GO.
fn interceptor(
    plan: &Plan,
    secrets: Option<crate::plan::secrets::Held>,
) -> Result<Option<crate::egress::Interceptor>, SetupError> {
    match (secrets, egress(plan).and_then(|e| e.intercept.as_ref())) {
        (Some(held), Some(i)) => crate::egress::Interceptor::prepare(i, held).map(Some),
        _ => Ok(None),
    }
}

/// The egress proxy on the listener made in the jail's network namespace.
fn start_proxy(
    plan: &Plan,
    listener: Option<OwnedFd>,
    intercept: Option<crate::egress::Interceptor>,
    lines: &Lines,
) -> Result<Option<Proxy>, SetupError> {
    let (Some(l), Some(e)) = (listener, egress(plan)) else {
        return Ok(None);
    };
    let lines = lines.clone();
    Proxy::start(l, e.clone(), intercept, move |d| lines.send(d))
        .map(Some)
        .map_err(|e| SetupError::io("network", "egress proxy", &e))
}

/// The proxy's refusals into the outcome; a warning counts those beyond
/// the outcome's cap.
/// In record mode, the hosts reached into the outcome's `learned`.
/// The connections are given back for [`record_connections`].
fn record_denials(
    d: Denials,
    record: bool,
    o: &mut Outcome,
) -> (Vec<crate::egress::Connection>, u64) {
    if record {
        o.learned.get_or_insert_with(Default::default).hosts = d.contacted;
    }
    o.denials.extend(d.list);
    if d.more > 0 {
        o.denials_more.insert("network".into(), d.more);
        o.warnings.push(format!(
            "{} more network denials not recorded (the first {} are)",
            d.more,
            crate::outcome::MAX_DENIALS
        ));
    }
    (d.connections, d.connections_more)
}

/// The proxy's connections into the network layer's detail (once the
/// layers are concluded): `connections`, and `connections_more` beyond
/// the cap.
fn record_connections(c: Option<(Vec<crate::egress::Connection>, u64)>, o: &mut Outcome) {
    let (Some((list, more)), Some(l)) = (c, o.layers.get_mut("net_namespace")) else {
        return;
    };
    if let serde_json::Value::Object(m) = &mut l.detail {
        m.insert("connections".into(), serde_json::json!(list));
        if more > 0 {
            m.insert("connections_more".into(), more.into());
        }
    }
}

/// The inode numbers of the child's namespaces but the network's (made
/// after GO), for `--info-fd`: read before GO, while the child is alive
/// and has our credentials (after GO it may be gone, or not ours to read).
fn ns_inodes(plan: &Plan, pid: i32) -> Vec<(&'static str, u64)> {
    use std::os::unix::fs::MetadataExt;
    if plan.channels.pid_reports.is_empty() {
        return Vec::new();
    }
    let dir = super::namespaces::proc_dir(pid);
    ["cgroup", "ipc", "mnt", "pid", "uts"]
        .into_iter()
        .filter_map(|ns| {
            let m = std::fs::metadata(format!("{dir}/ns/{ns}")).ok()?;
            Some((ns, m.ino()))
        })
        .collect()
}

/// The caller's user namespace (`Namespaces::join_userns`), then its pid
/// namespace for our next child (`Namespaces::join_pidns`). The user
/// namespace first: the pid namespace's owner is where we need
/// CAP_SYS_ADMIN.
fn join_namespaces(plan: &Plan) -> Result<(), SetupError> {
    let Some(ns) = plan.mode.namespaces() else {
        return Ok(());
    };
    if let Some(fd) = ns.join_userns {
        sys::setns_user(fd).map_err(|e| SetupError::sys(step::JOIN_USERNS, "", &e))?;
    }
    if let Some(fd) = ns.join_pidns {
        sys::setns_pid(fd).map_err(|e| SetupError::sys(step::JOIN_PIDNS, "", &e))?;
    }
    Ok(())
}

/// The supervisor's end of the seccomp listener (every mode, mediation),
/// over the plan's socket pair.
fn listener(plan: &Plan, sockets: Option<(OwnedFd, OwnedFd)>, lines: &Lines) -> Option<Learner> {
    let c = plan.layers.seccomp.as_ref()?;
    let (ours, theirs) = sockets?;
    let sockets = (ours, Some(theirs));
    let ids = plan.mode.fallback().and_then(|f| f.ids);
    let mut l = Learner::for_compiled(c, sockets, ids, plan.layers.network == Network::Host);
    l.send_lines_to(lines.clone());
    Some(l)
}

/// clone3 (into the run's cgroup when there is one; plainly when that is
/// refused, the child then moved in before it is let go), or clone. The
/// namespaces refused is [`RunError::Refused`], with the likely reasons.
fn clone(plan: &Plan, cg: Option<&cgroup::RunCgroup>) -> Result<(Cloned, sys::CloneVia), RunError> {
    let into = cg.and_then(|c| c.dir_fd());
    // A new pid namespace under a joined one: through an intermediate
    // born in the joined one (see `sys::clone_jail_nested`).
    let flags = plan.mode.clone_flags();
    let joined_pidns = plan
        .mode
        .namespaces()
        .is_some_and(|ns| ns.join_pidns.is_some());
    let nested = joined_pidns && flags & libc::CLONE_NEWPID as u64 != 0;
    let clone_jail = match nested {
        true => sys::clone_jail_nested,
        false => sys::clone_jail,
    };
    let mut attempt = clone_jail(flags, into);
    if into.is_some() && attempt.as_ref().is_err_and(|e| e.call == "clone3") {
        attempt = clone_jail(flags, None);
    }
    match attempt {
        Ok(c) => Ok(c),
        Err(e)
            if flags != 0
                && matches!(
                    e.errno,
                    Errno::EPERM | Errno::ENOSPC | Errno::EACCES | Errno::EINVAL
                ) =>
        {
            let why = namespaces::userns_refusal_reasons(e.errno).join("; ");
            Err(RunError::Refused {
                errno: e.errno,
                why,
            })
        }
        Err(e) => Err(SetupError::sys(step::CREATE_NAMESPACES, "", &e).into()),
    }
}

/// init's wait status and usage. Init's last records say the jail is
/// empty; what is left is init's own exit (unmapping its memory, tearing
/// down the namespaces), which takes longer than a small command's whole
/// run. Without a cgroup to remove there is nothing to wait for: the
/// exiting init is reaped by the next run in this process, or after we
/// exit (None). Except in a joined pid namespace (not the jail's own):
/// there init, orphaned, would go to that namespace's pid 1, which may
/// never reap it, and stay a zombie among the caller's processes.
fn reap_init(
    plan: &Plan,
    pid: i32,
    w: &Watch,
    decoded: &[proto::Report],
) -> Result<Option<(i32, libc::rusage)>, SetupError> {
    if w.init_done || w.cg.is_some() || !has_status(decoded) || !plan.mode.own_pidns() {
        let waited = sys::wait4(pid).map_err(|e| SetupError::sys("wait", "", &e))?;
        Ok(Some(waited))
    } else {
        unreaped().push(pid);
        Ok(None)
    }
}

/// Everything in the cgroup is gone with init: read what it used, remove
/// it (a warning in the outcome when it cannot be).
fn remove_cgroup(c: cgroup::RunCgroup, o: &mut Outcome) -> cgroup::Stats {
    c.kill();
    let stats = c.stats();
    let path = c.path().to_path_buf();
    if let Err(e) = c.remove() {
        o.warnings
            .push(format!("cgroup {} not removed: {e}", path.display()));
    }
    // A crashed stockade's cgroups this run's start killed (`Plan::build`)
    // and could not remove at once: they have had the run's time to empty.
    cgroup::cleanup_stale_pending(std::time::Duration::from_millis(500));
    stats
}

/// The seccomp listener's last word: the syscalls learned and refused
/// (into the outcome), the violation that killed the jail (kill mode),
/// the connect mediation's report, whether no listener came though
/// one was due (refusals unrecorded), and whether an allocation larger
/// than RLIMIT_AS had left was seen (the allocation meter).
fn finish_listener(w: &mut Watch, o: &mut Outcome) -> Listened {
    let violation = w.learner.as_ref().and_then(|l| l.killed_for());
    let mut unix_report = None;
    let mut unheard = false;
    let mut allocation_refused = false;
    if let Some(l) = w.learner.take() {
        unix_report = l.unix_report();
        let learn = l.mode() == learn::Mode::Learn;
        let learns_paths = l.learns_paths();
        let heard = l.finish();
        unheard = heard.unheard;
        allocation_refused = heard.allocations_refused > 0;
        if learn {
            // The CLI prints them as `stockade: seccomp-learn: …`.
            o.seccomp_learned = Some(heard.learned);
        }
        if learns_paths {
            let l = o.learned.get_or_insert_with(Default::default);
            l.paths = heard
                .paths
                .into_iter()
                .map(|(path, a)| crate::outcome::LearnedPath {
                    path,
                    access: a.as_str().to_string(),
                })
                .collect();
            l.more_paths = heard.more_paths;
        }
        report::seccomp_denials(o, heard.denials, heard.more);
    }
    (violation, unix_report, unheard, allocation_refused)
}

/// The observers' last words: the seccomp listener's, the audit
/// reader's and the covers' watch's (why some covers went unwatched).
fn last_words(w: &mut Watch, o: &mut Outcome) -> (Listened, Option<String>) {
    let listened = finish_listener(w, o);
    finish_audit(w, o);
    (listened, finish_masks(w, o))
}

/// [`finish_listener`]'s answer.
type Listened = (Option<(i64, String)>, Option<serde_json::Value>, bool, bool);

/// The Landlock audit reader's last word (the jail is gone): this run's
/// Landlock refusals, and how many more the kernel counted.
fn finish_audit(w: &mut Watch, o: &mut Outcome) {
    let Some(a) = w.audit.take() else { return };
    let heard = a.finish();
    o.denials.extend(heard.denials);
    if heard.more > 0 {
        o.denials_more.insert("landlock".into(), heard.more);
    }
    if heard.lost {
        o.warnings.push(
            "landlock: some audit records were dropped before stockade could read them (the socket's buffer overflowed); the Landlock denials listed are not all".into(),
        );
    }
}

/// The covers' watch, last: the attempts on masked paths seen; why some
/// covers went unwatched, if they did.
fn finish_masks(w: &mut Watch, o: &mut Outcome) -> Option<String> {
    let m = w.masks.take()?;
    let heard = m.finish(w.ctl.as_raw_fd());
    o.denials.extend(heard.denials);
    if heard.more > 0 {
        o.denials_more.insert("mask".into(), heard.more);
    }
    if heard.overflowed {
        o.warnings.push(
            "masks: the kernel's inotify queue overflowed; some attempts on masked paths are not counted".into(),
        );
    }
    heard.unwatched
}

/// What the wait left for [`conclude`].
struct Ended {
    via: sys::CloneVia,
    decoded: Vec<proto::Report>,
    /// init's wait status and usage, when it was waited for.
    waited: Option<(i32, libc::rusage)>,
    cg_stats: Option<cgroup::Stats>,
    /// Kill mode: the refused syscall the jail was killed for.
    violation: Option<(i64, String)>,
    /// The fallback's connect mediation: which sockets connected how.
    unix_report: Option<serde_json::Value>,
    /// No seccomp listener came: refusals went unrecorded.
    unheard: bool,
    /// The allocation meter saw RLIMIT_AS refuse an allocation.
    allocation_refused: bool,
    watch: Watch,
}

/// Fill the outcome from what the run left: usage, captured output, the
/// jail's records and layers, then how it ended.
fn conclude(plan: &Plan, o: &mut Outcome, e: Ended) -> Result<(), RunError> {
    let Ended {
        via,
        decoded,
        waited,
        cg_stats,
        violation,
        unix_report,
        unheard,
        allocation_refused,
        watch: mut w,
    } = e;
    report::usage_of_init(o, waited.as_ref());
    report::output(o, &w.output);
    let records = report::Records::read(decoded, waited.is_some(), o)?;
    layers::record_layers(plan, o, via, records.layers);
    report::unix_sockets(o, unix_report);
    if let Some((errno, path)) = records.exec_error {
        report::exec_failed(o, errno, path);
        return Ok(());
    }
    if unheard {
        report::seccomp_unheard(o);
    }
    let as_pid_1 = plan.mode.namespaces().is_some_and(|ns| ns.as_pid_1);
    let end = report::payload_end(records.status, waited.as_ref(), as_pid_1)?;
    report::set_end(o, end);
    if let Some(v) = violation {
        report::violation(o, v);
        return Ok(());
    }
    if let Some(st) = &cg_stats {
        report::cgroup_usage(o, st);
    }
    classify::verdicts(o, cg_stats.as_ref(), end);
    w.disk_hit |= records.workdir_full;
    let observed = report::observed(
        plan,
        &w,
        end,
        cg_stats.as_ref(),
        records.peak_vm,
        allocation_refused,
        o,
    );
    o.status = classify::classify(&observed);
    report::explain(plan, o, &w);
    classify::explain_oom(o);
    Ok(())
}

/// What [`release`] gives: the network namespace's inode number (for
/// `--info-fd`), the egress proxy's listening socket, the verdict on
/// Landlock's records.
type Released = (Option<u64>, Option<OwnedFd>, Result<(), String>);

/// Let the cloned child go: into the run's cgroup when clone3 could not
/// put it there, its id maps, GO, then the network namespace (made by a
/// helper while init builds the root) sent over the control socket; the
/// new network namespace's inode number, and the egress proxy's listening
/// socket made in it (when the plan has an allowlist); then the verdict on
/// Landlock's records (see [`audit_verdict`]), also returned.
fn release(
    plan: &Plan,
    mut cg: Option<&mut cgroup::RunCgroup>,
    via: sys::CloneVia,
    pid: i32,
    pidfd: &OwnedFd,
    ctl: &OwnedFd,
) -> Result<Released, SetupError> {
    let moved_after_clone =
        cg.as_ref().is_some_and(|c| c.has_v2()) && via != sys::CloneVia::Clone3IntoCgroup;
    if let (Some(c), true) = (cg.as_mut(), moved_after_clone) {
        c.add_pid(pid).map_err(|e| {
            let procs = c.path().join("cgroup.procs");
            SetupError::io("cgroup", procs.display().to_string(), &e)
        })?;
    }
    // The cgroup v1 groups: the child still waits for GO.
    let in_v1 = cg.as_ref().is_some_and(|c| !c.v1_groups().is_empty());
    if let (Some(c), true) = (cg.as_ref(), in_v1) {
        c.place_v1(pid)
            .map_err(|e| SetupError::new("cgroup", "", e.to_string()))?;
    }
    let (ns, flags) = (plan.mode.namespaces(), plan.mode.clone_flags());
    if let Some(ns) = ns.filter(|_| flags & libc::CLONE_NEWUSER as u64 != 0) {
        id_maps(plan, ns, pid)?;
    }
    // Before GO, while init still has our credentials (see userns_of). In
    // a joined user namespace, the jail's is the one we are in already.
    let userns = match ns.filter(|ns| ns.new_netns).map(|ns| ns.join_userns) {
        Some(None) => Some(Some(
            sys::netns::userns_of(pidfd, pid).map_err(|e| SetupError::sys("network", "lo", &e))?,
        )),
        Some(Some(_)) => Some(None),
        None => None,
    };
    sys::ignore_sigpipe();
    let go = if (moved_after_clone || in_v1) && flags & libc::CLONE_NEWCGROUP as u64 != 0 {
        proto::GO_REROOT_CGROUP
    } else {
        proto::GO
    };
    sys::write_all(ctl.as_raw_fd(), &[go]).map_err(|e| SetupError::sys("start jail", "", &e))?;
    let Some(userns) = userns else {
        return Ok((None, None, audit_verdict(plan, ctl)?));
    };
    let port = egress(plan).map(|e| e.port);
    let (ns, listener) = sys::netns::create_in(userns.as_ref(), port)
        .map_err(|e| SetupError::sys("network", "lo", &e))?;
    sys::fdpass::send_fd(ctl.as_raw_fd(), ns.as_raw_fd(), proto::NETNS)
        .map_err(|e| SetupError::sys("network", "lo", &e))?;
    // Only `--info-fd` asks (no extra syscall on a run's path otherwise).
    let inode = match plan.channels.pid_reports.is_empty() {
        true => None,
        false => ns_inode(&ns),
    };
    Ok((inode, listener, audit_verdict(plan, ctl)?))
}

/// The jail's user namespace's id maps: ours, or (`userns_block_fd`) the
/// caller's, written once it reads the pid.
fn id_maps(plan: &Plan, ns: &Namespaces, pid: i32) -> Result<(), SetupError> {
    match ns.userns_block_fd {
        None => namespaces::write_id_maps(pid, plan)
            .map_err(|e| SetupError::io("id map", e.path, &e.source))?,
        // The caller writes the maps (told the pid), then writes to the fd
        // or closes it; as bwrap, what it sends is not looked at.
        Some(fd) => {
            let mut b = [0u8; 1];
            let _ = sys::read(fd, &mut b);
        }
    }
    Ok(())
}

/// The egress allowlist's proxy, when the jail has one (namespaced only).
fn egress(plan: &Plan) -> Option<&crate::plan::egress::Egress> {
    plan.mode.namespaces().and_then(|ns| ns.egress.as_ref())
}

/// When the supervisor can read Landlock's audit records
/// (`Landlock::log_tag`): ask the kernel's audit settings now, while
/// init builds the root (the query costs a kernel thread, some hundred
/// microseconds), and tell init whether the payload asks for its denials
/// to be logged. Ok when it does (or nothing was to be asked), else why
/// not.
fn audit_verdict(plan: &Plan, ctl: &OwnedFd) -> Result<Result<(), String>, SetupError> {
    if plan.layers.log_tag().is_none() {
        return Ok(Ok(()));
    }
    let verdict = crate::plan::audit_verdict();
    let byte = match verdict {
        Ok(()) => proto::AUDIT_LOG,
        Err(_) => proto::AUDIT_NO_LOG,
    };
    sys::write_all(ctl.as_raw_fd(), &[byte]).map_err(|e| SetupError::sys("start jail", "", &e))?;
    Ok(verdict)
}

/// A namespace fd's inode number (through its /proc/self/fd link).
fn ns_inode(ns: &OwnedFd) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/self/fd/{}", ns.as_raw_fd())).ok()?;
    Some(m.ino())
}

/// Inits of earlier runs in this process that were still exiting when their
/// run finished (see `run_inner`).
fn unreaped() -> std::sync::MutexGuard<'static, Vec<i32>> {
    static PIDS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
    PIDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reap the inits of earlier runs that have finished exiting, so a process
/// that runs many jails keeps at most one zombie.
fn reap_earlier() {
    unreaped().retain(|&pid| !matches!(sys::waitpid(pid, true), Ok(Some(_))));
}

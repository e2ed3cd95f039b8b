//! Start the jail and wait for it: one poll loop over the init's pidfd, the
//! report pipe, forwarded signals, the output pipes and the deadline.

#![deny(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

use nix::sys::signal::Signal;
use serde_json::json;

use super::learn::Learner;
use super::watch::{has_status, Stream, Watch};
use super::{cgroup, classify, layers, limits, namespaces, rundir};
use crate::jail::{self, proto};
use crate::outcome::{self, LayerReport, Outcome, Status, Violation};
use crate::plan::{Plan, SetupError};
use crate::policy::{Layer, Network, SeccompAction};
use crate::sys::{self, Cloned, Errno};

fn setup_err(step: &str, path: &str, reason: impl Into<String>) -> SetupError {
    SetupError::new(step, path, reason)
}

/// Captured bytes kept per stream when --capture has no --max-output.
const DEFAULT_CAPTURE: u64 = 16 << 20;

/// The result of [`run`].
pub enum Spawned {
    /// The jail ran (or failed to set up) and this is how it ended.
    Ran(Box<Outcome>),
    /// The kernel refused to create the namespaces; nothing was started.
    Refused { errno: Errno, why: String },
}

/// Why the kernel refused the namespaces (internal).
struct Refusal(Errno, String);

/// Run the plan to completion. The caller must be single-threaded.
/// `control`, when given, is a socket of whoever asked for the run: a `K`
/// on it, or its end (the asker is gone), kills the jail.
pub fn run(mut plan: Plan, control: Option<RawFd>) -> Spawned {
    sys::default_sigchld();
    reap_earlier();
    let start = Instant::now();
    let mut o = Outcome::new();
    match run_inner(&mut plan, &mut o, start, control) {
        Ok(()) => {}
        Err(Err2::Setup(e)) => o.set_setup_error(&e),
        Err(Err2::Refused(Refusal(errno, why))) => return Spawned::Refused { errno, why },
    }
    if let Some(d) = &plan.run_dir {
        rundir::remove(d, plan.run_dir_tmpfs);
    }
    o.usage.wall_time_ms = start.elapsed().as_millis() as u64;
    Spawned::Ran(Box::new(o))
}

enum Err2 {
    Setup(SetupError),
    Refused(Refusal),
}

impl From<SetupError> for Err2 {
    fn from(e: SetupError) -> Self {
        Err2::Setup(e)
    }
}

/// Map the cgroup layer's answer to what the limits decision needs.
fn controllers(setup: Option<&cgroup::Setup>) -> limits::Controllers {
    let one = |e: Option<&cgroup::Enforced>| match e {
        Some(cgroup::Enforced::Cgroup) => Ok(()),
        Some(cgroup::Enforced::Unavailable(why)) => Err(why.clone()),
        _ => Err("no cgroup limit was asked for".to_string()),
    };
    limits::Controllers {
        memory: one(setup.map(|s| &s.memory)),
        cpu: one(setup.map(|s| &s.cpu)),
        pids: one(setup.map(|s| &s.pids)),
    }
}

fn run_inner(
    plan: &mut Plan,
    o: &mut Outcome,
    start: Instant,
    control: Option<RawFd>,
) -> Result<(), Err2> {
    // 1. The run's cgroup, the run directory's cap, and how each limit is
    //    enforced (in the plan's rlimits and the outcome's limits).
    let (cg, decision, tmp_cap) = prepare_limits(plan, o)?;

    // 2. Pipes.
    // A socket, not a pipe: it also carries the network namespace's fd.
    let (ctl_rd, ctl_wr) = sys::fdpass::socketpair(libc::SOCK_STREAM)
        .map_err(|e| setup_err("socketpair", "", e.to_string()))?;
    let (rep_rd, rep_wr) = sys::pipe().map_err(|e| setup_err("pipe", "", e.to_string()))?;
    let (out_pipe, err_pipe) = if plan.pipe_output {
        let a = sys::pipe().map_err(|e| setup_err("pipe", "", e.to_string()))?;
        let b = sys::pipe().map_err(|e| setup_err("pipe", "", e.to_string()))?;
        (Some(a), Some(b))
    } else {
        (None, None)
    };

    // Block the signals we forward before clone, so none of them can kill
    // us between clone and the poll loop (the payload unblocks them).
    let sfd = sys::signalfd_for(&[
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ])
    .map_err(|e| setup_err("signalfd", "", e.to_string()))?;

    // seccomp learning/kill mode: the payload sends its user-notification
    // listener over this socket.
    let mut learner = match &plan.seccomp {
        Some(c) if c.wants_listener() => {
            Learner::for_compiled(c, plan.fallback_ids, plan.network == Network::Host)
                .map_err(|e| setup_err("seccomp", "", e.to_string()))?
        }
        _ => None,
    };
    plan.seccomp_channel = learner.as_ref().map(|l| l.child_fd());

    // Init scrubs its copy of our command line (see sys::scrub_cmdline).
    sys::record_argv_range_from_proc();

    // 3. Clone into the new namespaces (all but the network's: see 4b).
    let mut attempt = sys::clone_jail(plan.clone_flags, cg.as_ref().map(|c| c.dir_fd()));
    if cg.is_some() && attempt.as_ref().is_err_and(|e| e.call == "clone3") {
        // CLONE_INTO_CGROUP refused: clone plainly and move the child in
        // before it is let go.
        attempt = sys::clone_jail(plan.clone_flags, None);
    }
    let (cloned, via) = match attempt {
        Ok(c) => c,
        Err(e)
            if plan.clone_flags != 0
                && matches!(
                    e.errno,
                    Errno::EPERM | Errno::ENOSPC | Errno::EACCES | Errno::EINVAL
                ) =>
        {
            let why = namespaces::userns_refusal_reasons(e.errno).join("; ");
            return Err(Err2::Refused(Refusal(e.errno, why)));
        }
        Err(e) => return Err(setup_err("create namespaces", "", e.to_string()).into()),
    };
    let (pid, pidfd) = match cloned {
        Cloned::Child => {
            drop(sfd);
            drop(ctl_wr);
            drop(rep_rd);
            let stdio = match (out_pipe, err_pipe) {
                (Some((r1, w1)), Some((r2, w2))) => {
                    drop(r1);
                    drop(r2);
                    Some((w1, w2))
                }
                _ => None,
            };
            jail::init::main(plan, ctl_rd, rep_wr, stdio)
        }
        Cloned::Parent { pid, pidfd } => (pid, pidfd),
    };
    drop(ctl_rd);
    drop(rep_wr);
    if let Some(l) = &mut learner {
        l.close_child_end();
    }
    let out_rd = out_pipe.map(|(r, _w)| r);
    let err_rd = err_pipe.map(|(r, _w)| r);

    // 4. Into the cgroup (when clone3 could not put it there), id maps,
    //    GO, then the network namespace, made while init builds the root.
    if let Err(e) = release(plan, cg.as_ref(), via, pid, &pidfd, &ctl_wr) {
        // The child may have failed first (it opens the bind sources
        // before it waits for GO): its own error is the one to report.
        return Err(layers::failed_first(&pidfd, pid, &rep_rd)
            .unwrap_or(e)
            .into());
    }
    // 5. Wait, pumping output and watching the deadline.
    let keep = if plan.capture {
        plan.limits.max_output.unwrap_or(DEFAULT_CAPTURE)
    } else {
        0
    };
    let mut w = Watch {
        pidfd,
        ctl: ctl_wr,
        deadline: plan.limits.timeout.map(|t| start + t),
        grace: plan.limits.grace,
        kill_at: None,
        timed_out: false,
        cap: plan.limits.max_output,
        total: 0,
        hit_cap: false,
        out: out_rd
            .map(|fd| Stream::new(fd, if plan.stdout_in_report { None } else { Some(1) }, keep)),
        err: err_rd.map(|fd| Stream::new(fd, Some(2), keep)),
        learner,
        violation: None,
        cg,
        init_done: false,
        control,
        fallback: plan.fallback,
        meter: match (&tmp_cap, &plan.run_dir) {
            (limits::TmpCap::Metered(_), Some(d)) => {
                Some(rundir::Meter::new(d.clone(), plan.tmp_size))
            }
            _ => None,
        },
        disk_hit: false,
    };
    let reports = w.wait(&rep_rd, &sfd);
    // Once more now that the jail is gone: what it left counts too.
    if let Some(m) = &mut w.meter {
        if !w.disk_hit && m.check() {
            w.disk_hit = true;
        }
    }
    let decoded = proto::decode(&reports);
    // Init's last records say the jail is empty; what is left is init's
    // own exit (unmapping its memory, tearing down the namespaces), which
    // takes longer than a small command's whole run. Without a cgroup to
    // remove there is nothing to wait for: the exiting init is reaped by
    // the next run in this process, or after we exit.
    let waited = if w.init_done || w.cg.is_some() || !has_status(&decoded) {
        Some(sys::wait4(pid).map_err(|e| setup_err("wait", "", e.to_string()))?)
    } else {
        unreaped().push(pid);
        None
    };
    // Everything in the cgroup is gone with init; read what it used, remove it.
    let cg_stats = w.cg.take().map(|c| {
        c.kill();
        let stats = c.stats();
        let path = c.path().to_path_buf();
        if let Err(e) = c.remove() {
            eprintln!(
                "stockade: warning: cgroup {} not removed: {e}",
                path.display()
            );
        }
        stats
    });
    let violation = w.violation.clone();
    let mut unix_report = None;
    if let Some(l) = w.learner.take() {
        unix_report = l.unix_report();
        let learn = l.mode() == super::learn::Mode::Learn;
        let names = l.finish();
        if learn {
            // The CLI prints them as `stockade: seccomp-learn: …`.
            o.seccomp_learned = Some(names);
        }
    }

    // 6. What happened: usage, the payload's records and layers, then the
    //    status.
    conclude(
        plan,
        o,
        Ended {
            via,
            decoded,
            waited,
            cg_stats,
            violation,
            unix_report,
            decision,
            watch: w,
        },
    )
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
    decision: limits::Decision,
    watch: Watch,
}

/// Fill the outcome from what the run left: usage, captured output, the
/// jail's records and layers, then how it ended.
fn conclude(plan: &Plan, o: &mut Outcome, e: Ended) -> Result<(), Err2> {
    let Ended {
        via,
        decoded,
        waited,
        cg_stats,
        violation,
        unix_report,
        decision,
        watch: w,
    } = e;
    if let Some((_, ru)) = &waited {
        o.usage.user_time_ms = tv_ms(ru.ru_utime);
        o.usage.system_time_ms = tv_ms(ru.ru_stime);
        o.usage.peak_memory_bytes = (ru.ru_maxrss as u64) * 1024;
    }
    for (s, field, bytes) in [
        (&w.out, &mut o.stdout, &mut o.usage.stdout_bytes),
        (&w.err, &mut o.stderr, &mut o.usage.stderr_bytes),
    ] {
        if let Some(s) = s {
            *bytes = s.bytes;
            if plan.capture {
                *field = Some(outcome::capture(&s.captured, s.truncated));
            }
        }
    }

    let mut payload_status = None;
    let mut peak_vm = 0u64;
    let mut exec_error: Option<(Errno, String)> = None;
    let mut payload_layers = Vec::new();
    for r in decoded {
        match r {
            proto::Report::Setup { step, path, reason } => {
                return Err(SetupError::new(step, path, reason).into());
            }
            proto::Report::Exec { errno, path } => {
                exec_error = Some((Errno::from_raw(errno), path))
            }
            proto::Report::Status(s) => payload_status = Some(s),
            proto::Report::Peak { tasks, vm_bytes } => {
                o.usage.peak_pids = tasks;
                peak_vm = vm_bytes;
            }
            proto::Report::Layer(l) => payload_layers.push(l),
            // What every process of the jail used (init's own few
            // milliseconds aside, which wait4 on init would add).
            proto::Report::Usage {
                user_us,
                system_us,
                maxrss_kb,
            } if waited.is_none() => {
                o.usage.user_time_ms = user_us / 1000;
                o.usage.system_time_ms = system_us / 1000;
                o.usage.peak_memory_bytes = maxrss_kb * 1024;
            }
            proto::Report::Usage { .. } => {}
        }
    }
    layers::record_layers(plan, o, via, payload_layers);
    if let (Some(r), Some(s)) = (unix_report, o.layers.get_mut("seccomp")) {
        if s.detail.is_object() {
            s.detail["unix_sockets"] = r;
        }
    }

    if let Some((errno, path)) = exec_error {
        o.status = Status::SetupError;
        o.exit_code = if errno == Errno::ENOENT { 127 } else { 126 };
        o.error = Some(SetupError::new("execve", path, sys::errno_text(errno)).to_string());
        return Ok(());
    }
    let end = match payload_status {
        Some(s) => sys::ChildEnd::from_wait_status(s),
        // init itself died (killed by us at the deadline or the output cap,
        // or from outside): that is how the payload ended too. Without a
        // status record, init was waited for.
        None => sys::ChildEnd::from_wait_status(waited.map_or(0, |(st, _)| st)),
    };
    if payload_status.is_none() && end.signal.is_none() {
        return Err(setup_err(
            "init",
            "",
            format!(
                "jail init exited with {} before the payload ended",
                end.code.unwrap_or(-1)
            ),
        )
        .into());
    }
    o.signal = end.signal;
    o.exit_code = match end.signal {
        Some(sig) => 128 + sig,
        None => end.code.unwrap_or(125),
    };
    if let Some((nr, name)) = violation {
        // Killed by the supervisor on a refused syscall (kill mode): report
        // it as the SIGSYS death the kernel would have dealt.
        eprintln!("stockade: seccomp: {name} is not allowed: jail killed");
        o.seccomp_violation = Some(Violation {
            syscall_nr: Some(nr),
            syscall_name: Some(name),
        });
        o.signal = Some(libc::SIGSYS);
        o.exit_code = 128 + libc::SIGSYS;
        o.status = Status::SeccompViolation;
        return Ok(());
    }
    if let Some(st) = &cg_stats {
        if let Some(peak) = st.memory_peak {
            o.usage.peak_memory_bytes = peak;
            o.usage.peak_memory_source = "cgroup";
        }
        if let Some(p) = st.pids_peak {
            o.usage.peak_pids = o.usage.peak_pids.max(p.saturating_sub(1));
        }
        if let Some(c) = &st.cpu {
            // cpu.stat counts every process of the run, reaped or not.
            o.usage.user_time_ms = o.usage.user_time_ms.max(c.user_usec / 1000);
            o.usage.system_time_ms = o.usage.system_time_ms.max(c.system_usec / 1000);
        }
    }
    let observed = classify::Observed {
        signal: end.signal,
        code: end.code,
        oom_killed: cg_stats.as_ref().is_some_and(|s| s.oom_killed()),
        pids_refused: cg_stats.as_ref().is_some_and(|s| s.pids_limit_hit()),
        memory_limit: plan.limits.memory,
        memory_by_rlimit: decision.memory_by_rlimit,
        peak_vm,
        pids_limit: plan.limits.pids,
        pids_by_rlimit: decision.pids_by_rlimit,
        peak_pids: o.usage.peak_pids,
        metered: w.meter.is_some(),
        disk_over: w.disk_hit,
        file_size_below_tmp: plan.limits.max_file_size.is_some_and(|f| f < plan.tmp_size),
        output_cap_hit: w.hit_cap,
        timed_out: w.timed_out,
        seccomp_kill: plan
            .seccomp
            .as_ref()
            .is_some_and(|s| s.action == SeccompAction::Kill),
        cpu_time_limit: plan.limits.cpu_time,
        cpu_ms: o.usage.user_time_ms + o.usage.system_time_ms,
    };
    o.status = classify::classify(&observed);
    match o.status {
        Status::DiskLimit => {
            if let Some(m) = &w.meter {
                eprintln!(
                    "stockade: the run directory reached --tmp-size ({} bytes; {} seen{}): jail killed",
                    plan.tmp_size,
                    m.peak,
                    if m.last.hidden {
                        ", and something the meter could not read"
                    } else {
                        ""
                    }
                );
            }
        }
        Status::SeccompViolation => {
            o.seccomp_violation = Some(Violation {
                syscall_nr: None,
                syscall_name: None,
            });
        }
        _ => {}
    }
    Ok(())
}

/// The run's cgroup (only when a cgroup limit is asked for or the layer is
/// required), the fallback run directory's cap, then how each limit is
/// enforced: written into the plan (rlimits, sampling) and the outcome.
fn prepare_limits(
    plan: &mut Plan,
    o: &mut Outcome,
) -> Result<(Option<cgroup::RunCgroup>, limits::Decision, limits::TmpCap), Err2> {
    let l = &plan.limits;
    let wants_cgroup =
        l.memory.is_some() || l.memory_high.is_some() || l.cpus.is_some() || l.pids.is_some();
    let require_cgroup = plan.require.contains(&Layer::Cgroup);
    let cg_setup = if wants_cgroup || require_cgroup {
        cgroup::cleanup_stale();
        Some(cgroup::prepare(&cgroup::Request::from(&plan.limits)))
    } else {
        None
    };
    let ctl = controllers(cg_setup.as_ref());
    // The fallback's run directory: a tmpfs of its own where one can be
    // mounted, else metered (supervise::rundir).
    let tmp_cap = match &plan.run_dir {
        Some(dir) => {
            if sys::geteuid() == 0 {
                rundir::cleanup_stale();
            }
            match rundir::mount_tmpfs(dir, plan.tmp_size, plan.fallback_ids) {
                Ok(()) => {
                    plan.run_dir_tmpfs = true;
                    limits::TmpCap::Tmpfs
                }
                Err(why) => limits::TmpCap::Metered(format!(
                    "no tmpfs on the run directory ({why}): RLIMIT_FSIZE caps each file, the supervisor meters the directory and kills the jail past the cap"
                )),
            }
        }
        None => limits::TmpCap::Tmpfs,
    };
    let decision = limits::decide(&plan.limits, &ctl, plan.tmp_size, &tmp_cap);
    if require_cgroup {
        let why = match &cg_setup {
            Some(cgroup::Setup {
                cgroup: None, why, ..
            }) => Some(why.clone().unwrap_or_default()),
            Some(s) => [&s.memory, &s.cpu, &s.pids].iter().find_map(|e| match e {
                cgroup::Enforced::Unavailable(w) => Some(w.clone()),
                _ => None,
            }),
            None => None,
        };
        if let Some(why) = why {
            return Err(setup_err("cgroup", "", format!("required but unavailable: {why}")).into());
        }
    }
    let (cg, cg_why) = match cg_setup {
        Some(s) => (s.cgroup, s.why),
        None => (None, None),
    };
    let enabled: Vec<&str> = [
        ("memory", ctl.memory.is_ok()),
        ("cpu", ctl.cpu.is_ok()),
        ("pids", ctl.pids.is_ok()),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| *n)
    .collect();
    o.layers.insert(
        "cgroup",
        match &cg {
            Some(c) => LayerReport::applied(json!({ "path": c.path(), "controllers": enabled })),
            None if wants_cgroup || require_cgroup => LayerReport::unavailable(
                cg_why.unwrap_or_else(|| "no cgroup could be created".into()),
            ),
            None => LayerReport::skipped(
                "no cgroup limit was asked for (--memory, --memory-high, --cpus, --pids-limit)",
            ),
        },
    );
    for w in &decision.unenforced {
        eprintln!("stockade: warning: {w}");
    }
    plan.rlimits = decision.rlimits.clone();
    if decision.memory_by_rlimit || decision.pids_by_rlimit {
        plan.sample_ms = 10;
    }
    o.limits = decision.report.clone();
    if let Some(r) = o.limits.get_mut("pids") {
        // Without a user namespace RLIMIT_NPROC counts the host uid's
        // processes, wherever they run.
        let whose = match (plan.fallback, plan.fallback_ids) {
            (false, _) => None,
            (true, Some((uid, _))) => Some(format!(
                "RLIMIT_NPROC counts the processes of host uid {uid}, this jail's own (leased from --uid-range)"
            )),
            (true, None) => Some(format!(
                "RLIMIT_NPROC counts every process of host uid {} (no user namespace): the limit is shared with the caller's other processes",
                sys::getuid()
            )),
        };
        if let (Some(w), "rlimit_nproc") = (whose, r.enforced_by) {
            r.why = Some(match r.why.take() {
                Some(first) => format!("{first}; {w}"),
                None => w,
            });
        }
    }
    Ok((cg, decision, tmp_cap))
}

/// Let the cloned child go: into the run's cgroup when clone3 could not
/// put it there, its id maps, GO, then the network namespace (made by a
/// helper while init builds the root) sent over the control socket.
fn release(
    plan: &Plan,
    cg: Option<&cgroup::RunCgroup>,
    via: sys::CloneVia,
    pid: i32,
    pidfd: &OwnedFd,
    ctl: &OwnedFd,
) -> Result<(), SetupError> {
    let moved_after_clone = cg.is_some() && via != sys::CloneVia::Clone3IntoCgroup;
    if let (Some(c), true) = (cg, moved_after_clone) {
        c.add_pid(pid).map_err(|e| {
            setup_err(
                "cgroup",
                &c.path().join("cgroup.procs").display().to_string(),
                e.to_string(),
            )
        })?;
    }
    if plan.clone_flags & libc::CLONE_NEWUSER as u64 != 0 {
        namespaces::write_id_maps(pid, plan)
            .map_err(|(path, e)| setup_err("id map", &path, e.to_string()))?;
    }
    // Before GO, while init still has our credentials (see userns_of).
    let userns = match plan.new_netns {
        true => Some(
            sys::netns::userns_of(pidfd, pid)
                .map_err(|e| setup_err("network", "lo", e.to_string()))?,
        ),
        false => None,
    };
    sys::ignore_sigpipe();
    let go = if moved_after_clone && plan.clone_flags & libc::CLONE_NEWCGROUP as u64 != 0 {
        proto::GO_REROOT_CGROUP
    } else {
        proto::GO
    };
    sys::write_all(ctl.as_raw_fd(), &[go])
        .map_err(|e| setup_err("start jail", "", e.to_string()))?;
    if let Some(userns) = userns {
        sys::netns::create_in(&userns)
            .and_then(|ns| sys::fdpass::send_fd(ctl.as_raw_fd(), ns.as_raw_fd(), proto::NETNS))
            .map_err(|e| setup_err("network", "lo", e.to_string()))?;
    }
    Ok(())
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

fn tv_ms(t: libc::timeval) -> u64 {
    (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000
}

//! The outcome's parts the supervisor fills, each from what it observed:
//! the limits the plan decided, usage, the captured output, the jail's
//! records, and how the run ended (the status itself is
//! supervise::classify's, a pure function).

#![deny(unsafe_code)]

use super::classify;
use super::watch::Watch;
use crate::cgroup;
use crate::jail::proto;
use crate::observe::pump::Output;
use crate::outcome::{self, LayerReport, LimitReport, Outcome, Status, Violation};
use crate::plan::limits::CgroupLayer;
use crate::plan::{Plan, SetupError};
use crate::policy::SeccompAction;
use crate::sys::{self, Errno};

/// The plan's limits decision, for the outcome: the cgroup layer and every
/// limit's rung; a warning (in the outcome) for each limit nothing
/// enforces.
pub(super) fn record_limits(plan: &Plan, o: &mut Outcome) {
    let e = &plan.limits.enforcement;
    o.layers.insert("cgroup", cgroup_report(&e.cgroup));
    o.warnings
        .extend(e.unenforced.iter().map(|w| w.to_string()));
    o.limits = e
        .report
        .iter()
        .map(|(name, r)| {
            let r = LimitReport {
                limit: r.limit.clone(),
                enforced_by: r.enforced_by,
                why: r.why.clone(),
                hit: None,
                verdict: None,
                oom_killed: None,
            };
            (*name, r)
        })
        .collect();
}

fn tv_ms(t: libc::timeval) -> u64 {
    (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000
}

/// What init's wait4 says the jail used.
pub(super) fn usage_of_init(o: &mut Outcome, waited: Option<&(i32, libc::rusage)>) {
    if let Some((_, ru)) = waited {
        o.usage.user_time_ms = tv_ms(ru.ru_utime);
        o.usage.system_time_ms = tv_ms(ru.ru_stime);
        o.usage.peak_memory_bytes = (ru.ru_maxrss as u64) * 1024;
    }
}

/// Bytes written on stdout and stderr, and (--capture) what was kept.
pub(crate) fn output(o: &mut Outcome, out: &Output) {
    for (s, field, bytes) in [
        (&out.out, &mut o.stdout, &mut o.usage.stdout_bytes),
        (&out.err, &mut o.stderr, &mut o.usage.stderr_bytes),
    ] {
        if let Some(s) = s {
            *bytes = s.bytes;
            if out.capture {
                *field = Some(outcome::capture(&s.captured, s.truncated));
            }
        }
    }
}

/// The jail's records, sorted out.
#[derive(Default)]
pub(super) struct Records {
    /// The payload's wait status, from init.
    pub(super) status: Option<i32>,
    /// The largest address space one process reached.
    pub(super) peak_vm: u64,
    /// execve failed: its errno and the path tried.
    pub(super) exec_error: Option<(Errno, String)>,
    /// The layers the jail applied, as it reported them.
    pub(super) layers: Vec<proto::LayerRecord>,
    /// init found the workdir's tmpfs full and killed the jail.
    pub(super) workdir_full: bool,
}

impl Records {
    /// Sort the records out; peaks and (when init was not waited for:
    /// `init_waited`) the usage of every process go into the outcome. A
    /// setup step that failed in the jail is the run's error.
    pub(super) fn read(
        decoded: Vec<proto::Report>,
        init_waited: bool,
        o: &mut Outcome,
    ) -> Result<Records, SetupError> {
        let mut r = Records::default();
        for report in decoded {
            match report {
                proto::Report::Setup(e) => return Err(e),
                proto::Report::Exec { errno, path } => {
                    r.exec_error = Some((Errno::from_raw(errno), path))
                }
                proto::Report::Status(s) => r.status = Some(s),
                proto::Report::Peak {
                    tasks,
                    vm_bytes,
                    workdir_full,
                } => {
                    o.usage.peak_pids = tasks;
                    r.peak_vm = vm_bytes;
                    r.workdir_full = workdir_full;
                }
                proto::Report::Layer(l) => r.layers.push(l),
                // What every process of the jail used (init's own few
                // milliseconds aside, which wait4 on init would add).
                proto::Report::Usage {
                    user_us,
                    system_us,
                    maxrss_kb,
                } if !init_waited => {
                    o.usage.user_time_ms = user_us / 1000;
                    o.usage.system_time_ms = system_us / 1000;
                    o.usage.peak_memory_bytes = maxrss_kb * 1024;
                }
                proto::Report::Usage { .. } => {}
            }
        }
        Ok(r)
    }
}

/// The fallback's connect mediation, in the seccomp layer's detail.
pub(super) fn unix_sockets(o: &mut Outcome, report: Option<serde_json::Value>) {
    if let (Some(r), Some(s)) = (report, o.layers.get_mut("seccomp")) {
        if s.detail.is_object() {
            s.detail["unix_sockets"] = r;
        }
    }
}

/// execve failed for every candidate: 127 when not found, else 126.
pub(super) fn exec_failed(o: &mut Outcome, errno: Errno, path: String) {
    o.status = Status::SetupError;
    o.exit_code = if errno == Errno::ENOENT { 127 } else { 126 };
    let e = SetupError::from_errno(crate::plan::step::EXECVE, path, errno);
    o.error = Some(e.to_string());
    o.setup = Some((&e).into());
}

/// How the payload ended: init's record of it, or init's own death (killed
/// by us at the deadline or the output cap, or from outside), which is how
/// the payload ended too. Without a status record, init was waited for. An
/// init that exited on its own before the payload ended is a setup error,
/// unless init became the command (`as_pid_1`): its exit is the command's.
pub(super) fn payload_end(
    status: Option<i32>,
    waited: Option<&(i32, libc::rusage)>,
    as_pid_1: bool,
) -> Result<sys::ChildEnd, SetupError> {
    let end = match status {
        Some(s) => sys::ChildEnd::from_wait_status(s),
        None => sys::ChildEnd::from_wait_status(waited.map_or(0, |(st, _)| *st)),
    };
    if status.is_none() && end.signal.is_none() && !(as_pid_1 && waited.is_some()) {
        return Err(SetupError::new(
            "init",
            "",
            format!(
                "jail init exited with {} before the payload ended",
                end.code.unwrap_or(-1)
            ),
        ));
    }
    Ok(end)
}

/// The exit code (128+N for signal N) and the signal.
pub(super) fn set_end(o: &mut Outcome, end: sys::ChildEnd) {
    o.signal = end.signal;
    o.exit_code = match end.signal {
        Some(sig) => 128 + sig,
        None => end.code.unwrap_or(125),
    };
}

/// The seccomp listener's refusals into the outcome, with a warning
/// counting those past the outcome's cap (every launcher's).
pub(crate) fn seccomp_denials(o: &mut Outcome, denials: Vec<crate::outcome::Denial>, more: u64) {
    o.denials.extend(denials);
    if more > 0 {
        o.denials_more.insert("seccomp".into(), more);
        o.warnings.push(format!(
            "{more} more refused syscalls not recorded (the first {} syscall and thread pairs are)",
            crate::outcome::MAX_DENIALS
        ));
    }
}

/// No seccomp listener came though one was due (every launcher's): the
/// kernel judged refusals alone, unrecorded.
pub(crate) fn seccomp_unheard(o: &mut Outcome) {
    o.denials_unrecorded.insert(
        "seccomp".into(),
        "another seccomp filter of this process tree has the one listener it may have; the kernel refused syscalls alone".into(),
    );
    o.warnings.push(
        "seccomp: refused syscalls were not recorded (another seccomp filter of this process tree has the one listener it may have; the kernel refused them alone)".into(),
    );
}

/// Killed by the supervisor on a refused syscall (kill mode): reported as
/// the SIGSYS death the kernel would have dealt.
pub(crate) fn violation(o: &mut Outcome, (nr, name): (i64, String)) {
    o.detail = Some(format!("seccomp: {name} is not allowed: jail killed"));
    o.seccomp_violation = Some(Violation {
        syscall_nr: Some(nr),
        syscall_name: Some(name),
    });
    o.signal = Some(libc::SIGSYS);
    o.exit_code = 128 + libc::SIGSYS;
    o.status = Status::SeccompViolation;
}

/// What the run's cgroup counted: the kernel's own figures win.
pub(super) fn cgroup_usage(o: &mut Outcome, st: &cgroup::Stats) {
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

/// What classification needs, from the plan, the wait and the outcome so
/// far.
pub(super) fn observed(
    plan: &Plan,
    w: &Watch,
    end: sys::ChildEnd,
    cg_stats: Option<&cgroup::Stats>,
    peak_vm: u64,
    allocation_refused: bool,
    o: &Outcome,
) -> classify::Observed {
    let (l, asked) = (&plan.limits, &plan.limits.asked);
    classify::Observed {
        signal: end.signal,
        code: end.code,
        memory_hit: cg_stats.is_some_and(|s| s.memory_limit_hit()),
        pids_refused: cg_stats.is_some_and(|s| s.pids_limit_hit()),
        // Under the rlimit rung the inference compares with RLIMIT_AS.
        memory_limit: match l.enforcement.memory_by_rlimit {
            true => l.enforcement.rlimit_as.or(asked.memory),
            false => asked.memory,
        },
        memory_by_rlimit: l.enforcement.memory_by_rlimit,
        // init samples VmPeak every few milliseconds and a process's
        // VmPeak is gone with its memory at exit, so the last sample may
        // be short of the peak; the kernel's high-water mark of resident
        // memory (maxrss, exact at exit) is a floor of the address space
        // it reached.
        peak_vm: peak_vm.max(o.usage.peak_memory_bytes),
        allocation_refused,
        pids_limit: asked.pids,
        pids_by_rlimit: l.enforcement.pids_by_rlimit,
        peak_pids: o.usage.peak_pids,
        metered: w.meter.is_some(),
        disk_over: w.disk_hit,
        file_size_below_tmp: asked.max_file_size.is_some_and(|f| f < l.tmp_size),
        output_cap_hit: w.output.hit_cap,
        timed_out: w.deadline.timed_out,
        seccomp_kill: plan
            .layers
            .seccomp
            .as_ref()
            .is_some_and(|s| s.action == SeccompAction::Kill),
        cpu_time_limit: asked.cpu_time,
        cpu_ms: o.usage.user_time_ms + o.usage.system_time_ms,
    }
}

/// What the status needs said besides itself: the meter's line when the
/// run directory passed its cap, the violation (unnamed: the kernel killed
/// it) in kill mode.
pub(super) fn explain(plan: &Plan, o: &mut Outcome, w: &Watch) {
    match o.status {
        Status::DiskLimit => {
            if let (None, Some((dir, size))) = (&w.meter, &plan.limits.workdir_cap) {
                o.detail = Some(format!(
                    "the workdir {} reached its size ({size} bytes){}",
                    dir.display(),
                    if o.signal == Some(libc::SIGKILL) {
                        ": jail killed"
                    } else {
                        ""
                    }
                ));
            }
            if let Some(m) = &w.meter {
                o.detail = Some(format!(
                    "the run directory reached --tmp-size ({} bytes; {} seen{}): jail killed",
                    plan.limits.tmp_size,
                    m.peak,
                    if m.last.hidden {
                        ", and something the meter could not read"
                    } else {
                        ""
                    }
                ));
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
}

/// The outcome's cgroup layer, from the plan's (or a forked run's) word.
pub(crate) fn cgroup_report(layer: &CgroupLayer) -> LayerReport {
    match layer {
        CgroupLayer::Applied {
            path,
            controllers,
            v1,
            scope,
        } => {
            let mut d = serde_json::json!({ "path": path, "controllers": controllers });
            if !v1.is_empty() {
                d["v1"] = serde_json::json!(v1);
            }
            if let Some(s) = scope {
                d["systemd_scope"] = serde_json::json!(s);
            }
            LayerReport::applied(d)
        }
        CgroupLayer::Unavailable(why) => LayerReport::unavailable(why.clone()),
        CgroupLayer::Skipped => LayerReport::skipped(
            "no cgroup limit was asked for (--memory, --memory-high, --cpus, --pids-limit)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_failure_is_a_setup_error_127_when_not_found_else_126() {
        let mut o = Outcome::new();
        exec_failed(&mut o, Errno::ENOENT, "/bin/nope".into());
        assert_eq!((o.status, o.exit_code), (Status::SetupError, 127));
        assert_eq!(
            o.error.as_deref(),
            Some(format!("execve: /bin/nope: {}", sys::errno_text(Errno::ENOENT)).as_str())
        );
        let mut o = Outcome::new();
        exec_failed(&mut o, Errno::EACCES, "/etc/passwd".into());
        assert_eq!((o.status, o.exit_code), (Status::SetupError, 126));
    }

    #[test]
    fn init_ending_on_its_own_before_the_payload_is_a_setup_error() {
        let e = payload_end(None, None, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "init: jail init exited with 0 before the payload ended"
        );
        // Killed (by us at the deadline, or from outside): the payload's end.
        let killed = (libc::SIGKILL, some_rusage());
        let end = payload_end(None, Some(&killed), false).unwrap();
        assert_eq!(end.signal, Some(libc::SIGKILL));
        // init's record of the payload wins.
        let end = payload_end(Some(3 << 8), Some(&killed), false).unwrap();
        assert_eq!((end.code, end.signal), (Some(3), None));
        // init was the command: its exit status is the command's.
        let exited = (4 << 8, some_rusage());
        assert!(payload_end(None, Some(&exited), false).is_err());
        let end = payload_end(None, Some(&exited), true).unwrap();
        assert_eq!((end.code, end.signal), (Some(4), None));
    }

    fn some_rusage() -> libc::rusage {
        use nix::sys::resource::{getrusage, UsageWho};
        *getrusage(UsageWho::RUSAGE_SELF).unwrap().as_ref()
    }

    #[test]
    fn exit_codes_are_the_code_or_128_plus_the_signal() {
        let mut o = Outcome::new();
        set_end(
            &mut o,
            sys::ChildEnd {
                code: Some(4),
                signal: None,
            },
        );
        assert_eq!((o.exit_code, o.signal), (4, None));
        set_end(
            &mut o,
            sys::ChildEnd {
                code: None,
                signal: Some(libc::SIGTERM),
            },
        );
        assert_eq!(
            (o.exit_code, o.signal),
            (128 + libc::SIGTERM, Some(libc::SIGTERM))
        );
    }

    #[test]
    fn a_kill_mode_violation_named_by_the_listener_is_a_sigsys_death() {
        let mut o = Outcome::new();
        violation(&mut o, (165, "mount".into()));
        assert_eq!(o.status, Status::SeccompViolation);
        assert_eq!(
            (o.exit_code, o.signal),
            (128 + libc::SIGSYS, Some(libc::SIGSYS))
        );
        let v = o.seccomp_violation.unwrap();
        assert_eq!(
            (v.syscall_nr, v.syscall_name.as_deref()),
            (Some(165), Some("mount"))
        );
    }
}

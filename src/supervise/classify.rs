//! Which status a run ended with: a pure function of what the supervisor
//! observed, so every status (and every fallback's way of telling it) has a
//! unit test.

#![deny(unsafe_code)]

use std::time::Duration;

use crate::cgroup::Stats;
use crate::outcome::{OomKilled, Outcome, Status};
use crate::sys::ChildEnd;

/// What was observed of a run whose payload started and ended (a setup
/// error, an exec failure and a kill-mode seccomp violation named by the
/// listener are decided before this).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The signal that ended the payload, if one did.
    pub signal: Option<i32>,
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The run's memory controller counted the limit hit for memory
    /// reclaim could not free (an OOM or OOM kill at memory.max /
    /// memory.limit_in_bytes; see `cgroup::Stats::memory_limit_hit`).
    pub memory_hit: bool,
    /// The run's pids controller refused a fork (`pids.events max`).
    pub pids_refused: bool,
    /// `--memory`, and whether RLIMIT_AS (not a controller) enforced it.
    pub memory_limit: Option<u64>,
    pub memory_by_rlimit: bool,
    /// The largest address space one process of the jail reached.
    pub peak_vm: u64,
    /// The supervisor saw a process of the jail ask for more address
    /// space at once than RLIMIT_AS had left it (see
    /// `observe::learn`'s allocation meter): the rlimit refused it.
    pub allocation_refused: bool,
    /// `--pids-limit`, and whether RLIMIT_NPROC enforced it.
    pub pids_limit: Option<u64>,
    pub pids_by_rlimit: bool,
    /// Most tasks alive at once (the payload's, without init).
    pub peak_pids: u64,
    /// The fallback's run directory is metered (no tmpfs), and the meter
    /// found it past `--tmp-size` and killed the jail.
    pub metered: bool,
    pub disk_over: bool,
    /// `--max-file-size` is below `--tmp-size` (so SIGXFSZ is that limit's).
    pub file_size_below_tmp: bool,
    /// The supervisor killed the jail at the output cap / the deadline.
    pub output_cap_hit: bool,
    pub timed_out: bool,
    /// seccomp's action is kill.
    pub seccomp_kill: bool,
    /// `--cpu-time`, and the CPU time the jail used.
    pub cpu_time_limit: Option<Duration>,
    pub cpu_ms: u64,
}

/// The status. Controllers' counters come first: they are the kernel's own
/// record and the payload cannot forge them. The rlimit fallbacks can only
/// infer a limit from an abnormal end near it, or from an allocation the
/// supervisor saw RLIMIT_AS refuse.
///
/// A limit's status is given only to a run that failed (a signal, or a
/// code other than 0): a payload that exited 0 ended as it chose, even
/// where the limit was reached on the way (a child OOM-killed under a
/// parent that coped); the limit's report says it was hit and what was
/// killed (see [`verdicts`]). So the status never
/// contradicts the exit code and signal beside it.
pub fn classify(o: &Observed) -> Status {
    let abnormal = o.signal.is_some() || o.code != Some(0);
    if o.memory_limit.is_some() && o.memory_hit && abnormal {
        Status::MemoryLimit
    } else if o.pids_refused && abnormal {
        Status::PidsLimit
    } else if o.disk_over
        || (o.metered && o.signal == Some(libc::SIGXFSZ) && !o.file_size_below_tmp)
    {
        // Seen (a meter, init's look at the workdir): before what the
        // rlimit rung can only infer from an abnormal end.
        Status::DiskLimit
    } else if abnormal
        && o.memory_by_rlimit
        && o.memory_limit
            .is_some_and(|m| o.peak_vm >= m / 10 * 9 || o.allocation_refused)
    {
        Status::MemoryLimit
    } else if abnormal && o.pids_by_rlimit && o.pids_limit.is_some_and(|p| o.peak_pids + 1 >= p) {
        Status::PidsLimit
    } else if o.output_cap_hit {
        Status::OutputLimit
    } else if o.timed_out {
        Status::Timeout
    } else if o.signal == Some(libc::SIGSYS) && o.seccomp_kill {
        Status::SeccompViolation
    } else if o.signal == Some(libc::SIGXCPU)
        || (o.signal == Some(libc::SIGKILL)
            && o.cpu_time_limit
                .is_some_and(|t| o.cpu_ms + 50 >= t.as_millis() as u64))
    {
        Status::CpuLimit
    } else if o.signal.is_some() {
        Status::Signaled
    } else {
        Status::Exited
    }
}

/// How the memory and pids verdicts were reached, for every launcher:
/// from a controller's counters (whether the limit was reached and, for
/// memory, what the OOM killer killed: the payload, by how it `end`ed, or
/// only others), or inferred under the rlimit rung. `st`: the run's
/// cgroup counters, when it had a cgroup.
pub(crate) fn verdicts(o: &mut Outcome, st: Option<&Stats>, end: ChildEnd) {
    for name in ["memory", "pids"] {
        let Some(r) = o.limits.get_mut(name) else {
            continue;
        };
        if r.enforced_by.starts_with("cgroup") {
            r.verdict = Some("counted");
            r.hit = st.map(|s| match name {
                "memory" => s.memory_limit_hit(),
                _ => s.pids_limit_hit(),
            });
            if name == "memory" {
                r.oom_killed = st.and_then(|s| oom_killed(s, end));
            }
        } else if r.enforced_by.starts_with("rlimit") {
            r.verdict = Some("inferred");
        }
    }
}

/// What the OOM killer killed, from the controller's count and the
/// payload's end: a payload that ended by SIGKILL is taken to be among
/// those killed; one that exited (or died of another signal) was not.
fn oom_killed(st: &Stats, end: ChildEnd) -> Option<OomKilled> {
    if !st.oom_killed() {
        return None;
    }
    Some(OomKilled {
        processes: st.oom_kills().max(1),
        payload: end.signal == Some(libc::SIGKILL),
    })
}

/// One line for the outcome's `detail` when the OOM killer killed at the
/// memory limit but not the payload: the status (the payload's own, or
/// memory_limit for a run that then failed) does not say it.
pub(crate) fn explain_oom(o: &mut Outcome) {
    let Some(k) = o.limits.get("memory").and_then(|m| m.oom_killed) else {
        return;
    };
    if k.payload || o.detail.is_some() {
        return;
    }
    let ended = match o.signal {
        Some(sig) => format!("was killed by signal {sig}"),
        None => format!("exited {}", o.exit_code),
    };
    o.detail = Some(format!(
        "memory limit reached: the kernel's OOM killer killed {} other process{} of the run, not the payload, which then {ended}",
        k.processes,
        if k.processes == 1 { "" } else { "es" }
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> Observed {
        Observed {
            code: Some(code),
            ..Default::default()
        }
    }

    fn killed(sig: i32) -> Observed {
        Observed {
            signal: Some(sig),
            ..Default::default()
        }
    }

    #[test]
    fn an_ordinary_end_is_exited_or_signaled() {
        assert_eq!(classify(&exited(0)), Status::Exited);
        assert_eq!(classify(&exited(3)), Status::Exited);
        assert_eq!(classify(&killed(libc::SIGSEGV)), Status::Signaled);
    }

    #[test]
    fn an_oom_kill_counted_by_the_controller_is_memory_limit_for_any_failed_end() {
        for end in [
            killed(libc::SIGKILL),
            exited(1),
            exited(137),
            killed(libc::SIGSEGV),
        ] {
            let o = Observed {
                memory_hit: true,
                memory_limit: Some(64 << 20),
                ..end
            };
            assert_eq!(classify(&o), Status::MemoryLimit, "{o:?}");
        }
        // Without a memory limit asked for, an OOM is the host's, not ours.
        let o = Observed {
            memory_hit: true,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&o), Status::Signaled);
    }

    #[test]
    fn a_child_oom_killed_under_a_payload_that_exited_0_leaves_the_payloads_status() {
        // `sh -c 'python3 -c …; exit 0'`: the OOM killer took python, sh
        // exited 0. The status is never memory_limit beside exit code 0.
        let o = Observed {
            memory_hit: true,
            memory_limit: Some(64 << 20),
            ..exited(0)
        };
        assert_eq!(classify(&o), Status::Exited);
        let o = Observed {
            pids_refused: true,
            pids_limit: Some(8),
            ..exited(0)
        };
        assert_eq!(classify(&o), Status::Exited);
        let o = Observed {
            memory_limit: Some(64 << 20),
            memory_by_rlimit: true,
            allocation_refused: true,
            peak_vm: 64 << 20,
            ..exited(0)
        };
        assert_eq!(classify(&o), Status::Exited);
    }

    #[test]
    fn a_limit_the_controller_counted_is_memory_limit_for_any_failed_end_only() {
        // MemoryError (exit 1), ENOMEM (exit 12), SIGSEGV after a failed
        // allocation: the controller's failcnt / memory.events max says
        // the limit was reached.
        for end in [exited(1), exited(12), killed(libc::SIGSEGV), exited(3)] {
            let o = Observed {
                memory_hit: true,
                memory_limit: Some(64 << 20),
                ..end
            };
            assert_eq!(classify(&o), Status::MemoryLimit, "{o:?}");
        }
        // The payload coped and succeeded: its own status.
        let coped = Observed {
            memory_hit: true,
            memory_limit: Some(64 << 20),
            ..exited(0)
        };
        assert_eq!(classify(&coped), Status::Exited);
        // Under the limit (nothing counted): never memory_limit, whatever
        // the exit code says.
        for end in [exited(3), exited(12), killed(libc::SIGSEGV)] {
            let o = Observed {
                memory_limit: Some(64 << 20),
                ..end.clone()
            };
            assert_ne!(classify(&o), Status::MemoryLimit, "{o:?}");
        }
    }

    #[test]
    fn a_refused_fork_counted_by_the_controller_is_pids_limit_when_the_run_failed() {
        let o = Observed {
            pids_refused: true,
            pids_limit: Some(50),
            ..exited(1)
        };
        assert_eq!(classify(&o), Status::PidsLimit);
        // The payload coped with the refusal and succeeded: its own status.
        let o = Observed {
            pids_refused: true,
            pids_limit: Some(50),
            ..exited(0)
        };
        assert_eq!(classify(&o), Status::Exited);
    }

    #[test]
    fn the_memory_rlimit_fallback_infers_the_limit_only_from_an_abnormal_end_near_it() {
        let near = Observed {
            memory_limit: Some(100 << 20),
            memory_by_rlimit: true,
            peak_vm: 95 << 20,
            ..exited(1)
        };
        assert_eq!(classify(&near), Status::MemoryLimit);
        let killed_near = Observed {
            signal: Some(libc::SIGSEGV),
            code: None,
            ..near.clone()
        };
        assert_eq!(classify(&killed_near), Status::MemoryLimit);
        let far = Observed {
            peak_vm: 10 << 20,
            ..near.clone()
        };
        assert_eq!(classify(&far), Status::Exited);
        let clean = Observed {
            code: Some(0),
            ..near.clone()
        };
        assert_eq!(classify(&clean), Status::Exited);
        // The same peak with the controller enforcing: no inference.
        let by_controller = Observed {
            memory_by_rlimit: false,
            ..near
        };
        assert_eq!(classify(&by_controller), Status::Exited);
    }

    #[test]
    fn the_memory_rlimit_fallback_infers_the_limit_from_a_refused_allocation_and_a_failed_end() {
        // One allocation larger than what RLIMIT_AS left (Python's
        // MemoryError, exit 1), far below the limit otherwise.
        let refused = Observed {
            memory_limit: Some(128 << 20),
            memory_by_rlimit: true,
            peak_vm: 20 << 20,
            allocation_refused: true,
            ..exited(1)
        };
        assert_eq!(classify(&refused), Status::MemoryLimit);
        let unseen = Observed {
            allocation_refused: false,
            ..refused.clone()
        };
        assert_eq!(classify(&unseen), Status::Exited);
        let coped = Observed {
            code: Some(0),
            ..refused.clone()
        };
        assert_eq!(classify(&coped), Status::Exited);
        // A controller holds the limit: its counters alone decide.
        let by_controller = Observed {
            memory_by_rlimit: false,
            ..refused
        };
        assert_eq!(classify(&by_controller), Status::Exited);
    }

    #[test]
    fn the_pids_rlimit_fallback_infers_the_limit_only_from_an_abnormal_end_near_it() {
        let pids = Observed {
            pids_limit: Some(10),
            pids_by_rlimit: true,
            peak_pids: 9,
            ..exited(2)
        };
        assert_eq!(classify(&pids), Status::PidsLimit);
        let pids_far = Observed {
            peak_pids: 3,
            ..pids.clone()
        };
        assert_eq!(classify(&pids_far), Status::Exited);
        let clean = Observed {
            code: Some(0),
            ..pids.clone()
        };
        assert_eq!(classify(&clean), Status::Exited);
        let by_controller = Observed {
            pids_by_rlimit: false,
            ..pids
        };
        assert_eq!(classify(&by_controller), Status::Exited);
    }

    #[test]
    fn the_metered_run_directory_is_disk_limit() {
        let o = Observed {
            metered: true,
            disk_over: true,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&o), Status::DiskLimit);
        // RLIMIT_FSIZE at --tmp-size stopped one file.
        let o = Observed {
            metered: true,
            ..killed(libc::SIGXFSZ)
        };
        assert_eq!(classify(&o), Status::DiskLimit);
        // ...unless --max-file-size is the smaller limit: the payload's own.
        let o = Observed {
            metered: true,
            file_size_below_tmp: true,
            ..killed(libc::SIGXFSZ)
        };
        assert_eq!(classify(&o), Status::Signaled);
    }

    #[test]
    fn the_supervisors_kills_are_output_limit_and_timeout() {
        let o = Observed {
            output_cap_hit: true,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&o), Status::OutputLimit);
        let o = Observed {
            timed_out: true,
            ..killed(libc::SIGTERM)
        };
        assert_eq!(classify(&o), Status::Timeout);
        // A payload that handled SIGTERM at the deadline and exited 0.
        let o = Observed {
            timed_out: true,
            ..exited(0)
        };
        assert_eq!(classify(&o), Status::Timeout);
    }

    #[test]
    fn sigsys_is_a_violation_only_in_kill_mode() {
        let o = Observed {
            seccomp_kill: true,
            ..killed(libc::SIGSYS)
        };
        assert_eq!(classify(&o), Status::SeccompViolation);
        assert_eq!(classify(&killed(libc::SIGSYS)), Status::Signaled);
    }

    #[test]
    fn cpu_time_is_sigxcpu_or_sigkill_with_the_time_used_up() {
        assert_eq!(classify(&killed(libc::SIGXCPU)), Status::CpuLimit);
        let used = Observed {
            cpu_time_limit: Some(Duration::from_secs(1)),
            cpu_ms: 990,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&used), Status::CpuLimit);
        let not_used = Observed {
            cpu_ms: 100,
            ..used
        };
        assert_eq!(classify(&not_used), Status::Signaled);
    }

    #[test]
    fn sigxfsz_without_the_meter_is_the_payloads_own_signal() {
        assert_eq!(classify(&killed(libc::SIGXFSZ)), Status::Signaled);
    }

    #[test]
    fn the_kernels_counters_come_before_the_supervisors_kills() {
        let oom_at_deadline = Observed {
            memory_hit: true,
            memory_limit: Some(1 << 20),
            timed_out: true,
            output_cap_hit: true,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&oom_at_deadline), Status::MemoryLimit);
        let fork_refused_at_deadline = Observed {
            pids_refused: true,
            timed_out: true,
            ..exited(1)
        };
        assert_eq!(classify(&fork_refused_at_deadline), Status::PidsLimit);
        // The meter's kill, then the output cap, then the deadline.
        let all = Observed {
            metered: true,
            disk_over: true,
            output_cap_hit: true,
            timed_out: true,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&all), Status::DiskLimit);
        let cap_and_deadline = Observed {
            output_cap_hit: true,
            timed_out: true,
            ..killed(libc::SIGKILL)
        };
        assert_eq!(classify(&cap_and_deadline), Status::OutputLimit);
    }

    fn limit(enforced_by: crate::outcome::Name) -> crate::outcome::LimitReport {
        crate::outcome::LimitReport {
            limit: serde_json::json!(64 << 20),
            enforced_by,
            why: None,
            hit: None,
            verdict: None,
            oom_killed: None,
        }
    }

    fn oom_kills(n: u64) -> Stats {
        Stats {
            memory_events: Some(crate::cgroup::MemoryEvents {
                oom: 1,
                oom_kill: n,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_limits_report_says_what_the_oom_killer_killed() {
        let end = |code: Option<i32>, signal: Option<i32>| ChildEnd { code, signal };
        // A child killed, the payload exited 0: hit, and not the payload.
        let mut o = Outcome::new();
        o.limits.insert("memory", limit("cgroup_v1"));
        verdicts(&mut o, Some(&oom_kills(1)), end(Some(0), None));
        let m = &o.limits["memory"];
        assert_eq!((m.hit, m.verdict), (Some(true), Some("counted")));
        assert_eq!(
            m.oom_killed,
            Some(OomKilled {
                processes: 1,
                payload: false
            })
        );
        explain_oom(&mut o);
        assert_eq!(
            o.detail.as_deref(),
            Some("memory limit reached: the kernel's OOM killer killed 1 other process of the run, not the payload, which then exited 0")
        );
        // The payload itself (a group kill: three processes): no detail,
        // the status and signal say it.
        let mut o = Outcome::new();
        o.limits.insert("memory", limit("cgroup"));
        verdicts(&mut o, Some(&oom_kills(3)), end(None, Some(libc::SIGKILL)));
        assert_eq!(
            o.limits["memory"].oom_killed,
            Some(OomKilled {
                processes: 3,
                payload: true
            })
        );
        explain_oom(&mut o);
        assert_eq!(o.detail, None);
        // Nothing killed: no record; the rlimit rung: inferred, nothing
        // counted.
        let mut o = Outcome::new();
        o.limits.insert("memory", limit("cgroup"));
        verdicts(&mut o, Some(&Stats::default()), end(Some(1), None));
        assert_eq!(o.limits["memory"].hit, Some(false));
        assert_eq!(o.limits["memory"].oom_killed, None);
        let mut o = Outcome::new();
        o.limits.insert("memory", limit("rlimit_as"));
        verdicts(&mut o, None, end(Some(1), None));
        let m = &o.limits["memory"];
        assert_eq!(
            (m.hit, m.verdict, m.oom_killed),
            (None, Some("inferred"), None)
        );
    }

    /// Every status classify gives has a way in (setup errors are decided
    /// before it: supervise::report).
    #[test]
    fn every_status_has_a_way_in() {
        let cases = [
            (exited(0), Status::Exited),
            (killed(libc::SIGSEGV), Status::Signaled),
            (
                Observed {
                    timed_out: true,
                    ..killed(libc::SIGTERM)
                },
                Status::Timeout,
            ),
            (
                Observed {
                    memory_hit: true,
                    memory_limit: Some(1),
                    ..killed(libc::SIGKILL)
                },
                Status::MemoryLimit,
            ),
            (killed(libc::SIGXCPU), Status::CpuLimit),
            (
                Observed {
                    pids_refused: true,
                    ..exited(1)
                },
                Status::PidsLimit,
            ),
            (
                Observed {
                    output_cap_hit: true,
                    ..killed(libc::SIGKILL)
                },
                Status::OutputLimit,
            ),
            (
                Observed {
                    disk_over: true,
                    ..killed(libc::SIGKILL)
                },
                Status::DiskLimit,
            ),
            (
                Observed {
                    seccomp_kill: true,
                    ..killed(libc::SIGSYS)
                },
                Status::SeccompViolation,
            ),
        ];
        for (o, want) in cases {
            assert_eq!(classify(&o), want, "{o:?}");
        }
    }
}

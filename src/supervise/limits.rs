//! Which mechanism enforces each limit: a cgroup controller when there is
//! one, else an rlimit, recorded out loud in the outcome.

#![deny(unsafe_code)]

use std::collections::BTreeMap;

use nix::sys::resource::Resource;
use serde_json::json;

use crate::outcome::LimitReport;
use crate::plan::Rlimit;
use crate::policy::Limits;

/// For each cgroup controller: `Ok` when the run's cgroup enforces it, or
/// why it cannot.
#[derive(Debug, Clone)]
pub struct Controllers {
    pub memory: Result<(), String>,
    pub cpu: Result<(), String>,
    pub pids: Result<(), String>,
}

/// The decision: rlimits for the payload, the report of every limit, and
/// limits that nothing enforces (a warning line each).
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub rlimits: Vec<Rlimit>,
    pub report: BTreeMap<&'static str, LimitReport>,
    pub unenforced: Vec<String>,
    /// The memory limit falls back to RLIMIT_AS (classification needs samples).
    pub memory_by_rlimit: bool,
    /// The pids limit falls back to RLIMIT_NPROC.
    pub pids_by_rlimit: bool,
}

fn rl(resource: Resource, name: &'static str, soft: u64, hard: u64) -> Rlimit {
    Rlimit {
        resource,
        name,
        soft,
        hard,
    }
}

/// How `--tmp-size` is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TmpCap {
    /// A tmpfs of that size is mounted (the jail's /tmp, or the fallback's
    /// run directory): writes past it fail with ENOSPC.
    Tmpfs,
    /// The fallback's run directory has no tmpfs (the reason): RLIMIT_FSIZE
    /// caps each file and the supervisor meters the directory and kills the
    /// jail past the cap (supervise::rundir).
    Metered(String),
}

/// Decide how to enforce `l` given the cgroup controllers at hand.
pub fn decide(l: &Limits, c: &Controllers, tmp_size: u64, tmp: &TmpCap) -> Decision {
    let mut d = Decision::default();
    d.rlimits
        .push(rl(Resource::RLIMIT_CORE, "RLIMIT_CORE", 0, 0));
    d.report.insert(
        "core_size",
        LimitReport {
            limit: json!(0),
            enforced_by: "rlimit_core",
            why: None,
        },
    );
    d.report.insert(
        "tmp_size",
        match tmp {
            TmpCap::Tmpfs => LimitReport {
                limit: json!(tmp_size),
                enforced_by: "tmpfs",
                why: None,
            },
            TmpCap::Metered(why) => LimitReport {
                limit: json!(tmp_size),
                enforced_by: "rlimit_fsize+supervisor",
                why: Some(why.clone()),
            },
        },
    );
    if let Some(m) = l.memory {
        match &c.memory {
            Ok(()) => {
                d.report.insert(
                    "memory",
                    LimitReport {
                        limit: json!(m),
                        enforced_by: "cgroup",
                        why: None,
                    },
                );
            }
            Err(why) => {
                d.rlimits.push(rl(Resource::RLIMIT_AS, "RLIMIT_AS", m, m));
                d.memory_by_rlimit = true;
                d.report.insert(
                    "memory",
                    LimitReport {
                        limit: json!(m),
                        enforced_by: "rlimit_as",
                        why: Some(why.clone()),
                    },
                );
            }
        }
    }
    if let Some(m) = l.memory_high {
        match &c.memory {
            Ok(()) => {
                d.report.insert(
                    "memory_high",
                    LimitReport {
                        limit: json!(m),
                        enforced_by: "cgroup",
                        why: None,
                    },
                );
            }
            Err(why) => {
                d.unenforced
                    .push(format!("--memory-high is not enforced: {why}"));
                d.report.insert(
                    "memory_high",
                    LimitReport {
                        limit: json!(m),
                        enforced_by: "none",
                        why: Some(why.clone()),
                    },
                );
            }
        }
    }
    if let Some(cpus) = l.cpus {
        match &c.cpu {
            Ok(()) => {
                d.report.insert(
                    "cpus",
                    LimitReport {
                        limit: json!(cpus),
                        enforced_by: "cgroup",
                        why: None,
                    },
                );
            }
            Err(why) => {
                d.unenforced.push(format!("--cpus is not enforced: {why}"));
                d.report.insert(
                    "cpus",
                    LimitReport {
                        limit: json!(cpus),
                        enforced_by: "none",
                        why: Some(why.clone()),
                    },
                );
            }
        }
    }
    if let Some(p) = l.pids {
        match &c.pids {
            Ok(()) => {
                d.report.insert(
                    "pids",
                    LimitReport {
                        limit: json!(p),
                        enforced_by: "cgroup",
                        why: None,
                    },
                );
            }
            Err(why) => {
                // Counted per uid inside the jail's own user namespace, where
                // init and the payload are the only users of the jail uid.
                d.rlimits
                    .push(rl(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", p, p));
                d.pids_by_rlimit = true;
                d.report.insert(
                    "pids",
                    LimitReport {
                        limit: json!(p),
                        enforced_by: "rlimit_nproc",
                        why: Some(why.clone()),
                    },
                );
            }
        }
    }
    if let Some(t) = l.cpu_time {
        let secs = t.as_secs_f64().ceil().max(1.0) as u64;
        // SIGXCPU at the soft limit, SIGKILL one second later.
        d.rlimits
            .push(rl(Resource::RLIMIT_CPU, "RLIMIT_CPU", secs, secs + 1));
        d.report.insert(
            "cpu_time",
            LimitReport {
                limit: json!(secs),
                enforced_by: "rlimit_cpu",
                why: None,
            },
        );
    }
    let metered = matches!(tmp, TmpCap::Metered(_));
    let fsize = match (l.max_file_size, metered) {
        (Some(f), true) => Some(f.min(tmp_size)),
        (Some(f), false) => Some(f),
        (None, true) => Some(tmp_size),
        (None, false) => None,
    };
    if let Some(f) = fsize {
        d.rlimits
            .push(rl(Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", f, f));
    }
    if let Some(f) = l.max_file_size {
        d.report.insert(
            "max_file_size",
            LimitReport {
                limit: json!(f),
                enforced_by: "rlimit_fsize",
                why: None,
            },
        );
    }
    if let Some(n) = l.max_open_files {
        d.rlimits
            .push(rl(Resource::RLIMIT_NOFILE, "RLIMIT_NOFILE", n, n));
        d.report.insert(
            "max_open_files",
            LimitReport {
                limit: json!(n),
                enforced_by: "rlimit_nofile",
                why: None,
            },
        );
    }
    if let Some(t) = l.timeout {
        d.report.insert(
            "timeout",
            LimitReport {
                limit: json!(t.as_secs_f64()),
                enforced_by: "supervisor",
                why: None,
            },
        );
        d.report.insert(
            "grace",
            LimitReport {
                limit: json!(l.grace.as_secs_f64()),
                enforced_by: "supervisor",
                why: None,
            },
        );
    }
    if let Some(m) = l.max_output {
        d.report.insert(
            "max_output",
            LimitReport {
                limit: json!(m),
                enforced_by: "supervisor",
                why: None,
            },
        );
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn none(why: &str) -> Controllers {
        Controllers {
            memory: Err(why.into()),
            cpu: Err(why.into()),
            pids: Err(why.into()),
        }
    }

    #[test]
    fn without_controllers_memory_and_pids_fall_back_to_rlimits() {
        let l = Limits {
            memory: Some(256 << 20),
            pids: Some(64),
            cpus: Some(0.5),
            ..Default::default()
        };
        let d = decide(&l, &none("no memory controller"), 1 << 20, &TmpCap::Tmpfs);
        assert_eq!(d.report["memory"].enforced_by, "rlimit_as");
        assert_eq!(
            d.report["memory"].why.as_deref(),
            Some("no memory controller")
        );
        assert_eq!(d.report["pids"].enforced_by, "rlimit_nproc");
        assert_eq!(d.report["cpus"].enforced_by, "none");
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_AS" && r.soft == 256 << 20));
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_NPROC" && r.soft == 64));
        assert_eq!(d.unenforced.len(), 1);
        assert!(d.memory_by_rlimit && d.pids_by_rlimit);
    }

    #[test]
    fn with_controllers_no_rlimit_fallback() {
        let c = Controllers {
            memory: Ok(()),
            cpu: Ok(()),
            pids: Ok(()),
        };
        let l = Limits {
            memory: Some(1 << 30),
            pids: Some(10),
            cpus: Some(1.0),
            ..Default::default()
        };
        let d = decide(&l, &c, 1, &TmpCap::Tmpfs);
        assert!(d
            .rlimits
            .iter()
            .all(|r| r.name != "RLIMIT_AS" && r.name != "RLIMIT_NPROC"));
        assert_eq!(d.report["memory"].enforced_by, "cgroup");
        assert!(d.unenforced.is_empty());
    }

    #[test]
    fn a_metered_run_directory_caps_every_file_at_the_smaller_size() {
        let fsize = |d: &Decision| {
            d.rlimits
                .iter()
                .filter(|r| r.name == "RLIMIT_FSIZE")
                .map(|r| (r.soft, r.hard))
                .collect::<Vec<_>>()
        };
        let metered = TmpCap::Metered("not root".into());
        let d = decide(&Limits::default(), &none("x"), 8 << 20, &metered);
        assert_eq!(fsize(&d), vec![(8 << 20, 8 << 20)]);
        assert_eq!(d.report["tmp_size"].enforced_by, "rlimit_fsize+supervisor");
        assert_eq!(d.report["tmp_size"].why.as_deref(), Some("not root"));
        let l = Limits {
            max_file_size: Some(1 << 20),
            ..Default::default()
        };
        let d = decide(&l, &none("x"), 8 << 20, &metered);
        assert_eq!(fsize(&d), vec![(1 << 20, 1 << 20)]);
        let d = decide(&Limits::default(), &none("x"), 8 << 20, &TmpCap::Tmpfs);
        assert!(fsize(&d).is_empty());
        assert_eq!(d.report["tmp_size"].enforced_by, "tmpfs");
    }

    #[test]
    fn always_core_zero_and_cpu_time_rounds_up() {
        let l = Limits {
            cpu_time: Some(Duration::from_millis(1500)),
            ..Default::default()
        };
        let d = decide(&l, &none("x"), 1, &TmpCap::Tmpfs);
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_CORE" && r.hard == 0));
        assert!(d
            .rlimits
            .iter()
            .any(|r| r.name == "RLIMIT_CPU" && r.soft == 2 && r.hard == 3));
    }
}

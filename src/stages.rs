//! Where a warm run's time goes, stage by stage: each stage's wall time
//! and count, summed over every run of this process (`/metrics` shows
//! them as `stockade_stage_seconds_total` and `stockade_stage_runs_total`;
//! `cargo xtask bench serve` divides by the runs). A stage that runs in
//! turn (one zygote forks one child at a time) caps throughput at one
//! over its time per run, which can be read off on any host, a 2-core one
//! included.

#![deny(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stages of a warm run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The server makes a forked run's cgroup and writes its limits.
    ForkCgroupMake,
    /// The server asks a zygote for a child until it has the child's
    /// pidfd (the zygote forks one child at a time).
    ForkZygote,
    /// The server moves the child into its run cgroup (the kernel's
    /// cgroup migration).
    ForkCgroupMove,
    /// A child forked ahead takes its request's limits (its cgroup's
    /// files), on the request's path.
    ForkLimits,
    /// The child from its go to its end record (confinement, the
    /// payload, its exit).
    ForkRun,
    /// The outcome made from the end record and the cgroup's counters.
    ForkConclude,
    /// A warm member takes the request's limits (its cgroup's files).
    MemberLimits,
}

impl Stage {
    const ALL: [Stage; COUNT] = [
        Stage::ForkCgroupMake,
        Stage::ForkZygote,
        Stage::ForkCgroupMove,
        Stage::ForkLimits,
        Stage::ForkRun,
        Stage::ForkConclude,
        Stage::MemberLimits,
    ];

    /// Its name in `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::ForkCgroupMake => "fork_cgroup_make",
            Stage::ForkZygote => "fork_zygote",
            Stage::ForkCgroupMove => "fork_cgroup_move",
            Stage::ForkLimits => "fork_limits",
            Stage::ForkRun => "fork_run",
            Stage::ForkConclude => "fork_conclude",
            Stage::MemberLimits => "member_limits",
        }
    }
}

/// How many stages there are.
const COUNT: usize = 7;

static NANOS: [AtomicU64; COUNT] = [const { AtomicU64::new(0) }; COUNT];
static COUNTS: [AtomicU64; COUNT] = [const { AtomicU64::new(0) }; COUNT];

/// Count `d` of `stage`.
pub fn record(stage: Stage, d: Duration) {
    let i = stage as usize;
    NANOS[i].fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    COUNTS[i].fetch_add(1, Ordering::Relaxed);
}

/// Count the time since `since` for `stage`; the new start.
pub fn lap(stage: Stage, since: Instant) -> Instant {
    let now = Instant::now();
    record(stage, now.saturating_duration_since(since));
    now
}

/// Every stage that ran: its name, seconds in all, runs.
pub fn totals() -> Vec<(&'static str, f64, u64)> {
    Stage::ALL
        .iter()
        .map(|&s| {
            let i = s as usize;
            (
                s.name(),
                NANOS[i].load(Ordering::Relaxed) as f64 / 1e9,
                COUNTS[i].load(Ordering::Relaxed),
            )
        })
        .filter(|(_, _, n)| *n > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_sums_its_laps_and_counts_them() {
        let before = totals()
            .into_iter()
            .find(|(n, _, _)| *n == "member_limits")
            .map_or((0.0, 0), |(_, s, c)| (s, c));
        record(Stage::MemberLimits, Duration::from_millis(3));
        record(Stage::MemberLimits, Duration::from_millis(4));
        let (_, s, c) = totals()
            .into_iter()
            .find(|(n, _, _)| *n == "member_limits")
            .unwrap();
        assert_eq!(c, before.1 + 2);
        assert!(s - before.0 >= 0.007 - 1e-9, "{s} {before:?}");
    }
}

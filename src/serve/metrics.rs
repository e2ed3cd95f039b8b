//! Counters for `GET /metrics`, in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::pool::{Miss, Stat};

/// Upper bounds (seconds) of the run-duration histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Default)]
struct Hist {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
pub struct Metrics {
    /// Runs ended, by outcome status.
    runs: Mutex<BTreeMap<String, u64>>,
    duration: Mutex<Hist>,
    pub in_flight: AtomicI64,
    pub queued: AtomicI64,
    /// Requests refused before a run, by error code.
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    /// Runs that started a cold jail, by profile and why.
    pool_misses: Mutex<BTreeMap<(String, Miss), u64>>,
}

impl Metrics {
    pub fn run_ended(&self, status: &str, took: Duration) {
        *lock(&self.runs).entry(status.to_string()).or_default() += 1;
        let s = took.as_secs_f64();
        let mut h = lock(&self.duration);
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += s;
        h.count += 1;
    }

    pub fn pool_missed(&self, profile: &str, why: Miss) {
        *lock(&self.pool_misses)
            .entry((profile.to_string(), why))
            .or_default() += 1;
    }

    pub fn rejected(&self, code: &'static str) {
        *lock(&self.rejected).entry(code).or_default() += 1;
    }

    /// The text for `/metrics`; `pools` are the warm pools now.
    pub fn render(&self, pools: &[Stat]) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "# HELP stockade_runs_total Runs ended, by outcome status."
        );
        let _ = writeln!(o, "# TYPE stockade_runs_total counter");
        for (s, n) in lock(&self.runs).iter() {
            let _ = writeln!(o, "stockade_runs_total{{status=\"{s}\"}} {n}");
        }
        let _ = writeln!(
            o,
            "# HELP stockade_run_duration_seconds Wall time of a run, from start to outcome."
        );
        let _ = writeln!(o, "# TYPE stockade_run_duration_seconds histogram");
        let h = lock(&self.duration);
        for (b, n) in BUCKETS.iter().zip(h.counts) {
            let _ = writeln!(o, "stockade_run_duration_seconds_bucket{{le=\"{b}\"}} {n}");
        }
        let _ = writeln!(
            o,
            "stockade_run_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(o, "stockade_run_duration_seconds_sum {}", h.sum);
        let _ = writeln!(o, "stockade_run_duration_seconds_count {}", h.count);
        drop(h);
        let gauge = |o: &mut String, name: &str, help: &str, v: i64| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} gauge");
            let _ = writeln!(o, "{name} {v}");
        };
        gauge(
            &mut o,
            "stockade_runs_in_flight",
            "Runs started and not yet ended.",
            self.in_flight.load(Ordering::Relaxed),
        );
        gauge(
            &mut o,
            "stockade_queue_depth",
            "Requests waiting for a run slot.",
            self.queued.load(Ordering::Relaxed),
        );
        pool_lines(&mut o, pools);
        let _ = writeln!(o, "# HELP stockade_pool_misses_total Runs that found no warm jail (or none that could run them as a cold jail would) and started a cold one, by profile and reason (no_pool, argv, env, limits, policy, secrets, empty, fork_server_down, start_failed).");
        let _ = writeln!(o, "# TYPE stockade_pool_misses_total counter");
        let misses = lock(&self.pool_misses);
        if misses.is_empty() {
            let _ = writeln!(o, "stockade_pool_misses_total 0");
        }
        for ((p, why), n) in misses.iter() {
            let _ = writeln!(
                o,
                "stockade_pool_misses_total{{profile=\"{p}\",reason=\"{}\"}} {n}",
                why.name()
            );
        }
        drop(misses);
        let _ = writeln!(
            o,
            "# HELP stockade_rejected_total Requests refused before a run, by error code."
        );
        let _ = writeln!(o, "# TYPE stockade_rejected_total counter");
        for (c, n) in lock(&self.rejected).iter() {
            let _ = writeln!(o, "stockade_rejected_total{{code=\"{c}\"}} {n}");
        }
        stage_lines(&mut o);
        o
    }
}

/// Where warm runs' time went, by stage (see `crate::stages`).
fn stage_lines(o: &mut String) {
    let totals = crate::stages::totals();
    for (name, help, kind) in [
        (
            "stockade_stage_seconds_total",
            "Wall time of warm runs' stages, summed over runs (fork_cgroup_make, fork_zygote and fork_cgroup_move for a child forked ahead of its request, the last only for one moved into its cgroup rather than born there, fork_limits, fork_run, fork_conclude, member_limits).",
            0,
        ),
        ("stockade_stage_runs_total", "Runs that went through each stage.", 1),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} counter");
        for (stage, secs, n) in &totals {
            let _ = match kind {
                0 => writeln!(o, "{name}{{stage=\"{stage}\"}} {secs:.6}"),
                _ => writeln!(o, "{name}{{stage=\"{stage}\"}} {n}"),
            };
        }
    }
}

/// Each warm pool's size, target and hits (`stockade_pool_size 0` with
/// no pool).
fn pool_lines(o: &mut String, pools: &[Stat]) {
    let _ = writeln!(
        o,
        "# HELP stockade_pool_size Warm jails parked, ready for a request."
    );
    let _ = writeln!(o, "# TYPE stockade_pool_size gauge");
    if pools.is_empty() {
        let _ = writeln!(o, "stockade_pool_size 0");
    }
    for p in pools {
        let _ = writeln!(
            o,
            "stockade_pool_size{{profile=\"{}\"}} {}",
            p.profile, p.size
        );
    }
    let families = [
        (
            "stockade_pool_target",
            "gauge",
            "Warm jails each pool keeps (--warm).",
        ),
        (
            "stockade_pool_hits_total",
            "counter",
            "Runs handed to a warm jail.",
        ),
    ];
    for (name, kind, help) in families {
        if pools.is_empty() {
            continue;
        }
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
        for p in pools {
            let v = if kind == "gauge" {
                p.target as u64
            } else {
                p.hits
            };
            let _ = writeln!(o, "{name}{{profile=\"{}\"}} {v}", p.profile);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

//! What a run used, read from its cgroup's files after it ended.

use std::fs;
use std::path::Path;

use serde::Serialize;

use super::files::read_trim;

/// What a run used, read after it ended. `None`: the file is missing (no
/// such controller in this cgroup, or a kernel older than the file).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// memory.peak (kernel 5.19 and later).
    pub memory_peak: Option<u64>,
    pub memory_current: Option<u64>,
    pub memory_events: Option<MemoryEvents>,
    pub cpu: Option<CpuStat>,
    /// pids.peak (kernel 6.1 and later).
    pub pids_peak: Option<u64>,
    pub pids_current: Option<u64>,
    /// pids.events `max`: forks refused by pids.max.
    pub pids_events_max: Option<u64>,
}

impl Stats {
    /// The kernel's OOM killer killed a process of the run because of its
    /// memory limit.
    pub fn oom_killed(&self) -> bool {
        self.memory_events
            .as_ref()
            .is_some_and(|e| e.oom_kill > 0 || e.oom_group_kill > 0)
    }

    /// The memory controller counted the limit reached: a charge met
    /// memory.max (memory.events `max`, v1 `memory.failcnt`), or an OOM.
    pub fn memory_limit_hit(&self) -> bool {
        self.memory_events
            .as_ref()
            .is_some_and(|e| e.max > 0 || e.oom > 0 || e.oom_kill > 0 || e.oom_group_kill > 0)
    }

    /// A fork or clone was refused because of pids.max.
    pub fn pids_limit_hit(&self) -> bool {
        self.pids_events_max.is_some_and(|n| n > 0)
    }

    /// CPU time of the whole cgroup in microseconds (cpu.stat usage_usec; it
    /// counts every process of the run, also those not reaped by us).
    pub fn cpu_usage_usec(&self) -> Option<u64> {
        self.cpu.as_ref().map(|c| c.usage_usec)
    }
}

/// memory.events (hierarchical counts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryEvents {
    pub low: u64,
    pub high: u64,
    pub max: u64,
    pub oom: u64,
    pub oom_kill: u64,
    pub oom_group_kill: u64,
}

/// cpu.stat. The throttling fields stay 0 without the cpu controller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CpuStat {
    pub usage_usec: u64,
    pub user_usec: u64,
    pub system_usec: u64,
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_usec: u64,
}

fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    let s = read_trim(&dir.join(file)).ok()?;
    if s == "max" {
        return Some(u64::MAX);
    }
    s.parse().ok()
}

fn keyed(dir: &Path, file: &str) -> Option<Vec<(String, u64)>> {
    let s = fs::read_to_string(dir.join(file)).ok()?;
    Some(
        s.lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                Some((it.next()?.to_string(), it.next()?.parse().ok()?))
            })
            .collect(),
    )
}

fn get(kv: &[(String, u64)], k: &str) -> u64 {
    kv.iter()
        .find(|(x, _)| x == k)
        .map(|(_, v)| *v)
        .unwrap_or(0)
}

/// Read the stats files of a cgroup directory.
pub fn read_stats(dir: &Path) -> Stats {
    Stats {
        memory_peak: read_u64(dir, "memory.peak"),
        memory_current: read_u64(dir, "memory.current"),
        memory_events: keyed(dir, "memory.events").map(|kv| MemoryEvents {
            low: get(&kv, "low"),
            high: get(&kv, "high"),
            max: get(&kv, "max"),
            oom: get(&kv, "oom"),
            oom_kill: get(&kv, "oom_kill"),
            oom_group_kill: get(&kv, "oom_group_kill"),
        }),
        cpu: keyed(dir, "cpu.stat").map(|kv| CpuStat {
            usage_usec: get(&kv, "usage_usec"),
            user_usec: get(&kv, "user_usec"),
            system_usec: get(&kv, "system_usec"),
            nr_periods: get(&kv, "nr_periods"),
            nr_throttled: get(&kv, "nr_throttled"),
            throttled_usec: get(&kv, "throttled_usec"),
        }),
        pids_peak: read_u64(dir, "pids.peak"),
        pids_current: read_u64(dir, "pids.current"),
        pids_events_max: keyed(dir, "pids.events").map(|kv| get(&kv, "max")),
    }
}

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

    /// How many processes of the run the OOM killer killed (each one
    /// counted, a group kill's too).
    pub fn oom_kills(&self) -> u64 {
        self.memory_events.as_ref().map_or(0, |e| e.oom_kill)
    }

    /// The memory controller counted the limit hit for memory reclaim
    /// could not free: an OOM at the limit (memory.events `oom`, v1
    /// `under_oom` when read) or an OOM kill (`oom_kill`, `oom_group_kill`,
    /// v1 `memory.oom_control` `oom_kill`). Not memory.events `max` nor v1
    /// `memory.failcnt`: they count every charge that met the limit,
    /// including those reclaim then satisfied by dropping page cache, so a
    /// run that only reads or writes much file data under a tight limit
    /// would count as having hit it.
    pub fn memory_limit_hit(&self) -> bool {
        self.memory_events
            .as_ref()
            .is_some_and(|e| e.oom > 0 || e.oom_kill > 0 || e.oom_group_kill > 0)
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

/// memory.events (hierarchical counts); under cgroup v1, `max` is
/// `memory.failcnt` (+ memsw's), `oom` is `under_oom` and `oom_kill` the
/// count of `memory.oom_control`.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with(e: MemoryEvents) -> Stats {
        Stats {
            memory_events: Some(e),
            ..Stats::default()
        }
    }

    #[test]
    fn reclaim_at_the_limit_is_not_a_hit_an_oom_is() {
        // Page cache dropped at the limit: memory.events max (v1 failcnt)
        // moves, nothing was refused.
        let reclaimed = with(MemoryEvents {
            max: 5000,
            ..MemoryEvents::default()
        });
        assert!(!reclaimed.memory_limit_hit());
        assert!(!Stats::default().memory_limit_hit());
        for e in [
            MemoryEvents {
                oom: 1,
                ..MemoryEvents::default()
            },
            MemoryEvents {
                oom_kill: 1,
                ..MemoryEvents::default()
            },
            MemoryEvents {
                oom_group_kill: 1,
                ..MemoryEvents::default()
            },
        ] {
            assert!(with(e.clone()).memory_limit_hit(), "{e:?}");
        }
    }
}

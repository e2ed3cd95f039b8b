//! What a server's runs may leave behind, counted before and after a load:
//! processes under the server, run cgroups, mounts, workdirs and run
//! directories, and the server's resident memory.

use std::path::Path;

/// The counts at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Zombies among them: per-run supervisors that exited and that the
    /// spawner reaps when it next forks (at most the last few runs').
    pub zombies: usize,
    /// Orphaned `run-*` groups under a `stockade` cgroup: no process in
    /// them and the stockade that made them gone (the base is shared with
    /// every other stockade on the host, whose live runs are not counted).
    pub cgroups: usize,
    /// Lines of /proc/self/mountinfo naming stockade.
    pub mounts: usize,
    /// Entries under the server's --workdir-root.
    pub workdirs: usize,
    /// `/tmp/stockade-run-*` (the fallback's run directories).
    pub rundirs: usize,
    /// The server's VmRSS, kB.
    pub rss_kb: u64,
    /// The live processes descending from the server (its spawner, pool
    /// members, jails not yet gone): (pid, command line), so that a count
    /// that grew can say what is new.
    pub live: Vec<(u32, String)>,
}

impl Snapshot {
    pub fn take(server: u32, workdir_root: &Path) -> Snapshot {
        let (live, zombies) = descendants(server);
        Snapshot {
            zombies,
            cgroups: run_cgroups(),
            mounts: std::fs::read_to_string("/proc/self/mountinfo")
                .map(|m| m.lines().filter(|l| l.contains("stockade")).count())
                .unwrap_or(0),
            workdirs: count(workdir_root, ""),
            rundirs: count(Path::new("/tmp"), "stockade-run-"),
            rss_kb: rss_kb(server).unwrap_or(0),
            live,
        }
    }

    /// How many processes live under the server.
    pub fn procs(&self) -> usize {
        self.live.len()
    }

    /// Processes alive now that were not in `earlier` (at most 4, with
    /// how many more).
    pub fn new_since(&self, earlier: &Snapshot) -> String {
        let new: Vec<String> = self
            .live
            .iter()
            .filter(|p| !earlier.live.iter().any(|q| q.0 == p.0))
            .map(|(pid, cmd)| format!("{pid} {cmd}"))
            .collect();
        let more = new.len().saturating_sub(4);
        let mut s = new.into_iter().take(4).collect::<Vec<_>>().join("; ");
        if more > 0 {
            s.push_str(&format!("; {more} more"));
        }
        s
    }

    /// More of something than `before` had (RSS aside): what a leak is.
    /// Fewer is not (a process that was on its way at the start, as a
    /// child a zygote was forking ahead then).
    pub fn grew_from(&self, before: &Snapshot) -> bool {
        self.procs() > before.procs()
            || self.cgroups > before.cgroups
            || self.mounts > before.mounts
            || self.workdirs > before.workdirs
            || self.rundirs > before.rundirs
    }

    /// Nothing left over compared with `before` (RSS aside).
    pub fn same_counts(&self, before: &Snapshot) -> bool {
        (
            self.procs(),
            self.cgroups,
            self.mounts,
            self.workdirs,
            self.rundirs,
        ) == (
            before.procs(),
            before.cgroups,
            before.mounts,
            before.workdirs,
            before.rundirs,
        )
    }
}

/// Before and after a load, and the server's RSS when it started.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub start_rss_kb: u64,
    pub before: Snapshot,
    pub after: Snapshot,
}

impl Report {
    pub fn line(&self) -> String {
        let (b, a) = (&self.before, &self.after);
        let pct = |kb: u64| {
            100.0 * (kb as f64 - self.start_rss_kb as f64) / (self.start_rss_kb.max(1) as f64)
        };
        let end = pct(a.rss_kb);
        let new = match a.procs() > b.procs() {
            true => format!(" (new since the start: {})", a.new_since(b)),
            false => String::new(),
        };
        let line = format!(
            "processes under the server {} → {} (+ zombies {} → {}), orphaned run cgroups {} → {}, mounts naming stockade {} → {}, workdirs {} → {}, /tmp/stockade-run-* {} → {} ({}); server RSS {:.1} MB at start, {:.1} MB before the load, {:.1} MB after ({:+.1}% of start: {})",
            b.procs(),
            a.procs(),
            b.zombies,
            a.zombies,
            b.cgroups,
            a.cgroups,
            b.mounts,
            a.mounts,
            b.workdirs,
            a.workdirs,
            b.rundirs,
            a.rundirs,
            if a.grew_from(b) { "LEAK" } else { "no leak" },
            self.start_rss_kb as f64 / 1024.0,
            b.rss_kb as f64 / 1024.0,
            a.rss_kb as f64 / 1024.0,
            end,
            if end.abs() <= 10.0 { "within 10%" } else { "NOT within 10%" }
        );
        line + &new
    }
}

fn count(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

/// The processes whose chain of parents reaches `root` (not `root`):
/// the live ones (pid, command line), and how many zombies.
fn descendants(root: u32) -> (Vec<(u32, String)>, usize) {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return (Vec::new(), 0);
    };
    let parents: Vec<(u32, u32, bool)> = rd
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // pid (comm) state ppid …: comm may hold spaces and parens.
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
            let zombie = rest.next()? == "Z";
            let ppid = rest.next()?.parse().ok()?;
            Some((pid, ppid, zombie))
        })
        .collect();
    let mut found = vec![(root, false)];
    let mut i = 0;
    while i < found.len() {
        let p = found[i].0;
        found.extend(
            parents
                .iter()
                .filter(|(_, pp, _)| *pp == p)
                .map(|(c, _, z)| (*c, *z)),
        );
        i += 1;
    }
    let zombies = found.iter().filter(|(_, z)| *z).count();
    let live = found[1..]
        .iter()
        .filter(|(_, z)| !z)
        .map(|&(pid, _)| (pid, cmdline(pid)))
        .collect();
    (live, zombies)
}

/// A process's command line, NULs as spaces, cut at 80 characters.
fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let s: String = String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .trim()
        .chars()
        .take(80)
        .collect();
    s
}

/// `run-PID-…` groups in `base` with no process in them whose PID is gone.
fn orphans(base: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(base) else {
        return 0;
    };
    rd.flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name.strip_prefix("run-").and_then(|r| r.split('-').next()) else {
                return false;
            };
            let empty = std::fs::read_to_string(e.path().join("cgroup.procs"))
                .is_ok_and(|p| p.trim().is_empty());
            empty && !Path::new(&format!("/proc/{pid}")).exists()
        })
        .count()
}

/// Orphaned run groups under any `stockade` directory of the cgroup file
/// system (v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified, any depth ≤ 4).
fn run_cgroups() -> usize {
    fn walk(dir: &Path, depth: usize) -> usize {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return 0;
        };
        let mut n = 0;
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if e.file_name() == "stockade" {
                n += orphans(&p);
            } else if depth > 0 {
                n += walk(&p, depth - 1);
            }
        }
        n
    }
    walk(Path::new("/sys/fs/cgroup"), 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn procs(n: u32) -> Snapshot {
        Snapshot {
            live: (0..n).map(|p| (p, String::new())).collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_leak_is_more_left_than_at_the_start_not_less() {
        let start = procs(6);
        assert!(!procs(6).grew_from(&start));
        // A child forked ahead that was on its way at the start.
        assert!(!procs(5).grew_from(&start));
        assert!(procs(7).grew_from(&start));
        let left = Snapshot {
            cgroups: 1,
            ..procs(5)
        };
        assert!(left.grew_from(&start));
        let r = Report {
            start_rss_kb: 1000,
            before: start,
            after: procs(5),
        };
        assert!(r.line().contains("(no leak)"), "{}", r.line());
    }
}

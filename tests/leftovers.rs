//! Nothing is left behind: after 500 sequential runs and 100 concurrent ones
//! (10 at a time) that each hit a limit, no process, mount, cgroup (in the
//! unified hierarchy or any cgroup v1 hierarchy) or temporary directory of
//! stockade's remains.
//!
//! The test judges only what its own runs created: the cgroup each run's
//! outcome names, the run directories named after its own stockade
//! processes, the processes carrying its own tag. Other jails may run on the
//! host meanwhile (and create and remove their own cgroups and directories).

mod common;

use common::{Scratch, Who};
use std::collections::BTreeSet;

/// Mounts a jail could leave in the host's namespace (tmpfs, proc, devpts,
/// binds), ignoring what other software (a container engine) mounts meanwhile.
fn mounts() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| !l.contains("/docker") && !l.contains(" - nsfs ") && !l.contains(" - fuse"))
        .map(|l| l.split(' ').skip(3).take(2).collect::<Vec<_>>().join(" "))
        .collect()
}

/// Run directories (and stockade's dot files) that one of `pids`, the
/// stockade processes this test started, created: their names carry the pid.
fn run_dirs(pids: &BTreeSet<u32>) -> BTreeSet<String> {
    let ours = |n: &str| {
        n.trim_start_matches('.')
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse::<u32>().ok())
            .any(|p| pids.contains(&p))
    };
    let mut s = BTreeSet::new();
    for base in ["/tmp", "/run", "/var/tmp"] {
        if let Ok(d) = std::fs::read_dir(base) {
            for e in d.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if (n.starts_with("stockade-run-") || n.starts_with(".stockade")) && ours(&n) {
                    s.insert(format!("{base}/{n}"));
                }
            }
        }
    }
    s
}

fn procs_with(tag: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let c = std::fs::read(e.path().join("cmdline")).ok()?;
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            c.contains(tag)
                .then(|| format!("{}: {c}", e.file_name().to_string_lossy()))
        })
        .collect()
}

/// What one run created that must be gone afterwards.
struct Made {
    /// The stockade process (run directories are named after it).
    pid: u32,
    /// The run's cgroups, as its outcome names them: its group in the
    /// unified hierarchy, or its first v1 group, then every v1 group.
    cgroups: Vec<String>,
}

/// One run that hits a limit: alternately the output cap and the deadline,
/// with a daemonized child left running that must die with the jail.
fn limited_run(who: Who, i: usize, tag: &str, reports: &std::path::Path) -> Made {
    let script = format!("setsid sleep {tag} </dev/null >/dev/null 2>&1 & yes {i}");
    let flags: &[&str] = if i % 2 == 0 {
        &["--max-output", "64k"]
    } else {
        &["--timeout", "200ms", "--max-output", "64m"]
    };
    // A cgroup limit, so that every run also creates (and must remove) its
    // cgroup where the caller may create one.
    let report = reports.join(format!("{i}.json"));
    let report_arg = report.display().to_string();
    let mut f = vec!["--report", report_arg.as_str(), "--pids-limit", "256"];
    f.extend_from_slice(flags);
    let mut c = common::stockade(who);
    c.arg("run").args(&f).args(["--", "/bin/sh", "-c", &script]);
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("start stockade");
    let pid = child.id();
    let o = child.wait_with_output().expect("wait for stockade");
    let code = o.status.code();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        code == Some(141) || code == Some(137) || code == Some(143),
        "{who:?} run {i}: {:?} {err}",
        o.status
    );
    assert!(
        !err.contains("not removed"),
        "{who:?} run {i}: stockade left its cgroup: {err}"
    );
    let text = std::fs::read_to_string(&report).expect("the run's report");
    let v: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
    let cg = &v["layers"]["cgroup"];
    let mut cgroups = Vec::new();
    if cg["state"] == "applied" {
        let d = &cg["detail"];
        let path = d["path"]
            .as_str()
            .expect("an applied cgroup names its path");
        cgroups.push(path.to_string());
        for g in d["v1"].as_array().into_iter().flatten() {
            cgroups.push(g.as_str().expect("a v1 group's path").to_string());
        }
    }
    Made { pid, cgroups }
}

/// Runs made one after the other (in STREAMS streams side by side), before
/// the ten batches of ten at once.
const SEQUENTIAL: usize = 500;
const STREAMS: usize = 4;

#[test]
fn no_process_mount_cgroup_or_directory_is_left_after_many_runs() {
    for who in common::users("no_process_mount_cgroup_or_directory_is_left_after_many_runs") {
        let tag = format!(
            "{}",
            700000 + std::process::id() % 100000 + if who == Who::Root { 1 } else { 3 }
        );
        let reports = Scratch::new("leftovers").world_writable();
        let m0 = mounts();
        // Four streams of 125 runs one after the other, side by side: as
        // many runs as one stream of 500, in a quarter of the time.
        let streams: Vec<_> = (0..STREAMS)
            .map(|s| {
                let tag = tag.clone();
                let reports = reports.path().to_path_buf();
                std::thread::spawn(move || {
                    (0..SEQUENTIAL / STREAMS)
                        .map(|k| limited_run(who, s + k * STREAMS, &tag, &reports))
                        .collect::<Vec<Made>>()
                })
            })
            .collect();
        let mut made: Vec<Made> = streams
            .into_iter()
            .flat_map(|h| h.join().expect("a stream of runs"))
            .collect();
        for batch in 0..10 {
            let handles: Vec<_> = (0..10)
                .map(|j| {
                    let tag = tag.clone();
                    let reports = reports.path().to_path_buf();
                    std::thread::spawn(move || {
                        limited_run(who, SEQUENTIAL + batch * 10 + j, &tag, &reports)
                    })
                })
                .collect();
            for h in handles {
                made.push(h.join().expect("concurrent run"));
            }
        }
        // Processes die with their jail; allow the kernel a moment to reap.
        let mut left = procs_with(&tag);
        for _ in 0..40 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            left = procs_with(&tag);
        }
        assert!(left.is_empty(), "{who:?}: processes left: {left:?}");
        let pids: BTreeSet<u32> = made.iter().map(|m| m.pid).collect();
        let m1 = mounts();
        // Another jail's fallback run directory is not ours to judge.
        let new_mounts: Vec<_> = m1
            .difference(&m0)
            .filter(|m| !m.contains("/stockade-run-") || !run_dirs_named(m, &pids))
            .collect();
        assert!(
            new_mounts.is_empty(),
            "{who:?}: mounts left: {new_mounts:?}"
        );
        let dirs = run_dirs(&pids);
        assert!(dirs.is_empty(), "{who:?}: directories left: {dirs:?}");
        let with_cgroup = made.iter().filter(|m| !m.cgroups.is_empty()).count();
        let cg_left: Vec<&String> = made
            .iter()
            .flat_map(|m| &m.cgroups)
            .filter(|p| std::path::Path::new(p).exists())
            .collect();
        assert!(cg_left.is_empty(), "{who:?}: cgroups left: {cg_left:?}");
        if with_cgroup == 0 {
            // Not a skip: processes, mounts and directories were judged.
            eprintln!("note: {who:?}: no run could create a cgroup on this host");
        }
    }
}

/// Whether a mount line names a run directory of one of `pids`.
fn run_dirs_named(line: &str, pids: &BTreeSet<u32>) -> bool {
    line.split("/stockade-run-").skip(1).any(|rest| {
        rest.split('-')
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|p| pids.contains(&p))
    })
}

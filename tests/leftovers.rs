//! Nothing is left behind: after 500 sequential runs and 100 concurrent ones
//! (10 at a time) that each hit a limit, no process, mount, cgroup or
//! temporary directory of stockade's remains.

mod common;

use common::Who;
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

fn run_dirs() -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for base in ["/tmp", "/run", "/var/tmp"] {
        if let Ok(d) = std::fs::read_dir(base) {
            for e in d.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("stockade-run-") || n.starts_with(".stockade") {
                    s.insert(format!("{base}/{n}"));
                }
            }
        }
    }
    s
}

fn cgroups() -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for base in ["/sys/fs/cgroup/stockade", "/sys/fs/cgroup/unified/stockade"] {
        if let Ok(d) = std::fs::read_dir(base) {
            for e in d.flatten() {
                if e.path().is_dir() {
                    s.insert(e.path().display().to_string());
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

/// One run that hits a limit: alternately the output cap and the deadline,
/// with a daemonized child left running that must die with the jail.
fn limited_run(who: Who, i: usize, tag: &str) {
    let script = format!("setsid sleep {tag} </dev/null >/dev/null 2>&1 & yes {i}");
    let flags: &[&str] = if i % 2 == 0 {
        &["--max-output", "64k"]
    } else {
        &["--timeout", "200ms", "--max-output", "64m"]
    };
    // A cgroup limit, so that every run also creates (and must remove) its
    // cgroup where the caller may create one.
    let mut f = vec!["--report", "/dev/null", "--pids-limit", "256"];
    f.extend_from_slice(flags);
    let mut c = common::stockade(who);
    c.arg("run").args(&f).args(["--", "/bin/sh", "-c", &script]);
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let o = c.output().expect("start stockade");
    let code = o.status.code();
    assert!(
        code == Some(141) || code == Some(137) || code == Some(143),
        "{who:?} run {i}: {:?} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn no_process_mount_cgroup_or_directory_is_left_after_many_runs() {
    for who in common::users("no_process_mount_cgroup_or_directory_is_left_after_many_runs") {
        let tag = format!(
            "{}",
            700000 + std::process::id() % 100000 + if who == Who::Root { 1 } else { 3 }
        );
        let (m0, d0, c0) = (mounts(), run_dirs(), cgroups());
        for i in 0..500 {
            limited_run(who, i, &tag);
        }
        for batch in 0..10 {
            let handles: Vec<_> = (0..10)
                .map(|j| {
                    let tag = tag.clone();
                    std::thread::spawn(move || limited_run(who, batch * 10 + j, &tag))
                })
                .collect();
            for h in handles {
                h.join().expect("concurrent run");
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
        let m1 = mounts();
        let new_mounts: Vec<_> = m1.difference(&m0).collect();
        assert!(
            new_mounts.is_empty(),
            "{who:?}: mounts left: {new_mounts:?}"
        );
        let d1 = run_dirs();
        let new_dirs: Vec<_> = d1.difference(&d0).collect();
        assert!(
            new_dirs.is_empty(),
            "{who:?}: directories left: {new_dirs:?}"
        );
        let c1 = cgroups();
        let new_cg: Vec<_> = c1.difference(&c0).collect();
        assert!(new_cg.is_empty(), "{who:?}: cgroups left: {new_cg:?}");
    }
}

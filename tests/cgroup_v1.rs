//! The cgroup v1 rung of the limit ladder, on a host whose memory, pids and
//! cpu controllers are bound to cgroup v1 hierarchies (hybrid, or v1 only):
//! as root each limit is held by a per-run v1 group and the memory and pids
//! verdicts come from the controllers' own counters, however the payload
//! ended; as uid 65534 (which may not write the v1 hierarchies) the limits
//! fall to rlimits and the outcome says why and that the verdict is
//! inferred. Nothing is left in any hierarchy afterwards.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use common::Who;
use serde_json::Value;
use stockade::testing::cgroup;

mod common;

/// The v1 hierarchies of memory, pids, cpu and cpuacct, when this host
/// binds all four to v1 and not to the unified hierarchy (else a SKIPPED
/// line and None: a pure v2 host holds these limits on v2).
fn v1_host(test: &str) -> Option<cgroup::Hierarchies> {
    let mi = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let h = cgroup::parse_mountinfo(&mi);
    let missing: Vec<&str> = ["memory", "pids", "cpu", "cpuacct"]
        .into_iter()
        .filter(|c| h.v1_for(c).is_none())
        .collect();
    if !missing.is_empty() {
        common::skip(
            test,
            &format!("no cgroup v1 hierarchy for {missing:?} on this host"),
        );
        return None;
    }
    if let Some(u) = h.unified() {
        let c = fs::read_to_string(u.mountpoint.join("cgroup.controllers")).unwrap_or_default();
        if c.split_whitespace().any(|w| w == "memory" || w == "pids") {
            common::skip(
                test,
                "the unified hierarchy has memory/pids: the v2 rung holds them",
            );
            return None;
        }
    }
    Some(h)
}

/// `v1_host` where this process is root; else (also) a SKIPPED line, and
/// None.
fn v1_as_root(test: &str) -> Option<cgroup::Hierarchies> {
    let h = v1_host(test);
    if !common::is_root() {
        common::skip(test, "not root: the v1 hierarchies are root's");
        return None;
    }
    h
}

/// The memory limit of the outcome `v`, where uid 65534's host gives it
/// the rlimit rung; else a SKIPPED line and None.
fn rlimit_rung<'a>(test: &str, v: &'a Value) -> Option<&'a Value> {
    let m = limit(v, "memory");
    if m["enforced_by"] != "rlimit_as" {
        common::skip(
            test,
            &format!("uid 65534 gets a cgroup rung on this host: {m}"),
        );
        return None;
    }
    Some(m)
}

/// The limit `m` held by a v1 group, which counted whether it was `hit`.
fn assert_counted_by_v1(m: &Value, hit: bool, what: &str) {
    assert_eq!(m["enforced_by"], "cgroup_v1", "{what}: {m}");
    assert_eq!(m["verdict"], "counted", "{what}: {m}");
    assert_eq!(m["hit"], hit, "{what}: {m}");
}

/// The run exited by itself with `code`.
fn assert_exited(v: &Value, code: i32) {
    assert_eq!(
        (&v["status"], &v["exit_code"]),
        (&Value::from("exited"), &Value::from(code)),
        "{v}"
    );
}

/// `stockade run FLAGS -- CMD` as `who`; the outcome.
fn outcome(who: Who, flags: &[&str], cmd: &[&str]) -> Value {
    let mut c = common::stockade(who);
    c.arg("run")
        .args(["--report", "-", "--timeout", "60s"])
        .args(flags)
        .arg("--")
        .args(cmd);
    common::last_json(&c.output().expect("start stockade"))
}

fn limit<'a>(v: &'a Value, name: &str) -> &'a Value {
    &v["limits"][name]
}

/// The payloads of issue 18 that each allocated differently and ended
/// differently under the rlimit rung (memory_limit, exited 1, exited 12,
/// signaled 11), plus a tmpfs file written past the limit.
fn memory_payloads() -> Vec<(&'static str, Vec<String>)> {
    let c = common::c_payload("mem_malloc");
    let py = |s: &str| vec!["python3".to_string(), "-c".to_string(), s.to_string()];
    vec![
        (
            "python list",
            py("a = []\nwhile True:\n    a.append(bytearray(1 << 20))"),
        ),
        (
            "one big bytearray",
            py("b = bytearray(512 << 20)\nb[::4096] = b'x' * ((512 << 20) // 4096)"),
        ),
        (
            "perl string",
            vec![
                "perl".into(),
                "-e".into(),
                "$x = 'a' x (1 << 30); print STDERR length($x)".into(),
            ],
        ),
        (
            "C malloc+memset",
            vec![
                "--ro-bind".into(),
                format!("{}:/mem_malloc", c.display()),
                "--".into(),
                "/mem_malloc".into(),
            ],
        ),
        (
            "tmpfs file past the limit",
            vec![
                "--tmp-size".into(),
                "512m".into(),
                "--".into(),
                "/bin/sh".into(),
                "-c".into(),
                "head -c 300000000 /dev/zero > /tmp/f".into(),
            ],
        ),
    ]
}

/// Split `[flags…, "--", cmd…]` (or a bare command) for `outcome`.
fn split(argv: &[String]) -> (Vec<&str>, Vec<&str>) {
    match argv.iter().position(|a| a == "--") {
        Some(i) => (
            argv[..i].iter().map(String::as_str).collect(),
            argv[i + 1..].iter().map(String::as_str).collect(),
        ),
        None => (Vec::new(), argv.iter().map(String::as_str).collect()),
    }
}

#[test]
fn every_way_to_exhaust_memory_is_memory_limit_counted_by_the_v1_controller() {
    if v1_as_root("every_way_to_exhaust_memory_is_memory_limit_counted_by_the_v1_controller")
        .is_none()
    {
        return;
    }
    for (what, argv) in memory_payloads() {
        let (extra, cmd) = split(&argv);
        let mut flags = vec!["--memory", "64m"];
        flags.extend(extra);
        let v = outcome(Who::Root, &flags, &cmd);
        assert_eq!(v["status"], "memory_limit", "{what}: {v}");
        assert_counted_by_v1(limit(&v, "memory"), true, what);
        // The controller's own peak: never past the limit.
        assert_eq!(v["usage"]["peak_memory_source"], "cgroup", "{what}");
        assert!(
            v["usage"]["peak_memory_bytes"].as_u64().unwrap() <= 64 << 20,
            "{v}"
        );
        let v1 = &v["layers"]["cgroup"]["detail"]["v1"];
        assert!(
            v1.as_array()
                .is_some_and(|a| a.iter().any(|p| p.as_str().unwrap().contains("/memory"))),
            "{what}: {v1}"
        );
    }
}

#[test]
fn a_run_that_stays_under_the_limit_keeps_its_own_exit_code() {
    let test = "a_run_that_stays_under_the_limit_keeps_its_own_exit_code";
    if v1_host(test).is_none() {
        return;
    }
    // About 60 MiB mapped of a 64 MiB limit, 48 MiB of it touched (with the
    // interpreter, well under the limit), then an abnormal exit of its own.
    let py = "import mmap, os\nm = mmap.mmap(-1, 60 << 20)\nfor i in range(0, 48 << 20, 4096):\n    m[i] = 1\nos._exit(3)";
    for who in common::users(test) {
        let v = outcome(who, &["--memory", "64m"], &["python3", "-c", py]);
        let m = limit(&v, "memory");
        match who {
            Who::Root => {
                assert_exited(&v, 3);
                assert_counted_by_v1(m, false, "root");
            }
            Who::Nobody => {
                // The rung its host gives: rlimits, said so, with why.
                assert_eq!(m["enforced_by"], "rlimit_as", "{m}");
                assert_eq!(m["verdict"], "inferred", "{m}");
                assert!(m.get("hit").is_none(), "{m}");
                let why = m["why"].as_str().unwrap();
                assert!(
                    why.contains("cgroup v1: ") && why.contains("uid 65534"),
                    "{why}"
                );
            }
        }
    }
}

#[test]
fn file_data_through_the_page_cache_under_a_tight_limit_is_not_memory_limit() {
    if v1_as_root("file_data_through_the_page_cache_under_a_tight_limit_is_not_memory_limit")
        .is_none()
    {
        return;
    }
    // A disk-backed directory (not a tmpfs: tmpfs pages cannot be reclaimed
    // without swap): 200 MB written and read back through the page cache
    // of a 32 MiB group. The cache fills the group to its limit and is
    // reclaimed there; nothing the payload allocated is refused.
    let dir = common::Scratch::new("pagecache").world_writable();
    let bind = format!("{}:/data", dir.path().display());
    let script = "head -c 200000000 /dev/zero > /data/f && cat /data/f > /dev/null && \
                  cat /data/f /data/f > /dev/null && rm /data/f && exit \"$1\"";
    for code in [0, 3] {
        let v = outcome(
            Who::Root,
            &["--memory", "32m", "--bind", &bind],
            &["/bin/sh", "-c", script, "sh", &code.to_string()],
        );
        assert_exited(&v, code);
        assert_counted_by_v1(limit(&v, "memory"), false, &format!("exit {code}"));
        // The limit was pressed: the group's own peak reached it (else
        // this test would prove nothing about reclaim at the limit).
        let peak = v["usage"]["peak_memory_bytes"].as_u64().unwrap();
        assert_eq!(v["usage"]["peak_memory_source"], "cgroup", "{v}");
        assert!(peak >= (32 << 20) / 10 * 9, "peak {peak}: {v}");
    }
}

#[test]
fn a_fork_bomb_that_keeps_its_parent_alive_is_pids_limit() {
    if v1_as_root("a_fork_bomb_that_keeps_its_parent_alive_is_pids_limit").is_none() {
        return;
    }
    // Children that sleep; the parent forks until refused, then fails.
    let py = "import os, sys, time\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n    n += 1\nprint('refused after', n, file=sys.stderr)\nsys.exit(1)";
    let v = outcome(Who::Root, &["--pids-limit", "20"], &["python3", "-c", py]);
    assert_eq!(v["status"], "pids_limit", "{v}");
    let p = limit(&v, "pids");
    assert_eq!(p["enforced_by"], "cgroup_v1", "{p}");
    assert_eq!(
        (&p["hit"], &p["verdict"]),
        (&Value::from(true), &Value::from("counted"))
    );
    // pids.peak of the v1 group (kernel 6.1+), without init: never past the limit.
    assert!(v["usage"]["peak_pids"].as_u64().unwrap() <= 20, "{v}");
}

#[test]
fn half_a_cpu_holds_a_busy_loop_to_half_a_core() {
    if v1_as_root("half_a_cpu_holds_a_busy_loop_to_half_a_core").is_none() {
        return;
    }
    // Spin until 1.5 s of the jail's own wall clock have passed: without a
    // quota a single thread gets about 1.5 s of CPU; with 0.5 CPU about
    // half the wall time. Bandwidth control overruns the quota by up to a
    // runtime slice (5 ms) and a tick per period, so the bound is 0.7: well
    // above what the quota allows, well below one whole core.
    let py = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end:\n    pass";
    let v = outcome(Who::Root, &["--cpus", "0.5"], &["python3", "-c", py]);
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(limit(&v, "cpus")["enforced_by"], "cgroup_v1", "{v}");
    let u = &v["usage"];
    let cpu = u["user_time_ms"].as_u64().unwrap() + u["system_time_ms"].as_u64().unwrap();
    let wall = u["wall_time_ms"].as_u64().unwrap();
    assert!(wall >= 1500, "{u}");
    assert!(
        cpu * 10 <= wall * 7,
        "cpuacct counted {cpu} ms of CPU in {wall} ms: {u}"
    );
}

/// `stockade/` under our cgroup in each v1 hierarchy a limit uses, and
/// (for root) under the unified hierarchy's root, where every run also
/// makes a group that tracks its processes.
fn parents(h: &cgroup::Hierarchies) -> Vec<PathBuf> {
    let pc = fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut out = Vec::new();
    for ctrl in ["memory", "pids", "cpu", "cpuacct"] {
        let m = h.v1_for(ctrl).unwrap();
        let own = cgroup::own_v1_path(&pc, ctrl).unwrap();
        out.push(cgroup::cgroup_dir(m, &own).unwrap().join("stockade"));
    }
    if let Some(u) = h.unified() {
        out.push(u.mountpoint.join("stockade"));
    }
    out
}

/// Run groups (`run-<pid>-…`) under the parents, by owner pid.
fn run_groups(parents: &[PathBuf]) -> BTreeSet<(i32, PathBuf)> {
    let mut out = BTreeSet::new();
    for p in parents {
        for e in fs::read_dir(p).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((pid, _)) = cgroup::parse_run_name(&name) {
                out.insert((pid, e.path()));
            }
        }
    }
    out
}

/// The groups a run's outcome names: its unified group and its v1 groups.
fn groups_named(v: &Value) -> Vec<PathBuf> {
    let d = &v["layers"]["cgroup"]["detail"];
    let mut out: Vec<PathBuf> = d["path"].as_str().map(PathBuf::from).into_iter().collect();
    for p in d["v1"].as_array().into_iter().flatten() {
        out.push(PathBuf::from(p.as_str().unwrap()));
    }
    out
}

#[test]
fn many_runs_leave_nothing_in_any_cgroup_hierarchy() {
    let Some(h) = v1_as_root("many_runs_leave_nothing_in_any_cgroup_hierarchy") else {
        return;
    };
    let parents = parents(&h);
    let reports = common::Scratch::new("v1-leftovers");
    let mut owners = BTreeSet::new();
    let mut named: Vec<PathBuf> = Vec::new();
    // 500 runs, each ending another way: most exit, every tenth is
    // OOM-killed, one in ten hits pids.max with its children alive, one
    // in ten is killed at the deadline with a daemonized child.
    for i in 0..500 {
        let (script, want, status) = match i % 10 {
            0 => ("head -c 100000000 /dev/zero > /tmp/f", 137, "memory_limit"),
            5 => (
                // The shell exits 2 (`Cannot fork`) when a fork is refused.
                "i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; exit 1",
                2,
                "pids_limit",
            ),
            7 => ("setsid sleep 30 & sleep 30", 143, "timeout"),
            _ => ("exit 0", 0, "exited"),
        };
        let report = reports.join(&format!("{i}.json"));
        let mut c = common::stockade(Who::Root);
        c.arg("run")
            .args(["--report", report.to_str().unwrap()])
            .args(["--memory", "32m", "--pids-limit", "16", "--cpus", "1"])
            .args(["--timeout", if i % 10 == 7 { "300ms" } else { "60s" }])
            .args(["--tmp-size", "256m", "--", "/bin/sh", "-c", script]);
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().expect("start stockade");
        owners.insert(child.id() as i32);
        let o = child.wait_with_output().unwrap();
        common::expect_code(&o, want, &format!("run {i}"));
        let v: Value = serde_json::from_str(&fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(v["status"], status, "run {i}: {v}");
        let g = groups_named(&v);
        // One group in each v1 hierarchy (cpu,cpuacct share one) + unified.
        assert!(g.len() >= 3, "run {i}: {g:?}");
        named.extend(g);
    }
    let gone: Vec<&PathBuf> = named.iter().filter(|p| p.exists()).collect();
    assert!(gone.is_empty(), "groups left behind: {gone:?}");
    let left: Vec<_> = run_groups(&parents)
        .into_iter()
        .filter(|(pid, _)| owners.contains(pid))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // Each run made its group in every v1 hierarchy: the parents exist.
    for p in &parents[..4] {
        assert!(p.is_dir(), "{}", p.display());
    }
}

#[test]
fn the_fallback_without_user_namespaces_gets_the_v1_rung_too() {
    if v1_as_root("the_fallback_without_user_namespaces_gets_the_v1_rung_too").is_none() {
        return;
    }
    let py = "a = []\nwhile True:\n    a.append(bytearray(1 << 20))";
    let mut c = common::wrapped(
        &["chk_nouserns"],
        Who::Root,
        &[
            "--report",
            "-",
            "--timeout",
            "60s",
            "--memory",
            "64m",
            "--pids-limit",
            "20",
        ],
        &["python3", "-c", py],
    );
    let v = common::last_json(&c.output().expect("start stockade"));
    assert_eq!(v["layers"]["user_namespace"]["state"], "unavailable", "{v}");
    assert_eq!(v["status"], "memory_limit", "{v}");
    for l in ["memory", "pids"] {
        assert_eq!(limit(&v, l)["enforced_by"], "cgroup_v1", "{v}");
    }
    assert_eq!(limit(&v, "memory")["hit"], true, "{v}");
}

#[test]
fn under_the_rlimit_rung_the_tmpfs_mounts_count_against_memory() {
    let test = "under_the_rlimit_rung_the_tmpfs_mounts_count_against_memory";
    if !common::is_root() {
        common::skip(test, "not root: cannot start stockade as uid 65534");
        return;
    }
    // Fill every writable tmpfs, then say what it holds and RLIMIT_AS.
    let script =
        "for d in /tmp /dev/shm /work; do head -c 400000000 /dev/zero > $d/f 2>/dev/null; done; \
                  echo held $(cat /tmp/f /dev/shm/f /work/f | wc -c); \
                  grep 'Max address space' /proc/self/limits";
    let mut c = common::stockade(Who::Nobody);
    c.args([
        "run",
        "--report",
        "-",
        "--memory",
        "64m",
        "--tmp-size",
        "512m",
    ])
    .args(["--", "/bin/sh", "-c", script]);
    let o = c.output().expect("start stockade");
    let v = common::last_json(&o);
    let Some(m) = rlimit_rung(test, &v) else {
        return;
    };
    assert_eq!(m["verdict"], "inferred", "{m}");
    let why = m["why"].as_str().unwrap();
    assert!(
        why.contains("the jail's tmpfs mounts count against --memory"),
        "{why}"
    );
    // --report - captures the payload's stdout into the outcome.
    let out = v["stdout"]["data"].as_str().unwrap_or_default().to_string();
    let held: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("held "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    let as_limit: u64 = out
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(held > 0, "{out}");
    assert!(
        held + as_limit <= 64 << 20,
        "tmpfs {held} + RLIMIT_AS {as_limit}: {out}"
    );
    let t = limit(&v, "tmp_size");
    assert!(t["limit"].as_u64().unwrap() < 512 << 20, "{t}");
    assert!(t["why"].as_str().unwrap().contains("shrunk"), "{t}");
}

#[test]
fn under_the_rlimit_rung_sysv_ipc_counts_against_memory() {
    let test = "under_the_rlimit_rung_sysv_ipc_counts_against_memory";
    if !common::is_root() {
        common::skip(test, "not root: cannot start stockade as uid 65534");
        return;
    }
    // A hostile payload: raise the IPC namespace's limits, then hold what
    // it can in SysV shm segments (filled, detached, kept), SysV message
    // queues and POSIX message queues, none of it in its address space.
    let hog = common::c_payload("ipc_hog");
    let mut c = common::stockade(Who::Nobody);
    c.args(["run", "--report", "-", "--memory", "64m", "--ro-bind"])
        .arg(format!("{}:/ipc_hog", hog.display()))
        .args(["--", "/bin/sh", "-c"])
        .arg(
            "/ipc_hog; echo pid=$$; grep -E 'Max (address space|msgqueue size)' /proc/self/limits",
        );
    let o = c.output().expect("start stockade");
    let v = common::last_json(&o);
    let Some(m) = rlimit_rung(test, &v) else {
        return;
    };
    assert_eq!(v["status"], "exited", "{v}");
    let why = m["why"].as_str().unwrap();
    assert!(
        why.contains("+ SysV IPC and POSIX message queues "),
        "{why}"
    );
    assert!(v.get("warnings").is_none(), "{v}");
    let out = v["stdout"]["data"].as_str().unwrap_or_default().to_string();
    let num = |key: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{key}: {out}"))
    };
    let limit_of = |key: &str| -> u64 {
        out.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{key}: {out}"))
    };
    // The limits stayed as init wrote them; the helper that wrote them
    // did not take the payload's pid.
    assert_eq!(num("raised "), 0, "{out}");
    assert_eq!(num("pid="), 2, "{out}");
    let (shm, msg, mq) = (num("shm "), num("msg "), num("mq "));
    // It got some (the bounds are not a refusal), and no more than its
    // share: with the tmpfs mounts and RLIMIT_AS, within --memory.
    assert!(shm > 0 && msg > 0, "{out}");
    // /tmp's share (the other tmpfs mounts' are in `why`).
    let tmpfs = v["limits"]["tmp_size"]["limit"].as_u64().unwrap();
    let as_limit = limit_of("Max address space");
    assert!(
        limit_of("Max msgqueue size") >= mq,
        "POSIX queues past RLIMIT_MSGQUEUE: {out}"
    );
    assert!(
        shm + msg + mq + as_limit + tmpfs <= 64 << 20,
        "shm {shm} + msg {msg} + mq {mq} + RLIMIT_AS {as_limit} + /tmp {tmpfs}: {out}"
    );
    assert!(
        shm <= 8 << 20,
        "SysV shm {shm} past an eighth of --memory: {out}"
    );
}

#[test]
fn where_the_ipc_limits_cannot_be_written_the_outcome_says_they_are_not_bounded() {
    let test = "where_the_ipc_limits_cannot_be_written_the_outcome_says_they_are_not_bounded";
    if !common::is_root() {
        common::skip(test, "not root: cannot make /proc/sys read-only");
        return;
    }
    // stockade as uid 65534 where the host's /proc/sys is read-only (as in
    // many containers): the IPC namespace's limits cannot be written.
    let mut c = common::wrapped(
        &["ro_procsys"],
        Who::Root,
        &["--report", "-", "--memory", "64m"],
        &["/bin/sh", "-c", "echo ran"],
    );
    let v = common::last_json(&c.output().expect("start stockade"));
    let Some(m) = rlimit_rung(test, &v) else {
        return;
    };
    // The run goes on, and says what is not bounded and why.
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(v["stdout"]["data"], "ran\n", "{v}");
    let line = "the jail's SysV IPC and POSIX message queues are not bounded (";
    let why = m["why"].as_str().unwrap();
    assert!(why.contains(line) && why.contains("kernel.shmmax"), "{why}");
    let warnings = v["warnings"].as_array().expect("a warning");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().starts_with(line)),
        "{warnings:?}"
    );
    let ipc = &v["layers"]["ipc_namespace"]["detail"];
    assert_eq!(ipc["bounded"], false, "{v}");
}

#[test]
fn require_cgroup_accepts_the_v1_rung() {
    if v1_as_root("require_cgroup_accepts_the_v1_rung").is_none() {
        return;
    }
    let flags = [
        "--require",
        "cgroup",
        "--memory",
        "64m",
        "--pids-limit",
        "20",
        "--cpus",
        "1",
    ];
    let v = outcome(Who::Root, &flags, &["true"]);
    assert_eq!(v["status"], "exited", "{v}");
    for l in ["memory", "pids", "cpus"] {
        assert_eq!(limit(&v, l)["enforced_by"], "cgroup_v1", "{v}");
        // Which rung held it, and why not the one above.
        let why = limit(&v, l)["why"].as_str().unwrap_or_default();
        assert!(why.starts_with("cgroup v2: "), "{l}: {why}");
    }
    // --memory-high has no v1 equivalent: required, it is refused.
    let v = outcome(
        Who::Root,
        &["--require", "cgroup", "--memory-high", "64m"],
        &["true"],
    );
    assert_eq!(v["status"], "setup_error", "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("no memory.high"),
        "{v}"
    );
}

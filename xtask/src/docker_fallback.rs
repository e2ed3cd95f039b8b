//! Issue 12's hostile programs against the fallback under a plain `docker
//! run` (user namespaces refused by the engine's seccomp profile), as root
//! and as `--user 65534:65534`: tests/docker/fallback.sh runs each one in a
//! container of its own beside a control outside stockade, and the checks
//! below assert on what it printed.
//!
//! 1. A flood of orphans: the run ends with the payload's status, within
//!    5 s of the forkers' end.
//! 2. `dd` of 40 MiB into `$TMPDIR` under `--tmp-size 8m`: at most 8 MiB
//!    reach the container's disk; the outcome names what held it.
//! 3. A listener on a 0777 unix socket outside the binds is refused and sees
//!    nothing; a socket in the jail's own run directory (blocking and
//!    non-blocking connect) and an abstract one work.
//! 4. Two jails at once (root): each its own uid and `--pids-limit`; without
//!    root the outcome says the count is shared.
//! 5. A secret on a command line outside the jail cannot be read from /proc.
//! 6. `kill -9` of the supervisor: nothing of the jail remains, and its run
//!    directory is gone by the next run.

use crate::docker::{run_container, token, Config, Summary};
use crate::json;
use std::collections::BTreeMap;

const ORPHANS: &str = "orphan flood ends with the payload's status";
const TMP: &str = "--tmp-size 8m holds a 40 MiB dd";
const UNIX_HOST: &str = "host unix socket refused";
const UNIX_OWN: &str = "unix socket in the run directory works";
const PIDS_ROOT: &str = "two jails at once: own uids, own pids budgets";
const PIDS_SHARED: &str = "outcome says the pids count is shared";
const PROC: &str = "host /proc out of reach";
const KILL: &str = "jail dies with a SIGKILLed supervisor";
const RUNDIR: &str = "SIGKILLed run's directory removed";

/// Seconds the run may take past the forkers' end. The issue asks for 2 s
/// with 30,000 orphans; linear reaping takes about 0.1 s here. An init that
/// re-walks the tree per reaped child took 9.7 s (root, a few hundred
/// orphans) or never ended (65534), so 10 s would not catch it.
const ORPHANS_BOUND: f64 = 5.0;

fn is_root(c: &Config) -> bool {
    !c.docker.contains(&"--user")
}

/// Names of the checks `run` reports for `c` (so a skip counts them all).
pub(crate) fn check_names(c: &Config) -> Vec<String> {
    let pids = if is_root(c) { PIDS_ROOT } else { PIDS_SHARED };
    [ORPHANS, TMP, UNIX_HOST, UNIX_OWN, pids, PROC, KILL, RUNDIR]
        .iter()
        .map(|n| format!("docker/{}: fallback: {n}", c.name))
        .collect()
}

struct Run {
    kv: BTreeMap<String, Vec<String>>,
}

impl Run {
    fn get(&self, k: &str) -> &str {
        self.kv
            .get(k)
            .and_then(|v| v.first())
            .map(String::as_str)
            .unwrap_or("(missing)")
    }
    fn all(&self, k: &str) -> &[String] {
        self.kv.get(k).map(Vec::as_slice).unwrap_or(&[])
    }
    fn num(&self, k: &str) -> Option<f64> {
        self.get(k).trim().parse().ok()
    }
    /// The JSON outcome printed as `<key>_outcome`.
    fn outcome(&self, key: &str) -> Result<Outcome, String> {
        let k = format!("{key}_outcome");
        json::parse(self.get(&k))
            .map(Outcome)
            .map_err(|e| format!("{k} is not JSON ({e}): {:?}", self.get(&k)))
    }
}

struct Outcome(json::Value);

impl Outcome {
    fn str(&self, path: &[&str]) -> &str {
        self.0
            .at(path)
            .and_then(json::Value::as_str)
            .unwrap_or("(missing)")
    }
    fn num(&self, path: &[&str]) -> Option<f64> {
        self.0.at(path).and_then(json::Value::as_f64)
    }
    fn stdout(&self) -> &str {
        self.0
            .at(&["stdout", "data"])
            .and_then(json::Value::as_str)
            .unwrap_or("")
    }
    /// The payload's `key=value` line.
    fn line(&self, key: &str) -> Option<&str> {
        self.stdout()
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }
    fn exited(&self, code: f64) -> Result<(), String> {
        if self.str(&["status"]) == "exited" && self.num(&["exit_code"]) == Some(code) {
            Ok(())
        } else {
            Err(format!(
                "status {} exit_code {:?}, want exited {code}",
                self.str(&["status"]),
                self.num(&["exit_code"])
            ))
        }
    }
    /// How the run ended and what the payload said, for a failure.
    fn brief(&self) -> String {
        format!(
            "status {}, exit_code {:?}, stdout {:?}, stderr {:?}",
            self.str(&["status"]),
            self.num(&["exit_code"]),
            self.stdout().chars().take(400).collect::<String>(),
            self.str(&["stderr", "data"])
                .chars()
                .take(400)
                .collect::<String>()
        )
    }
}

/// Run fallback.sh under `c` and report every check.
pub(crate) fn run(s: &mut Summary, c: &Config, n: usize) {
    let names = check_names(c);
    let secret = token();
    let t = std::time::Instant::now();
    let res = run_container(
        c,
        &format!("fb{n}"),
        &[format!("SECRET_TOKEN={secret}")],
        &["/bin/sh", "/t/fallback.sh"],
        "fallback=done",
    );
    let (kv, text) = match res {
        Ok(r) => r,
        Err(e) => {
            for n in &names {
                s.fail(n, &e);
            }
            return;
        }
    };
    println!(
        "--- docker/{}: fallback, issue 12 ({:.1}s): docker run {}",
        c.name,
        t.elapsed().as_secs_f64(),
        c.docker.join(" ")
    );
    let r = Run { kv };
    let mut any_failed = false;
    let mut check = |s: &mut Summary, i: usize, res: Result<(), String>| {
        any_failed |= !s.check(&names[i], res);
    };
    check(s, 0, orphans(&r));
    check(s, 1, tmp_size(&r));
    check(s, 2, unix_host(&r));
    check(s, 3, unix_own(&r));
    check(
        s,
        4,
        if is_root(c) {
            pids_root(&r)
        } else {
            pids_shared(&r)
        },
    );
    check(s, 5, host_proc(&r, &secret));
    check(s, 6, killed(&r));
    check(s, 7, rundir(&r));
    if any_failed {
        println!("{text}");
    }
}

fn orphans(r: &Run) -> Result<(), String> {
    let o = r.outcome("orphans")?;
    let chains: Vec<f64> = o
        .stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("chain=")?.parse().ok())
        .collect();
    let end = o.line("end").and_then(|v| v.parse::<f64>().ok());
    let (start, back) = (r.num("orphans_started"), r.num("orphans_returned"));
    let after = end.zip(back).map(|(e, b)| b - e);
    println!(
        "    orphans: {}/32 chains reported {} forks; stockade returned after {} s in all, {} s after the forkers' end",
        chains.len(),
        chains.iter().sum::<f64>(),
        start
            .zip(back)
            .map_or("?".into(), |(a, b)| format!("{:.2}", b - a)),
        after.map_or("?".into(), |a| format!("{a:.2}")),
    );
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    if o.line("payload") != Some("done") {
        return Err(format!("the payload did not finish: {}", o.brief()));
    }
    match after {
        Some(a) if a <= ORPHANS_BOUND => Ok(()),
        Some(a) => Err(format!(
            "stockade returned {a:.2} s after the forkers' end (bound {ORPHANS_BOUND} s)"
        )),
        None => Err(format!(
            "no timings: end {end:?}, returned {:?}",
            r.get("orphans_returned")
        )),
    }
}

fn tmp_size(r: &Run) -> Result<(), String> {
    const MIB: f64 = 1024.0 * 1024.0;
    let o = r.outcome("tmp")?;
    let control = r.num("tmp_control_kib");
    let num = |k: &str| o.line(k).and_then(|v| v.trim().parse::<f64>().ok());
    let (size, kib) = (num("size"), num("kib"));
    let by = o.str(&["limits", "tmp_size", "enforced_by"]);
    println!(
        "    tmp: control dd outside stockade: {} KiB on disk; in the jail dd_rc={} size={} du={} KiB; enforced_by {by}",
        r.get("tmp_control_kib"),
        o.line("dd_rc").unwrap_or("?"),
        o.line("size").unwrap_or("?"),
        o.line("kib").unwrap_or("?"),
    );
    if !control.is_some_and(|k| k >= 40.0 * 1024.0) {
        return Err(format!(
            "control: 40 MiB of dd outside stockade left {:?} KiB",
            r.get("tmp_control_kib")
        ));
    }
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    // Root here has no CAP_SYS_ADMIN, so no tmpfs in either case.
    if by != "rlimit_fsize+supervisor" {
        return Err(format!("enforced_by {by}, want rlimit_fsize+supervisor"));
    }
    if o.num(&["limits", "tmp_size", "limit"]) != Some(8.0 * MIB) {
        return Err(format!(
            "limit {:?}, want {}",
            o.num(&["limits", "tmp_size", "limit"]),
            8.0 * MIB
        ));
    }
    match (size, kib) {
        (Some(sz), Some(k)) if (MIB..=8.0 * MIB).contains(&sz) && k <= 8.0 * 1024.0 + 64.0 => {
            Ok(())
        }
        _ => Err(format!(
            "size {size:?} bytes, du {kib:?} KiB: want at most 8 MiB; {}",
            o.brief()
        )),
    }
}

fn unix_host(r: &Run) -> Result<(), String> {
    let o = r.outcome("unix")?;
    let (before, after) = (r.get("unix_before"), r.get("unix_after"));
    let jail = o.line("connect").unwrap_or("(missing)");
    println!(
        "    unix: socket mode {}; control connect outside stockade: {}; in the jail: {jail}; listener saw {before} -> {after}",
        r.get("unix_socket_mode"),
        r.get("unix_control_connect"),
    );
    if r.get("unix_socket_mode") != "777" || r.get("unix_control_connect") != "CONNECTED" {
        return Err(format!(
            "control: socket mode {}, connect outside stockade {}",
            r.get("unix_socket_mode"),
            r.get("unix_control_connect")
        ));
    }
    if before != "1" {
        return Err(format!(
            "control: the listener logged {before} connections, want 1"
        ));
    }
    if after != before {
        return Err(format!(
            "the listener accepted a connection from the jail ({before} -> {after})"
        ));
    }
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    if !jail.starts_with("errno:") {
        return Err(format!("connect in the jail: {jail}"));
    }
    Ok(())
}

fn unix_own(r: &Run) -> Result<(), String> {
    let o = r.outcome("own")?;
    let keys = ["own_socket", "own_nonblocking", "own_abstract"];
    let got: Vec<&str> = keys
        .iter()
        .map(|k| o.line(k).unwrap_or("(missing)"))
        .collect();
    println!(
        "    unix: listener and client in the jail on $TMPDIR/own.sock: {}, non-blocking: {}, abstract: {}; connects via {} socket ({})",
        got[0],
        got[1],
        got[2],
        o.str(&["layers", "seccomp", "detail", "unix_sockets", "socket"]),
        o.0.at(&["layers", "seccomp", "detail", "unix_sockets", "why_new"])
            .and_then(json::Value::as_str)
            .unwrap_or("pidfd_getfd works"),
    );
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    for (k, v) in keys.iter().zip(&got) {
        if *v != "in" {
            return Err(format!(
                "a connect to the jail's own socket failed ({k}): {v}"
            ));
        }
    }
    Ok(())
}

fn uid_in(o: &Outcome) -> Option<u64> {
    o.line("uid").and_then(|v| v.trim().parse().ok())
}

fn pids_root(r: &Run) -> Result<(), String> {
    let o = r.outcome("pids")?;
    let a = r.get("pids_a_uid").parse::<u64>().ok();
    let b = uid_in(&o);
    let control = r.get("pids_nproc_control");
    let why = o.str(&["limits", "pids", "why"]);
    println!(
        "    pids: jail A uid {a:?} runs {} processes; a process of A's uid with RLIMIT_NPROC 50: {control}; jail B (--pids-limit 50, 20 children) uid {b:?}: {}, {}",
        r.get("pids_a_count"),
        o.str(&["status"]),
        why
    );
    if !r.num("pids_a_count").is_some_and(|n| n >= 60.0) {
        return Err(format!(
            "control: jail A's uid has {} processes, want at least 60",
            r.get("pids_a_count")
        ));
    }
    if !control.starts_with("forked:") || control == "forked:20" {
        return Err(format!(
            "control: a process of A's uid under RLIMIT_NPROC 50 forked 20 children ({control})"
        ));
    }
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    let stderr = r.all("pids_b_stderr").join(" | ");
    if !o.stdout().lines().any(|l| l == "forked-all") {
        return Err(format!(
            "jail B did not fork all 20: {}; {stderr}",
            o.brief()
        ));
    }
    if stderr.contains("fork") {
        return Err(format!("jail B: {stderr}"));
    }
    match (a, b) {
        (Some(a), Some(b)) if a != b => {}
        _ => return Err(format!("uids: jail A {a:?}, jail B {b:?}")),
    }
    if o.str(&["limits", "pids", "enforced_by"]) != "rlimit_nproc"
        || o.num(&["limits", "pids", "limit"]) != Some(50.0)
        || !why.contains("this jail's own")
    {
        return Err(format!(
            "limits.pids: enforced_by {}, limit {:?}, why {why:?}",
            o.str(&["limits", "pids", "enforced_by"]),
            o.num(&["limits", "pids", "limit"])
        ));
    }
    Ok(())
}

fn pids_shared(r: &Run) -> Result<(), String> {
    let o = r.outcome("pids")?;
    let why = o.str(&["limits", "pids", "why"]);
    println!("    pids: uid {:?}; {why}", uid_in(&o));
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    if uid_in(&o) != Some(65534) {
        return Err(format!(
            "the jail ran as {:?}, want the caller's 65534",
            uid_in(&o)
        ));
    }
    if o.str(&["limits", "pids", "enforced_by"]) != "rlimit_nproc"
        || !why.contains("shared with the caller's other processes")
    {
        return Err(format!(
            "limits.pids: enforced_by {}, why {why:?}",
            o.str(&["limits", "pids", "enforced_by"])
        ));
    }
    Ok(())
}

fn host_proc(r: &Run, secret: &str) -> Result<(), String> {
    let o = r.outcome("proc")?;
    let py: Vec<&str> = o
        .stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("py="))
        .collect();
    println!(
        "    proc: control outside stockade reads {:?}; in the jail cat rc={} python {py:?}; layers.proc {} host_proc_readable {:?}",
        r.get("proc_control"),
        o.line("rc_cat").unwrap_or("?"),
        o.str(&["layers", "proc", "state"]),
        o.0.at(&["layers", "proc", "detail", "host_proc_readable"])
    );
    if !r.get("proc_control").contains(secret) {
        return Err(format!(
            "control: the secret is not readable outside stockade: {:?}",
            r.get("proc_control")
        ));
    }
    o.exited(0.0).map_err(|e| format!("{e}; {}", o.brief()))?;
    if o.stdout().contains(secret) || o.str(&["stderr", "data"]).contains(secret) {
        return Err(format!("the secret leaked into the jail: {}", o.brief()));
    }
    if o.line("rc_cat") == Some("0") || py != ["errno:13", "errno:13"] {
        return Err(format!(
            "want cat to fail and EACCES (13) for /proc/PID/cmdline and /proc: {}",
            o.brief()
        ));
    }
    if o.str(&["layers", "proc", "state"]) != "unavailable"
        || o.0.at(&["layers", "proc", "detail", "host_proc_readable"])
            != Some(&json::Value::Bool(false))
    {
        return Err(format!(
            "layers.proc: {}",
            o.0.at(&["layers", "proc"])
                .map(|v| format!("{v:?}"))
                .unwrap_or_default()
        ));
    }
    Ok(())
}

fn killed(r: &Run) -> Result<(), String> {
    let samples: Vec<&str> = (1..=10)
        .map(|i| r.get(&format!("kill_after_{i}")))
        .collect();
    let gone_at = samples.iter().position(|v| *v == "none");
    println!(
        "    kill -9: before: {}; after (every 0.2 s): {}{}",
        r.get("kill_before"),
        samples.join(" | "),
        gone_at.map_or(String::new(), |i| format!(
            "; none left from {:.1} s",
            0.2 * (i + 1) as f64
        ))
    );
    if r.get("kill_ready") != "ready" {
        return Err(format!(
            "the payload never said ready: {:?}",
            r.get("kill_ready")
        ));
    }
    // The control: the jail's sh and both sleeps ran before the kill.
    if r.get("kill_before").split_whitespace().count() < 3 {
        return Err(format!(
            "control: before the kill only {:?} ran",
            r.get("kill_before")
        ));
    }
    // From 1.2 s to 2 s after the kill, five looks: none left.
    if samples[5..].iter().all(|v| *v == "none") {
        Ok(())
    } else {
        Err(format!(
            "jail processes outlived the supervisor: {}",
            samples.join(" | ")
        ))
    }
}

fn rundir(r: &Run) -> Result<(), String> {
    let dir = r.get("kill_rundir");
    let left = r.all("kill_rundirs_left");
    println!(
        "    kill -9: run directory {dir}: {} after the kill; after the next run (exit {}), left: {left:?}",
        r.get("kill_rundir_after_kill"),
        r.get("kill_next_run")
    );
    if !dir.starts_with("/tmp/stockade-run-") {
        return Err(format!(
            "control: no run directory seen for the killed run ({dir})"
        ));
    }
    if r.get("kill_next_run") != "0" {
        return Err(format!("the next run exited {}", r.get("kill_next_run")));
    }
    if left.iter().any(|d| d == dir) {
        return Err(format!("{dir} is still there after the next run"));
    }
    Ok(())
}

//! `stockade bwrap` under a plain `docker run` (user namespaces refused by
//! the engine's seccomp profile), as root and as `--user 65534:65534`:
//! tests/docker/bwrap_fallback.sh runs each case beside a control outside
//! stockade, and the checks below assert on what it printed.
//!
//! 1. The real bwrap cannot start there (the control that makes the rest
//!    matter); `stockade bwrap` runs the command, says so on one stderr
//!    line, and only the binds are reachable (a bound file read, a writable
//!    bind written, a read-only one not, a file outside the binds and the
//!    host's /proc refused), Landlock and seccomp `applied` in its report.
//! 2. `--unshare-user`: bwrap's own failure, exit 1.
//! 3. A bind whose source is not its destination: refused, one line, exit 1.
//! 4. `--stockade-memory 64m` ends a memory hog; the report says
//!    `memory_limit` (under RLIMIT_AS, where that verdict is inferred from
//!    a sampled peak, a failed hog with `verdict: inferred`).

use crate::docker::{run_container, Config, Summary};
use crate::json;
use std::collections::BTreeMap;

const RUNS: &str = "bwrap fallback runs with Landlock on the binds";
const MANDATORY: &str = "bwrap --unshare-user fails as bwrap";
const REFUSED: &str = "bwrap fallback refuses a bind it cannot build";
const MEMORY: &str = "bwrap --stockade-memory ends a hog (memory_limit)";

/// bwrap 0.12's words when clone(CLONE_NEWUSER) fails with EPERM.
const BWRAP_EPERM: &str = "bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl kernel.unprivileged_userns_clone=1'.";

/// Names of the checks `run` reports for `c` (so a skip counts them all).
pub(crate) fn check_names(c: &Config) -> Vec<String> {
    [RUNS, MANDATORY, REFUSED, MEMORY]
        .iter()
        .map(|n| format!("docker/{}: {n}", c.name))
        .collect()
}

struct Run(BTreeMap<String, Vec<String>>);

impl Run {
    fn get(&self, k: &str) -> &str {
        self.all(k)
            .first()
            .map(String::as_str)
            .unwrap_or("(missing)")
    }
    fn all(&self, k: &str) -> &[String] {
        self.0.get(k).map(Vec::as_slice).unwrap_or(&[])
    }
    fn outcome(&self, key: &str) -> Result<json::Value, String> {
        let k = format!("{key}_outcome");
        json::parse(self.get(&k)).map_err(|e| format!("{k} is not JSON ({e}): {:?}", self.get(&k)))
    }
}

/// Run bwrap_fallback.sh under `c` and report every check.
pub(crate) fn run(s: &mut Summary, c: &Config, n: usize) {
    let names = check_names(c);
    let res = run_container(
        c,
        &format!("bwfb{n}"),
        &[],
        &["/bin/sh", "/t/bwrap_fallback.sh"],
        "bwrapfb=done",
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
    let r = Run(kv);
    println!(
        "--- docker/{}: bwrap fallback: real bwrap exit {} ({}); stockade bwrap said {:?}",
        c.name,
        r.get("real_rc"),
        r.get("real_err"),
        r.all("run_err")
    );
    let mut failed = false;
    failed |= !s.check(&names[0], runs(&r));
    failed |= !s.check(&names[1], mandatory(&r));
    failed |= !s.check(&names[2], refused(&r));
    failed |= !s.check(&names[3], memory(&r));
    if failed {
        println!("{text}");
    }
}

fn runs(r: &Run) -> Result<(), String> {
    // The controls: bwrap itself cannot start; the secret is readable.
    if r.0.contains_key("real_rc") && r.get("real_rc") == "0" {
        return Err("the real bwrap started: user namespaces are not refused here".into());
    }
    if r.get("control_secret") != "canary" {
        return Err(format!("control: secret {:?}", r.get("control_secret")));
    }
    let want = [
        "readable",
        "wrote-in",
        "ro-refused",
        "secret-refused",
        "proc-refused",
    ];
    if r.get("run_rc") != "0" || r.all("run_out") != want {
        return Err(format!(
            "exit {}, stdout {:?}, want 0 and {want:?}; stderr {:?}",
            r.get("run_rc"),
            r.all("run_out"),
            r.all("run_err")
        ));
    }
    let err = r.all("run_err");
    if err.len() != 1 || !err[0].starts_with("bwrap: user namespaces are refused here") {
        return Err(format!("stderr {err:?}, want the one line that says so"));
    }
    if r.get("host_in_w") != "yes" || r.0.contains_key("host_ro_w") {
        return Err("the writes did not land as the binds say".into());
    }
    let o = r.outcome("run")?;
    for layer in ["landlock", "seccomp"] {
        let st = o
            .at(&["layers", layer, "state"])
            .and_then(json::Value::as_str);
        if st != Some("applied") {
            return Err(format!("layers.{layer}.state {st:?}, want applied"));
        }
    }
    Ok(())
}

fn mandatory(r: &Run) -> Result<(), String> {
    match (r.get("mand_rc"), r.all("mand_err")) {
        ("1", [line]) if line == BWRAP_EPERM => Ok(()),
        (rc, err) => Err(format!(
            "exit {rc}, stderr {err:?}, want 1 and {BWRAP_EPERM:?}"
        )),
    }
}

fn refused(r: &Run) -> Result<(), String> {
    match (r.get("refuse_rc"), r.all("refuse_err")) {
        ("1", [line]) if line.contains("cannot be honoured without a mount namespace") => Ok(()),
        (rc, err) => Err(format!(
            "exit {rc}, stderr {err:?}, want 1 and one refusal line"
        )),
    }
}

/// The hog never survives. Its status is `memory_limit`, except under the
/// RLIMIT_AS rung, where the verdict is inferred from a sampled peak (a
/// hog that dies between two samples ends `exited` with MemoryError's
/// code) and the outcome must say so (`verdict: inferred`).
fn memory(r: &Run) -> Result<(), String> {
    let o = r.outcome("mem")?;
    let at = |p: &[&str]| o.at(p).and_then(json::Value::as_str).map(String::from);
    let status = at(&["status"]);
    let inferred = at(&["limits", "memory", "enforced_by"]).as_deref() == Some("rlimit_as")
        && at(&["limits", "memory", "verdict"]).as_deref() == Some("inferred");
    let held = match status.as_deref() {
        Some("memory_limit") => true,
        Some("exited") => inferred && r.get("mem_rc") != "0",
        _ => false,
    };
    if !held || !r.all("mem_out").is_empty() {
        return Err(format!(
            "status {status:?}, stdout {:?} (exit {}), want memory_limit (or, under RLIMIT_AS, an inferred verdict and a failed hog) and nothing",
            r.all("mem_out"),
            r.get("mem_rc")
        ));
    }
    Ok(())
}

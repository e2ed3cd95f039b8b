//! Verdicts that never contradict: a limit's status only for a run that
//! failed, with the exit code and signal of how the command really ended;
//! a limit reached on the way by a run that then exited 0 is said in the
//! limit's report (`hit`, `oom_killed`), not in the status. Under the
//! rlimit rung, one allocation larger than what RLIMIT_AS left is
//! `memory_limit` (`inferred`), heard through seccomp; without seccomp it
//! cannot be told. Each as root and as uid 65534, in the namespaced jail
//! and where user namespaces are refused (tests/payloads/chk_nouserns.c).

mod common;

use common::Who;
use serde_json::Value;

/// How stockade is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Jail,
    /// Under chk_nouserns: the fallback.
    Refused,
}

const MODES: [Mode; 2] = [Mode::Jail, Mode::Refused];

/// `stockade run --report - FLAGS -- CMD` as `who` in `mode`; the outcome,
/// checked against the schema, and stockade's stderr.
fn outcome(mode: Mode, who: Who, flags: &[&str], cmd: &[&str]) -> (Value, String) {
    let mut all = vec!["--report", "-", "--timeout", "60s"];
    all.extend(flags);
    let wrappers: &[&str] = match mode {
        Mode::Jail => &[],
        Mode::Refused => &["chk_nouserns"],
    };
    let o = common::wrapped(wrappers, who, &all, cmd)
        .output()
        .expect("start stockade");
    let text = common::stdout(&o);
    common::validate_outcome(text.lines().last().unwrap_or(""));
    (common::last_json(&o), common::stderr(&o))
}

/// What every outcome holds, whatever the rung: the exit code is the
/// code or 128 + the signal; a limit's status is never beside an exit of
/// 0; the OOM killer's record names the payload exactly when it ended by
/// SIGKILL.
fn assert_consistent(v: &Value, what: &str) {
    let code = v["exit_code"].as_i64().unwrap();
    if let Some(sig) = v["signal"].as_i64() {
        assert_eq!(code, 128 + sig, "{what}: {v}");
    }
    let limit_status = ["memory_limit", "pids_limit"].contains(&v["status"].as_str().unwrap());
    if limit_status {
        assert!(!(v["signal"].is_null() && code == 0), "{what}: {v}");
    }
    let k = &v["limits"]["memory"]["oom_killed"];
    if !k.is_null() {
        assert!(k["processes"].as_u64().unwrap() >= 1, "{what}: {v}");
        assert_eq!(k["payload"], v["signal"] == 9, "{what}: {v}");
    }
}

fn memory(v: &Value) -> &Value {
    &v["limits"]["memory"]
}

/// Allocate and write 1 GiB in one go.
const BIG: &str = "x = b'x' * (1 << 30)";

#[test]
fn a_child_oom_killed_under_a_payload_that_exits_0_keeps_the_payloads_status() {
    let test = "a_child_oom_killed_under_a_payload_that_exits_0_keeps_the_payloads_status";
    let script = format!("python3 -c \"{BIG}\"; echo child-ended=$?; exit 0");
    let mut v1_seen = false;
    for who in common::users(test) {
        for mode in MODES {
            let (v, err) = outcome(mode, who, &["--memory", "64m"], &["/bin/sh", "-c", &script]);
            let what = format!("{who:?} {mode:?}: {err}");
            assert_consistent(&v, &what);
            let m = memory(&v);
            let by = m["enforced_by"].as_str().unwrap();
            let killed = &m["oom_killed"];
            match by {
                "rlimit_as" => {
                    // MemoryError in the child (exit 1); sh exits 0.
                    assert_eq!(v["status"], "exited", "{what}: {v}");
                    assert_eq!(v["exit_code"], 0, "{what}: {v}");
                    assert_eq!(m["verdict"], "inferred", "{what}: {v}");
                    assert!(killed.is_null(), "{what}: {v}");
                }
                "cgroup_v1" => {
                    // The v1 OOM killer takes the largest process: python.
                    v1_seen = true;
                    assert_eq!(v["status"], "exited", "{what}: {v}");
                    assert_eq!(v["exit_code"], 0, "{what}: {v}");
                    assert!(v["signal"].is_null(), "{what}: {v}");
                    assert_eq!(m["hit"], true, "{what}: {v}");
                    assert_eq!(m["verdict"], "counted", "{what}: {v}");
                    assert_eq!(killed["payload"], false, "{what}: {v}");
                    let out = v["stdout"]["data"].as_str().unwrap_or_default();
                    assert!(out.contains("child-ended=137"), "{what}: {v}");
                    let detail = v["detail"].as_str().unwrap_or_default();
                    assert!(
                        detail.contains("not the payload, which then exited 0"),
                        "{what}: {v}"
                    );
                    assert!(
                        err.lines()
                            .any(|l| l.starts_with("stockade: memory limit reached")),
                        "{what}"
                    );
                }
                _ => {
                    // cgroup v2: memory.oom.group kills the whole run, sh
                    // too (its end, then, is the limit's).
                    assert_eq!(m["hit"], true, "{what}: {v}");
                    if killed["payload"] == true {
                        assert_eq!(v["status"], "memory_limit", "{what}: {v}");
                    } else {
                        assert_eq!(v["status"], "exited", "{what}: {v}");
                    }
                }
            }
        }
    }
    if !v1_seen {
        common::skip(test, "no run had the cgroup v1 rung (root on a v1 host)");
    }
}

#[test]
fn a_payload_oom_killed_itself_is_memory_limit_with_its_own_signal() {
    let test = "a_payload_oom_killed_itself_is_memory_limit_with_its_own_signal";
    for who in common::users(test) {
        for mode in MODES {
            let (v, err) = outcome(mode, who, &["--memory", "64m"], &["python3", "-c", BIG]);
            let what = format!("{who:?} {mode:?}: {err}");
            assert_consistent(&v, &what);
            assert_eq!(v["status"], "memory_limit", "{what}: {v}");
            let m = memory(&v);
            if m["enforced_by"] == "rlimit_as" {
                // One allocation larger than RLIMIT_AS left: MemoryError.
                assert_eq!(v["exit_code"], 1, "{what}: {v}");
                assert!(v["signal"].is_null(), "{what}: {v}");
                assert_eq!(m["verdict"], "inferred", "{what}: {v}");
            } else {
                assert_eq!(v["signal"], 9, "{what}: {v}");
                assert_eq!(v["exit_code"], 137, "{what}: {v}");
                assert_eq!(m["verdict"], "counted", "{what}: {v}");
                assert_eq!(m["hit"], true, "{what}: {v}");
                assert_eq!(m["oom_killed"]["payload"], true, "{what}: {v}");
                assert!(v.get("detail").is_none(), "{what}: {v}");
            }
        }
    }
}

/// Python's `bytearray(10**9)` under `--memory 128m` with the rlimit rung:
/// one mmap of 1 GB, refused by RLIMIT_AS, MemoryError, exit 1, while the
/// process never came near the limit.
#[test]
fn one_allocation_larger_than_what_is_left_is_memory_limit_inferred_under_the_rlimit_rung() {
    let test =
        "one_allocation_larger_than_what_is_left_is_memory_limit_inferred_under_the_rlimit_rung";
    let mut seen = false;
    for who in common::users(test) {
        for mode in MODES {
            let (v, err) = outcome(
                mode,
                who,
                &["--memory", "128m"],
                &["python3", "-c", "bytearray(10**9)"],
            );
            let what = format!("{who:?} {mode:?}: {err}");
            assert_consistent(&v, &what);
            let m = memory(&v);
            if m["enforced_by"] != "rlimit_as" {
                continue;
            }
            seen = true;
            assert_eq!(v["status"], "memory_limit", "{what}: {v}");
            assert_eq!(v["exit_code"], 1, "{what}: {v}");
            assert!(v["signal"].is_null(), "{what}: {v}");
            assert_eq!(m["verdict"], "inferred", "{what}: {v}");
            assert!(m.get("hit").is_none(), "{what}: {v}");
            // The same failure of its own, without the allocation: exited.
            let (v, err) = outcome(
                mode,
                who,
                &["--memory", "128m"],
                &["python3", "-c", "raise MemoryError"],
            );
            let what = format!("{who:?} {mode:?}: {err}");
            assert_eq!(v["status"], "exited", "{what}: {v}");
            assert_eq!(v["exit_code"], 1, "{what}: {v}");
            // Without seccomp nothing hears the allocation: it cannot be
            // told (the README says so), and the run keeps its own status.
            let (v, err) = outcome(
                mode,
                who,
                &["--memory", "128m", "--no-seccomp"],
                &["python3", "-c", "bytearray(10**9)"],
            );
            let what = format!("{who:?} {mode:?}: {err}");
            assert_eq!(memory(&v)["enforced_by"], "rlimit_as", "{what}: {v}");
            assert_eq!(v["status"], "exited", "{what}: {v}");
            assert_eq!(v["exit_code"], 1, "{what}: {v}");
        }
    }
    if !seen {
        common::skip(test, "no run had the rlimit rung here");
    }
}

/// The same rule for pids: a payload that met the limit, coped and
/// exited 0 keeps `exited` (its report says the limit was hit where a
/// controller counted it). In the namespaced jail only: without one,
/// uid 65534's RLIMIT_NPROC counts the host's other processes of that uid
/// too (the outcome says so), which no test here controls.
#[test]
fn a_refused_fork_under_a_payload_that_exits_0_keeps_the_payloads_status() {
    let test = "a_refused_fork_under_a_payload_that_exits_0_keeps_the_payloads_status";
    let py = "import os, signal\nkids = []\ntry:\n    while len(kids) < 200:\n        pid = os.fork()\n        if pid == 0:\n            signal.pause()\n            os._exit(0)\n        kids.append(pid)\nexcept OSError:\n    pass\nfor k in kids:\n    os.kill(k, 9)\n    os.waitpid(k, 0)\nprint('forked', len(kids))";
    for who in common::users(test) {
        let (v, err) = outcome(
            Mode::Jail,
            who,
            &["--pids-limit", "24"],
            &["python3", "-c", py],
        );
        let what = format!("{who:?}: {err}");
        assert_consistent(&v, &what);
        assert_eq!(v["status"], "exited", "{what}: {v}");
        assert_eq!(v["exit_code"], 0, "{what}: {v}");
        let p = &v["limits"]["pids"];
        if p["verdict"] == "counted" {
            assert_eq!(p["hit"], true, "{what}: {v}");
        }
    }
}

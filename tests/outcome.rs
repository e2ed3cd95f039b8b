//! The JSON outcome says exactly how each run ended — one test per status —
//! and every real outcome validates against src/outcome.schema.json.
//! On this host the limits are enforced by the rlimit fallback (the cgroup
//! v2 cases run inside the VM: `cargo xtask vm-test`).

mod common;

use common::{stderr, stdout, Who};
use std::path::PathBuf;

/// Run with `--report -` and return the parsed, schema-validated outcome.
fn outcome(who: Who, flags: &[&str], cmd: &[&str]) -> (serde_json::Value, std::process::Output) {
    let mut f = vec!["--report", "-"];
    f.extend_from_slice(flags);
    let o = common::run(who, &f, cmd);
    let text = stdout(&o);
    let line = text.lines().last().unwrap_or("").to_string();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
        panic!(
            "{who:?}: no JSON outcome ({e}):\n{text}\n--- stderr\n{}",
            stderr(&o)
        )
    });
    common::validate_outcome(&line);
    assert_eq!(
        v["exit_code"].as_i64(),
        o.status.code().map(i64::from),
        "{who:?}: exit code differs from outcome: {v}"
    );
    (v, o)
}

#[test]
fn exited_reports_code_usage_and_layers() {
    for who in common::users("exited_reports_code_usage_and_layers") {
        let (v, _) = outcome(
            who,
            &["--capture"],
            &["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
        );
        assert_eq!(v["status"], "exited", "{v}");
        assert_eq!(v["exit_code"], 3);
        assert_eq!(v["stdout"]["data"], "out\n");
        assert_eq!(v["stderr"]["data"], "err\n");
        assert_eq!(v["usage"]["stdout_bytes"], 4);
        for l in [
            "user_namespace",
            "mount_namespace",
            "pid_namespace",
            "net_namespace",
            "rootfs",
            "capabilities",
            "no_new_privs",
            "rlimits",
            "landlock",
            "seccomp",
        ] {
            assert_eq!(v["layers"][l]["state"], "applied", "{who:?} {l}: {v}");
        }
        assert_eq!(v["layers"]["capabilities"]["detail"]["bounding"], 0, "{v}");
    }
}

#[test]
fn non_utf8_output_is_captured_as_base64() {
    for who in common::users("non_utf8_output_is_captured_as_base64") {
        let (v, _) = outcome(
            who,
            &["--capture"],
            &["/bin/sh", "-c", "printf '\\377\\000ok'"],
        );
        assert_eq!(v["stdout"]["encoding"], "base64", "{v}");
        assert_eq!(v["stdout"]["data"], "/wBvaw==", "{v}");
    }
}

#[test]
fn signaled_is_128_plus_n() {
    for who in common::users("signaled_is_128_plus_n") {
        let (v, _) = outcome(who, &[], &["/bin/sh", "-c", "kill -SEGV $$"]);
        assert_eq!(v["status"], "signaled", "{v}");
        assert_eq!(v["signal"], 11);
        assert_eq!(v["exit_code"], 139);
    }
}

#[test]
fn sleep_past_timeout_is_timeout() {
    for who in common::users("sleep_past_timeout_is_timeout") {
        let (v, _) = outcome(
            who,
            &["--timeout", "1s", "--grace", "1s"],
            &["sleep", "100"],
        );
        assert_eq!(v["status"], "timeout", "{v}");
        assert_eq!(v["limits"]["timeout"]["enforced_by"], "supervisor");
        // The deadline ended the run: it did not run for 100 s.
        assert!(v["usage"]["wall_time_ms"].as_u64().unwrap() < 50_000, "{v}");
    }
}

#[test]
fn term_ignoring_payload_is_killed_after_grace_and_is_timeout() {
    for who in common::users("term_ignoring_payload_is_killed_after_grace_and_is_timeout") {
        let (v, _) = outcome(
            who,
            &["--timeout", "1s", "--grace", "1s"],
            &["/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"],
        );
        assert_eq!(v["status"], "timeout", "{v}");
        assert_eq!(v["signal"], 9, "{v}");
        assert_eq!(v["exit_code"], 137);
    }
}

#[test]
fn yes_past_max_output_is_output_limit() {
    for who in common::users("yes_past_max_output_is_output_limit") {
        let (v, _) = outcome(who, &["--max-output", "1m", "--capture"], &["yes"]);
        assert_eq!(v["status"], "output_limit", "{v:.300}");
        let seen = v["usage"]["stdout_bytes"].as_u64().unwrap();
        assert!(seen > 1 << 20, "bytes seen {seen}");
        let kept = v["stdout"]["data"].as_str().unwrap().len();
        assert_eq!(kept, 1 << 20, "capture is exactly the cap");
        assert_eq!(v["stdout"]["truncated"], true);
    }
}

#[test]
fn stderr_is_never_dropped_and_counts_toward_the_cap() {
    for who in common::users("stderr_is_never_dropped_and_counts_toward_the_cap") {
        let o = common::run(
            who,
            &["--max-output", "100k"],
            &["/bin/sh", "-c", "echo to-stderr >&2; echo to-stdout"],
        );
        common::expect_code(&o, 0, "small output under the cap");
        assert!(stderr(&o).contains("to-stderr"));
        assert!(stdout(&o).contains("to-stdout"));
    }
}

#[test]
fn memory_hog_is_memory_limit_under_rlimit_fallback() {
    for who in common::users("memory_hog_is_memory_limit_under_rlimit_fallback") {
        let (v, _) = outcome(
            who,
            &["--memory", "128m", "--timeout", "60s"],
            &[
                "python3",
                "-c",
                "a = []\nwhile True:\n    a.append(bytearray(1 << 20))",
            ],
        );
        assert_eq!(v["status"], "memory_limit", "{v}");
        let m = &v["limits"]["memory"];
        assert_eq!(m["limit"], 128u64 << 20);
        if m["enforced_by"] == "rlimit_as" {
            assert!(
                m["why"].as_str().unwrap_or("").len() > 10,
                "fallback must say why: {m}"
            );
        }
    }
}

#[test]
fn busy_loop_past_cpu_time_is_cpu_limit() {
    for who in common::users("busy_loop_past_cpu_time_is_cpu_limit") {
        let (v, _) = outcome(
            who,
            &["--cpu-time", "1s", "--timeout", "60s"],
            &["python3", "-c", "while True: pass"],
        );
        assert_eq!(v["status"], "cpu_limit", "{v}");
        assert_eq!(v["limits"]["cpu_time"]["enforced_by"], "rlimit_cpu");
    }
}

#[test]
fn fork_bomb_stops_at_pids_limit() {
    for who in common::users("fork_bomb_stops_at_pids_limit") {
        let (v, _) = outcome(
            who,
            &["--pids-limit", "24", "--timeout", "3s", "--grace", "500ms"],
            &["python3", "-c", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"],
        );
        assert_eq!(v["status"], "pids_limit", "{v}");
        assert!(v["usage"]["peak_pids"].as_u64().unwrap() <= 24, "{v}");
        // The host keeps working.
        let o = common::sh(who, "echo alive");
        assert!(stdout(&o).contains("alive"));
    }
}

#[test]
fn missing_bind_source_is_setup_error() {
    for who in common::users("missing_bind_source_is_setup_error") {
        let (v, o) = outcome(who, &["--ro-bind", "/nonexistent/stockade-src"], &["true"]);
        assert_eq!(v["status"], "setup_error", "{v}");
        assert_eq!(v["exit_code"], 125);
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .starts_with("bind: /nonexistent/stockade-src: "),
            "{v}"
        );
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
}

#[test]
fn denied_syscall_in_kill_mode_is_seccomp_violation() {
    for who in common::users("denied_syscall_in_kill_mode_is_seccomp_violation") {
        // ptrace(PTRACE_TRACEME) through ctypes: never allowed.
        let (v, o) = outcome(
            who,
            &["--seccomp-action", "kill"],
            &[
                "python3",
                "-c",
                "import ctypes\nctypes.CDLL(None).syscall(101, 0, 0, 0, 0)\nprint('survived')",
            ],
        );
        assert_eq!(v["status"], "seccomp_violation", "{v}");
        assert_eq!(v["signal"], 31, "{v}");
        assert_eq!(v["seccomp_violation"]["syscall_name"], "ptrace", "{v}");
        assert_eq!(v["seccomp_violation"]["syscall_nr"], 101, "{v}");
        // Said in the outcome, and by the CLI once on its own stderr.
        let said = "seccomp: ptrace is not allowed: jail killed";
        assert_eq!(v["detail"], said, "{v}");
        let err = stderr(&o);
        let lines = err.lines().filter(|l| l.contains(said)).collect::<Vec<_>>();
        assert_eq!(lines, [format!("stockade: {said}")], "{err}");
    }
}

#[test]
fn not_found_and_not_executable_are_127_and_126() {
    for who in common::users("not_found_and_not_executable_are_127_and_126") {
        let (v, _) = outcome(who, &[], &["/no/such/cmd"]);
        assert_eq!(
            (v["status"].as_str(), v["exit_code"].as_i64()),
            (Some("setup_error"), Some(127)),
            "{v}"
        );
        let (v, _) = outcome(who, &[], &["/etc/passwd"]);
        assert_eq!(
            (v["status"].as_str(), v["exit_code"].as_i64()),
            (Some("setup_error"), Some(126)),
            "{v}"
        );
    }
}

#[test]
fn egress_refusals_are_denials_in_the_outcome() {
    for who in common::users("egress_refusals_are_denials_in_the_outcome") {
        let (v, o) = outcome(
            who,
            &["--allow-host", "pypi.org"],
            &[
                "/bin/sh",
                "-c",
                "curl -sS -o /dev/null https://deb.debian.org/",
            ],
        );
        assert_eq!(v["exit_code"], 56, "{who:?}: {v}\n{}", stderr(&o));
        assert_eq!(
            v["denials"],
            serde_json::json!([{
                "kind": "network",
                "host": "deb.debian.org",
                "port": 443,
                "reason": "deb.debian.org is not on the allowlist",
                "count": 1
            }]),
            "{who:?}: {v}"
        );
    }
}

/// `--learn`: the outcome's `learned` record validates; its paths are
/// absolute with a known access, and a file read and one created show as
/// such.
#[test]
fn a_learning_run_reports_what_it_learned() {
    for who in common::users("a_learning_run_reports_what_it_learned") {
        let dir = PathBuf::from(format!(
            "/var/tmp/stockade-test-learn-outcome-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let file = dir.join("learned.toml");
        let script = format!("cat /etc/hostname; : > {}/made", dir.display());
        let (v, _) = outcome(
            who,
            &["--learn", file.to_str().unwrap()],
            &["/bin/sh", "-c", &script],
        );
        let _ = std::fs::remove_dir_all(&dir);
        let paths = v["learned"]["paths"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"));
        let access = |p: &str| {
            paths
                .iter()
                .find(|x| x["path"] == p)
                .and_then(|x| x["access"].as_str())
                .map(str::to_string)
        };
        assert_eq!(access("/etc/hostname").as_deref(), Some("read"), "{v}");
        let made = format!("{}/made", dir.display());
        assert_eq!(access(&made).as_deref(), Some("entry"), "{v}");
        assert_eq!(access("/usr/bin/cat").as_deref(), Some("read"), "{v}");
        assert_eq!(v["learned"]["hosts"], serde_json::json!([]), "{v}");
        assert!(paths
            .iter()
            .all(|x| x["path"].as_str().unwrap().starts_with('/')));
    }
}
